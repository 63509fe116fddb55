/*
 * rsv_req — the reserve's request context and replies (see rsv_req.h): thin names over
 * the service shell's (cm_service), plus what only the reserve answers: a refused
 * admission token (rsv_auth's results, docs/api.md "Admission tokens" and "DPoP"), a
 * backend failure counted in onsale_reserve_backend_errors_total, and the start of a page
 * route (the storefront's, the box office's). Worker threads; the metrics' registration
 * gathers each module's on the main thread.
 */
#include "rsv_req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "rsv_auth.h"

void rsv_metrics_register(rsv_metrics_t *m, cm_metrics_t *reg)
{
    rsv_hold_metrics_register(&m->hold, reg);
    rsv_auth_metrics_register(&m->auth, reg);
    rsv_saga_metrics_register(&m->saga, reg);
    rsv_checkout_metrics_register(&m->checkout, reg);
    rsv_catalog_metrics_register(&m->catalog, reg);
    m->backend_errors =
        cm_metrics_counter(reg, "onsale_reserve_backend_errors_total",
                           "requests answered 503 because Redis or Postgres failed", NULL);
    rsv_reconcile_metrics_register(&m->reconcile, reg);
    rsv_ledger_metrics_register(&m->ledger, reg);
    rsv_pay_metrics_register(&m->pay, reg);
    rsv_webhook_metrics_register(&m->webhook, reg);
    rsv_stock_metrics_register(&m->stock, reg);
}

void rsv_req_start(rsv_req_t *r, rsv_server_t *srv, cm_req_t *req, rsv_endpoint_t ep)
{
    r->srv = srv;
    cm_svc_req_start(&r->svc, &srv->svc, req, (size_t)ep);
}

void rsv_req_replied(rsv_req_t *r)
{
    cm_svc_req_replied(&r->svc);
}

const char *rsv_req_page_file(rsv_req_t *r, char **seg, int n, const char *what)
{
    cm_req_t *req = r->svc.req;
    cm_http_method_t m = cm_http_method(req);
    if (m != CM_HTTP_GET && m != CM_HTTP_HEAD) {
        rsv_reply_error(r, 405, "method_not_allowed", "use GET", NULL);
        return NULL;
    }
    const char *path = cm_http_uri_path(req);
    if (n == 1 && path[0] == '/' && strcmp(path + 1, seg[0]) == 0) {
        /* keep the query (?event=…); the fragment never reaches the server */
        const char *query = cm_http_uri_query(req);
        char *loc = cm_xasprintf("/%s/%s%s", seg[0], query ? "?" : "", query ? query : "");
        char *msg = cm_xasprintf("%s is at /%s/", what, seg[0]);
        cm_http_add_header(req, "Location", loc);
        rsv_reply_error(r, 301, "moved", msg, NULL);
        free(msg);
        free(loc);
        return NULL;
    }
    return n == 1 ? "index.html" : seg[1];
}

void rsv_reply_json(rsv_req_t *r, int code, json_t *body)
{
    cm_svc_reply_json(&r->svc, code, body);
}

void rsv_reply_error(rsv_req_t *r, int code, const char *error, const char *message, json_t *extra)
{
    cm_svc_reply_error(&r->svc, code, error, message, extra);
}

void rsv_reply_empty(rsv_req_t *r, int code)
{
    cm_svc_reply_empty(&r->svc, code);
}

void rsv_reply_text(rsv_req_t *r, int code, const char *ctype, const char *body, size_t len)
{
    cm_svc_reply_text(&r->svc, code, ctype, body, len);
}

void rsv_reply_unavailable(rsv_req_t *r, const char *what, const char *err)
{
    cm_counter_inc(r->srv->m.backend_errors);
    cm_svc_reply_unavailable(&r->svc, what, err);
}

/* A bound token's refused proof (rsv_auth, docs/api.md "DPoP"): the gateway's codes. */
static void reply_proof(rsv_req_t *r, int result, const char *why)
{
    bool missing = result == RSV_AUTH_PROOF_REQUIRED;
    cm_http_add_header(r->svc.req, "WWW-Authenticate",
                       missing ? "DPoP algs=\"ES256\""
                               : "DPoP algs=\"ES256\", error=\"invalid_dpop_proof\"");
    rsv_reply_error(r, 401, missing ? "proof_required" : "invalid_proof",
                    missing ? "this admission token is bound to a key: send a DPoP proof "
                              "signed by it"
                            : "the DPoP proof of this bound admission token is refused",
                    json_pack("{s:s}", "reason", why ? why : "invalid"));
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
    if (result == RSV_AUTH_PROOF_REQUIRED || result == RSV_AUTH_INVALID_PROOF) {
        reply_proof(r, result, why);
        return;
    }
    if (result == RSV_AUTH_PROOF_UNAVAILABLE) {
        rsv_reply_unavailable(r, why, cm_err_closed);
        return;
    }
    if (result == RSV_AUTH_LIMITED) {
        char secs[24];
        snprintf(secs, sizeof(secs), "%lld", (long long)r->srv->cfg.auth_fail_window_s);
        cm_http_add_header(r->svc.req, "Retry-After", secs);
        rsv_reply_error(r, 429, "rate_limited",
                        "too many invalid admission tokens from this address; retry later", NULL);
        return;
    }
    cm_counter_inc(r->srv->m.auth.invalid_tokens);
    cm_log(CM_LOG_DEBUG, "rejected admission token: %s", why ? why : "?");
    cm_http_add_header(r->svc.req, "WWW-Authenticate", "Bearer error=\"invalid_token\"");
    rsv_reply_error(r, 401, "invalid_token", "a valid admission token is required", NULL);
}
