/*
 * test_rsv_cors — reserve/rsv_cors.c below HTTP: rsv_cors_normalize serialises an origin
 * the way browsers send it (RFC 6454: lower case, default port dropped) and refuses what
 * no browser sends or the allow-list must never hold (wildcards, paths, plain http off
 * loopback, bad ports, over-long origins) with a reason; rsv_cors_new parses the
 * cors_origins list (commas and/or spaces, duplicates once, one bad entry refuses the
 * whole list); rsv_cors_allowed is an exact match against the normalised list. The
 * preflight and the headers of real answers are tested over TLS by the integration
 * suite (test_reserve_shop).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "rsv_cors.h"

/* rsv_cors_normalize of a C string; 0 or -1, why filled either way ("" when fine). */
static int norm(const char *in, char *out, size_t outlen, char *why, size_t whylen)
{
    why[0] = '\0';
    return rsv_cors_normalize(in, strlen(in), out, outlen, why, whylen);
}

static void origins_are_serialised_like_browsers_do(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"https://shop.example", "https://shop.example"},
        {"HTTPS://Shop.Example", "https://shop.example"},
        {"https://shop.example:443", "https://shop.example"},
        {"https://shop.example:8443", "https://shop.example:8443"},
        {"https://shop.example:0443", "https://shop.example"},
        {"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
        {"http://localhost:80", "http://localhost"},
        {"http://[::1]:3000", "http://[::1]:3000"},
        {"https://[2001:db8::1]", "https://[2001:db8::1]"},
        {"https://a-b.c-d.example", "https://a-b.c-d.example"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[RSV_CORS_ORIGIN_MAX], why[320];
        if (norm(cases[i][0], out, sizeof(out), why, sizeof(why)) != 0)
            fail_msg("%s: %s", cases[i][0], why);
        assert_string_equal(out, cases[i][1]);
    }
}

static void what_no_browser_sends_is_refused_with_a_reason(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"", "1-255 characters"},
        {"*", "wildcards"},
        {"https://*.example", "wildcards"},
        {"ftp://shop.example", "starts with https://"},
        {"shop.example", "starts with https://"},
        {"https://", "no host"},
        {"https://:443", "no host"},
        {"https://shop.example/", "no path"},
        {"https://shop.example/buy", "no path"},
        {"https://shop.example?x", "no path"},
        {"https://shop.example:", "malformed port"},
        {"https://shop.example:x1", "malformed port"},
        {"https://shop.example:0", "1-65535"},
        {"https://shop.example:65536", "1-65535"},
        {"https://shop.example:000443", "1-65535"},
        {"https://[::1", "malformed IPv6"},
        {"http://shop.example", "only for loopback"},
        {"http://127.0.0.2", "only for loopback"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[RSV_CORS_ORIGIN_MAX], why[320];
        assert_int_equal(norm(cases[i][0], out, sizeof(out), why, sizeof(why)), -1);
        if (strstr(why, cases[i][1]) == NULL)
            fail_msg("%s: reason '%s' does not say '%s'", cases[i][0], why, cases[i][1]);
    }
}

static void lengths_are_bounded(void **state)
{
    (void)state;
    char in[RSV_CORS_ORIGIN_MAX + 8], out[RSV_CORS_ORIGIN_MAX], why[320];
    /* The longest origin kept: RSV_CORS_ORIGIN_MAX - 1 characters. */
    size_t n = RSV_CORS_ORIGIN_MAX - 1;
    memcpy(in, "https://", 8);
    memset(in + 8, 'a', n - 8);
    in[n] = '\0';
    assert_int_equal(norm(in, out, sizeof(out), why, sizeof(why)), 0);
    assert_int_equal(strlen(out), n);
    /* One more is refused, not cut. */
    in[n] = 'a';
    in[n + 1] = '\0';
    assert_int_equal(norm(in, out, sizeof(out), why, sizeof(why)), -1);
    /* Only len bytes are read: the origin need not be NUL-terminated. */
    assert_int_equal(rsv_cors_normalize("https://shop.example,https://x", 20, out, sizeof(out), why,
                                        sizeof(why)),
                     0);
    assert_string_equal(out, "https://shop.example");
    /* An output buffer too small is an error, never a truncated origin. */
    char small[10];
    assert_int_equal(norm("https://shop.example", small, sizeof(small), why, sizeof(why)), -1);
    assert_non_null(strstr(why, "too long"));
}

static void the_list_parses_once_and_matches_exactly(void **state)
{
    (void)state;
    char err[400] = "";
    rsv_cors_t *c =
        rsv_cors_new(" https://Shop.Example:443,https://b.example:8443  http://localhost:8080,"
                     ",https://shop.example\thttps://b.example:8443",
                     err, sizeof(err));
    assert_non_null(c);
    assert_int_equal(rsv_cors_count(c), 3); /* duplicates once */
    assert_true(rsv_cors_allowed(c, "https://shop.example"));
    assert_true(rsv_cors_allowed(c, "https://b.example:8443"));
    assert_true(rsv_cors_allowed(c, "http://localhost:8080"));
    /* The Origin header is compared as sent: browsers already serialise it. */
    assert_false(rsv_cors_allowed(c, "https://Shop.example"));
    assert_false(rsv_cors_allowed(c, "https://shop.example:443"));
    assert_false(rsv_cors_allowed(c, "https://b.example"));
    assert_false(rsv_cors_allowed(c, "http://localhost"));
    assert_false(rsv_cors_allowed(c, "null"));
    assert_false(rsv_cors_allowed(c, NULL));
    rsv_cors_free(c);

    c = rsv_cors_new(NULL, err, sizeof(err));
    assert_non_null(c);
    assert_int_equal(rsv_cors_count(c), 0);
    assert_false(rsv_cors_allowed(c, "https://shop.example"));
    rsv_cors_free(c);
    c = rsv_cors_new(" , ", err, sizeof(err));
    assert_non_null(c);
    assert_int_equal(rsv_cors_count(c), 0);
    rsv_cors_free(c);

    /* One bad entry refuses the whole list, naming the setting and the entry. */
    assert_null(rsv_cors_new("https://shop.example, *", err, sizeof(err)));
    assert_non_null(strstr(err, "cors_origins: '*'"));
    assert_null(rsv_cors_new("https://shop.example/path", err, sizeof(err)));
    assert_non_null(strstr(err, "no path"));

    rsv_cors_free(NULL);
    assert_int_equal(rsv_cors_count(NULL), 0);
    assert_false(rsv_cors_allowed(NULL, "https://shop.example"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(origins_are_serialised_like_browsers_do),
        cmocka_unit_test(what_no_browser_sends_is_refused_with_a_reason),
        cmocka_unit_test(lengths_are_bounded),
        cmocka_unit_test(the_list_parses_once_and_matches_exactly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
