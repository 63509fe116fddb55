/*
 * Fuzz target: the Accept-Language choice (gw_lang_pick) and the language-tag check. The
 * input is an Accept-Language value. Properties beyond "no crash": the pick is always
 * one of the tags offered; a header that is one valid tag of ours, alone, picks that tag;
 * and a tag gw_lang_tag_valid takes is lower case [a-z0-9-] only, so it can name a file.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_lang.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const tags[] = {"en", "de", "fr", "es", "pt-br", "de-at"};
    const size_t n = sizeof(tags) / sizeof(tags[0]);
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    size_t i = gw_lang_pick(s, tags, n);
    CHECK(i < n);
    for (size_t t = 0; t < n; t++)
        if (strcmp(s, tags[t]) == 0)
            CHECK(i == t);
    if (gw_lang_tag_valid(s)) {
        for (const char *p = s; *p; p++)
            CHECK((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-');
        CHECK(strlen(s) <= GW_LANG_TAG_MAX);
    }
    free(s);
    return 0;
}
