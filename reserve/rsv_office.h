/*
 * rsv_office — the box office on the reserve's admin listener (docs/api.md "Box office"):
 * find a booking (by booking id, checkout id, buyer or e-mail), cancel it or refund one
 * of its items, and export an event's bookings and its money reconciliation as CSV.
 *
 * A cancellation or item refund is a driven record (deploy/sql/008_box_office.sql): one
 * Postgres transaction frees the units and writes the refund row ('requested'); the
 * reserve then gives the units back in Redis ('released': on sale again) and asks the
 * provider for the money ('refunded'), Idempotency-Key = the refund id. The request that
 * created the record drives it at once; a driver timer on worker 0 resumes any record a
 * crash or a provider failure left behind (lease lapsed), like the reconciler.
 *
 * Event-loop thread of the worker that serves the request; the driver on worker 0. The
 * pure helpers (CSV, e-mail, unit ids) run on any thread and are unit-tested.
 */
#ifndef RSV_OFFICE_H
#define RSV_OFFICE_H

#include <stdbool.h>
#include <stddef.h>

#include "cm_http.h"

typedef struct rsv_server rsv_server_t;
typedef struct rsv_office rsv_office_t;

/** Longest e-mail address a confirm may carry (RFC 5321's path limit). */
#define RSV_OFFICE_EMAIL_MAX 254

/**
 * Whether s is an e-mail address the reserve stores: at most RSV_OFFICE_EMAIL_MAX
 * bytes of printable ASCII without spaces, quotes, commas, angle brackets or
 * backslashes, one '@' with 1-64 bytes before it and a domain of dot-separated labels
 * (letters, digits, '-') after it. Pure.
 */
bool rsv_office_email_valid(const char *s);

/** Whether s names a unit: 1-80 characters of [A-Za-z0-9._#-] (a seat or 'pool#n'). */
bool rsv_office_unit_valid(const char *s);

/** A growing text buffer (the CSV exports). */
typedef struct rsv_office_buf {
    char *data;
    size_t len, cap;
} rsv_office_buf_t;

/**
 * Appends s as one CSV field (RFC 4180): quoted when it holds a comma, quote, CR or LF
 * (quotes doubled); a field starting with '=', '+', '-', '@', TAB or CR gets a leading
 * apostrophe inside quotes, so a spreadsheet shows it as text instead of running it as a
 * formula. NULL is an empty field. Pure.
 */
void rsv_office_csv_field(rsv_office_buf_t *b, const char *s);
/** Appends n bytes of s verbatim. */
void rsv_office_buf_put(rsv_office_buf_t *b, const char *s, size_t n);
/** Frees the buffer's text. */
void rsv_office_buf_clear(rsv_office_buf_t *b);

/** GET /admin/bookings?booking_id=|checkout_id=|buyer=|email= (exactly one). */
void rsv_office_find(rsv_server_t *srv, cm_req_t *req);
/** GET /admin/bookings/{ref}: one booking (ref: booking or checkout id). */
void rsv_office_get(rsv_server_t *srv, cm_req_t *req, const char *ref);
/** POST /admin/bookings/{ref}/cancel, or …/items/{unit}/refund (unit non-NULL). */
void rsv_office_cancel(rsv_server_t *srv, cm_req_t *req, const char *ref, const char *unit);
/** GET /admin/events/{event}/bookings.csv (reconcile false) or /reconciliation.csv. */
void rsv_office_export(rsv_server_t *srv, cm_req_t *req, const char *event, bool reconcile);

/**
 * The box-office page on the admin listener: GET /office/ (index), /office/office.js,
 * /office/office.css; /office redirects to /office/. Static, no data and no token (the
 * page asks the operator for it and sends it on each API call), strict CSP. true when
 * the path was the page's (answered), false otherwise.
 */
bool rsv_office_page_serve(rsv_server_t *srv, cm_req_t *req, char **seg, int n);

/** Starts the driver timer (worker 0; interval and batch of the reconciler's config). */
rsv_office_t *rsv_office_new(rsv_server_t *srv);
/** Stops claiming; the struct goes with the last drive in flight. NULL is fine. */
void rsv_office_free(rsv_office_t *o);

#endif
