/*
 * cm_text — see cm_text.h.
 */
#include "cm_text.h"

#include <string.h>

#include "cm_http.h"

cm_text_t cm_text_at(char *out, size_t size)
{
    return (cm_text_t){.p = out, .end = out + (size > 0 ? size - 1 : 0), .over = size == 0};
}

void cm_text_put(cm_text_t *t, const char *s, size_t n)
{
    if (t->over || (size_t)(t->end - t->p) < n) {
        t->over = true;
        return;
    }
    memcpy(t->p, s, n);
    t->p += n;
}

void cm_text_str(cm_text_t *t, const char *s)
{
    cm_text_put(t, s, strlen(s));
}

void cm_text_i64(cm_text_t *t, int64_t v)
{
    char buf[24];
    char *p = buf + sizeof(buf);
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--p = '-';
    cm_text_put(t, p, (size_t)(buf + sizeof(buf) - p));
}

void cm_text_json(cm_text_t *t, const char *s)
{
    if (t->over)
        return;
    int n = cm_http_json_string(t->p, (size_t)(t->end - t->p) + 1, s);
    if (n < 0 || t->p + n > t->end)
        t->over = true;
    else
        t->p += n;
}

size_t cm_text_done(cm_text_t *t, char *out)
{
    if (t->over)
        return 0;
    *t->p = '\0';
    return (size_t)(t->p - out);
}
