/*
 * cm_dpop — see cm_dpop.h.
 *
 * A proof is judged in the order that costs least first: shape and JSON (jansson,
 * strictly typed), then the thumbprint against the one wanted (one SHA-256), then htm,
 * htu and iat, and only then the ECDSA verification (cm_jwt_es256_verify_jwk, ~70 µs), so
 * a proof of the wrong key or request costs no curve arithmetic. The jti is claimed last,
 * in Redis, by the caller, so that a refused proof leaves nothing behind and a replay is
 * seen by every instance sharing the Redis.
 */
#include "cm_dpop.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"

#define SEGMENT_MAX 768 /* a decoded header or claims segment */
#define SIG_B64     86
#define JTI_MIN     8

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

static bool b64u_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static bool jti_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < JTI_MIN || n > CM_DPOP_JTI_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!b64u_char(s[i]))
            return false;
    return true;
}

static cm_dpop_result_t parse_header(json_t *hdr, cm_dpop_proof_t *out)
{
    json_t *jwk = json_object_get(hdr, "jwk");
    if (!is_str(hdr, "typ", "dpop+jwt") || !is_str(hdr, "alg", "ES256") ||
        json_object_get(hdr, "crit") != NULL || !json_is_object(jwk))
        return CM_DPOP_MALFORMED;
    if (!is_str(jwk, "kty", "EC") || !is_str(jwk, "crv", "P-256") ||
        json_object_get(jwk, "d") != NULL || !copy_str(jwk, "x", out->x, sizeof(out->x)) ||
        !copy_str(jwk, "y", out->y, sizeof(out->y)) ||
        cm_jwt_jwk_thumbprint(out->x, out->y, out->jkt) != 0)
        return CM_DPOP_BAD_KEY;
    return CM_DPOP_OK;
}

static cm_dpop_result_t parse_claims(json_t *c, cm_dpop_proof_t *out)
{
    json_t *iat = json_object_get(c, "iat");
    if (!copy_str(c, "jti", out->jti, sizeof(out->jti)) || !jti_ok(out->jti) ||
        !copy_str(c, "htm", out->htm, sizeof(out->htm)) ||
        !copy_str(c, "htu", out->htu, sizeof(out->htu)) || !json_is_integer(iat))
        return CM_DPOP_MALFORMED;
    out->iat = (int64_t)json_integer_value(iat);
    return CM_DPOP_OK;
}

