/*
 * onsale-reserve — entry point. Loads the configuration, applies the database
 * migrations (start-up, before the loop), and runs the server.
 *
 *   onsale-reserve [--config FILE] [--key=value …]          serve
 *   onsale-reserve migrate [--config FILE] [--key=value …]  apply migrations and exit
 *   onsale-reserve --check-config [--config FILE] [--key=value …]  validate and exit
 *
 * SIGHUP re-reads the whole configuration (cm_reload_config; rsv_config_live).
 */
#include <stdio.h>
#include <string.h>

#include "cm_log.h"
#include "cm_reload.h"
#include "cm_tls.h"
#include "rsv_config.h"
#include "rsv_migrations.h"
#include "rsv_pg.h"
#include "rsv_server.h"

/* --check-config: every check start-up makes short of sockets, Redis and Postgres. */
static int check_config(const rsv_config_t *cfg)
{
    char err[512] = "";
    cm_tls_ctx_t *tls = NULL;
    if (rsv_config_validate(cfg, err, sizeof(err)) != 0 ||
        cm_server_config_tls(&cfg->server, &tls, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-reserve: configuration invalid: %s\n", err);
        return 1;
    }
    cm_tls_free(tls);
    printf("onsale-reserve: configuration ok\n");
    return 0;
}

static cm_reload_config_t *reloader(const cm_config_opt_t *table, size_t n, const rsv_config_t *cfg,
                                    int argc, char **argv)
{
    cm_reload_config_spec_t spec = {
        .service = "reserve",
        .table = table,
        .n = n,
        .size = sizeof(*cfg),
        .env_prefix = RSV_ENV_PREFIX,
        .argc = argc,
        .argv = argv,
        .live = rsv_config_live,
        .secret = rsv_config_secret,
        .check = rsv_config_validate,
    };
    return cm_reload_config_new(&spec, cfg); /* before the password joins pg_conninfo */
}

int main(int argc, char **argv)
{
    rsv_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    size_t ntable = 0;
    const cm_config_opt_t *table = rsv_config_table(&ntable);
    char err[512] = "";
    int pos[4];
    size_t npos = 0;
    bool check_only = cm_config_check_requested(argc, argv);
    cm_config_result_t cr = cm_config_load(table, ntable, &cfg, RSV_ENV_PREFIX, argc, argv, pos, 4,
                                           &npos, err, sizeof(err));
    if (cr == CM_CONFIG_HELP)
        return 0;
    if (cr == CM_CONFIG_ERROR) {
        fprintf(stderr, "onsale-reserve: %s%s\n", check_only ? "configuration invalid: " : "", err);
        return check_only ? 1 : 2;
    }
    int rc = 1;
    cm_reload_config_t *reload = NULL;
    if (check_only) {
        rc = check_config(&cfg);
        goto out;
    }
    cm_service_log_t log;
    if (cm_service_log_parse(&log, cfg.log_level, cfg.log_format, cfg.access_log, err,
                             sizeof(err)) != 0) {
        fprintf(stderr, "onsale-reserve: %s\n", err);
        goto out;
    }
    cm_service_log_start(&log, "reserve");
    if (rsv_config_check(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-reserve: %s\n", err);
        rc = 2;
        goto out;
    }
    if (rsv_config_validate(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-reserve: %s\n", err);
        goto out;
    }
    reload = reloader(table, ntable, &cfg, argc, argv);
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
    rc = rsv_server_serve(srv, reload); /* frees reload */
    reload = NULL;
    rsv_server_free(srv);
out:
    cm_reload_config_free(reload);
    cm_config_free(table, ntable, &cfg);
    return rc;
}
