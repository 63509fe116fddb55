/*
 * gw_admin — see gw_admin.h.
 *
 * PUT/PATCH: body validated field by field in C (gw_settings_parse), merged and checked
 * across fields in settings.lua, then the room is listed in GW_ROOMS_KEY (a separate
 * command: the set is not in the room's hash slot) and refreshed for the answer.
 */
#include "gw_admin.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "gw_dpop.h"
#include "gw_rediskeys.h"
#include "gw_history.h"
#include "gw_lua.h"
#include "gw_pow.h"
#include "gw_rooms.h"
#include "gw_settings.h"
#include "gw_watermark.h"

typedef struct admin_op {
    gw_req_t r;
    char event[CM_IDENT_MAX + 1];
    int code;
    bool sync;    /* a change: every worker re-reads the room before the answer */
    json_t *out;  /* the answer, held while the workers re-read */
    char *before; /* a change: the settings before it (compact JSON), for the log */
    char *after;
    char who[96]; /* a change: the operator (address, token fingerprint) */
    const char *what;
} admin_op_t;

static void on_peer_refreshed(const char *err, gw_room_t *room, void *arg)
{
    cm_bcast_ack(arg); /* a failed re-read still ends: the tick retries it */
}

/* On a peer's thread. */
static void peer_refresh(void *peer, const char *event, cm_bcast_t *b)
{
    gw_watermark_refresh(peer, event, on_peer_refreshed, b);
}

/* Makes every other worker re-read the room from Redis (its settings changed, or it was
 * deleted), then calls done(arg) on this worker's thread: an operator's change is
 * answered only once every worker serves it. */
static void sync_room(gw_server_t *srv, const char *event, void (*done)(void *arg), void *arg)
{
    cm_svc_sync_event(&srv->svc, event, peer_refresh, done, arg);
}

/* Records who changes what before the change is made (the log line follows it). */
static void change_begin(admin_op_t *op, const char *what)
{
    gw_room_t *room = gw_rooms_find(op->r.srv->rooms, op->event);
    json_t *s = room ? gw_settings_json(&room->s) : NULL;
    op->before = s ? json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(s);
    op->what = what;
    cm_server_admin_who(op->r.svc.req, op->who, sizeof(op->who));
}

static void op_free(admin_op_t *op)
{
    free(op->before);
    free(op->after);
    free(op);
}

static admin_op_t *op_new(gw_server_t *srv, cm_req_t *req, const char *event)
{
    admin_op_t *op = cm_xcalloc(1, sizeof(*op));
    gw_req_start(&op->r, srv, req, GW_EP_ADMIN);
    snprintf(op->event, sizeof(op->event), "%s", event ? event : "");
    op->code = 200;
    return op;
}

json_t *gw_admin_stats_json(const gw_room_t *room)
{
    double rate = gw_watermark_rate(room);
    int64_t q = gw_watermark_queue_size(room);
    int64_t eta = gw_watermark_eta_s(q, rate);
    /* the reserve's stock as the last advance read it (null: unknown, or not stock_aware) */
    json_t *left = room->stock_known ? json_integer(room->stock_left) : json_null();
    json_t *held = room->stock_known ? json_integer(room->stock_held) : json_null();
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:o, s:b, s:o, s:o}",
                     "queue_size", (json_int_t)q, "admitted_total", (json_int_t)room->claimed,
                     "active", (json_int_t)room->active, "watermark", (json_int_t)room->wm,
                     "numbers_issued", (json_int_t)room->n, "prequeue_size",
                     (json_int_t)room->prequeue, "noshows", (json_int_t)room->noshows,
                     "joins_per_second", room->join_rate, "admissions_per_second", room->claim_rate,
                     "passes_per_second", room->pass_rate, "eta_last_seconds",
                     eta < 0 ? json_null() : json_integer(eta), "opened", room->opened,
                     "stock_left", left, "stock_held", held);
}

