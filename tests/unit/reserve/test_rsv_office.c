/*
 * Unit tests for the pure parts of reserve/rsv_office.c: CSV fields (RFC 4180 quoting,
 * formula prefixes neutralised, NULL and empty fields), the e-mail check a confirm's
 * "email" passes, and the unit ids an item refund names.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "rsv_office.h"

static char *field(const char *s)
{
    rsv_office_buf_t b = {0};
    rsv_office_csv_field(&b, s);
    rsv_office_buf_put(&b, "|", 1); /* so an empty field still has text */
    char *out = strdup(b.data);
    rsv_office_buf_clear(&b);
    return out;
}

static void check_field(const char *in, const char *want)
{
    char *got = field(in);
    assert_string_equal(got, want);
    free(got);
}

static void test_csv_plain_fields_stay_as_they_are(void **state)
{
    (void)state;
    check_field("bk_12ab", "bk_12ab|");
    check_field("A-1 A-2", "A-1 A-2|");
    check_field("x-1", "x-1|"); /* a dash inside is no formula */
    check_field("", "|");
    check_field(NULL, "|");
}

static void test_csv_quotes_commas_quotes_and_line_breaks(void **state)
{
    (void)state;
    check_field("a,b", "\"a,b\"|");
    check_field("say \"hi\"", "\"say \"\"hi\"\"\"|");
    check_field("two\nlines", "\"two\nlines\"|");
    check_field("cr\rhere", "\"cr\rhere\"|");
    check_field("\"", "\"\"\"\"|");
}

static void test_csv_neutralises_formula_prefixes(void **state)
{
    (void)state;
    check_field("=1+1", "\"'=1+1\"|");
    check_field("+sum@example.org", "\"'+sum@example.org\"|");
    check_field("-2", "\"'-2\"|");
    check_field("@SUM(A1)", "\"'@SUM(A1)\"|");
    check_field("\tx", "\"'\tx\"|");
    check_field("=HYPERLINK(\"u\",1),", "\"'=HYPERLINK(\"\"u\"\",1),\"|");
}

static void test_csv_buffer_grows(void **state)
{
    (void)state;
    rsv_office_buf_t b = {0};
    for (int i = 0; i < 10000; i++)
        rsv_office_csv_field(&b, "a,b");
    assert_int_equal(b.len, 10000 * 5);
    assert_int_equal(strlen(b.data), b.len);
    rsv_office_buf_clear(&b);
    assert_null(b.data);
}

static void test_email_valid(void **state)
{
    (void)state;
    const char *good[] = {"a@b.co", "Finder.One@Example.org", "x+tag@mail.example.com",
                          "o'neil@ex-ample.io", "1@2.3"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_true(rsv_office_email_valid(good[i]));
    char long_local[80], long_all[300];
    memset(long_local, 'a', 65);
    strcpy(long_local + 65, "@example.org");
    memset(long_all, 'a', 60);
    long_all[60] = '@';
    for (int i = 61; i < 290; i += 10)
        memcpy(long_all + i, "aaaaaaaaa.", 10);
    strcpy(long_all + 290, "org");
    const char *bad[] = {NULL,           "",          "plain",       "@example.org",
                         "a@",           "a@b",       "a@@b.org",    "a@b@c.org",
                         "sp ace@b.org", "a,b@c.org", "\"q\"@c.org", "<a>@c.org",
                         "a@-b.org",     "a@b-.org",  "a@b..org",    "a@.b.org",
                         "a@b.org.",     "a@b_c.org", "tab\t@b.org", "caf\xc3\xa9@b.org",
                         long_local,     long_all};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (rsv_office_email_valid(bad[i]))
            fail_msg("accepted bad e-mail #%zu '%s'", i, bad[i] ? bad[i] : "(null)");
    }
}

static void test_unit_valid(void **state)
{
    (void)state;
    assert_true(rsv_office_unit_valid("A-1-2"));
    assert_true(rsv_office_unit_valid("floor#12"));
    assert_true(rsv_office_unit_valid("x.y_z"));
    assert_false(rsv_office_unit_valid(NULL));
    assert_false(rsv_office_unit_valid(""));
    assert_false(rsv_office_unit_valid("bad unit"));
    assert_false(rsv_office_unit_valid("a/b"));
    assert_false(rsv_office_unit_valid("a,b"));
    char big[90];
    memset(big, 'u', 81);
    big[81] = '\0';
    assert_false(rsv_office_unit_valid(big));
    big[80] = '\0';
    assert_true(rsv_office_unit_valid(big));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_plain_fields_stay_as_they_are),
        cmocka_unit_test(test_csv_quotes_commas_quotes_and_line_breaks),
        cmocka_unit_test(test_csv_neutralises_formula_prefixes),
        cmocka_unit_test(test_csv_buffer_grows),
        cmocka_unit_test(test_email_valid),
        cmocka_unit_test(test_unit_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
