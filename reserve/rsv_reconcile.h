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

#include "rsv_saga.h"

typedef struct rsv_server rsv_server_t;
typedef struct rsv_reconcile rsv_reconcile_t;

/** Starts the reconciler timer (interval and thresholds from srv->cfg). */
rsv_reconcile_t *rsv_reconcile_new(rsv_server_t *srv);
/** Checkouts the reconciler is driving right now. */
int rsv_reconcile_running(const rsv_reconcile_t *r);
/** Stops claiming; the struct goes with the last drive in flight. NULL is fine. */
void rsv_reconcile_free(rsv_reconcile_t *r);

#endif
