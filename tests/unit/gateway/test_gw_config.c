/*
 * Unit tests for gateway/gw_config.c: gw_config_check accepts the defaults with the
 * three files set and refuses, naming the key, what start-up would refuse — an unknown
 * log level, poll_min_ms above poll_max_ms, a reserve_url that is not https (plain http
 * only to loopback with allow_loopback_http), a missing key, a file others can read, a
 * ticket secret shorter than GW_TICKET_SECRET_MIN, a signing key that is not a P-256
 * private key; the comma-separated lists are checked file by file.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/ec.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"
#include "gw_config.h"
#include "gw_ticket.h"
#include "keys.h"

typedef struct fx {
    char *key, *key2, *secret, *token;
    char keys_arg[300], secret_arg[300], token_arg[300];
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    char *pem = tkey_new_pem();
    f->key = tfile_new(pem, 0600);
    free(pem);
    pem = tkey_new_pem();
    f->key2 = tfile_new(pem, 0600);
    free(pem);
    f->secret = tfile_new("0123456789abcdef0123456789abcdef\n", 0600); /* 32 bytes */
    f->token = tfile_new("an-admin-token-of-32-characters!", 0600);
    snprintf(f->keys_arg, sizeof(f->keys_arg), "--signing_keys=%s", f->key);
    snprintf(f->secret_arg, sizeof(f->secret_arg), "--ticket_secret_file=%s", f->secret);
    snprintf(f->token_arg, sizeof(f->token_arg), "--admin_token_file=%s", f->token);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    char *files[] = {f->key, f->key2, f->secret, f->token};
    for (size_t i = 0; i < 4; i++) {
        unlink(files[i]);
        free(files[i]);
    }
    free(f);
    return 0;
}

/* gw_config_check of the defaults, the three files and up to two more arguments. */
static int check(fx_t *f, const char *a, const char *b, char *err, size_t errlen)
{
    char xa[400], xb[400];
    snprintf(xa, sizeof(xa), "%s", a ? a : "");
    snprintf(xb, sizeof(xb), "%s", b ? b : "");
    char *argv[] = {"onsale-gateway", f->keys_arg, f->secret_arg, f->token_arg, xa, xb, NULL};
    int argc = 4 + (a != NULL) + (a != NULL && b != NULL);
    size_t n = 0;
    const cm_config_opt_t *t = gw_config_table(&n);
    gw_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    err[0] = '\0';
    assert_int_equal(
        cm_config_load(t, n, &cfg, "ONSALE_GATEWAY_TEST_", argc, argv, NULL, 0, NULL, err, errlen),
        CM_CONFIG_OK);
    int rc = gw_config_check(&cfg, err, errlen);
    cm_config_free(t, n, &cfg);
    return rc;
}

static void expect_refused(fx_t *f, const char *a, const char *b, const char *says)
{
    char err[512];
    assert_int_equal(check(f, a, b, err, sizeof(err)), -1);
    if (strstr(err, says) == NULL)
        fail_msg("%s %s: \"%s\" does not name %s", a, b ? b : "", err, says);
}

static void test_defaults_with_the_files_pass(void **state)
{
    fx_t *f = *state;
    char err[512];
    assert_int_equal(check(f, NULL, NULL, err, sizeof(err)), 0);
    assert_int_equal(check(f, "--log_level=warn", "--poll_min_ms=500", err, sizeof(err)), 0);
    /* poll_min_ms equal to poll_max_ms is fine */
    assert_int_equal(check(f, "--poll_min_ms=2000", "--poll_max_ms=2000", err, sizeof(err)), 0);
}

static void test_cross_key_rules(void **state)
{
    fx_t *f = *state;
    expect_refused(f, "--log_level=chatty", NULL, "log");
    expect_refused(f, "--poll_min_ms=2001", "--poll_max_ms=2000", "poll_min_ms");
    expect_refused(f, "--reserve_url=http://reserve.example:8444", NULL, "reserve_url");
    expect_refused(f, "--reserve_url=https://u:p@reserve.example", NULL, "reserve_url");
    expect_refused(f, "--reserve_url=http://127.0.0.1:8444", NULL, "reserve_url");
    char err[512];
    assert_int_equal(check(f, "--reserve_url=http://127.0.0.1:8444", "--allow_loopback_http=true",
                           err, sizeof(err)),
                     0);
}

