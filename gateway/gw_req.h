/*
 * gw_req — what a gateway handler works with: its worker's instance (gw_server_t: the
 * event loop, Redis client, caches, timers and the borrowed shared parts), the request
 * context it answers through, and the replies.
 *
 * The process (gw_server.c) makes one gw_server_t per worker on the service shell
 * (cm_service), so every module runs single-threaded on its instance's loop. Shared
 * between the instances, read-only after start-up: the config, the signing key and JWKS,
 * the ticket secret, the modules' series (gw_metrics.h); shared and thread-safe: the
 * metrics registry, the per-address join limit and the proof-of-work table. Handlers
 * are asynchronous: each that waits on Redis or the signer allocates an operation
 * embedding gw_req_t and finishes with exactly one gw_reply_*; the reply records the
 * endpoint's latency.
 */
#ifndef GW_REQ_H
#define GW_REQ_H

#include <jansson.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cm_http.h"
#include "cm_jwt.h"
#include "cm_mem.h"
#include "cm_metrics.h"
#include "cm_redis.h"
#include "cm_reload.h"
#include "cm_service.h"
#include "gw_config.h"
#include "gw_lang.h"
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

/* The endpoints (the `endpoint` label of request_seconds); the shell's three first. */
typedef enum {
    GW_EP_HEALTH = CM_SVC_EP_HEALTH,
    GW_EP_READY = CM_SVC_EP_READY,
    GW_EP_METRICS = CM_SVC_EP_METRICS,
    GW_EP_JWKS,
    GW_EP_PAGE,
    GW_EP_JOIN,
    GW_EP_STATUS,
    GW_EP_ADMIN,
    GW_EP_DASHBOARD,
    GW_EP_OTHER,
    GW_EP_COUNT
} gw_endpoint_t;

/* Every module's series (gw_metrics.h: include it to count). */
typedef struct gw_metrics gw_metrics_t;

typedef struct gw_server gw_server_t;

struct gw_server {
    gw_config_t cfg;
    cm_svc_worker_t svc; /* the shell's part: the process, this worker, request_seconds */
    int index;           /* worker number; 0 owns what the workers share */
    struct event_base *base;
    cm_redis_t *redis;
    gw_metrics_t *m;              /* worker 0's, borrowed by the others */
    unsigned char *ticket_secret; /* the newest of ticket_keys: signs new tickets */
    size_t ticket_secret_len;
    gw_ticket_keys_t ticket_keys;   /* every secret of ticket_secret_file, oldest first */
    cm_reload_cell_t *signer;       /* cm_jwt_signer_t: the active (last) signing key; live */
    cm_reload_cell_t *jwks;         /* char *: every configured key, public halves; live */
    cm_reload_cell_t *langs;        /* gw_langs_t: the queue page's languages; live */
    cm_reload_cell_t *enqueue_keys; /* cm_jwt_keyset_t: the sale site's (gw_enqueue.h); NULL
                                       value: no enqueue tokens; live */
    gw_signer_t *pool;
    gw_admit_t *admit;
    gw_limit_t *limit;
    unsigned char *code_secret; /* code_secret_file's secret (gw_code.h); NULL: no codes */
    size_t code_secret_len;
    gw_limit_t *code_tries;        /* joins with a code, per address block */
    gw_limit_t *code_failures;     /* unknown codes, all addresses ("*") */
    _Atomic int64_t *code_lock_ms; /* monotonic ms until which every code is refused */
    gw_pow_t *pow;                 /* proof of work on join (gw_pow.h), shared by every worker */
    gw_rooms_t *rooms;
    gw_history_t *history; /* the dashboard's history of every room (gw_history.h) */
    cm_pool_t *place_ops;  /* gw_queue's operations (joins, status polls), reused */
    gw_batch_t *batch;     /* new joins gathered per room (gw_batch.h; made on first use) */
    struct event *tick;
};

/** The request being served: embed it first in each handler's operation struct. */
typedef struct gw_req {
    cm_svc_req_t svc; /* svc.req: the request, NULL once answered */
    gw_server_t *srv;
} gw_req_t;

/** Starts a request context (counts it in flight). */
void gw_req_start(gw_req_t *r, gw_server_t *srv, cm_req_t *req, gw_endpoint_t ep);
/** Ends the request context when a cm_http helper already answered. */
void gw_req_replied(gw_req_t *r);
/* Each answers the request, records the latency and ends the request context; on the
 * queue page's endpoint an error is a page, not JSON (gw_page_queue_answer). */
void gw_reply_json(gw_req_t *r, int code, json_t *body);
void gw_reply_error(gw_req_t *r, int code, const char *error, const char *message, json_t *extra);
void gw_reply_text(gw_req_t *r, int code, const char *ctype, const char *body, size_t len);
/** Answers with the queue page for code and body (gw_page_queue_answer: the room's look
 *  when the path names a known room, the gateway's languages); body is stolen. */
void gw_reply_page(gw_req_t *r, int code, json_t *body);
/** The queue page's languages in force (gw_lang.h). Any worker thread. */
const gw_langs_t *gw_server_langs(const gw_server_t *srv);
/** 503 for a Redis/signer failure (err from the completion); counts a backend error. */
void gw_reply_unavailable(gw_req_t *r, const char *what, const char *err);
/** 410 for a room that takes nobody any more: sold_out, else closed. */
void gw_reply_gone(gw_req_t *r, bool sold_out);

#include "gw_rediskeys.h" /* the Redis key schema (GW_ROOMS_KEY, each room's keys) */

#endif
