/*
 * rsv_auth — the admission gate (docs/design.md invariant 9): only a buyer holding a
 * validly signed ES256 admission token for the event reaches inventory.
 *
 * A token's signature is checked once per process (cm_jwt_verify: algorithm pinned to
 * ES256, key by kid, aud, iss, maximum lifetime) and the verified claims are remembered
 * in a bounded direct-mapped cache keyed by the whole token, shared by every worker's
 * gate (it belongs to the keys), so a busy buyer costs one signature check, not one per
 * request or per worker; exp and nbf are compared to the clock on every use. Failed
 * tokens are never cached (garbage cannot evict good entries).
 *
 * What abuse can cost: cache misses wait in a bounded queue (RSV_AUTH_BUSY → 503 with
 * Retry-After when it is full), and an address whose tokens failed verification
 * fail_limit times within fail_window_s gets RSV_AUTH_LIMITED (429) without another
 * verification until the window ends — a forged token with a valid public kid costs a
 * full ECDSA verification, so an attacker may not ask for them at will. Both are asked
 * before any work on a token the cache does not hold: before its claims are parsed and
 * before a hold script looks for its record.
 *
 * Token records (docs/tokens.md): taking a new hold (rsv_auth_check_new) may skip the
 * signature of an uncached token whose every other claim is fine; the hold script then
 * holds only if the gateway's record of that exact token is in Redis, and the reserve
 * verifies the signature when it is not (rsv_auth_check) or remembers the token as proven
 * by its record when it was (rsv_auth_remember). A record proves new holds only: every
 * other route (rsv_auth_check) verifies the signature of a token it has not verified
 * itself, so whoever can write a record cannot read, release or pay another buyer's holds.
 *
 * Keys (rsv_auth_keys_t) are shared by every rsv_auth of the process and reloaded on
 * SIGHUP (cm_reload) from the same file: a key dropped from the file stops verifying at
 * once — cached tokens signed by a removed kid are refused at their next use.
 *
 * Threads: an rsv_auth lives on one event loop (its callbacks and counters are that
 * loop's; the token cache and the failure table, rsv_auth_fails_t, are the process's,
 * shared by every worker and locked); ES256
 * verification runs on `threads` worker threads and the result is handed back to the loop (redis
 * bio.c style): a burst of new buyers does not stall the requests of everyone else. threads = 0
 * verifies inline. rsv_auth_keys_* are safe from any thread.
 */
#ifndef RSV_AUTH_H
#define RSV_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_http.h"
#include "cm_jwt.h"
#include "cm_metrics.h"
#include "cm_redis.h"

struct event_base;
typedef struct rsv_auth rsv_auth_t;
typedef struct rsv_auth_keys rsv_auth_keys_t;
typedef struct rsv_auth_fails rsv_auth_fails_t;

typedef enum {
    RSV_AUTH_OK,          /* valid now, for this event */
    RSV_AUTH_INVALID,     /* 401 invalid_token: missing, malformed, bad alg/signature/aud/iss,
                             too long-lived, expired (unless allowed), not yet valid */
    RSV_AUTH_WRONG_EVENT, /* 403 wrong_event: valid, but for another event */
    RSV_AUTH_BUSY,        /* 503 + Retry-After: the verification queue is full */
    RSV_AUTH_LIMITED,     /* 429 + Retry-After: too many failed tokens from this address */
    RSV_AUTH_UNVERIFIED,  /* rsv_auth_check_new only: every claim fine, the signature not
                             checked; good only with the token's record (see there) */

    /* a token bound to a key (cnf.jkt), by its request's DPoP proof */
    RSV_AUTH_PROOF_REQUIRED,    /* 401 proof_required: the token is bound (cnf.jkt) and the
                                   request has no DPoP header */
    RSV_AUTH_INVALID_PROOF,     /* 401 invalid_proof: the proof is refused (why names the
                                   cm_dpop reason: wrong_key, replayed, stale, …) */
    RSV_AUTH_PROOF_UNAVAILABLE, /* 503: Redis could not record the proof's jti */
} rsv_auth_result_t;

