/*
 * rsv_checkout — see rsv_checkout.h.
 *
 * confirm: validate → extend the hold (Redis) → onsale_saga_start (new / resume / busy /
 * done / mismatch; a new checkout is recorded where the extend left it — payment_requested
 * or failed — in one commit) → the saga (rsv_saga_drive, foreground: charge with the
 * checkout id as Idempotency-Key, convert or refund; a resumed one extends the hold
 * itself; one committed step per external effect) → the
 * answer it ends with: 201 confirmed, 402 declined, 409 hold_expired with the refund,
 * 202 pending when the payment outcome is not known yet (the reconciler finishes it).
 * Any answer but 503 for a terminal checkout is stored and replayed for the same key.
 * A failure or a pending end clears the checkout's lease, so the buyer's retry with the
 * same key (or the reconciler) can resume at once instead of waiting out the lease.
 */
#include "rsv_checkout.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_access.h"
#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "rsv_auth.h"
#include "rsv_catalog.h"
#include "rsv_hold.h"
#include "rsv_reconcile.h"
#include "rsv_saga.h"
#include "rsv_ids.h"
#include "rsv_office.h"
#include "rsv_req.h"

#define CHECKOUT_ID_MAX RSV_CHECKOUT_ID_MAX

typedef struct confirm_op {
    rsv_req_t r;
    char hold_id[RSV_HOLD_ID_MAX + 1];
    char event[CM_IDENT_MAX + 1];
    char key[CM_IDEM_KEY_MAX + 1];
    char hash[65];
    char checkout_id[CHECKOUT_ID_MAX];
    cm_jwt_claims_t claims;
    int64_t amount;
    char currency[4];
    char source[RSV_CHECKOUT_SOURCE_MAX];
    char email[RSV_OFFICE_EMAIL_MAX + 1]; /* "" when the body names none */
    rsv_event_t *ev;
    /* the hold's extend, run before the checkout is recorded */
    bool extended; /* view holds the extend script's answer */
    rsv_hold_view_t view;
    rsv_saga_extend_t verdict;
} confirm_op_t;

static void confirm_done(confirm_op_t *op)
{
    rsv_event_unref(op->ev);
    rsv_hold_view_clear(&op->view);
    free(op);
}

static void on_lease_cleared(const char *err, const rsv_pg_result_t *res, void *arg)
{
    (void)err, (void)res, (void)arg;
}

/* Lets the checkout's lease lapse now, so a retry (or the reconciler) may resume it. */
static void clear_lease(confirm_op_t *op)
{
    if (op->checkout_id[0] == '\0')
        return;
    const char *params[1] = {op->checkout_id};
    if (rsv_pg_query(op->r.srv->pg,
                     "UPDATE checkouts SET lease_until = NULL WHERE checkout_id = $1 AND state "
                     "NOT IN ('confirmed','failed','released','refunded')",
                     1, params, on_lease_cleared, NULL) != 0) {
        /* shutting down: the lease lapses on its own */
    }
}

/* Answers 503 and frees the checkout's lease so a retry can resume it now. */
static void confirm_unavailable(confirm_op_t *op, const char *what, const char *err)
{
    clear_lease(op);
    rsv_reply_unavailable(&op->r, what, err);
    confirm_done(op);
}

/* Sends a stored or fresh JSON text as the answer. */
static void reply_text_json(confirm_op_t *op, int code, const char *text)
{
    rsv_reply_text(&op->r, code, "application/json", text, strlen(text));
}

/* --- metrics ---------------------------------------------------------------------- */

