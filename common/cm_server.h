/*
 * cm_server — the skeleton every onsale server runs on: N workers, each one event loop
 * on its own thread with its own listeners (SO_REUSEPORT on one port), one shared
 * metrics registry (so /metrics shows process totals), request accounting (in flight,
 * latency), the standard gauges, admin bearer checks, and the drain of every worker on
 * SIGTERM/SIGINT.
 *
 * Threads: cm_server_new, cm_worker_listen, cm_server_run and cm_server_free are called
 * from the main thread; run starts one thread per worker and keeps the main thread for
 * signals. Everything else about a worker happens on that worker's thread. The owner
 * (gateway, reserve) builds one complete instance of its own server per worker on
 * cm_worker_base(w) (its own Redis and Postgres clients, caches, timers), so module code
 * stays single-threaded; only what is shared between workers (this registry, read-only
 * config and keys, and whatever the owner deliberately shares) must be thread-safe.
 */
#ifndef CM_SERVER_H
#define CM_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_drain.h"
#include "cm_http.h"
#include "cm_metrics.h"
#include "cm_tls.h"

struct event_base;
typedef struct cm_server cm_server_t;
typedef struct cm_worker cm_worker_t;

typedef struct cm_server_opts {
    const char *name;          /* "gateway": log lines */
    const char *metric_prefix; /* "onsale_gateway": the standard gauges' names */
    int workers;               /* 0 = the number of online cores */
    const char *listen_addr;   /* the fans' listener */
    int port;                  /* 0 = any free port (every worker gets the same one) */
    const char *admin_addr;    /* the admin listener; NULL = none */
    int admin_port;            /* 0 = any free port */
    cm_tls_ctx_t *tls;         /* borrowed; NULL = plain HTTP */
    cm_http_limits_t limits;   /* per process: max_connections is split over the workers;
                                  max_conns_per_addr counts over every worker */
    uint64_t drain_limit_ns;   /* longest drain */
    int drain_grace_ms;        /* readiness 503 and closing replies before listeners close */
} cm_server_opts_t;

/** Creates the workers' event loops and the shared registry. NULL + err on failure. */
cm_server_t *cm_server_new(const cm_server_opts_t *o, char *err, size_t errlen);
/** The number of workers (the resolved setting). */
int cm_server_workers(const cm_server_t *s);
cm_worker_t *cm_server_worker(cm_server_t *s, int i);
/** The registry every worker registers into (the series are shared). */
cm_metrics_t *cm_server_metrics(cm_server_t *s);
/** The bound ports (after every worker listens). */
int cm_server_port(const cm_server_t *s);
int cm_server_admin_port(const cm_server_t *s);

/**
 * Binds this worker's listeners and routes their requests: the fans' listener to fans,
 * the admin listener (if configured) to admin, both with arg (the owner's per-worker
 * server). Main thread, worker 0 first. 0, or -1 + err.
 */
int cm_worker_listen(cm_worker_t *w, cm_http_handler_t fans, cm_http_handler_t admin, void *arg,
                     char *err, size_t errlen);
/**
 * Runs every worker until SIGTERM/SIGINT and the drain of every worker (a second signal
 * exits at once). Under a service manager ($NOTIFY_SOCKET, systemd Type=notify) it says
 * READY=1 once every worker's loop runs and cm_server_ready is true, WATCHDOG=1 while
 * every loop keeps checking in ($WATCHDOG_USEC), STOPPING=1 at the first signal.
 * Returns 0, or -1 when a worker cannot start.
 */
int cm_server_run(cm_server_t *s);
/**
 * Closes this worker's listeners and every open connection on them (teardown, after
 * run returned; the owner calls it where its own teardown order needs it).
 */
void cm_worker_close(cm_worker_t *w);
/** Closes what is still open, then frees the loops and the registry. NULL is fine. */
void cm_server_free(cm_server_t *s);

/* --- on a worker's thread -------------------------------------------------------- */

