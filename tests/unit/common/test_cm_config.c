/*
 * Unit tests for common/cm_config.c: defaults, the file → environment → argv order,
 * bounds and type errors with their source, unknown keys, quoting, positional
 * arguments and --help. Config files are written to a mkstemp file per test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cm_config.h"
#include "cm_version.h"

#define PREFIX "CMTEST_"

typedef struct test_cfg {
    char *host;
    int64_t port;
    bool verbose;
    char *name;
    int64_t workers;
} test_cfg_t;

static const cm_config_opt_t table[] = {
    {"host", CM_CFG_STR, offsetof(test_cfg_t, host), "127.0.0.1", 0, 0, "listen address"},
    {"port", CM_CFG_INT, offsetof(test_cfg_t, port), "8443", 1, 65535, "listen port"},
    {"verbose", CM_CFG_BOOL, offsetof(test_cfg_t, verbose), "false", 0, 0, "chatty logs"},
    {"name", CM_CFG_STR, offsetof(test_cfg_t, name), NULL, 0, 0, "instance name"},
    {"max_workers", CM_CFG_INT, offsetof(test_cfg_t, workers), "4", -1, 64, "threads"},
};
#define NOPTS (sizeof(table) / sizeof(table[0]))

typedef struct fixture {
    char path[64];
    test_cfg_t cfg;
    char err[256];
    int pos[4];
    size_t npos;
} fixture_t;

static const char *const env_vars[] = {PREFIX "HOST", PREFIX "PORT",        PREFIX "VERBOSE",
                                       PREFIX "NAME", PREFIX "MAX_WORKERS", PREFIX "CONFIG"};

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    strcpy(f->path, "/tmp/test_cm_config.XXXXXX");
    int fd = mkstemp(f->path);
    if (fd < 0)
        return -1;
    close(fd);
    for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
        unsetenv(env_vars[i]);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    cm_config_free(table, NOPTS, &f->cfg);
    unlink(f->path);
    free(f);
    return 0;
}

static void write_file(fixture_t *f, const char *text)
{
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Runs the loader over a NULL-terminated argv (argv[0] added here). */
static cm_config_result_t load(fixture_t *f, const char *const *args)
{
    char *argv[32] = {"prog"};
    int argc = 1;
    for (; args != NULL && args[argc - 1] != NULL; argc++)
        argv[argc] = (char *)args[argc - 1];
    memset(&f->cfg, 0, sizeof(f->cfg));
    f->npos = 99;
    return cm_config_load(table, NOPTS, &f->cfg, PREFIX, argc, argv, f->pos, 4, &f->npos, f->err,
                          sizeof(f->err));
}

static void test_defaults(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(load(f, NULL), CM_CONFIG_OK);
    assert_string_equal(f->cfg.host, "127.0.0.1");
    assert_int_equal(f->cfg.port, 8443);
    assert_false(f->cfg.verbose);
    assert_null(f->cfg.name);
    assert_int_equal(f->cfg.workers, 4);
    assert_int_equal(f->npos, 0);
}

static void test_precedence(void **state)
{
    fixture_t *f = *state;
    write_file(f, "host = 10.0.0.1\nport = 9000\nname = from-file\nmax_workers = 8\n");
    setenv(PREFIX "PORT", "9001", 1);
    setenv(PREFIX "NAME", "from-env", 1);
    const char *args[] = {"--config", f->path, "--port=9002", NULL};
    assert_int_equal(load(f, args), CM_CONFIG_OK);
    assert_string_equal(f->cfg.host, "10.0.0.1"); /* file only */
    assert_int_equal(f->cfg.workers, 8);          /* file only */
    assert_string_equal(f->cfg.name, "from-env"); /* env beats file */
    assert_int_equal(f->cfg.port, 9002);          /* argv beats env and file */
    cm_config_free(table, NOPTS, &f->cfg);
    assert_null(f->cfg.host);
    assert_null(f->cfg.name);

    /* the file may also be named by the environment */
    setenv(PREFIX "CONFIG", f->path, 1);
    unsetenv(PREFIX "PORT");
    assert_int_equal(load(f, NULL), CM_CONFIG_OK);
    assert_int_equal(f->cfg.port, 9000);
    assert_string_equal(f->cfg.host, "10.0.0.1");
}

