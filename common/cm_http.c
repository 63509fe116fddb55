/*
 * cm_http — see cm_http.h.
 *
 * Shape: we create the listener ourselves (evconnlistener) and hand it to evhttp, so
 * we can pause it. Each accepted connection gets its bufferevent from on_new_bev,
 * where TLS is attached and the connection counted; the count goes down in the SSL
 * ex_data free hook, which OpenSSL calls exactly once when evhttp frees the
 * connection (and with it the bufferevent and the SSL). That is the one place that
 * sees every close, whatever the reason. libevent may free a connection's bufferevent
 * after the server itself is gone (deferred frees at event_base_free), so the count
 * lives in a small reference-counted tracker that each SSL holds, not in the server.
 *
 * PROXY protocol v2 (limits.proxy_from): a TLS connection whose peer is in the list must
 * start with a PROXY v2 header (cm_proxy) before its ClientHello. evhttp accepts the
 * socket and asks on_new_bev for a bufferevent before it knows the fd, so on_new_bev
 * queues an active event that runs before the loop polls again — after evhttp has set
 * the fd and enabled reading, before any byte is read. It disables the bufferevent's
 * reading, peeks at the socket until the whole header is there (5 s at most), consumes
 * exactly the header, and re-enables reading: TLS and HTTP then see the bytes after it.
 * The client's address is kept with the SSL (ex_data, freed with it) for cm_http_peer.
 * A connection from there that does not start with the v2 signature (TLS starts with
 * 0x16, never with it) is the proxy host's own, served with its own address; one that
 * starts with it but is not a valid header, or stalls, is shut down (TLS then fails and
 * evhttp frees it). Connections from other peers are never searched for a header.
 *
 * Deadlines (a guard per TLS connection, ex_data of its SSL, freed with it): a timer
 * armed at accept closes a connection whose handshake (SSL_CB_HANDSHAKE_DONE) is not
 * done in time; then the connection is idle until a TLS record arrives (the msg callback
 * sees each record header), which starts a request: it must reach the handler (evhttp's
 * gencb, i.e. head and body read) within request_timeout_s; after the reply is sent
 * (on_complete) it is idle again, and idle time is capped in total — a client trickling
 * a byte at a time never resets it, unlike evhttp's own inactivity timeout. evhttp 2.1
 * has no hook at the end of the head, so head and body share one deadline. Closing is a
 * shutdown(2) of the socket: evhttp sees the EOF and frees the connection itself, so the
 * guard never holds a pointer into evhttp. Only TLS connections are guarded (plain HTTP
 * is for trusted hops and tests).
 */
#include "cm_http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cm_h1.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_proxy.h"
#include "cm_req.h"

/* Bodies between max_body_bytes and this cap are read and answered with a JSON 413;
 * above it evhttp refuses them itself (status 413, its own body) before reading. */
#define TRANSPORT_BODY_CAP_MIN (1024 * 1024)

/* Shared by the server and each live SSL; freed by whichever lets go last. */
typedef struct tracker {
    cm_http_server_t *srv; /* NULL once the server is freed */
    int refs;
} tracker_t;

static void tracker_release(tracker_t *t)
{
    if (--t->refs == 0)
        free(t);
}

#define PROXY_HEADER_TIMEOUT_S 5

/* One TLS connection while its PROXY header is awaited, and its client address after. */
typedef struct proxy_conn {
    struct proxy_conn *prev, *next; /* in srv->proxy_pending while ev is set */
    cm_http_server_t *srv;          /* set while pending */
    struct bufferevent *bev;
    struct event *ev;             /* the start event, then the header read watch; NULL once done */
    char peer[CM_PROXY_ADDR_LEN]; /* the client, from the header; "" when none came */
} proxy_conn_t;

struct cm_http_server {
    cm_proxy_allow_t *proxy_from; /* NULL: no PROXY headers accepted */
    proxy_conn_t *proxy_pending;
    struct event_base *base;
    tracker_t *tracker;
    struct evhttp *http;
    struct evconnlistener *listener;
    struct event *resume_timer;
    SSL_CTX *tls;
    cm_http_handler_t handler;
    void *arg;
    int port;
    int connections;
    int max_connections;
    int handshakes;     /* TLS connections whose handshake is under way (guarded ones) */
    int max_handshakes; /* 0: no cap */
    cm_shed_t *shed;
    bool paused;
    bool stopped;
    bool closing;                            /* replies close their connections */
    int handshake_s, request_s, idle_s, cap; /* guard settings (limits) */
    int head_s;                              /* h1 engine only */
    cm_http_engine_t engine;
    size_t body_cap;       /* the transport's default cap */
    size_t max_body_bytes; /* limits.max_body_bytes: CM_HTTP_BODY_CAP_JSON */
    size_t (*route_cap)(cm_http_method_t method, const char *path);
    size_t max_header_bytes;
    int idle_plain_s;         /* plain connections' read/write timeout */
    struct h1_conn *h1_conns; /* the h1 engine's open connections */
    cm_http_addrs_t *addrs;
};

static int ssl_conn_index = -1;
static int ssl_proxy_index = -1;
static int ssl_guard_index = -1;

/* --- per-address connection counts (shared by the workers) ----------------------------- */

#define ADDR_SLOTS  65536 /* addresses tracked at once; a full table lets connections in */
#define ADDR_PROBES 16

typedef struct addr_slot {
    uint64_t key; /* 0 = free */
    int count;
} addr_slot_t;

struct cm_http_addrs {
    pthread_mutex_t lock;
    addr_slot_t *slots;
};