void rsv_checkout_metrics_register(rsv_checkout_metrics_t *cm, cm_metrics_t *reg)
{
    static const double bounds[] = {1, 5, 15, 30, 60, 120, 300, 600, 900, 1800};
    cm->confirmations = cm_metrics_counter(reg, "onsale_reserve_confirmations_total",
                                           "holds converted into bookings", NULL);
    cm->replays = cm_metrics_counter(reg, "onsale_reserve_confirm_replays_total",
                                     "confirmations answered from a stored result", NULL);
    cm->hold_to_confirm = cm_metrics_histogram(reg, "onsale_reserve_hold_to_confirm_seconds",
                                               "time from taking a hold to its confirmation", NULL,
                                               bounds, sizeof(bounds) / sizeof(bounds[0]));
}

/* --- the saga ---------------------------------------------------------------------- */

static void on_saga_end(const rsv_saga_end_t *end, void *arg)
{
    confirm_op_t *op = arg;
    rsv_checkout_metrics_t *m = &op->r.srv->m.checkout;
    if (end->err) {
        confirm_unavailable(op, "the checkout", end->err);
        return;
    }
    if (!rsv_saga_is_terminal(end->state))
        clear_lease(op); /* pending: the reconciler (or a retry) finishes it */
    if (end->state == RSV_SAGA_CONFIRMED) {
        cm_counter_inc(m->confirmations);
        if (end->hold_age_s >= 0)
            cm_histogram_observe(m->hold_to_confirm, end->hold_age_s);
    }
    if (end->body == NULL || end->code == 0) {
        rsv_reply_unavailable(&op->r, "the checkout", cm_err_protocol);
    } else {
        reply_text_json(op, end->code, end->body);
    }
    confirm_done(op);
}

/* --- beginning --------------------------------------------------------------------- */

/* A new or resumed checkout (fresh: new): the saga drives it from the state Postgres has. */
static void drive_started(confirm_op_t *op, const rsv_pg_result_t *res, bool fresh)
{
    rsv_saga_state_t state = rsv_saga_state_parse(rsv_pg_result_value(res, 0, 2));
    rsv_server_t *srv = op->r.srv;
    if (state == RSV_SAGA_INVALID) {
        cm_log(CM_LOG_ERROR, "checkout %s: unknown state %s", op->checkout_id,
               rsv_pg_result_value(res, 0, 2));
        confirm_unavailable(op, "the checkout", cm_err_protocol);
        return;
    }
    if (fresh)
        rsv_saga_fault(srv, "after", state);
    if (fresh && state == RSV_SAGA_FAILED) {
        /* created → failed, committed with the checkout: the extend's answer. */
        cm_counter_inc(srv->m.saga.transitions);
        if (op->verdict == RSV_SAGA_EXTEND_EXPIRED)
            cm_counter_inc(srv->m.hold.expired);
        reply_text_json(op, atoi(rsv_pg_result_value(res, 0, 3)), rsv_pg_result_value(res, 0, 4));
        confirm_done(op);
        return;
    }
    rsv_saga_row_t row;
    memset(&row, 0, sizeof(row));
    snprintf(row.id, sizeof(row.id), "%s", op->checkout_id);
    row.state = state;
    snprintf(row.event, sizeof(row.event), "%s", op->event);
    snprintf(row.buyer, sizeof(row.buyer), "%s", op->claims.sub);
    snprintf(row.hold_id, sizeof(row.hold_id), "%s", op->hold_id);
    row.amount = op->amount;
    snprintf(row.currency, sizeof(row.currency), "%s", op->currency);
    snprintf(row.source, sizeof(row.source), "%s", op->source);
    snprintf(row.charge_id, sizeof(row.charge_id), "%s", rsv_pg_result_value(res, 0, 5));
    snprintf(row.refund_id, sizeof(row.refund_id), "%s", rsv_pg_result_value(res, 0, 6));
    snprintf(row.refund_reason, sizeof(row.refund_reason), "%s", rsv_pg_result_value(res, 0, 7));
    snprintf(row.request_id, sizeof(row.request_id), "%s", rsv_pg_result_value(res, 0, 8));
    int64_t ext_ms = op->ev->checkout_extension_s * 1000;
    if (fresh && state == RSV_SAGA_PAYMENT_REQUESTED) {
        /* created → hold_extended → payment_requested, committed with the checkout. */
        cm_counter_add(srv->m.saga.transitions, 2);
        rsv_saga_drive_extended(srv, &row, ext_ms, &op->view, on_saga_end, op);
    } else {
        rsv_saga_drive(srv, &row, RSV_SAGA_FOREGROUND, ext_ms, on_saga_end, op);
    }
}

