/*
 * rsv_routes — the reserve's two listeners' routers (docs/api.md, reserve table).
 * Worker threads; arg is the worker's rsv_server_t. rsv_routes_body_cap is pure.
 */
#ifndef RSV_ROUTES_H
#define RSV_ROUTES_H

#include <stddef.h>

#include "cm_http.h"

/** Routes one request of the fans' listener: fan routes only. */
void rsv_routes_dispatch(cm_req_t *req, void *arg);
/** Routes one request of the admin listener: admin API, dashboard, /metrics, health. */
void rsv_routes_admin(cm_req_t *req, void *arg);
/** The largest body a fans' route accepts, from its head (cm_http_limits_t.body_cap): a
 *  hold and a confirmation take their JSON (max_body_bytes), POST/DELETE routes without a
 *  body at most RSV_TINY_BODY_MAX (an empty JSON object), GET/HEAD/OPTIONS none. Pure,
 *  any thread. */
size_t rsv_routes_body_cap(cm_http_method_t method, const char *path, const char *content_type);
#define RSV_TINY_BODY_MAX 64

#endif
