/*
 * gw_codes — see gw_codes.h.
 */
#include "gw_codes.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_server.h"
#include "gw_code.h"
#include "gw_lua.h"
#include "gw_rediskeys.h"
#include "gw_rooms.h"
#include "gw_watermark.h"

typedef struct codes_op {
    gw_req_t r;
    char event[CM_IDENT_MAX + 1];
    char who[96];
    char phase[40];
    int64_t count, uses, from, limit;
    unsigned batch;
    int64_t asked; /* revoke: codes named */
    int64_t bad;   /* revoke: codes that are not this room's */
    json_t *body;  /* revoke: the request's body while the room is read */
} codes_op_t;

static codes_op_t *op_new(gw_server_t *srv, cm_req_t *req, const char *event)
{
    codes_op_t *op = cm_xcalloc(1, sizeof(*op));
    gw_req_start(&op->r, srv, req, GW_EP_ADMIN);
    snprintf(op->event, sizeof(op->event), "%s", event);
    cm_server_admin_who(req, op->who, sizeof(op->who));
    return op;
}

/* op_new with the request's JSON body in *body; NULL when the body was refused (then the
 * request has been answered). */
static codes_op_t *op_new_with_body(gw_server_t *srv, cm_req_t *req, const char *event,
                                    json_t **body)
{
    codes_op_t *op = op_new(srv, req, event);
    *body = cm_http_read_json(req, (size_t)srv->cfg.server.max_body_bytes, NULL, NULL);
    if (*body == NULL) {
        gw_req_replied(&op->r);
        free(op);
        return NULL;
    }
    return op;
}

/* codes.lua with ARGV args (KEYS: the room's, its batches and revocations). */
static int eval_codes(codes_op_t *op, cm_redis_cb cb, int nargs, const char **args)
{
    gw_rediskeys_t keys;
    char batches[GW_KEY_MAX], revoked[GW_KEY_MAX];
    const char **argv = cm_xcalloc((size_t)(GW_K_COUNT + 2 + nargs), sizeof(*argv));
    int argc = gw_rediskeys_argv(op->event, &keys, argv);
    gw_rediskeys_extra(op->event, GW_KEY_BATCHES, batches);
    gw_rediskeys_extra(op->event, GW_KEY_REVOKED, revoked);
    argv[argc++] = batches;
    argv[argc++] = revoked;
    for (int i = 0; i < nargs; i++)
        argv[argc++] = args[i];
    int rc =
        cm_redis_eval(op->r.srv->redis, gw_lua()->codes, cb, op, GW_K_COUNT + 2, argc, argv, NULL);
    free(argv);
    return rc;
}

static const char *word(const cm_redis_reply_t *reply, size_t i)
{
    const cm_redis_reply_t *e = reply ? cm_redis_reply_at(reply, i) : NULL;
    return e ? cm_redis_reply_str(e, NULL) : NULL;
}

/* The first word of codes.lua's reply, or NULL after answering 503 / 404 for it. */
static const char *outcome(codes_op_t *op, const char *err, const cm_redis_reply_t *reply,
                           const char *what)
{
    const char *w = err == NULL ? word(reply, 0) : NULL;
    if (w == NULL) {
        if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ERROR)
            cm_log(CM_LOG_WARN, "codes %s: %s", op->event, cm_redis_reply_str(reply, NULL));
        gw_reply_unavailable(&op->r, what, err ? err : cm_err_protocol);
        return NULL;
    }
    if (strcmp(w, "unknown") == 0) {
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        return NULL;
    }
    return w;
}

/* --- issue ---------------------------------------------------------------------------- */

