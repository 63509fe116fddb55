/*
 * test_rsv_pay — reserve/rsv_pay.c and its Stripe adapter rsv_pay_stripe.c: URL parsing,
 * form bodies and answer classification (pure), then the client on a real event loop
 * against a plain-HTTP fixture provider on 127.0.0.1:0: charge (create + confirm) /
 * lookup (create replayed + retrieve) / refund, headers sent, the request deadline, a
 * refused connection, and shutdown with a call in flight. Each loop test runs until its
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
#include "rsv_pay_stripe.h"

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

static rsv_pay_result_t classify_r(rsv_pay_stripe_op_t op, int status, const char *body,
                                   bool replayed)
{
    rsv_pay_result_t r;
    memset(&r, 0, sizeof(r));
    rsv_pay_stripe_classify(op, status, body, body ? strlen(body) : 0, replayed, &r);
    return r;
}

static rsv_pay_result_t classify(rsv_pay_stripe_op_t op, int status, const char *body)
{
    return classify_r(op, status, body, false);
}

static void parse_list_pages(void **state)
{
    (void)state;
    rsv_pay_page_t pg;
    const char *ok = "{\"object\":\"list\",\"has_more\":true,\"data\":["
                     "{\"id\":\"pi_1\",\"status\":\"succeeded\",\"amount\":12000,\"created\":17,"
                     "\"latest_charge\":{\"id\":\"ch_1\",\"amount_refunded\":0,\"refunded\":false},"
                     "\"metadata\":{\"checkout\":\"co_a\",\"event\":\"e\"}},"
                     "{\"id\":\"pi_2\",\"status\":\"requires_payment_method\","
                     "\"metadata\":{\"checkout\":\"co_b\"}},"
                     "{\"status\":\"succeeded\"},"
                     "{\"id\":\"pi_3\",\"status\":\"succeeded\",\"latest_charge\":"
                     "{\"id\":\"ch_3\",\"amount_refunded\":50,\"refunded\":false}}]}";
    assert_int_equal(rsv_pay_stripe_parse_list(200, ok, strlen(ok), &pg), 0);
    assert_int_equal(pg.n, 3); /* the entry without an id is skipped */
    assert_true(pg.has_more);
    assert_string_equal(pg.items[0].id, "pi_1");
    assert_string_equal(pg.items[0].checkout, "co_a");
    assert_true(pg.items[0].succeeded);
    assert_false(pg.items[0].refunded);
    assert_int_equal(pg.items[0].amount, 12000);
    assert_int_equal(pg.items[0].created, 17);
    assert_string_equal(pg.items[1].checkout, "co_b");
    assert_false(pg.items[1].succeeded);
    assert_string_equal(pg.items[2].checkout, "");
    assert_true(pg.items[2].refunded); /* a partial refund counts */
    rsv_pay_page_clear(&pg);
    assert_int_equal(rsv_pay_stripe_parse_list(500, ok, strlen(ok), &pg), -1);
    assert_int_equal(rsv_pay_stripe_parse_list(200, "{}", 2, &pg), -1);
    assert_int_equal(rsv_pay_stripe_parse_list(200, "[", 1, &pg), -1);
    assert_int_equal(rsv_pay_stripe_parse_list(200, NULL, 0, &pg), -1);
    rsv_pay_page_clear(NULL);
}

