/*
 * Unit tests for reserve/rsv_ledger.c's pure parts: the text[] literal the ledger check
 * sends Postgres (each id double-quoted, \ and " escaped, commas between, the buffer
 * grown as it fills) and the outcome names onsale_ledger_check answers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"
#include "rsv_ledger.h"

/* The literal of n ids, built as the ledger builds it: "{", the elements, "}". */
static char *literal(const char *const *ids, size_t n)
{
    char *buf = cm_xstrdup("{");
    size_t len = 1, cap = 2;
    for (size_t i = 0; i < n; i++) {
        rsv_ledger_array_append(&buf, &len, &cap, ids[i], i == 0);
        assert_int_equal(len, strlen(buf));
        assert_true(len < cap);
    }
    buf = cm_xrealloc(buf, len + 2);
    strcat(buf, "}");
    return buf;
}

static void test_array_literal(void **state)
{
    (void)state;
    const char *one[] = {"ch_1"};
    char *s = literal(one, 1);
    assert_string_equal(s, "{\"ch_1\"}");
    free(s);
    const char *several[] = {"co-a", "", "with,comma", "sp ace"};
    s = literal(several, 4);
    assert_string_equal(s, "{\"co-a\",\"\",\"with,comma\",\"sp ace\"}");
    free(s);
    s = literal(NULL, 0);
    assert_string_equal(s, "{}");
    free(s);
}

static void test_array_escapes_quote_and_backslash(void **state)
{
    (void)state;
    const char *ids[] = {"a\"b", "c\\d", "\\\"", "{}"};
    char *s = literal(ids, 4);
    assert_string_equal(s, "{\"a\\\"b\",\"c\\\\d\",\"\\\\\\\"\",\"{}\"}");
    free(s);
}

/* Many long ids: the buffer grows past its first size and keeps every byte. */
static void test_array_grows(void **state)
{
    (void)state;
    enum { N = 300 };
    char ids[N][64];
    const char *p[N];
    size_t want = 2 + (N - 1);
    for (int i = 0; i < N; i++) {
        memset(ids[i], 'a' + i % 26, 40);
        snprintf(ids[i] + 40, sizeof(ids[i]) - 40, "\"%d", i);
        p[i] = ids[i];
        want += strlen(ids[i]) + 3; /* two quotes and one escape */
    }
    char *s = literal(p, N);
    assert_int_equal(strlen(s), want);
    char tail[64];
    memset(tail, 'a' + (N - 1) % 26, 40);
    snprintf(tail + 40, sizeof(tail) - 40, "\\\"%d\"}", N - 1);
    assert_string_equal(s + strlen(s) - strlen(tail), tail);
    free(s);
}

static void test_outcome_names(void **state)
{
    (void)state;
    assert_int_equal(rsv_ledger_outcome_parse("refunding"), RSV_LEDGER_REFUNDING);
    assert_int_equal(rsv_ledger_outcome_parse("booked"), RSV_LEDGER_BOOKED);
    assert_int_equal(rsv_ledger_outcome_parse("open"), RSV_LEDGER_OPEN);
    assert_int_equal(rsv_ledger_outcome_parse("mismatch"), RSV_LEDGER_MISMATCH);
    assert_int_equal(rsv_ledger_outcome_parse("unknown"), RSV_LEDGER_UNKNOWN);
    /* anything else counts as a charge of nobody's, never as another outcome */
    assert_int_equal(rsv_ledger_outcome_parse(""), RSV_LEDGER_UNKNOWN);
    assert_int_equal(rsv_ledger_outcome_parse("Booked"), RSV_LEDGER_UNKNOWN);
    assert_int_equal(rsv_ledger_outcome_parse("open "), RSV_LEDGER_UNKNOWN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_literal),
        cmocka_unit_test(test_array_escapes_quote_and_backslash),
        cmocka_unit_test(test_array_grows),
        cmocka_unit_test(test_outcome_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
