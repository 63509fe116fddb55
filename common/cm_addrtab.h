/*
 * cm_addrtab — a fixed-size table of per-client-address entries, shared by threads: the
 * connection counts of the HTTP guard (cm_http), the join buckets of the gateway's
 * limiter (gw_limit), the proof-of-work rates per address block (gw_pow), the failed
 * tokens of the reserve's gate (rsv_auth).
 *
 * An entry is a 64-bit key (cm_hash_str of the address, or of the text the caller counts
 * it under) and a value of the caller's shape and size. The table never grows: a flood
 * of addresses costs at most the slots it was made with. A call looks at no more than
 * `probes` slots from the key's home slot (linear probing), so a crafted run of
 * collisions costs a call a bounded, small time. When none of them holds the key and
 * none is free, the table's full policy decides (cm_addrtab_full_t).
 *
 * Thread-safe: one mutex per table, held for one call's probes and its callback (the
 * callback must be short and must not call into the same table).
 */
#ifndef CM_ADDRTAB_H
#define CM_ADDRTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cm_addrtab cm_addrtab_t;

/** What a call does for a new key when every probed slot holds another. */
typedef enum {
    /* nothing: the call finds no entry (the connection guard lets the connection in) */
    CM_ADDRTAB_FULL_PASS,
    /* the probed entry that last_used says was used longest ago is given to the new key
     * (the join limiter: forgetting an idle client only ever lets it in earlier) */
    CM_ADDRTAB_FULL_EVICT,
    /* the key's home slot is restarted for it (the failure table: an attacker may be
     * forgotten for a while, an innocent address is never charged another's failures) */
    CM_ADDRTAB_FULL_RESTART,
} cm_addrtab_full_t;

typedef struct cm_addrtab_config {
    size_t slots;           /* entries at most: rounded up to a power of two, at least 1 */
    size_t probes;          /* slots a call looks at, 1 (direct-mapped) .. slots */
    size_t value_size;      /* bytes of the caller's value; zeroed when an entry starts */
    cm_addrtab_full_t full; /* the full-run policy */
    /* CM_ADDRTAB_FULL_EVICT only: when the value was last used (smaller is older; on a
     * tie the first probed goes) */
    int64_t (*last_used)(const void *value);
} cm_addrtab_config_t;

/** What a callback tells the table to do with the entry it was shown. */
typedef enum {
    CM_ADDRTAB_KEEP, /* the entry stays */
    CM_ADDRTAB_DROP, /* the slot is freed (a count back at 0) */
} cm_addrtab_verdict_t;

/**
 * Called under the table's lock with the entry's value (value_size bytes, suitably
 * aligned for any scalar). fresh: the entry has just started for this key (all zero).
 */
typedef cm_addrtab_verdict_t (*cm_addrtab_fn)(void *value, bool fresh, void *arg);

/** A new table (cfg copied). Aborts on a config that breaks the rules above. */
cm_addrtab_t *cm_addrtab_new(const cm_addrtab_config_t *cfg);
/** Frees t; NULL is fine. No call may be running on it. */
void cm_addrtab_free(cm_addrtab_t *t);

/**
 * Runs fn on key's entry, any thread. add: a missing key gets an entry (a free probed
 * slot, else what the full policy gives); without add a missing key is left missing.
 * Returns 0 when fn ran, -1 when the key has no entry (not added, or the table's run is
 * full under CM_ADDRTAB_FULL_PASS). key must not be 0 (cm_hash never is).
 */
int cm_addrtab_visit(cm_addrtab_t *t, uint64_t key, bool add, cm_addrtab_fn fn, void *arg);

/** Runs fn on every entry (fresh false) in slot order under one hold of the lock, any
 *  thread: for a reload's change of what the values mean. */
void cm_addrtab_each(cm_addrtab_t *t, cm_addrtab_fn fn, void *arg);

/** Entries in use (a walk of the table under its lock: for tests and gauges). */
size_t cm_addrtab_count(cm_addrtab_t *t);

#endif
