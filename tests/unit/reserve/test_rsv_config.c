/*
 * Unit tests for reserve/rsv_config.c: the table's defaults pass the checks that span
 * keys; the checkout lease must outlast pay_timeout_ms by RSV_LEASE_MARGIN_MS (the
 * boundary both ways); public_origin is a bare origin; pg_password_file's secret is
 * appended to pg_conninfo quoted for libpq, and refused next to a password of its own;
 * the provider key comes inline or from an owner-only file, never both, one clean line;
 * rsv_config_validate names what start-up would refuse (log level, paysim_url, the
 * required keys, the files) and accepts a whole valid set.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/ec.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "keys.h"
#include "rsv_config.h"

/* The configuration as the table's defaults make it, plus argv's keys. */
static void load(rsv_config_t *cfg, int argc, char **argv)
{
    size_t n = 0;
    const cm_config_opt_t *t = rsv_config_table(&n);
    char err[256] = "";
    memset(cfg, 0, sizeof(*cfg));
    assert_int_equal(cm_config_load(t, n, cfg, "ONSALE_RESERVE_TEST_", argc, argv, NULL, 0, NULL,
                                    err, sizeof(err)),
                     CM_CONFIG_OK);
}

static void drop(rsv_config_t *cfg)
{
    size_t n = 0;
    const cm_config_opt_t *t = rsv_config_table(&n); /* n is set by this call */
    cm_config_free(t, n, cfg);
}

static void test_defaults_pass_the_cross_key_checks(void **state)
{
    (void)state;
    rsv_config_t cfg;
    char *argv[] = {"onsale-reserve", NULL};
    load(&cfg, 1, argv);
    char err[256] = "";
    assert_int_equal(rsv_config_check(&cfg, err, sizeof(err)), 0);
    /* the shipped defaults keep the margin the check asks for */
    assert_true(cfg.checkout_lease_s * 1000 >= cfg.pay_timeout_ms + RSV_LEASE_MARGIN_MS);
    drop(&cfg);
}

static void test_lease_must_outlast_the_charge(void **state)
{
    (void)state;
    rsv_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    char err[256] = "";
    cfg.checkout_lease_s = 20;
    cfg.pay_timeout_ms = (20 * 1000 - RSV_LEASE_MARGIN_MS) / 2; /* exactly the margin */
    assert_int_equal(rsv_config_check(&cfg, err, sizeof(err)), 0);
    cfg.pay_timeout_ms++;
    assert_int_equal(rsv_config_check(&cfg, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "checkout_lease_s"));
    assert_non_null(strstr(err, "pay_timeout_ms"));
    /* a lease shorter than the provider call itself */
    cfg.checkout_lease_s = 5;
    cfg.pay_timeout_ms = 10000;
    assert_int_equal(rsv_config_check(&cfg, err, sizeof(err)), -1);
}

/* The stock feed: on every 500 ms by default, 0 turns it off; an idle event is dropped
 * after 900 s; a negative interval or a zero idle time does not load. */
static void test_stock_feed_keys(void **state)
{
    (void)state;
    rsv_config_t cfg;
    char *defaults[] = {"onsale-reserve", NULL};
    load(&cfg, 1, defaults);
    assert_int_equal(cfg.stock_interval_ms, 500);
    assert_int_equal(cfg.stock_idle_s, 900);
    drop(&cfg);
    char *off[] = {"onsale-reserve", "--stock_interval_ms=0", "--stock_idle_s=60", NULL};
    load(&cfg, 3, off);
    assert_int_equal(cfg.stock_interval_ms, 0);
    assert_int_equal(cfg.stock_idle_s, 60);
    drop(&cfg);
    size_t n = 0;
    const cm_config_opt_t *t = rsv_config_table(&n);
    char *bad[][2] = {{"onsale-reserve", "--stock_interval_ms=-1"},
                      {"onsale-reserve", "--stock_interval_ms=60001"},
                      {"onsale-reserve", "--stock_idle_s=0"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[256] = "";
        memset(&cfg, 0, sizeof(cfg));
        assert_int_equal(cm_config_load(t, n, &cfg, "ONSALE_RESERVE_TEST_", 2, bad[i], NULL, 0,
                                        NULL, err, sizeof(err)),
                         CM_CONFIG_ERROR);
        assert_non_null(strstr(err, "stock_"));
        cm_config_free(t, n, &cfg);
    }
}

static void test_public_origin_is_a_bare_origin(void **state)
{
    (void)state;
    static const char *const good[] = {
        "",
        "https://shop.example",
        "http://127.0.0.1:8444",
        "https://[::1]:8444",
    };
    static const char *const bad[] = {
        "shop.example", "https://",    "https://shop.example/", "https://shop.example/x",
        "ftp://shop",   "https://u@h", "https://h?q",           "https://h#f",
        "https://a b",
    };
    rsv_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.checkout_lease_s = 30;
    cfg.pay_timeout_ms = 1000;
    char err[256];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        cfg.public_origin = (char *)good[i];
        assert_int_equal(rsv_config_check(&cfg, err, sizeof(err)), 0);
    }
    cfg.public_origin = NULL;
    assert_int_equal(rsv_config_check(&cfg, err, sizeof(err)), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.public_origin = (char *)bad[i];
        err[0] = '\0';
        assert_int_equal(rsv_config_check(&cfg, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "public_origin"));
    }
}

