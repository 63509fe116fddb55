/*
 * test_cm_redis — cm_redis against a real redis-server started by tests/support/svc.h.
 *
 * Each test runs the event loop until what it waits for has happened or a hard timeout
 * passes (never sleep()), and ends by checking that the client left no event behind.
 * The disconnect test kills and restarts the shared server, so it runs after the tests
 * that only need a healthy one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <event2/event.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_redis.h"
#include "svc.h"

#define TIMEOUT_MS 2000
#define HARD_MS    10000

static svc_redis_t *srv;

struct fx {
    struct event_base *base;
    cm_redis_t *r;
};

/* What one callback saw (the reply is copied: it lives only during the callback). */
struct result {
    int calls;
    const char *err;
    cm_redis_type_t type;
    char str[8192];
    size_t len;
    long long ival;
    size_t count;
    char items[4][64]; /* NUL-padded copies of the first array elements */
};

static void on_result(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    struct result *res = arg;

    res->calls++;
    res->err = err;
    if (reply == NULL)
        return;
    res->type = cm_redis_reply_type(reply);
    res->ival = cm_redis_reply_int(reply);
    const char *s = cm_redis_reply_str(reply, &res->len);
    if (s != NULL && res->len < sizeof(res->str))
        memcpy(res->str, s, res->len);
    res->count = cm_redis_reply_count(reply);
    for (size_t i = 0; i < res->count && i < 4; i++) {
        size_t n = 0;
        const char *item = cm_redis_reply_str(cm_redis_reply_at(reply, i), &n);
        if (item != NULL && n < sizeof(res->items[i]))
            memcpy(res->items[i], item, n);
    }
}

/* ---- loop helpers ---- */

struct until {
    struct event_base *base;
    int (*pred)(void *);
    void *arg;
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct until *u = arg;
    if (u->pred(u->arg))
        event_base_loopbreak(u->base);
}

static void on_hard(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(arg);
}

/* Runs the loop until pred holds or max_ms pass; returns pred. */
static int run_until(struct event_base *base, int (*pred)(void *), void *arg, int max_ms)
{
    struct until u = {base, pred, arg};
    struct timeval tick_tv = {0, 2000};
    struct timeval hard_tv = {max_ms / 1000, (max_ms % 1000) * 1000};
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, &u);
    struct event *hard = evtimer_new(base, on_hard, base);

    if (!pred(arg)) {
        event_add(tick, &tick_tv);
        event_add(hard, &hard_tv);
        event_base_dispatch(base);
    }
    event_free(tick);
    event_free(hard);
    return pred(arg);
}

static int never(void *arg)
{
    return 0;
}

/* Runs the loop for ms milliseconds (lets writes go out); not a wait for a result. */
static void run_for(struct event_base *base, int ms)
{
    run_until(base, never, NULL, ms);
}

struct count_wait {
    struct result *res;
    int n;
    int want;
};

static int all_called(void *arg)
{
    struct count_wait *w = arg;
    for (int i = 0; i < w->n; i++)
        if (w->res[i].calls < w->want)
            return 0;
    return 1;
}

static int wait_calls(struct event_base *base, struct result *res, int n)
{
    struct count_wait w = {res, n, 1};
    return run_until(base, all_called, &w, HARD_MS);
}

static int is_connected(void *arg)
{
    return cm_redis_connected(arg);
}

/* Events still added or active once libevent has run its own pending internal work. */
static int events_left(struct event_base *base)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
    return event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE);
}

/* Sends argv (NUL-terminated strings) and waits for the answer. */
static void command(struct fx *f, struct result *res, int argc, const char **argv)
{
    size_t lens[8];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    memset(res, 0, sizeof(*res));
    assert_int_equal(cm_redis_command(f->r, on_result, res, argc, argv, lens), 0);
    assert_true(wait_calls(f->base, res, 1));
    assert_int_equal(res->calls, 1);
    assert_null(res->err);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    cm_log_init("test_cm_redis", CM_LOG_WARN);
    srv = svc_redis_start();
    return srv == NULL ? -1 : 0;
}

