/*
 * test_cm_resolve — host names looked up on the loop (cm_resolve, evdns), and cm_redis
 * connecting to a redis_host given by name, against a real redis-server (support/svc.h).
 *
 * The "silent" tests point the resolver at a UDP socket of their own that reads the
 * query and never answers (ONSALE_TEST_NAMESERVER): the query must reach it, and a
 * 10 ms timer must keep firing on time all along — a blocking lookup (getaddrinfo) would
 * neither ask that socket nor let the timer run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm_log.h"
#include "cm_redis.h"
#include "cm_resolve.h"
#include "svc.h"

#define HARD_MS 10000

static svc_redis_t *srv;
static struct event_base *base;

/* ---- loop helpers ---- */

struct watch {
    int (*pred)(void *);
    void *arg;
    struct timeval last;
    long max_gap_us; /* the longest wait between two ticks */
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    struct timeval now, d;

    (void)fd;
    (void)what;
    evutil_gettimeofday(&now, NULL);
    evutil_timersub(&now, &w->last, &d);
    if (d.tv_sec * 1000000L + d.tv_usec > w->max_gap_us)
        w->max_gap_us = d.tv_sec * 1000000L + d.tv_usec;
    w->last = now;
    if (w->pred(w->arg))
        event_base_loopbreak(base);
}

static void on_hard(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Runs the loop with a 10 ms tick until pred holds or max_ms pass; returns the longest
 * gap between ticks in µs (pred's verdict in *ok). */
static long run_until(int (*pred)(void *), void *arg, int max_ms, int *ok)
{
    struct watch w = {pred, arg, {0, 0}, 0};
    struct timeval tick_tv = {0, 10000}, hard_tv = {max_ms / 1000, (max_ms % 1000) * 1000};
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, &w);
    struct event *hard = evtimer_new(base, on_hard, base);

    evutil_gettimeofday(&w.last, NULL);
    if (!pred(arg)) {
        event_add(tick, &tick_tv);
        event_add(hard, &hard_tv);
        event_base_dispatch(base);
    }
    event_free(tick);
    event_free(hard);
    *ok = pred(arg);
    return w.max_gap_us;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

static int events_left(void)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
    return event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE);
}

/* A UDP socket on loopback that reads queries and never answers; sets the test hook. */
static int silent_nameserver(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    char ns[64];

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    snprintf(ns, sizeof(ns), "127.0.0.1:%d", ntohs(a.sin_port));
    assert_int_equal(setenv("ONSALE_TEST_NAMESERVER", ns, 1), 0);
    return fd;
}

/* Queries that reached the silent server (read without waiting). */
static int queries_seen(int fd)
{
    char buf[512];
    int n = 0;

    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        n++;
    return n;
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    (void)state;
    cm_log_init("test_cm_resolve", CM_LOG_WARN);
    srv = svc_redis_start();
    return srv == NULL ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    svc_redis_stop(srv);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    base = event_base_new();
    return base == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    unsetenv("ONSALE_TEST_NAMESERVER");
    if (events_left() != 0)
        event_base_dump_events(base, stderr);
    assert_int_equal(events_left(), 0);
    event_base_free(base);
    base = NULL;
    return 0;
}

/* ---- cm_resolve ---- */

struct answer {
    int calls;
    const char *err;
    int n;
    char first[INET6_ADDRSTRLEN];
    int port;
};

static void on_answer(const char *err, const cm_resolve_addr_t *addrs, int n, void *arg)
{
    struct answer *a = arg;
    const struct sockaddr_in *sin = n > 0 ? (const struct sockaddr_in *)&addrs[0].ss : NULL;

    a->calls++;
    a->err = err;
    a->n = n;
    if (sin != NULL && sin->sin_family == AF_INET) {
        inet_ntop(AF_INET, &sin->sin_addr, a->first, sizeof(a->first));
        a->port = ntohs(sin->sin_port);
    }
}

static int answered(void *arg)
{
    return ((struct answer *)arg)->calls > 0;
}