static void test_argv_forms(void **state)
{
    fixture_t *f = *state;
    const char *args[] = {"--port", "1234", "--host=::1", "--max-workers", "-1", "--verbose", NULL};
    assert_int_equal(load(f, args), CM_CONFIG_OK);
    assert_int_equal(f->cfg.port, 1234);
    assert_string_equal(f->cfg.host, "::1");
    assert_int_equal(f->cfg.workers, -1);
    assert_true(f->cfg.verbose);
    cm_config_free(table, NOPTS, &f->cfg);

    const char *args2[] = {"--verbose", "off", NULL};
    assert_int_equal(load(f, args2), CM_CONFIG_OK);
    assert_false(f->cfg.verbose);
    cm_config_free(table, NOPTS, &f->cfg);

    setenv(PREFIX "VERBOSE", "yes", 1);
    const char *args3[] = {"--no-verbose", NULL};
    assert_int_equal(load(f, args3), CM_CONFIG_OK);
    assert_false(f->cfg.verbose);
    cm_config_free(table, NOPTS, &f->cfg);
    assert_int_equal(load(f, NULL), CM_CONFIG_OK);
    assert_true(f->cfg.verbose);
    cm_config_free(table, NOPTS, &f->cfg);

    /* an empty value restores the default, for every type and source */
    write_file(f, "name = x\nhost =\n");
    setenv(PREFIX "PORT", "", 1);
    setenv(PREFIX "NAME", "", 1);
    const char *args4[] = {"--config", f->path, "--max_workers=", "--verbose=", NULL};
    assert_int_equal(load(f, args4), CM_CONFIG_OK);
    assert_string_equal(f->cfg.host, "127.0.0.1");
    assert_null(f->cfg.name);
    assert_int_equal(f->cfg.port, 8443);
    assert_int_equal(f->cfg.workers, 4);
    assert_false(f->cfg.verbose);
}

static void test_positional(void **state)
{
    fixture_t *f = *state;
    /* a bare boolean does not swallow a following word that is not a boolean */
    const char *args[] = {"in.txt", "--verbose", "out.txt", "--", "--port", NULL};
    assert_int_equal(load(f, args), CM_CONFIG_OK);
    assert_true(f->cfg.verbose);
    assert_int_equal(f->cfg.port, 8443);
    assert_int_equal(f->npos, 3);
    assert_int_equal(f->pos[0], 1);
    assert_int_equal(f->pos[1], 3);
    assert_int_equal(f->pos[2], 5);
    cm_config_free(table, NOPTS, &f->cfg);

    const char *many[] = {"a", "b", "c", "d", "e", NULL};
    assert_int_equal(load(f, many), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "'e'"));
}

static void test_bounds(void **state)
{
    fixture_t *f = *state;
    const char *args[] = {"--port=70000", NULL};
    assert_int_equal(load(f, args), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "port"));
    assert_non_null(strstr(f->err, "out of range [1, 65535]"));
    assert_null(f->cfg.host); /* strings freed on error */

    const char *args2[] = {"--port=0", NULL};
    assert_int_equal(load(f, args2), CM_CONFIG_ERROR);
    const char *args3[] = {"--max_workers=65", NULL};
    assert_int_equal(load(f, args3), CM_CONFIG_ERROR);
    const char *args4[] = {"--port=12ab", NULL};
    assert_int_equal(load(f, args4), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "not an integer"));
    const char *args5[] = {"--verbose=maybe", NULL};
    assert_int_equal(load(f, args5), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "not a boolean"));
    const char *args6[] = {"--port", NULL};
    assert_int_equal(load(f, args6), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "needs a value"));

    setenv(PREFIX "PORT", "99999", 1);
    assert_int_equal(load(f, NULL), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "environment " PREFIX "PORT"));

    write_file(f, "# comment\n\nport = -3\n");
    unsetenv(PREFIX "PORT");
    const char *args7[] = {"--config", f->path, NULL};
    assert_int_equal(load(f, args7), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, ":3:"));
    assert_non_null(strstr(f->err, "out of range"));
}

static void test_unknown_key(void **state)
{
    fixture_t *f = *state;
    const char *args[] = {"--prot=1", NULL};
    assert_int_equal(load(f, args), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "unknown option --prot"));

    write_file(f, "host = a\nbogus = 1\n");
    char flag[128];
    snprintf(flag, sizeof(flag), "--config=%s", f->path);
    const char *args3[] = {flag, NULL};
    assert_int_equal(load(f, args3), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, ":2: unknown key 'bogus'"));

    write_file(f, "host a\n");
    assert_int_equal(load(f, args3), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, ":1:"));

    const char *args4[] = {"--config", "/nonexistent/onsale.conf", NULL};
    assert_int_equal(load(f, args4), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "/nonexistent/onsale.conf"));
}

