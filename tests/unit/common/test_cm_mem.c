/*
 * Unit tests for common/cm_mem.c, against the contract of cm_mem.h: the x-allocators
 * never hand back NULL (zero sizes included), abort with a message when the allocator
 * fails, and copy what they say; cm_pool hands a returned object out again zeroed, keeps
 * at most `keep`, frees the rest, and frees everything — the pool included — once it is
 * freed and the last object out comes back.
 *
 * cm_mem.c is compiled into this test with malloc/calloc/realloc/free counted (and able
 * to fail on demand), so "freed" and "kept" are asserted from the live allocation count,
 * in every build, not left to ASan's leak check at exit.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cm_mem.h"

static long live; /* blocks allocated through cm_mem and not freed */
static bool fail; /* the next allocations answer NULL */

static void *count_malloc(size_t n)
{
    void *p = fail ? NULL : malloc(n);
    live += p != NULL;
    return p;
}

static void *count_calloc(size_t count, size_t n)
{
    void *p = fail ? NULL : calloc(count, n);
    live += p != NULL;
    return p;
}

static void *count_realloc(void *old, size_t n)
{
    void *p = fail ? NULL : realloc(old, n);
    live += p != NULL && old == NULL;
    return p;
}

static void count_free(void *p)
{
    live -= p != NULL;
    free(p);
}

/* The module under test, with its allocator calls counted (every header it includes is
 * already in, cm_mem.h's attributes included, so only its own calls are renamed). */
#define malloc  count_malloc
#define calloc  count_calloc
#define realloc count_realloc
#define free    count_free
#include "cm_mem.c"
#undef malloc
#undef calloc
#undef realloc
#undef free

typedef struct obj {
    char bytes[200];
} obj_t;

static void test_x_allocators_never_answer_null_and_copy(void **state)
{
    (void)state;
    long base = live;
    void *a = cm_xmalloc(0), *b = cm_xcalloc(0, 0), *c = cm_xrealloc(NULL, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal(live - base, 3);
    char *d = cm_xstrndup("abcdef", 3);
    assert_string_equal(d, "abc");
    char *e = cm_xstrdup("onsale");
    assert_string_equal(e, "onsale");
    char *f = cm_xasprintf("%s-%d-%05.1f", "x", 42, 2.5);
    assert_string_equal(f, "x-42-002.5");
    unsigned char *z = cm_xcalloc(64, 4);
    for (size_t i = 0; i < 256; i++)
        assert_int_equal(z[i], 0);
    c = cm_xrealloc(c, 4096);
    memset(c, 1, 4096);
    void *all[] = {a, b, c, d, e, f, z};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        count_free(all[i]);
    assert_int_equal(live, base);
}

/* In a child: allocation fails; the child must abort with cm_mem's message, never return
 * NULL to its caller (exit 0 would mean it did). */
static void expect_abort(void *(*call)(void))
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        signal(SIGABRT, SIG_DFL);
        fail = true;
        void *p = call();
        _exit(p == NULL ? 3 : 0);
    }
    close(fds[1]);
    char msg[256] = "";
    ssize_t n = read(fds[0], msg, sizeof(msg) - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGABRT);
    assert_non_null(strstr(msg, "onsale: out of memory allocating 4096 bytes"));
}

static void *malloc_4096(void)
{
    return cm_xmalloc(4096);
}

static void *calloc_4096(void)
{
    return cm_xcalloc(4, 1024);
}

static void *realloc_4096(void)
{
    return cm_xrealloc(NULL, 4096);
}

static void test_out_of_memory_aborts_with_a_message(void **state)
{
    (void)state;
    expect_abort(malloc_4096);
    expect_abort(calloc_4096);
    expect_abort(realloc_4096);
}

