/*
 * Unit tests for loadgen/sim/sim_scenario.c: every scenario in loadgen/scenarios loads;
 * bad files are refused with a message naming the key.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_scenario.h"

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/sim-scenario-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void expect_error(const char *text, const char *needle)
{
    char err[256] = "";
    char *path = write_tmp(text);
    sim_scenario_t *s = sim_scenario_load(path, err, sizeof(err));
    unlink(path);
    if (s != NULL || strstr(err, needle) == NULL)
        fail_msg("expected an error naming '%s', got %s '%s'", needle, s ? "success" : "", err);
}

#define BASE                                                                                       \
    "\"name\":\"t\",\"fans\":10,\"room\":{},\"inventory\":{\"sections\":[{\"id\":\"A\",\"rows\":"  \
    "2,\"seats_per_row\":3,\"price\":5}]}"

static void test_shipped_scenarios_load(void **state)
{
    (void)state;
    DIR *d = opendir(SCENARIO_DIR);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        char path[512], err[256] = "";
        snprintf(path, sizeof(path), "%s/%s", SCENARIO_DIR, e->d_name);
        sim_scenario_t *s = sim_scenario_load(path, err, sizeof(err));
        if (s == NULL)
            fail_msg("%s: %s", path, err);
        assert_true(s->nseats + s->npools > 0);
        sim_scenario_free(s);
        n++;
    }
    closedir(d);
    assert_true(n >= 8);
}

static void test_expansion(void **state)
{
    (void)state;
    char err[256];
    char *path = write_tmp("{" BASE ",\"seats_per_buyer\":{\"min\":1,\"max\":2}}");
    sim_scenario_t *s = sim_scenario_load(path, err, sizeof(err));
    unlink(path);
    assert_non_null(s);
    assert_int_equal(s->nseats, 6);
    assert_string_equal(s->seats[0].id, "A-1-1");
    assert_string_equal(s->seats[5].id, "A-2-3");
    assert_int_equal(s->seats[5].row, 2);
    assert_int_equal(s->seats_max, 2);
    assert_int_equal(s->arrival, ARR_BURST);
    assert_true(s->done_when_lost == 0.0); /* nobody says "I'm done" unless told */
    sim_scenario_free(s);
    path = write_tmp("{" BASE ",\"behaviours\":{\"done_when_lost\":0.8}}");
    s = sim_scenario_load(path, err, sizeof(err));
    unlink(path);
    assert_non_null(s);
    assert_true(s->done_when_lost == 0.8);
    sim_scenario_free(s);
}

static void test_sections_and_best_share(void **state)
{
    (void)state;
    char err[256];
    char *path = write_tmp("{" BASE ",\"choice\":{\"best_share\":0.25}}");
    sim_scenario_t *s = sim_scenario_load(path, err, sizeof(err));
    unlink(path);
    assert_non_null(s);
    assert_true(s->best_share == 0.25);
    assert_int_equal(s->nsections, 1);
    assert_string_equal(s->sections[0].id, "A");
    assert_int_equal(s->sections[0].first, 0);
    assert_int_equal(s->sections[0].last, 5);
    assert_int_equal(s->seats[5].section, 0);
    sim_scenario_free(s);
    path = write_tmp("{" BASE ",\"choice\":{}}");
    s = sim_scenario_load(path, err, sizeof(err));
    unlink(path);
    assert_non_null(s);
    assert_true(s->best_share == 0.0); /* nobody asks for best available unless told */
    sim_scenario_free(s);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("{", "");
    expect_error("[]", "JSON object");
    expect_error("{" BASE ",\"bogus\":1}", "bogus");
    expect_error("{" BASE ",\"behaviours\":{\"vanish_holdin\":0.1}}", "vanish_holdin");
    expect_error("{" BASE ",\"behaviours\":{\"vanish_holding\":2}}", "vanish_holding");
    expect_error("{" BASE ",\"behaviours\":{\"done_when_lost\":1.5}}", "done_when_lost");
    expect_error("{\"name\":\"t\",\"fans\":0,\"room\":{},\"inventory\":{}}", "fans");
    expect_error("{\"name\":\"a b\",\"fans\":1,\"room\":{},\"inventory\":{}}", "name");
    expect_error("{\"name\":\"t\",\"fans\":1,\"room\":{},\"inventory\":{}}", "neither seats");
    expect_error("{" BASE ",\"arrival\":{\"profile\":\"prequeue\"}}", "prequeue_fans");
    expect_error("{" BASE ",\"client\":{\"src_base\":\"10.0.0.1\"}}", "loopback");
    expect_error("{" BASE ",\"operator\":[{\"patch\":{}}]}", "at_s");
    expect_error("{" BASE ",\"seats_per_buyer\":11}", "seats_per_buyer");
    expect_error("{" BASE ",\"choice\":{\"best_share\":2}}", "best_share");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_scenarios_load),
        cmocka_unit_test(test_expansion),
        cmocka_unit_test(test_sections_and_best_share),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
