/*
 * cm_http_h1 — our own HTTP/1.1 engine (cm_http_int.h).
 */
#include "cm_http_int.h"

#include <string.h>
#include <stdio.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <unistd.h>

#include "cm_h1.h"
#include "cm_log.h"
#include "cm_mem.h"

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
               ? cm_http_guard_of_ssl(bufferevent_openssl_get_ssl(c->bev))
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
        cm_http_ssl_peer(ssl, c->peer, sizeof(c->peer));
    } else {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        if (getpeername(bufferevent_getfd(c->bev), (struct sockaddr *)&ss, &len) == 0) {
            if (ss.ss_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->peer,
                          sizeof(c->peer));
            else if (ss.ss_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, c->peer,
                          sizeof(c->peer));
        }
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
        cm_http_guard_idle(g);
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
    if (!cm_http_shed_request(c->srv, &c->req))
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
        cm_http_guard_request(g); /* a request already buffered starts now */
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
    size_t bcap = c->srv->route_cap ? c->srv->route_cap(c->head.method, c->head.path,
                                                        cm_h1_header(&c->head, "Content-Type"))
                                    : SIZE_MAX;
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
            cm_http_guard_body(g);
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
    struct bufferevent *bev = cm_http_on_new_bev(srv->base, srv);
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

void cm_http_on_h1_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
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
void cm_http_h1_close_all(cm_http_server_t *srv)
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
