/*
 * cm_jwt — admission tokens: ES256 JWTs signed by the gateway, verified by reserve.
 *
 * Verification pins the algorithm: a token whose header says anything but ES256
 * (none, HS256 keyed with the public key PEM, RS256, …) is rejected before any key
 * is used, and the key is chosen by `kid` from a keyset of EC P-256 public keys
 * only. Keys are parsed once into EVP_PKEYs; signing and verifying go through
 * OpenSSL's EVP_PKEY_sign/verify on the SHA-256 digest of the signing input, with the
 * JOSE raw R||S signature converted to and from DER; the header and claims are JSON
 * (jansson) in base64url (cm_parse). libjwt is not used.
 *
 * Threads: pure functions with no event loop. A keyset or signer is built on one
 * thread; afterwards every function taking it as const may be called from any number
 * of threads at once (each key keeps a small mutex-protected pool of EVP_PKEY_CTXs, so
 * concurrent callers never share one). A keyset is reference-counted so workers can
 * share it and a reload can replace it while verifications still use the old one.
 */
#ifndef CM_JWT_H
#define CM_JWT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CM_JWT_AUDIENCE "onsale-reserve"
#define CM_JWT_JKT_LEN  43 /* an RFC 7638 SHA-256 thumbprint in base64url */
#define CM_JWT_RID_MAX  64 /* CM_ACCESS_ID_MAX: a request id (cm_access.h) */

typedef struct cm_jwt_keyset cm_jwt_keyset_t;
typedef struct cm_jwt_signer cm_jwt_signer_t;

/** Claims of an admission token (docs/api.md). Strings are NUL-terminated, truncated never: a
 *  claim longer than its field makes the token malformed. */
typedef struct cm_jwt_claims {
    char iss[128];
    char sub[128]; /* visitor id: the buyer */
    char evt[65];  /* event id */
    char jti[65];
    char kid[65];          /* from the header (filled by verify; sign uses the signer's kid) */
    int64_t iat, nbf, exp; /* seconds since the epoch */
    char cnf_jkt[CM_JWT_JKT_LEN + 1]; /* cnf.jkt (RFC 9449): the thumbprint of the key the
                                         token is bound to; "" = not bound, no cnf written */
    char rid[CM_JWT_RID_MAX + 1];     /* the request id of the poll that got the token signed
                                         (docs/tokens.md); "" = none. Optional and advisory:
                                         verify fills it only when it is a sane request id
                                         (cm_access_pick_id) and ignores any other value */
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
    CM_JWT_BAD_ISSUER,    /* iss missing or not the expected issuer */
    CM_JWT_TOO_LONG,      /* exp - iat (or exp - now) exceeds the maximum lifetime */
} cm_jwt_result_t;

/** What a verifier accepts. */
typedef struct cm_jwt_policy {
    const char *audience;   /* aud must contain it; NULL = CM_JWT_AUDIENCE */
    const char *issuer;     /* iss must equal it; NULL = not checked */
    int64_t leeway_s;       /* clock skew allowed on nbf and exp (clamped to 0..86400) */
    int64_t max_lifetime_s; /* > 0: iat is required and exp - iat may not exceed it, nor
                               exp - now exceed it plus the leeway; 0 = unlimited */
} cm_jwt_policy_t;

/** Empty keyset with one reference; NULL never (aborts on OOM). */
cm_jwt_keyset_t *cm_jwt_keyset_new(void);
/** Another reference to ks (any thread); returns ks. */
cm_jwt_keyset_t *cm_jwt_keyset_ref(cm_jwt_keyset_t *ks);
/** Drops one reference (any thread); the last one frees. NULL is fine. */
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

/** Whether ks holds a key under kid. */
bool cm_jwt_keyset_has_kid(const cm_jwt_keyset_t *ks, const char *kid);

/** The keyset as a JWKS document (kty, crv, x, y, kid, alg, use); caller frees. */
char *cm_jwt_keyset_jwks(const cm_jwt_keyset_t *ks);

/**
 * Verifies token (len bytes, need not be NUL-terminated) against ks, in this order:
 * shape and alg pinned to ES256 (header only), key by kid, claim types, signature, then
 * the policy: aud, iss, lifetime, nbf and exp against now_s. On CM_JWT_OK and
 * CM_JWT_EXPIRED every claim in *out is filled (sub, evt and jti must be present and
 * non-empty or the token is CM_JWT_MALFORMED); on anything else *out is zeroed.
 * Any thread (see the top of this file).
 */
cm_jwt_result_t cm_jwt_verify(const cm_jwt_keyset_t *ks, const char *token, size_t len,
                              const cm_jwt_policy_t *policy, int64_t now_s, cm_jwt_claims_t *out);

/**
 * Every check of cm_jwt_verify except the signature (the signature segment must only have
 * a signature's length): shape, alg pinned to ES256, kid among ks' keys, claim types,
 * aud, iss, lifetime, nbf and exp. CM_JWT_OK says nothing about who made the token: use
 * it only where the exact token bytes are proven another way — the reserve's token
 * records (docs/tokens.md): the gateway stores SHA-256 of every token it signs, and a
 * hold taken with an inspected token requires that record. Never CM_JWT_BAD_SIGNATURE.
 * Any thread.
 */
cm_jwt_result_t cm_jwt_inspect(const cm_jwt_keyset_t *ks, const char *token, size_t len,
                               const cm_jwt_policy_t *policy, int64_t now_s, cm_jwt_claims_t *out);

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
 * Signs claims (iss, sub, evt, jti, iat, nbf, exp, cnf.jkt and rid when set; kid from the
 * signer) with ES256 and
 * aud = audience (NULL = CM_JWT_AUDIENCE). Returns a heap string the caller frees, or
 * NULL on failure (an empty sub, evt or jti). Any thread, concurrently on one signer.
 */
char *cm_jwt_sign(const cm_jwt_signer_t *s, const cm_jwt_claims_t *claims, const char *audience);

/**
 * The RFC 7638 thumbprint (base64url SHA-256 of the canonical JWK) of the EC P-256 key
 * with base64url coordinates x and y (43 characters each) into out. 0, or -1 when a
 * coordinate has the wrong length or alphabet. Any thread.
 */
__attribute__((warn_unused_result)) int cm_jwt_jwk_thumbprint(const char *x, const char *y,
                                                              char out[CM_JWT_JKT_LEN + 1]);

/**
 * Whether sig_b64 (the JOSE ES256 form: base64url of R || S) is a valid signature of
 * input under the P-256 public key with base64url coordinates x and y. The key is built
 * for this one call (a point not on the curve is refused); nothing is cached. Any
 * thread.
 */
bool cm_jwt_es256_verify_jwk(const char *x, const char *y, const char *input, size_t input_len,
                             const char *sig_b64, size_t sig_b64_len);

#endif