/* A terminal checkout under this key: its stored answer again (201 becomes 200). */
static void replay(confirm_op_t *op, const rsv_pg_result_t *res)
{
    cm_counter_inc(op->r.srv->m.checkout.replays);
    int code = atoi(rsv_pg_result_value(res, 0, 3));
    if (code == 0 || rsv_pg_result_isnull(res, 0, 4)) {
        op->checkout_id[0] = '\0';
        confirm_unavailable(op, "replaying the checkout", cm_err_protocol);
        return;
    }
    cm_http_add_header(op->r.svc.req, "Idempotent-Replayed", "true");
    reply_text_json(op, code == 201 ? 200 : code, rsv_pg_result_value(res, 0, 4));
    confirm_done(op);
}

static void on_begun(const char *err, const rsv_pg_result_t *res, void *arg)
{
    confirm_op_t *op = arg;
    if (err) {
        cm_log(CM_LOG_WARN, "checkout begin: %s %s", err, res ? rsv_pg_result_message(res) : "");
        op->checkout_id[0] = '\0';
        confirm_unavailable(op, "starting the checkout", err);
        return;
    }
    const char *name = rsv_pg_result_value(res, 0, 0);
    snprintf(op->checkout_id, sizeof(op->checkout_id), "%s", rsv_pg_result_value(res, 0, 1));
    rsv_saga_start_t outcome = rsv_saga_start_parse(name);
    switch (outcome) {
    case RSV_START_MISMATCH:
        op->checkout_id[0] = '\0'; /* not ours to touch */
        rsv_reply_error(&op->r, 422, "idempotency_key_reused",
                        "this Idempotency-Key was used for a different request", NULL);
        confirm_done(op);
        return;
    case RSV_START_BUSY:
        op->checkout_id[0] = '\0';
        rsv_reply_error(&op->r, 409, "in_progress",
                        "a request with this Idempotency-Key is still being processed",
                        json_pack("{s:s}", "checkout_id", rsv_pg_result_value(res, 0, 1)));
        confirm_done(op);
        return;
    case RSV_START_DONE:
        replay(op, res);
        return;
    case RSV_START_NEW:
    case RSV_START_RESUME:
        /* drive the saga from the state Postgres has */
        drive_started(op, res, outcome == RSV_START_NEW);
        return;
    case RSV_START_NOUTCOMES:
    case RSV_START_INVALID:
        break;
    }
    cm_log(CM_LOG_ERROR, "checkout begin: onsale_saga_start answered outcome '%s'", name);
    op->checkout_id[0] = '\0';
    confirm_unavailable(op, "starting the checkout", cm_err_protocol);
}

/*
 * Starts the checkout (onsale_saga_start) with what the hold's extend said: a new checkout
 * is recorded in payment_requested (or failed, with its answer) in one commit; without an
 * extend answer (Redis failed) it starts in created and the saga extends the hold itself.
 */
