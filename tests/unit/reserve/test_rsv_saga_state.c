/*
 * test_rsv_saga_state — reserve/rsv_saga_state.c: the checkout state machine's tables are
 * consistent (names unique and parseable, every transition between known states, every
 * open state can reach a terminal one, confirmed and refunded are final, money-holding
 * states never end elsewhere), rsv_saga_allowed against the diagram of rsv_saga_state.h and
 * docs/confirm.md written out by hand (every pair of states: allowed iff drawn; the moves
 * that would lose money refused by name), the buyer's view of each state, and — against a real
 * Postgres with every migration of deploy/sql applied — the CHECK constraint on
 * checkouts.state names exactly the enum's states and the reconciler's partial indexes
 * exclude exactly the terminal ones.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cm_log.h"
#include "rsv_pg.h"
#include "rsv_saga_state.h"
#include "pg_migrated.h"

/* --- the tables ------------------------------------------------------------------------ */

static void names_are_unique_and_parse(void **state)
{
    (void)state;
    for (int i = 0; i < RSV_SAGA_NSTATES; i++) {
        assert_non_null(rsv_saga_state_names[i]);
        assert_int_equal(rsv_saga_state_parse(rsv_saga_state_names[i]), i);
        assert_string_equal(rsv_saga_state_name((rsv_saga_state_t)i), rsv_saga_state_names[i]);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(rsv_saga_state_names[i], rsv_saga_state_names[j]);
    }
    assert_int_equal(rsv_saga_state_parse("nope"), RSV_SAGA_INVALID);
    assert_int_equal(rsv_saga_state_parse(NULL), RSV_SAGA_INVALID);
    assert_string_equal(rsv_saga_state_name(RSV_SAGA_INVALID), "invalid");
    assert_true(rsv_saga_terminal("refunded"));
    assert_false(rsv_saga_terminal("refunding"));
    assert_false(rsv_saga_terminal("garbage"));
}

/* reach[s]: states reachable from s (s included). */
static void closure(bool reach[RSV_SAGA_NSTATES][RSV_SAGA_NSTATES])
{
    memset(reach, 0, sizeof(bool) * RSV_SAGA_NSTATES * RSV_SAGA_NSTATES);
    for (int s = 0; s < RSV_SAGA_NSTATES; s++)
        reach[s][s] = true;
    for (size_t i = 0; i < rsv_saga_ntransitions; i++)
        reach[rsv_saga_transitions[i].from][rsv_saga_transitions[i].to] = true;
    for (int k = 0; k < RSV_SAGA_NSTATES; k++)
        for (int a = 0; a < RSV_SAGA_NSTATES; a++)
            for (int b = 0; b < RSV_SAGA_NSTATES; b++)
                reach[a][b] = reach[a][b] || (reach[a][k] && reach[k][b]);
}

