/*
 * test_rsv_pg — the Postgres pool against a real Postgres started by tests/support/svc.h.
 *
 * Each test runs the event loop until what it waits for has happened or a hard timeout
 * passes (never sleep()), and ends by checking that the pool left no event behind. The
 * restart test stops and starts the shared server, so it runs last.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm_err.h"
#include "cm_log.h"
#include "loop.h"
#include "rsv_pg.h"
#include "svc.h"

#define HARD_MS 15000

static svc_pg_t *srv;
static struct event_base *base;
static int answer_seq; /* order in which callbacks ran, across a test */

/* What one callback saw (the result is copied: it lives only during the callback). */
struct qres {
    int calls;
    int seq;
    const char *err;
    int rows, cols;
    char v[4][64];
    int null[4];
    char sqlstate[8];
    char msg[256];
};

static void on_qres(const char *err, const rsv_pg_result_t *res, void *arg)
{
    struct qres *q = arg;

    q->calls++;
    q->seq = ++answer_seq;
    q->err = err;
    q->rows = rsv_pg_result_rows(res);
    q->cols = rsv_pg_result_cols(res);
    for (int c = 0; c < q->cols && c < 4; c++) {
        snprintf(q->v[c], sizeof(q->v[c]), "%s", rsv_pg_result_value(res, 0, c));
        q->null[c] = rsv_pg_result_isnull(res, 0, c);
    }
    snprintf(q->sqlstate, sizeof(q->sqlstate), "%s", rsv_pg_result_sqlstate(res));
    snprintf(q->msg, sizeof(q->msg), "%s", rsv_pg_result_message(res));
}

/* ---- loop helpers ---- */

struct count_wait {
    struct qres *q;
    int n;
};

static int all_called(void *arg)
{
    struct count_wait *w = arg;
    for (int i = 0; i < w->n; i++)
        if (w->q[i].calls == 0)
            return 0;
    return 1;
}

static int wait_calls(struct qres *q, int n)
{
    struct count_wait w = {q, n};
    return tloop_until(base, all_called, &w, HARD_MS);
}

struct conn_wait {
    rsv_pg_t *pg;
    int n;
};

static int has_connected(void *arg)
{
    struct conn_wait *w = arg;
    return rsv_pg_connected(w->pg) == w->n;
}

static int wait_connected(rsv_pg_t *pg, int n)
{
    struct conn_wait w = {pg, n};
    return tloop_until(base, has_connected, &w, HARD_MS);
}

/* Runs one query to completion; returns its callback's view. */
static struct qres query(rsv_pg_t *pg, const char *sql, int nparams, const char *const *params)
{
    struct qres q = {0};
    assert_int_equal(rsv_pg_query(pg, sql, nparams, params, on_qres, &q), 0);
    assert_int_equal(q.calls, 0); /* never from inside rsv_pg_query */
    assert_true(wait_calls(&q, 1));
    assert_int_equal(q.calls, 1);
    return q;
}

static void query_ok(rsv_pg_t *pg, const char *sql)
{
    struct qres q = query(pg, sql, 0, NULL);
    if (q.err != NULL)
        fail_msg("%s: %s (%s)", sql, q.err, q.msg);
}

static rsv_pg_t *pool(int size, int timeout_ms, int max_queue)
{
    rsv_pg_t *pg = rsv_pg_new(base, svc_pg_conninfo(srv), size, timeout_ms, max_queue);
    assert_true(wait_connected(pg, size));
    return pg;
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    cm_log_init("test_rsv_pg", CM_LOG_WARN);
    srv = svc_pg_start();
    return srv == NULL ? -1 : 0;
}

static int group_teardown(void **state)
{
    svc_pg_stop(srv);
    srv = NULL;
    return 0;
}

static int setup(void **state)
{
    base = event_base_new();
    answer_seq = 0;
    return base == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    int left;

    /* let libevent finish its own internal work, then nothing of ours may remain */
    event_base_loop(base, EVLOOP_NONBLOCK);
    left = event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE);
    if (left != 0)
        event_base_dump_events(base, stderr);
    event_base_free(base);
    base = NULL;
    assert_int_equal(left, 0);
    return 0;
}

/* ---- tests ---- */

