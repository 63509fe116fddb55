/*
 * Unit tests for gateway/gw_ticket.c: queue tickets round-trip, and every forged,
 * altered or misdirected ticket is refused (docs/design.md invariant 10). The HMAC helper is
 * checked against RFC 4231 test case 2, so the MAC is the real HMAC-SHA256.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cm_parse.h"
#include "gw_ticket.h"

static const unsigned char secret[] = "0123456789abcdef0123456789abcdef-test-secret";
#define SLEN (sizeof(secret) - 1)

static gw_ticket_t sample(void)
{
    gw_ticket_t t = {.gen = 0x1234567890abcull, .num = 4711, .iat = 1800000000};
    snprintf(t.visitor, sizeof(t.visitor), "%s", "00112233445566778899aabbccddeeff");
    return t;
}

/* Each character of the ticket text (n bytes) altered in turn: none of them decodes. */
static void assert_every_change_refused(char *text, size_t n)
{
    gw_ticket_t out;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        text[i] = c == 'A' ? 'B' : 'A';
        assert_int_not_equal(gw_ticket_decode(secret, SLEN, "ev1", text, n, &out), 0);
        text[i] = c;
    }
}

static void test_hmac_rfc4231_case2(void **state)
{
    unsigned char mac[32];
    char hex[65];
    gw_ticket_hmac("Jefe", 4, "what do ya want for nothing?", 28, mac);
    cm_hex_encode(mac, 32, hex);
    assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

/* The reference: OpenSSL's one-shot HMAC(), keyed on every call. */
static void one_shot(const void *key, size_t keylen, const void *msg, size_t n,
                     unsigned char out[32])
{
    unsigned int len = 32;
    assert_non_null(HMAC(EVP_sha256(), key, (int)keylen, msg, n, out, &len));
}

/* The per-thread contexts: a key is keyed once, then reused; other keys (rotation, a key
 * that is a prefix of another, more keys than slots, a key too long to cache) each get
 * the right MAC. */
static void test_hmac_context_reused_per_key(void **state)
{
    static const char a[] = "first-secret-0123456789", b[] = "first-secret-012345678";
    unsigned char longkey[300], mac[32], ref[32];
    memset(longkey, 0x5a, sizeof(longkey));
    const char *msg = "onsale-queue-ticket";
    unsigned long before = gw_ticket_hmac_keyed();
    for (int i = 0; i < 3; i++) {
        gw_ticket_hmac(a, strlen(a), msg, strlen(msg), mac);
        one_shot(a, strlen(a), msg, strlen(msg), ref);
        assert_memory_equal(mac, ref, 32);
    }
    assert_int_equal(gw_ticket_hmac_keyed() - before, 1); /* keyed once, reused twice */
    gw_ticket_hmac(b, strlen(b), msg, strlen(msg), mac);  /* a prefix of a: another key */
    one_shot(b, strlen(b), msg, strlen(msg), ref);
    assert_memory_equal(mac, ref, 32);
    assert_int_equal(gw_ticket_hmac_keyed() - before, 2);
    for (int k = 0; k < 6; k++) { /* more keys than slots: the oldest are replaced */
        char key[8];
        snprintf(key, sizeof(key), "k%d", k);
        gw_ticket_hmac(key, strlen(key), msg, strlen(msg), mac);
        one_shot(key, strlen(key), msg, strlen(msg), ref);
        assert_memory_equal(mac, ref, 32);
    }
    gw_ticket_hmac(a, strlen(a), msg, 0, mac); /* replaced: keyed again, still right */
    one_shot(a, strlen(a), msg, 0, ref);
    assert_memory_equal(mac, ref, 32);
    unsigned long keyed = gw_ticket_hmac_keyed();
    gw_ticket_hmac(longkey, sizeof(longkey), msg, strlen(msg), mac); /* not cached */
    one_shot(longkey, sizeof(longkey), msg, strlen(msg), ref);
    assert_memory_equal(mac, ref, 32);
    assert_int_equal(gw_ticket_hmac_keyed(), keyed);
}

static void *hmac_in_thread(void *arg)
{
    unsigned char *mac = arg;
    gw_ticket_hmac("thread-key", 10, "m", 1, mac);
    gw_ticket_hmac("thread-key", 10, "m", 1, mac);
    return (void *)(uintptr_t)gw_ticket_hmac_keyed();
}

/* A thread keys its own contexts; they go with the thread (ASan's leak check at exit
 * fails this test if the thread's contexts are not freed). */
static void test_hmac_contexts_per_thread_freed(void **state)
{
    unsigned char mac[32], ref[32];
    for (int i = 0; i < 4; i++) {
        pthread_t t;
        void *keyed = NULL;
        assert_int_equal(pthread_create(&t, NULL, hmac_in_thread, mac), 0);
        assert_int_equal(pthread_join(t, &keyed), 0);
        assert_int_equal((uintptr_t)keyed, 1); /* a fresh thread keys its own, once */
        one_shot("thread-key", 10, "m", 1, ref);
        assert_memory_equal(mac, ref, 32);
    }
}

static void test_round_trip(void **state)
{
    gw_ticket_t t = sample(), got;
    char text[GW_TICKET_MAX_LEN];
    size_t n = gw_ticket_encode(secret, SLEN, "e1", &t, text, sizeof(text));
    assert_true(n > 0 && n < GW_TICKET_MAX_LEN);
    assert_int_equal(strlen(text), n);
    for (size_t i = 0; i < n; i++) /* cookie- and header-safe base64url */
        assert_non_null(
            strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", text[i]));
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", text, n, &got), 0);
    assert_true(got.gen == t.gen && got.num == t.num && got.iat == t.iat);
    assert_string_equal(got.visitor, t.visitor);
}

static void test_prequeue_number_zero(void **state)
{
    gw_ticket_t t = sample(), got;
    t.num = 0;
    char text[GW_TICKET_MAX_LEN];
    size_t n = gw_ticket_encode(secret, SLEN, "e1", &t, text, sizeof(text));
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", text, n, &got), 0);
    assert_true(got.num == 0);
}

static void test_other_event_refused(void **state)
{
    gw_ticket_t t = sample(), got;
    char text[GW_TICKET_MAX_LEN];
    size_t n = gw_ticket_encode(secret, SLEN, "e1", &t, text, sizeof(text));
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e2", text, n, &got), -1);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1x", text, n, &got), -1);
}

