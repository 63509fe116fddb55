/*
 * rsv_pay — see rsv_pay.h.
 *
 * Shape: each call is one heap block (struct call) owning an evhttp connection, its
 * request, and two timers (connect check, overall deadline). When evhttp finishes the
 * request (answer or failure) the connection is freed from a zero-delay event after our
 * callback returned (evhttp still uses it until then; free_on_completion does not cover
 * connect failures in libevent 2.1); when a deadline passes first we free the connection
 * at once, which drops the request without running its callback (libevent 2.1:
 * evhttp_connection_free frees queued requests silently). Either way the call's callback
 * runs exactly once and nothing late touches freed memory.
 *
 * Library rules relied on: an SSL* given to bufferevent_openssl_socket_new(…,
 * BEV_OPT_CLOSE_ON_FREE) belongs to the bufferevent even when that call fails, and the
 * bufferevent belongs to the evhttp connection once evhttp_connection_base_bufferevent_new
 * returned it. The connect address is an IPv4 literal, so evhttp's resolver step is a
 * numeric parse and never blocks.
 */
#include "rsv_pay.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "cm_tls.h"

#define BODY_MAX (64 * 1024)

typedef struct call call_t;
struct call {
    call_t *prev, *next;
    rsv_pay_t *p;
    rsv_pay_op_t op;
    struct evhttp_connection *conn; /* ours until evhttp_make_request took the request */
    struct evhttp_request *req;     /* ours until evhttp_make_request took it */
    enum evhttp_cmd_type method;
    char *uri;
    struct event *kick; /* starts the exchange from the loop */
    struct event *connect_timer;
    struct event *deadline;
    bool *finished; /* set while evhttp_make_request runs: it may complete the call */
    rsv_pay_cb cb;
    void *arg;
    uint64_t start_ns;
};

struct rsv_pay {
    struct event_base *base;
    rsv_pay_url_t url;
    cm_tls_ctx_t *tls;
    char *auth; /* "Bearer <key>" or NULL */
    int connect_timeout_ms, timeout_ms;
    call_t *calls;
    int inflight;
    struct evhttp_connection **dead; /* finished calls' connections, freed by reaper */
    size_t ndead, capdead;
    struct event *reaper;
    bool closing;
};

/* --- pure parts ---------------------------------------------------------------------- */

int rsv_pay_parse_url(const char *url, rsv_pay_url_t *out)
{
    memset(out, 0, sizeof(*out));
    const char *p;
    if (strncmp(url, "https://", 8) == 0) {
        out->tls = true;
        p = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        p = url + 7;
    } else {
        return -1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl == 0 || hl >= sizeof(out->host))
        return -1;
    memcpy(out->host, p, hl);
    out->host[hl] = '\0';
    struct in_addr a;
    if (inet_pton(AF_INET, out->host, &a) != 1)
        return -1;
    p += hl;
    out->port = out->tls ? 443 : 80;
    if (*p == ':') {
        char *end = NULL;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || port < 1 || port > 65535)
            return -1;
        out->port = (int)port;
        p = end;
    }
    if (*p != '\0' && *p != '/')
        return -1;
    size_t pl = strlen(p);
    while (pl > 0 && p[pl - 1] == '/')
        pl--;
    if (pl >= sizeof(out->prefix) || strpbrk(p, "?# ") != NULL)
        return -1;
    memcpy(out->prefix, p, pl);
    out->prefix[pl] = '\0';
    return 0;
}

static void copy_id(rsv_pay_result_t *out, const char *id)
{
    if (id)
        snprintf(out->id, sizeof(out->id), "%s", id);
}

void rsv_pay_classify(rsv_pay_op_t op, int status, const char *body, size_t len,
                      rsv_pay_result_t *out)
{
    out->outcome = RSV_PAY_UNKNOWN;
    out->id[0] = '\0';
    json_t *doc = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(doc, "error");
    const char *st = json_string_value(json_object_get(doc, "status"));
    const char *id = json_string_value(json_object_get(doc, "id"));
    const char *code = json_string_value(json_object_get(e, "code"));
    switch (op) {
    case RSV_PAY_OP_CHARGE:
    case RSV_PAY_OP_LOOKUP:
        if (status == 200 || status == 201) {
            if (st && strcmp(st, "succeeded") == 0 && id) {
                out->outcome = RSV_PAY_PAID;
                copy_id(out, id);
            } else if (st && strcmp(st, "failed") == 0) {
                out->outcome = RSV_PAY_DECLINED;
                copy_id(out, id);
            }
        } else if (status == 402) {
            out->outcome = RSV_PAY_DECLINED;
            copy_id(out, json_string_value(json_object_get(e, "charge")));
        } else if (status == 404 && op == RSV_PAY_OP_LOOKUP) {
            out->outcome = RSV_PAY_NONE;
        }
        break;
    case RSV_PAY_OP_REFUND:
        if ((status == 200 || status == 201) && id && (st == NULL || strcmp(st, "failed") != 0)) {
            out->outcome = RSV_PAY_REFUNDED;
            copy_id(out, id);
        } else if (status == 400 && code && strcmp(code, "charge_already_refunded") == 0) {
            /* Refunded before (by this key or another): the money is back either way. */
            out->outcome = RSV_PAY_REFUNDED;
            copy_id(out, json_string_value(json_object_get(e, "refund")));
        }
        break;
    case RSV_PAY_OP_LIST: /* rsv_pay_parse_list */
        break;
    }
    json_decref(doc);
}

