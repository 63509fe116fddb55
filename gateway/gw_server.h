/*
 * gw_server — one gateway worker: its event loop, Redis client, caches, timers, and the
 * per-request context every handler builds on; plus the process around the workers.
 *
 * The process runs `workers` instances of gw_server_t on cm_server (one event loop per
 * thread, SO_REUSEPORT listeners). Each instance is complete — its own base, Redis
 * client, signer threads, admission cache, rooms and watermark timer — so every module
 * runs single-threaded on its instance's loop. Shared between the instances, read-only
 * after start-up: the config, the signing key and JWKS, the ticket secret, the admin
 * token, the TLS context; shared and thread-safe: the metrics registry and the per-address
 * join limit. Handlers are asynchronous: each that waits on Redis or the signer
 * allocates an operation embedding gw_req_t and finishes with exactly one gw_reply_*;
 * the reply records the endpoint's latency.
 */
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_http.h"
#include "cm_jwt.h"
#include "cm_mem.h"
#include "cm_metrics.h"
#include "cm_redis.h"
#include "cm_reload.h"
#include "cm_server.h"
#include "gw_config.h"
#include "gw_ticket.h"

struct event;
struct event_base;
typedef struct gw_signer gw_signer_t;
typedef struct gw_limit gw_limit_t;
typedef struct gw_admit gw_admit_t;
typedef struct gw_rooms gw_rooms_t;
typedef struct gw_history gw_history_t;
typedef struct gw_pow gw_pow_t;
typedef struct gw_batch gw_batch_t;

typedef enum {
    GW_EP_HEALTH,
    GW_EP_READY,
    GW_EP_METRICS,
    GW_EP_JWKS,
    GW_EP_PAGE,
    GW_EP_JOIN,
    GW_EP_STATUS,
    GW_EP_ADMIN,
    GW_EP_DASHBOARD,
    GW_EP_OTHER,
    GW_EP_COUNT
} gw_endpoint_t;

typedef struct gw_metrics {
    cm_counter_t *joins;   /* new places handed out (queue + pre-queue) */
    cm_counter_t *rejoins; /* joins answered from a valid ticket */
    cm_counter_t *status_polls;
    cm_counter_t *admissions;   /* first claims (JWT issued) made through this gateway */
    cm_counter_t *readmissions; /* repeated polls answered with the same admission */
    cm_counter_t *rejected_tickets;
    cm_counter_t *dpop_verified; /* proofs accepted on admitting polls (gw_dpop) */
    cm_counter_t *dpop_refused;  /* proofs missing, invalid or replayed where required */
    cm_counter_t *rate_limited;
    cm_counter_t *pow_challenges; /* proof-of-work challenges handed out */
    cm_counter_t *pow_refused;    /* joins refused for a missing or bad proof of work */
    cm_counter_t *backend_errors;
    cm_counter_t *advance_runs;
    cm_counter_t *advance_errors;
    cm_histogram_t *sign_seconds;    /* queueing + signing of one admission token */
    cm_metrics_requests_t *requests; /* request_seconds{endpoint,code} */
} gw_metrics_t;

typedef struct gw_server gw_server_t;

struct gw_server {
    gw_config_t cfg;
    cm_server_t *cs;     /* the process (shared by every worker) */
    cm_worker_t *worker; /* this instance's worker */
    int index;
    char admin_addr[64];
    /* admin_listen's address (worker 0) */ /* worker number; 0 owns what the workers share */
    gw_server_t **all;                      /* every worker's instance (worker 0 only; teardown) */
    struct event_base *base;
    cm_tls_ctx_t *tls;
    cm_redis_t *redis;
    cm_metrics_t *metrics;
    gw_metrics_t m;
    unsigned char *ticket_secret; /* the newest of ticket_keys: signs new tickets */
    size_t ticket_secret_len;
    gw_ticket_keys_t ticket_keys;  /* every secret of ticket_secret_file, oldest first */
    cm_reload_cell_t *admin_token; /* the operators' token (char *), replaced on SIGHUP */
    cm_reload_config_t *config;    /* the effective configuration (NULL: cfg, no reloads) */
    cm_reload_cell_t *signer;      /* cm_jwt_signer_t: the active (last) signing key; live */
    cm_reload_cell_t *jwks;        /* char *: every configured key, public halves; live */
    gw_signer_t *pool;
    gw_admit_t *admit;
    gw_limit_t *limit;
    gw_pow_t *pow; /* proof of work on join (gw_pow.h), shared by every worker */
    gw_rooms_t *rooms;
    gw_history_t *history; /* the dashboard's history of every room (gw_history.h) */
    cm_pool_t *place_ops;  /* gw_queue's operations (joins, status polls), reused */
    gw_batch_t *batch;     /* new joins gathered per room (gw_batch.h; made on first use) */
    struct event *tick;
    struct cm_drain *drain; /* SIGTERM: stop accepting, finish in-flight requests */
};

