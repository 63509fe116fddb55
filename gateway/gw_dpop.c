/*
 * gw_dpop — see gw_dpop.h.
 *
 * The proof is judged in the order that costs least first: shape and JSON (jansson,
 * strictly typed), then the thumbprint against the ticket's (one SHA-256), then htm, htu
 * and iat, and only then the ECDSA verification (cm_jwt_es256_verify_jwk, ~70 µs), so a
 * proof of the wrong key or request costs no curve arithmetic. The jti is claimed last,
 * in Redis, so that a refused proof leaves nothing behind and a replay is seen by every
 * gateway sharing the Redis.
 */
#include "gw_dpop.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cm_err.h"
#include "cm_http.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"

#define SEGMENT_MAX 768 /* a decoded header or claims segment */
#define COORD_B64   43
#define SIG_B64     86
#define JTI_MIN     8

/* ---- pure: parse and verify ---- */

static json_t *segment_json(const char *s, size_t n)
{
    unsigned char buf[SEGMENT_MAX];
    long got = cm_base64url_decode(s, n, buf, sizeof(buf));
    if (got <= 0)
        return NULL;
    return json_loadb((const char *)buf, (size_t)got, JSON_REJECT_DUPLICATES, NULL);
}

/* A string member of o into dst (1 to dstlen-1 bytes, no NUL inside). */
static bool copy_str(json_t *o, const char *name, char *dst, size_t dstlen)
{
    json_t *v = json_object_get(o, name);
    size_t n = json_string_length(v);
    if (!json_is_string(v) || n == 0 || n >= dstlen || strlen(json_string_value(v)) != n)
        return false;
    memcpy(dst, json_string_value(v), n + 1);
    return true;
}

static bool is_str(json_t *o, const char *name, const char *want)
{
    const char *v = json_string_value(json_object_get(o, name));
    return v != NULL && strcmp(v, want) == 0;
}

static bool jti_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < JTI_MIN || n > GW_DPOP_JTI_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

static gw_dpop_result_t parse_header(json_t *hdr, gw_dpop_proof_t *out)
{
    json_t *jwk = json_object_get(hdr, "jwk");
    if (!is_str(hdr, "typ", "dpop+jwt") || !is_str(hdr, "alg", "ES256") ||
        json_object_get(hdr, "crit") != NULL || !json_is_object(jwk))
        return GW_DPOP_MALFORMED;
    if (!is_str(jwk, "kty", "EC") || !is_str(jwk, "crv", "P-256") ||
        json_object_get(jwk, "d") != NULL || !copy_str(jwk, "x", out->x, sizeof(out->x)) ||
        !copy_str(jwk, "y", out->y, sizeof(out->y)) ||
        cm_jwt_jwk_thumbprint(out->x, out->y, out->jkt) != 0)
        return GW_DPOP_BAD_KEY;
    return GW_DPOP_OK;
}

static gw_dpop_result_t parse_claims(json_t *c, gw_dpop_proof_t *out)
{
    json_t *iat = json_object_get(c, "iat");
    if (!copy_str(c, "jti", out->jti, sizeof(out->jti)) || !jti_ok(out->jti) ||
        !copy_str(c, "htm", out->htm, sizeof(out->htm)) ||
        !copy_str(c, "htu", out->htu, sizeof(out->htu)) || !json_is_integer(iat))
        return GW_DPOP_MALFORMED;
    out->iat = (int64_t)json_integer_value(iat);
    return GW_DPOP_OK;
}

/* The two dots of a compact JWS whose three parts are non-empty; false otherwise. */
static bool split(const char *text, size_t len, const char **dot1, const char **dot2)
{
    if (text == NULL || len == 0 || len > GW_DPOP_MAX_LEN)
        return false;
    *dot1 = memchr(text, '.', len);
    if (*dot1 == NULL || *dot1 == text)
        return false;
    size_t rest = len - (size_t)(*dot1 + 1 - text);
    *dot2 = memchr(*dot1 + 1, '.', rest);
    if (*dot2 == NULL || *dot2 == *dot1 + 1 || *dot2 + 1 == text + len)
        return false;
    return memchr(*dot2 + 1, '.', len - (size_t)(*dot2 + 1 - text)) == NULL;
}

