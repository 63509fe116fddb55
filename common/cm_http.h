/*
 * cm_http — the HTTP(S) front of every onsale server: evhttp over OpenSSL
 * bufferevents, with the limits and the JSON error bodies of docs/api.md.
 *
 * Runs on the event-loop thread that owns the base. evhttp parses HTTP; this module
 * adds TLS (one SSL per connection, created in evhttp's bufferevent callback), a
 * connection cap (the listener pauses at max_connections and resumes as connections
 * close, as memcached does; EMFILE pauses it and a timer resumes it), header/body
 * size caps, an idle timeout, and helpers that build responses the way docs/api.md says:
 * JSON bodies, `{"error","message"}` errors, `Cache-Control: no-store`.
 *
 * Library rules relied on: an SSL* given to bufferevent_openssl_socket_new(…,
 * BEV_OPT_CLOSE_ON_FREE) belongs to the bufferevent even when that call fails; a
 * request whose client went away must still be answered (evhttp then frees it),
 * so every handler ends in exactly one cm_http_send_*.
 */
#ifndef CM_HTTP_H
#define CM_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cm_shed.h"
#include "cm_tls.h"

struct event_base;
struct evkeyvalq;
typedef struct cm_http_server cm_http_server_t;

/** One request being served, whatever the transport (cm_req.h is the backend side). It
 *  lives until its reply is sent; every handler ends in exactly one cm_http_send_*. */
typedef struct cm_req cm_req_t;

/** Request methods (one bit each, so a route can name the set it accepts). */
typedef enum cm_http_method {
    CM_HTTP_GET = 1 << 0,
    CM_HTTP_HEAD = 1 << 1,
    CM_HTTP_POST = 1 << 2,
    CM_HTTP_PUT = 1 << 3,
    CM_HTTP_DELETE = 1 << 4,
    CM_HTTP_OPTIONS = 1 << 5,
    CM_HTTP_PATCH = 1 << 6,
    CM_HTTP_OTHER = 1 << 7,
} cm_http_method_t;
typedef struct cm_http_addrs cm_http_addrs_t;

typedef enum cm_http_engine {
    CM_HTTP_ENGINE_EVHTTP = 0,
    CM_HTTP_ENGINE_H1,
} cm_http_engine_t;

typedef struct cm_http_limits {
    size_t max_header_bytes; /* request line + headers */
    size_t max_body_bytes;   /* JSON bodies; larger → 413 body_too_large */
    int idle_timeout_s;      /* read/write inactivity before the connection is closed */
    int max_connections;     /* open connections before the listener pauses */
    /* PROXY protocol v2 accepted from these addresses ("ip[/bits],…", cm_proxy); NULL or
     * "": none. Needs TLS. A connection from them that starts with a v2 header is served
     * as the client it names; one without is the proxy host's own. */
    const char *proxy_from;
    bool reuse_port; /* SO_REUSEPORT: several listeners (one per worker) on one port */
    /* Deadlines of a TLS connection (0 = none): the handshake from accept; a request from
     * its first byte until it is read whole (head and body); a connection with no request
     * under way closes after idle_timeout_s in all, however it trickles bytes. */
    int handshake_timeout_s;
    int request_timeout_s;
    /* Open TLS connections per client address (the PROXY header's address behind a
     * balancer), counted in addrs (shared by every listener of a process); a connection
     * over the cap gets 429 too_many_connections to its first request, then is closed.
     * 0 or addrs NULL: no cap. */
    int max_conns_per_addr;
    cm_http_addrs_t *addrs;
    /* Which HTTP/1.1 implementation serves the listener: evhttp (the default), or our own
     * engine (cm_h1: heads parsed in place, per-route body caps, a head deadline). */
    cm_http_engine_t engine;
    /* CM_HTTP_ENGINE_H1 only. The head (request line and headers) must arrive within
     * head_timeout_s of the request's first byte (0: request_timeout_s covers it); the
     * body then gets what is left of request_timeout_s. body_cap gives the largest body
     * a route accepts, decided from the head before any body byte is read — a larger
     * Content-Length is answered 413 at once (NULL, or a route it returns SIZE_MAX for:
     * max(4 × max_body_bytes, 1 MiB); CM_HTTP_BODY_CAP_JSON: max_body_bytes). path is the
     * target's path as sent (not decoded), content_type the Content-Type header (NULL:
     * none), from any loop thread: a pure function. */
    int head_timeout_s;
    size_t (*body_cap)(cm_http_method_t method, const char *path, const char *content_type);
    /* The overload policy (cm_shed, docs/design.md "Overload"). While the loop lags more
     * than shed_lag_ms, a request other than GET /healthz and /readyz is answered
     * 503 overloaded with Retry-After: shed_retry_after_s before its handler runs (0: never).
     * At max_handshakes TLS handshakes in flight on this listener, it stops accepting
     * until one completes (0: no cap). shed_counters[cause]: counted sheds (may be NULL). */
    int shed_lag_ms;
    int shed_retry_after_s;
    int max_handshakes;
    cm_counter_t *shed_counters[CM_SHED_NCAUSES];
} cm_http_limits_t;

/** What a body_cap function returns for a route whose body is the listener's JSON
 *  (cm_http_limits_t.max_body_bytes is its cap). */
#define CM_HTTP_BODY_CAP_JSON (SIZE_MAX - 1)

