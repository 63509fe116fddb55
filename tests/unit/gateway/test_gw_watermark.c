/*
 * Unit tests for gateway/gw_watermark.c's pure parts: ETA, poll_after_ms (grows with the
 * distance from the front, bounded, jittered) and the measured rates from samples.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "gw_watermark.h"

static void test_eta(void **state)
{
    assert_int_equal(gw_watermark_eta_s(100, 10.0), 10);
    assert_int_equal(gw_watermark_eta_s(101, 10.0), 11);
    assert_int_equal(gw_watermark_eta_s(0, 10.0), 0);
    assert_int_equal(gw_watermark_eta_s(100, 0.0), -1); /* paused: unknown */
}

static void test_poll_grows_with_distance_and_is_bounded(void **state)
{
    /* jitter midpoint: rnd % 10001 == 5000 → factor 1.0 */
    int64_t front = gw_watermark_poll_ms(1, 100.0, 1000, 30000, 5000);
    int64_t mid = gw_watermark_poll_ms(20000, 100.0, 1000, 30000, 5000);
    int64_t far = gw_watermark_poll_ms(10000000, 100.0, 1000, 30000, 5000);
    assert_int_equal(front, 1000);
    assert_int_equal(mid, 20000);
    assert_int_equal(far, 30000);
    assert_int_equal(gw_watermark_poll_ms(5, 0.0, 1000, 30000, 5000), 30000); /* paused */
}

static void test_poll_jitter_spread(void **state)
{
    int64_t lo = INT64_MAX, hi = 0;
    for (uint32_t r = 0; r < 20000; r += 7) {
        int64_t v = gw_watermark_poll_ms(20000, 100.0, 1000, 30000, r);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    assert_true(lo >= 16000 && lo < 16500);
    assert_true(hi <= 24000 && hi > 23500);
}

static void test_poll_cap_near_the_front(void **state)
{
    /* 600/min passes 10 numbers a second: in 30 s, 300 */
    assert_int_equal(gw_watermark_poll_cap(30000, 1, 600, 20), 10000);
    assert_int_equal(gw_watermark_poll_cap(30000, 300, 600, 20), 10000);
    assert_int_equal(gw_watermark_poll_cap(30000, 302, 600, 20), 30000); /* far back */
    assert_int_equal(gw_watermark_poll_cap(4000, 1, 600, 20), 4000);     /* already shorter */
    assert_int_equal(gw_watermark_poll_cap(5000, 1, 600, 1), 500);
}

static void test_rates_from_samples(void **state)
{
    gw_room_t r;
    memset(&r, 0, sizeof(r));
    for (int i = 0; i <= 40; i++) { /* 10 s at 250 ms: 100 passes/s, 50 joins/s, 80 claims/s */
        r.wm = 25 * i;
        r.n = 1000 + 12 * i + i / 2;
        r.claimed = 20 * i;
        gw_watermark_sample(&r, 1000000 + 250 * (uint64_t)i);
    }
    assert_true(r.pass_rate > 99.0 && r.pass_rate < 101.0);
    assert_true(r.join_rate > 49.0 && r.join_rate < 51.0);
    assert_true(r.claim_rate > 79.0 && r.claim_rate < 81.0);
    /* samples closer than 250 ms are not recorded */
    size_t n = r.nsamples;
    gw_watermark_sample(&r, 1000000 + 250 * 40 + 10);
    assert_int_equal(r.nsamples, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eta),
        cmocka_unit_test(test_poll_grows_with_distance_and_is_bounded),
        cmocka_unit_test(test_poll_jitter_spread),
        cmocka_unit_test(test_poll_cap_near_the_front),
        cmocka_unit_test(test_rates_from_samples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
