/*
 * rsv_done — POST /done: a fan who is finished leaves the waiting room's max_active count.
 *
 * The gateway adds every admitted fan to the event's active set (os:{e}:active, member
 * the visitor id = the token's sub) until the admission expires; the reserve's hold
 * scripts keep a buyer there while a hold of theirs lives, and a release or a
 * confirmation ends the activity once no other hold lives. What was missing is the fan
 * who is finished without a hold to end — a loser who heard "taken" and gave up, a fan
 * who only looked: POST /v1/events/{event}/done says so with the admission token, and the
 * buyer leaves the count at once (or when their last live hold ends), so the gateway
 * admits the next fan on its next tick instead of after admission_ttl_seconds.
 *
 * Safety: the buyer is the verified token's sub, for the event in the path, so nobody
 * can end another fan's activity; the script only removes or lowers the caller's own
 * entry (idempotent, never counted twice). HTTP handler on the event-loop thread; one
 * asynchronous EVALSHA.
 */
#ifndef RSV_DONE_H
#define RSV_DONE_H

#include "cm_http.h"

typedef struct rsv_server rsv_server_t;

/** POST /v1/events/{event}/done (event already checked as an identifier). */
void rsv_done_handle(rsv_server_t *srv, cm_req_t *req, const char *event);

#endif