static void classify_answers(void **state)
{
    (void)state;
    /* create: an intent awaiting confirmation is NONE with its id (confirm next) */
    rsv_pay_result_t r = classify(RSV_PAY_STRIPE_CREATE, 200,
                                  "{\"id\":\"pi_1\",\"status\":\"requires_confirmation\"}");
    assert_int_equal(r.outcome, RSV_PAY_NONE);
    assert_string_equal(r.id, "pi_1");
    /* a stored 5xx under the create's key: no id was ever given, nothing confirmed */
    r = classify_r(RSV_PAY_STRIPE_CREATE, 500, "{\"error\":{\"type\":\"api_error\"}}", true);
    assert_int_equal(r.outcome, RSV_PAY_NONE);
    assert_string_equal(r.id, "");
    /* … but a live 5xx says nothing */
    assert_int_equal(classify(RSV_PAY_STRIPE_CREATE, 500, NULL).outcome, RSV_PAY_UNKNOWN);
    r = classify(RSV_PAY_STRIPE_CREATE, 400,
                 "{\"error\":{\"type\":\"invalid_request_error\",\"code\":\"resource_missing\","
                 "\"param\":\"payment_method\"}}");
    assert_int_equal(r.outcome, RSV_PAY_DECLINED);
    assert_string_equal(r.error_code, "resource_missing");
    assert_int_equal(
        classify(RSV_PAY_STRIPE_CREATE, 401, "{\"error\":{\"type\":\"invalid_request_error\"}}")
            .outcome,
        RSV_PAY_UNKNOWN);
    /* an id that is not fit for a URL path is no id */
    assert_int_equal(
        classify(RSV_PAY_STRIPE_CREATE, 200, "{\"id\":\"pi/../x\",\"status\":\"succeeded\"}")
            .outcome,
        RSV_PAY_UNKNOWN);

    r = classify(RSV_PAY_STRIPE_CONFIRM, 200, "{\"id\":\"pi_1\",\"status\":\"succeeded\"}");
    assert_int_equal(r.outcome, RSV_PAY_PAID);
    assert_string_equal(r.id, "pi_1");
    r = classify(RSV_PAY_STRIPE_CONFIRM, 402,
                 "{\"error\":{\"type\":\"card_error\",\"code\":\"card_declined\","
                 "\"decline_code\":\"generic_decline\",\"payment_intent\":{\"id\":\"pi_2\","
                 "\"status\":\"requires_payment_method\",\"last_payment_error\":{}}}}");
    assert_int_equal(r.outcome, RSV_PAY_DECLINED);
    assert_string_equal(r.id, "pi_2");
    assert_string_equal(r.error_type, "card_error");
    assert_string_equal(r.error_code, "generic_decline");
    r = classify(RSV_PAY_STRIPE_CONFIRM, 200,
                 "{\"id\":\"pi_3\",\"status\":\"requires_action\",\"next_action\":{\"type\":"
                 "\"redirect_to_url\",\"redirect_to_url\":{\"url\":\"https://acs/x\"}}}");
    assert_int_equal(r.outcome, RSV_PAY_ACTION);
    assert_string_equal(r.action_url, "https://acs/x");
    /* a second confirmation of a settled intent says how it settled */
    r = classify(RSV_PAY_STRIPE_CONFIRM, 400,
                 "{\"error\":{\"type\":\"invalid_request_error\",\"code\":"
                 "\"payment_intent_unexpected_state\",\"payment_intent\":{\"id\":\"pi_4\","
                 "\"status\":\"succeeded\"}}}");
    assert_int_equal(r.outcome, RSV_PAY_PAID);
    assert_string_equal(r.id, "pi_4");
    /* Anything not definite is unknown: in progress, server errors, garbage, no answer. */
    assert_int_equal(classify(RSV_PAY_STRIPE_CONFIRM, 409, "{}").outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_STRIPE_CONFIRM, 429, "{}").outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_STRIPE_CONFIRM, 500, NULL).outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_STRIPE_CONFIRM, 200, "not json").outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_STRIPE_CONFIRM, 0, NULL).outcome, RSV_PAY_UNKNOWN);
    assert_int_equal(classify(RSV_PAY_STRIPE_CONFIRM, 404, "{}").outcome, RSV_PAY_UNKNOWN);
    /* retrieve: by status */
    const struct {
        const char *status;
        rsv_pay_outcome_t want;
    } st[] = {{"succeeded", RSV_PAY_PAID},
              {"processing", RSV_PAY_UNKNOWN},
              {"requires_confirmation", RSV_PAY_NONE},
              {"requires_payment_method", RSV_PAY_NONE},
              {"canceled", RSV_PAY_NONE},
              {"requires_capture", RSV_PAY_UNKNOWN},
              {"requires_action", RSV_PAY_ACTION},
              {"something_new", RSV_PAY_UNKNOWN}};
    for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
        char body[160];
        snprintf(body, sizeof(body), "{\"id\":\"pi_5\",\"status\":\"%s\"}", st[i].status);
        assert_int_equal(classify(RSV_PAY_STRIPE_RETRIEVE, 200, body).outcome, st[i].want);
    }
    r = classify(RSV_PAY_STRIPE_RETRIEVE, 200,
                 "{\"id\":\"pi_6\",\"status\":\"requires_payment_method\",\"last_payment_error\":"
                 "{\"type\":\"card_error\",\"code\":\"card_declined\"}}");
    assert_int_equal(r.outcome, RSV_PAY_DECLINED);
    /* Refund: done now, or done before by someone; an over-refund is not done. */
    r = classify(RSV_PAY_STRIPE_REFUND, 200, "{\"id\":\"re_1\",\"status\":\"succeeded\"}");
    assert_int_equal(r.outcome, RSV_PAY_REFUNDED);
    assert_string_equal(r.id, "re_1");
    assert_int_equal(
        classify(RSV_PAY_STRIPE_REFUND, 200, "{\"id\":\"re_1\",\"status\":\"pending\"}").outcome,
        RSV_PAY_REFUNDED);
    assert_int_equal(
        classify(RSV_PAY_STRIPE_REFUND, 200, "{\"id\":\"re_1\",\"status\":\"failed\"}").outcome,
        RSV_PAY_UNKNOWN);
    r = classify(RSV_PAY_STRIPE_REFUND, 400,
                 "{\"error\":{\"type\":\"invalid_request_error\",\"code\":"
                 "\"charge_already_refunded\"}}");
    assert_int_equal(r.outcome, RSV_PAY_REFUNDED);
    r = classify(RSV_PAY_STRIPE_REFUND, 400,
                 "{\"error\":{\"type\":\"invalid_request_error\",\"code\":\"amount_too_large\","
                 "\"param\":\"amount\"}}");
    assert_int_equal(r.outcome, RSV_PAY_UNKNOWN);
    assert_string_equal(r.error_code, "amount_too_large");
    assert_int_equal(classify(RSV_PAY_STRIPE_REFUND, 404, "{}").outcome, RSV_PAY_UNKNOWN);
}

