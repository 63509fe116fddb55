/*
 * rsv_server — one reserve worker: its event loop, its clients (Redis, Postgres), its
 * caches, and the per-request context every handler builds on; plus the process around
 * the workers.
 *
 * The process runs `workers` instances of rsv_server_t on cm_server (one event loop per
 * thread, SO_REUSEPORT listeners). Each instance is complete — its own base, Redis
 * client, Postgres pool (pg_pool_size is split over the workers), token verifier,
 * catalog and availability caches, payment client — so every module runs
 * single-threaded on its instance's loop. The reconciler runs on worker 0 only. Shared,
 * read-only after start-up: the config, the admin token, the TLS context; shared and
 * thread-safe: the metrics registry. Handlers are asynchronous: each allocates an
 * operation that embeds rsv_req_t, issues Redis/Postgres calls, and finishes with
 * exactly one rsv_reply_*; the reply records the endpoint's latency.
 */
#ifndef RSV_SERVER_H
#define RSV_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_http.h"
#include "cm_metrics.h"
#include "cm_redis.h"
#include "cm_reload.h"
#include "cm_server.h"
#include "rsv_config.h"
#include "rsv_pay.h"
#include "rsv_pg.h"

struct event_base;
typedef struct rsv_auth rsv_auth_t;
typedef struct rsv_auth_keys rsv_auth_keys_t;
typedef struct rsv_auth_fails rsv_auth_fails_t;
typedef struct rsv_catalog rsv_catalog_t;
typedef struct rsv_avail rsv_avail_t;
typedef struct rsv_pay rsv_pay_t;
typedef struct rsv_reconcile rsv_reconcile_t;
typedef struct rsv_cors rsv_cors_t;

typedef enum {
    RSV_EP_HEALTH,
    RSV_EP_READY,
    RSV_EP_METRICS,
    RSV_EP_AVAILABILITY,
    RSV_EP_SEATS,
    RSV_EP_HOLD_CREATE,
    RSV_EP_HOLD_GET,
    RSV_EP_HOLD_EXTEND,
    RSV_EP_HOLD_RELEASE,
    RSV_EP_CONFIRM,
    RSV_EP_CHECKOUT_GET,
    RSV_EP_ADMIN_EVENT_PUT,
    RSV_EP_ADMIN_EVENT_GET,
    RSV_EP_ADMIN_CHECKOUTS,
    RSV_EP_DONE,
    RSV_EP_OTHER,
    RSV_EP_COUNT
} rsv_endpoint_t;

typedef struct rsv_metrics {
    cm_counter_t *holds_taken;
    cm_counter_t *hold_conflicts;
    cm_counter_t *holds_expired;
    cm_counter_t *holds_released;
    cm_counter_t *limit_exceeded;
    cm_counter_t *invalid_tokens;
    cm_counter_t *token_records[2]; /* matched, missing (rsv_hold: a first hold's record) */
    cm_counter_t *uniqueness_conflicts;
    cm_counter_t *confirmations;
    cm_counter_t *confirm_replays;
    cm_counter_t *reseeds;
    cm_counter_t *backend_errors;
    cm_histogram_t *hold_to_confirm;
    cm_metrics_requests_t *requests; /* request_seconds{endpoint,code} */
    /* checkout saga (rsv_reconcile) */
    cm_counter_t *saga_transitions;
    cm_counter_t *refunds;
    cm_counter_t *late_payments;
    cm_counter_t *reconcile_claimed;
    cm_counter_t *reconcile_finished;
    cm_counter_t *reconcile_released;
    cm_counter_t *reconcile_lookups;
    cm_counter_t *catalog_queries;   /* Postgres queries the event catalogue issued */
    cm_counter_t *booking_failures;  /* booking inserts that failed (not a conflict) */
    cm_counter_t *booking_abandoned; /* paid checkouts refunded after book_max_attempts */
    cm_counter_t *ledger_charges[5]; /* ledger reconciliation, by rsv_ledger outcome */
    cm_counter_t *ledger_scans[2];   /* ok, error */
    /* by rsv_pay_outcome_t: one per value of the enum */
    cm_counter_t *pay_outcomes[RSV_PAY_LISTED + 1];
    cm_histogram_t *pay_latency[3];     /* by rsv_pay_op_t */
    cm_gauge_t *checkouts_by_state[13]; /* by rsv_saga_state_names */
    cm_gauge_t *oldest_open_checkout;   /* age (s) of the oldest non-terminal checkout */
} rsv_metrics_t;

typedef struct rsv_server rsv_server_t;

