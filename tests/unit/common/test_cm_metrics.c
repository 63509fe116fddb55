/*
 * Unit tests for common/cm_metrics.c: the exact exposition text for counters, gauges,
 * gauge functions and histograms (cumulative buckets, le label placement, _sum and
 * _count), shared HELP/TYPE blocks for labelled series, and registration identity.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_metrics.h"

static void assert_render(const cm_metrics_t *m, const char *expected)
{
    size_t len = 0;
    char *text = cm_metrics_render(m, &len);
    assert_non_null(text);
    assert_string_equal(text, expected);
    assert_int_equal(len, strlen(expected));
    free(text);
}

static void test_empty(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    assert_render(m, "");
    cm_metrics_free(m);
    cm_metrics_free(NULL);
}

static void test_counters_share_help(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    cm_counter_t *ok = cm_metrics_counter(m, "onsale_requests_total", "Requests served.",
                                          "endpoint=\"hold\",code=\"201\"");
    cm_counter_t *joins = cm_metrics_counter(m, "onsale_joins_total", "Queue joins.", NULL);
    cm_counter_t *conflict =
        cm_metrics_counter(m, "onsale_requests_total", "ignored", "endpoint=\"hold\",code=\"409\"");
    cm_counter_inc(ok);
    cm_counter_inc(ok);
    cm_counter_add(conflict, 40);
    cm_counter_add(joins, 18446744073709551615ULL);
    assert_int_equal(cm_counter_value(ok), 2);
    /* the same name and labels is the same series */
    assert_ptr_equal(
        cm_metrics_counter(m, "onsale_requests_total", "x", "endpoint=\"hold\",code=\"201\""), ok);
    assert_ptr_equal(cm_metrics_counter(m, "onsale_joins_total", "x", ""), joins);
    assert_ptr_not_equal(ok, conflict);
    assert_render(m, "# HELP onsale_requests_total Requests served.\n"
                     "# TYPE onsale_requests_total counter\n"
                     "onsale_requests_total{endpoint=\"hold\",code=\"201\"} 2\n"
                     "onsale_requests_total{endpoint=\"hold\",code=\"409\"} 40\n"
                     "# HELP onsale_joins_total Queue joins.\n"
                     "# TYPE onsale_joins_total counter\n"
                     "onsale_joins_total 18446744073709551615\n");
    cm_metrics_free(m);
}

static void test_series_by_label_value(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    static const char *const results[] = {"ok", "error"};
    cm_counter_t *scans[2];
    cm_gauge_t *states[2];
    cm_metrics_counters(m, "t_scans_total", "scans", "result", results, 2, scans);
    cm_metrics_gauges(m, "t_states", "states", "state", results, 2, states);
    cm_counter_add(scans[1], 3);
    cm_gauge_set(states[0], 7);
    assert_ptr_equal(cm_metrics_counter(m, "t_scans_total", NULL, "result=\"error\""), scans[1]);
    assert_render(m, "# HELP t_scans_total scans\n"
                     "# TYPE t_scans_total counter\n"
                     "t_scans_total{result=\"ok\"} 0\n"
                     "t_scans_total{result=\"error\"} 3\n"
                     "# HELP t_states states\n"
                     "# TYPE t_states gauge\n"
                     "t_states{state=\"ok\"} 7\n"
                     "t_states{state=\"error\"} 0\n");
    cm_metrics_free(m);
}

static double read_double(void *arg)
{
    return *(double *)arg;
}

static void test_gauges(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    double level = 1234;
    cm_gauge_t *g = cm_metrics_gauge(m, "onsale_active", "Active shoppers.", "event=\"e1\"");
    cm_metrics_gauge_fn(m, "onsale_active", "x", "event=\"e2\"", read_double, &level);
    cm_metrics_gauge_fn(m, "onsale_queue_length", "Fans waiting\\queued\nnow.", NULL, read_double,
                        &level);
    cm_gauge_set(g, 10);
    cm_gauge_add(g, -2.5);
    assert_true(cm_gauge_value(g) == 7.5);
    assert_render(m, "# HELP onsale_active Active shoppers.\n"
                     "# TYPE onsale_active gauge\n"
                     "onsale_active{event=\"e1\"} 7.5\n"
                     "onsale_active{event=\"e2\"} 1234\n"
                     "# HELP onsale_queue_length Fans waiting\\\\queued\\nnow.\n"
                     "# TYPE onsale_queue_length gauge\n"
                     "onsale_queue_length 1234\n");
    /* the function is read at render time, not at registration */
    level = 0.1;
    cm_gauge_set(g, NAN);
    char *text = cm_metrics_render(m, NULL);
    assert_non_null(strstr(text, "onsale_queue_length 0.1\n"));
    assert_non_null(strstr(text, "onsale_active{event=\"e1\"} NaN\n"));
    free(text);
    cm_gauge_set(g, -INFINITY);
    text = cm_metrics_render(m, NULL);
    assert_non_null(strstr(text, "onsale_active{event=\"e1\"} -Inf\n"));
    free(text);
    cm_metrics_free(m);
}