typedef struct rsv_auth_config {
    const char *issuer;      /* iss every token must carry; NULL or "" = not checked */
    int64_t leeway_s;        /* clock skew on exp and nbf */
    int64_t max_lifetime_s;  /* exp - iat at most; 0 = unlimited */
    size_t cache_size;       /* verified tokens remembered, per process (rounded up to a
                                power of two, at least 64): the first gate made on a
                                rsv_auth_keys_t sizes the cache every later one shares */
    int threads;             /* verification threads; 0 = inline */
    size_t max_queue;        /* verifications waiting for a thread; 0 = unbounded */
    int fail_limit;          /* bad signatures per address per window; 0 = no limit */
    int fail_window_s;       /* the window (and the Retry-After of a 429) */
    rsv_auth_fails_t *fails; /* failures per address, shared by every gate of the process
                                (borrowed); NULL: the gate keeps its own */
    bool records;            /* rsv_auth_check_new answers RSV_AUTH_UNVERIFIED on a cache
                                miss (token records, docs/tokens.md); false: it verifies */

    /* bound tokens' DPoP proofs */
    const char *public_origin; /* the origin a DPoP proof's htu must name (copied); NULL or
                                  "": https:// (http:// with plain_http) + the Host header */
    bool plain_http;           /* the reserve speaks plain HTTP (tests) */
} rsv_auth_config_t;

/**
 * Keys loaded from path (a JWKS document or PEM public keys) and reloaded from it on
 * every SIGHUP. NULL with a message in err when the file cannot be used.
 */
rsv_auth_keys_t *rsv_auth_keys_load(const char *path, char *err, size_t errlen);
/** Keys that never reload: takes ownership of ks (tests). */
rsv_auth_keys_t *rsv_auth_keys_new(cm_jwt_keyset_t *ks);
/** Re-reads the file now (what SIGHUP does); on failure the old keys stay. 0 / -1. */
__attribute__((warn_unused_result)) int rsv_auth_keys_reload(rsv_auth_keys_t *k, char *err,
                                                             size_t errlen);
/** Unregisters from SIGHUP and frees (with the token cache); every rsv_auth using k must
 * be freed first. */
void rsv_auth_keys_free(rsv_auth_keys_t *k);
/** Tokens the process's cache holds now, and how many it can hold (0 before the first
 * gate), for tests. Any thread. */
size_t rsv_auth_keys_cached(rsv_auth_keys_t *k);
size_t rsv_auth_keys_cache_capacity(rsv_auth_keys_t *k);

/**
 * The failed-token counts per address, one table for every worker's gate so the limit
 * holds per process (thread-safe). Free after every gate using it.
 */
rsv_auth_fails_t *rsv_auth_fails_new(void);
void rsv_auth_fails_free(rsv_auth_fails_t *f);

/** result and why (a static string for logs); claims were filled on RSV_AUTH_OK. */
typedef void (*rsv_auth_cb)(rsv_auth_result_t result, const char *why, void *arg);

/** keys is borrowed and must outlive the gate; cfg is copied (issuer too). */
rsv_auth_t *rsv_auth_new(struct event_base *base, rsv_auth_keys_t *keys,
                         const rsv_auth_config_t *cfg);
/** The Redis (borrowed, the gate's loop's) that records the jti of every DPoP proof of a
 *  bound token; without one such tokens get RSV_AUTH_PROOF_UNAVAILABLE. */
void rsv_auth_use_redis(rsv_auth_t *a, cm_redis_t *redis);
/** Joins the workers; pending checks are answered RSV_AUTH_INVALID ("shutting down"). */
void rsv_auth_free(rsv_auth_t *a);

