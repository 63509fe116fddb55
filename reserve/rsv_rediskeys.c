/*
 * rsv_rediskeys — see rsv_rediskeys.h.
 */
#include "rsv_rediskeys.h"

#include <string.h>

#include "cm_mem.h"

char *rsv_key(const char *event, const char *kind, const char *id)
{
    return cm_xasprintf("os:{%s}:%s%s", event, kind, id ? id : "");
}

char *rsv_key_buf(char *buf, size_t cap, const char *event, const char *kind, const char *id)
{
    /* on every hold, several times: concatenation, not snprintf */
    const char *parts[] = {"os:{", event, "}:", kind, id ? id : ""};
    size_t n = 0;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        size_t len = strlen(parts[i]);
        if (n + len >= cap)
            return NULL;
        memcpy(buf + n, parts[i], len);
        n += len;
    }
    buf[n] = '\0';
    return buf;
}