static uint64_t addr_key(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

cm_http_addrs_t *cm_http_addrs_new(void)
{
    cm_http_addrs_t *a = cm_xcalloc(1, sizeof(*a));
    pthread_mutex_init(&a->lock, NULL);
    a->slots = cm_xcalloc(ADDR_SLOTS, sizeof(addr_slot_t));
    return a;
}

void cm_http_addrs_free(cm_http_addrs_t *a)
{
    if (a == NULL)
        return;
    pthread_mutex_destroy(&a->lock);
    free(a->slots);
    free(a);
}

/* Adds delta to addr's count (creating it); returns the new count, or -1 when full. */
static int addrs_add(cm_http_addrs_t *a, uint64_t key, int delta)
{
    int n = -1;
    pthread_mutex_lock(&a->lock);
    addr_slot_t *free_slot = NULL;
    for (size_t i = 0; i < ADDR_PROBES; i++) {
        addr_slot_t *sl = &a->slots[(key + i) & (ADDR_SLOTS - 1)];
        if (sl->key == key) {
            sl->count += delta;
            n = sl->count;
            if (sl->count <= 0)
                sl->key = 0, sl->count = 0;
            goto out;
        }
        if (sl->key == 0 && free_slot == NULL)
            free_slot = sl;
    }
    if (free_slot != NULL && delta > 0) {
        free_slot->key = key;
        free_slot->count = delta;
        n = delta;
    }
out:
    pthread_mutex_unlock(&a->lock);
    return n;
}

int cm_http_addrs_count(cm_http_addrs_t *a, const char *addr)
{
    uint64_t key = addr_key(addr);
    int n = 0;
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < ADDR_PROBES; i++) {
        addr_slot_t *sl = &a->slots[(key + i) & (ADDR_SLOTS - 1)];
        if (sl->key == key) {
            n = sl->count;
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return n;
}

/* --- connection guard: deadlines and the per-address cap ------------------------------- */

/* G_BODY: the h1 engine has the head and waits for the body (evhttp: never set). */
typedef enum { G_HANDSHAKE, G_IDLE, G_REQUEST, G_BODY, G_HANDLER } guard_phase_t;

#define OVER_CAP_IDLE_S 2

typedef struct guard {
    SSL *ssl;
    struct event *timer;
    guard_phase_t phase;
    uint64_t idle_since_ns;
    uint64_t request_start_ns;
    int handshake_s, request_s, idle_s, cap;
    int head_s; /* h1 engine: the head's own deadline (0: request_s) */
    cm_http_addrs_t *addrs;
    tracker_t *t;      /* one reference: the server's handshake count */
    bool handshaking;  /* counted in t->srv->handshakes */
    uint64_t addr_key; /* counted in addrs when not 0 */
    bool over_cap;
    bool shut;
} guard_t;

static void guard_close(guard_t *g, const char *why)
{
    if (g->shut)
        return;
    g->shut = true;
    cm_log(CM_LOG_DEBUG, "closing a connection: %s", why);
    int fd = SSL_get_fd(g->ssl);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

static void guard_arm(guard_t *g, uint64_t ns)
{
    struct timeval tv = {(time_t)(ns / 1000000000ull), (suseconds_t)((ns % 1000000000ull) / 1000)};
    evtimer_add(g->timer, &tv);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define SEC_NS 1000000000ull

static void guard_idle(guard_t *g)
{
    g->phase = G_IDLE;
    g->idle_since_ns = now_ns();
    int idle = g->over_cap ? OVER_CAP_IDLE_S : g->idle_s;
    if (idle > 0)
        guard_arm(g, (uint64_t)idle * SEC_NS);
    else
        evtimer_del(g->timer);
}

static void on_guard_timer(evutil_socket_t fd, short what, void *arg)
{
    guard_t *g = arg;
    switch (g->phase) {
    case G_HANDSHAKE:
        guard_close(g, "TLS handshake deadline");
        break;
    case G_IDLE:
        guard_close(g, "idle deadline");
        break;
    case G_REQUEST:
        guard_close(g, g->head_s > 0 ? "head deadline" : "request deadline");
        break;
    case G_BODY:
        guard_close(g, "request deadline (body)");
        break;
    case G_HANDLER:
        break;
    }
}

static void resume_listener(cm_http_server_t *srv);

/* Its handshake is over (done, or the connection is gone): one less in flight, and the
 * listener accepts again if the handshake cap had paused it. */
static void guard_handshake_over(guard_t *g)
{
    if (!g->handshaking)
        return;
    g->handshaking = false;
    cm_http_server_t *srv = g->t->srv;
    if (srv != NULL && --srv->handshakes < srv->max_handshakes)
        resume_listener(srv);
}

static void on_guard_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                          void *argp)
{
    guard_t *g = ptr;
    if (g == NULL)
        return;
    guard_handshake_over(g);
    tracker_release(g->t);
    if (g->addr_key != 0)
        addrs_add(g->addrs, g->addr_key, -1);
    event_free(g->timer);
    free(g);
}

static guard_t *guard_of_ssl(const SSL *ssl)
{
    return ssl != NULL && ssl_guard_index >= 0 ? SSL_get_ex_data(ssl, ssl_guard_index) : NULL;
}

static guard_t *guard_of(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;
    return bev != NULL ? guard_of_ssl(bufferevent_openssl_get_ssl(bev)) : NULL;
}

/* The client's address of a TLS connection: the PROXY header's, else the socket peer's. */
static void ssl_peer(SSL *ssl, char *out, size_t outlen)
{
    proxy_conn_t *pc = ssl_proxy_index >= 0 ? SSL_get_ex_data(ssl, ssl_proxy_index) : NULL;
    if (pc != NULL && pc->peer[0] != '\0') {
        snprintf(out, outlen, "%s", pc->peer);
        return;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    out[0] = '\0';
    if (getpeername(SSL_get_fd(ssl), (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)outlen);
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)outlen);
}

static void on_ssl_info(const SSL *ssl, int where, int ret)
{
    if (!(where & SSL_CB_HANDSHAKE_DONE))
        return;
    guard_t *g = guard_of_ssl(ssl);
    if (g == NULL || g->phase != G_HANDSHAKE)
        return;
    guard_handshake_over(g);
    if (g->addrs != NULL && g->cap > 0) {
        char addr[INET6_ADDRSTRLEN + 8];
        ssl_peer((SSL *)ssl, addr, sizeof(addr));
        if (addr[0] != '\0') {
            uint64_t key = addr_key(addr);
            int n = addrs_add(g->addrs, key, 1);
            if (n >= 0)
                g->addr_key = key;
            if (n > g->cap) {
                g->over_cap = true;
                cm_log(CM_LOG_DEBUG, "%s: over %d connections", addr, g->cap);
            }
        }
    }
    guard_idle(g);
}

/* A request starts (its first byte arrived on an idle connection): the head deadline, or
 * the whole request's when there is no separate one. */
static void guard_request(guard_t *g)
{
    if (g->phase != G_IDLE)
        return;
    g->phase = G_REQUEST;
    g->request_start_ns = now_ns();
    int s = g->head_s > 0 ? g->head_s : g->request_s;
    if (s > 0)
        guard_arm(g, (uint64_t)s * SEC_NS);
    else
        evtimer_del(g->timer);
}

/* The h1 engine has the whole head: the body gets what is left of the request deadline. */
static void guard_body(guard_t *g)
{
    g->phase = G_BODY;
    if (g->request_s <= 0) {
        evtimer_del(g->timer);
        return;
    }
    uint64_t deadline = g->request_start_ns + (uint64_t)g->request_s * SEC_NS, now = now_ns();
    guard_arm(g, deadline > now ? deadline - now : 1);
}

/* Every TLS record read: one arriving on an idle connection starts a request. */
static void on_ssl_msg(int write_p, int version, int content_type, const void *buf, size_t len,
                       SSL *ssl, void *arg)
{
    if (write_p || content_type != SSL3_RT_HEADER)
        return;
    guard_request(arg);
}

/* The reply has been written: the connection waits for the next request. */
static void on_reply_done(struct evhttp_request *req, void *arg)
{
    guard_t *g = guard_of(req);
    if (g != NULL && g->phase == G_HANDLER)
        guard_idle(g);
}

static void proxy_unpend(proxy_conn_t *pc)
{
    if (pc->ev != NULL) {
        event_free(pc->ev);
        pc->ev = NULL;
    }
    if (pc->srv == NULL)
        return;
    if (pc->prev != NULL)
        pc->prev->next = pc->next;
    else
        pc->srv->proxy_pending = pc->next;
    if (pc->next != NULL)
        pc->next->prev = pc->prev;
    pc->prev = pc->next = NULL;
    pc->srv = NULL;
}

/* OpenSSL frees the connection's PROXY state with its SSL. */
static void on_proxy_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                          void *argp)
{
    proxy_conn_t *pc = ptr;
    if (pc == NULL)
        return;
    proxy_unpend(pc);
    free(pc);
}

/* Header done or failed: stop watching, let TLS read. */
static void proxy_done(proxy_conn_t *pc)
{
    proxy_unpend(pc);
    bufferevent_enable(pc->bev, EV_READ);
}

static void proxy_fail(proxy_conn_t *pc, evutil_socket_t fd, const char *why)
{
    cm_log(CM_LOG_WARN, "connection from a proxy_from address: %s; closing it", why);
    shutdown(fd, SHUT_RDWR);
    proxy_done(pc);
}

static void on_proxy_read(evutil_socket_t fd, short what, void *arg)
{
    proxy_conn_t *pc = arg;
    unsigned char buf[CM_PROXY_MAX_HEADER];
    cm_proxy_info_t info;
    ssize_t n;
    int len;

    if (what & EV_TIMEOUT) {
        proxy_fail(pc, fd, "no PROXY v2 header in time");
        return;
    }
    n = recv(fd, buf, sizeof(buf), MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        proxy_fail(pc, fd, "closed before its PROXY v2 header");
        return;
    }
    if (!cm_proxy_starts_header(buf, (size_t)n)) {
        proxy_done(pc); /* the proxy host itself (a probe, an operator): no header */
        return;
    }
    len = cm_proxy_parse(buf, (size_t)n, &info);
    if (len == 0 && (size_t)n < sizeof(buf))
        return; /* the rest of the header is on its way */
    if (len <= 0) {
        proxy_fail(pc, fd, "invalid PROXY v2 header");
        return;
    }
    if (recv(fd, buf, (size_t)len, 0) != len) { /* consume exactly the header */
        proxy_fail(pc, fd, "cannot read the PROXY v2 header");
        return;
    }
    if (info.has_addr)
        memcpy(pc->peer, info.addr, sizeof(pc->peer));
    proxy_done(pc);
}

/* Runs once evhttp has given the bufferevent its fd, before anything is read from it. */
static void on_proxy_start(evutil_socket_t unused, short what, void *arg)
{
    proxy_conn_t *pc = arg;
    cm_http_server_t *srv = pc->srv;
    evutil_socket_t fd = bufferevent_getfd(pc->bev);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct timeval tv = {PROXY_HEADER_TIMEOUT_S, 0};

    event_free(pc->ev);
    pc->ev = NULL;
    if (srv == NULL || fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        !cm_proxy_allowed(srv->proxy_from, &ss)) {
        proxy_unpend(pc); /* not from a proxy: served as it is */
        return;
    }
    bufferevent_disable(pc->bev, EV_READ);
    pc->ev = event_new(srv->base, fd, EV_READ | EV_PERSIST, on_proxy_read, pc);
    if (pc->ev == NULL || event_add(pc->ev, &tv) != 0)
        proxy_fail(pc, fd, "cannot watch the socket");
}

static const char *ev_peer_of(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;
    SSL *ssl = bev != NULL && ssl_proxy_index >= 0 ? bufferevent_openssl_get_ssl(bev) : NULL;
    proxy_conn_t *pc = ssl != NULL ? SSL_get_ex_data(ssl, ssl_proxy_index) : NULL;
    char *addr = NULL;
    ev_uint16_t port = 0;

    if (pc != NULL && pc->peer[0] != '\0')
        return pc->peer;
    if (evcon != NULL)
        evhttp_connection_get_peer(evcon, &addr, &port);
    return addr != NULL ? addr : "?";
}

static void pause_listener(cm_http_server_t *srv)
{
    if (!srv->paused && !srv->stopped) {
        evconnlistener_disable(srv->listener);
        srv->paused = true;
    }
}

/* Accepting may go on: under max_connections, and under max_handshakes when capped. */
static bool may_accept(const cm_http_server_t *srv)
{
    return cm_http_server_connections(srv) < srv->max_connections &&
           (srv->max_handshakes == 0 || srv->handshakes < srv->max_handshakes) &&
           !cm_shed_lagging(srv->shed);
}

static void resume_listener(cm_http_server_t *srv)
{
    if (srv->paused && !srv->stopped && may_accept(srv)) {
        evconnlistener_enable(srv->listener);
        srv->paused = false;
    }
}

/* OpenSSL calls this once per SSL object as it is freed (CRYPTO_free_ex_data). */
static void on_ssl_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    tracker_t *t = ptr;
    if (t == NULL)
        return;
    cm_http_server_t *srv = t->srv;
    if (srv) {
        __atomic_sub_fetch(&srv->connections, 1, __ATOMIC_RELAXED);
        resume_listener(srv);
    }
    tracker_release(t);
}

static struct bufferevent *on_new_bev(struct event_base *base, void *arg)
{
    cm_http_server_t *srv = arg;
    if (srv->tls == NULL)
        return bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    SSL *ssl = SSL_new(srv->tls);
    if (ssl == NULL)
        return NULL;
    SSL_set_ex_data(ssl, ssl_conn_index, srv->tracker);
    srv->tracker->refs++;
    if (__atomic_add_fetch(&srv->connections, 1, __ATOMIC_RELAXED) >= srv->max_connections)
        pause_listener(srv);
    if (srv->handshake_s > 0 || srv->request_s > 0 || srv->idle_s > 0 ||
        (srv->addrs != NULL && srv->cap > 0)) {
        guard_t *g = cm_xcalloc(1, sizeof(*g));
        g->ssl = ssl;
        g->handshake_s = srv->handshake_s;
        g->request_s = srv->request_s;
        g->idle_s = srv->idle_s;
        g->cap = srv->cap;
        g->addrs = srv->addrs;
        g->head_s = srv->head_s;
        g->timer = evtimer_new(base, on_guard_timer, g);
        if (g->timer == NULL)
            abort();
        g->t = srv->tracker;
        srv->tracker->refs++;
        g->handshaking = true;
        if (++srv->handshakes >= srv->max_handshakes && srv->max_handshakes > 0 && !srv->paused) {
            cm_shed_count(srv->shed, CM_SHED_HANDSHAKES);
            pause_listener(srv); /* the rest wait in the kernel's backlog, costing nothing */
        }
        SSL_set_ex_data(ssl, ssl_guard_index, g); /* freed with ssl from here on */
        SSL_set_info_callback(ssl, on_ssl_info);
        SSL_set_msg_callback(ssl, on_ssl_msg);
        SSL_set_msg_callback_arg(ssl, g);
        if (g->handshake_s > 0)
            guard_arm(g, (uint64_t)g->handshake_s * SEC_NS);
    }
    proxy_conn_t *pc = NULL;
    if (srv->proxy_from != NULL) {
        pc = cm_xcalloc(1, sizeof(*pc));
        SSL_set_ex_data(ssl, ssl_proxy_index, pc); /* freed with ssl from here on */
    }
    /* The bufferevent owns ssl from here on, even if this call fails. */
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL || pc == NULL)
        return bev;
    pc->bev = bev;
    pc->ev = event_new(base, -1, 0, on_proxy_start, pc);
    if (pc->ev == NULL) {
        cm_log(CM_LOG_ERROR, "cannot create an event for a PROXY header");
        abort();
    }
    pc->srv = srv;
    pc->next = srv->proxy_pending;
    if (pc->next != NULL)
        pc->next->prev = pc;
    srv->proxy_pending = pc;
    event_active(pc->ev, EV_TIMEOUT, 1); /* before the loop polls the new socket */
    return bev;
}

