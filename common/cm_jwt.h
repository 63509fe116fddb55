/*
 * cm_jwt — admission tokens: ES256 JWTs signed by the gateway, verified by reserve.
 *
 * Verification pins the algorithm: a token whose header says anything but ES256
 * (none, HS256 keyed with the public key PEM, RS256, …) is rejected before any key
 * is used, and the key is chosen by `kid` from a keyset of EC P-256 public keys
 * only. libjwt does the signature and base64url work; OpenSSL EC calls are used
 * only to turn keys into JWKS and back. Pure functions: no event loop, safe from
 * any thread once the keyset or signer is built (they are read-only afterwards).
 */
#ifndef CM_JWT_H
#define CM_JWT_H

#include <stddef.h>
#include <stdint.h>

#define CM_JWT_AUDIENCE "onsale-reserve"

typedef struct cm_jwt_keyset cm_jwt_keyset_t;
typedef struct cm_jwt_signer cm_jwt_signer_t;

/** Claims of an admission token (API.md). Strings are NUL-terminated, truncated never: a
 *  claim longer than its field makes the token malformed. */
typedef struct cm_jwt_claims {
    char iss[128];
    char sub[128]; /* visitor id: the buyer */
    char evt[65];  /* event id */
    char jti[65];
    char kid[65];          /* from the header (filled by verify; sign uses the signer's kid) */
    int64_t iat, nbf, exp; /* seconds since the epoch */
} cm_jwt_claims_t;

typedef enum {
    CM_JWT_OK = 0,
    CM_JWT_MALFORMED,     /* not three base64url parts, bad JSON, missing/oversized claim */
    CM_JWT_BAD_ALG,       /* header alg is not ES256 */
    CM_JWT_UNKNOWN_KID,   /* no key with that kid (or no kid and more than one key) */
    CM_JWT_BAD_SIGNATURE, /* signature does not verify */
    CM_JWT_BAD_AUDIENCE,  /* aud missing or not the expected audience */
    CM_JWT_NOT_YET_VALID, /* nbf (minus leeway) is in the future */
    CM_JWT_EXPIRED,       /* exp (plus leeway) has passed — claims are still filled */
} cm_jwt_result_t;

/** Empty keyset; NULL never (aborts on OOM). */
cm_jwt_keyset_t *cm_jwt_keyset_new(void);
void cm_jwt_keyset_free(cm_jwt_keyset_t *ks);

/**
 * Adds an EC P-256 public key given as PEM ("PUBLIC KEY"). kid NULL means the RFC 7638
 * JWK thumbprint (base64url SHA-256), which is also what cm_jwt_signer_new uses by
 * default, so both sides agree without configuration. A private key PEM is accepted
 * too (its public half is added). Returns 0, or -1 with a message in err.
 */
__attribute__((warn_unused_result)) int cm_jwt_keyset_add_pem(cm_jwt_keyset_t *ks, const char *kid,
                                                              const char *pem, size_t len,
                                                              char *err, size_t errlen);

/** Adds every EC P-256 key of a JWKS document ({"keys":[{kty,crv,x,y,kid},…]}). 0 / -1. */
__attribute__((warn_unused_result)) int
cm_jwt_keyset_add_jwks(cm_jwt_keyset_t *ks, const char *json, size_t len, char *err, size_t errlen);

/** Loads a file that is either a JWKS document or one or more PEM keys. 0 / -1. */
__attribute__((warn_unused_result)) int
cm_jwt_keyset_load_file(cm_jwt_keyset_t *ks, const char *path, char *err, size_t errlen);

/** Number of keys. */
size_t cm_jwt_keyset_count(const cm_jwt_keyset_t *ks);

/** The keyset as a JWKS document (kty, crv, x, y, kid, alg, use); caller frees. */
char *cm_jwt_keyset_jwks(const cm_jwt_keyset_t *ks);

/**
 * Verifies token (len bytes, need not be NUL-terminated) against ks: alg pinned to
 * ES256, key by kid, signature, aud == audience, nbf and exp against now_s with
 * leeway_s. On CM_JWT_OK and CM_JWT_EXPIRED every claim in *out is filled (sub, evt
 * and jti must be present and non-empty or the token is CM_JWT_MALFORMED).
 */
cm_jwt_result_t cm_jwt_verify(const cm_jwt_keyset_t *ks, const char *token, size_t len,
                              const char *audience, int64_t now_s, int64_t leeway_s,
                              cm_jwt_claims_t *out);

/** A short snake_case reason for logs and metrics labels ("bad_alg", "expired", …). */
const char *cm_jwt_result_str(cm_jwt_result_t r);

/**
 * Signer from an EC P-256 private key PEM. kid NULL means the RFC 7638 thumbprint of its
 * public key. Returns NULL with a message in err.
 */
cm_jwt_signer_t *cm_jwt_signer_new(const char *kid, const char *pem, size_t len, char *err,
                                   size_t errlen);
void cm_jwt_signer_free(cm_jwt_signer_t *s);
const char *cm_jwt_signer_kid(const cm_jwt_signer_t *s);

/**
 * Signs claims (iss, sub, evt, jti, iat, nbf, exp; kid from the signer) with ES256 and
 * aud = audience. Returns a heap string the caller frees, or NULL on failure.
 * Thread-safe for concurrent calls on one signer.
 */
char *cm_jwt_sign(const cm_jwt_signer_t *s, const cm_jwt_claims_t *claims, const char *audience);

#endif
