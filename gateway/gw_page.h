/*
 * gw_page — the two HTML pages of the gateway: the fan's queue page (GET /q/{event})
 * and the operator dashboard (GET /admin/).
 *
 * Both pages are self-contained files under gateway/www/, compiled into the binary
 * (onsale_embed). The queue page is a template: the request's state is filled into
 * double-brace placeholders, every value HTML-escaped, so the page is complete without
 * JavaScript (a <noscript> meta refresh re-requests it at poll_after_ms) and the script
 * starts from the same state. The dashboard is static; its data comes from the admin API.
 *
 * Runs on the event-loop thread of the request; the render is a pure function
 * (reentrant, no I/O) so it is unit-tested without a loop.
 */
#ifndef GW_PAGE_H
#define GW_PAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cm_http.h"
#include "gw_lang.h"

/* A room's look (docs/api.md, "Branding"): all optional, NULL or "" = the gateway's own.
 * title: plain text, escaped; logo_url: an https URL (cm_parse_url_allowed, loopback http
 * as the gateway allows) whose origin joins the page's img-src; color (buttons, links,
 * the progress bar) and background: "#rrggbb" only (gw_page_color_valid) — anything else
 * is left out, so no value can reach the page's CSS but six hex digits. */
typedef struct gw_page_brand {
    const char *title, *logo_url, *color, *background;
} gw_page_brand_t;

/** True when s is a colour the page accepts: '#' and six hex digits. Pure. */
bool gw_page_color_valid(const char *s);

/** The states a caller shows the queue page in (the page has more of its own, which only
 *  an answer leads to: gw_page_render_answer). Their names are the API's "state" words. */
typedef enum gw_page_state {
    GW_PAGE_NEW = 0, /* joining: the script (or the form) asks the API for a place */
    GW_PAGE_QUEUED,
    GW_PAGE_PREQUEUE,
    GW_PAGE_ADMITTED,
    GW_PAGE_SOLD_OUT,
    GW_PAGE_CLOSED,
    GW_PAGE_RETURNS, /* sold out for now: every unit is sold or held; held ones not bought
                        come back to the line in order, so the fan keeps the place (the
                        API's "sold_out" with "returns_possible": true) */
} gw_page_state_t;

/*
 * What the queue page shows. Strings are borrowed for the duration of the call; NULL is
 * the same as "". Negative numbers mean "unknown" (shown as a dash or "calculating").
 */
typedef struct gw_page_info {
    const char *event;     /* the event id of the path */
    gw_page_state_t state; /* a value outside the enum renders as GW_PAGE_NEW */
    int64_t position, queue_size, eta_seconds, poll_after_ms;
    bool show_left; /* queued: say how many units are left to buy (the room's show_left) */
    int64_t left;
    int64_t opens_at_ms;                        /* prequeue: the opening, Unix ms; 0 = unknown */
    const char *admission_token, *redirect_url; /* admitted: where to forward the fan */
    bool handoff_post;         /* the room's handoff: true "post" (a form), false "fragment" */
    bool pow;                  /* the room asks for a proof of work on join (gw_pow.h) */
    const char *pow_challenge; /* GW_PAGE_NEW with pow: a challenge for the script to solve */
    int pow_bits;              /* its difficulty */
    /*
     * Optional (0 = unknown): the position the fan first saw, the baseline of the
     * progress bar. gw_page_queue() takes the larger of this and the page's own `?from=`
     * query parameter, which the page carries across reloads; callers can leave it 0.
     */
    int64_t first_position;
    /* The room's phases (gw_sched.h), all optional: the phase in force and its text (or the
     * first phase's text_before ahead of the schedule, the last's text_after once it is
     * over), when the next starts (Unix ms, 0 = none) and its text_before; needs_code: a
     * join now needs a presale code (the page shows the code field). Plain text, escaped. */
    const char *phase_name, *phase_text, *next_text;
    int64_t next_phase_ms;
    bool needs_code;
    const char *code_error; /* a form join's code was refused: why (shown by the field) */
    /* the schedule for the page's script, which follows transitions on its own clock
     * (corrected by the Date header): a JSON array of {n: name, s: starts ms, b:
     * text_before, d: text_during, c: requires_code}; NULL = none */
    const char *phases_json;
    /* The page's language: langs (NULL = the built-in ones) chosen by the request's
     * Accept-Language (gw_page_queue fills it in from the request when NULL). */
    const gw_langs_t *langs;
    const char *accept_language;
    gw_page_brand_t brand;
} gw_page_info_t;

