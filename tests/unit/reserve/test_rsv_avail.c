/*
 * Unit tests for reserve/rsv_avail.c's sold marks (the part below the snapshot's Redis
 * scan): an item noted sold is known sold for avail_max_age_ms and not after; items are
 * kept apart, and so are events; a new version of an event, or an invalidation, starts
 * without marks; avail_max_age_ms = 0 keeps none; indexes past the event's items are
 * ignored. The totals the stock feed publishes (rsv_avail_count): seats by status, pools
 * by their counts (an overdrawn counter as none left), the total from the catalogue.
 * Best available's turns (bounded per event, granted in order, the waiting told when the
 * worker stops) and refusals (kept per section and price level, the latest, answering
 * only requests begun before them).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rsv_avail.h"
#include "rsv_catalog.h"
#include "rsv_server.h"

static rsv_event_t event_of(const char *id, int64_t version, size_t nseats, size_t npools)
{
    rsv_event_t ev;
    memset(&ev, 0, sizeof(ev));
    snprintf(ev.id, sizeof(ev.id), "%s", id);
    ev.version = version;
    ev.nseats = nseats;
    ev.npools = npools;
    return ev;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_marks_per_item_and_event(void **state)
{
    (void)state;
    rsv_server_t *srv = calloc(1, sizeof(*srv));
    srv->cfg.avail_max_age_ms = 60000;
    rsv_avail_t *a = rsv_avail_new(srv);
    rsv_event_t ev = event_of("ev1", 1, 3, 2), other = event_of("ev2", 1, 3, 2);
    assert_false(rsv_avail_known_sold(a, &ev, 0));
    rsv_avail_note_sold(a, &ev, 1);
    rsv_avail_note_sold(a, &ev, 4); /* the second pool */
    assert_false(rsv_avail_known_sold(a, &ev, 0));
    assert_true(rsv_avail_known_sold(a, &ev, 1));
    assert_false(rsv_avail_known_sold(a, &ev, 3));
    assert_true(rsv_avail_known_sold(a, &ev, 4));
    assert_false(rsv_avail_known_sold(a, &other, 1)); /* another event's item 1 */
    /* past the event's items: nothing noted, nothing known */
    rsv_avail_note_sold(a, &ev, 5);
    assert_false(rsv_avail_known_sold(a, &ev, 5));
    rsv_avail_free(a);
    free(srv);
}

static void test_new_version_and_invalidate_forget(void **state)
{
    (void)state;
    rsv_server_t *srv = calloc(1, sizeof(*srv));
    srv->cfg.avail_max_age_ms = 60000;
    rsv_avail_t *a = rsv_avail_new(srv);
    rsv_event_t v1 = event_of("ev1", 1, 4, 0), v2 = event_of("ev1", 2, 4, 0);
    rsv_avail_note_sold(a, &v1, 2);
    assert_true(rsv_avail_known_sold(a, &v1, 2));
    assert_false(rsv_avail_known_sold(a, &v2, 2)); /* the marks were version 1's */
    assert_false(rsv_avail_known_sold(a, &v1, 2)); /* and are gone */
    rsv_avail_note_sold(a, &v2, 3);
    assert_true(rsv_avail_known_sold(a, &v2, 3));
    /* the same version with another number of items is another inventory */
    rsv_event_t grown = event_of("ev1", 2, 5, 0);
    assert_false(rsv_avail_known_sold(a, &grown, 3));
    rsv_avail_note_sold(a, &v2, 0);
    rsv_avail_invalidate(a, "ev1");
    assert_false(rsv_avail_known_sold(a, &v2, 0));
    rsv_avail_invalidate(a, "never-seen"); /* nothing to forget: fine */
    rsv_avail_free(a);
    free(srv);
}

static void test_marks_age_out(void **state)
{
    (void)state;
    rsv_server_t *srv = calloc(1, sizeof(*srv));
    srv->cfg.avail_max_age_ms = 30;
    rsv_avail_t *a = rsv_avail_new(srv);
    rsv_event_t ev = event_of("ev1", 1, 2, 0);
    rsv_avail_note_sold(a, &ev, 0);
    assert_true(rsv_avail_known_sold(a, &ev, 0));
    sleep_ms(60);
    assert_false(rsv_avail_known_sold(a, &ev, 0));
    rsv_avail_note_sold(a, &ev, 0); /* noted again: known again */
    assert_true(rsv_avail_known_sold(a, &ev, 0));
    rsv_avail_free(a);
    free(srv);
}

static void test_zero_age_keeps_none(void **state)
{
    (void)state;
    rsv_server_t *srv = calloc(1, sizeof(*srv));
    srv->cfg.avail_max_age_ms = 0;
    rsv_avail_t *a = rsv_avail_new(srv);
    rsv_event_t ev = event_of("ev1", 1, 2, 1);
    rsv_avail_note_sold(a, &ev, 0);
    assert_false(rsv_avail_known_sold(a, &ev, 0));
    rsv_avail_free(a);
    free(srv);
}