static void begin(confirm_op_t *op, const char *new_id)
{
    char amount[24], lease[24], code_s[16];
    snprintf(amount, sizeof(amount), "%lld", (long long)op->amount);
    snprintf(lease, sizeof(lease), "%lld", (long long)op->r.srv->cfg.checkout_lease_s);
    rsv_saga_state_t to = RSV_SAGA_INVALID;
    const char *reason = NULL;
    char *body = NULL;
    int code = 0;
    if (op->extended) {
        op->verdict = rsv_saga_extend_verdict(new_id, &op->view, op->amount, &code, &body, &reason);
        if (op->verdict == RSV_SAGA_EXTEND_OK)
            to = RSV_SAGA_PAYMENT_REQUESTED;
        else if (op->verdict != RSV_SAGA_EXTEND_ERROR)
            to = RSV_SAGA_FAILED;
        snprintf(code_s, sizeof(code_s), "%d", code);
    }
    const char *params[] = {new_id,
                            op->event,
                            op->claims.sub,
                            op->key,
                            op->hash,
                            op->hold_id,
                            amount,
                            op->currency,
                            lease,
                            op->source,
                            to == RSV_SAGA_INVALID ? NULL : rsv_saga_state_name(to),
                            reason,
                            code ? code_s : NULL,
                            body,
                            cm_access_id(op->r.svc.req),
                            op->claims.rid[0] ? op->claims.rid : NULL,
                            op->email[0] ? op->email : NULL};
    if (to != RSV_SAGA_INVALID)
        rsv_saga_fault(op->r.srv, "before", RSV_SAGA_CREATED);
    int rc = rsv_pg_query(op->r.srv->pg,
                          "SELECT outcome, checkout_id, state, response_code, response_body, "
                          "charge_id, refund_id, refund_reason, request_id "
                          "FROM onsale_saga_start($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, "
                          "$12, $13::int, $14, $15, $16, $17)",
                          17, params, on_begun, op);
    free(body);
    if (rc != 0)
        confirm_unavailable(op, "starting the checkout", cm_err_shutdown);
}

static void on_pre_extended(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    confirm_op_t *op = arg;
    char new_id[CHECKOUT_ID_MAX];
    rsv_random_id(new_id, sizeof(new_id), "co_");
    if (err || rsv_hold_view_parse(reply, &op->view) != 0) {
        /* The checkout starts in created and the saga tries the extend again (a replay
         * needs no Redis at all). */
        cm_log(CM_LOG_WARN, "hold %s: extending at checkout start: %s", op->hold_id,
               err ? err : cm_err_protocol);
        rsv_hold_view_clear(&op->view);
        op->extended = false;
    } else {
        op->extended = true;
    }
    begin(op, new_id);
}

/*
 * The hold is extended first, before anything is recorded: an extend without a checkout
 * is harmless (never past the event's max_hold_seconds), and the checkout is then
 * recorded where the extend left it in one commit (docs/confirm.md).
 */
static void extend_first(confirm_op_t *op)
{
    if (rsv_hold_op_extend(op->r.srv, op->hold_id, op->claims.sub,
                           op->ev->checkout_extension_s * 1000, on_pre_extended, op) != 0)
        on_pre_extended(cm_err_closed, NULL, op);
}

static void on_confirm_event(rsv_event_t *ev, const char *err, void *arg)
{
    confirm_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "loading the event", err);
        confirm_done(op);
        return;
    }
    if (ev == NULL) {
        rsv_reply_error(&op->r, 404, "unknown_hold", "no such hold of yours", NULL);
        confirm_done(op);
        return;
    }
    rsv_event_ref(ev);
    op->ev = ev;
    rsv_stock_touch(op->r.srv->stock, ev->id);
    if (op->currency[0] == '\0')
        snprintf(op->currency, sizeof(op->currency), "%s", ev->currency);
    else if (strcmp(op->currency, ev->currency) != 0) {
        rsv_reply_error(&op->r, 400, "invalid_request",
                        "payment.currency is not the event's currency", NULL);
        confirm_done(op);
        return;
    }
    extend_first(op);
}

