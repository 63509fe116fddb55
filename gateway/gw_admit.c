/*
 * gw_admit — see gw_admit.h.
 *
 * The cache: chained hash on (room generation, number) with FIFO eviction (a ring of
 * entry slots, the oldest overwritten first); an entry matches only its event and its
 * visitor too, so a second visitor holding the same number (docs/design.md, invariant
 * 13) never gets another fan's token. Admissions are written once and never change, so
 * there is nothing to invalidate; an expired one is answered as expired.
 */
#include "gw_admit.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_access.h"
#include "cm_dpop.h"
#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_text.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "gw_metrics.h"
#include "gw_rediskeys.h"
#include "gw_lua.h"
#include "gw_page.h"
#include "gw_queue.h"
#include "gw_signer.h"
#include "gw_watermark.h"

typedef struct entry {
    struct entry *next; /* bucket chain */
    bool used;
    uint64_t gen, num;
    char event[CM_IDENT_MAX + 1];
    char visitor[GW_CUSTOMER_MAX + 1]; /* whose place (gw_ticket_who): visitor or customer */
    char jkt[CM_JWT_JKT_LEN + 1];      /* the key the token is bound to (cnf.jkt); "" = none */
    int64_t exp;
    char *token;
} entry_t;

struct gw_admit {
    entry_t *entries;
    entry_t **buckets;
    size_t size, nbuckets, ring;
};

typedef struct admit_op {
    gw_req_t r;
    gw_room_t *room;
    gw_ticket_t t;
    char ticket[GW_TICKET_MAX_LEN];
    int code;
    bool page;
    cm_jwt_claims_t claims;
    uint64_t sign_start_ns;
} admit_op_t;

gw_admit_t *gw_admit_new(size_t size)
{
    gw_admit_t *a = cm_xcalloc(1, sizeof(*a));
    a->size = size;
    a->nbuckets = 16;
    while (a->nbuckets < size)
        a->nbuckets <<= 1;
    a->entries = cm_xcalloc(size, sizeof(entry_t));
    a->buckets = cm_xcalloc(a->nbuckets, sizeof(entry_t *));
    return a;
}

void gw_admit_free(gw_admit_t *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->size; i++)
        free(a->entries[i].token);
    free(a->entries);
    free(a->buckets);
    free(a);
}

