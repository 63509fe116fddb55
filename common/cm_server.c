/*
 * cm_server — see cm_server.h.
 *
 * Shape: main thread builds N workers (event_base each, libevent's pthreads locking on
 * so other threads may wake a loop), the owner builds its per-worker server on each
 * base, cm_worker_listen binds the listeners (worker 0 first, so a port 0 becomes a real
 * port the others bind too, with SO_REUSEPORT: the kernel spreads new connections over
 * the workers' accept queues). run blocks SIGTERM/SIGINT in the worker threads, starts
 * them, and runs a small loop of its own on the main thread that turns the first signal
 * into cm_drain_start on every worker and the second into an immediate exit; it returns
 * when every worker's loop has ended. The main loop also speaks to the service manager
 * (cm_notify: READY once every worker is ready, WATCHDOG while every loop's sample
 * timer keeps beating, STOPPING at the drain). Cross-thread state is limited to: the registry
 * (locked/atomic), each worker's in-flight count (atomic), the drain flags (atomic), and
 * the sampled gauge cells and each worker's last beat (atomic).
 */
#include "cm_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_access.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_notify.h"
#include "cm_time.h"
#include "cm_version.h"

#define SAMPLE_MS   250
#define MAX_WORKERS 256
/* Two priorities on each worker loop: 0 for backend connections (cm_redis sets it on
 * its bufferevents), 1 — the default for every other event — for clients and timers.
 * A loop pass that has backend events runs only those, and a pass over client events
 * yields to polling again after DISPATCH_SLICE_US, so a burst of TLS handshakes (each
 * ~0.3–0.5 ms of CPU) cannot hold a Redis reply unread until its deadline passes
 * (tests/integration/test_gateway_burst.py). */
#define WORKER_PRIORITIES 2
#define DISPATCH_SLICE_US 2000

typedef struct sampled {
    struct sampled *next;
    double (*fn)(void *);
    void *arg;
    uint64_t bits; /* atomic: the last sample's double bits */
} sampled_t;

typedef struct msg {
    struct msg *next;
    void (*run)(cm_worker_t *w, struct msg *m);
    cm_bcast_t *b;
} msg_t;

struct cm_bcast {
    cm_worker_t *from;
    void (*fn)(void *peer, void *arg, cm_bcast_t *b);
    void *arg;
    void (*done)(void *arg);
    int pending; /* atomic: peers yet to acknowledge */
};

struct cm_worker {
    cm_server_t *server;
    int index;
    void *app; /* the owner's instance on this worker */
    pthread_mutex_t mq_lock;
    msg_t *mq_head, *mq_tail;
    struct event *mq_ev;
    struct event_base *base;
    cm_http_server_t *http;
    cm_http_server_t *admin;
    cm_drain_t *drain;
    struct event *sample_ev;
    sampled_t *sampled;
    bool (*ready_fn)(void *); /* its backends reachable, sampled with the gauges */
    void *ready_arg;
    int ready;        /* atomic: ready_fn's last answer */
    int inflight;     /* atomic */
    uint64_t beat_ns; /* atomic: monotonic time of its last sample (0: not yet) */
    pthread_t thread;
    bool started;
};

struct cm_server {
    cm_server_opts_t o;
    char *name;
    int n;
    cm_worker_t *w;
    cm_metrics_t *metrics;
    cm_http_addrs_t *addrs; /* open connections per client address, every worker */
    int port, admin_port;
    struct event_base *main_base; /* signals */
    struct event *sig_term, *sig_int, *done_ev, *notify_ev;
    int signals;
    uint64_t watchdog_ns;      /* the manager's WatchdogSec (0: none) */
    uint64_t watchdog_sent_ns; /* when WATCHDOG=1 last went out */
    bool ready_sent;           /* READY=1 went out */
    int done;                  /* atomic: workers whose loop ended */
};

int cm_server_parse_listen(const char *text, char *addr, size_t addrlen, int *port)
{
    const char *colon = text ? strrchr(text, ':') : NULL;
    if (colon == NULL || colon == text)
        return -1;
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || p < 0 || p > 65535)
        return -1;
    const char *host = text;
    size_t n = (size_t)(colon - text);
    bool bracketed = text[0] == '[';
    if (bracketed) { /* [IPv6]:port */
        if (n < 3 || text[n - 1] != ']')
            return -1;
        host++, n -= 2;
    }
    if (n >= addrlen)
        return -1;
    memcpy(addr, host, n);
    addr[n] = '\0';
    struct in_addr in;
    struct in6_addr in6;
    if (bracketed ? inet_pton(AF_INET6, addr, &in6) != 1 : inet_pton(AF_INET, addr, &in) != 1)
        return -1;
    *port = (int)p;
    return 0;
}

