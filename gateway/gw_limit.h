/*
 * gw_limit — the per-client join limit: a token bucket per client address — an IPv4
 * address whole, an IPv6 address by its /64 (docs/design.md, "Per-address join limit") —
 * (rate per minute, burst), in a fixed-size table so an address flood cannot grow memory. When
 * the probed slots are all taken, the one idle longest is reused (forgetting an idle
 * client only ever lets it in earlier). Pure: time is passed in; thread-safe (one table for every
 * worker).
 */
#ifndef GW_LIMIT_H
#define GW_LIMIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw_limit gw_limit_t;

#define GW_LIMIT_KEY_MAX 48

/**
 * The bucket addr counts against, as text into out: an IPv4 address (or an IPv4-mapped
 * IPv6 one) as itself, an IPv6 address as its /64, anything else as its own text. Pure.
 */
void gw_limit_key(const char *addr, char out[GW_LIMIT_KEY_MAX]);

/** per_minute 0 = unlimited. size: addresses tracked. NULL never. */
gw_limit_t *gw_limit_new(int64_t per_minute, int64_t burst, size_t size);
void gw_limit_free(gw_limit_t *l);

/**
 * New rate and burst (a reload), any thread. Addresses keep their tokens, capped at the new
 * burst; turning the limit on from 0 makes the table then. Unchanged values cost nothing.
 */
void gw_limit_set(gw_limit_t *l, int64_t per_minute, int64_t burst);

/**
 * Takes one token for addr at now_ms. Returns 0 when allowed, else the seconds after
 * which a token will be there (for Retry-After, at least 1).
 */
int gw_limit_take(gw_limit_t *l, const char *addr, int64_t now_ms);

#endif
