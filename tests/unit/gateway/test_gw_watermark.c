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
    assert_int_equal(gw_watermark_eta_s(101, 10.0), 10); /* to the nearest second */
    assert_int_equal(gw_watermark_eta_s(106, 10.0), 11);
    assert_int_equal(gw_watermark_eta_s(1, 10.0), 1); /* waiting: never 0 */
    assert_int_equal(gw_watermark_eta_s(0, 10.0), 0);
    assert_int_equal(gw_watermark_eta_s(100, 0.0), -1); /* paused: unknown */
}

static void test_expected_rate(void **state)
{
    /* The first seconds of a sale: the line was shorter than the rate lets in, so few
     * numbers passed; a fan joining now still moves at the configured 5,000/s. */
    assert_true(gw_watermark_expected_rate(5000.0, 0.4, 0, 0) == 5000.0);
    assert_true(gw_watermark_expected_rate(5000.0, 0.0, 0, 0) == 5000.0);
    /* no-shows' slots passed again: faster than configured */
    assert_true(gw_watermark_expected_rate(100.0, 130.0, 0, 0) == 130.0);
    /* max_active far away: the configured rate */
    assert_true(gw_watermark_expected_rate(100.0, 20.0, 10000, 500) == 100.0);
    /* max_active reached: as fast as shoppers leave, as measured */
    assert_true(gw_watermark_expected_rate(100.0, 20.0, 1000, 950) == 20.0);
    assert_true(gw_watermark_expected_rate(100.0, 0.0, 1000, 1000) == 100.0); /* no sample */
    assert_true(gw_watermark_expected_rate(0.0, 50.0, 0, 0) == 0.0);          /* rate 0 */
    /* 50,000 places back at 5,000/s: 10 s, polled about every second */
    double r = gw_watermark_expected_rate(5000.0, 0.4, 0, 0);
    assert_int_equal(gw_watermark_eta_s(50000, r), 10);
    assert_int_equal(gw_watermark_poll_ms(50000, r, 1000, 30000, 5000), 1000);
}

static void test_room_rate(void **state)
{
    gw_room_t r;
    memset(&r, 0, sizeof(r));
    r.s.rate_per_minute = 300000;
    r.nsamples = 40;
    r.pass_rate = 0.5; /* measured before the line formed */
    assert_true(gw_watermark_rate(&r) == 5000.0);
    r.s.paused = true;
    assert_true(gw_watermark_rate(&r) == 0.0);
    r.s.paused = false;
    r.s.sold_out = true;
    assert_true(gw_watermark_rate(&r) == 0.0);
}

static bool near(double a, double b, double tol)
{
    return a > b - tol && a < b + tol;
}

static void test_noshow_share(void **state)
{
    (void)state;
    assert_true(near(gw_watermark_noshow_share(1000, 700, 0, 0), 0.3, 1e-9)); /* the window */
    assert_true(near(gw_watermark_noshow_share(10, 10, 30, 70), 0.3, 1e-9));  /* too few: so far */
    assert_true(gw_watermark_noshow_share(10, 10, 0, 0) == 0.0);
    assert_true(gw_watermark_noshow_share(100, 130, 0, 0) == 0.0); /* claims catching up */
    assert_true(gw_watermark_noshow_share(1000, 1, 0, 0) == GW_NOSHOW_SHARE_MAX);
}

static void test_eta_model_counts_the_noshows_ahead(void **state)
{
    (void)state;
    assert_true(near(gw_watermark_eta_model(1000, 100, 100, -1, 0, 20), 10, 1e-9)); /* none */
    assert_true(gw_watermark_eta_model(1000, 0, 100, -1, 0.3, 20) == -1);           /* paused */
    assert_true(gw_watermark_eta_model(0, 100, 100, -1, 0.3, 20) == 0);
    /* steady state: the watermark already runs at rate / (1 − share) */
    assert_true(near(gw_watermark_eta_model(1000, 100, 100 / 0.7, -1, 0.3, 20), 7, 1e-6));
    /* just opened (nothing has come back yet): 130/s for a grace, then faster */
    assert_true(near(gw_watermark_eta_model(1300, 100, 100, -1, 0.3, 20), 10, 1e-6));
    double far = gw_watermark_eta_model(10000, 100, 100, -1, 0.3, 20);
    assert_true(far > 70 && far < 75); /* 100 s at the configured rate, 70 s at steady state */
    double very_far = gw_watermark_eta_model(1e7, 100, 100, -1, 0.3, 20);
    assert_true(near(very_far, 1e7 * 0.7 / 100, 100)); /* converges to the steady state */
    /* 5 s after the opening only 500 were passed: 150 come back over the next grace */
    assert_true(near(gw_watermark_eta_model(2150, 100, 100, 500, 0.3, 20), 20, 1e-6));
    /* the rate doubled: the slots coming back are those passed at the old rate */
    assert_true(near(gw_watermark_eta_model(2428.6, 200, 100 / 0.7, -1, 0.3, 20), 10, 1e-3));
}