static void test_other_secret_refused(void **state)
{
    gw_ticket_t t = sample(), got;
    char text[GW_TICKET_MAX_LEN];
    size_t n = gw_ticket_encode(secret, SLEN, "e1", &t, text, sizeof(text));
    static const unsigned char other[] = "another-secret-another-secret-another";
    assert_int_equal(gw_ticket_decode(other, sizeof(other) - 1, "e1", text, n, &got), -1);
}

/* Rotation. Every secret of the list verifies, whichever signed; a secret no
 * longer in the list does not. */
static void test_rotation_any_secret_verifies(void **state)
{
    static const unsigned char old[] = "old-secret-old-secret-old-secret-old!";
    static const unsigned char gone[] = "gone-secret-gone-secret-gone-secret!!";
    gw_ticket_t t = sample(), got;
    char by_old[GW_TICKET_MAX_LEN], by_new[GW_TICKET_MAX_LEN], by_gone[GW_TICKET_MAX_LEN];
    size_t n_old = gw_ticket_encode(old, sizeof(old) - 1, "e1", &t, by_old, sizeof(by_old));
    size_t n_new = gw_ticket_encode(secret, SLEN, "e1", &t, by_new, sizeof(by_new));
    size_t n_gone = gw_ticket_encode(gone, sizeof(gone) - 1, "e1", &t, by_gone, sizeof(by_gone));
    gw_ticket_keys_t keys = {.n = 2, .secret = {old, secret}, .len = {sizeof(old) - 1, SLEN}};
    assert_int_equal(gw_ticket_decode_any(&keys, "e1", by_old, n_old, &got), 0);
    assert_true(got.num == t.num);
    assert_int_equal(gw_ticket_decode_any(&keys, "e1", by_new, n_new, &got), 0);
    assert_int_equal(gw_ticket_decode_any(&keys, "e1", by_gone, n_gone, &got), -1);
    assert_int_equal(gw_ticket_decode_any(&keys, "e2", by_old, n_old, &got), -1);
    keys.n = 1; /* the old secret dropped from the list */
    keys.secret[0] = secret;
    keys.len[0] = SLEN;
    assert_int_equal(gw_ticket_decode_any(&keys, "e1", by_old, n_old, &got), -1);
    keys.n = 0;
    assert_int_equal(gw_ticket_decode_any(&keys, "e1", by_new, n_new, &got), -1);
}

/* The maximum ticket age, and no belief in tickets from the future. */
static void test_fresh(void **state)
{
    gw_ticket_t t = sample(); /* iat 1800000000 */
    assert_true(gw_ticket_fresh(&t, 1800000000, 60));
    assert_true(gw_ticket_fresh(&t, 1800000060, 60));
    assert_false(gw_ticket_fresh(&t, 1800000061, 60));
    assert_true(gw_ticket_fresh(&t, 1800000000 - GW_TICKET_FUTURE_S, 60));
    assert_false(gw_ticket_fresh(&t, 1800000000 - GW_TICKET_FUTURE_S - 1, 60));
    t.iat = INT64_MAX; /* a crafted iat cannot overflow the check */
    assert_false(gw_ticket_fresh(&t, 1800000000, 60));
    t.iat = INT64_MIN;
    assert_false(gw_ticket_fresh(&t, 1800000000, 60));
}

