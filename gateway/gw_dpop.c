/*
 * gw_dpop — see gw_dpop.h.
 *
 * The proof itself is judged by common/cm_dpop (shared with the reserve, which checks
 * the proofs of bound admission tokens); this file adds what is the gateway's: the
 * ticket's key, the request's proof (header or query), the jti claim's metrics and the
 * per-room counts of the dashboard.
 */
#include "gw_dpop.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_http.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "gw_metrics.h"

/* ---- pure: the shared verifier with the ticket's key ---- */

gw_dpop_result_t gw_dpop_parse(const char *text, size_t len, gw_dpop_proof_t *out)
{
    return cm_dpop_parse(text, len, out);
}

gw_dpop_result_t gw_dpop_parse_key(const char *text, size_t len, gw_dpop_proof_t *out)
{
    return cm_dpop_parse_key(text, len, out);
}

void gw_dpop_jkt_bytes(const char *jkt, unsigned char out[GW_TICKET_JKT_LEN])
{
    cm_dpop_jkt_bytes(jkt, out, GW_TICKET_JKT_LEN);
}

bool gw_dpop_htu_ok(const char *htu, const char *host, const char *path, bool plain_http)
{
    cm_dpop_want_t w = {.host = host, .path = path, .plain_http = plain_http};
    return cm_dpop_htu_ok(htu, &w);
}

gw_dpop_result_t gw_dpop_verify(const char *text, size_t len, const gw_dpop_want_t *want,
                                int64_t now_s, gw_dpop_proof_t *out)
{
    cm_dpop_want_t w = {
        .method = want->method,
        .host = want->host,
        .path = want->path,
        .plain_http = want->plain_http,
        .jkt = want->ticket->bound ? want->ticket->jkt : NULL,
        .jkt_len = GW_TICKET_JKT_LEN,
    };
    return cm_dpop_verify(text, len, &w, now_s, out);
}

const char *gw_dpop_result_str(gw_dpop_result_t r)
{
    return cm_dpop_result_str(r);
}

const char *gw_dpop_result_message(gw_dpop_result_t r)
{
    if (r == GW_DPOP_MISSING) /* the gateway's own words: a ticket, not a token */
        return "this waiting room binds tickets to the browser that joined: send a DPoP proof "
               "signed by the ticket's key";
    if (r == GW_DPOP_WRONG_KEY)
        return "the DPoP proof is signed by another key than the one this ticket was given to";
    return cm_dpop_result_message(r);
}

/* ---- loop thread: the request's proof and the jti claim ---- */

const char *gw_dpop_of_request(cm_req_t *req, bool query_too, char *buf, size_t buflen, size_t *len)
{
    const char *h = cm_http_header(req, "DPoP");
    if (h != NULL) {
        *len = strlen(h);
        return h;
    }
    if (!query_too || cm_http_uri_query(req) == NULL)
        return NULL;
    struct evkeyvalq q;
    const char *found = NULL;
    if (cm_http_query(req, &q) == 0) {
        const char *v = evhttp_find_header(&q, GW_DPOP_QUERY);
        if (v != NULL && strlen(v) < buflen) {
            *len = strlen(v);
            memcpy(buf, v, *len + 1);
            found = buf;
        }
    }
    evhttp_clear_headers(&q);
    return found;
}

/* Per-room counts for the dashboard: a small table under one mutex, touched once per
 * admitting poll or refusal (never on a queued poll), so the lock is not on a hot path. */
typedef struct room_count {
    char event[CM_IDENT_MAX + 1]; /* "" = free; the last slot counts every other room */
    uint64_t verified, refused;
} room_count_t;

static pthread_mutex_t counts_mu = PTHREAD_MUTEX_INITIALIZER;
static room_count_t counts[GW_DPOP_ROOMS_COUNTED];

/* The slot of event, taken if new; the last slot when the table is full. Under counts_mu. */
static room_count_t *slot_of(const char *event, bool take)
{
    for (int i = 0; i < GW_DPOP_ROOMS_COUNTED - 1; i++) {
        if (strcmp(counts[i].event, event) == 0)
            return &counts[i];
        if (counts[i].event[0] == '\0') {
            if (!take)
                return NULL;
            snprintf(counts[i].event, sizeof(counts[i].event), "%s", event);
            return &counts[i];
        }
    }
    return take ? &counts[GW_DPOP_ROOMS_COUNTED - 1] : NULL;
}

static void count(const char *event, bool ok)
{
    pthread_mutex_lock(&counts_mu);
    room_count_t *c = slot_of(event, true);
    if (ok)
        c->verified++;
    else
        c->refused++;
    pthread_mutex_unlock(&counts_mu);
}

void gw_dpop_counts(const char *event, uint64_t *verified, uint64_t *refused)
{
    pthread_mutex_lock(&counts_mu);
    const room_count_t *c = slot_of(event, false);
    *verified = c ? c->verified : 0;
    *refused = c ? c->refused : 0;
    pthread_mutex_unlock(&counts_mu);
}

void gw_dpop_count_refused(gw_server_t *srv, const char *event)
{
    cm_counter_inc(srv->m->dpop.refused);
    if (event != NULL)
        count(event, false);
}

typedef struct claim_op {
    gw_server_t *srv;
    gw_dpop_cb cb;
    void *arg;
    char event[CM_IDENT_MAX + 1];
} claim_op_t;

static void finish(gw_server_t *srv, const char *event, gw_dpop_result_t r, gw_dpop_cb cb,
                   void *arg)
{
    if (r == GW_DPOP_OK) {
        cm_counter_inc(srv->m->dpop.verified);
        count(event, true);
    } else if (r != GW_DPOP_UNAVAILABLE) {
        gw_dpop_count_refused(srv, event);
    }
    cb(r, arg);
}

static void on_claim(cm_dpop_result_t r, void *arg)
{
    claim_op_t *op = arg;
    finish(op->srv, op->event, r, op->cb, op->arg);
    free(op);
}

void gw_dpop_check(gw_server_t *srv, cm_req_t *req, const char *event, const char *proof,
                   size_t len, gw_ticket_t *t, gw_dpop_cb cb, void *arg)
{
    gw_dpop_proof_t p;
    gw_dpop_want_t want = {
        .method = cm_http_method(req) == CM_HTTP_POST ? "POST" : "GET",
        .host = cm_http_header(req, "Host"),
        .path = cm_http_uri_path(req),
        .plain_http = srv->cfg.server.plain_http,
        .ticket = t,
    };
    gw_dpop_result_t r = proof == NULL
                             ? GW_DPOP_MISSING
                             : gw_dpop_verify(proof, len, &want, cm_time_wall_ms() / 1000, &p);
    if (r != GW_DPOP_OK) {
        finish(srv, event, r, cb, arg);
        return;
    }
    snprintf(t->cnf_jkt, sizeof(t->cnf_jkt), "%s", p.jkt);
    claim_op_t *op = cm_xcalloc(1, sizeof(*op));
    *op = (claim_op_t){srv, cb, arg, ""};
    snprintf(op->event, sizeof(op->event), "%s", event);
    cm_dpop_claim(srv->redis, event, p.jti, on_claim, op);
}

void gw_dpop_metrics_register(gw_dpop_metrics_t *dm, cm_metrics_t *reg)
{
    dm->verified = cm_metrics_counter(reg, "onsale_gateway_dpop_verified_total",
                                      "DPoP proofs verified on admitting polls", NULL);
    dm->refused =
        cm_metrics_counter(reg, "onsale_gateway_dpop_refused_total",
                           "admitting polls and joins refused for a missing, invalid, wrong-key "
                           "or replayed DPoP proof",
                           NULL);
}