static void test_query_with_params(void **state)
{
    rsv_pg_t *pg = pool(2, 5000, 100);
    const char *params[] = {"2", "3", NULL, "h\xc3\xa9llo 'x' $1"};
    struct qres q =
        query(pg, "SELECT $1::int + $2::int, $3::text IS NULL, $4::text, $3::text", 4, params);

    assert_null(q.err);
    assert_int_equal(q.rows, 1);
    assert_int_equal(q.cols, 4);
    assert_string_equal(q.v[0], "5");
    assert_string_equal(q.v[1], "t");
    assert_string_equal(q.v[2], "h\xc3\xa9llo 'x' $1");
    assert_false(q.null[2]);
    assert_string_equal(q.v[3], ""); /* SQL NULL reads as "" … */
    assert_true(q.null[3]);          /* … and says so */

    /* without params a statement may hold several commands; the last result comes back */
    q = query(pg,
              "CREATE TABLE t_multi (x int); INSERT INTO t_multi VALUES (1), (2);"
              "SELECT count(*) FROM t_multi",
              0, NULL);
    assert_null(q.err);
    assert_string_equal(q.v[0], "2");
    query_ok(pg, "DROP TABLE t_multi");

    q = query(pg, "SELECT 1 WHERE false", 0, NULL);
    assert_null(q.err);
    assert_int_equal(q.rows, 0);
    assert_string_equal(q.v[0], "");
    rsv_pg_free(pg);
}

static void test_sql_error_gives_sqlstate(void **state)
{
    rsv_pg_t *pg = pool(1, 5000, 100);
    const char *one[] = {"1"};
    struct qres q;

    query_ok(pg, "CREATE TABLE t_uniq (id int PRIMARY KEY)");
    q = query(pg, "INSERT INTO t_uniq VALUES ($1)", 1, one);
    assert_null(q.err);
    q = query(pg, "INSERT INTO t_uniq VALUES ($1)", 1, one);
    assert_ptr_equal(q.err, cm_err_server);
    assert_string_equal(q.sqlstate, "23505");
    assert_non_null(strstr(q.msg, "duplicate key"));

    q = query(pg, "SELEC 1", 0, NULL);
    assert_ptr_equal(q.err, cm_err_server);
    assert_string_equal(q.sqlstate, "42601");

    /* the first error of a multi-command statement is the one reported */
    q = query(pg, "SELECT 1; SELECT 1/0; SELECT 2", 0, NULL);
    assert_ptr_equal(q.err, cm_err_server);
    assert_string_equal(q.sqlstate, "22012");

    /* an error does not cost the connection */
    q = query(pg, "SELECT count(*) FROM t_uniq", 0, NULL);
    assert_null(q.err);
    assert_string_equal(q.v[0], "1");
    assert_int_equal(rsv_pg_connected(pg), 1);
    query_ok(pg, "DROP TABLE t_uniq");
    rsv_pg_free(pg);
}

/*
 * A statement with parameters is prepared once per connection and then runs prepared; a
 * Parse that fails answers the error an unnamed run gives; a statement whose result
 * columns changed (DDL) costs one error and a fresh connection, never a stuck statement.
 */
static void test_statements_run_prepared(void **state)
{
    rsv_pg_t *pg = pool(1, 5000, 100);
    const char *sql = "SELECT $1::int * 2";
    const char *p[] = {"21"};
    struct qres q;

    for (int i = 0; i < 3; i++) {
        q = query(pg, sql, 1, p);
        assert_null(q.err);
        assert_string_equal(q.v[0], "42");
    }
    const char *look[] = {sql};
    q = query(pg, "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", 1, look);
    assert_null(q.err);
    assert_string_equal(q.v[0], "1");

    for (int i = 0; i < 2; i++) {
        q = query(pg, "SELEC $1", 1, p);
        assert_ptr_equal(q.err, cm_err_server);
        assert_string_equal(q.sqlstate, "42601");
    }
    assert_int_equal(rsv_pg_connected(pg), 1);

    const char *one[] = {"1"};
    const char *sel = "SELECT * FROM t_prep WHERE a = $1::int";
    query_ok(pg, "CREATE TABLE t_prep (a int); INSERT INTO t_prep VALUES (1)");
    q = query(pg, sel, 1, one);
    assert_null(q.err);
    assert_int_equal(q.cols, 1);
    query_ok(pg, "ALTER TABLE t_prep ADD COLUMN b int");
    q = query(pg, sel, 1, one);
    assert_ptr_equal(q.err, cm_err_server);
    assert_string_equal(q.sqlstate, "0A000");
    q = query(pg, sel, 1, one);
    assert_null(q.err);
    assert_int_equal(q.cols, 2);
    query_ok(pg, "DROP TABLE t_prep");
    rsv_pg_free(pg);
}

