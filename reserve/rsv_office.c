/*
 * rsv_office — see rsv_office.h.
 *
 * A refund is driven through three committed states (requested → released → refunded),
 * each step one call: the Redis script office_release.lua (idempotent per refund: its
 * marker key), then onsale_office_step, then the provider's refund (idempotent per
 * refund: the refund id is its Idempotency-Key), then onsale_office_step again. Whoever
 * holds the refund's lease drives it: the cancelling request first, then the driver timer
 * after the lease lapses; a provider that cannot answer shortens the lease to a retry
 * delay. The fault points office:after_record, office:after_redis (the units given back,
 * not yet recorded), office:after_release and office:after_refund (config key fault)
 * SIGKILL the process there, for the crash tests.
 */
#include "rsv_office.h"

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_drain.h"
#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_server.h"
#include "rsv_avail.h"
#include "rsv_lua.h"
#include "rsv_rediskeys.h"
#include "rsv_req.h"

#define REF_MAX       128
#define UNIT_MAX      80
#define FIND_LIMIT    100
#define MARKER_KEEP   "604800000" /* ms: a week, past any lease or retry */
#define RETRY_SECONDS "5"

/* --- pure helpers -------------------------------------------------------------------- */

static bool label_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

bool rsv_office_email_valid(const char *s)
{
    if (s == NULL)
        return false;
    size_t n = strlen(s);
    const char *at = strchr(s, '@');
    if (n == 0 || n > RSV_OFFICE_EMAIL_MAX || at == NULL || strchr(at + 1, '@') != NULL)
        return false;
    size_t local = (size_t)(at - s);
    if (local == 0 || local > 64)
        return false;
    for (const char *p = s; p < at; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= ' ' || c >= 0x7f || strchr("\"(),:;<>[\\]", c) != NULL)
            return false;
    }
    const char *d = at + 1;
    size_t label = 0, labels = 0;
    for (const char *p = d;; p++) {
        if (*p == '.' || *p == '\0') {
            if (label == 0 || p[-1] == '-' || label > 63)
                return false;
            labels++;
            label = 0;
            if (*p == '\0')
                break;
        } else if (!label_char(*p) || (label == 0 && *p == '-')) {
            return false;
        } else {
            label++;
        }
    }
    return labels >= 2;
}

bool rsv_office_unit_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > UNIT_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '#'))
            return false;
    }
    return true;
}

