/*
 * cm_hash — the one string hash of onsale's in-memory tables (per-address connection
 * counts, join limits, proof-of-work rates, the catalogue's events): 64-bit FNV-1a.
 * Cheap, no allocation, good spread on short keys such as addresses and identifiers.
 * Not keyed: tables that hash what a client chooses bound their probes (and evict or
 * let through on a full run) instead of trusting the spread, so a crafted collision
 * costs the attacker a slot, never the service its time. Never 0, so 0 can mark a
 * free slot.
 */
#ifndef CM_HASH_H
#define CM_HASH_H

#include <stdint.h>

static inline uint64_t cm_hash_str(const char *s)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a 64 offset basis */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

#endif
