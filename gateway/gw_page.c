/*
 * gw_page — see gw_page.h.
 *
 * Templating is deliberately tiny: `{{name}}` (lower-case letters, digits and '_')
 * is replaced by the HTML-escaped value of that variable, `{{t_<key>}}` by the escaped
 * message <key> of the page's language (gw_lang.h), anything else is copied
 * verbatim. Every value is escaped, including the ones we compute ourselves, so there is
 * one rule to check and no "trusted" channel for markup. The template keeps placeholders
 * out of <script> and <style>: the page's script reads the state from data-* attributes,
 * where HTML escaping is the whole story. An unknown name is copied through unchanged so
 * a typo shows on the page (and fails the unit test) instead of vanishing.
 *
 * The template is scanned per request (~20 KB, a few dozen placeholders): this page is
 * fetched once per fan and per no-JS refresh, not per status poll, so a pre-split
 * template would buy nothing measurable.
 *
 * The script says what it says from the same catalogue: the language's messages travel
 * as JSON in the data-msgs attribute of <main> (escaped like any value; the script
 * parses it), so no text of the page is written twice.
 *
 * A room's colours are the one thing not written through a placeholder: the template's
 * `<!--brand-style-->` comment becomes a <style> element of CSS custom properties, built
 * here from colours that pass gw_page_color_valid() at render time (six hex digits, no
 * other byte of theirs reaches the CSS), and that element's hash joins the page's
 * style-src, so the policy stays free of 'unsafe-inline'.
 *
 * Runs on the event-loop thread; the render itself is pure and reentrant.
 */
#include "gw_page.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cm_http.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_tls.h"

/* The embedded pages (onsale_embed in gateway/CMakeLists.txt). */
extern const char gw_www_queue_html[];
extern const char gw_www_dashboard_html[];
extern const char gw_www_pow_worker_js[];

#define MAX_NAME        32
#define MAX_POSITION    1000000000000000LL /* 1e15: far beyond any queue, no overflow below */
#define DASHBOARD_CACHE "public, max-age=300"
/*
 * Content-Security-Policy: no 'unsafe-inline'. Each page's own <script> and <style>
 * elements are allowed by their SHA-256, computed from the embedded page the first time
 * a policy is needed (csp_init), so an edit of a page can never leave a stale hash behind.
 * The pages carry no style="" or on*="" attributes (a hash cannot allow those); the
 * template keeps placeholders out of <script> and <style>, so the rendered elements are
 * byte for byte the hashed ones. form-action: the queue page's is 'none', or
 * redirect_url's origin for the POST hand-off, or 'self' for the join form of a page
 * without a place; the dashboard's forms stay on the page.
 */
#define CSP_IMG          "; connect-src 'self'; img-src 'self' data:"
#define CSP_TAIL         "; worker-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action "
#define BRAND_STYLE_MARK "<!--brand-style-->"

/* --- a growable byte buffer ---------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_reserve(buf_t *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    b->p = cm_xrealloc(b->p, cap);
    b->cap = cap;
}

static void buf_add(buf_t *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_adds(buf_t *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

/* The five characters that matter in text and in quoted attribute values. */
static void buf_add_escaped(buf_t *b, const char *s)
{
    for (const char *run = s;; s++) {
        const char *rep = NULL;
        switch (*s) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&quot;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        case '\0':
            buf_add(b, run, (size_t)(s - run));
            return;
        default:
            continue;
        }
        buf_add(b, run, (size_t)(s - run));
        buf_adds(b, rep);
        run = s + 1;
    }
}

/* --- Content-Security-Policy ------------------------------------------------------------- */

static pthread_once_t csp_once = PTHREAD_ONCE_INIT;
static char *queue_csp_prefix; /* "default-src …; style-src <hashes> " */
static char *dashboard_csp;

/* "'sha256-<base64>' " of n bytes (standard base64 with padding, as CSP writes it). */
static void add_hash_source(buf_t *b, const char *data, size_t n)
{
    char hex[65];
    unsigned char raw[32];
    cm_tls_sha256_hex(data, n, hex);
    for (int i = 0; i < 32; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        raw[i] = (unsigned char)v;
    }
    char b64[48];
    size_t len = cm_base64url_encode(raw, sizeof(raw), b64);
    for (size_t i = 0; i < len; i++)
        b64[i] = b64[i] == '-' ? '+' : b64[i] == '_' ? '/' : b64[i];
    while (len % 4)
        b64[len++] = '=';
    b64[len] = '\0';
    buf_adds(b, "'sha256-");
    buf_adds(b, b64);
    buf_adds(b, "' ");
}

/*
 * The hash sources of every <tag> element of page (HTML comments skipped, so a comment
 * that names <script> is not taken for one). Our pages write their elements as bare
 * "<script>" / "<style>" tags.
 */