/** A thread-safe count of open connections per client address (a fixed-size cm_addrtab:
 *  when an address finds no slot, its connection is let in uncounted). */
cm_http_addrs_t *cm_http_addrs_new(void);
void cm_http_addrs_free(cm_http_addrs_t *a);
/** Open connections counted for addr right now (tests, metrics). */
int cm_http_addrs_count(cm_http_addrs_t *a, const char *addr);

typedef void (*cm_http_handler_t)(cm_req_t *req, void *arg);

/**
 * Binds addr:port (port 0 = any free port) and serves every request to handler.
 * tls NULL = plain HTTP (only for a trusted hop or tests). The server does not own
 * tls. Returns NULL with a message in err.
 */
cm_http_server_t *cm_http_server_new(struct event_base *base, const char *addr, int port,
                                     cm_tls_ctx_t *tls, const cm_http_limits_t *limits,
                                     cm_http_handler_t handler, void *arg, char *err,
                                     size_t errlen);
/** The bound port. */
int cm_http_server_port(const cm_http_server_t *srv);
/** Open connections right now (TLS servers; plain servers report 0). Any thread. */
int cm_http_server_connections(const cm_http_server_t *srv);
/** Stops accepting new connections (graceful shutdown: in-flight requests finish). */
void cm_http_server_stop_accepting(cm_http_server_t *srv);
/** While set, every reply carries `Connection: close` (draining: clients reconnect, and
 *  through a load balancer reach another server). */
void cm_http_server_set_closing(cm_http_server_t *srv, bool closing);
/** Serves a connected socket (taken over, closed on failure) as if the listener had
 *  accepted it: tests and the fuzz target drive the engine over a socketpair. H1 engine
 *  only. 0, or -1. */
int cm_http_server_serve_fd(cm_http_server_t *srv, int fd);
/** Closes every connection and frees. NULL is fine. */
void cm_http_server_free(cm_http_server_t *srv);

/* --- requests ------------------------------------------------------------ */

/** The request's method. */
/** "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"; NULL for another method. */
const char *cm_http_method_name(cm_http_method_t m);
cm_http_method_t cm_http_method(cm_req_t *req);

/** The request target's path as sent (not decoded), or NULL. Valid until the reply. */
const char *cm_http_uri_path(cm_req_t *req);

/** The request target's query as sent (after '?', not decoded), or NULL when none. */
const char *cm_http_uri_query(cm_req_t *req);

/** The body (not NUL-terminated) and its length; NULL and 0 when empty. Valid until the
 *  reply. */
const char *cm_http_body(cm_req_t *req, size_t *len);

/** Adds a header to the reply (name and value are copied). */
void cm_http_add_header(cm_req_t *req, const char *name, const char *value);

/**
 * Splits the request path into percent-decoded segments stored in buf (bufsize
 * bytes): "/v1/holds/x" → {"v1","holds","x"}. Returns the count, or -1 when the path
 * is too long, has more than maxsegs segments, an empty inner segment, or a segment
 * that decodes to '/' or NUL.
 */
int cm_http_path(cm_req_t *req, char *buf, size_t bufsize, char **segs, int maxsegs);

/** The client's address as text: from the connection's PROXY v2 header when it came
 *  through a proxy_from address, else the socket's peer ("?" when unknown). Valid until
 *  the reply. */
const char *cm_http_peer(cm_req_t *req);

/** A request header (case-insensitive name), or NULL. */
const char *cm_http_header(cm_req_t *req, const char *name);

/** The bearer token of the Authorization header, or NULL; its length in *len. */
const char *cm_http_bearer(cm_req_t *req, size_t *len);

/**
 * Parses the query string into q (caller frees with evhttp_clear_headers).
 * Returns 0, or -1 on a malformed query.
 */
int cm_http_query(cm_req_t *req, struct evkeyvalq *q);

/**
 * Reads the body as a JSON object. On failure it has already answered (413
 * body_too_large, or 400 invalid_request naming the problem) and returns NULL.
 * The body text is also returned in *raw and *rawlen when raw is not NULL (pointer into
 * the request's buffer, valid until the reply).
 */
json_t *cm_http_read_json(cm_req_t *req, size_t max_bytes, const char **raw, size_t *rawlen);

/* --- responses: each sends exactly one reply --- */

/** JSON reply; body is stolen (may be NULL for an empty object). */
void cm_http_send_json(cm_req_t *req, int code, json_t *body);

/** {"error": error, "message": message} plus the fields of extra (stolen; may be NULL). */
void cm_http_send_error(cm_req_t *req, int code, const char *error, const char *message,
                        json_t *extra);

/** A reply with no body (204, 304). */
void cm_http_send_empty(cm_req_t *req, int code);

/** Any body; cacheable false adds Cache-Control: no-store. */
void cm_http_send_body(cm_req_t *req, int code, const char *content_type, const char *body,
                       size_t len, bool cacheable);

/**
 * Writes s as a JSON string — quoted, with '"', '\\' and control characters escaped —
 * into out (NUL-terminated), for answers written without a JSON tree. Returns its
 * length, or -1 when out is too small (6 × strlen(s) + 3 bytes always suffice).
 */
int cm_http_json_string(char *out, size_t size, const char *s);

/** The standard reason phrase of an HTTP status code. */
const char *cm_http_reason(int code);

#endif
