/*
 * Fuzz target: a whole request head (and body) as a client sends it, through libevent's
 * HTTP parser into the request accessors every route of ours uses. The input is sent
 * over a fresh connection to an evhttp listening on a private unix socket (same
 * head/body limits and allowed methods as cm_http_server_new; a unix socket, so ten
 * million connections leave no TIME_WAIT behind); the handler takes the request apart the way
 * the routes do — path segments (cm_http_path), query (cm_http_query), bearer token,
 * cookie, Idempotency-Key, Origin / Sec-Fetch-Site, the JSON body with a size cap — and
 * answers through cm_http_send_*. Properties beyond "no crash, no leak, no hang": the
 * server closes every connection once the client has sent all and half-closed, within
 * a bounded number of loop iterations.
 */
#include "fuzz.h"
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cm_http.h"
#include "cm_parse.h"
#include "cm_req.h"

#define MAX_HEADER_BYTES 8192
#define MAX_BODY_BYTES   16384
#define MAX_INPUT        65536 /* well under a socketpair's buffer: the write never blocks */
#define MAX_ROUNDS       64

static struct event_base *base;
static struct evhttp *http;
static struct sockaddr_un addr;

static void on_request(struct evhttp_request *ev, void *arg)
{
    cm_req_t *req = cm_http_evhttp_req(ev);
    (void)arg;
    char buf[1024], *segs[8];
    int n = cm_http_path(req, buf, sizeof(buf), segs, 8);
    struct evkeyvalq q;
    int qrc = cm_http_query(req, &q);
    if (qrc == 0)
        (void)evhttp_find_header(&q, "from");
    evhttp_clear_headers(&q);
    size_t blen = 0;
    const char *bearer = cm_http_bearer(req, &blen);
    if (bearer != NULL)
        CHECK(blen > 0 && memchr(bearer, '\0', blen) == NULL);
    const char *idem = cm_http_header(req, "Idempotency-Key");
    if (idem != NULL)
        (void)cm_parse_idem_key(idem);
    (void)cm_http_header(req, "Cookie");
    (void)cm_http_header(req, "Origin");
    (void)cm_http_header(req, "Sec-Fetch-Site");
    if (n < 0 || qrc != 0) {
        cm_http_send_error(req, 400, "invalid_request", "bad path or query", NULL);
        return;
    }
    cm_http_method_t m = cm_http_method(req);
    if (m == CM_HTTP_POST || m == CM_HTTP_PUT || m == CM_HTTP_PATCH) {
        json_t *body = cm_http_read_json(req, MAX_BODY_BYTES, NULL, NULL);
        if (body != NULL)
            cm_http_send_json(req, 200, body);
        return;
    }
    cm_http_send_empty(req, n == 0 ? 204 : 404);
}

static char dir_path[64];

static void cleanup(void)
{
    unlink(addr.sun_path);
    rmdir(dir_path);
}

/* One evhttp for the whole run, listening on a unix socket in a private directory. */
static void setup(void)
{
    base = event_base_new();
    http = evhttp_new(base);
    CHECK(base != NULL && http != NULL);
    evhttp_set_gencb(http, on_request, NULL);
    evhttp_set_max_headers_size(http, MAX_HEADER_BYTES);
    evhttp_set_max_body_size(http, 4 * MAX_BODY_BYTES);
    evhttp_set_timeout(http, 5);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                         EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
                                         EVHTTP_REQ_OPTIONS);
    char dir[] = "/tmp/onsale-fuzz-head-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/s", dir);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(lfd >= 0);
    CHECK(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) == 0);
    CHECK(listen(lfd, 64) == 0);
    CHECK(evutil_make_socket_nonblocking(lfd) == 0);
    CHECK(evhttp_accept_socket_with_handle(http, lfd) != NULL);
    snprintf(dir_path, sizeof(dir_path), "%s", dir);
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    if (base == NULL)
        setup();
    int fds[2];
    fds[1] = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fds[1] >= 0);
    CHECK(connect(fds[1], (struct sockaddr *)&addr, sizeof(addr)) == 0);
    CHECK(evutil_make_socket_nonblocking(fds[1]) == 0);
    if (size > 0)
        CHECK(write(fds[1], data, size) == (ssize_t)size);
    shutdown(fds[1], SHUT_WR);

    char out[4096];
    size_t got = 0;
    char first[8] = "";
    int rounds = 0;
    bool closed = false;
    for (; rounds < MAX_ROUNDS && !closed; rounds++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        for (;;) {
            ssize_t r = read(fds[1], out, sizeof(out));
            if (r > 0) {
                if (got < sizeof(first) - 1)
                    memcpy(first + got, out,
                           (size_t)r < sizeof(first) - 1 - got ? (size_t)r
                                                               : sizeof(first) - 1 - got);
                got += (size_t)r;
                continue;
            }
            if (r == 0)
                closed = true; /* evhttp is done with the connection */
            break;
        }
    }
    /* (no status-line check: evhttp answers an HTTP/0.x request line 0.9-style, body only) */
    (void)first;
    CHECK(closed); /* a client that stopped sending is never kept waiting on */
    close(fds[1]);
    return 0;
}