static void add_element_hashes(buf_t *b, const char *page, const char *tag)
{
    char open[16], close[16];
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    for (const char *p = page; (p = strchr(p, '<')) != NULL;) {
        if (strncmp(p, "<!--", 4) == 0) {
            const char *end = strstr(p + 4, "-->");
            if (end == NULL)
                break;
            p = end + 3;
            continue;
        }
        if (strncmp(p, open, strlen(open)) != 0) {
            p++;
            continue;
        }
        const char *body = p + strlen(open), *end = strstr(body, close);
        bool placeholder = false;
        for (const char *q = body; end != NULL && q + 1 < end; q++)
            placeholder = placeholder || (q[0] == '{' && q[1] == '{');
        if (end == NULL || placeholder) { /* a broken page of ours: fail loudly at start-up */
            cm_log(CM_LOG_ERROR,
                   "gw_page: an embedded page has an unclosed %s or a "
                   "placeholder inside one",
                   open);
            abort();
        }
        add_hash_source(b, body, (size_t)(end - body));
        p = end + strlen(close);
    }
}

/* "default-src 'none'; script-src <hashes>; style-src <hashes> " */
static char *page_csp_prefix(const char *page)
{
    buf_t b = {0};
    buf_adds(&b, "default-src 'none'; script-src ");
    add_element_hashes(&b, page, "script");
    buf_adds(&b, "; style-src ");
    add_element_hashes(&b, page, "style");
    return b.p;
}

static void csp_init(void)
{
    queue_csp_prefix = page_csp_prefix(gw_www_queue_html);
    char *d = page_csp_prefix(gw_www_dashboard_html);
    dashboard_csp = cm_xasprintf("%s" CSP_IMG CSP_TAIL "'self'", d);
    free(d);
}

/* The queue page's policy. form_action NULL means 'none'; brand_style (may be NULL) the
 * body of the brand's <style> element; logo_origin (may be NULL) the logo's origin, for
 * img-src. New heap string. */
static char *queue_csp(const char *form_action, size_t form_action_len, const char *brand_style,
                       const char *logo_origin, size_t logo_origin_len)
{
    pthread_once(&csp_once, csp_init);
    buf_t b = {0};
    buf_adds(&b, queue_csp_prefix);
    if (brand_style != NULL)
        add_hash_source(&b, brand_style, strlen(brand_style));
    buf_adds(&b, CSP_IMG);
    if (logo_origin != NULL) {
        buf_adds(&b, " ");
        buf_add(&b, logo_origin, logo_origin_len);
    }
    buf_adds(&b, CSP_TAIL);
    if (form_action == NULL)
        buf_adds(&b, "'none'");
    else
        buf_add(&b, form_action, form_action_len);
    return b.p;
}

const char *gw_page_dashboard_csp(void)
{
    pthread_once(&csp_once, csp_init);
    return dashboard_csp;
}

/* --- values ---------------------------------------------------------------------------- */

/*
 * The page's states: the six of gw_page_state_t, then the ones only an answer
 * (gw_page_render_answer) leads to, which share the page's error section.
 */
typedef enum {
    ST_NEW = GW_PAGE_NEW,
    ST_QUEUED = GW_PAGE_QUEUED,
    ST_PREQUEUE = GW_PAGE_PREQUEUE,
    ST_ADMITTED = GW_PAGE_ADMITTED,
    ST_SOLD_OUT = GW_PAGE_SOLD_OUT,
    ST_CLOSED = GW_PAGE_CLOSED,
    ST_RETURNS = GW_PAGE_RETURNS,
    ST_UNKNOWN,     /* 404 unknown_event */
    ST_EXPIRED,     /* 410 admission_expired */
    ST_UNAVAILABLE, /* 503, or anything unexpected: try again shortly */
    ST_BUSY,        /* 429 rate_limited: try again after Retry-After */
    ST_JAVASCRIPT,  /* pow_required of a form join: the proof of work needs JavaScript */
    ST_INVITE,      /* enqueue_required of a form join: the room is by invitation */
    ST_INVITE_BAD,  /* a form join's enqueue token refused: the sale site's link again */
    ST_COUNT
} page_state_t;

#define ST_SECTIONS ST_UNKNOWN /* states below this one have a section of their own */

#define NO_MSG GW_MSG_COUNT /* a state without an error text */

