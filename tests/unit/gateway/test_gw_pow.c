/*
 * Unit tests for gateway/gw_pow.c: a solved challenge verifies; a wrong nonce, another
 * event or block, a changed difficulty, an expired or malformed proof each fail with
 * their own outcome; the difficulty formula; the rate estimate rises under a flood of
 * one block and falls back; address blocks of IPv4 and IPv6.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

#include "cm_parse.h"
#include "gw_pow.h"

static const unsigned char KEY[32] = "0123456789abcdef0123456789abcdef";

static gw_pow_t *pow_new(int base, int64_t block_free, int64_t total_free)
{
    gw_pow_config_t c = {
        .base_bits = base,
        .max_bits = 24,
        .ttl_s = 120,
        .window_s = 60,
        .block_free_per_min = block_free,
        .total_free_per_min = total_free,
        .table_size = 64,
    };
    return gw_pow_new(KEY, sizeof(KEY), &c);
}

/* Finds a nonce for challenge: writes "<challenge>.<nonce>" into proof; its length. */
static size_t solve(const char *challenge, int bits, char *proof)
{
    char msg[GW_POW_PROOF_MAX];
    unsigned char d[32];
    size_t n = strlen(challenge);
    memcpy(msg, challenge, n);
    for (unsigned long i = 0;; i++) {
        int k = snprintf(msg + n, sizeof(msg) - n, "%lu", i);
        SHA256((unsigned char *)msg, n + (size_t)k, d);
        if (gw_pow_zero_bits(d) >= bits)
            return (size_t)snprintf(proof, GW_POW_PROOF_MAX + 1, "%s.%lu", challenge, i);
    }
}

static void test_solved_challenge_verifies_once_per_id(void **state)
{
    gw_pow_t *p = pow_new(8, 30, 6000);
    char ch[GW_POW_CHALLENGE_LEN + 1], proof[GW_POW_PROOF_MAX + 1];
    assert_int_equal(gw_pow_issue(p, "ev1", "4:10.0.0", 8, 1000, ch, sizeof(ch)),
                     GW_POW_CHALLENGE_LEN);
    size_t n = solve(ch, 8, proof);
    gw_pow_proof_t out;
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", proof, n, 1001, &out), GW_POW_OK);
    assert_int_equal(out.bits, 8);
    assert_int_equal(out.expires_s, 1120);
    assert_int_equal(strlen(out.id), GW_POW_ID_LEN);
    /* two challenges never share an id */
    char ch2[GW_POW_CHALLENGE_LEN + 1], proof2[GW_POW_PROOF_MAX + 1];
    gw_pow_issue(p, "ev1", "4:10.0.0", 8, 1000, ch2, sizeof(ch2));
    gw_pow_proof_t out2;
    size_t n2 = solve(ch2, 8, proof2);
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", proof2, n2, 1001, &out2), GW_POW_OK);
    assert_string_not_equal(out.id, out2.id);
    gw_pow_free(p);
}

static void test_each_bad_proof_has_its_outcome(void **state)
{
    gw_pow_t *p = pow_new(12, 30, 6000);
    char ch[GW_POW_CHALLENGE_LEN + 1], proof[GW_POW_PROOF_MAX + 1];
    gw_pow_issue(p, "ev1", "4:10.0.0", 12, 1000, ch, sizeof(ch));
    size_t n = solve(ch, 12, proof);
    gw_pow_proof_t out;
    assert_int_equal(gw_pow_check(p, "ev2", "4:10.0.0", proof, n, 1001, &out), GW_POW_FORGED);
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.1", proof, n, 1001, &out), GW_POW_FORGED);
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", proof, n, 1120, &out), GW_POW_EXPIRED);
    /* a wrong nonce: the first nonce that does not solve it */
    char bad[GW_POW_PROOF_MAX + 1];
    unsigned char d[32];
    char msg[GW_POW_PROOF_MAX];
    for (int i = 0;; i++) {
        int k = snprintf(msg, sizeof(msg), "%s%d", ch, i);
        SHA256((unsigned char *)msg, (size_t)k, d);
        if (gw_pow_zero_bits(d) < 12) {
            size_t m = (size_t)snprintf(bad, sizeof(bad), "%s.%d", ch, i);
            assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", bad, m, 1001, &out), GW_POW_WEAK);
            break;
        }
    }
    /* a lower difficulty written into the challenge breaks its MAC */
    unsigned char raw[40];
    assert_int_equal(cm_base64url_decode(ch, GW_POW_CHALLENGE_LEN, raw, sizeof(raw)), 34);
    raw[1] = 1;
    char forged[GW_POW_PROOF_MAX + 1];
    cm_base64url_encode(raw, 34, forged);
    size_t m = solve(forged, 1, bad);
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", bad, m, 1001, &out), GW_POW_FORGED);
    /* malformed: no dot, an empty or foreign nonce, a short challenge, a long nonce */
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", ch, strlen(ch), 1001, &out),
                     GW_POW_MALFORMED);
    snprintf(bad, sizeof(bad), "%s.", ch);
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", bad, strlen(bad), 1001, &out),
                     GW_POW_MALFORMED);
    snprintf(bad, sizeof(bad), "%s.a b", ch);
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", bad, strlen(bad), 1001, &out),
                     GW_POW_MALFORMED);
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", "abc.1", 5, 1001, &out), GW_POW_MALFORMED);
    char longer[GW_POW_PROOF_MAX + 8];
    snprintf(longer, sizeof(longer), "%s.%s", ch, "012345678901234567890123456789012");
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", longer, strlen(longer), 1001, &out),
                     GW_POW_MALFORMED);
    gw_pow_free(p);
}

