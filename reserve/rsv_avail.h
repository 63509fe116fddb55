/*
 * rsv_avail — availability counts and the seat map, served from a per-event snapshot.
 *
 * Event-loop thread. Answers come from the last snapshot while it is younger than
 * avail_max_age_ms (docs/api.md allows up to 1 s of lag); an older one is rebuilt once —
 * MGET over the seat keys in chunks and one small script per pool — while every request
 * that arrives meanwhile waits for that same rebuild. So the cost of the scan is paid at
 * most once per second per event, never per request. The stock feed (rsv_stock) asks for
 * a rebuild of its own every stock_interval_ms and takes the snapshot's totals.
 */
#ifndef RSV_AVAIL_H
#define RSV_AVAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_http.h"

typedef struct rsv_server rsv_server_t;
typedef struct rsv_avail rsv_avail_t;
struct rsv_event;

rsv_avail_t *rsv_avail_new(rsv_server_t *srv);
void rsv_avail_free(rsv_avail_t *a);

/** GET /v1/events/{event}/availability (seats 0) or /seats (seats 1). */
void rsv_avail_serve(rsv_server_t *srv, cm_req_t *req, const char *event, int seats);
/** Forgets an event's snapshot and its sold marks (its inventory changed). */
void rsv_avail_invalidate(rsv_avail_t *a, const char *event);

/** An event's units as one snapshot found them (seats and pool units together). */
typedef struct rsv_avail_totals {
    int64_t left;    /* neither sold nor in a live hold */
    int64_t held;    /* in live holds */
    int64_t total;   /* seats plus the pools' capacities */
    int64_t version; /* the catalogue version the snapshot was built from */
} rsv_avail_totals_t;

/**
 * The totals of ev from one scan: status holds a byte per seat (0 available, 1 held,
 * 2 sold), pool_counts {available, held} per pool as avail.lua answers (a negative
 * available counts as none). Pure.
 */
void rsv_avail_count(const struct rsv_event *ev, const unsigned char *status,
                     const int64_t (*pool_counts)[2], rsv_avail_totals_t *out);

/** err NULL: t holds the totals (borrowed for the call); else cm_err_* and t NULL. */
typedef void (*rsv_avail_totals_cb)(const char *err, const rsv_avail_totals_t *t, void *arg);

/**
 * Rebuilds ev's snapshot now (or joins the rebuild already under way), seeding the event
 * from Postgres first when Redis lost it, and calls cb once with that snapshot's totals.
 * cb may run before this returns (Redis down), and runs with cm_err_shutdown when the
 * worker stops. Availability answers use the new snapshot too. Event-loop thread.
 */
void rsv_avail_refresh(rsv_avail_t *a, struct rsv_event *ev, rsv_avail_totals_cb cb, void *arg);

/**
 * Sold marks: this worker saw item sold just now — a seat (its index in ev's seats) or a
 * pool with every unit booked (ev->nseats + its index in ev's pools) — in a hold script's
 * answer or a snapshot. For avail_max_age_ms afterwards rsv_avail_known_sold says so, and
 * a hold asking for it is refused without a script (rsv_hold.c). Marks belong to ev's
 * version: a new version of the event starts without any. avail_max_age_ms = 0 keeps none.
 */
void rsv_avail_note_sold(rsv_avail_t *a, const struct rsv_event *ev, size_t item);
bool rsv_avail_known_sold(rsv_avail_t *a, const struct rsv_event *ev, size_t item);

#endif
