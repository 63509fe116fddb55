/*
 * Fuzz target: bytes a client sends, through cm_http's own HTTP/1.1 engine (cm_h1) into
 * the request accessors the routes use, over a socketpair (no port, no TIME_WAIT: ten
 * million connections leave nothing behind). The engine runs with small limits (1 KiB
 * head, per-route body caps: /join 0 bytes, /json max_body_bytes (64: the
 * CM_HTTP_BODY_CAP_JSON answer), else 256) and a handler that takes the
 * request apart the way the routes do — path segments, query, bearer, headers, the JSON
 * body — and answers at once, or later from a zero-timeout timer ("/later/…"), or not
 * before the client has gone ("/late/…" answers after the connection closed). The pure
 * parser alone is fuzz_h1 (much faster per input).
 * Properties beyond "no crash, no leak, no hang": the server closes every connection
 * once the client has sent all and half-closed, within a bounded number of loop
 * iterations, and whatever it wrote starts with "HTTP/1.1 ".
 */
#include "fuzz.h"
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_http.h"
#include "cm_parse.h"

#define MAX_INPUT  (16 * 1024)
#define MAX_ROUNDS 200

static struct event_base *base;
static cm_http_server_t *srv;
static cm_req_t *late; /* held until its connection is gone */
static struct event *later_ev;
static cm_req_t *later;

static size_t body_cap(cm_http_method_t m, const char *path, const char *content_type)
{
    (void)content_type;
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, "/join") == 0)
        return 0;
    if (n >= 5 && strcmp(path + n - 5, "/json") == 0)
        return CM_HTTP_BODY_CAP_JSON;
    return 256;
}

static void answer(cm_req_t *req)
{
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
    (void)cm_http_header(req, "Cookie");
    (void)cm_http_peer(req);
    cm_http_add_header(req, "X-Fuzz", "1");
    if (n < 0 || qrc != 0) {
        cm_http_send_error(req, 400, "invalid_request", "bad path or query", NULL);
        return;
    }
    cm_http_method_t m = cm_http_method(req);
    if (m == CM_HTTP_POST || m == CM_HTTP_PUT || m == CM_HTTP_PATCH) {
        json_t *body = cm_http_read_json(req, 200, NULL, NULL);
        if (body != NULL)
            cm_http_send_json(req, 200, body);
        return;
    }
    cm_http_send_empty(req, n == 0 ? 204 : 404);
}

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    cm_req_t *req = later;
    later = NULL;
    answer(req);
}

static void handler(cm_req_t *req, void *arg)
{
    const char *path = cm_http_uri_path(req);
    if (strncmp(path, "/late/", 6) == 0 && late == NULL) {
        late = req;
        return;
    }
    if (strncmp(path, "/later/", 7) == 0 && later == NULL) {
        later = req;
        struct timeval zero = {0, 0};
        evtimer_add(later_ev, &zero);
        return;
    }
    answer(req);
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN); /* as cm_server does: a write to a gone client is an error */
    base = event_base_new();
    CHECK(base != NULL);
    later_ev = evtimer_new(base, on_later, NULL);
    cm_http_limits_t lim = {
        .max_header_bytes = 1024,
        .max_body_bytes = 64,
        .idle_timeout_s = 5,
        .max_connections = 16,
        .engine = CM_HTTP_ENGINE_H1,
        .body_cap = body_cap,
    };
    char err[256];
    srv = cm_http_server_new(base, "127.0.0.1", 0, NULL, &lim, handler, NULL, err, sizeof(err));
    CHECK(srv != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    if (base == NULL)
        setup();
    int fds[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    CHECK(cm_http_server_serve_fd(srv, fds[0]) == 0);
    if (size > 0)
        CHECK(write(fds[1], data, size) == (ssize_t)size);
    shutdown(fds[1], SHUT_WR);
    CHECK(evutil_make_socket_nonblocking(fds[1]) == 0);

    char out[4096], first[10] = "";
    size_t got = 0;
    bool closed = false;
    for (int rounds = 0; rounds < MAX_ROUNDS && !closed; rounds++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        for (;;) {
            ssize_t r = read(fds[1], out, sizeof(out));
            if (r > 0) {
                for (ssize_t i = 0; i < r && got + (size_t)i < sizeof(first) - 1; i++)
                    first[got + (size_t)i] = out[i];
                got += (size_t)r;
                continue;
            }
            if (r == 0)
                closed = true;
            break;
        }
        if (late != NULL && rounds == 2) { /* a held request: its client goes away */
            close(fds[1]);
            fds[1] = -1;
            for (int i = 0; i < 4; i++)
                event_base_loop(base, EVLOOP_NONBLOCK);
            cm_http_send_empty(late, 204); /* answered after the client left */
            late = NULL;
            closed = true;
        }
    }
    CHECK(closed);
    CHECK(late == NULL);
    if (got > 0)
        CHECK(strncmp(first, "HTTP/1.1 ", got < 9 ? got : 9) == 0);
    if (fds[1] >= 0)
        close(fds[1]);
    return 0;
}
