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
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <hiredis/hiredis.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_redis.h"
#include "cm_tls.h"
#include "loop.h"
#include "svc.h"

#define TIMEOUT_MS 2000
#define HARD_MS    10000

static svc_redis_t *srv;
/* The "tls" group runs the single-node tests again over TLS: tls_ctx is then
 * the client context (test CA + client certificate) and srv serves TLS on its tls port. */
static cm_tls_ctx_t *tls_ctx;
static char tls_dir[] = "/tmp/test_cm_redis_tls.XXXXXX";

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
    return tloop_until(base, all_called, &w, HARD_MS);
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

static int tls_group_setup(void **state)
{
    char ca[300], cert[300], key[300], err[300];

    snprintf(tls_dir, sizeof(tls_dir), "/tmp/test_cm_redis_tls.XXXXXX");
    if (mkdtemp(tls_dir) == NULL || svc_tls_certs(tls_dir) != 0)
        return -1;
    snprintf(ca, sizeof(ca), "%s/ca.pem", tls_dir);
    snprintf(cert, sizeof(cert), "%s/client.pem", tls_dir);
    snprintf(key, sizeof(key), "%s/client-key.pem", tls_dir);
    tls_ctx = cm_tls_client_new_cert(ca, cert, key, err, sizeof(err));
    if (tls_ctx == NULL) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    srv = svc_redis_start_tls(tls_dir);
    return srv == NULL ? -1 : 0;
}

static int tls_group_teardown(void **state)
{
    char cmd[400];

    group_teardown(state);
    cm_tls_free(tls_ctx);
    tls_ctx = NULL;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tls_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The credentials of every svc Redis (ACL user, default user off), over TLS in the
 * "tls" group. */
static const cm_redis_auth_t *auth(void)
{
    static cm_redis_auth_t a;
    a.user = SVC_REDIS_USER;
    a.password = svc_password();
    a.tls = tls_ctx;
    return &a;
}

/* No credentials (TLS still, in the "tls" group). */
static const cm_redis_auth_t *noauth(void)
{
    static cm_redis_auth_t a;
    a.tls = tls_ctx;
    return &a;
}

/* The port the client speaks to: the TLS one in the "tls" group. */
static int srv_port(void)
{
    return tls_ctx != NULL ? svc_redis_tls_port(srv) : svc_redis_port(srv);
}

static int setup(void **state)
{
    static struct fx f;

    f.base = event_base_new();
    f.r = cm_redis_new_auth(f.base, SVC_HOST, srv_port(), TIMEOUT_MS, auth());
    if (!tloop_until(f.base, is_connected, f.r, HARD_MS))
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
    cm_redis_t *r = cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 100, auth());
    const char *argv[] = {"DEBUG", "SLEEP", "0.5"};
    size_t lens[] = {5, 5, 3};
    struct result res = {0};
    struct pinger p = {r, 0, 0, 0};

    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
    assert_int_equal(cm_redis_command(r, on_result, &res, 3, argv, lens), 0);
    assert_true(wait_calls(f->base, &res, 1));
    assert_ptr_equal(res.err, cm_err_timeout);

    /* The server is still asleep: PINGs time out too until it wakes and answers
     * DEBUG SLEEP late; that late reply must be dropped, not delivered again. */
    ping(&p);
    assert_true(tloop_until(f->base, pinged, &p, HARD_MS));
    assert_true(p.timeouts >= 1);
    assert_int_equal(res.calls, 1);
    assert_true(cm_redis_connected(r)); /* a deadline does not cost the connection */

    cm_redis_free(r);
}

/* A client callback that keeps the loop busy for 300 ms (a burst of TLS handshakes). */
static void on_busy(evutil_socket_t fd, short what, void *arg)
{
    struct timespec t0, t;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
}

/*
 * Seen in the simulator's connection bursts: the command is written, then a client
 * event holds the loop past the command's 100 ms deadline while Redis answers at once.
 * On the next pass both the reply and the deadline are due: the reply must win, so the
 * caller gets its PONG, not a timeout. (Deadlines on a plain timer instead of the common
 * timeout queue fail this: the timer runs before the deferred read callback.)
 */
static void test_reply_read_before_its_deadline(void **state)
{
    struct fx *f = *state;
    cm_redis_t *r = cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 100, auth());
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    struct result res = {0};
    struct timeval now = {0, 0};
    struct event *busy = evtimer_new(f->base, on_busy, NULL);

    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
    assert_int_equal(cm_redis_command(r, on_result, &res, 1, argv, lens), 0);
    /* due at once: the next pass writes the command (an I/O event, served first), then
     * runs the busy callback; the pass after it reads the reply and finds the deadline
     * past */
    evtimer_add(busy, &now);
    assert_true(wait_calls(f->base, &res, 1));
    assert_null(res.err);
    assert_int_equal(res.type, CM_REDIS_STATUS);
    assert_string_equal(res.str, "PONG");
    event_free(busy);
    cm_redis_free(r);
}

/* A client callback that sends a PING, then holds the loop for 300 ms (on_busy). */
struct stall {
    cm_redis_t *r;
    struct result *res;
};

static void on_send_then_busy(evutil_socket_t fd, short what, void *arg)
{
    struct stall *st = arg;
    const char *argv[] = {"PING"};
    size_t lens[] = {4};

    assert_int_equal(cm_redis_command(st->r, on_result, st->res, 1, argv, lens), 0);
    on_busy(fd, what, NULL);
}

/* Sends a PING from inside a 300 ms stall on base, with a 100 ms deadline: PONG due. */
static void stalled_send_gets_its_reply(struct event_base *base)
{
    cm_redis_t *r = cm_redis_new_auth(base, SVC_HOST, srv_port(), 100, auth());
    struct result res = {0};
    struct stall st = {r, &res};
    struct timeval now = {0, 0};
    struct event *busy = evtimer_new(base, on_send_then_busy, &st);

    assert_true(tloop_until(base, is_connected, r, HARD_MS));
    evtimer_add(busy, &now);
    assert_true(wait_calls(base, &res, 1));
    assert_null(res.err);
    assert_int_equal(res.type, CM_REDIS_STATUS);
    assert_string_equal(res.str, "PONG");
    event_free(busy);
    cm_redis_free(r);
}

