/*
 * Unit tests for common/cm_addrtab.c: entries found, added and dropped; the probe bound
 * (a key never looks past `probes` slots, however empty the rest of the table); each full
 * policy (pass, evict the least recently used, restart the home slot); a dropped entry's
 * hole not ending a run; the walk; and threads hammering one table, whose counts must add
 * up exactly (run it under ONSALE_TSAN too).
 *
 * Keys are chosen by hand, not hashed: key & (slots - 1) is a key's home slot, so keys
 * 16 apart collide in a table of 16.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>

#include "cm_addrtab.h"

typedef struct entry {
    int64_t count;
    int64_t used; /* last_used's answer */
} entry_t;

static int64_t last_used(const void *value)
{
    return ((const entry_t *)value)->used;
}

static cm_addrtab_t *table(size_t slots, size_t probes, cm_addrtab_full_t full)
{
    return cm_addrtab_new(&(cm_addrtab_config_t){.slots = slots,
                                                 .probes = probes,
                                                 .value_size = sizeof(entry_t),
                                                 .full = full,
                                                 .last_used = last_used});
}

typedef struct op {
    int64_t add, used;
    int64_t count; /* after add */
    bool fresh;
} op_t;

/* Adds op->add to the count (dropping the entry at 0 or below), stamps it op->used. */
static cm_addrtab_verdict_t on_add(void *value, bool fresh, void *arg)
{
    entry_t *e = value;
    op_t *op = arg;
    op->fresh = fresh;
    if (fresh)
        assert_int_equal(e->count, 0); /* a new entry starts zeroed */
    e->count += op->add;
    if (op->used != 0)
        e->used = op->used;
    op->count = e->count;
    return e->count <= 0 ? CM_ADDRTAB_DROP : CM_ADDRTAB_KEEP;
}

/* key's count, or -1 when it has no entry (the lookup adds nothing). */
static int64_t count_of(cm_addrtab_t *t, uint64_t key)
{
    op_t op = {0};
    return cm_addrtab_visit(t, key, false, on_add, &op) == 0 ? op.count : -1;
}

/* Adds add to key's count at time used; returns the visit's verdict. */
static int add(cm_addrtab_t *t, uint64_t key, int64_t n, int64_t used, bool *fresh)
{
    op_t op = {.add = n, .used = used};
    int rc = cm_addrtab_visit(t, key, true, on_add, &op);
    if (fresh != NULL)
        *fresh = op.fresh;
    return rc;
}

static void test_add_find_drop(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(16, 4, CM_ADDRTAB_FULL_PASS);
    bool fresh;
    assert_int_equal(count_of(t, 7), -1); /* a lookup does not add */
    assert_int_equal(cm_addrtab_count(t), 0);
    assert_int_equal(add(t, 7, 2, 0, &fresh), 0);
    assert_true(fresh);
    assert_int_equal(add(t, 7, 3, 0, &fresh), 0);
    assert_false(fresh);
    assert_int_equal(count_of(t, 7), 5);
    assert_int_equal(count_of(t, 8), -1);
    assert_int_equal(cm_addrtab_count(t), 1);
    assert_int_equal(add(t, 7, -5, 0, NULL), 0); /* back at 0: dropped */
    assert_int_equal(count_of(t, 7), -1);
    assert_int_equal(cm_addrtab_count(t), 0);
    cm_addrtab_free(t);
    cm_addrtab_free(NULL);
}

/* A key looks at probes slots from its home and no further, even with the table empty
 * beyond them; under the pass policy the key then has no entry. */