static void on_issued(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    codes_op_t *op = arg;
    const char *w = outcome(op, err, reply, "issuing codes");
    int64_t batch = 0, base = 0;
    if (w == NULL) {
        /* answered */
    } else if (strcmp(w, "no_phase") == 0) {
        gw_reply_error(&op->r, 409, "unknown_phase",
                       "the room's schedule has no phase of that name (PATCH its phases first)",
                       NULL);
    } else if (strcmp(w, "full") == 0) {
        gw_reply_error(&op->r, 409, "codes_full", word(reply, 1) ? word(reply, 1) : "full", NULL);
    } else if (strcmp(w, "issued") != 0 ||
               cm_parse_i64(word(reply, 1), 1, GW_CODE_BATCH_MAX, &batch) != 0 ||
               cm_parse_i64(word(reply, 2), 0, GW_CODE_SERIALS, &base) != 0) {
        gw_reply_unavailable(&op->r, "issuing codes", cm_err_protocol);
    } else {
        char path[CM_IDENT_MAX + 48];
        snprintf(path, sizeof(path), "/admin/events/%s/codes/%" PRId64 ".csv", op->event, batch);
        cm_log(CM_LOG_INFO,
               "admin change by %s: codes issued for room %s: batch %" PRId64 " of %" PRId64
               " codes of %" PRId64 " use(s) for phase %s",
               op->who, op->event, batch, op->count, op->uses, op->phase);
        gw_reply_json(&op->r, 201,
                      json_pack("{s:s, s:I, s:s, s:I, s:I, s:b, s:s}", "event", op->event, "batch",
                                (json_int_t)batch, "phase", op->phase, "count",
                                (json_int_t)op->count, "uses", (json_int_t)op->uses, "revoked", 0,
                                "export", path));
    }
    free(op);
}

