/*
 * Unit tests for common/cm_hmacsig.c: the exact bytes of a signature (against vectors
 * computed independently with Python's hmac module over "<t>.<body>"), verification under
 * one of several secrets, the tolerance window both ways, and every way a header can be
 * malformed, each with its own result.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cm_hmacsig.h"

#define BODY "{\"id\":\"evt_1\"}"
#define T    1492774577
/* python3: hmac.new(b"whsec_test_secret", b'1492774577.{"id":"evt_1"}', sha256) */
#define SIG   "799c4ba7bb339f3c8601adfd112f0e477c930a268be1243d341abb8286501c2f"
#define OTHER "0000000000000000000000000000000000000000000000000000000000000000"

static const cm_hmacsig_secret_t secret = {"whsec_test_secret", 17};
static const cm_hmacsig_secret_t old_secret = {"whsec_old", 9};

static cm_hmacsig_result_t verify_at(const char *header, const cm_hmacsig_secret_t *secrets,
                                     size_t n, int64_t now, size_t *which)
{
    return cm_hmacsig_verify(header, strlen(header), BODY, strlen(BODY), secrets, n, now, 300,
                             which);
}

static cm_hmacsig_result_t verify(const char *header)
{
    return verify_at(header, &secret, 1, T, NULL);
}

static void test_sign_writes_the_known_vector(void **state)
{
    (void)state;
    char out[CM_HMACSIG_SIGN_MAX];
    assert_int_equal(cm_hmacsig_sign(&secret, T, BODY, strlen(BODY), out, sizeof(out)), 0);
    assert_string_equal(out, "t=1492774577,v1=" SIG);
}

static void test_sign_with_empty_key_and_body(void **state)
{
    (void)state;
    /* python3: hmac.new(b"", b"0.", sha256) */
    const cm_hmacsig_secret_t empty = {"", 0};
    char out[CM_HMACSIG_SIGN_MAX];
    assert_int_equal(cm_hmacsig_sign(&empty, 0, NULL, 0, out, sizeof(out)), 0);
    assert_string_equal(out,
                        "t=0,v1=b849d5a581847b281957065739df36df2463d1977ea8d6e1e4e6cf33fadc68c3");
}

static void test_sign_refuses_a_small_buffer_and_negative_time(void **state)
{
    (void)state;
    char out[CM_HMACSIG_SIGN_MAX];
    size_t need = strlen("t=1492774577,v1=" SIG) + 1;
    assert_int_equal(cm_hmacsig_sign(&secret, T, BODY, strlen(BODY), out, need - 1), -1);
    assert_int_equal(cm_hmacsig_sign(&secret, T, BODY, strlen(BODY), out, need), 0);
    assert_int_equal(cm_hmacsig_sign(&secret, -1, BODY, strlen(BODY), out, sizeof(out)), -1);
}

static void test_sign_then_verify_round_trips(void **state)
{
    (void)state;
    char out[CM_HMACSIG_SIGN_MAX];
    const char body[] = "any\0bytes\xff";
    assert_int_equal(cm_hmacsig_sign(&secret, 1700000000, body, sizeof(body), out, sizeof(out)), 0);
    assert_int_equal(
        cm_hmacsig_verify(out, strlen(out), body, sizeof(body), &secret, 1, 1700000000, 300, NULL),
        CM_HMACSIG_OK);
    /* One byte of the body changed: no longer the signed text. */
    assert_int_equal(cm_hmacsig_verify(out, strlen(out), body, sizeof(body) - 1, &secret, 1,
                                       1700000000, 300, NULL),
                     CM_HMACSIG_MISMATCH);
}

static void test_verify_accepts_the_vector(void **state)
{
    (void)state;
    assert_int_equal(verify("t=1492774577,v1=" SIG), CM_HMACSIG_OK);
    /* Order does not matter; another scheme's element is ignored. */
    assert_int_equal(verify("v0=abc,v1=" SIG ",t=1492774577"), CM_HMACSIG_OK);
}