/*
 * The seeds' night: the gateway answered status polls 503 "admission failed (timeout)"
 * while Redis sat at 8% CPU. A command issued from inside a long client callback is still
 * in our output buffer when that callback ends with its deadline already past; the next
 * pass writes it and fires the deadline at once, before Redis could have answered. The
 * deadline must judge Redis, not our loop: the caller gets its PONG. Run on a plain base
 * and on one shaped like cm_server's workers (two priorities, sliced dispatch).
 */
static void test_deadline_judges_redis_not_a_stalled_loop(void **state)
{
    struct fx *f = *state;
    struct event_config *cfg = event_config_new();
    const struct timeval slice = {0, 2000};
    struct event_base *worker;

    stalled_send_gets_its_reply(f->base);
    assert_non_null(cfg);
    assert_int_equal(event_config_set_max_dispatch_interval(cfg, &slice, -1, 1), 0);
    worker = event_base_new_with_config(cfg);
    event_config_free(cfg);
    assert_non_null(worker);
    assert_int_equal(event_base_priority_init(worker, 2), 0);
    stalled_send_gets_its_reply(worker);
    assert_int_equal(events_left(worker), 0);
    event_base_free(worker);
}

static void test_free_fails_pending_with_shutdown(void **state)
{
    struct fx *f = *state;
    const char *argv[] = {"BLPOP", "t:never", "0"};
    size_t lens[] = {5, 7, 1};
    struct result res[3] = {{0}};

    for (int i = 0; i < 3; i++)
        assert_int_equal(cm_redis_command(f->r, on_result, &res[i], 3, argv, lens), 0);
    tloop_for(f->base, 50);
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
    assert_true(tloop_until(f->base, first_called, &s, HARD_MS));
    assert_null(s.first.err);
    assert_null(f->r);
    assert_int_equal(pending.calls, 1);
    assert_ptr_equal(pending.err, cm_err_shutdown);
    tloop_for(f->base, 20); /* nothing late may fire */
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
    cm_redis_t *down = cm_redis_new_auth(f->base, SVC_HOST, unused_port(), 200, noauth());
    /* a name (looked up on the loop, test_cm_resolve) whose address has no server either */
    cm_redis_t *named = cm_redis_new_auth(f->base, "localhost", unused_port(), 200, auth());
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    struct result res = {0};

    tloop_for(f->base, 400); /* a few reconnect attempts */
    assert_false(cm_redis_connected(down));
    assert_false(cm_redis_connected(named));
    assert_int_equal(cm_redis_command(down, on_result, &res, 1, argv, lens), -1);
    assert_int_equal(cm_redis_command(named, on_result, &res, 1, argv, lens), -1);
    cm_redis_free(down);
    cm_redis_free(named);
    assert_int_equal(res.calls, 0);
}

/* A listener that never accepts and never speaks: the kernel completes each TCP
 * handshake into its backlog, where the client's TLS hello or AUTH waits unanswered. */
static int silent_listener(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    *port = ntohs(sa.sin_port);
    return fd;
}

/* AUTH is a connect-time step. Without credentials, or with a wrong password,
 * the client never counts as up and no command is sent; with them it connects as the
 * ACL user (ACL WHOAMI). */
static void test_auth_at_connect(void **state)
{
    struct fx *f = *state;
    cm_redis_auth_t wrong = {SVC_REDIS_USER, "not-the-password", tls_ctx, NULL};
    cm_redis_t *none = cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 200, noauth());
    cm_redis_t *bad = cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 200, &wrong);
    const char *argv[] = {"ACL", "WHOAMI"};
    struct result res = {0};

    tloop_for(f->base, 400); /* a few attempts each */
    assert_false(cm_redis_connected(bad));
    assert_int_equal(cm_redis_command(bad, on_result, &res, 2, argv, NULL), -1);
    /* without AUTH the connection is up, but Redis answers nothing but NOAUTH */
    if (cm_redis_connected(none)) {
        assert_int_equal(cm_redis_command(none, on_result, &res, 2, argv, NULL), 0);
        assert_true(wait_calls(f->base, &res, 1));
        assert_int_equal(res.type, CM_REDIS_ERROR);
        assert_non_null(strstr(res.str, "NOAUTH"));
    }
    cm_redis_free(none);
    cm_redis_free(bad);
    /* the fixture's client authenticated as the ACL user */
    struct result who = {0};
    assert_int_equal(cm_redis_command(f->r, on_result, &who, 2, argv, NULL), 0);
    assert_true(wait_calls(f->base, &who, 1));
    assert_int_equal(who.type, CM_REDIS_STR);
    assert_string_equal(who.str, SVC_REDIS_USER);
}

/* Connections that reached the listener so far: each one a connect attempt. */
static int attempts(int lfd)
{
    int n = 0, c;
    while ((c = accept(lfd, NULL, NULL)) >= 0) {
        close(c);
        n++;
    }
    return n;
}

/* The connect deadline (TCP, TLS handshake, AUTH) is the command deadline but never under
 * 1 s: a 50 ms command deadline must not fail every handshake of a busy machine (under
 * load the reconnect after a wedged link never came back). An attempt that hangs is given
 * up at 1 s and retried on the backoff. */
static void test_connect_deadline(void **state)
{
    struct fx *f = *state;
    int port = 0, lfd = silent_listener(&port);
    cm_redis_t *r;

    assert_true(lfd >= 0);
    r = cm_redis_new_auth(f->base, SVC_HOST, port, 50, auth());
    tloop_for(f->base, 800); /* a 50 ms connect deadline: 3 attempts by now */
    assert_false(cm_redis_connected(r));
    assert_int_equal(attempts(lfd), 1);
    tloop_for(f->base, 800); /* given up at 1 s, retried 100 ms later */
    assert_false(cm_redis_connected(r));
    assert_int_equal(attempts(lfd), 1);
    cm_redis_free(r);
    close(lfd);
}

