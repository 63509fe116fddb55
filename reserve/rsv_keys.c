/*
 * rsv_keys — see rsv_keys.h.
 */
#include "rsv_keys.h"

#include "cm_mem.h"

char *rsv_key(const char *event, const char *kind, const char *id)
{
    return cm_xasprintf("os:{%s}:%s%s", event, kind, id ? id : "");
}