int cm_server_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

static double read_cell(void *arg)
{
    uint64_t b = __atomic_load_n(&((sampled_t *)arg)->bits, __ATOMIC_RELAXED);
    double d;
    memcpy(&d, &b, sizeof(d));
    return d;
}

static void sample_all(cm_worker_t *w)
{
    __atomic_store_n(&w->beat_ns, cm_time_mono_ns(), __ATOMIC_RELEASE);
    if (w->ready_fn)
        __atomic_store_n(&w->ready, w->ready_fn(w->ready_arg) ? 1 : 0, __ATOMIC_RELAXED);
    for (sampled_t *s = w->sampled; s; s = s->next) {
        double d = s->fn(s->arg);
        uint64_t b;
        memcpy(&b, &d, sizeof(b));
        __atomic_store_n(&s->bits, b, __ATOMIC_RELAXED);
    }
}

static void on_sample(evutil_socket_t fd, short what, void *arg)
{
    sample_all(arg);
}

static double gauge_inflight(void *arg)
{
    return __atomic_load_n(&((cm_worker_t *)arg)->inflight, __ATOMIC_RELAXED);
}

static double gauge_connections(void *arg)
{
    cm_worker_t *w = arg;
    return w->http ? cm_http_server_connections(w->http) : 0;
}

static double gauge_one(void *arg)
{
    return 1;
}

/* --- messages between workers ------------------------------------------------------ */

static void post(cm_worker_t *w, msg_t *m)
{
    m->next = NULL;
    pthread_mutex_lock(&w->mq_lock);
    if (w->mq_tail)
        w->mq_tail->next = m;
    else
        w->mq_head = m;
    w->mq_tail = m;
    pthread_mutex_unlock(&w->mq_lock);
    event_active(w->mq_ev, EV_TIMEOUT, 1);
}

static void on_messages(evutil_socket_t fd, short what, void *arg)
{
    cm_worker_t *w = arg;
    pthread_mutex_lock(&w->mq_lock);
    msg_t *m = w->mq_head;
    w->mq_head = w->mq_tail = NULL;
    pthread_mutex_unlock(&w->mq_lock);
    while (m) {
        msg_t *next = m->next;
        m->run(w, m);
        m = next;
    }
}

static void run_done(cm_worker_t *w, msg_t *m)
{
    cm_bcast_t *b = m->b;
    free(m);
    b->done(b->arg);
    free(b);
}

static void run_fn(cm_worker_t *w, msg_t *m)
{
    cm_bcast_t *b = m->b;
    free(m);
    b->fn(w->app, b->arg, b);
}

/* Teardown: messages nobody will run (their requests' connections are gone). */
static void drop_messages(cm_worker_t *w)
{
    msg_t *m = w->mq_head;
    w->mq_head = w->mq_tail = NULL;
    while (m) {
        msg_t *next = m->next;
        if (m->run == run_done || __atomic_sub_fetch(&m->b->pending, 1, __ATOMIC_ACQ_REL) == 0)
            free(m->b);
        free(m);
        m = next;
    }
}

void cm_bcast_ack(cm_bcast_t *b)
{
    if (__atomic_sub_fetch(&b->pending, 1, __ATOMIC_ACQ_REL) == 0) {
        msg_t *m = cm_xcalloc(1, sizeof(*m));
        m->run = run_done;
        m->b = b;
        post(b->from, m);
    }
}

void cm_worker_broadcast(cm_worker_t *w, void (*fn)(void *peer, void *arg, cm_bcast_t *b),
                         void *arg, void (*done)(void *arg))
{
    cm_server_t *s = w->server;
    if (s->n == 1) {
        done(arg);
        return;
    }
    cm_bcast_t *b = cm_xcalloc(1, sizeof(*b));
    b->from = w;
    b->fn = fn;
    b->arg = arg;
    b->done = done;
    b->pending = s->n - 1;
    for (int i = 0; i < s->n; i++) {
        if (&s->w[i] == w)
            continue;
        msg_t *m = cm_xcalloc(1, sizeof(*m));
        m->run = run_fn;
        m->b = b;
        post(&s->w[i], m);
    }
}

