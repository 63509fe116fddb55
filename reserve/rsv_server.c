/*
 * rsv_server — builds and runs the reserve process (see rsv_server.h).
 *
 * Start-up (before the loop; file reads allowed): keys, admin token, TLS, listener,
 * Redis and Postgres clients, metrics. Shutdown on SIGTERM/SIGINT: stop accepting,
 * answer /readyz 503, let in-flight requests finish (bounded to 10 s), then exit the
 * loop.
 */
#include "rsv_server.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_drain.h"
#include "cm_err.h"
#include "cm_jwt.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "rsv_auth.h"
#include "rsv_avail.h"
#include "rsv_catalog.h"
#include "rsv_cors.h"
#include "rsv_pay.h"
#include "rsv_reconcile.h"

#define DRAIN_LIMIT_NS (10ull * 1000 * 1000 * 1000)

static const char *const endpoint_names[RSV_EP_COUNT] = {
    "healthz",      "readyz",          "metrics",         "availability",    "seats",
    "hold_create",  "hold_get",        "hold_extend",     "hold_release",    "confirm",
    "checkout_get", "admin_event_put", "admin_event_get", "admin_checkouts", "other",
};

size_t rsv_key_prefix(const char *event, char *buf, size_t len)
{
    int n = snprintf(buf, len, "os:{%s}:", event);
    return n < 0 ? 0 : (size_t)n;
}

static void random_hex(char *out, size_t nbytes)
{
    unsigned char raw[32];
    static const char hex[] = "0123456789abcdef";
    cm_tls_random(raw, nbytes);
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
}

void rsv_hex_id(char *buf, size_t size, const char *suffix)
{
    char hex[33];
    random_hex(hex, 16);
    snprintf(buf, size, "%s.%s", hex, suffix);
}

void rsv_random_id(char *buf, size_t size, const char *prefix)
{
    char hex[33];
    random_hex(hex, 16);
    snprintf(buf, size, "%s%s", prefix, hex);
}

/* --- requests ---------------------------------------------------------------------- */

void rsv_req_start(rsv_req_t *r, rsv_server_t *srv, struct evhttp_request *req, rsv_endpoint_t ep)
{
    r->srv = srv;
    r->req = req;
    r->ep = ep;
    r->start_ns = cm_time_mono_ns();
    srv->inflight++;
}

void rsv_req_replied(rsv_req_t *r)
{
    double secs = (double)(cm_time_mono_ns() - r->start_ns) / 1e9;
    cm_histogram_observe(r->srv->m.latency[r->ep], secs);
    r->srv->inflight--;
    r->req = NULL;
}

void rsv_reply_json(rsv_req_t *r, int code, json_t *body)
{
    cm_http_send_json(r->req, code, body);
    rsv_req_replied(r);
}

void rsv_reply_error(rsv_req_t *r, int code, const char *error, const char *message, json_t *extra)
{
    cm_http_send_error(r->req, code, error, message, extra);
    rsv_req_replied(r);
}

void rsv_reply_empty(rsv_req_t *r, int code)
{
    cm_http_send_empty(r->req, code);
    rsv_req_replied(r);
}

void rsv_reply_text(rsv_req_t *r, int code, const char *ctype, const char *body, size_t len)
{
    cm_http_send_body(r->req, code, ctype, body, len, false);
    rsv_req_replied(r);
}

void rsv_reply_unavailable(rsv_req_t *r, const char *what, const char *err)
{
    cm_counter_inc(r->srv->m.backend_errors);
    char msg[160];
    snprintf(msg, sizeof(msg), "%s failed (%s); retry shortly", what, err ? err : "error");
    evhttp_add_header(evhttp_request_get_output_headers(r->req), "Retry-After", "1");
    rsv_reply_error(r, 503, "unavailable", msg, NULL);
}