static void test_pool_reuses_and_zeroes(void **state)
{
    (void)state;
    long base = live;
    cm_pool_t *p = cm_pool_new(sizeof(obj_t), 4);
    obj_t *a = cm_pool_get(p);
    memset(a, 0x7f, sizeof(*a));
    assert_int_equal(cm_pool_out(p), 1);
    cm_pool_put(p, a);
    assert_int_equal(cm_pool_out(p), 0);
    assert_int_equal(cm_pool_kept(p), 1);
    long kept_one = live;
    obj_t *b = cm_pool_get(p);
    assert_ptr_equal(a, b);           /* the kept object, */
    assert_int_equal(live, kept_one); /* not a new allocation */
    for (size_t i = 0; i < sizeof(b->bytes); i++)
        assert_int_equal(b->bytes[i], 0);
    assert_int_equal(cm_pool_kept(p), 0);
    cm_pool_put(p, b);
    cm_pool_put(p, NULL);
    assert_int_equal(cm_pool_out(p), 0);
    cm_pool_free(p);
    assert_int_equal(live, base);
}

static void test_pool_keeps_at_most_keep(void **state)
{
    (void)state;
    long base = live;
    cm_pool_t *p = cm_pool_new(sizeof(obj_t), 2);
    obj_t *o[5];
    for (int i = 0; i < 5; i++)
        o[i] = cm_pool_get(p);
    assert_int_equal(live - base, 1 + 5); /* the pool and five objects */
    for (int i = 0; i < 5; i++)
        cm_pool_put(p, o[i]);
    assert_int_equal(cm_pool_kept(p), 2);
    assert_int_equal(live - base, 1 + 2); /* the other three were freed */
    for (int i = 0; i < 3; i++)
        o[i] = cm_pool_get(p);
    assert_int_equal(live - base, 1 + 3); /* two from the pool, one new */
    for (int i = 0; i < 3; i++)
        cm_pool_put(p, o[i]);
    cm_pool_free(p); /* frees the two kept, and the pool */
    assert_int_equal(live, base);
}

static void test_pool_freed_with_objects_out(void **state)
{
    (void)state;
    long base = live;
    cm_pool_t *p = cm_pool_new(sizeof(obj_t), 8);
    obj_t *kept = cm_pool_get(p), *late = cm_pool_get(p), *later = cm_pool_get(p);
    cm_pool_put(p, kept);
    cm_pool_free(p); /* two still out: the kept one goes, the pool waits for them */
    assert_int_equal(live - base, 1 + 2);
    assert_int_equal(cm_pool_out(p), 2);
    assert_int_equal(cm_pool_kept(p), 0);
    cm_pool_put(p, late); /* a late completion at teardown: freed, not kept */
    assert_int_equal(live - base, 1 + 1);
    assert_int_equal(cm_pool_kept(p), 0);
    cm_pool_put(p, later); /* the last one: the pool goes with it */
    assert_int_equal(live, base);
    cm_pool_free(NULL);
}

static void test_pool_tiny_objects(void **state)
{
    (void)state;
    long base = live;
    cm_pool_t *p = cm_pool_new(1, 2); /* room for the free list's link anyway */
    char *a = cm_pool_get(p), *b = cm_pool_get(p);
    *a = 'x';
    cm_pool_put(p, a);
    cm_pool_put(p, b);
    assert_int_equal(cm_pool_kept(p), 2);
    char *c = cm_pool_get(p), *d = cm_pool_get(p); /* the list's links are intact */
    assert_true((c == a && d == b) || (c == b && d == a));
    assert_int_equal(*a, 0);
    cm_pool_put(p, c);
    cm_pool_put(p, d);
    cm_pool_free(p);
    assert_int_equal(live, base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_x_allocators_never_answer_null_and_copy),
        cmocka_unit_test(test_out_of_memory_aborts_with_a_message),
        cmocka_unit_test(test_pool_reuses_and_zeroes),
        cmocka_unit_test(test_pool_keeps_at_most_keep),
        cmocka_unit_test(test_pool_freed_with_objects_out),
        cmocka_unit_test(test_pool_tiny_objects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