/* Flipping any single character (a better number, another visitor, a forged MAC) fails. */
static void test_every_altered_character_refused(void **state)
{
    gw_ticket_t t = sample(), got;
    char text[GW_TICKET_MAX_LEN];
    size_t n = gw_ticket_encode(secret, SLEN, "e1", &t, text, sizeof(text));
    for (size_t i = 0; i < n; i++) {
        char copy[GW_TICKET_MAX_LEN];
        memcpy(copy, text, n + 1);
        copy[i] = copy[i] == 'A' ? 'B' : 'A';
        /* the last character carries only 2 meaningful bits: some flips decode equal */
        if (i == n - 1)
            continue;
        assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", copy, n, &got), -1);
    }
}

static void test_malformed_refused(void **state)
{
    gw_ticket_t got;
    char text[GW_TICKET_MAX_LEN];
    gw_ticket_t t = sample();
    size_t n = gw_ticket_encode(secret, SLEN, "e1", &t, text, sizeof(text));
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", "", 0, &got), -1);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", text, n - 1, &got), -1);
    char longer[GW_TICKET_MAX_LEN + 2];
    snprintf(longer, sizeof(longer), "%sA", text);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", longer, n + 1, &got), -1);
    char bad[GW_TICKET_MAX_LEN];
    memcpy(bad, text, n + 1);
    bad[5] = '=';
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", bad, n, &got), -1);
    /* a well-formed ticket whose bytes are random is refused by the MAC */
    memset(bad, 'Q', n);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "e1", bad, n, &got), -1);
}

static void test_encode_refuses_bad_visitor(void **state)
{
    gw_ticket_t t = sample();
    char text[GW_TICKET_MAX_LEN];
    snprintf(t.visitor, sizeof(t.visitor), "%s", "not-hex");
    assert_int_equal(gw_ticket_encode(secret, SLEN, "e1", &t, text, sizeof(text)), 0);
    t = sample();
    assert_int_equal(gw_ticket_encode(secret, SLEN, "e1", &t, text, 10), 0);
}

static void test_cookie_parse(void **state)
{
    size_t len = 0;
    const char *v = gw_ticket_from_cookie("a=1; onsale_q_e1=TICKET; b=2", "e1", &len);
    assert_non_null(v);
    assert_int_equal(len, 6);
    assert_memory_equal(v, "TICKET", 6);
    v = gw_ticket_from_cookie("onsale_q_e10=X; onsale_q_e1=Y", "e1", &len);
    assert_non_null(v);
    assert_int_equal(len, 1);
    assert_int_equal(v[0], 'Y');
    v = gw_ticket_from_cookie("onsale_q_e1=\"Z\"", "e1", &len);
    assert_non_null(v);
    assert_int_equal(len, 1);
    assert_int_equal(v[0], 'Z');
    assert_null(gw_ticket_from_cookie("onsale_q_e2=X", "e1", &len));
    assert_null(gw_ticket_from_cookie("", "e1", &len));
    assert_null(gw_ticket_from_cookie("xonsale_q_e1=X", "e1", &len));
}

static void test_new_visitor(void **state)
{
    char a[GW_VISITOR_LEN + 1], b[GW_VISITOR_LEN + 1];
    gw_ticket_new_visitor(a);
    gw_ticket_new_visitor(b);
    assert_true(gw_ticket_visitor_ok(a));
    assert_true(gw_ticket_visitor_ok(b));
    assert_string_not_equal(a, b);
    assert_false(gw_ticket_visitor_ok("00112233445566778899AABBCCDDEEFF"));
    assert_false(gw_ticket_visitor_ok("0011"));
}

/* A ticket bound to a key (gw_dpop): the longer layout, the thumbprint bytes under the MAC,
 * and neither form can pass for the other. */
static void test_bound_round_trip(void **state)
{
    (void)state;
    gw_ticket_t t = sample(), out;
    t.bound = true;
    for (int i = 0; i < GW_TICKET_JKT_LEN; i++)
        t.jkt[i] = (unsigned char)(0xa0 + i);
    char text[GW_TICKET_MAX_LEN], plain[GW_TICKET_MAX_LEN];
    size_t n = gw_ticket_encode(secret, SLEN, "ev1", &t, text, sizeof(text));
    assert_int_equal(n, 119);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "ev1", text, n, &out), 0);
    assert_true(out.bound);
    assert_memory_equal(out.jkt, t.jkt, GW_TICKET_JKT_LEN);
    assert_int_equal(out.num, t.num);
    assert_string_equal(out.visitor, t.visitor);
    assert_string_equal(out.cnf_jkt, "");
    /* an unbound ticket decodes unbound */
    gw_ticket_t u = sample();
    size_t m = gw_ticket_encode(secret, SLEN, "ev1", &u, plain, sizeof(plain));
    assert_int_equal(m, 98);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "ev1", plain, m, &out), 0);
    assert_false(out.bound);
    /* every altered character of the bound form (the thumbprint included) is refused */
    assert_every_change_refused(text, n);
    /* the bound ticket cut to the unbound length does not verify */
    assert_int_not_equal(gw_ticket_decode(secret, SLEN, "ev1", text, 98, &out), 0);
}

