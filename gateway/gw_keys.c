/*
 * gw_keys — see gw_keys.h.
 */
#include "gw_keys.h"

#include <stdio.h>

static const char *const suffix[GW_K_COUNT] = {
    [GW_K_CFG] = "q:cfg", [GW_K_N] = "q:n",       [GW_K_ST] = "q:st",       [GW_K_WB] = "q:wb",
    [GW_K_PRE] = "q:pre", [GW_K_PL] = "q:pl",     [GW_K_CB] = "q:cb",       [GW_K_SB] = "q:sb",
    [GW_K_ADM] = "q:adm", [GW_K_GONE] = "q:gone", [GW_K_ACTIVE] = "active",
};

void gw_keys_of(const char *event, gw_keys_t *k)
{
    for (int i = 0; i < GW_K_COUNT; i++)
        snprintf(k->name[i], sizeof(k->name[i]), "os:{%s}:%s", event, suffix[i]);
}

int gw_keys_argv(const char *event, gw_keys_t *k, const char **argv)
{
    gw_keys_of(event, k);
    for (int i = 0; i < GW_K_COUNT; i++)
        argv[i] = k->name[i];
    return GW_K_COUNT;
}
