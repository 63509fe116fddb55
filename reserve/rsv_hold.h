/*
 * rsv_hold — seat and general-admission holds (docs/design.md invariants 3, 4, 5).
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

#include "cm_http.h"
#include "cm_metrics.h"
#include "cm_parse.h"
#include "cm_redis.h"

typedef struct rsv_server rsv_server_t;

#define RSV_HOLD_ID_MAX (32 + 1 + CM_IDENT_MAX)

/* What a first hold learnt from its token's gateway record (the `result` label). */
typedef enum {
    RSV_HOLD_RECORD_MATCHED, /* the record matched: no signature check */
    RSV_HOLD_RECORD_MISSING, /* no record: the signature was verified instead */
    RSV_HOLD_RECORD_COUNT
} rsv_hold_record_t;

extern const char *const rsv_hold_record_names[RSV_HOLD_RECORD_COUNT];

/* The holds' series: shared by every worker (the registry's series are). */
typedef struct rsv_hold_metrics {
    cm_counter_t *taken;
    cm_counter_t *conflicts; /* seat held or sold, pool empty */
    cm_counter_t *expired;   /* operations that found their hold expired (any module) */
    cm_counter_t *released;
    cm_counter_t *limit_exceeded; /* over max_per_buyer */
    cm_counter_t *token_records[RSV_HOLD_RECORD_COUNT];
} rsv_hold_metrics_t;

/** Registers the holds' series in reg and points hm at them. Main thread, at start. */
void rsv_hold_metrics_register(rsv_hold_metrics_t *hm, cm_metrics_t *reg);

/*
 * What a hold script answered first (element 1 of its reply): every word the scripts of
 * reserve/lua/ send, parsed in one place (rsv_hold_status_parse) so callers switch on it.
 */
typedef enum {
    RSV_HOLD_OK,        /* held (get, extend), released, converted, given back */
    RSV_HOLD_EXPIRED,   /* the hold's time ran out */
    RSV_HOLD_CONVERTED, /* already converted (by this checkout or another) */
    RSV_HOLD_NOTFOUND,  /* no such hold, or another buyer's */
    RSV_HOLD_GONE,      /* the record is gone (kept past its expiry no longer) */
    RSV_HOLD_STALE,     /* the acting layout passed is not the record's */
    RSV_HOLD_AMOUNT,    /* convert: the checkout's amount is not the hold's */
    RSV_HOLD_NOOP,      /* unconvert: not converted by this checkout, or given back before */
    RSV_HOLD_OTHER,     /* a word no hold script sends */
    RSV_HOLD_NSTATUS
} rsv_hold_status_t;

/** The status named word (as a script sends it), RSV_HOLD_OTHER for any other or NULL. */
rsv_hold_status_t rsv_hold_status_parse(const char *word);
/** The status word of a script reply (its first element), RSV_HOLD_OTHER when it has none. */
rsv_hold_status_t rsv_hold_reply_status(const cm_redis_reply_t *reply);

/** A hold as a script described it (see describe() in lua/prelude.lua). */
typedef struct rsv_hold_view {
    rsv_hold_status_t status; /* OK, EXPIRED, CONVERTED, NOTFOUND, GONE (or another word) */
    int64_t exp_ms, created_ms, cap_ms;
    int64_t amount;
    int64_t qty;
    int64_t first_unit;
    char pool[CM_IDENT_MAX + 1];
    char checkout[48];
    char *seats; /* comma-joined seat ids (heap; rsv_hold_view_clear frees) */
} rsv_hold_view_t;

/**
 * Parses a script reply. Returns 0, or -1 when the reply is not of that shape: not an
 * array, no status word, or a short reply (no description) whose word is not NOTFOUND,
 * GONE, CONVERTED or OK. Pure (tests/unit/reserve/test_rsv_hold.c).
 */
int rsv_hold_view_parse(const cm_redis_reply_t *reply, rsv_hold_view_t *out);
void rsv_hold_view_clear(rsv_hold_view_t *v);