static const struct {
    const char *name;
    gw_msg_t title;
    bool refreshing; /* the page asks again by itself */
    gw_msg_t error_text;
} states[ST_COUNT] = {
    [ST_NEW] = {"new", GW_MSG_TITLE_NEW, false, NO_MSG}, /* joins by its form, not a reload */
    [ST_QUEUED] = {"queued", GW_MSG_TITLE_QUEUED, true, NO_MSG},
    [ST_PREQUEUE] = {"prequeue", GW_MSG_TITLE_PREQUEUE, true, NO_MSG},
    [ST_ADMITTED] = {"admitted", GW_MSG_TITLE_ADMITTED, false, NO_MSG},
    [ST_SOLD_OUT] = {"sold_out", GW_MSG_TITLE_SOLD_OUT, false, NO_MSG},
    [ST_CLOSED] = {"closed", GW_MSG_TITLE_CLOSED, false, NO_MSG},
    [ST_RETURNS] = {"returns", GW_MSG_TITLE_SOLD_OUT, true, NO_MSG},
    [ST_UNKNOWN] = {"unknown", GW_MSG_TITLE_UNKNOWN, false, GW_MSG_ERROR_UNKNOWN},
    [ST_EXPIRED] = {"expired", GW_MSG_TITLE_EXPIRED, false, GW_MSG_ERROR_EXPIRED},
    [ST_UNAVAILABLE] = {"unavailable", GW_MSG_TITLE_WAIT, true, GW_MSG_ERROR_UNAVAILABLE},
    [ST_BUSY] = {"busy", GW_MSG_TITLE_WAIT, true, GW_MSG_ERROR_BUSY},
    [ST_JAVASCRIPT] = {"javascript", GW_MSG_TITLE_JAVASCRIPT, false, GW_MSG_ERROR_JAVASCRIPT},
    [ST_INVITE] = {"invite", GW_MSG_TITLE_INVITE, false, GW_MSG_ERROR_INVITE},
    [ST_INVITE_BAD] = {"invite_invalid", GW_MSG_TITLE_INVITE, false, GW_MSG_ERROR_INVITE_INVALID},
};

/* The message of lang for m; "" for NO_MSG. */
static const char *msg(const gw_lang_t *lang, gw_msg_t m)
{
    return m == NO_MSG ? "" : gw_lang_msg(lang, m);
}

/*
 * A message with its {name}s filled (names[i] → vals[i]); a name it does not know stays
 * as written. New heap string (the values are plain text, escaped where the result goes).
 */
static char *fill(const char *m, const char *const *names, const char *const *vals, size_t n)
{
    buf_t b = {0};
    buf_adds(&b, "");
    for (const char *p = m; *p;) {
        const char *open = strchr(p, '{'), *close = open ? strchr(open, '}') : NULL;
        if (close == NULL) {
            buf_adds(&b, p);
            break;
        }
        buf_add(&b, p, (size_t)(open - p));
        size_t i = 0, len = (size_t)(close - open - 1);
        while (i < n && !(strlen(names[i]) == len && memcmp(names[i], open + 1, len) == 0))
            i++;
        if (i < n)
            buf_adds(&b, vals[i]);
        else
            buf_add(&b, open, len + 2);
        p = close + 1;
    }
    return b.p;
}

static char *fill1(const char *m, const char *name, const char *val)
{
    return fill(m, &name, &val, 1);
}

/* A caller's state as the page's; anything outside the enum is "new". */
static page_state_t state_of(gw_page_state_t s)
{
    return s >= GW_PAGE_NEW && s <= GW_PAGE_RETURNS ? (page_state_t)s : ST_NEW;
}

/* One of the six caller-facing states by its API name ("state" of a JSON answer);
 * anything else is "new". */
static page_state_t parse_state(const char *s)
{
    for (int i = 0; s != NULL && i < ST_SECTIONS; i++)
        if (strcmp(s, states[i].name) == 0)
            return (page_state_t)i;
    return ST_NEW;
}

/* 1234567 → "1,234,567" with the language's separator; negative (unknown) → an em dash.
 * New heap string. */
static char *group_digits(int64_t n, const char *sep)
{
    if (n < 0)
        return cm_xstrdup("\xe2\x80\x94");
    char digits[24];
    int nd = snprintf(digits, sizeof(digits), "%" PRId64, n);
    buf_t b = {0};
    for (int i = 0; i < nd; i++) {
        if (i > 0 && (nd - i) % 3 == 0)
            buf_adds(&b, sep);
        buf_add(&b, digits + i, 1);
    }
    return b.p;
}

