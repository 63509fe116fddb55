/*
 * rsv_saga — the checkout saga's driver: takes one checkout along the transitions of
 * rsv_saga_state (the pure tables), doing the I/O each step needs — the hold's scripts in
 * Redis (rsv_hold), the payment provider (rsv_pay) and one committed Postgres step per
 * transition (deploy/sql/functions.sql: onsale_saga_step, onsale_saga_book).
 *
 * Event-loop thread. rsv_saga_drive() takes one checkout from the state Postgres has for
 * it to a terminal state (or to a state it must wait in), one commit per step (the
 * booking's commit holds two transitions), refusing any step the transition table does
 * not have. The confirm handler drives its own checkout in the foreground (it extends the
 * hold and charges); the reconciler drives open ones in the background (it only asks the
 * provider, so a buyer who walked away is never charged late). The provider calls are
 * idempotent (charge key = checkout id, refund key = "rf_" + checkout id), so repeating
 * any step after a crash is harmless. rsv_saga_extend_verdict is pure (any thread).
 *
 * Fault points (tests): the `fault` setting, e.g. ONSALE_RESERVE_FAULT=after:paid, makes
 * the process SIGKILL itself right after committing that transition ("before:<state>":
 * right before committing it). Several may be given, comma-separated. A commit holding
 * several transitions answers to the last one's after: point (after:payment_requested,
 * after:confirmed) and to the first one's before: point (before:created — the hold
 * extended, nothing recorded —, before:converted).
 */
#ifndef RSV_SAGA_H
#define RSV_SAGA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_access.h"
#include "cm_metrics.h"
#include "cm_parse.h"
#include "rsv_hold.h"
#include "rsv_pay.h"
#include "rsv_saga_state.h"

typedef struct rsv_server rsv_server_t;

#define RSV_CHECKOUT_ID_MAX 48

/** What the saga needs of a checkout row. */
typedef struct rsv_saga_row {
    char id[RSV_CHECKOUT_ID_MAX];
    rsv_saga_state_t state; /* checkouts.state, parsed where it was read */
    char event[CM_IDENT_MAX + 1];
    char buyer[128];
    char hold_id[RSV_HOLD_ID_MAX + 1];
    int64_t amount;
    char currency[4];
    char source[128];
    char charge_id[RSV_PAY_ID_MAX];
    char refund_id[RSV_PAY_ID_MAX];
    char refund_reason[32];
    char request_id[CM_ACCESS_ID_MAX + 1]; /* checkouts.request_id: the creating confirm's,
                                              sent in the charge's metadata; "" = none */
} rsv_saga_row_t;

typedef enum {
    RSV_SAGA_FOREGROUND, /* the buyer's confirm request: extends the hold, charges */
    RSV_SAGA_BACKGROUND, /* the reconciler: releases, asks the provider, converts, refunds */
} rsv_saga_mode_t;

/** How a drive ended. Valid during the callback only. */
typedef struct rsv_saga_end {
    const char *err;        /* a Redis/Postgres failure (answer 503; the checkout resumes later) */
    rsv_saga_state_t state; /* the checkout's state when the drive stopped */
    int code;               /* the answer for the buyer (stored for terminal states) */
    const char *body;       /* its JSON text */
    double hold_age_s;      /* confirmed now: seconds since the hold was taken, else -1 */
} rsv_saga_end_t;

typedef void (*rsv_saga_cb)(const rsv_saga_end_t *end, void *arg);

/**
 * Drives checkout row (copied) from row->state (a valid state). extension_ms: the hold extension of
 * checkout start (foreground only). cb is called exactly once, always later from the
 * loop.
 */
void rsv_saga_drive(rsv_server_t *srv, const rsv_saga_row_t *row, rsv_saga_mode_t mode,
                    int64_t extension_ms, rsv_saga_cb cb, void *arg);

/** What the hold's extend at checkout start says about a checkout (its script's answer). */
typedef enum {
    RSV_SAGA_EXTEND_OK,        /* extended, amount matches: on to payment_requested */
    RSV_SAGA_EXTEND_NOTFOUND,  /* created → failed, 404 unknown_hold */
    RSV_SAGA_EXTEND_EXPIRED,   /* created → failed, 409 hold_expired */
    RSV_SAGA_EXTEND_CONVERTED, /* created → failed, 409 hold_converted */
    RSV_SAGA_EXTEND_MISMATCH,  /* created → failed, 400 amount_mismatch */
    RSV_SAGA_EXTEND_ERROR,     /* not an answer of the extend script */
} rsv_saga_extend_t;

/**
 * Classifies the extend's answer v for checkout checkout_id of amount. For a failure,
 * *code, *body (heap, the caller frees it; it names checkout_id) and *reason (static: the
 * transition's reason) describe created → failed; else they are 0 / NULL.
 */
rsv_saga_extend_t rsv_saga_extend_verdict(const char *checkout_id, const rsv_hold_view_t *v,
                                          int64_t amount, int *code, char **body,
                                          const char **reason);

/**
 * Like rsv_saga_drive (foreground) for a checkout whose hold the caller extended itself
 * (extended: the extend's answer, taken — *extended is left empty) before
 * onsale_saga_start recorded it: no second extend, and the conversion uses its layout.
 */
void rsv_saga_drive_extended(rsv_server_t *srv, const rsv_saga_row_t *row, int64_t extension_ms,
                             rsv_hold_view_t *extended, rsv_saga_cb cb, void *arg);

/** What a refund tells the buyer, and whether the conversion's units go back first. */
typedef struct rsv_saga_refund {
    const char *error;   /* the answer's error code (static, or the reason itself) */
    int code;            /* its HTTP status */
    const char *message; /* static */
    bool give_back;      /* Redis converted the hold: give its units back before refunding */
} rsv_saga_refund_t;

/**
 * The refund of a checkout whose refund_reason is reason (NULL or "": hold_expired, as
 * written before reasons were): hold_expired, late_charge (payment_not_completed),
 * booking_failed (500), sold_out, hold_changed, seat_unavailable; any other reason is
 * answered as a unit taken under its own name, with nothing given back. Pure; the result
 * points into static data or reason.
 */
rsv_saga_refund_t rsv_saga_refund_why(const char *reason);

/** Kills the process (SIGKILL) when `when`:<state's name> is a configured fault point. */
void rsv_saga_fault(rsv_server_t *srv, const char *when, rsv_saga_state_t state);

/* The saga's series (the confirm handler counts the transitions committed with a checkout). */
typedef struct rsv_saga_metrics {
    cm_counter_t *transitions; /* checkout transitions committed */
    cm_counter_t *refunds;
    cm_counter_t *late_payments;        /* succeeded after their hold expired */
    cm_counter_t *uniqueness_conflicts; /* bookings refused by the unique constraint */
    cm_counter_t *booking_failures;     /* booking inserts that failed (not a conflict) */
    cm_counter_t *booking_abandoned;    /* paid checkouts refunded after book_max_attempts */
} rsv_saga_metrics_t;

/** Registers the saga's series in reg and points sm at them. Main thread, at start. */
void rsv_saga_metrics_register(rsv_saga_metrics_t *sm, cm_metrics_t *reg);

#endif