void rsv_office_buf_put(rsv_office_buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->data = cm_xrealloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void rsv_office_buf_clear(rsv_office_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void rsv_office_csv_field(rsv_office_buf_t *b, const char *s)
{
    if (s == NULL || *s == '\0') {
        rsv_office_buf_put(b, "", 0);
        return;
    }
    bool formula = strchr("=+-@\t\r", s[0]) != NULL;
    bool quote = formula || strpbrk(s, ",\"\r\n") != NULL;
    if (!quote) {
        rsv_office_buf_put(b, s, strlen(s));
        return;
    }
    rsv_office_buf_put(b, "\"", 1);
    if (formula)
        rsv_office_buf_put(b, "'", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            rsv_office_buf_put(b, "\"\"", 2);
        else
            rsv_office_buf_put(b, p, 1);
    }
    rsv_office_buf_put(b, "\"", 1);
}

/* --- fault points -------------------------------------------------------------------- */

static void fault(rsv_server_t *srv, const char *point)
{
    const char *f = srv->cfg.fault;
    if (f == NULL || *f == '\0')
        return;
    char want[64];
    int n = snprintf(want, sizeof(want), "office:%s", point);
    for (const char *p = f; (p = strstr(p, want)) != NULL; p += n) {
        if ((p == f || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) {
            cm_log(CM_LOG_WARN, "fault point %s: SIGKILL", want);
            kill(getpid(), SIGKILL);
        }
    }
}

/* --- driving one refund -------------------------------------------------------------- */

typedef struct drive drive_t;
/* err NULL: the refund is 'refunded'; else it stopped short (its lease brings it back). */
typedef void (*drive_cb)(drive_t *d, const char *err, void *arg);

struct drive {
    rsv_server_t *srv;
    char refund_id[REF_MAX];
    char state[16];
    char event[CM_IDENT_MAX + 1];
    char checkout_id[REF_MAX];
    char booking_id[REF_MAX];
    char charge_id[RSV_PAY_ID_MAX];
    char buyer[256];
    char hold_id[REF_MAX];
    char pool[CM_IDENT_MAX + 1];
    char *free_units; /* comma-joined */
    int n_units;
    int64_t amount;
    bool full_charge;
    drive_cb cb;
    void *arg;
};

static void drive_end(drive_t *d, const char *err)
{
    if (err)
        cm_log(CM_LOG_WARN, "box office: refund %s stopped in %s: %s (retried)", d->refund_id,
               d->state, err);
    d->cb(d, err, d->arg);
    free(d->free_units);
    free(d);
}

static void drive_pay(drive_t *d);

static void step(drive_t *d, const char *from, const char *to, const char *provider_id,
                 const char *reason, rsv_pg_cb cb)
{
    const char *params[] = {d->refund_id, from, to, provider_id, reason, RETRY_SECONDS};
    if (rsv_pg_query(d->srv->pg, "SELECT onsale_office_step($1, $2, $3, $4, $5, $6::int)", 6,
                     params, cb, d) != 0)
        cb(cm_err_shutdown, NULL, d);
}

static void on_refunded_step(const char *err, const rsv_pg_result_t *res, void *arg)
{
    drive_t *d = arg;
    (void)res;
    if (err == NULL)
        snprintf(d->state, sizeof(d->state), "refunded");
    drive_end(d, err);
}

static void on_deferred(const char *err, const rsv_pg_result_t *res, void *arg)
{
    (void)err, (void)res;
    drive_end(arg, "the provider did not confirm the refund");
}

static void on_paid(const rsv_pay_result_t *res, void *arg)
{
    drive_t *d = arg;
    if (res->outcome != RSV_PAY_REFUNDED) {
        cm_log(CM_LOG_WARN, "box office: refund %s of charge %s: provider answered %d %s",
               d->refund_id, d->charge_id, res->status, res->err ? res->err : "");
        step(d, "released", NULL, NULL, NULL, on_deferred);
        return;
    }
    fault(d->srv, "after_refund");
    char reason[160];
    snprintf(reason, sizeof(reason), "refunded by the provider (%s)", res->id);
    step(d, "released", "refunded", res->id, reason, on_refunded_step);
}

static void drive_pay(drive_t *d)
{
    if (d->amount == 0 || d->charge_id[0] == '\0') {
        step(d, "released", "refunded", NULL, "nothing was charged: nothing to pay back",
             on_refunded_step);
        return;
    }
    if (rsv_pay_refund(d->srv->pay, d->refund_id, d->charge_id, d->full_charge ? 0 : d->amount,
                       on_paid, d) != 0)
        drive_end(d, cm_err_shutdown);
}

/* On a peer's thread: that worker forgets the event's availability and sold marks. */
static void peer_forget(void *peer, const char *event, cm_bcast_t *b)
{
    rsv_avail_invalidate(((rsv_server_t *)peer)->avail, event);
    cm_bcast_ack(b);
}

static void on_forgotten(void *arg)
{
    drive_t *d = arg;
    fault(d->srv, "after_release");
    drive_pay(d);
}

static void on_released_step(const char *err, const rsv_pg_result_t *res, void *arg)
{
    drive_t *d = arg;
    (void)res;
    if (err) {
        drive_end(d, err);
        return;
    }
    snprintf(d->state, sizeof(d->state), "released");
    /* Every worker forgets what it remembered sold of the event: on sale at once. */
    rsv_avail_invalidate(d->srv->avail, d->event);
    cm_svc_sync_event(&d->srv->svc, d->event, peer_forget, on_forgotten, d);
}

static void on_redis_released(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    drive_t *d = arg;
    const cm_redis_reply_t *w = reply ? cm_redis_reply_at(reply, 0) : NULL;
    if (err || cm_redis_reply_type(reply) != CM_REDIS_ARRAY || w == NULL) {
        drive_end(d, err ? err : "giving the units back in Redis: unexpected reply");
        return;
    }
    fault(d->srv, "after_redis");
    step(d, "requested", "released", NULL, "units back on sale (Redis sold marks undone)",
         on_released_step);
}

/* office_release.lua: KEYS seed, marker, buyer zset, then pool counter or seat keys. */
static void drive_release(drive_t *d)
{
    size_t nseats = 0;
    char *list = cm_xstrdup(d->free_units);
    for (char *p = list; *p; p++)
        nseats += *p == ',';
    nseats += list[0] != '\0';
    bool pool = d->pool[0] != '\0';
    size_t nkeys = 3 + (pool ? 1 : nseats);
    const char **argv = cm_xcalloc(nkeys + 7, sizeof(char *));
    char **owned = cm_xcalloc(nkeys, sizeof(char *));
    size_t k = 0;
    owned[k++] = rsv_key(d->event, RSV_K_SEED, NULL);
    owned[k++] = rsv_key(d->event, RSV_K_REFUND, d->refund_id);
    owned[k++] = rsv_key(d->event, RSV_K_BUYER, d->buyer);
    if (pool) {
        owned[k++] = rsv_key(d->event, RSV_K_POOL, d->pool);
    } else {
        char *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
            owned[k++] = rsv_key(d->event, RSV_K_SEAT, t);
    }
    for (size_t i = 0; i < k; i++)
        argv[i] = owned[i];
    char nfree[16], n[16];
    snprintf(nfree, sizeof(nfree), "%zu", nseats);
    snprintf(n, sizeof(n), "%d", d->n_units);
    const char *args[] = {d->checkout_id,   MARKER_KEEP, d->hold_id, d->booking_id,
                          pool ? "1" : "0", nfree,       n};
    for (size_t i = 0; i < 7; i++)
        argv[k + i] = args[i];
    int rc = cm_redis_eval(d->srv->redis, rsv_lua()->office_release, on_redis_released, d, (int)k,
                           (int)k + 7, argv, NULL);
    for (size_t i = 0; i < k; i++)
        free(owned[i]);
    free(owned);
    free(argv);
    free(list);
    if (rc != 0)
        drive_end(d, cm_err_closed);
}

static void on_row(const char *err, const rsv_pg_result_t *res, void *arg)
{
    drive_t *d = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        drive_end(d, err ? err : "no such refund");
        return;
    }
#define COL(field, c) snprintf(d->field, sizeof(d->field), "%s", rsv_pg_result_value(res, 0, c))
    COL(state, 1);
    COL(event, 2);
    COL(checkout_id, 3);
    COL(booking_id, 4);
    COL(charge_id, 5);
    COL(buyer, 8);
    COL(hold_id, 9);
    COL(pool, 10);
#undef COL
    d->amount = strtoll(rsv_pg_result_value(res, 0, 6), NULL, 10);
    d->full_charge = strcmp(rsv_pg_result_value(res, 0, 7), "t") == 0;
    d->free_units = cm_xstrdup(rsv_pg_result_value(res, 0, 11));
    d->n_units = atoi(rsv_pg_result_value(res, 0, 12));
    if (strcmp(d->state, "requested") == 0)
        drive_release(d);
    else if (strcmp(d->state, "released") == 0)
        drive_pay(d);
    else
        drive_end(d, NULL);
}

/* Drives refund_id from wherever it is; the caller holds its lease. cb exactly once. */
static void drive_start(rsv_server_t *srv, const char *refund_id, drive_cb cb, void *arg)
{
    drive_t *d = cm_xcalloc(1, sizeof(*d));
    d->srv = srv;
    d->cb = cb;
    d->arg = arg;
    snprintf(d->refund_id, sizeof(d->refund_id), "%s", refund_id);
    snprintf(d->state, sizeof(d->state), "?");
    const char *params[] = {refund_id};
    if (rsv_pg_query(srv->pg,
                     "SELECT refund_id, state, event_id, checkout_id, booking_id, charge_id, "
                     "amount, full_charge, buyer, hold_id, pool_id, free_units, n_units, attempts "
                     "FROM onsale_office_row($1)",
                     1, params, on_row, d) != 0)
        drive_end(d, cm_err_shutdown);
}

/* --- the driver timer ---------------------------------------------------------------- */

struct rsv_office {
    rsv_server_t *srv;
    struct event *timer;
    int running;
    bool claiming;
    bool closing;
};

static void office_release(rsv_office_t *o)
{
    if (o->closing && o->running == 0 && !o->claiming)
        free(o);
}

static void on_bg_done(drive_t *d, const char *err, void *arg)
{
    rsv_office_t *o = arg;
    o->running--;
    if (err == NULL)
        cm_log(CM_LOG_INFO, "box office: refund %s resumed and refunded", d->refund_id);
    office_release(o);
}

static void on_office_claimed(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_office_t *o = arg;
    o->claiming = false;
    if (err == NULL) {
        for (int i = 0; i < rsv_pg_result_rows(res) && !o->closing; i++) {
            o->running++;
            drive_start(o->srv, rsv_pg_result_value(res, i, 0), on_bg_done, o);
        }
    }
    office_release(o);
}

static void on_office_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    rsv_office_t *o = arg;
    rsv_server_t *srv = o->srv;
    int room = (int)srv->cfg.reconcile_batch - o->running;
    if (o->closing || o->claiming || room <= 0 || cm_drain_draining(srv->svc.drain) ||
        rsv_pg_connected(srv->pg) == 0)
        return;
    char lease[16], limit[16];
    snprintf(lease, sizeof(lease), "%lld", (long long)srv->cfg.checkout_lease_s);
    snprintf(limit, sizeof(limit), "%d", room);
    const char *params[] = {lease, limit};
    o->claiming = true;
    if (rsv_pg_query(srv->pg, "SELECT refund_id FROM onsale_office_claim($1::int, $2::int)", 2,
                     params, on_office_claimed, o) != 0)
        o->claiming = false;
}

rsv_office_t *rsv_office_new(rsv_server_t *srv)
{
    rsv_office_t *o = cm_xcalloc(1, sizeof(*o));
    o->srv = srv;
    o->timer = event_new(srv->base, -1, EV_PERSIST, on_office_tick, o);
    int64_t ms = srv->cfg.reconcile_interval_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_add(o->timer, &tv);
    return o;
}

void rsv_office_free(rsv_office_t *o)
{
    if (o == NULL)
        return;
    event_free(o->timer);
    o->timer = NULL;
    o->closing = true;
    office_release(o);
}

/* --- finding bookings ---------------------------------------------------------------- */

static bool ref_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= REF_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return false;
    return true;
}