static int group_teardown(void **state)
{
    svc_redis_stop(srv);
    srv = NULL;
    return 0;
}

static int setup(void **state)
{
    static struct fx f;

    f.base = event_base_new();
    f.r = cm_redis_new(f.base, SVC_HOST, svc_redis_port(srv), TIMEOUT_MS);
    if (!run_until(f.base, is_connected, f.r, HARD_MS))
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    cm_redis_free(f->r);
    f->r = NULL;
    /* the client leaves no timer or socket watcher behind */
    if (events_left(f->base) != 0)
        event_base_dump_events(f->base, stderr);
    assert_int_equal(events_left(f->base), 0);
    event_base_free(f->base);
    return 0;
}

/* ---- tests ---- */

static void test_set_get_binary_safe(void **state)
{
    struct fx *f = *state;
    static const char val[] = {'a', '\0', 'b', '\r', '\n', 'c'};
    const char *set[] = {"SET", "t:bin", val};
    size_t set_len[] = {3, 5, sizeof(val)};
    struct result res = {0};

    assert_int_equal(cm_redis_command(f->r, on_result, &res, 3, set, set_len), 0);
    assert_true(wait_calls(f->base, &res, 1));
    assert_null(res.err);
    assert_int_equal(res.type, CM_REDIS_STATUS);
    assert_string_equal(res.str, "OK");

    command(f, &res, 2, (const char *[]){"GET", "t:bin"});
    assert_int_equal(res.type, CM_REDIS_STR);
    assert_int_equal(res.len, sizeof(val));
    assert_memory_equal(res.str, val, sizeof(val));

    command(f, &res, 2, (const char *[]){"GET", "t:missing"});
    assert_int_equal(res.type, CM_REDIS_NIL);

    command(f, &res, 2, (const char *[]){"DEL", "t:n"});
    command(f, &res, 3, (const char *[]){"INCRBY", "t:n", "41"});
    assert_int_equal(res.type, CM_REDIS_INT);
    assert_int_equal(res.ival, 41);

    command(f, &res, 3, (const char *[]){"MGET", "t:n", "t:missing"});
    assert_int_equal(res.type, CM_REDIS_ARRAY);
    assert_int_equal(res.count, 2);
    assert_string_equal(res.items[0], "41");
    assert_string_equal(res.items[1], "");

    /* argvlen NULL: every argument is a C string */
    memset(&res, 0, sizeof(res));
    assert_int_equal(cm_redis_command(f->r, on_result, &res, 3,
                                      (const char *[]){"SET", "t:cstr", "plain"}, NULL),
                     0);
    assert_true(wait_calls(f->base, &res, 1));
    assert_string_equal(res.str, "OK");
    command(f, &res, 2, (const char *[]){"GET", "t:cstr"});
    assert_string_equal(res.str, "plain");

    command(f, &res, 1, (const char *[]){"NOSUCHCOMMAND"});
    assert_int_equal(res.type, CM_REDIS_ERROR); /* an error reply is an answer, err NULL */
}

/* "cmdstat_<name>:calls=N" from INFO commandstats, or 0 when absent. */
static long long cmd_calls(struct fx *f, const char *name)
{
    struct result res;
    char needle[64];
    const char *p;

    command(f, &res, 2, (const char *[]){"INFO", "commandstats"});
    snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", name);
    p = strstr(res.str, needle);
    if (p == NULL && res.len >= sizeof(res.str) - 1)
        fail_msg("INFO reply too long for the test buffer");
    return p != NULL ? atoll(p + strlen(needle)) : 0;
}

