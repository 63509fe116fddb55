/*
 * sim_http — see sim_http.h. Event-loop thread only.
 *
 * Why not evhttp's client: it re-connects a closed TLS connection with the same SSL
 * object (libevent 2.1), hides the connection it picked, and parses more than the
 * simulator needs. Here each connection is one bufferevent (OpenSSL filter or plain
 * socket) with an explicit state, its own source address (bind() before connect(), so
 * a gateway's per-address limits see many clients) and its own FIFO of requests, one
 * in flight at a time (HTTP/1.1 keep-alive, no pipelining). A closed connection is
 * freed and opened again when a request waits for it; a request that was on the wire
 * when the connection failed is answered with err and never resent (not idempotent).
 * Responses must carry Content-Length (both services' evhttp replies do).
 */
#include "sim_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_mem.h"
#include "cm_time.h"

#define MAX_HEADER_LINE 8192
#define MAX_BODY        (64 * 1024 * 1024)

typedef struct req {
    struct req *next;
    char *wire;
    size_t wire_len;
    sim_http_cb cb;
    void *arg;
    uint64_t t_queued; /* when the caller asked */
    uint64_t t0;       /* when it went on the wire */
} req_t;

typedef enum { C_CLOSED, C_CONNECTING, C_READY, C_BUSY } conn_state_t;

typedef struct conn {
    sim_pool_t *p;
    struct sockaddr_in src;
    bool bind_src;
    struct bufferevent *bev;
    conn_state_t state;
    req_t *head, *tail; /* head is in flight when state == C_BUSY */
    req_t *urgent_last; /* the last urgent request waiting (never the one in flight) */
    unsigned queued;    /* requests waiting or in flight */
    /* response parser */
    bool in_body;
    int status;
    long clen;
    int retry_after;
    bool close_after;
    bool bad;
} conn_t;

struct sim_pool {
    struct event_base *base;
    sim_tls_ctx_t *tls;
    char *url;
    char host[64];
    struct sockaddr_in dst;
    int nconns;
    conn_t *conns;
    int timeout_s;
    size_t pending;
    bool spread;     /* any connection may carry any request (sim_pool_spread) */
    unsigned cursor; /* where the next spread request starts looking */
};

static void conn_kick(conn_t *c);

static int parse_url(const char *url, bool *tls, char *host, size_t hostlen, int *port)
{
    const char *h;
    if (strncmp(url, "https://", 8) == 0) {
        *tls = true;
        h = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        *tls = false;
        h = url + 7;
    } else {
        return -1;
    }
    const char *colon = strchr(h, ':');
    if (colon == NULL || (size_t)(colon - h) >= hostlen)
        return -1;
    memcpy(host, h, (size_t)(colon - h));
    host[colon - h] = '\0';
    char *end = NULL;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end != '\0' && strcmp(end, "/") != 0) || v < 1 || v > 65535)
        return -1;
    *port = (int)v;
    return 0;
}

sim_pool_t *sim_pool_new(struct event_base *base, const char *url, sim_tls_ctx_t *tls, int nconns,
                         const char *src_base, int timeout_s, char *err, size_t errlen)
{
    bool want_tls = false;
    int port = 0;
    sim_pool_t *p = cm_xcalloc(1, sizeof(*p));
    if (parse_url(url, &want_tls, p->host, sizeof(p->host), &port) != 0) {
        snprintf(err, errlen, "bad URL '%s' (want http(s)://<IPv4>:<port>)", url);
        goto err;
    }
    p->dst.sin_family = AF_INET;
    p->dst.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, p->host, &p->dst.sin_addr) != 1) {
        snprintf(err, errlen, "URL '%s': the host must be an IPv4 address", url);
        goto err;
    }
    if (want_tls && tls == NULL) {
        snprintf(err, errlen, "URL '%s' needs a CA (--ca)", url);
        goto err;
    }
    uint32_t src = 0;
    if (src_base && inet_pton(AF_INET, src_base, &src) != 1) {
        snprintf(err, errlen, "bad source address '%s'", src_base);
        goto err;
    }
    p->base = base;
    p->tls = want_tls ? tls : NULL;
    p->url = cm_xstrdup(url);
    p->nconns = nconns < 1 ? 1 : nconns;
    p->timeout_s = timeout_s;
    p->conns = cm_xcalloc((size_t)p->nconns, sizeof(conn_t));
    uint32_t a = ntohl(src);
    for (int i = 0; i < p->nconns; i++) {
        conn_t *c = &p->conns[i];
        c->p = p;
        if (src_base) {
            while ((a & 0xff) == 0 || (a & 0xff) == 255)
                a++;
            c->bind_src = true;
            c->src.sin_family = AF_INET;
            c->src.sin_addr.s_addr = htonl(a++);
        }
    }
    return p;
