/*
 * gw_routes — the gateway's two listeners' routers (docs/api.md, gateway table). Worker
 * threads; arg is the worker's gw_server_t.
 */
#ifndef GW_ROUTES_H
#define GW_ROUTES_H

#include <stddef.h>

#include "cm_http.h"

/** Routes one request of the fans' listener: fan routes only. */
void gw_routes_dispatch(cm_req_t *req, void *arg);
/** The largest body a fans' route accepts, from its head (cm_http_limits_t.body_cap):
 *  join takes none beyond an empty object, but for a form (its presale code, the sale
 *  site's enqueue token); SIZE_MAX elsewhere (the transport's cap). */
size_t gw_routes_body_cap(cm_http_method_t method, const char *path, const char *content_type);
/** Routes one request of the admin listener: admin API, dashboard, /metrics, health. */
void gw_routes_admin(cm_req_t *req, void *arg);

#endif
