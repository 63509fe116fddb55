/*
 * test_rsv_saga — reserve/rsv_saga.c below its I/O: rsv_saga_extend_verdict, what the
 * hold's extend at checkout start means for the checkout (on to payment_requested, or
 * created → failed with the answer the buyer gets and the transition's reason), for every
 * status the extend script can answer; rsv_saga_refund_why, what each refund reason tells
 * the buyer (docs/api.md) and which ones give a converted hold's units back first. The driver
 * itself is exercised against real Redis, Postgres and the payment simulator by the integration
 * saga suite.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "rsv_saga.h"

/* The verdict for a view of status st and amount (the checkout's amount is 1500). */
typedef struct verdict {
    rsv_saga_extend_t v;
    int code;
    char *body;
    const char *reason;
} verdict_t;

static verdict_t judge(rsv_hold_status_t st, int64_t hold_amount)
{
    rsv_hold_view_t view;
    memset(&view, 0, sizeof(view));
    view.status = st;
    view.amount = hold_amount;
    verdict_t out;
    out.v = rsv_saga_extend_verdict("co_test", &view, 1500, &out.code, &out.body, &out.reason);
    return out;
}

/* The body is {error, message, checkout_id} naming the checkout. */
static void assert_body(const char *body, const char *error)
{
    json_t *o = json_loads(body, 0, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "error")), error);
    assert_string_equal(json_string_value(json_object_get(o, "checkout_id")), "co_test");
    assert_non_null(json_string_value(json_object_get(o, "message")));
    assert_int_equal(json_object_size(o), 3);
    json_decref(o);
}

static void extended_with_the_amount_goes_on(void **state)
{
    (void)state;
    verdict_t r = judge(RSV_HOLD_OK, 1500);
    assert_int_equal(r.v, RSV_SAGA_EXTEND_OK);
    assert_int_equal(r.code, 0);
    assert_null(r.body);
    assert_null(r.reason);
}

static void another_amount_is_a_400(void **state)
{
    (void)state;
    verdict_t r = judge(RSV_HOLD_OK, 1499);
    assert_int_equal(r.v, RSV_SAGA_EXTEND_MISMATCH);
    assert_int_equal(r.code, 400);
    assert_string_equal(r.reason, "amount mismatch");
    assert_body(r.body, "amount_mismatch");
    free(r.body);
}

static void each_failure_has_its_answer(void **state)
{
    (void)state;
    static const struct {
        rsv_hold_status_t st;
        rsv_saga_extend_t v;
        int code;
        const char *error, *reason;
    } cases[] = {
        {RSV_HOLD_NOTFOUND, RSV_SAGA_EXTEND_NOTFOUND, 404, "unknown_hold",
         "hold not found at checkout start"},
        {RSV_HOLD_EXPIRED, RSV_SAGA_EXTEND_EXPIRED, 409, "hold_expired",
         "hold expired before payment"},
        {RSV_HOLD_GONE, RSV_SAGA_EXTEND_EXPIRED, 409, "hold_expired",
         "hold expired before payment"},
        {RSV_HOLD_CONVERTED, RSV_SAGA_EXTEND_CONVERTED, 409, "hold_converted",
         "hold already converted"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* The amount is not looked at once the hold is not there to charge for. */
        verdict_t r = judge(cases[i].st, 7);
        assert_int_equal(r.v, cases[i].v);
        assert_int_equal(r.code, cases[i].code);
        assert_string_equal(r.reason, cases[i].reason);
        assert_body(r.body, cases[i].error);
        free(r.body);
        /* Each is a transition the table has. */
        assert_true(rsv_saga_allowed(RSV_SAGA_CREATED, RSV_SAGA_FAILED));
        assert_true(rsv_saga_allowed(RSV_SAGA_HOLD_EXTENDED, RSV_SAGA_FAILED));
    }
}

static void no_extend_answer_is_an_error(void **state)
{
    (void)state;
    /* Words the extend script never answers (STALE is retried inside rsv_hold). */
    const rsv_hold_status_t others[] = {RSV_HOLD_STALE, RSV_HOLD_AMOUNT, RSV_HOLD_NOOP,
                                        RSV_HOLD_OTHER};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        verdict_t r = judge(others[i], 1500);
        assert_int_equal(r.v, RSV_SAGA_EXTEND_ERROR);
        assert_int_equal(r.code, 0);
        assert_null(r.body);
        assert_null(r.reason);
    }
}

static void each_refund_reason_has_its_answer(void **state)
{
    (void)state;
    static const struct {
        const char *reason, *error;
        int code;
        bool give_back;
    } cases[] = {
        {"hold_expired", "hold_expired", 409, false},
        {"late_charge", "payment_not_completed", 409, true},
        {"booking_failed", "booking_failed", 500, true},
        {"sold_out", "sold_out", 409, true},
        {"hold_changed", "hold_changed", 409, true},
        {"seat_unavailable", "seat_unavailable", 409, true},
        /* written before reasons were */
        {"", "hold_expired", 409, false},
        {NULL, "hold_expired", 409, false},
        /* another version's reason: its own name, nothing given back */
        {"shiny_new_reason", "shiny_new_reason", 409, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rsv_saga_refund_t w = rsv_saga_refund_why(cases[i].reason);
        assert_string_equal(w.error, cases[i].error);
        assert_int_equal(w.code, cases[i].code);
        assert_int_equal(w.give_back, cases[i].give_back);
        assert_non_null(strstr(w.message, "refunded"));
    }
    /* Each message says what happened, in its own words. */
    assert_string_not_equal(rsv_saga_refund_why("sold_out").message,
                            rsv_saga_refund_why("hold_changed").message);
    assert_non_null(strstr(rsv_saga_refund_why("late_charge").message, "came later"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(extended_with_the_amount_goes_on),
        cmocka_unit_test(another_amount_is_a_400),
        cmocka_unit_test(each_failure_has_its_answer),
        cmocka_unit_test(no_extend_answer_is_an_error),
        cmocka_unit_test(each_refund_reason_has_its_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
