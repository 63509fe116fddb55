/*
 * rsv_req — what a reserve handler works with: its worker's instance (rsv_server_t: the
 * event loop, Redis and Postgres clients, token verifier, catalogue and availability
 * caches, payment client), the request context it answers through, and the replies.
 *
 * The process (rsv_server.c) makes one rsv_server_t per worker on the service shell
 * (cm_service), so every module runs single-threaded on its instance's loop; the
 * reconciler runs on worker 0 only. Shared, read-only after start-up: the config, the
 * admission keys; shared and thread-safe: the metrics registry, the failed-token table.
 * Handlers are asynchronous: each allocates an operation that embeds rsv_req_t, issues
 * Redis/Postgres calls, and finishes with exactly one rsv_reply_*; the reply records the
 * endpoint's latency.
 */
#ifndef RSV_REQ_H
#define RSV_REQ_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_http.h"
#include "cm_metrics.h"
#include "cm_redis.h"
#include "cm_reload.h"
#include "cm_service.h"
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

/* The endpoints (the `endpoint` label of request_seconds); the shell's three first. */
typedef enum {
    RSV_EP_HEALTH = CM_SVC_EP_HEALTH,
    RSV_EP_READY = CM_SVC_EP_READY,
    RSV_EP_METRICS = CM_SVC_EP_METRICS,
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
    cm_svc_worker_t svc; /* the shell's part: the process, this worker, request_seconds */
    int index;           /* worker number; 0 owns what the workers share */
    struct event_base *base;
    cm_redis_t *redis;
    rsv_pg_t *pg;      /* the saga and every write */
    rsv_pg_t *pg_read; /* reads (catalog, seeds, checkout views, gauges): never queued
                          ahead of a confirmation */
    rsv_metrics_t m;
    rsv_auth_t *auth;
    rsv_auth_keys_t *keys;        /* admission keys, reloaded on SIGHUP */
    rsv_auth_fails_t *auth_fails; /* failed tokens per address, shared by the workers */
    rsv_catalog_t *catalog;
    rsv_avail_t *avail;
    rsv_pay_t *pay;
    rsv_reconcile_t *reconcile;
    cm_reload_cell_t *cors; /* rsv_cors_t: the buyer API's storefront origins */
};

/** The request being served: embed it first in each handler's operation struct. */
typedef struct rsv_req {
    cm_svc_req_t svc; /* svc.req: the request, NULL once answered; svc.ep its endpoint */
    rsv_server_t *srv;
} rsv_req_t;

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

#endif
