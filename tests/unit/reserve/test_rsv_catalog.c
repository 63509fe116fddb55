/*
 * Unit tests for rsv_catalog_normalise: the validation and expansion of inventory
 * bodies (docs/api.md "Inventory") before they reach Postgres; and for the places best
 * available reads (rsv_event_parse numbering rows, rsv_event_best_candidates) and the
 * windows it weighs first (rsv_event_best_window: the best blocks in order, up to a size,
 * ties in place order).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rsv_catalog.h"

static json_t *normalise(const char *text, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *body = json_loads(text, 0, &jerr);
    assert_non_null(body);
    json_t *doc = rsv_catalog_normalise(body, err, errlen);
    json_decref(body);
    return doc;
}

static void compact_sections_expand_to_row_seat_ids(void **state)
{
    char err[256] = "";
    json_t *doc = normalise("{\"sections\":[{\"id\":\"A\",\"rows\":2,\"seats_per_row\":3,"
                            "\"price\":100}]}",
                            err, sizeof(err));
    assert_non_null(doc);
    json_t *seats = json_object_get(doc, "seats");
    assert_int_equal(json_array_size(seats), 6);
    assert_string_equal(json_string_value(json_array_get(json_array_get(seats, 0), 0)), "A-1-1");
    assert_string_equal(json_string_value(json_array_get(json_array_get(seats, 5), 0)), "A-2-3");
    assert_string_equal(json_string_value(json_array_get(json_array_get(seats, 5), 1)), "A");
    assert_int_equal(json_integer_value(json_array_get(json_array_get(seats, 5), 2)), 100);
    json_decref(doc);
}

static void defaults_fill_settings(void **state)
{
    char err[256] = "";
    json_t *doc = normalise("{\"pools\":[{\"id\":\"floor\",\"capacity\":500,\"price\":6000}]}", err,
                            sizeof(err));
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "currency")), "EUR");
    assert_int_equal(json_integer_value(json_object_get(doc, "hold_ttl_seconds")), 300);
    assert_int_equal(json_integer_value(json_object_get(doc, "max_hold_seconds")), 900);
    json_t *pool = json_array_get(json_object_get(doc, "pools"), 0);
    assert_string_equal(json_string_value(json_array_get(pool, 0)), "floor");
    assert_int_equal(json_integer_value(json_array_get(pool, 1)), 500);
    json_decref(doc);
}

static void explicit_seats_keep_their_section_and_price(void **state)
{
    char err[256] = "";
    json_t *doc = normalise("{\"seats\":[{\"id\":\"A-1\",\"section\":\"A\",\"price\":12000},"
                            "{\"id\":\"B-1\",\"section\":\"B\",\"price\":9000}],"
                            "\"currency\":\"USD\",\"hold_ttl_seconds\":1,\"max_per_buyer\":4}",
                            err, sizeof(err));
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "seats")), 2);
    assert_string_equal(json_string_value(json_object_get(doc, "currency")), "USD");
    assert_int_equal(json_integer_value(json_object_get(doc, "hold_ttl_seconds")), 1);
    assert_int_equal(json_integer_value(json_object_get(doc, "max_per_buyer")), 4);
    json_decref(doc);
}

static void expect_refused(const char *text, const char *needle)
{
    char err[256] = "";
    json_t *doc = normalise(text, err, sizeof(err));
    if (doc != NULL)
        fail_msg("accepted: %s", text);
    if (strstr(err, needle) == NULL)
        fail_msg("message '%s' does not mention '%s'", err, needle);
}

static void bad_inventories_are_refused_with_a_reason(void **state)
{
    expect_refused("{}", "needs seats");
    expect_refused("{\"seats\":\"A-1\"}", "seats must be an array");
    expect_refused("{\"seats\":[{\"id\":\"a/b\",\"section\":\"A\",\"price\":1}]}", "seat id");
    expect_refused("{\"seats\":[{\"id\":\"A-1\",\"section\":\"A\",\"price\":-1}]}", "price");
    expect_refused("{\"seats\":[{\"id\":\"A-1\",\"section\":\"A\",\"price\":1},"
                   "{\"id\":\"A-1\",\"section\":\"B\",\"price\":1}]}",
                   "appears twice");
    expect_refused("{\"sections\":[{\"id\":\"A\",\"rows\":0,\"seats_per_row\":3,\"price\":1}]}",
                   "rows");
    expect_refused("{\"pools\":[{\"id\":\"f\",\"capacity\":0,\"price\":1}]}", "capacity");
    expect_refused("{\"pools\":[{\"id\":\"f\",\"capacity\":\"10\",\"price\":1}]}", "capacity");
    expect_refused("{\"pools\":[{\"id\":\"f\",\"capacity\":10,\"price\":1}],\"currency\":\"eur\"}",
                   "currency");
    expect_refused("{\"pools\":[{\"id\":\"f\",\"capacity\":10,\"price\":1}],"
                   "\"hold_ttl_seconds\":600,\"max_hold_seconds\":60}",
                   "max_hold_seconds");
    expect_refused("{\"pools\":[{\"id\":\"f\",\"capacity\":10,\"price\":1}],"
                   "\"hold_ttl_seconds\":\"60\"}",
                   "hold_ttl_seconds");
}

static void a_seat_and_a_section_seat_with_one_id_collide(void **state)
{
    expect_refused("{\"seats\":[{\"id\":\"A-1-1\",\"section\":\"A\",\"price\":1}],"
                   "\"sections\":[{\"id\":\"A\",\"rows\":1,\"seats_per_row\":1,\"price\":1}]}",
                   "appears twice");
}

/* Element k of normalised seat i. */
static json_t *seat_field(json_t *doc, size_t i, size_t k)
{
    return json_array_get(json_array_get(json_object_get(doc, "seats"), i), k);
}