static void on_found(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_req_t *r = arg;
    if (err) {
        rsv_reply_unavailable(r, "finding bookings", err);
    } else if (rsv_pg_result_rows(res) != 1 || rsv_pg_result_isnull(res, 0, 0)) {
        rsv_reply_error(r, 404, "unknown_booking", "no such booking", NULL);
    } else {
        const char *text = rsv_pg_result_value(res, 0, 0);
        rsv_reply_text(r, 200, "application/json", text, strlen(text));
    }
    free(r);
}

static const char *const find_keys[] = {"booking_id", "checkout_id", "buyer", "email"};
static const char *const find_where[] = {
    "b.booking_id = $1",
    "b.checkout_id = $1",
    "b.buyer = $1",
    "lower(c.email) = lower($1)",
};

void rsv_office_find(rsv_server_t *srv, cm_req_t *req)
{
    rsv_req_t *r = cm_xcalloc(1, sizeof(*r));
    rsv_req_start(r, srv, req, RSV_EP_OTHER);
    struct evkeyvalq q;
    if (cm_http_query(req, &q) != 0) {
        rsv_reply_error(r, 400, "invalid_request", "malformed query", NULL);
        free(r);
        return;
    }
    int which = -1, given = 0;
    const char *value = NULL;
    for (int i = 0; i < 4; i++) {
        const char *v = evhttp_find_header(&q, find_keys[i]);
        if (v) {
            which = i;
            value = v;
            given++;
        }
    }
    if (given != 1 || !ref_valid(value) || strlen(value) > RSV_OFFICE_EMAIL_MAX) {
        evhttp_clear_headers(&q);
        rsv_reply_error(r, 400, "invalid_request",
                        "give exactly one of booking_id, checkout_id, buyer, email (1-127 "
                        "visible ASCII characters)",
                        NULL);
        free(r);
        return;
    }
    char *sql = cm_xasprintf(
        "SELECT json_build_object('bookings', COALESCE(json_agg(onsale_office_booking_json("
        "x.booking_id) ORDER BY x.created_at, x.booking_id), '[]'))::text FROM (SELECT "
        "b.booking_id, b.created_at FROM bookings b JOIN checkouts c ON c.checkout_id = "
        "b.checkout_id WHERE %s ORDER BY b.created_at, b.booking_id LIMIT %d) x",
        find_where[which], FIND_LIMIT);
    const char *params[] = {value};
    int rc = rsv_pg_query(srv->pg_read, sql, 1, params, on_found, r);
    free(sql);
    evhttp_clear_headers(&q);
    if (rc != 0) {
        rsv_reply_unavailable(r, "finding bookings", cm_err_shutdown);
        free(r);
    }
}

