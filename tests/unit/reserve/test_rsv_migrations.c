/*
 * test_rsv_migrations — the migrations the reserve embeds (reserve/rsv_migrations.c.in):
 * the numbered files of deploy/sql in order, then deploy/sql/functions.sql under
 * "functions.sql@<hash>". Against a real Postgres: the database's functions and triggers
 * are exactly the ones functions.sql creates (the file run again in a scratch schema
 * gives the same definitions, and no function is defined only elsewhere); migrating
 * again changes nothing (no migration recorded, no function re-created); a database
 * migrated before functions.sql existed upgrades to the same definitions as a fresh
 * one. Without a server: no numbered migration after 006 defines a function or trigger
 * (that is functions.sql's job: one would be undone on a fresh database and kept on an
 * upgraded one).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_log.h"
#include "rsv_pg.h"
#include "pg_migrated.h"

/* The migrations of 001-006 predate functions.sql and may define functions. */
#define HISTORIC_MIGRATIONS 6

static svc_pg_t *pg;

static const char *functions_sql(void)
{
    assert_true(rsv_migration_count >= 2);
    const char *name = rsv_migration_names[rsv_migration_count - 1];
    assert_int_equal(strncmp(name, "functions.sql@", 14), 0);
    assert_int_equal(strlen(name), 14 + 16);
    return rsv_migration_sqls[rsv_migration_count - 1];
}

static void migrate(const char *conninfo, size_t n)
{
    char err[512] = "";
    if (rsv_pg_migrate(conninfo, rsv_migration_names, rsv_migration_sqls, n, err, sizeof(err)) != 0)
        fail_msg("migrate: %s", err);
}

static PGconn *connect_to(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    return c;
}

static void exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

/* All rows of sql (one text column each), joined by "\n" (heap). */
static char *rows_text(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    size_t cap = 1;
    for (int i = 0; i < PQntuples(r); i++)
        cap += strlen(PQgetvalue(r, i, 0)) + 1;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = '\0';
    for (int i = 0; i < PQntuples(r); i++) {
        strcat(out, PQgetvalue(r, i, 0));
        strcat(out, "\n");
    }
    PQclear(r);
    return out;
}

/* Every function of schema s (its full definition, s. removed), by signature. */
static char *function_defs(PGconn *c, const char *s)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT replace(pg_get_functiondef(p.oid), '%s.', '') FROM pg_proc p "
             "WHERE p.pronamespace = '%s'::regnamespace "
             "ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)",
             s, s);
    return rows_text(c, sql);
}

/* Every trigger on the public tables (functions of scratch shown unqualified). */
static char *trigger_defs(PGconn *c)
{
    return rows_text(c, "SELECT replace(pg_get_triggerdef(t.oid), 'scratch.', '') "
                        "FROM pg_trigger t JOIN pg_class k ON k.oid = t.tgrelid "
                        "WHERE NOT t.tgisinternal AND k.relnamespace = 'public'::regnamespace "
                        "ORDER BY t.tgname");
}

/* Fails naming the first line where a and b differ. */
static void assert_same_text(const char *a, const char *b, const char *what)
{
    size_t i = 0, line = 1, start = 0;
    while (a[i] && a[i] == b[i]) {
        if (a[i] == '\n')
            line++, start = i + 1;
        i++;
    }
    if (a[i] == b[i])
        return;
    fail_msg("%s differ at line %zu:\n  %.120s\n  %.120s", what, line, a + start, b + start);
}

static int pg_setup(void **state)
{
    (void)state;
    cm_log_init("test_rsv_migrations", CM_LOG_WARN);
    pg = pg_migrated_start();
    return pg == NULL ? -1 : 0;
}

static int pg_teardown(void **state)
{
    (void)state;
    svc_pg_stop(pg);
    return 0;
}

/* --- the file is the database's code --------------------------------------------------- */

static void the_database_runs_functions_sql(void **state)
{
    (void)state;
    PGconn *c = connect_to(svc_pg_conninfo(pg));
    char *live = function_defs(c, "public");
    char *live_triggers = trigger_defs(c);
    assert_non_null(strstr(live, "FUNCTION onsale_saga_book("));
    /* The file once more, in a schema of its own first on the search path: every function
     * it creates lands there; its triggers (on the public tables) are replaced in place. */
    exec_ok(c, "BEGIN");
    exec_ok(c, "CREATE SCHEMA scratch");
    exec_ok(c, "SET LOCAL search_path = scratch, public");
    exec_ok(c, functions_sql());
    exec_ok(c, "SET LOCAL search_path = public");
    char *file = function_defs(c, "scratch");
    char *file_triggers = trigger_defs(c);
    exec_ok(c, "ROLLBACK");
    /* Same functions, same definitions: nothing is defined only in a migration. */
    assert_same_text(live, file, "the database's functions and functions.sql's");
    assert_same_text(live_triggers, file_triggers, "the database's triggers and functions.sql's");
    assert_non_null(strstr(live_triggers, "checkouts_audit"));
    assert_non_null(strstr(live_triggers, "checkouts_keep"));
    assert_non_null(strstr(live_triggers, "checkout_transitions_append_only"));
    free(live);
    free(live_triggers);
    free(file);
    free(file_triggers);
    PQfinish(c);
}

