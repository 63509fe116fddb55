/*
 * rsv_migrations — the schema the reserve applies at start (rsv_pg_migrate): the numbered
 * migrations of deploy/sql/ and functions.sql, embedded at build time by
 * reserve/CMakeLists.txt from rsv_migrations.c.in, in the order they apply.
 */
#ifndef RSV_MIGRATIONS_H
#define RSV_MIGRATIONS_H

#include <stddef.h>

/** File names (NULL-terminated) and SQL texts, rsv_migration_count of each. */
extern const char *const rsv_migration_names[];
extern const char *const rsv_migration_sqls[];
extern const size_t rsv_migration_count;

#endif
