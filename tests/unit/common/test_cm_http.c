/*
 * Loop tests for cm_http: a real TLS listener on 127.0.0.1:0 with a certificate made
 * at run time, driven by an evhttp client over an OpenSSL bufferevent. Each test runs
 * the loop until its request completes or a hard 5 s timeout — never sleep(). The h1
 * engine's write path is driven by a blocking OpenSSL client on a thread of its own (the
 * server's loop runs on the test's thread), so the test can look at the client's socket
 * while the handler is still on the stack.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "cm_http.h"
#include "cm_tls.h"

typedef struct fixture {
    struct event_base *base;
    cm_tls_ctx_t *server_tls;
    SSL_CTX *client_tls;
    cm_http_server_t *srv;
    char cert_path[64], key_path[64];
    /* the last response */
    int status;
    char body[4096];
    char content_type[64];
    char cache_control[64];
} fixture_t;

/* Handler under test: a few routes exercising the helpers. */
static void handler(cm_req_t *req, void *arg)
{
    char buf[256];
    char *segs[4];
    int n = cm_http_path(req, buf, sizeof(buf), segs, 4);
    if (n < 0) {
        cm_http_send_error(req, 400, "invalid_request", "malformed path", NULL);
        return;
    }
    if (n == 1 && strcmp(segs[0], "json") == 0) {
        cm_http_send_json(req, 200, json_pack("{s:b}", "ok", 1));
    } else if (n == 1 && strcmp(segs[0], "echo") == 0) {
        json_t *doc = cm_http_read_json(req, 100, NULL, NULL);
        if (doc)
            cm_http_send_json(req, 200, doc);
    } else if (n >= 1 && strcmp(segs[0], "segs") == 0) {
        json_t *arr = json_array();
        for (int i = 1; i < n; i++)
            json_array_append_new(arr, json_string(segs[i]));
        cm_http_send_json(req, 200, json_pack("{s:o}", "segs", arr));
    } else if (n == 1 && strcmp(segs[0], "bearer") == 0) {
        size_t len = 0;
        const char *t = cm_http_bearer(req, &len);
        cm_http_send_json(req, 200, json_pack("{s:s#}", "token", t ? t : "", (int)len));
    } else {
        cm_http_send_error(req, 404, "not_found", "no such endpoint", NULL);
    }
}

static void make_cert(fixture_t *f)
{
    EVP_PKEY *pkey = EVP_EC_gen("P-256");
    assert_non_null(pkey);
    X509 *x = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, pkey);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1", -1, -1,
                               0);
    X509_set_issuer_name(x, name);
    assert_true(X509_sign(x, pkey, EVP_sha256()) > 0);
    snprintf(f->cert_path, sizeof(f->cert_path), "/tmp/cm_http_cert_%d.pem", (int)getpid());
    snprintf(f->key_path, sizeof(f->key_path), "/tmp/cm_http_key_%d.pem", (int)getpid());
    FILE *fp = fopen(f->cert_path, "w");
    PEM_write_X509(fp, x);
    fclose(fp);
    fp = fopen(f->key_path, "w");
    PEM_write_PrivateKey(fp, pkey, NULL, NULL, 0, NULL, NULL);
    fclose(fp);
    assert_int_equal(chmod(f->key_path, 0600), 0); /* a private key is owner-only */
    X509_free(x);
    EVP_PKEY_free(pkey);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    make_cert(f);
    char err[256];
    f->server_tls = cm_tls_server_new(f->cert_path, f->key_path, err, sizeof(err));
    assert_non_null(f->server_tls);
    f->client_tls = SSL_CTX_new(TLS_client_method());
    f->base = event_base_new();
    cm_http_limits_t lim = {.max_header_bytes = 8192,
                            .max_body_bytes = 100,
                            .idle_timeout_s = 5,
                            .max_connections = 64};
    f->srv = cm_http_server_new(f->base, "127.0.0.1", 0, f->server_tls, &lim, handler, f, err,
                                sizeof(err));
    assert_non_null(f->srv);
    assert_true(cm_http_server_port(f->srv) > 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    cm_http_server_free(f->srv);
    event_base_free(f->base);
    SSL_CTX_free(f->client_tls);
    cm_tls_free(f->server_tls);
    unlink(f->cert_path);
    unlink(f->key_path);
    free(f);
    return 0;
}