/* gw_dpop_parse, and gw_dpop_parse_key without with_claims. */
static gw_dpop_result_t parse(const char *text, size_t len, bool with_claims, gw_dpop_proof_t *out)
{
    const char *dot1, *dot2;
    gw_dpop_result_t r = GW_DPOP_MALFORMED;
    json_t *hdr = NULL, *claims = NULL;
    memset(out, 0, sizeof(*out));
    if (!split(text, len, &dot1, &dot2) || text + len - (dot2 + 1) != SIG_B64)
        goto out;
    hdr = segment_json(text, (size_t)(dot1 - text));
    if (with_claims)
        claims = segment_json(dot1 + 1, (size_t)(dot2 - dot1 - 1));
    if (!json_is_object(hdr) || (with_claims && !json_is_object(claims)))
        goto out;
    if ((r = parse_header(hdr, out)) == GW_DPOP_OK && with_claims)
        r = parse_claims(claims, out);
out:
    if (r != GW_DPOP_OK)
        memset(out, 0, sizeof(*out));
    json_decref(hdr);
    json_decref(claims);
    return r;
}

gw_dpop_result_t gw_dpop_parse(const char *text, size_t len, gw_dpop_proof_t *out)
{
    return parse(text, len, true, out);
}

gw_dpop_result_t gw_dpop_parse_key(const char *text, size_t len, gw_dpop_proof_t *out)
{
    return parse(text, len, false, out);
}

void gw_dpop_jkt_bytes(const char *jkt, unsigned char out[GW_TICKET_JKT_LEN])
{
    unsigned char full[33];
    memset(out, 0, GW_TICKET_JKT_LEN);
    if (strlen(jkt) == CM_JWT_JKT_LEN && cm_base64url_decode(jkt, CM_JWT_JKT_LEN, full, 33) == 32)
        memcpy(out, full, GW_TICKET_JKT_LEN);
}

bool gw_dpop_htu_ok(const char *htu, const char *host, const char *path, bool plain_http)
{
    size_t skip;
    if (host == NULL || path == NULL || host[0] == '\0')
        return false;
    if (strncasecmp(htu, "https://", 8) == 0)
        skip = 8;
    else if (plain_http && strncasecmp(htu, "http://", 7) == 0)
        skip = 7;
    else
        return false;
    size_t hlen = strlen(host);
    return strncasecmp(htu + skip, host, hlen) == 0 && strcmp(htu + skip + hlen, path) == 0;
}

gw_dpop_result_t gw_dpop_verify(const char *text, size_t len, const gw_dpop_want_t *want,
                                int64_t now_s, gw_dpop_proof_t *out)
{
    gw_dpop_result_t r = gw_dpop_parse(text, len, out);
    if (r != GW_DPOP_OK)
        return r;
    unsigned char lead[GW_TICKET_JKT_LEN];
    gw_dpop_jkt_bytes(out->jkt, lead);
    if (!want->ticket->bound || memcmp(lead, want->ticket->jkt, GW_TICKET_JKT_LEN) != 0)
        return GW_DPOP_WRONG_KEY;
    if (strcmp(out->htm, want->method) != 0 ||
        !gw_dpop_htu_ok(out->htu, want->host, want->path, want->plain_http))
        return GW_DPOP_WRONG_TARGET;
    /* compared against iat only: any int64 from the proof, no overflow */
    if (out->iat > now_s + GW_DPOP_WINDOW_S || out->iat < now_s - GW_DPOP_WINDOW_S)
        return GW_DPOP_STALE;
    size_t input_len = len - SIG_B64 - 1; /* gw_dpop_parse checked the signature's size */
    if (!cm_jwt_es256_verify_jwk(out->x, out->y, text, input_len, text + input_len + 1, SIG_B64))
        return GW_DPOP_BAD_SIGNATURE;
    return GW_DPOP_OK;
}

