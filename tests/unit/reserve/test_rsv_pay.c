/*
 * test_rsv_pay — reserve/rsv_pay.c: URL parsing and answer classification (pure), then
 * the client on a real event loop against a plain-HTTP fixture provider on
 * 127.0.0.1:0: charge / lookup / refund, headers sent, the request deadline, a refused
 * connection, and shutdown with a call in flight. Each loop test runs until its
 * callback fired or a hard 10 s limit (never sleep()).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_err.h"
#include "cm_http.h"
#include "cm_req.h"
#include "rsv_pay.h"

/* --- pure ------------------------------------------------------------------------------ */

static void parse_url_forms(void **state)
{
    rsv_pay_url_t u;
    assert_int_equal(rsv_pay_parse_url("https://127.0.0.1:8445", &u), 0);
    assert_true(u.tls);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 8445);
    assert_string_equal(u.prefix, "");
    assert_int_equal(rsv_pay_parse_url("http://10.0.0.2/psp/", &u), 0);
    assert_false(u.tls);
    assert_int_equal(u.port, 80);
    assert_string_equal(u.prefix, "/psp");
    /* Host names are fine (resolved off the loop by libcurl). */
    assert_int_equal(rsv_pay_parse_url("https://pay.example.com:8443/v2", &u), 0);
    assert_string_equal(u.host, "pay.example.com");
    assert_int_equal(u.port, 8443);
    assert_string_equal(u.prefix, "/v2");
    const char *bad[] = {"ftp://1.2.3.4",         "https://127.0.0.1:0", "https://127.0.0.1:70000",
                         "https://127.0.0.1:12x", "https://:443",        "https://127.0.0.1/a?b",
                         "127.0.0.1:8445",        "https://u:p@host/",   "https://[::1]:443",
                         "https://ho%2est/",      "https://-host/",      "https://host:-1",
                         "https://host:+80",      "https://a.b\\@c/",    "https://host/a%2f"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(rsv_pay_parse_url(bad[i], &u), -1);
}

static rsv_pay_result_t classify(rsv_pay_op_t op, int status, const char *body)
{
    rsv_pay_result_t r;
    memset(&r, 0, sizeof(r));
    rsv_pay_classify(op, status, body, body ? strlen(body) : 0, &r);
    return r;
}

static void parse_list_pages(void **state)
{
    (void)state;
    rsv_pay_page_t pg;
    const char *ok = "{\"object\":\"list\",\"has_more\":true,\"data\":["
                     "{\"id\":\"ch_1\",\"status\":\"succeeded\",\"amount\":12000,\"created\":17,"
                     "\"refunded\":false,\"amount_refunded\":0,\"idempotency_key\":\"k1\","
                     "\"metadata\":{\"checkout\":\"co_a\",\"event\":\"e\"}},"
                     "{\"id\":\"ch_2\",\"status\":\"failed\",\"idempotency_key\":\"co_b\"},"
                     "{\"status\":\"succeeded\"},"
                     "{\"id\":\"ch_3\",\"status\":\"succeeded\",\"refunded\":true}]}";
    assert_int_equal(rsv_pay_parse_list(200, ok, strlen(ok), &pg), 0);
    assert_int_equal(pg.n, 3); /* the entry without an id is skipped */
    assert_true(pg.has_more);
    assert_string_equal(pg.items[0].id, "ch_1");
    assert_string_equal(pg.items[0].checkout, "co_a"); /* metadata wins over the key */
    assert_true(pg.items[0].succeeded);
    assert_false(pg.items[0].refunded);
    assert_int_equal(pg.items[0].amount, 12000);
    assert_int_equal(pg.items[0].created, 17);
    assert_string_equal(pg.items[1].checkout, "co_b");
    assert_false(pg.items[1].succeeded);
    assert_string_equal(pg.items[2].checkout, "");
    assert_true(pg.items[2].refunded);
    rsv_pay_page_clear(&pg);
    assert_int_equal(rsv_pay_parse_list(500, ok, strlen(ok), &pg), -1);
    assert_int_equal(rsv_pay_parse_list(200, "{}", 2, &pg), -1);
    assert_int_equal(rsv_pay_parse_list(200, "[", 1, &pg), -1);
    assert_int_equal(rsv_pay_parse_list(200, NULL, 0, &pg), -1);
    rsv_pay_page_clear(NULL);
}

