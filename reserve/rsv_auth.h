/*
 * rsv_auth — the admission gate (DESIGN.md invariant 9): only a buyer holding a
 * validly signed ES256 admission token for the event reaches inventory.
 *
 * A token's signature is checked once (cm_jwt_verify: algorithm pinned to ES256, key
 * by kid, aud) and the verified claims are remembered in a bounded direct-mapped
 * cache keyed by the whole token, so a busy buyer costs one signature check, not one
 * per request; exp and nbf are compared to the clock on every use. Failed tokens are
 * never cached (garbage cannot evict good entries).
 *
 * Threads: the cache and every callback live on the event-loop thread. A signature
 * check costs about half a millisecond (libjwt parses the PEM key on every call), so
 * cache misses are verified on `threads` worker threads and the result is handed back
 * to the loop (redis bio.c style): a burst of new buyers does not stall the requests
 * of everyone else. threads = 0 verifies inline (tests).
 */
#ifndef RSV_AUTH_H
#define RSV_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_jwt.h"

struct event_base;
struct evhttp_request;
typedef struct rsv_auth rsv_auth_t;

typedef enum {
    RSV_AUTH_OK,          /* valid now, for this event */
    RSV_AUTH_INVALID,     /* 401 invalid_token: missing, malformed, bad alg/signature/aud,
                             expired (unless allowed), not yet valid */
    RSV_AUTH_WRONG_EVENT, /* 403 wrong_event: valid, but for another event */
} rsv_auth_result_t;

/** result and why (a static string for logs); claims were filled on RSV_AUTH_OK. */
typedef void (*rsv_auth_cb)(rsv_auth_result_t result, const char *why, void *arg);

/** Takes ownership of keys. cache_size entries (rounded up to a power of two). */
rsv_auth_t *rsv_auth_new(struct event_base *base, cm_jwt_keyset_t *keys, int64_t leeway_s,
                         size_t cache_size, int threads);
/** Joins the workers; pending checks are answered RSV_AUTH_INVALID ("shutting down"). */
void rsv_auth_free(rsv_auth_t *a);

/**
 * Checks the request's bearer token. event NULL skips the event check (the caller
 * compares claims->evt itself). allow_expired accepts a correctly signed token whose
 * exp has passed (operations on a hold its owner already has). cb runs exactly once:
 * before this returns when the answer is known at once (cache hit, no token), else
 * later from the loop. claims must stay valid until then (it lives in the caller's
 * operation).
 */
void rsv_auth_check(rsv_auth_t *a, struct evhttp_request *req, const char *event,
                    bool allow_expired, cm_jwt_claims_t *claims, rsv_auth_cb cb, void *arg);

/** Verifications done (cache misses) and cache hits, for tests and metrics. */
uint64_t rsv_auth_verifications(const rsv_auth_t *a);
uint64_t rsv_auth_hits(const rsv_auth_t *a);

#endif
