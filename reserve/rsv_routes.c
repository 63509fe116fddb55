/*
 * rsv_routes — maps method + path to a handler (docs/api.md, reserve table).
 *
 * Event-loop thread. Two listeners: the fans' (buyer API, storefront, health) and the
 * admin one (admin API, /metrics, health); each answers the other's paths 404. The path is split
 * into decoded segments once; identifiers are checked here so handlers receive only well-formed
 * ids. Everything not listed is 404 not_found, a listed path with another method 405.
 */
#include <event2/http.h>
#include <string.h>

#include "cm_mem.h"
#include "cm_parse.h"
#include "rsv_done.h"
#include "rsv_admin.h"
#include "rsv_avail.h"
#include "rsv_checkout.h"
#include "rsv_cors.h"
#include "rsv_hold.h"
#include "rsv_office.h"
#include "rsv_req.h"
#include "rsv_routes.h"
#include "rsv_shop.h"
#include "rsv_webhook.h"

#define MAX_SEGS 6

static void reply_simple(rsv_server_t *srv, cm_req_t *req, rsv_endpoint_t ep, int code,
                         const char *error, const char *message)
{
    cm_svc_refuse(&srv->svc, req, (size_t)ep, code, error, message);
}

static int method_is(cm_req_t *req, cm_http_method_t t)
{
    return cm_http_method(req) == t;
}

/* /v1/events/{event}/holds|availability|seats|done */
static void route_events(rsv_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (n != 4) {
        reply_simple(srv, req, RSV_EP_OTHER, 404, "not_found", "no such endpoint");
        return;
    }
    if (!cm_parse_ident(seg[2])) {
        reply_simple(srv, req, RSV_EP_OTHER, 400, "invalid_request",
                     "event ids are 1-64 characters of [A-Za-z0-9._-]");
        return;
    }
    if (strcmp(seg[3], "holds") == 0) {
        if (method_is(req, CM_HTTP_POST))
            rsv_hold_create(srv, req, seg[2]);
        else
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use POST");
    } else if (strcmp(seg[3], "done") == 0) {
        if (method_is(req, CM_HTTP_POST))
            rsv_done_handle(srv, req, seg[2]);
        else
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use POST");
    } else if (strcmp(seg[3], "availability") == 0 || strcmp(seg[3], "seats") == 0) {
        if (method_is(req, CM_HTTP_GET))
            rsv_avail_serve(srv, req, seg[2], strcmp(seg[3], "seats") == 0);
        else
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use GET");
    } else {
        reply_simple(srv, req, RSV_EP_OTHER, 404, "not_found", "no such endpoint");
    }
}

/* /v1/holds/{hold}[/extend|/confirm] */
static void route_holds(rsv_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (n == 3) {
        if (method_is(req, CM_HTTP_GET))
            rsv_hold_get(srv, req, seg[2]);
        else if (method_is(req, CM_HTTP_DELETE))
            rsv_hold_release(srv, req, seg[2]);
        else
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use GET or DELETE");
        return;
    }
    if (n == 4 && (strcmp(seg[3], "extend") == 0 || strcmp(seg[3], "confirm") == 0)) {
        if (!method_is(req, CM_HTTP_POST))
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use POST");
        else if (seg[3][0] == 'e')
            rsv_hold_extend(srv, req, seg[2]);
        else
            rsv_checkout_confirm(srv, req, seg[2]);
        return;
    }
    reply_simple(srv, req, RSV_EP_OTHER, 404, "not_found", "no such endpoint");
}

/* /admin/bookings[/{ref}[/cancel | /items/{unit}/refund]] (the box office, rsv_office) */
static void route_office(rsv_server_t *srv, cm_req_t *req, char **seg, int n)
{
    bool get = n <= 3, cancel = n == 4 && strcmp(seg[3], "cancel") == 0;
    bool item = n == 6 && strcmp(seg[3], "items") == 0 && strcmp(seg[5], "refund") == 0;
    if (!get && !cancel && !item) {
        reply_simple(srv, req, RSV_EP_OTHER, 404, "not_found", "no such endpoint");
    } else if (method_is(req, get ? CM_HTTP_GET : CM_HTTP_POST)) {
        if (n == 2)
            rsv_office_find(srv, req);
        else if (n == 3)
            rsv_office_get(srv, req, seg[2]);
        else
            rsv_office_cancel(srv, req, seg[2], item ? seg[4] : NULL);
    } else {
        reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed",
                     get ? "use GET" : "use POST");
    }
}

