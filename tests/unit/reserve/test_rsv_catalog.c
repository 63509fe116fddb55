/*
 * Unit tests for rsv_catalog_normalise: the validation and expansion of inventory
 * bodies (docs/api.md "Inventory") before they reach Postgres.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(compact_sections_expand_to_row_seat_ids),
        cmocka_unit_test(defaults_fill_settings),
        cmocka_unit_test(explicit_seats_keep_their_section_and_price),
        cmocka_unit_test(bad_inventories_are_refused_with_a_reason),
        cmocka_unit_test(a_seat_and_a_section_seat_with_one_id_collide),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
