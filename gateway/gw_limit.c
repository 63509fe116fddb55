/*
 * gw_limit — see gw_limit.h. The buckets live in a cm_addrtab keyed by the hash of the
 * address's bucket key (gw_limit_key), PROBES slots looked at per call, the bucket idle
 * longest given to a new address when they are all taken. One table serves every worker
 * thread (an address gets its rate once per process, not once per worker), and its lock
 * is the only one a take holds. The rate and burst are read atomically: a reload stores
 * them, then caps every bucket to the new burst in one walk of the table; a take racing
 * with it may still refill one bucket to the old burst once, and its next take caps it.
 */
#include "gw_limit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_addrtab.h"
#include "cm_hash.h"
#include "cm_mem.h"

#define PROBES 8

typedef struct bucket {
    double tokens;
    int64_t last_ms;
} bucket_t;

struct gw_limit {
    pthread_mutex_t lock; /* serialises gw_limit_set (the takers never take it) */
    _Atomic double per_ms, burst;
    size_t slots;
    cm_addrtab_t *tab; /* NULL while unlimited and never limited; published atomically */
    bool on;           /* per_minute > 0: loaded atomically (the unlimited fast path) */
};

static int64_t last_used(const void *value)
{
    return ((const bucket_t *)value)->last_ms;
}

static cm_addrtab_t *table_new(size_t slots)
{
    return cm_addrtab_new(&(cm_addrtab_config_t){.slots = slots,
                                                 .probes = PROBES,
                                                 .value_size = sizeof(bucket_t),
                                                 .full = CM_ADDRTAB_FULL_EVICT,
                                                 .last_used = last_used});
}

gw_limit_t *gw_limit_new(int64_t per_minute, int64_t burst, size_t size)
{
    gw_limit_t *l = cm_xcalloc(1, sizeof(*l));
    size_t cap = 16;
    while (cap < size * 2)
        cap <<= 1;
    l->slots = cap;
    atomic_init(&l->per_ms, (double)per_minute / 60000.0);
    atomic_init(&l->burst, burst > 0 ? (double)burst : 1);
    l->tab = per_minute > 0 ? table_new(cap) : NULL;
    l->on = per_minute > 0;
    pthread_mutex_init(&l->lock, NULL);
    return l;
}

static cm_addrtab_verdict_t on_cap(void *value, bool fresh, void *arg)
{
    bucket_t *b = value;
    double burst = *(const double *)arg;
    (void)fresh;
    if (b->tokens > burst)
        b->tokens = burst;
    return CM_ADDRTAB_KEEP;
}

void gw_limit_set(gw_limit_t *l, int64_t per_minute, int64_t burst)
{
    double per_ms = (double)per_minute / 60000.0, cap = burst > 0 ? (double)burst : 1;
    pthread_mutex_lock(&l->lock);
    atomic_store(&l->per_ms, per_ms);
    atomic_store(&l->burst, cap);
    if (per_minute > 0 && l->tab == NULL)
        __atomic_store_n(&l->tab, table_new(l->slots), __ATOMIC_RELEASE);
    if (l->tab != NULL)
        cm_addrtab_each(l->tab, on_cap, &cap);
    __atomic_store_n(&l->on, per_minute > 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&l->lock);
}

void gw_limit_free(gw_limit_t *l)
{
    if (l == NULL)
        return;
    pthread_mutex_destroy(&l->lock);
    cm_addrtab_free(l->tab);
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

typedef struct take_op {
    double per_ms, burst;
    int64_t now_ms;
    int wait;
} take_op_t;

/* Refills the bucket up to now and takes a token, or says how long until there is one. */
static cm_addrtab_verdict_t on_take(void *value, bool fresh, void *arg)
{
    bucket_t *s = value;
    take_op_t *op = arg;
    int64_t now_ms = op->now_ms;
    if (fresh) {
        s->tokens = op->burst;
        s->last_ms = now_ms;
    }
    if (now_ms > s->last_ms) {
        s->tokens += (double)(now_ms - s->last_ms) * op->per_ms;
        s->last_ms = now_ms;
    }
    if (s->tokens > op->burst)
        s->tokens = op->burst;
    if (s->tokens >= 1.0) {
        s->tokens -= 1.0;
        op->wait = 0;
    } else {
        op->wait = (int)((1.0 - s->tokens) / op->per_ms / 1000.0) + 1;
    }
    return CM_ADDRTAB_KEEP;
}

int gw_limit_take(gw_limit_t *l, const char *addr, int64_t now_ms)
{
    if (!__atomic_load_n(&l->on, __ATOMIC_ACQUIRE))
        return 0;
    take_op_t op = {atomic_load(&l->per_ms), atomic_load(&l->burst), now_ms, 0};
    cm_addrtab_t *tab = __atomic_load_n(&l->tab, __ATOMIC_ACQUIRE);
    if (op.per_ms <= 0 || tab == NULL)
        return 0;
    char text[GW_LIMIT_KEY_MAX];
    gw_limit_key(addr, text);
    /* an evicting table always has an entry to give */
    (void)cm_addrtab_visit(tab, cm_hash_str(text), true, on_take, &op);
    return op.wait;
}
