/*
 * rsv_reconcile — the checkout saga's engine and the reconciler that finishes what a
 * crash left open (DESIGN.md invariants 6-8).
 *
 * Runs on the event-loop thread. rsv_reconcile_drive() takes one checkout from the state
 * Postgres has for it to a terminal state (or to a state it must wait in), one committed
 * transition per step along the transition table of rsv_saga (a step outside it is
 * refused before it reaches Postgres).
 *
 * The confirm handler drives its own checkout in the foreground (it extends the hold and
 * charges); the reconciler timer drives, in the background, every open checkout untouched
 * for reconcile_after_s whose lease lapsed: abandoned ones (nothing sent to the provider)
 * are released, ambiguous payments are resolved by asking the provider by idempotency key
 * (never by guessing), paid ones are converted or refunded. Claims use FOR UPDATE SKIP
 * LOCKED plus a lease, and every transition is conditional on the state it leaves, so
 * several reserve processes never work on one checkout at once and a late duplicate step
 * is a no-op; the provider calls themselves are idempotent (charge key = checkout id,
 * refund key = "rf_" + checkout id).
 *
 * Fault points (tests): the `fault` setting, e.g. ONSALE_RESERVE_FAULT=after:paid, makes
 * the process SIGKILL itself right after committing that transition ("before:<state>":
 * right before committing it). Several may be given, comma-separated.
 */
#ifndef RSV_RECONCILE_H
#define RSV_RECONCILE_H

#include <stdbool.h>
#include <stdint.h>

#include "cm_parse.h"
#include "rsv_hold.h"
#include "rsv_pay.h"
#include "rsv_saga.h"

typedef struct rsv_server rsv_server_t;
typedef struct rsv_reconcile rsv_reconcile_t;

#define RSV_CHECKOUT_ID_MAX 48

/** What the saga needs of a checkout row. */
typedef struct rsv_saga_row {
    char id[RSV_CHECKOUT_ID_MAX];
    char state[24];
    char event[CM_IDENT_MAX + 1];
    char buyer[128];
    char hold_id[RSV_HOLD_ID_MAX + 1];
    int64_t amount;
    char currency[4];
    char source[128];
    char charge_id[RSV_PAY_ID_MAX];
    char refund_id[RSV_PAY_ID_MAX];
    char refund_reason[32];
} rsv_saga_row_t;

typedef enum {
    RSV_SAGA_FOREGROUND, /* the buyer's confirm request: extends the hold, charges */
    RSV_SAGA_BACKGROUND, /* the reconciler: releases, asks the provider, converts, refunds */
} rsv_saga_mode_t;

/** How a drive ended. Valid during the callback only. */
typedef struct rsv_saga_end {
    const char *err;   /* a Redis/Postgres failure (answer 503; the checkout resumes later) */
    const char *state; /* the checkout's state when the drive stopped */
    int code;          /* the answer for the buyer (stored for terminal states) */
    const char *body;  /* its JSON text */
    double hold_age_s; /* confirmed now: seconds since the hold was taken, else -1 */
} rsv_saga_end_t;

typedef void (*rsv_saga_cb)(const rsv_saga_end_t *end, void *arg);

/**
 * Drives checkout row (copied) from row->state. extension_ms: the hold extension of
 * checkout start (foreground only). cb is called exactly once, always later from the
 * loop.
 */
void rsv_reconcile_drive(rsv_server_t *srv, const rsv_saga_row_t *row, rsv_saga_mode_t mode,
                         int64_t extension_ms, rsv_saga_cb cb, void *arg);

/** Kills the process (SIGKILL) when `when`:`state` is a configured fault point. */
void rsv_reconcile_fault(rsv_server_t *srv, const char *when, const char *state);

/** Starts the reconciler timer (interval and thresholds from srv->cfg). */
rsv_reconcile_t *rsv_reconcile_new(rsv_server_t *srv);
/** Checkouts the reconciler is driving right now. */
int rsv_reconcile_running(const rsv_reconcile_t *r);
/** Stops claiming; the struct goes with the last drive in flight. NULL is fine. */
void rsv_reconcile_free(rsv_reconcile_t *r);

#endif
