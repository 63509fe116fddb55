/*
 * Unit tests for reserve/rsv_rediskeys.c: the key shape "os:{<event>}:<kind><id>" (the
 * event as the hash tag, so one Cluster slot holds an event), the same bytes from the
 * heap and the buffer forms, and the buffer form refusing, not truncating, a key that
 * does not fit.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "rsv_rediskeys.h"

static void test_key_shape(void **state)
{
    (void)state;
    char *k = rsv_key("tour-1", RSV_K_SEAT, "A-12");
    assert_string_equal(k, "os:{tour-1}:s:A-12");
    free(k);
    k = rsv_key("tour-1", RSV_K_SEED, NULL);
    assert_string_equal(k, "os:{tour-1}:seed");
    free(k);
    k = rsv_key("e", RSV_K_ACTIVE, NULL);
    assert_string_equal(k, "os:{e}:active");
    free(k);
    /* the stock feed: the gateway's Redis user reads exactly this name */
    k = rsv_key("tour-1", RSV_K_STOCK, NULL);
    assert_string_equal(k, "os:{tour-1}:stock");
    free(k);
    k = rsv_key("tour-1", RSV_K_STOCK_LOCK, NULL);
    assert_string_equal(k, "os:{tour-1}:stockl");
    free(k);
}

static void test_buf_matches_heap(void **state)
{
    (void)state;
    const char *kinds[] = {RSV_K_SEED,  RSV_K_SEAT,       RSV_K_HOLD,      RSV_K_BUYER,
                           RSV_K_POOL,  RSV_K_POOL_UNITS, RSV_K_POOL_NEXT, RSV_K_POOL_OLD,
                           RSV_K_TOKEN, RSV_K_ACTIVE,     RSV_K_IDEM,      RSV_K_REFUND,
                           RSV_K_STOCK, RSV_K_STOCK_LOCK};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        char buf[RSV_KEY_MAX];
        char *heap = rsv_key("night.2", kinds[i], "x9");
        assert_ptr_equal(rsv_key_buf(buf, sizeof(buf), "night.2", kinds[i], "x9"), buf);
        assert_string_equal(buf, heap);
        free(heap);
    }
}

/* "os:{e}:s:1" is 10 bytes: it needs 11 with the NUL, and 10 is refused. */
static void test_buf_refuses_what_does_not_fit(void **state)
{
    (void)state;
    char buf[16];
    memset(buf, '#', sizeof(buf));
    assert_ptr_equal(rsv_key_buf(buf, 11, "e", RSV_K_SEAT, "1"), buf);
    assert_string_equal(buf, "os:{e}:s:1");
    assert_null(rsv_key_buf(buf, 10, "e", RSV_K_SEAT, "1"));
    assert_null(rsv_key_buf(buf, 4, "e", RSV_K_SEAT, "1"));
    assert_ptr_equal(rsv_key_buf(buf, 9, "e", RSV_K_SEED, NULL), NULL);
    assert_ptr_equal(rsv_key_buf(buf, 12, "e", RSV_K_SEED, NULL), buf);
    assert_string_equal(buf, "os:{e}:seed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_shape),
        cmocka_unit_test(test_buf_matches_heap),
        cmocka_unit_test(test_buf_refuses_what_does_not_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