static void test_probe_bound_and_pass(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(16, 4, CM_ADDRTAB_FULL_PASS);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(add(t, 3 + 16 * (i + 1), 1, 0, NULL), 0); /* slots 3..6 */
    assert_int_equal(add(t, 3 + 16 * 5, 1, 0, NULL), -1); /* slots 7..15 free, not probed */
    assert_int_equal(count_of(t, 3 + 16 * 5), -1);
    assert_int_equal(cm_addrtab_count(t), 4);
    for (uint64_t i = 0; i < 4; i++) /* nobody was pushed out */
        assert_int_equal(count_of(t, 3 + 16 * (i + 1)), 1);
    assert_int_equal(add(t, 7, 1, 0, NULL), 0); /* another home still has room */
    cm_addrtab_free(t);
}

/* A dropped entry leaves a hole: the keys probed past it are still found, and the hole
 * is the next new key's slot. */
static void test_hole_does_not_end_a_run(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(16, 4, CM_ADDRTAB_FULL_PASS);
    assert_int_equal(add(t, 16, 1, 0, NULL), 0);  /* slot 0 */
    assert_int_equal(add(t, 32, 1, 0, NULL), 0);  /* slot 1 */
    assert_int_equal(add(t, 48, 1, 0, NULL), 0);  /* slot 2 */
    assert_int_equal(add(t, 16, -1, 0, NULL), 0); /* slot 0 free again */
    assert_int_equal(count_of(t, 48), 1);
    assert_int_equal(add(t, 64, 1, 0, NULL), 0); /* slot 0 */
    assert_int_equal(add(t, 80, 1, 0, NULL), 0); /* slot 3 */
    assert_int_equal(add(t, 96, 1, 0, NULL), -1);
    cm_addrtab_free(t);
}

/* Evict: a free probed slot first; else the probed entry used longest ago goes (the
 * first probed on a tie), and nothing else. */
static void test_evict_takes_the_least_recently_used(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(16, 4, CM_ADDRTAB_FULL_EVICT);
    const int64_t used[4] = {10, 5, 7, 20};
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(add(t, 16 * (i + 1), 1, used[i], NULL), 0);
    bool fresh;
    assert_int_equal(add(t, 16 * 5, 1, 30, &fresh), 0);
    assert_true(fresh);
    assert_int_equal(count_of(t, 16 * 2), -1); /* used at 5: forgotten */
    assert_int_equal(count_of(t, 16 * 1), 1);
    assert_int_equal(count_of(t, 16 * 3), 1);
    assert_int_equal(count_of(t, 16 * 4), 1);
    assert_int_equal(count_of(t, 16 * 5), 1);
    assert_int_equal(cm_addrtab_count(t), 4);
    assert_int_equal(add(t, 16 * 3, 1, 40, NULL), 0); /* 7 → 40: now 10 is the oldest */
    assert_int_equal(add(t, 16 * 6, 1, 41, NULL), 0);
    assert_int_equal(count_of(t, 16 * 1), -1);
    cm_addrtab_free(t);

    t = table(16, 4, CM_ADDRTAB_FULL_EVICT); /* a tie: the first probed goes */
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(add(t, 16 * (i + 1), 1, 9, NULL), 0);
    assert_int_equal(add(t, 16 * 5, 1, 9, NULL), 0);
    assert_int_equal(count_of(t, 16 * 1), -1);
    assert_int_equal(count_of(t, 16 * 2), 1);
    cm_addrtab_free(t);
}

/* Restart, direct-mapped: the home slot belongs to the last key that asked for it, and
 * starts from zero for it; a lookup of the other key finds nothing. */
static void test_restart_direct_mapped(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(16, 1, CM_ADDRTAB_FULL_RESTART);
    bool fresh;
    assert_int_equal(add(t, 5, 3, 0, &fresh), 0);
    assert_true(fresh);
    assert_int_equal(add(t, 21, 1, 0, &fresh), 0); /* home 5 too */
    assert_true(fresh);
    assert_int_equal(count_of(t, 21), 1); /* not 4: never charged the other's count */
    assert_int_equal(count_of(t, 5), -1);
    assert_int_equal(add(t, 6, 1, 0, NULL), 0); /* its neighbour is its own */
    assert_int_equal(cm_addrtab_count(t), 2);
    assert_int_equal(add(t, 5, 1, 0, &fresh), 0);
    assert_true(fresh);
    assert_int_equal(count_of(t, 5), 1);
    cm_addrtab_free(t);
}