static void test_eval_falls_back_on_noscript(void **state)
{
    struct fx *f = *state;
    cm_redis_script_t *s = cm_redis_script_new("pair", "return {KEYS[1], ARGV[1]}");
    cm_redis_script_t *boom = cm_redis_script_new("boom", "return redis.error_reply('boom')");
    const char *argv[] = {"t:key", "v\0x"};
    size_t lens[] = {5, 3};
    struct result res;

    command(f, &res, 2, (const char *[]){"SCRIPT", "FLUSH"});
    command(f, &res, 2, (const char *[]){"CONFIG", "RESETSTAT"});

    for (int round = 0; round < 2; round++) {
        memset(&res, 0, sizeof(res));
        assert_int_equal(cm_redis_eval(f->r, s, on_result, &res, 1, 2, argv, lens), 0);
        assert_true(wait_calls(f->base, &res, 1));
        assert_null(res.err);
        assert_int_equal(res.type, CM_REDIS_ARRAY);
        assert_int_equal(res.count, 2);
        assert_string_equal(res.items[0], "t:key");
        assert_memory_equal(res.items[1], "v\0x", 3);
        /* round 0: EVALSHA got NOSCRIPT and was resent as EVAL; round 1: EVALSHA hit */
        assert_int_equal(cmd_calls(f, "eval"), 1);
    }
    assert_true(cmd_calls(f, "evalsha") >= 2);

    /* argvlen NULL: every key and argument is a C string */
    memset(&res, 0, sizeof(res));
    assert_int_equal(
        cm_redis_eval(f->r, s, on_result, &res, 1, 2, (const char *[]){"k", "plain"}, NULL), 0);
    assert_true(wait_calls(f->base, &res, 1));
    assert_int_equal(res.count, 2);
    assert_string_equal(res.items[0], "k");
    assert_string_equal(res.items[1], "plain");

    memset(&res, 0, sizeof(res));
    assert_int_equal(cm_redis_eval(f->r, boom, on_result, &res, 0, 0, NULL, NULL), 0);
    assert_true(wait_calls(f->base, &res, 1));
    assert_null(res.err);
    assert_int_equal(res.type, CM_REDIS_ERROR);
    assert_non_null(strstr(res.str, "boom"));

    cm_redis_script_free(s);
    cm_redis_script_free(boom);
}

struct pinger {
    cm_redis_t *r;
    int attempts;
    int ok;
    int timeouts;
};

static void ping(struct pinger *p);

static void on_pong(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    struct pinger *p = arg;
    size_t len;

    if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_STATUS &&
        strcmp(cm_redis_reply_str(reply, &len), "PONG") == 0) {
        p->ok = 1;
        return;
    }
    if (err == cm_err_timeout)
        p->timeouts++;
    if (p->attempts < 100)
        ping(p); /* a command from inside a callback */
}

static void ping(struct pinger *p)
{
    const char *argv[] = {"PING"};
    size_t lens[] = {4};

    p->attempts++;
    assert_int_equal(cm_redis_command(p->r, on_pong, p, 1, argv, lens), 0);
}

static int pinged(void *arg)
{
    return ((struct pinger *)arg)->ok;
}

static void test_deadline_then_late_reply_dropped(void **state)
{
    struct fx *f = *state;
    cm_redis_t *r = cm_redis_new(f->base, SVC_HOST, svc_redis_port(srv), 100);
    const char *argv[] = {"DEBUG", "SLEEP", "0.5"};
    size_t lens[] = {5, 5, 3};
    struct result res = {0};
    struct pinger p = {r, 0, 0, 0};

    assert_true(run_until(f->base, is_connected, r, HARD_MS));
    assert_int_equal(cm_redis_command(r, on_result, &res, 3, argv, lens), 0);
    assert_true(wait_calls(f->base, &res, 1));
    assert_ptr_equal(res.err, cm_err_timeout);

    /* The server is still asleep: PINGs time out too until it wakes and answers
     * DEBUG SLEEP late; that late reply must be dropped, not delivered again. */
    ping(&p);
    assert_true(run_until(f->base, pinged, &p, HARD_MS));
    assert_true(p.timeouts >= 1);
    assert_int_equal(res.calls, 1);
    assert_true(cm_redis_connected(r)); /* a deadline does not cost the connection */

    cm_redis_free(r);
}