static void on_response(struct evhttp_request *req, void *arg)
{
    fixture_t *f = arg;
    f->status = req ? evhttp_request_get_response_code(req) : -1;
    f->body[0] = '\0';
    if (req) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        if (n >= sizeof(f->body))
            n = sizeof(f->body) - 1;
        evbuffer_remove(in, f->body, n);
        f->body[n] = '\0';
        struct evkeyvalq *h = evhttp_request_get_input_headers(req);
        const char *ct = evhttp_find_header(h, "Content-Type");
        const char *cc = evhttp_find_header(h, "Cache-Control");
        snprintf(f->content_type, sizeof(f->content_type), "%s", ct ? ct : "");
        snprintf(f->cache_control, sizeof(f->cache_control), "%s", cc ? cc : "");
    }
    event_base_loopexit(f->base, NULL);
}

/* Sends one request over a fresh TLS connection and runs the loop until the answer. */
static void request(fixture_t *f, enum evhttp_cmd_type method, const char *path, const char *body,
                    const char *authz)
{
    f->status = 0;
    SSL *ssl = SSL_new(f->client_tls);
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        f->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
    struct evhttp_connection *conn = evhttp_connection_base_bufferevent_new(
        f->base, NULL, bev, "127.0.0.1", (unsigned short)cm_http_server_port(f->srv));
    struct evhttp_request *req = evhttp_request_new(on_response, f);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", "127.0.0.1");
    if (authz)
        evhttp_add_header(h, "Authorization", authz);
    if (body)
        evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    assert_int_equal(evhttp_make_request(conn, req, method, path), 0);
    struct timeval hard = {5, 0};
    event_base_loopexit(f->base, &hard);
    event_base_dispatch(f->base);
    evhttp_connection_free(conn);
    assert_int_not_equal(f->status, 0);
}

static void json_reply_is_uncacheable_json(void **state)
{
    fixture_t *f = *state;
    request(f, EVHTTP_REQ_GET, "/json", NULL, NULL);
    assert_int_equal(f->status, 200);
    assert_string_equal(f->body, "{\"ok\":true}");
    assert_string_equal(f->content_type, "application/json");
    assert_string_equal(f->cache_control, "no-store");
}

static void malformed_json_is_a_json_400(void **state)
{
    fixture_t *f = *state;
    request(f, EVHTTP_REQ_POST, "/echo", "{\"a\":", NULL);
    assert_int_equal(f->status, 400);
    assert_non_null(strstr(f->body, "\"error\":\"invalid_request\""));
    request(f, EVHTTP_REQ_POST, "/echo", "[1,2]", NULL);
    assert_int_equal(f->status, 400);
    assert_non_null(strstr(f->body, "must be a JSON object"));
    request(f, EVHTTP_REQ_POST, "/echo", "{\"a\":1,\"a\":2}", NULL);
    assert_int_equal(f->status, 400);
}

static void body_over_the_limit_is_a_json_413(void **state)
{
    fixture_t *f = *state;
    char big[300];
    memset(big, ' ', sizeof(big));
    big[0] = '{';
    big[sizeof(big) - 2] = '}';
    big[sizeof(big) - 1] = '\0';
    request(f, EVHTTP_REQ_POST, "/echo", big, NULL);
    assert_int_equal(f->status, 413);
    assert_non_null(strstr(f->body, "\"error\":\"body_too_large\""));
    request(f, EVHTTP_REQ_POST, "/echo", "{\"small\":true}", NULL);
    assert_int_equal(f->status, 200);
    assert_string_equal(f->body, "{\"small\":true}");
}

static void path_segments_are_decoded_and_checked(void **state)
{
    fixture_t *f = *state;
    request(f, EVHTTP_REQ_GET, "/segs/a%41/b.c-d_e", NULL, NULL);
    assert_int_equal(f->status, 200);
    assert_string_equal(f->body, "{\"segs\":[\"aA\",\"b.c-d_e\"]}");
    request(f, EVHTTP_REQ_GET, "/segs/a%2Fb", NULL, NULL);
    assert_int_equal(f->status, 400);
    request(f, EVHTTP_REQ_GET, "/segs/a%00b", NULL, NULL);
    assert_int_equal(f->status, 400);
    request(f, EVHTTP_REQ_GET, "/segs//b", NULL, NULL);
    assert_int_equal(f->status, 400);
    request(f, EVHTTP_REQ_GET, "/segs/%zz", NULL, NULL);
    assert_int_equal(f->status, 400);
    request(f, EVHTTP_REQ_GET, "/segs/1/2/3/4/5", NULL, NULL);
    assert_int_equal(f->status, 400);
    request(f, EVHTTP_REQ_GET, "/nowhere", NULL, NULL);
    assert_int_equal(f->status, 404);
    assert_non_null(strstr(f->body, "\"error\":\"not_found\""));
}