/* slots rounds up to a power of two; probes beyond the table are the table. */
static void test_sizes(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(10, 64, CM_ADDRTAB_FULL_PASS); /* 16 slots, 16 probes */
    for (uint64_t k = 1; k <= 16; k++)
        assert_int_equal(add(t, k * 16, 1, 0, NULL), 0); /* one home, the whole table */
    assert_int_equal(add(t, 17 * 16, 1, 0, NULL), -1);
    assert_int_equal(add(t, 1, 1, 0, NULL), -1); /* every slot is taken */
    assert_int_equal(cm_addrtab_count(t), 16);
    cm_addrtab_free(t);
}

static cm_addrtab_verdict_t on_halve(void *value, bool fresh, void *arg)
{
    entry_t *e = value;
    (*(int *)arg)++;
    assert_false(fresh);
    e->count /= 2;
    return e->count == 0 ? CM_ADDRTAB_DROP : CM_ADDRTAB_KEEP;
}

/* each shows every entry once, and may drop some. */
static void test_each(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(64, 4, CM_ADDRTAB_FULL_PASS);
    for (uint64_t k = 1; k <= 20; k++)
        assert_int_equal(add(t, k, (int64_t)(k % 2 ? 1 : 4), 0, NULL), 0);
    int seen = 0;
    cm_addrtab_each(t, on_halve, &seen);
    assert_int_equal(seen, 20);
    assert_int_equal(cm_addrtab_count(t), 10); /* the odd keys' 1 halved to 0 */
    assert_int_equal(count_of(t, 2), 2);
    assert_int_equal(count_of(t, 3), -1);
    cm_addrtab_free(t);
}

#define THREADS 8
#define KEYS    64
#define ROUNDS  (KEYS * 320) /* every key gets as much from each thread */

typedef struct worker {
    cm_addrtab_t *t;
    int id;
} worker_t;

/* Each thread adds 1 to every key in turn, and on odd rounds takes back what it added to
 * a key of its own right after (a count that comes and goes: add, then drop). */
static void *hammer(void *arg)
{
    worker_t *w = arg;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t key = 1 + (uint64_t)((r + w->id) % KEYS) * 1024; /* one home, slot 1 */
        (void)add(w->t, key, 1, 0, NULL);
        if (r % 2) {
            uint64_t own = 0x10000 + (uint64_t)w->id; /* home id: inside the run */
            (void)add(w->t, own, 1, 0, NULL);
            (void)add(w->t, own, -1, 0, NULL);
        }
    }
    return NULL;
}

/* Threads at once on one table: no increment lost, no entry twice, the comings and
 * goings leave nothing behind. */
static void test_threads_hammering_one_table(void **state)
{
    (void)state;
    cm_addrtab_t *t = table(1024, 128, CM_ADDRTAB_FULL_PASS);
    pthread_t th[THREADS];
    worker_t w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){t, i};
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    int64_t total = 0;
    for (uint64_t k = 0; k < KEYS; k++) {
        int64_t n = count_of(t, 1 + k * 1024);
        assert_int_equal(n, (int64_t)THREADS * ROUNDS / KEYS);
        total += n;
    }
    assert_int_equal(total, (int64_t)THREADS * ROUNDS);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(count_of(t, 0x10000 + (uint64_t)i), -1);
    assert_int_equal(cm_addrtab_count(t), KEYS);
    cm_addrtab_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_drop),
        cmocka_unit_test(test_probe_bound_and_pass),
        cmocka_unit_test(test_hole_does_not_end_a_run),
        cmocka_unit_test(test_evict_takes_the_least_recently_used),
        cmocka_unit_test(test_restart_direct_mapped),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_each),
        cmocka_unit_test(test_threads_hammering_one_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