void gw_admin_pow_default(gw_setting_kv_t *kv, int n, bool on)
{
    for (int i = 0; i < n; i++)
        if (strcmp(kv[i].name, "pow") == 0)
            snprintf(kv[i].value, sizeof(kv[i].value), "%d", on ? 1 : 0);
}

/* stats.pow: the room's setting, what a quiet block is given now, refusals (process). */
static json_t *pow_json(gw_server_t *srv, const gw_room_t *room)
{
    return json_pack("{s:b, s:i, s:I}", "enabled", room->s.pow, "base_bits",
                     gw_pow_base_now(srv->pow, cm_time_mono_ns() / 1000000), "refused",
                     (json_int_t)gw_pow_refused(srv->pow));
}

json_t *gw_admin_phase_json(const gw_settings_t *s, int64_t now_ms)
{
    int64_t next = 0;
    int at = gw_sched_at(&s->sched, now_ms, &next);
    char when[32] = "";
    if (next > 0)
        cm_format_rfc3339(next, when, sizeof(when));
    json_t *next_at = next > 0 ? json_string(when) : json_null();
    json_t *name = at >= 0 ? json_string(s->sched.p[at].name) : json_null();
    return json_pack("{s:o, s:o}", "current", name, "next_at", next_at);
}

json_t *gw_admin_room_json(gw_server_t *srv, const gw_room_t *room)
{
    json_t *o = gw_settings_json(&room->s);
    json_t *stats = gw_admin_stats_json(room);
    json_object_set_new(stats, "pow", pow_json(srv, room));
    json_object_set_new(o, "event", json_string(room->event));
    uint64_t verified, refused; /* DPoP proofs at this gateway since it started (gw_dpop) */
    gw_dpop_counts(room->event, &verified, &refused);
    json_object_set_new(stats, "dpop_verified", json_integer((json_int_t)verified));
    json_object_set_new(stats, "dpop_refused", json_integer((json_int_t)refused));
    json_object_set_new(o, "stats", stats);
    json_object_set_new(o, "phase", gw_admin_phase_json(&room->s, gw_watermark_now_ms(room)));
    return o;
}

/* Every worker has re-read the room: the change is visible on all of them. */
static void on_synced(void *arg)
{
    admin_op_t *op = arg;
    cm_log(CM_LOG_INFO, "admin change by %s: %s room %s: %s -> %s", op->who, op->what, op->event,
           op->before ? op->before : "(none)", op->after ? op->after : "(deleted)");
    gw_reply_json(&op->r, op->code, op->out);
    op_free(op);
}

static void on_refreshed(const char *err, gw_room_t *room, void *arg)
{
    admin_op_t *op = arg;
    if (err != NULL)
        gw_reply_unavailable(&op->r, "reading the waiting room", err);
    else if (room == NULL)
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
    else if (op->sync) {
        op->out = gw_admin_room_json(op->r.srv, room);
        json_t *s = gw_settings_json(&room->s);
        op->after = json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(s);
        sync_room(op->r.srv, op->event, on_synced, op);
        return;
    } else
        gw_reply_json(&op->r, op->code, gw_admin_room_json(op->r.srv, room));
    op_free(op);
}

static void on_listed(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    admin_op_t *op = arg;
    if (err != NULL) {
        gw_reply_unavailable(&op->r, "listing the waiting room", err);
        op_free(op);
        return;
    }
    op->sync = true;
    gw_watermark_refresh(op->r.srv, op->event, on_refreshed, op);
}

