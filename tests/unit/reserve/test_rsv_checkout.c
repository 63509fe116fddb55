/*
 * Unit tests for reserve/rsv_checkout.c below the HTTP layer: what a confirm body's
 * payment must be (amount, currency, source: each rule with its message, the source's
 * length limit at the boundary) and the filters GET /admin/checkouts accepts (bounds of
 * older_than_seconds and limit, identifiers, request ids, the defaults).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "rsv_checkout.h"

/* rsv_checkout_payment_parse of a JSON text. */
static const char *parse(const char *text, rsv_checkout_payment_t *pay)
{
    json_error_t e;
    json_t *body = json_loads(text, 0, &e);
    assert_non_null(body);
    const char *bad = rsv_checkout_payment_parse(body, pay);
    json_decref(body);
    return bad;
}

static void test_payment_accepted(void **state)
{
    (void)state;
    rsv_checkout_payment_t pay;
    assert_null(parse(
        "{\"payment\":{\"amount\":4500,\"currency\":\"EUR\",\"source\":\"tok_visa\"}}", &pay));
    assert_int_equal(pay.amount, 4500);
    assert_string_equal(pay.currency, "EUR");
    assert_string_equal(pay.source, "tok_visa");
    /* no source: "", a free seat: 0 */
    assert_null(parse("{\"payment\":{\"amount\":0,\"currency\":\"usd\"}}", &pay));
    assert_int_equal(pay.amount, 0);
    assert_string_equal(pay.currency, "usd");
    assert_string_equal(pay.source, "");
}

static void test_payment_refused(void **state)
{
    (void)state;
    static const struct {
        const char *body, *says;
    } cases[] = {
        {"{}", "payment must be an object"},
        {"{\"payment\":[1]}", "payment must be an object"},
        {"{\"payment\":{\"currency\":\"EUR\"}}", "payment.amount"},
        {"{\"payment\":{\"amount\":-1,\"currency\":\"EUR\"}}", "payment.amount"},
        {"{\"payment\":{\"amount\":1.5,\"currency\":\"EUR\"}}", "payment.amount"},
        {"{\"payment\":{\"amount\":\"10\",\"currency\":\"EUR\"}}", "payment.amount"},
        {"{\"payment\":{\"amount\":10}}", "payment.currency"},
        {"{\"payment\":{\"amount\":10,\"currency\":\"EU\"}}", "payment.currency"},
        {"{\"payment\":{\"amount\":10,\"currency\":\"EURO\"}}", "payment.currency"},
        {"{\"payment\":{\"amount\":10,\"currency\":7}}", "payment.currency"},
        {"{\"payment\":{\"amount\":10,\"currency\":\"EUR\",\"source\":3}}", "payment.source"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rsv_checkout_payment_t pay = {.amount = 77};
        const char *bad = parse(cases[i].body, &pay);
        if (bad == NULL || strstr(bad, cases[i].says) == NULL)
            fail_msg("%s: %s, not %s", cases[i].body, bad ? bad : "accepted", cases[i].says);
        assert_int_equal(pay.amount, 77); /* untouched */
    }
}

static void test_payment_source_length(void **state)
{
    (void)state;
    char src[RSV_CHECKOUT_SOURCE_MAX + 1], text[RSV_CHECKOUT_SOURCE_MAX + 100];
    rsv_checkout_payment_t pay;
    memset(src, 's', RSV_CHECKOUT_SOURCE_MAX - 1); /* the longest that fits */
    src[RSV_CHECKOUT_SOURCE_MAX - 1] = '\0';
    snprintf(text, sizeof(text),
             "{\"payment\":{\"amount\":1,\"currency\":\"EUR\",\"source\":\"%s\"}}", src);
    assert_null(parse(text, &pay));
    assert_string_equal(pay.source, src);
    src[RSV_CHECKOUT_SOURCE_MAX - 1] = 's'; /* one more */
    src[RSV_CHECKOUT_SOURCE_MAX] = '\0';
    snprintf(text, sizeof(text),
             "{\"payment\":{\"amount\":1,\"currency\":\"EUR\",\"source\":\"%s\"}}", src);
    const char *bad = parse(text, &pay);
    assert_non_null(bad);
    assert_non_null(strstr(bad, "too long"));
}

static void test_list_defaults_and_values(void **state)
{
    (void)state;
    rsv_checkout_list_t l = {0};
    assert_null(rsv_checkout_list_parse(&l, NULL, NULL, NULL));
    assert_int_equal(l.older_s, 0);
    assert_int_equal(l.limit, 100);
    assert_string_equal(l.request_id, "");
    l = (rsv_checkout_list_t){.state = "paying", .event = "tour-1"};
    assert_null(rsv_checkout_list_parse(&l, "600", "1000", "req-42.a_b"));
    assert_int_equal(l.older_s, 600);
    assert_int_equal(l.limit, 1000);
    assert_string_equal(l.request_id, "req-42.a_b");
    assert_null(rsv_checkout_list_parse(&l, "100000000", "1", NULL));
    assert_int_equal(l.older_s, 100000000);
    assert_int_equal(l.limit, 1);
}

static void test_list_refused(void **state)
{
    (void)state;
    static const struct {
        const char *state, *event, *older, *limit, *rid, *says;
    } cases[] = {
        {"pay ing", NULL, NULL, NULL, NULL, "state"},
        {NULL, "ev/1", NULL, NULL, NULL, "event"},
        {NULL, NULL, "-1", NULL, NULL, "older_than_seconds"},
        {NULL, NULL, "100000001", NULL, NULL, "older_than_seconds"},
        {NULL, NULL, "1h", NULL, NULL, "older_than_seconds"},
        {NULL, NULL, NULL, "0", NULL, "limit"},
        {NULL, NULL, NULL, "1001", NULL, "limit"},
        {NULL, NULL, NULL, "", NULL, "limit"},
        {NULL, NULL, NULL, NULL, "", "request_id"},
        {NULL, NULL, NULL, NULL, "has space", "request_id"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rsv_checkout_list_t l = {.state = cases[i].state, .event = cases[i].event};
        const char *bad = rsv_checkout_list_parse(&l, cases[i].older, cases[i].limit, cases[i].rid);
        if (bad == NULL || strstr(bad, cases[i].says) == NULL)
            fail_msg("case %zu: %s, not %s", i, bad ? bad : "accepted", cases[i].says);
    }
    char rid[80];
    memset(rid, 'r', 65); /* one past the 64 a request id may have */
    rid[65] = '\0';
    rsv_checkout_list_t l = {0};
    assert_non_null(rsv_checkout_list_parse(&l, NULL, NULL, rid));
    rid[64] = '\0';
    assert_null(rsv_checkout_list_parse(&l, NULL, NULL, rid));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_payment_accepted),
        cmocka_unit_test(test_payment_refused),
        cmocka_unit_test(test_payment_source_length),
        cmocka_unit_test(test_list_defaults_and_values),
        cmocka_unit_test(test_list_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