static void test_file_syntax(void **state)
{
    fixture_t *f = *state;
    write_file(f, "  # indented comment\n"
                  "host = \"a # not a comment\"   # but this is\n"
                  "name=\"say \\\"hi\\\"\\\\\"\n"
                  "port = 80 # trailing comment\n"
                  "max-workers\t=\t2\n"
                  "verbose = on\r\n");
    const char *args[] = {"--config", f->path, NULL};
    assert_int_equal(load(f, args), CM_CONFIG_OK);
    assert_string_equal(f->cfg.host, "a # not a comment");
    assert_string_equal(f->cfg.name, "say \"hi\"\\");
    assert_int_equal(f->cfg.port, 80);
    assert_int_equal(f->cfg.workers, 2);
    assert_true(f->cfg.verbose);
    cm_config_free(table, NOPTS, &f->cfg);

    write_file(f, "host = \"unterminated\n");
    assert_int_equal(load(f, args), CM_CONFIG_ERROR);
    assert_non_null(strstr(f->err, "unterminated"));
    write_file(f, "host = \"a\" b\n");
    assert_int_equal(load(f, args), CM_CONFIG_ERROR);
    write_file(f, "name = a#b\n");
    assert_int_equal(load(f, args), CM_CONFIG_OK);
    assert_string_equal(f->cfg.name, "a#b");
}

static void test_help(void **state)
{
    fixture_t *f = *state;
    /* capture stdout into the temp file */
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    dup2(fileno(fp), STDOUT_FILENO);
    const char *args[] = {"--port=1", "--help", NULL};
    cm_config_result_t r = load(f, args);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    fclose(fp);
    assert_int_equal(r, CM_CONFIG_HELP);
    assert_null(f->cfg.host);

    char text[4096] = {0};
    fp = fopen(f->path, "r");
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    assert_true(n > 0);
    assert_non_null(strstr(text, "Usage: prog"));
    assert_non_null(strstr(text, "--port=<int>"));
    assert_non_null(strstr(text, "listen port"));
    assert_non_null(strstr(text, "default: 8443; range: 1..65535; env: " PREFIX "PORT"));
    assert_non_null(strstr(text, "--max_workers=<int>"));
    assert_non_null(strstr(text, PREFIX "MAX_WORKERS"));
    assert_non_null(strstr(text, "--config=<file>"));
}

/* Secret files are read whole, trimmed, and refused unless owner-only. */
static void test_read_secret(void **state)
{
    (void)state;
    char path[] = "/tmp/onsale-secret-XXXXXX", err[256];
    int fd = mkstemp(path); /* mode 0600 */
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "s3cret-s3cret-s3cret\n\n", 22), 22);
    close(fd);
    size_t len = 0;
    char *s = cm_config_read_secret("admin_token_file", path, 16, 4096, &len, err, sizeof(err));
    assert_non_null(s);
    assert_string_equal(s, "s3cret-s3cret-s3cret");
    assert_int_equal(len, 20);
    free(s);
    /* too short */
    assert_null(cm_config_read_secret("admin_token_file", path, 64, 4096, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "at least 64"));
    /* larger than allowed */
    assert_null(cm_config_read_secret("x_file", path, 1, 8, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "larger than 8"));
    /* readable by group or others: refused, whatever the content */
    static const mode_t bad[] = {0640, 0604, 0644, 0660, 0606, 0700 | 0040};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(chmod(path, bad[i]), 0);
        err[0] = '\0';
        assert_null(
            cm_config_read_secret("redis_password_file", path, 1, 4096, NULL, err, sizeof(err)));
        assert_non_null(strstr(err, "redis_password_file"));
        assert_non_null(strstr(err, "chmod 600"));
    }
    assert_int_equal(chmod(path, 0400), 0);
    s = cm_config_read_secret("x_file", path, 1, 4096, NULL, err, sizeof(err));
    assert_non_null(s);
    free(s);
    unlink(path);
    assert_null(cm_config_read_secret("x_file", path, 1, 4096, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "No such file"));
    assert_null(cm_config_read_secret("x_file", "/tmp", 1, 4096, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "not a regular file"));
    assert_null(cm_config_read_secret("x_file", NULL, 1, 4096, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "x_file is not set"));
}

/* systemd LoadCredential=: "credential:NAME" reads $CREDENTIALS_DIRECTORY/NAME, with the
 * same owner-only check; without the variable, or with a NAME that is a path, refused. */