/* A worker's loop: WORKER_PRIORITIES priorities, client work cut into slices. */
static struct event_base *new_worker_base(void)
{
    struct event_config *cfg = event_config_new();
    const struct timeval slice = {0, DISPATCH_SLICE_US};
    struct event_base *base = NULL;

    if (cfg == NULL)
        return NULL;
    /* checked after each callback of priority >= 1 (backend events run unsliced) */
    if (event_config_set_max_dispatch_interval(cfg, &slice, -1, 1) == 0)
        base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (base != NULL && event_base_priority_init(base, WORKER_PRIORITIES) != 0) {
        event_base_free(base);
        base = NULL;
    }
    return base;
}

static double tls_not_after(void *arg)
{
    return cm_tls_server_not_after(arg);
}

/* onsale_build_info{version,commit} 1: which build answers (the same name on every
 * service, so one query compares a fleet mid-upgrade). */
static void register_build_info(cm_metrics_t *m)
{
    char labels[128];
    snprintf(labels, sizeof(labels), "version=\"%s\",commit=\"%s\"", cm_version, cm_version_commit);
    cm_gauge_set(cm_metrics_gauge(m, "onsale_build_info",
                                  "the version and commit of this build (always 1)", labels),
                 1);
}

/* The overload policy's counters, one series per cause, shared by every worker. */
static void shed_counters(cm_server_t *s)
{
    char name[96], label[48];

    snprintf(name, sizeof(name), "%s_shed_total", s->o.metric_prefix);
    for (int i = 0; i < CM_SHED_NCAUSES; i++) {
        snprintf(label, sizeof(label), "cause=\"%s\"", cm_shed_cause_name((cm_shed_cause_t)i));
        s->o.limits.shed_counters[i] = cm_metrics_counter(
            s->metrics, name,
            "work shed by the overload policy: requests answered 503 overloaded (loop_lag), "
            "times accepting paused at max_handshakes (handshakes) or while the loop lagged "
            "(accept_lag)",
            label);
    }
}

cm_server_t *cm_server_new(const cm_server_opts_t *o, char *err, size_t errlen)
{
    cm_server_t *s = cm_xcalloc(1, sizeof(*s));
    s->o = *o;
    s->name = cm_xstrdup(o->name ? o->name : "server");
    s->o.name = s->name;
    s->n = o->workers > 0 ? o->workers : cm_server_cores();
    if (s->n > MAX_WORKERS)
        s->n = MAX_WORKERS;
    /* Other threads (workers' peers, signer and verifier pools) wake loops: locks on. */
    if (evthread_use_pthreads() != 0) {
        snprintf(err, errlen, "evthread_use_pthreads failed");
        free(s->name);
        free(s);
        return NULL;
    }
    s->metrics = cm_metrics_new();
    register_build_info(s->metrics);
    cm_metrics_process(s->metrics);
    if (o->tls != NULL) {
        char cert_name[96];
        snprintf(cert_name, sizeof(cert_name), "%s_tls_cert_expiry_timestamp_seconds",
                 o->metric_prefix);
        cm_metrics_gauge_fn(s->metrics, cert_name,
                            "notAfter of the served TLS certificate (seconds since the epoch)",
                            NULL, tls_not_after, o->tls);
    }
    if (o->limits.max_conns_per_addr > 0)
        s->addrs = cm_http_addrs_new();
    s->o.limits.addrs = s->addrs;
    shed_counters(s);
    s->w = cm_xcalloc((size_t)s->n, sizeof(cm_worker_t));
    char name[96];
    snprintf(name, sizeof(name), "%s_inflight_requests", o->metric_prefix);
    for (int i = 0; i < s->n; i++) {
        cm_worker_t *w = &s->w[i];
        w->server = s;
        w->index = i;
        w->base = new_worker_base();
        if (w->base == NULL) {
            snprintf(err, errlen, "event_base_new failed");
            cm_server_free(s);
            return NULL;
        }
        w->drain = cm_drain_new(w->base, s->name, &w->inflight, o->drain_limit_ns);
        cm_drain_set_grace(w->drain, o->drain_grace_ms);
        w->sample_ev = event_new(w->base, -1, EV_PERSIST, on_sample, w);
        w->mq_ev = event_new(w->base, -1, 0, on_messages, w);
        pthread_mutex_init(&w->mq_lock, NULL);
        snprintf(name, sizeof(name), "%s_inflight_requests", o->metric_prefix);
        cm_metrics_gauge_fn(s->metrics, name, "requests being served", NULL, gauge_inflight, w);
        snprintf(name, sizeof(name), "%s_open_connections", o->metric_prefix);
        cm_metrics_gauge_fn(s->metrics, name, "open client connections", NULL, gauge_connections,
                            w);
        snprintf(name, sizeof(name), "%s_workers", o->metric_prefix);
        cm_metrics_gauge_fn(s->metrics, name, "worker threads (one event loop each)", NULL,
                            gauge_one, w);
    }
    return s;
}

