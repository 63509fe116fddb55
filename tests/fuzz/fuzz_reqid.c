/*
 * Fuzz target: the request-id check (cm_access_pick_id). The input, split at its first
 * newline, is an X-Request-Id value and a traceparent value (either alone when there is
 * no newline). Properties beyond "no crash": a picked id is 1–64 characters of
 * [A-Za-z0-9._-] — so it can go into a header, a log line, a JSON string or a SQL
 * parameter as it is — and it is either the X-Request-Id itself or the 32 lowercase hex
 * digits found at offset 3 of the traceparent.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_access.h"

static void check_id(const char *id)
{
    size_t n = strlen(id);
    CHECK(n >= 1 && n <= CM_ACCESS_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    char *nl = memchr(s, '\n', size);
    const char *xrid = s, *tp = s;
    if (nl != NULL) {
        *nl = '\0';
        tp = nl + 1;
    }
    char out[CM_ACCESS_ID_MAX + 1];
    if (cm_access_pick_id(xrid, NULL, out)) {
        check_id(out);
        CHECK(strcmp(out, xrid) == 0);
    }
    if (cm_access_pick_id(NULL, tp, out)) {
        check_id(out);
        CHECK(strlen(out) == 32 && strncmp(out, tp + 3, 32) == 0);
    }
    if (cm_access_pick_id(xrid, tp, out))
        check_id(out);
    free(s);
    return 0;
}
