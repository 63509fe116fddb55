/*
 * rsv_hold — seat and general-admission holds (DESIGN.md invariants 3, 4, 5).
 *
 * HTTP handlers on the event-loop thread. Each hold operation is one Redis script
 * (reserve/lua/): taking a hold checks every seat, the buyer's limit and sets the
 * keys in one atomic step; get, extend, release and convert verify the owner and act
 * in the same step. Expiry is compared with Redis TIME inside the scripts.
 *
 * Hold ids are "<32 hex>.<event>": the event travels inside the id, so every key of a
 * hold can be named (and hash-tagged to the event's slot) without a lookup.
 */
#ifndef RSV_HOLD_H
#define RSV_HOLD_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_parse.h"
#include "cm_redis.h"
#include "cm_http.h"

typedef struct rsv_server rsv_server_t;

#define RSV_HOLD_ID_MAX (32 + 1 + CM_IDENT_MAX)

/** A hold as a script described it (see describe() in lua/prelude.lua). */
typedef struct rsv_hold_view {
    char status[16]; /* OK, EXPIRED, CONVERTED, NOTFOUND */
    int64_t exp_ms, created_ms, cap_ms;
    int64_t amount;
    int64_t qty;
    int64_t first_unit;
    char pool[CM_IDENT_MAX + 1];
    char checkout[48];
    char *seats; /* comma-joined seat ids (heap; rsv_hold_view_clear frees) */
} rsv_hold_view_t;

/** Parses a script reply. Returns 0, or -1 when the reply is not of that shape. */
int rsv_hold_view_parse(const cm_redis_reply_t *reply, rsv_hold_view_t *out);
void rsv_hold_view_clear(rsv_hold_view_t *v);

/** Checks a hold id and extracts its event. Returns 0 or -1 (malformed). */
int rsv_hold_id_event(const char *hold_id, char event[CM_IDENT_MAX + 1]);

/** Adds seats (array) or pool + quantity from the view to obj. */
void rsv_hold_json_items(json_t *obj, const rsv_hold_view_t *v);

/**
 * Runs script (extend, release, convert, unconvert: the "acting" layout of
 * lua/prelude.lua) on hold_id of buyer, with every key it touches declared in KEYS: reads
 * the hold record first (get.lua) to learn its seats or pool, then runs the script with
 * the hold's keys and ARGV (hold id, buyer, seats, pool, extra...). cb gets the script's
 * reply, or get's when the hold is gone or another buyer's (NOTFOUND, GONE), or the
 * error. Strings are copied. Returns 0 (cb will be called, always from the loop) or -1
 * when Redis is closed.
 */
__attribute__((warn_unused_result)) int
rsv_hold_act(rsv_server_t *srv, const cm_redis_script_t *script, const char *hold_id,
             const char *buyer, int nextra, const char *const *extra, cm_redis_cb cb, void *arg);

/**
 * rsv_hold_act without the read: the caller already knows the hold's layout (seats, pool:
 * from an earlier answer about the same hold — a hold's seats and pool never change). The
 * script itself checks the layout against the record (load_acting → STALE); on STALE the
 * record is read and the script runs again, as rsv_hold_act does. One Redis round trip
 * instead of two. Same contract otherwise.
 */
__attribute__((warn_unused_result)) int
rsv_hold_act_known(rsv_server_t *srv, const cm_redis_script_t *script, const char *hold_id,
                   const char *buyer, const char *seats, const char *pool, int nextra,
                   const char *const *extra, cm_redis_cb cb, void *arg);

/* Handlers: each answers req exactly once. */
void rsv_hold_create(rsv_server_t *srv, cm_req_t *req, const char *event);
void rsv_hold_get(rsv_server_t *srv, cm_req_t *req, const char *hold_id);
void rsv_hold_extend(rsv_server_t *srv, cm_req_t *req, const char *hold_id);
void rsv_hold_release(rsv_server_t *srv, cm_req_t *req, const char *hold_id);

#endif