static void classify_answers(void **state)
{
    rsv_pay_result_t r =
        classify(RSV_PAY_OP_CHARGE, 200, "{\"id\":\"ch_1\",\"status\":\"succeeded\"}");
    assert_int_equal(r.outcome, RSV_PAY_PAID);
    assert_string_equal(r.id, "ch_1");
    r = classify(RSV_PAY_OP_CHARGE, 402,
                 "{\"error\":{\"code\":\"card_declined\",\"charge\":\"ch_2\"}}");
    assert_int_equal(r.outcome, RSV_PAY_DECLINED);
    assert_string_equal(r.id, "ch_2");
    /* Anything not definite is unknown: in progress, server errors, garbage, no answer. */
    assert_int_equal(classify(RSV_PAY_OP_CHARGE, 409, "{}").outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_OP_CHARGE, 500, NULL).outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_OP_CHARGE, 200, "not json").outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_OP_CHARGE, 0, NULL).outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_OP_CHARGE, 404, "{}").outcome, RSV_PAY_UNKNOWN);
    /* Lookup: 404 means no charge; "processing" is not an answer yet. */
    assert_int_equal(classify(RSV_PAY_OP_LOOKUP, 404, "{}").outcome, RSV_PAY_NONE);
    assert_int_equal(
        classify(RSV_PAY_OP_LOOKUP, 200, "{\"id\":\"ch_3\",\"status\":\"processing\"}").outcome,
        RSV_PAY_UNKNOWN);
    r = classify(RSV_PAY_OP_LOOKUP, 200, "{\"id\":\"ch_4\",\"status\":\"failed\"}");
    assert_int_equal(r.outcome, RSV_PAY_DECLINED);
    /* Refund: done now, or done before by someone. */
    r = classify(RSV_PAY_OP_REFUND, 200, "{\"id\":\"re_1\",\"status\":\"succeeded\"}");
    assert_int_equal(r.outcome, RSV_PAY_REFUNDED);
    assert_string_equal(r.id, "re_1");
    r = classify(RSV_PAY_OP_REFUND, 400,
                 "{\"error\":{\"code\":\"charge_already_refunded\",\"refund\":\"re_9\"}}");
    assert_int_equal(r.outcome, RSV_PAY_REFUNDED);
    assert_string_equal(r.id, "re_9");
    assert_int_equal(classify(RSV_PAY_OP_REFUND, 404, "{}").outcome, RSV_PAY_UNKNOWN);
}

/* --- loop fixture ----------------------------------------------------------------------- */

typedef struct fx {
    struct event_base *base;
    cm_http_server_t *srv;
    cm_req_t *held; /* a request the provider never answers (deadline test) */
    char last_key[128];
    char last_auth[128];
    char last_body[512];
    int calls;
    int peer_port[8]; /* the client's port of each request: equal ports = one connection */
    int nreq;
    rsv_pay_result_t res;
    int done;
} fx_t;

