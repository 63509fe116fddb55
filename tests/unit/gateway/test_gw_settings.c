/*
 * Unit tests for gateway/gw_settings.c: PUT/PATCH bodies are validated field by field
 * (400 material never reaches Redis), defaults fill a PUT, and the Redis hash form
 * converts back to what docs/api.md shows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gw_settings.h"

static int parse_with(const char *json, bool partial, bool loopback_http, gw_setting_kv_t *kv,
                      char *err)
{
    json_error_t je;
    json_t *doc = json_loads(json, 0, &je);
    assert_non_null(doc);
    int n = gw_settings_parse(doc, partial, loopback_http, kv, err, 256);
    json_decref(doc);
    return n;
}

static int parse(const char *json, bool partial, gw_setting_kv_t *kv, char *err)
{
    return parse_with(json, partial, false, kv, err);
}

static const char *value_of(const gw_setting_kv_t *kv, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(kv[i].name, name) == 0)
            return kv[i].value;
    }
    return NULL;
}

static void test_put_fills_defaults(void **state)
{
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = parse("{\"rate_per_minute\":6000,\"unknown\":1}", false, kv, err);
    assert_true(n > 5);
    assert_string_equal(value_of(kv, n, "rate_per_minute"), "6000");
    assert_string_equal(value_of(kv, n, "max_active"), "0");
    assert_string_equal(value_of(kv, n, "paused"), "0");
    assert_string_equal(value_of(kv, n, "mode"), "random_at_open");
    assert_string_equal(value_of(kv, n, "admission_ttl_seconds"), "600");
    assert_string_equal(value_of(kv, n, "opens_at"), "");
    assert_string_equal(value_of(kv, n, "handoff"), "fragment");
    assert_string_equal(value_of(kv, n, "pow"), "1"); /* gw_admin: pow_new_rooms decides */
    assert_null(value_of(kv, n, "unknown"));
}

/* pow: a boolean; a room saved before the field existed (no "pow" in its hash) has it off. */
static void test_pow(void **state)
{
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = parse("{\"pow\":false}", true, kv, err);
    assert_int_equal(n, 1);
    assert_string_equal(value_of(kv, n, "pow"), "0");
    assert_int_equal(parse("{\"pow\":1}", true, kv, err), -1);
    assert_non_null(strstr(err, "pow"));
    gw_settings_t s;
    gw_settings_defaults(&s);
    assert_false(s.pow);
    gw_settings_set(&s, "pow", "1");
    assert_true(s.pow);
    json_t *o = gw_settings_json(&s);
    assert_true(json_is_true(json_object_get(o, "pow")));
    json_decref(o);
}

/* docs/api.md v1.1: the admission token goes to https only; plain http to loopback on request. */
static void test_redirect_url_and_handoff(void **state)
{
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = parse("{\"redirect_url\":\"https://shop.example/buy?x=1\",\"handoff\":\"post\"}", true,
                  kv, err);
    assert_int_equal(n, 2);
    assert_string_equal(value_of(kv, n, "handoff"), "post");
    const char *plain = "{\"redirect_url\":\"http://127.0.0.1:8080/shop\"}";
    assert_int_equal(parse(plain, true, kv, err), -1);
    assert_non_null(strstr(err, "https://"));
    assert_int_equal(parse_with(plain, true, true, kv, err), 1);
    assert_int_equal(parse_with("{\"redirect_url\":\"http://shop.example/\"}", true, true, kv, err),
                     -1);
    assert_int_equal(parse("{\"redirect_url\":\"https://shop.example/#x\"}", true, kv, err), -1);
    assert_int_equal(parse("{\"handoff\":\"query\"}", true, kv, err), -1);
    assert_non_null(strstr(err, "handoff"));

    gw_settings_t s;
    gw_settings_defaults(&s);
    assert_false(s.handoff_post);
    gw_settings_set(&s, "handoff", "post");
    assert_true(s.handoff_post);
    json_t *o = gw_settings_json(&s);
    assert_string_equal(json_string_value(json_object_get(o, "handoff")), "post");
    json_decref(o);
}

/* dpop: a boolean; a PUT without it binds (the gateway may say otherwise: gw_admin); a
 * room hash without the field (older than it) does not. */
static void test_dpop(void **state)
{
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = parse("{\"rate_per_minute\":60}", false, kv, err);
    assert_string_equal(value_of(kv, n, "dpop"), "1");
    n = parse("{\"dpop\":false}", true, kv, err);
    assert_int_equal(n, 1);
    assert_string_equal(value_of(kv, n, "dpop"), "0");
    assert_int_equal(parse("{\"dpop\":\"yes\"}", true, kv, err), -1);
    assert_non_null(strstr(err, "dpop"));
    gw_settings_t s;
    gw_settings_defaults(&s);
    assert_false(s.dpop);
    gw_settings_set(&s, "dpop", "1");
    assert_true(s.dpop);
    json_t *o = gw_settings_json(&s);
    assert_true(json_is_true(json_object_get(o, "dpop")));
    json_decref(o);
}