static void on_resume_timer(evutil_socket_t fd, short what, void *arg)
{
    resume_listener(arg);
}

/* The loop started or stopped lagging: no new handshakes while it lags. */
static void on_lag(bool lagging, void *arg)
{
    if (lagging)
        pause_listener(arg);
    else
        resume_listener(arg);
}

/* The overload policy's check, before the handler: true when req was answered 503
 * overloaded (health probes are never shed: they are cheap, and a balancer must not
 * take a busy server for a dead one). */
static bool shed_request(cm_http_server_t *srv, cm_req_t *req)
{
    if (srv->shed == NULL)
        return false;
    if (cm_http_method(req) == CM_HTTP_GET) {
        const char *path = cm_http_uri_path(req);
        if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0)
            return false;
    }
    if (!cm_shed_request(srv->shed))
        return false;
    cm_http_add_header(req, "Retry-After", cm_shed_retry_after(srv->shed));
    cm_http_send_error(req, 503, "overloaded", "the server is overloaded; retry later",
                       json_pack("{s:i}", "retry_after_seconds", cm_shed_retry_after_s(srv->shed)));
    return true;
}

static void on_listener_error(struct evconnlistener *l, void *arg)
{
    cm_http_server_t *srv = arg;
    int e = EVUTIL_SOCKET_ERROR();
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
        cm_log(CM_LOG_WARN, "accept: %s; pausing the listener for 100 ms", strerror(e));
        pause_listener(srv);
        struct timeval tv = {0, 100000};
        evtimer_add(srv->resume_timer, &tv);
        return;
    }
    cm_log(CM_LOG_WARN, "accept: %s", strerror(e));
}

/*
 * Headers every answer of every service carries, added before the handler runs so no
 * reply path can forget them: nosniff (a JSON error is never sniffed into HTML), and on
 * TLS listeners HSTS (these hosts are HTTPS only; no includeSubDomains: a service does
 * not speak for its neighbours). Answers evhttp writes itself (a malformed request line,
 * an oversized head) have a fixed body that echoes nothing.
 */
#define HSTS "max-age=31536000"

