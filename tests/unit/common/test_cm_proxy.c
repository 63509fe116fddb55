/*
 * test_cm_proxy — the PROXY v2 header parser and the proxy_from allow list (pure).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "cm_proxy.h"

static const unsigned char sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                      0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* Builds a header: ver_cmd, fam, body of blen bytes. Returns its length. */
static size_t build(unsigned char *out, unsigned ver_cmd, unsigned fam, const void *body,
                    size_t blen)
{
    memcpy(out, sig, 12);
    out[12] = (unsigned char)ver_cmd;
    out[13] = (unsigned char)fam;
    out[14] = (unsigned char)(blen >> 8);
    out[15] = (unsigned char)blen;
    memcpy(out + 16, body, blen);
    return 16 + blen;
}

static const unsigned char v4[12] = {203, 0, 113, 7, 127, 0, 0, 1, 0xC8, 0x22, 0x01, 0xBB};

static void test_ipv4(void **state)
{
    unsigned char buf[64];
    cm_proxy_info_t info;
    size_t n = build(buf, 0x21, 0x11, v4, sizeof(v4));

    (void)state;
    assert_int_equal(cm_proxy_parse(buf, n, &info), 28);
    assert_true(info.has_addr);
    assert_string_equal(info.addr, "203.0.113.7");
    assert_int_equal(info.port, 51234);
    /* TLS bytes right after the header are not part of it */
    buf[n] = 0x16;
    assert_int_equal(cm_proxy_parse(buf, n + 1, &info), 28);
    /* every strict prefix asks for more */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(cm_proxy_parse(buf, k, &info), 0);
}

static void test_ipv6_tlvs_local(void **state)
{
    unsigned char body[64] = {0}, buf[128];
    cm_proxy_info_t info;
    size_t n;

    (void)state;
    inet_pton(AF_INET6, "2001:db8::5", body);
    inet_pton(AF_INET6, "::1", body + 16);
    body[32] = 0x30, body[33] = 0x39; /* src port 12345 */
    body[34] = 0x01, body[35] = 0xBB;
    /* two TLVs: ALPN "h2" and an empty NOOP */
    memcpy(body + 36, "\x01\x00\x02h2\x04\x00\x00", 8);
    n = build(buf, 0x21, 0x21, body, 44);
    assert_int_equal(cm_proxy_parse(buf, n, &info), 60);
    assert_string_equal(info.addr, "2001:db8::5");
    assert_int_equal(info.port, 12345);

    /* LOCAL (HAProxy's own health checks): valid, no address */
    n = build(buf, 0x20, 0x00, "", 0);
    assert_int_equal(cm_proxy_parse(buf, n, &info), 16);
    assert_false(info.has_addr);
    /* LOCAL may still carry an address block: it is skipped */
    n = build(buf, 0x20, 0x11, v4, sizeof(v4));
    assert_int_equal(cm_proxy_parse(buf, n, &info), 28);
    assert_false(info.has_addr);
    /* PROXY over UNSPEC: use the real peer */
    n = build(buf, 0x21, 0x00, "", 0);
    assert_int_equal(cm_proxy_parse(buf, n, &info), 16);
    assert_false(info.has_addr);
}

static void test_invalid(void **state)
{
    unsigned char buf[2048];
    cm_proxy_info_t info;
    size_t n;

    (void)state;
    /* v1 text, TLS ClientHello, plain HTTP: not a v2 header */
    assert_int_equal(cm_proxy_parse("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n", 32, &info), -1);
    assert_int_equal(cm_proxy_parse("\x16\x03\x01\x02\x00", 5, &info), -1);
    assert_int_equal(cm_proxy_parse("GET / HTTP/1.1\r\n", 16, &info), -1);
    /* wrong version, unknown command / family / transport */
    n = build(buf, 0x11, 0x11, v4, sizeof(v4));
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    n = build(buf, 0x22, 0x11, v4, sizeof(v4));
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    n = build(buf, 0x21, 0x41, v4, sizeof(v4));
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    n = build(buf, 0x21, 0x13, v4, sizeof(v4));
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    /* UDP is not what we serve */
    n = build(buf, 0x21, 0x12, v4, sizeof(v4));
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    /* length shorter than the address block */
    n = build(buf, 0x21, 0x11, v4, 8);
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    /* a TLV running past the end, or a dangling TLV byte */
    unsigned char body[32];
    memcpy(body, v4, 12);
    memcpy(body + 12, "\x01\x00\x09xy", 5);
    n = build(buf, 0x21, 0x11, body, 17);
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    memcpy(body + 12, "\x01", 1);
    n = build(buf, 0x21, 0x11, body, 13);
    assert_int_equal(cm_proxy_parse(buf, n, &info), -1);
    /* over CM_PROXY_MAX_HEADER, known from the fixed part alone */
    memset(buf + 16, 0, 1100);
    n = build(buf, 0x21, 0x11, buf + 16, 1100);
    assert_int_equal(cm_proxy_parse(buf, 16, &info), -1);
}