#define FLOOD 1100 /* more than cm_redis keeps waiting for after their deadline */

static void test_wedged_connection_is_reopened(void **state)
{
    struct fx *f = *state;
    cm_redis_t *r = cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 50, auth());
    const char *sleep_argv[] = {"DEBUG", "SLEEP", "1"};
    size_t sleep_len[] = {5, 5, 1};
    const char *ping_argv[] = {"PING"};
    size_t ping_len[] = {4};
    struct result *res = calloc(FLOOD, sizeof(*res));
    struct result slept = {0};
    struct pinger p = {r, 0, 0, 0};
    int timeouts = 0, closed = 0;

    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
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
    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
    ping(&p);
    assert_true(tloop_until(f->base, pinged, &p, HARD_MS));
    assert_int_equal(slept.calls, 1);
    cm_redis_free(r);
    free(res);
}

static void test_server_loss_fails_pending_then_reconnects(void **state)
{
    struct fx *f = *state;
    cm_redis_t *r = cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 5000, auth());
    cm_redis_script_t *s = cm_redis_script_new("one", "return 1");
    const char *blpop[] = {"BLPOP", "t:never", "0"};
    size_t blpop_len[] = {5, 7, 1};
    struct result res[3] = {{0}}, none = {0};

    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
    for (int i = 0; i < 3; i++)
        assert_int_equal(cm_redis_command(r, on_result, &res[i], 3, blpop, blpop_len), 0);
    tloop_for(f->base, 50); /* the commands reach the server and block there */

    assert_int_equal(svc_redis_kill(srv), 0);
    assert_true(wait_calls(f->base, res, 3));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].calls, 1);
        assert_ptr_equal(res[i].err, cm_err_closed);
    }
    assert_false(cm_redis_connected(r));
    assert_int_equal(cm_redis_command(r, on_result, &none, 3, blpop, blpop_len), -1);
    assert_int_equal(cm_redis_eval(r, s, on_result, &none, 0, 0, NULL, NULL), -1);
    tloop_for(f->base, 300); /* a few failed reconnect attempts */
    assert_false(cm_redis_connected(r));

    assert_int_equal(svc_redis_restart(srv), 0);
    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
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
    assert_true(tloop_until(f->base, is_connected, f->r, HARD_MS));
}

/* Many commands written before any reply is read: each caller gets its own reply, in
 * the order sent (INCR counts them). */
#define PIPELINED 300
static void test_pipelined_replies_in_order(void **state)
{
    struct fx *f = *state;
    struct result *res = calloc(PIPELINED, sizeof(*res));
    const char *argv[] = {"INCR", "t:pipelined"};
    struct result del;

    command(f, &del, 2, (const char *[]){"DEL", "t:pipelined"});
    for (int i = 0; i < PIPELINED; i++)
        assert_int_equal(cm_redis_command(f->r, on_result, &res[i], 2, argv, NULL), 0);
    assert_true(wait_calls(f->base, res, PIPELINED));
    for (int i = 0; i < PIPELINED; i++) {
        assert_int_equal(res[i].calls, 1);
        assert_null(res[i].err);
        assert_int_equal(res[i].type, CM_REDIS_INT);
        assert_int_equal(res[i].ival, i + 1);
    }
    free(res);
}

/* Runs the loop for ms with stderr (cm_log's output) sent to a file; returns what was
 * logged (static buffer). */
static const char *logged_while_running(struct event_base *base, int ms)
{
    static char buf[16384];
    char path[] = "/tmp/test_cm_redis_log.XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    ssize_t n;

    assert_true(fd >= 0 && saved >= 0);
    unlink(path);
    assert_int_equal(dup2(fd, 2), 2);
    tloop_for(base, ms);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* A client that must not get in: it never connects, its commands fail at once, and the
 * log says why (want). */
static void assert_refused(struct fx *f, cm_redis_t *r, const char *want)
{
    const char *argv[] = {"PING"};
    struct result res = {0};
    const char *log = logged_while_running(f->base, 300);

    assert_false(cm_redis_connected(r));
    assert_int_equal(cm_redis_command(r, on_result, &res, 1, argv, NULL), -1);
    if (strstr(log, want) == NULL)
        fail_msg("log lacks \"%s\":\n%s", want, log);
    cm_redis_free(r);
}

/* The certificate checks. Redis' certificate must chain to the configured CA
 * and carry the expected name (or, with none configured, the IP address connected to);
 * Redis in turn requires our client certificate. Any failure is a clear log line and a
 * client that stays down; the right name connects. */
static void test_tls_certificate_checks(void **state)
{
    struct fx *f = *state;
    char path[300], cert[300], key[300], err[300];
    cm_tls_ctx_t *other, *nocert;
    cm_redis_auth_t a = *auth();

    /* a CA that did not sign the server's certificate */
    snprintf(path, sizeof(path), "%s/other-ca.pem", tls_dir);
    snprintf(cert, sizeof(cert), "%s/client.pem", tls_dir);
    snprintf(key, sizeof(key), "%s/client-key.pem", tls_dir);
    other = cm_tls_client_new_cert(path, cert, key, err, sizeof(err));
    assert_non_null(other);
    a.tls = other;
    assert_refused(f, cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 200, &a),
                   "certificate verify failed");
    cm_tls_free(other);

    /* the right CA, a name the certificate does not carry */
    a = *auth();
    a.tls_server_name = "other.test";
    assert_refused(f, cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 200, &a),
                   "certificate verify failed (certificate: hostname mismatch)");

    /* no client certificate: Redis refuses the handshake */
    snprintf(path, sizeof(path), "%s/ca.pem", tls_dir);
    nocert = cm_tls_client_new(path, err, sizeof(err));
    assert_non_null(nocert);
    a = *auth();
    a.tls = nocert;
    assert_refused(f, cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 200, &a), "TLS: ");
    cm_tls_free(nocert);

    /* plain TCP to the TLS port */
    a = *auth();
    a.tls = NULL;
    assert_refused(f, cm_redis_new_auth(f->base, SVC_HOST, srv_port(), 200, &a), "cannot connect");

    /* a client certificate without its key is refused when the context is made */
    assert_null(cm_tls_client_new_cert(path, cert, NULL, err, sizeof(err)));
    /* so is a key that group or others may read, naming the file and its mode */
    assert_int_equal(chmod(key, 0644), 0);
    assert_null(cm_tls_client_new_cert(path, cert, key, err, sizeof(err)));
    assert_non_null(strstr(err, "readable by its owner only (mode 0644"));
    assert_int_equal(chmod(key, 0600), 0);

    /* the name the certificate carries, checked instead of the IP address */
    a = *auth();
    a.tls_server_name = "redis.test";
    cm_redis_t *r = cm_redis_new_auth(f->base, SVC_HOST, srv_port(), TIMEOUT_MS, &a);
    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
    struct fx named = {f->base, r};
    struct result who;
    command(&named, &who, 2, (const char *[]){"ACL", "WHOAMI"});
    assert_string_equal(who.str, SVC_REDIS_USER);
    cm_redis_free(r);
}