static void bearer_token_is_extracted(void **state)
{
    fixture_t *f = *state;
    request(f, EVHTTP_REQ_GET, "/bearer", NULL, "Bearer abc.def.ghi");
    assert_string_equal(f->body, "{\"token\":\"abc.def.ghi\"}");
    request(f, EVHTTP_REQ_GET, "/bearer", NULL, "Basic abc");
    assert_string_equal(f->body, "{\"token\":\"\"}");
}

/* The TLS private key is a secret file: readable by group or others, it is refused at
 * start and on reload (the old pair keeps serving), the message naming file and mode. */
/* --- the h1 engine's write path ------------------------------------------------------- */

#define BIG_BODY 8000 /* within the engine's stack-built answers: one TLS record each */

typedef struct h1_fixture {
    fixture_t f;
    int client_fd;      /* the client's socket, set before its first request */
    int go[2];          /* the handler → the client: read now */
    int done[2];        /* the client → the loop: finished */
    int queued_at_send; /* bytes the answer's send added to the client's receive queue */
    int npipelined;     /* requests the client sends at once (big answers) */
    int rcvbuf;         /* the client's SO_RCVBUF and the server's SO_SNDBUF (0: default) */
    int listen_fd;      /* rcvbuf set: the test's own listener, its socket served by srv */
    int answers_ok;     /* complete, in-order answers the client read */
    int big_answered;   /* big answers sent by the handler */
    bool resume;        /* the client: Connection: close, then a second connection */
    int reused;         /* the second connection resumed the first one's session */
    struct event *done_ev;
} h1_fixture_t;

static void h1_handler(cm_req_t *req, void *arg)
{
    h1_fixture_t *h = arg;
    const char *path = cm_http_uri_path(req);
    if (strncmp(path, "/big/", 5) == 0) { /* BIG_BODY bytes of the letter after /big/ */
        static char body[BIG_BODY];
        memset(body, path[5], sizeof(body));
        cm_http_send_body(req, 200, "text/plain", body, sizeof(body), false);
        if (++h->big_answered == h->npipelined) /* all answered: the client may read */
            assert_int_equal(write(h->go[1], "g", 1), 1);
        return;
    }
    if (strcmp(path, "/close") == 0) {
        cm_http_send_body(req, 200, "text/plain", "bye", 3, false);
        return;
    }
    int before = 0; /* session tickets may wait there already */
    assert_int_equal(ioctl(h->client_fd, FIONREAD, &before), 0);
    cm_http_send_body(req, 200, "text/plain", "small", 5, false);
    /* the answer is on the client's socket already, before this loop iteration ends */
    assert_int_equal(ioctl(h->client_fd, FIONREAD, &h->queued_at_send), 0);
    h->queued_at_send -= before;
    assert_int_equal(write(h->go[1], "g", 1), 1);
}

static void on_client_done(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopexit(arg, NULL);
}

static int setup_h1(void **state)
{
    h1_fixture_t *h = calloc(1, sizeof(*h));
    fixture_t *f = &h->f;
    make_cert(f);
    char err[256];
    f->server_tls = cm_tls_server_new(f->cert_path, f->key_path, err, sizeof(err));
    assert_non_null(f->server_tls);
    f->client_tls = SSL_CTX_new(TLS_client_method());
    f->base = event_base_new();
    cm_http_limits_t lim = {.max_header_bytes = 8192,
                            .max_body_bytes = 100,
                            .idle_timeout_s = 5,
                            .max_connections = 64,
                            .engine = CM_HTTP_ENGINE_H1};
    f->srv = cm_http_server_new(f->base, "127.0.0.1", 0, f->server_tls, &lim, h1_handler, h, err,
                                sizeof(err));
    assert_non_null(f->srv);
    assert_int_equal(pipe(h->go), 0);
    assert_int_equal(pipe(h->done), 0);
    h->client_fd = -1;
    h->done_ev = event_new(f->base, h->done[0], EV_READ, on_client_done, f->base);
    event_add(h->done_ev, NULL);
    *state = h;
    return 0;
}

static int teardown_h1(void **state)
{
    h1_fixture_t *h = *state;
    event_free(h->done_ev);
    close(h->go[0]);
    close(h->go[1]);
    close(h->done[0]);
    close(h->done[1]);
    cm_http_server_free(h->f.srv);
    event_base_free(h->f.base);
    SSL_CTX_free(h->f.client_tls);
    cm_tls_free(h->f.server_tls);
    unlink(h->f.cert_path);
    unlink(h->f.key_path);
    free(h);
    return 0;
}