err:
    free(p);
    return NULL;
}

const char *sim_pool_url(const sim_pool_t *p)
{
    return p->url;
}

size_t sim_pool_pending(const sim_pool_t *p)
{
    return p->pending;
}

static void finish(conn_t *c, req_t *r, const sim_resp_t *resp)
{
    c->p->pending--;
    r->cb(resp, r->arg);
    free(r->wire);
    free(r);
}

static void fail(conn_t *c, req_t *r, const char *why)
{
    sim_resp_t resp = {.status = 0,
                       .body = "",
                       .retry_after_s = -1,
                       .latency_ns = cm_time_mono_ns() - r->t0,
                       .waited_ns = r->t0 - r->t_queued,
                       .err = why};
    finish(c, r, &resp);
}

static req_t *pop(conn_t *c)
{
    req_t *r = c->head;
    if (r) {
        c->queued--;
        c->head = r->next;
        if (c->head == NULL)
            c->tail = NULL;
        if (c->urgent_last == r)
            c->urgent_last = NULL;
    }
    return r;
}

static void conn_close(conn_t *c)
{
    if (c->bev) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    c->state = C_CLOSED;
}

/* The connection failed: the request on the wire (if any) fails with why; so does every
 * queued one when we never got connected (the service is down: callers decide). */
static void conn_fail(conn_t *c, const char *why)
{
    conn_state_t was = c->state;
    conn_close(c);
    if (was == C_BUSY) {
        req_t *r = pop(c);
        if (r)
            fail(c, r, why);
    } else if (was == C_CONNECTING) {
        req_t *r;
        while ((r = pop(c)) != NULL)
            fail(c, r, why);
    }
    conn_kick(c);
}

static void parser_reset(conn_t *c)
{
    c->in_body = false;
    c->status = 0;
    c->clen = -1;
    c->retry_after = -1;
    c->close_after = false;
    c->bad = false;
}

