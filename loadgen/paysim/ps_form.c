/*
 * ps_form — see ps_form.h.
 */
#include "ps_form.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"
#include "cm_parse.h"

/* Decodes s[0..n) ('+' is a space, %XX a byte) into a new string; NULL on a bad escape or
 * a NUL byte. */
static char *decode(const char *s, size_t n)
{
    char *out = cm_xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            *o++ = ' ';
        } else if (s[i] == '%') {
            if (i + 2 >= n) {
                free(out);
                return NULL;
            }
            int a = cm_parse_hexval(s[i + 1]), b = cm_parse_hexval(s[i + 2]);
            if (a < 0 || b < 0 || (a == 0 && b == 0)) {
                free(out);
                return NULL;
            }
            *o++ = (char)(a * 16 + b);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

/* Puts value at key's path under root: "a", "a[b]", "a[]", "a[b][c]". -1 when the key is
 * malformed or clashes with an earlier pair. */
static int put_path(json_t *root, const char *key, const char *value)
{
    char *segs[PS_FORM_DEPTH + 1];
    int nseg = 0;
    char *copy = cm_xstrdup(key);
    char *p = strchr(copy, '[');
    int rc = -1;
    if (p == copy)
        goto out;
    segs[nseg++] = copy;
    while (p) {
        *p++ = '\0';
        char *end = strchr(p, ']');
        if (end == NULL || nseg > PS_FORM_DEPTH)
            goto out;
        *end = '\0';
        segs[nseg++] = p; /* "" = append */
        p = end + 1;
        if (*p != '\0' && *p != '[')
            goto out;
        if (*p == '\0')
            p = NULL;
    }
    json_t *cur = root;
    for (int i = 0; i < nseg; i++) {
        bool last = i == nseg - 1;
        const char *seg = segs[i];
        if (seg[0] == '\0') { /* "[]": cur must be an array; only as the last segment */
            if (!json_is_array(cur) || !last)
                goto out;
            json_array_append_new(cur, json_string(value));
            break;
        }
        if (!json_is_object(cur))
            goto out;
        json_t *next = json_object_get(cur, seg);
        if (last) {
            if (next && !json_is_string(next))
                goto out;
            json_object_set_new(cur, seg, json_string(value));
            break;
        }
        bool want_array = segs[i + 1][0] == '\0';
        if (next == NULL) {
            next = want_array ? json_array() : json_object();
            json_object_set_new(cur, seg, next);
        } else if (want_array ? !json_is_array(next) : !json_is_object(next)) {
            goto out;
        }
        cur = next;
    }
    rc = 0;
out:
    free(copy);
    return rc;
}

json_t *ps_form_parse(const char *text, size_t len, char *bad, size_t badlen)
{
    json_t *root = json_object();
    size_t i = 0;
    if (badlen)
        bad[0] = '\0';
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '&')
            j++;
        if (j > i) {
            size_t eq = i;
            while (eq < j && text[eq] != '=')
                eq++;
            char *k = decode(text + i, eq - i);
            char *v = eq < j ? decode(text + eq + 1, j - eq - 1) : cm_xstrdup("");
            json_t *probe = v ? json_string(v) : NULL; /* NULL: not UTF-8 */
            bool ok = k && probe && k[0] != '\0' && put_path(root, k, v) == 0;
            json_decref(probe);
            if (!ok) {
                if (badlen)
                    snprintf(bad, badlen, "%.*s", (int)(eq - i > 64 ? 64 : eq - i), text + i);
                free(k);
                free(v);
                json_decref(root);
                return NULL;
            }
            free(k);
            free(v);
        }
        i = j + 1;
    }
    return root;
}
