/*
 * Unit tests for gateway/gw_limit.c: the per-address join bucket (burst, refill,
 * Retry-After), independence of addresses, and a bounded table under an address flood.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "gw_limit.h"

static void test_burst_then_refill(void **state)
{
    gw_limit_t *l = gw_limit_new(60, 3, 100); /* one per second, burst 3 */
    int64_t t = 1000000;
    for (int i = 0; i < 3; i++)
        assert_int_equal(gw_limit_take(l, "10.0.0.1", t), 0);
    int wait = gw_limit_take(l, "10.0.0.1", t);
    assert_true(wait >= 1 && wait <= 2);
    assert_int_equal(gw_limit_take(l, "10.0.0.2", t), 0); /* another address is unaffected */
    assert_true(gw_limit_take(l, "10.0.0.1", t + 500) > 0);
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 1100), 0);
    assert_true(gw_limit_take(l, "10.0.0.1", t + 1100) > 0);
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 60000), 0); /* refilled, capped at 3 */
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 60000), 0);
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 60000), 0);
    assert_true(gw_limit_take(l, "10.0.0.1", t + 60000) > 0);
    gw_limit_free(l);
}

static void test_unlimited(void **state)
{
    gw_limit_t *l = gw_limit_new(0, 1, 16);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(gw_limit_take(l, "10.0.0.1", 0), 0);
    gw_limit_free(l);
}

static void test_flood_of_addresses_stays_bounded(void **state)
{
    gw_limit_t *l = gw_limit_new(60, 1, 16);
    char addr[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(addr, sizeof(addr), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        assert_int_equal(gw_limit_take(l, addr, i), 0); /* new addresses always get in */
    }
    gw_limit_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_refill),
        cmocka_unit_test(test_unlimited),
        cmocka_unit_test(test_flood_of_addresses_stays_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
