/*
 * rsv_saga_state — see rsv_saga_state.h. The two tables below are the whole state
 * machine; keep deploy/sql/functions.sql (the terminal list of the reconciler's claim)
 * and the migrations (the CHECK on checkouts.state, the reconciler's index) in step with
 * them: test_rsv_saga_state compares them.
 */
#include "rsv_saga_state.h"

#include <string.h>

const char *const rsv_saga_state_names[RSV_SAGA_NSTATES] = {
    [RSV_SAGA_CREATED] = "created",
    [RSV_SAGA_CONVERTING] = "converting",
    [RSV_SAGA_HOLD_EXTENDED] = "hold_extended",
    [RSV_SAGA_PAYMENT_REQUESTED] = "payment_requested",
    [RSV_SAGA_PAID] = "paid",
    [RSV_SAGA_DECLINED] = "declined",
    [RSV_SAGA_UNKNOWN] = "unknown",
    [RSV_SAGA_CONVERTED] = "converted",
    [RSV_SAGA_REFUNDING] = "refunding",
    [RSV_SAGA_CONFIRMED] = "confirmed",
    [RSV_SAGA_FAILED] = "failed",
    [RSV_SAGA_RELEASED] = "released",
    [RSV_SAGA_REFUNDED] = "refunded",
    [RSV_SAGA_REQUIRES_ACTION] = "requires_action",
};

#define T(f, t, w)                                                                                 \
    {                                                                                              \
        RSV_SAGA_##f, RSV_SAGA_##t, w                                                              \
    }
const rsv_saga_transition_t rsv_saga_transitions[] = {
    T(CREATED, HOLD_EXTENDED, "hold extended at checkout start"),
    T(CREATED, FAILED, "hold gone, expired, converted, or amount mismatch"),
    T(CREATED, RELEASED, "abandoned before payment was requested"),
    T(HOLD_EXTENDED, PAYMENT_REQUESTED, "payment requested"),
    T(HOLD_EXTENDED, FAILED, "hold gone, expired, converted, or amount mismatch"),
    T(HOLD_EXTENDED, RELEASED, "abandoned before payment was requested"),
    T(PAYMENT_REQUESTED, PAID, "the provider confirmed the charge"),
    T(PAYMENT_REQUESTED, DECLINED, "the provider declined the charge"),
    T(PAYMENT_REQUESTED, UNKNOWN, "no definite answer from the provider"),
    T(PAYMENT_REQUESTED, RELEASED, "the provider has no charge under the checkout's key"),
    T(PAYMENT_REQUESTED, REQUIRES_ACTION, "the provider asks the buyer to authenticate"),
    T(UNKNOWN, REQUIRES_ACTION, "the provider, asked by key, waits for the buyer to authenticate"),
    T(REQUIRES_ACTION, PAID, "the buyer authenticated; the provider has the charge"),
    T(REQUIRES_ACTION, DECLINED, "the buyer's authentication failed"),
    T(REQUIRES_ACTION, RELEASED, "authentication abandoned: the intent is canceled"),
    T(UNKNOWN, PAID, "the provider, asked by key, has the charge"),
    T(UNKNOWN, DECLINED, "the provider, asked by key, declined it"),
    T(UNKNOWN, RELEASED, "the provider has no charge under the checkout's key"),
    T(CONVERTING, PAID, "the provider, asked by key, has the charge"),
    T(CONVERTING, DECLINED, "the provider, asked by key, declined it"),
    T(CONVERTING, UNKNOWN, "no definite answer from the provider"),
    T(CONVERTING, RELEASED, "the provider has no charge under the checkout's key"),
    T(PAID, CONVERTED, "hold re-checked in Redis; booking inserted"),
    T(PAID, REFUNDING, "hold expired, unit taken, pool sold out, or booking kept failing"),
    T(CONVERTED, CONFIRMED, "booking confirmed"),
    T(DECLINED, FAILED, "payment declined"),
    T(REFUNDING, REFUNDED, "the provider confirmed the refund"),
    T(RELEASED, REFUNDING, "a charge of this checkout turned up late: refund"),
    T(FAILED, REFUNDING, "a charge of this checkout turned up late: refund"),
};
#undef T
const size_t rsv_saga_ntransitions = sizeof(rsv_saga_transitions) / sizeof(rsv_saga_transitions[0]);

rsv_saga_state_t rsv_saga_state_parse(const char *name)
{
    if (name == NULL)
        return RSV_SAGA_INVALID;
    for (int i = 0; i < RSV_SAGA_NSTATES; i++)
        if (strcmp(name, rsv_saga_state_names[i]) == 0)
            return (rsv_saga_state_t)i;
    return RSV_SAGA_INVALID;
}

const char *rsv_saga_state_name(rsv_saga_state_t st)
{
    return st >= 0 && st < RSV_SAGA_NSTATES ? rsv_saga_state_names[st] : "invalid";
}

bool rsv_saga_is_terminal(rsv_saga_state_t st)
{
    switch (st) {
    case RSV_SAGA_CONFIRMED:
    case RSV_SAGA_FAILED:
    case RSV_SAGA_RELEASED:
    case RSV_SAGA_REFUNDED:
        return true;
    case RSV_SAGA_CREATED:
    case RSV_SAGA_CONVERTING:
    case RSV_SAGA_HOLD_EXTENDED:
    case RSV_SAGA_PAYMENT_REQUESTED:
    case RSV_SAGA_PAID:
    case RSV_SAGA_DECLINED:
    case RSV_SAGA_UNKNOWN:
    case RSV_SAGA_CONVERTED:
    case RSV_SAGA_REFUNDING:
    case RSV_SAGA_REQUIRES_ACTION:
    case RSV_SAGA_NSTATES:
    case RSV_SAGA_INVALID:
        break;
    }
    return false;
}

bool rsv_saga_terminal(const char *state)
{
    return rsv_saga_is_terminal(rsv_saga_state_parse(state));
}

bool rsv_saga_allowed(rsv_saga_state_t from, rsv_saga_state_t to)
{
    for (size_t i = 0; i < rsv_saga_ntransitions; i++)
        if (rsv_saga_transitions[i].from == from && rsv_saga_transitions[i].to == to)
            return true;
    return false;
}

bool rsv_saga_allowed_names(const char *from, const char *to)
{
    rsv_saga_state_t f = rsv_saga_state_parse(from), t = rsv_saga_state_parse(to);
    return f != RSV_SAGA_INVALID && t != RSV_SAGA_INVALID && rsv_saga_allowed(f, t);
}

const char *rsv_saga_client_state(rsv_saga_state_t st)
{
    if (st == RSV_SAGA_REQUIRES_ACTION)
        return rsv_saga_state_names[st];
    return rsv_saga_is_terminal(st) ? rsv_saga_state_names[st] : "pending";
}

rsv_saga_start_t rsv_saga_start_parse(const char *name)
{
    static const char *const names[RSV_START_NOUTCOMES] = {
        [RSV_START_NEW] = "new",   [RSV_START_RESUME] = "resume",     [RSV_START_BUSY] = "busy",
        [RSV_START_DONE] = "done", [RSV_START_MISMATCH] = "mismatch",
    };
    if (name == NULL)
        return RSV_START_INVALID;
    for (int i = 0; i < RSV_START_NOUTCOMES; i++)
        if (strcmp(name, names[i]) == 0)
            return (rsv_saga_start_t)i;
    return RSV_START_INVALID;
}
