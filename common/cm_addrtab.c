/*
 * cm_addrtab — see cm_addrtab.h. One calloc'd array of slots, each a key (0 = free)
 * followed by the caller's value padded to 8 bytes, so values are aligned for any scalar
 * and the whole table is one allocation made at start-up. Any thread; one mutex guards
 * every slot. A call scans all of its probes (a dropped entry leaves a hole, so a free
 * slot does not end a run): the key where it is, else the first free slot, else the full
 * policy's choice. The table is for a few thousand to a few tens of thousands of
 * addresses touched once or twice per connection or request, so a single lock held for
 * at most `probes` comparisons is not where the time goes; lock striping (rsv_auth's
 * token cache) would buy nothing here.
 */
#include "cm_addrtab.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"

struct cm_addrtab {
    pthread_mutex_t lock;
    cm_addrtab_config_t cfg;
    size_t mask, stride; /* slots - 1; bytes per slot */
    unsigned char *slots;
};

cm_addrtab_t *cm_addrtab_new(const cm_addrtab_config_t *cfg)
{
    assert(cfg->probes >= 1 && cfg->value_size > 0);
    assert(cfg->full != CM_ADDRTAB_FULL_EVICT || cfg->last_used != NULL);
    cm_addrtab_t *t = cm_xcalloc(1, sizeof(*t));
    t->cfg = *cfg;
    size_t cap = 1;
    while (cap < cfg->slots)
        cap <<= 1;
    t->mask = cap - 1;
    if (t->cfg.probes > cap)
        t->cfg.probes = cap;
    t->stride = sizeof(uint64_t) + ((cfg->value_size + 7) & ~(size_t)7);
    t->slots = cm_xcalloc(cap, t->stride);
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

void cm_addrtab_free(cm_addrtab_t *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->slots);
    free(t);
}

static uint64_t *slot_at(const cm_addrtab_t *t, size_t i)
{
    return (uint64_t *)(void *)(t->slots + (i & t->mask) * t->stride);
}

static void *value_of(uint64_t *slot)
{
    return slot + 1;
}

/* The slot a missing key gets when all its probes are taken, or NULL. Under the lock. */
static uint64_t *when_full(const cm_addrtab_t *t, uint64_t key)
{
    switch (t->cfg.full) {
    case CM_ADDRTAB_FULL_PASS:
        return NULL;
    case CM_ADDRTAB_FULL_RESTART:
        return slot_at(t, key);
    case CM_ADDRTAB_FULL_EVICT:
        break;
    }
    uint64_t *oldest = slot_at(t, key);
    int64_t oldest_at = t->cfg.last_used(value_of(oldest));
    for (size_t i = 1; i < t->cfg.probes; i++) {
        uint64_t *s = slot_at(t, key + i);
        int64_t at = t->cfg.last_used(value_of(s));
        if (at < oldest_at)
            oldest = s, oldest_at = at;
    }
    return oldest;
}

/* key's slot (*fresh false), else a slot started for it when add (*fresh true), else
 * NULL. Under the lock. */
static uint64_t *find(cm_addrtab_t *t, uint64_t key, bool add, bool *fresh)
{
    uint64_t *free_slot = NULL;
    *fresh = false;
    for (size_t i = 0; i < t->cfg.probes; i++) {
        uint64_t *s = slot_at(t, key + i);
        if (*s == key)
            return s;
        if (*s == 0 && free_slot == NULL)
            free_slot = s;
    }
    if (!add)
        return NULL;
    uint64_t *s = free_slot != NULL ? free_slot : when_full(t, key);
    if (s == NULL)
        return NULL;
    memset(s, 0, t->stride);
    *s = key;
    *fresh = true;
    return s;
}

static void apply(cm_addrtab_t *t, uint64_t *s, bool fresh, cm_addrtab_fn fn, void *arg)
{
    if (fn(value_of(s), fresh, arg) == CM_ADDRTAB_DROP)
        memset(s, 0, t->stride);
}

int cm_addrtab_visit(cm_addrtab_t *t, uint64_t key, bool add, cm_addrtab_fn fn, void *arg)
{
    assert(key != 0);
    bool fresh;
    pthread_mutex_lock(&t->lock);
    uint64_t *s = find(t, key, add, &fresh);
    if (s != NULL)
        apply(t, s, fresh, fn, arg);
    pthread_mutex_unlock(&t->lock);
    return s != NULL ? 0 : -1;
}

void cm_addrtab_each(cm_addrtab_t *t, cm_addrtab_fn fn, void *arg)
{
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i <= t->mask; i++) {
        uint64_t *s = slot_at(t, i);
        if (*s != 0)
            apply(t, s, false, fn, arg);
    }
    pthread_mutex_unlock(&t->lock);
}

size_t cm_addrtab_count(cm_addrtab_t *t)
{
    size_t n = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i <= t->mask; i++)
        n += *slot_at(t, i) != 0;
    pthread_mutex_unlock(&t->lock);
    return n;
}