static void compact_sections_place_and_rank_front_middle_first(void **state)
{
    (void)state;
    char err[256] = "";
    json_t *doc = normalise("{\"sections\":[{\"id\":\"A\",\"rows\":2,\"seats_per_row\":4,"
                            "\"price\":100}]}",
                            err, sizeof(err));
    assert_non_null(doc);
    /* A-1-1 .. A-1-4 then A-2-1 ..: row name, position, rank */
    assert_string_equal(json_string_value(seat_field(doc, 0, 3)), "1");
    assert_int_equal(json_integer_value(seat_field(doc, 2, 4)), 3);
    assert_int_equal(json_integer_value(seat_field(doc, 0, 5)), 3);    /* an end of row 1 */
    assert_int_equal(json_integer_value(seat_field(doc, 1, 5)), 1);    /* its middle */
    assert_int_equal(json_integer_value(seat_field(doc, 2, 5)), 1);    /* the other middle */
    assert_int_equal(json_integer_value(seat_field(doc, 5, 5)), 2001); /* row 2's middle */
    json_decref(doc);
}

static void explicit_seats_carry_their_place_or_rank_by_list(void **state)
{
    (void)state;
    char err[256] = "";
    json_t *doc = normalise("{\"seats\":[{\"id\":\"X\",\"section\":\"A\",\"price\":1,"
                            "\"row\":\"r\",\"position\":7,\"rank\":42},"
                            "{\"id\":\"Y\",\"section\":\"A\",\"price\":1}]}",
                            err, sizeof(err));
    assert_non_null(doc);
    assert_string_equal(json_string_value(seat_field(doc, 0, 3)), "r");
    assert_int_equal(json_integer_value(seat_field(doc, 0, 4)), 7);
    assert_int_equal(json_integer_value(seat_field(doc, 0, 5)), 42);
    assert_true(json_is_null(seat_field(doc, 1, 3)));
    assert_true(json_is_null(seat_field(doc, 1, 4)));
    assert_int_equal(json_integer_value(seat_field(doc, 1, 5)), 2); /* second in the list */
    json_decref(doc);
}

static void bad_places_are_refused(void **state)
{
    (void)state;
    expect_refused("{\"seats\":[{\"id\":\"X\",\"section\":\"A\",\"price\":1,\"row\":\"r\"}]}",
                   "go together");
    expect_refused("{\"seats\":[{\"id\":\"X\",\"section\":\"A\",\"price\":1,\"position\":1}]}",
                   "go together");
    expect_refused("{\"seats\":[{\"id\":\"X\",\"section\":\"A\",\"price\":1,\"row\":\"r\","
                   "\"position\":0}]}",
                   "position");
    expect_refused("{\"seats\":[{\"id\":\"X\",\"section\":\"A\",\"price\":1,\"rank\":-1}]}",
                   "rank");
    expect_refused("{\"seats\":[{\"id\":\"X\",\"section\":\"A\",\"price\":1,"
                   "\"rank\":1000000001}]}",
                   "rank");
}