static void test_free_fails_pending_with_shutdown(void **state)
{
    struct fx *f = *state;
    const char *argv[] = {"BLPOP", "t:never", "0"};
    size_t lens[] = {5, 7, 1};
    struct result res[3] = {{0}};

    for (int i = 0; i < 3; i++)
        assert_int_equal(cm_redis_command(f->r, on_result, &res[i], 3, argv, lens), 0);
    run_for(f->base, 50);
    cm_redis_free(f->r);
    f->r = NULL;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].calls, 1);
        assert_ptr_equal(res[i].err, cm_err_shutdown);
    }
}

struct self_free {
    cm_redis_t **r;
    struct result first;
};

static void on_free_self(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    struct self_free *s = arg;
    on_result(err, reply, &s->first);
    cm_redis_free(*s->r); /* from inside a reply callback */
    *s->r = NULL;
}

static int first_called(void *arg)
{
    return ((struct self_free *)arg)->first.calls > 0;
}

static void test_free_inside_callback(void **state)
{
    struct fx *f = *state;
    const char *ping_argv[] = {"PING"};
    size_t ping_len[] = {4};
    const char *blpop[] = {"BLPOP", "t:never", "0"};
    size_t blpop_len[] = {5, 7, 1};
    struct self_free s = {&f->r, {0}};
    struct result pending = {0};

    assert_int_equal(cm_redis_command(f->r, on_free_self, &s, 1, ping_argv, ping_len), 0);
    assert_int_equal(cm_redis_command(f->r, on_result, &pending, 3, blpop, blpop_len), 0);
    assert_true(run_until(f->base, first_called, &s, HARD_MS));
    assert_null(s.first.err);
    assert_null(f->r);
    assert_int_equal(pending.calls, 1);
    assert_ptr_equal(pending.err, cm_err_shutdown);
    run_for(f->base, 20); /* nothing late may fire */
    assert_int_equal(s.first.calls, 1);
    assert_int_equal(pending.calls, 1);
}

static int unused_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd); /* nothing listens there now */
    return port;
}

static void test_no_server_commands_fail_at_once(void **state)
{
    struct fx *f = *state;
    cm_redis_t *down = cm_redis_new(f->base, SVC_HOST, unused_port(), 200);
    cm_redis_t *named = cm_redis_new(f->base, "localhost", svc_redis_port(srv), 200);
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    struct result res = {0};

    run_for(f->base, 400); /* a few reconnect attempts */
    assert_false(cm_redis_connected(down));
    assert_false(cm_redis_connected(named)); /* a host name would need blocking DNS */
    assert_int_equal(cm_redis_command(down, on_result, &res, 1, argv, lens), -1);
    assert_int_equal(cm_redis_command(named, on_result, &res, 1, argv, lens), -1);
    cm_redis_free(down);
    cm_redis_free(named);
    assert_int_equal(res.calls, 0);
}

/* A listener that never accepts, its backlog full: further connects hang in SYN_SENT. */
static int stuck_listener(int *port, int fds[3])
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(fds[0], (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fds[0], 0) != 0 ||
        getsockname(fds[0], (struct sockaddr *)&sa, &len) != 0)
        return -1;
    *port = ntohs(sa.sin_port);
    for (int i = 1; i < 3; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)); /* fills the backlog */
    }
    return 0;
}