static const char GET_BOOKING_SQL[] =
    "SELECT onsale_office_booking_json(b.booking_id)::text FROM bookings b"
    " WHERE b.booking_id = $1 OR b.checkout_id = $1 LIMIT 1";

void rsv_office_get(rsv_server_t *srv, cm_req_t *req, const char *ref)
{
    rsv_req_t *r = cm_xcalloc(1, sizeof(*r));
    rsv_req_start(r, srv, req, RSV_EP_OTHER);
    if (!ref_valid(ref)) {
        rsv_reply_error(r, 400, "invalid_request", "booking ids are 1-127 visible characters",
                        NULL);
        free(r);
        return;
    }
    const char *params[] = {ref};
    if (rsv_pg_query(srv->pg_read, GET_BOOKING_SQL, 1, params, on_found, r) != 0) {
        rsv_reply_unavailable(r, "reading the booking", cm_err_shutdown);
        free(r);
    }
}

/* --- cancelling ---------------------------------------------------------------------- */

typedef struct cancel_op {
    rsv_req_t r;
    char ref[REF_MAX];
    char unit[UNIT_MAX + 1];
    char refund_id[REF_MAX];
    char booking_id[REF_MAX];
    char who[96];
} cancel_op_t;

/* The answer: {refund_id, refund_state, booking}; 200 once refunded, else 202. */
static void on_view(const char *err, const rsv_pg_result_t *res, void *arg)
{
    cancel_op_t *op = arg;
    json_t *b = NULL;
    if (err == NULL && rsv_pg_result_rows(res) == 1)
        b = json_loads(rsv_pg_result_value(res, 0, 0), 0, NULL);
    if (b == NULL) {
        rsv_reply_unavailable(&op->r, "reading the booking", err ? err : cm_err_protocol);
        free(op);
        return;
    }
    const char *state = "requested";
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(b, "refunds"), i, f)
    {
        const char *id = json_string_value(json_object_get(f, "refund_id"));
        if (id && strcmp(id, op->refund_id) == 0)
            state = json_string_value(json_object_get(f, "state"));
    }
    json_t *o = json_pack("{s:s, s:s, s:o}", "refund_id", op->refund_id, "refund_state",
                          state ? state : "requested", "booking", b);
    rsv_reply_json(&op->r, state && strcmp(state, "refunded") == 0 ? 200 : 202, o);
    free(op);
}