/* The loaded event's seats (section order, as LOAD_SQL gives them): rows named out of
 * order and a seat without a row. */
static const char LOADED[] =
    "{\"currency\":\"EUR\",\"seats\":["
    "[\"A-b2\",\"A\",100,\"b\",2,5],[\"A-a1\",\"A\",100,\"a\",1,1],"
    "[\"A-b1\",\"A\",200,\"b\",1,4],[\"A-x\",\"A\",100,null,null,9],"
    "[\"A-a2\",\"A\",100,\"a\",2,2],[\"B-a1\",\"B\",100,\"a\",1,1]],\"pools\":[]}";

static bool skip_a_a2(void *arg, size_t seat)
{
    const rsv_event_t *ev = arg;
    return strcmp(ev->seats[seat].id, "A-a2") == 0;
}

static void rows_are_numbered_by_first_appearance_and_seats_placed(void **state)
{
    (void)state;
    rsv_event_t *ev = rsv_event_parse("e", LOADED);
    assert_non_null(ev);
    long b2 = rsv_event_seat(ev, "A-b2"), a1 = rsv_event_seat(ev, "A-a1");
    long x = rsv_event_seat(ev, "A-x"), ba1 = rsv_event_seat(ev, "B-a1");
    assert_int_equal(ev->seats[b2].row, 1); /* row b first appears first */
    assert_int_equal(ev->seats[a1].row, 2);
    assert_int_equal(ev->seats[x].row, 0);
    assert_int_equal(ev->seats[ba1].row, 3); /* B's row a is another row */
    assert_int_equal(rsv_event_section(ev, "B"), 1);
    assert_int_equal(rsv_event_section(ev, "C"), -1);

    uint32_t out[8];
    const char *want[] = {"A-b1", "A-b2", "A-a1", "A-a2", "A-x"};
    size_t n = rsv_event_best_candidates(ev, 0, -1, NULL, NULL, out, 8);
    assert_int_equal(n, 5);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(ev->seats[out[i]].id, want[i]);
    /* a price level, a skip, a short buffer: the count is of every match */
    n = rsv_event_best_candidates(ev, 0, 100, skip_a_a2, ev, out, 2);
    assert_int_equal(n, 3);
    assert_string_equal(ev->seats[out[0]].id, "A-b2");
    assert_string_equal(ev->seats[out[1]].id, "A-a1");
    n = rsv_event_best_candidates(ev, -1, 100, NULL, NULL, out, 8);
    assert_int_equal(n, 5); /* any section */
    assert_string_equal(ev->seats[out[4]].id, "B-a1");
    rsv_event_unref(ev);
}

/* One row of ten seats, a row's middle best (ranks 9 8 7 3 1 2 4 7 8 9), and a seat with
 * no row; or every rank 1 (flat). */
static rsv_event_t *one_row(bool flat)
{
    static const int ranks[] = {9, 8, 7, 3, 1, 2, 4, 7, 8, 9};
    char doc[2048];
    int n = snprintf(doc, sizeof(doc), "{\"currency\":\"EUR\",\"seats\":[");
    for (int i = 0; i < 10; i++)
        n += snprintf(doc + n, sizeof(doc) - (size_t)n, "[\"S%d\",\"A\",100,\"r\",%d,%d],", i + 1,
                      i + 1, flat ? 1 : ranks[i]);
    snprintf(doc + n, sizeof(doc) - (size_t)n, "[\"X\",\"A\",100,null,null,0]],\"pools\":[]}");
    return rsv_event_parse("e", doc);
}

static bool all_usable(void *arg, size_t seat)
{
    (void)arg;
    (void)seat;
    return true;
}

static bool not_s5(void *arg, size_t seat)
{
    const rsv_event_t *ev = arg;
    return strcmp(ev->seats[seat].id, "S5") != 0;
}

static bool none_usable(void *arg, size_t seat)
{
    (void)arg;
    (void)seat;
    return false;
}

/* The window's seats as "S4 S5 …". */
static const char *window_ids(const rsv_event_t *ev, const uint32_t *out, size_t n)
{
    static char buf[256];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s", i ? " " : "",
                                 ev->seats[out[i]].id);
    return buf;
}

