/*
 * Unit tests for reserve/rsv_outbox.c's pure parts: the retry back-off (doubling from the
 * base, capped, jittered within the upper half of the delay) and the secrets file's
 * parsing (one a line, the first signs, each long enough, bounded). Delivery itself runs
 * against real Postgres and a real receiver in tests/integration/test_reserve_events.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cm_mem.h"
#include "rsv_outbox.h"

static void test_backoff_doubles_from_the_base_and_caps(void **state)
{
    (void)state;
    /* rnd = max: the whole delay; rnd = 0: its fixed upper half */
    assert_int_equal(rsv_outbox_backoff_ms(1, 1000, 300000, UINT32_MAX), 999);
    assert_int_equal(rsv_outbox_backoff_ms(2, 1000, 300000, UINT32_MAX), 1999);
    assert_int_equal(rsv_outbox_backoff_ms(3, 1000, 300000, 0), 2000);
    assert_int_equal(rsv_outbox_backoff_ms(1, 1000, 300000, 0), 500);
    assert_int_equal(rsv_outbox_backoff_ms(20, 1000, 300000, 0), 150000);
    assert_int_equal(rsv_outbox_backoff_ms(1000000, 1000, 300000, UINT32_MAX), 299999);
    assert_int_equal(rsv_outbox_backoff_ms(0, 1000, 300000, 0), 500);
    /* a cap under the base wins */
    assert_int_equal(rsv_outbox_backoff_ms(1, 1000, 400, 0), 200);
}

static void test_backoff_jitter_stays_in_the_upper_half(void **state)
{
    (void)state;
    for (int a = 1; a < 30; a++) {
        int64_t lo = rsv_outbox_backoff_ms(a, 200, 1500, 0);
        int64_t hi = rsv_outbox_backoff_ms(a, 200, 1500, UINT32_MAX);
        for (uint32_t r = 1; r < 1000; r++) {
            int64_t d = rsv_outbox_backoff_ms(a, 200, 1500, r * 4294967u);
            assert_true(d >= lo && d <= hi);
        }
        assert_true(hi <= 1500 && lo * 2 >= hi);
    }
}

static void test_secrets_one_a_line_first_signs(void **state)
{
    (void)state;
    char err[160];
    rsv_outbox_secrets_t *s = rsv_outbox_secrets_parse(
        cm_xstrdup("  new-secret-0123456789 \n\n\told-secret-0123456789\r\n"), err, sizeof(err));
    assert_non_null(s);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->s[0].len, strlen("new-secret-0123456789"));
    assert_memory_equal(s->s[0].key, "new-secret-0123456789", s->s[0].len);
    assert_memory_equal(s->s[1].key, "old-secret-0123456789", s->s[1].len);
    rsv_outbox_secrets_free(s);
}

static void test_secrets_refused(void **state)
{
    (void)state;
    char err[160];
    assert_null(rsv_outbox_secrets_parse(cm_xstrdup("\n \n"), err, sizeof(err)));
    assert_non_null(strstr(err, "no secret"));
    assert_null(
        rsv_outbox_secrets_parse(cm_xstrdup("long-enough-secret-1\nshort\n"), err, sizeof(err)));
    assert_non_null(strstr(err, "at least 16"));
    char many[9 * 20 + 1] = "";
    for (int i = 0; i < 9; i++)
        strcat(many, "0123456789abcdef-x\n");
    assert_null(rsv_outbox_secrets_parse(cm_xstrdup(many), err, sizeof(err)));
    assert_non_null(strstr(err, "at most 8"));
    rsv_outbox_secrets_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_doubles_from_the_base_and_caps),
        cmocka_unit_test(test_backoff_jitter_stays_in_the_upper_half),
        cmocka_unit_test(test_secrets_one_a_line_first_signs),
        cmocka_unit_test(test_secrets_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