int rsv_pay_parse_list(int status, const char *body, size_t len, rsv_pay_page_t *out)
{
    memset(out, 0, sizeof(*out));
    if (status != 200 || body == NULL || len == 0)
        return -1;
    json_t *doc = json_loadb(body, len, 0, NULL);
    json_t *data = json_object_get(doc, "data");
    if (!json_is_array(data)) {
        json_decref(doc);
        return -1;
    }
    out->items = cm_xcalloc(json_array_size(data) + 1, sizeof(*out->items));
    out->has_more = json_is_true(json_object_get(doc, "has_more"));
    size_t i;
    json_t *c;
    json_array_foreach(data, i, c)
    {
        const char *id = json_string_value(json_object_get(c, "id"));
        if (id == NULL || strlen(id) >= RSV_PAY_ID_MAX)
            continue;
        rsv_pay_charge_t *x = &out->items[out->n++];
        snprintf(x->id, sizeof(x->id), "%s", id);
        const char *co =
            json_string_value(json_object_get(json_object_get(c, "metadata"), "checkout"));
        if (co == NULL)
            co = json_string_value(json_object_get(c, "idempotency_key"));
        if (co && strlen(co) < sizeof(x->checkout))
            snprintf(x->checkout, sizeof(x->checkout), "%s", co);
        const char *st = json_string_value(json_object_get(c, "status"));
        x->succeeded = st && strcmp(st, "succeeded") == 0;
        json_int_t ar = json_integer_value(json_object_get(c, "amount_refunded"));
        x->refunded = json_is_true(json_object_get(c, "refunded")) || ar > 0;
        x->amount = (int64_t)json_integer_value(json_object_get(c, "amount"));
        x->created = (int64_t)json_integer_value(json_object_get(c, "created"));
    }
    json_decref(doc);
    return 0;
}

void rsv_pay_page_clear(rsv_pay_page_t *page)
{
    if (page == NULL)
        return;
    free(page->items);
    memset(page, 0, sizeof(*page));
}

/* --- calls --------------------------------------------------------------------------- */

static void call_unlink(call_t *c)
{
    rsv_pay_t *p = c->p;
    if (c->prev)
        c->prev->next = c->next;
    else
        p->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    p->inflight--;
}

/* Ends a call: reports to the caller and frees everything but the connection (the
 * caller of this decides who frees that). */
static void call_finish(call_t *c, rsv_pay_result_t *res)
{
    res->seconds = (double)(cm_time_mono_ns() - c->start_ns) / 1e9;
    call_unlink(c);
    if (c->finished)
        *c->finished = true;
    event_free(c->kick);
    event_free(c->connect_timer);
    event_free(c->deadline);
    free(c->uri);
    rsv_pay_cb cb = c->cb;
    void *arg = c->arg;
    free(c);
    cb(res, arg);
}

static void fail_call(call_t *c, const char *err)
{
    rsv_pay_result_t res;
    memset(&res, 0, sizeof(res));
    res.outcome = RSV_PAY_UNKNOWN;
    res.err = err;
    /* Ours to free: evhttp drops a queued request without calling on_done. */
    if (c->conn)
        evhttp_connection_free(c->conn);
    if (c->req)
        evhttp_request_free(c->req);
    c->conn = NULL;
    c->req = NULL;
    call_finish(c, &res);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    call_t *c = arg;
    cm_log(CM_LOG_WARN, "payment provider: no answer within the deadline");
    fail_call(c, cm_err_timeout);
}

static void on_connect_check(evutil_socket_t fd, short what, void *arg)
{
    call_t *c = arg;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->conn);
    evutil_socket_t s = bev ? bufferevent_getfd(bev) : -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (s < 0 || getpeername(s, (struct sockaddr *)&ss, &sl) != 0) {
        cm_log(CM_LOG_WARN, "payment provider: connect timed out");
        fail_call(c, cm_err_timeout);
    }
}