void rsv_reply_auth(rsv_req_t *r, int result, const char *why)
{
    if (result == RSV_AUTH_WRONG_EVENT) {
        rsv_reply_error(r, 403, "wrong_event", "the admission token is for another event", NULL);
        return;
    }
    if (result == RSV_AUTH_BUSY) {
        rsv_reply_unavailable(r, "verifying the admission token", why);
        return;
    }
    if (result == RSV_AUTH_LIMITED) {
        char secs[24];
        snprintf(secs, sizeof(secs), "%lld", (long long)r->srv->cfg.auth_fail_window_s);
        evhttp_add_header(evhttp_request_get_output_headers(r->req), "Retry-After", secs);
        rsv_reply_error(r, 429, "rate_limited",
                        "too many invalid admission tokens from this address; retry later", NULL);
        return;
    }
    cm_counter_inc(r->srv->m.invalid_tokens);
    cm_log(CM_LOG_DEBUG, "rejected admission token: %s", why ? why : "?");
    evhttp_add_header(evhttp_request_get_output_headers(r->req), "WWW-Authenticate",
                      "Bearer error=\"invalid_token\"");
    rsv_reply_error(r, 401, "invalid_token", "a valid admission token is required", NULL);
}

bool rsv_admin_authorized(rsv_server_t *srv, struct evhttp_request *req)
{
    size_t len = 0;
    const char *tok = cm_http_bearer(req, &len);
    size_t want = strlen(srv->admin_token);
    if (tok == NULL)
        return false;
    /* Constant time in the token's content: compare every byte of the expected one. */
    unsigned char diff = (unsigned char)(len != want);
    for (size_t i = 0; i < want; i++)
        diff |= (unsigned char)(srv->admin_token[i] ^ (i < len ? tok[i] : 0));
    return diff == 0;
}

/* --- lifecycle ----------------------------------------------------------------------- */

static void register_saga_metrics(rsv_server_t *srv)
{
    cm_metrics_t *m = srv->metrics;
    rsv_metrics_t *x = &srv->m;
    static const char *const outcomes[] = {"paid", "declined", "none", "refunded", "unknown"};
    static const char *const ops[] = {"charge", "lookup", "refund"};
    char labels[64];
    x->saga_transitions = cm_metrics_counter(m, "onsale_reserve_checkout_transitions_total",
                                             "checkout saga transitions committed", NULL);
    x->refunds = cm_metrics_counter(m, "onsale_reserve_refunds_total",
                                    "payments refunded (hold expired or unit taken)", NULL);
    x->late_payments = cm_metrics_counter(m, "onsale_reserve_late_payments_total",
                                          "payments that succeeded after their hold expired", NULL);
    x->reconcile_claimed = cm_metrics_counter(m, "onsale_reserve_reconciler_actions_total",
                                              "reconciler actions", "action=\"claimed\"");
    x->reconcile_finished = cm_metrics_counter(m, "onsale_reserve_reconciler_actions_total",
                                               "reconciler actions", "action=\"finished\"");
    x->reconcile_released = cm_metrics_counter(m, "onsale_reserve_reconciler_actions_total",
                                               "reconciler actions", "action=\"released\"");
    x->reconcile_lookups = cm_metrics_counter(m, "onsale_reserve_reconciler_actions_total",
                                              "reconciler actions", "action=\"lookup\"");
    x->catalog_queries =
        cm_metrics_counter(m, "onsale_reserve_catalog_queries_total",
                           "Postgres queries of the event catalogue (loads, version checks, "
                           "event listings; never one per request for an unknown event)",
                           NULL);
    x->booking_failures = cm_metrics_counter(
        m, "onsale_reserve_booking_failures_total",
        "paid checkouts whose booking insert failed (not a unique conflict)", NULL);
    x->booking_abandoned = cm_metrics_counter(
        m, "onsale_reserve_bookings_abandoned_total",
        "paid checkouts refunded because the booking kept failing (alert on any)", NULL);
    static const char *const ledger[] = {"refunding", "booked", "open", "mismatch", "unknown"};
    for (int i = 0; i < 5; i++) {
        snprintf(labels, sizeof(labels), "outcome=\"%s\"", ledger[i]);
        x->ledger_charges[i] = cm_metrics_counter(
            m, "onsale_reserve_ledger_charges_total",
            "succeeded, unrefunded provider charges seen by the ledger check", labels);
    }
    x->ledger_scans[0] = cm_metrics_counter(m, "onsale_reserve_ledger_scans_total",
                                            "provider ledger pages read", "result=\"ok\"");
    x->ledger_scans[1] = cm_metrics_counter(m, "onsale_reserve_ledger_scans_total",
                                            "provider ledger pages read", "result=\"error\"");
    for (int i = 0; i < 5; i++) {
        snprintf(labels, sizeof(labels), "outcome=\"%s\"", outcomes[i]);
        x->pay_outcomes[i] = cm_metrics_counter(m, "onsale_reserve_payment_outcomes_total",
                                                "payment provider answers by outcome", labels);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(labels, sizeof(labels), "op=\"%s\"", ops[i]);
        x->pay_latency[i] = cm_metrics_histogram(
            m, "onsale_reserve_payment_seconds", "payment provider call latency", labels,
            cm_metrics_latency_bounds, cm_metrics_latency_nbounds);
    }
    for (int i = 0; i < RSV_SAGA_NSTATES; i++) {
        snprintf(labels, sizeof(labels), "state=\"%s\"", rsv_saga_state_names[i]);
        x->checkouts_by_state[i] =
            cm_metrics_gauge(m, "onsale_reserve_checkouts",
                             "checkouts by state (refreshed every few seconds)", labels);
    }
}

