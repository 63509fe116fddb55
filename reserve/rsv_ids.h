/*
 * rsv_ids — the reserve's identifiers and key prefix: an event's Redis key prefix, and
 * the random ids of holds, checkouts and bookings (32 hex characters from the CSPRNG).
 * Pure but for the random bytes; any thread.
 */
#ifndef RSV_IDS_H
#define RSV_IDS_H

#include <stddef.h>

/** "os:{<event>}:" into buf; returns its length. */
size_t rsv_key_prefix(const char *event, char *buf, size_t len);

/** Writes "<32 random hex>.<suffix>" into buf (hold ids). */
void rsv_hex_id(char *buf, size_t size, const char *suffix);
/** Writes "<prefix><32 random hex>" into buf (checkout and booking ids). */
void rsv_random_id(char *buf, size_t size, const char *prefix);

#endif
