/*
 * Unit tests for gateway/gw_code.c: a code made for (batch, serial) parses back to them
 * and is genuine under its secret, event and room generation only; every single-character
 * typo is caught by the check character (malformed, no MAC computed); a tag changed with a
 * valid check character is parsed but not genuine; fans' spellings are normalised.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gw_code.h"

static const unsigned char secret[] = "code-secret-for-the-unit-tests-0123456789";
#define SL  (sizeof(secret) - 1)
#define GEN 4242424242ULL

static void test_round_trip(void **state)
{
    (void)state;
    const unsigned batches[] = {1, 2, 77, GW_CODE_BATCH_MAX};
    const uint32_t serials[] = {0, 1, 999999, 1499999, GW_CODE_SERIALS - 1};
    for (size_t b = 0; b < 4; b++) {
        for (size_t s = 0; s < 5; s++) {
            char text[GW_CODE_TEXT_MAX];
            size_t n = gw_code_make(secret, SL, "tour", GEN, batches[b], serials[s], text);
            assert_int_equal(n, 20);
            assert_int_equal(strlen(text), 20);
            assert_true(text[4] == '-' && text[9] == '-' && text[14] == '-');
            gw_code_t c;
            assert_int_equal(gw_code_parse(text, n, &c), 0);
            assert_int_equal(c.batch, batches[b]);
            assert_int_equal(c.serial, serials[s]);
            assert_true(gw_code_genuine(secret, SL, "tour", GEN, &c));
            assert_false(gw_code_genuine(secret, SL, "tour2", GEN, &c));
            assert_false(gw_code_genuine(secret, SL, "tour", GEN + 1, &c));
            assert_false(
                gw_code_genuine((const unsigned char *)"another-secret", 14, "tour", GEN, &c));
        }
    }
}

static void test_every_typo_is_malformed(void **state)
{
    (void)state;
    static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    char text[GW_CODE_TEXT_MAX];
    size_t n = gw_code_make(secret, SL, "tour", GEN, 3, 123456, text);
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '-')
            continue;
        for (size_t a = 0; a < 32; a++) {
            if (alphabet[a] == text[i])
                continue;
            char typo[GW_CODE_TEXT_MAX];
            memcpy(typo, text, n + 1);
            typo[i] = alphabet[a];
            gw_code_t c;
            if (gw_code_parse(typo, n, &c) == 0)
                fail_msg("typo %s of %s parsed", typo, text);
        }
    }
}

static void test_spellings_and_bad_input(void **state)
{
    (void)state;
    char text[GW_CODE_TEXT_MAX], loose[64];
    gw_code_make(secret, SL, "tour", GEN, 9, 42, text);
    gw_code_t a, b;
    assert_int_equal(gw_code_parse(text, strlen(text), &a), 0);
    /* lower case, spaces instead of hyphens, O for 0, l for 1 */
    size_t k = 0;
    for (size_t i = 0; text[i]; i++) {
        char c = text[i];
        loose[k++] = c == '-' ? ' ' : c == '0' ? 'o' : c == '1' ? 'l' : (char)(c | 0x20);
    }
    loose[k] = '\0';
    assert_int_equal(gw_code_parse(loose, k, &b), 0);
    assert_memory_equal(&a, &b, sizeof(a));
    gw_code_t c;
    assert_int_equal(gw_code_parse("", 0, &c), -1);
    assert_int_equal(gw_code_parse(NULL, 0, &c), -1);
    assert_int_equal(gw_code_parse(text, strlen(text) - 1, &c), -1); /* one short */
    char longer[32];
    snprintf(longer, sizeof(longer), "%s0", text);
    assert_int_equal(gw_code_parse(longer, strlen(longer), &c), -1); /* one more */
    char bad[GW_CODE_TEXT_MAX];
    memcpy(bad, text, sizeof(bad));
    bad[0] = 'U'; /* not in Crockford's alphabet */
    assert_int_equal(gw_code_parse(bad, strlen(bad), &c), -1);
    bad[0] = '\0';
    assert_int_equal(gw_code_parse(bad, 20, &c), -1);
    char huge[GW_CODE_INPUT_MAX + 2];
    memset(huge, '-', sizeof(huge));
    memcpy(huge, text, strlen(text));
    assert_int_equal(gw_code_parse(huge, sizeof(huge), &c), -1);
}

static void test_a_forged_tag_is_not_genuine(void **state)
{
    (void)state;
    /* batch 5, serial 7 with a zero tag, written with a correct check character */
    unsigned char zero[GW_CODE_TAG_LEN] = {0};
    char text[GW_CODE_TEXT_MAX];
    gw_code_make(secret, SL, "tour", GEN, 5, 7, text);
    gw_code_t c;
    assert_int_equal(gw_code_parse(text, strlen(text), &c), 0);
    memcpy(c.tag, zero, sizeof(zero));
    assert_false(gw_code_genuine(secret, SL, "tour", GEN, &c));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_every_typo_is_malformed),
        cmocka_unit_test(test_spellings_and_bad_input),
        cmocka_unit_test(test_a_forged_tag_is_not_genuine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