static size_t bucket_of(const gw_admit_t *a, uint64_t gen, uint64_t num)
{
    uint64_t h = (gen ^ (num * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
    return (size_t)(h >> 17) & (a->nbuckets - 1);
}

static entry_t *lookup(gw_admit_t *a, uint64_t gen, uint64_t num, const char *event,
                       const char *visitor, const char *jkt)
{
    for (entry_t *e = a->buckets[bucket_of(a, gen, num)]; e; e = e->next) {
        if (e->gen == gen && e->num == num && strcmp(e->event, event) == 0 &&
            strcmp(e->visitor, visitor) == 0 && strcmp(e->jkt, jkt) == 0)
            return e;
    }
    return NULL;
}

static void unlink_entry(gw_admit_t *a, entry_t *e)
{
    entry_t **pp = &a->buckets[bucket_of(a, e->gen, e->num)];
    while (*pp && *pp != e)
        pp = &(*pp)->next;
    if (*pp)
        *pp = e->next;
    free(e->token);
    e->token = NULL;
    e->used = false;
}

/* Stores the token (taking it); returns the cached entry. */
static entry_t *insert(gw_admit_t *a, uint64_t gen, uint64_t num, const char *event,
                       const char *visitor, const char *jkt, int64_t exp, char *token)
{
    entry_t *e = lookup(a, gen, num, event, visitor, jkt);
    if (e) {
        free(token);
        return e;
    }
    e = &a->entries[a->ring];
    a->ring = (a->ring + 1) % a->size;
    if (e->used)
        unlink_entry(a, e);
    e->used = true;
    e->gen = gen;
    e->num = num;
    snprintf(e->event, sizeof(e->event), "%s", event);
    snprintf(e->visitor, sizeof(e->visitor), "%s", visitor);
    snprintf(e->jkt, sizeof(e->jkt), "%s", jkt);
    e->exp = exp;
    e->token = token;
    size_t b = bucket_of(a, gen, num);
    e->next = a->buckets[b];
    a->buckets[b] = e;
    return e;
}

const char *gw_admit_cache_find(gw_admit_t *a, uint64_t gen, uint64_t num, const char *event,
                                const char *visitor, const char *jkt, int64_t *exp)
{
    const entry_t *e = lookup(a, gen, num, event, visitor, jkt);
    if (e == NULL)
        return NULL;
    if (exp)
        *exp = e->exp;
    return e->token;
}

const char *gw_admit_cache_put(gw_admit_t *a, uint64_t gen, uint64_t num, const char *event,
                               const char *visitor, const char *jkt, int64_t exp, char *token)
{
    return insert(a, gen, num, event, visitor, jkt, exp, token)->token;
}

static const char *redirect_of(gw_server_t *srv, const gw_room_t *room)
{
    return room->s.redirect_url[0] ? room->s.redirect_url : srv->cfg.reserve_url;
}

/* The queue page (no-JavaScript fans reach admission through it too). */
static void reply_page(gw_req_t *r, gw_room_t *room, gw_page_state_t state, int64_t position,
                       const entry_t *e)
{
    gw_page_info_t info = {
        .event = room->event,
        .state = state,
        .position = position,
        .queue_size = gw_watermark_queue_size(room),
        .eta_seconds = position > 0 ? 0 : -1,
        .poll_after_ms = r->srv->cfg.poll_min_ms,
        .admission_token = e ? e->token : NULL,
        .redirect_url = redirect_of(r->srv, room),
        .handoff_post = room->s.handoff_post,
        .langs = gw_server_langs(r->srv),
    };
    gw_settings_brand(&room->s, &info.brand);
    gw_page_queue(r->svc.req, &info);
    gw_req_replied(r);
}

/* JSON answers are written without a tree (cm_text, as gw_queue's queued answers); one
 * that did not fit is a 503, never a cut answer. */
static void reply_text(gw_req_t *r, int code, cm_text_t *t, char *out)
{
    size_t n = cm_text_done(t, out);
    if (n == 0)
        gw_reply_unavailable(r, "writing the answer", cm_err_protocol);
    else
        gw_reply_text(r, code, "application/json", out, n);
}

static void reply_admitted(gw_req_t *r, gw_room_t *room, const char *ticket, const entry_t *e,
                           int code, bool page)
{
    if (page) {
        gw_ticket_set_cookie(r->svc.req, room->event, ticket);
        reply_page(r, room, GW_PAGE_ADMITTED, 0, e);
        return;
    }
    char exp[32];
    cm_format_rfc3339(e->exp * 1000, exp, sizeof(exp));
    const char *redirect = redirect_of(r->srv, room);
    char stack[4096], *out = stack;
    size_t worst = CM_TEXT_JSON_WORST(strlen(room->event) + strlen(ticket) + strlen(e->token) +
                                      strlen(redirect) + strlen(exp)) +
                   256;
    if (worst > sizeof(stack)) /* a long token or redirect URL: the heap, once */
        out = cm_xmalloc(worst);
    cm_text_t t = cm_text_at(out, worst > sizeof(stack) ? worst : sizeof(stack));
    CM_TEXT_LIT(&t, "{\"event\":");
    cm_text_json(&t, room->event);
    CM_TEXT_LIT(&t, ",\"state\":\"admitted\",\"ticket\":");
    cm_text_json(&t, ticket);
    CM_TEXT_LIT(&t, ",\"admission_token\":");
    cm_text_json(&t, e->token);
    CM_TEXT_LIT(&t, ",\"expires_at\":");
    cm_text_json(&t, exp);
    CM_TEXT_LIT(&t, ",\"redirect_url\":");
    cm_text_json(&t, redirect);
    if (room->s.handoff_post)
        CM_TEXT_LIT(&t, ",\"handoff\":\"post\"}");
    else
        CM_TEXT_LIT(&t, ",\"handoff\":\"fragment\"}");
    gw_ticket_set_cookie(r->svc.req, room->event, ticket);
    reply_text(r, code, &t, out);
    if (out != stack)
        free(out);
}

static void reply_expired(gw_req_t *r)
{
    gw_reply_error(r, 410, "admission_expired",
                   "this ticket's admission has expired; join the queue again", NULL);
}

/* A number at the front that may not claim yet (max_active reached, or a race with the
 * watermark): keep it polling at the front. */
static void reply_front(gw_req_t *r, gw_room_t *room, const char *ticket, int code, bool page)
{
    if (page) {
        gw_ticket_set_cookie(r->svc.req, room->event, ticket);
        reply_page(r, room, GW_PAGE_QUEUED, 1, NULL);
        return;
    }
    char body[CM_TEXT_JSON_WORST(CM_IDENT_MAX + GW_TICKET_MAX_LEN) + 256];
    cm_text_t t = cm_text_at(body, sizeof(body));
    CM_TEXT_LIT(&t, "{\"event\":");
    cm_text_json(&t, room->event);
    CM_TEXT_LIT(&t, ",\"state\":\"queued\",\"ticket\":");
    cm_text_json(&t, ticket);
    CM_TEXT_LIT(&t, ",\"position\":1,\"queue_size\":");
    cm_text_i64(&t, gw_watermark_queue_size(room));
    CM_TEXT_LIT(&t, ",\"eta_seconds\":0,\"poll_after_ms\":");
    cm_text_i64(&t, (int64_t)r->srv->cfg.poll_min_ms);
    CM_TEXT_LIT(&t, "}");
    gw_ticket_set_cookie(r->svc.req, room->event, ticket);
    reply_text(r, code, &t, body);
}

static void op_free(admit_op_t *op)
{
    free(op);
}

/* The token record's key: "os:{<event>}:tk:<hex sha256 of the token>" — the reserve's
 * RSV_K_TOKEN (reserve/rsv_rediskeys.h, reserve/lua/prelude.lua), in the event's hash slot so
 * the reserve's hold script can read it under Redis Cluster. */
#define TOKEN_RECORD_KIND "tk:"

static void on_record_set(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    (void)arg;
    /* Nothing waits on it: without the record the reserve verifies the signature. */
    if (err != NULL || cm_redis_reply_type(reply) == CM_REDIS_ERROR)
        cm_log(CM_LOG_DEBUG, "admission token record: %s",
               err ? err : cm_redis_reply_str(reply, NULL));
}

/* Records the token just signed (docs/tokens.md): SET tk:<sha256> 1 PXAT exp, sent before
 * the answer and not waited for. */
static void record_token(gw_server_t *srv, const char *event, const char *token, int64_t exp)
{
    char hash[65], key[CM_IDENT_MAX + 80], pxat[24];
    cm_tls_sha256_hex(token, strlen(token), hash);
    snprintf(key, sizeof(key), "os:{%s}:" TOKEN_RECORD_KIND "%s", event, hash);
    snprintf(pxat, sizeof(pxat), "%" PRId64, exp * 1000);
    const char *argv[] = {"SET", key, "1", "PXAT", pxat};
    if (cm_redis_command(srv->redis, on_record_set, NULL, 5, argv, NULL) != 0)
        cm_log(CM_LOG_DEBUG, "admission token record: Redis not connected");
}

static void on_signed(const char *err, char *token, void *arg)
{
    admit_op_t *op = arg;
    gw_server_t *srv = op->r.srv;
    cm_histogram_observe(srv->m->admit.sign_seconds,
                         (double)(cm_time_mono_ns() - op->sign_start_ns) / 1e9);
    if (err != NULL) {
        gw_reply_unavailable(&op->r, "signing the admission token", err);
        op_free(op);
        return;
    }
    record_token(srv, op->room->event, token, op->claims.exp);
    entry_t *e = insert(srv->admit, op->room->s.gen, op->t.num, op->room->event,
                        gw_ticket_who(&op->t), op->t.cnf_jkt, op->claims.exp, token);
    reply_admitted(&op->r, op->room, op->ticket, e, op->code, op->page);
    op_free(op);
}

/* rec = "<iat>:<exp>:<jti>:<who>" (admit.lua), which must be who's own (a visitor id or a
 * customer id, gw_ticket_who); or the legacy "<iat>:<exp>:<jti>", which names nobody. */
static int parse_record(const char *rec, const char *visitor, cm_jwt_claims_t *c)
{
    int64_t iat, exp;
    char jti[65], owner[GW_CUSTOMER_MAX + 2] = "";
    if (rec == NULL)
        return -1;
    int got = sscanf(rec, "%" SCNd64 ":%" SCNd64 ":%64[^:]:%65s", &iat, &exp, jti, owner);
    if (got < 3 || (got == 4 && strcmp(owner, visitor) != 0))
        return -1;
    c->iat = iat;
    c->nbf = iat;
    c->exp = exp;
    snprintf(c->jti, sizeof(c->jti), "%s", jti);
    return 0;
}

static void on_admit(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    admit_op_t *op = arg;
    gw_server_t *srv = op->r.srv;
    gw_admit_word_t what = err == NULL ? gw_lua_admit_word(reply) : GW_ADMIT_BAD;
    if (what == GW_ADMIT_BAD) {
        if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ERROR)
            cm_log(CM_LOG_WARN, "admit: %s", cm_redis_reply_str(reply, NULL));
        gw_reply_unavailable(&op->r, "admission", err ? err : cm_err_protocol);
        op_free(op);
        return;
    }
    const char *rec = cm_redis_reply_count(reply) > 1
                          ? cm_redis_reply_str(cm_redis_reply_at(reply, 1), NULL)
                          : NULL;
    switch (what) {
    case GW_ADMIT_NEW:
    case GW_ADMIT_EXISTING:
        if (parse_record(rec, gw_ticket_who(&op->t), &op->claims) != 0) {
            gw_reply_unavailable(&op->r, "admission record", cm_err_protocol);
            op_free(op);
            return;
        }
        if (op->claims.exp <= cm_time_wall_ms() / 1000) {
            reply_expired(&op->r);
            op_free(op);
            return;
        }
        cm_counter_inc(what == GW_ADMIT_NEW ? srv->m->admit.admissions
                                            : srv->m->admit.readmissions);
        snprintf(op->claims.iss, sizeof(op->claims.iss), "%s", srv->cfg.issuer);
        snprintf(op->claims.sub, sizeof(op->claims.sub), "%s", gw_ticket_who(&op->t));
        snprintf(op->claims.evt, sizeof(op->claims.evt), "%s", op->room->event);
        snprintf(op->claims.cnf_jkt, sizeof(op->claims.cnf_jkt), "%s", op->t.cnf_jkt); /* gw_dpop */
        snprintf(op->claims.rid, sizeof(op->claims.rid), "%s", cm_access_id(op->r.svc.req));
        op->sign_start_ns = cm_time_mono_ns();
        gw_signer_submit(srv->pool, &op->claims, on_signed, op);
        return;
    case GW_ADMIT_WAIT:
    case GW_ADMIT_NOT_YET:
        reply_front(&op->r, op->room, op->ticket, op->code, op->page);
        break;
    case GW_ADMIT_STOCK_OUT: /* its place is kept while held units may come back */
        if (cm_redis_reply_int(cm_redis_reply_at(reply, 1)) > 0) {
            gw_queue_reply_returns(&op->r, op->room, op->ticket, 1, op->code, op->page);
            break;
        }
        if (op->page)
            reply_page(&op->r, op->room, GW_PAGE_SOLD_OUT, -1, NULL);
        else
            gw_reply_gone(&op->r, true);
        break;
    case GW_ADMIT_SOLD_OUT:
    case GW_ADMIT_CLOSED:
        if (op->page)
            reply_page(&op->r, op->room,
                       what == GW_ADMIT_SOLD_OUT ? GW_PAGE_SOLD_OUT : GW_PAGE_CLOSED, -1, NULL);
        else
            gw_reply_gone(&op->r, what == GW_ADMIT_SOLD_OUT);
        break;
    case GW_ADMIT_UNKNOWN:
    case GW_ADMIT_BAD: /* not here: answered above */
        gw_reply_error(&op->r, 401, "invalid_ticket",
                       "the ticket belongs to a waiting room that no longer exists", NULL);
        break;
    }
    op_free(op);
}

/* The key the poll names for the token (?bind=, the storefront's thumbprint) into jkt,
 * which keeps the ticket's (or "") without one. -1 when bind is there but is not a
 * canonical 43-character thumbprint, or is given twice. */
static int bind_of(cm_req_t *req, char jkt[CM_JWT_JKT_LEN + 1])
{
    const char *raw = cm_http_uri_query(req);
    if (raw == NULL || strstr(raw, GW_ADMIT_BIND_QUERY "=") == NULL)
        return 0;
    struct evkeyvalq q;
    int rc = -1, seen = 0;
    const char *v = NULL;
    if (cm_http_query(req, &q) == 0) {
        for (struct evkeyval *kv = q.tqh_first; kv; kv = kv->next.tqe_next)
            if (strcmp(kv->key, GW_ADMIT_BIND_QUERY) == 0 && ++seen == 1)
                v = kv->value;
        if (seen == 1 && cm_dpop_jkt_valid(v)) {
            snprintf(jkt, CM_JWT_JKT_LEN + 1, "%s", v);
            rc = 0;
        } else if (seen == 0) {
            rc = 0; /* "bind=" inside another parameter's value */
        }
    }
    evhttp_clear_headers(&q);
    return rc;
}

void gw_admit_serve(gw_req_t *r, gw_room_t *room, const gw_ticket_t *ticket,
                    const char *ticket_text, int code, bool page)
{
    gw_server_t *srv = r->srv;
    gw_ticket_t bound = *ticket; /* cnf_jkt: the key the token will carry */
    const gw_ticket_t *t = &bound;
    if (bind_of(r->svc.req, bound.cnf_jkt) != 0) {
        gw_reply_error(r, 400, "invalid_bind",
                       "bind must name one key: its RFC 7638 SHA-256 thumbprint, 43 base64url "
                       "characters",
                       NULL);
        return;
    }
    entry_t *e = lookup(srv->admit, room->s.gen, t->num, room->event, gw_ticket_who(t), t->cnf_jkt);
    if (e != NULL) {
        if (e->exp <= cm_time_wall_ms() / 1000) {
            reply_expired(r);
            return;
        }
        cm_counter_inc(srv->m->admit.readmissions);
        reply_admitted(r, room, ticket_text, e, code, page);
        return;
    }
    admit_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->r = *r;
    op->room = room;
    op->t = *t;
    op->code = code;
    op->page = page;
    snprintf(op->ticket, sizeof(op->ticket), "%s", ticket_text);
    char gen[21], num[24], jti[33];
    unsigned char raw[16];
    gw_rediskeys_t keys;
    const char *argv[GW_K_COUNT + 5];
    char holders[GW_KEY_MAX];
    int argc = gw_rediskeys_argv(room->event, &keys, argv), nkeys = GW_K_COUNT;
    if (room->s.sched.n > 0) { /* KEYS[12]: who redeemed a code for which phase (admit.lua) */
        gw_rediskeys_extra(room->event, GW_KEY_HOLDERS, holders);
        argv[argc++] = holders;
        nkeys++;
    }
    gw_settings_gen_text(room->s.gen, gen);
    snprintf(num, sizeof(num), "%" PRIu64, t->num);
    cm_tls_random(raw, sizeof(raw));
    cm_hex_encode(raw, sizeof(raw), jti);
    argv[argc++] = gen;
    argv[argc++] = num;
    argv[argc++] = gw_ticket_who(t); /* the admission's owner: sub, the active set's member */
    argv[argc++] = jti;
    if (cm_redis_eval(srv->redis, gw_lua()->admit, on_admit, op, nkeys, argc, argv, NULL) != 0) {
        gw_reply_unavailable(&op->r, "admission", cm_err_closed);
        op_free(op);
    }
}

void gw_admit_metrics_register(gw_admit_metrics_t *am, cm_metrics_t *reg)
{
    am->admissions =
        cm_metrics_counter(reg, "onsale_gateway_admissions_total",
                           "admissions claimed through this gateway (first JWT)", NULL);
    am->readmissions = cm_metrics_counter(reg, "onsale_gateway_readmissions_total",
                                          "polls answered with an admission already issued", NULL);
    am->sign_seconds = cm_metrics_histogram(
        reg, "onsale_gateway_sign_seconds", "queueing plus ES256 signing of one admission token",
        NULL, cm_metrics_latency_bounds, cm_metrics_latency_nbounds);
}