static void on_settings(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    admin_op_t *op = arg;
    gw_server_t *srv = op->r.srv;
    gw_settings_word_t what = err == NULL ? gw_lua_settings_word(reply) : GW_SETTINGS_BAD;
    switch (what) {
    case GW_SETTINGS_BAD:
        if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ERROR)
            cm_log(CM_LOG_WARN, "settings %s: %s", op->event, cm_redis_reply_str(reply, NULL));
        gw_reply_unavailable(&op->r, "saving the settings", err ? err : cm_err_protocol);
        op_free(op);
        return;
    case GW_SETTINGS_INVALID: {
        const char *msg = cm_redis_reply_str(cm_redis_reply_at(reply, 1), NULL);
        gw_reply_error(&op->r, 400, "invalid_request", msg ? msg : "invalid settings", NULL);
        op_free(op);
        return;
    }
    case GW_SETTINGS_UNKNOWN:
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        op_free(op);
        return;
    case GW_SETTINGS_CREATED:
    case GW_SETTINGS_REPLACED:
    case GW_SETTINGS_PATCHED:
        break;
    }
    op->code = what == GW_SETTINGS_CREATED ? 201 : 200;
    cm_log(CM_LOG_INFO, "waiting room %s %s", op->event, gw_lua_settings_name(what));
    const char *argv[] = {"SADD", GW_ROOMS_KEY, op->event};
    if (cm_redis_command(srv->redis, on_listed, op, 3, argv, NULL) != 0) {
        gw_reply_unavailable(&op->r, "listing the waiting room", cm_err_closed);
        op_free(op);
    }
}

void gw_admin_event_write(gw_server_t *srv, cm_req_t *req, const char *event, bool partial)
{
    admin_op_t *op = op_new(srv, req, event);
    change_begin(op, partial ? "PATCH" : "PUT");
    json_t *body = cm_http_read_json(req, (size_t)srv->cfg.server.max_body_bytes, NULL, NULL);
    if (body == NULL) {
        gw_req_replied(&op->r);
        op_free(op);
        return;
    }
    if (!partial && json_is_object(body) && json_object_get(body, "dpop") == NULL)
        json_object_set_new(body, "dpop", json_boolean(srv->cfg.dpop_new_rooms));
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = gw_settings_parse(body, partial, srv->cfg.allow_loopback_http, kv, err, sizeof(err));
    if (n > 0 && !partial && json_object_get(body, "pow") == NULL)
        gw_admin_pow_default(kv, n, srv->cfg.pow_new_rooms);
    /* the schedule: replaced whole when given (or by a PUT), else left as it is */
    bool sched = !partial || json_object_get(body, "phases") != NULL;
    gw_sched_t *s = sched ? cm_xmalloc(sizeof(*s)) : NULL;
    if (n >= 0 && sched &&
        gw_sched_parse(json_object_get(body, "phases"), s, err, sizeof(err)) != 0)
        n = -1;
    json_decref(body);
    if (n < 0) {
        free(s);
        gw_reply_error(&op->r, 400, "invalid_request", err, NULL);
        op_free(op);
        return;
    }
    char *phases = NULL, *phz = NULL;
    if (sched)
        gw_sched_fields(s, &phases, &phz);
    free(s);
    char gen[21];
    uint64_t g;
    cm_tls_random(&g, sizeof(g));
    g = (g >> 11) | 1; /* 53 bits: exact in Lua numbers and JSON; never 0 */
    gw_settings_gen_text(g, gen);
    gw_rediskeys_t keys;
    const char *argv[GW_K_COUNT + 6 + 2 * GW_SETTINGS_MAX_FIELDS];
    int argc = gw_rediskeys_argv(event, &keys, argv);
    argv[argc++] = partial ? "patch" : "put";
    argv[argc++] = gen;
    for (int i = 0; i < n; i++) {
        argv[argc++] = kv[i].name;
        argv[argc++] = kv[i].value;
    }
    if (sched) {
        argv[argc++] = "phases";
        argv[argc++] = phases;
        argv[argc++] = "phz";
        argv[argc++] = phz;
    }
    int sent = cm_redis_eval(srv->redis, gw_lua()->settings, on_settings, op, GW_K_COUNT, argc,
                             argv, NULL);
    free(phases);
    free(phz);
    if (sent != 0) {
        gw_reply_unavailable(&op->r, "saving the settings", cm_err_closed);
        op_free(op);
    }
}

void gw_admin_event_get(gw_server_t *srv, cm_req_t *req, const char *event)
{
    admin_op_t *op = op_new(srv, req, event);
    gw_watermark_refresh(srv, event, on_refreshed, op);
}