/* A customer's ticket (gw_enqueue.h) carries the customer id under the MAC, bound or not;
 * any altered character, another customer's id spliced in, or a cut is refused; a
 * customer id outside its charset or length is never encoded. */
static void test_customer_round_trip(void **state)
{
    char text[GW_TICKET_MAX_LEN], other[GW_TICKET_MAX_LEN];
    gw_ticket_t t = sample(), out;
    snprintf(t.customer, sizeof(t.customer), "%s", "cust-42@site.example");
    size_t n = gw_ticket_encode(secret, SLEN, "ev1", &t, text, sizeof(text));
    assert_true(n > 98 && n < GW_TICKET_MAX_LEN);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "ev1", text, n, &out), 0);
    assert_string_equal(out.customer, "cust-42@site.example");
    assert_string_equal(gw_ticket_who(&out), "cust-42@site.example");
    assert_string_equal(out.visitor, t.visitor);
    assert_int_equal(out.num, t.num);
    assert_false(out.bound);
    assert_every_change_refused(text, n);
    for (size_t cut = 1; cut < n; cut++)
        assert_int_not_equal(gw_ticket_decode(secret, SLEN, "ev1", text, n - cut, &out), 0);
    /* the same place of another customer is another ticket: neither verifies as the other */
    gw_ticket_t u = t;
    snprintf(u.customer, sizeof(u.customer), "%s", "cust-43@site.example");
    size_t m = gw_ticket_encode(secret, SLEN, "ev1", &u, other, sizeof(other));
    assert_int_equal(m, n);
    assert_memory_not_equal(text, other, n);
    /* bound and a customer's at once; the longest customer id still fits */
    t.bound = true;
    memset(t.jkt, 0x7e, sizeof(t.jkt));
    memset(t.customer, 'z', GW_CUSTOMER_MAX);
    t.customer[GW_CUSTOMER_MAX] = '\0';
    n = gw_ticket_encode(secret, SLEN, "ev1", &t, text, sizeof(text));
    assert_true(n > 0 && n < GW_TICKET_MAX_LEN);
    assert_int_equal(gw_ticket_decode(secret, SLEN, "ev1", text, n, &out), 0);
    assert_true(out.bound);
    assert_memory_equal(out.jkt, t.jkt, sizeof(t.jkt));
    assert_string_equal(out.customer, t.customer);
    /* no customer: the visitor owns the place */
    gw_ticket_t v = sample();
    assert_string_equal(gw_ticket_who(&v), v.visitor);
}

static void test_customer_ids_checked(void **state)
{
    static const char *const good[] = {"a", "C-1", "user.name+tag@example.org", "x:y_z"};
    static const char *const bad[] = {"", "a b", "a{b}", "ü", "a/b", "a\"b", "a%41", "a\nb"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_true(gw_ticket_customer_ok(good[i], strlen(good[i])));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(gw_ticket_customer_ok(bad[i], strlen(bad[i])));
    char longest[GW_CUSTOMER_MAX + 2];
    memset(longest, 'a', sizeof(longest));
    assert_true(gw_ticket_customer_ok(longest, GW_CUSTOMER_MAX));
    assert_false(gw_ticket_customer_ok(longest, GW_CUSTOMER_MAX + 1));
    char text[GW_TICKET_MAX_LEN];
    gw_ticket_t t = sample();
    snprintf(t.customer, sizeof(t.customer), "%s", "no spaces");
    assert_int_equal(gw_ticket_encode(secret, SLEN, "ev1", &t, text, sizeof(text)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hmac_rfc4231_case2),
        cmocka_unit_test(test_hmac_context_reused_per_key),
        cmocka_unit_test(test_hmac_contexts_per_thread_freed),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bound_round_trip),
        cmocka_unit_test(test_customer_round_trip),
        cmocka_unit_test(test_customer_ids_checked),
        cmocka_unit_test(test_prequeue_number_zero),
        cmocka_unit_test(test_other_event_refused),
        cmocka_unit_test(test_other_secret_refused),
        cmocka_unit_test(test_every_altered_character_refused),
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_encode_refuses_bad_visitor),
        cmocka_unit_test(test_cookie_parse),
        cmocka_unit_test(test_new_visitor),
        cmocka_unit_test(test_rotation_any_secret_verifies),
        cmocka_unit_test(test_fresh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
