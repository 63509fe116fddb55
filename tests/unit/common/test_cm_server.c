/*
 * Tests for cm_server: two workers on one port (plain HTTP on 127.0.0.1:0), driven by
 * blocking clients on the test's own thread while cm_server_run runs on another.
 * Covers: every worker serves (SO_REUSEPORT spreads the connections), /metrics-style
 * totals over the workers, a broadcast reaching every other worker, SIGTERM draining
 * every worker (a request in flight is still answered), and readiness as the AND of every
 * worker's. Hard timeouts on every socket; no sleep() except short polls while waiting for
 * the run to end or for the workers' next readiness sample.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cm_http.h"
#include "cm_server.h"

#define WORKERS 2

typedef struct app {
    cm_worker_t *w;
    int index;
    int served;         /* on the worker's thread */
    int broadcasts;     /* on the worker's thread */
    struct event *slow; /* the delayed answer of /slow */
    cm_req_t *slow_req; /* atomic: the test thread waits for it */
    uint64_t slow_start;
    cm_metrics_requests_t *lat;
    int up; /* atomic: the readiness the worker samples */
} app_t;

typedef struct fx {
    cm_server_t *s;
    app_t apps[WORKERS];
    pthread_t runner;
    int rc;
    bool joined; /* the runner has returned (stop_and_wait) */
} fx_t;

static void on_slow(evutil_socket_t fd, short what, void *arg)
{
    app_t *a = arg;
    cm_http_send_body(a->slow_req, 200, "text/plain", "slow", 4, false);
    cm_worker_req_end(a->w, a->lat, 0, a->slow_start);
}

static void on_broadcast(void *peer, void *arg, cm_bcast_t *b)
{
    ((app_t *)peer)->broadcasts++;
    cm_bcast_ack(b);
}

static void on_broadcast_done(void *arg)
{
    cm_req_t *req = arg;
    cm_http_send_body(req, 200, "text/plain", "done", 4, false);
}

static void handler(cm_req_t *req, void *arg)
{
    app_t *a = arg;
    char buf[128], *seg[2];
    int n = cm_http_path(req, buf, sizeof(buf), seg, 2);
    a->served++;
    if (n == 1 && strcmp(seg[0], "who") == 0) {
        char body[16];
        int len = snprintf(body, sizeof(body), "%d", a->index);
        cm_http_send_body(req, 200, "text/plain", body, (size_t)len, false);
    } else if (n == 1 && strcmp(seg[0], "metrics") == 0) {
        size_t len = 0;
        char *text = cm_metrics_render(cm_server_metrics(cm_worker_server(a->w)), &len);
        cm_http_send_body(req, 200, "text/plain", text, len, false);
        free(text);
    } else if (n == 1 && strcmp(seg[0], "slow") == 0) {
        a->slow_start = cm_worker_req_begin(a->w);
        __atomic_store_n(&a->slow_req, req, __ATOMIC_RELEASE);
        struct timeval tv = {0, 300000};
        evtimer_add(a->slow, &tv);
    } else if (n == 1 && strcmp(seg[0], "broadcast") == 0) {
        cm_worker_broadcast(a->w, on_broadcast, req, on_broadcast_done);
    } else {
        cm_http_send_error(req, 404, "not_found", "no", NULL);
    }
}

static bool app_ready(void *arg)
{
    return __atomic_load_n(&((app_t *)arg)->up, __ATOMIC_RELAXED) != 0;
}

static int initial_up1 = 1; /* worker 1's readiness when the run starts */

