/*
 * gw_dpop — tickets bound to the fan's key: DPoP-style proofs of possession (RFC 9449).
 *
 * A fan (the queue page's WebCrypto key, or an API client's) sends, in the DPoP header, a
 * compact JWS signed with ES256 by an EC P-256 key whose public half is in its protected
 * header: {"typ":"dpop+jwt","alg":"ES256","jwk":{"kty":"EC","crv":"P-256","x":…,"y":…}}
 * over {"jti":…,"htm":…,"htu":…,"iat":…}. At the join the key's RFC 7638 thumbprint
 * goes into the ticket (gw_ticket, bound form); on the poll that would hand out the
 * admission token the proof is verified — signature, the ticket's key, this request's
 * method and URL, iat within GW_DPOP_WINDOW_S of our clock — and its jti claimed once in
 * Redis, and the token carries cnf.jkt. docs/design.md says why only there.
 *
 * The parsers and checks are pure functions, safe from any thread, unit-tested and
 * fuzzed (tests/fuzz/fuzz_dpop.c). gw_dpop_check is for the loop thread (Redis).
 */
#ifndef GW_DPOP_H
#define GW_DPOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_dpop.h"
#include "cm_jwt.h"
#include "cm_metrics.h"
#include "gw_req.h"
#include "gw_ticket.h"

#define GW_DPOP_MAX_LEN  CM_DPOP_MAX_LEN
#define GW_DPOP_WINDOW_S CM_DPOP_WINDOW_S
#define GW_DPOP_JTI_MAX  CM_DPOP_JTI_MAX
#define GW_DPOP_HTU_MAX  CM_DPOP_HTU_MAX
#define GW_DPOP_QUERY    "dpop" /* the page's query parameter carrying a proof */

/* The gateway's names for the shared verifier's outcomes and proofs (common/cm_dpop.h). */
typedef cm_dpop_result_t gw_dpop_result_t;
typedef cm_dpop_proof_t gw_dpop_proof_t;
#define GW_DPOP_OK            CM_DPOP_OK
#define GW_DPOP_MISSING       CM_DPOP_MISSING
#define GW_DPOP_MALFORMED     CM_DPOP_MALFORMED
#define GW_DPOP_BAD_KEY       CM_DPOP_BAD_KEY
#define GW_DPOP_BAD_SIGNATURE CM_DPOP_BAD_SIGNATURE
#define GW_DPOP_WRONG_KEY     CM_DPOP_WRONG_KEY
#define GW_DPOP_WRONG_TARGET  CM_DPOP_WRONG_TARGET
#define GW_DPOP_STALE         CM_DPOP_STALE
#define GW_DPOP_REPLAYED      CM_DPOP_REPLAYED
#define GW_DPOP_UNAVAILABLE   CM_DPOP_UNAVAILABLE

/** What a proof must name: the request it comes with and the ticket's key. */
typedef struct gw_dpop_want {
    const char *method;        /* "GET" / "POST" */
    const char *host;          /* the Host header, as sent */
    const char *path;          /* the request path, as sent, without the query */
    bool plain_http;           /* the gateway speaks plain HTTP (tests): htu may be http:// */
    const gw_ticket_t *ticket; /* must be bound; its jkt must lead the proof's thumbprint */
} gw_dpop_want_t;

/**
 * cm_dpop_parse: enough to bind a ticket at the join (a key nobody holds binds a ticket
 * nobody can use).
 */
gw_dpop_result_t gw_dpop_parse(const char *text, size_t len, gw_dpop_proof_t *out);

/**
 * The key alone, for the join: gw_dpop_parse's checks of the shape and the header and
 * the thumbprint, but not the claims (~3 µs instead of ~5: one JSON parse less). Fills
 * out's x, y and jkt only.
 */
gw_dpop_result_t gw_dpop_parse_key(const char *text, size_t len, gw_dpop_proof_t *out);

/**
 * cm_dpop_verify with the ticket's key (the leading GW_TICKET_JKT_LEN bytes of its
 * thumbprint, refused when the ticket is unbound): htm and htu against want, iat within
 * GW_DPOP_WINDOW_S of now_s, the signature. Not the jti (gw_dpop_check claims it).
 */
gw_dpop_result_t gw_dpop_verify(const char *text, size_t len, const gw_dpop_want_t *want,
                                int64_t now_s, gw_dpop_proof_t *out);

/** The first GW_TICKET_JKT_LEN bytes of a base64url thumbprint (for a bound ticket). */
void gw_dpop_jkt_bytes(const char *jkt, unsigned char out[GW_TICKET_JKT_LEN]);

/** True when htu is exactly https://<host><path> (or http:// with plain_http), the
 *  scheme and host compared without case. */
bool gw_dpop_htu_ok(const char *htu, const char *host, const char *path, bool plain_http);

/** A short snake_case name ("bad_signature", …) for logs, metrics and error bodies. */
const char *gw_dpop_result_str(gw_dpop_result_t r);

/** A sentence for the error body of a refused proof. */
const char *gw_dpop_result_message(gw_dpop_result_t r);

/**
 * The proof of req: its DPoP header; else, with query_too, the "dpop" query parameter
 * (the queue page's own reload after a "post" hand-off, which cannot send a header),
 * decoded into buf. NULL when there is none. Loop thread.
 */
const char *gw_dpop_of_request(cm_req_t *req, bool query_too, char *buf, size_t buflen,
                               size_t *len);

/**
 * This process's count of proofs verified and refused for event (every worker, since
 * start; the dashboard's figures). Counted by gw_dpop_check and gw_dpop_count_refused.
 * Any thread. Rooms beyond GW_DPOP_ROOMS_COUNTED share one "other" slot.
 */
#define GW_DPOP_ROOMS_COUNTED 256
void gw_dpop_counts(const char *event, uint64_t *verified, uint64_t *refused);

/** Counts one refused proof: the metric, and event's figure unless event is NULL (a room
 *  this gateway does not know: arbitrary names must not fill the table). Any thread. */
void gw_dpop_count_refused(gw_server_t *srv, const char *event);

typedef void (*gw_dpop_cb)(gw_dpop_result_t r, void *arg);

/**
 * Verifies proof (may be NULL: GW_DPOP_MISSING) for req as the proof of t, then records
 * its jti in Redis once (cm_dpop_claim: the key the reserve claims its proofs' jti in too):
 * cb runs exactly once, on the loop thread, possibly from inside this call. On GW_DPOP_OK
 * t->cnf_jkt holds the thumbprint. Counts verified and refused proofs in srv's metrics.
 */
void gw_dpop_check(gw_server_t *srv, cm_req_t *req, const char *event, const char *proof,
                   size_t len, gw_ticket_t *t, gw_dpop_cb cb, void *arg);

/* The proofs' series (the dashboard's per-room figures are gw_dpop_counts). */
typedef struct gw_dpop_metrics {
    cm_counter_t *verified; /* proofs accepted on admitting polls */
    cm_counter_t *refused;  /* proofs missing, invalid or replayed where required */
} gw_dpop_metrics_t;

/** Registers the proofs' series in reg and points dm at them. Main thread, at start. */
void gw_dpop_metrics_register(gw_dpop_metrics_t *dm, cm_metrics_t *reg);

#endif