static void test_histogram(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    const double bounds[] = {0.125, 0.5, 1}; /* exact in binary */
    cm_histogram_t *h = cm_metrics_histogram(m, "onsale_hold_to_confirm_seconds",
                                             "Hold to confirm.", NULL, bounds, 3);
    cm_histogram_t *hl = cm_metrics_histogram(m, "onsale_request_seconds", "Latency.",
                                              "endpoint=\"hold\"", bounds, 3);
    cm_histogram_observe(h, 0.0625);
    cm_histogram_observe(h, 0.125); /* on the bound: le is inclusive */
    cm_histogram_observe(h, 0.75);
    cm_histogram_observe(h, 3);
    cm_histogram_observe(hl, 0.25);
    assert_int_equal(cm_histogram_count(h), 4);
    assert_render(m, "# HELP onsale_hold_to_confirm_seconds Hold to confirm.\n"
                     "# TYPE onsale_hold_to_confirm_seconds histogram\n"
                     "onsale_hold_to_confirm_seconds_bucket{le=\"0.125\"} 2\n"
                     "onsale_hold_to_confirm_seconds_bucket{le=\"0.5\"} 2\n"
                     "onsale_hold_to_confirm_seconds_bucket{le=\"1\"} 3\n"
                     "onsale_hold_to_confirm_seconds_bucket{le=\"+Inf\"} 4\n"
                     "onsale_hold_to_confirm_seconds_sum 3.9375\n"
                     "onsale_hold_to_confirm_seconds_count 4\n"
                     "# HELP onsale_request_seconds Latency.\n"
                     "# TYPE onsale_request_seconds histogram\n"
                     "onsale_request_seconds_bucket{endpoint=\"hold\",le=\"0.125\"} 0\n"
                     "onsale_request_seconds_bucket{endpoint=\"hold\",le=\"0.5\"} 1\n"
                     "onsale_request_seconds_bucket{endpoint=\"hold\",le=\"1\"} 1\n"
                     "onsale_request_seconds_bucket{endpoint=\"hold\",le=\"+Inf\"} 1\n"
                     "onsale_request_seconds_sum{endpoint=\"hold\"} 0.25\n"
                     "onsale_request_seconds_count{endpoint=\"hold\"} 1\n");
    assert_ptr_equal(
        cm_metrics_histogram(m, "onsale_request_seconds", "x", "endpoint=\"hold\"", bounds, 3), hl);
    cm_metrics_free(m);
}

static void test_latency_bounds(void **state)
{
    (void)state;
    assert_true(cm_metrics_latency_nbounds >= 12 && cm_metrics_latency_nbounds <= 16);
    assert_true(cm_metrics_latency_bounds[0] == 0.0005);
    assert_true(cm_metrics_latency_bounds[cm_metrics_latency_nbounds - 1] == 10);
    for (size_t i = 1; i < cm_metrics_latency_nbounds; i++)
        assert_true(cm_metrics_latency_bounds[i - 1] < cm_metrics_latency_bounds[i]);

    cm_metrics_t *m = cm_metrics_new();
    cm_histogram_t *h = cm_metrics_histogram(m, "lat_seconds", "l", NULL, cm_metrics_latency_bounds,
                                             cm_metrics_latency_nbounds);
    cm_histogram_observe(h, 0.0003);
    char *text = cm_metrics_render(m, NULL);
    assert_non_null(strstr(text, "lat_seconds_bucket{le=\"0.0005\"} 1\n"));
    assert_non_null(strstr(text, "lat_seconds_bucket{le=\"10\"} 1\n"));
    assert_non_null(strstr(text, "lat_seconds_sum 0.0003\n"));
    free(text);
    cm_metrics_free(m);
}

