/*
 * gw_routes — maps method + path to a handler (docs/api.md, gateway table).
 *
 * Event-loop thread. Two listeners: the fans' (queue, status, page, JWKS, health) and
 * the admin one (admin API, dashboard, /metrics, health); each answers the other's
 * paths 404. The path is split into decoded segments once; event ids are
 * checked here so handlers receive only well-formed ids. Everything not listed is 404
 * not_found, a listed path with another method 405.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cm_parse.h"
#include "gw_admin.h"
#include "gw_codes.h"
#include "gw_enqueue.h"
#include "gw_page.h"
#include "gw_queue.h"
#include "gw_req.h"
#include "gw_routes.h"

#define MAX_SEGS 5
/* join takes no body from the API (an empty JSON object at most); a browser's form brings
 * a presale code, and the sale site's form an enqueue token (gw_enqueue.h). */
#define JOIN_BODY_MAX      96
#define JOIN_FORM_BODY_MAX (JOIN_BODY_MAX + GW_ENQUEUE_MAX_LEN)

static size_t join_body_max(const char *content_type)
{
    return content_type != NULL &&
                   strncasecmp(content_type, "application/x-www-form-urlencoded", 33) == 0
               ? JOIN_FORM_BODY_MAX
               : JOIN_BODY_MAX;
}

static void reply_simple(gw_server_t *srv, cm_req_t *req, gw_endpoint_t ep, int code,
                         const char *error, const char *message)
{
    cm_svc_refuse(&srv->svc, req, (size_t)ep, code, error, message);
}

static size_t body_len(cm_req_t *req)
{
    size_t len = 0;
    cm_http_body(req, &len);
    return len;
}

static int method_is(cm_req_t *req, cm_http_method_t t)
{
    return cm_http_method(req) == t;
}

static void jwks(gw_server_t *srv, cm_req_t *req)
{
    gw_req_t r;
    gw_req_start(&r, srv, req, GW_EP_JWKS);
    cm_http_add_header(req, "Cache-Control", "public, max-age=60");
    const char *jwks = cm_reload_cell_get(srv->jwks); /* a reload may publish new keys */
    cm_http_send_body(req, 200, "application/jwk-set+json", jwks, strlen(jwks), true);
    gw_req_replied(&r);
}

/* GET /admin/: the dashboard holds no data and asks for the token itself (gw_page.h). */
static void dashboard(gw_server_t *srv, cm_req_t *req)
{
    gw_req_t r;
    gw_req_start(&r, srv, req, GW_EP_DASHBOARD);
    gw_page_dashboard(req);
    gw_req_replied(&r);
}

/* GET /q/{event}/pow.js: the page's proof-of-work worker (a file: the CSP allows no inline one). */
static void pow_worker(gw_server_t *srv, cm_req_t *req)
{
    gw_req_t r;
    gw_req_start(&r, srv, req, GW_EP_PAGE);
    gw_page_pow_worker(req);
    gw_req_replied(&r);
}

/* /q/{event}[/join|/status|/challenge|/pow.js] */
static void route_queue(gw_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (n < 2 || n > 3) {
        reply_simple(srv, req, GW_EP_OTHER, 404, "not_found", "no such endpoint");
        return;
    }
    if (!cm_parse_ident(seg[1])) {
        reply_simple(srv, req, GW_EP_OTHER, 400, "invalid_request",
                     "event ids are 1-64 characters of [A-Za-z0-9._-]");
        return;
    }
    if (n == 2) {
        if (method_is(req, CM_HTTP_GET) || method_is(req, CM_HTTP_HEAD))
            gw_queue_page(srv, req, seg[1]);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
    } else if (strcmp(seg[2], "join") == 0) {
        if (!method_is(req, CM_HTTP_POST))
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use POST");
        else if (body_len(req) > join_body_max(cm_http_header(req, "Content-Type")))
            reply_simple(srv, req, GW_EP_JOIN, 413, "body_too_large",
                         "join takes no body (at most an empty JSON object, or a form with its "
                         "code or enqueue token)");
        else
            gw_queue_join(srv, req, seg[1]);
    } else if (strcmp(seg[2], "pow.js") == 0) {
        if (method_is(req, CM_HTTP_GET) || method_is(req, CM_HTTP_HEAD))
            pow_worker(srv, req);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
    } else if (strcmp(seg[2], "challenge") == 0) {
        if (method_is(req, CM_HTTP_GET))
            gw_queue_challenge(srv, req, seg[1]);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
    } else if (strcmp(seg[2], "status") == 0) {
        if (method_is(req, CM_HTTP_GET))
            gw_queue_status(srv, req, seg[1]);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
    } else {
        reply_simple(srv, req, GW_EP_OTHER, 404, "not_found", "no such endpoint");
    }
}