const char *rsv_checkout_payment_parse(const json_t *body, rsv_checkout_payment_t *pay)
{
    json_t *p = json_object_get(body, "payment");
    if (!json_is_object(p))
        return "payment must be an object {amount, currency, source}";
    json_t *amount = json_object_get(p, "amount");
    json_t *cur = json_object_get(p, "currency");
    json_t *src = json_object_get(p, "source");
    if (!json_is_integer(amount) || json_integer_value(amount) < 0)
        return "payment.amount must be an integer >= 0 (minor units)";
    if (!json_is_string(cur) || strlen(json_string_value(cur)) != 3)
        return "payment.currency must be a three-letter currency code";
    if (src && !json_is_string(src))
        return "payment.source must be a string";
    if (src && strlen(json_string_value(src)) >= sizeof(pay->source))
        return "payment.source is too long";
    pay->amount = (int64_t)json_integer_value(amount);
    snprintf(pay->currency, sizeof(pay->currency), "%s", json_string_value(cur));
    snprintf(pay->source, sizeof(pay->source), "%s", src ? json_string_value(src) : "");
    return NULL;
}

/* Validates the confirm body; fills amount/currency. NULL when fine, else the message. */
static const char *check_confirm_body(confirm_op_t *op, const json_t *body)
{
    rsv_checkout_payment_t pay;
    const char *bad = rsv_checkout_payment_parse(body, &pay);
    if (bad != NULL)
        return bad;
    op->amount = pay.amount;
    memcpy(op->currency, pay.currency, sizeof(op->currency));
    memcpy(op->source, pay.source, sizeof(op->source));
    json_t *email = json_object_get(body, "email");
    if (email && (!json_is_string(email) || !rsv_office_email_valid(json_string_value(email))))
        return "email must be an e-mail address of at most 254 characters";
    snprintf(op->email, sizeof(op->email), "%s", email ? json_string_value(email) : "");
    return NULL;
}

static void on_confirm_auth(rsv_auth_result_t a, const char *why, void *arg);

void rsv_checkout_confirm(rsv_server_t *srv, cm_req_t *req, const char *hold_id)
{
    confirm_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, RSV_EP_CONFIRM);
    if (rsv_hold_id_event(hold_id, op->event) != 0) {
        rsv_reply_error(&op->r, 404, "unknown_hold", "no such hold of yours", NULL);
        confirm_done(op);
        return;
    }
    snprintf(op->hold_id, sizeof(op->hold_id), "%s", hold_id);
    rsv_auth_check(srv->auth, req, op->event, true, &op->claims, on_confirm_auth, op);
}

static void on_confirm_auth(rsv_auth_result_t a, const char *why, void *arg)
{
    confirm_op_t *op = arg;
    rsv_server_t *srv = op->r.srv;
    cm_req_t *req = op->r.svc.req;
    if (a != RSV_AUTH_OK) {
        rsv_reply_auth(&op->r, a, why);
        confirm_done(op);
        return;
    }
    const char *key = cm_http_header(req, "Idempotency-Key");
    if (key == NULL || !cm_parse_idem_key(key)) {
        rsv_reply_error(&op->r, 400, "invalid_request",
                        "an Idempotency-Key header of 1-255 visible ASCII characters is required",
                        NULL);
        confirm_done(op);
        return;
    }
    snprintf(op->key, sizeof(op->key), "%s", key);
    json_t *body = cm_http_read_json(req, (size_t)srv->cfg.server.max_body_bytes, NULL, NULL);
    if (body == NULL) {
        rsv_req_replied(&op->r);
        confirm_done(op);
        return;
    }
    const char *bad = check_confirm_body(op, body);
    if (bad) {
        json_decref(body);
        rsv_reply_error(&op->r, 400, "invalid_request", bad, NULL);
        confirm_done(op);
        return;
    }
    /* The request's identity: the hold and the body in canonical form. */
    char *canon = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    char *ident = cm_xasprintf("%s\n%s", op->hold_id, canon);
    cm_tls_sha256_hex(ident, strlen(ident), op->hash);
    (void)srv;
    free(ident);
    free(canon);
    json_decref(body);
    rsv_catalog_get(srv->catalog, op->event, on_confirm_event, op);
}

/* --- reading checkouts ------------------------------------------------------------ */

typedef struct read_op {
    rsv_req_t r;
    cm_jwt_claims_t claims;
    char checkout_id[CHECKOUT_ID_MAX];
} read_op_t;