static void reply_view(cancel_op_t *op)
{
    const char *params[] = {op->booking_id};
    if (rsv_pg_query(op->r.srv->pg, "SELECT onsale_office_booking_json($1)::text", 1, params,
                     on_view, op) != 0) {
        rsv_reply_unavailable(&op->r, "reading the booking", cm_err_shutdown);
        free(op);
    }
}

static void on_cancel_driven(drive_t *d, const char *err, void *arg)
{
    (void)d, (void)err;
    reply_view(arg);
}

static void on_cancelled(const char *err, const rsv_pg_result_t *res, void *arg)
{
    cancel_op_t *op = arg;
    if (err) {
        if (err == cm_err_server)
            cm_log(CM_LOG_WARN, "box office: cancelling %s: %s", op->ref,
                   rsv_pg_result_message(res));
        rsv_reply_unavailable(&op->r, "cancelling the booking", err);
        free(op);
        return;
    }
    const char *outcome = rsv_pg_result_value(res, 0, 0);
    snprintf(op->refund_id, sizeof(op->refund_id), "%s", rsv_pg_result_value(res, 0, 1));
    snprintf(op->booking_id, sizeof(op->booking_id), "%s", rsv_pg_result_value(res, 0, 2));
    if (strcmp(outcome, "created") == 0) {
        cm_log(CM_LOG_INFO, "admin change by %s: %s %s%s%s: refund %s", op->who,
               op->unit[0] ? "refund item of booking" : "cancel booking", op->booking_id,
               op->unit[0] ? " item " : "", op->unit, op->refund_id);
        fault(op->r.srv, "after_record");
        drive_start(op->r.srv, op->refund_id, on_cancel_driven, op);
    } else if (strcmp(outcome, "exists") == 0) {
        reply_view(op);
    } else {
        bool unknown = strcmp(outcome, "unknown") == 0;
        bool item = strcmp(outcome, "unknown_item") == 0;
        bool refunded = strcmp(outcome, "already_refunded") == 0;
        rsv_reply_error(&op->r, unknown || item ? 404 : 409,
                        unknown    ? "unknown_booking"
                        : item     ? "unknown_item"
                        : refunded ? "already_refunded"
                                   : "not_confirmed",
                        unknown    ? "no such booking or checkout"
                        : item     ? "no such item in this booking"
                        : refunded ? "already refunded"
                                   : "the checkout has no confirmed booking",
                        NULL);
        free(op);
    }
}