/* The wording of the page script's etaText(); keep the two in step. New heap string. */
static char *eta_text(const gw_lang_t *lang, int64_t s)
{
    static const char *const names[] = {"hours", "minutes"};
    char h[24], m[24];
    if (s < 0)
        return cm_xstrdup(msg(lang, GW_MSG_ETA_UNKNOWN));
    if (s < 60)
        return cm_xstrdup(msg(lang, GW_MSG_ETA_UNDER_MINUTE));
    if (s < 3600) {
        int64_t mins = (s + 59) / 60;
        snprintf(m, sizeof(m), "%" PRId64, mins);
        return mins == 1 ? cm_xstrdup(msg(lang, GW_MSG_ETA_MINUTE))
                         : fill1(msg(lang, GW_MSG_ETA_MINUTES), "minutes", m);
    }
    int64_t hours = s / 3600, mins = (s % 3600 + 59) / 60;
    if (mins == 60) {
        hours++;
        mins = 0;
    }
    snprintf(h, sizeof(h), "%" PRId64, hours);
    snprintf(m, sizeof(m), "%" PRId64, mins);
    const char *const vals[] = {h, m};
    return fill(msg(lang, mins ? GW_MSG_ETA_HOURS_MINUTES : GW_MSG_ETA_HOURS), names, vals, 2);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Seconds until the no-JS page asks again: poll_after_ms rounded up, within bounds. */
static int64_t refresh_seconds(page_state_t st, int64_t poll_after_ms)
{
    if (!states[st].refreshing)
        return 3600;
    if (poll_after_ms <= 0)
        return st == ST_NEW ? 2 : 5;
    int64_t ms = clamp64(poll_after_ms, 1, GW_PAGE_MAX_REFRESH_S * 1000);
    return (ms + 999) / 1000;
}

/*
 * The admission hand-off (docs/api.md v1.1): the token never goes into a query string, where
 * logs, history and Referer would keep it. "fragment": redirect_url#admission_token=<tok>
 * (a fragment is never sent to a server); "post": a form posted to redirect_url with the
 * field admission_token. The URL was checked when it was configured; it is checked again
 * here (loopback http allowed: the configuration decided), so a stored value that the
 * current rules refuse is never linked.
 */
static bool url_allowed(const char *u, size_t *origin_len)
{
    return cm_parse_url_allowed(u, true, origin_len);
}

char *gw_page_forward_url(const char *redirect_url, const char *admission_token)
{
    if (!url_allowed(redirect_url, NULL))
        return NULL;
    buf_t b = {0};
    buf_adds(&b, redirect_url);
    if (admission_token != NULL && admission_token[0] != '\0') {
        buf_adds(&b, "#admission_token=");
        static const char hex[] = "0123456789ABCDEF";
        for (const unsigned char *p = (const unsigned char *)admission_token; *p; p++) {
            /* RFC 3986 unreserved stay; a JWT is made of nothing else */
            if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                *p == '-' || *p == '_' || *p == '.' || *p == '~') {
                buf_add(&b, (const char *)p, 1);
            } else {
                char pct[3] = {'%', hex[*p >> 4], hex[*p & 15]};
                buf_add(&b, pct, 3);
            }
        }
    }
    return b.p;
}