/**
 * Bound tokens (docs/api.md "DPoP"): a token whose claims carry cnf.jkt is good only with
 * a DPoP header on the request — a proof (common/cm_dpop) by the key of that RFC 7638
 * thumbprint, with htm the request's method, htu public_origin (or the Host) and the
 * request's path, iat within CM_DPOP_WINDOW_S — whose jti Redis had not seen (recorded
 * with SET NX in the token's event's slot, so it works once across every reserve and
 * gateway). Every answer that would be RSV_AUTH_OK or RSV_AUTH_UNVERIFIED for such a token
 * is that only after its proof passed; else PROOF_REQUIRED, INVALID_PROOF or
 * PROOF_UNAVAILABLE. A proof whose signature fails counts as a failed token for the
 * address (fail_limit). rsv_auth_check_new never answers UNVERIFIED for a bound token: it
 * is verified, so its proof is judged once. Tokens without cnf are judged as before.
 *
 * Checks the request's bearer token. event NULL skips the event check (the caller
 * compares claims->evt itself). allow_expired accepts a correctly signed token whose
 * exp has passed (operations on a hold its owner already has). cb runs exactly once:
 * before this returns when the answer is known at once (cache hit, no token, queue
 * full, address limited), else later from the loop. req must stay unanswered until cb
 * (its DPoP header is read then); claims must stay valid until then (it lives in the
 * caller's operation). The address is the request's peer.
 */
void rsv_auth_check(rsv_auth_t *a, cm_req_t *req, const char *event, bool allow_expired,
                    cm_jwt_claims_t *claims, rsv_auth_cb cb, void *arg);

/**
 * rsv_auth_check for taking a new hold (exp must not have passed). With cfg.records on, a
 * token the cache does not hold is not verified: its claims are judged without the
 * signature (cm_jwt_inspect: ES256 header, a kid the keys hold now, aud, iss, lifetime,
 * nbf, exp, and the event) and the answer is RSV_AUTH_UNVERIFIED, record filled with the
 * hex SHA-256 of the whole token — the id of the record the gateway wrote when it signed
 * it. The caller must then make its Redis step conditional on that record existing; if
 * it existed, rsv_auth_remember; if not, rsv_auth_check (the full verification) before
 * acting. record is not touched on any other answer. Loop thread, as rsv_auth_check.
 */
void rsv_auth_check_new(rsv_auth_t *a, cm_req_t *req, const char *event, cm_jwt_claims_t *claims,
                        char record[65], rsv_auth_cb cb, void *arg);

/**
 * Caches the request's token with claims (from rsv_auth_check_new) as proven by its
 * record: Redis held it, so the gateway wrote it for exactly these bytes. Such an entry
 * answers rsv_auth_check_new (new holds) only; rsv_auth_check still verifies the token
 * once (and then caches it as verified). Never replaces the same token verified. Its kid
 * is checked again at its first use from the cache.
 */
void rsv_auth_remember(rsv_auth_t *a, cm_req_t *req, const cm_jwt_claims_t *claims);

/** Tokens judged without their signature (RSV_AUTH_UNVERIFIED answers). */
uint64_t rsv_auth_inspected(const rsv_auth_t *a);

/** Verifications done (cache misses) and cache hits, for tests and metrics. */
uint64_t rsv_auth_verifications(const rsv_auth_t *a);
uint64_t rsv_auth_hits(const rsv_auth_t *a);
/** Checks refused because the queue was full, or the address was limited. */
uint64_t rsv_auth_busy(const rsv_auth_t *a);
uint64_t rsv_auth_limited(const rsv_auth_t *a);

/* The tokens' series (counted where a refusal is answered: rsv_reply_auth). */
typedef struct rsv_auth_metrics {
    cm_counter_t *invalid_tokens; /* 401 invalid_token answers */
} rsv_auth_metrics_t;

/** Registers the tokens' series in reg and points am at them. Main thread, at start. */
void rsv_auth_metrics_register(rsv_auth_metrics_t *am, cm_metrics_t *reg);

#endif
