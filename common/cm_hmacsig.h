/*
 * cm_hmacsig — webhook signatures in the timestamped HMAC-SHA256 scheme payment providers
 * use (Stripe's `Stripe-Signature`): a header value `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`
 * where each v1 is the lowercase hex HMAC-SHA256, under one secret, of the bytes
 * "<t>.<body>". Signing writes one v1; verifying accepts any v1 under any of several
 * secrets (a rotation signs with the new secret while receivers still hold the old), and a
 * signature whose timestamp is outside the tolerance window is refused as a replay.
 *
 * The header's name is the caller's (`Onsale-Signature` on the events the reserve sends,
 * `Stripe-Signature` on the provider's). Pure: no allocation, no libevent, any thread.
 */
#ifndef CM_HMACSIG_H
#define CM_HMACSIG_H

#include <stddef.h>
#include <stdint.h>

/** Hex digits of one v1 signature (HMAC-SHA256: 32 bytes). */
#define CM_HMACSIG_HEX_LEN 64

/** The longest header value verify reads; a longer one is CM_HMACSIG_MALFORMED. */
#define CM_HMACSIG_HEADER_MAX 2048

/** Most v1 signatures one header may carry; more is CM_HMACSIG_MALFORMED. */
#define CM_HMACSIG_V1_MAX 8

/** Room for what cm_hmacsig_sign writes: "t=" 20 digits ",v1=" 64 hex and a NUL. */
#define CM_HMACSIG_SIGN_MAX (2 + 20 + 4 + CM_HMACSIG_HEX_LEN + 1)

/** The outcome of a verification; CM_HMACSIG_OK only when a signature matched in time. */
typedef enum cm_hmacsig_result {
    CM_HMACSIG_OK,
    CM_HMACSIG_MALFORMED,    /* not a list of key=value with printable values, or too long */
    CM_HMACSIG_NO_TIMESTAMP, /* no t=, two of them, or t not 1–18 decimal digits */
    CM_HMACSIG_NO_SIGNATURE, /* no v1=, or a v1 that is not 64 lowercase hex digits */
    CM_HMACSIG_MISMATCH,     /* no v1 matches under any secret */
    CM_HMACSIG_STALE,        /* a v1 matches, but t is further than the tolerance from now */
    CM_HMACSIG_RESULT_COUNT
} cm_hmacsig_result_t;

/** The result's name for logs and error answers ("malformed", "stale"…); static storage. */
const char *cm_hmacsig_result_name(cm_hmacsig_result_t r);

/** One secret: its bytes (not NUL-terminated necessarily) and length. */
typedef struct cm_hmacsig_secret {
    const void *key;
    size_t len;
} cm_hmacsig_secret_t;

/**
 * Writes "t=<t>,v1=<hex>" for body under secret into out (outlen bytes, at least
 * CM_HMACSIG_SIGN_MAX is always enough), NUL-terminated. Returns 0, or −1 when t is
 * negative, out is too small, or HMAC fails.
 */
__attribute__((warn_unused_result)) int cm_hmacsig_sign(const cm_hmacsig_secret_t *secret,
                                                        int64_t t, const void *body,
                                                        size_t body_len, char *out, size_t outlen);

/**
 * Verifies header (header_len bytes, no NUL needed) over body against each of the
 * nsecrets secrets, in constant time per comparison. now is the receiver's wall clock in
 * unix seconds; a matching signature is CM_HMACSIG_OK only when |now − t| ≤ tolerance_s.
 * On CM_HMACSIG_OK, *which (when not NULL) is the index of the secret that matched. Parsing
 * is strict: elements are `key=value` separated by single commas, keys are [a-z0-9]+, values
 * printable ASCII without spaces; keys other than t and v1 (a provider's v0) are ignored.
 */
cm_hmacsig_result_t cm_hmacsig_verify(const char *header, size_t header_len, const void *body,
                                      size_t body_len, const cm_hmacsig_secret_t *secrets,
                                      size_t nsecrets, int64_t now, int64_t tolerance_s,
                                      size_t *which);

#endif
