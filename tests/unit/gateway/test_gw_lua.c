/*
 * Unit tests for gateway/gw_lua.c: every worker thread asks for the script set on its
 * first request, all at once after a start. The set must be built exactly once: with a
 * plain "built" flag several threads built it together, each could see its own copy, and
 * all but one copy leaked (LeakSanitizer in an ASan gateway's log).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "gw_lua.h"

#define NTHREADS 8

static pthread_barrier_t start;

typedef struct seen {
    gw_lua_t copy; /* the script pointers as this thread read them on return */
} seen_t;

static void *first_request(void *arg)
{
    seen_t *s = arg;
    pthread_barrier_wait(&start);
    s->copy = *gw_lua();
    return NULL;
}

static void test_built_once_when_every_worker_asks_at_once(void **state)
{
    (void)state;
    pthread_t t[NTHREADS];
    seen_t seen[NTHREADS];
    pthread_barrier_init(&start, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, first_request, &seen[i]), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    const gw_lua_t *now = gw_lua();
    for (int i = 0; i < NTHREADS; i++)
        assert_memory_equal(&seen[i].copy, now, sizeof(*now));
    assert_non_null(now->admit);
    assert_string_equal(cm_redis_script_name(now->admit), "gw_admit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_built_once_when_every_worker_asks_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
