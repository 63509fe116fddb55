/*
 * Unit tests for common/cm_parse.c: each parser's accepted set and its edges
 * (lengths, character classes, calendar limits, integer overflow, base64 tails).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "cm_parse.h"

static void test_ident(void **state)
{
    (void)state;
    assert_true(cm_parse_ident("e1"));
    assert_true(cm_parse_ident("A-1.b_2"));
    char max[CM_IDENT_MAX + 2];
    memset(max, 'x', sizeof(max));
    max[CM_IDENT_MAX] = '\0';
    assert_true(cm_parse_ident(max));
    max[CM_IDENT_MAX] = 'x';
    max[CM_IDENT_MAX + 1] = '\0';
    assert_false(cm_parse_ident(max));
    assert_false(cm_parse_ident(""));
    assert_false(cm_parse_ident(NULL));
    assert_false(cm_parse_ident("a b"));
    assert_false(cm_parse_ident("a/b"));
    assert_false(cm_parse_ident("é"));
    assert_false(cm_parse_ident("a%00"));
    /* length-delimited: bytes past len are ignored, a NUL inside is refused */
    assert_true(cm_parse_ident_n("abc/def", 3));
    assert_false(cm_parse_ident_n("ab\0c", 4));
    assert_false(cm_parse_ident_n("abc", 0));
}

static void test_idem_key(void **state)
{
    (void)state;
    assert_true(cm_parse_idem_key("k"));
    assert_true(cm_parse_idem_key("!~{}\"'"));
    char key[CM_IDEM_KEY_MAX + 2];
    memset(key, 'k', sizeof(key));
    key[CM_IDEM_KEY_MAX] = '\0';
    assert_true(cm_parse_idem_key(key));
    key[CM_IDEM_KEY_MAX] = 'k';
    key[CM_IDEM_KEY_MAX + 1] = '\0';
    assert_false(cm_parse_idem_key(key));
    assert_false(cm_parse_idem_key(""));
    assert_false(cm_parse_idem_key("a b"));
    assert_false(cm_parse_idem_key("a\tb"));
    assert_false(cm_parse_idem_key("a\x7f"));
    assert_false(cm_parse_idem_key("\xc3\xa9"));
    assert_false(cm_parse_idem_key(NULL));
}

