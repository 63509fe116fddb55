/*
 * Unit tests for gateway/gw_sched.c: a schedule of phases is validated (every 400 case
 * names its phase and field), written as the two Redis fields and loaded back, and the
 * phase in force at a time is the last one started by then.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_sched.h"

#define T10 1796119200000LL /* 2026-12-01T10:00:00Z */
#define T12 (T10 + 2 * 3600 * 1000LL)

static const char *two =
    "[{\"name\":\"presale\",\"starts_at\":\"2026-12-01T10:00:00Z\",\"rate_per_minute\":600,"
    "\"max_active\":50,\"requires_code\":true,\"text_before\":\"Presale at 10\","
    "\"text_during\":\"Code holders only <b>\"},"
    "{\"name\":\"general\",\"starts_at\":\"2026-12-01T12:00:00Z\",\"rate_per_minute\":3000}]";

static int parse(const char *json, gw_sched_t *s, char *err)
{
    json_t *doc = json_loads(json, JSON_DECODE_ANY, NULL);
    assert_non_null(doc);
    int rc = gw_sched_parse(doc, s, err, 256);
    json_decref(doc);
    return rc;
}

static void test_two_phases_parse(void **state)
{
    (void)state;
    gw_sched_t s;
    char err[256];
    assert_int_equal(parse(two, &s, err), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.p[0].name, "presale");
    assert_int_equal(s.p[0].starts_ms, T10);
    assert_int_equal(s.p[0].rate_per_minute, 600);
    assert_int_equal(s.p[0].max_active, 50);
    assert_true(s.p[0].requires_code);
    assert_string_equal(s.p[0].text_during, "Code holders only <b>");
    assert_false(s.p[1].requires_code);
    assert_int_equal(s.p[1].max_active, 0);
    assert_string_equal(s.p[1].text_after, "");
}

static void test_null_is_no_schedule(void **state)
{
    (void)state;
    gw_sched_t s;
    char err[256];
    assert_int_equal(parse("null", &s, err), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(parse("[]", &s, err), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(gw_sched_parse(NULL, &s, err, sizeof(err)), 0);
    assert_int_equal(s.n, 0);
}

static void expect_bad(const char *json, const char *words)
{
    gw_sched_t s;
    char err[256] = "";
    assert_int_equal(parse(json, &s, err), -1);
    assert_int_equal(s.n, 0);
    if (strstr(err, words) == NULL)
        fail_msg("\"%s\" lacks \"%s\"", err, words);
}

#define P(extra)                                                                                   \
    "{\"name\":\"a\",\"starts_at\":\"2026-12-01T10:00:00Z\",\"rate_per_minute\":60" extra "}"

static void test_bad_schedules(void **state)
{
    (void)state;
    expect_bad("{}", "phases must be an array");
    expect_bad("[1]", "phases[0] must be an object");
    expect_bad("[" P("") "," P("") "," P("") "," P("") "," P("") "," P("") "," P("") "," P(
                   "") "," P("") "]",
               "at most 8");
    expect_bad("[{\"name\":\"A\",\"starts_at\":\"2026-12-01T10:00:00Z\",\"rate_per_minute\":1}]",
               "phases[0].name");
    expect_bad("[{\"name\":\"\",\"starts_at\":\"2026-12-01T10:00:00Z\",\"rate_per_minute\":1}]",
               "phases[0].name");
    expect_bad("[{\"name\":\"a\",\"starts_at\":\"tomorrow\",\"rate_per_minute\":1}]",
               "phases[0].starts_at");
    expect_bad("[{\"name\":\"a\",\"starts_at\":\"2026-12-01T10:00:00Z\"}]",
               "phases[0].rate_per_minute");
    expect_bad("[{\"name\":\"a\",\"starts_at\":\"2026-12-01T10:00:00Z\",\"rate_per_minute\":0}]",
               "phases[0].rate_per_minute");
    expect_bad("[" P(",\"max_active\":-1") "]", "phases[0].max_active");
    expect_bad("[" P(",\"requires_code\":1") "]", "phases[0].requires_code");
    expect_bad("[" P(",\"text_during\":\"a\\nb\"") "]", "phases[0].text_during");
    expect_bad("[" P(",\"text_after\":7") "]", "phases[0].text_after");
    char long_text[GW_SCHED_TEXT_MAX + 200];
    int n = snprintf(long_text, sizeof(long_text), "[" P(",\"text_before\":\"%0*d\"") "]",
                     GW_SCHED_TEXT_MAX + 1, 0);
    assert_true(n > 0 && (size_t)n < sizeof(long_text));
    expect_bad(long_text, "phases[0].text_before");
    /* starts strictly increasing, names unique */
    expect_bad("[" P("") ",{\"name\":\"b\",\"starts_at\":\"2026-12-01T09:00:00Z\","
                         "\"rate_per_minute\":1}]",
               "phases[1].starts_at must be after");
    expect_bad("[" P("") ",{\"name\":\"a\",\"starts_at\":\"2026-12-01T11:00:00Z\","
                         "\"rate_per_minute\":1}]",
               "used twice");
}

static void test_fields_round_trip(void **state)
{
    (void)state;
    gw_sched_t s, back;
    char err[256];
    assert_int_equal(parse(two, &s, err), 0);
    char *phases, *phz;
    gw_sched_fields(&s, &phases, &phz);
    char want[128];
    snprintf(want, sizeof(want), "%lld,600,50,1,presale;%lld,3000,0,0,general", (long long)T10,
             (long long)T12);
    assert_string_equal(phz, want);
    gw_sched_load(&back, phases);
    assert_int_equal(back.n, 2);
    assert_memory_equal(&back, &s, sizeof(s));
    free(phases);
    free(phz);
    gw_sched_t none = {0};
    gw_sched_fields(&none, &phases, &phz);
    assert_string_equal(phases, "");
    assert_string_equal(phz, "");
    free(phases);
    free(phz);
    gw_sched_load(&back, "not json");
    assert_int_equal(back.n, 0);
    gw_sched_load(&back, NULL);
    assert_int_equal(back.n, 0);
}

static void test_phase_at_time(void **state)
{
    (void)state;
    gw_sched_t s;
    char err[256];
    int64_t next = -1;
    assert_int_equal(parse(two, &s, err), 0);
    assert_int_equal(gw_sched_at(&s, T10 - 1, &next), -1);
    assert_int_equal(next, T10);
    assert_int_equal(gw_sched_at(&s, T10, &next), 0);
    assert_int_equal(next, T12);
    assert_int_equal(gw_sched_at(&s, T12 - 1, NULL), 0);
    assert_int_equal(gw_sched_at(&s, T12, &next), 1);
    assert_int_equal(next, 0);
    assert_int_equal(gw_sched_find(&s, "general"), 1);
    assert_int_equal(gw_sched_find(&s, "nope"), -1);
    gw_sched_t none = {0};
    assert_int_equal(gw_sched_at(&none, T12, &next), -1);
    assert_int_equal(next, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_phases_parse), cmocka_unit_test(test_null_is_no_schedule),
        cmocka_unit_test(test_bad_schedules),    cmocka_unit_test(test_fields_round_trip),
        cmocka_unit_test(test_phase_at_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
