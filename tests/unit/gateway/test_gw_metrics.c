/*
 * test_gw_metrics — gateway/gw_metrics.c: gw_metrics_new gathers every module's series.
 * The series it registers (names and label sets, sorted; a histogram by its _count) are
 * what operators' dashboards and alerts read, pinned here in full; every pointer is set,
 * and a second registration on the same registry finds the same series.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cm_metrics.h"
#include "gw_metrics.h"
#include "series.h"

static const char *const expected[] = {
    "onsale_gateway_admissions_total",
    "onsale_gateway_backend_errors_total",
    "onsale_gateway_codes_total{outcome=\"limited\"}",
    "onsale_gateway_codes_total{outcome=\"malformed\"}",
    "onsale_gateway_codes_total{outcome=\"placed\"}",
    "onsale_gateway_codes_total{outcome=\"revoked\"}",
    "onsale_gateway_codes_total{outcome=\"unknown\"}",
    "onsale_gateway_codes_total{outcome=\"used_up\"}",
    "onsale_gateway_codes_total{outcome=\"wrong_phase\"}",
    "onsale_gateway_dpop_refused_total",
    "onsale_gateway_dpop_verified_total",
    "onsale_gateway_enqueue_tokens_total{outcome=\"bad_audience\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"bad_issuer\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"bad_signature\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"customer\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"expired\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"lifetime\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"malformed\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"missing\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"not_yet_valid\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"ok\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"unsupported\"}",
    "onsale_gateway_enqueue_tokens_total{outcome=\"wrong_room\"}",
    "onsale_gateway_joins_total",
    "onsale_gateway_pow_challenges_total",
    "onsale_gateway_pow_refused_total",
    "onsale_gateway_rate_limited_total",
    "onsale_gateway_readmissions_total",
    "onsale_gateway_rejected_tickets_total",
    "onsale_gateway_rejoins_total",
    "onsale_gateway_sign_seconds_count",
    "onsale_gateway_status_polls_total",
    "onsale_gateway_watermark_advances_total",
    "onsale_gateway_watermark_errors_total",
};

static void registers_every_series(void **state)
{
    (void)state;
    cm_metrics_t *reg = cm_metrics_new();
    gw_metrics_t *m = gw_metrics_new(reg);
    size_t len;
    char *text = cm_metrics_render(reg, &len);
    char *got[64];
    size_t n = series_of(text, got, 64);
    assert_true(n <= 64);
    size_t want = sizeof(expected) / sizeof(expected[0]);
    for (size_t i = 0; i < n && i < want; i++)
        assert_string_equal(got[i], expected[i]);
    assert_int_equal(n, want);
    free(text);
    gw_metrics_free(m);
    cm_metrics_free(reg);
}

static void every_pointer_set_and_shared(void **state)
{
    (void)state;
    cm_metrics_t *reg = cm_metrics_new();
    gw_metrics_t *m = gw_metrics_new(reg), *again = gw_metrics_new(reg);
    assert_memory_equal(m, again, sizeof(*m));
    void *const *p = (void *const *)m;
    for (size_t i = 0; i < sizeof(*m) / sizeof(void *); i++)
        assert_non_null(p[i]);
    gw_metrics_free(again);
    gw_metrics_free(m);
    gw_metrics_free(NULL);
    cm_metrics_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registers_every_series),
        cmocka_unit_test(every_pointer_set_and_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