static void provider(cm_req_t *req, void *arg)
{
    fx_t *f = arg;
    const char *query = cm_http_uri_query(req);
    char uri[512];
    snprintf(uri, sizeof(uri), "%s%s%s", cm_http_uri_path(req), query ? "?" : "",
             query ? query : "");
    const char *key = cm_http_header(req, "Idempotency-Key");
    const char *auth = cm_http_header(req, "Authorization");
    snprintf(f->last_key, sizeof(f->last_key), "%s", key ? key : "");
    snprintf(f->last_auth, sizeof(f->last_auth), "%s", auth ? auth : "");
    size_t blen = 0;
    const char *sent = cm_http_body(req, &blen);
    snprintf(f->last_body, sizeof(f->last_body), "%.*s", sent ? (int)blen : 0, sent ? sent : "");
    char *peer = NULL;
    ev_uint16_t pport = 0;
    evhttp_connection_get_peer(evhttp_request_get_connection(cm_http_evhttp_of(req)), &peer,
                               &pport);
    if (f->nreq < 8)
        f->peer_port[f->nreq++] = pport;
    if (strncmp(uri, "/biglist", 8) == 0) { /* a valid ledger page past 64 KiB */
        const char *page = "{\"object\":\"list\",\"has_more\":false,\"data\":[{\"id\":\"ch_1\","
                           "\"status\":\"succeeded\",\"amount\":100,\"created\":1}]}";
        size_t n = 100 * 1024, pl = strlen(page);
        char *big = malloc(n);
        memset(big, ' ', n);
        memcpy(big + n - pl, page, pl);
        cm_http_send_body(req, 200, "application/json", big, n, false);
        free(big);
        return;
    }
    if (strncmp(uri, "/big", 4) == 0) {
        size_t n = 100 * 1024;
        char *big = malloc(n);
        memset(big, ' ', n);
        cm_http_send_body(req, 200, "application/json", big, n, false);
        free(big);
        return;
    }
    if (strncmp(uri, "/slow", 5) == 0) {
        f->held = req;
        return;
    }
    if (strstr(uri, "/v1/charges?idempotency_key=none")) {
        cm_http_send_error(req, 404, "resource_missing", "none", NULL);
    } else if (strstr(uri, "/v1/charges")) {
        const char *body = "{\"id\":\"ch_ok\",\"object\":\"charge\",\"status\":\"succeeded\"}";
        cm_http_send_body(req, 200, "application/json", body, strlen(body), false);
    } else if (strstr(uri, "/v1/refunds")) {
        const char *body = "{\"id\":\"re_ok\",\"object\":\"refund\",\"status\":\"succeeded\"}";
        cm_http_send_body(req, 200, "application/json", body, strlen(body), false);
    } else {
        cm_http_send_error(req, 404, "not_found", "no", NULL);
    }
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    f->base = event_base_new();
    cm_http_limits_t lim = {.max_header_bytes = 8192,
                            .max_body_bytes = 65536,
                            .idle_timeout_s = 30,
                            .max_connections = 64};
    char err[256];
    f->srv = cm_http_server_new(f->base, "127.0.0.1", 0, NULL, &lim, provider, f, err, sizeof(err));
    assert_non_null(f->srv);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    if (f->held)
        cm_http_send_empty(f->held, 204);
    cm_http_server_free(f->srv);
    event_base_free(f->base);
    free(f);
    return 0;
}

static void on_result(const rsv_pay_result_t *res, void *arg)
{
    fx_t *f = arg;
    f->res = *res;
    f->done++;
    event_base_loopbreak(f->base);
}

static void run(fx_t *f)
{
    struct timeval limit = {10, 0};
    event_base_loopexit(f->base, &limit);
    event_base_dispatch(f->base);
}

static rsv_pay_t *client_at(fx_t *f, const char *host, const char *prefix, int port, int timeout_ms)
{
    char url[128], err[256];
    snprintf(url, sizeof(url), "http://%s:%d%s", host, port ? port : cm_http_server_port(f->srv),
             prefix);
    rsv_pay_config_t cfg = {url, NULL, "sk_test", 500, timeout_ms};
    rsv_pay_t *p = rsv_pay_new(f->base, &cfg, err, sizeof(err));
    assert_non_null(p);
    return p;
}

static rsv_pay_t *client(fx_t *f, const char *prefix, int port, int timeout_ms)
{
    return client_at(f, "127.0.0.1", prefix, port, timeout_ms);
}

static void charge_lookup_refund(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client(f, "", 0, 2000);
    assert_int_equal(rsv_pay_charge(p, "co_1", 1200, "EUR", "tok_visa", "ev1", NULL, on_result, f),
                     0);
    assert_int_equal(f->done, 0); /* never called from inside the call */
    run(f);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->res.outcome, RSV_PAY_PAID);
    assert_string_equal(f->res.id, "ch_ok");
    assert_null(f->res.err);
    assert_string_equal(f->last_key, "co_1");
    assert_string_equal(f->last_auth, "Bearer sk_test");
    assert_null(strstr(f->last_body, "request_id")); /* none given: none sent */

    /* The checkout's request id goes in the charge's metadata. */
    assert_int_equal(
        rsv_pay_charge(p, "co_1r", 1200, "EUR", "tok_visa", "ev1", "fan-rid.7", on_result, f), 0);
    run(f);
    assert_int_equal(f->res.outcome, RSV_PAY_PAID);
    json_t *sent = json_loads(f->last_body, 0, NULL);
    assert_non_null(sent);
    json_t *md = json_object_get(sent, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "request_id")), "fan-rid.7");
    assert_string_equal(json_string_value(json_object_get(md, "checkout")), "co_1r");
    json_decref(sent);

    assert_int_equal(rsv_pay_lookup(p, "none", on_result, f), 0);
    run(f);
    assert_int_equal(f->res.outcome, RSV_PAY_NONE);

    assert_int_equal(rsv_pay_refund(p, "rf_co_1", "ch_ok", 0, on_result, f), 0);
    run(f);
    assert_int_equal(f->res.outcome, RSV_PAY_REFUNDED);
    assert_string_equal(f->res.id, "re_ok");
    assert_string_equal(f->last_key, "rf_co_1");
    assert_int_equal(rsv_pay_inflight(p), 0);
    rsv_pay_free(p);
}