const char *gw_dpop_result_str(gw_dpop_result_t r)
{
    static const char *names[] = {
        [GW_DPOP_OK] = "ok",
        [GW_DPOP_MISSING] = "proof_required",
        [GW_DPOP_MALFORMED] = "malformed",
        [GW_DPOP_BAD_KEY] = "bad_key",
        [GW_DPOP_BAD_SIGNATURE] = "bad_signature",
        [GW_DPOP_WRONG_KEY] = "wrong_key",
        [GW_DPOP_WRONG_TARGET] = "wrong_target",
        [GW_DPOP_STALE] = "stale",
        [GW_DPOP_REPLAYED] = "replayed",
        [GW_DPOP_UNAVAILABLE] = "unavailable",
    };
    return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown";
}

const char *gw_dpop_result_message(gw_dpop_result_t r)
{
    switch (r) {
    case GW_DPOP_OK:
        return "ok";
    case GW_DPOP_MISSING:
        return "this waiting room binds tickets to the browser that joined: send a DPoP proof "
               "signed by the ticket's key";
    case GW_DPOP_MALFORMED:
        return "the DPoP proof is not a compact ES256 JWS with typ dpop+jwt, a jwk, and jti, "
               "htm, htu and iat claims";
    case GW_DPOP_BAD_KEY:
        return "the DPoP proof's jwk is not an EC P-256 public key";
    case GW_DPOP_BAD_SIGNATURE:
        return "the DPoP proof's signature does not verify";
    case GW_DPOP_WRONG_KEY:
        return "the DPoP proof is signed by another key than the one this ticket was given to";
    case GW_DPOP_WRONG_TARGET:
        return "the DPoP proof's htm and htu do not name this request";
    case GW_DPOP_STALE:
        return "the DPoP proof's iat is too far from the server's clock (Date header)";
    case GW_DPOP_REPLAYED:
        return "this DPoP proof was used already: sign a new one (fresh jti) per request";
    case GW_DPOP_UNAVAILABLE:
        return "the proof could not be recorded";
    }
    return "refused";
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
    cm_counter_inc(srv->m.dpop_refused);
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
        cm_counter_inc(srv->m.dpop_verified);
        count(event, true);
    } else if (r != GW_DPOP_UNAVAILABLE) {
        gw_dpop_count_refused(srv, event);
    }
    cb(r, arg);
}

static void on_claim(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    claim_op_t *op = arg;
    gw_dpop_result_t r = GW_DPOP_UNAVAILABLE;
    if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_NIL)
        r = GW_DPOP_REPLAYED; /* SET NX found the jti */
    else if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_STATUS)
        r = GW_DPOP_OK;
    else
        cm_log(CM_LOG_WARN, "dpop: recording a jti: %s",
               err ? err : cm_redis_reply_str(reply, NULL));
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
    char key[CM_IDENT_MAX + GW_DPOP_JTI_MAX + 16], px[24];
    snprintf(key, sizeof(key), "os:{%s}:dp:%s", event, p.jti); /* the event's hash slot */
    snprintf(px, sizeof(px), "%d", 2 * GW_DPOP_WINDOW_S * 1000 + 10000);
    const char *argv[] = {"SET", key, "1", "NX", "PX", px};
    claim_op_t *op = cm_xcalloc(1, sizeof(*op));
    *op = (claim_op_t){srv, cb, arg, ""};
    snprintf(op->event, sizeof(op->event), "%s", event);
    if (cm_redis_command(srv->redis, on_claim, op, 6, argv, NULL) != 0) {
        free(op);
        finish(srv, event, GW_DPOP_UNAVAILABLE, cb, arg);
    }
}
