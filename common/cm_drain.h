/*
 * cm_drain — running a server's event loop until SIGTERM/SIGINT, then draining.
 *
 * Event-loop thread. On the first signal the listener stops accepting, the owner's
 * readiness check can see draining() and answer 503, and the loop keeps running until
 * the requests in flight (a counter the owner keeps) reach zero or the drain limit
 * passes; a second signal exits at once. Every onsale server shuts down this way.
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
 * only). limit_ns: the longest the drain may take. Nothing is installed until run.
 */
cm_drain_t *cm_drain_new(struct event_base *base, cm_http_server_t *http, const char *name,
                         const int *inflight, uint64_t limit_ns);
/**
 * Grace before the listener closes: for ms after the signal the server still accepts,
 * readiness answers 503 and every reply closes its connection, so a load balancer's health
 * check moves new traffic away and keep-alive clients reconnect elsewhere before anything
 * is refused. 0 (the default): stop accepting at once.
 */
void cm_drain_set_grace(cm_drain_t *d, int ms);
/** Installs the signal handlers, runs the loop to the end of the drain. 0 or -1. */
int cm_drain_run(cm_drain_t *d);
/** True once a stop signal arrived. */
bool cm_drain_draining(const cm_drain_t *d);
/** NULL is fine. */
void cm_drain_free(cm_drain_t *d);

#endif