static void *runner(void *arg)
{
    fx_t *f = arg;
    f->rc = cm_server_run(f->s);
    return NULL;
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    char err[256] = "";
    cm_server_opts_t o = {
        .name = "test",
        .metric_prefix = "onsale_test",
        .workers = WORKERS,
        .listen_addr = "127.0.0.1",
        .port = 0,
        .limits = {.max_header_bytes = 8192,
                   .max_body_bytes = 4096,
                   .idle_timeout_s = 10,
                   .max_connections = 256},
        .drain_limit_ns = 5ull * 1000 * 1000 * 1000,
    };
    f->s = cm_server_new(&o, err, sizeof(err));
    assert_non_null(f->s);
    assert_int_equal(cm_server_workers(f->s), WORKERS);
    for (int i = 0; i < WORKERS; i++) {
        app_t *a = &f->apps[i];
        a->w = cm_server_worker(f->s, i);
        a->index = i;
        a->slow = evtimer_new(cm_worker_base(a->w), on_slow, a);
        static const char *const eps[] = {"slow"};
        a->lat = cm_metrics_requests(cm_server_metrics(f->s), "onsale_test_seconds", "x", eps, 1);
        assert_int_equal(cm_worker_listen(a->w, handler, NULL, a, err, sizeof(err)), 0);
        a->up = i == 1 ? initial_up1 : 1;
        cm_worker_readiness(a->w, app_ready, a);
    }
    assert_true(cm_server_port(f->s) > 0);
    /* The stop signal must reach the server's own loop, not this test thread: the runner
     * starts with it unblocked, then this thread blocks it. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    assert_int_equal(pthread_create(&f->runner, NULL, runner, f), 0);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    *state = f;
    return 0;
}

static void stop_runner(fx_t *f)
{
    if (f->joined)
        return;
    kill(getpid(), SIGTERM);
    pthread_join(f->runner, NULL);
    f->joined = true;
}

/* The server is freed only once its loops have returned, also after a failed assertion. */
static int teardown(void **state)
{
    fx_t *f = *state;
    stop_runner(f);
    for (int i = 0; i < WORKERS; i++)
        cm_worker_close(f->apps[i].w);
    for (int i = 0; i < WORKERS; i++)
        event_free(f->apps[i].slow);
    cm_server_free(f->s);
    free(f);
    return 0;
}

/* One request on a new connection; the status code, the body in body. */
static int get(int port, const char *path, char *body, size_t bodylen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    char req[256];
    int n =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    static char resp[65536];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(resp) - 1 && (r = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    resp[got] = '\0';
    int status = 0;
    if (sscanf(resp, "HTTP/1.1 %d", &status) != 1)
        return -1;
    const char *b = strstr(resp, "\r\n\r\n");
    snprintf(body, bodylen, "%s", b ? b + 4 : "");
    return status;
}

static void stop_and_wait(fx_t *f)
{
    stop_runner(f);
    assert_int_equal(f->rc, 0);
}

static void every_worker_serves(void **state)
{
    fx_t *f = *state;
    int port = cm_server_port(f->s);
    int seen[WORKERS] = {0};
    char body[64];
    for (int i = 0; i < 200 && !(seen[0] && seen[1]); i++) {
        assert_int_equal(get(port, "/who", body, sizeof(body)), 200);
        int w = atoi(body);
        assert_true(w >= 0 && w < WORKERS);
        seen[w]++;
    }
    assert_true(seen[0] > 0);
    assert_true(seen[1] > 0);
    stop_and_wait(f);
}

static void metrics_are_totals(void **state)
{
    fx_t *f = *state;
    int port = cm_server_port(f->s);
    static char body[65536];
    assert_int_equal(get(port, "/metrics", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "onsale_test_workers 2\n"));
    assert_non_null(strstr(body, "onsale_test_inflight_requests 0\n"));
    stop_and_wait(f);
}

static void broadcast_reaches_every_other_worker(void **state)
{
    fx_t *f = *state;
    int port = cm_server_port(f->s);
    char body[64];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(get(port, "/broadcast", body, sizeof(body)), 200);
        assert_string_equal(body, "done");
    }
    /* Each broadcast ran once on the worker that did not send it: 5 in all. */
    int total = 0;
    stop_and_wait(f);
    for (int i = 0; i < WORKERS; i++)
        total += f->apps[i].broadcasts;
    assert_int_equal(total, 5);
}

typedef struct slow_arg {
    int port;
    int status;
    char body[64];
} slow_arg_t;

static void *slow_client(void *arg)
{
    slow_arg_t *s = arg;
    s->status = get(s->port, "/slow", s->body, sizeof(s->body));
    return NULL;
}

/* A request in flight when SIGTERM arrives is still answered; then run returns. */
static void sigterm_drains_every_worker(void **state)
{
    fx_t *f = *state;
    slow_arg_t s = {.port = cm_server_port(f->s)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, slow_client, &s), 0);
    /* Wait until the slow request is in flight on some worker. */
    for (int i = 0; i < 500; i++) {
        if (__atomic_load_n(&f->apps[0].slow_req, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&f->apps[1].slow_req, __ATOMIC_ACQUIRE))
            break;
        usleep(2000);
    }
    stop_and_wait(f);
    pthread_join(t, NULL);
    assert_int_equal(s.status, 200);
    assert_string_equal(s.body, "slow");
}