/* Three calls in a row travel over one kept-alive connection (the provider sees one client
 * port), and a provider named by a host name is found without blocking the loop. */
static void calls_reuse_one_connection_by_host_name(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client_at(f, "localhost", "", 0, 2000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rsv_pay_lookup(p, "none", on_result, f), 0);
        run(f);
        assert_int_equal(f->done, i + 1);
        assert_int_equal(f->res.outcome, RSV_PAY_NONE);
    }
    assert_int_equal(f->nreq, 3);
    assert_int_not_equal(f->peer_port[0], 0);
    assert_int_equal(f->peer_port[1], f->peer_port[0]);
    assert_int_equal(f->peer_port[2], f->peer_port[0]);
    rsv_pay_free(p);
}

/* An answer past the size bound is abandoned: UNKNOWN, not a partial parse. */
static void oversized_answer_gives_unknown(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client(f, "/big", 0, 2000);
    assert_int_equal(rsv_pay_charge(p, "co_5", 100, "EUR", NULL, "ev1", NULL, on_result, f), 0);
    run(f);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->res.outcome, RSV_PAY_UNKNOWN);
    assert_ptr_equal(f->res.err, cm_err_protocol);
    rsv_pay_free(p);
}

/* A ledger page may be larger than a charge's bound (rsv_ledger asks for 200 charges). */
static void a_ledger_page_past_64k_is_listed(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client(f, "/biglist", 0, 2000);
    assert_int_equal(rsv_pay_list(p, 0, NULL, 200, on_result, f), 0);
    run(f);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->res.outcome, RSV_PAY_LISTED);
    rsv_pay_free(p);
}

static void deadline_gives_unknown(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client(f, "/slow", 0, 300);
    assert_int_equal(rsv_pay_charge(p, "co_2", 100, "EUR", NULL, "ev1", NULL, on_result, f), 0);
    run(f);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->res.outcome, RSV_PAY_UNKNOWN);
    assert_ptr_equal(f->res.err, cm_err_timeout);
    assert_true(f->res.seconds >= 0.25);
    rsv_pay_free(p);
}

static void refused_connection_gives_unknown(void **state)
{
    fx_t *f = *state;
    /* A port nobody listens on: bind, read it, close. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    assert_int_equal(bind(s, (struct sockaddr *)&sin, sizeof(sin)), 0);
    socklen_t sl = sizeof(sin);
    getsockname(s, (struct sockaddr *)&sin, &sl);
    int port = ntohs(sin.sin_port);
    close(s);
    rsv_pay_t *p = client(f, "", port, 1000);
    assert_int_equal(rsv_pay_charge(p, "co_3", 100, "EUR", NULL, "ev1", NULL, on_result, f), 0);
    run(f);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->res.outcome, RSV_PAY_UNKNOWN);
    assert_non_null(f->res.err);
    rsv_pay_free(p);
}

static void free_with_call_in_flight(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client(f, "/slow", 0, 5000);
    assert_int_equal(rsv_pay_charge(p, "co_4", 100, "EUR", NULL, "ev1", NULL, on_result, f), 0);
    rsv_pay_free(p);
    assert_int_equal(f->done, 1);
    assert_ptr_equal(f->res.err, cm_err_shutdown);
    assert_int_equal(f->res.outcome, RSV_PAY_UNKNOWN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_url_forms),
        cmocka_unit_test(classify_answers),
        cmocka_unit_test(parse_list_pages),
        cmocka_unit_test_setup_teardown(charge_lookup_refund, setup, teardown),
        cmocka_unit_test_setup_teardown(calls_reuse_one_connection_by_host_name, setup, teardown),
        cmocka_unit_test_setup_teardown(oversized_answer_gives_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(a_ledger_page_past_64k_is_listed, setup, teardown),
        cmocka_unit_test_setup_teardown(deadline_gives_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(refused_connection_gives_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(free_with_call_in_flight, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