/*
 * A write that meets a read-only session (a node that became a standby under the pool: a
 * failover) is answered as a lost connection, and the pool reconnects at once instead of
 * sending every later write to the same read-only session.
 */
static void test_read_only_session_reconnects(void **state)
{
    rsv_pg_t *pg = pool(1, 5000, 100);
    const char *p[] = {"1"};
    struct qres q;

    query_ok(pg, "SET default_transaction_read_only = on");
    q = query(pg, "CREATE TABLE t_ro (a int)", 0, NULL);
    assert_ptr_equal(q.err, cm_err_closed);
    q = query(pg, "SELECT current_setting('transaction_read_only'), $1::int", 1, p);
    assert_null(q.err);
    assert_string_equal(q.v[0], "off"); /* a new session */
    query_ok(pg, "CREATE TABLE t_ro (a int)");
    query_ok(pg, "DROP TABLE t_ro");
    rsv_pg_free(pg);
}

/*
 * A host that accepts TCP and never answers (its kernel completes the handshakes into
 * the listen backlog; nobody accepts): a frozen or cut-off old primary. Returns the
 * listening socket; *port its port.
 */
static int silent_host(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 64), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/*
 * Two hosts, the first silent: every connection of the pool gets past it within its
 * connect deadline (connect_timeout) and onto the second, which takes the queries. Before
 * the connects rotated their host lists, each attempt hung on the first host until the
 * deadline and began again with it, so the pool never connected.
 */
static void test_silent_first_host_is_passed(void **state)
{
    int port;
    int fd = silent_host(&port);
    char conninfo[1024];
    rsv_pg_t *pg;

    snprintf(conninfo, sizeof(conninfo), "%s host=127.0.0.1,127.0.0.1 port=%d,%d connect_timeout=2",
             svc_pg_conninfo(srv), port, svc_pg_port(srv));
    pg = rsv_pg_new(base, conninfo, 3, 5000, 100);
    assert_true(wait_connected(pg, 3));
    query_ok(pg, "SELECT 1");
    rsv_pg_free(pg);
    close(fd);
}

/* ---- host names (looked up on the loop, then given to libpq as hostaddr) ---- */

struct gap {
    struct timeval last;
    long max_us;
};

static void on_gap_tick(evutil_socket_t fd, short what, void *arg)
{
    struct gap *g = arg;
    struct timeval now, d;

    evutil_gettimeofday(&now, NULL);
    evutil_timersub(&now, &g->last, &d);
    if (d.tv_sec * 1000000L + d.tv_usec > g->max_us)
        g->max_us = d.tv_sec * 1000000L + d.tv_usec;
    g->last = now;
}

/* Runs the loop for ms with a 10 ms timer; returns the longest wait between its ticks. */
static long max_gap_during(int ms)
{
    struct gap g = {{0, 0}, 0};
    struct timeval tv = {0, 10000};
    struct event *tick = event_new(base, -1, EV_PERSIST, on_gap_tick, &g);

    evutil_gettimeofday(&g.last, NULL);
    event_add(tick, &tv);
    tloop_for(base, ms);
    event_free(tick);
    return g.max_us;
}

/* host=localhost: the pool connects through the name and serves queries. */
static void test_host_by_name(void **state)
{
    char conninfo[1024];
    rsv_pg_t *pg;
    struct qres q;

    snprintf(conninfo, sizeof(conninfo), "%s host=localhost", svc_pg_conninfo(srv));
    pg = rsv_pg_new(base, conninfo, 2, 5000, 100);
    assert_true(wait_connected(pg, 2));
    q = query(pg, "SELECT host(inet_server_addr())", 0, NULL);
    assert_null(q.err);
    assert_string_equal(q.v[0], "127.0.0.1");
    rsv_pg_free(pg);
}