static void test_family_order_with_mixed_registration(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    cm_counter_inc(cm_metrics_counter(m, "a_total", "A.", "k=\"1\""));
    cm_gauge_set(cm_metrics_gauge(m, "b", "B.", NULL), 2);
    cm_counter_add(cm_metrics_counter(m, "a_total", "A.", "k=\"2\""), 3);
    assert_render(m, "# HELP a_total A.\n"
                     "# TYPE a_total counter\n"
                     "a_total{k=\"1\"} 1\n"
                     "a_total{k=\"2\"} 3\n"
                     "# HELP b B.\n"
                     "# TYPE b gauge\n"
                     "b 2\n");
    cm_metrics_free(m);
}

static void test_requests_by_endpoint_and_code(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    static const char *const eps[] = {"hold", "confirm"};
    cm_metrics_requests_t *r = cm_metrics_requests(m, "x_request_seconds", "latency", eps, 2);
    cm_metrics_requests_observe(r, 1, 201, 0.002);
    cm_metrics_requests_observe(r, 1, 201, 0.004);
    cm_metrics_requests_observe(r, 1, 409, 0.001);
    cm_metrics_requests_observe(r, 0, 42, 0.001); /* not a status code */
    assert_ptr_equal(cm_metrics_requests_series(r, 1, 201), cm_metrics_requests_series(r, 1, 201));
    assert_ptr_not_equal(cm_metrics_requests_series(r, 1, 201),
                         cm_metrics_requests_series(r, 0, 201));
    /* a second object (another worker) shares the series */
    cm_metrics_requests_t *r2 = cm_metrics_requests(m, "x_request_seconds", "latency", eps, 2);
    cm_metrics_requests_observe(r2, 1, 201, 0.003);
    size_t len = 0;
    char *text = cm_metrics_render(m, &len);
    assert_non_null(strstr(text, "x_request_seconds_count{endpoint=\"confirm\",code=\"201\"} 3\n"));
    assert_non_null(strstr(text, "x_request_seconds_count{endpoint=\"confirm\",code=\"409\"} 1\n"));
    assert_non_null(strstr(text, "x_request_seconds_count{endpoint=\"hold\",code=\"other\"} 1\n"));
    assert_non_null(strstr(
        text, "x_request_seconds_bucket{endpoint=\"confirm\",code=\"201\",le=\"+Inf\"} 3\n"));
    /* nothing observed, nothing rendered: bounded by what was answered */
    assert_null(strstr(text, "endpoint=\"hold\",code=\"204\""));
    free(text);
    cm_metrics_free(m);
}

static double one(void *arg)
{
    (void)arg;
    return 1;
}

static double zero(void *arg)
{
    (void)arg;
    return 0;
}

static void test_gauge_fn_min_is_zero_when_one_is_down(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    cm_metrics_gauge_fn_min(m, "x_up", "up", NULL, one, NULL);
    cm_metrics_gauge_fn_min(m, "x_up", "up", NULL, zero, NULL);
    cm_metrics_gauge_fn_min(m, "x_up", "up", NULL, one, NULL);
    cm_metrics_gauge_fn(m, "x_connections", "count", NULL, one, NULL);
    cm_metrics_gauge_fn(m, "x_connections", "count", NULL, one, NULL);
    char *text = cm_metrics_render(m, NULL);
    assert_non_null(strstr(text, "\nx_up 0\n"));
    assert_non_null(strstr(text, "\nx_connections 2\n"));
    free(text);
    cm_metrics_free(m);
}

static double value_of(const char *text, const char *name)
{
    char key[80];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(text, key);
    assert_non_null(p);
    return strtod(p + strlen(key), NULL);
}

static void test_process_metrics(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    cm_metrics_process(m);
    char *text = cm_metrics_render(m, NULL);
    assert_non_null(strstr(text, "# TYPE process_cpu_seconds_total counter\n"));
    assert_true(value_of(text, "process_resident_memory_bytes") > 1e5);
    assert_true(value_of(text, "process_virtual_memory_bytes") >=
                value_of(text, "process_resident_memory_bytes"));
    assert_true(value_of(text, "process_open_fds") >= 3);
    assert_true(value_of(text, "process_max_fds") >= value_of(text, "process_open_fds"));
    double start = value_of(text, "process_start_time_seconds");
    assert_true(start > 1.6e9 && start <= (double)time(NULL) + 1);
    assert_true(value_of(text, "process_cpu_seconds_total") >= 0);
    free(text);
    cm_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_counters_share_help),
        cmocka_unit_test(test_gauges),
        cmocka_unit_test(test_series_by_label_value),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_latency_bounds),
        cmocka_unit_test(test_family_order_with_mixed_registration),
        cmocka_unit_test(test_requests_by_endpoint_and_code),
        cmocka_unit_test(test_gauge_fn_min_is_zero_when_one_is_down),
        cmocka_unit_test(test_process_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
