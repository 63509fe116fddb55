/*
 * Unit tests for common/cm_dpop.c, what the reserve relies on beyond the gateway's use
 * (tests/unit/gateway/test_gw_dpop.c covers the parser and the checks through gw_dpop):
 * the key matched on the whole thumbprint, htu against a configured origin, and the
 * strict form of a thumbprint a bind parameter must have.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "cm_dpop.h"
#include "keys.h"

#define NOW 1800000000

/* A proof by k for method and htu at NOW. */
static void proof(const tkey_t *k, const char *method, const char *htu, char *out, size_t n)
{
    char h[300], c[700];
    snprintf(h, sizeof(h),
             "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"EC\","
             "\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}}",
             k->x, k->y);
    snprintf(c, sizeof(c), "{\"jti\":\"abcdefgh12\",\"htm\":\"%s\",\"htu\":\"%s\",\"iat\":%d}",
             method, htu, NOW);
    tkey_jws(k, h, c, out, n);
}

static cm_dpop_result_t verify_as(const char *p, const tkey_t *bound, const char *origin,
                                  const char *method)
{
    unsigned char jkt[32];
    cm_dpop_jkt_bytes(bound->jkt, jkt, sizeof(jkt));
    cm_dpop_want_t w = {.method = method,
                        .origin = origin,
                        .host = "ignored:1",
                        .path = "/v1/holds/h1",
                        .jkt = jkt,
                        .jkt_len = sizeof(jkt)};
    cm_dpop_proof_t out;
    return cm_dpop_verify(p, strlen(p), &w, NOW, &out);
}

static void test_the_whole_thumbprint_names_the_key(void **state)
{
    (void)state;
    tkey_t k, other;
    tkey_new(&k);
    tkey_new(&other);
    char p[1200];
    proof(&k, "DELETE", "https://shop.example/v1/holds/h1", p, sizeof(p));
    assert_int_equal(verify_as(p, &k, "https://shop.example", "DELETE"), CM_DPOP_OK);
    assert_int_equal(verify_as(p, &other, "https://shop.example", "DELETE"), CM_DPOP_WRONG_KEY);
    cm_dpop_want_t none = {
        .method = "DELETE", .origin = "https://shop.example", .path = "/v1/holds/h1"};
    cm_dpop_proof_t out;
    assert_int_equal(cm_dpop_verify(p, strlen(p), &none, NOW, &out), CM_DPOP_WRONG_KEY);
    EVP_PKEY_free(k.pk);
    EVP_PKEY_free(other.pk);
}

static void test_htu_is_the_configured_origin_and_the_path(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    char p[1200];
    proof(&k, "GET", "https://SHOP.example/v1/holds/h1", p, sizeof(p));
    assert_int_equal(verify_as(p, &k, "https://shop.example", "GET"), CM_DPOP_OK);
    assert_int_equal(verify_as(p, &k, "https://shop.example", "POST"), CM_DPOP_WRONG_TARGET);
    assert_int_equal(verify_as(p, &k, "https://shop.example:8444", "GET"), CM_DPOP_WRONG_TARGET);
    assert_int_equal(verify_as(p, &k, "http://shop.example", "GET"), CM_DPOP_WRONG_TARGET);
    /* without an origin: https:// and the Host header */
    assert_int_equal(verify_as(p, &k, NULL, "GET"), CM_DPOP_WRONG_TARGET);
    proof(&k, "GET", "https://ignored:1/v1/holds/h1", p, sizeof(p));
    assert_int_equal(verify_as(p, &k, NULL, "GET"), CM_DPOP_OK);
    EVP_PKEY_free(k.pk);
}

static void test_a_thumbprint_has_one_form(void **state)
{
    (void)state;
    tkey_t k;
    tkey_new(&k);
    assert_true(cm_dpop_jkt_valid(k.jkt));
    char bad[64];
    assert_false(cm_dpop_jkt_valid(NULL));
    assert_false(cm_dpop_jkt_valid(""));
    snprintf(bad, sizeof(bad), "%.42s", k.jkt);
    assert_false(cm_dpop_jkt_valid(bad)); /* short */
    snprintf(bad, sizeof(bad), "%sA", k.jkt);
    assert_false(cm_dpop_jkt_valid(bad)); /* long */
    snprintf(bad, sizeof(bad), "%.42s+", k.jkt);
    assert_false(cm_dpop_jkt_valid(bad)); /* base64, not base64url */
    snprintf(bad, sizeof(bad), "%.42sB", k.jkt);
    assert_false(cm_dpop_jkt_valid(bad)); /* bits past the 256th */
    EVP_PKEY_free(k.pk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_whole_thumbprint_names_the_key),
        cmocka_unit_test(test_htu_is_the_configured_origin_and_the_path),
        cmocka_unit_test(test_a_thumbprint_has_one_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
