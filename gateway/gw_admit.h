/*
 * gw_admit — turning a passed queue number into its admission token.
 *
 * The first poll at or below the watermark runs admit.lua, which records the admission
 * (iat, exp, jti) once per number and adds the fan to the active set; the claims are
 * then signed on the signer's threads and the token kept in an in-memory cache, so
 * repeated polls of the same ticket get the very same token without Redis or signing.
 * Both the record and the cache belong to the ticket's visitor: a fan is only ever
 * handed a token whose sub is their own, even if another ticket carries their number.
 * Another gateway asked for the same ticket finds the same record in Redis and signs the
 * same claims (same jti; ECDSA signatures differ byte-wise but carry the same claims).
 *
 * Loop thread only (the signer calls back on it).
 */
#ifndef GW_ADMIT_H
#define GW_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_metrics.h"
#include "gw_req.h"
#include "gw_ticket.h"
#include "gw_rooms.h"

/** The admitting poll's query parameter naming the key the admission token is bound to
 *  (cnf.jkt), the storefront's: without it the token is bound to the ticket's key, if any. */
#define GW_ADMIT_BIND_QUERY "bind"

/** An empty token cache holding at most size admissions. NULL never. */
gw_admit_t *gw_admit_new(size_t size);
/** Frees the cache (the server frees the signer and Redis first). NULL is fine. */
void gw_admit_free(gw_admit_t *a);

/**
 * The cached token of (gen, num, event, visitor, jkt) and its exp into *exp (may be NULL),
 * or NULL: an admission is found only by the visitor it was signed for, bound to the key
 * (jkt, "" = unbound) it was signed for. The token is
 * borrowed until the next gw_admit_cache_put (which may evict it).
 */
const char *gw_admit_cache_find(gw_admit_t *a, uint64_t gen, uint64_t num, const char *event,
                                const char *visitor, const char *jkt, int64_t *exp);
/**
 * Caches token (malloc'd; taken, and freed at once when that visitor's admission is
 * cached already for that key) for (gen, num, event, visitor, jkt), evicting the oldest
 * entry when full.
 * Returns the cached token (borrowed, as above).
 */
const char *gw_admit_cache_put(gw_admit_t *a, uint64_t gen, uint64_t num, const char *event,
                               const char *visitor, const char *jkt, int64_t exp, char *token);

/**
 * Answers r (started by the caller) for ticket t, whose number is at or below room's
 * watermark: from the cache at once, else after Redis and the signer. code is the
 * status of a success (200, or 201 for a fresh join); ticket_text is echoed in the body.
 * page true answers with the HTML queue page (gw_page) instead of JSON. A valid ?bind=
 * (GW_ADMIT_BIND_QUERY) makes the token's cnf.jkt that thumbprint instead of the
 * ticket's; a malformed one is answered 400 invalid_bind. The ticket's own proof (the
 * caller's, gw_dpop) still authorised the poll.
 */
void gw_admit_serve(gw_req_t *r, gw_room_t *room, const gw_ticket_t *ticket,
                    const char *ticket_text, int code, bool page);

/* The admissions' series. */
typedef struct gw_admit_metrics {
    cm_counter_t *admissions;     /* first claims (JWT issued) made through this gateway */
    cm_counter_t *readmissions;   /* polls answered with the same admission */
    cm_histogram_t *sign_seconds; /* queueing + signing of one admission token */
} gw_admit_metrics_t;

/** Registers the admissions' series in reg and points am at them. Main thread, at start. */
void gw_admit_metrics_register(gw_admit_metrics_t *am, cm_metrics_t *reg);

#endif