struct event_base *cm_worker_base(cm_worker_t *w);
cm_server_t *cm_worker_server(cm_worker_t *w);
int cm_worker_index(const cm_worker_t *w);
cm_drain_t *cm_worker_drain(cm_worker_t *w);
/** True once the process is stopping (readiness answers 503). */
bool cm_worker_draining(const cm_worker_t *w);

/** Counts a request in flight; returns its start time (for cm_worker_req_end). */
uint64_t cm_worker_req_begin(cm_worker_t *w);
/**
 * Records the request's latency in rq (may be NULL) under its endpoint index and the
 * status code of the answer this thread sent last (cm_access_last_status: call it right
 * after the cm_http_send_*), and ends it.
 */
void cm_worker_req_end(cm_worker_t *w, cm_metrics_requests_t *rq, size_t endpoint,
                       uint64_t start_ns);

/**
 * A gauge summed over the workers whose value comes from fn(arg), sampled on this
 * worker's own thread (every 250 ms and when the worker starts), so fn may read
 * loop-thread state without locks. Main thread, before run.
 */
void cm_worker_gauge(cm_worker_t *w, const char *name, const char *help, double (*fn)(void *),
                     void *arg);

/** Like cm_worker_gauge, but the process's value is the least over the workers (a 0/1
 *  "_up" that is 1 only while every worker's connection is up). */
void cm_worker_gauge_min(cm_worker_t *w, const char *name, const char *help, double (*fn)(void *),
                         void *arg);

/**
 * Whether this worker's backends (Redis, Postgres) are reachable: fn(arg) is sampled with
 * the gauges, on the worker's own thread. Main thread, before run. A worker with none
 * counts as ready.
 */
void cm_worker_readiness(cm_worker_t *w, bool (*fn)(void *), void *arg);
/**
 * True when every worker's last sample said ready. A load balancer's health check lands
 * on one worker while the fans' requests land on any, so /readyz asks this as well as its
 * own worker: a process is ready only when each worker can serve (a freshly started
 * worker may still be loading its Redis Cluster slot map, say).
 */
bool cm_server_ready(const cm_server_t *s);

/* --- between workers ------------------------------------------------------------- */

typedef struct cm_bcast cm_bcast_t;

/**
 * Runs fn(peer, arg, b) on every other worker's thread (peer: that worker's owner
 * instance, the arg given to cm_worker_listen); each call must end, at once or later
 * on that thread, with cm_bcast_ack(b). When every peer has acknowledged, done(arg)
 * runs on this worker's thread (at once, from inside this call, with a single worker).
 * arg must stay valid until done. Used to make a change seen by every worker before
 * it is acknowledged to a client (an operator's settings change, say).
 */
void cm_worker_broadcast(cm_worker_t *w, void (*fn)(void *peer, void *arg, cm_bcast_t *b),
                         void *arg, void (*done)(void *arg));
/** A peer finished its part of a broadcast (on the peer's thread). */
void cm_bcast_ack(cm_bcast_t *b);

/* --- helpers ----------------------------------------------------------------------- */

/** The request's bearer token equals token (constant time in content and length). */
bool cm_server_bearer_ok(cm_req_t *req, const char *token);

/**
 * Who is making an admin request, for the audit log: "<client address> (token
 * <8 hex of its SHA-256>)" — never the token itself.
 */
void cm_server_admin_who(cm_req_t *req, char *out, size_t outlen);

/** 503 unavailable with Retry-After: 1 and message "<what> failed (<err>); retry shortly". */
void cm_server_reply_unavailable(cm_req_t *req, const char *what, const char *err);

/**
 * "ip:port" (IPv4) or "[ipv6]:port" (port 0 = any) into addr (without the brackets) and
 * *port. 0, or -1 when malformed.
 */
int cm_server_parse_listen(const char *text, char *addr, size_t addrlen, int *port);

/** The number of online cores (at least 1). */
int cm_server_cores(void);

#endif