/* The stock: a room follows it unless told not to (also a hash saved before the field
 * existed); show_left is off and the choosing time 60 s unless set. */
static void test_stock(void **state)
{
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = parse("{\"rate_per_minute\":60}", false, kv, err);
    assert_string_equal(value_of(kv, n, "stock_aware"), "1");
    assert_string_equal(value_of(kv, n, "show_left"), "0");
    assert_string_equal(value_of(kv, n, "stock_decide_seconds"), "60");
    n = parse("{\"stock_aware\":false,\"show_left\":true,\"stock_decide_seconds\":5}", true, kv,
              err);
    assert_int_equal(n, 3);
    assert_string_equal(value_of(kv, n, "stock_aware"), "0");
    assert_string_equal(value_of(kv, n, "show_left"), "1");
    assert_string_equal(value_of(kv, n, "stock_decide_seconds"), "5");
    gw_settings_t s;
    gw_settings_defaults(&s);
    assert_true(s.stock_aware);
    assert_false(s.show_left);
    assert_int_equal(s.stock_decide_seconds, 60);
    gw_settings_set(&s, "stock_aware", "0");
    gw_settings_set(&s, "show_left", "1");
    gw_settings_set(&s, "stock_decide_seconds", "9");
    json_t *o = gw_settings_json(&s);
    assert_true(json_is_false(json_object_get(o, "stock_aware")));
    assert_true(json_is_true(json_object_get(o, "show_left")));
    assert_int_equal(json_integer_value(json_object_get(o, "stock_decide_seconds")), 9);
    json_decref(o);
}

static void test_put_requires_rate(void **state)
{
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    assert_int_equal(parse("{\"max_active\":5}", false, kv, err), -1);
    assert_non_null(strstr(err, "rate_per_minute"));
}

static void test_patch_only_given_fields(void **state)
{
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = parse("{\"paused\":true,\"opens_at\":\"2026-12-01T10:00:00Z\"}", true, kv, err);
    assert_int_equal(n, 2);
    assert_string_equal(value_of(kv, n, "paused"), "1");
    assert_string_equal(value_of(kv, n, "opens_at"), "1796119200000");
    n = parse("{\"closes_at\":null}", true, kv, err);
    assert_int_equal(n, 1);
    assert_string_equal(value_of(kv, n, "closes_at"), "");
    assert_int_equal(parse("{\"nothing\":1}", true, kv, err), -1);
}

static void test_bad_values(void **state)
{
    static const char *const bad[] = {
        "{\"rate_per_minute\":0}",
        "{\"rate_per_minute\":-5}",
        "{\"rate_per_minute\":\"100\"}",
        "{\"rate_per_minute\":1.5}",
        "{\"max_active\":-1}",
        "{\"paused\":\"yes\"}",
        "{\"paused\":1}",
        "{\"mode\":\"lottery\"}",
        "{\"opens_at\":\"tomorrow\"}",
        "{\"opens_at\":12345}",
        "{\"admission_ttl_seconds\":1}",
        "{\"redirect_url\":\"javascript:alert(1)\"}",
        "{\"redirect_url\":\"https://x/<script>\"}",
        "{\"redirect_url\":\"http://shop.example/buy\"}",
        "{\"handoff\":1}",
        "{\"noshow_grace_seconds\":0}",
        "{\"max_prequeue\":0}",
        "{\"max_prequeue\":\"many\"}",
        "{\"stock_aware\":1}",
        "{\"show_left\":\"yes\"}",
        "{\"stock_decide_seconds\":0}",
        "{\"stock_decide_seconds\":3601}",
    };
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (parse(bad[i], true, kv, err) != -1)
            fail_msg("accepted %s", bad[i]);
        assert_true(strlen(err) > 0);
    }
}

static void test_redis_form_round_trip(void **state)
{
    gw_settings_t s;
    gw_settings_defaults(&s);
    gw_settings_set(&s, "rate_per_minute", "1200");
    gw_settings_set(&s, "max_active", "50");
    gw_settings_set(&s, "paused", "1");
    gw_settings_set(&s, "mode", "fifo");
    gw_settings_set(&s, "opens_at", "1796119200000");
    gw_settings_set(&s, "gen", "123456789");
    gw_settings_set(&s, "junk", "x");
    assert_int_equal(s.rate_per_minute, 1200);
    assert_int_equal(s.max_active, 50);
    assert_true(s.paused);
    assert_true(s.fifo);
    assert_true(s.gen == 123456789u);
    json_t *o = gw_settings_json(&s);
    assert_string_equal(json_string_value(json_object_get(o, "opens_at")),
                        "2026-12-01T10:00:00.000Z");
    assert_true(json_is_null(json_object_get(o, "closes_at")));
    assert_string_equal(json_string_value(json_object_get(o, "mode")), "fifo");
    assert_true(json_is_true(json_object_get(o, "paused")));
    json_decref(o);
}