/* Reads one answer (head + Content-Length body) from ssl into buf; its body length. */
static int read_answer(SSL *ssl, char *buf, size_t size, char **body)
{
    size_t got = 0;
    for (;;) {
        buf[got] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            const char *cl = strstr(buf, "Content-Length: ");
            if (cl == NULL || cl > end)
                return -1;
            size_t want = (size_t)(end + 4 - buf) + (size_t)atoi(cl + 16);
            if (got >= want) {
                *body = end + 4;
                return atoi(cl + 16);
            }
        }
        if (got + 1 >= size)
            return -1;
        /* one byte at a time past a head: never read into the next pipelined answer */
        int n = SSL_read(ssl, buf + got, 1);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
}

/* One connection: a request with Connection: close, its answer, then the server's close;
 * the session to resume (or NULL). reused: whether this one resumed `session`. */
static SSL_SESSION *close_once(h1_fixture_t *h, SSL_SESSION *session, int *reused)
{
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)cm_http_server_port(h->f.srv))};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    SSL *ssl = SSL_new(h->f.client_tls);
    SSL_SESSION *got = NULL;
    char buf[1024], *body;
    const char *rq = "GET /close HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (session != NULL)
        SSL_set_session(ssl, session);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || !SSL_set_fd(ssl, fd) ||
        SSL_connect(ssl) != 1 || SSL_write(ssl, rq, (int)strlen(rq)) <= 0 ||
        read_answer(ssl, buf, sizeof(buf), &body) != 3)
        goto out;
    while (SSL_read(ssl, buf, sizeof(buf)) > 0) /* to the server's close */
        ;
    *reused = SSL_session_reused(ssl);
    got = SSL_get1_session(ssl);
    SSL_shutdown(ssl); /* a client freeing its SSL without one spoils its own session */
out:
    SSL_free(ssl);
    close(fd);
    return got;
}

static void *h1_client(void *arg)
{
    h1_fixture_t *h = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (h->rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &h->rcvbuf, sizeof(h->rcvbuf));
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)cm_http_server_port(h->f.srv))};
    socklen_t slen = sizeof(sin);
    if (h->listen_fd >= 0)
        getsockname(h->listen_fd, (struct sockaddr *)&sin, &slen);
    else
        inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    if (h->resume) {
        int first = -1;
        SSL_SESSION *sess = close_once(h, NULL, &first);
        if (sess != NULL && first == 0) {
            SSL_SESSION_free(close_once(h, sess, &h->reused));
            h->answers_ok = 2;
        }
        SSL_SESSION_free(sess);
        close(fd);
        ssize_t w = write(h->done[1], "d", 1);
        (void)w;
        return NULL;
    }
    SSL *ssl = SSL_new(h->f.client_tls);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || !SSL_set_fd(ssl, fd) ||
        SSL_connect(ssl) != 1)
        goto out;
    char buf[BIG_BODY + 1024], *body;
    /* A TLS 1.3 server sends its session tickets after the handshake: read them (and
     * the small answer) only once the handler said so, so the queue it measured holds
     * the answer's record and nothing of ours was consumed. */
    h->client_fd = fd;
    if (h->npipelined == 0) {
        const char *rq = "GET /small HTTP/1.1\r\nHost: x\r\n\r\n";
        if (SSL_write(ssl, rq, (int)strlen(rq)) <= 0)
            goto out;
        char g;
        if (read(h->go[0], &g, 1) != 1)
            goto out;
        if (read_answer(ssl, buf, sizeof(buf), &body) == 5 && memcmp(body, "small", 5) == 0)
            h->answers_ok++;
        goto out;
    }
    /* every request at once, none of the answers read until all are sent */
    char rqs[64 * 40];
    size_t o = 0;
    for (int i = 0; i < h->npipelined; i++)
        o += (size_t)snprintf(rqs + o, sizeof(rqs) - o, "GET /big/%c HTTP/1.1\r\nHost: x\r\n\r\n",
                              'a' + i % 26);
    if (SSL_write(ssl, rqs, (int)o) <= 0)
        goto out;
    char g;
    if (read(h->go[0], &g, 1) != 1) /* the socket is full: later answers wait behind */
        goto out;
    for (int i = 0; i < h->npipelined; i++) {
        if (read_answer(ssl, buf, sizeof(buf), &body) != BIG_BODY)
            break;
        int same = 1;
        for (int k = 0; k < BIG_BODY; k++)
            same &= body[k] == 'a' + i % 26;
        if (!same)
            break;
        h->answers_ok++;
    }