/*
 * A host name whose nameserver never answers (ONSALE_TEST_NAMESERVER: a UDP socket of
 * ours that reads and stays silent): the lookup is asked of it — so it is not libpq's
 * blocking getaddrinfo, which would hold the loop inside PQconnectPoll — while a 10 ms
 * timer keeps its pace; queries wait and fail cleanly, and after the connect deadline
 * the next attempt looks the name up again.
 */
static void test_silent_dns_never_blocks(void **state)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    char ns[64], conninfo[1024], buf[512];
    int seen = 0;
    rsv_pg_t *pg;
    struct qres q = {0};

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    snprintf(ns, sizeof(ns), "127.0.0.1:%d", ntohs(a.sin_port));
    assert_int_equal(setenv("ONSALE_TEST_NAMESERVER", ns, 1), 0);
    snprintf(conninfo, sizeof(conninfo), "%s host=pg.onsale.invalid", svc_pg_conninfo(srv));
    pg = rsv_pg_new(base, conninfo, 1, 300, 10);
    unsetenv("ONSALE_TEST_NAMESERVER");
    assert_int_equal(rsv_pg_query(pg, "SELECT 1", 0, NULL, on_qres, &q), 0);
    assert_true(max_gap_during(250) < 100000);
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        seen++;
    assert_true(seen >= 1);
    assert_int_equal(rsv_pg_connected(pg), 0);
    assert_true(wait_calls(&q, 1));
    assert_string_equal(q.err, cm_err_closed);
    /* past the 300 ms connect deadline and the backoff: asked again */
    assert_true(max_gap_during(500) < 100000);
    seen = 0;
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        seen++;
    assert_true(seen >= 1);
    rsv_pg_free(pg);
    close(fd);
}

struct sleeper_gone {
    rsv_pg_t *pg;
    struct qres q;
    int running; /* a query is out */
    int gone;
};

/* Polls pg_stat_activity until no backend runs the timed-out pg_sleep any more. */
static int sleeper_gone(void *arg)
{
    struct sleeper_gone *s = arg;

    if (s->running && s->q.calls > 0) {
        s->running = 0;
        if (s->q.err == NULL && strcmp(s->q.v[0], "0") == 0)
            s->gone = 1;
    }
    if (!s->gone && !s->running) {
        memset(&s->q, 0, sizeof(s->q));
        s->running = 1;
        assert_int_equal(rsv_pg_query(s->pg,
                                      "SELECT count(*) FROM pg_stat_activity WHERE query = "
                                      "'SELECT pg_sleep(30)' AND state = 'active'",
                                      0, NULL, on_qres, &s->q),
                         0);
    }
    return s->gone;
}

static void test_timeout_reopens_connection(void **state)
{
    rsv_pg_t *pg = pool(1, 300, 100);
    struct qres q = query(pg, "SELECT pg_sleep(30)", 0, NULL);
    struct sleeper_gone s = {pg, {0}, 0, 0};

    assert_ptr_equal(q.err, cm_err_timeout);
    /* the connection was closed and is being reopened: this one waits for it */
    query_ok(pg, "SELECT 1");
    assert_int_equal(rsv_pg_connected(pg), 1);
    /* the server gives up on the abandoned statement too (statement_timeout) */
    assert_true(tloop_until(base, sleeper_gone, &s, HARD_MS));
    if (s.running)
        assert_true(wait_calls(&s.q, 1));
    rsv_pg_free(pg);
}

static void run_many(int size, int n, int check_order)
{
    rsv_pg_t *pg = pool(size, 10000, n);
    struct qres *q = calloc((size_t)n, sizeof(*q));
    char(*vals)[16] = calloc((size_t)n, sizeof(*vals));
    char pids[4][64] = {{0}};
    int npids = 0;

    answer_seq = 0;
    for (int i = 0; i < n; i++) {
        const char *params[1] = {vals[i]};
        snprintf(vals[i], sizeof(vals[i]), "%d", i);
        assert_int_equal(
            rsv_pg_query(pg, "SELECT $1::int, pg_backend_pid()::text", 1, params, on_qres, &q[i]),
            0);
    }
    assert_true(wait_calls(q, n));
    for (int i = 0; i < n; i++) {
        int known = 0;
        assert_int_equal(q[i].calls, 1);
        assert_null(q[i].err);
        assert_int_equal(atoi(q[i].v[0]), i); /* each callback got its own answer */
        if (check_order)
            assert_int_equal(q[i].seq, i + 1);
        for (int p = 0; p < npids; p++)
            known |= strcmp(pids[p], q[i].v[1]) == 0;
        if (!known) {
            assert_true(npids < size); /* never more backends than the pool's size */
            snprintf(pids[npids++], sizeof(pids[0]), "%s", q[i].v[1]);
        }
    }
    free(q);
    free(vals);
    rsv_pg_free(pg);
}

