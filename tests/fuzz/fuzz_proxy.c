/*
 * Fuzz target: the PROXY v2 header parser (cm_proxy_parse) and the proxy_from list parser
 * on arbitrary bytes. Properties beyond "no crash": an accepted header is no longer than
 * the input nor CM_PROXY_MAX_HEADER; every prefix of an accepted header is "need more"
 * (0), never invalid, never accepted; the address is NUL-terminated text; a header
 * parses the same when more bytes follow it.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cm_proxy_info_t info, again;
    int n = cm_proxy_parse(data, size, &info);

    CHECK(n >= -1);
    if (n > 0) {
        CHECK((size_t)n <= size && n <= CM_PROXY_MAX_HEADER);
        CHECK(memchr(info.addr, '\0', sizeof(info.addr)) != NULL);
        CHECK(info.has_addr == 0 || info.addr[0] != '\0');
        for (size_t k = 0; k < (size_t)n; k += 1 + (size_t)n / 64)
            CHECK(cm_proxy_parse(data, k, &again) == 0);
        CHECK(cm_proxy_parse(data, (size_t)n, &again) == n);
        CHECK(again.has_addr == info.has_addr && again.port == info.port &&
              strcmp(again.addr, info.addr) == 0);
    }

    char *s = malloc(size + 1), err[160];
    memcpy(s, data, size);
    s[size] = '\0';
    cm_proxy_allow_t *a = cm_proxy_allow_parse(s, err, sizeof(err));
    if (a == NULL)
        CHECK(err[0] != '\0');
    cm_proxy_allow_free(a);
    free(s);
    return 0;
}