static void route_admin(rsv_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (!cm_svc_admin_gate(&srv->svc, req, RSV_EP_OTHER))
        return;
    if (n == 3 && strcmp(seg[1], "events") == 0) {
        if (!cm_parse_ident(seg[2])) {
            reply_simple(srv, req, RSV_EP_OTHER, 400, "invalid_request",
                         "event ids are 1-64 characters of [A-Za-z0-9._-]");
        } else if (method_is(req, CM_HTTP_PUT)) {
            rsv_admin_event_put(srv, req, seg[2]);
        } else if (method_is(req, CM_HTTP_GET)) {
            rsv_admin_event_get(srv, req, seg[2]);
        } else {
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use PUT or GET");
        }
        return;
    }
    if (n >= 2 && strcmp(seg[1], "bookings") == 0)
        return route_office(srv, req, seg, n);
    if (n == 4 && strcmp(seg[1], "events") == 0 &&
        (strcmp(seg[3], "bookings.csv") == 0 || strcmp(seg[3], "reconciliation.csv") == 0)) {
        if (!cm_parse_ident(seg[2]))
            reply_simple(srv, req, RSV_EP_OTHER, 400, "invalid_request",
                         "event ids are 1-64 characters of [A-Za-z0-9._-]");
        else if (method_is(req, CM_HTTP_GET))
            rsv_office_export(srv, req, seg[2], seg[3][0] == 'r');
        else
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use GET");
        return;
    }
    if (n == 2 && strcmp(seg[1], "config") == 0) {
        if (method_is(req, CM_HTTP_GET))
            rsv_admin_config(srv, req);
        else
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use GET");
        return;
    }
    if (n == 2 && strcmp(seg[1], "checkouts") == 0) {
        if (method_is(req, CM_HTTP_GET))
            rsv_checkout_admin_list(srv, req);
        else
            reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use GET");
        return;
    }
    reply_simple(srv, req, RSV_EP_OTHER, 404, "not_found", "no such endpoint");
}

/* path is "<prefix><one segment><suffix>", as sent (an encoded name gets the small cap:
 * the handler's own check still applies). */
static bool one_segment_between(const char *path, const char *prefix, const char *suffix)
{
    size_t n = strlen(path), pl = strlen(prefix), sl = strlen(suffix);
    if (n <= pl + sl || strncmp(path, prefix, pl) != 0 || strcmp(path + n - sl, suffix) != 0)
        return false;
    return memchr(path + pl, '/', n - pl - sl) == NULL;
}

size_t rsv_routes_body_cap(cm_http_method_t method, const char *path, const char *content_type)
{
    (void)content_type; /* every body the reserve takes is JSON */
    switch (method) {
    case CM_HTTP_GET:
    case CM_HTTP_HEAD:
    case CM_HTTP_OPTIONS:
        return 0;
    case CM_HTTP_POST:
        if (one_segment_between(path, "/v1/events/", "/holds") ||
            one_segment_between(path, "/v1/holds/", "/confirm") ||
            strcmp(path, "/v1/provider/webhook") == 0)
            return CM_HTTP_BODY_CAP_JSON;
        return RSV_TINY_BODY_MAX; /* done, extend, an unknown path */
    default:
        return RSV_TINY_BODY_MAX; /* DELETE a hold; other methods get their 404/405 */
    }
}

/* The fans' listener and the admin listener share the parsing; admin says which. */
static void dispatch(rsv_server_t *srv, cm_req_t *req, bool admin)
{
    char buf[1024];
    char *seg[MAX_SEGS];
    int n = cm_http_path(req, buf, sizeof(buf), seg, MAX_SEGS);
    if (n < 0) {
        reply_simple(srv, req, RSV_EP_OTHER, 400, "invalid_request", "malformed path");
        return;
    }
    if (cm_svc_route_shared(&srv->svc, req, seg, n, admin))
        return; /* /healthz, /readyz, /metrics */
    if (admin) {
        if (rsv_office_page_serve(srv, req, seg, n))
            return; /* /office/: the box-office page */
        if (n >= 2 && strcmp(seg[0], "admin") == 0)
            return route_admin(srv, req, seg, n);
        reply_simple(srv, req, RSV_EP_OTHER, 404, "not_found",
                     "no such endpoint (the admin listener serves /admin/, /office/ and /metrics)");
        return;
    }
    if (rsv_shop_serve(srv, req, seg, n))
        return;
    if (n >= 1 && strcmp(seg[0], "v1") == 0 && rsv_cors_handle(cm_reload_cell_get(srv->cors), req))
        return; /* a CORS preflight */
    if (n >= 2 && strcmp(seg[0], "v1") == 0) {
        if (strcmp(seg[1], "events") == 0)
            return route_events(srv, req, seg, n);
        if (strcmp(seg[1], "holds") == 0 && n >= 3)
            return route_holds(srv, req, seg, n);
        if (strcmp(seg[1], "provider") == 0 && n == 3 && strcmp(seg[2], "webhook") == 0) {
            if (method_is(req, CM_HTTP_POST))
                return rsv_webhook_handle(srv, req);
            return reply_simple(srv, req, RSV_EP_PROVIDER_WEBHOOK, 405, "method_not_allowed",
                                "use POST");
        }
        if (strcmp(seg[1], "checkouts") == 0 && n == 3) {
            if (method_is(req, CM_HTTP_GET))
                return rsv_checkout_get(srv, req, seg[2]);
            return reply_simple(srv, req, RSV_EP_OTHER, 405, "method_not_allowed", "use GET");
        }
    }
    reply_simple(srv, req, RSV_EP_OTHER, 404, "not_found", "no such endpoint");
}

void rsv_routes_dispatch(cm_req_t *req, void *arg)
{
    dispatch(arg, req, false);
}

void rsv_routes_admin(cm_req_t *req, void *arg)
{
    dispatch(arg, req, true);
}
