/*
 * rsv_reconcile — the reconciler: a timer over the checkout saga (rsv_saga) that
 * finishes what a crash or a buyer who walked away left open (docs/design.md invariant 8).
 *
 * Runs on the event-loop thread. Every reconcile_interval_ms it claims open checkouts
 * untouched for reconcile_after_s whose lease lapsed (FOR UPDATE SKIP LOCKED plus a
 * lease, so several reserve processes never work on one checkout at once) and drives
 * each in the background (rsv_saga_drive): abandoned ones are released, ambiguous
 * payments resolved by asking the provider by idempotency key, paid ones converted or
 * refunded. A drive that stops short of a terminal state is retried after a back-off
 * (its attempts in seconds, at most 30). It also runs the provider-ledger check
 * (rsv_ledger) that finds charges the reserve never heard of.
 */
#ifndef RSV_RECONCILE_H
#define RSV_RECONCILE_H

#include "cm_metrics.h"
#include "rsv_saga.h"

typedef struct rsv_server rsv_server_t;
typedef struct rsv_reconcile rsv_reconcile_t;

/* What the reconciler did (the `action` label of reconciler_actions_total). */
typedef enum {
    RSV_RECONCILE_CLAIMED,  /* claimed an open checkout to drive */
    RSV_RECONCILE_FINISHED, /* a drive reached a terminal state */
    RSV_RECONCILE_RELEASED, /* the provider had no charge: released (rsv_saga) */
    RSV_RECONCILE_LOOKUP,   /* asked the provider by idempotency key (rsv_saga) */
    RSV_RECONCILE_ACTION_COUNT
} rsv_reconcile_action_t;

extern const char *const rsv_reconcile_action_names[RSV_RECONCILE_ACTION_COUNT];

/* The reconciler's series; the gauges are refreshed by its timer on worker 0. */
typedef struct rsv_reconcile_metrics {
    cm_counter_t *actions[RSV_RECONCILE_ACTION_COUNT];
    cm_gauge_t *checkouts[RSV_SAGA_NSTATES]; /* by state (rsv_saga_state_names) */
    cm_gauge_t *oldest_open;                 /* age (s) of the oldest non-terminal checkout */
} rsv_reconcile_metrics_t;

/** Registers the reconciler's series in reg and points rm at them. Main thread, at start. */
void rsv_reconcile_metrics_register(rsv_reconcile_metrics_t *rm, cm_metrics_t *reg);

/** Starts the reconciler timer (interval and thresholds from srv->cfg). */
rsv_reconcile_t *rsv_reconcile_new(rsv_server_t *srv);
/** Checkouts the reconciler is driving right now. */
int rsv_reconcile_running(const rsv_reconcile_t *r);
/** Stops claiming; the struct goes with the last drive in flight. NULL is fine. */
void rsv_reconcile_free(rsv_reconcile_t *r);

#endif