static void on_request(struct evhttp_request *ev, void *arg)
{
    cm_http_server_t *srv = arg;
    cm_req_t *req = cm_http_evhttp_req(ev);
    cm_access_begin(req);
    struct evkeyvalq *h = evhttp_request_get_output_headers(ev);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    if (srv->tls != NULL)
        evhttp_add_header(h, "Strict-Transport-Security", HSTS);
    if (srv->closing) /* draining: evhttp closes the connection after this reply */
        evhttp_add_header(h, "Connection", "close");
    guard_t *g = guard_of(ev);
    if (g != NULL) {
        g->phase = G_HANDLER;
        evtimer_del(g->timer);
        evhttp_request_set_on_complete_cb(ev, on_reply_done, NULL);
        if (g->over_cap) {
            evhttp_add_header(h, "Connection", "close");
            cm_http_send_error(req, 429, "too_many_connections",
                               "too many open connections from this address", NULL);
            cm_log_set_request(NULL);
            return;
        }
    }
    if (!shed_request(srv, req))
        srv->handler(req, srv->arg);
    cm_log_set_request(NULL); /* lines logged later, from callbacks, set their own */
}

/* --- our own HTTP/1.1 engine (CM_HTTP_ENGINE_H1) --------------------------------------
 *
 * One h1_conn per connection, on the listener's loop. The connection is its own
 * cm_req_t: requests are served one at a time in arrival order (pipelined requests wait
 * in the input buffer), so there is never more than one request per connection. States:
 * H1_HEAD (reading a head) → H1_BODY (reading Content-Length bytes) → H1_HANDLER (the
 * route has it; its answer may come later, from a Redis callback) → H1_HEAD again, or
 * H1_CLOSING (flush the answer, then close). The head is copied once into hbuf and parsed
 * there in place (cm_h1); the body, if any, is copied into a buffer the connection keeps.
 * The route's body cap is known from the head, so an oversized Content-Length is answered
 * 413 before a byte of the body is read. An answer is one evbuffer_add of status line,
 * headers and body assembled in a stack buffer.
 *
 * Re-entrancy: bufferevent callbacks may run inside our own calls (an SSL write that
 * fails calls the event callback from inside evbuffer_add), so every entry point counts
 * itself in busy and only the outermost one acts on what happened (settle): close, flush
 * and close, or go on with buffered requests. A connection whose client went away while a
 * handler holds it loses its bufferevent at once and is freed by the late answer.
 */
typedef enum { H1_HEAD, H1_BODY, H1_HANDLER, H1_CLOSING } h1_state_t;

#define H1_OUT_HIGH   (256 * 1024) /* stop serving pipelined requests above this output */
#define H1_MAX_EMPTY  4            /* CRLFs tolerated before a request line */
#define H1_STACK_BODY 8192         /* answers up to this body size are built on the stack */

typedef struct h1_conn {
    cm_req_t req; /* first: the connection is its own request */
    cm_http_server_t *srv;
    struct h1_conn *prev, *next; /* in srv->h1_conns while srv is set */
    struct bufferevent *bev;     /* NULL once closed */
    h1_state_t state;
    int busy;
    bool dead;       /* close as soon as no callback is on the stack */
    bool eof;        /* the client will send nothing more */
    bool keep_alive; /* of the current request */
    bool over_cap;   /* answered 429 to its first request */
    bool lingering;  /* answered and half-closed: reading what the client still sends */
    cm_h1_head_t head;
    size_t scanned; /* cm_h1_head_end's progress over the input */
    int empties;
    char *hbuf; /* max_header_bytes + 1 */
    char *body;
    size_t body_len, body_size;
    char *out; /* response headers added by the handler: "Name: value\r\n"… */
    size_t out_len, out_size;
    char peer[INET6_ADDRSTRLEN + 8];
} h1_conn_t;

static void h1_settle(h1_conn_t *c);
static void h1_drive(h1_conn_t *c);

static void h1_unlink(h1_conn_t *c)
{
    if (c->srv == NULL)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        c->srv->h1_conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void h1_drop_bev(h1_conn_t *c)
{
    if (c->bev != NULL) {
        bufferevent_free(c->bev); /* frees the SSL: connection counts and guard go with it */
        c->bev = NULL;
    }
}

static void h1_free(h1_conn_t *c)
{
    h1_unlink(c);
    h1_drop_bev(c);
    free(c->hbuf);
    free(c->body);
    free(c->out);
    free(c);
}

static guard_t *h1_guard(h1_conn_t *c)
{
    return c->bev != NULL && c->srv != NULL && c->srv->tls != NULL
               ? guard_of_ssl(bufferevent_openssl_get_ssl(c->bev))
               : NULL;
}

/* The Date header's value, formatted once a second per thread. */
static const char *h1_date(void)
{
    static __thread time_t last;
    static __thread char text[40];
    time_t now = time(NULL);
    if (now != last) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        last = now;
    }
    return text;
}

