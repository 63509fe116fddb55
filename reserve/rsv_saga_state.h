/*
 * rsv_saga_state — the checkout state machine as data (docs/design.md invariants 6-8): every
 * state a checkout can be in, one names table, one transition table (from → to, and
 * why), what each state means to the buyer. Pure data and lookups, no I/O, any thread:
 * the driver that moves a checkout along these transitions, one committed Postgres step
 * each, is rsv_saga; tests/unit/reserve/test_rsv_saga_state.c checks these tables against the
 * diagram below and against the CHECK constraint of checkouts.state in a real Postgres
 * with every migration applied.
 *
 *   created → hold_extended → payment_requested → paid | declined | unknown
 *   paid → converted → confirmed          paid → refunding → refunded
 *   (one commit each: created → hold_extended → payment_requested | failed when a new
 *   checkout is recorded after its hold's extend, migration 005; paid → converted →
 *   confirmed with the booking, 004)
 *   declined → failed                     unknown → paid | declined | released
 *   created | hold_extended → failed (hold gone) | released (abandoned)
 *   payment_requested | unknown → requires_action (3-D Secure: the hold is extended to
 *   its max life, the buyer is sent to the provider's challenge)
 *   requires_action → paid | declined (the challenge answered, told by the webhook's
 *   nudge or a lookup) | released (abandoned: the hold's max life passed, the intent
 *   canceled at the provider; one that succeeded after all is paid → refunding)
 *   released | failed → refunding        (money turned up after all: a late charge)
 *
 * Terminal states (confirmed, failed, released, refunded) need nothing more from the
 * saga. A checkout that holds money is never terminal except confirmed or refunded: when
 * a charge of a released or failed checkout turns up (its answer arrives late, or the
 * provider's ledger shows it, rsv_ledger), the checkout moves to refunding.
 *
 * In memory a state is always an rsv_saga_state_t; its name (rsv_saga_state_name,
 * rsv_saga_state_parse) is used only where Postgres stores or returns it, in logs and
 * in fault-point names.
 */
#ifndef RSV_SAGA_STATE_H
#define RSV_SAGA_STATE_H

#include <stdbool.h>
#include <stddef.h>

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
    RSV_SAGA_REQUIRES_ACTION, /* the buyer must authenticate (3-D Secure) first, 012 */
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
 * What a buyer sees (docs/api.md, GET /v1/checkouts/{id}): confirmed, refunded, released,
 * failed, requires_action (the buyer's turn: authenticate), or pending for every other
 * state the saga still works on (internal states stay internal). "pending" for an invalid
 * state.
 */
const char *rsv_saga_client_state(rsv_saga_state_t st);

/**
 * What starting a checkout found (onsale_saga_start's outcome, deploy/sql/functions.sql):
 * a new checkout leased to the caller, an open one whose lease had lapsed (now the
 * caller's), one another request is driving, a terminal one to replay, or the key used
 * for another request.
 */
typedef enum {
    RSV_START_NEW,
    RSV_START_RESUME,
    RSV_START_BUSY,
    RSV_START_DONE,
    RSV_START_MISMATCH,
    RSV_START_NOUTCOMES,
    RSV_START_INVALID = -1
} rsv_saga_start_t;

/** The outcome named name ("new", "resume", "busy", "done", "mismatch"), or RSV_START_INVALID. */
rsv_saga_start_t rsv_saga_start_parse(const char *name);

#endif