/* cm_server_ready as the workers' samples see it within 5 s (they sample every 250 ms). */
static bool ready_becomes(cm_server_t *s, bool want)
{
    for (int i = 0; i < 500; i++) {
        if (cm_server_ready(s) == want)
            return true;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* One worker whose backends are down makes the process unready (a health check may land on
 * the other worker); it is ready again once every worker's sample says so. */
static void ready_only_when_every_worker_is(void **state)
{
    fx_t *f = *state;
    assert_true(ready_becomes(f->s, true));
    __atomic_store_n(&f->apps[1].up, 0, __ATOMIC_RELAXED);
    assert_true(ready_becomes(f->s, false));
    __atomic_store_n(&f->apps[1].up, 1, __ATOMIC_RELAXED);
    assert_true(ready_becomes(f->s, true));
    __atomic_store_n(&f->apps[0].up, 0, __ATOMIC_RELAXED);
    assert_true(ready_becomes(f->s, false));
    stop_and_wait(f);
}

/* --- the service manager's view (sd_notify on a NOTIFY_SOCKET of the test's own) ------ */

static int notify_fd = -1;
static char notify_path[64];
static int block_state; /* atomic: 1 while worker 1's loop is stuck, 2 once it is not */

static int setup_notify(void **state)
{
    snprintf(notify_path, sizeof(notify_path), "/tmp/onsale-notify-%d.sock", (int)getpid());
    unlink(notify_path);
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(notify_fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", notify_path);
    assert_int_equal(bind(notify_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {0, 50000};
    setsockopt(notify_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setenv("NOTIFY_SOCKET", notify_path, 1);
    setenv("WATCHDOG_USEC", "1000000", 1); /* pings every 250 ms; stuck after 500 ms */
    initial_up1 = 0;
    int rc = setup(state);
    initial_up1 = 1;
    return rc;
}

static int teardown_notify(void **state)
{
    int rc = teardown(state);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    close(notify_fd);
    unlink(notify_path);
    return rc;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The next datagram within 50 ms into buf ("" when none). */
static void next_msg(char *buf, size_t size)
{
    ssize_t n = recv(notify_fd, buf, size - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
}

static bool has_line(const char *msg, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = msg; (p = strstr(p, line)) != NULL; p += n)
        if ((p == msg || p[-1] == '\n') && (p[n] == '\0' || p[n] == '\n'))
            return true;
    return false;
}

/* Waits up to limit_ms for a datagram holding line; true if one came. */
static bool wait_line(const char *line, uint64_t limit_ms)
{
    char buf[512];
    for (uint64_t end = mono_ms() + limit_ms; mono_ms() < end;) {
        next_msg(buf, sizeof(buf));
        if (has_line(buf, line))
            return true;
    }
    return false;
}

/* A stuck callback: what a blocking call on the loop would look like. */
static void on_block(evutil_socket_t fd, short what, void *arg)
{
    __atomic_store_n(&block_state, 1, __ATOMIC_RELEASE);
    struct timespec ts = {2, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n(&block_state, 2, __ATOMIC_RELEASE);
}

/* READY=1 only once every worker is ready; WATCHDOG=1 while every loop runs, none while
 * one loop is stuck, and again once it runs; STOPPING=1 at SIGTERM. */
static void notify_ready_and_watchdog(void **state)
{
    fx_t *f = *state;
    char buf[512];
    assert_true(wait_line("WATCHDOG=1", 2000)); /* the loops run; worker 1 is not ready */
    for (uint64_t end = mono_ms() + 1000; mono_ms() < end;) {
        next_msg(buf, sizeof(buf));
        assert_false(has_line(buf, "READY=1"));
    }
    __atomic_store_n(&f->apps[1].up, 1, __ATOMIC_RELAXED);
    assert_true(wait_line("READY=1", 3000));
    assert_true(wait_line("WATCHDOG=1", 2000));

    struct timeval now = {0, 0};
    assert_int_equal(
        event_base_once(cm_worker_base(f->apps[1].w), -1, EV_TIMEOUT, on_block, NULL, &now), 0);
    while (__atomic_load_n(&block_state, __ATOMIC_ACQUIRE) == 0)
        next_msg(buf, sizeof(buf));
    uint64_t start = mono_ms();
    while (__atomic_load_n(&block_state, __ATOMIC_ACQUIRE) == 1) {
        next_msg(buf, sizeof(buf));
        /* a ping seen while the loop is still stuck, well after its last check-in */
        if (has_line(buf, "WATCHDOG=1") && __atomic_load_n(&block_state, __ATOMIC_ACQUIRE) == 1)
            assert_true(mono_ms() - start < 900);
    }
    assert_true(wait_line("WATCHDOG=1", 2000)); /* running again */
    stop_and_wait(f);                           /* SIGTERM, drain, join */
    assert_true(wait_line("STOPPING=1", 1000)); /* queued in the socket meanwhile */
}

static void listen_addresses_parse(void **state)
{
    (void)state;
    char addr[64];
    int port = -1;
    assert_int_equal(cm_server_parse_listen("127.0.0.1:9000", addr, sizeof(addr), &port), 0);
    assert_string_equal(addr, "127.0.0.1");
    assert_int_equal(port, 9000);
    assert_int_equal(cm_server_parse_listen("[::1]:0", addr, sizeof(addr), &port), 0);
    assert_string_equal(addr, "::1");
    assert_int_equal(port, 0);
    assert_int_equal(cm_server_parse_listen("[2001:db8::7]:65535", addr, sizeof(addr), &port), 0);
    assert_string_equal(addr, "2001:db8::7");
    const char *bad[] = {"::1:9000", "[::1]",          "[::1:9000", "::1]:9000",
                         "[]:9000",  "[127.0.0.1]:80", "1.2.3.4:",  ":80",
                         "[::1]:x",  "[::1]:65536",    "host:80",   "1.2.3.4:-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (cm_server_parse_listen(bad[i], addr, sizeof(addr), &port) == 0)
            fail_msg("accepted %s", bad[i]);
    /* too long for the buffer */
    char small[4];
    assert_int_equal(cm_server_parse_listen("[::1]:80", small, sizeof(small), &port), 0);
    assert_int_equal(cm_server_parse_listen("10.0.0.1:80", small, sizeof(small), &port), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(every_worker_serves, setup, teardown),
        cmocka_unit_test_setup_teardown(metrics_are_totals, setup, teardown),
        cmocka_unit_test_setup_teardown(broadcast_reaches_every_other_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(sigterm_drains_every_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(ready_only_when_every_worker_is, setup, teardown),
        cmocka_unit_test_setup_teardown(notify_ready_and_watchdog, setup_notify, teardown_notify),
        cmocka_unit_test(listen_addresses_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