/** What the take scripts (hold_seats.lua, hold_best.lua, hold_pool.lua) answered. */
typedef enum {
    RSV_HOLD_TAKE_OK,           /* taken: {'OK', exp} */
    RSV_HOLD_TAKE_REPLAY,       /* the Idempotency-Key took a hold before: {'REPLAY', id} */
    RSV_HOLD_TAKE_MISMATCH,     /* the key was used for another request */
    RSV_HOLD_TAKE_TAKEN,        /* seats held or sold: {'TAKEN', index...} (1-based) */
    RSV_HOLD_TAKE_SOLDOUT,      /* the pool has no unit left */
    RSV_HOLD_TAKE_INSUFFICIENT, /* fewer units left than asked: {'INSUFFICIENT', left} */
    RSV_HOLD_TAKE_NOBLOCK,      /* best available: no N adjacent free seats: {'NOBLOCK', free} */
    RSV_HOLD_TAKE_LIMIT,        /* the buyer's limit is reached */
    RSV_HOLD_TAKE_UNVERIFIED,   /* no gateway record of the token: verify its signature */
    RSV_HOLD_TAKE_NOSEED,       /* the event is not in Redis: seed it, run again */
    RSV_HOLD_TAKE_OTHER,        /* not an answer of the take scripts */
} rsv_hold_take_t;

/** The take scripts' answer of reply (an array whose first element is the word). Pure. */
rsv_hold_take_t rsv_hold_take_parse(const cm_redis_reply_t *reply);

/** Checks a hold id and extracts its event. Returns 0 or -1 (malformed). */
int rsv_hold_id_event(const char *hold_id, char event[CM_IDENT_MAX + 1]);

/** Adds seats (array) or pool + quantity from the view to obj. */
void rsv_hold_json_items(json_t *obj, const rsv_hold_view_t *v);

/*
 * The operations on an existing hold. Each owns its script (reserve/lua/) and builds
 * its arguments. The acting ones (extend, release, convert, unconvert: the "acting"
 * layout of lua/prelude.lua) declare every key they touch in KEYS: the hold record is
 * read first (get.lua) to learn its seats or pool, then the script runs with the hold's
 * keys and ARGV (hold id, buyer, seats, pool, the operation's own arguments). cb gets
 * the script's reply, or get's when the hold is gone or another buyer's (NOTFOUND,
 * GONE), or the error. Strings are copied. Each returns 0 (cb will be called, always
 * from the loop) or -1 when Redis is closed or hold_id is malformed (cb is not called).
 * Event-loop thread.
 */

/** get.lua: the hold as it is (reply: rsv_hold_view_parse). */
__attribute__((warn_unused_result)) int rsv_hold_op_read(rsv_server_t *srv, const char *hold_id,
                                                         const char *buyer, cm_redis_cb cb,
                                                         void *arg);

/** extend.lua: extends the hold by extension_ms (never past its cap); the record is kept
 *  hold_record_keep_s past its expiry. Reply: rsv_hold_view_parse. */
__attribute__((warn_unused_result)) int rsv_hold_op_extend(rsv_server_t *srv, const char *hold_id,
                                                           const char *buyer, int64_t extension_ms,
                                                           cm_redis_cb cb, void *arg);

/** release.lua: frees the hold at once. Reply: rsv_hold_view_parse (short). */
__attribute__((warn_unused_result)) int rsv_hold_op_release(rsv_server_t *srv, const char *hold_id,
                                                            const char *buyer, cm_redis_cb cb,
                                                            void *arg);

/**
 * convert.lua: marks the hold's units sold for checkout_id of amount (the record is kept a
 * week). known: an earlier answer about the same hold whose layout (seats, pool) is
 * used without reading the record first — a hold's seats and pool never change; the
 * script checks the layout against the record (STALE) and on STALE the record is read
 * and the script runs again. NULL: read first. Reply: rsv_hold_view_parse.
 */
__attribute__((warn_unused_result)) int rsv_hold_op_convert(rsv_server_t *srv, const char *hold_id,
                                                            const char *buyer,
                                                            const rsv_hold_view_t *known,
                                                            const char *checkout_id, int64_t amount,
                                                            cm_redis_cb cb, void *arg);

/**
 * unconvert.lua: gives back what checkout_id's conversion took: the sold marks of
 * free_seats (comma-joined, the seats Postgres has not booked), free_units pool units
 * (decimal) and the buyer-limit entry. Reply: rsv_hold_reply_status OK (element 2 seats
 * freed, 3 units returned), NOOP, NOTFOUND, GONE.
 */
__attribute__((warn_unused_result)) int
rsv_hold_op_unconvert(rsv_server_t *srv, const char *hold_id, const char *buyer,
                      const char *checkout_id, const char *free_seats, const char *free_units,
                      cm_redis_cb cb, void *arg);

/* Handlers: each answers req exactly once. */
void rsv_hold_create(rsv_server_t *srv, cm_req_t *req, const char *event);
void rsv_hold_get(rsv_server_t *srv, cm_req_t *req, const char *hold_id);
void rsv_hold_extend(rsv_server_t *srv, cm_req_t *req, const char *hold_id);
void rsv_hold_release(rsv_server_t *srv, cm_req_t *req, const char *hold_id);

#endif
