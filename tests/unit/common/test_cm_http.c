/*
 * Loop tests for cm_http: a real TLS listener on 127.0.0.1:0 with a certificate made
 * at run time, driven by an evhttp client over an OpenSSL bufferevent. Each test runs
 * the loop until its request completes or a hard 5 s timeout — never sleep().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
