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

/** What onsale_event_put did (deploy/sql/functions.sql), named as the API answers it. */
typedef enum {
    RSV_ADMIN_PUT_CREATED,   /* 201 */
    RSV_ADMIN_PUT_REPLACED,  /* inventory changed */
    RSV_ADMIN_PUT_UPDATED,   /* settings only */
    RSV_ADMIN_PUT_HAS_SALES, /* 409: the inventory cannot change */
    RSV_ADMIN_PUT_NOUTCOMES
} rsv_admin_put_outcome_t;

/** The outcome Postgres named; RSV_ADMIN_PUT_NOUTCOMES for a name it should never answer.
 * Pure. */
rsv_admin_put_outcome_t rsv_admin_put_outcome_parse(const char *name);

/** The API's name of o (not RSV_ADMIN_PUT_NOUTCOMES). Pure. */
const char *rsv_admin_put_outcome_name(rsv_admin_put_outcome_t o);

#endif
