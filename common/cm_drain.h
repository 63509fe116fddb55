/*
 * cm_drain — the graceful stop of one event loop (one server worker).
 *
 * Runs on the loop's own thread, except cm_drain_start/cm_drain_now, which any thread
 * may call (they only wake the loop: libevent's pthreads locking must be on). On start
 * the loop's listeners stop accepting, the owner's readiness check sees draining() and
 * answers 503, and the loop keeps running until the requests in flight (a counter the
 * owner keeps) reach zero or the drain limit passes; then the loop exits. cm_server
 * starts the drain of every worker on SIGTERM/SIGINT; a second signal exits at once.
 */
#ifndef CM_DRAIN_H
#define CM_DRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "cm_http.h"

struct event_base;
typedef struct cm_drain cm_drain_t;

/**
 * name: for the log lines. inflight: the owner's count of requests being served (read
 * atomically, on the loop thread). limit_ns: the longest the drain may take.
 */
cm_drain_t *cm_drain_new(struct event_base *base, const char *name, const int *inflight,
                         uint64_t limit_ns);
/** A listener that stops accepting when the drain starts (at most 4). */
void cm_drain_add_http(cm_drain_t *d, cm_http_server_t *http);
/**
 * Grace before the listeners close: for ms after the start the server still accepts,
 * readiness answers 503 and every reply closes its connection, so a load balancer's health
 * check moves new traffic away and keep-alive clients reconnect elsewhere before anything
 * is refused. 0 (the default): stop accepting at once.
 */
void cm_drain_set_grace(cm_drain_t *d, int ms);
/** Any thread: begins the drain on the loop's thread. A second call exits at once. */
void cm_drain_start(cm_drain_t *d);
/** Any thread: True once the drain has begun. */
bool cm_drain_draining(const cm_drain_t *d);
/** NULL is fine. */
void cm_drain_free(cm_drain_t *d);

#endif
