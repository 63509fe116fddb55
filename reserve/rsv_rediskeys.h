/*
 * rsv_rediskeys — the reserve's Redis key schema, in one place (reserve/lua/prelude.lua
 * describes what each key holds). Every key of an event carries the event as its hash
 * tag, "os:{<event>}:<kind>[<id>]", so a Redis Cluster slot holds a whole event and
 * each script, which gets every key it touches in KEYS, stays atomic. The gateway shares
 * the prefix and the "active" set (gateway/gw_rediskeys.c).
 *
 * Pure; any thread.
 */
#ifndef RSV_REDISKEYS_H
#define RSV_REDISKEYS_H

#include <stddef.h>

#define RSV_K_SEED       "seed"
#define RSV_K_SEAT       "s:"
#define RSV_K_HOLD       "h:"
#define RSV_K_BUYER      "b:"
#define RSV_K_POOL       "p:"
#define RSV_K_POOL_UNITS "pu:"
#define RSV_K_POOL_NEXT  "pn:"
#define RSV_K_POOL_OLD   "pe:" /* held pool units before pu: (dropped on re-seed) */
#define RSV_K_TOKEN      "tk:" /* + hex sha256 of a token (the gateway writes it, holds read it) */
#define RSV_K_ACTIVE     "active"
#define RSV_K_REFUND     "rf:"    /* + refund id: the box office gave its units back */
#define RSV_K_IDEM       "ik:"    /* + sha256(buyer "\n" Idempotency-Key) of a hold creation */
#define RSV_K_STOCK      "stock"  /* the stock feed's hash (rsv_stock; the gateway reads it) */
#define RSV_K_STOCK_LOCK "stockl" /* who rebuilds the stock this interval (SET NX PX) */

/** "os:{<event>}:<kind><id>" (id NULL: none), heap (free()). */
char *rsv_key(const char *event, const char *kind, const char *id);

/** Longest key of identifiers (event, seat, pool, hold, buyer, hashes) the reserve accepts. */
#define RSV_KEY_MAX 320

/** rsv_key written into buf (cap bytes); returns buf, or NULL when it does not fit. */
char *rsv_key_buf(char *buf, size_t cap, const char *event, const char *kind, const char *id);

#endif