/* A PATCH of the schedule alone is a change (gw_sched parses it); the phase in force rules
 * the rate and max_active, the room's own fields before the first phase and without one;
 * the hash's `phases` field loads the schedule and shows in the JSON. */
static void test_phases(void **state)
{
    (void)state;
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    assert_int_equal(parse("{\"phases\":null}", true, kv, err), 0);
    assert_int_equal(parse("{\"nothing\":1}", true, kv, err), -1);
    gw_settings_t s;
    gw_settings_defaults(&s);
    gw_settings_set(&s, "rate_per_minute", "60");
    gw_settings_set(&s, "max_active", "7");
    assert_int_equal(gw_settings_rate_at(&s, 1796119200000LL), 60);
    gw_settings_set(&s, "phases",
                    "[{\"name\":\"presale\",\"starts_at\":\"2026-12-01T10:00:00Z\","
                    "\"rate_per_minute\":600,\"max_active\":50,\"requires_code\":true}]");
    assert_int_equal(s.sched.n, 1);
    assert_int_equal(gw_settings_rate_at(&s, 1796119200000LL - 1), 60);
    assert_int_equal(gw_settings_max_active_at(&s, 1796119200000LL - 1), 7);
    assert_int_equal(gw_settings_rate_at(&s, 1796119200000LL), 600);
    assert_int_equal(gw_settings_max_active_at(&s, 1796119200000LL), 50);
    json_t *j = gw_settings_json(&s);
    json_t *ph = json_object_get(j, "phases");
    assert_int_equal(json_array_size(ph), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ph, 0), "name")),
                        "presale");
    json_decref(j);
    gw_settings_set(&s, "phases", "");
    assert_int_equal(s.sched.n, 0);
}

/* The room's look: colours "#rrggbb" only (kept in lower case), the logo an allowed URL,
 * the title plain text of bounded length; null unsets; anything else is a 400. */
static void test_brand(void **state)
{
    (void)state;
    gw_setting_kv_t kv[GW_SETTINGS_MAX_FIELDS];
    char err[256];
    int n = parse("{\"brand_color\":\"#FFCC00\",\"brand_background\":\"#0a0b0c\","
                  "\"brand_title\":\"Summer </script> tour\","
                  "\"brand_logo_url\":\"https://cdn.example.com/logo.png\"}",
                  true, kv, err);
    assert_int_equal(n, 4);
    assert_string_equal(value_of(kv, n, "brand_color"), "#ffcc00");
    assert_string_equal(value_of(kv, n, "brand_background"), "#0a0b0c");
    assert_string_equal(value_of(kv, n, "brand_title"), "Summer </script> tour");
    assert_string_equal(value_of(kv, n, "brand_logo_url"), "https://cdn.example.com/logo.png");
    n = parse("{\"brand_color\":null,\"brand_logo_url\":null,\"brand_title\":null}", true, kv, err);
    assert_int_equal(n, 3);
    assert_string_equal(value_of(kv, n, "brand_color"), "");
    static const char *const bad[] = {
        "{\"brand_color\":\"red\"}",
        "{\"brand_color\":\"#fff\"}",
        "{\"brand_color\":\"#ffcc00;}body{background:url(x)}\"}",
        "{\"brand_background\":\"url(https://x.example/a)\"}",
        "{\"brand_color\":1}",
        "{\"brand_logo_url\":\"javascript:alert(1)\"}",
        "{\"brand_logo_url\":\"http://cdn.example.com/logo.png\"}",
        "{\"brand_logo_url\":\"https://cdn.example.com/a\\\"b\"}",
        "{\"brand_title\":\"line\\nbreak\"}",
        "{\"brand_title\":\"0123456789012345678901234567890123456789012345678901234567890123"
        "456789012345678901\"}",
        "{\"brand_title\":true}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i], true, kv, err) != -1)
            fail_msg("took %s", bad[i]);
        assert_non_null(strstr(err, "brand_"));
    }
    gw_settings_t s;
    gw_settings_defaults(&s);
    gw_settings_set(&s, "brand_color", "#ffcc00");
    gw_settings_set(&s, "brand_title", "Tour");
    json_t *o = gw_settings_json(&s);
    assert_string_equal(json_string_value(json_object_get(o, "brand_color")), "#ffcc00");
    assert_string_equal(json_string_value(json_object_get(o, "brand_title")), "Tour");
    assert_true(json_is_null(json_object_get(o, "brand_logo_url")));
    json_decref(o);
    gw_page_brand_t b;
    gw_settings_brand(&s, &b);
    assert_string_equal(b.color, "#ffcc00");
    assert_string_equal(b.background, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_fills_defaults),
        cmocka_unit_test(test_dpop),
        cmocka_unit_test(test_stock),
        cmocka_unit_test(test_pow),
        cmocka_unit_test(test_phases),
        cmocka_unit_test(test_put_requires_rate),
        cmocka_unit_test(test_patch_only_given_fields),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_redis_form_round_trip),
        cmocka_unit_test(test_redirect_url_and_handoff),
        cmocka_unit_test(test_brand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
