/*
 * rsv_ids — see rsv_ids.h. The random part is 16 bytes of cm_tls_random in hex.
 */
#include "rsv_ids.h"

#include <stdio.h>

#include "cm_tls.h"

size_t rsv_key_prefix(const char *event, char *buf, size_t len)
{
    int n = snprintf(buf, len, "os:{%s}:", event);
    return n < 0 ? 0 : (size_t)n;
}

static void random_hex(char *out, size_t nbytes)
{
    unsigned char raw[32];
    static const char hex[] = "0123456789abcdef";
    cm_tls_random(raw, nbytes);
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
}

void rsv_hex_id(char *buf, size_t size, const char *suffix)
{
    char hex[33];
    random_hex(hex, 16);
    snprintf(buf, size, "%s.%s", hex, suffix);
}

void rsv_random_id(char *buf, size_t size, const char *prefix)
{
    char hex[33];
    random_hex(hex, 16);
    snprintf(buf, size, "%s%s", prefix, hex);
}