static void header_line(conn_t *c, const char *line)
{
    const char *v = strchr(line, ':');
    if (v == NULL)
        return;
    size_t n = (size_t)(v - line);
    v++;
    while (*v == ' ' || *v == '\t')
        v++;
    if (n == 14 && strncasecmp(line, "Content-Length", n) == 0) {
        char *end = NULL;
        long x = strtol(v, &end, 10);
        c->clen = (end != v && x >= 0 && x <= MAX_BODY) ? x : -2;
    } else if (n == 11 && strncasecmp(line, "Retry-After", n) == 0) {
        c->retry_after = atoi(v);
    } else if (n == 10 && strncasecmp(line, "Connection", n) == 0) {
        c->close_after = strcasecmp(v, "close") == 0;
    } else if (n == 17 && strncasecmp(line, "Transfer-Encoding", n) == 0) {
        c->bad = true; /* chunked replies are not expected from our services */
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    conn_t *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        if (c->state != C_BUSY) {
            if (evbuffer_get_length(in) > 0)
                conn_fail(c, "unexpected bytes from the server");
            return;
        }
        if (!c->in_body) {
            size_t n = 0;
            char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
            if (line == NULL) {
                if (evbuffer_get_length(in) > MAX_HEADER_LINE)
                    conn_fail(c, "header line too long");
                return;
            }
            if (c->status == 0) {
                int st = 0;
                if (sscanf(line, "HTTP/1.%*d %d", &st) != 1 || st < 100 || st > 599)
                    c->bad = true;
                c->status = st > 0 ? st : 1;
            } else if (n == 0) {
                c->in_body = true;
                if (c->bad || c->clen < 0) {
                    free(line);
                    conn_fail(c, "malformed response (status line or Content-Length)");
                    return;
                }
            } else {
                header_line(c, line);
            }
            free(line);
            continue;
        }
        if (evbuffer_get_length(in) < (size_t)c->clen)
            return;
        char *body = cm_xmalloc((size_t)c->clen + 1);
        evbuffer_remove(in, body, (size_t)c->clen);
        body[c->clen] = '\0';
        req_t *r = pop(c);
        sim_resp_t resp = {.status = c->status,
                           .body = body,
                           .body_len = (size_t)c->clen,
                           .retry_after_s = c->retry_after,
                           .latency_ns = cm_time_mono_ns() - r->t0,
                           .waited_ns = r->t0 - r->t_queued,
                           .err = NULL};
        bool close_after = c->close_after;
        parser_reset(c);
        c->state = C_READY;
        bufferevent_set_timeouts(bev, NULL, NULL);
        if (close_after)
            conn_close(c);
        finish(c, r, &resp);
        free(body);
        conn_kick(c);
        return; /* conn_kick may have freed bev; the next reply comes with a new event */
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    conn_t *c = arg;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        c->state = C_READY;
        conn_kick(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT)
        conn_fail(c, "timeout");
    else if (what & BEV_EVENT_EOF)
        conn_fail(c, c->state == C_READY ? "closed" : "connection closed by the server");
    else
        conn_fail(c, c->state == C_CONNECTING ? "connect failed" : "connection error");
}

static int conn_open(conn_t *c)
{
    sim_pool_t *p = c->p;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (c->bind_src) {
#ifdef IP_BIND_ADDRESS_NO_PORT
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
#endif
        if (bind(fd, (struct sockaddr *)&c->src, sizeof(c->src)) != 0) {
            close(fd);
            return -1;
        }
    }
    struct bufferevent *bev;
    if (p->tls) {
        SSL *ssl = SSL_new(p->tls);
        if (ssl == NULL) {
            close(fd);
            return -1;
        }
        /* The SSL is the bufferevent's from here on, even if this call fails. */
        bev = bufferevent_openssl_socket_new(p->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
    } else {
        bev = bufferevent_socket_new(p->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (bev == NULL) {
        close(fd);
        return -1;
    }
    /* evhttp's way of connecting from a bound socket: set the fd, then connect. */
    bufferevent_setfd(bev, fd);
    bufferevent_setcb(bev, on_read, NULL, on_event, c);
    struct timeval tv = {p->timeout_s, 0};
    bufferevent_set_timeouts(bev, &tv, &tv);
    c->bev = bev;
    c->state = C_CONNECTING;
    parser_reset(c);
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&p->dst, sizeof(p->dst)) != 0) {
        conn_close(c);
        return -1;
    }
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    return 0;
}

static void conn_kick(conn_t *c)
{
    if (c->head == NULL)
        return;
    if (c->state == C_CLOSED) {
        if (conn_open(c) != 0) {
            req_t *r;
            while ((r = pop(c)) != NULL)
                fail(c, r, "cannot open a connection");
        }
        return;
    }
    if (c->state != C_READY)
        return;
    req_t *r = c->head;
    struct timeval tv = {c->p->timeout_s, 0};
    bufferevent_set_timeouts(c->bev, &tv, &tv);
    c->state = C_BUSY;
    if (c->urgent_last == r)
        c->urgent_last = NULL; /* on the wire now */
    parser_reset(c);
    r->t0 = cm_time_mono_ns();
    bufferevent_write(c->bev, r->wire, r->wire_len);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_kick(arg);
}

/* A spread request's connection: the least loaded of a few after the cursor, the first
 * idle one at once (power of d choices: no scan of the whole pool per request). */
#define SPREAD_PROBES 16
static conn_t *pick(sim_pool_t *p, unsigned pin)
{
    if (!p->spread)
        return &p->conns[pin % (unsigned)p->nconns];
    conn_t *best = NULL;
    int probes = p->nconns < SPREAD_PROBES ? p->nconns : SPREAD_PROBES;
    for (int i = 0; i < probes; i++) {
        conn_t *c = &p->conns[p->cursor++ % (unsigned)p->nconns];
        if (c->queued == 0)
            return c;
        if (best == NULL || c->queued < best->queued)
            best = c;
    }
    return best;
}

static void enqueue(sim_pool_t *p, unsigned pin, bool urgent, const char *method, const char *path,
                    const char *headers, const char *body, sim_http_cb cb, void *arg)
{
    conn_t *c = pick(p, pin);
    req_t *r = cm_xcalloc(1, sizeof(*r));
    size_t blen = body ? strlen(body) : 0;
    r->wire = cm_xasprintf(
        "%s %s HTTP/1.1\r\nHost: %s:%d\r\n%s%s%zu\r\n\r\n%s", method, path, p->host,
        ntohs(p->dst.sin_port), headers ? headers : "",
        body ? "Content-Type: application/json\r\nContent-Length: " : "Content-Length: ", blen,
        body ? body : "");
    r->wire_len = strlen(r->wire);
    r->cb = cb;
    r->arg = arg;
    r->t_queued = r->t0 = cm_time_mono_ns();
    req_t *after = urgent ? (c->urgent_last       ? c->urgent_last
                             : c->state == C_BUSY ? c->head
                                                  : NULL)
                          : c->tail;
    if (urgent && after == NULL) { /* front of the line */
        r->next = c->head;
        c->head = r;
        if (c->tail == NULL)
            c->tail = r;
    } else if (after == NULL) {
        c->head = c->tail = r;
    } else {
        r->next = after->next;
        after->next = r;
        if (c->tail == after)
            c->tail = r;
    }
    if (urgent)
        c->urgent_last = r;
    c->queued++;
    p->pending++;
    if (c->state == C_READY || c->state == C_CLOSED) {
        /* Start it from the loop, so a failure never calls back into our caller. */
        event_base_once(p->base, -1, EV_TIMEOUT, on_kick, c, NULL);
    }
}

int sim_pool_share_sources(sim_pool_t *p, int naddrs)
{
    if (naddrs < 1 || naddrs >= p->nconns)
        naddrs = p->nconns;
    for (int i = naddrs; i < p->nconns; i++)
        p->conns[i].src = p->conns[i % naddrs].src;
    return naddrs;
}

void sim_pool_spread(sim_pool_t *p, bool on)
{
    p->spread = on;
}

void sim_pool_request(sim_pool_t *p, unsigned pin, const char *method, const char *path,
                      const char *headers, const char *body, sim_http_cb cb, void *arg)
{
    enqueue(p, pin, false, method, path, headers, body, cb, arg);
}

void sim_pool_request_urgent(sim_pool_t *p, unsigned pin, const char *method, const char *path,
                             const char *headers, const char *body, sim_http_cb cb, void *arg)
{
    enqueue(p, pin, true, method, path, headers, body, cb, arg);
}

void sim_pool_free(sim_pool_t *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->nconns; i++) {
        conn_t *c = &p->conns[i];
        conn_close(c);
        req_t *r;
        while ((r = pop(c)) != NULL) {
            free(r->wire);
            free(r);
        }
    }
    free(p->conns);
    free(p->url);
    free(p);
}