static void transitions_are_a_sound_machine(void **state)
{
    (void)state;
    for (size_t i = 0; i < rsv_saga_ntransitions; i++) {
        const rsv_saga_transition_t *t = &rsv_saga_transitions[i];
        assert_true(t->from >= 0 && t->from < RSV_SAGA_NSTATES);
        assert_true(t->to >= 0 && t->to < RSV_SAGA_NSTATES);
        assert_int_not_equal(t->from, t->to);
        assert_non_null(t->why);
        assert_true(rsv_saga_allowed(t->from, t->to));
        for (size_t j = 0; j < i; j++)
            assert_false(rsv_saga_transitions[j].from == t->from &&
                         rsv_saga_transitions[j].to == t->to);
        /* Confirmed and refunded are final; the other terminal states move only when
         * money turns up (to refunding). */
        assert_int_not_equal(t->from, RSV_SAGA_CONFIRMED);
        assert_int_not_equal(t->from, RSV_SAGA_REFUNDED);
        if (rsv_saga_is_terminal(t->from))
            assert_int_equal(t->to, RSV_SAGA_REFUNDING);
    }
    bool reach[RSV_SAGA_NSTATES][RSV_SAGA_NSTATES];
    closure(reach);
    for (int s = 0; s < RSV_SAGA_NSTATES; s++) {
        if (s != RSV_SAGA_CONVERTING) /* only the pre-saga code of 001 wrote it */
            assert_true(reach[RSV_SAGA_CREATED][s]);
        bool ends = false;
        for (int t = 0; t < RSV_SAGA_NSTATES; t++)
            ends = ends || (reach[s][t] && rsv_saga_is_terminal((rsv_saga_state_t)t));
        assert_true(ends);
    }
    /* Once paid, only confirmed or refunded can end it. */
    for (int t = 0; t < RSV_SAGA_NSTATES; t++)
        if (reach[RSV_SAGA_PAID][t] && rsv_saga_is_terminal((rsv_saga_state_t)t))
            assert_true(t == RSV_SAGA_CONFIRMED || t == RSV_SAGA_REFUNDED);
    assert_true(reach[RSV_SAGA_RELEASED][RSV_SAGA_REFUNDED]);
    assert_false(rsv_saga_allowed(RSV_SAGA_PAID, RSV_SAGA_RELEASED));
    assert_false(rsv_saga_allowed_names("paid", "nope"));
    assert_true(rsv_saga_allowed_names("released", "refunding"));
}

/* The diagram of rsv_saga_state.h and docs/confirm.md, written out here by hand (not read from
 * the table): every move a checkout may make. */
static const char *const documented[][2] = {
    {"created", "hold_extended"},
    {"created", "failed"},
    {"created", "released"},
    {"hold_extended", "payment_requested"},
    {"hold_extended", "failed"},
    {"hold_extended", "released"},
    {"payment_requested", "paid"},
    {"payment_requested", "declined"},
    {"payment_requested", "unknown"},
    {"payment_requested", "released"}, /* confirm.md: the provider has none → released */
    {"unknown", "paid"},
    {"unknown", "declined"},
    {"unknown", "released"},
    {"converting", "paid"}, /* resolved like unknown */
    {"converting", "declined"},
    {"converting", "unknown"},
    {"converting", "released"},
    {"paid", "converted"},
    {"paid", "refunding"},
    {"converted", "confirmed"},
    {"declined", "failed"},
    {"refunding", "refunded"},
    {"released", "refunding"},
    {"failed", "refunding"},
    {"payment_requested", "requires_action"}, /* 3-D Secure: the buyer's turn */
    {"unknown", "requires_action"},
    {"requires_action", "paid"},
    {"requires_action", "declined"},
    {"requires_action", "released"}, /* abandoned: the intent canceled */
};

static bool is_documented(const char *from, const char *to)
{
    for (size_t i = 0; i < sizeof(documented) / sizeof(documented[0]); i++)
        if (strcmp(documented[i][0], from) == 0 && strcmp(documented[i][1], to) == 0)
            return true;
    return false;
}

