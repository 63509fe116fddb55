/*
 * Unit tests for reserve/rsv_avail.c's sold marks (the part below the snapshot's Redis
 * scan): an item noted sold is known sold for avail_max_age_ms and not after; items are
 * kept apart, and so are events; a new version of an event, or an invalidation, starts
 * without marks; avail_max_age_ms = 0 keeps none; indexes past the event's items are
 * ignored. The totals the stock feed publishes (rsv_avail_count): seats by status, pools
 * by their counts (an overdrawn counter as none left), the total from the catalogue.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_marks_per_item_and_event),
        cmocka_unit_test(test_new_version_and_invalidate_forget),
        cmocka_unit_test(test_marks_age_out),
        cmocka_unit_test(test_zero_age_keeps_none),
        cmocka_unit_test(test_totals_count_seats_and_pools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