static void register_metrics(rsv_server_t *srv)
{
    cm_metrics_t *m = srv->metrics;
    rsv_metrics_t *x = &srv->m;
    x->holds_taken = cm_metrics_counter(m, "onsale_reserve_holds_total", "holds taken", NULL);
    x->hold_conflicts =
        cm_metrics_counter(m, "onsale_reserve_hold_conflicts_total",
                           "hold attempts refused: seat held or sold, pool empty", NULL);
    x->holds_expired = cm_metrics_counter(m, "onsale_reserve_holds_expired_total",
                                          "operations that found their hold expired", NULL);
    x->holds_released = cm_metrics_counter(m, "onsale_reserve_holds_released_total",
                                           "holds released by their owner", NULL);
    x->limit_exceeded = cm_metrics_counter(m, "onsale_reserve_limit_exceeded_total",
                                           "hold attempts over max_per_buyer", NULL);
    x->invalid_tokens =
        cm_metrics_counter(m, "onsale_reserve_invalid_tokens_total",
                           "requests with a missing or invalid admission token", NULL);
    x->uniqueness_conflicts =
        cm_metrics_counter(m, "onsale_reserve_uniqueness_conflicts_total",
                           "bookings refused by the Postgres unique constraint", NULL);
    x->confirmations = cm_metrics_counter(m, "onsale_reserve_confirmations_total",
                                          "holds converted into bookings", NULL);
    x->confirm_replays = cm_metrics_counter(m, "onsale_reserve_confirm_replays_total",
                                            "confirmations answered from a stored result", NULL);
    x->reseeds = cm_metrics_counter(m, "onsale_reserve_redis_reseeds_total",
                                    "events whose Redis state was loaded from Postgres", NULL);
    x->backend_errors =
        cm_metrics_counter(m, "onsale_reserve_backend_errors_total",
                           "requests answered 503 because Redis or Postgres failed", NULL);
    static const double h2c[] = {1, 5, 15, 30, 60, 120, 300, 600, 900, 1800};
    x->hold_to_confirm = cm_metrics_histogram(m, "onsale_reserve_hold_to_confirm_seconds",
                                              "time from taking a hold to its confirmation", NULL,
                                              h2c, sizeof(h2c) / sizeof(h2c[0]));
    register_saga_metrics(srv);
    cm_metrics_endpoint_latency(m, "onsale_reserve_request_seconds", "request latency by endpoint",
                                endpoint_names, RSV_EP_COUNT, x->latency);
}