static void allowed_is_exactly_the_documented_diagram(void **state)
{
    (void)state;
    /* The enum, the names and the documented states agree: 14 states, 4 of them final. */
    assert_int_equal(RSV_SAGA_NSTATES, 14);
    int terminal = 0;
    for (int s = 0; s < RSV_SAGA_NSTATES; s++)
        terminal += rsv_saga_is_terminal((rsv_saga_state_t)s);
    assert_int_equal(terminal, 4);
    for (size_t i = 0; i < sizeof(documented) / sizeof(documented[0]); i++) {
        assert_int_not_equal(rsv_saga_state_parse(documented[i][0]), RSV_SAGA_INVALID);
        assert_int_not_equal(rsv_saga_state_parse(documented[i][1]), RSV_SAGA_INVALID);
    }
    /* Every ordered pair: allowed iff documented (so nothing undocumented is allowed). */
    int allowed = 0;
    for (int a = 0; a < RSV_SAGA_NSTATES; a++)
        for (int b = 0; b < RSV_SAGA_NSTATES; b++) {
            const char *from = rsv_saga_state_names[a], *to = rsv_saga_state_names[b];
            bool yes = rsv_saga_allowed((rsv_saga_state_t)a, (rsv_saga_state_t)b);
            if (yes != is_documented(from, to))
                fail_msg("%s -> %s: allowed %d, documented %d", from, to, yes,
                         is_documented(from, to));
            assert_int_equal(rsv_saga_allowed_names(from, to), yes);
            allowed += yes;
        }
    assert_int_equal(allowed, (int)(sizeof(documented) / sizeof(documented[0])));
    assert_int_equal((int)rsv_saga_ntransitions, allowed);
    /* Out of range never moves. */
    assert_false(rsv_saga_allowed(RSV_SAGA_INVALID, RSV_SAGA_CREATED));
    assert_false(rsv_saga_allowed(RSV_SAGA_CREATED, RSV_SAGA_INVALID));
    assert_false(rsv_saga_allowed(RSV_SAGA_NSTATES, RSV_SAGA_REFUNDED));
    assert_false(rsv_saga_allowed(RSV_SAGA_REFUNDING, RSV_SAGA_NSTATES));
    /* The moves that would lose money or sell without it, refused by name. */
    static const char *const forbidden[][2] = {
        {"paid", "released"},
        {"paid", "failed"},
        {"paid", "confirmed"},
        {"created", "paid"},
        {"hold_extended", "paid"},
        {"created", "confirmed"},
        {"declined", "paid"},
        {"refunding", "paid"},
        {"refunding", "confirmed"},
        {"confirmed", "refunding"},
        {"refunded", "refunding"},
        {"refunded", "paid"},
        {"released", "paid"},
        {"failed", "confirmed"},
        {"unknown", "confirmed"},
        {"converted", "refunding"},
        {"requires_action", "confirmed"},
        {"requires_action", "refunding"},
    };
    for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        if (rsv_saga_allowed_names(forbidden[i][0], forbidden[i][1]))
            fail_msg("%s -> %s is allowed", forbidden[i][0], forbidden[i][1]);
    /* Confirmed and refunded have no exit at all. */
    for (int b = 0; b < RSV_SAGA_NSTATES; b++) {
        assert_false(rsv_saga_allowed(RSV_SAGA_CONFIRMED, (rsv_saga_state_t)b));
        assert_false(rsv_saga_allowed(RSV_SAGA_REFUNDED, (rsv_saga_state_t)b));
    }
}

static void buyers_see_six_states(void **state)
{
    (void)state;
    for (int s = 0; s < RSV_SAGA_NSTATES; s++) {
        const char *c = rsv_saga_client_state((rsv_saga_state_t)s);
        if (rsv_saga_is_terminal((rsv_saga_state_t)s) || s == RSV_SAGA_REQUIRES_ACTION)
            assert_string_equal(c, rsv_saga_state_names[s]);
        else
            assert_string_equal(c, "pending");
    }
    assert_string_equal(rsv_saga_client_state(RSV_SAGA_INVALID), "pending");
}

/* --- against Postgres ------------------------------------------------------------------ */

static svc_pg_t *pg;

static int pg_setup(void **state)
{
    (void)state;
    cm_log_init("test_rsv_saga_state", CM_LOG_WARN);
    pg = pg_migrated_start();
    return pg == NULL ? -1 : 0;
}

static int pg_teardown(void **state)
{
    (void)state;
    svc_pg_stop(pg);
    return 0;
}