/* s[0..n) is "{}" with optional blanks around and between. */
static bool empty_object(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && strchr(" \t\r\n", s[i]) && s[i])
        i++;
    if (i == n || s[i++] != '{')
        return false;
    while (i < n && strchr(" \t\r\n", s[i]) && s[i])
        i++;
    if (i == n || s[i++] != '}')
        return false;
    while (i < n && strchr(" \t\r\n", s[i]) && s[i])
        i++;
    return i == n;
}

void rsv_office_cancel(rsv_server_t *srv, cm_req_t *req, const char *ref, const char *unit)
{
    cancel_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, RSV_EP_OTHER);
    if (!ref_valid(ref) || (unit && !rsv_office_unit_valid(unit))) {
        rsv_reply_error(&op->r, 400, "invalid_request",
                        "booking ids are 1-127 visible characters, units 1-80 of "
                        "[A-Za-z0-9._#-]",
                        NULL);
        free(op);
        return;
    }
    size_t len = 0;
    const char *body = cm_http_body(req, &len);
    if (len > 0 && !empty_object(body, len)) {
        rsv_reply_error(&op->r, len > 64 ? 413 : 400,
                        len > 64 ? "body_too_large" : "invalid_request", "the body is empty or {}",
                        NULL);
        free(op);
        return;
    }
    snprintf(op->ref, sizeof(op->ref), "%s", ref);
    snprintf(op->unit, sizeof(op->unit), "%s", unit ? unit : "");
    cm_server_admin_who(req, op->who, sizeof(op->who));
    char lease[16];
    snprintf(lease, sizeof(lease), "%lld", (long long)srv->cfg.checkout_lease_s);
    const char *params[] = {op->ref, unit, op->who, lease};
    if (rsv_pg_query(srv->pg,
                     "SELECT outcome, refund_id, booking_id FROM onsale_office_cancel($1, $2, $3, "
                     "$4::int)",
                     4, params, on_cancelled, op) != 0) {
        rsv_reply_unavailable(&op->r, "cancelling the booking", cm_err_shutdown);
        free(op);
    }
}