static double gauge_inflight(void *arg)
{
    return ((rsv_server_t *)arg)->inflight;
}

static double gauge_connections(void *arg)
{
    return cm_http_server_connections(((rsv_server_t *)arg)->http);
}

static double gauge_pg(void *arg)
{
    return rsv_pg_connected(((rsv_server_t *)arg)->pg);
}

static double gauge_redis(void *arg)
{
    return cm_redis_connected(((rsv_server_t *)arg)->redis);
}

/* Start-up only: reads a small file into a trimmed heap string. */
static char *read_token_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r"); /* blocking-ok: start-up, before the loop */
    if (f == NULL) {
        snprintf(err, errlen, "admin_token_file %s: %s", path, strerror(errno));
        return NULL;
    }
    char buf[512];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n < 16) {
        snprintf(err, errlen, "admin_token_file %s: the token must be at least 16 characters",
                 path);
        return NULL;
    }
    return cm_xstrdup(buf);
}

rsv_server_t *rsv_server_new(const rsv_config_t *cfg, char *err, size_t errlen)
{
    rsv_server_t *srv = cm_xcalloc(1, sizeof(*srv));
    srv->cfg = *cfg;
    if (cfg->admission_keys == NULL || cfg->admin_token_file == NULL) {
        snprintf(err, errlen, "admission_keys and admin_token_file must be set");
        goto err;
    }
    srv->keys = rsv_auth_keys_load(cfg->admission_keys, err, errlen);
    if (srv->keys == NULL)
        goto err;
    srv->admin_token = read_token_file(cfg->admin_token_file, err, errlen);
    if (srv->admin_token == NULL)
        goto err;
    srv->cors = rsv_cors_new(cfg->cors_origins, err, errlen);
    if (srv->cors == NULL)
        goto err;
    if (!cfg->plain_http) {
        if (cfg->tls_cert == NULL || cfg->tls_key == NULL) {
            snprintf(err, errlen, "tls_cert and tls_key must be set (or plain_http = true)");
            goto err;
        }
        srv->tls = cm_tls_server_new(cfg->tls_cert, cfg->tls_key, err, errlen);
        if (srv->tls == NULL)
            goto err;
    }
    /* Worker threads (token verification) wake the loop with event_active. */
    evthread_use_pthreads();
    srv->base = event_base_new();
    if (srv->base == NULL) {
        snprintf(err, errlen, "event_base_new failed");
        goto err;
    }
    rsv_auth_config_t ac = {
        .issuer = cfg->token_issuer,
        .leeway_s = cfg->token_leeway_s,
        .max_lifetime_s = cfg->token_max_lifetime_s,
        .cache_size = (size_t)cfg->token_cache_size,
        .threads = (int)cfg->verify_threads,
        .max_queue = (size_t)cfg->verify_max_queue,
        .fail_limit = (int)cfg->auth_fail_limit,
        .fail_window_s = (int)cfg->auth_fail_window_s,
    };
    srv->auth = rsv_auth_new(srv->base, srv->keys, &ac);
    srv->metrics = cm_metrics_new();
    register_metrics(srv);
    srv->redis = cm_redis_open(srv->base, cfg->redis_host, (int)cfg->redis_port, cfg->redis_cluster,
                               (int)cfg->redis_timeout_ms);
    if (srv->redis == NULL) {
        snprintf(err, errlen, "redis_cluster: expected ip:port[,ip:port...]");
        goto err;
    }
    srv->pg = rsv_pg_new(srv->base, cfg->pg_conninfo, (int)cfg->pg_pool_size,
                         (int)cfg->pg_timeout_ms, (int)cfg->pg_max_queue);
    srv->pg_read = rsv_pg_new(srv->base, cfg->pg_conninfo, (int)cfg->pg_read_pool_size,
                              (int)cfg->pg_timeout_ms, (int)cfg->pg_max_queue);
    srv->catalog = rsv_catalog_new(srv);
    srv->avail = rsv_avail_new(srv);
    if (cfg->checkout_lease_s * 1000 < cfg->pay_timeout_ms + 5000) {
        snprintf(err, errlen, "checkout_lease_s must exceed pay_timeout_ms by at least 5 s");
        goto err;
    }
    rsv_pay_config_t pc = {
        .url = cfg->paysim_url,
        .ca_file = cfg->paysim_ca,
        .api_key = cfg->paysim_api_key,
        .connect_timeout_ms = (int)cfg->pay_connect_timeout_ms,
        .timeout_ms = (int)cfg->pay_timeout_ms,
    };
    srv->pay = rsv_pay_new(srv->base, &pc, err, errlen);
    if (srv->pay == NULL)
        goto err;
    srv->reconcile = rsv_reconcile_new(srv);
    if (cfg->fault && *cfg->fault)
        cm_log(CM_LOG_WARN, "fault points armed: %s (tests only)", cfg->fault);
    cm_http_limits_t lim = {
        .max_header_bytes = (size_t)cfg->max_header_bytes,
        .max_body_bytes = (size_t)cfg->max_body_bytes,
        .idle_timeout_s = (int)cfg->idle_timeout_s,
        .max_connections = (int)cfg->max_connections,
        .proxy_from = cfg->proxy_from,
    };
    srv->http = cm_http_server_new(srv->base, cfg->listen_addr, (int)cfg->port, srv->tls, &lim,
                                   rsv_routes_dispatch, srv, err, errlen);
    if (srv->http == NULL)
        goto err;
    cm_metrics_gauge_fn(srv->metrics, "onsale_reserve_inflight_requests", "requests being served",
                        NULL, gauge_inflight, srv);
    cm_metrics_gauge_fn(srv->metrics, "onsale_reserve_open_connections", "open client connections",
                        NULL, gauge_connections, srv);
    cm_metrics_gauge_fn(srv->metrics, "onsale_reserve_postgres_connections",
                        "Postgres connections up", NULL, gauge_pg, srv);
    cm_metrics_gauge_fn(srv->metrics, "onsale_reserve_redis_up", "1 while Redis is connected", NULL,
                        gauge_redis, srv);
    return srv;
err:
    rsv_server_free(srv);
    return NULL;
}

int rsv_server_run(rsv_server_t *srv)
{
    srv->drain = cm_drain_new(srv->base, srv->http, "reserve", &srv->inflight, DRAIN_LIMIT_NS);
    cm_drain_set_grace(srv->drain, (int)srv->cfg.drain_grace_ms);
    return cm_drain_run(srv->drain);
}

void rsv_server_free(rsv_server_t *srv)
{
    if (srv == NULL)
        return;
    rsv_auth_free(srv->auth); /* first: its workers may still answer requests */
    rsv_auth_keys_free(srv->keys);
    rsv_reconcile_free(srv->reconcile);
    rsv_pay_free(srv->pay); /* its callbacks may still record steps: before pg and redis */
    cm_http_server_free(srv->http);
    rsv_avail_free(srv->avail);
    rsv_catalog_free(srv->catalog);
    rsv_pg_free(srv->pg);
    rsv_pg_free(srv->pg_read);
    cm_redis_free(srv->redis);
    cm_drain_free(srv->drain);
    cm_metrics_free(srv->metrics);
    if (srv->base)
        event_base_free(srv->base);
    cm_tls_free(srv->tls);
    rsv_cors_free(srv->cors);
    free(srv->admin_token);
    free(srv);
}