/* The two dots of a compact JWS whose three parts are non-empty; false otherwise. */
static bool split(const char *text, size_t len, const char **dot1, const char **dot2)
{
    if (text == NULL || len == 0 || len > CM_DPOP_MAX_LEN)
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

/* cm_dpop_parse, and cm_dpop_parse_key without with_claims. */
static cm_dpop_result_t parse(const char *text, size_t len, bool with_claims, cm_dpop_proof_t *out)
{
    const char *dot1, *dot2;
    cm_dpop_result_t r = CM_DPOP_MALFORMED;
    json_t *hdr = NULL, *claims = NULL;
    memset(out, 0, sizeof(*out));
    if (!split(text, len, &dot1, &dot2) || text + len - (dot2 + 1) != SIG_B64)
        goto out;
    hdr = segment_json(text, (size_t)(dot1 - text));
    if (with_claims)
        claims = segment_json(dot1 + 1, (size_t)(dot2 - dot1 - 1));
    if (!json_is_object(hdr) || (with_claims && !json_is_object(claims)))
        goto out;
    if ((r = parse_header(hdr, out)) == CM_DPOP_OK && with_claims)
        r = parse_claims(claims, out);
out:
    if (r != CM_DPOP_OK)
        memset(out, 0, sizeof(*out));
    json_decref(hdr);
    json_decref(claims);
    return r;
}

cm_dpop_result_t cm_dpop_parse(const char *text, size_t len, cm_dpop_proof_t *out)
{
    return parse(text, len, true, out);
}

cm_dpop_result_t cm_dpop_parse_key(const char *text, size_t len, cm_dpop_proof_t *out)
{
    return parse(text, len, false, out);
}

void cm_dpop_jkt_bytes(const char *jkt, unsigned char *out, size_t n)
{
    unsigned char full[33];
    if (n > 32)
        n = 32;
    memset(out, 0, n);
    if (strlen(jkt) == CM_JWT_JKT_LEN && cm_base64url_decode(jkt, CM_JWT_JKT_LEN, full, 33) == 32)
        memcpy(out, full, n);
}

bool cm_dpop_jkt_valid(const char *jkt)
{
    unsigned char full[33];
    char again[CM_JWT_JKT_LEN + 8];
    if (jkt == NULL || strlen(jkt) != CM_JWT_JKT_LEN)
        return false;
    for (size_t i = 0; i < CM_JWT_JKT_LEN; i++)
        if (!b64u_char(jkt[i]))
            return false;
    if (cm_base64url_decode(jkt, CM_JWT_JKT_LEN, full, sizeof(full)) != 32)
        return false;
    cm_base64url_encode(full, 32, again);
    return strcmp(again, jkt) == 0;
}

bool cm_dpop_htu_ok(const char *htu, const cm_dpop_want_t *want)
{
    const char *path = want->path;
    if (path == NULL)
        return false;
    if (want->origin != NULL && want->origin[0] != '\0') {
        size_t olen = strlen(want->origin);
        return strncasecmp(htu, want->origin, olen) == 0 && strcmp(htu + olen, path) == 0;
    }
    size_t skip;
    if (want->host == NULL || want->host[0] == '\0')
        return false;
    if (strncasecmp(htu, "https://", 8) == 0)
        skip = 8;
    else if (want->plain_http && strncasecmp(htu, "http://", 7) == 0)
        skip = 7;
    else
        return false;
    size_t hlen = strlen(want->host);
    return strncasecmp(htu + skip, want->host, hlen) == 0 && strcmp(htu + skip + hlen, path) == 0;
}

cm_dpop_result_t cm_dpop_verify(const char *text, size_t len, const cm_dpop_want_t *want,
                                int64_t now_s, cm_dpop_proof_t *out)
{
    cm_dpop_result_t r = cm_dpop_parse(text, len, out);
    if (r != CM_DPOP_OK)
        return r;
    unsigned char lead[32];
    size_t n = want->jkt_len > 32 ? 32 : want->jkt_len;
    cm_dpop_jkt_bytes(out->jkt, lead, sizeof(lead));
    if (want->jkt == NULL || n == 0 || memcmp(lead, want->jkt, n) != 0)
        return CM_DPOP_WRONG_KEY;
    if (strcmp(out->htm, want->method) != 0 || !cm_dpop_htu_ok(out->htu, want))
        return CM_DPOP_WRONG_TARGET;
    /* compared against iat only: any int64 from the proof, no overflow */
    if (out->iat > now_s + CM_DPOP_WINDOW_S || out->iat < now_s - CM_DPOP_WINDOW_S)
        return CM_DPOP_STALE;
    size_t input_len = len - SIG_B64 - 1; /* cm_dpop_parse checked the signature's size */
    if (!cm_jwt_es256_verify_jwk(out->x, out->y, text, input_len, text + input_len + 1, SIG_B64))
        return CM_DPOP_BAD_SIGNATURE;
    return CM_DPOP_OK;
}

const char *cm_dpop_result_str(cm_dpop_result_t r)
{
    static const char *names[] = {
        [CM_DPOP_OK] = "ok",
        [CM_DPOP_MISSING] = "proof_required",
        [CM_DPOP_MALFORMED] = "malformed",
        [CM_DPOP_BAD_KEY] = "bad_key",
        [CM_DPOP_BAD_SIGNATURE] = "bad_signature",
        [CM_DPOP_WRONG_KEY] = "wrong_key",
        [CM_DPOP_WRONG_TARGET] = "wrong_target",
        [CM_DPOP_STALE] = "stale",
        [CM_DPOP_REPLAYED] = "replayed",
        [CM_DPOP_UNAVAILABLE] = "unavailable",
    };
    return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown";
}

const char *cm_dpop_result_message(cm_dpop_result_t r)
{
    switch (r) {
    case CM_DPOP_OK:
        return "ok";
    case CM_DPOP_MISSING:
        return "this admission token is bound to a key: send a DPoP proof signed by it";
    case CM_DPOP_MALFORMED:
        return "the DPoP proof is not a compact ES256 JWS with typ dpop+jwt, a jwk, and jti, "
               "htm, htu and iat claims";
    case CM_DPOP_BAD_KEY:
        return "the DPoP proof's jwk is not an EC P-256 public key";
    case CM_DPOP_BAD_SIGNATURE:
        return "the DPoP proof's signature does not verify";
    case CM_DPOP_WRONG_KEY:
        return "the DPoP proof is signed by another key than the one this token is bound to";
    case CM_DPOP_WRONG_TARGET:
        return "the DPoP proof's htm and htu do not name this request";
    case CM_DPOP_STALE:
        return "the DPoP proof's iat is too far from the server's clock (Date header)";
    case CM_DPOP_REPLAYED:
        return "this DPoP proof was used already: sign a new one (fresh jti) per request";
    case CM_DPOP_UNAVAILABLE:
        return "the proof could not be recorded";
    }
    return "refused";
}

typedef struct claim_op {
    cm_dpop_claim_cb cb;
    void *arg;
} claim_op_t;

static void on_claim(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    claim_op_t *op = arg;
    cm_dpop_result_t r = CM_DPOP_UNAVAILABLE;
    if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_NIL)
        r = CM_DPOP_REPLAYED; /* SET NX found the jti */
    else if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_STATUS)
        r = CM_DPOP_OK;
    else
        cm_log(CM_LOG_WARN, "dpop: recording a jti: %s",
               err ? err : cm_redis_reply_str(reply, NULL));
    cm_dpop_claim_cb cb = op->cb;
    void *cb_arg = op->arg;
    free(op);
    cb(r, cb_arg);
}

void cm_dpop_claim(cm_redis_t *redis, const char *event, const char *jti, cm_dpop_claim_cb cb,
                   void *arg)
{
    char key[CM_IDENT_MAX + CM_DPOP_JTI_MAX + 16], px[24];
    snprintf(key, sizeof(key), "os:{%s}:dp:%s", event, jti); /* the event's hash slot */
    snprintf(px, sizeof(px), "%d", 2 * CM_DPOP_WINDOW_S * 1000 + 10000);
    const char *argv[] = {"SET", key, "1", "NX", "PX", px};
    claim_op_t *op = cm_xcalloc(1, sizeof(*op));
    *op = (claim_op_t){cb, arg};
    if (redis == NULL || cm_redis_command(redis, on_claim, op, 6, argv, NULL) != 0) {
        free(op);
        cb(CM_DPOP_UNAVAILABLE, arg);
    }
}
