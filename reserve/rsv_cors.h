/*
 * rsv_cors — CORS for the buyer API (/v1/…): the storefront origins allowed to call it
 * from a browser (`cors_origins`), the preflight answers, and the headers of the actual
 * answers.
 *
 * The allow-list is explicit: `*` is refused at start-up. The buyer API authenticates
 * with an `Authorization: Bearer` header, never a cookie, so no answer carries
 * `Access-Control-Allow-Credentials`; an allowed origin is echoed back with
 * `Vary: Origin`. Requests from other origins are still served (same-origin pages and
 * non-browser clients send Origin too), only without the headers a browser needs to
 * let a foreign page read the answer.
 *
 * Built at start-up; used read-only on the event-loop thread.
 */
#ifndef RSV_CORS_H
#define RSV_CORS_H

#include <stdbool.h>
#include <stddef.h>
#include "cm_http.h"

typedef struct rsv_cors rsv_cors_t;

/** Longest origin kept ("https://" + host + ":" + port). */
#define RSV_CORS_ORIGIN_MAX 256

/**
 * Parses the allow-list: origins separated by commas and/or spaces, each
 * `https://host[:port]` (or `http://` for 127.0.0.1, localhost, [::1]); no path, no
 * wildcard. NULL or "" = no origin allowed. Returns NULL with a message in err.
 */
rsv_cors_t *rsv_cors_new(const char *origins, char *err, size_t errlen);
/** Frees; NULL is fine. */
void rsv_cors_free(rsv_cors_t *c);
/** How many origins are allowed. */
size_t rsv_cors_count(const rsv_cors_t *c);

/**
 * Normalises one origin into out (lower case, default port dropped) the way browsers
 * send it. Returns 0, or -1 with the reason in err. Pure; no I/O.
 */
int rsv_cors_normalize(const char *origin, size_t len, char *out, size_t outlen, char *err,
                       size_t errlen);

/** True when the Origin value is on the list (exact match after normalising). */
bool rsv_cors_allowed(const rsv_cors_t *c, const char *origin);

/**
 * For a request on the buyer API: adds the CORS headers its answer needs and, when it is
 * a preflight (OPTIONS with Access-Control-Request-Method), answers it (204 for an
 * allowed origin, 403 origin_not_allowed otherwise). Returns true when it answered.
 */
bool rsv_cors_handle(const rsv_cors_t *c, cm_req_t *req);

#endif
