/*
 * Unit tests for gateway/gw_rooms.c, the room registry: a room is added once (absent,
 * default settings, its gauges registered), found only while present, keeps its address
 * however many rooms come after it, and forgetting it marks it absent and clears what it
 * knew without freeing it; the timer's pass count.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cm_mem.h"
#include "gw_rooms.h"

static void test_add_then_find_while_present(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    gw_rooms_t *t = gw_rooms_new();
    assert_null(gw_rooms_get(t, "ev1"));
    gw_room_t *r = gw_rooms_add(t, m, "ev1");
    assert_non_null(r);
    assert_string_equal(r->event, "ev1");
    assert_false(r->present);
    assert_null(gw_rooms_find(t, "ev1")); /* known, but not known to exist */
    assert_ptr_equal(gw_rooms_get(t, "ev1"), r);
    assert_ptr_equal(gw_rooms_add(t, m, "ev1"), r); /* added once */
    r->present = true;
    assert_ptr_equal(gw_rooms_find(t, "ev1"), r);
    assert_null(gw_rooms_find(t, "ev2"));
    assert_non_null(r->g_queue);
    for (int k = 0; k < GW_NPHASES; k++)
        assert_non_null(r->g_phase[k]);
    size_t n;
    gw_room_t **all = gw_rooms_all(t, &n);
    assert_int_equal(n, 1);
    assert_ptr_equal(all[0], r);
    gw_rooms_free(t);
    gw_rooms_free(NULL);
    cm_metrics_free(m);
}

/* The array grows; the rooms in it do not move (handlers hold them across awaits). */
static void test_rooms_keep_their_address(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    gw_rooms_t *t = gw_rooms_new();
    gw_room_t *first = gw_rooms_add(t, m, "e0");
    char ev[16];
    for (int i = 1; i < 100; i++) {
        snprintf(ev, sizeof(ev), "e%d", i);
        gw_rooms_add(t, m, ev);
    }
    size_t n;
    gw_room_t **all = gw_rooms_all(t, &n);
    assert_int_equal(n, 100);
    assert_ptr_equal(all[0], first);
    assert_ptr_equal(gw_rooms_get(t, "e0"), first);
    assert_string_equal(gw_rooms_get(t, "e99")->event, "e99");
    gw_rooms_free(t);
    cm_metrics_free(m);
}

/* Forgetting (a DELETE): absent, numbers and settings gone, in no phase; still there. */
static void test_forget_marks_absent(void **state)
{
    (void)state;
    cm_metrics_t *m = cm_metrics_new();
    gw_rooms_t *t = gw_rooms_new();
    gw_room_t *r = gw_rooms_add(t, m, "ev");
    r->present = r->opened = true;
    r->wm = 5, r->n = 9, r->n_seen = 10, r->claimed = 3, r->s.gen = 7, r->pass_len = 4;
    r->cfg_raw = cm_xcalloc(2, sizeof(char *));
    r->cfg_raw[0] = cm_xstrdup("rate_per_minute");
    r->cfg_raw[1] = cm_xstrdup("60");
    r->ncfg_raw = 2;
    cm_gauge_set(r->g_phase[GW_PHASE_OPEN], 1);
    gw_rooms_forget(t, "ev");
    gw_rooms_forget(t, "unknown"); /* nothing */
    assert_false(r->present);
    assert_false(r->opened);
    assert_int_equal(r->wm + r->n + r->n_seen + r->claimed, 0);
    assert_int_equal(r->s.gen, 0);
    assert_int_equal(r->pass_len, 0);
    assert_null(r->cfg_raw);
    assert_int_equal(r->ncfg_raw, 0);
    assert_true(cm_gauge_value(r->g_phase[GW_PHASE_OPEN]) == 0);
    assert_null(gw_rooms_find(t, "ev"));
    assert_ptr_equal(gw_rooms_get(t, "ev"), r);
    gw_rooms_free(t);
    cm_metrics_free(m);
}

static void test_count_pass(void **state)
{
    (void)state;
    gw_rooms_t *t = gw_rooms_new();
    assert_int_equal(gw_rooms_count_pass(t), 1);
    assert_int_equal(gw_rooms_count_pass(t), 2);
    gw_rooms_free(t);
}

static void test_phase_names(void **state)
{
    (void)state;
    assert_string_equal(gw_phase_names[GW_PHASE_SCHEDULED], "scheduled");
    assert_string_equal(gw_phase_names[GW_PHASE_CLOSED], "closed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_then_find_while_present),
        cmocka_unit_test(test_rooms_keep_their_address),
        cmocka_unit_test(test_forget_marks_absent),
        cmocka_unit_test(test_count_pass),
        cmocka_unit_test(test_phase_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
