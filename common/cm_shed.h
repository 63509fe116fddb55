/*
 * cm_shed — the overload policy of one listener on one event loop: when the loop is
 * truly behind, new requests are answered 503 overloaded with Retry-After before any
 * expensive work, and each shed is counted by its cause (docs/design.md, "Overload").
 *
 * The signal is the loop's own lag, measured by a probe timer that should fire every
 * CM_SHED_PROBE_MS at the loop's default (client) priority: how late it runs is how long
 * new client work waits to be served. Everything here runs on the loop's thread; the
 * counters are atomic (cm_metrics) and may be shared by every loop of a process.
 */
#ifndef CM_SHED_H
#define CM_SHED_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "cm_metrics.h"

#define CM_SHED_PROBE_MS 50

/** Why work was shed; the label value of the metric is cm_shed_cause_name(). */
typedef enum {
    CM_SHED_LOOP_LAG,   /* a request answered 503: the loop lagged past lag_ms */
    CM_SHED_HANDSHAKES, /* accepting paused: max_handshakes TLS handshakes in flight */
    CM_SHED_ACCEPT_LAG, /* accepting paused: a probe found the loop lagging past lag_ms */
    CM_SHED_NCAUSES
} cm_shed_cause_t;

typedef struct cm_shed cm_shed_t;

/**
 * A policy on base. lag_ms 0: never shed for lag (no probe runs). retry_after_s: the
 * Retry-After of a shed answer. counters[cause] may be NULL (not counted); they are not
 * owned and must outlive the policy. on_lag (may be NULL) runs from the probe, on base's
 * thread, each time the loop starts (true) or stops (false) lagging past lag_ms; the
 * start is counted as CM_SHED_ACCEPT_LAG. Returns a policy freed with cm_shed_free.
 */
cm_shed_t *cm_shed_new(struct event_base *base, int lag_ms, int retry_after_s,
                       cm_counter_t *const counters[CM_SHED_NCAUSES],
                       void (*on_lag)(bool lagging, void *arg), void *arg);

/** Whether the last probe found the loop lagging past lag_ms (NULL s: false). */
bool cm_shed_lagging(const cm_shed_t *s);
void cm_shed_free(cm_shed_t *s);

/**
 * Whether a new request must be shed now: true when the loop's lag (the last probe's,
 * or how overdue the next probe already is) exceeds lag_ms; the shed is counted. One
 * clock read; no allocation.
 */
bool cm_shed_request(cm_shed_t *s);

/** Counts one shed of cause (e.g. the listener paused for handshakes). NULL s: nothing. */
void cm_shed_count(cm_shed_t *s, cm_shed_cause_t cause);

/** The Retry-After of a shed answer in seconds, and as a decimal string owned by s. */
int cm_shed_retry_after_s(const cm_shed_t *s);
const char *cm_shed_retry_after(const cm_shed_t *s);

/** The loop's current lag in milliseconds (0 when no probe runs): for tests and logs. */
int64_t cm_shed_lag_ms(const cm_shed_t *s);

/** "loop_lag", "handshakes", "accept_lag". */
const char *cm_shed_cause_name(cm_shed_cause_t cause);

#endif
