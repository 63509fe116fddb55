/*
 * gw_enqueue — the sale site's enqueue tokens: a customer the site sends to a waiting room.
 *
 * A sale site that knows its customers (logged in, verified) sends each one to the room
 * with a JWT it signed itself (ES256, a key of the site's JWKS, the gateway's
 * enqueue_keys_file): {"iss", "aud", "sub": the customer id, "evt": the room's event,
 * "jti", "iat", "exp"}. The gateway checks it before the place is taken: the signature
 * under the site's key, aud (enqueue_audience), iss (enqueue_issuer, when set), the
 * lifetime (enqueue_max_lifetime_s) and the room. The customer id becomes the place's
 * owner: the ticket carries it (gw_ticket.h), join.lua gives one customer one place per
 * room whatever the browser, and the admission token's sub is the customer, so the
 * reserve's max_per_buyer counts per customer. A token is not single-use: the same
 * customer joining again (another browser, a retry) is answered the same place, which is
 * what a replay could get anyway; a token of another room is refused (evt). A token may
 * also carry the customer's presale code (claim "code"): the join then redeems it as if
 * the fan had typed it (an Onsale-Code the request brings itself comes first).
 *
 * gw_enqueue_keys_load reads a file (start-up, --check-config, the reload thread); the
 * rest are pure functions: any thread.
 */
#ifndef GW_ENQUEUE_H
#define GW_ENQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "cm_jwt.h"
#include "gw_code.h"
#include "gw_ticket.h"

#define GW_ENQUEUE_MAX_LEN 2048 /* an enqueue token's text; a site's are ~300-500 bytes */
#define GW_ENQUEUE_LEEWAY  30   /* seconds of clock skew allowed on nbf and exp */

typedef enum {
    GW_ENQ_OK = 0,
    GW_ENQ_MISSING,     /* none given where the room requires one (invite_only) */
    GW_ENQ_UNSUPPORTED, /* this gateway has no enqueue_keys_file */
    GW_ENQ_MALFORMED,   /* not a JWT of an enqueue token's shape, or too long */
    GW_ENQ_INVALID,     /* not signed by a key of the site (alg, kid, signature) */
    GW_ENQ_AUDIENCE,    /* aud is not this gateway's enqueue_audience */
    GW_ENQ_ISSUER,      /* iss is not the configured enqueue_issuer */
    GW_ENQ_EXPIRED,     /* exp has passed */
    GW_ENQ_NOT_YET,     /* nbf is in the future */
    GW_ENQ_TOO_LONG,    /* exp - iat beyond enqueue_max_lifetime_s */
    GW_ENQ_WRONG_ROOM,  /* evt names another event */
    GW_ENQ_CUSTOMER,    /* sub is not a customer id (gw_ticket_customer_ok) */
    GW_ENQ_COUNT
} gw_enqueue_result_t;

/** What an accepted token says. */
typedef struct gw_enqueue_claims {
    char customer[GW_CUSTOMER_MAX + 1]; /* sub */
    char code[GW_CODE_INPUT_MAX + 1];   /* the customer's presale code; "" = none */
} gw_enqueue_claims_t;

/** What a gateway accepts (its configuration). Borrowed strings. */
typedef struct gw_enqueue_policy {
    const char *audience;   /* aud must contain it */
    const char *issuer;     /* iss must equal it; NULL = any */
    int64_t max_lifetime_s; /* exp - iat at most this */
} gw_enqueue_policy_t;

/**
 * Checks token (len bytes, need not be NUL-terminated) as an enqueue token of event under
 * the site's keys ks (NULL: GW_ENQ_UNSUPPORTED) at now_s. On GW_ENQ_OK out holds the
 * customer id (the token's sub) and its presale code, if any (a "code" that is not a
 * string of at most GW_CODE_INPUT_MAX bytes: GW_ENQ_MALFORMED); else out is empty.
 */
gw_enqueue_result_t gw_enqueue_verify(const cm_jwt_keyset_t *ks, const gw_enqueue_policy_t *p,
                                      const char *event, const char *token, size_t len,
                                      int64_t now_s, gw_enqueue_claims_t *out);

/**
 * The site's keys from path (enqueue_keys_file: a JWKS document or PEM public keys, EC
 * P-256), or NULL with a message in err (unreadable, malformed, or no key in it).
 */
cm_jwt_keyset_t *gw_enqueue_keys_load(const char *path, char *err, size_t errlen);

/** The HTTP status of a refusal: 400, 401 or 403. */
int gw_enqueue_status(gw_enqueue_result_t r);
/** The error code of a refusal ("enqueue_invalid", …; docs/api.md). */
const char *gw_enqueue_error(gw_enqueue_result_t r);
/** The reason, snake_case ("expired", "wrong_room", …): the error's "reason" and the metric's
 *  label. */
const char *gw_enqueue_reason(gw_enqueue_result_t r);
/** A sentence for the fan or the integrating team. */
const char *gw_enqueue_message(gw_enqueue_result_t r);

#endif