static void test_rfc3339_parse(void **state)
{
    (void)state;
    int64_t ms = 0;
    assert_int_equal(cm_parse_rfc3339("1970-01-01T00:00:00Z", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(cm_parse_rfc3339("2026-12-01T10:00:00Z", &ms), 0);
    assert_int_equal(ms, 1796119200000LL);
    assert_int_equal(cm_parse_rfc3339("2026-12-01T10:00:00.5Z", &ms), 0);
    assert_int_equal(ms, 1796119200500LL);
    assert_int_equal(cm_parse_rfc3339("2026-12-01T10:00:00.123456789Z", &ms), 0);
    assert_int_equal(ms, 1796119200123LL);
    assert_int_equal(cm_parse_rfc3339("2026-12-01T11:30:00+01:30", &ms), 0);
    assert_int_equal(ms, 1796119200000LL);
    assert_int_equal(cm_parse_rfc3339("2026-12-01T05:00:00-05:00", &ms), 0);
    assert_int_equal(ms, 1796119200000LL);
    assert_int_equal(cm_parse_rfc3339("2026-12-01t10:00:00z", &ms), 0);
    assert_int_equal(ms, 1796119200000LL);
    assert_int_equal(cm_parse_rfc3339("2024-02-29T00:00:00Z", &ms), 0);
    assert_int_equal(ms, 1709164800000LL);
    assert_int_equal(cm_parse_rfc3339("1969-12-31T23:59:59.999Z", &ms), 0);
    assert_int_equal(ms, -1);
    assert_int_equal(cm_parse_rfc3339("2000-02-29T00:00:00Z", &ms), 0);

    ms = 42;
    const char *bad[] = {
        "",
        "2026-12-01",
        "2026-12-01T10:00:00",
        "2026-12-01 10:00:00Z",
        "2026-13-01T10:00:00Z",
        "2026-00-01T10:00:00Z",
        "2026-04-31T10:00:00Z",
        "2023-02-29T10:00:00Z",
        "1900-02-29T10:00:00Z",
        "2026-12-01T24:00:00Z",
        "2026-12-01T10:60:00Z",
        "2026-12-01T10:00:60Z",
        "2026-12-01T10:00:00.Z",
        "2026-12-01T10:00:00.1234567890Z",
        "2026-12-01T10:00:00+0100",
        "2026-12-01T10:00:00+24:00",
        "2026-12-01T10:00:00Zjunk",
        "2026-12-01T10:00:00Z ",
        "+026-12-01T10:00:00Z",
        "2026-1a-01T10:00:00Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cm_parse_rfc3339(bad[i], &ms) == 0)
            fail_msg("accepted %s", bad[i]);
    }
    assert_int_equal(ms, 42);
    assert_int_equal(cm_parse_rfc3339(NULL, &ms), -1);
}

static void test_rfc3339_format(void **state)
{
    (void)state;
    char buf[25];
    assert_int_equal(cm_format_rfc3339(1796119200123LL, buf, sizeof(buf)), 24);
    assert_string_equal(buf, "2026-12-01T10:00:00.123Z");
    assert_int_equal(cm_format_rfc3339(0, buf, sizeof(buf)), 24);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    assert_int_equal(cm_format_rfc3339(-1, buf, sizeof(buf)), 24);
    assert_string_equal(buf, "1969-12-31T23:59:59.999Z");
    assert_int_equal(cm_format_rfc3339(1709164800000LL, buf, sizeof(buf)), 24);
    assert_string_equal(buf, "2024-02-29T00:00:00.000Z");
    assert_int_equal(cm_format_rfc3339(0, buf, 24), 0);
    /* year 10000 does not fit the fixed-width form */
    assert_int_equal(cm_format_rfc3339(253402300800000LL, buf, sizeof(buf)), 0);

    /* round trip across a spread of instants, including leap days and pre-1970 */
    for (int64_t ms = -2208988800000LL; ms < 4102444800000LL; ms += 86399999LL * 37) {
        int64_t back = 0;
        assert_int_equal(cm_format_rfc3339(ms, buf, sizeof(buf)), 24);
        assert_int_equal(cm_parse_rfc3339(buf, &back), 0);
        assert_int_equal(back, ms);
    }
}

static void test_i64(void **state)
{
    (void)state;
    int64_t v = 7;
    assert_int_equal(cm_parse_i64("0", 0, 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(cm_parse_i64("-5", -10, 10, &v), 0);
    assert_int_equal(v, -5);
    assert_int_equal(cm_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(cm_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
    assert_true(v == INT64_MIN);
    v = 7;
    assert_int_equal(cm_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v), -1);
    assert_int_equal(cm_parse_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v), -1);
    assert_int_equal(cm_parse_i64("99999999999999999999", INT64_MIN, INT64_MAX, &v), -1);
    assert_int_equal(cm_parse_i64("11", 0, 10, &v), -1);
    assert_int_equal(cm_parse_i64("-1", 0, 10, &v), -1);
    const char *bad[] = {"", "-", "+1", " 1", "1 ", "1x", "0x10", "--1", "1e3", "1.0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cm_parse_i64(bad[i], INT64_MIN, INT64_MAX, &v) == 0)
            fail_msg("accepted '%s'", bad[i]);
    }
    assert_int_equal(cm_parse_i64(NULL, 0, 1, &v), -1);
    assert_int_equal(v, 7);
}

static void test_bool(void **state)
{
    (void)state;
    bool b = false;
    const char *yes[] = {"true", "TRUE", "yes", "On", "1"};
    const char *no[] = {"false", "No", "OFF", "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        b = false;
        assert_int_equal(cm_parse_bool(yes[i], &b), 0);
        assert_true(b);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        b = true;
        assert_int_equal(cm_parse_bool(no[i], &b), 0);
        assert_false(b);
    }
    assert_int_equal(cm_parse_bool("", &b), -1);
    assert_int_equal(cm_parse_bool("2", &b), -1);
    assert_int_equal(cm_parse_bool("truee", &b), -1);
    assert_int_equal(cm_parse_bool(" true", &b), -1);
    assert_int_equal(cm_parse_bool(NULL, &b), -1);
}

static void test_bearer(void **state)
{
    (void)state;
    size_t len = 0;
    const char *h = "Bearer abc.def.ghi";
    const char *t = cm_parse_bearer(h, &len);
    assert_ptr_equal(t, h + 7);
    assert_int_equal(len, 11);
    h = "bearer    tok ";
    t = cm_parse_bearer(h, &len);
    assert_ptr_equal(t, h + 10);
    assert_int_equal(len, 3);
    assert_non_null(cm_parse_bearer("BEARER x", &len));
    assert_int_equal(len, 1);
    assert_null(cm_parse_bearer(NULL, &len));
    assert_null(cm_parse_bearer("", &len));
    assert_null(cm_parse_bearer("Bearer", &len));
    assert_null(cm_parse_bearer("Bearer ", &len));
    assert_null(cm_parse_bearer("Bearer   ", &len));
    assert_null(cm_parse_bearer("Bearerabc", &len));
    assert_null(cm_parse_bearer("Basic dXNlcjpwYXNz", &len));
    assert_null(cm_parse_bearer("Bearer a b", &len));
}

static void test_base64url(void **state)
{
    (void)state;
    /* RFC 4648 test vectors, url alphabet, no padding */
    const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *enc[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};
    char out[16];
    unsigned char dec[16];
    for (size_t i = 0; i < 7; i++) {
        size_t n = strlen(plain[i]);
        assert_int_equal(cm_base64url_encode((const unsigned char *)plain[i], n, out),
                         strlen(enc[i]));
        assert_string_equal(out, enc[i]);
        assert_int_equal(cm_base64url_decode(enc[i], strlen(enc[i]), dec, sizeof(dec)), n);
        assert_memory_equal(dec, plain[i], n);
    }
    const unsigned char bin[] = {0xfb, 0xff, 0xfe};
    assert_int_equal(cm_base64url_encode(bin, 3, out), 4);
    assert_string_equal(out, "-__-");
    assert_int_equal(cm_base64url_decode("-__-", 4, dec, sizeof(dec)), 3);
    assert_memory_equal(dec, bin, 3);

    /* every byte value survives a round trip */
    unsigned char all[256], back[256];
    char all_enc[4 * 86 + 1];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    size_t elen = cm_base64url_encode(all, sizeof(all), all_enc);
    assert_int_equal(elen, 342);
    assert_int_equal(cm_base64url_decode(all_enc, elen, back, sizeof(back)), 256);
    assert_memory_equal(all, back, 256);

    assert_int_equal(cm_base64url_decode("Zm9v", 4, dec, 2), -1);      /* out too small */
    assert_int_equal(cm_base64url_decode("Zm9vYg==", 8, dec, 16), -1); /* padding */
    assert_int_equal(cm_base64url_decode("Zm+v", 4, dec, 16), -1);     /* std alphabet */
    assert_int_equal(cm_base64url_decode("Zm/v", 4, dec, 16), -1);
    assert_int_equal(cm_base64url_decode("Zm9vY", 5, dec, 16), -1); /* 6 stray bits */
    assert_int_equal(cm_base64url_decode("Zh", 2, dec, 16), -1);    /* non-zero tail bits */
    assert_int_equal(cm_base64url_decode("Zm9 v", 5, dec, 16), -1);
    assert_int_equal(cm_base64url_decode("Zg", 2, dec, 16), 1);
}

static void test_hex(void **state)
{
    (void)state;
    const unsigned char in[] = {0x00, 0x0f, 0xa5, 0xff};
    char out[9];
    cm_hex_encode(in, sizeof(in), out);
    assert_string_equal(out, "000fa5ff");
    cm_hex_encode(in, 0, out);
    assert_string_equal(out, "");
}

static void test_url_allowed(void **state)
{
    (void)state;
    size_t o = 0;
    assert_true(cm_parse_url_allowed("https://shop.example/checkout?ev=1", false, &o));
    assert_int_equal(o, strlen("https://shop.example"));
    assert_true(cm_parse_url_allowed("HTTPS://shop.example:8443", false, &o));
    assert_int_equal(o, strlen("HTTPS://shop.example:8443"));
    assert_true(cm_parse_url_allowed("https://[2001:db8::1]:443/x", false, NULL));
    assert_true(cm_parse_url_allowed("https://127.0.0.1:8444?x=1", false, NULL));
    /* plain http: only to loopback, and only when allowed */
    const char *loop[] = {"http://127.0.0.1:8080/shop", "http://127.1.2.3", "http://localhost/",
                          "http://LOCALHOST:1", "http://[::1]:9/"};
    for (size_t i = 0; i < sizeof(loop) / sizeof(loop[0]); i++) {
        assert_true(cm_parse_url_allowed(loop[i], true, NULL));
        assert_false(cm_parse_url_allowed(loop[i], false, NULL));
    }
    const char *bad[] = {
        "http://shop.example/", /* not loopback */
        "http://127.0.0.1@evil.example/",
        "http://127.0.0.1.evil.example/",
        "http://128.0.0.1/",
        "http://127.0.0.256/",
        "http://127.0.0/",
        "http://localhost.evil.example/",
        "http://[::2]/",
        "https://user:pw@shop.example/",
        "https://shop.example/#frag", /* the fragment is where the token goes */
        "https://shop.example/a b",
        "https://shop.example/\"x",
        "https://shop.example/<x>",
        "https://shop.example/\n",
        "https://shop.example:0/",
        "https://shop.example:65536/",
        "https://shop.example:443443/",
        "https://shop.example:/",
        "https:///path",
        "https://",
        "https://[]/",
        "https://[::1/",
        "javascript:alert(1)",
        "data:text/html,x",
        "//shop.example/",
        "/checkout",
        "ftp://shop.example/",
        "",
        NULL,
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(cm_parse_url_allowed(bad[i], true, NULL));
    char big[CM_URL_MAX + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "https://a/", 10);
    assert_false(cm_parse_url_allowed(big, false, NULL));
    big[CM_URL_MAX] = '\0';
    assert_true(cm_parse_url_allowed(big, false, NULL));
}

static void test_path(void **state)
{
    (void)state;
    char buf[64], *seg[4];
    assert_int_equal(cm_parse_path("/", buf, sizeof(buf), seg, 4), 0);
    assert_int_equal(cm_parse_path("/q/e1/status", buf, sizeof(buf), seg, 4), 3);
    assert_string_equal(seg[2], "status");
    assert_int_equal(cm_parse_path("/admin/", buf, sizeof(buf), seg, 4), 1);
    assert_string_equal(seg[0], "admin");
    assert_int_equal(cm_parse_path("/q/a%2Db", buf, sizeof(buf), seg, 4), 2);
    assert_string_equal(seg[1], "a-b");
    /* found by fuzz_path: an empty segment at the end ("//", "/q/e1//") got through */
    const char *bad[] = {"//",    "/q/e1//", "/q//e1",     "q/e1", "/a%2Fb",
                         "/a%00", "/a%4",    "/1/2/3/4/5", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(cm_parse_path(bad[i], buf, sizeof(buf), seg, 4), -1);
}

static void ip_sockaddr(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    unsigned len = 0;
    assert_int_equal(cm_parse_ip_sockaddr("127.0.0.1", 6379, &ss, &len), 0);
    assert_int_equal(ss.ss_family, AF_INET);
    assert_int_equal(len, sizeof(struct sockaddr_in));
    assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), 6379);
    assert_int_equal(cm_parse_ip_sockaddr("::1", 0, &ss, &len), 0);
    assert_int_equal(ss.ss_family, AF_INET6);
    assert_int_equal(len, sizeof(struct sockaddr_in6));
    const char *bad[] = {"localhost", "", "1.2.3", "1.2.3.4.5", "[::1]", "::g", "1.2.3.4:80"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        assert_int_equal(cm_parse_ip_sockaddr(bad[k], 80, &ss, &len), -1);
    assert_int_equal(cm_parse_ip_sockaddr(NULL, 80, &ss, &len), -1);
    assert_int_equal(cm_parse_ip_sockaddr("127.0.0.1", 65536, &ss, &len), -1);
    assert_int_equal(cm_parse_ip_sockaddr("127.0.0.1", -1, &ss, &len), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ip_sockaddr),         cmocka_unit_test(test_ident),
        cmocka_unit_test(test_idem_key),       cmocka_unit_test(test_rfc3339_parse),
        cmocka_unit_test(test_rfc3339_format), cmocka_unit_test(test_i64),
        cmocka_unit_test(test_bool),           cmocka_unit_test(test_bearer),
        cmocka_unit_test(test_base64url),      cmocka_unit_test(test_hex),
        cmocka_unit_test(test_url_allowed),    cmocka_unit_test(test_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
