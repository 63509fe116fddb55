/*
 * rsv_admin — see rsv_admin.h.
 *
 * PUT validates and normalises the body in C (rsv_catalog_normalise), then one call of
 * onsale_event_put writes it in one transaction. When the inventory changed, the
 * event's Redis state is dropped (the seed marker and pool counters), so the next
 * operation loads it afresh from Postgres.
 *
 * A PUT that changes an existing event's currency first asks Postgres for open
 * checkouts and Redis for live holds (the event's active-buyer set): an amount agreed in
 * one currency must not be charged in another, so the change waits (409
 * currency_in_use) until none live.
 */
#include "rsv_admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "rsv_avail.h"
#include "rsv_catalog.h"
#include "rsv_rediskeys.h"
#include "rsv_req.h"

static const char *const put_outcome_names[RSV_ADMIN_PUT_NOUTCOMES] = {
    [RSV_ADMIN_PUT_CREATED] = "created",
    [RSV_ADMIN_PUT_REPLACED] = "replaced", /* inventory changed */
    [RSV_ADMIN_PUT_UPDATED] = "updated",   /* settings only */
    [RSV_ADMIN_PUT_HAS_SALES] = "has_sales",
};

rsv_admin_put_outcome_t rsv_admin_put_outcome_parse(const char *name)
{
    int i = 0;
    while (i < RSV_ADMIN_PUT_NOUTCOMES && strcmp(name, put_outcome_names[i]) != 0)
        i++;
    return (rsv_admin_put_outcome_t)i;
}

const char *rsv_admin_put_outcome_name(rsv_admin_put_outcome_t o)
{
    return put_outcome_names[o];
}

typedef struct put_op {
    rsv_req_t r;
    char event[CM_IDENT_MAX + 1];
    json_t *doc;
    int code;
    rsv_admin_put_outcome_t outcome;
    int64_t version;
} put_op_t;

static void put_done(put_op_t *op)
{
    json_decref(op->doc);
    free(op);
}

static void put_reply(put_op_t *op)
{
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string(op->event));
    json_object_set_new(o, "outcome", json_string(rsv_admin_put_outcome_name(op->outcome)));
    json_object_set_new(o, "version", json_integer(op->version));
    const char *keys[] = {"currency", "hold_ttl_seconds", "checkout_extension_seconds",
                          "max_hold_seconds", "max_per_buyer"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        json_object_set(o, keys[i], json_object_get(op->doc, keys[i]));
    json_object_set_new(
        o, "seats", json_integer((json_int_t)json_array_size(json_object_get(op->doc, "seats"))));
    json_t *pools = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(op->doc, "pools"), i, p) json_array_append_new(
        pools, json_pack("{s:O, s:O, s:O}", "id", json_array_get(p, 0), "capacity",
                         json_array_get(p, 1), "price", json_array_get(p, 2)));
    json_object_set_new(o, "pools", pools);
    rsv_reply_json(&op->r, op->code, o);
    put_done(op);
}

static void on_reset(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    put_op_t *op = arg;
    if (err)
        cm_log(CM_LOG_WARN,
               "event %s: dropping its Redis state: %s (it reloads when the seed "
               "marker is gone; retry the PUT if this persists)",
               op->event, err);
    put_reply(op);
}

static void reset_redis(put_op_t *op)
{
    json_t *pools = json_object_get(op->doc, "pools");
    size_t np = json_array_size(pools);
    const char **argv = cm_xcalloc(2 + np * 4, sizeof(char *));
    char **owned = cm_xcalloc(1 + np * 4, sizeof(char *));
    size_t a = 0, o = 0;
    argv[a++] = "DEL";
    argv[a++] = owned[o++] = rsv_key(op->event, RSV_K_SEED, NULL);
    for (size_t i = 0; i < np; i++) {
        const char *id = json_string_value(json_array_get(json_array_get(pools, i), 0));
        argv[a++] = owned[o++] = rsv_key(op->event, RSV_K_POOL, id);
        argv[a++] = owned[o++] = rsv_key(op->event, RSV_K_POOL_NEXT, id);
        argv[a++] = owned[o++] = rsv_key(op->event, RSV_K_POOL_UNITS, id);
        argv[a++] = owned[o++] = rsv_key(op->event, RSV_K_POOL_OLD, id);
    }
    if (cm_redis_command(op->r.srv->redis, on_reset, op, (int)a, argv, NULL) != 0)
        on_reset(cm_err_closed, NULL, op);
    for (size_t i = 0; i < o; i++)
        free(owned[i]);
    free(owned);
    free(argv);
}

