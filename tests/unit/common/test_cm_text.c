/*
 * Unit tests for common/cm_text.c: exact bytes of each kind of piece (literals, strings,
 * every int64 boundary, JSON escaping), and that a text that does not fit is refused whole
 * with nothing written past the buffer, at every buffer size up to the text's own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cm_text.h"

/* The sample text every test writes, into out of size bytes; its length or 0. */
static size_t sample(char *out, size_t size)
{
    cm_text_t t = cm_text_at(out, size);
    CM_TEXT_LIT(&t, "{\"id\":");
    cm_text_json(&t, "a\"b\\c\x01");
    CM_TEXT_LIT(&t, ",\"n\":");
    cm_text_i64(&t, INT64_MIN);
    CM_TEXT_LIT(&t, ",\"m\":");
    cm_text_i64(&t, INT64_MAX);
    CM_TEXT_LIT(&t, ",\"z\":");
    cm_text_i64(&t, 0);
    cm_text_str(&t, "}");
    return cm_text_done(&t, out);
}

static const char want[] = "{\"id\":\"a\\\"b\\\\c\\u0001\",\"n\":-9223372036854775808,"
                           "\"m\":9223372036854775807,\"z\":0}";

static void test_pieces_are_written_exactly(void **state)
{
    char out[256];
    assert_int_equal(sample(out, sizeof(out)), strlen(want));
    assert_string_equal(out, want);
}

static void test_numbers_match_printf(void **state)
{
    const int64_t v[] = {0,   1,         -1,         9,         10,        -10,          99,
                         100, 123456789, -987654321, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char out[32], ref[32];
        cm_text_t t = cm_text_at(out, sizeof(out));
        cm_text_i64(&t, v[i]);
        assert_int_equal(cm_text_done(&t, out),
                         (size_t)snprintf(ref, sizeof(ref), "%" PRId64, v[i]));
        assert_string_equal(out, ref);
    }
}

/* Every size short of the text and its NUL is refused, nothing written past size. */
static void test_what_does_not_fit_is_refused_within_the_buffer(void **state)
{
    const size_t need = strlen(want) + 1;
    char buf[512];
    for (size_t size = 0; size < need; size++) {
        memset(buf, 'X', sizeof(buf));
        assert_int_equal(sample(buf, size), 0);
        for (size_t i = size; i < sizeof(buf); i++)
            assert_int_equal(buf[i], 'X');
    }
    assert_int_equal(sample(buf, need), need - 1);
    assert_string_equal(buf, want);
}

static void test_json_worst_case_fits(void **state)
{
    char s[65], out[CM_TEXT_JSON_WORST(64)];
    memset(s, 0x1f, 64);
    s[64] = '\0';
    cm_text_t t = cm_text_at(out, sizeof(out));
    cm_text_json(&t, s);
    assert_int_equal(cm_text_done(&t, out), sizeof(out) - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces_are_written_exactly),
        cmocka_unit_test(test_numbers_match_printf),
        cmocka_unit_test(test_what_does_not_fit_is_refused_within_the_buffer),
        cmocka_unit_test(test_json_worst_case_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
