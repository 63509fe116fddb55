/*
 * gw_limit — see gw_limit.h. Open addressing on a 64-bit FNV-1a hash of the address's
 * bucket key (gw_limit_key), at most PROBES slots looked at per call. One table serves every worker
 * thread (an address gets its rate once per process, not once per worker): a mutex guards it, held
 * for the few probes of one call.
 */
#include "gw_limit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_hash.h"
#include "cm_mem.h"

#define PROBES 8

typedef struct slot {
    uint64_t key; /* 0 = free */
    double tokens;
    int64_t last_ms;
} slot_t;

struct gw_limit {
    pthread_mutex_t lock;
    double per_ms, burst; /* under lock */
    size_t mask;
    slot_t *slots; /* NULL while unlimited and never limited; set under lock, read atomically */
    bool on;       /* per_minute > 0: read atomically before the lock (the unlimited fast path) */
};

gw_limit_t *gw_limit_new(int64_t per_minute, int64_t burst, size_t size)
{
    gw_limit_t *l = cm_xcalloc(1, sizeof(*l));
    size_t cap = 16;
    while (cap < size * 2)
        cap <<= 1;
    l->mask = cap - 1;
    l->per_ms = (double)per_minute / 60000.0;
    l->burst = burst > 0 ? (double)burst : 1;
    l->slots = per_minute > 0 ? cm_xcalloc(cap, sizeof(slot_t)) : NULL;
    l->on = per_minute > 0;
    pthread_mutex_init(&l->lock, NULL);
    return l;
}

void gw_limit_set(gw_limit_t *l, int64_t per_minute, int64_t burst)
{
    pthread_mutex_lock(&l->lock);
    l->per_ms = (double)per_minute / 60000.0;
    l->burst = burst > 0 ? (double)burst : 1;
    if (per_minute > 0 && l->slots == NULL)
        l->slots = cm_xcalloc(l->mask + 1, sizeof(slot_t));
    for (size_t i = 0; l->slots != NULL && i <= l->mask; i++)
        if (l->slots[i].tokens > l->burst)
            l->slots[i].tokens = l->burst;
    __atomic_store_n(&l->on, per_minute > 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&l->lock);
}

void gw_limit_free(gw_limit_t *l)
{
    if (l == NULL)
        return;
    pthread_mutex_destroy(&l->lock);
    free(l->slots);
    free(l);
}

void gw_limit_key(const char *addr, char out[GW_LIMIT_KEY_MAX])
{
    unsigned char a[16];
    if (inet_pton(AF_INET6, addr, a) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, sizeof(mapped)) == 0) { /* ::ffff:a.b.c.d is a.b.c.d */
            snprintf(out, GW_LIMIT_KEY_MAX, "%u.%u.%u.%u", a[12], a[13], a[14], a[15]);
            return;
        }
        /* the /64: one subscriber's prefix, however many addresses its hosts pick */
        snprintf(out, GW_LIMIT_KEY_MAX, "%02x%02x:%02x%02x:%02x%02x:%02x%02x::/64", a[0], a[1],
                 a[2], a[3], a[4], a[5], a[6], a[7]);
        return;
    }
    if (inet_pton(AF_INET, addr, a) == 1) { /* the whole address: a CGNAT one is shared */
        snprintf(out, GW_LIMIT_KEY_MAX, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
        return;
    }
    snprintf(out, GW_LIMIT_KEY_MAX, "%s", addr); /* not an address: its own text */
}

static int take_locked(gw_limit_t *l, const char *addr, int64_t now_ms)
{
    char text[GW_LIMIT_KEY_MAX];
    gw_limit_key(addr, text);
    uint64_t key = cm_hash_str(text);
    slot_t *s = NULL, *oldest = NULL;
    for (size_t i = 0; i < PROBES; i++) {
        slot_t *c = &l->slots[(key + i) & l->mask];
        if (c->key == key) {
            s = c;
            break;
        }
        if (c->key == 0) {
            if (oldest == NULL || oldest->key != 0)
                oldest = c;
            continue;
        }
        if (oldest == NULL || (oldest->key != 0 && c->last_ms < oldest->last_ms))
            oldest = c;
    }
    if (s == NULL) {
        s = oldest;
        s->key = key;
        s->tokens = l->burst;
        s->last_ms = now_ms;
    }
    if (now_ms > s->last_ms) {
        s->tokens += (double)(now_ms - s->last_ms) * l->per_ms;
        if (s->tokens > l->burst)
            s->tokens = l->burst;
        s->last_ms = now_ms;
    }
    if (s->tokens >= 1.0) {
        s->tokens -= 1.0;
        return 0;
    }
    int wait = (int)((1.0 - s->tokens) / l->per_ms / 1000.0) + 1;
    return wait;
}

int gw_limit_take(gw_limit_t *l, const char *addr, int64_t now_ms)
{
    if (!__atomic_load_n(&l->on, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&l->lock);
    int wait = l->per_ms > 0 ? take_locked(l, addr, now_ms) : 0;
    pthread_mutex_unlock(&l->lock);
    return wait;
}