/* On a peer's thread: that worker forgets its cached copy of the event. */
static void peer_invalidate(void *peer, const char *event, cm_bcast_t *b)
{
    rsv_server_t *srv = peer;
    rsv_catalog_invalidate(srv->catalog, event);
    rsv_avail_invalidate(srv->avail, event);
    cm_bcast_ack(b);
}

/* Makes every other worker drop its cached copy of the event (catalog, availability),
 * then calls done(arg) on this worker's thread: an operator's change is answered only
 * once no worker serves the old version. */
static void sync_event(rsv_server_t *srv, const char *event, void (*done)(void *arg), void *arg)
{
    cm_svc_sync_event(&srv->svc, event, peer_invalidate, done, arg);
}

static void on_synced(void *arg)
{
    put_op_t *op = arg;
    if (op->outcome == RSV_ADMIN_PUT_UPDATED)
        put_reply(op);
    else
        reset_redis(op);
}

static void on_announced(const char *err, void *arg)
{
    put_op_t *op = arg;
    if (err)
        cm_log(CM_LOG_WARN,
               "event %s: bumping the catalogue generation in Redis: %s (other reserves may "
               "call it unknown for up to catalog_refresh_ms)",
               op->event, err);
    sync_event(op->r.srv, op->event, on_synced, op); /* every worker forgets it */
}

/* The audit line of a change: who, what, the outcome (created, updated, …), the version
 * now and its settings (the version before is the one the previous line logged). */
static void log_change(put_op_t *op)
{
    char who[96];
    cm_server_admin_who(op->r.svc.req, who, sizeof(who));
    json_t *s = json_object();
    const char *keys[] = {"currency", "hold_ttl_seconds", "checkout_extension_seconds",
                          "max_hold_seconds", "max_per_buyer"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        json_object_set(s, keys[i], json_object_get(op->doc, keys[i]));
    json_object_set_new(
        s, "seats", json_integer((json_int_t)json_array_size(json_object_get(op->doc, "seats"))));
    json_object_set(s, "pools", json_object_get(op->doc, "pools"));
    char *text = json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(s);
    cm_log(CM_LOG_INFO, "admin change by %s: PUT event %s: %s, now version %lld: %s", who,
           op->event, rsv_admin_put_outcome_name(op->outcome), (long long)op->version,
           text ? text : "?");
    free(text);
}

static void on_put(const char *err, const rsv_pg_result_t *res, void *arg)
{
    put_op_t *op = arg;
    if (err) {
        cm_log(CM_LOG_WARN, "event %s: saving: %s %s", op->event, err,
               res ? rsv_pg_result_message(res) : "");
        if (err == cm_err_server) {
            rsv_reply_error(&op->r, 400, "invalid_request", rsv_pg_result_message(res), NULL);
        } else {
            rsv_reply_unavailable(&op->r, "saving the event", err);
        }
        put_done(op);
        return;
    }
    const char *name = rsv_pg_result_value(res, 0, 0);
    op->outcome = rsv_admin_put_outcome_parse(name);
    op->version = atoll(rsv_pg_result_value(res, 0, 1));
    rsv_server_t *srv = op->r.srv;
    if (op->outcome == RSV_ADMIN_PUT_NOUTCOMES) {
        cm_log(CM_LOG_ERROR, "event %s: onsale_event_put answered outcome '%s'", op->event, name);
        rsv_reply_unavailable(&op->r, "saving the event", cm_err_protocol);
        put_done(op);
        return;
    }
    if (op->outcome == RSV_ADMIN_PUT_HAS_SALES) {
        rsv_reply_error(&op->r, 409, "event_has_sales",
                        "the inventory cannot change once checkouts exist; settings can", NULL);
        put_done(op);
        return;
    }
    rsv_catalog_invalidate(srv->catalog, op->event);
    rsv_avail_invalidate(srv->avail, op->event);
    op->code = op->outcome == RSV_ADMIN_PUT_CREATED ? 201 : 200;
    log_change(op);
    rsv_catalog_announce(srv->catalog, on_announced, op); /* every reserve: read your writes */
}

static void save(put_op_t *op)
{
    char *text = json_dumps(op->doc, JSON_COMPACT);
    const char *params[] = {op->event, text};
    int rc =
        rsv_pg_query(op->r.srv->pg, "SELECT outcome, version FROM onsale_event_put($1, $2::jsonb)",
                     2, params, on_put, op);
    free(text);
    if (rc != 0) {
        rsv_reply_unavailable(&op->r, "saving the event", cm_err_shutdown);
        put_done(op);
    }
}

static void currency_in_use(put_op_t *op, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "the currency cannot change while %s; retry once they have ended",
             what);
    rsv_reply_error(&op->r, 409, "currency_in_use", msg, NULL);
    put_done(op);
}

