/*
 * gw_ticket — signed queue tickets: a fan's place in one waiting room.
 *
 * A ticket binds (room generation, event, visitor id, queue number, issued-at) under
 * HMAC-SHA256 with the gateways' shared secret; it is the compact base64url text of
 * version ‖ gen ‖ number ‖ iat ‖ visitor ‖ mac. The event is not carried but is part of
 * the MAC input, so a ticket of another event never verifies. Number 0 means "in the
 * pre-queue" (the number is given at the opening). A ticket of a room that binds tickets
 * to a key (gw_dpop) carries, in a second version of the layout, the first 16 bytes of the
 * SHA-256 thumbprint of the fan's public key, under the same MAC. A customer's ticket (the
 * join came with the sale site's enqueue token, gw_enqueue.h) also carries the site's
 * customer id, under the same MAC: the place is the customer's, in every browser they
 * use. Pure functions, no event loop: safe from any thread.
 */
#ifndef GW_TICKET_H
#define GW_TICKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_http.h"

#define GW_TICKET_MAX_LEN     208 /* text form, NUL included */
#define GW_VISITOR_LEN        32  /* visitor id: 16 random bytes as lower-case hex */
#define GW_TICKET_SECRET_MIN  32  /* bytes of secret we accept */
#define GW_COOKIE_PREFIX      "onsale_q_"
#define GW_TICKET_MAX_SECRETS 8   /* ticket secrets in rotation at once */
#define GW_TICKET_FUTURE_S    300 /* an iat this far ahead of our clock is not believed */
#define GW_TICKET_JKT_LEN     16  /* bytes of the key thumbprint a bound ticket carries */
#define GW_CUSTOMER_MAX       64  /* a sale site's customer id: [A-Za-z0-9._@:+-], 1 to 64 */

typedef struct gw_ticket {
    uint64_t gen;                         /* the room's generation (changes when re-created) */
    uint64_t num;                         /* queue number; 0 = pre-queue */
    int64_t iat;                          /* issued at, epoch seconds */
    char visitor[GW_VISITOR_LEN + 1];     /* lower-case hex */
    bool bound;                           /* carries jkt: proofs of that key only (gw_dpop) */
    unsigned char jkt[GW_TICKET_JKT_LEN]; /* leading bytes of the key's RFC 7638 thumbprint */
    char cnf_jkt[44]; /* not encoded: the full thumbprint (base64url) once a proof by the
                         ticket's key was verified for this request; "" otherwise */
    char customer[GW_CUSTOMER_MAX + 1]; /* the sale site's customer id; "" = a browser's place */
} gw_ticket_t;

/**
 * Who holds t's place in Redis and in the admission token's sub: the customer when the
 * ticket names one, else the visitor id.
 */
static inline const char *gw_ticket_who(const gw_ticket_t *t)
{
    return t->customer[0] != '\0' ? t->customer : t->visitor;
}

/** True when s (n bytes) is a customer id: 1 to GW_CUSTOMER_MAX of [A-Za-z0-9._@:+-]. */
bool gw_ticket_customer_ok(const char *s, size_t n);

/**
 * HMAC-SHA256 of msg under key into out (32 bytes). Any thread: each thread keeps a few
 * contexts keyed once (keys up to 128 bytes; longer ones are keyed per call), freed when
 * the thread ends.
 */
void gw_ticket_hmac(const void *key, size_t keylen, const void *msg, size_t n,
                    unsigned char out[32]);

/** How many contexts this thread has keyed so far (a cached key is not keyed again). */
unsigned long gw_ticket_hmac_keyed(void);

/**
 * Writes the ticket's text (NUL-terminated) into out. Returns its length, or 0 when the
 * visitor id or the customer id is malformed or out is too small (GW_TICKET_MAX_LEN always
 * suffices).
 */
size_t gw_ticket_encode(const unsigned char *secret, size_t secretlen, const char *event,
                        const gw_ticket_t *t, char *out, size_t outlen);

/**
 * Verifies text (len bytes, need not be NUL-terminated) as a ticket of event: format,
 * version and MAC (constant-time compare). Returns 0 and fills *out, or -1.
 */
__attribute__((warn_unused_result)) int gw_ticket_decode(const unsigned char *secret,
                                                         size_t secretlen, const char *event,
                                                         const char *text, size_t len,
                                                         gw_ticket_t *out);

/**
 * The gateways' ticket secrets in rotation, oldest first: the last one signs new tickets,
 * every one of them verifies (rotate: append a new secret on every gateway, drop the
 * oldest once ticket_max_age_s has passed). Borrowed pointers.
 */
typedef struct gw_ticket_keys {
    int n;
    const unsigned char *secret[GW_TICKET_MAX_SECRETS];
    size_t len[GW_TICKET_MAX_SECRETS];
} gw_ticket_keys_t;

/** gw_ticket_decode under each secret of keys, the newest first. 0 or -1. */
__attribute__((warn_unused_result)) int gw_ticket_decode_any(const gw_ticket_keys_t *keys,
                                                             const char *event, const char *text,
                                                             size_t len, gw_ticket_t *out);

/**
 * True when t was issued at most max_age_s before now_s (epoch seconds) and not more
 * than GW_TICKET_FUTURE_S after it: the maximum ticket age.
 */
bool gw_ticket_fresh(const gw_ticket_t *t, int64_t now_s, int64_t max_age_s);

/**
 * Finds the value of cookie "onsale_q_<event>" in a Cookie header. Returns a pointer into
 * header and its length in *len, or NULL.
 */
const char *gw_ticket_from_cookie(const char *header, const char *event, size_t *len);

/**
 * The Set-Cookie value of a ticket (cookie name GW_COOKIE_PREFIX<event>; HttpOnly;
 * Secure; SameSite=Lax; Path=/q/<event>): pure, any thread. Its length (a NUL follows),
 * or 0 when it and its NUL do not fit in size.
 */
size_t gw_ticket_cookie_text(char *out, size_t size, const char *event, const char *ticket);
/** Adds the ticket cookie to the reply being built for req (its loop thread). */
void gw_ticket_set_cookie(cm_req_t *req, const char *event, const char *ticket);

/** A fresh random visitor id (GW_VISITOR_LEN hex characters and a NUL). */
void gw_ticket_new_visitor(char out[GW_VISITOR_LEN + 1]);

/** True when s is exactly GW_VISITOR_LEN lower-case hex characters. */
bool gw_ticket_visitor_ok(const char *s);

#endif