/* ---- the RESP writer: byte for byte what hiredis writes for the same argv ---- */

/* cm_redis_resp_len and cm_redis_resp_write against redisFormatCommandArgv. */
static void assert_resp_as_hiredis(int argc, const char **argv, const size_t *argvlen)
{
    char *want = NULL;
    int want_len = redisFormatCommandArgv(&want, argc, argv, argvlen);
    assert_true(want_len > 0 && want != NULL);
    size_t len = cm_redis_resp_len(argc, argv, argvlen);
    assert_int_equal(len, (size_t)want_len);
    char *got = malloc(len + 1);
    got[len] = '#'; /* a guard: not one byte past the length given */
    assert_int_equal(cm_redis_resp_write(got, argc, argv, argvlen), len);
    assert_memory_equal(got, want, len);
    assert_int_equal(got[len], '#');
    free(got);
    redisFreeCommand(want);
}

static void test_resp_writer_matches_hiredis(void **state)
{
    (void)state;
    /* C strings (argvlen NULL), an empty argument, a join's EVALSHA */
    const char *ping[] = {"PING"};
    assert_resp_as_hiredis(1, ping, NULL);
    const char *set[] = {"SET", "", "v"};
    assert_resp_as_hiredis(3, set, NULL);
    const char *join[] = {"EVALSHA",
                          "0123456789abcdef0123456789abcdef01234567",
                          "11",
                          "os:{e}:q:cfg",
                          "os:{e}:q:n",
                          "os:{e}:q:st",
                          "os:{e}:q:wb",
                          "os:{e}:q:pre",
                          "os:{e}:q:pl",
                          "os:{e}:q:cb",
                          "os:{e}:q:sb",
                          "os:{e}:q:adm",
                          "os:{e}:q:gone",
                          "os:{e}:active",
                          "0123456789abcdef0123456789abcdef",
                          "9007199254740991"};
    assert_resp_as_hiredis(16, join, NULL);
    /* binary arguments: NUL, CR LF and '$' '*' inside, lengths given */
    const char *bin[] = {"SET", "a\0b", "\r\n$3\r\n*1"};
    const size_t binlen[] = {3, 3, 8};
    assert_resp_as_hiredis(3, bin, binlen);
    /* every count of digits in a length and in argc: 9/10, 99/100, 999/1000, …, 100000 */
    static char big[100001];
    memset(big, 'x', sizeof(big));
    const size_t lens[] = {0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999, 100000};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        const char *argv[] = {"SET", "k", big};
        const size_t argvlen[] = {3, 1, lens[i]};
        assert_resp_as_hiredis(3, argv, argvlen);
    }
    const int counts[] = {9, 10, 99, 100, 1000};
    static const char *many[1000];
    for (int i = 0; i < 1000; i++)
        many[i] = i % 2 ? "v" : "";
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
        assert_resp_as_hiredis(counts[i], many, NULL);
}

/* Property: random argvs (random count, lengths and bytes, seeded) write as hiredis'. */
static void test_resp_writer_random_argv(void **state)
{
    (void)state;
    uint64_t seed = 0x9e3779b97f4a7c15u;
    static char bytes[70000];
    for (size_t i = 0; i < sizeof(bytes); i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        bytes[i] = (char)seed;
    }
    for (int round = 0; round < 2000; round++) {
        const char *argv[40];
        size_t argvlen[40];
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        int argc = 1 + (int)(seed % 40);
        for (int i = 0; i < argc; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            size_t len = (seed >> 8) % (i == 0 && round % 100 == 0 ? 65536 : 300);
            argv[i] = bytes + (seed >> 32) % (sizeof(bytes) - len);
            argvlen[i] = len;
        }
        assert_resp_as_hiredis(argc, argv, argvlen);
    }
}

/* ---- cluster routing: pure functions ---- */