static void test_eta_ring_follows_what_was_passed_a_grace_ago(void **state)
{
    (void)state;
    double steady[20];
    for (int i = 0; i < 20; i++)
        steady[i] = 100;
    assert_true(gw_watermark_eta_ring(1000, 0, steady, 20, 0.3, 20) == -1); /* paused */
    assert_true(gw_watermark_eta_ring(0, 100, steady, 20, 0.3, 20) == 0);
    assert_true(near(gw_watermark_eta_ring(1000, 100, steady, 20, 0, 20), 10, 1e-9));
    /* the same passes every second: the grace-at-a-time model's answer */
    for (double pos = 500; pos < 2e5; pos *= 3)
        assert_true(near(gw_watermark_eta_ring(pos, 100, steady, 20, 0.3, 20),
                         gw_watermark_eta_model(pos, 100, 100, -1, 0.3, 20), 1e-6));
    /* a burst of 1,000 passes a grace ago comes back now; the same burst a second ago
     * comes back in 19 s (the 10 s rate window cannot tell them apart) */
    double old_burst[20] = {1000}, new_burst[20] = {0};
    new_burst[19] = 1000;
    assert_true(near(gw_watermark_eta_ring(1200, 100, old_burst, 20, 0.5, 20), 7, 1e-9));
    assert_true(near(gw_watermark_eta_ring(1200, 100, new_burst, 20, 0.5, 20), 12, 1e-9));
    /* a room open for 5 s (nothing passed before): 15 s at the rate, then 130/s */
    assert_true(near(gw_watermark_eta_ring(2150, 100, steady, 5, 0.3, 20), 20, 1e-9));
    /* more seconds than a grace: only the last grace counts */
    double longer[30];
    for (int i = 0; i < 30; i++)
        longer[i] = i < 10 ? 5000 : 100;
    assert_true(near(gw_watermark_eta_ring(1000, 100, longer, 30, 0.3, 20),
                     gw_watermark_eta_ring(1000, 100, steady, 20, 0.3, 20), 1e-9));
}

static void test_retired_share(void **state)
{
    (void)state;
    assert_true(gw_watermark_retired_share(10, GW_NOSHOW_MIN_PASSES - 1) == -1); /* too few */
    assert_true(near(gw_watermark_retired_share(300, 1000), 0.3, 1e-12));
    assert_true(gw_watermark_retired_share(-5, 1000) == 0);
    assert_true(gw_watermark_retired_share(0, 1000) == 0);
    assert_true(gw_watermark_retired_share(990, 1000) == GW_NOSHOW_SHARE_MAX);
}

static void test_rate_ahead_reads_the_pass_ring(void **state)
{
    (void)state;
    gw_room_t r;
    memset(&r, 0, sizeof(r));
    gw_settings_defaults(&r.s);
    r.s.rate_per_minute = 12000; /* 200 a second, doubled 10 s ago */
    r.s.noshow_grace_seconds = 20;
    /* 30 s of reads every 250 ms: 100 passes a second, then 200 for the last 10 s */
    for (int i = 0; i <= 120; i++) {
        r.wm = i <= 80 ? 25 * i : 2000 + 50 * (i - 80);
        r.claimed = r.wm * 7 / 10; /* 30% never come: retired a grace (80 reads) later */
        r.noshows = i >= 80 ? 3 * 25 * (i - 80) / 10 : 0;
        gw_watermark_sample(&r, 1000000 + 250 * (uint64_t)i);
    }
    double passes[20];
    for (int i = 0; i < 20; i++)
        passes[i] = i < 10 ? 100 : 200;
    /* of the 1,000 numbers passed 30 to 20 s ago, 300 were retired unclaimed since */
    double want = gw_watermark_eta_ring(5000, 200, passes, 20, 0.3, 20);
    double got = 5000 / gw_watermark_rate_ahead(&r, 5000);
    /* the ring's seconds, give or take the second in progress (one read of it so far) */
    assert_true(near(got, want, 0.5));
    /* the fans passed since the doubling claim late (they were told the old ETA): the
     * rate window's share says 60%, the retired share keeps 30% */
    r.win_claims = r.win_passes * 4 / 10;
    assert_true(near(5000 / gw_watermark_rate_ahead(&r, 5000), want, 0.5));
    /* a new generation of the room (its numbers start again) empties the ring */
    r.wm = 0;
    gw_watermark_sample(&r, 1000000 + 250 * 121);
    assert_int_equal(r.pass_len, 1);
}

