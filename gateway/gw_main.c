/*
 * onsale-gateway — entry point: loads the configuration and runs the server.
 *
 *   onsale-gateway [--config FILE] [--key=value …]
 */
#include <stdio.h>
#include <string.h>

#include "cm_access.h"
#include "cm_log.h"
#include "cm_parse.h"
#include "gw_config.h"
#include "gw_server.h"

int main(int argc, char **argv)
{
    gw_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    size_t ntable = 0;
    const cm_config_opt_t *table = gw_config_table(&ntable);
    char err[512] = "";
    cm_config_result_t cr = cm_config_load(table, ntable, &cfg, GW_ENV_PREFIX, argc, argv, NULL, 0,
                                           NULL, err, sizeof(err));
    if (cr == CM_CONFIG_HELP)
        return 0;
    if (cr == CM_CONFIG_ERROR) {
        fprintf(stderr, "onsale-gateway: %s\n", err);
        return 2;
    }
    int rc = 1;
    cm_log_level_t level = CM_LOG_INFO;
    if (cm_log_level_parse(cfg.log_level, &level) != 0) {
        fprintf(stderr, "onsale-gateway: log_level must be debug, info, warn or error\n");
        goto out;
    }
    cm_log_format_t format = CM_LOG_TEXT;
    if (cm_log_format_parse(cfg.log_format, &format) != 0) {
        fprintf(stderr, "onsale-gateway: log_format must be text or json\n");
        goto out;
    }
    cm_log_set_format(format);
    cm_access_set_log(cfg.access_log);
    cm_log_init("gateway", level);
    cm_log_route_libevent();
    if (cfg.poll_min_ms > cfg.poll_max_ms) {
        fprintf(stderr, "onsale-gateway: poll_min_ms must not exceed poll_max_ms\n");
        goto out;
    }
    if (!cm_parse_url_allowed(cfg.reserve_url, cfg.allow_loopback_http, NULL)) {
        fprintf(stderr,
                "onsale-gateway: reserve_url must be an https:// URL without user info or "
                "#fragment (plain http:// only to a loopback host, with allow_loopback_http)\n");
        goto out;
    }
    gw_server_t *srv = gw_server_new(&cfg, err, sizeof(err));
    if (srv == NULL) {
        cm_log(CM_LOG_ERROR, "%s", err);
        goto out;
    }
    rc = gw_server_run(srv) == 0 ? 0 : 1;
    gw_server_free(srv);
out:
    cm_config_free(table, ntable, &cfg);
    return rc;
}