static void h1_append(char **buf, size_t *len, size_t *size, const char *s, size_t n)
{
    if (*len + n > *size) {
        size_t want = *size ? *size * 2 : 512;
        while (want < *len + n)
            want *= 2;
        *buf = cm_xrealloc(*buf, want);
        *size = want;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
}

/* --- the cm_req_t of an h1 connection --- */

static cm_http_method_t h1_method(cm_req_t *r)
{
    return ((h1_conn_t *)r)->head.method;
}

static const char *h1_path(cm_req_t *r)
{
    return ((h1_conn_t *)r)->head.path;
}

static const char *h1_query(cm_req_t *r)
{
    return ((h1_conn_t *)r)->head.query;
}

static const char *h1_header(cm_req_t *r, const char *name)
{
    return cm_h1_header(&((h1_conn_t *)r)->head, name);
}

static const char *h1_peer(cm_req_t *r)
{
    h1_conn_t *c = (h1_conn_t *)r;
    if (c->peer[0] != '\0' || c->bev == NULL)
        return c->peer[0] != '\0' ? c->peer : "?";
    SSL *ssl = c->srv != NULL && c->srv->tls != NULL ? bufferevent_openssl_get_ssl(c->bev) : NULL;
    if (ssl != NULL) {
        ssl_peer(ssl, c->peer, sizeof(c->peer));
    } else {
        struct sockaddr_in sin;
        socklen_t len = sizeof(sin);
        if (getpeername(bufferevent_getfd(c->bev), (struct sockaddr *)&sin, &len) == 0 &&
            sin.sin_family == AF_INET)
            inet_ntop(AF_INET, &sin.sin_addr, c->peer, sizeof(c->peer));
    }
    return c->peer[0] != '\0' ? c->peer : "?";
}

static const char *h1_body(cm_req_t *r, size_t *len)
{
    h1_conn_t *c = (h1_conn_t *)r;
    *len = c->body_len;
    return c->body_len > 0 ? c->body : NULL;
}

static void h1_add_header(cm_req_t *r, const char *name, const char *value)
{
    h1_conn_t *c = (h1_conn_t *)r;
    if (strpbrk(name, "\r\n:") != NULL || strpbrk(value, "\r\n") != NULL) {
        cm_log(CM_LOG_ERROR, "response header %s dropped: CR or LF in it", name);
        return;
    }
    h1_append(&c->out, &c->out_len, &c->out_size, name, strlen(name));
    h1_append(&c->out, &c->out_len, &c->out_size, ": ", 2);
    h1_append(&c->out, &c->out_len, &c->out_size, value, strlen(value));
    h1_append(&c->out, &c->out_len, &c->out_size, "\r\n", 2);
}

static bool h1_has_out_header(cm_req_t *r, const char *name)
{
    h1_conn_t *c = (h1_conn_t *)r;
    size_t n = strlen(name);
    for (size_t i = 0; i + n < c->out_len;) {
        if (c->out[i + n] == ':' && strncasecmp(c->out + i, name, n) == 0)
            return true;
        const char *lf = memchr(c->out + i, '\n', c->out_len - i);
        if (lf == NULL)
            break;
        i = (size_t)(lf - c->out) + 1;
    }
    return false;
}

/*
 * Writing an answer straight to the connection when nothing is queued before it, as nginx
 * does: a bufferevent arms its write event for every add to an empty output and disarms
 * it once flushed — two epoll_ctl per answer — even when the socket took everything at
 * once. Only what did not go out is left to the bufferevent (and only then is its write
 * event armed). A TLS answer goes out as one SSL_write of at most one record: all of it,
 * or none from the bufferevent's point of view — when SSL_write wants to wait, OpenSSL
 * has sealed the record and keeps what the socket did not take; the bufferevent's own
 * SSL_write of the same bytes, moved into its output (it sets
 * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER; one contiguous chunk of the same length, as
 * OpenSSL requires), finishes it. An error is left for the bufferevent to find again and
 * report through the event callback, as if it had written.
 */
typedef enum { H1_WROTE_NONE, H1_WROTE_SOME, H1_WROTE_ALL } h1_wrote_t;

static h1_wrote_t h1_write_now(h1_conn_t *c, const char *buf, size_t len, size_t *written)
{
    *written = 0;
    if (c->srv == NULL || evbuffer_get_length(bufferevent_get_output(c->bev)) != 0)
        return H1_WROTE_NONE;
    if (c->srv->tls != NULL) {
        SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
        if (ssl == NULL || !SSL_is_init_finished(ssl) || len > SSL3_RT_MAX_PLAIN_LENGTH)
            return H1_WROTE_NONE;
        ERR_clear_error();
        int n = SSL_write(ssl, buf, (int)len);
        if (n > 0 && (size_t)n == len) {
            *written = len;
            return H1_WROTE_ALL;
        }
        int err = SSL_get_error(ssl, n);
        ERR_clear_error();
        return err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ ? H1_WROTE_SOME
                                                                         : H1_WROTE_NONE;
    }
    ssize_t n = send(bufferevent_getfd(c->bev), buf, len, MSG_NOSIGNAL);
    if (n <= 0)
        return H1_WROTE_NONE; /* EAGAIN, or an error the bufferevent reports */
    *written = (size_t)n;
    return (size_t)n == len ? H1_WROTE_ALL : H1_WROTE_SOME;
}

static char *put_text(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

#define PUT_LIT(p, lit) put_text((p), (lit), sizeof(lit) - 1)

/* n in decimal at p; returns the end. */
static char *put_size(char *p, size_t n)
{
    char digits[24];
    size_t d = 0;
    do {
        digits[d++] = (char)('0' + n % 10);
        n /= 10;
    } while (n != 0);
    while (d > 0)
        *p++ = digits[--d];
    return p;
}

/*
 * The fixed part of an answer's head into head (1024 bytes: the longest reason, date
 * and framing take ~250): status line, Date, nosniff, HSTS over TLS, conn, and
 * Content-Length when clen is given. Written by hand, not by snprintf: it runs for
 * every answer. Returns its length.
 */
static int h1_head(char head[1024], int code, bool tls, const char *conn, const size_t *clen)
{
    char *p = PUT_LIT(head, "HTTP/1.1 ");
    if (code < 100 || code > 999)
        code = 500; /* our handlers' codes only: cannot happen */
    p = put_size(p, (size_t)code);
    *p++ = ' ';
    const char *reason = cm_http_reason(code), *date = h1_date();
    p = put_text(p, reason, strlen(reason));
    p = PUT_LIT(p, "\r\nDate: ");
    p = put_text(p, date, strlen(date));
    p = PUT_LIT(p, "\r\nX-Content-Type-Options: nosniff\r\n");
    if (tls)
        p = PUT_LIT(p, "Strict-Transport-Security: " HSTS "\r\n");
    p = put_text(p, conn, strlen(conn));
    if (clen != NULL) {
        p = PUT_LIT(p, "Content-Length: ");
        p = put_size(p, *clen);
        p = PUT_LIT(p, "\r\n");
    }
    return (int)(p - head);
}

/* The answer: status line, our headers, the handler's, framing, body — written at once
 * when the connection takes it (h1_write_now), else one add to the output. */
static void h1_write_answer(h1_conn_t *c, int code, const char *body, size_t len)
{
    char head[1024];
    bool tls = c->srv != NULL && c->srv->tls != NULL;
    bool no_body = body == NULL || code == 204 || code == 304;
    const char *conn = !c->keep_alive       ? "Connection: close\r\n"
                       : c->head.minor == 0 ? "Connection: keep-alive\r\n"
                                            : "";
    int n = h1_head(head, code, tls, conn, no_body ? NULL : &len);
    if (c->head.method == CM_HTTP_HEAD || no_body)
        len = 0;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t total = (size_t)n + c->out_len + 2 + len;
    if (len <= H1_STACK_BODY && total <= 1024 + 4096 + H1_STACK_BODY) {
        char buf[1024 + 4096 + H1_STACK_BODY];
        memcpy(buf, head, (size_t)n);
        if (c->out_len > 0)
            memcpy(buf + n, c->out, c->out_len);
        memcpy(buf + n + c->out_len, "\r\n", 2);
        if (len > 0)
            memcpy(buf + n + c->out_len + 2, body, len);
        c->out_len = 0;
        size_t written;
        h1_wrote_t w = h1_write_now(c, buf, total, &written);
        if (w == H1_WROTE_ALL)
            return;
        /* Writing enabled first: the SSL bufferevent then writes as soon as the socket
         * is writable, not after every other ready callback. */
        bufferevent_enable(c->bev, EV_WRITE);
        if (tls && w == H1_WROTE_SOME) { /* the same bytes, one chunk: see h1_write_now */
            evbuffer_add(out, buf, total);
            evbuffer_pullup(out, -1);
        } else {
            evbuffer_add(out, buf + written, total - written);
        }
        return;
    }
    bufferevent_enable(c->bev, EV_WRITE);
    h1_append(&c->out, &c->out_len, &c->out_size, "\r\n", 2);
    evbuffer_add(out, head, (size_t)n);
    evbuffer_add(out, c->out, c->out_len);
    if (len > 0)
        evbuffer_add(out, body, len);
    c->out_len = 0;
}

static void h1_send(cm_req_t *r, int code, const char *body, size_t len)
{
    h1_conn_t *c = (h1_conn_t *)r;
    if (c->state != H1_HANDLER) {
        cm_log(CM_LOG_ERROR, "a second answer to one request (ignored)");
        return;
    }
    if (c->bev == NULL) { /* the client went away meanwhile */
        h1_free(c);
        return;
    }
    c->busy++;
    if (c->eof || c->over_cap || c->srv == NULL || c->srv->closing)
        c->keep_alive = false;
    c->state = c->keep_alive ? H1_HEAD : H1_CLOSING;
    h1_write_answer(c, code, body, len);
    c->body_len = 0;
    guard_t *g = h1_guard(c);
    if (g != NULL && g->phase == G_HANDLER && c->keep_alive)
        guard_idle(g);
    c->busy--;
    h1_settle(c);
}

static const cm_req_ops_t h1_ops = {
    .method = h1_method,
    .path = h1_path,
    .query = h1_query,
    .header = h1_header,
    .peer = h1_peer,
    .body = h1_body,
    .add_header = h1_add_header,
    .has_out_header = h1_has_out_header,
    .send = h1_send,
};

/* --- reading requests --- */

/* A refused request: the docs/api.md error body, and the connection closes after it. */
static void h1_refuse(h1_conn_t *c, int code, const char *why)
{
    cm_access_begin_bare(&c->req);
    cm_log(CM_LOG_DEBUG, "refused a request: %d %s", code, why);
    c->head.method = CM_HTTP_GET; /* the answer carries its body */
    c->state = H1_HANDLER;
    c->keep_alive = false;
    c->out_len = 0;
    cm_http_send_error(&c->req, code, cm_h1_error_word(code), why, NULL);
    cm_log_set_request(NULL);
}

/* The handler gets the request (or the 429 of a connection over the per-address cap). */
static void h1_dispatch(h1_conn_t *c)
{
    guard_t *g = h1_guard(c);
    c->state = H1_HANDLER;
    cm_access_begin(&c->req);
    if (g != NULL) {
        g->phase = G_HANDLER;
        evtimer_del(g->timer);
        if (g->over_cap) {
            c->over_cap = true;
            cm_http_send_error(&c->req, 429, "too_many_connections",
                               "too many open connections from this address", NULL);
            cm_log_set_request(NULL);
            return;
        }
    }
    if (c->srv->closing)
        c->keep_alive = false;
    if (!shed_request(c->srv, &c->req))
        c->srv->handler(&c->req, c->srv->arg);
    cm_log_set_request(NULL); /* lines logged later, from callbacks, set their own */
}

/* Reads what the head needs; true when it was complete (state moved on). */
static bool h1_read_head(h1_conn_t *c, struct evbuffer *in)
{
    size_t len = evbuffer_get_length(in);
    while (len >= 2 && c->scanned == 0) { /* CRLFs between requests */
        unsigned char *p = evbuffer_pullup(in, 2);
        if (p[0] != '\r' || p[1] != '\n')
            break;
        if (++c->empties > H1_MAX_EMPTY) {
            h1_refuse(c, 400, "empty lines instead of a request");
            return false;
        }
        evbuffer_drain(in, 2);
        len -= 2;
    }
    if (len == 0)
        return false;
    guard_t *g = h1_guard(c);
    if (g != NULL)
        guard_request(g); /* a request already buffered starts now */
    size_t cap = c->srv->max_header_bytes;
    size_t n = len < cap ? len : cap;
    const char *p = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
    size_t end = cm_h1_head_end(p, n, &c->scanned);
    if (end == 0) {
        bool in_line = memchr(p, '\n', n) == NULL; /* still the request line */
        if (in_line && (n >= cap || cm_h1_line_path_too_long(p, n)))
            h1_refuse(c, 414, "the request target is too long");
        else if (n >= cap)
            h1_refuse(c, 431, "the request head is too large");
        return false;
    }
    memcpy(c->hbuf, p, end);
    evbuffer_drain(in, end);
    c->scanned = 0;
    c->empties = 0;
    c->body_len = 0;
    if (cm_h1_parse(c->hbuf, end, &c->head) != 0) {
        h1_refuse(c, c->head.status, c->head.why);
        return false;
    }
    c->keep_alive = c->head.keep_alive;
    size_t bcap = c->srv->route_cap ? c->srv->route_cap(c->head.method, c->head.path) : SIZE_MAX;
    if (bcap == SIZE_MAX)
        bcap = c->srv->body_cap;
    else if (bcap == CM_HTTP_BODY_CAP_JSON)
        bcap = c->srv->max_body_bytes;
    if (c->head.content_length > 0 && (uint64_t)c->head.content_length > bcap) {
        char msg[96];
        if (bcap == 0)
            snprintf(msg, sizeof(msg), "this request takes no body");
        else
            snprintf(msg, sizeof(msg), "the body is over the limit of %zu bytes", bcap);
        h1_refuse(c, 413, msg);
        return false;
    }
    if (c->head.content_length > 0) {
        c->state = H1_BODY;
        if (g != NULL)
            guard_body(g);
        if (c->head.expect_continue) {
            bufferevent_enable(c->bev, EV_WRITE);
            evbuffer_add(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
        }
    } else {
        h1_dispatch(c);
    }
    return true;
}

static bool h1_read_body(h1_conn_t *c, struct evbuffer *in)
{
    size_t want = (size_t)c->head.content_length;
    if (evbuffer_get_length(in) < want)
        return false;
    if (c->body_size < want) {
        c->body = cm_xrealloc(c->body, want);
        c->body_size = want;
    }
    evbuffer_remove(in, c->body, want);
    c->body_len = want;
    h1_dispatch(c);
    return true;
}

/* Serves what the input holds, one request at a time, while answers come at once. */
static void h1_drive(h1_conn_t *c)
{
    c->busy++;
    while (c->bev != NULL && !c->dead && (c->state == H1_HEAD || c->state == H1_BODY)) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) > H1_OUT_HIGH)
            break; /* the client is not reading: resumed from the write callback */
        struct evbuffer *in = bufferevent_get_input(c->bev);
        if (!(c->state == H1_HEAD ? h1_read_head(c, in) : h1_read_body(c, in)))
            break;
    }
    c->busy--;
}