/** The request being served: embed it first in each handler's operation struct. */
typedef struct gw_req {
    gw_server_t *srv;
    cm_req_t *req;
    uint64_t start_ns;
    gw_endpoint_t ep;
} gw_req_t;

/**
 * Builds the process from a loaded config (reads keys and secrets, binds, connects):
 * every worker's instance; returns worker 0's.
 */
gw_server_t *gw_server_new(const gw_config_t *cfg, char *err, size_t errlen);
/** Runs every worker until SIGTERM/SIGINT and the drain of in-flight requests. */
int gw_server_run(gw_server_t *srv);
/** Frees every worker (given worker 0); the config strings are the caller's. NULL is fine. */
void gw_server_free(gw_server_t *srv);

/**
 * Main thread, before gw_server_run: GET /admin/config shows rc's effective
 * configuration, and each SIGHUP applies its live keys (gw_config_live: the log level,
 * the operators' token re-read from admin_token_file). rc (borrowed) must outlive the
 * hook: free it before the server. 0, or -1 when the hook cannot be installed.
 */
__attribute__((warn_unused_result)) int gw_server_watch_config(gw_server_t *srv,
                                                               cm_reload_config_t *rc);

/** Starts a request context (counts it in flight). */
void gw_req_start(gw_req_t *r, gw_server_t *srv, cm_req_t *req, gw_endpoint_t ep);
/** Ends the request context when a cm_http helper already answered. */
void gw_req_replied(gw_req_t *r);
/* Each answers the request, records the latency and ends the request context. */
void gw_reply_json(gw_req_t *r, int code, json_t *body);
void gw_reply_error(gw_req_t *r, int code, const char *error, const char *message, json_t *extra);
void gw_reply_text(gw_req_t *r, int code, const char *ctype, const char *body, size_t len);
/** 503 with Retry-After for a Redis/signer failure (err from the completion). */
void gw_reply_unavailable(gw_req_t *r, const char *what, const char *err);
/** 410 for a room that takes nobody any more: sold_out, else closed. */
void gw_reply_gone(gw_req_t *r, bool sold_out);

/**
 * Makes every other worker re-read the room from Redis (its settings changed, or it was
 * deleted), then calls done(arg) on this worker's thread: an operator's change is
 * answered only once every worker serves it.
 */
void gw_server_sync_room(gw_server_t *srv, const char *event, void (*done)(void *arg), void *arg);

/** Routes one request of the fans' listener (gw_routes.c): fan routes only. */
void gw_routes_dispatch(cm_req_t *req, void *arg);
/** The largest body a fans' route accepts, from its head (cm_http_limits_t.body_cap):
 *  join takes none beyond an empty object; SIZE_MAX elsewhere (the transport's cap). */
size_t gw_routes_body_cap(cm_http_method_t method, const char *path);
/** Routes one request of the admin listener: admin API, dashboard, /metrics, health. */
void gw_routes_admin(cm_req_t *req, void *arg);

/** The admin bearer token check (constant time). True when it matches. */
bool gw_admin_authorized(gw_server_t *srv, cm_req_t *req);

#include "gw_rediskeys.h" /* the Redis key schema (GW_ROOMS_KEY, each room's keys) */

#endif