static void on_live_holds(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    put_op_t *op = arg;
    if (err || cm_redis_reply_type(reply) != CM_REDIS_INT) {
        rsv_reply_unavailable(&op->r, "counting the event's holds", err ? err : cm_err_server);
        put_done(op);
        return;
    }
    if (cm_redis_reply_int(reply) > 0) {
        currency_in_use(op, "holds live");
        return;
    }
    save(op);
}

/* Row: the currency saved, 't' when a checkout is not terminal. None: a new event. */
static const char CURRENCY_SQL[] =
    "SELECT e.currency, EXISTS (SELECT 1 FROM checkouts c WHERE c.event_id = e.event_id"
    " AND c.state NOT IN ('confirmed', 'failed', 'released', 'refunded'))"
    " FROM events e WHERE e.event_id = $1";

static void on_currency(const char *err, const rsv_pg_result_t *res, void *arg)
{
    put_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "reading the event", err);
        put_done(op);
        return;
    }
    const char *want = json_string_value(json_object_get(op->doc, "currency"));
    if (rsv_pg_result_rows(res) != 1 || strcmp(rsv_pg_result_value(res, 0, 0), want) == 0) {
        save(op); /* new, or the same currency */
        return;
    }
    if (strcmp(rsv_pg_result_value(res, 0, 1), "t") == 0) {
        currency_in_use(op, "checkouts are open");
        return;
    }
    char *akey = rsv_key(op->event, RSV_K_ACTIVE, NULL);
    char now[24];
    snprintf(now, sizeof(now), "(%lld", (long long)cm_time_wall_ms());
    const char *argv[] = {"ZCOUNT", akey, now, "+inf"};
    int rc = cm_redis_command(op->r.srv->redis, on_live_holds, op, 4, argv, NULL);
    free(akey);
    if (rc != 0) {
        rsv_reply_unavailable(&op->r, "counting the event's holds", cm_err_closed);
        put_done(op);
    }
}

void rsv_admin_event_put(rsv_server_t *srv, cm_req_t *req, const char *event)
{
    put_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, RSV_EP_ADMIN_EVENT_PUT);
    snprintf(op->event, sizeof(op->event), "%s", event);
    /* Inventories are larger than buyer requests: allow up to the transport cap. */
    json_t *body = cm_http_read_json(req, 1024 * 1024, NULL, NULL);
    if (body == NULL) {
        rsv_req_replied(&op->r);
        put_done(op);
        return;
    }
    char err[256];
    op->doc = rsv_catalog_normalise(body, err, sizeof(err));
    json_decref(body);
    if (op->doc == NULL) {
        rsv_reply_error(&op->r, 400, "invalid_request", err, NULL);
        put_done(op);
        return;
    }
    const char *params[] = {event};
    if (rsv_pg_query(srv->pg, CURRENCY_SQL, 1, params, on_currency, op) != 0) {
        rsv_reply_unavailable(&op->r, "reading the event", cm_err_shutdown);
        put_done(op);
    }
}