/** Longest meta-refresh / poll interval the page uses, in seconds. */
#define GW_PAGE_MAX_REFRESH_S 600

/**
 * Renders the queue page for info into a new NUL-terminated heap string (the caller
 * frees it); its length, without the NUL, in *len. Never fails (allocation aborts).
 */
char *gw_page_render_queue(const gw_page_info_t *info, size_t *len);

/**
 * Builds the URL the fan is forwarded to once admitted with the "fragment" hand-off:
 * redirect_url + `#admission_token=<token>`, the token percent-encoded (never in the
 * query string: docs/api.md v1.1). Returns a new heap string, or NULL when redirect_url fails
 * cm_parse_url_allowed() (loopback http allowed), so an operator's typo can never become
 * a javascript: link.
 */
char *gw_page_forward_url(const char *redirect_url, const char *admission_token);

/**
 * The Content-Security-Policy the queue page of info is sent with:
 * form-action 'none' except for the admitted page of a "post" hand-off, which may post
 * to redirect_url's origin only. New heap string.
 */
char *gw_page_csp(const gw_page_info_t *info);

/** The dashboard's Content-Security-Policy (same rules, form-action 'self'). Static. */
const char *gw_page_dashboard_csp(void);

/**
 * Answers req with the rendered queue page: 200 text/html, Cache-Control: no-store,
 * Vary: Accept-Language, plus security headers (CSP, nosniff, no-referrer, no framing).
 * Reads `?from=` (see first_position) and, unless info names one, Accept-Language from req.
 * Sends exactly one reply.
 */
void gw_page_queue(cm_req_t *req, const gw_page_info_t *info);

/**
 * The queue page for an answer of the JSON API: code and body are what a join or status
 * poll of event would have sent (a join/status body, or an {"error": …} body). Mapping:
 * 2xx with "state" → that state's page (200); 410 sold_out / closed → that page (200, a
 * clear message, not an error); 410 admission_expired → "expired" (200); 404
 * unknown_event → "unknown" (404); 401 invalid_ticket → "new", the script joins again
 * (200); 429 → "busy", asking again after retry_after_seconds (429); pow_required (a
 * form join without the script's proof of work) → "javascript", which says JavaScript
 * is needed (the code given); anything else →
 * "unavailable", asking again in 5 s (503). The status to send is stored in *page_code.
 * base gives what the answer does not: the event, first_position, the languages and
 * Accept-Language, the room's brand (its state and numbers are ignored). Pure; returns a
 * new heap string, its length in *len.
 */
char *gw_page_render_answer(const gw_page_info_t *base, int code, const json_t *body,
                            int *page_code, size_t *len);

/**
 * Answers req (GET /q/{event}) with gw_page_render_answer() of code and body: the
 * browser-facing twin of cm_http_send_json/_error for the queue endpoints, so GET of the
 * page can run the join path and have its answer rendered instead of sent as JSON. The
 * event comes from the request path, the progress baseline from `?from=`; headers already
 * added to the reply (Set-Cookie, Retry-After) are kept. The language is chosen from langs
 * (NULL = the built-ins) by the request's Accept-Language; brand may be NULL (the gateway's
 * own look: an answer may come before any room is known). body is stolen (NULL is fine).
 * Sends exactly one reply.
 */
void gw_page_queue_answer(cm_req_t *req, const gw_langs_t *langs, const gw_page_brand_t *brand,
                          int code, json_t *body);

/**
 * Answers req (GET /q/{event}/pow.js) with the queue page's proof-of-work Web Worker
 * (gateway/www/pow_worker.js): JavaScript, cacheable, its own strict CSP.
 */
void gw_page_pow_worker(cm_req_t *req);

/**
 * Answers req with the operator dashboard: 200 text/html, cacheable for a few minutes,
 * same security headers. The page holds no data and asks for the admin token itself,
 * so it can be served without admin auth (the API calls it makes need the token).
 * Sends exactly one reply.
 */
void gw_page_dashboard(cm_req_t *req);

#endif
