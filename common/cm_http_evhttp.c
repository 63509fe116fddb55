/*
 * cm_http_evhttp — libevent's evhttp as the HTTP engine (cm_http_int.h).
 */
#include "cm_http_int.h"

#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>

#include "cm_log.h"
#include "cm_mem.h"

static guard_t *guard_of(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;
    return bev != NULL ? cm_http_guard_of_ssl(bufferevent_openssl_get_ssl(bev)) : NULL;
}

/* The reply has been written: the connection waits for the next request. */
static void on_reply_done(struct evhttp_request *req, void *arg)
{
    guard_t *g = guard_of(req);
    if (g != NULL && g->phase == G_HANDLER)
        cm_http_guard_idle(g);
}

static const char *ev_peer_of(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;
    SSL *ssl =
        bev != NULL && cm_http_ssl_proxy_index >= 0 ? bufferevent_openssl_get_ssl(bev) : NULL;
    proxy_conn_t *pc = ssl != NULL ? SSL_get_ex_data(ssl, cm_http_ssl_proxy_index) : NULL;
    char *addr = NULL;
    ev_uint16_t port = 0;

    if (pc != NULL && pc->peer[0] != '\0')
        return pc->peer;
    if (evcon != NULL)
        evhttp_connection_get_peer(evcon, &addr, &port);
    return addr != NULL ? addr : "?";
}

void cm_http_on_request(struct evhttp_request *ev, void *arg)
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
    if (!cm_http_shed_request(srv, req))
        srv->handler(req, srv->arg);
    cm_log_set_request(NULL); /* lines logged later, from callbacks, set their own */
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