static void test_pg_password_quoted_for_libpq(void **state)
{
    (void)state;
    char *pw = tfile_new("it's a\\secret\n", 0600); /* trailing newline trimmed */
    rsv_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.pg_conninfo = strdup("host=db dbname=onsale");
    cfg.pg_password_file = pw;
    char err[256] = "";
    assert_int_equal(rsv_config_add_pg_password(&cfg, err, sizeof(err)), 0);
    assert_string_equal(cfg.pg_conninfo, "host=db dbname=onsale password='it\\'s a\\\\secret'");
    free(cfg.pg_conninfo);

    /* a conninfo with a password of its own is refused, and left as it was */
    cfg.pg_conninfo = strdup("host=db password=x");
    assert_int_equal(rsv_config_add_pg_password(&cfg, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "pg_conninfo"));
    assert_string_equal(cfg.pg_conninfo, "host=db password=x");
    free(cfg.pg_conninfo);

    /* without pg_password_file nothing changes */
    cfg.pg_password_file = NULL;
    cfg.pg_conninfo = strdup("host=db");
    assert_int_equal(rsv_config_add_pg_password(&cfg, err, sizeof(err)), 0);
    assert_string_equal(cfg.pg_conninfo, "host=db");
    free(cfg.pg_conninfo);
    unlink(pw);
    free(pw);
}

static void test_pg_password_file_owner_only(void **state)
{
    (void)state;
    char *pw = tfile_new("secret", 0644);
    rsv_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.pg_conninfo = strdup("host=db");
    cfg.pg_password_file = pw;
    char err[256] = "";
    assert_int_equal(rsv_config_add_pg_password(&cfg, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "pg_password_file"));
    assert_string_equal(cfg.pg_conninfo, "host=db");
    free(cfg.pg_conninfo);
    unlink(pw);
    free(pw);
}

/* The provider key: inline, from an owner-only file (trimmed), never both, never a
 * line with a space or a control character in it. */
static void test_pay_key_from_file_or_inline(void **state)
{
    (void)state;
    char err[256] = "";
    rsv_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    char *key = rsv_config_pay_key(&cfg, err, sizeof(err));
    assert_string_equal(key, ""); /* neither: no key */
    free(key);
    cfg.paysim_api_key = "sk_test_inline";
    key = rsv_config_pay_key(&cfg, err, sizeof(err));
    assert_string_equal(key, "sk_test_inline");
    free(key);
    cfg.paysim_api_key = "sk_test two";
    assert_null(rsv_config_pay_key(&cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "printable"));

    char *file = tfile_new("sk_test_from_file\n", 0600);
    cfg.paysim_api_key = NULL;
    cfg.paysim_api_key_file = file;
    key = rsv_config_pay_key(&cfg, err, sizeof(err));
    assert_string_equal(key, "sk_test_from_file");
    free(key);
    cfg.paysim_api_key = "sk_test_inline";
    assert_null(rsv_config_pay_key(&cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "both set"));
    cfg.paysim_api_key = NULL;
    assert_int_equal(chmod(file, 0644), 0);
    assert_null(rsv_config_pay_key(&cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "paysim_api_key_file"));
    unlink(file);
    free(file);

    char *bad = tfile_new("sk_test\r\nX-Injected: 1", 0600); /* a header smuggled in */
    cfg.paysim_api_key_file = bad;
    assert_null(rsv_config_pay_key(&cfg, err, sizeof(err)));
    unlink(bad);
    free(bad);
}

typedef struct files {
    char *keys, *token, *pw;
    char keys_arg[300], token_arg[300];
} files_t;

