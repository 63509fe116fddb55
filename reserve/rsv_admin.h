/*
 * rsv_admin — operator endpoints for events: create/replace inventory and read
 * settings with live stats. The admin token is checked by the router.
 */
#ifndef RSV_ADMIN_H
#define RSV_ADMIN_H

#include "cm_http.h"

typedef struct rsv_server rsv_server_t;

void rsv_admin_event_put(rsv_server_t *srv, cm_req_t *req, const char *event);
void rsv_admin_event_get(rsv_server_t *srv, cm_req_t *req, const char *event);

/** GET /admin/config: the effective configuration, secrets masked (cm_config_json). */
void rsv_admin_config(rsv_server_t *srv, cm_req_t *req);

#endif