static void test_required_keys(void **state)
{
    fx_t *f = *state;
    size_t n = 0;
    const cm_config_opt_t *t = gw_config_table(&n);
    char *args[] = {f->keys_arg, f->secret_arg, f->token_arg};
    for (int skip = 0; skip < 3; skip++) {
        char *argv[4] = {"onsale-gateway"};
        int argc = 1;
        for (int i = 0; i < 3; i++)
            if (i != skip)
                argv[argc++] = args[i];
        gw_config_t cfg;
        memset(&cfg, 0, sizeof(cfg));
        char err[512] = "";
        assert_int_equal(cm_config_load(t, n, &cfg, "ONSALE_GATEWAY_TEST_", argc, argv, NULL, 0,
                                        NULL, err, sizeof(err)),
                         CM_CONFIG_OK);
        assert_int_equal(gw_config_check(&cfg, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "must be set"));
        cm_config_free(t, n, &cfg);
    }
}

static void test_files_are_read_as_start_up_would(void **state)
{
    fx_t *f = *state;
    char arg[700];
    /* a ticket secret one byte short */
    char *short_secret = tfile_new("0123456789abcdef0123456789abcde", 0600);
    assert_int_equal(strlen("0123456789abcdef0123456789abcde"), GW_TICKET_SECRET_MIN - 1);
    snprintf(arg, sizeof(arg), "--ticket_secret_file=%s", short_secret);
    expect_refused(f, arg, NULL, "ticket_secret_file");
    /* a secret others may read */
    char *open_secret = tfile_new("0123456789abcdef0123456789abcdef", 0644);
    snprintf(arg, sizeof(arg), "--ticket_secret_file=%s", open_secret);
    expect_refused(f, arg, NULL, "ticket_secret_file");
    /* the presale codes' secret: optional, owner-only, as long as a ticket secret */
    char ok_code[700];
    snprintf(ok_code, sizeof(ok_code), "--code_secret_file=%s", f->secret);
    char err[512];
    assert_int_equal(check(f, ok_code, NULL, err, sizeof(err)), 0);
    snprintf(arg, sizeof(arg), "--code_secret_file=%s", open_secret);
    expect_refused(f, arg, NULL, "code_secret_file");
    snprintf(arg, sizeof(arg), "--code_secret_file=%s", short_secret);
    expect_refused(f, arg, NULL, "code_secret_file");
    /* an admin token shorter than 16 characters */
    char *short_token = tfile_new("fifteen-chars!!", 0600);
    snprintf(arg, sizeof(arg), "--admin_token_file=%s", short_token);
    expect_refused(f, arg, NULL, "admin_token_file");
    /* a signing key that is a public key, not a private one */
    EVP_PKEY *k = EVP_EC_gen("P-256");
    char *pub = tkey_pem(k, false);
    EVP_PKEY_free(k);
    char *pub_file = tfile_new(pub, 0600);
    free(pub);
    snprintf(arg, sizeof(arg), "--signing_keys=%s", pub_file);
    expect_refused(f, arg, NULL, pub_file);
    /* a missing file */
    expect_refused(f, "--signing_keys=/nonexistent/key.pem", NULL, "/nonexistent/key.pem");
    char *files[] = {short_secret, open_secret, short_token, pub_file};
    for (size_t i = 0; i < 4; i++) {
        unlink(files[i]);
        free(files[i]);
    }
}

static void test_lists_checked_file_by_file(void **state)
{
    fx_t *f = *state;
    char arg[700], err[512];
    snprintf(arg, sizeof(arg), "--signing_keys= %s , %s ", f->key, f->key2);
    assert_int_equal(check(f, arg, NULL, err, sizeof(err)), 0);
    snprintf(arg, sizeof(arg), "--signing_keys=%s,/nonexistent/second.pem", f->key);
    expect_refused(f, arg, NULL, "/nonexistent/second.pem");
    expect_refused(f, "--signing_keys= , ", NULL, "names no file");
    snprintf(arg, sizeof(arg), "--ticket_secret_file=%s,%s", f->secret, f->token);
    assert_int_equal(check(f, arg, NULL, err, sizeof(err)), 0);
}

static void test_live_keys_are_keys(void **state)
{
    (void)state;
    assert_true(cm_config_in(gw_config_live, "signing_keys"));
    assert_true(cm_config_in(gw_config_live, "join_rate_per_ip"));
    assert_false(cm_config_in(gw_config_live, "ticket_secret_file"));
    assert_false(cm_config_in(gw_config_live, "port"));
    size_t n = 0;
    const cm_config_opt_t *t = gw_config_table(&n);
    for (const char *const *k = gw_config_live; *k != NULL; k++) {
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
        cmocka_unit_test_setup_teardown(test_defaults_with_the_files_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_key_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_required_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files_are_read_as_start_up_would, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lists_checked_file_by_file, setup, teardown),
        cmocka_unit_test(test_live_keys_are_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
