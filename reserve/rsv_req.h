/*
 * rsv_req — what a reserve handler works with: its worker's instance (rsv_server_t: the
 * event loop, Redis and Postgres clients, token verifier, catalogue and availability
 * caches, the stock feed, payment client), the request context it answers through, and the replies.
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
#include "rsv_auth.h"
#include "rsv_catalog.h"
#include "rsv_checkout.h"
#include "rsv_config.h"
#include "rsv_hold.h"
#include "rsv_ledger.h"
#include "rsv_pay.h"
#include "rsv_pg.h"
#include "rsv_reconcile.h"
#include "rsv_stock.h"
#include "rsv_webhook.h"

struct event_base;
typedef struct rsv_auth rsv_auth_t;
typedef struct rsv_auth_keys rsv_auth_keys_t;
typedef struct rsv_auth_fails rsv_auth_fails_t;
typedef struct rsv_catalog rsv_catalog_t;
typedef struct rsv_avail rsv_avail_t;
typedef struct rsv_pay rsv_pay_t;
typedef struct rsv_reconcile rsv_reconcile_t;
typedef struct rsv_outbox rsv_outbox_t;
typedef struct rsv_office rsv_office_t;
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
    RSV_EP_PROVIDER_WEBHOOK,
    RSV_EP_OTHER,
    RSV_EP_COUNT
} rsv_endpoint_t;

/*
 * The reserve's series, one struct per module that counts them (each declared and
 * registered in its module's header); only backend_errors is the replies' own.
 */
typedef struct rsv_metrics {
    rsv_hold_metrics_t hold;
    rsv_auth_metrics_t auth;
    rsv_saga_metrics_t saga;
    rsv_checkout_metrics_t checkout;
    rsv_catalog_metrics_t catalog;
    cm_counter_t *backend_errors; /* 503s for a Redis or Postgres failure (rsv_reply_unavailable) */
    rsv_reconcile_metrics_t reconcile;
    rsv_ledger_metrics_t ledger;
    rsv_pay_metrics_t pay;
    rsv_webhook_metrics_t webhook;
    rsv_stock_metrics_t stock;
} rsv_metrics_t;

/** Registers every module's series in reg (one registry for all workers: the same series
 *  come back to each) and points m at them. Main thread, before the worker's loop. */
void rsv_metrics_register(rsv_metrics_t *m, cm_metrics_t *reg);

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
    rsv_stock_t *stock; /* this worker's part of the stock feed (NULL: stock_interval_ms 0) */
    rsv_pay_t *pay;
    rsv_reconcile_t *reconcile;
    rsv_office_t *office;              /* the box office's refund driver (worker 0) */
    rsv_outbox_t *outbox;              /* events out (worker 0 only) */
    cm_reload_cell_t *cors;            /* rsv_cors_t: the buyer API's storefront origins */
    cm_reload_cell_t *webhook_secrets; /* rsv_webhook_secrets_t: the provider's webhooks */
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
/**
 * The start of a page route under /DIR (seg[0] is DIR, n is 1 or 2): GET or HEAD only
 * (405), /DIR without its slash moved to /DIR/ with the query kept (301, "WHAT is at
 * /DIR/"). Returns the file asked for ("index.html" for /DIR/), or NULL when the request
 * has been answered.
 */
const char *rsv_req_page_file(rsv_req_t *r, char **seg, int n, const char *what);

#endif