/* A lingering close (as HTTP servers do): closing a socket with unread input makes the
 * kernel send a reset, which can destroy the answer before the client reads it (a 413
 * while the client is still sending its body). So: half-close, discard what still comes,
 * and close at the client's EOF or after H1_LINGER_S. */
#define H1_LINGER_S 2

static void h1_linger(h1_conn_t *c)
{
    c->lingering = true;
    SSL *ssl = c->srv != NULL && c->srv->tls != NULL ? bufferevent_openssl_get_ssl(c->bev) : NULL;
    if (ssl != NULL) {
        /* close_notify first (a bufferevent frees its SSL without one): a session closed
         * cleanly stays in the server's cache, so the client's ticket resumes it */
        ERR_clear_error();
        (void)SSL_shutdown(ssl);
        ERR_clear_error();
    }
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    evbuffer_drain(in, evbuffer_get_length(in));
    struct timeval tv = {H1_LINGER_S, 0};
    bufferevent_set_timeouts(c->bev, &tv, NULL);
    bufferevent_enable(c->bev, EV_READ);
}

/* The outermost entry point decides: close, flush then close, or serve what is buffered. */
static void h1_settle(h1_conn_t *c)
{
    if (c->busy > 0)
        return;
    if (c->bev == NULL) {
        if (c->state != H1_HANDLER)
            h1_free(c);
        return;
    }
    if (!c->dead && (c->state == H1_HEAD || c->state == H1_BODY)) {
        h1_drive(c);
        if (c->eof && (c->state == H1_HEAD || c->state == H1_BODY))
            c->state = H1_CLOSING; /* nothing more will come: flush what is answered */
    }
    bool flushed = evbuffer_get_length(bufferevent_get_output(c->bev)) == 0;
    if (c->dead || (c->state == H1_CLOSING && flushed)) {
        if (c->state == H1_HANDLER)
            h1_drop_bev(c); /* the late answer frees c */
        else if (!c->dead && !c->eof && !c->lingering)
            h1_linger(c);
        else
            h1_free(c);
    }
}

static void on_h1_read(struct bufferevent *bev, void *arg)
{
    h1_conn_t *c = arg;
    if (c->state == H1_CLOSING) { /* nothing more is served: discard */
        evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
        return;
    }
    if (c->state == H1_HANDLER)
        return; /* kept in the input until the answer is out (bounded by the watermark) */
    h1_settle(c);
}

static void on_h1_write(struct bufferevent *bev, void *arg)
{
    h1_settle(arg);
}

static void on_h1_event(struct bufferevent *bev, short what, void *arg)
{
    h1_conn_t *c = arg;
    if (what & BEV_EVENT_TIMEOUT) { /* plain idle, a client not reading, lingering over */
        if ((what & BEV_EVENT_READING) && c->state == H1_HANDLER) {
            bufferevent_enable(bev, EV_READ);
            return;
        }
        c->dead = true;
    } else if (what & BEV_EVENT_ERROR) {
        c->dead = true;
    } else if (what & BEV_EVENT_EOF) {
        c->eof = true;
        if (c->state == H1_CLOSING)
            c->dead = true;
    }
    h1_settle(c);
}

static int h1_serve(cm_http_server_t *srv, evutil_socket_t fd)
{
    struct bufferevent *bev = on_new_bev(srv->base, srv);
    if (bev == NULL) {
        evutil_closesocket(fd);
        return -1;
    }
    bufferevent_setfd(bev, fd);
    h1_conn_t *c = cm_xcalloc(1, sizeof(*c));
    c->req.ops = &h1_ops;
    c->srv = srv;
    c->bev = bev;
    c->hbuf = cm_xmalloc(srv->max_header_bytes + 1);
    c->next = srv->h1_conns;
    if (c->next != NULL)
        c->next->prev = c;
    srv->h1_conns = c;
    bufferevent_setcb(bev, on_h1_read, on_h1_write, on_h1_event, c);
    /* the input holds at most one head and one body more than is being served */
    bufferevent_setwatermark(bev, EV_READ, 0, srv->max_header_bytes + srv->body_cap);
    /* TLS connections' reading is timed by the guard; writing (a client that does not read
     * its answers) and plain connections by the bufferevent */
    struct timeval tv = {srv->idle_plain_s, 0};
    bufferevent_set_timeouts(bev, srv->tls == NULL ? &tv : NULL, &tv);
    /* Writing waits for an answer, as evhttp does: an SSL bufferevent with writing enabled
     * would start its handshake on a writable socket, before a PROXY header is read. */
    bufferevent_disable(bev, EV_WRITE);
    bufferevent_enable(bev, EV_READ);
    return 0;
}