bool gw_page_color_valid(const char *s)
{
    if (s == NULL || s[0] != '#' || strlen(s) != 7)
        return false;
    for (int i = 1; i < 7; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    return true;
}

/*
 * The body of the brand's <style> element: CSS custom properties of the colours that pass
 * gw_page_color_valid (the text on the accent colour dark or white, whichever reads), or
 * NULL when the room sets none. New heap string.
 */
static char *brand_style(const gw_page_brand_t *brand)
{
    bool color = gw_page_color_valid(brand->color), bg = gw_page_color_valid(brand->background);
    if (!color && !bg)
        return NULL;
    buf_t b = {0};
    buf_adds(&b, ":root{");
    if (color) {
        unsigned v = (unsigned)strtoul(brand->color + 1, NULL, 16);
        unsigned luma = (299 * (v >> 16) + 587 * ((v >> 8) & 255) + 114 * (v & 255)) / 1000;
        buf_adds(&b, "--accent:");
        buf_add(&b, brand->color, 7);
        buf_adds(&b, luma > 150 ? ";--accent-fg:#16181d;" : ";--accent-fg:#ffffff;");
    }
    if (bg) {
        buf_adds(&b, "--bg:");
        buf_add(&b, brand->background, 7);
        buf_adds(&b, ";");
    }
    buf_adds(&b, "}");
    return b.p;
}

/* Every value the template may name, formatted. */
typedef struct vars {
    char position[24], queue_size[24], eta_seconds[24], poll_after_ms[24], opens_at_ms[24];
    char *position_text, *queue_size_text, *eta_text, *status_text, *progress_text;
    char *left_text; /* heap or NULL: "N tickets left" */
    char progress[8], from[24], opens_at[32], opens_at_text[40];
    char *refresh_note;
    char *refresh;  /* heap: may hold the forward URL */
    char *redirect; /* heap or NULL: handoff "fragment", the URL with the token */
    char *action;   /* heap or NULL: handoff "post", where the form goes */
    char *csp;      /* heap: the page's Content-Security-Policy */
    char *style;    /* heap or NULL: the brand's <style> body */
    char *msgs;     /* heap: the language's messages as JSON, for the script */
    const char *logo;
    char pow_bits[8];
} vars_t;

static void vars_free(vars_t *v)
{
    free(v->position_text);
    free(v->queue_size_text);
    free(v->eta_text);
    free(v->status_text);
    free(v->progress_text);
    free(v->left_text);
    free(v->refresh_note);
    free(v->refresh);
    free(v->redirect);
    free(v->action);
    free(v->style);
    free(v->msgs);
}

typedef struct var {
    const char *name;
    const char *value;
} var_t;

/* Every message of lang as one JSON object, the script's catalogue. New heap string. */
static char *msgs_json(const gw_lang_t *lang)
{
    json_t *o = json_object();
    for (int m = 0; m < GW_MSG_COUNT; m++)
        json_object_set_new(o, gw_lang_key((gw_msg_t)m), json_string(msg(lang, (gw_msg_t)m)));
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out ? out : cm_xstrdup("{}");
}

static void compute_text(const gw_page_info_t *in, const gw_lang_t *lang, int64_t pos, vars_t *v)
{
    const char *sep = msg(lang, GW_MSG_THOUSANDS_SEP);
    v->position_text = group_digits(pos < 1 ? -1 : pos, sep);
    /* a size sampled a moment before the position was: the line includes this fan */
    v->queue_size_text =
        group_digits(in->queue_size >= 0 && in->queue_size < pos ? pos : in->queue_size, sep);
    v->eta_text = eta_text(lang, in->eta_seconds);
    static const char *const names[] = {"position", "eta"};
    const char *const vals[] = {v->position_text, v->eta_text};
    v->status_text = fill(msg(lang, GW_MSG_STATUS), names, vals, 2);
    if (in->show_left && in->left >= 0) {
        char *count = group_digits(in->left, sep);
        v->left_text =
            fill1(msg(lang, in->left == 1 ? GW_MSG_LEFT_ONE : GW_MSG_LEFT_MANY), "count", count);
        free(count);
    }
    v->msgs = msgs_json(lang);
}

static void compute(const gw_page_info_t *in, const gw_lang_t *lang, page_state_t st, vars_t *v)
{
    memset(v, 0, sizeof(*v));
    int64_t pos = clamp64(in->position, -1, MAX_POSITION);
    snprintf(v->position, sizeof(v->position), "%" PRId64, pos);
    snprintf(v->queue_size, sizeof(v->queue_size), "%" PRId64, in->queue_size);
    snprintf(v->eta_seconds, sizeof(v->eta_seconds), "%" PRId64, in->eta_seconds);
    snprintf(v->poll_after_ms, sizeof(v->poll_after_ms), "%" PRId64, in->poll_after_ms);
    snprintf(v->opens_at_ms, sizeof(v->opens_at_ms), "%" PRId64, in->opens_at_ms);
    snprintf(v->pow_bits, sizeof(v->pow_bits), "%d", in->pow_bits);
    compute_text(in, lang, pos, v);

    /* Progress: the share of the line that was ahead of you (as first seen) now gone. */
    int64_t from = 0, pct = 0;
    if (st == ST_QUEUED && pos >= 1) {
        from = clamp64(in->first_position, pos, MAX_POSITION);
        pct = (from - pos) * 100 / from;
    } else if (st == ST_ADMITTED) {
        pct = 100;
    }
    snprintf(v->progress, sizeof(v->progress), "%" PRId64, clamp64(pct, 0, 100));
    snprintf(v->from, sizeof(v->from), "%" PRId64, from);
    v->progress_text = fill1(msg(lang, GW_MSG_PROGRESS_VALUE), "percent", v->progress);

    v->opens_at[0] = v->opens_at_text[0] = '\0';
    if (in->opens_at_ms > 0 && cm_format_rfc3339(in->opens_at_ms, v->opens_at, 25) == 24) {
        /* "2026-12-01T10:00:00.000Z" → "2026-12-01 10:00 UTC" */
        snprintf(v->opens_at_text, sizeof(v->opens_at_text), "%.10s %.5s UTC", v->opens_at,
                 v->opens_at + 11);
    } else {
        v->opens_at[0] = '\0';
    }

    size_t origin = 0, logo_origin = 0;
    if (st == ST_ADMITTED && in->handoff_post && url_allowed(in->redirect_url, &origin))
        v->action = cm_xstrdup(in->redirect_url);
    else if (st == ST_ADMITTED && !in->handoff_post)
        v->redirect = gw_page_forward_url(in->redirect_url, in->admission_token);
    if (in->brand.logo_url && in->brand.logo_url[0] &&
        url_allowed(in->brand.logo_url, &logo_origin))
        v->logo = in->brand.logo_url;
    v->style = brand_style(&in->brand);
    /* the hand-off form may go to redirect_url's origin, and only there; the join form of
     * a page without a place (no JavaScript) to this gateway */
    if (st == ST_NEW)
        v->csp = queue_csp("'self'", 6, v->style, v->logo, logo_origin);
    else
        v->csp = queue_csp(v->action, origin, v->style, v->logo, logo_origin);
    int64_t every = refresh_seconds(st, in->poll_after_ms);
    switch (st) {
    case ST_ADMITTED:
        v->refresh = v->redirect ? cm_xasprintf("0;url=%s", v->redirect) : cm_xstrdup("3600");
        break;
    case ST_QUEUED:
        /* relative: the same path, keeping the progress baseline */
        v->refresh = cm_xasprintf("%" PRId64 ";url=?from=%" PRId64, every, from);
        break;
    default: /* the same URL again: every is 3600 for a state that does not refresh */
        v->refresh = cm_xasprintf("%" PRId64, every);
        break;
    }
    char secs[24];
    snprintf(secs, sizeof(secs), "%" PRId64, every);
    char *each = every == 1 ? cm_xstrdup(msg(lang, GW_MSG_REFRESH_SECOND))
                            : fill1(msg(lang, GW_MSG_REFRESH_SECONDS), "seconds", secs);
    v->refresh_note = fill1(msg(lang, GW_MSG_REFRESH_NOTE), "every", each);
    free(each);
}

static const char *lookup(const var_t *vars, size_t n, const gw_lang_t *lang, const char *name,
                          size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(vars[i].name) == len && memcmp(vars[i].name, name, len) == 0)
            return vars[i].value;
    if (len > 2 && memcmp(name, "t_", 2) == 0)
        for (int m = 0; m < GW_MSG_COUNT; m++) {
            const char *key = gw_lang_key((gw_msg_t)m);
            if (strlen(key) == len - 2 && memcmp(key, name + 2, len - 2) == 0)
                return msg(lang, (gw_msg_t)m);
        }
    return NULL;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* tpl[0..tpl_len) with its placeholders filled. */
static void expand(buf_t *out, const char *tpl, size_t tpl_len, const var_t *vars, size_t nvars,
                   const gw_lang_t *lang)
{
    const char *p = tpl, *end = tpl + tpl_len;
    for (;;) {
        const char *open = p;
        while (open + 1 < end && !(open[0] == '{' && open[1] == '{'))
            open++;
        if (open + 1 >= end)
            break;
        const char *name = open + 2, *e = name;
        while (e < end && e - name <= MAX_NAME && name_char(*e))
            e++;
        const char *val = NULL;
        if (e > name && e + 1 < end && e[0] == '}' && e[1] == '}')
            val = lookup(vars, nvars, lang, name, (size_t)(e - name));
        if (val == NULL) { /* not a placeholder of ours: copy "{{" and go on */
            buf_add(out, p, (size_t)(name - p));
            p = name;
            continue;
        }
        buf_add(out, p, (size_t)(open - p));
        buf_add_escaped(out, val);
        p = e + 2;
    }
    buf_add(out, p, (size_t)(end - p));
}

/* The page, and in *csp (when not NULL) the Content-Security-Policy it must be sent with. */
static char *render(const gw_page_info_t *info, page_state_t st, size_t *len, char **csp)
{
    const gw_lang_t *lang = gw_langs_choose(info->langs, info->accept_language);
    vars_t v;
    compute(info, lang, st, &v);
    char next_at[32] = "";
    if (info->next_phase_ms > 0)
        cm_format_rfc3339(info->next_phase_ms, next_at, sizeof(next_at));
    const char *hidden[ST_SECTIONS];
    for (int i = 0; i < ST_SECTIONS; i++)
        hidden[i] = i == (int)st ? "" : "hidden";
    const char *brand_title =
        info->brand.title && info->brand.title[0] ? info->brand.title : "onsale";

    const var_t vars[] = {
        {"lang", lang->tag},
        {"msgs", v.msgs},
        {"brand_title", brand_title},
        {"logo", v.logo ? v.logo : ""},
        {"hidden_logo", v.logo ? "" : "hidden"},
        {"event", info->event ? info->event : ""},
        {"state", states[st].name},
        {"title", msg(lang, states[st].title)},
        {"position", v.position},
        {"queue_size", v.queue_size},
        {"eta_seconds", v.eta_seconds},
        {"poll_after_ms", v.poll_after_ms},
        {"opens_at_ms", v.opens_at_ms},
        {"position_text", v.position_text},
        {"queue_size_text", v.queue_size_text},
        {"eta_text", v.eta_text},
        {"status_text", v.status_text},
        {"progress", v.progress},
        {"progress_text", v.progress_text},
        {"from", v.from},
        {"opens_at", v.opens_at},
        {"opens_at_text", v.opens_at_text[0] ? v.opens_at_text : msg(lang, GW_MSG_OPENS_SOON)},
        {"refresh", v.refresh},
        {"refresh_note", v.refresh_note},
        {"redirect", v.redirect ? v.redirect : ""},
        {"hidden_redirect", v.redirect ? "" : "hidden"},
        {"handoff", info->handoff_post ? "post" : "fragment"},
        {"pow", info->pow ? "1" : "0"},
        {"pow_challenge", info->pow_challenge ? info->pow_challenge : ""},
        {"pow_bits", v.pow_bits},
        {"hidden_pow_form", info->pow || info->needs_code ? "hidden" : ""}, /* or the code's */
        {"hidden_pow_note", info->pow ? "" : "hidden"},
        {"handoff_action", v.action ? v.action : ""},
        {"handoff_token", v.action && info->admission_token ? info->admission_token : ""},
        {"hidden_handoff", v.action ? "" : "hidden"},
        {"hidden_refresh_note", states[st].refreshing ? "" : "hidden"},
        {"hidden_new", hidden[ST_NEW]},
        {"hidden_queued", hidden[ST_QUEUED]},
        {"hidden_prequeue", hidden[ST_PREQUEUE]},
        {"hidden_admitted", hidden[ST_ADMITTED]},
        {"hidden_sold_out", hidden[ST_SOLD_OUT]},
        {"hidden_closed", hidden[ST_CLOSED]},
        {"hidden_returns", hidden[ST_RETURNS]},
        {"left_text", v.left_text ? v.left_text : ""},
        {"hidden_left", v.left_text ? "" : "hidden"},
        {"hidden_error", st >= ST_SECTIONS ? "" : "hidden"},
        {"error_text", msg(lang, states[st].error_text)},
        {"phase_name", info->phase_name ? info->phase_name : ""},
        {"phase_text", info->phase_text ? info->phase_text : ""},
        {"hidden_phase",
         (info->phase_name && info->phase_name[0]) || (info->phase_text && info->phase_text[0])
             ? ""
             : "hidden"},
        {"next_phase_at", next_at},
        {"next_text", info->next_text ? info->next_text : ""},
        {"hidden_next_phase", next_at[0] ? "" : "hidden"},
        {"needs_code", info->needs_code ? "1" : "0"},
        {"phases", info->phases_json ? info->phases_json : "[]"},
        {"hidden_code", info->needs_code && st == ST_NEW ? "" : "hidden"},
        {"hidden_joining", info->needs_code && st == ST_NEW ? "hidden" : ""},
        {"code_error", info->code_error ? info->code_error : ""},
        {"hidden_code_error", info->code_error ? "" : "hidden"},
    };
    const size_t nvars = sizeof(vars) / sizeof(vars[0]);
    buf_t out = {0};
    const char *tpl = gw_www_queue_html, *mark = strstr(tpl, BRAND_STYLE_MARK);
    size_t tpl_len = strlen(tpl);
    buf_reserve(&out, tpl_len + 8192);
    if (mark == NULL) {
        expand(&out, tpl, tpl_len, vars, nvars, lang);
    } else {
        expand(&out, tpl, (size_t)(mark - tpl), vars, nvars, lang);
        if (v.style != NULL) { /* built from validated colours only: see the top of the file */
            buf_adds(&out, "<style>");
            buf_adds(&out, v.style);
            buf_adds(&out, "</style>");
        }
        const char *rest = mark + strlen(BRAND_STYLE_MARK);
        expand(&out, rest, tpl_len - (size_t)(rest - tpl), vars, nvars, lang);
    }
    if (csp)
        *csp = v.csp;
    else
        free(v.csp);
    vars_free(&v);
    if (len)
        *len = out.len;
    return out.p;
}

char *gw_page_render_queue(const gw_page_info_t *info, size_t *len)
{
    return render(info, state_of(info->state), len, NULL);
}

char *gw_page_csp(const gw_page_info_t *info)
{
    char *csp = NULL;
    free(render(info, state_of(info->state), NULL, &csp));
    return csp;
}

static const char *jstr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static int64_t jint(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/* What the page says for a refused presale code (error word of a join), or NULL. */
static const char *code_message(const gw_page_info_t *in, const char *error)
{
    static const struct {
        const char *word;
        gw_msg_t m;
    } words[] = {
        {"code_malformed", GW_MSG_CODE_MALFORMED},     {"code_unknown", GW_MSG_CODE_UNKNOWN},
        {"code_revoked", GW_MSG_CODE_REVOKED},         {"code_used_up", GW_MSG_CODE_USED_UP},
        {"code_wrong_phase", GW_MSG_CODE_WRONG_PHASE},
    };
    if (strcmp(error, "code_required") == 0)
        return NULL; /* the field's own label says it */
    const gw_lang_t *lang = gw_langs_choose(in->langs, in->accept_language);
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcmp(error, words[i].word) == 0)
            return msg(lang, words[i].m);
    return msg(lang, GW_MSG_CODE_CHECK);
}

static char *render_answer(const gw_page_info_t *base, int code, const json_t *body, int *page_code,
                           size_t *len, char **csp)
{
    gw_page_info_t in = {.event = base->event,
                         .position = -1,
                         .queue_size = -1,
                         .eta_seconds = -1,
                         .first_position = base->first_position,
                         .langs = base->langs,
                         .accept_language = base->accept_language,
                         .brand = base->brand};
    page_state_t st = ST_UNAVAILABLE;
    int out_code = 503;
    const char *state = jstr(body, "state"), *error = jstr(body, "error");
    if (code >= 200 && code < 300 && state != NULL) {
        st = parse_state(state);
        out_code = 200;
        in.position = jint(body, "position", -1);
        in.queue_size = jint(body, "queue_size", -1);
        in.eta_seconds = jint(body, "eta_seconds", -1);
        in.poll_after_ms = jint(body, "poll_after_ms", 0);
        in.left = jint(body, "left", -1);
        in.show_left = in.left >= 0;
        if (st == ST_SOLD_OUT && json_is_true(json_object_get(body, "returns_possible")))
            st = ST_RETURNS;
        const char *opens = jstr(body, "opens_at");
        if (opens == NULL || cm_parse_rfc3339(opens, &in.opens_at_ms) != 0)
            in.opens_at_ms = 0;
        in.admission_token = jstr(body, "admission_token");
        in.redirect_url = jstr(body, "redirect_url");
        const char *handoff = jstr(body, "handoff");
        in.handoff_post = handoff != NULL && strcmp(handoff, "post") == 0;
    } else if (error != NULL && (strcmp(error, "sold_out") == 0 || strcmp(error, "closed") == 0)) {
        st = error[0] == 's' ? ST_SOLD_OUT : ST_CLOSED;
        out_code = 200; /* a clear page, not an error */
    } else if (error != NULL && strcmp(error, "admission_expired") == 0) {
        st = ST_EXPIRED;
        out_code = 200;
    } else if (error != NULL && strcmp(error, "unknown_event") == 0) {
        st = ST_UNKNOWN;
        out_code = 404;
    } else if (error != NULL && strcmp(error, "invalid_ticket") == 0) {
        st = ST_NEW; /* the script takes a place again */
        out_code = 200;
    } else if (error != NULL && strncmp(error, "code_", 5) == 0 && code >= 400 && code < 500) {
        st = ST_NEW; /* the code field again, with what was wrong (a form join's code) */
        out_code = code;
        in.needs_code = true;
        in.code_error = code_message(&in, error);
    } else if (error != NULL && strcmp(error, "pow_required") == 0) {
        st = ST_JAVASCRIPT;
        out_code = code;
    } else if (error != NULL && strncmp(error, "enqueue_", 8) == 0 && code >= 400 && code < 500) {
        st = strcmp(error, "enqueue_required") == 0 ? ST_INVITE : ST_INVITE_BAD;
        out_code = code;
    } else if (code == 429) {
        st = ST_BUSY;
        out_code = 429;
        in.poll_after_ms = 1000 * clamp64(jint(body, "retry_after_seconds", 2), 1, 600);
    } else {
        in.poll_after_ms = 5000;
    }
    if (page_code)
        *page_code = out_code;
    return render(&in, st, len, csp);
}

char *gw_page_render_answer(const gw_page_info_t *base, int code, const json_t *body,
                            int *page_code, size_t *len)
{
    return render_answer(base, code, body, page_code, len, NULL);
}

/* --- replies ----------------------------------------------------------------------------- */

static void security_headers(cm_req_t *req, const char *csp)
{
    cm_http_add_header(req, "Content-Security-Policy", csp);
    cm_http_add_header(req, "X-Frame-Options", "DENY");
    cm_http_add_header(req, "Referrer-Policy", "no-referrer");
}

/* The page's own ?from=<n> (see gw_page_info_t.first_position), or 0. */
static int64_t query_from(cm_req_t *req)
{
    struct evkeyvalq q;
    int64_t from = 0;
    if (cm_http_query(req, &q) == 0) {
        const char *s = evhttp_find_header(&q, "from");
        if (s == NULL || cm_parse_i64(s, 1, MAX_POSITION, &from) != 0)
            from = 0;
    }
    evhttp_clear_headers(&q);
    return from;
}

void gw_page_queue(cm_req_t *req, const gw_page_info_t *info)
{
    gw_page_info_t page = *info;
    int64_t from = query_from(req);
    if (from > page.first_position)
        page.first_position = from;
    if (page.accept_language == NULL)
        page.accept_language = cm_http_header(req, "Accept-Language");
    size_t len = 0;
    char *csp = NULL;
    char *html = render(&page, state_of(page.state), &len, &csp);
    security_headers(req, csp);
    cm_http_add_header(req, "Vary", "Accept-Language"); /* the page's language */
    cm_http_send_body(req, 200, "text/html; charset=utf-8", html, len, false);
    free(html);
    free(csp);
}

void gw_page_queue_answer(cm_req_t *req, const gw_langs_t *langs, const gw_page_brand_t *brand,
                          int code, json_t *body)
{
    char buf[1024], *seg[4];
    int n = cm_http_path(req, buf, sizeof(buf), seg, 4);
    gw_page_info_t base = {.event = n >= 2 ? seg[1] : "",
                           .first_position = query_from(req),
                           .langs = langs,
                           .accept_language = cm_http_header(req, "Accept-Language")};
    if (brand != NULL)
        base.brand = *brand;
    int page_code = 200;
    size_t len = 0;
    char *csp = NULL;
    char *html = render_answer(&base, code, body, &page_code, &len, &csp);
    if (body)
        json_decref(body);
    security_headers(req, csp);
    cm_http_add_header(req, "Vary", "Accept-Language"); /* the page's language */
    cm_http_send_body(req, page_code, "text/html; charset=utf-8", html, len, false);
    free(html);
    free(csp);
}

void gw_page_pow_worker(cm_req_t *req)
{
    cm_http_add_header(req, "Content-Security-Policy", "default-src 'none'");
    cm_http_add_header(req, "Cache-Control", DASHBOARD_CACHE);
    cm_http_send_body(req, 200, "text/javascript; charset=utf-8", gw_www_pow_worker_js,
                      strlen(gw_www_pow_worker_js), true);
}

void gw_page_dashboard(cm_req_t *req)
{
    security_headers(req, gw_page_dashboard_csp());
    cm_http_add_header(req, "Cache-Control", DASHBOARD_CACHE);
    cm_http_send_body(req, 200, "text/html; charset=utf-8", gw_www_dashboard_html,
                      strlen(gw_www_dashboard_html), true);
}
