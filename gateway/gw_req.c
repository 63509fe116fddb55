/*
 * gw_req — the gateway's request context and replies (see gw_req.h): thin names over the
 * service shell's (cm_service), plus what only the gateway does: an error on the queue
 * page's endpoint is a page for the browser, not JSON, and a backend failure counts in
 * onsale_gateway_backend_errors_total. Worker threads.
 */
#include "gw_req.h"

#include <stdio.h>

#include "gw_metrics.h"
#include "gw_page.h"
#include "gw_rooms.h"
#include "gw_settings.h"

void gw_req_start(gw_req_t *r, gw_server_t *srv, cm_req_t *req, gw_endpoint_t ep)
{
    r->srv = srv;
    cm_svc_req_start(&r->svc, &srv->svc, req, (size_t)ep);
}

void gw_req_replied(gw_req_t *r)
{
    cm_svc_req_replied(&r->svc);
}

void gw_reply_json(gw_req_t *r, int code, json_t *body)
{
    if (r->svc.ep == GW_EP_PAGE && code >= 400) {
        gw_reply_page(r, code, body); /* a browser gets a page, not JSON */
    } else {
        cm_svc_reply_json(&r->svc, code, body);
    }
}

void gw_reply_error(gw_req_t *r, int code, const char *error, const char *message, json_t *extra)
{
    if (r->svc.ep != GW_EP_PAGE) {
        cm_svc_reply_error(&r->svc, code, error, message, extra);
        return;
    }
    json_t *body = json_pack("{s:s, s:s}", "error", error, "message", message);
    if (extra) {
        json_object_update(body, extra);
        json_decref(extra);
    }
    gw_reply_page(r, code, body);
}

const gw_langs_t *gw_server_langs(const gw_server_t *srv)
{
    return srv->langs ? cm_reload_cell_get(srv->langs) : NULL;
}

void gw_reply_page(gw_req_t *r, int code, json_t *body)
{
    char buf[1024], *seg[4];
    int n = cm_http_path(r->svc.req, buf, sizeof(buf), seg, 4);
    const gw_room_t *room = n >= 2 ? gw_rooms_find(r->srv->rooms, seg[1]) : NULL;
    gw_page_brand_t brand = {0};
    if (room != NULL)
        gw_settings_brand(&room->s, &brand);
    gw_page_queue_answer(r->svc.req, gw_server_langs(r->srv), &brand, code, body);
    gw_req_replied(r);
}

void gw_reply_text(gw_req_t *r, int code, const char *ctype, const char *body, size_t len)
{
    cm_svc_reply_text(&r->svc, code, ctype, body, len);
}

void gw_reply_gone(gw_req_t *r, bool sold_out)
{
    if (sold_out)
        gw_reply_error(r, 410, "sold_out", "this event is sold out", NULL);
    else
        gw_reply_error(r, 410, "closed", "this waiting room is closed", NULL);
}

void gw_reply_unavailable(gw_req_t *r, const char *what, const char *err)
{
    cm_counter_inc(r->srv->m->backend_errors);
    char msg[160];
    snprintf(msg, sizeof(msg), "%s failed (%s); retry shortly", what, err ? err : "error");
    gw_reply_error(r, 503, "unavailable", msg, NULL);
}
