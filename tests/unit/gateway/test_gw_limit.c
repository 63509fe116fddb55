/*
 * Unit tests for gateway/gw_limit.c: the per-address join bucket (burst, refill,
 * Retry-After), independence of addresses, the bucket key (IPv6 by /64, IPv4 whole), and a bounded
 * table under an address flood.
 *
 * gw_limit.c and the table under it (common/cm_addrtab.c) are compiled into this test,
 * their allocations counted, so the flood test can assert the bound gw_limit.h promises —
 * a fixed table of about twice `size` slots, allocated once, never more entries than
 * slots — and that the flood does not push an active address out (only the longest idle
 * is forgotten).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cm_mem.h"
#include "gw_limit.h"

static size_t allocated; /* bytes gw_limit asked cm_mem for */

static void *count_xcalloc(size_t count, size_t n)
{
    allocated += count * n;
    return cm_xcalloc(count, n);
}

#define cm_xcalloc count_xcalloc
#include "cm_addrtab.c"
#include "gw_limit.c"
#undef cm_xcalloc

static void test_burst_then_refill(void **state)
{
    gw_limit_t *l = gw_limit_new(60, 3, 100); /* one per second, burst 3 */
    int64_t t = 1000000;
    for (int i = 0; i < 3; i++)
        assert_int_equal(gw_limit_take(l, "10.0.0.1", t), 0);
    int wait = gw_limit_take(l, "10.0.0.1", t);
    assert_true(wait >= 1 && wait <= 2);
    assert_int_equal(gw_limit_take(l, "10.0.0.2", t), 0); /* another address is unaffected */
    assert_true(gw_limit_take(l, "10.0.0.1", t + 500) > 0);
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 1100), 0);
    assert_true(gw_limit_take(l, "10.0.0.1", t + 1100) > 0);
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 60000), 0); /* refilled, capped at 3 */
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 60000), 0);
    assert_int_equal(gw_limit_take(l, "10.0.0.1", t + 60000), 0);
    assert_true(gw_limit_take(l, "10.0.0.1", t + 60000) > 0);
    gw_limit_free(l);
}

static void test_unlimited(void **state)
{
    gw_limit_t *l = gw_limit_new(0, 1, 16);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(gw_limit_take(l, "10.0.0.1", 0), 0);
    gw_limit_free(l);
}

/* An IPv6 subscriber's /64 is one bucket (its hosts pick addresses in it at will); IPv4
 * addresses are keyed whole, even inside one /24 (each may be a CGNAT address shared by
 * tens of fans), and an IPv4-mapped address is its IPv4 address. */
static void test_key_ipv6_by_64_ipv4_whole(void **state)
{
    (void)state;
    gw_limit_t *l = gw_limit_new(60, 2, 100); /* burst 2 */
    int64_t t = 1000000;
    assert_int_equal(gw_limit_take(l, "2001:db8:1:2::1", t), 0);
    assert_int_equal(gw_limit_take(l, "2001:db8:1:2:ffff:ee:dd:cc", t), 0);
    assert_true(gw_limit_take(l, "2001:db8:1:2::abcd", t) > 0);  /* same /64: spent */
    assert_int_equal(gw_limit_take(l, "2001:db8:1:3::1", t), 0); /* the next /64 */
    assert_int_equal(gw_limit_take(l, "192.0.2.1", t), 0);
    assert_int_equal(gw_limit_take(l, "192.0.2.1", t), 0);
    assert_true(gw_limit_take(l, "::ffff:192.0.2.1", t) > 0); /* the same address */
    assert_int_equal(gw_limit_take(l, "192.0.2.2", t), 0);    /* same /24, its own bucket */
    char k[GW_LIMIT_KEY_MAX];
    gw_limit_key("2001:DB8:0:0:1::9", k);
    assert_string_equal(k, "2001:0db8:0000:0000::/64");
    gw_limit_key("::ffff:10.1.2.3", k);
    assert_string_equal(k, "10.1.2.3");
    gw_limit_key("not an address", k);
    assert_string_equal(k, "not an address");
    gw_limit_free(l);
}

static size_t entries(gw_limit_t *l)
{
    return cm_addrtab_count(l->tab);
}

/* A reload's new rate and burst apply at once, to addresses already tracked too. */
static void test_set_applies_live(void **state)
{
    (void)state;
    gw_limit_t *l = gw_limit_new(0, 1, 64); /* unlimited: no table */
    for (int i = 0; i < 100; i++)
        assert_int_equal(gw_limit_take(l, "10.0.0.1", 1000), 0);
    gw_limit_set(l, 60, 2); /* one a second, burst 2 */
    assert_int_equal(gw_limit_take(l, "10.0.0.1", 1000), 0);
    assert_int_equal(gw_limit_take(l, "10.0.0.1", 1000), 0);
    assert_true(gw_limit_take(l, "10.0.0.1", 1000) >= 1);
    gw_limit_set(l, 600, 5); /* ten a second now: 100 ms later one more */
    assert_int_equal(gw_limit_take(l, "10.0.0.1", 1100), 0);
    assert_true(gw_limit_take(l, "10.0.0.1", 1100) >= 1);
    gw_limit_set(l, 60, 1); /* a smaller burst caps what addresses hold */
    assert_true(gw_limit_take(l, "10.0.0.1", 1100) >= 1);
    gw_limit_set(l, 0, 1); /* off again */
    for (int i = 0; i < 100; i++)
        assert_int_equal(gw_limit_take(l, "10.0.0.1", 1100), 0);
    gw_limit_free(l);
}

static void test_flood_of_addresses_stays_bounded(void **state)
{
    (void)state;
    const size_t size = 16;
    allocated = 0;
    gw_limit_t *l = gw_limit_new(60, 1, size); /* one a second, burst 1 */
    size_t slots = l->tab->mask + 1, at_start = allocated;
    assert_true(slots >= size && slots <= 4 * size); /* "size: addresses tracked" */
    assert_int_equal(l->tab->stride, sizeof(uint64_t) + sizeof(bucket_t));
    assert_int_equal(at_start, sizeof(*l) + sizeof(*l->tab) + slots * l->tab->stride);
    char addr[32];
    int hot_allowed = 0, hot_calls = 0;
    for (int i = 0; i < 100000; i++) {
        snprintf(addr, sizeof(addr), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        assert_int_equal(gw_limit_take(l, addr, i), 0); /* new addresses always get in */
        if (i % 10 == 0) {                              /* one client keeps joining */
            hot_calls++;
            hot_allowed += gw_limit_take(l, "192.0.2.1", i) == 0;
        }
        if (i % 1000 == 999)
            assert_true(entries(l) <= slots);
    }
    assert_int_equal(allocated, at_start); /* the flood allocated nothing */
    assert_true(entries(l) <= slots);
    assert_true(entries(l) >= size); /* and the table is used, not bypassed */
    /* 100 s at one a second (plus its burst): the flood never made it forget the active
     * client, whose refusals outnumber its passes 100 to 1. */
    assert_int_equal(hot_calls, 10000);
    assert_true(hot_allowed >= 100 && hot_allowed <= 101);
    gw_limit_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_refill),
        cmocka_unit_test(test_unlimited),
        cmocka_unit_test(test_key_ipv6_by_64_ipv4_whole),
        cmocka_unit_test(test_flood_of_addresses_stays_bounded),
        cmocka_unit_test(test_set_applies_live),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
