/*
 * cm_hash — the one hash of onsale's in-memory tables (the per-address tables of
 * cm_addrtab, the proof-of-work rates, the catalogue's seats, the reserve's verified-token
 * cache and its policy fingerprint, the prepared statements of rsv_pg).
 *
 * Eight bytes a step: each word is folded in with a multiply and a shift, the tail once,
 * and a last multiply-and-shift spreads every input bit over the low bits a table masks
 * with. A token of ~400 bytes is ~50 steps (byte-wise FNV-1a took a microsecond on it,
 * hashed on every request); a short key such as an address is one or two. No allocation;
 * the value is the process's own (it depends on the machine's byte order), never stored
 * or sent. Not keyed: tables that hash what a client chooses bound their probes (and
 * evict, restart or let through on a full run) instead of trusting the spread, so a
 * crafted collision costs the attacker a slot, never the service its time. Never 0, so 0
 * can mark a free slot.
 */
#ifndef CM_HASH_H
#define CM_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/** The hash of the n bytes at p (p may be NULL when n is 0). Never 0. Pure. */
static inline uint64_t cm_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    w = 0;
    if (n > i)
        memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h ? h : 1;
}

/** The hash of the NUL-terminated s (cm_hash of its bytes). Never 0. Pure. */
static inline uint64_t cm_hash_str(const char *s)
{
    return cm_hash(s, strlen(s));
}

#endif