static void test_verify_finds_any_v1_under_any_secret(void **state)
{
    (void)state;
    const cm_hmacsig_secret_t rotating[] = {old_secret, secret};
    size_t which = 99;
    assert_int_equal(verify_at("t=1492774577,v1=" OTHER ",v1=" SIG, rotating, 2, T, &which),
                     CM_HMACSIG_OK);
    assert_int_equal(which, 1);
    assert_int_equal(verify_at("t=1492774577,v1=" SIG, &old_secret, 1, T, NULL),
                     CM_HMACSIG_MISMATCH);
    assert_int_equal(verify_at("t=1492774577,v1=" SIG, rotating, 0, T, NULL), CM_HMACSIG_MISMATCH);
}

static void test_verify_refuses_a_forged_signature(void **state)
{
    (void)state;
    char forged[] = "t=1492774577,v1=" SIG;
    forged[sizeof(forged) - 2] = forged[sizeof(forged) - 2] == 'f' ? 'e' : 'f';
    assert_int_equal(verify(forged), CM_HMACSIG_MISMATCH);
    /* The genuine signature with another timestamp: the timestamp is part of the text. */
    assert_int_equal(verify("t=1492774578,v1=" SIG), CM_HMACSIG_MISMATCH);
}

static void test_verify_tolerance_both_ways(void **state)
{
    (void)state;
    const char *h = "t=1492774577,v1=" SIG;
    assert_int_equal(verify_at(h, &secret, 1, T + 300, NULL), CM_HMACSIG_OK);
    assert_int_equal(verify_at(h, &secret, 1, T + 301, NULL), CM_HMACSIG_STALE);
    assert_int_equal(verify_at(h, &secret, 1, T - 300, NULL), CM_HMACSIG_OK);
    assert_int_equal(verify_at(h, &secret, 1, T - 301, NULL), CM_HMACSIG_STALE);
    assert_int_equal(cm_hmacsig_verify(h, strlen(h), BODY, strlen(BODY), &secret, 1, T, -1, NULL),
                     CM_HMACSIG_STALE);
}

