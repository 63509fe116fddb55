/*
 * Unit tests for gateway/gw_admin.c below the HTTP layer: the "stats" object of a room
 * (each number from its field, the queue from the numbers and the pre-queue, the ETA at
 * the room's rate, null when the room does not move) and a PUT without "pow" taking the
 * gateway's pow_new_rooms.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "gw_admin.h"

static gw_room_t *room_new(void)
{
    gw_room_t *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    strcpy(r->event, "ev1");
    r->s.rate_per_minute = 600; /* 10 a second */
    r->n = 100;
    r->wm = 40;
    r->prequeue = 5;
    r->claimed = 31;
    r->active = 12;
    r->noshows = 3;
    r->join_rate = 2.5;
    r->claim_rate = 1.25;
    r->pass_rate = 0.5;
    r->opened = true;
    return r;
}

static int64_t int_of(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v))
        fail_msg("%s is not an integer", k);
    return (int64_t)json_integer_value(v);
}

static void test_stats_fields(void **state)
{
    (void)state;
    gw_room_t *r = room_new();
    json_t *s = gw_admin_stats_json(r);
    assert_int_equal(int_of(s, "queue_size"), 65); /* 100 - 40 numbered, 5 before them */
    assert_int_equal(int_of(s, "admitted_total"), 31);
    assert_int_equal(int_of(s, "active"), 12);
    assert_int_equal(int_of(s, "watermark"), 40);
    assert_int_equal(int_of(s, "numbers_issued"), 100);
    assert_int_equal(int_of(s, "prequeue_size"), 5);
    assert_int_equal(int_of(s, "noshows"), 3);
    assert_true(json_real_value(json_object_get(s, "joins_per_second")) == 2.5);
    assert_true(json_real_value(json_object_get(s, "admissions_per_second")) == 1.25);
    assert_true(json_real_value(json_object_get(s, "passes_per_second")) == 0.5);
    assert_int_equal(int_of(s, "eta_last_seconds"), 7); /* 65 at 10 a second, rounded */
    assert_true(json_is_true(json_object_get(s, "opened")));
    /* the stock: null while unknown, the advance's figures once known */
    assert_true(json_is_null(json_object_get(s, "stock_left")));
    assert_true(json_is_null(json_object_get(s, "stock_held")));
    assert_int_equal(json_object_size(s), 14);
    json_decref(s);
    r->stock_known = true;
    r->stock_left = 0;
    r->stock_held = 7;
    s = gw_admin_stats_json(r);
    assert_int_equal(int_of(s, "stock_left"), 0);
    assert_int_equal(int_of(s, "stock_held"), 7);
    json_decref(s);
    free(r);
}

static void test_stats_when_nothing_moves(void **state)
{
    (void)state;
    gw_room_t *r = room_new();
    r->s.paused = true;
    json_t *s = gw_admin_stats_json(r);
    assert_true(json_is_null(json_object_get(s, "eta_last_seconds")));
    json_decref(s);
    r->s.paused = false;
    r->s.rate_per_minute = 0;
    r->opened = false;
    s = gw_admin_stats_json(r);
    assert_true(json_is_null(json_object_get(s, "eta_last_seconds")));
    assert_true(json_is_false(json_object_get(s, "opened")));
    json_decref(s);
    /* the watermark past every number: only the pre-queue waits */
    r->s.rate_per_minute = 60;
    r->wm = 120;
    s = gw_admin_stats_json(r);
    assert_int_equal(int_of(s, "queue_size"), 5);
    assert_int_equal(int_of(s, "eta_last_seconds"), 5);
    json_decref(s);
    free(r);
}

static const char *value_of(const gw_setting_kv_t *kv, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(kv[i].name, name) == 0)
            return kv[i].value;
    return NULL;
}

static void test_pow_default_of_a_put(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:i}", "rate_per_minute", 60);
    for (int on = 0; on < 2; on++) {
        gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
        char err[256];
        int n = gw_settings_parse(body, false, false, kv, err, sizeof(err));
        assert_true(n > 0);
        char rate[GW_URL_MAX];
        strcpy(rate, value_of(kv, n, "rate_per_minute"));
        gw_admin_pow_default(kv, n, on);
        assert_non_null(value_of(kv, n, "pow"));
        assert_string_equal(value_of(kv, n, "pow"), on ? "1" : "0");
        assert_string_equal(value_of(kv, n, "rate_per_minute"), rate); /* the rest as parsed */
    }
    json_decref(body);
    /* only the n fields given are looked at */
    gw_setting_kv_t two[2] = {{.name = "rate_per_minute", .value = "60"}, {.name = "pow"}};
    gw_admin_pow_default(two, 1, true);
    assert_string_equal(two[1].value, "");
    assert_string_equal(two[0].value, "60");
    gw_admin_pow_default(two, 2, true);
    assert_string_equal(two[1].value, "1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_fields),
        cmocka_unit_test(test_stats_when_nothing_moves),
        cmocka_unit_test(test_pow_default_of_a_put),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
