/*
 * test_cm_reload — the configuration reloader and its cells, without a server: a small
 * table, a real file rewritten between rounds, cm_reload_trigger for SIGHUP, and
 * cm_reload_wait to know a round ended (no sleeps). A live key is taken, a restart key
 * keeps its running value, a file that does not load changes nothing, apply's refusal
 * keeps the old snapshot, and a replaced cell value stays readable until the cell goes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cm_config.h"
#include "cm_log.h"
#include "cm_reload.h"

typedef struct cfg {
    char *level;
    int64_t port;
    char *secret;
} cfg_t;

static const cm_config_opt_t table[] = {
    {"level", CM_CFG_STR, offsetof(cfg_t, level), "info", 0, 0, "live"},
    {"port", CM_CFG_INT, offsetof(cfg_t, port), "80", 1, 65535, "restart"},
    {"secret", CM_CFG_STR, offsetof(cfg_t, secret), NULL, 0, 0, "masked"},
};
#define N (sizeof(table) / sizeof(table[0]))

static const char *const live[] = {"level", NULL};
static const char *const secret[] = {"secret", NULL};

static char path[64];
static int applied;
static bool refuse;

static void write_conf(const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int check(const void *p, char *err, size_t errlen)
{
    const cfg_t *c = p;
    if (strcmp(c->level, "bogus") == 0) {
        snprintf(err, errlen, "level: bogus");
        return -1;
    }
    return 0;
}

static int apply(void *arg, const void *p, char *err, size_t errlen)
{
    (void)arg;
    (void)p;
    if (refuse) {
        snprintf(err, errlen, "refused");
        return -1;
    }
    applied++;
    return 0;
}

/* One SIGHUP round, waited for. */
static void round_trip(void)
{
    uint64_t before = cm_reload_rounds();
    cm_reload_trigger();
    assert_true(cm_reload_wait(before, 5000));
}

static void test_reload_config(void **state)
{
    (void)state;
    strcpy(path, "/tmp/test_cm_reload.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_conf("level = info\nport = 8080\nsecret = hunter2-hunter2\n");
    char *argv[] = {"prog", "--config", path};
    cfg_t start = {0};
    char err[256];
    assert_int_equal(
        cm_config_load(table, N, &start, NULL, 3, argv, NULL, 0, NULL, err, sizeof(err)),
        CM_CONFIG_OK);
    cm_reload_config_spec_t spec = {"test", table, N,    sizeof(cfg_t), NULL,
                                    3,      argv,  live, secret,        check};
    cm_reload_config_t *rc = cm_reload_config_new(&spec, &start);
    cm_config_free(table, N, &start); /* the reloader holds its own copy */
    assert_int_equal(cm_reload_config_start(rc, apply, NULL), 0);

    const cfg_t *first = cm_reload_config_current(rc);
    write_conf("level = debug\nport = 9090\nsecret = hunter2-hunter2\n");
    round_trip();
    const cfg_t *now = cm_reload_config_current(rc);
    assert_string_equal(now->level, "debug"); /* live */
    assert_int_equal(now->port, 8080);        /* restart: the running value */
    assert_int_equal(applied, 1);
    assert_string_equal(first->level, "info"); /* the old snapshot is retired, not freed */

    write_conf("level = debug\nunknown = 1\n");
    round_trip();
    assert_ptr_equal(cm_reload_config_current(rc), now);
    write_conf("level = bogus\n");
    round_trip();
    assert_ptr_equal(cm_reload_config_current(rc), now);
    refuse = true;
    write_conf("level = warn\n");
    round_trip();
    assert_ptr_equal(cm_reload_config_current(rc), now);
    assert_int_equal(applied, 1);

    json_t *j = cm_reload_config_json(rc);
    char *text = json_dumps(j, JSON_SORT_KEYS);
    assert_null(strstr(text, "hunter2"));
    assert_non_null(strstr(text, "\"secret\": \"***\""));
    assert_non_null(strstr(text, "\"port\": 8080"));
    free(text);
    json_decref(j);
    cm_reload_config_free(rc);
    unlink(path);
}

static int freed;

static void count_free(void *v, void *ctx)
{
    (void)ctx;
    free(v);
    freed++;
}

static void test_cell(void **state)
{
    (void)state;
    cm_reload_cell_t *c = cm_reload_cell_new(strdup("one"), count_free, NULL);
    const char *old = cm_reload_cell_get(c);
    cm_reload_cell_set(c, strdup("two"));
    assert_string_equal(cm_reload_cell_get(c), "two");
    assert_string_equal(old, "one"); /* still readable by whoever held it */
    assert_int_equal(freed, 0);
    cm_reload_cell_free(c);
    assert_int_equal(freed, 2);
    assert_null(cm_reload_cell_get(NULL));
    cm_reload_cell_free(NULL);
}

int main(void)
{
    cm_log_init("test_cm_reload", CM_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cell),
        cmocka_unit_test(test_reload_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
