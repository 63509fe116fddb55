/*
 * cm_req — the backend side of cm_http's request abstraction (cm_req_t).
 *
 * Handlers see a cm_req_t only through cm_http.h (method, path, query, headers, peer,
 * body, response headers, cm_http_send_*). A transport that serves requests — evhttp
 * in cm_http_evhttp.c, our own HTTP/1.1 engine in cm_http_h1.c, a test's fake — embeds
 * struct cm_req first in its own request struct and fills in ops. Contract of every
 * backend:
 *   - the request's strings (path, query, header values, peer, body) stay valid until
 *     the reply is sent;
 *   - send() is called exactly once per request and ends it: the backend may free the
 *     cm_req_t from inside send(), so nothing touches it afterwards. A reply to a client
 *     that went away meanwhile is accepted and dropped;
 *   - everything happens on the thread of the loop that owns the connection.
 */
#ifndef CM_REQ_H
#define CM_REQ_H

#include <stdbool.h>
#include <stddef.h>

#include "cm_access.h"
#include "cm_http.h"

typedef struct cm_req_ops {
    cm_http_method_t (*method)(cm_req_t *r);
    /** The request target's path, not decoded ("/v1/x%20y"); NULL when there is none. */
    const char *(*path)(cm_req_t *r);
    /** The query after '?', not decoded; NULL when the target has none. */
    const char *(*query)(cm_req_t *r);
    /** A request header (case-insensitive name; the first of several), or NULL. */
    const char *(*header)(cm_req_t *r, const char *name);
    const char *(*peer)(cm_req_t *r);
    /** The whole body, contiguous (not NUL-terminated); NULL with *len 0 when none. */
    const char *(*body)(cm_req_t *r, size_t *len);
    /** Adds a response header (copied). */
    void (*add_header)(cm_req_t *r, const char *name, const char *value);
    /** Whether a response header of that name (case-insensitive) was added so far. */
    bool (*has_out_header)(cm_req_t *r, const char *name);
    /** Sends the reply: status code and body (NULL: no body at all, as 204/304 have);
     *  ends the request. */
    void (*send)(cm_req_t *r, int code, const char *body, size_t len);
} cm_req_ops_t;

struct cm_req {
    const cm_req_ops_t *ops;
    cm_access_t acc; /* set by cm_http when the request reaches a handler (cm_access) */
};

struct evhttp_request;

/** Wraps a request of an evhttp the caller runs itself (the fuzz target): the wrapper is
 *  freed by its reply, as cm_http's own are. */
cm_req_t *cm_http_evhttp_req(struct evhttp_request *ev);

/** The evhttp request under r when evhttp serves it, else NULL (tests that look at the
 *  connection itself). */
struct evhttp_request *cm_http_evhttp_of(cm_req_t *r);

#endif
