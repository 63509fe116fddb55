/*
 * rsv_keys — see rsv_keys.h.
 */
#include "rsv_keys.h"

#include <stdio.h>

#include "cm_mem.h"

char *rsv_key(const char *event, const char *kind, const char *id)
{
    return cm_xasprintf("os:{%s}:%s%s", event, kind, id ? id : "");
}

char *rsv_key_buf(char *buf, size_t cap, const char *event, const char *kind, const char *id)
{
    int n = snprintf(buf, cap, "os:{%s}:%s%s", event, kind, id ? id : "");
    return n >= 0 && (size_t)n < cap ? buf : NULL;
}
