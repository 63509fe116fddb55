/*
 * Unit tests for gateway/gw_pow.c: a solved challenge verifies; challenges are numbered
 * densely per expiry bucket and issuer, also by threads at once; a wrong nonce, another
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The proof of a difficulty-0 challenge (any nonce solves it), checked at now_s. */
static gw_pow_proof_t check0(gw_pow_t *p, const char *ch, int64_t now_s)
{
    char proof[GW_POW_PROOF_MAX + 1];
    int n = snprintf(proof, sizeof(proof), "%s.0", ch);
    gw_pow_proof_t out;
    assert_int_equal(gw_pow_check(p, "ev1", "4:10.0.0", proof, (size_t)n, now_s, &out), GW_POW_OK);
    return out;
}

static gw_pow_proof_t issue0(gw_pow_t *p, int64_t now_s)
{
    char ch[GW_POW_CHALLENGE_LEN + 1];
    assert_int_equal(gw_pow_issue(p, "ev1", "4:10.0.0", 0, now_s, ch, sizeof(ch)),
                     GW_POW_CHALLENGE_LEN);
    return check0(p, ch, now_s);
}

static void test_solved_challenge_verifies_with_its_serial(void **state)
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
    assert_int_equal(strlen(out.issuer), GW_POW_ISSUER_LEN);
    assert_int_equal(out.serial, 0);
    /* the next challenge of the bucket has the next serial, the same issuer */
    gw_pow_proof_t out2 = issue0(p, 1000);
    assert_int_equal(out2.serial, 1);
    assert_string_equal(out.issuer, out2.issuer);
    /* another process (instance) is another issuer: its serials name other challenges */
    gw_pow_t *q = pow_new(8, 30, 6000);
    gw_pow_proof_t other = issue0(q, 1000);
    assert_int_equal(other.serial, 0);
    assert_string_not_equal(other.issuer, out.issuer);
    gw_pow_free(q);
    gw_pow_free(p);
}

static void test_serials_restart_per_bucket_and_never_repeat(void **state)
{
    gw_pow_t *p = pow_new(0, 30, 6000); /* ttl 120: now 1000 expires 1120, bucket 17 */
    assert_int_equal(issue0(p, 1000).serial, 0);
    assert_int_equal(issue0(p, 1003).serial, 1); /* 1123: still bucket 17 */
    gw_pow_proof_t later = issue0(p, 1100);      /* 1220: bucket 19, numbered afresh */
    assert_int_equal(later.serial, 0);
    assert_int_equal(later.expires_s, 1220);
    /* a thread a moment behind (bucket 17 again) takes bucket 19's next serial and
     * expires as bucket 19 begins: serial 2 of bucket 17 is never handed out twice */
    gw_pow_proof_t behind = issue0(p, 1001);
    assert_int_equal(behind.serial, 1);
    assert_int_equal(behind.expires_s, 19 * GW_POW_BUCKET_S);
    assert_int_equal(behind.expires_s / GW_POW_BUCKET_S, 19);
    gw_pow_free(p);
}

#define THREADS    4
#define PER_THREAD 20000
static gw_pow_t *shared;
static uint32_t serials[THREADS][PER_THREAD];

static void *issue_many(void *arg)
{
    uint32_t *out = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        char ch[GW_POW_CHALLENGE_LEN + 1];
        gw_pow_issue(shared, "ev1", "4:10.0.0", 0, 1000, ch, sizeof(ch));
        char proof[GW_POW_PROOF_MAX + 1];
        int n = snprintf(proof, sizeof(proof), "%s.0", ch);
        gw_pow_proof_t pr;
        if (gw_pow_check(shared, "ev1", "4:10.0.0", proof, (size_t)n, 1000, &pr) != GW_POW_OK ||
            pr.expires_s != 1120)
            return "a challenge did not verify";
        out[i] = pr.serial;
    }
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void test_threads_issue_distinct_dense_serials(void **state)
{
    shared = pow_new(0, 30, 6000);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, issue_many, serials[i]), 0);
    for (int i = 0; i < THREADS; i++) {
        void *err = NULL;
        pthread_join(t[i], &err);
        assert_null(err);
    }
    /* every serial 0 .. THREADS * PER_THREAD - 1 exactly once: one bit each, no gaps */
    qsort(serials, THREADS * PER_THREAD, sizeof(uint32_t), cmp_u32);
    for (uint32_t i = 0; i < THREADS * PER_THREAD; i++)
        assert_int_equal(((uint32_t *)serials)[i], i);
    gw_pow_free(shared);
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
        cmocka_unit_test(test_solved_challenge_verifies_with_its_serial),
        cmocka_unit_test(test_serials_restart_per_bucket_and_never_repeat),
        cmocka_unit_test(test_threads_issue_distinct_dense_serials),
        cmocka_unit_test(test_each_bad_proof_has_its_outcome),
        cmocka_unit_test(test_difficulty_formula),
        cmocka_unit_test(test_block_flood_raises_then_falls_back),
        cmocka_unit_test(test_gateway_rate_raises_everyone),
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_flood_of_blocks_stays_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
