/*
 * gw_lua — the gateway's Redis scripts, compiled into the binary from gateway/lua/
 * (each prefixed with prelude.lua, which documents the key layout). Registered once;
 * see each script for its KEYS, ARGV and reply.
 */
#ifndef GW_LUA_H
#define GW_LUA_H

#include "cm_redis.h"

typedef struct gw_lua {
    cm_redis_script_t *join;
    cm_redis_script_t *join_batch; /* join.lua for the fans of one batch (gw_batch) */
    cm_redis_script_t *lookup;
    cm_redis_script_t *advance;
    cm_redis_script_t *admit;
    cm_redis_script_t *settings;
    cm_redis_script_t *remove;
    cm_redis_script_t *codes; /* presale code batches: issue, revoke, get */
} gw_lua_t;

/** The scripts (built once, on the first call from any thread; live for the process). */
const gw_lua_t *gw_lua(void);

/*
 * What a script decided: the first word of its reply, one enum per script, parsed here and
 * nowhere else, so callers dispatch with a switch (-Wswitch names a word left out). Each
 * enum's 0 is "not a word of that script": a reply of the wrong shape, an error reply
 * (logged by the caller), or a script newer than this gateway; the caller answers 503.
 */

/** join.lua and join_batch.lua (a batch's per-fan marks as the same words). */
typedef enum gw_join_word {
    GW_JOIN_BAD = 0,
    GW_JOIN_QUEUED,
    GW_JOIN_PREQUEUE,
    GW_JOIN_REPLAYED,      /* the proof of work placed a fan already */
    GW_JOIN_PREQUEUE_FULL, /* with opens_at */
    GW_JOIN_UNKNOWN,       /* the room's gate (prelude.lua's join_gate): */
    GW_JOIN_SOLD_OUT,
    GW_JOIN_CLOSED,
    GW_JOIN_NOT_OPEN,      /* with prequeue_at */
    GW_JOIN_CODE_REQUIRED, /* with the phase: its joins need a presale code (gw_code.h) */
    GW_JOIN_CODE_UNKNOWN,  /* join.lua with a code: no such batch or serial */
    GW_JOIN_CODE_REVOKED,
    GW_JOIN_CODE_USED_UP,
    GW_JOIN_CODE_WRONG_PHASE, /* with the phase in force ('' = none) */
} gw_join_word_t;
#define GW_JOIN_WORDS (GW_JOIN_CODE_WRONG_PHASE + 1)

/** lookup.lua: a pre-queue ticket's number once the room opened. */
typedef enum gw_lookup_word {
    GW_LOOKUP_BAD = 0,
    GW_LOOKUP_NUMBER, /* with the number */
    GW_LOOKUP_PREQUEUE,
    GW_LOOKUP_UNKNOWN
} gw_lookup_word_t;
#define GW_LOOKUP_WORDS (GW_LOOKUP_UNKNOWN + 1)

/** admit.lua. */
typedef enum gw_admit_word {
    GW_ADMIT_BAD = 0,
    GW_ADMIT_NEW,      /* with the record */
    GW_ADMIT_EXISTING, /* with the record */
    GW_ADMIT_WAIT,
    GW_ADMIT_NOT_YET,
    GW_ADMIT_SOLD_OUT,
    GW_ADMIT_STOCK_OUT, /* with the units held */
    GW_ADMIT_CLOSED,
    GW_ADMIT_UNKNOWN
} gw_admit_word_t;
#define GW_ADMIT_WORDS (GW_ADMIT_UNKNOWN + 1)

/** settings.lua. */
typedef enum gw_settings_word {
    GW_SETTINGS_BAD = 0,
    GW_SETTINGS_CREATED, /* then the settings, field and value in turn */
    GW_SETTINGS_REPLACED,
    GW_SETTINGS_PATCHED,
    GW_SETTINGS_INVALID, /* with the message */
    GW_SETTINGS_UNKNOWN
} gw_settings_word_t;
#define GW_SETTINGS_WORDS (GW_SETTINGS_UNKNOWN + 1)

/** The first word of reply (an array's first element), as that script's enum; 0 for
 *  anything else, NULL included. */
gw_join_word_t gw_lua_join_word(const cm_redis_reply_t *reply);
gw_lookup_word_t gw_lua_lookup_word(const cm_redis_reply_t *reply);
gw_admit_word_t gw_lua_admit_word(const cm_redis_reply_t *reply);
gw_settings_word_t gw_lua_settings_word(const cm_redis_reply_t *reply);

/** The join word of one character of join_batch.lua's marks ('q', 'p', 'r', 'f'). */
gw_join_word_t gw_lua_join_mark(char mark);

/** The words as the scripts spell them ("bad" for 0 or out of range: for logs and tests). */
const char *gw_lua_join_name(gw_join_word_t w);
const char *gw_lua_settings_name(gw_settings_word_t w);

#endif
