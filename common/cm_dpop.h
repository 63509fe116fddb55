/*
 * cm_dpop — proofs of possession of a key (DPoP, RFC 9449), as both services check them.
 *
 * A client sends, in the DPoP header, a compact JWS signed with ES256 by an EC P-256 key
 * whose public half is in its protected header:
 * {"typ":"dpop+jwt","alg":"ES256","jwk":{"kty":"EC","crv":"P-256","x":…,"y":…}} over
 * {"jti":…,"htm":…,"htu":…,"iat":…}. A verifier knows the key the proof must come from
 * by its RFC 7638 thumbprint (the gateway: the leading bytes a bound ticket carries; the
 * reserve: an admission token's cnf.jkt) and checks the signature, this request's method
 * and URL, and iat within CM_DPOP_WINDOW_S of its clock; then it claims the jti once in
 * Redis (cm_dpop_claim) so a proof answers one request only.
 *
 * The parsers and checks are pure functions, safe from any thread, unit-tested and
 * fuzzed (tests/fuzz/fuzz_dpop.c). cm_dpop_claim is for the loop thread of its Redis.
 */
#ifndef CM_DPOP_H
#define CM_DPOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_jwt.h"
#include "cm_redis.h"

#define CM_DPOP_MAX_LEN  1024 /* a proof's text; ours are ~450 bytes */
#define CM_DPOP_WINDOW_S 60   /* |iat - now| allowed, seconds */
#define CM_DPOP_JTI_MAX  64
#define CM_DPOP_HTU_MAX  512

typedef enum {
    CM_DPOP_OK = 0,
    CM_DPOP_MISSING,       /* no proof where one is required */
    CM_DPOP_MALFORMED,     /* not a compact JWS of a proof's shape, or a bad claim */
    CM_DPOP_BAD_KEY,       /* the jwk is not an EC P-256 public key */
    CM_DPOP_BAD_SIGNATURE, /* the signature does not verify under the jwk */
    CM_DPOP_WRONG_KEY,     /* signed by a key other than the one the credential is bound to */
    CM_DPOP_WRONG_TARGET,  /* htm or htu name another request */
    CM_DPOP_STALE,         /* iat outside the window */
    CM_DPOP_REPLAYED,      /* its jti was used already */
    CM_DPOP_UNAVAILABLE,   /* Redis could not record the jti */
} cm_dpop_result_t;

typedef struct cm_dpop_proof {
    char x[44], y[44];             /* the jwk's coordinates, base64url */
    char jkt[CM_JWT_JKT_LEN + 1];  /* its RFC 7638 thumbprint */
    char jti[CM_DPOP_JTI_MAX + 1]; /* [A-Za-z0-9_-], 8 to 64 characters */
    char htm[8];                   /* "GET", "POST", "DELETE" */
    char htu[CM_DPOP_HTU_MAX];     /* scheme://authority/path, no query or fragment */
    int64_t iat;
} cm_dpop_proof_t;

/** What a proof must name: the request it comes with and the key. Borrowed strings. */
typedef struct cm_dpop_want {
    const char *method;       /* "GET" / "POST" / … */
    const char *origin;       /* "scheme://authority" the service is reached at, compared without
                                 case; NULL or "": https:// (or http:// with plain_http) + host */
    const char *host;         /* the Host header, as sent (used when origin is not set) */
    const char *path;         /* the request path, as sent, without the query */
    bool plain_http;          /* the service speaks plain HTTP (tests): htu may be http:// */
    const unsigned char *jkt; /* the thumbprint's leading jkt_len bytes (1 to 32) the
                                 proof's key must have; NULL: no key is right */
    size_t jkt_len;
} cm_dpop_want_t;

/**
 * Parses text (len bytes, need not be NUL-terminated): three canonical base64url parts,
 * the header (typ dpop+jwt, alg ES256, an EC P-256 jwk, no private member "d"), the
 * claims (jti, htm, htu strings, iat integer) and the thumbprint. No signature check.
 * CM_DPOP_OK with *out filled, CM_DPOP_MALFORMED or CM_DPOP_BAD_KEY.
 */
cm_dpop_result_t cm_dpop_parse(const char *text, size_t len, cm_dpop_proof_t *out);

/** The key alone: cm_dpop_parse's checks of the shape, the header and the thumbprint,
 *  not the claims (one JSON parse less). Fills out's x, y and jkt only. */
cm_dpop_result_t cm_dpop_parse_key(const char *text, size_t len, cm_dpop_proof_t *out);

/**
 * cm_dpop_parse, then the key against want->jkt, htm and htu against want, iat within
 * CM_DPOP_WINDOW_S of now_s, and last the signature (~70 µs: one ECDSA verification).
 * Not the jti (cm_dpop_claim records it).
 */
cm_dpop_result_t cm_dpop_verify(const char *text, size_t len, const cm_dpop_want_t *want,
                                int64_t now_s, cm_dpop_proof_t *out);

/** The first n (at most 32) bytes of a base64url thumbprint into out; zeros when jkt is
 *  not a 43-character thumbprint. */
void cm_dpop_jkt_bytes(const char *jkt, unsigned char *out, size_t n);

/** True when jkt is a thumbprint's canonical form: 43 base64url characters that decode
 *  to 32 bytes and encode back the same (what a bind parameter must be). */
bool cm_dpop_jkt_valid(const char *jkt);

/** True when htu is exactly the origin want names followed by want->path. */
bool cm_dpop_htu_ok(const char *htu, const cm_dpop_want_t *want);

/** A short snake_case name ("bad_signature", …) for logs, metrics and error bodies. */
const char *cm_dpop_result_str(cm_dpop_result_t r);

/** A sentence for the error body of a refused proof. */
const char *cm_dpop_result_message(cm_dpop_result_t r);

/** CM_DPOP_OK, CM_DPOP_REPLAYED or CM_DPOP_UNAVAILABLE; runs once on the loop thread. */
typedef void (*cm_dpop_claim_cb)(cm_dpop_result_t r, void *arg);

/**
 * Records jti as used: SET os:{event}:dp:<jti> 1 NX PX <twice the window + 10 s>, a key
 * in the event's hash slot (so it works on the cluster) that both services share, so a
 * proof spent on one is spent on the other. cb runs exactly once, possibly from inside
 * this call (CM_DPOP_UNAVAILABLE when Redis is not connected).
 */
void cm_dpop_claim(cm_redis_t *redis, const char *event, const char *jti, cm_dpop_claim_cb cb,
                   void *arg);

#endif
