/*
 * Unit tests for gateway/gw_enqueue.c: the sale site's enqueue tokens. A token signed by
 * the site's key for this room gives its customer; every other token — another room,
 * expired, not yet valid, living too long, another audience or issuer, another key, a
 * pinned-out algorithm, garbage, a sub that is not a customer id — is refused with its own
 * reason, and each refusal has a 4xx and an error code.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_jwt.h"
#include "gw_enqueue.h"
#include "keys.h"

#define NOW 1800000000

static tkey_t site, stranger;
static cm_jwt_keyset_t *ks;
static const gw_enqueue_policy_t policy = {"onsale-gateway", NULL, 900};

static int setup(void **state)
{
    (void)state;
    tkey_new(&site);
    tkey_new(&stranger);
    char *pem = tkey_pem(site.pk, false), err[256];
    ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_pem(ks, NULL, pem, strlen(pem), err, sizeof(err)), 0);
    free(pem);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cm_jwt_keyset_free(ks);
    EVP_PKEY_free(site.pk);
    EVP_PKEY_free(stranger.pk);
    return 0;
}

/* A token by k (its thumbprint as kid) with these claims (JSON). */
static char *token(const tkey_t *k, const char *claims)
{
    char header[128];
    snprintf(header, sizeof(header), "{\"alg\":\"ES256\",\"typ\":\"JWT\",\"kid\":\"%s\"}", k->jkt);
    char *out = malloc(4096);
    tkey_jws(k, header, claims, out, 4096);
    return out;
}

/* Claims for customer sub of room evt, issued at iat, expiring at exp, with aud. */
static char *claims(const char *sub, const char *evt, long iat, long exp, const char *aud)
{
    char *c = malloc(1024);
    snprintf(c, 1024,
             "{\"iss\":\"https://shop.example\",\"aud\":\"%s\",\"sub\":\"%s\",\"evt\":\"%s\","
             "\"jti\":\"j-1\",\"iat\":%ld,\"exp\":%ld}",
             aud, sub, evt, iat, exp);
    return c;
}

static gw_enqueue_result_t check(const char *tok, const gw_enqueue_policy_t *p,
                                 gw_enqueue_claims_t *customer)
{
    return gw_enqueue_verify(ks, p, "ev1", tok, strlen(tok), NOW, customer);
}

static gw_enqueue_result_t check_claims(const tkey_t *k, const char *sub, const char *evt, long iat,
                                        long exp, const char *aud, gw_enqueue_claims_t *customer)
{
    char *c = claims(sub, evt, iat, exp, aud), *t = token(k, c);
    gw_enqueue_result_t r = check(t, &policy, customer);
    free(c);
    free(t);
    return r;
}

static void test_valid_token_gives_its_customer(void **state)
{
    gw_enqueue_claims_t customer;
    assert_int_equal(check_claims(&site, "cust-42@shop", "ev1", NOW - 10, NOW + 600,
                                  "onsale-gateway", &customer),
                     GW_ENQ_OK);
    assert_string_equal(customer.customer, "cust-42@shop");
    assert_string_equal(customer.code, "");
}

static void test_each_refusal_has_its_reason(void **state)
{
    gw_enqueue_claims_t customer = {.customer = "x"};
    const char *aud = "onsale-gateway";
    assert_int_equal(check_claims(&site, "c1", "ev2", NOW, NOW + 60, aud, &customer),
                     GW_ENQ_WRONG_ROOM);
    assert_string_equal(customer.customer, "");
    assert_int_equal(check_claims(&site, "c1", "ev1", NOW - 700, NOW - 100, aud, &customer),
                     GW_ENQ_EXPIRED);
    assert_int_equal(check_claims(&site, "c1", "ev1", NOW, NOW + 901, aud, &customer),
                     GW_ENQ_TOO_LONG);
    assert_int_equal(check_claims(&site, "c1", "ev1", NOW, NOW + 60, "onsale-reserve", &customer),
                     GW_ENQ_AUDIENCE);
    assert_int_equal(check_claims(&stranger, "c1", "ev1", NOW, NOW + 60, aud, &customer),
                     GW_ENQ_INVALID);
    assert_int_equal(check_claims(&site, "c 1", "ev1", NOW, NOW + 60, aud, &customer),
                     GW_ENQ_CUSTOMER);
    char longest[GW_CUSTOMER_MAX + 2];
    memset(longest, 'a', GW_CUSTOMER_MAX + 1);
    longest[GW_CUSTOMER_MAX + 1] = '\0';
    assert_int_equal(check_claims(&site, longest, "ev1", NOW, NOW + 60, aud, &customer),
                     GW_ENQ_CUSTOMER);
    longest[GW_CUSTOMER_MAX] = '\0';
    assert_int_equal(check_claims(&site, longest, "ev1", NOW, NOW + 60, aud, &customer), GW_ENQ_OK);
}

static void test_not_yet_valid_and_issuer(void **state)
{
    gw_enqueue_claims_t customer;
    char *t = token(&site, "{\"iss\":\"https://shop.example\",\"aud\":\"onsale-gateway\","
                           "\"sub\":\"c1\",\"evt\":\"ev1\",\"jti\":\"j\",\"iat\":1800000000,"
                           "\"nbf\":1800000100,\"exp\":1800000300}");
    assert_int_equal(check(t, &policy, &customer), GW_ENQ_NOT_YET);
    free(t);
    char *c = claims("c1", "ev1", NOW, NOW + 60, "onsale-gateway");
    t = token(&site, c);
    gw_enqueue_policy_t strict = policy;
    strict.issuer = "https://other.example";
    assert_int_equal(check(t, &strict, &customer), GW_ENQ_ISSUER);
    strict.issuer = "https://shop.example";
    assert_int_equal(check(t, &strict, &customer), GW_ENQ_OK);
    free(t);
    free(c);
}