static void test_crc16_and_key_slots(void **state)
{
    (void)state;
    assert_int_equal(cm_redis_crc16("123456789", 9), 0x31C3); /* the XMODEM check value */
    assert_int_equal(cm_redis_key_slot("foo", 3), 12182);     /* CLUSTER KEYSLOT foo */
    assert_int_equal(cm_redis_key_slot("", 0), 0);
    /* a hash tag: only the bytes between the first '{' and the next '}' count */
    assert_int_equal(cm_redis_key_slot("{user1000}.following", 20),
                     cm_redis_key_slot("user1000", 8));
    assert_int_equal(cm_redis_key_slot("{user1000}.followers", 20),
                     cm_redis_key_slot("{user1000}.following", 20));
    assert_int_equal(cm_redis_key_slot("foo{bar}{zap}", 13), cm_redis_key_slot("bar", 3));
    assert_int_equal(cm_redis_key_slot("foo{{bar}}zap", 13), cm_redis_key_slot("{bar", 4));
    /* an empty tag or no closing brace: the whole key */
    assert_int_equal(cm_redis_key_slot("foo{}{bar}", 10), cm_redis_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(cm_redis_key_slot("foo{bar", 7), cm_redis_crc16("foo{bar", 7) & 16383);
    /* binary-safe: a NUL inside the key is part of it */
    assert_int_not_equal(cm_redis_key_slot("a\0b", 3), cm_redis_key_slot("a", 1));
}

static cm_redis_redir_t redir(const char *text, unsigned *slot, char *host, int *port)
{
    return cm_redis_redirect_parse(text, strlen(text), slot, host, 64, port);
}

static void test_redirect_parse(void **state)
{
    unsigned slot = 0;
    char host[64];
    int port = 0;

    (void)state;
    assert_int_equal(redir("MOVED 3999 127.0.0.1:6381", &slot, host, &port), CM_REDIS_REDIR_MOVED);
    assert_int_equal(slot, 3999);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 6381);
    assert_int_equal(redir("ASK 16383 ::1:7000", &slot, host, &port), CM_REDIS_REDIR_ASK);
    assert_int_equal(slot, 16383);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 7000);
    /* no endpoint: the node that answered */
    assert_int_equal(redir("MOVED 0 :6380", &slot, host, &port), CM_REDIS_REDIR_MOVED);
    assert_string_equal(host, "");
    assert_int_equal(port, 6380);
    assert_int_equal(
        redir("TRYAGAIN Multiple keys request during rehashing of slot", &slot, host, &port),
        CM_REDIS_REDIR_TRYAGAIN);
    assert_int_equal(redir("CLUSTERDOWN The cluster is down", &slot, host, &port),
                     CM_REDIS_REDIR_DOWN);
    /* anything malformed is an ordinary error, never a redirection to nowhere */
    static const char *bad[] = {"MOVED",
                                "MOVED 16384 127.0.0.1:1",
                                "MOVED x 1.2.3.4:5",
                                "MOVED 1 1.2.3.4",
                                "MOVED 1 1.2.3.4:0",
                                "MOVED 1 1.2.3.4:65536",
                                "MOVED 1 h:6x",
                                "ASK 1  h:6",
                                "MOVED 123456 h:1",
                                "ERR wrong",
                                "NOSCRIPT No matching script",
                                "MOVED 1 h:1 extra"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(redir(bad[i], &slot, host, &port), CM_REDIS_REDIR_NONE);
    /* a host longer than the buffer is refused, not truncated */
    assert_int_equal(cm_redis_redirect_parse("MOVED 1 abcdefgh:1", 18, &slot, host, 4, &port),
                     CM_REDIS_REDIR_NONE);
}

/* RESP2 text of a CLUSTER SHARDS answer: shard 1 has two ranges, its master online and a
 * replica; shard 2's old master failed and its replica took over (both say so). */
static const char shards_resp[] =
    "*2\r\n"
    "*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:5460\r\n:10923\r\n:10923\r\n$5\r\nnodes\r\n*2\r\n"
    "*8\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nport\r\n:7001\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
    "$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*8\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
    "$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*2\r\n"
    "*8\r\n$2\r\nip\r\n$9\r\n127.0.0.2\r\n$4\r\nport\r\n:7002\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
    "$6\r\nhealth\r\n$6\r\nfailed\r\n"
    "*8\r\n$2\r\nip\r\n$9\r\n127.0.0.3\r\n$4\r\nport\r\n:7003\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
    "$6\r\nhealth\r\n$6\r\nonline\r\n";

static void test_shards_parse(void **state)
{
    cm_redis_range_t rg[8];
    cm_redis_reply_t *reply = cm_redis_reply_parse(shards_resp, sizeof(shards_resp) - 1);

    (void)state;
    assert_non_null(reply);
    assert_int_equal(cm_redis_shards_parse(reply, rg, 8, 0), 3);
    assert_int_equal(rg[0].start, 0);
    assert_int_equal(rg[0].end, 5460);
    assert_string_equal(rg[0].host, "127.0.0.1");
    assert_int_equal(rg[0].port, 7000); /* the master, not the replica listed first */
    assert_int_equal(rg[1].start, 10923);
    assert_int_equal(rg[1].end, 10923);
    assert_int_equal(rg[1].port, 7000);
    assert_int_equal(rg[2].start, 5461);
    assert_string_equal(rg[2].host, "127.0.0.3"); /* the online master wins */
    assert_int_equal(rg[2].port, 7003);
    /* more ranges than room: refused as a whole */
    assert_int_equal(cm_redis_shards_parse(reply, rg, 2, 0), -1);
    cm_redis_reply_free(reply);

    /* not a shards answer */
    static const char *bad[] = {
        "-ERR unknown command\r\n",
        ":1\r\n",
        "*1\r\n:1\r\n",
        "*1\r\n*2\r\n$5\r\nslots\r\n*1\r\n:0\r\n", /* odd slots */
        /* end before start, past 16383 */
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:5\r\n:4\r\n"
        "$5\r\nnodes\r\n*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n$4\r\nrole\r\n$"
        "6\r\nmaster\r\n",
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16384\r\n"
        "$5\r\nnodes\r\n*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n$4\r\nrole\r\n$"
        "6\r\nmaster\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        reply = cm_redis_reply_parse(bad[i], strlen(bad[i]));
        assert_non_null(reply);
        assert_int_equal(cm_redis_shards_parse(reply, rg, 8, 0), -1);
        cm_redis_reply_free(reply);
    }
    /* a shard whose nodes list has no master serves nothing (its slots wait for one) */
    reply = cm_redis_reply_parse(
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:9\r\n$5\r\nnodes\r\n*0\r\n",
        strlen("*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:9\r\n$5\r\nnodes\r\n*0\r\n"));
    assert_int_equal(cm_redis_shards_parse(reply, rg, 8, 0), 0);
    cm_redis_reply_free(reply);

    /* tls-cluster yes, port 0 (Redis 7.0): a node lists "tls-port" and no "port"; a TLS
     * client takes it, a plain one finds no address */
    static const char tls[] =
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
        "*8\r\n$2\r\nid\r\n$1\r\nx\r\n$8\r\ntls-port\r\n:7443\r\n$2\r\nip\r\n"
        "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";
    reply = cm_redis_reply_parse(tls, sizeof(tls) - 1);
    assert_non_null(reply);
    assert_int_equal(cm_redis_shards_parse(reply, rg, 8, 1), 1);
    assert_int_equal(rg[0].port, 7443);
    assert_int_equal(rg[0].end, 16383);
    assert_int_equal(cm_redis_shards_parse(reply, rg, 8, 0), 0);
    cm_redis_reply_free(reply);
    assert_null(cm_redis_reply_parse("*2\r\n:1\r\n", 8)); /* incomplete */
}