/* /admin/events/{event}/codes[/{batch}.csv | /revoke] (gw_codes.h). */
static void route_codes(gw_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (!cm_parse_ident(seg[2])) {
        reply_simple(srv, req, GW_EP_ADMIN, 400, "invalid_request",
                     "event ids are 1-64 characters of [A-Za-z0-9._-]");
    } else if (n == 4) {
        if (method_is(req, CM_HTTP_POST))
            gw_codes_issue(srv, req, seg[2]);
        else if (method_is(req, CM_HTTP_GET))
            gw_codes_list(srv, req, seg[2]);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use POST or GET");
    } else if (strcmp(seg[4], "revoke") == 0) {
        if (method_is(req, CM_HTTP_POST))
            gw_codes_revoke(srv, req, seg[2]);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use POST");
    } else if (method_is(req, CM_HTTP_GET)) {
        gw_codes_export(srv, req, seg[2], seg[4]);
    } else {
        reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
    }
}

static void route_admin(gw_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (n == 1) {
        if (method_is(req, CM_HTTP_GET))
            dashboard(srv, req);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
        return;
    }
    if (!cm_svc_admin_gate(&srv->svc, req, GW_EP_ADMIN))
        return;
    if (n == 4 && strcmp(seg[1], "events") == 0 && strcmp(seg[3], "history") == 0) {
        if (!cm_parse_ident(seg[2]))
            reply_simple(srv, req, GW_EP_ADMIN, 400, "invalid_request",
                         "event ids are 1-64 characters of [A-Za-z0-9._-]");
        else if (method_is(req, CM_HTTP_GET))
            gw_admin_event_history(srv, req, seg[2]);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
        return;
    }
    if (n >= 4 && n <= 5 && strcmp(seg[1], "events") == 0 && strcmp(seg[3], "codes") == 0) {
        route_codes(srv, req, seg, n);
        return;
    }
    if (n == 2 && strcmp(seg[1], "config") == 0) {
        if (method_is(req, CM_HTTP_GET))
            gw_admin_config(srv, req);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
        return;
    }
    if (strcmp(seg[1], "events") != 0 || n > 3) {
        reply_simple(srv, req, GW_EP_OTHER, 404, "not_found", "no such endpoint");
        return;
    }
    if (n == 2) {
        if (method_is(req, CM_HTTP_GET))
            gw_admin_events_list(srv, req);
        else
            reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed", "use GET");
        return;
    }
    if (!cm_parse_ident(seg[2])) {
        reply_simple(srv, req, GW_EP_ADMIN, 400, "invalid_request",
                     "event ids are 1-64 characters of [A-Za-z0-9._-]");
        return;
    }
    switch (cm_http_method(req)) {
    case CM_HTTP_PUT:
        gw_admin_event_write(srv, req, seg[2], false);
        break;
    case CM_HTTP_PATCH:
        gw_admin_event_write(srv, req, seg[2], true);
        break;
    case CM_HTTP_GET:
        gw_admin_event_get(srv, req, seg[2]);
        break;
    case CM_HTTP_DELETE:
        gw_admin_event_delete(srv, req, seg[2]);
        break;
    default:
        reply_simple(srv, req, GW_EP_OTHER, 405, "method_not_allowed",
                     "use PUT, PATCH, GET or DELETE");
    }
}

size_t gw_routes_body_cap(cm_http_method_t method, const char *path, const char *content_type)
{
    /* /q/{event}/join, as sent (an encoded "join" still meets the handler's check) */
    size_t n = strlen(path);
    if (method == CM_HTTP_POST && n > 8 && strncmp(path, "/q/", 3) == 0 &&
        strcmp(path + n - 5, "/join") == 0 && memchr(path + 3, '/', n - 8) == NULL)
        return join_body_max(content_type);
    return SIZE_MAX;
}

/* The fans' listener and the admin listener share the parsing; admin says which. */
static void dispatch(gw_server_t *srv, cm_req_t *req, bool admin)
{
    char buf[1024];
    char *seg[MAX_SEGS];
    int n = cm_http_path(req, buf, sizeof(buf), seg, MAX_SEGS);
    if (n < 0) {
        reply_simple(srv, req, GW_EP_OTHER, 400, "invalid_request", "malformed path");
        return;
    }
    if (cm_svc_route_shared(&srv->svc, req, seg, n, admin))
        return; /* /healthz, /readyz, /metrics */
    if (admin) {
        if (n >= 1 && strcmp(seg[0], "admin") == 0)
            return route_admin(srv, req, seg, n);
        reply_simple(srv, req, GW_EP_OTHER, 404, "not_found",
                     "no such endpoint (the admin listener serves /admin/ and /metrics)");
        return;
    }
    if (n == 2 && strcmp(seg[0], ".well-known") == 0 && strcmp(seg[1], "jwks.json") == 0 &&
        method_is(req, CM_HTTP_GET))
        return jwks(srv, req);
    if (n >= 1 && strcmp(seg[0], "q") == 0)
        return route_queue(srv, req, seg, n);
    reply_simple(srv, req, GW_EP_OTHER, 404, "not_found", "no such endpoint");
}

void gw_routes_dispatch(cm_req_t *req, void *arg)
{
    dispatch(arg, req, false);
}

void gw_routes_admin(cm_req_t *req, void *arg)
{
    dispatch(arg, req, true);
}
