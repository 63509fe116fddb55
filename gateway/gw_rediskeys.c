/*
 * gw_rediskeys — see gw_rediskeys.h.
 *
 * The names are written with memcpy: gw_rediskeys_of ran eleven snprintf per join, the
 * largest part of the join's formatting cost in the profile (docs/performance.md,
 * round 3). The per-thread cache needs no lock and no invalidation: a room's key names
 * depend on its event id alone.
 */
#include "gw_rediskeys.h"

#include <string.h>

static const char *const suffix[GW_K_COUNT] = {
    [GW_K_CFG] = "q:cfg", [GW_K_N] = "q:n",       [GW_K_ST] = "q:st",       [GW_K_WB] = "q:wb",
    [GW_K_PRE] = "q:pre", [GW_K_PL] = "q:pl",     [GW_K_CB] = "q:cb",       [GW_K_SB] = "q:sb",
    [GW_K_ADM] = "q:adm", [GW_K_GONE] = "q:gone", [GW_K_ACTIVE] = "active",
};

void gw_rediskeys_of(const char *event, gw_rediskeys_t *k)
{
    size_t elen = strnlen(event, CM_IDENT_MAX);
    for (int i = 0; i < GW_K_COUNT; i++) {
        char *p = k->name[i];
        size_t slen = strlen(suffix[i]);
        memcpy(p, "os:{", 4);
        memcpy(p + 4, event, elen);
        memcpy(p + 4 + elen, "}:", 2);
        memcpy(p + 6 + elen, suffix[i], slen + 1);
        k->len[i] = 6 + elen + slen;
    }
}

size_t gw_rediskeys_extra(const char *event, const char *tail, char out[GW_KEY_MAX])
{
    size_t elen = strnlen(event, CM_IDENT_MAX), slen = strlen(tail);
    if (slen > GW_KEY_MAX - CM_IDENT_MAX - 7)
        slen = GW_KEY_MAX - CM_IDENT_MAX - 7;
    memcpy(out, "os:{", 4);
    memcpy(out + 4, event, elen);
    memcpy(out + 4 + elen, "}:", 2);
    memcpy(out + 6 + elen, tail, slen);
    out[6 + elen + slen] = '\0';
    return 6 + elen + slen;
}

int gw_rediskeys_argv(const char *event, gw_rediskeys_t *k, const char **argv)
{
    gw_rediskeys_of(event, k);
    for (int i = 0; i < GW_K_COUNT; i++)
        argv[i] = k->name[i];
    return GW_K_COUNT;
}

typedef struct cached {
    char event[CM_IDENT_MAX + 1]; /* "" while the slot is free */
    gw_rediskeys_t keys;
} cached_t;

static __thread cached_t cache[GW_KEYS_CACHED];
static __thread unsigned next_slot; /* the slot a miss replaces: round robin */

int gw_rediskeys_cached(const char *event, const char **argv, size_t *argvlen)
{
    size_t elen = strnlen(event, CM_IDENT_MAX);
    cached_t *c = NULL;
    for (int i = 0; i < GW_KEYS_CACHED && c == NULL; i++)
        if (cache[i].event[0] != '\0' && strncmp(cache[i].event, event, elen) == 0 &&
            cache[i].event[elen] == '\0')
            c = &cache[i];
    if (c == NULL) {
        c = &cache[next_slot];
        next_slot = (next_slot + 1) % GW_KEYS_CACHED;
        memcpy(c->event, event, elen);
        c->event[elen] = '\0';
        gw_rediskeys_of(c->event, &c->keys);
    }
    for (int i = 0; i < GW_K_COUNT; i++) {
        argv[i] = c->keys.name[i];
        argvlen[i] = c->keys.len[i];
    }
    return GW_K_COUNT;
}