static void test_difficulty_formula(void **state)
{
    assert_int_equal(gw_pow_difficulty(16, 24, 0, 30, 0, 6000), 16);
    assert_int_equal(gw_pow_difficulty(16, 24, 29, 30, 0, 6000), 16);
    assert_int_equal(gw_pow_difficulty(16, 24, 30, 30, 0, 6000), 17);   /* 2x */
    assert_int_equal(gw_pow_difficulty(16, 24, 90, 30, 0, 6000), 18);   /* 4x */
    assert_int_equal(gw_pow_difficulty(16, 24, 0, 30, 6000, 6000), 17); /* the gateway's rate */
    assert_int_equal(gw_pow_difficulty(16, 24, 90, 30, 18000, 6000), 20);
    assert_int_equal(gw_pow_difficulty(16, 24, 1e9, 30, 1e9, 6000), 24); /* capped */
    assert_int_equal(gw_pow_difficulty(16, 24, 1e9, 0, 1e9, 0), 16);     /* 0: no rise */
}

static void test_block_flood_raises_then_falls_back(void **state)
{
    gw_pow_t *p = pow_new(10, 30, 1000000);
    int64_t t = 1000000;
    assert_int_equal(gw_pow_take_bits(p, "4:10.0.0", t), 10);
    int bits = 0;
    for (int i = 0; i < 300; i++) /* 300 challenges in 3 s: ~10x the free rate */
        bits = gw_pow_take_bits(p, "4:10.0.0", t + i * 10);
    assert_true(bits >= 13);
    assert_int_equal(gw_pow_take_bits(p, "4:10.0.9", t + 3000), 10); /* another block: base */
    assert_int_equal(gw_pow_base_now(p, t + 3000), 10);
    /* ten windows later the block is quiet again */
    assert_int_equal(gw_pow_take_bits(p, "4:10.0.0", t + 3000 + 600000), 10);
    gw_pow_free(p);
}

static void test_gateway_rate_raises_everyone(void **state)
{
    gw_pow_t *p = pow_new(10, 1000000, 60);
    int64_t t = 5000000;
    for (int i = 0; i < 240; i++)
        gw_pow_count_join(p, t + i);
    assert_true(gw_pow_base_now(p, t + 240) >= 12);
    assert_true(gw_pow_take_bits(p, "4:192.168.1", t + 240) >= 12);
    assert_int_equal(gw_pow_base_now(p, t + 240 + 3600000), 10);
    gw_pow_free(p);
}

static void test_blocks(void **state)
{
    char b[GW_POW_BLOCK_MAX];
    gw_pow_block("192.0.2.77", b);
    assert_string_equal(b, "4:192.0.2");
    gw_pow_block("::ffff:192.0.2.9", b);
    assert_string_equal(b, "4:192.0.2");
    gw_pow_block("2001:db8:1:2:aaaa::1", b);
    assert_string_equal(b, "6:20010db800010002");
    gw_pow_block("2001:db8:1:2:ffff::9", b);
    assert_string_equal(b, "6:20010db800010002");
    gw_pow_block("unix:/x", b);
    assert_string_equal(b, "unix:/x");
}

static void test_flood_of_blocks_stays_bounded(void **state)
{
    gw_pow_t *p = pow_new(10, 30, 1000000);
    char block[GW_POW_BLOCK_MAX];
    for (int i = 0; i < 100000; i++) {
        snprintf(block, sizeof(block), "4:10.%d.%d", (i >> 8) & 255, i & 255);
        assert_int_equal(gw_pow_take_bits(p, block, 1000 + i), 10); /* each new: base */
    }
    gw_pow_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_solved_challenge_verifies_once_per_id),
        cmocka_unit_test(test_each_bad_proof_has_its_outcome),
        cmocka_unit_test(test_difficulty_formula),
        cmocka_unit_test(test_block_flood_raises_then_falls_back),
        cmocka_unit_test(test_gateway_rate_raises_everyone),
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_flood_of_blocks_stays_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