/* Frees the connections of finished calls (from the loop, after evhttp let go). */
static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    rsv_pay_t *p = arg;
    for (size_t i = 0; i < p->ndead; i++)
        evhttp_connection_free(p->dead[i]);
    p->ndead = 0;
}

/* evhttp's completion: an answer, or req NULL / status 0 on a transport failure. */
static void on_done(struct evhttp_request *req, void *arg)
{
    call_t *c = arg;
    rsv_pay_result_t res;
    rsv_pay_page_t page = {0};
    memset(&res, 0, sizeof(res));
    int status = req ? evhttp_request_get_response_code(req) : 0;
    res.status = status;
    if (status == 0) {
        res.outcome = RSV_PAY_UNKNOWN;
        res.err = cm_err_closed;
    } else {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t len = evbuffer_get_length(in);
        const char *body = len && len < BODY_MAX ? (const char *)evbuffer_pullup(in, -1) : NULL;
        if (c->op == RSV_PAY_OP_LIST) {
            res.outcome = RSV_PAY_UNKNOWN;
            if (rsv_pay_parse_list(status, body, body ? len : 0, &page) == 0) {
                res.outcome = RSV_PAY_LISTED;
                res.page = &page;
            }
        } else {
            rsv_pay_classify(c->op, status, body, body ? len : 0, &res);
        }
        if (res.outcome == RSV_PAY_UNKNOWN)
            res.err = status >= 500 ? cm_err_server : cm_err_protocol;
    }
    /* evhttp still uses the connection until we return: free it from the loop. */
    rsv_pay_t *p = c->p;
    if (p->ndead == p->capdead) {
        p->capdead = p->capdead ? p->capdead * 2 : 16;
        p->dead = cm_xrealloc(p->dead, p->capdead * sizeof(*p->dead));
    }
    p->dead[p->ndead++] = c->conn;
    event_active(p->reaper, EV_TIMEOUT, 0);
    c->conn = NULL;
    call_finish(c, &res);
    rsv_pay_page_clear(&page);
}

static struct evhttp_connection *connect_to(rsv_pay_t *p)
{
    struct bufferevent *bev = NULL;
    if (p->url.tls) {
        SSL *ssl = SSL_new(p->tls);
        if (ssl == NULL)
            return NULL;
        /* Verify the provider's certificate against its IP address. */
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), p->url.host);
        /* From here on the bufferevent owns ssl, even if this call fails. */
        bev = bufferevent_openssl_socket_new(p->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (bev == NULL)
            return NULL;
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    }
    struct evhttp_connection *conn = evhttp_connection_base_bufferevent_new(
        p->base, NULL, bev, p->url.host, (ev_uint16_t)p->url.port);
    if (conn == NULL) {
        if (bev)
            bufferevent_free(bev);
        return NULL;
    }
    evhttp_connection_set_retries(conn, 0);
    struct timeval tv = {p->timeout_ms / 1000, (p->timeout_ms % 1000) * 1000};
    evhttp_connection_set_timeout_tv(conn, &tv);
    return conn;
}

/* From the loop: connects and sends. evhttp may report a synchronous failure through
 * on_done from inside evhttp_make_request; c->finished tells us it did. */
static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    call_t *c = arg;
    rsv_pay_t *p = c->p;
    c->conn = connect_to(p);
    if (c->conn == NULL) {
        fail_call(c, cm_err_closed);
        return;
    }
    struct timeval ct = {p->connect_timeout_ms / 1000, (p->connect_timeout_ms % 1000) * 1000};
    struct timeval dt = {p->timeout_ms / 1000, (p->timeout_ms % 1000) * 1000};
    evtimer_add(c->connect_timer, &ct);
    evtimer_add(c->deadline, &dt);
    bool finished = false;
    c->finished = &finished;
    struct evhttp_request *req = c->req;
    c->req = NULL; /* evhttp's now, unless it refuses it below */
    int rc = evhttp_make_request(c->conn, req, c->method, c->uri);
    if (finished)
        return;
    c->finished = NULL;
    if (rc != 0) {
        c->req = req; /* refused: not queued, still ours */
        fail_call(c, cm_err_closed);
    }
}

