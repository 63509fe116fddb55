/*
 * cm_service — the shell every onsale service (gateway, reserve) is built on: the process
 * of N workers on cm_server with its operators' token, TLS context and configuration
 * reloads; the per-worker part each service embeds in its own worker instance; the
 * request context its handlers answer through; and the routes every service serves the
 * same way (GET /healthz, /readyz, /metrics, the admin bearer gate).
 *
 * A service defines its endpoints as an enum whose first three values are
 * CM_SVC_EP_HEALTH, CM_SVC_EP_READY and CM_SVC_EP_METRICS, with a name per value (the
 * `endpoint` label of <prefix>_request_seconds and the access log's route). Each
 * handler starts a cm_svc_req_t (usually embedded in its operation) and ends it with
 * exactly one cm_svc_reply_* (or cm_svc_req_replied when a cm_http helper answered),
 * which records the latency under the endpoint and the status code sent.
 *
 * Threads: cm_service_new, _start, _watch_config, _run and _free on the main thread;
 * everything about a worker (its cm_svc_worker_t, requests, replies) on that worker's
 * thread; the reload hook on the reload thread.
 */
#ifndef CM_SERVICE_H
#define CM_SERVICE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_http.h"
#include "cm_log.h"
#include "cm_metrics.h"
#include "cm_reload.h"
#include "cm_server.h"
#include "cm_server_config.h"

/* The endpoints every service has, first in its endpoint enum. */
enum { CM_SVC_EP_HEALTH, CM_SVC_EP_READY, CM_SVC_EP_METRICS };

typedef struct cm_service cm_service_t;

/** One worker's part of the shell, embedded in the service's worker instance. */
typedef struct cm_svc_worker {
    cm_service_t *svc;
    cm_worker_t *worker;
    struct event_base *base;         /* this worker's loop */
    cm_drain_t *drain;               /* SIGTERM: stop accepting, finish in-flight requests */
    cm_metrics_t *metrics;           /* the process's registry (shared, thread-safe) */
    cm_metrics_requests_t *requests; /* <prefix>_request_seconds{endpoint,code} */
    const char *const *endpoints;    /* a name per endpoint index */
    /* /readyz: adds "<backend>": true/false to o for each of this worker's backends and
     * returns whether all are up; down is the message while one is not. Worker thread. */
    bool (*backends)(void *arg, json_t *o);
    void *backends_arg;
    const char *down;
} cm_svc_worker_t;

/** The request being served: embed it in each handler's operation. */
typedef struct cm_svc_req {
    cm_req_t *req; /* NULL once answered */
    cm_svc_worker_t *w;
    uint64_t start_ns;
    size_t ep;
} cm_svc_req_t;

/* --- the process ------------------------------------------------------------------- */

typedef struct cm_service_opts {
    const char *name;          /* "gateway": log lines */
    const char *metric_prefix; /* "onsale_gateway": <prefix>_request_seconds, the gauges */
    const cm_server_config_t *server;
    const char *admin_token_file; /* the operators' token (cm_config_read_secret, >= 16) */
    size_t (*body_cap)(cm_http_method_t method, const char *path,
                       const char *content_type); /* NULL: none */
    uint64_t drain_limit_ns;                      /* longest drain */
} cm_service_opts_t;

/**
 * Reads the operators' token, loads TLS and makes the workers' loops (cm_server_new).
 * Main thread, start-up (reads files). NULL + err.
 */
cm_service_t *cm_service_new(const cm_service_opts_t *o, char *err, size_t errlen);
cm_server_t *cm_service_server(cm_service_t *s);
/** The number of workers. */
int cm_service_workers(const cm_service_t *s);

/**
 * Makes every worker's instance, worker 0 first. Instance 0 is first (the caller's);
 * the others are zeroed allocations of size bytes, freed by cm_service_free.
 * make(first, s, i, instance, err) fills instance i (and makes it listen with
 * cm_worker_listen); a non-empty err means it failed. cm_service_free later calls
 * unmake(instance) for each made (even partly) instance, the last one first. 0, or -1 + err.
 */
__attribute__((warn_unused_result)) int cm_service_start(
    cm_service_t *s, void *first, size_t size,
    void (*make)(void *first, cm_service_t *s, int i, void *instance, char *err, size_t errlen),
    void (*unmake)(void *instance), char *err, size_t errlen);
/** Worker i's instance (NULL before it was made). */
void *cm_service_instance(const cm_service_t *s, int i);

/** Runs every worker until SIGTERM/SIGINT and the drain of in-flight requests. */
int cm_service_run(cm_service_t *s);
/** Unmakes every instance, then frees the loops, the registry, TLS, the token. NULL is fine. */
void cm_service_free(cm_service_t *s);

/**
 * Main thread, before cm_service_run: rc (borrowed; it must outlive the hook) becomes
 * the configuration cm_svc_config shows, and each SIGHUP calls apply(arg, snapshot) on
 * the reload thread. 0, or -1 when the hook cannot be installed.
 */
__attribute__((warn_unused_result)) int cm_service_watch_config(cm_service_t *s,
                                                                cm_reload_config_t *rc,
                                                                cm_reload_apply_fn apply,
                                                                void *arg);

