/*
 * onsale-gateway — entry point: loads the configuration and runs the server.
 *
 *   onsale-gateway [--config FILE] [--key=value …]
 *   onsale-gateway --check-config [--config FILE] [--key=value …]   validate and exit
 *
 * SIGHUP re-reads the whole configuration (cm_reload_config; gw_config_live).
 */
#include <stdio.h>
#include <string.h>

#include "cm_log.h"
#include "cm_reload.h"
#include "cm_tls.h"
#include "gw_config.h"
#include "gw_server.h"

/* --check-config: every check start-up makes short of opening sockets and Redis. */
static int check_config(const gw_config_t *cfg)
{
    char err[512] = "";
    cm_tls_ctx_t *tls = NULL;
    if (gw_config_check(cfg, err, sizeof(err)) != 0 ||
        cm_server_config_tls(&cfg->server, &tls, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-gateway: configuration invalid: %s\n", err);
        return 1;
    }
    cm_tls_free(tls);
    printf("onsale-gateway: configuration ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    gw_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    size_t ntable = 0;
    const cm_config_opt_t *table = gw_config_table(&ntable);
    char err[512] = "";
    bool check_only = cm_config_check_requested(argc, argv);
    cm_config_result_t cr = cm_config_load(table, ntable, &cfg, GW_ENV_PREFIX, argc, argv, NULL, 0,
                                           NULL, err, sizeof(err));
    if (cr == CM_CONFIG_HELP)
        return 0;
    if (cr == CM_CONFIG_ERROR) {
        fprintf(stderr, "onsale-gateway: %s%s\n", check_only ? "configuration invalid: " : "", err);
        return check_only ? 1 : 2;
    }
    int rc = 1;
    cm_reload_config_t *reload = NULL;
    if (check_only) {
        rc = check_config(&cfg);
        goto out;
    }
    cm_service_log_t log;
    if (gw_config_check(&cfg, err, sizeof(err)) != 0 ||
        cm_service_log_parse(&log, cfg.log_level, cfg.log_format, cfg.access_log, err,
                             sizeof(err)) != 0) {
        fprintf(stderr, "onsale-gateway: %s\n", err);
        goto out;
    }
    cm_service_log_start(&log, "gateway");
    cm_reload_config_spec_t spec = {
        .service = "gateway",
        .table = table,
        .n = ntable,
        .size = sizeof(cfg),
        .env_prefix = GW_ENV_PREFIX,
        .argc = argc,
        .argv = argv,
        .live = gw_config_live,
        .secret = gw_config_secret,
        .check = gw_config_check,
    };
    reload = cm_reload_config_new(&spec, &cfg);
    gw_server_t *srv = gw_server_new(&cfg, err, sizeof(err));
    if (srv == NULL) {
        cm_log(CM_LOG_ERROR, "%s", err);
        goto out;
    }
    rc = gw_server_serve(srv, reload); /* frees reload */
    reload = NULL;
    gw_server_free(srv);
out:
    cm_reload_config_free(reload);
    cm_config_free(table, ntable, &cfg);
    return rc;
}
