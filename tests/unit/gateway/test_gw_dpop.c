/*
 * Unit tests for gateway/gw_dpop.c: DPoP proofs made here with OpenSSL (a P-256 key, ES256
 * over the JSON texts the tests write) are parsed and verified; every proof of another
 * key, another request, another time, with a bad signature or of the wrong shape is
 * refused with the reason it names. The thumbprint is checked against an RFC 7638
 * computation done here.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "gw_dpop.h"
#include "keys.h"

#define NOW  1800000000
#define HOST "gw.example:8443"
#define PATH "/q/ev1/status"
#define HTU  "https://" HOST PATH

static void std_header(const tkey_t *k, char *out, size_t n)
{
    snprintf(out, n,
             "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"EC\",\"crv\":\"P-256\","
             "\"x\":\"%s\",\"y\":\"%s\"}}",
             k->x, k->y);
}

/* A proof by k for method and htu at iat. */
static void proof(const tkey_t *k, const char *method, const char *htu, long long iat, char *out,
                  size_t outlen)
{
    char header[400], claims[700];
    std_header(k, header, sizeof(header));
    snprintf(claims, sizeof(claims),
             "{\"jti\":\"jti-0123456789abcdef\",\"htm\":\"%s\",\"htu\":\"%s\",\"iat\":%lld}",
             method, htu, iat);
    tkey_jws(k, header, claims, out, outlen);
}

static gw_ticket_t bound_to(const tkey_t *k)
{
    gw_ticket_t t = {.gen = 1, .num = 7, .iat = NOW, .bound = true};
    gw_dpop_jkt_bytes(k->jkt, t.jkt);
    return t;
}

static gw_dpop_result_t check(const char *text, const gw_ticket_t *t, const char *method,
                              int64_t now)
{
    gw_dpop_want_t want = {.method = method, .host = HOST, .path = PATH, .ticket = t};
    gw_dpop_proof_t p;
    return gw_dpop_verify(text, strlen(text), &want, now, &p);
}

static void test_parse_reads_key_claims_and_thumbprint(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    char text[1200];
    proof(&k, "GET", HTU, NOW, text, sizeof(text));
    gw_dpop_proof_t p;
    assert_int_equal(gw_dpop_parse(text, strlen(text), &p), GW_DPOP_OK);
    assert_string_equal(p.jkt, k.jkt);
    assert_string_equal(p.x, k.x);
    assert_string_equal(p.htm, "GET");
    assert_string_equal(p.htu, HTU);
    assert_string_equal(p.jti, "jti-0123456789abcdef");
    assert_int_equal(p.iat, NOW);
    EVP_PKEY_free(k.pk);
}

static void test_verify_accepts_the_tickets_key_for_this_request(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    gw_ticket_t t = bound_to(&k);
    char text[1200];
    proof(&k, "GET", HTU, NOW, text, sizeof(text));
    gw_dpop_want_t want = {.method = "GET", .host = HOST, .path = PATH, .ticket = &t};
    gw_dpop_proof_t p;
    assert_int_equal(gw_dpop_verify(text, strlen(text), &want, NOW, &p), GW_DPOP_OK);
    assert_string_equal(p.jkt, k.jkt);
    /* the window, both edges */
    assert_int_equal(check(text, &t, "GET", NOW + GW_DPOP_WINDOW_S), GW_DPOP_OK);
    assert_int_equal(check(text, &t, "GET", NOW - GW_DPOP_WINDOW_S), GW_DPOP_OK);
    EVP_PKEY_free(k.pk);
}

static void test_verify_refuses_another_key_and_unbound_tickets(void **state)
{
    (void)state;
    tkey_t a, b;
    tkey_new(&a);
    tkey_new(&b);
    gw_ticket_t ta = bound_to(&a), unbound = {.gen = 1, .num = 7};
    char text[1200];
    proof(&b, "GET", HTU, NOW, text, sizeof(text));
    assert_int_equal(check(text, &ta, "GET", NOW), GW_DPOP_WRONG_KEY);
    proof(&a, "GET", HTU, NOW, text, sizeof(text));
    assert_int_equal(check(text, &unbound, "GET", NOW), GW_DPOP_WRONG_KEY);
    EVP_PKEY_free(a.pk);
    EVP_PKEY_free(b.pk);
}

static void test_verify_refuses_another_request(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    gw_ticket_t t = bound_to(&k);
    char text[1200];
    proof(&k, "POST", HTU, NOW, text, sizeof(text));
    assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_WRONG_TARGET);
    static const char *const other[] = {
        "https://" HOST "/q/ev1/join", "https://" HOST PATH "?x=1", "https://" HOST PATH "#f",
        "http://" HOST PATH,           "https://evil.example" PATH, "https://" HOST,
        "https://" HOST "x" PATH,      "https://" HOST PATH "/",
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        proof(&k, "GET", other[i], NOW, text, sizeof(text));
        assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_WRONG_TARGET);
    }
    /* scheme and host compare without case */
    proof(&k, "GET", "HTTPS://GW.EXAMPLE:8443" PATH, NOW, text, sizeof(text));
    assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_OK);
    assert_true(gw_dpop_htu_ok("http://" HOST PATH, HOST, PATH, true));
    assert_false(gw_dpop_htu_ok("http://" HOST PATH, HOST, PATH, false));
    assert_false(gw_dpop_htu_ok(HTU, NULL, PATH, false));
    EVP_PKEY_free(k.pk);
}

