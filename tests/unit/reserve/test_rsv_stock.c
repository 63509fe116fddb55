/*
 * Unit tests for reserve/rsv_stock.c: the interval's lock lapses a little before the
 * next tick of the worker that took it (so it can take the next one), and the published
 * hash lives ten intervals, never under 5 s (what the gateway may find after the feed
 * stopped); a feed turned off (stock_interval_ms = 0) has no timer and ignores touches.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "rsv_req.h"
#include "rsv_stock.h"

static void test_lock_lapses_before_the_next_tick(void **state)
{
    (void)state;
    assert_int_equal(rsv_stock_lock_ms(500), 450);
    assert_int_equal(rsv_stock_lock_ms(60000), 54000);
    assert_int_equal(rsv_stock_lock_ms(5), 5);
    assert_int_equal(rsv_stock_lock_ms(1), 1);
}

static void test_hash_lives_ten_intervals_at_least_5_s(void **state)
{
    (void)state;
    assert_int_equal(rsv_stock_ttl_ms(500), 5000);
    assert_int_equal(rsv_stock_ttl_ms(100), RSV_STOCK_TTL_MIN_MS);
    assert_int_equal(rsv_stock_ttl_ms(2000), 20000);
}

static void test_off_is_no_feed(void **state)
{
    (void)state;
    rsv_server_t *srv = calloc(1, sizeof(*srv));
    srv->cfg.stock_interval_ms = 0;
    assert_null(rsv_stock_new(srv)); /* no timer, no base needed */
    rsv_stock_touch(NULL, "ev1");    /* what a request does with it: nothing */
    rsv_stock_free(NULL);
    free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_lapses_before_the_next_tick),
        cmocka_unit_test(test_hash_lives_ten_intervals_at_least_5_s),
        cmocka_unit_test(test_off_is_no_feed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