/* --- exports ------------------------------------------------------------------------- */

/* One row per booking; an event without bookings gives one row of NULLs, an unknown
 * event none. */
static const char BOOKINGS_CSV_SQL[] =
    "SELECT b.booking_id, b.checkout_id,"
    " to_char(b.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), b.buyer,"
    " c.email, CASE WHEN b.booking_id IS NULL THEN NULL"
    "  WHEN NOT EXISTS (SELECT 1 FROM booking_items i WHERE i.booking_id = b.booking_id)"
    "  THEN 'cancelled' WHEN EXISTS (SELECT 1 FROM refunds f WHERE f.booking_id = b.booking_id)"
    "  THEN 'partly_refunded' ELSE 'confirmed' END,"
    " (SELECT string_agg(i.seat_id, ' ' ORDER BY i.seat_id) FROM booking_items i"
    "   WHERE i.booking_id = b.booking_id),"
    " (SELECT string_agg(u, ' ' ORDER BY u) FROM refunds f, unnest(f.units) u"
    "   WHERE f.booking_id = b.booking_id),"
    " b.quantity::text, b.amount::text,"
    " CASE WHEN b.booking_id IS NOT NULL THEN (SELECT COALESCE(sum(f.amount), 0) FROM refunds f"
    "   WHERE f.booking_id = b.booking_id)::text END, b.currency, c.charge_id"
    " FROM events e LEFT JOIN bookings b ON b.event_id = e.event_id"
    " LEFT JOIN checkouts c ON c.checkout_id = b.checkout_id"
    " WHERE e.event_id = $1 ORDER BY b.created_at, b.booking_id";

static const char BOOKINGS_CSV_HEAD[] =
    "booking_id,checkout_id,created_at,buyer,email,state,items,refunded_items,quantity,amount,"
    "refunded_amount,currency,payment_id\r\n";

/* The money of an event, each line a count and a sum (docs/api.md "Box office"). */
static const char RECON_CSV_SQL[] =
    "WITH ch AS (SELECT count(*) n, COALESCE(sum(amount), 0) s FROM checkouts"
    "   WHERE event_id = $1 AND charge_id IS NOT NULL"
    "   AND state IN ('confirmed', 'converted', 'refunding', 'refunded')),"
    " sr AS (SELECT count(*) n, COALESCE(sum(amount), 0) s FROM checkouts"
    "   WHERE event_id = $1 AND charge_id IS NOT NULL AND state = 'refunded'),"
    " bk AS (SELECT count(*) n, COALESCE(sum(amount), 0) s FROM bookings WHERE event_id = $1),"
    " orf AS (SELECT count(*) FILTER (WHERE state = 'refunded' AND amount > 0) n,"
    "   COALESCE(sum(amount) FILTER (WHERE state = 'refunded'), 0) s,"
    "   count(*) FILTER (WHERE state <> 'refunded') pn,"
    "   COALESCE(sum(amount) FILTER (WHERE state <> 'refunded'), 0) ps"
    "   FROM refunds WHERE event_id = $1)"
    " SELECT e.currency, k.kind, k.n::text, k.s::text FROM events e, ch, sr, bk, orf,"
    " LATERAL (VALUES (1, 'charges', ch.n, ch.s), (2, 'saga_refunds', sr.n, sr.s),"
    "  (3, 'bookings', bk.n, bk.s), (4, 'office_refunds', orf.n, orf.s),"
    "  (5, 'office_refunds_pending', orf.pn, orf.ps), (6, 'refunds', sr.n + orf.n, sr.s + orf.s),"
    "  (7, 'kept', ch.n - sr.n, ch.s - sr.s - orf.s - orf.ps)) k(o, kind, n, s)"
    " WHERE e.event_id = $1 ORDER BY k.o";