static void test_verify_malformed_headers(void **state)
{
    (void)state;
    static const struct {
        const char *header;
        cm_hmacsig_result_t want;
    } cases[] = {
        {"", CM_HMACSIG_MALFORMED},
        {",", CM_HMACSIG_MALFORMED},
        {"t=1492774577,,v1=" SIG, CM_HMACSIG_MALFORMED},
        {"t=1492774577,v1=" SIG ",", CM_HMACSIG_MALFORMED},
        {"t=1492774577, v1=" SIG, CM_HMACSIG_MALFORMED},
        {"t=1492774577,v1 =" SIG, CM_HMACSIG_MALFORMED},
        {"T=1492774577,v1=" SIG, CM_HMACSIG_MALFORMED},
        {"t=1492774577,v1", CM_HMACSIG_MALFORMED},
        {"t=1492774577,v1=", CM_HMACSIG_MALFORMED},
        {"t=1492774577,=x", CM_HMACSIG_MALFORMED},
        {"t=1492774577,v0=a\tb,v1=" SIG, CM_HMACSIG_MALFORMED},
        {"v1=" SIG, CM_HMACSIG_NO_TIMESTAMP},
        {"t=-1,v1=" SIG, CM_HMACSIG_NO_TIMESTAMP},
        {"t=+1492774577,v1=" SIG, CM_HMACSIG_NO_TIMESTAMP},
        {"t=1492774577x,v1=" SIG, CM_HMACSIG_NO_TIMESTAMP},
        {"t=1234567890123456789,v1=" SIG, CM_HMACSIG_NO_TIMESTAMP},
        {"t=1492774577,t=1492774577,v1=" SIG, CM_HMACSIG_NO_TIMESTAMP},
        {"t=1492774577", CM_HMACSIG_NO_SIGNATURE},
        {"t=1492774577,v0=" SIG, CM_HMACSIG_NO_SIGNATURE},
        {"t=1492774577,v1=" SIG "0", CM_HMACSIG_NO_SIGNATURE},
        {"t=1492774577,v1=abc", CM_HMACSIG_NO_SIGNATURE},
        {"t=1492774577,v1=799C4BA7BB339F3C8601ADFD112F0E477C930A268BE1243D341ABB8286501C2F",
         CM_HMACSIG_NO_SIGNATURE},
        {"t=1492774577,v1=799c4ba7bb339f3c8601adfd112f0e477c930a268be1243d341abb8286501c2g",
         CM_HMACSIG_NO_SIGNATURE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cm_hmacsig_result_t r = verify(cases[i].header);
        if (r != cases[i].want)
            fail_msg("%s: %s, want %s", cases[i].header, cm_hmacsig_result_name(r),
                     cm_hmacsig_result_name(cases[i].want));
    }
    assert_int_equal(cm_hmacsig_verify(NULL, 0, BODY, 1, &secret, 1, T, 300, NULL),
                     CM_HMACSIG_MALFORMED);
}

static void test_verify_bounds_length_and_count(void **state)
{
    (void)state;
    char h[CM_HMACSIG_HEADER_MAX + 200];
    /* Eight v1 fit, the genuine one last; a ninth is refused before any HMAC. */
    int n = snprintf(h, sizeof(h), "t=1492774577");
    for (int i = 0; i < CM_HMACSIG_V1_MAX - 1; i++)
        n += snprintf(h + n, sizeof(h) - (size_t)n, ",v1=" OTHER);
    n += snprintf(h + n, sizeof(h) - (size_t)n, ",v1=" SIG);
    assert_int_equal(verify(h), CM_HMACSIG_OK);
    snprintf(h + n, sizeof(h) - (size_t)n, ",v1=" SIG);
    assert_int_equal(verify(h), CM_HMACSIG_MALFORMED);
    /* A header past the maximum is refused whole, even with a good signature in it. */
    n = snprintf(h, sizeof(h), "t=1492774577,v1=" SIG ",v0=");
    memset(h + n, 'a', sizeof(h) - (size_t)n - 1);
    h[sizeof(h) - 1] = '\0';
    assert_int_equal(verify(h), CM_HMACSIG_MALFORMED);
    /* Not NUL-terminated: only header_len bytes are read. */
    const char *full = "t=1492774577,v1=" SIG "garbage";
    assert_int_equal(
        cm_hmacsig_verify(full, strlen(full) - 7, BODY, strlen(BODY), &secret, 1, T, 300, NULL),
        CM_HMACSIG_OK);
}

static void test_result_names(void **state)
{
    (void)state;
    for (int r = 0; r < CM_HMACSIG_RESULT_COUNT; r++) {
        const char *name = cm_hmacsig_result_name((cm_hmacsig_result_t)r);
        assert_non_null(name);
        assert_string_not_equal(name, "unknown");
    }
    assert_string_equal(cm_hmacsig_result_name(CM_HMACSIG_RESULT_COUNT), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign_writes_the_known_vector),
        cmocka_unit_test(test_sign_with_empty_key_and_body),
        cmocka_unit_test(test_sign_refuses_a_small_buffer_and_negative_time),
        cmocka_unit_test(test_sign_then_verify_round_trips),
        cmocka_unit_test(test_verify_accepts_the_vector),
        cmocka_unit_test(test_verify_finds_any_v1_under_any_secret),
        cmocka_unit_test(test_verify_refuses_a_forged_signature),
        cmocka_unit_test(test_verify_tolerance_both_ways),
        cmocka_unit_test(test_verify_malformed_headers),
        cmocka_unit_test(test_verify_bounds_length_and_count),
        cmocka_unit_test(test_result_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