static void test_connect_deadline(void **state)
{
    struct fx *f = *state;
    int port = 0, fds[3] = {-1, -1, -1};
    cm_redis_t *r;

    assert_int_equal(stuck_listener(&port, fds), 0);
    r = cm_redis_new(f->base, SVC_HOST, port, 100);
    run_for(f->base, 450); /* several connect deadlines and retries */
    assert_false(cm_redis_connected(r));
    cm_redis_free(r);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

#define FLOOD 1100 /* more than cm_redis keeps waiting for after their deadline */

static void test_wedged_connection_is_reopened(void **state)
{
    struct fx *f = *state;
    cm_redis_t *r = cm_redis_new(f->base, SVC_HOST, svc_redis_port(srv), 50);
    const char *sleep_argv[] = {"DEBUG", "SLEEP", "1"};
    size_t sleep_len[] = {5, 5, 1};
    const char *ping_argv[] = {"PING"};
    size_t ping_len[] = {4};
    struct result *res = calloc(FLOOD, sizeof(*res));
    struct result slept = {0};
    struct pinger p = {r, 0, 0, 0};
    int timeouts = 0, closed = 0;

    assert_true(run_until(f->base, is_connected, r, HARD_MS));
    assert_int_equal(cm_redis_command(r, on_result, &slept, 3, sleep_argv, sleep_len), 0);
    for (int i = 0; i < FLOOD; i++)
        assert_int_equal(cm_redis_command(r, on_result, &res[i], 1, ping_argv, ping_len), 0);
    assert_true(wait_calls(f->base, res, FLOOD));
    for (int i = 0; i < FLOOD; i++) {
        assert_int_equal(res[i].calls, 1);
        timeouts += res[i].err == cm_err_timeout;
        closed += res[i].err == cm_err_closed;
    }
    assert_int_equal(timeouts + closed, FLOOD);
    assert_int_equal(slept.calls, 1);
    assert_ptr_equal(slept.err, cm_err_timeout);

    /* the connection was reopened; once the server wakes, commands work again */
    assert_true(run_until(f->base, is_connected, r, HARD_MS));
    ping(&p);
    assert_true(run_until(f->base, pinged, &p, HARD_MS));
    assert_int_equal(slept.calls, 1);
    cm_redis_free(r);
    free(res);
}

static void test_server_loss_fails_pending_then_reconnects(void **state)
{
    struct fx *f = *state;
    cm_redis_t *r = cm_redis_new(f->base, SVC_HOST, svc_redis_port(srv), 5000);
    cm_redis_script_t *s = cm_redis_script_new("one", "return 1");
    const char *blpop[] = {"BLPOP", "t:never", "0"};
    size_t blpop_len[] = {5, 7, 1};
    struct result res[3] = {{0}}, none = {0};

    assert_true(run_until(f->base, is_connected, r, HARD_MS));
    for (int i = 0; i < 3; i++)
        assert_int_equal(cm_redis_command(r, on_result, &res[i], 3, blpop, blpop_len), 0);
    run_for(f->base, 50); /* the commands reach the server and block there */

    assert_int_equal(svc_redis_kill(srv), 0);
    assert_true(wait_calls(f->base, res, 3));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].calls, 1);
        assert_ptr_equal(res[i].err, cm_err_closed);
    }
    assert_false(cm_redis_connected(r));
    assert_int_equal(cm_redis_command(r, on_result, &none, 3, blpop, blpop_len), -1);
    assert_int_equal(cm_redis_eval(r, s, on_result, &none, 0, 0, NULL, NULL), -1);
    run_for(f->base, 300); /* a few failed reconnect attempts */
    assert_false(cm_redis_connected(r));

    assert_int_equal(svc_redis_restart(srv), 0);
    assert_true(run_until(f->base, is_connected, r, HARD_MS));
    {
        struct fx again = {f->base, r};
        struct result ok;
        command(&again, &ok, 3, (const char *[]){"SET", "t:back", "1"});
        command(&again, &ok, 2, (const char *[]){"GET", "t:back"});
        assert_string_equal(ok.str, "1");
        /* the restarted server has no scripts: EVALSHA falls back again */
        memset(&ok, 0, sizeof(ok));
        assert_int_equal(cm_redis_eval(r, s, on_result, &ok, 0, 0, NULL, NULL), 0);
        assert_true(wait_calls(f->base, &ok, 1));
        assert_int_equal(ok.type, CM_REDIS_INT);
        assert_int_equal(ok.ival, 1);
    }
    assert_int_equal(none.calls, 0);
    cm_redis_free(r);
    cm_redis_script_free(s);
    /* the fixture's own client reconnects as well */
    assert_true(run_until(f->base, is_connected, f->r, HARD_MS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_set_get_binary_safe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_falls_back_on_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_then_late_reply_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_fails_pending_with_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_inside_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_server_commands_fail_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wedged_connection_is_reopened, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_loss_fails_pending_then_reconnects, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