out:
    SSL_free(ssl);
    close(fd);
    ssize_t w = write(h->done[1], "d", 1);
    (void)w;
    return NULL;
}

static void h1_run_client(h1_fixture_t *h)
{
    pthread_t t;
    h->listen_fd = -1;
    if (h->rcvbuf > 0) { /* small socket buffers both ways: the server's taken over */
        struct sockaddr_in sin = {.sin_family = AF_INET};
        inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
        h->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_int_equal(bind(h->listen_fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
        assert_int_equal(listen(h->listen_fd, 1), 0);
    }
    assert_int_equal(pthread_create(&t, NULL, h1_client, h), 0);
    if (h->listen_fd >= 0) {
        int fd = accept(h->listen_fd, NULL, NULL);
        assert_true(fd >= 0);
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &h->rcvbuf, sizeof(h->rcvbuf)), 0);
        assert_int_equal(cm_http_server_serve_fd(h->f.srv, fd), 0);
        close(h->listen_fd);
    }
    struct timeval hard = {10, 0};
    event_base_loopexit(h->f.base, &hard);
    event_base_dispatch(h->f.base);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* An answer the connection can take is written by the handler's send itself (as nginx
 * does), not left for a write event armed and disarmed per answer: it is on the client's
 * socket before the loop runs again. */
static void h1_answer_is_written_at_once(void **state)
{
    h1_fixture_t *h = *state;
    h1_run_client(h);
    assert_int_equal(h->answers_ok, 1);
    assert_true(h->queued_at_send > 0);
}

/* Answers a client does not read yet: they fill its socket until a TLS record cannot go
 * out whole (OpenSSL keeps it; the bufferevent finishes it from its own copy), and the
 * pipelined answers behind it queue — every answer arrives whole and in order once the
 * client reads. 20 × 8 kB: more than the socket takes, less than the output watermark. */
static void h1_answers_to_a_slow_reader_arrive_whole(void **state)
{
    h1_fixture_t *h = *state;
    h->npipelined = 20;
    h->rcvbuf = 2048;
    h1_run_client(h);
    assert_int_equal(h->answers_ok, 20);
}

/* A connection the server closes after its answer (Connection: close) ends with a TLS
 * close_notify, so its session stays in the server's cache and the ticket the client got
 * resumes it (a bufferevent frees its SSL without one, and OpenSSL drops the session of
 * a connection closed that way). */
static void h1_session_of_a_closed_connection_resumes(void **state)
{
    h1_fixture_t *h = *state;
    h->resume = true;
    h1_run_client(h);
    assert_int_equal(h->answers_ok, 2);
    assert_int_equal(h->reused, 1);
}

static void group_readable_tls_key_is_refused(void **state)
{
    fixture_t *f = *state;
    char err[512];
    assert_int_equal(chmod(f->key_path, 0640), 0);
    assert_null(cm_tls_server_new(f->cert_path, f->key_path, err, sizeof(err)));
    assert_non_null(strstr(err, f->key_path));
    assert_non_null(strstr(err, "mode 0640"));
    assert_int_not_equal(cm_tls_server_reload(f->server_tls, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "tls_key"));
    assert_int_equal(chmod(f->key_path, 0604), 0);
    assert_null(cm_tls_server_new(f->cert_path, f->key_path, err, sizeof(err)));
    assert_non_null(strstr(err, "mode 0604"));
    assert_int_equal(chmod(f->key_path, 0600), 0);
    assert_int_equal(cm_tls_server_reload(f->server_tls, err, sizeof(err)), 0);
    request(f, EVHTTP_REQ_GET, "/bearer", NULL, "Bearer abc.def.ghi");
    assert_string_equal(f->body, "{\"token\":\"abc.def.ghi\"}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(json_reply_is_uncacheable_json, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_json_is_a_json_400, setup, teardown),
        cmocka_unit_test_setup_teardown(body_over_the_limit_is_a_json_413, setup, teardown),
        cmocka_unit_test_setup_teardown(path_segments_are_decoded_and_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(bearer_token_is_extracted, setup, teardown),
        cmocka_unit_test_setup_teardown(group_readable_tls_key_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(h1_answer_is_written_at_once, setup_h1, teardown_h1),
        cmocka_unit_test_setup_teardown(h1_answers_to_a_slow_reader_arrive_whole, setup_h1,
                                        teardown_h1),
        cmocka_unit_test_setup_teardown(h1_session_of_a_closed_connection_resumes, setup_h1,
                                        teardown_h1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