int cm_server_workers(const cm_server_t *s)
{
    return s->n;
}

cm_worker_t *cm_server_worker(cm_server_t *s, int i)
{
    return &s->w[i];
}

cm_metrics_t *cm_server_metrics(cm_server_t *s)
{
    return s->metrics;
}

int cm_server_port(const cm_server_t *s)
{
    return s->port;
}

int cm_server_admin_port(const cm_server_t *s)
{
    return s->admin_port;
}

int cm_worker_listen(cm_worker_t *w, cm_http_handler_t fans, cm_http_handler_t admin, void *arg,
                     char *err, size_t errlen)
{
    cm_server_t *s = w->server;
    w->app = arg;
    cm_http_limits_t lim = s->o.limits;
    lim.reuse_port = s->n > 1; /* one worker: a second process on the port fails to bind */
    if (lim.max_connections > 0) {
        lim.max_connections /= s->n;
        if (lim.max_connections < 1)
            lim.max_connections = 1;
    }
    int port = w->index == 0 ? s->o.port : s->port;
    w->http =
        cm_http_server_new(w->base, s->o.listen_addr, port, s->o.tls, &lim, fans, arg, err, errlen);
    if (w->http == NULL)
        return -1;
    if (w->index == 0)
        s->port = cm_http_server_port(w->http);
    cm_drain_add_http(w->drain, w->http);
    if (s->o.admin_addr != NULL && admin != NULL) {
        int aport = w->index == 0 ? s->o.admin_port : s->admin_port;
        cm_http_limits_t alim = lim;
        alim.proxy_from = NULL;              /* operators connect directly */
        alim.engine = CM_HTTP_ENGINE_EVHTTP; /* not a hot path: every route stays on evhttp */
        alim.body_cap = NULL;
        alim.shed_lag_ms = 0; /* operators reach /metrics and the dashboard under load */
        alim.max_handshakes = 0;
        w->admin = cm_http_server_new(w->base, s->o.admin_addr, aport, s->o.tls, &alim, admin, arg,
                                      err, errlen);
        if (w->admin == NULL)
            return -1;
        if (w->index == 0)
            s->admin_port = cm_http_server_port(w->admin);
        cm_drain_add_http(w->drain, w->admin);
    }
    return 0;
}

static sampled_t *add_sampled(cm_worker_t *w, double (*fn)(void *), void *arg)
{
    sampled_t *c = cm_xcalloc(1, sizeof(*c));
    c->fn = fn;
    c->arg = arg;
    c->next = w->sampled;
    w->sampled = c;
    return c;
}

void cm_worker_gauge(cm_worker_t *w, const char *name, const char *help, double (*fn)(void *),
                     void *arg)
{
    cm_metrics_gauge_fn(w->server->metrics, name, help, NULL, read_cell, add_sampled(w, fn, arg));
}

void cm_worker_gauge_min(cm_worker_t *w, const char *name, const char *help, double (*fn)(void *),
                         void *arg)
{
    cm_metrics_gauge_fn_min(w->server->metrics, name, help, NULL, read_cell,
                            add_sampled(w, fn, arg));
}

void cm_worker_readiness(cm_worker_t *w, bool (*fn)(void *), void *arg)
{
    w->ready_fn = fn;
    w->ready_arg = arg;
}

bool cm_server_ready(const cm_server_t *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->w[i].ready_fn && !__atomic_load_n(&s->w[i].ready, __ATOMIC_RELAXED))
            return false;
    return true;
}

/* --- running ----------------------------------------------------------------------- */

static void *worker_main(void *arg)
{
    cm_worker_t *w = arg;
    cm_server_t *s = w->server;
    sample_all(w);
    struct timeval tv = {0, SAMPLE_MS * 1000};
    event_add(w->sample_ev, &tv);
    event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
    event_del(w->sample_ev);
    __atomic_add_fetch(&s->done, 1, __ATOMIC_ACQ_REL);
    event_active(s->done_ev, EV_TIMEOUT, 1);
    return NULL;
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    cm_server_t *s = arg;
    if (__atomic_load_n(&s->done, __ATOMIC_ACQUIRE) >= s->n)
        event_base_loopexit(s->main_base, NULL);
}