/**
 * The end of a service's main(), main thread: installs rc as the SIGHUP reload (as
 * cm_service_watch_config, with apply and arg), runs every worker until the drain, then
 * frees rc before the caller frees its instances, so no reload runs on a freed server.
 * rc is taken (freed on every path). 0 after a clean stop; 1 when the hook could not be
 * installed (logged) or the run failed.
 */
int cm_service_serve(cm_service_t *s, cm_reload_config_t *rc, cm_reload_apply_fn apply, void *arg);

/** Reload thread: the operators' token re-read from path, replaced when it changed. 0/-1. */
__attribute__((warn_unused_result)) int cm_service_reload_token(cm_service_t *s, const char *path,
                                                                char *err, size_t errlen);

/** The log settings of a snapshot, checked before a reload applies anything. */
typedef struct cm_service_log {
    cm_log_level_t level;
    cm_log_format_t format;
    bool access_log;
} cm_service_log_t;
__attribute__((warn_unused_result)) int cm_service_log_parse(cm_service_log_t *out,
                                                             const char *level, const char *format,
                                                             bool access_log, char *err,
                                                             size_t errlen);
/** Puts checked log settings in force (the last step of a reload). */
void cm_service_log_apply(const cm_service_log_t *l);
/** Starts the process's logging with checked settings: name prefixes every line, and
 *  libevent's own messages go through cm_log. Main thread, first thing after the config. */
void cm_service_log_start(const cm_service_log_t *l, const char *name);

/* --- a worker ---------------------------------------------------------------------- */

/** What a service's worker tells the shell about itself. */
typedef struct cm_svc_worker_spec {
    const char *const *endpoints; /* a name per endpoint index */
    size_t nendpoints;
    bool (*backends)(void *arg, json_t *o); /* cm_svc_worker_t.backends */
    void *arg;
    const char *down;
} cm_svc_worker_spec_t;

/**
 * Fills w for worker i of s (main thread, while making the instance): its loop, drain,
 * registry, readiness and <prefix>_request_seconds over the spec's endpoints.
 */
void cm_svc_worker_init(cm_svc_worker_t *w, cm_service_t *s, int i,
                        const cm_svc_worker_spec_t *spec);
/** The configuration being served (NULL: no reloads watched). */
cm_reload_config_t *cm_svc_config(const cm_svc_worker_t *w);

/** The admin bearer token check (constant time). True when it matches. */
bool cm_svc_admin_ok(const cm_svc_worker_t *w, cm_req_t *req);
/** The admin gate: true when authorized, else answers 401 unauthorized under ep. */
bool cm_svc_admin_gate(cm_svc_worker_t *w, cm_req_t *req, size_t ep);

/**
 * Runs fn(peer, event, b) on every other worker's thread (peer: that worker's instance);
 * each ends with cm_bcast_ack(b). Then done(arg) on this worker's thread.
 */
void cm_svc_sync_event(cm_svc_worker_t *w, const char *event,
                       void (*fn)(void *peer, const char *event, cm_bcast_t *b),
                       void (*done)(void *arg), void *arg);

/**
 * The shared routes: GET /healthz and /readyz on both listeners, GET /metrics on the
 * admin one (seg/n: the decoded path). True when it answered.
 */
bool cm_svc_route_shared(cm_svc_worker_t *w, cm_req_t *req, char **seg, int n, bool admin);
/** Which shared route a request is: CM_SVC_EP_HEALTH, _READY, _METRICS (admin only), or
 *  -1 when none. Pure. */
int cm_svc_shared_endpoint(cm_http_method_t method, char **seg, int n, bool admin);

/** The answer to /readyz. */
typedef struct cm_svc_readiness {
    int code;            /* 200, or 503 */
    const char *message; /* 503: why (static, or the service's down message) */
    json_t *body;        /* {"status", each backend, "workers"}: the caller's */
} cm_svc_readiness_t;
/**
 * The answer from this worker's backends (their fields, taken; up: all are), whether
 * every worker is ready, and whether the process is draining: 200 only when all are up
 * and it is not draining (a draining process says "shutting down"; status stays what
 * the backends and workers say). Pure.
 */
cm_svc_readiness_t cm_svc_readiness(json_t *backends, bool backends_up, bool workers, bool draining,
                                    const char *down);

/* --- requests ---------------------------------------------------------------------- */

/** Starts a request context (counts it in flight, names its route). */
void cm_svc_req_start(cm_svc_req_t *r, cm_svc_worker_t *w, cm_req_t *req, size_t ep);
/** Ends the request context when a cm_http helper already answered. */
void cm_svc_req_replied(cm_svc_req_t *r);
/* Each answers the request, records the latency and ends the request context. */
void cm_svc_reply_json(cm_svc_req_t *r, int code, json_t *body);
void cm_svc_reply_error(cm_svc_req_t *r, int code, const char *error, const char *message,
                        json_t *extra);
void cm_svc_reply_empty(cm_svc_req_t *r, int code);
void cm_svc_reply_text(cm_svc_req_t *r, int code, const char *ctype, const char *body, size_t len);
/** 503 with Retry-After (cm_server_reply_unavailable). */
void cm_svc_reply_unavailable(cm_svc_req_t *r, const char *what, const char *err);
/** Starts, answers error under ep and ends a request in one call (routing refusals). */
void cm_svc_refuse(cm_svc_worker_t *w, cm_req_t *req, size_t ep, int code, const char *error,
                   const char *message);

#endif
