/*
 * gw_settings — see gw_settings.h. Every rule of a field sits in its row of `fields`:
 * its JSON type, bounds, and how it is written for Redis.
 */
#include "gw_settings.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_parse.h"

typedef enum { F_INT, F_BOOL, F_TIME, F_MODE, F_URL, F_HANDOFF, F_COLOR, F_TEXT } ftype_t;

typedef struct field {
    const char *name;
    ftype_t type;
    int64_t min, max;
    const char *def; /* Redis text of the default; NULL = unset */
} field_t;

#define DAY_S 86400

static const field_t fields[] = {
    {"rate_per_minute", F_INT, 1, 10000000, NULL},
    {"max_active", F_INT, 0, 100000000, "0"},
    {"paused", F_BOOL, 0, 0, "0"},
    {"sold_out", F_BOOL, 0, 0, "0"},
    {"prequeue_at", F_TIME, 0, 0, NULL},
    {"opens_at", F_TIME, 0, 0, NULL},
    {"closes_at", F_TIME, 0, 0, NULL},
    {"mode", F_MODE, 0, 0, "random_at_open"},
    {"admission_ttl_seconds", F_INT, 10, DAY_S, "600"},
    {"noshow_grace_seconds", F_INT, 1, 3600, "20"},
    {"max_prequeue", F_INT, 1, 100000000, "1000000"},
    {"redirect_url", F_URL, 0, 0, NULL},
    {"handoff", F_HANDOFF, 0, 0, "fragment"},
    {"dpop", F_BOOL, 0, 0, "1"}, /* a PUT without it: the gateway's dpop_new_rooms (gw_admin) */
    {"pow", F_BOOL, 0, 0, "1"},  /* a room saved before this field existed has none: off */
    {"invite_only", F_BOOL, 0, 0, "0"}, /* joins need the sale site's enqueue token */
    {"stock_aware", F_BOOL, 0, 0, "1"}, /* the reserve's stock feed paces and ends the sale */
    {"show_left", F_BOOL, 0, 0, "0"},   /* the queue answers say how many units are left */
    {"stock_decide_seconds", F_INT, 1, 3600, "60"}, /* an admitted fan's choosing time */
    {"brand_title", F_TEXT, 0, GW_BRAND_TITLE_MAX, NULL},
    {"brand_logo_url", F_URL, 0, 0, NULL},
    {"brand_color", F_COLOR, 0, 0, NULL},
    {"brand_background", F_COLOR, 0, 0, NULL},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

void gw_settings_defaults(gw_settings_t *s)
{
    memset(s, 0, sizeof(*s));
    s->admission_ttl_seconds = 600;
    s->noshow_grace_seconds = 20;
    s->max_prequeue = 1000000;
    s->stock_aware = true;
    s->stock_decide_seconds = 60;
}

/* Plain text for the page: n bytes (a JSON string: valid UTF-8, no NUL) without control
 * characters, at most max. */
static bool text_ok(const char *s, size_t n, int64_t max)
{
    if ((int64_t)n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

/* One present field → its Redis text in out. 0, or -1 with a message. */
static int parse_field(const field_t *f, const json_t *v, bool loopback_http, char *out,
                       size_t outlen, char *err, size_t errlen)
{
    if (json_is_null(v) &&
        (f->type == F_TIME || f->type == F_URL || f->type == F_COLOR || f->type == F_TEXT)) {
        out[0] = '\0'; /* explicit null unsets an optional field */
        return 0;
    }
    switch (f->type) {
    case F_INT:
        if (!json_is_integer(v) || json_integer_value(v) < f->min ||
            json_integer_value(v) > f->max) {
            snprintf(err, errlen, "%s must be an integer in [%" PRId64 ", %" PRId64 "]", f->name,
                     f->min, f->max);
            return -1;
        }
        snprintf(out, outlen, "%" PRId64, (int64_t)json_integer_value(v));
        return 0;
    case F_BOOL:
        if (!json_is_boolean(v)) {
            snprintf(err, errlen, "%s must be true or false", f->name);
            return -1;
        }
        snprintf(out, outlen, "%d", json_is_true(v) ? 1 : 0);
        return 0;
    case F_TIME: {
        int64_t ms;
        if (!json_is_string(v) || cm_parse_rfc3339(json_string_value(v), &ms) != 0 || ms <= 0) {
            snprintf(err, errlen, "%s must be an RFC 3339 time such as 2026-12-01T10:00:00Z",
                     f->name);
            return -1;
        }
        snprintf(out, outlen, "%" PRId64, ms);
        return 0;
    }
    case F_MODE:
        if (!json_is_string(v) || (strcmp(json_string_value(v), "fifo") != 0 &&
                                   strcmp(json_string_value(v), "random_at_open") != 0)) {
            snprintf(err, errlen, "mode must be \"fifo\" or \"random_at_open\"");
            return -1;
        }
        snprintf(out, outlen, "%s", json_string_value(v));
        return 0;
    case F_URL:
        if (!json_is_string(v) || json_string_length(v) >= outlen ||
            !cm_parse_url_allowed(json_string_value(v), loopback_http, NULL)) {
            snprintf(err, errlen,
                     "%s must be an https:// URL (plain http:// only to a loopback "
                     "host, with allow_loopback_http) of printable ASCII under %zu bytes, "
                     "without user info or #fragment",
                     f->name, outlen);
            return -1;
        }
        snprintf(out, outlen, "%s", json_string_value(v));
        return 0;
    case F_HANDOFF:
        if (!json_is_string(v) || (strcmp(json_string_value(v), "fragment") != 0 &&
                                   strcmp(json_string_value(v), "post") != 0)) {
            snprintf(err, errlen, "handoff must be \"fragment\" or \"post\"");
            return -1;
        }
        snprintf(out, outlen, "%s", json_string_value(v));
        return 0;
    case F_COLOR:
        if (!json_is_string(v) || !gw_page_color_valid(json_string_value(v))) {
            snprintf(err, errlen, "%s must be a colour written #rrggbb, e.g. \"#1849c6\"", f->name);
            return -1;
        }
        for (size_t i = 0; i < 7; i++) {
            char c = json_string_value(v)[i];
            out[i] = c >= 'A' && c <= 'F' ? (char)(c - 'A' + 'a') : c;
        }
        out[7] = '\0';
        return 0;
    case F_TEXT:
        if (!json_is_string(v) || !text_ok(json_string_value(v), json_string_length(v), f->max)) {
            snprintf(err, errlen,
                     "%s must be a string of at most %" PRId64 " bytes without control "
                     "characters",
                     f->name, f->max);
            return -1;
        }
        snprintf(out, outlen, "%s", json_string_value(v));
        return 0;
    }
    return -1;
}

int gw_settings_parse(const json_t *body, bool partial, bool allow_loopback_http,
                      gw_setting_kv_t *kv, char *err, size_t errlen)
{
    int n = 0;
    if (!json_is_object(body)) {
        snprintf(err, errlen, "the body must be a JSON object");
        return -1;
    }
    for (size_t i = 0; i < NFIELDS; i++) {
        const field_t *f = &fields[i];
        const json_t *v = json_object_get(body, f->name);
        if (v == NULL) {
            if (partial)
                continue;
            if (strcmp(f->name, "rate_per_minute") == 0) {
                snprintf(err, errlen, "rate_per_minute is required");
                return -1;
            }
            kv[n].name = f->name;
            snprintf(kv[n].value, sizeof(kv[n].value), "%s", f->def ? f->def : "");
            n++;
            continue;
        }
        if (parse_field(f, v, allow_loopback_http, kv[n].value, sizeof(kv[n].value), err, errlen) !=
            0)
            return -1;
        kv[n].name = f->name;
        n++;
    }
    if (partial && n == 0 && json_object_get(body, "phases") == NULL) {
        snprintf(err, errlen,
                 "no known setting in the body (rate_per_minute, max_active, "
                 "paused, opens_at, …)");
        return -1;
    }
    return n;
}

static int64_t to_i64(const char *v, int64_t dflt)
{
    int64_t x;
    return cm_parse_i64(v, INT64_MIN, INT64_MAX, &x) == 0 ? x : dflt;
}

int gw_settings_gen_parse(const char *s, uint64_t *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

void gw_settings_gen_text(uint64_t gen, char out[21])
{
    snprintf(out, 21, "%" PRIu64, gen);
}

void gw_settings_set(gw_settings_t *s, const char *name, const char *v)
{
    if (strcmp(name, "rate_per_minute") == 0)
        s->rate_per_minute = to_i64(v, 0);
    else if (strcmp(name, "max_active") == 0)
        s->max_active = to_i64(v, 0);
    else if (strcmp(name, "paused") == 0)
        s->paused = strcmp(v, "1") == 0;
    else if (strcmp(name, "sold_out") == 0)
        s->sold_out = strcmp(v, "1") == 0;
    else if (strcmp(name, "mode") == 0)
        s->fifo = strcmp(v, "fifo") == 0;
    else if (strcmp(name, "prequeue_at") == 0)
        s->prequeue_at = to_i64(v, 0);
    else if (strcmp(name, "opens_at") == 0)
        s->opens_at = to_i64(v, 0);
    else if (strcmp(name, "closes_at") == 0)
        s->closes_at = to_i64(v, 0);
    else if (strcmp(name, "admission_ttl_seconds") == 0)
        s->admission_ttl_seconds = to_i64(v, 600);
    else if (strcmp(name, "noshow_grace_seconds") == 0)
        s->noshow_grace_seconds = to_i64(v, 20);
    else if (strcmp(name, "max_prequeue") == 0)
        s->max_prequeue = to_i64(v, 1000000);
    else if (strcmp(name, "redirect_url") == 0)
        snprintf(s->redirect_url, sizeof(s->redirect_url), "%s", v);
    else if (strcmp(name, "handoff") == 0)
        s->handoff_post = strcmp(v, "post") == 0;
    else if (strcmp(name, "dpop") == 0)
        s->dpop = strcmp(v, "1") == 0;
    else if (strcmp(name, "pow") == 0)
        s->pow = strcmp(v, "1") == 0;
    else if (strcmp(name, "invite_only") == 0)
        s->invite_only = strcmp(v, "1") == 0;
    else if (strcmp(name, "stock_aware") == 0)
        s->stock_aware = strcmp(v, "1") == 0;
    else if (strcmp(name, "show_left") == 0)
        s->show_left = strcmp(v, "1") == 0;
    else if (strcmp(name, "stock_decide_seconds") == 0)
        s->stock_decide_seconds = to_i64(v, 60);
    else if (strcmp(name, "brand_title") == 0)
        snprintf(s->brand_title, sizeof(s->brand_title), "%s", v);
    else if (strcmp(name, "brand_logo_url") == 0)
        snprintf(s->brand_logo_url, sizeof(s->brand_logo_url), "%s", v);
    else if (strcmp(name, "brand_color") == 0)
        snprintf(s->brand_color, sizeof(s->brand_color), "%s", v);
    else if (strcmp(name, "brand_background") == 0)
        snprintf(s->brand_background, sizeof(s->brand_background), "%s", v);
    else if (strcmp(name, "phases") == 0)
        gw_sched_load(&s->sched, v);
    else if (strcmp(name, "gen") == 0) {
        if (gw_settings_gen_parse(v, &s->gen) != 0)
            s->gen = 0;
    } else if (strcmp(name, "created_ms") == 0)
        s->created_ms = to_i64(v, 0);
    else if (strcmp(name, "updated_ms") == 0)
        s->updated_ms = to_i64(v, 0);
}

int64_t gw_settings_rate_at(const gw_settings_t *s, int64_t now_ms)
{
    int at = gw_sched_at(&s->sched, now_ms, NULL);
    return at >= 0 ? s->sched.p[at].rate_per_minute : s->rate_per_minute;
}

int64_t gw_settings_max_active_at(const gw_settings_t *s, int64_t now_ms)
{
    int at = gw_sched_at(&s->sched, now_ms, NULL);
    return at >= 0 ? s->sched.p[at].max_active : s->max_active;
}

static json_t *time_json(int64_t ms)
{
    char buf[32];
    if (ms <= 0 || cm_format_rfc3339(ms, buf, sizeof(buf)) == 0)
        return json_null();
    return json_string(buf);
}

json_t *gw_settings_json(const gw_settings_t *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "rate_per_minute", json_integer(s->rate_per_minute));
    json_object_set_new(o, "max_active", json_integer(s->max_active));
    json_object_set_new(o, "paused", json_boolean(s->paused));
    json_object_set_new(o, "sold_out", json_boolean(s->sold_out));
    json_object_set_new(o, "mode", json_string(s->fifo ? "fifo" : "random_at_open"));
    json_object_set_new(o, "prequeue_at", time_json(s->prequeue_at));
    json_object_set_new(o, "opens_at", time_json(s->opens_at));
    json_object_set_new(o, "closes_at", time_json(s->closes_at));
    json_object_set_new(o, "admission_ttl_seconds", json_integer(s->admission_ttl_seconds));
    json_object_set_new(o, "noshow_grace_seconds", json_integer(s->noshow_grace_seconds));
    json_object_set_new(o, "max_prequeue", json_integer(s->max_prequeue));
    json_object_set_new(o, "redirect_url",
                        s->redirect_url[0] ? json_string(s->redirect_url) : json_null());
    json_object_set_new(o, "handoff", json_string(s->handoff_post ? "post" : "fragment"));
    json_object_set_new(o, "dpop", json_boolean(s->dpop));
    json_object_set_new(o, "pow", json_boolean(s->pow));
    json_object_set_new(o, "invite_only", json_boolean(s->invite_only));
    json_object_set_new(o, "stock_aware", json_boolean(s->stock_aware));
    json_object_set_new(o, "show_left", json_boolean(s->show_left));
    json_object_set_new(o, "stock_decide_seconds", json_integer(s->stock_decide_seconds));
    json_object_set_new(o, "brand_title",
                        s->brand_title[0] ? json_string(s->brand_title) : json_null());
    json_object_set_new(o, "brand_logo_url",
                        s->brand_logo_url[0] ? json_string(s->brand_logo_url) : json_null());
    json_object_set_new(o, "brand_color",
                        s->brand_color[0] ? json_string(s->brand_color) : json_null());
    json_object_set_new(o, "brand_background",
                        s->brand_background[0] ? json_string(s->brand_background) : json_null());
    json_object_set_new(o, "phases", gw_sched_json(&s->sched));
    json_object_set_new(o, "created_at", time_json(s->created_ms));
    json_object_set_new(o, "updated_at", time_json(s->updated_ms));
    return o;
}

void gw_settings_brand(const gw_settings_t *s, gw_page_brand_t *out)
{
    out->title = s->brand_title;
    out->logo_url = s->brand_logo_url;
    out->color = s->brand_color;
    out->background = s->brand_background;
}
