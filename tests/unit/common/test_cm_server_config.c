/* cm_server_config: the shared server keys land at the service's offsets with its
 * defaults, load like any table, and fill cm_server's options. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_config.h"
#include "cm_server_config.h"

typedef struct svc_config {
    int64_t before;
    cm_server_config_t server;
    char *own;
} svc_config_t;

static const cm_server_config_defaults_t defaults = {
    .port = "9443",
    .admin_listen = "127.0.0.1:9463",
    .max_connections = "512",
    .max_body_bytes = "2048",
    .idle_timeout_s = "7",
};

static size_t build(cm_config_opt_t *table)
{
    size_t n = cm_server_config_keys(table, offsetof(svc_config_t, server), &defaults);
    table[n++] = (cm_config_opt_t){"own", CM_CFG_STR, offsetof(svc_config_t, own), "x",
                                   0,     0,          "a key of the service's own"};
    return n;
}

static void keys_take_the_service_defaults_and_offsets(void **state)
{
    (void)state;
    cm_config_opt_t table[CM_SERVER_CONFIG_NKEYS + 1];
    size_t n = build(table);
    assert_int_equal(n, CM_SERVER_CONFIG_NKEYS + 1);
    svc_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    char *argv[] = {"svc", "--workers=3", "--max_body_bytes=4096", NULL};
    char err[256] = "";
    assert_int_equal(
        cm_config_load(table, n, &cfg, "CM_SRVCFG_TEST_", 3, argv, NULL, 0, NULL, err, sizeof(err)),
        CM_CONFIG_OK);
    assert_int_equal(cfg.before, 0); /* nothing written outside the block */
    assert_int_equal(cfg.server.port, 9443);
    assert_string_equal(cfg.server.admin_listen, "127.0.0.1:9463");
    assert_int_equal(cfg.server.max_connections, 512);
    assert_int_equal(cfg.server.idle_timeout_s, 7);
    assert_int_equal(cfg.server.max_body_bytes, 4096); /* argv over the default */
    assert_int_equal(cfg.server.workers, 3);
    assert_int_equal(cfg.server.max_header_bytes, 8192); /* the shared default */
    assert_int_equal(cfg.server.handshake_timeout_s, 10);
    assert_string_equal(cfg.server.listen_addr, "127.0.0.1");
    assert_null(cfg.server.proxy_from);
    assert_string_equal(cfg.own, "x");

    cm_server_opts_t o = {.name = "svc"};
    char admin[64];
    assert_int_equal(cm_server_config_opts(&cfg.server, &o, admin, sizeof(admin), err, sizeof(err)),
                     0);
    assert_string_equal(o.name, "svc");
    assert_int_equal(o.workers, 3);
    assert_int_equal(o.port, 9443);
    assert_string_equal(o.admin_addr, "127.0.0.1");
    assert_int_equal(o.admin_port, 9463);
    assert_int_equal(o.limits.max_body_bytes, 4096);
    assert_int_equal(o.limits.max_connections, 512);
    assert_int_equal(o.limits.request_timeout_s, 30);
    assert_int_equal(o.limits.max_conns_per_addr, 2048);

    /* a bound of the shared table holds for every service */
    char *bad[] = {"svc", "--max_header_bytes=10", NULL};
    svc_config_t cfg2;
    memset(&cfg2, 0, sizeof(cfg2));
    assert_int_equal(
        cm_config_load(table, n, &cfg2, "CM_SRVCFG_TEST_", 2, bad, NULL, 0, NULL, err, sizeof(err)),
        CM_CONFIG_ERROR);
    assert_non_null(strstr(err, "max_header_bytes"));
    cm_config_free(table, n, &cfg2);

    /* a malformed admin_listen is an error naming the key */
    free(cfg.server.admin_listen);
    cfg.server.admin_listen = strdup("localhost");
    assert_int_equal(cm_server_config_opts(&cfg.server, &o, admin, sizeof(admin), err, sizeof(err)),
                     -1);
    assert_non_null(strstr(err, "admin_listen"));
    cm_config_free(table, n, &cfg);
}

static void tls_needs_both_files_unless_plain(void **state)
{
    (void)state;
    cm_server_config_t c;
    memset(&c, 0, sizeof(c));
    cm_tls_ctx_t *tls = (cm_tls_ctx_t *)&c; /* overwritten */
    char err[256] = "";
    c.plain_http = true;
    assert_int_equal(cm_server_config_tls(&c, &tls, err, sizeof(err)), 0);
    assert_null(tls);
    c.plain_http = false;
    assert_int_equal(cm_server_config_tls(&c, &tls, err, sizeof(err)), -1);
    assert_null(tls);
    assert_non_null(strstr(err, "tls_cert and tls_key must be set"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keys_take_the_service_defaults_and_offsets),
        cmocka_unit_test(tls_needs_both_files_unless_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