static void on_h1_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                         int socklen, void *arg)
{
    (void)h1_serve(arg, fd);
}

int cm_http_server_serve_fd(cm_http_server_t *srv, int fd)
{
    if (srv->engine != CM_HTTP_ENGINE_H1 || evutil_make_socket_nonblocking(fd) != 0) {
        close(fd);
        return -1;
    }
    return h1_serve(srv, fd);
}

/* Teardown: connections a handler still holds lose their socket and wait for the answer. */
static void h1_close_all(cm_http_server_t *srv)
{
    while (srv->h1_conns != NULL) {
        h1_conn_t *c = srv->h1_conns;
        h1_unlink(c);
        c->srv = NULL;
        if (c->state == H1_HANDLER)
            h1_drop_bev(c);
        else
            h1_free(c);
    }
}

cm_http_server_t *cm_http_server_new(struct event_base *base, const char *addr, int port,
                                     cm_tls_ctx_t *tls, const cm_http_limits_t *limits,
                                     cm_http_handler_t handler, void *arg, char *err, size_t errlen)
{
    if (ssl_conn_index < 0)
        ssl_conn_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_ssl_free);
    if (ssl_proxy_index < 0)
        ssl_proxy_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_proxy_free);
    if (ssl_guard_index < 0)
        ssl_guard_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_guard_free);

    cm_http_server_t *srv = cm_xcalloc(1, sizeof(*srv));
    srv->tracker = cm_xcalloc(1, sizeof(tracker_t));
    srv->tracker->srv = srv;
    srv->tracker->refs = 1;
    srv->base = base;
    srv->tls = tls;
    srv->handler = handler;
    srv->arg = arg;
    srv->max_connections = limits->max_connections > 0 ? limits->max_connections : 1024;
    srv->max_handshakes = limits->max_handshakes > 0 ? limits->max_handshakes : 0;
    if (limits->shed_lag_ms > 0 || limits->max_handshakes > 0)
        srv->shed = cm_shed_new(base, limits->shed_lag_ms, limits->shed_retry_after_s,
                                limits->shed_counters, on_lag, srv);
    srv->handshake_s = limits->handshake_timeout_s;
    srv->request_s = limits->request_timeout_s;
    srv->idle_s = limits->handshake_timeout_s > 0 || limits->request_timeout_s > 0
                      ? limits->idle_timeout_s
                      : 0;
    srv->cap = limits->max_conns_per_addr;
    srv->addrs = limits->addrs;
    srv->engine = limits->engine;
    if (srv->engine == CM_HTTP_ENGINE_H1)
        srv->head_s = limits->head_timeout_s;
    srv->route_cap = limits->body_cap;
    srv->max_header_bytes = limits->max_header_bytes > 0 ? limits->max_header_bytes : 8192;
    srv->max_body_bytes = limits->max_body_bytes;
    srv->body_cap = limits->max_body_bytes * 4;
    if (srv->body_cap < TRANSPORT_BODY_CAP_MIN)
        srv->body_cap = TRANSPORT_BODY_CAP_MIN;
    srv->idle_plain_s = limits->idle_timeout_s > 0 ? limits->idle_timeout_s : 30;
    if (limits->proxy_from != NULL && limits->proxy_from[0] != '\0') {
        if (tls == NULL) {
            snprintf(err, errlen, "proxy_from needs TLS (PROXY headers are read before TLS)");
            goto err;
        }
        srv->proxy_from = cm_proxy_allow_parse(limits->proxy_from, err, errlen);
        if (srv->proxy_from == NULL)
            goto err;
    }

    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
        snprintf(err, errlen, "listen address %s is not an IPv4 address", addr);
        goto err;
    }
    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC;
    if (limits->reuse_port)
        flags |= LEV_OPT_REUSEABLE_PORT; /* one listener per worker; the kernel spreads */
    /* The kernel's accept queue is where connections wait while the overload policy has
     * paused accepting: as deep as the host allows (Linux caps it at somaxconn). */
    srv->listener = evconnlistener_new_bind(base, NULL, NULL, flags, 65535, (struct sockaddr *)&sin,
                                            sizeof(sin));
    if (srv->listener == NULL) {
        snprintf(err, errlen, "bind %s:%d: %s", addr, port, strerror(errno));
        goto err;
    }
    evconnlistener_set_error_cb(srv->listener, on_listener_error);
    /* Replies leave as soon as they are written: without TCP_NODELAY a TLS response
     * split over two segments waits for the client's delayed ACK (~40 ms). Accepted
     * sockets inherit the option from the listener on Linux. */
    int one = 1;
    setsockopt(evconnlistener_get_fd(srv->listener), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(evconnlistener_get_fd(srv->listener), (struct sockaddr *)&bound, &blen) == 0)
        srv->port = ntohs(bound.sin_port);
    srv->resume_timer = evtimer_new(base, on_resume_timer, srv);
    if (srv->engine == CM_HTTP_ENGINE_H1) {
        evconnlistener_set_cb(srv->listener, on_h1_accept, srv);
        return srv;
    }

    srv->http = evhttp_new(base);
    if (srv->http == NULL) {
        snprintf(err, errlen, "evhttp_new failed");
        goto err;
    }
    /* evhttp takes over the listener's accept callback; we keep the pointer to pause. */
    if (evhttp_bind_listener(srv->http, srv->listener) == NULL) {
        snprintf(err, errlen, "evhttp_bind_listener failed");
        goto err;
    }
    evhttp_set_bevcb(srv->http, on_new_bev, srv);
    evhttp_set_gencb(srv->http, on_request, srv);
    evhttp_set_max_headers_size(srv->http, (ev_ssize_t)limits->max_header_bytes);
    evhttp_set_max_body_size(srv->http, (ev_ssize_t)srv->body_cap);
    evhttp_set_timeout(srv->http, limits->idle_timeout_s > 0 ? limits->idle_timeout_s : 30);
    evhttp_set_allowed_methods(srv->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                              EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE |
                                              EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS);
    return srv;
err:
    cm_http_server_free(srv);
    return NULL;
}

int cm_http_server_port(const cm_http_server_t *srv)
{
    return srv->port;
}

int cm_http_server_connections(const cm_http_server_t *srv)
{
    return __atomic_load_n(&srv->connections, __ATOMIC_RELAXED);
}

void cm_http_server_stop_accepting(cm_http_server_t *srv)
{
    if (srv->listener && !srv->stopped) {
        evconnlistener_disable(srv->listener);
        srv->stopped = true;
    }
}

void cm_http_server_set_closing(cm_http_server_t *srv, bool closing)
{
    srv->closing = closing;
}

void cm_http_server_free(cm_http_server_t *srv)
{
    if (srv == NULL)
        return;
    srv->stopped = true;
    while (srv->proxy_pending != NULL) /* their connections may outlive us (deferred frees) */
        proxy_unpend(srv->proxy_pending);
    h1_close_all(srv);
    if (srv->http)
        evhttp_free(srv->http); /* frees the bound listener and every connection */
    else if (srv->listener)
        evconnlistener_free(srv->listener);
    if (srv->resume_timer)
        event_free(srv->resume_timer);
    cm_shed_free(srv->shed);
    srv->tracker->srv = NULL;
    tracker_release(srv->tracker);
    cm_proxy_allow_free(srv->proxy_from);
    free(srv);
}

