/*
 * Unit tests for gateway/gw_history.c's ring: order (oldest first), overwrite of the
 * oldest sample when full, unknown values kept as NAN, and a ring of one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "gw_history.h"

static void push(gw_history_ring_t *r, int64_t t, double x)
{
    double v[GW_HISTORY_NFIELDS];
    for (int f = 0; f < GW_HISTORY_NFIELDS; f++)
        v[f] = x + f;
    gw_history_ring_push(r, t, v);
}

static void test_oldest_first_until_full(void **state)
{
    (void)state;
    gw_history_ring_t r;
    gw_history_ring_init(&r, 4);
    assert_int_equal(r.len, 0);
    push(&r, 10, 1);
    push(&r, 20, 2);
    assert_int_equal(r.len, 2);
    double v[GW_HISTORY_NFIELDS];
    assert_int_equal(gw_history_ring_at(&r, 0, v), 10);
    assert_true(v[0] == 1 && v[6] == 7);
    assert_int_equal(gw_history_ring_at(&r, 1, v), 20);
    assert_true(v[0] == 2);
    gw_history_ring_clear(&r);
}

static void test_full_ring_overwrites_the_oldest(void **state)
{
    (void)state;
    gw_history_ring_t r;
    gw_history_ring_init(&r, 3);
    for (int i = 1; i <= 7; i++)
        push(&r, i * 1000, i);
    assert_int_equal(r.len, 3);
    double v[GW_HISTORY_NFIELDS];
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(gw_history_ring_at(&r, i, v), (int64_t)(5 + i) * 1000);
        assert_true(v[0] == (double)(5 + i));
    }
    gw_history_ring_clear(&r);
}

static void test_unknown_values_and_a_ring_of_one(void **state)
{
    (void)state;
    gw_history_ring_t r;
    gw_history_ring_init(&r, 1);
    double v[GW_HISTORY_NFIELDS] = {1, 2, 3, 4, NAN, 6, 7};
    gw_history_ring_push(&r, 5, v);
    v[4] = 0;
    gw_history_ring_push(&r, 6, v);
    double out[GW_HISTORY_NFIELDS];
    assert_int_equal(r.len, 1);
    assert_int_equal(gw_history_ring_at(&r, 0, out), 6);
    assert_true(out[4] == 0);
    double u[GW_HISTORY_NFIELDS] = {1, 2, 3, 4, NAN, 6, 7};
    gw_history_ring_push(&r, 7, u);
    gw_history_ring_at(&r, 0, out);
    assert_true(isnan(out[4]));
    gw_history_ring_clear(&r);
    assert_null(r.v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oldest_first_until_full),
        cmocka_unit_test(test_full_ring_overwrites_the_oldest),
        cmocka_unit_test(test_unknown_values_and_a_ring_of_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