/* ---- cluster mode against a real 3-master / 3-replica Redis Cluster ---- */

static svc_redis_cluster_t *cluster;

static int cluster_group_setup(void **state)
{
    cm_log_init("test_cm_redis", CM_LOG_WARN);
    cluster = svc_redis_cluster_start(3, 1);
    return cluster == NULL ? -1 : 0;
}

static int cluster_group_teardown(void **state)
{
    svc_redis_cluster_stop(cluster);
    cluster = NULL;
    return 0;
}

static int cluster_setup(void **state)
{
    static struct fx f;
    char seed[32];

    /* one seed is enough: the rest of the cluster comes from CLUSTER SHARDS */
    snprintf(seed, sizeof(seed), SVC_HOST ":%d", svc_redis_cluster_port(cluster, 0));
    f.base = event_base_new();
    f.r = cm_redis_new_cluster_auth(f.base, seed, TIMEOUT_MS, auth());
    if (f.r == NULL || !tloop_until(f.base, is_connected, f.r, HARD_MS))
        return -1;
    *state = &f;
    return 0;
}

/* One command straight to node i (a plain client), answer copied into res. */
static void node_command(struct fx *f, int i, struct result *res, int argc, const char **argv)
{
    struct fx nf = {f->base,
                    cm_redis_new_auth(f->base, SVC_HOST, svc_redis_cluster_port(cluster, i),
                                      TIMEOUT_MS, auth())};
    assert_true(tloop_until(f->base, is_connected, nf.r, HARD_MS));
    command(&nf, res, argc, argv);
    cm_redis_free(nf.r);
}

/* Value of field in node i's INFO section (0 when absent). */
static long long info_count(struct fx *f, int i, const char *section, const char *field)
{
    struct result res;
    const char *p;

    node_command(f, i, &res, 2, (const char *[]){"INFO", section});
    res.str[sizeof(res.str) - 1] = '\0';
    p = strstr(res.str, field);
    return p != NULL ? strtoll(p + strlen(field) + 1, NULL, 10) : 0;
}

static long long errorstat(struct fx *f, int i, const char *what)
{
    char field[64];
    struct result res;
    const char *p;

    snprintf(field, sizeof(field), "errorstat_%s:count=", what);
    node_command(f, i, &res, 2, (const char *[]){"INFO", "errorstats"});
    res.str[sizeof(res.str) - 1] = '\0';
    p = strstr(res.str, field);
    return p != NULL ? strtoll(p + strlen(field), NULL, 10) : 0;
}

/* The node that serves key: the master that answers GET without a MOVED. */
static int owner_of(struct fx *f, const char *key)
{
    for (int i = 0; i < svc_redis_cluster_size(cluster); i++) {
        struct result res;
        if (!svc_redis_cluster_is_master(cluster, i))
            continue;
        node_command(f, i, &res, 2, (const char *[]){"GET", key});
        if (res.type != CM_REDIS_ERROR)
            return i;
    }
    return -1;
}

/* Any other master than i. */
static int other_master(int i)
{
    for (int j = 0; j < svc_redis_cluster_size(cluster); j++)
        if (j != i && svc_redis_cluster_is_master(cluster, j))
            return j;
    return -1;
}

static void node_id(struct fx *f, int i, char *id)
{
    struct result res;
    node_command(f, i, &res, 2, (const char *[]){"CLUSTER", "MYID"});
    assert_int_equal(res.len, 40);
    memcpy(id, res.str, 40);
    id[40] = '\0';
}

/* Tells every master that slot belongs to the node whose id is given. */
static void assign_slot(struct fx *f, unsigned slot, const char *id)
{
    char s[16];
    snprintf(s, sizeof(s), "%u", slot);
    for (int i = 0; i < svc_redis_cluster_size(cluster); i++) {
        struct result res;
        if (!svc_redis_cluster_is_master(cluster, i))
            continue;
        node_command(f, i, &res, 5, (const char *[]){"CLUSTER", "SETSLOT", s, "NODE", id});
        assert_int_equal(res.type, CM_REDIS_STATUS);
    }
}

static void test_cluster_routes_by_slot(void **state)
{
    struct fx *f = *state;
    long long moved_before = 0, moved_after = 0, keys = 0;
    struct result res[64];
    char keyv[64][32];
    int n = svc_redis_cluster_size(cluster);

    for (int i = 0; i < n; i++)
        moved_before += errorstat(f, i, "MOVED");
    /* 64 keys spread over every master; each goes straight to its owner */
    memset(res, 0, sizeof(res));
    for (int k = 0; k < 64; k++) {
        snprintf(keyv[k], sizeof(keyv[k]), "route:%d", k);
        const char *argv[] = {"SET", keyv[k], keyv[k]};
        assert_int_equal(cm_redis_command(f->r, on_result, &res[k], 3, argv, NULL), 0);
    }
    assert_true(wait_calls(f->base, res, 64));
    for (int k = 0; k < 64; k++) {
        assert_null(res[k].err);
        assert_string_equal(res[k].str, "OK");
    }
    for (int i = 0; i < n; i++) {
        moved_after += errorstat(f, i, "MOVED");
        if (svc_redis_cluster_is_master(cluster, i)) {
            long long here = info_count(f, i, "keyspace", "keys");
            assert_true(here > 0); /* every master got some */
            keys += here;
        }
    }
    assert_true(keys >= 64);
    assert_int_equal(moved_after, moved_before); /* the map was right: no redirection */

    /* a script with {tag} keys runs on the tag's node; NOSCRIPT there is handled */
    cm_redis_script_t *sc = cm_redis_script_new("t", "return redis.call('GET', KEYS[1])");
    struct result r1 = {0};
    assert_int_equal(
        cm_redis_eval(f->r, sc, on_result, &r1, 1, 1, (const char *[]){"route:7"}, NULL), 0);
    assert_true(wait_calls(f->base, &r1, 1));
    assert_null(r1.err);
    assert_string_equal(r1.str, "route:7");
    cm_redis_script_free(sc);

    /* a command without a key goes to any master */
    struct result pong;
    command(f, &pong, 1, (const char *[]){"PING"});
    assert_string_equal(pong.str, "PONG");
}

