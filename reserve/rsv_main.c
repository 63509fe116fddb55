/*
 * onsale-reserve — entry point. Loads the configuration, applies the database
 * migrations (start-up, before the loop), and runs the server.
 *
 *   onsale-reserve [--config FILE] [--key=value …]          serve
 *   onsale-reserve migrate [--config FILE] [--key=value …]  apply migrations and exit
 */
#include <stdio.h>
#include <string.h>

#include "cm_access.h"
#include "cm_log.h"
#include "cm_parse.h"
#include "rsv_config.h"
#include "rsv_migrations.h"
#include "rsv_pg.h"
#include "rsv_server.h"

int main(int argc, char **argv)
{
    rsv_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    size_t ntable = 0;
    const cm_config_opt_t *table = rsv_config_table(&ntable);
    char err[512] = "";
    int pos[4];
    size_t npos = 0;
    cm_config_result_t cr = cm_config_load(table, ntable, &cfg, RSV_ENV_PREFIX, argc, argv, pos, 4,
                                           &npos, err, sizeof(err));
    if (cr == CM_CONFIG_HELP)
        return 0;
    if (cr == CM_CONFIG_ERROR) {
        fprintf(stderr, "onsale-reserve: %s\n", err);
        return 2;
    }
    int rc = 1;
    cm_log_level_t level = CM_LOG_INFO;
    if (cm_log_level_parse(cfg.log_level, &level) != 0) {
        fprintf(stderr, "onsale-reserve: log_level must be debug, info, warn or error\n");
        goto out;
    }
    cm_log_format_t format = CM_LOG_TEXT;
    if (cm_log_format_parse(cfg.log_format, &format) != 0) {
        fprintf(stderr, "onsale-reserve: log_format must be text or json\n");
        goto out;
    }
    cm_log_set_format(format);
    cm_access_set_log(cfg.access_log);
    cm_log_init("reserve", level);
    cm_log_route_libevent();
    if (!cm_parse_url_allowed(cfg.paysim_url, cfg.allow_loopback_http, NULL)) {
        fprintf(stderr, "onsale-reserve: paysim_url must be an https:// URL (plain http:// only "
                        "to a loopback address, with allow_loopback_http)\n");
        goto out;
    }
    if (rsv_config_check(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-reserve: %s\n", err);
        rc = 2;
        goto out;
    }
    if (rsv_config_add_pg_password(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-reserve: %s\n", err);
        goto out;
    }
    int migrate_only = npos == 1 && strcmp(argv[pos[0]], "migrate") == 0;
    if (npos > 0 && !migrate_only) {
        fprintf(stderr, "onsale-reserve: unknown command '%s' (try --help)\n", argv[pos[0]]);
        rc = 2;
        goto out;
    }
    if (rsv_pg_migrate(cfg.pg_conninfo, rsv_migration_names, rsv_migration_sqls,
                       rsv_migration_count, err, sizeof(err)) != 0) {
        cm_log(CM_LOG_ERROR, "migrations: %s", err);
        goto out;
    }
    if (migrate_only) {
        cm_log(CM_LOG_INFO, "migrations applied (%zu known)", rsv_migration_count);
        rc = 0;
        goto out;
    }
    rsv_server_t *srv = rsv_server_new(&cfg, err, sizeof(err));
    if (srv == NULL) {
        cm_log(CM_LOG_ERROR, "%s", err);
        goto out;
    }
    rc = rsv_server_run(srv) == 0 ? 0 : 1;
    rsv_server_free(srv);
out:
    cm_config_free(table, ntable, &cfg);
    return rc;
}