static void migrating_again_changes_nothing(void **state)
{
    (void)state;
    PGconn *c = connect_to(svc_pg_conninfo(pg));
    /* xmin of each pg_proc row: a CREATE OR REPLACE writes a new one even for the same text. */
    static const char procs[] = "SELECT p.proname || ' ' || p.xmin::text FROM pg_proc p "
                                "WHERE p.pronamespace = 'public'::regnamespace ORDER BY p.oid";
    static const char recorded[] = "SELECT name FROM schema_migrations ORDER BY name";
    char *before = rows_text(c, procs), *names = rows_text(c, recorded);
    migrate(svc_pg_conninfo(pg), rsv_migration_count);
    char *after = rows_text(c, procs), *names_after = rows_text(c, recorded);
    assert_same_text(before, after, "the functions before and after migrating again");
    assert_string_equal(names, names_after);
    /* Each migration recorded once, functions.sql under its hash. */
    char expect[2048] = "";
    for (size_t i = 0; i < rsv_migration_count; i++) {
        strcat(expect, rsv_migration_names[i]);
        strcat(expect, "\n");
    }
    assert_string_equal(names, expect);
    free(before);
    free(after);
    free(names);
    free(names_after);
    PQfinish(c);
}

static void an_older_database_upgrades_to_the_same_code(void **state)
{
    (void)state;
    PGconn *c = connect_to(svc_pg_conninfo(pg));
    exec_ok(c, "DROP DATABASE IF EXISTS onsale_upgrade");
    exec_ok(c, "CREATE DATABASE onsale_upgrade");
    char conninfo[1024];
    snprintf(conninfo, sizeof(conninfo), "%s dbname=onsale_upgrade", svc_pg_conninfo(pg));
    /* As deployed before functions.sql: the numbered migrations only; then today's. */
    migrate(conninfo, rsv_migration_count - 1);
    migrate(conninfo, rsv_migration_count);
    PGconn *u = connect_to(conninfo);
    char *fresh = function_defs(c, "public"), *upgraded = function_defs(u, "public");
    char *fresh_t = trigger_defs(c), *upgraded_t = trigger_defs(u);
    assert_same_text(fresh, upgraded, "a fresh database's functions and an upgraded one's");
    assert_same_text(fresh_t, upgraded_t, "a fresh database's triggers and an upgraded one's");
    free(fresh);
    free(upgraded);
    free(fresh_t);
    free(upgraded_t);
    PQfinish(u);
    exec_ok(c, "DROP DATABASE onsale_upgrade");
    PQfinish(c);
}

/* --- without a server ------------------------------------------------------------------ */

/* True when sql has "CREATE [OR REPLACE] FUNCTION|TRIGGER" outside -- comments. */
static bool defines_code(const char *sql)
{
    char *low = strdup(sql);
    assert_non_null(low);
    for (char *p = low; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    for (char *p = strstr(low, "--"); p; p = strstr(p, "--")) /* blank the comments */
        while (*p && *p != '\n')
            *p++ = ' ';
    bool found = false;
    for (char *p = strstr(low, "create"); p && !found; p = strstr(p + 6, "create")) {
        char *q = p + 6;
        while (isspace((unsigned char)*q))
            q++;
        if (strncmp(q, "or", 2) == 0 && isspace((unsigned char)q[2])) {
            q += 2;
            while (isspace((unsigned char)*q))
                q++;
            if (strncmp(q, "replace", 7) == 0)
                q += 7;
            while (isspace((unsigned char)*q))
                q++;
        }
        found = strncmp(q, "function", 8) == 0 || strncmp(q, "trigger", 7) == 0;
    }
    free(low);
    return found;
}

static void new_migrations_leave_functions_to_the_file(void **state)
{
    (void)state;
    assert_true(defines_code(functions_sql()));
    assert_true(defines_code("CREATE OR\n  REPLACE FUNCTION f() ..."));
    assert_true(defines_code("create trigger t"));
    assert_false(defines_code("-- CREATE FUNCTION in a comment\nALTER TABLE t ADD c int;"));
    /* The numbered migrations, in order; the historic ones may define functions. */
    for (size_t i = 0; i + 1 < rsv_migration_count; i++) {
        const char *name = rsv_migration_names[i];
        assert_true(isdigit((unsigned char)name[0]));
        if (i > 0)
            assert_true(strcmp(rsv_migration_names[i - 1], name) < 0);
        if (i >= HISTORIC_MIGRATIONS && defines_code(rsv_migration_sqls[i]))
            fail_msg("%s defines a function or trigger: put it in deploy/sql/functions.sql", name);
    }
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(new_migrations_leave_functions_to_the_file),
    };
    const struct CMUnitTest against_pg[] = {
        cmocka_unit_test(the_database_runs_functions_sql),
        cmocka_unit_test(migrating_again_changes_nothing),
        cmocka_unit_test(an_older_database_upgrades_to_the_same_code),
    };
    int rc = cmocka_run_group_tests(pure, NULL, NULL);
    return rc | cmocka_run_group_tests(against_pg, pg_setup, pg_teardown);
}