static void test_verify_refuses_stale_and_future_proofs(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    gw_ticket_t t = bound_to(&k);
    char text[1200];
    proof(&k, "GET", HTU, NOW - GW_DPOP_WINDOW_S - 1, text, sizeof(text));
    assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_STALE);
    proof(&k, "GET", HTU, NOW + GW_DPOP_WINDOW_S + 1, text, sizeof(text));
    assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_STALE);
    proof(&k, "GET", HTU, INT64_MIN, text, sizeof(text));
    assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_STALE);
    EVP_PKEY_free(k.pk);
}

static void test_verify_refuses_bad_signatures(void **state)
{
    (void)state;
    tkey_t a, b;
    tkey_new(&a);
    tkey_new(&b);
    gw_ticket_t t = bound_to(&a);
    char header[400], claims[400], text[1200];
    /* a's jwk in the header, signed by b */
    std_header(&a, header, sizeof(header));
    snprintf(claims, sizeof(claims),
             "{\"jti\":\"jti-0123456789abcdef\",\"htm\":\"GET\",\"htu\":\"%s\",\"iat\":%d}", HTU,
             NOW);
    tkey_jws(&b, header, claims, text, sizeof(text));
    assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_BAD_SIGNATURE);
    /* one signature character changed */
    proof(&a, "GET", HTU, NOW, text, sizeof(text));
    size_t n = strlen(text);
    text[n - 10] = text[n - 10] == 'A' ? 'B' : 'A';
    assert_int_equal(check(text, &t, "GET", NOW), GW_DPOP_BAD_SIGNATURE);
    /* a claim changed after signing: the signature no longer covers it */
    proof(&a, "GET", HTU, NOW, text, sizeof(text));
    char *dot = strchr(text, '.');
    dot[3] = dot[3] == 'A' ? 'B' : 'A';
    assert_int_not_equal(check(text, &t, "GET", NOW), GW_DPOP_OK);
    EVP_PKEY_free(a.pk);
    EVP_PKEY_free(b.pk);
}

/* tpl with @1, @2, @3 replaced by a, b, c (the templates of the malformed cases). */
static void fill(const char *tpl, const char *a, const char *b, const char *c, char *out, size_t n)
{
    size_t o = 0;
    for (const char *p = tpl; *p && o + 1 < n; p++) {
        const char *v = NULL;
        if (p[0] == '@' && p[1] >= '1' && p[1] <= '3')
            v = p[1] == '1' ? a : p[1] == '2' ? b : c;
        if (v == NULL) {
            out[o++] = *p;
            continue;
        }
        size_t l = strlen(v);
        assert_true(o + l < n);
        memcpy(out + o, v, l);
        o += l;
        p++;
    }
    out[o] = '\0';
}