static void test_rate_ahead_follows_the_room(void **state)
{
    (void)state;
    gw_room_t r;
    memset(&r, 0, sizeof(r));
    gw_settings_defaults(&r.s);
    r.s.rate_per_minute = 6000; /* 100 a second */
    r.s.noshow_grace_seconds = 20;
    r.nsamples = 40;
    r.pass_rate = 100; /* nothing passed again yet */
    r.wm = 2000;       /* a grace's worth passed (20 s at 100/s) */
    r.win_passes = 1000;
    r.win_claims = 700; /* 30% never came */
    int64_t eta = gw_watermark_eta_s(10000, gw_watermark_rate_ahead(&r, 10000));
    assert_true(eta >= 72 && eta <= 74); /* not 100: the no-shows ahead are skipped */
    /* the operator halves the rate: the next answer says so, not the old measured rate */
    r.win_claims = 1000;
    r.s.rate_per_minute = 3000;
    assert_int_equal(gw_watermark_eta_s(1000, gw_watermark_rate_ahead(&r, 1000)), 20);
    r.s.rate_per_minute = 12000; /* and doubles it */
    assert_int_equal(gw_watermark_eta_s(1000, gw_watermark_rate_ahead(&r, 1000)), 5);
    r.s.paused = true;
    assert_true(gw_watermark_rate_ahead(&r, 1000) == 0.0);
    /* the watermark moved on since the last read: 100 ms at 200/s is 20 numbers */
    r.learned_ms = 5000;
    assert_int_equal(gw_watermark_ahead_now(&r, 1000, 200, 5100), 980);
    assert_int_equal(gw_watermark_ahead_now(&r, 10, 200, 5100), 1); /* still waiting */
    assert_int_equal(gw_watermark_ahead_now(&r, 1000, 200, 5000 + 60000),
                     1000 - 200 * GW_TICK_MAX_MS / 1000); /* a stale read: bounded */
    assert_int_equal(gw_watermark_ahead_now(&r, 1000, 0, 5100), 1000);
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

static void test_poll_eta(void **state)
{
    /* 50,000 places back at 5,000/s: 10 s, so come back at 10.1..10.6 s */
    for (uint32_t r = 0; r < 20000; r += 13) {
        int64_t v = gw_watermark_poll_eta_ms(50000, 5000.0, 1000, 30000, r);
        assert_true(v >= 10100 && v <= 10600);
    }
    /* about to be passed (2 ms): just after it and a tick, not a whole poll_min_ms */
    int64_t front = gw_watermark_poll_eta_ms(10, 5000.0, 1000, 30000, 0);
    assert_int_equal(front, 102);
    assert_true(gw_watermark_poll_eta_ms(10, 5000.0, 1000, 30000, 10000) <= 202);
    /* 0.9 s away: at most poll_min_ms + 20%, as before */
    for (uint32_t r = 0; r < 20000; r += 13) {
        int64_t v = gw_watermark_poll_eta_ms(4500, 5000.0, 1000, 30000, r);
        assert_true(v >= 1000 && v <= 1200);
    }
    /* not queued behind anyone (position 0): poll_min_ms .. +20% */
    assert_int_equal(gw_watermark_poll_eta_ms(0, 5000.0, 1000, 30000, 0), 1000);
    /* far back (an hour) and paused: about poll_max_ms */
    int64_t far = gw_watermark_poll_eta_ms(18000000, 5000.0, 1000, 30000, 5000);
    assert_int_equal(far, 27000);
    assert_int_equal(gw_watermark_poll_eta_ms(5, 0.0, 1000, 30000, 5000), 30000);
    assert_int_equal(gw_watermark_poll_eta_ms(5, 0.0, 1000, 30000, 0), 24000);
    /* never later than poll_max_ms */
    for (uint32_t r = 0; r < 20000; r += 13)
        assert_true(gw_watermark_poll_eta_ms(140000, 5000.0, 1000, 30000, r) <= 30000);
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

static void test_join_peak_is_the_fastest_stretch_of_the_window(void **state)
{
    gw_room_t r;
    memset(&r, 0, sizeof(r));
    int64_t n = 0;
    for (int i = 0; i <= 40; i++) { /* 10 joins per 250 ms, but 500 in one of them */
        n += i == 20 ? 500 : 10;
        r.n = n;
        gw_watermark_sample(&r, 1000000 + 250 * (uint64_t)i);
    }
    assert_true(r.join_peak > 1999.0 && r.join_peak < 2001.0);
    assert_true(r.join_rate < r.join_peak / 10);
}

static void test_restore_jump_covers_the_peak_over_the_staleness(void **state)
{
    /* a quiet room still skips the minimum */
    assert_int_equal(gw_watermark_restore_jump(0, 100), GW_RESTORE_JUMP_MIN);
    /* 1,000 joins/s, knowledge 250 ms old: twice 1,000 * (0.25 + 0.25) s */
    assert_int_equal(gw_watermark_restore_jump(1000, 250), 1000);
    /* staleness counts up to the 10 s window */
    assert_int_equal(gw_watermark_restore_jump(100, 10000), 2050);
    assert_int_equal(gw_watermark_restore_jump(100, 3600000), 2050);
}

/* The admission-stalled alert trusts phase "open" to mean "the watermark should move":
 * every other phase of a normal night (before the pre-queue, pre-queue, full of
 * shoppers, paused, sold out, closed) must say so instead, with that precedence. */
static void test_phase(void **state)
{
    (void)state;
    gw_room_t r;
    memset(&r, 0, sizeof(r));
    gw_settings_defaults(&r.s);
    r.s.rate_per_minute = 600;
    const int64_t now = 1000000;
    assert_int_equal(gw_watermark_phase(&r, now), GW_PHASE_OPEN);
    r.s.prequeue_at = now + 10, r.s.opens_at = now + 20, r.s.closes_at = now + 30;
    assert_int_equal(gw_watermark_phase(&r, now), GW_PHASE_SCHEDULED);
    assert_int_equal(gw_watermark_phase(&r, now + 10), GW_PHASE_PREQUEUE);
    r.opened = true; /* Redis numbered the pre-queue: open even if our clock lags */
    assert_int_equal(gw_watermark_phase(&r, now + 19), GW_PHASE_OPEN);
    r.opened = false;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_OPEN);
    r.s.max_active = 5, r.active = 5;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_FULL);
    r.active = 4;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_OPEN);
    r.s.paused = true;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_PAUSED);
    assert_int_equal(gw_watermark_phase(&r, now + 30), GW_PHASE_CLOSED);
    r.s.sold_out = true;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_SOLD_OUT);
    r.s.sold_out = r.s.paused = false;
    r.s.rate_per_minute = 0;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_PAUSED);
    /* the stock: sold out while known and nothing is left, whatever is held; no rate */
    r.s.rate_per_minute = 600;
    r.stock_known = true, r.stock_left = 0, r.stock_held = 3;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_SOLD_OUT);
    assert_true(gw_watermark_rate(&r) == 0);
    r.stock_left = 1;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_OPEN);
    r.stock_known = false, r.stock_left = 0;
    assert_int_equal(gw_watermark_phase(&r, now + 20), GW_PHASE_OPEN);
    assert_string_equal(gw_phase_names[GW_PHASE_SOLD_OUT], "sold_out");
    assert_string_equal(gw_phase_names[GW_PHASE_PREQUEUE], "prequeue");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eta),
        cmocka_unit_test(test_phase),
        cmocka_unit_test(test_expected_rate),
        cmocka_unit_test(test_room_rate),
        cmocka_unit_test(test_poll_eta),
        cmocka_unit_test(test_noshow_share),
        cmocka_unit_test(test_eta_model_counts_the_noshows_ahead),
        cmocka_unit_test(test_rate_ahead_follows_the_room),
        cmocka_unit_test(test_eta_ring_follows_what_was_passed_a_grace_ago),
        cmocka_unit_test(test_retired_share),
        cmocka_unit_test(test_rate_ahead_reads_the_pass_ring),
        cmocka_unit_test(test_poll_grows_with_distance_and_is_bounded),
        cmocka_unit_test(test_poll_jitter_spread),
        cmocka_unit_test(test_poll_cap_near_the_front),
        cmocka_unit_test(test_rates_from_samples),
        cmocka_unit_test(test_join_peak_is_the_fastest_stretch_of_the_window),
        cmocka_unit_test(test_restore_jump_covers_the_peak_over_the_staleness),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
