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
#include "cm_metrics.h"

typedef struct rsv_server rsv_server_t;

void rsv_checkout_confirm(rsv_server_t *srv, cm_req_t *req, const char *hold_id);
void rsv_checkout_get(rsv_server_t *srv, cm_req_t *req, const char *checkout_id);
/** GET /admin/checkouts?state=…&older_than_seconds=…&event=…&limit=… (admin checked). */
void rsv_checkout_admin_list(rsv_server_t *srv, cm_req_t *req);

/* The confirmations' series. */
typedef struct rsv_checkout_metrics {
    cm_counter_t *confirmations;     /* holds converted into bookings */
    cm_counter_t *replays;           /* answered from a stored result */
    cm_histogram_t *hold_to_confirm; /* seconds from the hold to its confirmation */
} rsv_checkout_metrics_t;

/** Registers the confirmations' series in reg and points cm at them. Main thread, at start. */
void rsv_checkout_metrics_register(rsv_checkout_metrics_t *cm, cm_metrics_t *reg);

#endif