static void test_totals_count_seats_and_pools(void **state)
{
    (void)state;
    rsv_pool_t pools[2] = {{.id = "floor", .capacity = 100}, {.id = "pit", .capacity = 5}};
    rsv_event_t ev = event_of("ev1", 7, 5, 2);
    ev.pools = pools;
    const unsigned char status[5] = {0, 1, 2, 0, 1};  /* available, held, sold, … */
    const int64_t counts[2][2] = {{60, 15}, {-2, 3}}; /* pit: counter overdrawn by 2 */
    rsv_avail_totals_t t;
    rsv_avail_count(&ev, status, counts, &t);
    assert_int_equal(t.left, 2 + 60);
    assert_int_equal(t.held, 2 + 15 + 3);
    assert_int_equal(t.total, 5 + 100 + 5);
    assert_int_equal(t.version, 7);
    rsv_event_t empty = event_of("ev2", 1, 0, 0);
    rsv_avail_count(&empty, NULL, NULL, &t);
    assert_int_equal(t.left + t.held + t.total, 0);
}

/* Turns granted, in order: each callback records its number (err NULL) or -number. */
typedef struct turns {
    int got[8];
    int n;
} turns_t;

typedef struct turn_arg {
    turns_t *t;
    int id;
} turn_arg_t;

static void on_turn(const char *err, void *arg)
{
    turn_arg_t *ta = arg;
    ta->t->got[ta->t->n++] = err ? -ta->id : ta->id;
}

static void test_turns_are_bounded_and_granted_in_order(void **state)
{
    (void)state;
    rsv_server_t *srv = calloc(1, sizeof(*srv));
    srv->cfg.avail_max_age_ms = 1000;
    rsv_avail_t *a = rsv_avail_new(srv);
    rsv_event_t ev = event_of("ev1", 1, 4, 0), other = event_of("ev2", 1, 4, 0);
    turns_t t = {.n = 0};
    turn_arg_t args[6];
    for (int i = 0; i < 6; i++)
        args[i] = (turn_arg_t){.t = &t, .id = i + 1};
    rsv_avail_best_turn(a, &ev, 2, on_turn, &args[0]);
    rsv_avail_best_turn(a, &ev, 2, on_turn, &args[1]);
    rsv_avail_best_turn(a, &ev, 2, on_turn, &args[2]);    /* waits */
    rsv_avail_best_turn(a, &ev, 2, on_turn, &args[3]);    /* waits */
    rsv_avail_best_turn(a, &other, 2, on_turn, &args[4]); /* another event: its own turns */
    assert_int_equal(t.n, 3);
    assert_int_equal(t.got[0], 1);
    assert_int_equal(t.got[1], 2);
    assert_int_equal(t.got[2], 5);
    rsv_avail_best_done(a, &ev);
    assert_int_equal(t.n, 4);
    assert_int_equal(t.got[3], 3); /* in the order asked */
    rsv_avail_best_turn(a, &ev, 2, on_turn, &args[5]);
    assert_int_equal(t.n, 4); /* behind 4 */
    rsv_avail_free(a);        /* the worker stops: those waiting hear so */
    assert_int_equal(t.n, 6);
    assert_int_equal(t.got[4], -4);
    assert_int_equal(t.got[5], -6);
    free(srv);
}

static void test_refusals_answer_requests_begun_before_them(void **state)
{
    (void)state;
    rsv_server_t *srv = calloc(1, sizeof(*srv));
    srv->cfg.avail_max_age_ms = 1000;
    rsv_avail_t *a = rsv_avail_new(srv);
    rsv_event_t ev = event_of("ev1", 1, 4, 0);
    rsv_avail_refusal_t r = {.section = 0, .price = -1, .want = 4, .free = 3, .sent_ns = 100};
    rsv_avail_note_refusal(a, &ev, &r);
    const rsv_avail_refusal_t *f = rsv_avail_refusal(a, &ev, 0, -1, 99);
    assert_non_null(f);
    assert_int_equal(f->free, 3);
    assert_null(rsv_avail_refusal(a, &ev, 0, -1, 100)); /* begun as it was sent: no */
    assert_null(rsv_avail_refusal(a, &ev, 1, -1, 0));   /* another section */
    assert_null(rsv_avail_refusal(a, &ev, 0, 500, 0));  /* another price level */
    /* a later one of the same kind replaces it; an earlier one does not */
    r.want = 1, r.free = 0, r.sent_ns = 200;
    rsv_avail_note_refusal(a, &ev, &r);
    r.want = 2, r.free = 1, r.sent_ns = 150;
    rsv_avail_note_refusal(a, &ev, &r);
    f = rsv_avail_refusal(a, &ev, 0, -1, 99);
    assert_int_equal(f->want, 1);
    assert_int_equal(f->free, 0);
    /* five kinds: the oldest is forgotten */
    for (long sec = 1; sec <= 4; sec++) {
        r.section = sec, r.sent_ns = 300 + (uint64_t)sec;
        rsv_avail_note_refusal(a, &ev, &r);
    }
    assert_null(rsv_avail_refusal(a, &ev, 0, -1, 0));
    assert_non_null(rsv_avail_refusal(a, &ev, 4, -1, 0));
    /* a new version of the event starts without any */
    rsv_event_t v2 = event_of("ev1", 2, 4, 0);
    assert_null(rsv_avail_refusal(a, &v2, 4, -1, 0));
    rsv_avail_free(a);
    free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_marks_per_item_and_event),
        cmocka_unit_test(test_new_version_and_invalidate_forget),
        cmocka_unit_test(test_marks_age_out),
        cmocka_unit_test(test_zero_age_keeps_none),
        cmocka_unit_test(test_totals_count_seats_and_pools),
        cmocka_unit_test(test_turns_are_bounded_and_granted_in_order),
        cmocka_unit_test(test_refusals_answer_requests_begun_before_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