static int start_call(rsv_pay_t *p, rsv_pay_op_t op, enum evhttp_cmd_type method, const char *path,
                      const char *key, const char *body, rsv_pay_cb cb, void *arg)
{
    if (p->closing)
        return -1;
    call_t *c = cm_xcalloc(1, sizeof(*c));
    c->p = p;
    c->op = op;
    c->cb = cb;
    c->arg = arg;
    c->method = method;
    c->start_ns = cm_time_mono_ns();
    c->uri = cm_xasprintf("%s%s", p->url.prefix, path);
    c->kick = evtimer_new(p->base, on_kick, c);
    c->connect_timer = evtimer_new(p->base, on_connect_check, c);
    c->deadline = evtimer_new(p->base, on_deadline, c);
    c->next = p->calls;
    if (p->calls)
        p->calls->prev = c;
    p->calls = c;
    p->inflight++;
    c->req = evhttp_request_new(on_done, c);
    if (c->req == NULL)
        abort(); /* allocation failure */
    struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
    char hostport[96];
    snprintf(hostport, sizeof(hostport), "%s:%d", p->url.host, p->url.port);
    evhttp_add_header(h, "Host", hostport);
    evhttp_add_header(h, "Accept", "application/json");
    evhttp_add_header(h, "Connection", "close");
    if (p->auth)
        evhttp_add_header(h, "Authorization", p->auth);
    if (key)
        evhttp_add_header(h, "Idempotency-Key", key);
    if (body) {
        evhttp_add_header(h, "Content-Type", "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(c->req), body, strlen(body));
    }
    event_active(c->kick, EV_TIMEOUT, 0);
    return 0;
}

int rsv_pay_charge(rsv_pay_t *p, const char *key, int64_t amount, const char *currency,
                   const char *source, const char *event, rsv_pay_cb cb, void *arg)
{
    json_t *o = json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}", "amount", (json_int_t)amount, "currency",
                          currency, "source", source ? source : "tok_visa", "metadata", "event",
                          event, "checkout", key);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = start_call(p, RSV_PAY_OP_CHARGE, EVHTTP_REQ_POST, "/v1/charges", key, body, cb, arg);
    free(body);
    return rc;
}

int rsv_pay_lookup(rsv_pay_t *p, const char *key, rsv_pay_cb cb, void *arg)
{
    char *enc = evhttp_encode_uri(key);
    char *path = cm_xasprintf("/v1/charges?idempotency_key=%s", enc ? enc : "");
    free(enc);
    int rc = start_call(p, RSV_PAY_OP_LOOKUP, EVHTTP_REQ_GET, path, NULL, NULL, cb, arg);
    free(path);
    return rc;
}

int rsv_pay_refund(rsv_pay_t *p, const char *key, const char *charge_id, rsv_pay_cb cb, void *arg)
{
    json_t *o = json_pack("{s:s}", "charge", charge_id);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = start_call(p, RSV_PAY_OP_REFUND, EVHTTP_REQ_POST, "/v1/refunds", key, body, cb, arg);
    free(body);
    return rc;
}

int rsv_pay_list(rsv_pay_t *p, int64_t created_gte, const char *starting_after, int limit,
                 rsv_pay_cb cb, void *arg)
{
    char *path;
    if (starting_after && *starting_after) {
        char *enc = evhttp_encode_uri(starting_after);
        path = cm_xasprintf("/v1/charges?created_gte=%lld&limit=%d&starting_after=%s",
                            (long long)created_gte, limit, enc ? enc : "");
        free(enc);
    } else {
        path = cm_xasprintf("/v1/charges?created_gte=%lld&limit=%d", (long long)created_gte, limit);
    }
    int rc = start_call(p, RSV_PAY_OP_LIST, EVHTTP_REQ_GET, path, NULL, NULL, cb, arg);
    free(path);
    return rc;
}

/* --- lifecycle ----------------------------------------------------------------------- */

rsv_pay_t *rsv_pay_new(struct event_base *base, const rsv_pay_config_t *cfg, char *err,
                       size_t errlen)
{
    rsv_pay_t *p = cm_xcalloc(1, sizeof(*p));
    p->base = base;
    p->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 1000;
    p->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 10000;
    if (cfg->url == NULL || rsv_pay_parse_url(cfg->url, &p->url) != 0) {
        snprintf(err, errlen,
                 "paysim_url must be http(s)://<IPv4 address>[:port][/prefix] (no DNS names)");
        goto err;
    }
    if (p->url.tls) {
        p->tls = cm_tls_client_new(cfg->ca_file, err, errlen);
        if (p->tls == NULL)
            goto err;
    }
    if (cfg->api_key)
        p->auth = cm_xasprintf("Bearer %s", cfg->api_key);
    p->reaper = event_new(base, -1, 0, on_reap, p);
    return p;
err:
    rsv_pay_free(p);
    return NULL;
}

int rsv_pay_inflight(const rsv_pay_t *p)
{
    return p ? p->inflight : 0;
}

void rsv_pay_free(rsv_pay_t *p)
{
    if (p == NULL)
        return;
    p->closing = true;
    while (p->calls)
        fail_call(p->calls, cm_err_shutdown);
    on_reap(-1, 0, p);
    free(p->dead);
    if (p->reaper)
        event_free(p->reaper);
    cm_tls_free(p->tls);
    free(p->auth);
    free(p);
}