static void test_cluster_follows_moved(void **state)
{
    struct fx *f = *state;
    const char *key = "moved:{m1}";
    unsigned slot = cm_redis_key_slot(key, strlen(key));
    struct result res;
    char to_id[41];
    int from, to;
    long long moved_before;

    from = owner_of(f, key);
    to = other_master(from);
    assert_true(from >= 0 && to >= 0);
    node_id(f, to, to_id);
    moved_before = errorstat(f, from, "MOVED");
    /* The new owner first takes the highest config epoch: with a lower one, the gossip of
     * the old owner's replica (its master's slots, its master's epoch) would hand the
     * slot back to the old owner, and the two would MOVED the command to each other. */
    node_command(f, to, &res, 2, (const char *[]){"CLUSTER", "BUMPEPOCH"});
    assert_int_equal(res.type, CM_REDIS_STATUS);
    assign_slot(f, slot, to_id); /* the client's map is now stale for this slot */
    command(f, &res, 3, (const char *[]){"SET", key, "v"});
    assert_string_equal(res.str, "OK");
    assert_true(errorstat(f, from, "MOVED") > moved_before); /* it was redirected… */
    assert_int_equal(owner_of(f, key), to);                  /* …and the write is there */
    command(f, &res, 2, (const char *[]){"GET", key});
    assert_string_equal(res.str, "v");
}