/* --- pinned against Stripe's OpenAPI (tests/fixtures/stripe) ---------------------------- */

static json_t *load_fixture(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", STRIPE_FIXTURES, name);
    json_error_t e;
    json_t *doc = json_load_file(path, 0, &e);
    if (doc == NULL)
        fail_msg("%s: %s (line %d)", path, e.text, e.line);
    return doc;
}

/* Every key of a form or query string, by its top-level name ("metadata[checkout]" →
 * "metadata"), is a parameter of op in the spec (in `where`: "form" or "query"). */
static void documented(const json_t *spec, const char *op, const char *where, const char *form,
                       size_t *nkeys)
{
    json_t *names =
        json_object_get(json_object_get(json_object_get(spec, "operations"), op), where);
    assert_true(json_is_array(names));
    for (const char *p = form; *p;) {
        size_t n = strcspn(p, "&");
        char key[128];
        size_t k = 0;
        for (size_t i = 0; i < n && p[i] != '=' && k + 1 < sizeof(key); i++) {
            if (strncmp(p + i, "%5B", 3) == 0 || p[i] == '[')
                break; /* the top-level name ends at the first bracket */
            key[k++] = p[i];
        }
        key[k] = '\0';
        bool found = false;
        size_t i;
        json_t *v;
        json_array_foreach(names, i, v)
        {
            found = found || strcmp(json_string_value(v), key) == 0;
        }
        if (!found)
            fail_msg("%s: \"%s\" is not a documented %s parameter", op, key, where);
        (*nkeys)++;
        p += n;
        if (*p == '&')
            p++;
    }
}

static void every_key_sent_is_a_documented_parameter(void **state)
{
    (void)state;
    json_t *spec = load_fixture("spec.json");
    size_t n = 0;
    rsv_pay_charge_req_t rq = {.key = "co_1",
                               .amount = 1200,
                               .currency = "EUR",
                               .payment_method = "pm_card_visa",
                               .event = "ev1",
                               .request_id = "fan-rid.7"};
    char *form = rsv_pay_stripe_create_form(&rq);
    documented(spec, "POST /v1/payment_intents", "form", form, &n);
    /* the spec's required parameters are there */
    json_t *req = json_object_get(
        json_object_get(json_object_get(spec, "operations"), "POST /v1/payment_intents"),
        "form_required");
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v)
    {
        char want[64];
        snprintf(want, sizeof(want), "%s=", json_string_value(v));
        assert_non_null(strstr(form, want));
    }
    free(form);
    form = rsv_pay_stripe_confirm_form("https://shop.example/return");
    documented(spec, "POST /v1/payment_intents/{intent}/confirm", "form", form, &n);
    free(form);
    form = rsv_pay_stripe_refund_form("pi_1", 300);
    documented(spec, "POST /v1/refunds", "form", form, &n);
    free(form);
    char *path = rsv_pay_stripe_list_path(17, "pi_9", 100);
    assert_int_equal(strncmp(path, "/v1/payment_intents?", 20), 0);
    documented(spec, "GET /v1/payment_intents", "query", path + 20, &n);
    /* created[gte]: a documented sub-key of created */
    assert_non_null(strstr(path, "created%5Bgte%5D=17"));
    json_t *ck = json_object_get(
        json_object_get(json_object_get(spec, "operations"), "GET /v1/payment_intents"),
        "created_keys");
    bool gte = false;
    json_array_foreach(ck, i, v)
    {
        gte = gte || strcmp(json_string_value(v), "gte") == 0;
    }
    assert_true(gte);
    free(path);
    assert_true(n >= 14);
    json_decref(spec);
}

