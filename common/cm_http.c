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
#include <openssl/ssl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"

/* Bodies between max_body_bytes and this cap are read and answered with a JSON 413;
 * above it evhttp refuses them itself (status 413, its own body) before reading. */
#define TRANSPORT_BODY_CAP_MIN (1024 * 1024)

/* Shared by the server and each live SSL; freed by whichever lets go last. */
typedef struct tracker {
    cm_http_server_t *srv; /* NULL once the server is freed */
    int refs;
} tracker_t;

struct cm_http_server {
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
    bool paused;
    bool stopped;
};

static int ssl_conn_index = -1;

static void pause_listener(cm_http_server_t *srv)
{
    if (!srv->paused && !srv->stopped) {
        evconnlistener_disable(srv->listener);
        srv->paused = true;
    }
}

static void resume_listener(cm_http_server_t *srv)
{
    if (srv->paused && !srv->stopped) {
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
        srv->connections--;
        if (srv->connections < srv->max_connections)
            resume_listener(srv);
    }
    if (--t->refs == 0)
        free(t);
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
    srv->connections++;
    if (srv->connections >= srv->max_connections)
        pause_listener(srv);
    /* The bufferevent owns ssl from here on, even if this call fails. */
    return bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                          BEV_OPT_CLOSE_ON_FREE);
}

static void on_resume_timer(evutil_socket_t fd, short what, void *arg)
{
    cm_http_server_t *srv = arg;
    if (srv->connections < srv->max_connections)
        resume_listener(srv);
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

static void on_request(struct evhttp_request *req, void *arg)
{
    cm_http_server_t *srv = arg;
    srv->handler(req, srv->arg);
}

cm_http_server_t *cm_http_server_new(struct event_base *base, const char *addr, int port,
                                     cm_tls_ctx_t *tls, const cm_http_limits_t *limits,
                                     cm_http_handler_t handler, void *arg, char *err, size_t errlen)
{
    if (ssl_conn_index < 0)
        ssl_conn_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, on_ssl_free);

    cm_http_server_t *srv = cm_xcalloc(1, sizeof(*srv));
    srv->tracker = cm_xcalloc(1, sizeof(tracker_t));
    srv->tracker->srv = srv;
    srv->tracker->refs = 1;
    srv->base = base;
    srv->tls = tls;
    srv->handler = handler;
    srv->arg = arg;
    srv->max_connections = limits->max_connections > 0 ? limits->max_connections : 1024;

    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
        snprintf(err, errlen, "listen address %s is not an IPv4 address", addr);
        goto err;
    }
    srv->listener = evconnlistener_new_bind(
        base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 1024,
        (struct sockaddr *)&sin, sizeof(sin));
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
    size_t cap = limits->max_body_bytes * 4;
    if (cap < TRANSPORT_BODY_CAP_MIN)
        cap = TRANSPORT_BODY_CAP_MIN;
    evhttp_set_max_body_size(srv->http, (ev_ssize_t)cap);
    evhttp_set_timeout(srv->http, limits->idle_timeout_s > 0 ? limits->idle_timeout_s : 30);
    evhttp_set_allowed_methods(srv->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                              EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE |
                                              EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS);
    srv->resume_timer = evtimer_new(base, on_resume_timer, srv);
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
    return srv->connections;
}

void cm_http_server_stop_accepting(cm_http_server_t *srv)
{
    if (srv->listener && !srv->stopped) {
        evconnlistener_disable(srv->listener);
        srv->stopped = true;
    }
}

void cm_http_server_free(cm_http_server_t *srv)
{
    if (srv == NULL)
        return;
    srv->stopped = true;
    if (srv->http)
        evhttp_free(srv->http); /* frees the bound listener and every connection */
    else if (srv->listener)
        evconnlistener_free(srv->listener);
    if (srv->resume_timer)
        event_free(srv->resume_timer);
    srv->tracker->srv = NULL;
    if (--srv->tracker->refs == 0)
        free(srv->tracker);
    free(srv);
}

/* --- requests ------------------------------------------------------------ */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int cm_http_path(struct evhttp_request *req, char *buf, size_t bufsize, char **segs, int maxsegs)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (path == NULL || path[0] != '/')
        return -1;
    size_t len = strlen(path);
    if (len >= bufsize)
        return -1;
    int n = 0;
    size_t o = 0;
    const char *p = path + 1;
    if (*p == '\0')
        return 0;
    while (*p) {
        if (n == maxsegs)
            return -1;
        segs[n++] = buf + o;
        size_t start = o;
        while (*p && *p != '/') {
            char c = *p++;
            if (c == '%') {
                int hi = hexval(p[0]), lo = hi < 0 ? -1 : hexval(p[1]);
                if (lo < 0)
                    return -1;
                c = (char)(hi * 16 + lo);
                if (c == '\0' || c == '/')
                    return -1;
                p += 2;
            }
            buf[o++] = c;
        }
        buf[o++] = '\0';
        if (*p == '/') {
            p++;
            /* A trailing slash ends the path ("/admin/"); an inner "//" is refused. */
            if (*p == '\0')
                break;
        }
        if (o - 1 == start)
            return -1;
    }
    return n;
}

const char *cm_http_header(struct evhttp_request *req, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(req), name);
}

const char *cm_http_bearer(struct evhttp_request *req, size_t *len)
{
    const char *authz = cm_http_header(req, "Authorization");
    if (authz == NULL)
        return NULL;
    return cm_parse_bearer(authz, len);
}

int cm_http_query(struct evhttp_request *req, struct evkeyvalq *q)
{
    TAILQ_INIT(q);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    if (query == NULL)
        return 0;
    return evhttp_parse_query_str(query, q) == 0 ? 0 : -1;
}

json_t *cm_http_read_json(struct evhttp_request *req, size_t max_bytes, const char **raw,
                          size_t *rawlen)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
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
    const char *text = (const char *)evbuffer_pullup(in, -1);
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

void cm_http_send_body(struct evhttp_request *req, int code, const char *content_type,
                       const char *body, size_t len, bool cacheable)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", content_type);
    if (!cacheable)
        evhttp_add_header(h, "Cache-Control", "no-store");
    struct evbuffer *out = evbuffer_new();
    if (out == NULL)
        abort();
    evbuffer_add(out, body, len);
    evhttp_send_reply(req, code, cm_http_reason(code), out);
    evbuffer_free(out);
}

void cm_http_send_json(struct evhttp_request *req, int code, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body)
        json_decref(body);
    if (text == NULL)
        text = cm_xstrdup("{}");
    cm_http_send_body(req, code, "application/json", text, strlen(text), false);
    free(text);
}

void cm_http_send_error(struct evhttp_request *req, int code, const char *error,
                        const char *message, json_t *extra)
{
    json_t *body = json_pack("{s:s, s:s}", "error", error, "message", message);
    if (body == NULL)
        abort();
    if (extra) {
        json_object_update(body, extra);
        json_decref(extra);
    }
    if (code == 503 || code == 429) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        if (evhttp_find_header(h, "Retry-After") == NULL)
            evhttp_add_header(h, "Retry-After", "1");
    }
    cm_http_send_json(req, code, body);
}

void cm_http_send_empty(struct evhttp_request *req, int code)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    evhttp_send_reply(req, code, cm_http_reason(code), NULL);
}