static void best_window_takes_the_best_blocks_in_order_up_to_its_size(void **state)
{
    (void)state;
    rsv_event_t *ev = one_row(false);
    uint32_t cand[16], out[16];
    size_t n = rsv_event_best_candidates(ev, 0, -1, NULL, NULL, cand, 16);
    assert_int_equal(n, 11);
    rsv_best_window_t w;
    /* pairs: S5-S6 (3), S4-S5 (4), S6-S7 (6): four seats once the third is in */
    rsv_event_best_window(ev, cand, n, 2, all_usable, NULL, 4, 64, out, &w);
    assert_string_equal(window_ids(ev, out, w.n), "S4 S5 S6 S7");
    assert_int_equal(w.best_at, 1); /* S5 */
    assert_int_equal(w.last_at, 2); /* S6, of S6-S7 */
    assert_int_equal(w.last_sum, 6);
    /* S5 not usable: S6-S7 (6), then S3-S4 (10); nothing across S5 */
    rsv_event_best_window(ev, cand, n, 2, not_s5, ev, 4, 64, out, &w);
    assert_string_equal(window_ids(ev, out, w.n), "S3 S4 S6 S7");
    assert_int_equal(w.best_at, 2);
    assert_int_equal(w.last_at, 0);
    assert_int_equal(w.last_sum, 10);
    /* at most one block: the best alone, whatever the size asked */
    rsv_event_best_window(ev, cand, n, 2, all_usable, NULL, 8, 1, out, &w);
    assert_string_equal(window_ids(ev, out, w.n), "S5 S6");
    assert_int_equal(w.last_at, 0);
    /* no block usable, or fewer candidates than wanted: no window */
    rsv_event_best_window(ev, cand, n, 2, none_usable, NULL, 4, 64, out, &w);
    assert_int_equal(w.n, 0);
    rsv_event_best_window(ev, cand, 1, 2, all_usable, NULL, 4, 64, out, &w);
    assert_int_equal(w.n, 0);
    /* the seat with no row is a block of one, adjacent to none (rank 0: the best) */
    rsv_event_best_window(ev, cand, n, 1, all_usable, NULL, 1, 64, out, &w);
    assert_string_equal(window_ids(ev, out, w.n), "X");
    rsv_event_best_window(ev, cand, n, 11, all_usable, NULL, 1, 64, out, &w);
    assert_int_equal(w.n, 0);
    rsv_event_unref(ev);
}

static void best_window_breaks_ties_in_place_order(void **state)
{
    (void)state;
    rsv_event_t *ev = one_row(true);
    uint32_t cand[16], out[16];
    size_t n = rsv_event_best_candidates(ev, 0, -1, NULL, NULL, cand, 16);
    rsv_best_window_t w;
    /* every pair adds up to 2: S1-S2, then S2-S3 */
    rsv_event_best_window(ev, cand, n, 2, all_usable, NULL, 3, 64, out, &w);
    assert_string_equal(window_ids(ev, out, w.n), "S1 S2 S3");
    assert_int_equal(w.best_at, 0);
    assert_int_equal(w.last_at, 1);
    assert_int_equal(w.last_sum, 2);
    /* a heap smaller than the blocks keeps the first ones in place order */
    rsv_event_best_window(ev, cand, n, 3, all_usable, NULL, 100, 2, out, &w);
    assert_string_equal(window_ids(ev, out, w.n), "S1 S2 S3 S4");
    rsv_event_unref(ev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(compact_sections_expand_to_row_seat_ids),
        cmocka_unit_test(defaults_fill_settings),
        cmocka_unit_test(explicit_seats_keep_their_section_and_price),
        cmocka_unit_test(bad_inventories_are_refused_with_a_reason),
        cmocka_unit_test(a_seat_and_a_section_seat_with_one_id_collide),
        cmocka_unit_test(compact_sections_place_and_rank_front_middle_first),
        cmocka_unit_test(explicit_seats_carry_their_place_or_rank_by_list),
        cmocka_unit_test(bad_places_are_refused),
        cmocka_unit_test(rows_are_numbered_by_first_appearance_and_seats_placed),
        cmocka_unit_test(best_window_takes_the_best_blocks_in_order_up_to_its_size),
        cmocka_unit_test(best_window_breaks_ties_in_place_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
