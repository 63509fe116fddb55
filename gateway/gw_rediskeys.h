/*
 * gw_rediskeys — the Redis key schema of one waiting room, as the gateway's scripts see it.
 *
 * Every key a gateway script touches is passed in KEYS, always the same GW_K_COUNT keys in
 * the same order (prelude.lua names them), so a script never builds a key name itself.
 * All of them carry the `{event}` hash tag: one event lives in one hash slot, and each
 * script stays atomic under Redis Cluster. The one cross-event key, GW_ROOMS_KEY (room
 * discovery), is never touched by a script (see its comment).
 *
 * gw_rediskeys_of writes the names by hand (no snprintf: this runs on every join and poll that
 * reaches Redis); gw_rediskeys_cached keeps them per thread, built once per room.
 *
 * Pure functions (gw_rediskeys_cached: per-thread state only), any thread.
 */
#ifndef GW_REDISKEYS_H
#define GW_REDISKEYS_H

#include <stddef.h>

#include "cm_parse.h"

/* KEYS[i + 1] of every gateway script (prelude.lua documents each one's contents). */
typedef enum {
    GW_K_CFG,    /* hash: the room's settings */
    GW_K_N,      /* string: last queue number handed out */
    GW_K_ST,     /* hash: watermark, credits, counters */
    GW_K_WB,     /* list: passed batches awaiting their no-show verdict */
    GW_K_PRE,    /* zset: the pre-queue (visitor -> order score) */
    GW_K_PL,     /* hash: visitor -> number for pre-queue tickets Redis had lost */
    GW_K_CB,     /* bitmap: numbers that claimed their admission */
    GW_K_SB,     /* bitmap: numbers that came for their admission (claimed or told to wait) */
    GW_K_ADM,    /* hash: number -> the one admission record of that number */
    GW_K_GONE,   /* string: generation of a deleted room (a tombstone; stops restores) */
    GW_K_ACTIVE, /* zset shared with reserve: visitor -> ms their activity lapses */
    GW_K_COUNT
} gw_key_t;

#define GW_KEY_MAX (CM_IDENT_MAX + 24)

typedef struct gw_rediskeys {
    char name[GW_K_COUNT][GW_KEY_MAX];
    size_t len[GW_K_COUNT]; /* strlen(name[i]) */
} gw_rediskeys_t;

/**
 * Fills k with every key of event's room ("os:{<event>}:q:cfg", …, "os:{<event>}:active").
 * event is an identifier (at most CM_IDENT_MAX bytes; a longer one is cut there).
 */
void gw_rediskeys_of(const char *event, gw_rediskeys_t *k);

/**
 * Writes the keys of event into argv[0 .. GW_K_COUNT-1] (pointing into k, which must
 * outlive argv's use); returns GW_K_COUNT, the nkeys of cm_redis_eval.
 */
int gw_rediskeys_argv(const char *event, gw_rediskeys_t *k, const char **argv);

/*
 * The keys of a room's phases and presale codes (gw_sched.h, gw_code.h), passed only to
 * the scripts that need them, after the GW_K_COUNT keys (each script says where):
 *   GW_KEY_HOLDERS "q:cv"   hash: visitor -> the phase whose code placed them
 *   GW_KEY_BATCHES "q:cbat" hash: 'next' (last batch id), batch id ->
 *                           '<base>:<count>:<uses>:<revoked 0|1>:<phase>'
 *   GW_KEY_USES    "q:cu"   string: one byte per code (BITFIELD u8 at its base + serial),
 *                           the uses it placed
 *   GW_KEY_REVOKED "q:cr"   bitmap: bit base + serial set once that code is revoked
 * and of its customers (gw_enqueue.h), passed to join.lua for a customer's join:
 *   GW_KEY_CUSTOMERS "q:cust" hash: customer id -> their number, or 'p' (in the pre-queue,
 *                             where the customer id is the member)
 */
#define GW_KEY_HOLDERS   "q:cv"
#define GW_KEY_BATCHES   "q:cbat"
#define GW_KEY_USES      "q:cu"
#define GW_KEY_REVOKED   "q:cr"
#define GW_KEY_CUSTOMERS "q:cust"

/** "os:{<event>}:<tail>" into out (GW_KEY_MAX bytes); its length. */
size_t gw_rediskeys_extra(const char *event, const char *tail, char out[GW_KEY_MAX]);

/** How many rooms' keys each thread keeps (gw_rediskeys_cached); past that the oldest goes. */
#define GW_KEYS_CACHED 8

/**
 * Like gw_rediskeys_argv, with the lengths (argvlen[0 .. GW_K_COUNT-1]), from this thread's
 * cache: the names are built on a room's first call only. argv points into the cache:
 * use it before this thread's next gw_rediskeys_cached call (cm_redis_eval copies it).
 */
int gw_rediskeys_cached(const char *event, const char **argv, size_t *argvlen);

/**
 * The Redis set listing every waiting room: discovery only, so a gateway learns rooms
 * created through another. It is the only key outside an event's hash slot; no script
 * touches it, only plain SADD/SREM/SMEMBERS, which a cluster client routes to its own
 * shard. If that shard loses it, every gateway re-adds the rooms it knows (see
 * gw_watermark), so discovery heals and no room's state depends on it.
 */
#define GW_ROOMS_KEY "os:gateway:rooms"

#endif
