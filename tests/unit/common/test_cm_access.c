/*
 * Unit tests for common/cm_access.c's request-id check (cm_access_pick_id) and fresh
 * ids: what X-Request-Id values are kept, which traceparents give their trace id, and
 * that a fresh id is 16 hex digits and differs from the last.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cm_access.h"

#define TP_OK "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void test_sane_x_request_id_is_kept(void **state)
{
    (void)state;
    char out[CM_ACCESS_ID_MAX + 1];
    char longest[CM_ACCESS_ID_MAX + 1];
    memset(longest, 'a', CM_ACCESS_ID_MAX);
    longest[CM_ACCESS_ID_MAX] = '\0';
    assert_true(cm_access_pick_id("Ab-9._z", TP_OK, out));
    assert_string_equal(out, "Ab-9._z");
    assert_true(cm_access_pick_id(longest, NULL, out));
    assert_string_equal(out, longest);
    assert_true(cm_access_pick_id("x", NULL, out));
    assert_string_equal(out, "x");
}

static void test_insane_x_request_id_is_refused(void **state)
{
    (void)state;
    char out[CM_ACCESS_ID_MAX + 1] = "untouched";
    char too_long[CM_ACCESS_ID_MAX + 2];
    memset(too_long, 'a', CM_ACCESS_ID_MAX + 1);
    too_long[CM_ACCESS_ID_MAX + 1] = '\0';
    const char *bad[] = {"", "a b", "a;b", "a\"b", "a\nb", "caf\xc3\xa9", "a/b", "a%20b", too_long};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(cm_access_pick_id(bad[i], NULL, out));
    assert_string_equal(out, "untouched");
    /* an insane X-Request-Id falls back to the traceparent */
    assert_true(cm_access_pick_id("a b", TP_OK, out));
    assert_string_equal(out, "4bf92f3577b34da6a3ce929d0e0e4736");
}

static void test_traceparent(void **state)
{
    (void)state;
    char out[CM_ACCESS_ID_MAX + 1];
    assert_true(cm_access_pick_id(NULL, TP_OK, out));
    assert_string_equal(out, "4bf92f3577b34da6a3ce929d0e0e4736");
    /* a later version may add fields */
    assert_true(cm_access_pick_id(
        NULL, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more", out));
    const char *bad[] = {
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   /* zero parent id */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* forbidden version */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   /* uppercase */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", /* v00 has no more */
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",    /* short trace id */
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",   "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(cm_access_pick_id(NULL, bad[i], out));
}

static void test_fresh_ids(void **state)
{
    (void)state;
    char a[CM_ACCESS_ID_MAX + 1], b[CM_ACCESS_ID_MAX + 1];
    cm_access_new_id(a);
    cm_access_new_id(b);
    assert_int_equal(strlen(a), 16);
    assert_int_equal(strspn(a, "0123456789abcdef"), 16);
    assert_string_not_equal(a, b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sane_x_request_id_is_kept),
        cmocka_unit_test(test_insane_x_request_id_is_refused),
        cmocka_unit_test(test_traceparent),
        cmocka_unit_test(test_fresh_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