static const char CHECKOUT_SQL[] =
    "SELECT json_build_object('checkout_id', c.checkout_id, 'state', c.state,"
    " 'event', c.event_id, 'hold_id', c.hold_id, 'booking_id', c.booking_id,"
    " 'amount', c.amount, 'currency', c.currency, 'buyer', c.buyer,"
    " 'response_code', c.response_code, 'charge_id', c.charge_id,"
    " 'refund', CASE WHEN c.refund_id IS NULL THEN NULL ELSE json_build_object("
    "   'status', 'refunded', 'id', c.refund_id, 'reason', c.refund_reason) END,"
    " 'next_action', CASE WHEN c.state = 'requires_action'"
    "   THEN (c.response_body::json)->'next_action' END,"
    " 'created_at', to_char(c.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),"
    " 'updated_at', to_char(c.updated_at AT TIME ZONE 'UTC', "
    "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))::text"
    " FROM checkouts c WHERE c.checkout_id = $1";

static void on_checkout_row(const char *err, const rsv_pg_result_t *res, void *arg)
{
    read_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "reading the checkout", err);
        free(op);
        return;
    }
    json_t *o =
        rsv_pg_result_rows(res) == 1 ? json_loads(rsv_pg_result_value(res, 0, 0), 0, NULL) : NULL;
    const char *buyer = json_string_value(json_object_get(o, "buyer"));
    const char *event = json_string_value(json_object_get(o, "event"));
    if (o == NULL || buyer == NULL || strcmp(buyer, op->claims.sub) != 0 || event == NULL ||
        strcmp(event, op->claims.evt) != 0) {
        json_decref(o);
        rsv_reply_error(&op->r, 404, "unknown_checkout", "no such checkout of yours", NULL);
    } else {
        json_object_del(o, "buyer");
        if (json_is_null(json_object_get(o, "next_action")))
            json_object_del(o, "next_action"); /* only while the buyer must authenticate */
        /* Internal states stay internal: the buyer sees pending until it is settled. */
        const char *st = json_string_value(json_object_get(o, "state"));
        json_object_set_new(o, "state",
                            json_string(rsv_saga_client_state(rsv_saga_state_parse(st))));
        rsv_reply_json(&op->r, 200, o);
    }
    free(op);
}

static void on_read_auth(rsv_auth_result_t a, const char *why, void *arg)
{
    read_op_t *op = arg;
    if (a != RSV_AUTH_OK) {
        rsv_reply_auth(&op->r, a, why);
        free(op);
        return;
    }
    const char *params[1] = {op->checkout_id};
    if (rsv_pg_query(op->r.srv->pg_read, CHECKOUT_SQL, 1, params, on_checkout_row, op) != 0) {
        rsv_reply_unavailable(&op->r, "reading the checkout", cm_err_shutdown);
        free(op);
    }
}

void rsv_checkout_get(rsv_server_t *srv, cm_req_t *req, const char *checkout_id)
{
    read_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, RSV_EP_CHECKOUT_GET);
    if (strlen(checkout_id) >= sizeof(op->checkout_id)) {
        rsv_reply_error(&op->r, 404, "unknown_checkout", "no such checkout of yours", NULL);
        free(op);
        return;
    }
    snprintf(op->checkout_id, sizeof(op->checkout_id), "%s", checkout_id);
    rsv_auth_check(srv->auth, req, NULL, true, &op->claims, on_read_auth, op);
}

static void on_admin_list(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_req_t *r = arg;
    if (err) {
        rsv_reply_unavailable(r, "listing checkouts", err);
    } else {
        const char *text = rsv_pg_result_value(res, 0, 0);
        rsv_reply_text(r, 200, "application/json", text, strlen(text));
    }
    free(r);
}

