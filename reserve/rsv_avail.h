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
 * a hold asking for it is refused without a script (rsv_hold.c), unless a snapshot begun
 * after the mark found it not sold (a failed booking gave it back). Marks belong to ev's
 * version: a new version of the event starts without any. avail_max_age_ms = 0 keeps none.
 */
void rsv_avail_note_sold(rsv_avail_t *a, const struct rsv_event *ev, size_t item);
bool rsv_avail_known_sold(rsv_avail_t *a, const struct rsv_event *ev, size_t item);

/** A seat's status in a snapshot, one byte per seat of the event. */
enum { RSV_AVAIL_FREE = 0, RSV_AVAIL_HELD = 1, RSV_AVAIL_SOLD = 2 };

/**
 * Best available's hint (docs/design.md "Best available"): the status of each of ev's
 * seats (ev->nseats bytes, RSV_AVAIL_*) as ev's last snapshot found them, amended by
 * rsv_avail_mark since, when that snapshot is of ev's version and no older than
 * avail_max_age_ms; else NULL (then rsv_avail_refresh builds one). Valid until control
 * returns to the loop. Event-loop thread.
 */
const unsigned char *rsv_avail_seat_hint(rsv_avail_t *a, const struct rsv_event *ev);
/**
 * Amends the hint of ev's seat (an index of ev's seats) with what this worker learnt:
 * status RSV_AVAIL_*. A held or sold mark outlives the next snapshot once, where that
 * snapshot says free (it may have read the seat before the mark was made).
 */
void rsv_avail_mark(rsv_avail_t *a, const struct rsv_event *ev, size_t seat, unsigned char status);

/**
 * Best available's refusals: a whole pass over the seats of section (an index, or -1)
 * priced price (or -1) not known sold, sent at sent_ns (cm_time_mono_ns), found free
 * seats and no block of want adjacent ones among them. True at that instant, so it is
 * an answer for a request of that kind that began before it (rsv_hold.c).
 */
typedef struct rsv_avail_refusal {
    long section;
    int64_t price;
    int64_t want;
    int64_t free;
    uint64_t sent_ns;
} rsv_avail_refusal_t;

/** Keeps r as ev's latest refusal of its section and price. Event-loop thread. */
void rsv_avail_note_refusal(rsv_avail_t *a, const struct rsv_event *ev,
                            const rsv_avail_refusal_t *r);
/** ev's latest refusal of section and price when it was sent after since_ns, else NULL.
 * Valid until control returns to the loop. */
const rsv_avail_refusal_t *rsv_avail_refusal(rsv_avail_t *a, const struct rsv_event *ev,
                                             long section, int64_t price, uint64_t since_ns);

/** err NULL: the caller has a turn (give it back with rsv_avail_best_done); else
 * cm_err_shutdown and no turn. */
typedef void (*rsv_avail_turn_cb)(const char *err, void *arg);

/**
 * Best available's turns: at most max best-available scripts of ev in flight from this
 * worker at once, so that each one's window is chosen from a hint that has learned what
 * the ones before it found (rsv_hold.c). cb runs now (before this returns) when a turn
 * is free, else once one is given back, in the order asked; with cm_err_shutdown when
 * the worker stops first. Event-loop thread.
 */
void rsv_avail_best_turn(rsv_avail_t *a, const struct rsv_event *ev, int max, rsv_avail_turn_cb cb,
                         void *arg);
/** Gives back a turn of ev that rsv_avail_best_turn granted. */
void rsv_avail_best_done(rsv_avail_t *a, const struct rsv_event *ev);

#endif