/* --- the evhttp backend of cm_req_t ---------------------------------------------- */

/* One per request, allocated when evhttp hands the request over and freed by its reply. */
typedef struct ev_req {
    cm_req_t base;
    struct evhttp_request *ev;
} ev_req_t;

static struct evhttp_request *ev_of(cm_req_t *r)
{
    return ((ev_req_t *)r)->ev;
}

static const cm_req_ops_t ev_ops;

struct evhttp_request *cm_http_evhttp_of(cm_req_t *r)
{
    return r->ops == &ev_ops ? ev_of(r) : NULL;
}

static cm_http_method_t ev_method(cm_req_t *r)
{
    switch (evhttp_request_get_command(ev_of(r))) {
    case EVHTTP_REQ_GET:
        return CM_HTTP_GET;
    case EVHTTP_REQ_HEAD:
        return CM_HTTP_HEAD;
    case EVHTTP_REQ_POST:
        return CM_HTTP_POST;
    case EVHTTP_REQ_PUT:
        return CM_HTTP_PUT;
    case EVHTTP_REQ_DELETE:
        return CM_HTTP_DELETE;
    case EVHTTP_REQ_OPTIONS:
        return CM_HTTP_OPTIONS;
    case EVHTTP_REQ_PATCH:
        return CM_HTTP_PATCH;
    default:
        return CM_HTTP_OTHER;
    }
}

static const char *ev_path(cm_req_t *r)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev_of(r));
    return uri ? evhttp_uri_get_path(uri) : NULL;
}

static const char *ev_query(cm_req_t *r)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev_of(r));
    return uri ? evhttp_uri_get_query(uri) : NULL;
}

static const char *ev_header(cm_req_t *r, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(ev_of(r)), name);
}

static const char *ev_peer(cm_req_t *r)
{
    return ev_peer_of(ev_of(r));
}

static const char *ev_body(cm_req_t *r, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(ev_of(r));
    *len = evbuffer_get_length(in);
    return *len > 0 ? (const char *)evbuffer_pullup(in, -1) : NULL;
}

static void ev_add_header(cm_req_t *r, const char *name, const char *value)
{
    evhttp_add_header(evhttp_request_get_output_headers(ev_of(r)), name, value);
}

static bool ev_has_out_header(cm_req_t *r, const char *name)
{
    return evhttp_find_header(evhttp_request_get_output_headers(ev_of(r)), name) != NULL;
}

static void ev_send(cm_req_t *r, int code, const char *body, size_t len)
{
    struct evhttp_request *ev = ev_of(r);
    free(r);
    if (body == NULL) {
        evhttp_send_reply(ev, code, cm_http_reason(code), NULL);
        return;
    }
    struct evbuffer *out = evbuffer_new();
    if (out == NULL)
        abort();
    evbuffer_add(out, body, len);
    evhttp_send_reply(ev, code, cm_http_reason(code), out);
    evbuffer_free(out);
}

static const cm_req_ops_t ev_ops = {
    .method = ev_method,
    .path = ev_path,
    .query = ev_query,
    .header = ev_header,
    .peer = ev_peer,
    .body = ev_body,
    .add_header = ev_add_header,
    .has_out_header = ev_has_out_header,
    .send = ev_send,
};

cm_req_t *cm_http_evhttp_req(struct evhttp_request *ev)
{
    ev_req_t *r = cm_xmalloc(sizeof(*r));
    r->base.ops = &ev_ops;
    memset(&r->base.acc, 0, sizeof(r->base.acc));
    r->ev = ev;
    return &r->base;
}

/* --- requests (any backend) ------------------------------------------------------- */

cm_http_method_t cm_http_method(cm_req_t *req)
{
    return req->ops->method(req);
}

const char *cm_http_uri_path(cm_req_t *req)
{
    return req->ops->path(req);
}

const char *cm_http_uri_query(cm_req_t *req)
{
    return req->ops->query(req);
}

const char *cm_http_body(cm_req_t *req, size_t *len)
{
    return req->ops->body(req, len);
}

void cm_http_add_header(cm_req_t *req, const char *name, const char *value)
{
    req->ops->add_header(req, name, value);
}

const char *cm_http_peer(cm_req_t *req)
{
    return req->ops->peer(req);
}

int cm_http_path(cm_req_t *req, char *buf, size_t bufsize, char **segs, int maxsegs)
{
    const char *path = req->ops->path(req);
    return path == NULL ? -1 : cm_parse_path(path, buf, bufsize, segs, maxsegs);
}

const char *cm_http_header(cm_req_t *req, const char *name)
{
    return req->ops->header(req, name);
}

const char *cm_http_bearer(cm_req_t *req, size_t *len)
{
    const char *authz = cm_http_header(req, "Authorization");
    if (authz == NULL)
        return NULL;
    return cm_parse_bearer(authz, len);
}

int cm_http_query(cm_req_t *req, struct evkeyvalq *q)
{
    TAILQ_INIT(q);
    const char *query = req->ops->query(req);
    if (query == NULL)
        return 0;
    return evhttp_parse_query_str(query, q) == 0 ? 0 : -1;
}

json_t *cm_http_read_json(cm_req_t *req, size_t max_bytes, const char **raw, size_t *rawlen)
{
    size_t len = 0;
    const char *text = req->ops->body(req, &len);
    if (len > max_bytes) {
        char msg[96];
        snprintf(msg, sizeof(msg), "the body is over the limit of %zu bytes", max_bytes);
        cm_http_send_error(req, 413, "body_too_large", msg, NULL);
        return NULL;
    }
    if (len == 0) {
        cm_http_send_error(req, 400, "invalid_request", "a JSON object body is required", NULL);
        return NULL;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg), "malformed JSON at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        cm_http_send_error(req, 400, "invalid_request", msg, NULL);
        return NULL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        cm_http_send_error(req, 400, "invalid_request", "the body must be a JSON object", NULL);
        return NULL;
    }
    if (raw) {
        *raw = text;
        *rawlen = len;
    }
    return doc;
}

/* --- responses ------------------------------------------------------------ */

int cm_http_json_string(char *out, size_t size, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    if (size < 3)
        return -1;
    out[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (n + 8 > size)
            return -1;
        if (*p == '"' || *p == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*p;
        } else if (*p < 0x20) {
            memcpy(out + n, "\\u00", 4);
            out[n + 4] = hex[*p >> 4];
            out[n + 5] = hex[*p & 15];
            n += 6;
        } else {
            out[n++] = (char)*p;
        }
    }
    out[n++] = '"';
    out[n] = '\0';
    return (int)n;
}

const char *cm_http_reason(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 402:
        return "Payment Required";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Payload Too Large";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Unknown";
    }
}

void cm_http_send_body(cm_req_t *req, int code, const char *content_type, const char *body,
                       size_t len, bool cacheable)
{
    req->ops->add_header(req, "Content-Type", content_type);
    if (!cacheable)
        req->ops->add_header(req, "Cache-Control", "no-store");
    cm_access_end(req, code, len);
    req->ops->send(req, code, body != NULL ? body : "", len);
}

void cm_http_send_json(cm_req_t *req, int code, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body)
        json_decref(body);
    if (text == NULL)
        text = cm_xstrdup("{}");
    cm_http_send_body(req, code, "application/json", text, strlen(text), false);
    free(text);
}

void cm_http_send_error(cm_req_t *req, int code, const char *error, const char *message,
                        json_t *extra)
{
    json_t *body = json_pack("{s:s, s:s}", "error", error, "message", message);
    if (body == NULL)
        abort();
    if (extra) {
        json_object_update(body, extra);
        json_decref(extra);
    }
    if ((code == 503 || code == 429) && !req->ops->has_out_header(req, "Retry-After"))
        req->ops->add_header(req, "Retry-After", "1");
    cm_http_send_json(req, code, body);
}

void cm_http_send_empty(cm_req_t *req, int code)
{
    req->ops->add_header(req, "Cache-Control", "no-store");
    cm_access_end(req, code, 0);
    req->ops->send(req, code, NULL, 0);
}