static void test_cluster_follows_ask(void **state)
{
    struct fx *f = *state;
    const char *key = "ask:{a1}";
    unsigned slot = cm_redis_key_slot(key, strlen(key));
    char s[16], from_id[41], to_id[41];
    struct result res;
    int from, to;
    long long ask_before;

    from = owner_of(f, key);
    to = other_master(from);
    node_id(f, from, from_id);
    node_id(f, to, to_id);
    snprintf(s, sizeof(s), "%u", slot);
    /* slot migrating from → to; the key is not on `from`, so `from` answers ASK */
    node_command(f, to, &res, 5, (const char *[]){"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
    assert_int_equal(res.type, CM_REDIS_STATUS);
    node_command(f, from, &res, 5, (const char *[]){"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
    assert_int_equal(res.type, CM_REDIS_STATUS);
    ask_before = errorstat(f, from, "ASK");
    command(f, &res, 3, (const char *[]){"SET", key, "w"});
    assert_string_equal(res.str, "OK"); /* ASKING + SET on `to` */
    assert_true(errorstat(f, from, "ASK") > ask_before);
    assign_slot(f, slot, to_id); /* finish the migration */
    assert_int_equal(owner_of(f, key), to);
    command(f, &res, 2, (const char *[]){"GET", key});
    assert_string_equal(res.str, "w");
}

struct retry_get {
    struct fx *f;
    const char *key;
    struct result res;
    int ok;
};

/* Issues GET key whenever the previous one failed; ok once one answered a value. */
static int got_value(void *arg)
{
    struct retry_get *g = arg;

    if (g->ok)
        return 1;
    if (g->res.calls == 1 && g->res.err == NULL && g->res.type == CM_REDIS_STR) {
        g->ok = 1;
        return 1;
    }
    if (g->res.calls == 1 || g->res.calls == -1) {
        memset(&g->res, 0, sizeof(g->res));
        if (cm_redis_command(g->f->r, on_result, &g->res, 2, (const char *[]){"GET", g->key},
                             NULL) != 0)
            g->res.calls = -1; /* not sent: try again on the next tick */
    }
    return 0;
}

static void test_cluster_master_failover(void **state)
{
    struct fx *f = *state;
    const char *key = "failover:{f1}";
    struct result res;
    int master;

    command(f, &res, 3, (const char *[]){"SET", key, "kept"});
    master = owner_of(f, key);
    assert_true(master >= 0);
    node_command(f, master, &res, 3, (const char *[]){"WAIT", "1", "2000"});
    assert_int_equal(res.ival, 1); /* its replica has the write */
    assert_int_equal(svc_redis_cluster_kill(cluster, master), 0);
    /* the client goes on asking; the replica is promoted within the failover time */
    struct retry_get g = {.f = f, .key = key};
    g.res.calls = -1;
    assert_true(tloop_until(f->base, got_value, &g, 20000));
    assert_string_equal(g.res.str, "kept");
    assert_true(tloop_until(f->base, is_connected, f->r, HARD_MS)); /* map has a master again */
    /* the old master comes back as a replica; the cluster settles */
    assert_int_equal(svc_redis_cluster_restart(cluster, master), 0);
    assert_int_equal(svc_redis_cluster_wait_ok(cluster, 20000), 0);
    command(f, &res, 2, (const char *[]){"GET", key});
    assert_string_equal(res.str, "kept");
}

/* A node with a stale view of the cluster (a replica or a restarted old master that has
 * not heard of a failover yet): it answers CLUSTER SHARDS with one shard, every slot, whose
 * master is dead_port, where nothing listens. */
struct stale_node {
    struct evconnlistener *l;
    struct bufferevent *conns[8];
    int nconns;
    int port;
    int dead_port;
    int shards_asked;
};

static void on_stale_read(struct bufferevent *bev, void *arg)
{
    struct stale_node *sn = arg;
    struct evbuffer *in = bufferevent_get_input(bev), *out = bufferevent_get_output(bev);
    size_t len = evbuffer_get_length(in);
    cm_redis_reply_t *req = cm_redis_reply_parse((const char *)evbuffer_pullup(in, -1), len);
    const char *name;

    if (req == NULL)
        return; /* not complete yet (one request at a time: the client waits for answers) */
    evbuffer_drain(in, len);
    name = cm_redis_reply_str(cm_redis_reply_at(req, 0), NULL);
    if (name != NULL && strcasecmp(name, "AUTH") == 0) {
        evbuffer_add_printf(out, "+OK\r\n");
    } else if (name != NULL && strcasecmp(name, "CLUSTER") == 0) {
        sn->shards_asked++;
        evbuffer_add_printf(out,
                            "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n"
                            "*1\r\n*8\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nport\r\n:%d\r\n"
                            "$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n",
                            sn->dead_port);
    } else {
        evbuffer_add_printf(out, "-ERR unknown command\r\n");
    }
    cm_redis_reply_free(req);
}

static void on_stale_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                            int salen, void *arg)
{
    struct stale_node *sn = arg;
    struct bufferevent *bev =
        bufferevent_socket_new(evconnlistener_get_base(l), fd, BEV_OPT_CLOSE_ON_FREE);

    assert_non_null(bev);
    assert_true(sn->nconns < 8);
    sn->conns[sn->nconns++] = bev;
    bufferevent_setcb(bev, on_stale_read, NULL, NULL, sn);
    bufferevent_enable(bev, EV_READ);
}

/*
 * After a failover, a replica or a restarted old master may still describe the
 * old map. The client must refresh its map from the masters of the map it uses (or the
 * node a MOVED named), never round robin over every node it knows: here a stale seed
 * that was asked once at start (no map yet) must not be asked again while the masters
 * are up, and the client keeps serving.
 */
static void test_cluster_map_asked_of_masters(void **state)
{
    struct fx *f = *state;
    struct stale_node sn = {.dead_port = unused_port()};
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t salen = sizeof(sa);
    char seeds[64];
    struct result res;
    cm_redis_t *r;
    int asked;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sn.l = evconnlistener_new_bind(f->base, on_stale_accept, &sn,
                                   LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                   (struct sockaddr *)&sa, sizeof(sa));
    assert_non_null(sn.l);
    assert_int_equal(getsockname(evconnlistener_get_fd(sn.l), (struct sockaddr *)&sa, &salen), 0);
    sn.port = ntohs(sa.sin_port);
    /* the stale node first: it is the one asked for the very first map */
    snprintf(seeds, sizeof(seeds), SVC_HOST ":%d," SVC_HOST ":%d", sn.port,
             svc_redis_cluster_port(cluster, 0));
    r = cm_redis_new_cluster_auth(f->base, seeds, TIMEOUT_MS, auth());
    assert_non_null(r);
    assert_true(tloop_until(f->base, is_connected, r, HARD_MS));
    asked = sn.shards_asked;
    /* four refreshes (one a second): a round robin over the five known nodes reaches the
     * stale one within them */
    tloop_for(f->base, 4500);
    assert_int_equal(sn.shards_asked, asked);
    assert_true(cm_redis_connected(r));
    struct fx rf = {f->base, r};
    command(&rf, &res, 3, (const char *[]){"SET", "stale:{s1}", "v"});
    assert_int_equal(res.type, CM_REDIS_STATUS);
    cm_redis_free(r);
    for (int i = 0; i < sn.nconns; i++)
        bufferevent_free(sn.conns[i]);
    evconnlistener_free(sn.l);
}

static void test_cluster_bad_seeds(void **state)
{
    struct event_base *base = event_base_new();
    static const char *bad[] = {"",      "127.0.0.1",       "127.0.0.1:",   "127.0.0.1:0",
                                ":6379", "127.0.0.1:70000", "127.0.0.1:1,", "127.0.0.1:x"};

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_null(cm_redis_new_cluster(base, bad[i], 100));
    assert_int_equal(events_left(base), 0);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_set_get_binary_safe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_replies_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_falls_back_on_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_then_late_reply_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_read_before_its_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_judges_redis_not_a_stalled_loop, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_free_fails_pending_with_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_inside_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_server_commands_fail_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_at_connect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wedged_connection_is_reopened, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_loss_fails_pending_then_reconnects, setup,
                                        teardown),
    };
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_resp_writer_matches_hiredis),
        cmocka_unit_test(test_resp_writer_random_argv),
        cmocka_unit_test(test_crc16_and_key_slots),
        cmocka_unit_test(test_redirect_parse),
        cmocka_unit_test(test_shards_parse),
        cmocka_unit_test(test_cluster_bad_seeds),
    };
    const struct CMUnitTest clustered[] = {
        cmocka_unit_test_setup_teardown(test_cluster_routes_by_slot, cluster_setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_follows_moved, cluster_setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_follows_ask, cluster_setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_master_failover, cluster_setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_map_asked_of_masters, cluster_setup, teardown),
    };
    int failed = cmocka_run_group_tests_name("pure", pure, NULL, NULL);
    failed += cmocka_run_group_tests_name("single", tests, group_setup, group_teardown);
    failed += cmocka_run_group_tests_name("tls", tests, tls_group_setup, tls_group_teardown);
    {
        const struct CMUnitTest tls_only[] = {
            cmocka_unit_test_setup_teardown(test_tls_certificate_checks, setup, teardown),
        };
        failed += cmocka_run_group_tests_name("tls_certificates", tls_only, tls_group_setup,
                                              tls_group_teardown);
    }
    failed += cmocka_run_group_tests_name("cluster", clustered, cluster_group_setup,
                                          cluster_group_teardown);
    return failed;
}
