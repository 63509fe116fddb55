/*
 * Unit tests for common/cm_mem.c's cm_pool: a returned object is handed out again
 * (zeroed), at most `keep` are kept, and nothing leaks — neither kept objects when the
 * pool is freed nor objects put back after it (ASan's leak check runs at exit).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cm_mem.h"

typedef struct obj {
    char bytes[200];
} obj_t;

static void test_pool_reuses_and_zeroes(void **state)
{
    cm_pool_t *p = cm_pool_new(sizeof(obj_t), 4);
    obj_t *a = cm_pool_get(p);
    memset(a, 0x7f, sizeof(*a));
    assert_int_equal(cm_pool_out(p), 1);
    cm_pool_put(p, a);
    assert_int_equal(cm_pool_out(p), 0);
    assert_int_equal(cm_pool_kept(p), 1);
    obj_t *b = cm_pool_get(p);
    assert_ptr_equal(a, b); /* the kept object, not a new allocation */
    for (size_t i = 0; i < sizeof(b->bytes); i++)
        assert_int_equal(b->bytes[i], 0);
    assert_int_equal(cm_pool_kept(p), 0);
    cm_pool_put(p, b);
    cm_pool_put(p, NULL);
    assert_int_equal(cm_pool_out(p), 0);
    cm_pool_free(p);
}

static void test_pool_keeps_at_most_keep(void **state)
{
    cm_pool_t *p = cm_pool_new(sizeof(obj_t), 2);
    obj_t *o[5];
    for (int i = 0; i < 5; i++)
        o[i] = cm_pool_get(p);
    for (int i = 0; i < 5; i++)
        cm_pool_put(p, o[i]);
    assert_int_equal(cm_pool_kept(p), 2); /* the other three were freed */
    cm_pool_free(p);                      /* frees the two kept */
}

static void test_pool_freed_with_objects_out(void **state)
{
    cm_pool_t *p = cm_pool_new(sizeof(obj_t), 8);
    obj_t *kept = cm_pool_get(p), *late = cm_pool_get(p), *later = cm_pool_get(p);
    cm_pool_put(p, kept);
    cm_pool_free(p);       /* two still out: the pool waits for them */
    cm_pool_put(p, late);  /* a late completion at teardown: freed, not kept */
    cm_pool_put(p, later); /* the last one: the pool goes with it */
}

static void test_pool_tiny_objects(void **state)
{
    cm_pool_t *p = cm_pool_new(1, 2); /* room for the free list's link anyway */
    char *a = cm_pool_get(p);
    cm_pool_put(p, a);
    assert_ptr_equal(cm_pool_get(p), a);
    cm_pool_put(p, a);
    cm_pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_reuses_and_zeroes),
        cmocka_unit_test(test_pool_keeps_at_most_keep),
        cmocka_unit_test(test_pool_freed_with_objects_out),
        cmocka_unit_test(test_pool_tiny_objects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