static bool has_localhost_v4(void)
{
    FILE *f = fopen("/etc/hosts", "r");
    char line[256];
    bool found = false;

    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strncmp(line, "127.0.0.1", 9) == 0 && strstr(line, "localhost") != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* "localhost" comes from /etc/hosts, answered from the loop and not inside the call. */
static void test_localhost_from_hosts_file(void **state)
{
    cm_resolve_t *rs = cm_resolve_new(base);
    struct answer a = {0};
    int ok;

    (void)state;
    if (!has_localhost_v4())
        skip();
    assert_non_null(rs);
    cm_resolve_start(rs, "localhost", 6379, on_answer, &a);
    assert_int_equal(a.calls, 0);
    run_until(answered, &a, HARD_MS, &ok);
    assert_true(ok);
    assert_null(a.err);
    assert_true(a.n >= 1);
    assert_string_equal(a.first, "127.0.0.1");
    assert_int_equal(a.port, 6379);
    cm_resolve_free(rs);
}

static void test_needed(void **state)
{
    (void)state;
    assert_true(cm_resolve_needed("localhost"));
    assert_true(cm_resolve_needed("redis.example"));
    assert_false(cm_resolve_needed("127.0.0.1"));
    assert_false(cm_resolve_needed("::1"));
    assert_false(cm_resolve_needed("/var/run/postgresql"));
    assert_false(cm_resolve_needed(""));
    assert_false(cm_resolve_needed(NULL));
}

/* A silent server: the query goes out, the loop goes on; cancel, and nothing calls back. */
static void test_silent_server_cancel(void **state)
{
    int fd = silent_nameserver();
    cm_resolve_t *rs = cm_resolve_new(base);
    struct answer a = {0};
    cm_resolve_req_t *req;
    long gap;
    int ok;

    (void)state;
    assert_non_null(rs);
    req = cm_resolve_start(rs, "nowhere.onsale.invalid", 1, on_answer, &a);
    gap = run_until(never, NULL, 300, &ok);
    assert_true(gap < 100000);
    assert_true(queries_seen(fd) >= 1);
    assert_int_equal(a.calls, 0);
    cm_resolve_cancel(req);
    cm_resolve_free(rs);
    run_until(never, NULL, 50, &ok); /* evdns' late cancel callback, if any, is ours */
    assert_int_equal(a.calls, 0);
    close(fd);
}

/* ---- cm_redis by name ---- */

static const cm_redis_auth_t *auth(void)
{
    static cm_redis_auth_t a;
    a.user = SVC_REDIS_USER;
    a.password = svc_password();
    return &a;
}

static int is_connected(void *arg)
{
    return cm_redis_connected(arg);
}

struct pong {
    int calls;
    const char *err;
    char str[16];
};

static void on_pong(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    struct pong *p = arg;

    p->calls++;
    p->err = err;
    if (reply != NULL && cm_redis_reply_str(reply, NULL) != NULL)
        snprintf(p->str, sizeof(p->str), "%s", cm_redis_reply_str(reply, NULL));
}

static int ponged(void *arg)
{
    return ((struct pong *)arg)->calls > 0;
}

/* redis_host = localhost connects and answers (before: refused, "not an IP address"). */
static void test_redis_by_name(void **state)
{
    cm_redis_t *r = cm_redis_new_auth(base, "localhost", svc_redis_port(srv), 1000, auth());
    const char *argv[] = {"PING"};
    struct pong p = {0};
    int ok;

    (void)state;
    if (!has_localhost_v4())
        skip();
    run_until(is_connected, r, HARD_MS, &ok);
    assert_true(ok);
    assert_int_equal(cm_redis_command(r, on_pong, &p, 1, argv, NULL), 0);
    run_until(ponged, &p, HARD_MS, &ok);
    assert_true(ok);
    assert_null(p.err);
    assert_string_equal(p.str, "PONG");
    cm_redis_free(r);
}

/*
 * A name whose nameserver never answers: the query is asked of it (so the lookup is
 * evdns', not a blocking getaddrinfo), the loop keeps its 10 ms tick, the client stays
 * down and asks again after its connect deadline and backoff (re-resolving on every
 * reconnect), commands fail at once, and freeing it leaves nothing behind.
 */
static void test_redis_silent_dns_never_blocks(void **state)
{
    int fd = silent_nameserver();
    cm_redis_t *r =
        cm_redis_new_auth(base, "redis.onsale.invalid", svc_redis_port(srv), 200, auth());
    const char *argv[] = {"PING"};
    struct pong p = {0};
    int ok, seen;
    long gap;

    (void)state;
    gap = run_until(never, NULL, 300, &ok);
    seen = queries_seen(fd);
    assert_true(seen >= 1);
    assert_true(gap < 100000);
    assert_false(cm_redis_connected(r));
    assert_int_equal(cm_redis_command(r, on_pong, &p, 1, argv, NULL), -1);
    /* the connect deadline (the 200 ms command deadline, raised to its 1 s floor), then
     * the 100 ms backoff: a new lookup, new queries */
    gap = run_until(never, NULL, 1300, &ok);
    assert_true(gap < 100000);
    assert_true(queries_seen(fd) >= 1);
    assert_false(cm_redis_connected(r));
    cm_redis_free(r);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needed),
        cmocka_unit_test_setup_teardown(test_localhost_from_hosts_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_server_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redis_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redis_silent_dns_never_blocks, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