const char *rsv_checkout_list_parse(rsv_checkout_list_t *l, const char *older, const char *limit,
                                    const char *rid)
{
    l->older_s = 0;
    l->limit = 100;
    l->request_id[0] = '\0';
    if (l->state && !cm_parse_ident(l->state))
        return "state must be a checkout state name";
    if (l->event && !cm_parse_ident(l->event))
        return "event must be an identifier";
    if (older && cm_parse_i64(older, 0, 100000000, &l->older_s) != 0)
        return "older_than_seconds must be an integer >= 0";
    if (limit && cm_parse_i64(limit, 1, 1000, &l->limit) != 0)
        return "limit must be an integer from 1 to 1000";
    if (rid && !cm_access_pick_id(rid, NULL, l->request_id))
        return "request_id must be 1-64 characters of [A-Za-z0-9._-]";
    return NULL;
}

void rsv_checkout_admin_list(rsv_server_t *srv, cm_req_t *req)
{
    rsv_req_t *r = cm_xcalloc(1, sizeof(*r));
    rsv_req_start(r, srv, req, RSV_EP_ADMIN_CHECKOUTS);
    struct evkeyvalq q;
    if (cm_http_query(req, &q) != 0) {
        rsv_reply_error(r, 400, "invalid_request", "malformed query string", NULL);
        free(r);
        return;
    }
    const char *state = evhttp_find_header(&q, "state");
    const char *older = evhttp_find_header(&q, "older_than_seconds");
    const char *event = evhttp_find_header(&q, "event");
    const char *limit = evhttp_find_header(&q, "limit");
    const char *rid = evhttp_find_header(&q, "request_id");
    rsv_checkout_list_t list = {.state = state, .event = event};
    const char *bad = rsv_checkout_list_parse(&list, older, limit, rid);
    if (bad) {
        evhttp_clear_headers(&q);
        rsv_reply_error(r, 400, "invalid_request", bad, NULL);
        free(r);
        return;
    }
    char older_s[24], limit_s[24];
    snprintf(older_s, sizeof(older_s), "%lld", (long long)list.older_s);
    snprintf(limit_s, sizeof(limit_s), "%lld", (long long)list.limit);
    const char *params[] = {state, older_s, event, limit_s, rid ? list.request_id : NULL};
    /* request_id: the checkout of that confirm, or of that admission, in any state */
    static const char sql[] =
        "WITH m AS (SELECT c.* FROM checkouts c"
        "  WHERE ($1::text IS NULL OR c.state = $1)"
        "    AND ($1::text IS NOT NULL OR $5::text IS NOT NULL OR c.state NOT IN "
        "('confirmed','failed','released','refunded'))"
        "    AND c.updated_at <= now() - make_interval(secs => $2::int)"
        "    AND ($3::text IS NULL OR c.event_id = $3)"
        "    AND ($5::text IS NULL OR c.request_id = $5 OR c.admission_request_id = $5))"
        " SELECT json_build_object('count', (SELECT count(*) FROM m),"
        "  'checkouts', COALESCE((SELECT json_agg(json_build_object('checkout_id', x.checkout_id,"
        "    'state', x.state, 'event', x.event_id, 'hold_id', x.hold_id, 'buyer', x.buyer,"
        "    'amount', x.amount, 'currency', x.currency, 'booking_id', x.booking_id,"
        "    'request_id', x.request_id, 'admission_request_id', x.admission_request_id,"
        "    'age_seconds', round(extract(epoch FROM now() - x.created_at)::numeric, 3),"
        "    'in_state_seconds', round(extract(epoch FROM now() - x.updated_at)::numeric, 3)))"
        "   FROM (SELECT * FROM m ORDER BY m.updated_at LIMIT $4::int) x), '[]'))::text";
    int rc = rsv_pg_query(srv->pg_read, sql, 5, params, on_admin_list, r);
    evhttp_clear_headers(&q);
    if (rc != 0) {
        rsv_reply_unavailable(r, "listing checkouts", cm_err_shutdown);
        free(r);
    }
}
