/*
 * pg_migrated.h — a private Postgres (svc.h) with the reserve's whole schema applied, for
 * the reserve's unit tests that run against a real database. Header-only: the test links
 * rsv_core, which the support library does not.
 */
#ifndef PG_MIGRATED_H
#define PG_MIGRATED_H

#include <stdio.h>

#include "rsv_migrations.h"
#include "rsv_pg.h"
#include "svc.h"

/* Starts the server and migrates it; NULL (the reason printed) when either fails. */
static inline svc_pg_t *pg_migrated_start(void)
{
    svc_pg_t *pg = svc_pg_start();
    if (pg == NULL)
        return NULL;
    char err[512];
    if (rsv_pg_migrate(svc_pg_conninfo(pg), rsv_migration_names, rsv_migration_sqls,
                       rsv_migration_count, err, sizeof(err)) != 0) {
        fprintf(stderr, "migrate: %s\n", err);
        svc_pg_stop(pg);
        return NULL;
    }
    return pg;
}

#endif