typedef struct export_op {
    rsv_req_t r;
    char event[CM_IDENT_MAX + 1];
    bool reconcile;
} export_op_t;

static void on_export(const char *err, const rsv_pg_result_t *res, void *arg)
{
    export_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "exporting", err);
        free(op);
        return;
    }
    int rows = rsv_pg_result_rows(res);
    if (rows == 0) {
        rsv_reply_error(&op->r, 404, "unknown_event", "no such event", NULL);
        free(op);
        return;
    }
    rsv_office_buf_t b = {0};
    if (op->reconcile) {
        static const char head[] = "event,currency,kind,count,amount\r\n";
        rsv_office_buf_put(&b, head, sizeof(head) - 1);
    } else {
        rsv_office_buf_put(&b, BOOKINGS_CSV_HEAD, sizeof(BOOKINGS_CSV_HEAD) - 1);
    }
    int cols = rsv_pg_result_cols(res);
    for (int i = 0; i < rows; i++) {
        if (!op->reconcile && rsv_pg_result_isnull(res, i, 0))
            continue; /* the event has no bookings */
        if (op->reconcile) {
            rsv_office_csv_field(&b, op->event);
            rsv_office_buf_put(&b, ",", 1);
        }
        for (int c = 0; c < cols; c++) {
            if (c > 0)
                rsv_office_buf_put(&b, ",", 1);
            rsv_office_csv_field(&b, rsv_pg_result_value(res, i, c));
        }
        rsv_office_buf_put(&b, "\r\n", 2);
    }
    rsv_reply_text(&op->r, 200, "text/csv; charset=utf-8", b.data, b.len);
    rsv_office_buf_clear(&b);
    free(op);
}

void rsv_office_export(rsv_server_t *srv, cm_req_t *req, const char *event, bool reconcile)
{
    export_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, RSV_EP_OTHER);
    snprintf(op->event, sizeof(op->event), "%s", event);
    op->reconcile = reconcile;
    const char *params[] = {event};
    if (rsv_pg_query(srv->pg_read, reconcile ? RECON_CSV_SQL : BOOKINGS_CSV_SQL, 1, params,
                     on_export, op) != 0) {
        rsv_reply_unavailable(&op->r, "exporting", cm_err_shutdown);
        free(op);
    }
}

/* --- the page ------------------------------------------------------------------------ */

extern const char rsv_www_office_html[];
extern const char rsv_www_office_css[];
extern const char rsv_www_office_js[];

#define PAGE_CSP                                                                                   \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "                \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static const struct {
    const char *name;
    const char *ctype;
    const char *body;
} page_files[] = {
    {"index.html", "text/html; charset=utf-8", rsv_www_office_html},
    {"office.css", "text/css; charset=utf-8", rsv_www_office_css},
    {"office.js", "text/javascript; charset=utf-8", rsv_www_office_js},
};

bool rsv_office_page_serve(rsv_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (n < 1 || n > 2 || strcmp(seg[0], "office") != 0)
        return false;
    rsv_req_t r;
    rsv_req_start(&r, srv, req, RSV_EP_OTHER);
    const char *name = rsv_req_page_file(&r, seg, n, "the box office");
    if (name == NULL)
        return true;
    for (size_t i = 0; i < sizeof(page_files) / sizeof(page_files[0]); i++) {
        if (strcmp(name, page_files[i].name) != 0)
            continue;
        cm_http_add_header(req, "Content-Security-Policy", PAGE_CSP);
        cm_http_add_header(req, "X-Content-Type-Options", "nosniff");
        cm_http_add_header(req, "Referrer-Policy", "no-referrer");
        cm_http_add_header(req, "X-Frame-Options", "DENY");
        cm_http_add_header(req, "Cache-Control", "no-store");
        cm_http_send_body(req, 200, page_files[i].ctype, page_files[i].body,
                          strlen(page_files[i].body), true);
        rsv_req_replied(&r);
        return true;
    }
    rsv_reply_error(&r, 404, "not_found", "no such box-office file", NULL);
    return true;
}
