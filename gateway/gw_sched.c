/*
 * gw_sched — see gw_sched.h.
 */
#include "gw_sched.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"
#include "cm_parse.h"

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > GW_SCHED_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Jansson strings are valid UTF-8 already; the page's text has no control characters. */
static bool text_ok(const char *s, size_t len)
{
    if (len > GW_SCHED_TEXT_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

static int int_field(const json_t *o, const char *key, int64_t min, int64_t max, int64_t dflt,
                     bool required, int64_t *out, size_t i, char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (v == NULL && !required) {
        *out = dflt;
        return 0;
    }
    if (v == NULL || !json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > max) {
        snprintf(err, errlen, "phases[%zu].%s must be an integer in [%" PRId64 ", %" PRId64 "]", i,
                 key, min, max);
        return -1;
    }
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int text_field(const json_t *o, const char *key, char out[GW_SCHED_TEXT_MAX + 1], size_t i,
                      char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    out[0] = '\0';
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v) || !text_ok(json_string_value(v), json_string_length(v))) {
        snprintf(err, errlen,
                 "phases[%zu].%s must be plain text of at most %d bytes without control "
                 "characters",
                 i, key, GW_SCHED_TEXT_MAX);
        return -1;
    }
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int phase_parse(const json_t *o, size_t i, gw_phase_def_t *p, char *err, size_t errlen)
{
    if (!json_is_object(o)) {
        snprintf(err, errlen, "phases[%zu] must be an object", i);
        return -1;
    }
    const json_t *name = json_object_get(o, "name");
    if (!json_is_string(name) || !name_ok(json_string_value(name))) {
        snprintf(err, errlen, "phases[%zu].name must be 1 to %d characters of a-z, 0-9, _ and -", i,
                 GW_SCHED_NAME_MAX);
        return -1;
    }
    snprintf(p->name, sizeof(p->name), "%s", json_string_value(name));
    const json_t *at = json_object_get(o, "starts_at");
    if (!json_is_string(at) || cm_parse_rfc3339(json_string_value(at), &p->starts_ms) != 0 ||
        p->starts_ms <= 0) {
        snprintf(err, errlen, "phases[%zu].starts_at must be an RFC 3339 time", i);
        return -1;
    }
    if (int_field(o, "rate_per_minute", 1, 10000000, 0, true, &p->rate_per_minute, i, err,
                  errlen) != 0 ||
        int_field(o, "max_active", 0, 100000000, 0, false, &p->max_active, i, err, errlen) != 0)
        return -1;
    const json_t *rc = json_object_get(o, "requires_code");
    if (rc != NULL && !json_is_boolean(rc)) {
        snprintf(err, errlen, "phases[%zu].requires_code must be true or false", i);
        return -1;
    }
    p->requires_code = json_is_true(rc);
    if (text_field(o, "text_before", p->text_before, i, err, errlen) != 0 ||
        text_field(o, "text_during", p->text_during, i, err, errlen) != 0 ||
        text_field(o, "text_after", p->text_after, i, err, errlen) != 0)
        return -1;
    return 0;
}

int gw_sched_parse(const json_t *v, gw_sched_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_array(v) || json_array_size(v) > GW_SCHED_MAX) {
        snprintf(err, errlen, "phases must be an array of at most %d phases", GW_SCHED_MAX);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        gw_phase_def_t *p = &out->p[i];
        if (phase_parse(json_array_get(v, i), i, p, err, errlen) != 0)
            goto bad;
        if (i > 0 && p->starts_ms <= out->p[i - 1].starts_ms) {
            snprintf(err, errlen, "phases[%zu].starts_at must be after phases[%zu].starts_at", i,
                     i - 1);
            goto bad;
        }
        if (gw_sched_find(out, p->name) >= 0) {
            snprintf(err, errlen, "phases[%zu].name \"%s\" is used twice", i, p->name);
            goto bad;
        }
        out->n = i + 1;
    }
    return 0;
bad:
    memset(out, 0, sizeof(*out));
    return -1;
}

static json_t *opt_text(const char *s)
{
    return s[0] ? json_string(s) : json_null();
}

json_t *gw_sched_json(const gw_sched_t *s)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < s->n; i++) {
        const gw_phase_def_t *p = &s->p[i];
        char at[32] = "";
        cm_format_rfc3339(p->starts_ms, at, sizeof(at));
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:I, s:I, s:b, s:o, s:o, s:o}", "name", p->name, "starts_at",
                           at, "rate_per_minute", (json_int_t)p->rate_per_minute, "max_active",
                           (json_int_t)p->max_active, "requires_code", p->requires_code,
                           "text_before", opt_text(p->text_before), "text_during",
                           opt_text(p->text_during), "text_after", opt_text(p->text_after)));
    }
    return arr;
}

void gw_sched_fields(const gw_sched_t *s, char **phases, char **phz)
{
    if (s->n == 0) {
        *phases = cm_xstrdup("");
        *phz = cm_xstrdup("");
        return;
    }
    json_t *arr = gw_sched_json(s);
    *phases = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (*phases == NULL) /* jansson's allocation failed: abort like cm_xmalloc */
        abort();
    size_t cap = s->n * (GW_SCHED_NAME_MAX + 64) + 1, len = 0;
    char *line = cm_xmalloc(cap);
    line[0] = '\0';
    for (size_t i = 0; i < s->n; i++) {
        const gw_phase_def_t *p = &s->p[i];
        len += (size_t)snprintf(
            line + len, cap - len, "%s%" PRId64 ",%" PRId64 ",%" PRId64 ",%d,%s", i ? ";" : "",
            p->starts_ms, p->rate_per_minute, p->max_active, p->requires_code ? 1 : 0, p->name);
    }
    *phz = line;
}

void gw_sched_load(gw_sched_t *s, const char *phases)
{
    memset(s, 0, sizeof(*s));
    if (phases == NULL || phases[0] == '\0')
        return;
    json_t *v = json_loads(phases, 0, NULL);
    char err[160];
    if (v == NULL || gw_sched_parse(v, s, err, sizeof(err)) != 0)
        memset(s, 0, sizeof(*s));
    json_decref(v);
}

int gw_sched_at(const gw_sched_t *s, int64_t now_ms, int64_t *next_ms)
{
    int at = -1;
    for (size_t i = 0; i < s->n && s->p[i].starts_ms <= now_ms; i++)
        at = (int)i;
    if (next_ms != NULL)
        *next_ms = (size_t)(at + 1) < s->n ? s->p[at + 1].starts_ms : 0;
    return at;
}

int gw_sched_find(const gw_sched_t *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->p[i].name, name) == 0)
            return (int)i;
    return -1;
}