static rsv_pay_outcome_t outcome_named(const char *name)
{
    for (int i = 0; i < RSV_PAY_OUTCOME_COUNT; i++)
        if (strcmp(rsv_pay_outcome_names[i], name) == 0)
            return (rsv_pay_outcome_t)i;
    fail_msg("no outcome %s", name);
    return RSV_PAY_UNKNOWN;
}

static void stripe_documented_answers_are_classified(void **state)
{
    (void)state;
    json_t *doc = load_fixture("responses.json");
    json_t *cases = json_object_get(doc, "cases");
    assert_true(json_array_size(cases) >= 30);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *op = json_string_value(json_object_get(c, "op"));
        int status = (int)json_integer_value(json_object_get(c, "status"));
        char *body = json_dumps(json_object_get(c, "body"), JSON_COMPACT);
        rsv_pay_outcome_t want = outcome_named(json_string_value(json_object_get(c, "want")));
        rsv_pay_result_t r;
        memset(&r, 0, sizeof(r));
        if (strcmp(op, "list") == 0) {
            rsv_pay_page_t pg;
            assert_int_equal(rsv_pay_stripe_parse_list(status, body, strlen(body), &pg), 0);
            assert_int_equal(pg.n, json_integer_value(json_object_get(c, "n")));
            assert_int_equal(pg.has_more, json_is_true(json_object_get(c, "has_more")));
            for (size_t k = 0; k < pg.n; k++) {
                assert_string_equal(pg.items[k].checkout, json_string_value(json_array_get(
                                                              json_object_get(c, "checkouts"), k)));
                assert_int_equal(pg.items[k].refunded,
                                 json_is_true(json_array_get(json_object_get(c, "refunded"), k)));
            }
            rsv_pay_page_clear(&pg);
            free(body);
            continue;
        }
        rsv_pay_stripe_op_t sop = strcmp(op, "create") == 0     ? RSV_PAY_STRIPE_CREATE
                                  : strcmp(op, "confirm") == 0  ? RSV_PAY_STRIPE_CONFIRM
                                  : strcmp(op, "retrieve") == 0 ? RSV_PAY_STRIPE_RETRIEVE
                                                                : RSV_PAY_STRIPE_REFUND;
        rsv_pay_stripe_classify(sop, status, body, strlen(body),
                                json_is_true(json_object_get(c, "replayed")), &r);
        if (r.outcome != want)
            fail_msg("%s: %s, want %s", name, rsv_pay_outcome_names[r.outcome],
                     rsv_pay_outcome_names[want]);
        const char *id = json_string_value(json_object_get(c, "id"));
        if (id)
            assert_string_equal(r.id, id);
        const char *url = json_string_value(json_object_get(c, "action_url"));
        if (url)
            assert_string_equal(r.action_url, url);
        const char *et = json_string_value(json_object_get(c, "error_type"));
        if (et)
            assert_string_equal(r.error_type, et);
        const char *ec = json_string_value(json_object_get(c, "error_code"));
        if (ec)
            assert_string_equal(r.error_code, ec);
        free(body);
    }
    json_decref(doc);
}

/* --- loop fixture ----------------------------------------------------------------------- */

