/*
 * rsv_shop — see rsv_shop.h.
 *
 * Three files and a config document: a table, not a file system, so no path can reach
 * anything else. /shop (no slash) redirects to /shop/ so the page's relative URLs
 * resolve under it.
 */
#include "rsv_shop.h"

#include <event2/http.h>
#include <jansson.h>
#include <string.h>

#include "rsv_req.h"

/* The embedded files (onsale_embed in reserve/CMakeLists.txt). */
extern const char rsv_www_shop_html[];
extern const char rsv_www_shop_css[];
extern const char rsv_www_shop_js[];

#define CSP                                                                                        \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "                \
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
#define STATIC_CACHE "public, max-age=60"

static const struct {
    const char *name;
    const char *ctype;
    const char *body;
} files[] = {
    {"index.html", "text/html; charset=utf-8", rsv_www_shop_html},
    {"shop.css", "text/css; charset=utf-8", rsv_www_shop_css},
    {"shop.js", "text/javascript; charset=utf-8", rsv_www_shop_js},
};

static void security_headers(cm_req_t *req)
{
    cm_http_add_header(req, "Content-Security-Policy", CSP);
    cm_http_add_header(req, "X-Content-Type-Options", "nosniff");
    cm_http_add_header(req, "Referrer-Policy", "no-referrer");
    cm_http_add_header(req, "X-Frame-Options", "DENY");
}

static void config_json(rsv_server_t *srv, rsv_req_t *r)
{
    const char *q = srv->cfg.shop_queue_url;
    security_headers(r->svc.req);
    rsv_reply_json(r, 200, json_pack("{s:s?}", "queue_url", q && *q ? q : NULL));
}

bool rsv_shop_serve(rsv_server_t *srv, cm_req_t *req, char **seg, int n)
{
    if (n < 1 || n > 2 || strcmp(seg[0], "shop") != 0)
        return false;
    rsv_req_t r;
    rsv_req_start(&r, srv, req, RSV_EP_OTHER);
    const char *name = rsv_req_page_file(&r, seg, n, "the storefront");
    if (name == NULL)
        return true;
    if (strcmp(name, "config.json") == 0) {
        config_json(srv, &r);
        return true;
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (strcmp(name, files[i].name) != 0)
            continue;
        security_headers(req);
        cm_http_add_header(req, "Cache-Control", STATIC_CACHE);
        cm_http_send_body(req, 200, files[i].ctype, files[i].body, strlen(files[i].body), true);
        rsv_req_replied(&r);
        return true;
    }
    rsv_reply_error(&r, 404, "not_found", "no such storefront file", NULL);
    return true;
}