static void files_new(files_t *f)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    assert_non_null(k);
    char *pem = tkey_pem(k, false);
    EVP_PKEY_free(k);
    f->keys = tfile_new(pem, 0644); /* public keys need not be secret */
    free(pem);
    f->token = tfile_new("an-admin-token-of-32-characters!\n", 0600);
    f->pw = NULL;
    snprintf(f->keys_arg, sizeof(f->keys_arg), "--admission_keys=%s", f->keys);
    snprintf(f->token_arg, sizeof(f->token_arg), "--admin_token_file=%s", f->token);
}

static void files_free(files_t *f)
{
    unlink(f->keys);
    unlink(f->token);
    free(f->keys);
    free(f->token);
}

/* rsv_config_validate of the defaults plus the two files plus extra (may be NULL). */
static int validate(files_t *f, char *extra, char *err, size_t errlen)
{
    char *argv[] = {"onsale-reserve", f->keys_arg, f->token_arg, extra, NULL};
    rsv_config_t cfg;
    load(&cfg, extra ? 4 : 3, argv);
    err[0] = '\0';
    int rc = rsv_config_validate(&cfg, err, errlen);
    drop(&cfg);
    return rc;
}

static void test_validate_accepts_a_whole_set(void **state)
{
    (void)state;
    files_t f;
    files_new(&f);
    char err[512];
    assert_int_equal(validate(&f, NULL, err, sizeof(err)), 0);
    assert_int_equal(validate(&f, "--cors_origins=https://shop.example", err, sizeof(err)), 0);
    assert_int_equal(validate(&f, "--log_level=debug", err, sizeof(err)), 0);
    files_free(&f);
}

static void test_validate_names_what_start_up_refuses(void **state)
{
    (void)state;
    files_t f;
    files_new(&f);
    char err[512];
    static const struct {
        const char *arg, *says;
    } cases[] = {
        {"--log_level=loud", "log"},
        {"--paysim_url=http://paysim.example:8445", "paysim_url"},
        {"--paysim_url=ftp://127.0.0.1", "paysim_url"},
        {"--checkout_lease_s=5", "checkout_lease_s"},
        {"--public_origin=https://h/path", "public_origin"},
        {"--cors_origins=not an origin", "origin"},
        {"--admission_keys=/nonexistent/keys.pem", "/nonexistent/keys.pem"},
        {"--admin_token_file=/nonexistent/token", "admin_token_file"},
        {"--pg_password_file=/nonexistent/pw", "pg_password_file"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char arg[300];
        snprintf(arg, sizeof(arg), "%s", cases[i].arg);
        assert_int_equal(validate(&f, arg, err, sizeof(err)), -1);
        if (strstr(err, cases[i].says) == NULL)
            fail_msg("%s: \"%s\" does not name %s", cases[i].arg, err, cases[i].says);
    }
    /* plain http:// to loopback only with allow_loopback_http */
    char *argv[] = {"onsale-reserve",
                    f.keys_arg,
                    f.token_arg,
                    "--paysim_url=http://127.0.0.1:8445",
                    "--allow_loopback_http=true",
                    NULL};
    rsv_config_t cfg;
    load(&cfg, 5, argv);
    assert_int_equal(rsv_config_validate(&cfg, err, sizeof(err)), 0);
    drop(&cfg);
    load(&cfg, 4, argv);
    assert_int_equal(rsv_config_validate(&cfg, err, sizeof(err)), -1);
    drop(&cfg);
    files_free(&f);
}

static void test_validate_wants_the_keys_set(void **state)
{
    (void)state;
    files_t f;
    files_new(&f);
    char err[512] = "";
    char *argv[] = {"onsale-reserve", f.keys_arg, NULL};
    rsv_config_t cfg;
    load(&cfg, 2, argv);
    assert_int_equal(rsv_config_validate(&cfg, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "admin_token_file must be set"));
    drop(&cfg);
    char *argv2[] = {"onsale-reserve", f.token_arg, NULL};
    load(&cfg, 2, argv2);
    assert_int_equal(rsv_config_validate(&cfg, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "admission_keys and admin_token_file must be set"));
    drop(&cfg);
    files_free(&f);
}

/* rsv_config_validate of the defaults, the two files, and the events-out keys given. */
static int validate_events(files_t *f, const char *url, const char *secret_file, bool loopback,
                           char *err, size_t errlen)
{
    char url_arg[300], secret_arg[300];
    snprintf(url_arg, sizeof(url_arg), "--events_url=%s", url);
    snprintf(secret_arg, sizeof(secret_arg), "--events_secret_file=%s", secret_file);
    char *argv[] = {"onsale-reserve",        f->keys_arg, f->token_arg, url_arg,
                    "--allow_loopback_http", NULL,        NULL};
    int argc = 4;
    if (loopback)
        argc = 5;
    if (secret_file != NULL)
        argv[argc++] = secret_arg;
    rsv_config_t cfg;
    load(&cfg, argc, argv);
    err[0] = '\0';
    int rc = rsv_config_validate(&cfg, err, errlen);
    drop(&cfg);
    return rc;
}

static void test_validate_events_out(void **state)
{
    (void)state;
    files_t f;
    files_new(&f);
    char err[512];
    char *good = tfile_new("new-events-secret-0123\nold-events-secret-0123\n", 0600);
    char *open_to_all = tfile_new("new-events-secret-0123\n", 0644);
    char *short_one = tfile_new("new-events-secret-0123\nshort\n", 0600);
    assert_int_equal(
        validate_events(&f, "https://hooks.example/onsale", good, false, err, sizeof(err)), 0);
    assert_int_equal(validate_events(&f, "http://127.0.0.1:9/x", good, true, err, sizeof(err)), 0);
    /* unset URL: nothing is sent, no secret needed */
    assert_int_equal(validate_events(&f, "", NULL, false, err, sizeof(err)), 0);
    static const struct {
        const char *url;
        int secret; /* 0 none, 1 good, 2 world-readable, 3 a short secret */
        bool loopback;
        const char *says;
    } cases[] = {
        {"https://hooks.example/onsale", 0, false, "events_url needs events_secret_file"},
        {"http://127.0.0.1:9/x", 1, false, "events_url must be"},
        {"http://hooks.example/onsale", 1, true, "events_url must be"},
        {"ftp://127.0.0.1/x", 1, true, "events_url must be"},
        {"https://hooks.example/onsale", 2, false, "events_secret_file"},
        {"https://hooks.example/onsale", 3, false, "at least 16"},
    };
    const char *files[] = {NULL, good, open_to_all, short_one};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = validate_events(&f, cases[i].url, files[cases[i].secret], cases[i].loopback, err,
                                 sizeof(err));
        if (rc != -1 || strstr(err, cases[i].says) == NULL)
            fail_msg("%s: %d \"%s\" does not name %s", cases[i].url, rc, err, cases[i].says);
    }
    for (size_t i = 1; i < 4; i++) {
        unlink(files[i]);
        free((char *)files[i]);
    }
    files_free(&f);
}