typedef struct fx {
    struct event_base *base;
    cm_http_server_t *srv;
    cm_req_t *held; /* a request the provider never answers (deadline test) */
    char last_key[128];
    char last_auth[128];
    char last_body[512];
    char create_body[512];
    char last_type[128];
    char uris[8][512];
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
    const char *ct = cm_http_header(req, "Content-Type");
    snprintf(f->last_type, sizeof(f->last_type), "%s", ct ? ct : "");
    if (f->nreq < 8) {
        snprintf(f->uris[f->nreq], sizeof(f->uris[0]), "%s", uri);
        f->peer_port[f->nreq++] = pport;
    }
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
    const char *pi = "{\"id\":\"pi_ok\",\"object\":\"payment_intent\","
                     "\"status\":\"requires_confirmation\"}";
    const char *paid = "{\"id\":\"pi_ok\",\"object\":\"payment_intent\",\"status\":\"succeeded\"}";
    if (strcmp(uri, "/v1/payment_intents") == 0) {
        snprintf(f->create_body, sizeof(f->create_body), "%s", f->last_body);
        cm_http_send_body(req, 200, "application/json", pi, strlen(pi), false);
    } else if (strcmp(uri, "/v1/payment_intents/pi_ok/confirm") == 0) {
        cm_http_send_body(req, 200, "application/json", paid, strlen(paid), false);
    } else if (strcmp(uri, "/v1/payment_intents/pi_ok") == 0) {
        cm_http_send_body(req, 200, "application/json", pi, strlen(pi), false);
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
    rsv_pay_config_t cfg = {url, NULL, "sk_test", NULL, 500, timeout_ms};
    rsv_pay_t *p = rsv_pay_new(f->base, &cfg, err, sizeof(err));
    assert_non_null(p);
    return p;
}

static rsv_pay_t *client(fx_t *f, const char *prefix, int port, int timeout_ms)
{
    return client_at(f, "127.0.0.1", prefix, port, timeout_ms);
}

static rsv_pay_charge_req_t req_of(const char *key, const char *pm, const char *rid)
{
    rsv_pay_charge_req_t r = {.key = key,
                              .amount = 1200,
                              .currency = "EUR",
                              .payment_method = pm,
                              .event = "ev1",
                              .request_id = rid};
    return r;
}

/* The value of key in a form body (decoded '%5B' '%5D' only: enough for our keys), or "". */
static const char *form_value(const char *form, const char *key, char *out, size_t cap)
{
    char want[128];
    snprintf(want, sizeof(want), "%s=", key);
    out[0] = '\0';
    for (const char *p = form; p && *p;) {
        const char *end = strchr(p, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char pair[512];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 1 < sizeof(pair); i++) {
            if (strncmp(p + i, "%5B", 3) == 0) {
                pair[k++] = '[';
                i += 2;
            } else if (strncmp(p + i, "%5D", 3) == 0) {
                pair[k++] = ']';
                i += 2;
            } else {
                pair[k++] = p[i];
            }
        }
        pair[k] = '\0';
        if (strncmp(pair, want, strlen(want)) == 0) {
            snprintf(out, cap, "%s", pair + strlen(want));
            return out;
        }
        p = end ? end + 1 : NULL;
    }
    return out;
}

static void charge_lookup_refund(void **state)
{
    fx_t *f = *state;
    char v[128];
    rsv_pay_t *p = client(f, "", 0, 2000);
    rsv_pay_charge_req_t rq = req_of("co_1", "pm_card_visa", NULL);
    assert_int_equal(rsv_pay_charge(p, &rq, on_result, f), 0);
    assert_int_equal(f->done, 0); /* never called from inside the call */
    run(f);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->res.outcome, RSV_PAY_PAID);
    assert_string_equal(f->res.id, "pi_ok");
    assert_null(f->res.err);
    /* create under the checkout id, then confirm under cf_<checkout> */
    assert_int_equal(f->nreq, 2);
    assert_string_equal(f->uris[0], "/v1/payment_intents");
    assert_string_equal(f->uris[1], "/v1/payment_intents/pi_ok/confirm");
    assert_string_equal(f->last_key, "cf_co_1");
    assert_string_equal(f->last_type, "application/x-www-form-urlencoded");
    assert_string_equal(f->last_auth, "Bearer sk_test");
    assert_string_equal(form_value(f->last_body, "return_url", v, sizeof(v)),
                        "https%3A%2F%2Flocalhost%2Fshop%2F");
    assert_string_equal(form_value(f->create_body, "amount", v, sizeof(v)), "1200");
    assert_string_equal(form_value(f->create_body, "currency", v, sizeof(v)), "eur");
    assert_string_equal(form_value(f->create_body, "payment_method", v, sizeof(v)), "pm_card_visa");
    assert_string_equal(form_value(f->create_body, "metadata[checkout]", v, sizeof(v)), "co_1");
    assert_string_equal(form_value(f->create_body, "metadata[event]", v, sizeof(v)), "ev1");
    assert_null(strstr(f->create_body, "request_id")); /* none given: none sent */

    /* The checkout's request id goes in the metadata; a retry confirms under a fresh key. */
    rq = req_of("co_1r", NULL, "fan-rid.7");
    rq.attempt = 2;
    assert_int_equal(rsv_pay_charge(p, &rq, on_result, f), 0);
    run(f);
    assert_int_equal(f->res.outcome, RSV_PAY_PAID);
    assert_string_equal(form_value(f->create_body, "metadata[request_id]", v, sizeof(v)),
                        "fan-rid.7");
    assert_string_equal(form_value(f->create_body, "payment_method", v, sizeof(v)),
                        "pm_card_visa"); /* the default */
    assert_string_equal(f->last_key, "cf_co_1r_2");

    /* A lookup repeats the create and reads the intent: never confirmed, so NONE. */
    f->nreq = 0;
    rq = req_of("co_1", "pm_card_visa", NULL);
    assert_int_equal(rsv_pay_lookup(p, &rq, on_result, f), 0);
    run(f);
    assert_int_equal(f->res.outcome, RSV_PAY_NONE);
    assert_int_equal(f->nreq, 2);
    assert_string_equal(f->uris[1], "/v1/payment_intents/pi_ok");

    assert_int_equal(rsv_pay_refund(p, "rf_co_1", "pi_ok", 0, on_result, f), 0);
    run(f);
    assert_int_equal(f->res.outcome, RSV_PAY_REFUNDED);
    assert_string_equal(f->res.id, "re_ok");
    assert_string_equal(f->last_key, "rf_co_1");
    assert_string_equal(form_value(f->last_body, "payment_intent", v, sizeof(v)), "pi_ok");
    assert_string_equal(form_value(f->last_body, "amount", v, sizeof(v)), ""); /* all */
    assert_int_equal(rsv_pay_refund(p, "rf_co_1p", "pi_ok", 300, on_result, f), 0);
    run(f);
    assert_string_equal(form_value(f->last_body, "amount", v, sizeof(v)), "300");
    assert_int_equal(rsv_pay_inflight(p), 0);
    rsv_pay_free(p);
}

