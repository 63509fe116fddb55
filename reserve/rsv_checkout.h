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

#include <jansson.h>
#include <stdint.h>

#include "cm_access.h"
#include "cm_http.h"
#include "cm_metrics.h"

typedef struct rsv_server rsv_server_t;

void rsv_checkout_confirm(rsv_server_t *srv, cm_req_t *req, const char *hold_id);
void rsv_checkout_get(rsv_server_t *srv, cm_req_t *req, const char *checkout_id);
/** GET /admin/checkouts?state=…&older_than_seconds=…&event=…&limit=… (admin checked). */
void rsv_checkout_admin_list(rsv_server_t *srv, cm_req_t *req);

/** Longest payment.source a confirm may carry, NUL included. */
#define RSV_CHECKOUT_SOURCE_MAX 128

/** A confirm body's payment, as rsv_checkout_payment_parse found it. */
typedef struct rsv_checkout_payment {
    int64_t amount;                       /* minor units, >= 0 */
    char currency[4];                     /* three letters */
    char source[RSV_CHECKOUT_SOURCE_MAX]; /* "" when the body names none */
} rsv_checkout_payment_t;

/**
 * Checks a confirm body's "payment": {amount: integer >= 0, currency: three letters,
 * source: optional string shorter than RSV_CHECKOUT_SOURCE_MAX}. NULL and *pay filled,
 * or the message a 400 carries (*pay untouched). Pure.
 */
const char *rsv_checkout_payment_parse(const json_t *body, rsv_checkout_payment_t *pay);

/** GET /admin/checkouts' filters: state and event given by the caller (may be NULL),
 * the rest filled by rsv_checkout_list_parse. */
typedef struct rsv_checkout_list {
    const char *state, *event;
    int64_t older_s; /* older_than_seconds, 0 when absent */
    int64_t limit;   /* 100 when absent */
    char request_id[CM_ACCESS_ID_MAX + 1];
} rsv_checkout_list_t;

/**
 * Checks the query's values (each NULL when absent): state and event identifiers,
 * older_than_seconds 0..100000000, limit 1..1000, request_id as cm_access_pick_id takes
 * it. NULL when fine, else the message a 400 carries. Pure.
 */
const char *rsv_checkout_list_parse(rsv_checkout_list_t *l, const char *older, const char *limit,
                                    const char *rid);

/* The confirmations' series. */
typedef struct rsv_checkout_metrics {
    cm_counter_t *confirmations;     /* holds converted into bookings */
    cm_counter_t *replays;           /* answered from a stored result */
    cm_histogram_t *hold_to_confirm; /* seconds from the hold to its confirmation */
} rsv_checkout_metrics_t;

/** Registers the confirmations' series in reg and points cm at them. Main thread, at start. */
void rsv_checkout_metrics_register(rsv_checkout_metrics_t *cm, cm_metrics_t *reg);

#endif
