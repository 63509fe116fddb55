/*
 * gw_settings — a waiting room's settings: validation of PUT/PATCH bodies (docs/api.md) and
 * conversion between the JSON the operators see and the flat Redis hash the scripts
 * read (times as epoch milliseconds, booleans as 0/1).
 *
 * Pure functions, no event loop: unit-tested on their own. Field-by-field checks live
 * here; checks across fields (prequeue_at <= opens_at < closes_at) are repeated by
 * settings.lua on the merged result, where concurrent PATCHes meet.
 */
#ifndef GW_SETTINGS_H
#define GW_SETTINGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_page.h"
#include "gw_sched.h"

#define GW_SETTINGS_MAX_FIELDS 28
#define GW_URL_MAX             512
#define GW_BRAND_TITLE_MAX     80 /* bytes of brand_title (UTF-8, no control characters) */

typedef struct gw_settings {
    int64_t rate_per_minute;
    int64_t max_active; /* 0 = unlimited */
    bool paused;
    bool sold_out;
    bool fifo;                                /* mode "fifo"; false = "random_at_open" */
    int64_t prequeue_at, opens_at, closes_at; /* epoch ms; 0 = unset */
    int64_t admission_ttl_seconds;
    int64_t noshow_grace_seconds;
    int64_t max_prequeue;          /* fans the pre-queue holds; later joins wait for the opening */
    char redirect_url[GW_URL_MAX]; /* "" = the gateway's reserve_url */
    bool handoff_post;             /* handoff "post"; false = "fragment" (docs/api.md v1.1) */
    bool dpop;                     /* tickets bound to the joining key (gw_dpop); a hash
                                      without the field (a room older than it): false */
    bool pow;                      /* joins need a proof of work (gw_pow.h) */
    bool invite_only;              /* joins need the sale site's enqueue token (gw_enqueue.h) */
    bool stock_aware;              /* the reserve's stock feed paces admissions and ends the
                                      sale (advance.lua); a hash without the field: true */
    bool show_left;                /* queue answers carry "left" (units still buyable) */
    int64_t stock_decide_seconds;  /* how long an admitted fan is taken to be choosing */
    char brand_title[GW_BRAND_TITLE_MAX + 1]; /* the page's look (gw_page_brand_t); "" = */
    char brand_logo_url[GW_URL_MAX];          /* the gateway's own */
    char brand_color[8], brand_background[8]; /* "#rrggbb" */
    gw_sched_t sched; /* the phases ("phases"; gw_sched.h): none = one phase of
                         the fields above */
    uint64_t gen;     /* room generation (from Redis) */
    int64_t created_ms, updated_ms;
} gw_settings_t;

/** One field for settings.lua: name and value text ("" = unset). */
typedef struct gw_setting_kv {
    const char *name;
    char value[GW_URL_MAX];
} gw_setting_kv_t;

/** Table defaults (a room whose hash lacks a field behaves like this). */
void gw_settings_defaults(gw_settings_t *s);

/**
 * Validates a PUT (partial false: rate_per_minute required, every absent field reset to
 * its default) or PATCH (partial true: only the fields present change) body. Unknown
 * fields are ignored (so is "phases": gw_sched_parse; a PATCH of it alone is not empty).
 * redirect_url and brand_logo_url must pass cm_parse_url_allowed(): https, or plain http
 * to a loopback host only when allow_loopback_http (the gateway's setting);
 * brand_color and brand_background are "#rrggbb" (stored in lower case); brand_title is
 * at most GW_BRAND_TITLE_MAX bytes without control characters. Returns the
 * number of fields written to kv (at most GW_SETTINGS_MAX_FIELDS), or -1 with a message
 * for a 400 in err.
 */
int gw_settings_parse(const json_t *body, bool partial, bool allow_loopback_http,
                      gw_setting_kv_t *kv, char *err, size_t errlen);

/** Applies one field of the Redis hash (unknown names and malformed values ignored). */
void gw_settings_set(gw_settings_t *s, const char *name, const char *value);

/** The settings as docs/api.md shows them (RFC 3339 times, null when unset). New reference. */
json_t *gw_settings_json(const gw_settings_t *s);

/** The room's look for the queue page; the strings are borrowed from s. */
void gw_settings_brand(const gw_settings_t *s, gw_page_brand_t *out);

/** The rate_per_minute and max_active in force at now_ms (Redis time): those of the phase
 *  then in force (gw_sched.h), or the room's own before the first phase / without one. */
int64_t gw_settings_rate_at(const gw_settings_t *s, int64_t now_ms);
int64_t gw_settings_max_active_at(const gw_settings_t *s, int64_t now_ms);

/** The decimal text of a room generation and back (0 / -1). */
void gw_settings_gen_text(uint64_t gen, char out[21]);
__attribute__((warn_unused_result)) int gw_settings_gen_parse(const char *s, uint64_t *out);

#endif