static void test_many_concurrent_queries(void **state)
{
    run_many(2, 300, 0);
    run_many(1, 100, 1); /* one connection: answers come in the order asked */
}

static void test_queue_overflow_is_busy(void **state)
{
    rsv_pg_t *pg = pool(1, 5000, 2);
    struct qres q[4] = {{0}};

    assert_int_equal(rsv_pg_query(pg, "SELECT pg_sleep(0.2)", 0, NULL, on_qres, &q[0]), 0);
    assert_int_equal(rsv_pg_query(pg, "SELECT 1", 0, NULL, on_qres, &q[1]), 0);
    assert_int_equal(rsv_pg_query(pg, "SELECT 2", 0, NULL, on_qres, &q[2]), 0);
    assert_int_equal(rsv_pg_query(pg, "SELECT 3", 0, NULL, on_qres, &q[3]), 0);
    assert_int_equal(q[3].calls, 0); /* refused, but answered from the loop */
    assert_true(wait_calls(q, 4));
    assert_ptr_equal(q[3].err, cm_err_busy);
    assert_int_equal(q[3].seq, 1); /* at once, not after the queue drained */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(q[i].calls, 1);
        assert_null(q[i].err);
    }
    assert_string_equal(q[2].v[0], "2");
    rsv_pg_free(pg);
}

struct in_shutdown {
    rsv_pg_t *pg;
    int calls;
    const char *err;
};

static void on_query_in_shutdown(const char *err, const rsv_pg_result_t *res, void *arg)
{
    struct in_shutdown *s = arg;
    struct qres ignored;

    s->calls++;
    s->err = err;
    /* a callback run by rsv_pg_free cannot start new work */
    assert_int_equal(rsv_pg_query(s->pg, "SELECT 1", 0, NULL, on_qres, &ignored), -1);
}

static void test_free_answers_everything(void **state)
{
    rsv_pg_t *pg = pool(1, 5000, 1);
    struct in_shutdown waiting = {pg, 0, NULL};
    struct qres q[3] = {{0}};

    assert_int_equal(rsv_pg_query(pg, "SELECT pg_sleep(5)", 0, NULL, on_qres, &q[0]), 0);
    assert_int_equal(rsv_pg_query(pg, "SELECT 1", 0, NULL, on_query_in_shutdown, &waiting), 0);
    assert_int_equal(rsv_pg_query(pg, "SELECT 2", 0, NULL, on_qres, &q[1]), 0); /* queue full */
    rsv_pg_free(pg);
    assert_int_equal(q[0].calls, 1);
    assert_ptr_equal(q[0].err, cm_err_shutdown); /* was running */
    assert_int_equal(waiting.calls, 1);
    assert_ptr_equal(waiting.err, cm_err_shutdown); /* was waiting */
    assert_int_equal(q[1].calls, 1);
    assert_ptr_equal(q[1].err, cm_err_busy); /* already refused: that answer stands */
    tloop_for(base, 20);                     /* nothing comes twice */
    assert_int_equal(q[0].calls + waiting.calls + q[1].calls, 3);
}

struct self_free {
    rsv_pg_t *pg;
    struct qres first;
};

static void on_free_self(const char *err, const rsv_pg_result_t *res, void *arg)
{
    struct self_free *s = arg;
    on_qres(err, res, &s->first);
    rsv_pg_free(s->pg); /* from inside a result callback */
    s->pg = NULL;
}

static void test_free_inside_callback(void **state)
{
    struct self_free s = {pool(1, 5000, 10), {0}};
    struct qres q[2] = {{0}};

    assert_int_equal(rsv_pg_query(s.pg, "SELECT 1", 0, NULL, on_free_self, &s), 0);
    assert_int_equal(rsv_pg_query(s.pg, "SELECT 2", 0, NULL, on_qres, &q[0]), 0);
    assert_int_equal(rsv_pg_query(s.pg, "SELECT 3", 0, NULL, on_qres, &q[1]), 0);
    assert_true(wait_calls(&s.first, 1));
    assert_null(s.first.err);
    assert_null(s.pg);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(q[i].calls, 1);
        assert_ptr_equal(q[i].err, cm_err_shutdown);
    }
}