static void on_deleted(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    admin_op_t *op = arg;
    if (err != NULL || cm_redis_reply_type(reply) != CM_REDIS_INT) {
        gw_reply_unavailable(&op->r, "deleting the waiting room", err ? err : cm_err_protocol);
    } else if (cm_redis_reply_int(reply) == 0) {
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
    } else {
        gw_rooms_forget(op->r.srv->rooms, op->event);
        cm_log(CM_LOG_INFO, "waiting room %s deleted", op->event);
        op->code = 200;
        op->out = json_pack("{s:s, s:b}", "event", op->event, "deleted", 1);
        sync_room(op->r.srv, op->event, on_synced, op);
        return;
    }
    op_free(op);
}

static void on_unlisted(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    admin_op_t *op = arg;
    gw_rediskeys_t keys;
    static const char *const tails[] = {GW_KEY_HOLDERS, GW_KEY_BATCHES, GW_KEY_USES, GW_KEY_REVOKED,
                                        GW_KEY_CUSTOMERS};
    char extra[5][GW_KEY_MAX];
    const char *argv[GW_K_COUNT + 5];
    int argc = gw_rediskeys_argv(op->event, &keys, argv);
    for (int i = 0; i < 5; i++) {
        gw_rediskeys_extra(op->event, tails[i], extra[i]);
        argv[argc++] = extra[i];
    }
    if (err != NULL || cm_redis_eval(op->r.srv->redis, gw_lua()->remove, on_deleted, op, argc, argc,
                                     argv, NULL) != 0) {
        gw_reply_unavailable(&op->r, "deleting the waiting room", err ? err : cm_err_closed);
        op_free(op);
    }
}

void gw_admin_event_delete(gw_server_t *srv, cm_req_t *req, const char *event)
{
    admin_op_t *op = op_new(srv, req, event);
    change_begin(op, "DELETE");
    const char *argv[] = {"SREM", GW_ROOMS_KEY, event};
    if (cm_redis_command(srv->redis, on_unlisted, op, 3, argv, NULL) != 0) {
        gw_reply_unavailable(&op->r, "deleting the waiting room", cm_err_closed);
        op_free(op);
    }
}

void gw_admin_events_list(gw_server_t *srv, cm_req_t *req)
{
    gw_req_t r;
    gw_req_start(&r, srv, req, GW_EP_ADMIN);
    size_t n;
    gw_room_t **rooms = gw_rooms_all(srv->rooms, &n);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (rooms[i]->present)
            json_array_append_new(arr, gw_admin_room_json(srv, rooms[i]));
    }
    gw_reply_json(&r, 200, json_pack("{s:o}", "events", arr));
}

/* --- history (the dashboard's charts open with it) ---------------------------------- */

void gw_admin_event_history(gw_server_t *srv, cm_req_t *req, const char *event)
{
    gw_req_t r;
    gw_req_start(&r, srv, req, GW_EP_ADMIN);
    gw_room_t *room = gw_rooms_find(srv->rooms, event);
    if (room == NULL || !room->present) {
        gw_reply_error(&r, 404, "unknown_event", "no waiting room for this event", NULL);
        return;
    }
    gw_reply_json(&r, 200, gw_history_json(srv->history, event));
}

void gw_admin_config(gw_server_t *srv, cm_req_t *req)
{
    gw_req_t r;
    gw_req_start(&r, srv, req, GW_EP_ADMIN);
    json_t *config;
    if (cm_svc_config(&srv->svc) != NULL) {
        config = cm_reload_config_json(cm_svc_config(&srv->svc));
    } else {
        size_t n = 0;
        const cm_config_opt_t *table = gw_config_table(&n);
        config = cm_config_json(table, n, &srv->cfg, gw_config_secret);
    }
    gw_reply_json(&r, 200,
                  json_pack("{s:s, s:I, s:o}", "service", "gateway", "reloads",
                            (json_int_t)cm_reload_rounds(), "config", config));
}