static void test_starts_header(void **state)
{
    unsigned char buf[64];
    size_t n = build(buf, 0x21, 0x11, v4, sizeof(v4));

    (void)state;
    for (size_t k = 1; k <= n; k++)
        assert_true(cm_proxy_starts_header(buf, k));
    assert_false(cm_proxy_starts_header(buf, 0));
    assert_false(cm_proxy_starts_header("\x16\x03\x01", 3)); /* TLS */
    assert_false(cm_proxy_starts_header("GET ", 4));
    assert_false(cm_proxy_starts_header("PROXY TCP4", 10));
    assert_false(cm_proxy_starts_header("\r\n\r\nX", 5));
}

static void sin4(struct sockaddr_in *s, const char *ip)
{
    memset(s, 0, sizeof(*s));
    s->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &s->sin_addr);
}

static void sin6(struct sockaddr_in6 *s, const char *ip)
{
    memset(s, 0, sizeof(*s));
    s->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &s->sin6_addr);
}

static void test_allow_list(void **state)
{
    char err[160];
    struct sockaddr_in a;
    struct sockaddr_in6 b;
    cm_proxy_allow_t *l =
        cm_proxy_allow_parse(" 127.0.0.1, 10.1.0.0/16 ,2001:db8::/32", err, sizeof(err));

    (void)state;
    assert_non_null(l);
    sin4(&a, "127.0.0.1");
    assert_true(cm_proxy_allowed(l, &a));
    sin4(&a, "127.0.0.2");
    assert_false(cm_proxy_allowed(l, &a));
    sin4(&a, "10.1.255.9");
    assert_true(cm_proxy_allowed(l, &a));
    sin4(&a, "10.2.0.1");
    assert_false(cm_proxy_allowed(l, &a));
    sin6(&b, "2001:db8:1::7");
    assert_true(cm_proxy_allowed(l, &b));
    sin6(&b, "2001:db9::7");
    assert_false(cm_proxy_allowed(l, &b));
    sin6(&b, "::ffff:127.0.0.1"); /* IPv4-mapped counts as IPv4 */
    assert_true(cm_proxy_allowed(l, &b));
    cm_proxy_allow_free(l);

    l = cm_proxy_allow_parse("0.0.0.0/0", err, sizeof(err));
    sin4(&a, "192.0.2.1");
    assert_true(cm_proxy_allowed(l, &a));
    cm_proxy_allow_free(l);
    l = cm_proxy_allow_parse("10.0.0.0/9", err, sizeof(err)); /* a prefix off a byte edge */
    sin4(&a, "10.127.0.1");
    assert_true(cm_proxy_allowed(l, &a));
    sin4(&a, "10.128.0.1");
    assert_false(cm_proxy_allowed(l, &a));
    cm_proxy_allow_free(l);

    static const char *bad[] = {"",        ",",         "127.0.0.1,", "localhost",  "10.0.0.0/33",
                                "::1/129", "10.0.0.0/", "10.0.0.0/x", "1.2.3.4/-1", "1.2.3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_null(cm_proxy_allow_parse(bad[i], err, sizeof(err)));
        assert_true(err[0] != '\0');
    }
    assert_false(cm_proxy_allowed(NULL, &a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4),       cmocka_unit_test(test_ipv6_tlvs_local),
        cmocka_unit_test(test_invalid),    cmocka_unit_test(test_starts_header),
        cmocka_unit_test(test_allow_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
