/*
 * rsv_saga — the checkout state machine (DESIGN.md invariants 6-8): every state a
 * checkout can be in, one names table, one transition table (from → to, and why), what
 * each state means to the buyer. Pure data and lookups, no I/O: rsv_reconcile drives a
 * checkout along these transitions (each one a committed Postgres step), the reconciler
 * is a timer over it, and tests/unit/reserve/test_rsv_saga.c checks the states against
 * the CHECK constraint of checkouts.state in a real Postgres with every migration
 * applied.
 *
 *   created → hold_extended → payment_requested → paid | declined | unknown
 *   paid → converted → confirmed          paid → refunding → refunded
 *   (one commit each: created → hold_extended → payment_requested | failed when a new
 *   checkout is recorded after its hold's extend, migration 005; paid → converted →
 *   confirmed with the booking, 004)
 *   declined → failed                     unknown → paid | declined | released
 *   created | hold_extended → failed (hold gone) | released (abandoned)
 *   released | failed → refunding        (money turned up after all: a late charge)
 *
 * Terminal states (confirmed, failed, released, refunded) need nothing more from the
 * saga. A checkout that holds money is never terminal except confirmed or refunded: when
 * a charge of a released or failed checkout turns up (its answer arrives late, or the
 * provider's ledger shows it, rsv_ledger), the checkout moves to refunding.
 *
 * The tables and lookups: any thread. rsv_saga_drive() (event-loop thread) takes one
 * checkout from the state Postgres has for it to a terminal state (or to a state it must
 * wait in), one commit per step (deploy/sql; the booking's commit holds two transitions),
 * refusing any step the transition table does not have. The confirm handler drives its own checkout
 * in the foreground (it extends the hold and charges); the reconciler drives open ones in the
 * background (it only asks the provider, so a buyer who walked away is never charged
 * late). The provider calls are idempotent (charge key = checkout id, refund key = "rf_"
 * + checkout id), so repeating any step after a crash is harmless.
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

#include "cm_parse.h"
#include "rsv_hold.h"
#include "rsv_pay.h"

typedef struct rsv_server rsv_server_t;

typedef enum {
    RSV_SAGA_CREATED,
    RSV_SAGA_CONVERTING, /* written by the pre-saga code of 001; resolved like unknown */
    RSV_SAGA_HOLD_EXTENDED,
    RSV_SAGA_PAYMENT_REQUESTED,
    RSV_SAGA_PAID,
    RSV_SAGA_DECLINED,
    RSV_SAGA_UNKNOWN,
    RSV_SAGA_CONVERTED,
    RSV_SAGA_REFUNDING,
    RSV_SAGA_CONFIRMED,
    RSV_SAGA_FAILED,
    RSV_SAGA_RELEASED,
    RSV_SAGA_REFUNDED,
    RSV_SAGA_NSTATES,
    RSV_SAGA_INVALID = -1
} rsv_saga_state_t;

/** The state's name as stored in checkouts.state, by rsv_saga_state_t. */
extern const char *const rsv_saga_state_names[RSV_SAGA_NSTATES];

/** One allowed move. */
typedef struct rsv_saga_transition {
    rsv_saga_state_t from, to;
    const char *why;
} rsv_saga_transition_t;

extern const rsv_saga_transition_t rsv_saga_transitions[];
extern const size_t rsv_saga_ntransitions;

/** The state named name, or RSV_SAGA_INVALID. NULL is fine. */
rsv_saga_state_t rsv_saga_state_parse(const char *name);
/** Its name ("invalid" out of range). */
const char *rsv_saga_state_name(rsv_saga_state_t st);
/** True for confirmed, failed, released, refunded. */
bool rsv_saga_is_terminal(rsv_saga_state_t st);
/** rsv_saga_is_terminal of a state name (false for unknown names). */
bool rsv_saga_terminal(const char *state);
/** True when the transition table has from → to. */
bool rsv_saga_allowed(rsv_saga_state_t from, rsv_saga_state_t to);
/** By name: true when every state is valid and the move is in the table. */
bool rsv_saga_allowed_names(const char *from, const char *to);
/**
 * What a buyer sees (API.md, GET /v1/checkouts/{id}): confirmed, refunded, released,
 * failed, or pending for every state the saga still works on (internal states stay
 * internal). "pending" for an invalid state.
 */
const char *rsv_saga_client_state(rsv_saga_state_t st);

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

/** Kills the process (SIGKILL) when `when`:`state` is a configured fault point. */
void rsv_saga_fault(rsv_server_t *srv, const char *when, const char *state);

#endif
