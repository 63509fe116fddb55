/*
 * Unit tests for rsv_catalog_normalise: the validation and expansion of inventory
 * bodies (docs/api.md "Inventory") before they reach Postgres; and for the places best
 * available reads (rsv_event_parse numbering rows, rsv_event_best_candidates).
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