/* Three calls in a row travel over one kept-alive connection (the provider sees one client
 * port), and a provider named by a host name is found without blocking the loop. */
static void calls_reuse_one_connection_by_host_name(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client_at(f, "localhost", "", 0, 2000);
    rsv_pay_charge_req_t rq = req_of("none", NULL, NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rsv_pay_lookup(p, &rq, on_result, f), 0);
        run(f);
        assert_int_equal(f->done, i + 1);
        assert_int_equal(f->res.outcome, RSV_PAY_NONE);
    }
    assert_int_equal(f->nreq, 6); /* two exchanges a lookup */
    assert_int_not_equal(f->peer_port[0], 0);
    for (int i = 1; i < 6; i++)
        assert_int_equal(f->peer_port[i], f->peer_port[0]);
    rsv_pay_free(p);
}

/* An answer past the size bound is abandoned: UNKNOWN, not a partial parse. */
static void oversized_answer_gives_unknown(void **state)
{
    fx_t *f = *state;
    rsv_pay_t *p = client(f, "/big", 0, 2000);
    rsv_pay_charge_req_t rq = req_of("co_5", NULL, NULL);
    assert_int_equal(rsv_pay_charge(p, &rq, on_result, f), 0);
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
    rsv_pay_charge_req_t rq = req_of("co_2", NULL, NULL);
    assert_int_equal(rsv_pay_charge(p, &rq, on_result, f), 0);
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
    rsv_pay_charge_req_t rq = req_of("co_3", NULL, NULL);
    assert_int_equal(rsv_pay_charge(p, &rq, on_result, f), 0);
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
    rsv_pay_charge_req_t rq = req_of("co_4", NULL, NULL);
    assert_int_equal(rsv_pay_charge(p, &rq, on_result, f), 0);
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
        cmocka_unit_test(every_key_sent_is_a_documented_parameter),
        cmocka_unit_test(stripe_documented_answers_are_classified),
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
