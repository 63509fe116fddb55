/*
 * Unit tests for gateway/gw_admit.c's token cache: an admission is found only by the
 * visitor it was signed for (a second visitor holding the same number never gets the
 * first one's token: docs/design.md, invariant 13) and the key it is bound to, and apart
 * by generation and event;
 * the cache stays bounded, the oldest entry going first.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cm_mem.h"
#include "gw_admit.h"

#define VA "0123456789abcdef0123456789abcdef"
#define VB "fedcba9876543210fedcba9876543210"

static void test_a_token_is_found_only_by_its_visitor(void **state)
{
    (void)state;
    gw_admit_t *a = gw_admit_new(16);
    int64_t exp = 0;
    gw_admit_cache_put(a, 7, 42, "ev", VA, "", 1000, cm_xstrdup("token-of-a"));
    assert_string_equal(gw_admit_cache_find(a, 7, 42, "ev", VA, "", &exp), "token-of-a");
    assert_int_equal(exp, 1000);
    /* regression: the cache was keyed by (gen, number, event), so the second visitor of a
     * number handed out twice got the first one's token */
    assert_null(gw_admit_cache_find(a, 7, 42, "ev", VB, "", NULL));
    gw_admit_cache_put(a, 7, 42, "ev", VB, "", 2000, cm_xstrdup("token-of-b"));
    assert_string_equal(gw_admit_cache_find(a, 7, 42, "ev", VB, "", &exp), "token-of-b");
    assert_int_equal(exp, 2000);
    assert_string_equal(gw_admit_cache_find(a, 7, 42, "ev", VA, "", NULL), "token-of-a");
    gw_admit_free(a);
}

#define KA "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"
#define KB "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"

/* A token bound to one key (the storefront's, named by ?bind=) is never served to a poll
 * naming another key, nor to one naming none. */
static void test_a_token_is_found_only_for_its_key(void **state)
{
    (void)state;
    gw_admit_t *a = gw_admit_new(16);
    gw_admit_cache_put(a, 7, 42, "ev", VA, KA, 1000, cm_xstrdup("bound-to-a"));
    assert_string_equal(gw_admit_cache_find(a, 7, 42, "ev", VA, KA, NULL), "bound-to-a");
    assert_null(gw_admit_cache_find(a, 7, 42, "ev", VA, KB, NULL));
    assert_null(gw_admit_cache_find(a, 7, 42, "ev", VA, "", NULL));
    gw_admit_cache_put(a, 7, 42, "ev", VA, KB, 1000, cm_xstrdup("bound-to-b"));
    assert_string_equal(gw_admit_cache_find(a, 7, 42, "ev", VA, KB, NULL), "bound-to-b");
    assert_string_equal(gw_admit_cache_find(a, 7, 42, "ev", VA, KA, NULL), "bound-to-a");
    gw_admit_free(a);
}

static void test_generation_and_event_keep_admissions_apart(void **state)
{
    (void)state;
    gw_admit_t *a = gw_admit_new(16);
    gw_admit_cache_put(a, 7, 42, "ev", VA, "", 1000, cm_xstrdup("t"));
    assert_null(gw_admit_cache_find(a, 8, 42, "ev", VA, "", NULL));
    assert_null(gw_admit_cache_find(a, 7, 42, "other", VA, "", NULL));
    assert_null(gw_admit_cache_find(a, 7, 43, "ev", VA, "", NULL));
    gw_admit_free(a);
}

static void test_a_second_put_keeps_the_first_token(void **state)
{
    (void)state;
    gw_admit_t *a = gw_admit_new(16);
    gw_admit_cache_put(a, 7, 42, "ev", VA, "", 1000, cm_xstrdup("first"));
    const char *got = gw_admit_cache_put(a, 7, 42, "ev", VA, "", 1000, cm_xstrdup("second"));
    assert_string_equal(got, "first");
    gw_admit_free(a);
}

static void test_bounded_oldest_evicted_first(void **state)
{
    (void)state;
    gw_admit_t *a = gw_admit_new(4);
    for (uint64_t n = 1; n <= 6; n++)
        gw_admit_cache_put(a, 7, n, "ev", VA, "", 1000, cm_xstrdup("t"));
    assert_null(gw_admit_cache_find(a, 7, 1, "ev", VA, "", NULL));
    assert_null(gw_admit_cache_find(a, 7, 2, "ev", VA, "", NULL));
    for (uint64_t n = 3; n <= 6; n++)
        assert_non_null(gw_admit_cache_find(a, 7, n, "ev", VA, "", NULL));
    gw_admit_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_token_is_found_only_by_its_visitor),
        cmocka_unit_test(test_a_token_is_found_only_for_its_key),
        cmocka_unit_test(test_generation_and_event_keep_admissions_apart),
        cmocka_unit_test(test_a_second_put_keeps_the_first_token),
        cmocka_unit_test(test_bounded_oldest_evicted_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