static const char GET_SQL[] =
    "SELECT json_build_object('event', e.event_id, 'currency', e.currency,"
    " 'hold_ttl_seconds', e.hold_ttl_seconds,"
    " 'checkout_extension_seconds', e.checkout_extension_seconds,"
    " 'max_hold_seconds', e.max_hold_seconds, 'max_per_buyer', e.max_per_buyer,"
    " 'version', e.version,"
    " 'seats', (SELECT count(*) FROM seats s WHERE s.event_id = e.event_id AND s.section IS NOT "
    "NULL),"
    " 'sections', COALESCE((SELECT json_agg(json_build_object('id', x.section, 'seats', x.n,"
    "     'sold', x.sold) ORDER BY x.section) FROM (SELECT s.section, count(*) n,"
    "     count(b.booking_id) sold FROM seats s LEFT JOIN booking_items b"
    "     ON b.event_id = s.event_id AND b.seat_id = s.seat_id"
    "     WHERE s.event_id = e.event_id AND s.section IS NOT NULL GROUP BY s.section) x), '[]'),"
    " 'pools', COALESCE((SELECT json_agg(json_build_object('id', p.pool_id,"
    "     'capacity', p.capacity, 'price', p.price, 'sold', (SELECT count(*) FROM booking_items b"
    "     JOIN seats s ON s.event_id = b.event_id AND s.seat_id = b.seat_id"
    "     WHERE b.event_id = p.event_id AND s.pool_id = p.pool_id)) ORDER BY p.pool_id)"
    "     FROM pools p WHERE p.event_id = e.event_id), '[]'),"
    " 'stats', json_build_object("
    "   'bookings', (SELECT count(*) FROM bookings b WHERE b.event_id = e.event_id),"
    "   'units_sold', (SELECT count(*) FROM booking_items b WHERE b.event_id = e.event_id),"
    "   'checkouts', COALESCE((SELECT json_object_agg(c.state, c.n) FROM (SELECT state,"
    "     count(*) n FROM checkouts WHERE event_id = e.event_id GROUP BY state) c), '{}')))::text"
    " FROM events e WHERE e.event_id = $1";

static void on_get(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_req_t *r = arg;
    if (err)
        rsv_reply_unavailable(r, "reading the event", err);
    else if (rsv_pg_result_rows(res) == 0)
        rsv_reply_error(r, 404, "unknown_event", "no such event", NULL);
    else {
        const char *text = rsv_pg_result_value(res, 0, 0);
        rsv_reply_text(r, 200, "application/json", text, strlen(text));
    }
    free(r);
}

void rsv_admin_event_get(rsv_server_t *srv, cm_req_t *req, const char *event)
{
    rsv_req_t *r = cm_xcalloc(1, sizeof(*r));
    rsv_req_start(r, srv, req, RSV_EP_ADMIN_EVENT_GET);
    const char *params[] = {event};
    if (rsv_pg_query(srv->pg, GET_SQL, 1, params, on_get, r) != 0) {
        rsv_reply_unavailable(r, "reading the event", cm_err_shutdown);
        free(r);
    }
}

void rsv_admin_config(rsv_server_t *srv, cm_req_t *req)
{
    rsv_req_t r;
    rsv_req_start(&r, srv, req, RSV_EP_OTHER);
    json_t *config;
    if (cm_svc_config(&srv->svc) != NULL) {
        config = cm_reload_config_json(cm_svc_config(&srv->svc));
    } else {
        size_t n = 0;
        const cm_config_opt_t *table = rsv_config_table(&n);
        config = cm_config_json(table, n, &srv->cfg, rsv_config_secret);
    }
    rsv_reply_json(&r, 200,
                   json_pack("{s:s, s:I, s:o}", "service", "reserve", "reloads",
                             (json_int_t)cm_reload_rounds(), "config", config));
}
