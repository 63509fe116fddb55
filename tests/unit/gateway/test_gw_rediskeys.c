/*
 * Unit tests for gateway/gw_rediskeys.c: every key name byte for byte (as the snprintf it
 * replaced wrote them, for the shortest and the longest event id), the lengths, and the
 * per-thread cache (the same names on a hit, other rooms' names after a round of misses).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gw_rediskeys.h"

static const char *const suffix[GW_K_COUNT] = {
    "q:cfg", "q:n", "q:st", "q:wb", "q:pre", "q:pl", "q:cb", "q:sb", "q:adm", "q:gone", "active",
};

/* Every key of event as "os:{<event>}:<suffix>", built by snprintf (the reference). */
static void assert_keys_of(const char *event, const char **argv, const size_t *argvlen)
{
    for (int i = 0; i < GW_K_COUNT; i++) {
        char want[GW_KEY_MAX + 8];
        snprintf(want, sizeof(want), "os:{%s}:%s", event, suffix[i]);
        assert_string_equal(argv[i], want);
        if (argvlen != NULL)
            assert_int_equal(argvlen[i], strlen(want));
    }
}

static void test_names_byte_for_byte(void **state)
{
    (void)state;
    char longest[CM_IDENT_MAX + 1];
    memset(longest, 'z', CM_IDENT_MAX);
    longest[CM_IDENT_MAX] = '\0';
    const char *events[] = {"e", "tour-2027_night.1", longest};
    for (size_t e = 0; e < sizeof(events) / sizeof(events[0]); e++) {
        gw_rediskeys_t k;
        const char *argv[GW_K_COUNT];
        assert_int_equal(gw_rediskeys_argv(events[e], &k, argv), GW_K_COUNT);
        assert_keys_of(events[e], argv, k.len);
        assert_int_equal(k.len[GW_K_ACTIVE], 4 + strlen(events[e]) + 2 + 6);
        assert_true(k.len[GW_K_GONE] < GW_KEY_MAX); /* the NUL fits too */
    }
}

static void test_cache_hits_and_misses(void **state)
{
    (void)state;
    const char *argv[GW_K_COUNT];
    size_t argvlen[GW_K_COUNT];
    assert_int_equal(gw_rediskeys_cached("alpha", argv, argvlen), GW_K_COUNT);
    assert_keys_of("alpha", argv, argvlen);
    const char *first = argv[0];
    assert_int_equal(gw_rediskeys_cached("alpha", argv, argvlen), GW_K_COUNT);
    assert_ptr_equal(argv[0], first); /* a hit: the same cached names */
    /* a prefix of a cached id, and an id a cached one is a prefix of, are other rooms */
    gw_rediskeys_cached("alph", argv, argvlen);
    assert_keys_of("alph", argv, argvlen);
    gw_rediskeys_cached("alphabet", argv, argvlen);
    assert_keys_of("alphabet", argv, argvlen);
    /* more rooms than the cache holds: each still gets its own names */
    char ev[16];
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 3 * GW_KEYS_CACHED; i++) {
            snprintf(ev, sizeof(ev), "room%d", i);
            gw_rediskeys_cached(ev, argv, argvlen);
            assert_keys_of(ev, argv, argvlen);
        }
    gw_rediskeys_cached("alpha", argv, argvlen);
    assert_keys_of("alpha", argv, argvlen);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_byte_for_byte),
        cmocka_unit_test(test_cache_hits_and_misses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