static int int_in(const json_t *o, const char *key, int64_t min, int64_t max, int64_t dflt,
                  int64_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (v == NULL && dflt >= 0) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return -1;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

void gw_codes_issue(gw_server_t *srv, cm_req_t *req, const char *event)
{
    json_t *body;
    codes_op_t *op = op_new_with_body(srv, req, event, &body);
    if (op == NULL)
        return;
    const json_t *phase = json_object_get(body, "phase");
    const char *msg = NULL;
    if (!json_is_string(phase) || json_string_length(phase) == 0 ||
        json_string_length(phase) >= sizeof(op->phase))
        msg = "phase must name a phase of the room's schedule";
    else if (int_in(body, "count", 1, GW_CODES_ISSUE_MAX, -1, &op->count) != 0)
        msg = "count must be an integer in [1, 2000000]";
    else if (int_in(body, "uses", 1, GW_CODES_USES_MAX, 1, &op->uses) != 0)
        msg = "uses must be an integer in [1, 255] (fans one code places)";
    else
        snprintf(op->phase, sizeof(op->phase), "%s", json_string_value(phase));
    json_decref(body);
    if (msg != NULL) {
        gw_reply_error(&op->r, 400, "invalid_request", msg, NULL);
        free(op);
        return;
    }
    if (srv->code_secret == NULL) {
        gw_reply_error(&op->r, 409, "codes_unavailable",
                       "this gateway has no code_secret_file: it cannot issue or check codes",
                       NULL);
        free(op);
        return;
    }
    char count[24], uses[8];
    snprintf(count, sizeof(count), "%" PRId64, op->count);
    snprintf(uses, sizeof(uses), "%" PRId64, op->uses);
    const char *args[] = {"issue", op->phase, count, uses};
    if (eval_codes(op, on_issued, 4, args) != 0) {
        gw_reply_unavailable(&op->r, "issuing codes", cm_err_closed);
        free(op);
    }
}

/* --- list ----------------------------------------------------------------------------- */

/* A batch's meta '<base>:<count>:<uses>:<revoked>:<phase>' as the API shows it, or NULL. */
static json_t *batch_json(const char *id, const char *meta)
{
    long long base, count, uses;
    int revoked, end = 0;
    if (sscanf(meta, "%lld:%lld:%lld:%d:%n", &base, &count, &uses, &revoked, &end) != 4 || end == 0)
        return NULL;
    int64_t b;
    if (cm_parse_i64(id, 1, GW_CODE_BATCH_MAX, &b) != 0)
        return NULL;
    return json_pack("{s:I, s:s, s:I, s:I, s:b}", "batch", (json_int_t)b, "phase", meta + end,
                     "count", (json_int_t)count, "uses", (json_int_t)uses, "revoked", revoked);
}

static void on_listed(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    codes_op_t *op = arg;
    if (err != NULL || cm_redis_reply_type(reply) != CM_REDIS_ARRAY) {
        gw_reply_unavailable(&op->r, "listing codes", err ? err : cm_err_protocol);
        free(op);
        return;
    }
    json_t *arr = json_array();
    size_t n = cm_redis_reply_count(reply);
    for (size_t i = 0; i + 1 < n; i += 2) {
        json_t *b = batch_json(word(reply, i), word(reply, i + 1) ? word(reply, i + 1) : "");
        if (b != NULL)
            json_array_append_new(arr, b);
    }
    gw_reply_json(&op->r, 200, json_pack("{s:s, s:o}", "event", op->event, "batches", arr));
    free(op);
}

void gw_codes_list(gw_server_t *srv, cm_req_t *req, const char *event)
{
    codes_op_t *op = op_new(srv, req, event);
    char key[GW_KEY_MAX];
    gw_rediskeys_extra(event, GW_KEY_BATCHES, key);
    const char *argv[] = {"HGETALL", key};
    if (cm_redis_command(srv->redis, on_listed, op, 2, argv, NULL) != 0) {
        gw_reply_unavailable(&op->r, "listing codes", cm_err_closed);
        free(op);
    }
}

/* --- export --------------------------------------------------------------------------- */

static void write_page(codes_op_t *op, const gw_room_t *room, const char *meta)
{
    long long base, count, uses;
    int revoked, end = 0;
    if (sscanf(meta, "%lld:%lld:%lld:%d:%n", &base, &count, &uses, &revoked, &end) != 4 ||
        end == 0) {
        gw_reply_unavailable(&op->r, "exporting codes", cm_err_protocol);
        return;
    }
    const char *phase = meta + end;
    int64_t stop = op->from + op->limit < count ? op->from + op->limit : count;
    size_t row = GW_CODE_TEXT_MAX + 16 + strlen(phase) + 8;
    size_t cap = 64 + (size_t)(stop > op->from ? stop - op->from : 0) * row, len = 0;
    char *out = cm_xmalloc(cap);
    len += (size_t)snprintf(out, cap, "code,batch,serial,phase,uses\r\n");
    gw_server_t *srv = op->r.srv;
    for (int64_t s = op->from; s < stop; s++) {
        char code[GW_CODE_TEXT_MAX];
        gw_code_make(srv->code_secret, srv->code_secret_len, op->event, room->s.gen, op->batch,
                     (uint32_t)s, code);
        len += (size_t)snprintf(out + len, cap - len, "%s,%u,%" PRId64 ",%s,%lld\r\n", code,
                                op->batch, s, phase, uses);
    }
    if (stop < count) {
        char link[CM_IDENT_MAX + 96];
        snprintf(link, sizeof(link),
                 "</admin/events/%s/codes/%u.csv?from=%" PRId64 "&limit=%" PRId64 ">; rel=\"next\"",
                 op->event, op->batch, stop, op->limit);
        cm_http_add_header(op->r.svc.req, "Link", link);
    }
    char total[24];
    snprintf(total, sizeof(total), "%lld", count);
    cm_http_add_header(op->r.svc.req, "Onsale-Codes-Total", total);
    cm_http_add_header(op->r.svc.req, "Cache-Control", "no-store");
    gw_reply_text(&op->r, 200, "text/csv; charset=utf-8", out, len);
    free(out);
}

static void on_batch(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    codes_op_t *op = arg;
    const char *w = outcome(op, err, reply, "exporting codes");
    gw_room_t *room = gw_rooms_find(op->r.srv->rooms, op->event);
    if (w == NULL) {
        /* answered */
    } else if (strcmp(w, "no_batch") == 0) {
        gw_reply_error(&op->r, 404, "unknown_batch", "no batch of codes of that number", NULL);
    } else if (strcmp(w, "batch") != 0 || word(reply, 1) == NULL || room == NULL ||
               !room->present) {
        gw_reply_unavailable(&op->r, "exporting codes", cm_err_protocol);
    } else {
        write_page(op, room, word(reply, 1));
    }
    free(op);
}

static void on_room(const char *err, gw_room_t *room, void *arg)
{
    codes_op_t *op = arg;
    if (err != NULL) {
        gw_reply_unavailable(&op->r, "loading the waiting room", err);
        free(op);
        return;
    }
    if (room == NULL) {
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        free(op);
        return;
    }
    char batch[8];
    snprintf(batch, sizeof(batch), "%u", op->batch);
    const char *args[] = {"get", batch};
    if (eval_codes(op, on_batch, 2, args) != 0) {
        gw_reply_unavailable(&op->r, "exporting codes", cm_err_closed);
        free(op);
    }
}

/* q's value of key as an integer in [min, max] (dflt when absent). */
static int query_int(struct evkeyvalq *q, const char *key, int64_t min, int64_t max, int64_t dflt,
                     int64_t *out)
{
    const char *v = evhttp_find_header(q, key);
    if (v == NULL) {
        *out = dflt;
        return 0;
    }
    return cm_parse_i64(v, min, max, out);
}

void gw_codes_export(gw_server_t *srv, cm_req_t *req, const char *event, const char *file)
{
    codes_op_t *op = op_new(srv, req, event);
    int64_t b = 0;
    size_t n = strlen(file);
    char id[8] = "";
    if (n > 4 && n < 4 + sizeof(id) && strcmp(file + n - 4, ".csv") == 0) {
        memcpy(id, file, n - 4);
        id[n - 4] = '\0';
    }
    const char *msg = NULL;
    if (cm_parse_i64(id, 1, GW_CODE_BATCH_MAX, &b) != 0) {
        msg = "export a batch as /admin/events/{event}/codes/{batch}.csv";
    } else {
        struct evkeyvalq q;
        if (cm_http_query(req, &q) != 0 ||
            query_int(&q, "from", 0, GW_CODE_SERIALS, 0, &op->from) != 0 ||
            query_int(&q, "limit", 1, GW_CODES_PAGE_MAX, GW_CODES_PAGE_MAX, &op->limit) != 0)
            msg = "from must be a serial (0 or more), limit an integer in [1, 5000]";
        evhttp_clear_headers(&q);
    }
    if (msg != NULL) {
        gw_reply_error(&op->r, 400, "invalid_request", msg, NULL);
        free(op);
        return;
    }
    if (srv->code_secret == NULL) {
        gw_reply_error(&op->r, 409, "codes_unavailable",
                       "this gateway has no code_secret_file: it cannot derive codes", NULL);
        free(op);
        return;
    }
    op->batch = (unsigned)b;
    gw_watermark_refresh(srv, event, on_room, op);
}

/* --- revoke --------------------------------------------------------------------------- */

static void on_revoked(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    codes_op_t *op = arg;
    const char *w = outcome(op, err, reply, "revoking codes");
    int64_t n = 0, m = 0;
    if (w == NULL) {
        /* answered */
    } else if (strcmp(w, "revoked") != 0 || cm_parse_i64(word(reply, 1), 0, INT64_MAX, &n) != 0 ||
               cm_parse_i64(word(reply, 2), 0, INT64_MAX, &m) != 0) {
        gw_reply_unavailable(&op->r, "revoking codes", cm_err_protocol);
    } else {
        cm_log(CM_LOG_INFO,
               "admin change by %s: codes revoked for room %s: %" PRId64 " now, %" PRId64
               " unknown",
               op->who, op->event, n, m + op->bad);
        gw_reply_json(&op->r, 200,
                      json_pack("{s:s, s:I, s:I}", "event", op->event, "revoked", (json_int_t)n,
                                "unknown", (json_int_t)(m + op->bad)));
    }
    free(op);
}

/* The (batch, serial) pairs of body's "codes" and "batches" into args (from args[1]);
 * their count, or -1 for a 400. Codes that are not this room's count in op->bad. */
static int revoke_args(codes_op_t *op, const gw_room_t *room, const json_t *body,
                       char (*text)[2][12], const char **args)
{
    gw_server_t *srv = op->r.srv;
    const json_t *codes = json_object_get(body, "codes"),
                 *batches = json_object_get(body, "batches");
    if ((codes != NULL && !json_is_array(codes)) || (batches != NULL && !json_is_array(batches)) ||
        json_array_size(codes) + json_array_size(batches) == 0 ||
        json_array_size(codes) + json_array_size(batches) > GW_CODES_REVOKE_MAX)
        return -1;
    int n = 0;
    for (size_t i = 0; i < json_array_size(codes); i++) {
        const json_t *v = json_array_get(codes, i);
        gw_code_t c;
        if (!json_is_string(v))
            return -1;
        if (gw_code_parse(json_string_value(v), json_string_length(v), &c) != 0 ||
            !gw_code_genuine(srv->code_secret, srv->code_secret_len, op->event, room->s.gen, &c)) {
            op->bad++;
            continue;
        }
        snprintf(text[n][0], 12, "%u", c.batch);
        snprintf(text[n][1], 12, "%" PRIu32, c.serial);
        args[1 + 2 * n] = text[n][0];
        args[2 + 2 * n] = text[n][1];
        n++;
    }
    for (size_t i = 0; i < json_array_size(batches); i++) {
        const json_t *v = json_array_get(batches, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > GW_CODE_BATCH_MAX)
            return -1;
        snprintf(text[n][0], 12, "%d", (int)json_integer_value(v));
        args[1 + 2 * n] = text[n][0];
        args[2 + 2 * n] = "*";
        n++;
    }
    return n;
}

static void on_room_to_revoke(const char *err, gw_room_t *room, void *arg)
{
    codes_op_t *op = arg;
    json_t *body = op->body;
    op->body = NULL;
    if (err != NULL || room == NULL) {
        if (err != NULL)
            gw_reply_unavailable(&op->r, "loading the waiting room", err);
        else
            gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        json_decref(body);
        free(op);
        return;
    }
    char(*text)[2][12] = cm_xcalloc(GW_CODES_REVOKE_MAX, sizeof(*text));
    const char **args = cm_xcalloc(1 + 2 * GW_CODES_REVOKE_MAX, sizeof(*args));
    args[0] = "revoke";
    int n = revoke_args(op, room, body, text, args);
    json_decref(body);
    if (n < 0) {
        gw_reply_error(&op->r, 400, "invalid_request",
                       "name 1 to 1000 codes (\"codes\": [text…]) and/or whole batches "
                       "(\"batches\": [number…])",
                       NULL);
        free(op);
    } else if (eval_codes(op, on_revoked, 1 + 2 * n, args) != 0) {
        gw_reply_unavailable(&op->r, "revoking codes", cm_err_closed);
        free(op);
    }
    free(args);
    free(text);
}

void gw_codes_revoke(gw_server_t *srv, cm_req_t *req, const char *event)
{
    json_t *body;
    codes_op_t *op = op_new_with_body(srv, req, event, &body);
    if (op == NULL)
        return;
    if (srv->code_secret == NULL) {
        json_decref(body);
        gw_reply_error(&op->r, 409, "codes_unavailable",
                       "this gateway has no code_secret_file: it cannot check codes", NULL);
        free(op);
        return;
    }
    op->body = body;
    gw_watermark_refresh(srv, event, on_room_to_revoke, op);
}
