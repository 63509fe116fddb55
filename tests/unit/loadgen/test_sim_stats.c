/*
 * Unit tests for loadgen/sim/sim_stats.c and the pure fairness test of sim_audit.c:
 * histogram quantiles stay within a bucket's precision, the incomplete gamma function
 * matches known chi-square p-values, and the uniformity test tells a shuffle from an
 * order that was kept.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_audit.h"
#include "sim_stats.h"

static void test_hist_quantiles(void **state)
{
    (void)state;
    sim_hist_t *h = calloc(1, sizeof(*h));
    assert_int_equal(sim_hist_quantile(h, 0.5), 0);
    for (uint64_t v = 1; v <= 100000; v++)
        sim_hist_add(h, v);
    assert_int_equal(h->count, 100000);
    assert_int_equal(h->min, 1);
    assert_int_equal(h->max, 100000);
    const double qs[] = {0.5, 0.9, 0.99, 0.999};
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        double want = qs[i] * 100000, got = (double)sim_hist_quantile(h, qs[i]);
        assert_true(got >= want);
        assert_true(got <= want * 1.032); /* one bucket: 1/64 of its power of two, x2 */
    }
    assert_int_equal(sim_hist_quantile(h, 1.0), 100000);
    /* Small values are exact. */
    sim_hist_t *s = calloc(1, sizeof(*s));
    sim_hist_add(s, 7);
    sim_hist_add(s, 42);
    assert_int_equal(sim_hist_quantile(s, 0.5), 7);
    assert_int_equal(sim_hist_quantile(s, 1.0), 42);
    /* Huge values land in the last bucket without overflow. */
    sim_hist_add(s, UINT64_MAX / 2);
    assert_int_equal(s->count, 3);
    free(h);
    free(s);
}

static void test_gamma_q(void **state)
{
    (void)state;
    /* Q(1, x) = e^-x; chi-square df=2 at x=5.991 has p=0.05; df=81 at its mean ~0.48. */
    assert_true(fabs(sim_stats_gamma_q(1.0, 1.0) - exp(-1.0)) < 1e-9);
    assert_true(fabs(sim_stats_gamma_q(1.0, 5.991 / 2) - 0.05) < 1e-3);
    assert_true(fabs(sim_stats_gamma_q(40.5, 81.0 / 2) - 0.4779) < 5e-3);
    assert_true(sim_stats_gamma_q(40.5, 300.0 / 2) < 1e-20);
    assert_true(sim_stats_gamma_q(3.0, 0.0) == 1.0);
}

static void test_uniformity(void **state)
{
    (void)state;
    enum { N = 5000 };
    int *x = malloc(N * sizeof(int)), *y = malloc(N * sizeof(int));
    double rs, ps, chi2, pc;
    int df;
    /* Kept order: rank correlation 1, both tests reject. */
    for (int i = 0; i < N; i++)
        x[i] = y[i] = i;
    sim_audit_uniformity(x, y, N, &rs, &ps, &chi2, &df, &pc);
    assert_true(fabs(rs - 1.0) < 1e-9);
    assert_true(ps < 1e-10);
    assert_int_equal(df, 81);
    assert_true(pc < 1e-10);
    /* A fair shuffle (Fisher-Yates with a fixed LCG): both accept. */
    uint64_t r = 12345;
    for (int i = N - 1; i > 0; i--) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        int j = (int)((r >> 33) % (uint64_t)(i + 1));
        int t = y[i];
        y[i] = y[j];
        y[j] = t;
    }
    sim_audit_uniformity(x, y, N, &rs, &ps, &chi2, &df, &pc);
    assert_true(fabs(rs) < 0.05);
    assert_true(ps > 0.001);
    assert_true(pc > 0.001);
    /* Early arrivals favoured a little (swap neighbours only): the rank test sees it. */
    for (int i = 0; i < N; i++)
        y[i] = i;
    for (int i = 0; i + 1 < N; i += 2) {
        int t = y[i];
        y[i] = y[i + 1];
        y[i + 1] = t;
    }
    sim_audit_uniformity(x, y, N, &rs, &ps, &chi2, &df, &pc);
    assert_true(ps < 1e-10);
    free(x);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_quantiles),
        cmocka_unit_test(test_gamma_q),
        cmocka_unit_test(test_uniformity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