/* The '…' literals of text, as a bit set over the states; -1 if one is no state. */
static long quoted_states(const char *text)
{
    long set = 0;
    for (const char *p = strchr(text, '\''); p; p = strchr(p + 1, '\'')) {
        const char *e = strchr(p + 1, '\'');
        if (e == NULL)
            break;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(e - p - 1), p + 1);
        rsv_saga_state_t s = rsv_saga_state_parse(name);
        if (s == RSV_SAGA_INVALID) {
            fprintf(stderr, "not a saga state: %s\n", name);
            return -1;
        }
        set |= 1L << s;
        p = e;
    }
    return set;
}

static char *one_value(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    static char buf[4096];
    snprintf(buf, sizeof(buf), "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return buf;
}

static void sql_check_matches_the_enum(void **state)
{
    (void)state;
    PGconn *c = PQconnectdb(svc_pg_conninfo(pg));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    long all = (1L << RSV_SAGA_NSTATES) - 1, terminal = 0;
    for (int s = 0; s < RSV_SAGA_NSTATES; s++)
        if (rsv_saga_is_terminal((rsv_saga_state_t)s))
            terminal |= 1L << s;
    const char *check = one_value(c, "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                     "WHERE conname = 'checkouts_state_check'");
    assert_int_equal(quoted_states(check), all);
    /* Every partial index over open checkouts (checkouts_reconcile; checkouts_open until
     * migration 006 dropped it). */
    const char *pred = one_value(c, "SELECT pg_get_expr(indpred, indrelid) FROM pg_index "
                                    "WHERE indexrelid = 'checkouts_reconcile'::regclass");
    assert_non_null(strstr(pred, "<> ALL"));
    assert_int_equal(quoted_states(pred), terminal);
    assert_string_equal(one_value(c, "SELECT count(*) FROM pg_index WHERE indrelid = "
                                     "'checkouts'::regclass AND indpred IS NOT NULL"),
                        "1");
    /* The reconciler's claim skips exactly the terminal states too. */
    const char *claim = one_value(c, "SELECT prosrc FROM pg_proc "
                                     "WHERE proname = 'onsale_reconcile_claim'");
    assert_int_equal(quoted_states(strstr(claim, "NOT IN")), terminal);
    PQfinish(c);
}

/* Every outcome onsale_saga_start can answer parses, and every parsed one is answered:
 * the checkout's start is dispatched on exactly the function's outcomes. */
static void start_outcomes_match_the_function(void **state)
{
    (void)state;
    assert_int_equal(rsv_saga_start_parse(NULL), RSV_START_INVALID);
    assert_int_equal(rsv_saga_start_parse("resumed"), RSV_START_INVALID);
    PGconn *c = PQconnectdb(svc_pg_conninfo(pg));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    const char *src =
        one_value(c, "SELECT prosrc FROM pg_proc WHERE proname = 'onsale_saga_start'");
    long seen = 0;
    for (const char *p = strstr(src, "outcome := '"); p; p = strstr(p + 1, "outcome := '")) {
        const char *q = p + strlen("outcome := '"), *e = strchr(q, '\'');
        assert_non_null(e);
        char name[32];
        snprintf(name, sizeof(name), "%.*s", (int)(e - q), q);
        rsv_saga_start_t o = rsv_saga_start_parse(name);
        if (o == RSV_START_INVALID)
            fail_msg("onsale_saga_start answers '%s', which rsv_saga_start_parse does not know",
                     name);
        seen |= 1L << o;
    }
    assert_int_equal(seen, (1L << RSV_START_NOUTCOMES) - 1);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(names_are_unique_and_parse),
        cmocka_unit_test(transitions_are_a_sound_machine),
        cmocka_unit_test(allowed_is_exactly_the_documented_diagram),
        cmocka_unit_test(buyers_see_six_states),
    };
    const struct CMUnitTest db[] = {
        cmocka_unit_test(sql_check_matches_the_enum),
        cmocka_unit_test(start_outcomes_match_the_function),
    };
    int rc = cmocka_run_group_tests(pure, NULL, NULL);
    return rc + cmocka_run_group_tests(db, pg_setup, pg_teardown);
}