static void test_parse_refuses_malformed_proofs(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    char jwk[200], header[400], text[1200];
    snprintf(jwk, sizeof(jwk), "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}", k.x,
             k.y);
    const char *good =
        "{\"jti\":\"jti-0123456789abcdef\",\"htm\":\"GET\",\"htu\":\"" HTU "\",\"iat\":1800000000}";
    struct {
        const char *header_fmt, *claims;
        gw_dpop_result_t want;
    } cases[] = {
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"HS256\",\"jwk\":@1}", good, GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"none\",\"jwk\":@1}", good, GW_DPOP_MALFORMED},
        {"{\"typ\":\"JWT\",\"alg\":\"ES256\",\"jwk\":@1}", good, GW_DPOP_MALFORMED},
        {"{\"alg\":\"ES256\",\"jwk\":@1}", good, GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1,\"crit\":[\"x\"]}", good,
         GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1}",
         "{\"htm\":\"GET\",\"htu\":\"" HTU "\",\"iat\":1}", GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1}",
         "{\"jti\":\"short\",\"htm\":\"GET\",\"htu\":\"" HTU "\",\"iat\":1}", GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1}",
         "{\"jti\":\"has.a.dot.in.it\",\"htm\":\"GET\",\"htu\":\"" HTU "\",\"iat\":1}",
         GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1}",
         "{\"jti\":\"jti-0123456789abcdef\",\"htm\":\"GET\",\"htu\":\"" HTU "\",\"iat\":\"1\"}",
         GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1}",
         "{\"jti\":\"jti-0123456789abcdef\",\"htm\":\"G\\u0000T\",\"htu\":\"" HTU "\",\"iat\":1}",
         GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1}", "[1,2]", GW_DPOP_MALFORMED},
        {"{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":@1,\"jwk\":@1}", good, GW_DPOP_MALFORMED},
    };
    gw_dpop_proof_t p;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fill(cases[i].header_fmt, jwk, NULL, NULL, header, sizeof(header));
        tkey_jws(&k, header, cases[i].claims, text, sizeof(text));
        assert_int_equal(gw_dpop_parse(text, strlen(text), &p), cases[i].want);
    }
    /* keys that are not EC P-256 public keys */
    static const char *const bad_keys[] = {
        "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"RSA\",\"n\":\"AQAB\",\"e\":"
        "\"AQAB\"}}",
        "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"EC\",\"crv\":\"P-384\",\"x\":"
        "\"@1\",\"y\":\"@2\"}}",
        "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":"
        "\"@1\",\"y\":\"@2\",\"d\":\"AAAA\"}}",
        "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":"
        "\"@3\",\"y\":\"@2\"}}",
    };
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
        char x20[21];
        snprintf(x20, sizeof(x20), "%.20s", k.x);
        fill(bad_keys[i], k.x, k.y, x20, header, sizeof(header));
        tkey_jws(&k, header, good, text, sizeof(text));
        assert_int_equal(gw_dpop_parse(text, strlen(text), &p), GW_DPOP_BAD_KEY);
    }
    /* shapes: parts, lengths, alphabet */
    proof(&k, "GET", HTU, NOW, text, sizeof(text));
    size_t n = strlen(text);
    assert_int_equal(gw_dpop_parse(text, n - 1, &p), GW_DPOP_MALFORMED);
    assert_int_equal(gw_dpop_parse(text, 0, &p), GW_DPOP_MALFORMED);
    assert_int_equal(gw_dpop_parse(NULL, 0, &p), GW_DPOP_MALFORMED);
    char more[1300];
    snprintf(more, sizeof(more), "%s.AAAA", text);
    assert_int_equal(gw_dpop_parse(more, strlen(more), &p), GW_DPOP_MALFORMED);
    snprintf(more, sizeof(more), ".%s", text);
    assert_int_equal(gw_dpop_parse(more, strlen(more), &p), GW_DPOP_MALFORMED);
    text[2] = '+';
    assert_int_equal(gw_dpop_parse(text, n, &p), GW_DPOP_MALFORMED);
    char big[GW_DPOP_MAX_LEN + 2];
    memset(big, 'A', sizeof(big));
    big[100] = big[200] = '.';
    assert_int_equal(gw_dpop_parse(big, sizeof(big), &p), GW_DPOP_MALFORMED);
    EVP_PKEY_free(k.pk);
}

/* The join reads the key only: claims it does not look at cannot refuse it, a bad key or
 * shape still does. */
static void test_parse_key_reads_the_header_only(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    char header[400], text[1200];
    std_header(&k, header, sizeof(header));
    tkey_jws(&k, header, "{\"htm\":1}", text, sizeof(text));
    gw_dpop_proof_t p;
    assert_int_equal(gw_dpop_parse(text, strlen(text), &p), GW_DPOP_MALFORMED);
    assert_int_equal(gw_dpop_parse_key(text, strlen(text), &p), GW_DPOP_OK);
    assert_string_equal(p.jkt, k.jkt);
    assert_string_equal(p.jti, "");
    tkey_jws(&k, "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"RSA\"}}", "{}", text,
             sizeof(text));
    assert_int_equal(gw_dpop_parse_key(text, strlen(text), &p), GW_DPOP_BAD_KEY);
    assert_int_equal(gw_dpop_parse_key("a.b", 3, &p), GW_DPOP_MALFORMED);
    EVP_PKEY_free(k.pk);
}

static void test_jkt_bytes_and_names(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    unsigned char lead[GW_TICKET_JKT_LEN], full[33];
    gw_dpop_jkt_bytes(k.jkt, lead);
    assert_int_equal(cm_base64url_decode(k.jkt, 43, full, sizeof(full)), 32);
    assert_memory_equal(lead, full, GW_TICKET_JKT_LEN);
    gw_dpop_jkt_bytes("short", lead); /* not a thumbprint: zeros, never a match by luck */
    static const unsigned char zero[GW_TICKET_JKT_LEN];
    assert_memory_equal(lead, zero, GW_TICKET_JKT_LEN);
    assert_string_equal(gw_dpop_result_str(GW_DPOP_REPLAYED), "replayed");
    assert_string_equal(gw_dpop_result_str(GW_DPOP_MISSING), "proof_required");
    assert_string_equal(gw_dpop_result_str((gw_dpop_result_t)99), "unknown");
    EVP_PKEY_free(k.pk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_reads_key_claims_and_thumbprint),
        cmocka_unit_test(test_verify_accepts_the_tickets_key_for_this_request),
        cmocka_unit_test(test_verify_refuses_another_key_and_unbound_tickets),
        cmocka_unit_test(test_verify_refuses_another_request),
        cmocka_unit_test(test_verify_refuses_stale_and_future_proofs),
        cmocka_unit_test(test_verify_refuses_bad_signatures),
        cmocka_unit_test(test_parse_refuses_malformed_proofs),
        cmocka_unit_test(test_parse_key_reads_the_header_only),
        cmocka_unit_test(test_jkt_bytes_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