/* True when every worker's loop sampled (sample_all) within the last limit_ns. */
static bool loops_alive(cm_server_t *s, uint64_t now, uint64_t limit_ns)
{
    for (int i = 0; i < s->n; i++) {
        uint64_t b = __atomic_load_n(&s->w[i].beat_ns, __ATOMIC_ACQUIRE);
        if (b == 0 || now - b > limit_ns)
            return false;
    }
    return true;
}

/*
 * The service manager's view, every SAMPLE_MS on the main thread (cm_notify; nothing
 * when not started by one). READY=1 once, the first time every worker's loop runs and
 * every worker is ready (cm_server_ready: its Redis, Postgres). WATCHDOG=1 every quarter
 * of the interval, and only while every loop has sampled within half of it (at least two
 * sample periods, so WatchdogSec must be well above 1 s): a loop stuck
 * in a callback stops the pings and the manager restarts the process. The pings go on
 * through a drain, which is the loops still working.
 */
static void on_notify(evutil_socket_t fd, short what, void *arg)
{
    cm_server_t *s = arg;
    uint64_t now = cm_time_mono_ns();
    if (!s->ready_sent && s->signals == 0 && loops_alive(s, now, UINT64_MAX) &&
        cm_server_ready(s)) {
        char status[96];
        snprintf(status, sizeof(status), "%s ready: port %d, %d worker%s", s->name, s->port, s->n,
                 s->n == 1 ? "" : "s");
        cm_notify_ready(status);
        s->ready_sent = true;
        cm_log(CM_LOG_INFO, "%s: every worker ready", s->name);
    }
    /* a loop samples every SAMPLE_MS: a shorter limit would call a healthy loop stuck */
    uint64_t limit = s->watchdog_ns / 2 > 2ull * SAMPLE_MS * 1000000 ? s->watchdog_ns / 2
                                                                     : 2ull * SAMPLE_MS * 1000000;
    if (s->watchdog_ns > 0 && now - s->watchdog_sent_ns >= s->watchdog_ns / 4 &&
        loops_alive(s, now, limit)) {
        cm_notify_watchdog();
        s->watchdog_sent_ns = now;
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    cm_server_t *s = arg;
    if (s->signals++ == 0) {
        cm_notify_stopping();
        int inflight = 0;
        for (int i = 0; i < s->n; i++)
            inflight += __atomic_load_n(&s->w[i].inflight, __ATOMIC_RELAXED);
        cm_log(CM_LOG_INFO,
               "%s: signal %d: no longer accepting; finishing %d in-flight requests on %d "
               "worker(s)",
               s->name, (int)sig, inflight, s->n);
    } else {
        cm_log(CM_LOG_INFO, "%s: second signal: exiting now", s->name);
    }
    for (int i = 0; i < s->n; i++)
        cm_drain_start(s->w[i].drain);
}

int cm_server_run(cm_server_t *s)
{
    signal(SIGPIPE, SIG_IGN);
    s->main_base = event_base_new();
    if (s->main_base == NULL)
        return -1;
    s->sig_term = evsignal_new(s->main_base, SIGTERM, on_signal, s);
    s->sig_int = evsignal_new(s->main_base, SIGINT, on_signal, s);
    s->done_ev = event_new(s->main_base, -1, 0, on_done, s);
    s->notify_ev = event_new(s->main_base, -1, EV_PERSIST, on_notify, s);
    if (s->sig_term == NULL || s->sig_int == NULL || s->done_ev == NULL || s->notify_ev == NULL)
        return -1;
    event_add(s->sig_term, NULL);
    event_add(s->sig_int, NULL);
    s->watchdog_ns = cm_notify_watchdog_usec() * 1000;
    struct timeval notify_tv = {0, SAMPLE_MS * 1000};
    event_add(s->notify_ev, &notify_tv);
    /* Workers inherit a mask without the stop signals: the main loop gets them. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    int rc = 0;
    for (int i = 0; i < s->n; i++) {
        if (pthread_create(&s->w[i].thread, NULL, worker_main, &s->w[i]) != 0) {
            cm_log(CM_LOG_ERROR, "%s: cannot start worker %d: %s", s->name, i, strerror(errno));
            rc = -1;
            break;
        }
        s->w[i].started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        cm_log(CM_LOG_INFO, "%s listening on port %d (%d worker%s)", s->name, s->port, s->n,
               s->n == 1 ? "" : "s");
        if (s->w[0].admin)
            cm_log(CM_LOG_INFO, "%s admin listener on %s:%d", s->name, s->o.admin_addr,
                   s->admin_port);
        event_base_loop(s->main_base, EVLOOP_NO_EXIT_ON_EMPTY);
    } else {
        for (int i = 0; i < s->n; i++)
            if (s->w[i].started)
                cm_drain_start(s->w[i].drain);
    }
    for (int i = 0; i < s->n; i++) {
        if (s->w[i].started)
            pthread_join(s->w[i].thread, NULL);
        s->w[i].started = false;
    }
    cm_log(CM_LOG_INFO, "%s stopped", s->name);
    return rc;
}

void cm_worker_close(cm_worker_t *w)
{
    cm_http_server_free(w->http);
    w->http = NULL;
    cm_http_server_free(w->admin);
    w->admin = NULL;
}

void cm_server_free(cm_server_t *s)
{
    if (s == NULL)
        return;
    for (int i = 0; s->w && i < s->n; i++) {
        cm_worker_t *w = &s->w[i];
        cm_worker_close(w);
        cm_drain_free(w->drain);
        if (w->sample_ev)
            event_free(w->sample_ev);
        if (w->mq_ev) {
            drop_messages(w);
            event_free(w->mq_ev);
            pthread_mutex_destroy(&w->mq_lock);
        }
        for (sampled_t *c = w->sampled, *next; c; c = next) {
            next = c->next;
            free(c);
        }
        if (w->base)
            event_base_free(w->base);
    }
    free(s->w);
    if (s->sig_term)
        event_free(s->sig_term);
    if (s->sig_int)
        event_free(s->sig_int);
    if (s->done_ev)
        event_free(s->done_ev);
    if (s->notify_ev)
        event_free(s->notify_ev);
    if (s->main_base)
        event_base_free(s->main_base);
    cm_metrics_free(s->metrics);
    cm_http_addrs_free(s->addrs);
    free(s->name);
    free(s);
}

/* --- worker side ------------------------------------------------------------------- */

struct event_base *cm_worker_base(cm_worker_t *w)
{
    return w->base;
}

cm_server_t *cm_worker_server(cm_worker_t *w)
{
    return w->server;
}

int cm_worker_index(const cm_worker_t *w)
{
    return w->index;
}

cm_drain_t *cm_worker_drain(cm_worker_t *w)
{
    return w->drain;
}

bool cm_worker_draining(const cm_worker_t *w)
{
    return cm_drain_draining(w->drain);
}

uint64_t cm_worker_req_begin(cm_worker_t *w)
{
    __atomic_add_fetch(&w->inflight, 1, __ATOMIC_RELAXED);
    return cm_time_mono_ns();
}

void cm_worker_req_end(cm_worker_t *w, cm_metrics_requests_t *rq, size_t endpoint,
                       uint64_t start_ns)
{
    if (rq)
        cm_metrics_requests_observe(rq, endpoint, cm_access_last_status(),
                                    (double)(cm_time_mono_ns() - start_ns) / 1e9);
    __atomic_sub_fetch(&w->inflight, 1, __ATOMIC_RELAXED);
}

/* --- helpers ----------------------------------------------------------------------- */

bool cm_server_bearer_ok(cm_req_t *req, const char *token)
{
    size_t len = 0;
    const char *tok = cm_http_bearer(req, &len);
    if (tok == NULL || token == NULL)
        return false;
    /* Compare digests: constant time in both the content and the length of the token. */
    char got[65], want[65];
    cm_tls_sha256_hex(tok, len, got);
    cm_tls_sha256_hex(token, strlen(token), want);
    unsigned char diff = 0;
    for (size_t i = 0; i < 64; i++)
        diff |= (unsigned char)(got[i] ^ want[i]);
    return diff == 0;
}

void cm_server_admin_who(cm_req_t *req, char *out, size_t outlen)
{
    size_t len = 0;
    const char *tok = cm_http_bearer(req, &len);
    char hex[65] = "none";
    if (tok != NULL)
        cm_tls_sha256_hex(tok, len, hex);
    hex[8] = '\0';
    snprintf(out, outlen, "%s (token %s)", cm_http_peer(req), hex);
}

void cm_server_reply_unavailable(cm_req_t *req, const char *what, const char *err)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "%s failed (%s); retry shortly", what, err ? err : "error");
    cm_http_add_header(req, "Retry-After", "1");
    cm_http_send_error(req, 503, "unavailable", msg, NULL);
}