static void test_read_secret_credential(void **state)
{
    (void)state;
    char dir[] = "/tmp/onsale-cred-XXXXXX", path[512], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/admin-token", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0400);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "token-from-credentials\n", 23), 23);
    close(fd);
    unsetenv("CREDENTIALS_DIRECTORY");
    assert_null(cm_config_read_secret("admin_token_file", "credential:admin-token", 16, 4096, NULL,
                                      err, sizeof(err)));
    assert_non_null(strstr(err, "CREDENTIALS_DIRECTORY is not set"));
    setenv("CREDENTIALS_DIRECTORY", dir, 1);
    char *s = cm_config_read_secret("admin_token_file", "credential:admin-token", 16, 4096, NULL,
                                    err, sizeof(err));
    assert_non_null(s);
    assert_string_equal(s, "token-from-credentials");
    free(s);
    static const char *bad[] = {"credential:", "credential:../admin-token", "credential:a/b",
                                "credential:.."};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_null(
            cm_config_read_secret("admin_token_file", bad[i], 1, 4096, NULL, err, sizeof(err)));
        assert_non_null(strstr(err, "one file name"));
    }
    assert_null(cm_config_read_secret("admin_token_file", "credential:missing", 1, 4096, NULL, err,
                                      sizeof(err)));
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(chmod(path, 0440), 0);
    assert_null(cm_config_read_secret("admin_token_file", "credential:admin-token", 1, 4096, NULL,
                                      err, sizeof(err)));
    assert_non_null(strstr(err, "chmod 600"));
    unsetenv("CREDENTIALS_DIRECTORY");
    unlink(path);
    rmdir(dir);
}

/* --version prints the name, the project version and the commit, and says stop. */
static void test_version(void **state)
{
    fixture_t *f = *state;
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    dup2(fileno(fp), STDOUT_FILENO);
    const char *args[] = {"--version", NULL};
    cm_config_result_t r = load(f, args);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    fclose(fp);
    assert_int_equal(r, CM_CONFIG_HELP);
    char text[512] = {0}, want[256];
    fp = fopen(f->path, "r");
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    assert_true(n > 0);
    snprintf(want, sizeof(want), "prog %s (commit %s)\n", cm_version, cm_version_commit);
    assert_string_equal(text, want);
    assert_non_null(strchr(cm_version, '.'));
}

/* --check-config is the binary's to act on: detected before a "--", ignored by the loader. */
static void test_check_config_flag(void **state)
{
    fixture_t *f = *state;
    char *yes[] = {"prog", "--port=9", "--check-config"};
    char *after[] = {"prog", "--", "--check-config"};
    char *no[] = {"prog", "--port=9"};
    assert_true(cm_config_check_requested(3, yes));
    assert_false(cm_config_check_requested(3, after));
    assert_false(cm_config_check_requested(2, no));
    const char *args[] = {"--check-config", "--port=9", NULL};
    assert_int_equal(load(f, args), CM_CONFIG_OK);
    assert_int_equal(f->cfg.port, 9);
    cm_config_free(table, NOPTS, &f->cfg);
    const char *bad[] = {"--check-config=yes", NULL};
    assert_int_equal(load(f, bad), CM_CONFIG_ERROR);
}

/* What a reload compares, keeps and shows: equal per key, deep copies, masked JSON. */
static void test_copy_equal_json(void **state)
{
    fixture_t *f = *state;
    write_file(f, "host = db.example\nname = \"host=x password='s3cr\\\\'et' user=u\"\n");
    const char *args[] = {"--config", f->path, NULL};
    assert_int_equal(load(f, args), CM_CONFIG_OK);
    test_cfg_t copy;
    memset(&copy, 0, sizeof(copy));
    cm_config_copy(table, NOPTS, &copy, &f->cfg);
    assert_ptr_not_equal(copy.host, f->cfg.host);
    for (size_t i = 0; i < NOPTS; i++)
        assert_true(cm_config_equal(&table[i], &copy, &f->cfg));
    copy.port = 1;
    free(copy.host);
    copy.host = NULL;
    assert_false(cm_config_equal(&table[0], &copy, &f->cfg));
    assert_false(cm_config_equal(&table[1], &copy, &f->cfg));
    cm_config_copy_key(&table[0], &copy, &f->cfg);
    assert_string_equal(copy.host, "db.example");

    const char *const secret[] = {"host", NULL};
    assert_true(cm_config_in(secret, "host"));
    assert_false(cm_config_in(secret, "name"));
    assert_false(cm_config_in(NULL, "host"));
    json_t *j = cm_config_json(table, NOPTS, &copy, secret);
    char *text = json_dumps(j, JSON_SORT_KEYS);
    assert_non_null(strstr(text, "\"host\": \"***\""));
    assert_non_null(strstr(text, "\"name\": \"host=x password=*** user=u\""));
    assert_null(strstr(text, "s3cr"));
    assert_non_null(strstr(text, "\"port\": 1"));
    assert_non_null(strstr(text, "\"verbose\": false"));
    free(text);
    json_decref(j);
    cm_config_free(table, NOPTS, &copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_argv_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_positional, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_syntax, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help, setup, teardown),
        cmocka_unit_test(test_read_secret),
        cmocka_unit_test(test_read_secret_credential),
        cmocka_unit_test_setup_teardown(test_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_config_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_equal_json, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