static void test_live_and_secret_lists(void **state)
{
    (void)state;
    assert_true(cm_config_in(rsv_config_live, "log_level"));
    assert_true(cm_config_in(rsv_config_live, "paysim_api_key"));
    assert_true(cm_config_in(rsv_config_live, "paysim_api_key_file"));
    assert_true(cm_config_in(rsv_config_live, "events_secret_file"));
    assert_false(cm_config_in(rsv_config_live, "events_url"));
    assert_false(cm_config_in(rsv_config_live, "pg_conninfo"));
    assert_false(cm_config_in(rsv_config_live, "admission_keys"));
    assert_true(cm_config_in(rsv_config_secret, "paysim_api_key"));
    assert_false(cm_config_in(rsv_config_secret, "log_level"));
    /* every name on the lists is a key of the table */
    size_t n = 0;
    const cm_config_opt_t *t = rsv_config_table(&n);
    const char *const *lists[] = {rsv_config_live, rsv_config_secret};
    for (size_t l = 0; l < 2; l++)
        for (const char *const *k = lists[l]; *k != NULL; k++) {
            size_t i = 0;
            while (i < n && strcmp(t[i].name, *k) != 0)
                i++;
            if (i == n)
                fail_msg("%s is not a key", *k);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_pass_the_cross_key_checks),
        cmocka_unit_test(test_lease_must_outlast_the_charge),
        cmocka_unit_test(test_stock_feed_keys),
        cmocka_unit_test(test_public_origin_is_a_bare_origin),
        cmocka_unit_test(test_pg_password_quoted_for_libpq),
        cmocka_unit_test(test_pg_password_file_owner_only),
        cmocka_unit_test(test_pay_key_from_file_or_inline),
        cmocka_unit_test(test_validate_accepts_a_whole_set),
        cmocka_unit_test(test_validate_names_what_start_up_refuses),
        cmocka_unit_test(test_validate_wants_the_keys_set),
        cmocka_unit_test(test_validate_events_out),
        cmocka_unit_test(test_live_and_secret_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