static void test_shapes_and_algorithms_refused(void **state)
{
    gw_enqueue_claims_t customer;
    static const char *const junk[] = {"x", "a.b.c", "....", "eyJhbGciOiJub25lIn0.e30."};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        gw_enqueue_result_t r = check(junk[i], &policy, &customer);
        assert_true(r == GW_ENQ_MALFORMED || r == GW_ENQ_INVALID);
    }
    /* alg none and HS256 are refused before any key is used */
    char *c = claims("c1", "ev1", NOW, NOW + 60, "onsale-gateway");
    char *t = token(&site, c);
    char *dot = strchr(t, '.');
    static const char none[] =
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"; /* {"alg":"none","typ":"JWT"} */
    char forged[4096];
    snprintf(forged, sizeof(forged), "%s%s", none, dot);
    assert_int_equal(check(forged, &policy, &customer), GW_ENQ_INVALID);
    /* no jti, no evt: not an enqueue token */
    free(t);
    t = token(&site, "{\"aud\":\"onsale-gateway\",\"sub\":\"c1\",\"iat\":1800000000,"
                     "\"exp\":1800000060}");
    assert_int_equal(check(t, &policy, &customer), GW_ENQ_MALFORMED);
    free(t);
    /* longer than any token */
    char *big = malloc(GW_ENQUEUE_MAX_LEN + 2);
    memset(big, 'a', GW_ENQUEUE_MAX_LEN + 1);
    big[GW_ENQUEUE_MAX_LEN + 1] = '\0';
    assert_int_equal(check(big, &policy, &customer), GW_ENQ_MALFORMED);
    free(big);
    /* no keys configured */
    t = token(&site, c);
    assert_int_equal(gw_enqueue_verify(NULL, &policy, "ev1", t, strlen(t), NOW, &customer),
                     GW_ENQ_UNSUPPORTED);
    free(t);
    free(c);
}

/* The customer's presale code rides in the token ("code"); anything but a short string
 * there makes the token malformed. */
static void test_code_claim(void **state)
{
    gw_enqueue_claims_t out;
    char *t = token(&site, "{\"aud\":\"onsale-gateway\",\"sub\":\"c1\",\"evt\":\"ev1\","
                           "\"jti\":\"j\",\"iat\":1800000000,\"exp\":1800000060,"
                           "\"code\":\"ABCD-EFGH-JKMN-PQRST\"}");
    assert_int_equal(check(t, &policy, &out), GW_ENQ_OK);
    assert_string_equal(out.code, "ABCD-EFGH-JKMN-PQRST");
    assert_string_equal(out.customer, "c1");
    free(t);
    static const char *const bad[] = {
        "42", "null", "[\"x\"]",
        "\"0123456789012345678901234567890123456789012345678901234567890123"
        "4\""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char c[512];
        snprintf(c, sizeof(c),
                 "{\"aud\":\"onsale-gateway\",\"sub\":\"c1\",\"evt\":\"ev1\",\"jti\":\"j\","
                 "\"iat\":1800000000,\"exp\":1800000060,\"code\":%s}",
                 bad[i]);
        t = token(&site, c);
        assert_int_equal(check(t, &policy, &out), GW_ENQ_MALFORMED);
        assert_string_equal(out.customer, "");
        free(t);
    }
}

static void test_answers_are_4xx_with_codes(void **state)
{
    for (int r = GW_ENQ_MISSING; r < GW_ENQ_COUNT; r++) {
        int st = gw_enqueue_status((gw_enqueue_result_t)r);
        assert_true(st == 400 || st == 401 || st == 403);
        assert_true(strncmp(gw_enqueue_error((gw_enqueue_result_t)r), "enqueue_", 8) == 0);
        assert_true(strlen(gw_enqueue_message((gw_enqueue_result_t)r)) > 10);
        assert_true(strlen(gw_enqueue_reason((gw_enqueue_result_t)r)) > 2);
    }
    assert_int_equal(gw_enqueue_status(GW_ENQ_WRONG_ROOM), 403);
    assert_int_equal(gw_enqueue_status(GW_ENQ_EXPIRED), 401);
    assert_string_equal(gw_enqueue_error(GW_ENQ_MISSING), "enqueue_required");
}

/* enqueue_keys_file: a JWKS document or PEM; a file without a key is an error. */
static void test_keys_file(void **state)
{
    char path[] = "/tmp/onsale-enqueue-keys-XXXXXX", err[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *jwks = cm_jwt_keyset_jwks(ks);
    FILE *f = fdopen(fd, "w");
    fputs(jwks, f);
    fclose(f);
    free(jwks);
    cm_jwt_keyset_t *got = gw_enqueue_keys_load(path, err, sizeof(err));
    assert_non_null(got);
    assert_int_equal(cm_jwt_keyset_count(got), 1);
    assert_true(cm_jwt_keyset_has_kid(got, site.jkt));
    cm_jwt_keyset_free(got);
    f = fopen(path, "w");
    fputs("{\"keys\":[]}", f);
    fclose(f);
    assert_null(gw_enqueue_keys_load(path, err, sizeof(err)));
    assert_non_null(strstr(err, "enqueue_keys_file"));
    unlink(path);
    assert_null(gw_enqueue_keys_load(path, err, sizeof(err)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_token_gives_its_customer),
        cmocka_unit_test(test_each_refusal_has_its_reason),
        cmocka_unit_test(test_not_yet_valid_and_issuer),
        cmocka_unit_test(test_shapes_and_algorithms_refused),
        cmocka_unit_test(test_code_claim),
        cmocka_unit_test(test_answers_are_4xx_with_codes),
        cmocka_unit_test(test_keys_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
