/*
 * gw_queue — joining a waiting room and asking where one stands (docs/api.md: POST
 * /q/{event}/join, GET /q/{event}/status).
 *
 * A join without a valid ticket takes a new place in Redis (join.lua: INCR after the
 * opening, the pre-queue before it) and gets a signed ticket; a join or a status poll
 * with a valid ticket is answered from the ticket and the cached watermark alone — no
 * Redis — until the number is passed, when gw_admit takes over. A pre-queue ticket is
 * exchanged once for a numbered one after the opening (one Redis lookup).
 *
 * Browsers join only from the room's own page: a join whose Sec-Fetch-Site or Origin
 * names another site is refused (403 cross_site); API clients send neither header. A
 * form POST (the page without JavaScript) is answered 303 back to the page.
 *
 * Loop thread only.
 */
#ifndef GW_QUEUE_H
#define GW_QUEUE_H

#include "cm_http.h"
#include "cm_metrics.h"
#include "gw_enqueue.h"
#include "gw_req.h"

/** GET /q/{event}/challenge: a proof-of-work challenge for the caller's address block. */
void gw_queue_challenge(gw_server_t *srv, cm_req_t *req, const char *event);

/** POST /q/{event}/join (event already checked as an identifier; JSON, or the page's form). */
void gw_queue_join(gw_server_t *srv, cm_req_t *req, const char *event);

/** GET /q/{event}/status. */
void gw_queue_status(gw_server_t *srv, cm_req_t *req, const char *event);

/**
 * GET /q/{event}: the queue page (gw_page) for the ticket in the cookie — the same
 * decisions as a status poll, so a fan without JavaScript advances to admission by
 * meta refresh alone. Without a usable ticket the page starts as "new" and takes no
 * place: its script, or its form without JavaScript, joins by a same-origin POST.
 */
void gw_queue_page(gw_server_t *srv, cm_req_t *req, const char *event);

/* The hot answers' text, written by hand (no snprintf): pure, any thread. Each returns the
 * length written (a NUL follows it), or 0 when the text and its NUL do not fit in size. */

/** The queued answer of a status poll or a join (docs/api.md); eta_seconds < 0 is null. */
typedef struct gw_queued_answer {
    const char *event, *ticket; /* escaped as JSON strings */
    int64_t position, queue_size, eta_seconds, poll_after_ms;
    bool paused;
    bool show_left; /* send "left": the units left to buy (the room's show_left) */
    int64_t left;
} gw_queued_answer_t;

size_t gw_queue_queued_json(char *out, size_t size, const gw_queued_answer_t *a);

/** The answer of a fan kept in line while nothing is left but units are held (docs/api.md,
 *  "sold_out" with "returns_possible"): position, queue_size, held, poll_after_ms. */
size_t gw_queue_returns_json(char *out, size_t size, const gw_queued_answer_t *a, int64_t held);

typedef struct gw_room gw_room_t;

/**
 * Answers a fan whose place is kept while the room's stock is out and units are held
 * (gw_room_stock_out; admit.lua's stock_out): the "sold_out" answer with
 * "returns_possible": true, or the queue page's GW_PAGE_RETURNS (page). position >= 1.
 */
void gw_queue_reply_returns(gw_req_t *r, gw_room_t *room, const char *ticket, int64_t position,
                            int code, bool page);

/* The joins' and polls' series, shared by every worker (the registry's are). */
typedef struct gw_queue_metrics {
    cm_counter_t *joins;   /* new places handed out (queue and pre-queue) */
    cm_counter_t *rejoins; /* joins answered from a valid ticket */
    cm_counter_t *status_polls;
    cm_counter_t *rejected_tickets; /* a missing or invalid queue ticket */
    cm_counter_t *rate_limited;     /* joins refused by the per-address limit (gw_limit) */
    /* joins with a presale code, by outcome (gw_queue_code_outcomes: "placed", "malformed",
     * "unknown", "revoked", "used_up", "wrong_phase", "limited") */
    cm_counter_t *codes[7];
    /* joins with an enqueue token, by outcome (gw_enqueue_reason: "ok", "expired", …), and
     * joins refused without one in an invite-only room ("missing") */
    cm_counter_t *enqueue[GW_ENQ_COUNT];
} gw_queue_metrics_t;

typedef enum {
    GW_CODE_PLACED,
    GW_CODE_MALFORMED,
    GW_CODE_UNKNOWN,
    GW_CODE_REVOKED,
    GW_CODE_USED_UP,
    GW_CODE_WRONG_PHASE,
    GW_CODE_LIMITED,
} gw_code_outcome_t;

/** Registers the joins' series in reg and points qm at them. Main thread, at start. */
void gw_queue_metrics_register(gw_queue_metrics_t *qm, cm_metrics_t *reg);

#endif
