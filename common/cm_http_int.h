/*
 * cm_http_int — what the files of the HTTP engine share (not part of the API, cm_http.h):
 * the server's state, the connection trackers and guards, and the calls between
 *   cm_http.c         the server: listener, accepting, PROXY headers, shedding, lifecycle
 *   cm_http_guard.c   per-address connection counts, deadlines and caps per TLS connection
 *   cm_http_evhttp.c  libevent's evhttp as the HTTP engine (CM_HTTP_ENGINE_EVHTTP)
 *   cm_http_h1.c      our own HTTP/1.1 engine (CM_HTTP_ENGINE_H1) on cm_h1's parser
 *   cm_http_req.c     requests and responses, whichever engine carries them
 * Everything here runs on the server's loop thread unless it says otherwise.
 */
#ifndef CM_HTTP_INT_H
#define CM_HTTP_INT_H

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "cm_http.h"
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

static inline void tracker_release(tracker_t *t)
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
    size_t (*route_cap)(cm_http_method_t method, const char *path, const char *content_type);
    size_t max_header_bytes;
    int idle_plain_s;         /* plain connections' read/write timeout */
    struct h1_conn *h1_conns; /* the h1 engine's open connections */
    cm_http_addrs_t *addrs;
};

#define SEC_NS 1000000000ull

/*
 * Headers every answer of every service carries, added before the handler runs so no
 * reply path can forget them: nosniff (a JSON error is never sniffed into HTML), and on
 * TLS listeners HSTS (these hosts are HTTPS only; no includeSubDomains: a service does
 * not speak for its neighbours). Answers evhttp writes itself (a malformed request line,
 * an oversized head) have a fixed body that echoes nothing.
 */
#define HSTS "max-age=31536000"

/* SSL ex_data slots: the tracker, the proxy_conn and the guard of a connection. */
extern int cm_http_ssl_conn_index;
extern int cm_http_ssl_proxy_index;
extern int cm_http_ssl_guard_index;

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

/* cm_http.c: the listener */
void cm_http_resume_listener(cm_http_server_t *srv);
struct bufferevent *cm_http_on_new_bev(struct event_base *base, void *arg);
bool cm_http_shed_request(cm_http_server_t *srv, cm_req_t *req);

/* cm_http_guard.c: deadlines and caps of TLS connections */
void cm_http_guard_arm(guard_t *g, uint64_t ns);
void cm_http_guard_idle(guard_t *g);
void cm_http_on_guard_timer(evutil_socket_t fd, short what, void *arg);
void cm_http_on_guard_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                           void *argp);
guard_t *cm_http_guard_of_ssl(const SSL *ssl);
void cm_http_ssl_peer(SSL *ssl, char *out, size_t outlen);
void cm_http_on_ssl_info(const SSL *ssl, int where, int ret);
void cm_http_guard_request(guard_t *g);
void cm_http_guard_body(guard_t *g);
void cm_http_on_ssl_msg(int write_p, int version, int content_type, const void *buf, size_t len,
                        SSL *ssl, void *arg);

/* cm_http_evhttp.c: the evhttp engine */
void cm_http_on_request(struct evhttp_request *ev, void *arg);

/* cm_http_h1.c: the h1 engine */
void cm_http_on_h1_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                          int socklen, void *arg);
void cm_http_h1_close_all(cm_http_server_t *srv);

#endif
