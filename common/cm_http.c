/*
 * cm_http — see cm_http.h.
 *
 * Shape: we create the listener ourselves (evconnlistener) and hand it to evhttp, so
 * we can pause it. Each accepted connection gets its bufferevent from cm_http_on_new_bev,
 * where TLS is attached and the connection counted; the count goes down in the SSL
 * ex_data free hook, which OpenSSL calls exactly once when evhttp frees the
 * connection (and with it the bufferevent and the SSL). That is the one place that
 * sees every close, whatever the reason. libevent may free a connection's bufferevent
 * after the server itself is gone (deferred frees at event_base_free), so the count
 * lives in a small reference-counted tracker that each SSL holds, not in the server.
 *
 * PROXY protocol v2 (limits.proxy_from): a TLS connection whose peer is in the list must
 * start with a PROXY v2 header (cm_proxy) before its ClientHello. evhttp accepts the
 * socket and asks cm_http_on_new_bev for a bufferevent before it knows the fd, so
 * cm_http_on_new_bev queues an active event that runs before the loop polls again — after evhttp
 * has set the fd and enabled reading, before any byte is read. It disables the bufferevent's
 * reading, peeks at the socket until the whole header is there (5 s at most), consumes
 * exactly the header, and re-enables reading: TLS and HTTP then see the bytes after it.
 * The client's address is kept with the SSL (ex_data, freed with it) for cm_http_peer.
 * A connection from there that does not start with the v2 signature (TLS starts with
 * 0x16, never with it) is the proxy host's own, served with its own address; one that
 * starts with it but is not a valid header, or stalls, is shut down (TLS then fails and
 * evhttp frees it). Connections from other peers are never searched for a header.
 */
#include "cm_http_int.h"

#include <string.h>
#include <stdio.h>
#include <errno.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <event2/bufferevent_ssl.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"

int cm_http_ssl_conn_index = -1;
int cm_http_ssl_proxy_index = -1;
int cm_http_ssl_guard_index = -1;

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

void cm_http_resume_listener(cm_http_server_t *srv)
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
        cm_http_resume_listener(srv);
    }
    tracker_release(t);
}

struct bufferevent *cm_http_on_new_bev(struct event_base *base, void *arg)
{
    cm_http_server_t *srv = arg;
    if (srv->tls == NULL)
        return bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    SSL *ssl = SSL_new(srv->tls);
    if (ssl == NULL)
        return NULL;
    SSL_set_ex_data(ssl, cm_http_ssl_conn_index, srv->tracker);
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
        g->timer = evtimer_new(base, cm_http_on_guard_timer, g);
        if (g->timer == NULL)
            abort();
        g->t = srv->tracker;
        srv->tracker->refs++;
        g->handshaking = true;
        if (++srv->handshakes >= srv->max_handshakes && srv->max_handshakes > 0 && !srv->paused) {
            cm_shed_count(srv->shed, CM_SHED_HANDSHAKES);
            pause_listener(srv); /* the rest wait in the kernel's backlog, costing nothing */
        }
        SSL_set_ex_data(ssl, cm_http_ssl_guard_index, g); /* freed with ssl from here on */
        SSL_set_info_callback(ssl, cm_http_on_ssl_info);
        SSL_set_msg_callback(ssl, cm_http_on_ssl_msg);
        SSL_set_msg_callback_arg(ssl, g);
        if (g->handshake_s > 0)
            cm_http_guard_arm(g, (uint64_t)g->handshake_s * SEC_NS);
    }
    proxy_conn_t *pc = NULL;
    if (srv->proxy_from != NULL) {
        pc = cm_xcalloc(1, sizeof(*pc));
        SSL_set_ex_data(ssl, cm_http_ssl_proxy_index, pc); /* freed with ssl from here on */
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
    cm_http_resume_listener(arg);
}

/* The loop started or stopped lagging: no new handshakes while it lags. */
static void on_lag(bool lagging, void *arg)
{
    if (lagging)
        pause_listener(arg);
    else
        cm_http_resume_listener(arg);
}

/* The overload policy's check, before the handler: true when req was answered 503
 * overloaded (health probes are never shed: they are cheap, and a balancer must not
 * take a busy server for a dead one). */
bool cm_http_shed_request(cm_http_server_t *srv, cm_req_t *req)
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

cm_http_server_t *cm_http_server_new(struct event_base *base, const char *addr, int port,
                                     cm_tls_ctx_t *tls, const cm_http_limits_t *limits,
                                     cm_http_handler_t handler, void *arg, char *err, size_t errlen)
{
    if (cm_http_ssl_conn_index < 0)
        cm_http_ssl_conn_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_ssl_free);
    if (cm_http_ssl_proxy_index < 0)
        cm_http_ssl_proxy_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_proxy_free);
    if (cm_http_ssl_guard_index < 0)
        cm_http_ssl_guard_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, cm_http_on_guard_free);

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

    struct sockaddr_storage ss; /* IPv6 "::" takes both families unless the host sets bindv6only */
    unsigned sslen;
    if (cm_parse_ip_sockaddr(addr, port, &ss, &sslen) != 0) {
        snprintf(err, errlen, "listen address %s is not an IPv4 or IPv6 address", addr);
        goto err;
    }
    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC;
    if (limits->reuse_port)
        flags |= LEV_OPT_REUSEABLE_PORT; /* one listener per worker; the kernel spreads */
    /* The kernel's accept queue is where connections wait while the overload policy has
     * paused accepting: as deep as the host allows (Linux caps it at somaxconn). */
    srv->listener =
        evconnlistener_new_bind(base, NULL, NULL, flags, 65535, (struct sockaddr *)&ss, (int)sslen);
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
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(evconnlistener_get_fd(srv->listener), (struct sockaddr *)&bound, &blen) == 0)
        srv->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                                : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    srv->resume_timer = evtimer_new(base, on_resume_timer, srv);
    if (srv->engine == CM_HTTP_ENGINE_H1) {
        evconnlistener_set_cb(srv->listener, cm_http_on_h1_accept, srv);
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
    evhttp_set_bevcb(srv->http, cm_http_on_new_bev, srv);
    evhttp_set_gencb(srv->http, cm_http_on_request, srv);
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
    cm_http_h1_close_all(srv);
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