static void test_migrate_once(void **state)
{
    const char *names[] = {"001_a.sql", "002_b.sql", "003_bad.sql"};
    const char *sqls[] = {"CREATE TABLE m_a (x int); INSERT INTO m_a VALUES (1);",
                          "INSERT INTO m_a VALUES (2)", "INSERT INTO m_a VALUES (3); SELEC 1"};
    char err[256] = "";
    rsv_pg_t *pg;
    struct qres q;

    assert_int_equal(rsv_pg_migrate(svc_pg_conninfo(srv), names, sqls, 2, err, sizeof(err)), 0);
    assert_int_equal(rsv_pg_migrate(svc_pg_conninfo(srv), names, sqls, 2, err, sizeof(err)), 0);

    pg = pool(1, 5000, 10);
    q = query(pg, "SELECT count(*), sum(x) FROM m_a", 0, NULL);
    assert_null(q.err);
    assert_string_equal(q.v[0], "2"); /* each applied once */
    assert_string_equal(q.v[1], "3");
    q = query(pg, "SELECT count(*) FROM schema_migrations WHERE applied_at IS NOT NULL", 0, NULL);
    assert_string_equal(q.v[0], "2");

    /* a failing migration is rolled back whole and not recorded; earlier ones stay */
    assert_int_equal(rsv_pg_migrate(svc_pg_conninfo(srv), names, sqls, 3, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "003_bad.sql"));
    assert_non_null(strstr(err, "syntax error"));
    q = query(pg, "SELECT count(*) FROM m_a", 0, NULL);
    assert_string_equal(q.v[0], "2");
    q = query(pg, "SELECT count(*) FROM schema_migrations", 0, NULL);
    assert_string_equal(q.v[0], "2");
    /* the advisory lock was released: a later run gets it */
    assert_int_equal(rsv_pg_migrate(svc_pg_conninfo(srv), names, sqls, 2, err, sizeof(err)), 0);
    rsv_pg_free(pg);

    err[0] = '\0';
    assert_int_equal(
        rsv_pg_migrate("host=127.0.0.1 port=1 connect_timeout=2", names, sqls, 2, err, sizeof(err)),
        -1);
    assert_non_null(strstr(err, "connect"));
}

static void test_server_restart_then_recovery(void **state)
{
    rsv_pg_t *pg = pool(2, 10000, 100);
    rsv_pg_t *impatient;
    struct qres q[3] = {{0}};

    assert_int_equal(rsv_pg_query(pg, "SELECT pg_sleep(5)", 0, NULL, on_qres, &q[0]), 0);
    tloop_for(base, 50); /* the query is on the server */

    assert_int_equal(svc_pg_kill(srv), 0);
    assert_true(wait_calls(&q[0], 1));
    assert_ptr_equal(q[0].err, cm_err_closed);
    assert_true(wait_connected(pg, 0));

    /* while the server is down: a query waits for a connection up to its deadline … */
    assert_int_equal(rsv_pg_query(pg, "SELECT 42", 0, NULL, on_qres, &q[1]), 0);
    impatient = rsv_pg_new(base, svc_pg_conninfo(srv), 1, 300, 10);
    assert_int_equal(rsv_pg_query(impatient, "SELECT 1", 0, NULL, on_qres, &q[2]), 0);
    assert_true(wait_calls(&q[2], 1));
    assert_ptr_equal(q[2].err, cm_err_closed); /* … and never had a connection */
    rsv_pg_free(impatient);
    assert_int_equal(q[1].calls, 0);

    assert_int_equal(svc_pg_restart(srv), 0);
    assert_true(wait_calls(&q[1], 1));
    assert_null(q[1].err);
    assert_string_equal(q[1].v[0], "42");
    assert_true(wait_connected(pg, 2));
    query_ok(pg, "SELECT 1");
    rsv_pg_free(pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_query_with_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sql_error_gives_sqlstate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_statements_run_prepared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_reopens_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_session_reconnects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_first_host_is_passed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_dns_never_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_concurrent_queries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_overflow_is_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_answers_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_inside_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrate_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_restart_then_recovery, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
