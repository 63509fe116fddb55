/*
 * rsv_admin — operator endpoints for events: create/replace inventory and read
 * settings with live stats. The admin token is checked by the router.
 */
#ifndef RSV_ADMIN_H
#define RSV_ADMIN_H

struct evhttp_request;
typedef struct rsv_server rsv_server_t;

void rsv_admin_event_put(rsv_server_t *srv, struct evhttp_request *req, const char *event);
void rsv_admin_event_get(rsv_server_t *srv, struct evhttp_request *req, const char *event);

#endif
