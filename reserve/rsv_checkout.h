/*
 * rsv_checkout — confirming a hold into a booking (docs/design.md invariants 1, 2, 6, 7).
 *
 * HTTP handlers on the event-loop thread. A confirmation is a checkout row in
 * Postgres keyed by (buyer, Idempotency-Key), then the converting step in Redis (the
 * hold re-checked and its seats marked sold in one script), then one Postgres
 * transaction that inserts the booking under UNIQUE (event_id, seat_id) and stores
 * the answer a replay returns. Every step is idempotent per checkout, so a retry with
 * the same key after any failure resumes where the first attempt stopped.
 */
#ifndef RSV_CHECKOUT_H
#define RSV_CHECKOUT_H

#include "cm_http.h"

typedef struct rsv_server rsv_server_t;

void rsv_checkout_confirm(rsv_server_t *srv, cm_req_t *req, const char *hold_id);
void rsv_checkout_get(rsv_server_t *srv, cm_req_t *req, const char *checkout_id);
/** GET /admin/checkouts?state=…&older_than_seconds=…&event=…&limit=… (admin checked). */
void rsv_checkout_admin_list(rsv_server_t *srv, cm_req_t *req);

#endif