struct rsv_server {
    rsv_config_t cfg;
    cm_server_t *cs;     /* the process (shared by every worker) */
    cm_worker_t *worker; /* this instance's worker */
    int index;
    char admin_addr[64];
    /* admin_listen's address (worker 0) */ /* worker number; 0 owns what the workers share */
    rsv_server_t **all;                     /* every worker's instance (worker 0 only; teardown) */
    struct event_base *base;
    cm_tls_ctx_t *tls;
    cm_redis_t *redis;
    rsv_pg_t *pg;      /* the saga and every write */
    rsv_pg_t *pg_read; /* reads (catalog, seeds, checkout views, gauges): never queued
                          ahead of a confirmation */
    cm_metrics_t *metrics;
    rsv_metrics_t m;
    rsv_auth_t *auth;
    rsv_auth_keys_t *keys;        /* admission keys, reloaded on SIGHUP */
    rsv_auth_fails_t *auth_fails; /* failed tokens per address, shared by the workers */
    rsv_catalog_t *catalog;
    rsv_avail_t *avail;
    rsv_pay_t *pay;
    rsv_reconcile_t *reconcile;
    cm_reload_cell_t *cors;        /* rsv_cors_t: the buyer API's storefront origins */
    cm_reload_cell_t *admin_token; /* the operators' token (char *), replaced on SIGHUP */
    cm_reload_config_t *config;    /* the effective configuration (NULL: cfg, no reloads) */
    struct cm_drain *drain;        /* SIGTERM: stop accepting, finish in-flight requests */
};

/** The request being served: embed it first in each handler's operation struct. */
typedef struct rsv_req {
    rsv_server_t *srv;
    cm_req_t *req;
    uint64_t start_ns;
    rsv_endpoint_t ep;
} rsv_req_t;

/**
 * Builds the process from a loaded config (reads keys, binds, connects): every worker's
 * instance; returns worker 0's. NULL + err.
 */
rsv_server_t *rsv_server_new(const rsv_config_t *cfg, char *err, size_t errlen);
/** Runs every worker until SIGTERM/SIGINT and the drain of in-flight requests. */
int rsv_server_run(rsv_server_t *srv);
/** Frees every worker (given worker 0); the config strings are the caller's. NULL is fine. */
void rsv_server_free(rsv_server_t *srv);

/**
 * Main thread, before rsv_server_run: GET /admin/config shows rc's effective
 * configuration, and each SIGHUP applies its live keys (rsv_config_live: the log level,
 * the operators' token re-read from admin_token_file, cors_origins). rc (borrowed) must
 * outlive the hook: free it before the server. 0, or -1 when the hook cannot be installed.
 */
__attribute__((warn_unused_result)) int rsv_server_watch_config(rsv_server_t *srv,
                                                                cm_reload_config_t *rc);

/** Starts a request context (counts it in flight). */
void rsv_req_start(rsv_req_t *r, rsv_server_t *srv, cm_req_t *req, rsv_endpoint_t ep);
/* Each answers the request, records the latency and ends the request context. */
void rsv_reply_json(rsv_req_t *r, int code, json_t *body);
void rsv_reply_error(rsv_req_t *r, int code, const char *error, const char *message, json_t *extra);
void rsv_reply_empty(rsv_req_t *r, int code);
void rsv_reply_text(rsv_req_t *r, int code, const char *ctype, const char *body, size_t len);
/** 401 invalid_token / 403 wrong_event / 503 (verification queue full) / 429 (address
 *  limited) for a failed rsv_auth_check (counts it). */
void rsv_reply_auth(rsv_req_t *r, int auth_result, const char *why);
/** Ends the request context when a cm_http helper already answered. */
void rsv_req_replied(rsv_req_t *r);
/** 503 with Retry-After for a Redis/Postgres failure (err from the completion). */
void rsv_reply_unavailable(rsv_req_t *r, const char *what, const char *err);

/**
 * Makes every other worker drop its cached copy of the event (catalog, availability),
 * then calls done(arg) on this worker's thread: an operator's change is answered only
 * once no worker serves the old version.
 */
void rsv_server_sync_event(rsv_server_t *srv, const char *event, void (*done)(void *arg),
                           void *arg);

/** Routes one request of the fans' listener (rsv_routes.c): fan routes only. */
void rsv_routes_dispatch(cm_req_t *req, void *arg);
/** Routes one request of the admin listener: admin API, dashboard, /metrics, health. */
void rsv_routes_admin(cm_req_t *req, void *arg);
/** The largest body a fans' route accepts, from its head (cm_http_limits_t.body_cap): a
 *  hold and a confirmation take their JSON (max_body_bytes), POST/DELETE routes without a
 *  body at most RSV_TINY_BODY_MAX (an empty JSON object), GET/HEAD/OPTIONS none. Pure,
 *  any thread. */
size_t rsv_routes_body_cap(cm_http_method_t method, const char *path);
#define RSV_TINY_BODY_MAX 64

/** The admin bearer token check (constant time). True when it matches. */
bool rsv_admin_authorized(rsv_server_t *srv, cm_req_t *req);

/** "os:{<event>}:" into buf; returns its length. */
size_t rsv_key_prefix(const char *event, char *buf, size_t len);

/** Writes "<32 random hex>.<suffix>" into buf (hold ids). */
void rsv_hex_id(char *buf, size_t size, const char *suffix);
/** Writes "<prefix><32 random hex>" into buf (checkout and booking ids). */
void rsv_random_id(char *buf, size_t size, const char *prefix);

#endif
