/*
 * test_rsv_req — reserve/rsv_req.c: rsv_metrics_register gathers every module's series.
 * The series it registers (names and label sets, sorted; histograms by their _count) are
 * the ones operators' dashboards and alerts read, pinned here in full; and each names
 * table an array of series is indexed by has a distinct name for every value.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cm_metrics.h"
#include "rsv_req.h"
#include "series.h"

static const char *const expected[] = {
    "onsale_reserve_backend_errors_total",
    "onsale_reserve_booking_failures_total",
    "onsale_reserve_bookings_abandoned_total",
    "onsale_reserve_catalog_queries_total",
    "onsale_reserve_checkout_transitions_total",
    "onsale_reserve_checkouts{state=\"confirmed\"}",
    "onsale_reserve_checkouts{state=\"converted\"}",
    "onsale_reserve_checkouts{state=\"converting\"}",
    "onsale_reserve_checkouts{state=\"created\"}",
    "onsale_reserve_checkouts{state=\"declined\"}",
    "onsale_reserve_checkouts{state=\"failed\"}",
    "onsale_reserve_checkouts{state=\"hold_extended\"}",
    "onsale_reserve_checkouts{state=\"paid\"}",
    "onsale_reserve_checkouts{state=\"payment_requested\"}",
    "onsale_reserve_checkouts{state=\"refunded\"}",
    "onsale_reserve_checkouts{state=\"refunding\"}",
    "onsale_reserve_checkouts{state=\"released\"}",
    "onsale_reserve_checkouts{state=\"requires_action\"}",
    "onsale_reserve_checkouts{state=\"unknown\"}",
    "onsale_reserve_confirm_replays_total",
    "onsale_reserve_confirmations_total",
    "onsale_reserve_hold_conflicts_total",
    "onsale_reserve_hold_to_confirm_seconds_count",
    "onsale_reserve_holds_expired_total",
    "onsale_reserve_holds_released_total",
    "onsale_reserve_holds_total",
    "onsale_reserve_invalid_tokens_total",
    "onsale_reserve_late_payments_total",
    "onsale_reserve_ledger_charges_total{outcome=\"booked\"}",
    "onsale_reserve_ledger_charges_total{outcome=\"mismatch\"}",
    "onsale_reserve_ledger_charges_total{outcome=\"open\"}",
    "onsale_reserve_ledger_charges_total{outcome=\"refunding\"}",
    "onsale_reserve_ledger_charges_total{outcome=\"unknown\"}",
    "onsale_reserve_ledger_scans_total{result=\"error\"}",
    "onsale_reserve_ledger_scans_total{result=\"ok\"}",
    "onsale_reserve_limit_exceeded_total",
    "onsale_reserve_oldest_open_checkout_seconds",
    "onsale_reserve_payment_outcomes_total{outcome=\"action\"}",
    "onsale_reserve_payment_outcomes_total{outcome=\"declined\"}",
    "onsale_reserve_payment_outcomes_total{outcome=\"listed\"}",
    "onsale_reserve_payment_outcomes_total{outcome=\"none\"}",
    "onsale_reserve_payment_outcomes_total{outcome=\"paid\"}",
    "onsale_reserve_payment_outcomes_total{outcome=\"refunded\"}",
    "onsale_reserve_payment_outcomes_total{outcome=\"unknown\"}",
    "onsale_reserve_payment_seconds_count{op=\"charge\"}",
    "onsale_reserve_payment_seconds_count{op=\"lookup\"}",
    "onsale_reserve_payment_seconds_count{op=\"refund\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"duplicate\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"ignored\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"invalid\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"not_ours\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"nudged\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"refunding\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"refused\"}",
    "onsale_reserve_provider_webhooks_total{outcome=\"settled\"}",
    "onsale_reserve_reconciler_actions_total{action=\"claimed\"}",
    "onsale_reserve_reconciler_actions_total{action=\"finished\"}",
    "onsale_reserve_reconciler_actions_total{action=\"lookup\"}",
    "onsale_reserve_reconciler_actions_total{action=\"released\"}",
    "onsale_reserve_redis_reseeds_total",
    "onsale_reserve_refunds_total",
    "onsale_reserve_stock_rounds_total{outcome=\"elsewhere\"}",
    "onsale_reserve_stock_rounds_total{outcome=\"failed\"}",
    "onsale_reserve_stock_rounds_total{outcome=\"published\"}",
    "onsale_reserve_token_records_total{result=\"matched\"}",
    "onsale_reserve_token_records_total{result=\"missing\"}",
    "onsale_reserve_uniqueness_conflicts_total",
};

static void registers_every_series_once(void **state)
{
    (void)state;
    cm_metrics_t *reg = cm_metrics_new();
    rsv_metrics_t m, again;
    rsv_metrics_register(&m, reg);
    rsv_metrics_register(&again, reg); /* a second worker gets the same series */
    assert_memory_equal(&m, &again, sizeof(m));
    size_t len;
    char *text = cm_metrics_render(reg, &len);
    char *got[128];
    size_t n = series_of(text, got, 128);
    assert_true(n <= 128);
    size_t want = sizeof(expected) / sizeof(expected[0]);
    for (size_t i = 0; i < n && i < want; i++)
        assert_string_equal(got[i], expected[i]);
    assert_int_equal(n, want);
    free(text);
    cm_metrics_free(reg);
}

static void every_pointer_set_but_the_untimed_list(void **state)
{
    (void)state;
    cm_metrics_t *reg = cm_metrics_new();
    rsv_metrics_t m;
    memset(&m, 0xa5, sizeof(m));
    rsv_metrics_register(&m, reg);
    assert_null(m.pay.latency[RSV_PAY_OP_LIST]);
    m.pay.latency[RSV_PAY_OP_LIST] = (cm_histogram_t *)&m; /* any non-NULL: skipped below */
    void *const *p = (void *const *)&m;
    for (size_t i = 0; i < sizeof(m) / sizeof(void *); i++) {
        assert_non_null(p[i]);
        assert_ptr_not_equal(p[i], (void *)(uintptr_t)0xa5a5a5a5a5a5a5a5ull);
    }
    cm_metrics_free(reg);
}

static void names_distinct(const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_non_null(names[i]);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(names[i], names[j]);
    }
}

static void names_tables_full(void **state)
{
    (void)state;
    names_distinct(rsv_hold_record_names, RSV_HOLD_RECORD_COUNT);
    names_distinct(rsv_reconcile_action_names, RSV_RECONCILE_ACTION_COUNT);
    names_distinct(rsv_ledger_outcome_names, RSV_LEDGER_NOUTCOMES);
    names_distinct(rsv_ledger_scan_names, RSV_LEDGER_SCAN_COUNT);
    names_distinct(rsv_pay_outcome_names, RSV_PAY_OUTCOME_COUNT);
    names_distinct(rsv_pay_op_names, RSV_PAY_OP_COUNT);
    names_distinct(rsv_stock_outcome_names, RSV_STOCK_OUTCOME_COUNT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registers_every_series_once),
        cmocka_unit_test(every_pointer_set_but_the_untimed_list),
        cmocka_unit_test(names_tables_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
