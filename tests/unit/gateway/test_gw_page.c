/*
 * Unit tests for gateway/gw_page.c: the queue page template filled for each state,
 * HTML escaping of every value, the forward URL (query joining, fragment, percent
 * encoding, refused schemes), the no-JS meta refresh and the progress baseline.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include <jansson.h>

#include "gw_page.h"

static char *render(const gw_page_info_t *info)
{
    size_t len = 0;
    char *html = gw_page_render_queue(info, &len);
    assert_non_null(html);
    assert_int_equal(len, strlen(html));
    /* every placeholder filled, whatever the state */
    if (strstr(html, "{{") != NULL)
        fail_msg("unfilled placeholder near: %.60s", strstr(html, "{{"));
    return html;
}

static void assert_has(const char *html, const char *needle)
{
    if (strstr(html, needle) == NULL)
        fail_msg("page lacks: %s", needle);
}

static void assert_lacks(const char *html, const char *needle)
{
    if (strstr(html, needle) != NULL)
        fail_msg("page unexpectedly has: %s", needle);
}

/* True when <section id="s-<state>" …> carries the hidden attribute. */
static bool section_hidden(const char *html, const char *state)
{
    char id[48];
    snprintf(id, sizeof(id), "id=\"s-%s\"", state);
    const char *p = strstr(html, id);
    if (p == NULL)
        fail_msg("no section %s", id);
    const char *end = strchr(p, '>');
    const char *h = strstr(p, " hidden");
    return h != NULL && h < end;
}

static void assert_only_visible(const char *html, const char *state)
{
    static const char *const all[] = {"new",      "queued",  "prequeue", "admitted",
                                      "sold_out", "returns", "closed"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        bool want_hidden = strcmp(all[i], state) != 0;
        if (section_hidden(html, all[i]) != want_hidden)
            fail_msg("section %s should be %s", all[i], want_hidden ? "hidden" : "shown");
    }
}

static void test_queued(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1",
                         .state = GW_PAGE_QUEUED,
                         .position = 1234,
                         .queue_size = 50210,
                         .eta_seconds = 62,
                         .poll_after_ms = 5000,
                         .first_position = 2000};
    char *html = render(&in);
    assert_only_visible(html, "queued");
    assert_has(html, "data-state=\"queued\"");
    assert_has(html, "data-position=\"1234\"");
    assert_has(html, "data-queue-size=\"50210\"");
    assert_has(html, "<dd id=\"position\">1,234</dd>");
    assert_has(html, "<dd id=\"queue-size\">50,210</dd>");
    assert_has(html, "about 2 minutes");
    assert_has(html, "You are number 1,234 in line.");
    /* (2000 - 1234) / 2000 = 38.3 % */
    assert_has(html, "aria-valuenow=\"38\"");
    assert_has(html, "max=\"100\" value=\"38\"");
    assert_has(html, "data-from=\"2000\"");
    /* no-JS: re-request after poll_after_ms, keeping the baseline */
    assert_has(html, "<meta http-equiv=\"refresh\" content=\"5;url=?from=2000\">");
    assert_has(html, "<title>You are in the queue · e1</title>");
    free(html);
}

static void test_progress_baseline(void **s)
{
    (void)s;
    /* first visit: the baseline is the current position, progress 0 */
    gw_page_info_t in = {
        .event = "e1", .state = GW_PAGE_QUEUED, .position = 500, .queue_size = 900};
    char *html = render(&in);
    assert_has(html, "aria-valuenow=\"0\"");
    assert_has(html, "data-from=\"500\"");
    free(html);
    /* a baseline below the position (forged ?from=) is raised to it */
    in.first_position = 3;
    html = render(&in);
    assert_has(html, "data-from=\"500\"");
    assert_has(html, "aria-valuenow=\"0\"");
    free(html);
    /* at the front */
    in.position = 1;
    in.first_position = 100;
    html = render(&in);
    assert_has(html, "aria-valuenow=\"99\"");
    free(html);
}

static void test_escaping(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "<script>alert(\"x\")</script>&'",
                         .state = GW_PAGE_QUEUED,
                         .position = 1,
                         .queue_size = 1,
                         .eta_seconds = 0,
                         .poll_after_ms = 1000};
    char *html = render(&in);
    assert_lacks(html, "<script>alert");
    assert_has(html, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;");
    assert_has(html, "data-event=\"&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;\"");
    free(html);

    gw_page_info_t adm = {.event = "e1",
                          .state = GW_PAGE_ADMITTED,
                          .admission_token = "a.b\"<c",
                          .redirect_url = "https://shop.example/buy?x=1&y=\"2\""};
    html = render(&adm);
    /* a quote in redirect_url is refused outright: nothing is linked */
    assert_lacks(html, "y=\"2\"");
    assert_lacks(html, "a.b\"<c");
    assert_has(html, "<p id=\"continue\" hidden>");
    free(html);

    /* the token is percent-encoded in the fragment, the URL escaped in the attribute */
    adm.redirect_url = "https://shop.example/buy?x=1&y=2";
    html = render(&adm);
    assert_has(html, "href=\"https://shop.example/buy?x=1&amp;y=2#admission_token=a.b%22%3Cc\"");
    free(html);

    /* post hand-off: the token is a form field, HTML-escaped */
    adm.handoff_post = true;
    html = render(&adm);
    assert_has(html, "name=\"admission_token\" value=\"a.b&quot;&lt;c\"");
    free(html);
}

/* The phase part: name, text and the next phase's start, escaped; the code field shown
 * only on a new page whose join needs a code; nothing of it without a schedule. */
static void test_phase_and_code_field(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1",
                         .state = GW_PAGE_NEW,
                         .phase_name = "presale",
                         .phase_text = "Code holders <b>only</b> & friends",
                         .next_phase_ms = 1796126400000LL,
                         .next_text = "General sale \"at noon\"",
                         .needs_code = true,
                         .phases_json = "[{\"n\":\"presale\",\"d\":\"<b>\"}]"};
    char *html = render(&in);
    assert_has(html, "<div class=\"phase\" id=\"phase\" >");
    assert_has(html, "<strong id=\"phase-name\">presale</strong>");
    assert_has(html, "Code holders &lt;b&gt;only&lt;/b&gt; &amp; friends");
    assert_lacks(html, "<b>only</b>");
    assert_has(html, "datetime=\"2026-12-01T12:00:00.000Z\"");
    assert_has(html, "General sale &quot;at noon&quot;");
    assert_has(html, "<form id=\"code-form\" method=\"post\" action=\"/q/e1/join\" >");
    assert_has(html, "data-needs-code=\"1\"");
    /* the schedule for the script, escaped in its attribute */
    assert_has(html, "data-phases=\"[{&quot;n&quot;:&quot;presale&quot;,&quot;d&quot;:"
                     "&quot;&lt;b&gt;&quot;}]\"");
    /* the plain join button (no code) is not offered, nor "getting you a place" said */
    assert_has(html, "<div hidden><form id=\"join-form\"");
    assert_has(html, "<p class=\"lead\" id=\"joining\" hidden>");
    free(html);

    in.state = GW_PAGE_QUEUED; /* a fan with a place is not asked again */
    in.position = 3;
    html = render(&in);
    assert_has(html, "<form id=\"code-form\" method=\"post\" action=\"/q/e1/join\" hidden>");
    free(html);

    gw_page_info_t plain = {.event = "e1", .state = GW_PAGE_NEW};
    html = render(&plain);
    assert_has(html, "<div class=\"phase\" id=\"phase\" hidden>");
    assert_has(html, "<p class=\"note\" id=\"phase-next\" hidden>");
    assert_has(html, "<form id=\"code-form\" method=\"post\" action=\"/q/e1/join\" hidden>");
    assert_has(html, "data-needs-code=\"0\"");
    assert_has(html, "data-phases=\"[]\"");
    free(html);
}

static void test_admitted(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1",
                         .state = GW_PAGE_ADMITTED,
                         .admission_token = "eyJ.eyJ.sig",
                         .redirect_url = "https://shop.example/checkout"};
    char *html = render(&in);
    assert_only_visible(html, "admitted");
    /* docs/api.md v1.1: the token travels in the fragment, never in the query string */
    assert_has(html, "content=\"0;url=https://shop.example/checkout#admission_token=eyJ.eyJ.sig\"");
    assert_has(html, "data-redirect=\"https://shop.example/checkout#admission_token=eyJ.eyJ.sig\"");
    assert_lacks(html, "?admission_token");
    assert_has(html, "<p id=\"continue\" >");
    assert_has(html, "data-handoff=\"fragment\"");
    assert_has(html, "<form id=\"handoff\" method=\"post\" action=\"\" hidden>");
    assert_has(html, "aria-valuenow=\"100\"");
    free(html);
    char *csp = gw_page_csp(&in);
    assert_has(csp, "form-action 'none'");
    free(csp);

    /* post: a form to redirect_url carrying the token, no forwarding URL with it anywhere */
    in.handoff_post = true;
    in.redirect_url = "https://shop.example:8443/checkout?ev=e1";
    html = render(&in);
    assert_only_visible(html, "admitted");
    assert_has(html, "data-handoff=\"post\"");
    assert_has(html, "<form id=\"handoff\" method=\"post\" "
                     "action=\"https://shop.example:8443/checkout?ev=e1\" >");
    assert_has(html, "<input type=\"hidden\" name=\"admission_token\" value=\"eyJ.eyJ.sig\">");
    assert_has(html, "<p id=\"continue\" hidden>");
    assert_has(html, "data-redirect=\"\"");
    assert_lacks(html, "url=https://");
    assert_has(html, "content=\"3600\"");
    free(html);
    csp = gw_page_csp(&in);
    assert_has(csp, "form-action https://shop.example:8443");
    assert_lacks(csp, "checkout");
    free(csp);
    in.state = GW_PAGE_QUEUED;
    csp = gw_page_csp(&in); /* only the admitted page may post anywhere */
    assert_has(csp, "form-action 'none'");
    free(csp);
    in.state = GW_PAGE_ADMITTED;
    in.handoff_post = false;
    in.redirect_url = "https://shop.example/checkout";

    /* a javascript: URL is never linked: no forward, the link paragraph hidden */
    in.redirect_url = "javascript:alert(1)";
    html = render(&in);
    assert_lacks(html, "=\"javascript:");
    assert_lacks(html, "url=javascript:");
    assert_has(html, "<p id=\"continue\" hidden>");
    assert_has(html, "data-redirect=\"\"");
    assert_has(html, "content=\"3600\"");
    free(html);
    in.handoff_post = true; /* nor a form posted there */
    html = render(&in);
    assert_has(html, "action=\"\" hidden>");
    assert_lacks(html, "value=\"eyJ");
    free(html);
}

/* 'sha256-<base64>' of [p, end), computed here with OpenSSL directly. */
static void hash_source(const char *p, const char *end, char *out, size_t outlen)
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    assert_int_equal(EVP_Digest(p, (size_t)(end - p), md, &mdlen, EVP_sha256(), NULL), 1);
    unsigned char b64[64];
    EVP_EncodeBlock(b64, md, (int)mdlen);
    snprintf(out, outlen, "'sha256-%s'", b64);
}

/* Every <script>/<style> element of html after its head comment, as rendered. */
static int assert_elements_hashed(const char *html, const char *csp, const char *tag)
{
    char open[16], close[16], src[80];
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    const char *p = strstr(html, "-->"); /* the head comment names the tags */
    int n = 0;
    while ((p = strstr(p, open)) != NULL) {
        const char *body = p + strlen(open), *end = strstr(body, close);
        assert_non_null(end);
        hash_source(body, end, src, sizeof(src));
        assert_has(csp, src);
        p = end;
        n++;
    }
    return n;
}

/* CSP without 'unsafe-inline'; the page's own elements allowed by hash. */
static void test_csp_hashes(void **s)
{
    (void)s;
    static const gw_page_state_t states[] = {GW_PAGE_NEW, GW_PAGE_QUEUED, GW_PAGE_PREQUEUE,
                                             GW_PAGE_ADMITTED, GW_PAGE_SOLD_OUT};
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        gw_page_info_t in = {.event = "e1",
                             .state = states[i],
                             .position = 3,
                             .queue_size = 9,
                             .admission_token = "a.b.c",
                             .redirect_url = "https://shop.example/x"};
        char *html = render(&in);
        char *csp = gw_page_csp(&in);
        assert_lacks(csp, "unsafe");
        assert_has(csp, "default-src 'none'; ");
        assert_has(csp, "frame-ancestors 'none'");
        assert_has(csp, "base-uri 'none'");
        assert_int_equal(assert_elements_hashed(html, csp, "script"), 1);
        assert_int_equal(assert_elements_hashed(html, csp, "style"), 1);
        /* a hash cannot allow attributes: the page must have none of these */
        assert_lacks(html, " style=\"");
        assert_lacks(html, " onclick=");
        assert_lacks(html, " onload=");
        free(csp);
        free(html);
    }
    extern const char gw_www_dashboard_html[];
    const char *dash = gw_page_dashboard_csp();
    assert_lacks(dash, "unsafe");
    assert_has(dash, "form-action 'self'");
    assert_int_equal(assert_elements_hashed(gw_www_dashboard_html, dash, "script"), 1);
    assert_int_equal(assert_elements_hashed(gw_www_dashboard_html, dash, "style"), 1);
    assert_lacks(gw_www_dashboard_html, " style=\"");
}

static void test_forward_url(void **s)
{
    (void)s;
    char *u = gw_page_forward_url("https://a.example/x", "t.o-k_e~n");
    assert_string_equal(u, "https://a.example/x#admission_token=t.o-k_e~n");
    free(u);
    u = gw_page_forward_url("https://a.example/x?ev=1", "tok");
    assert_string_equal(u, "https://a.example/x?ev=1#admission_token=tok");
    free(u);
    u = gw_page_forward_url("HTTPS://a.example/?q", "a b+/=");
    assert_string_equal(u, "HTTPS://a.example/?q#admission_token=a%20b%2B%2F%3D");
    free(u);
    u = gw_page_forward_url("http://127.0.0.1:8080/shop", "tok"); /* allowed by configuration */
    assert_string_equal(u, "http://127.0.0.1:8080/shop#admission_token=tok");
    free(u);
    u = gw_page_forward_url("https://a.example/", NULL);
    assert_string_equal(u, "https://a.example/");
    free(u);
    assert_null(gw_page_forward_url(NULL, "tok"));
    assert_null(gw_page_forward_url("", "tok"));
    assert_null(gw_page_forward_url("javascript:alert(1)", "tok"));
    assert_null(gw_page_forward_url("data:text/html,x", "tok"));
    assert_null(gw_page_forward_url("shop.example/x", "tok"));
    assert_null(gw_page_forward_url("/checkout", "tok"));
    assert_null(gw_page_forward_url("https://a.example/x#pay", "tok"));
    assert_null(gw_page_forward_url("http://shop.example/x", "tok"));
    assert_null(gw_page_forward_url("https://a.example/x y", "tok"));
    assert_null(gw_page_forward_url("https://a.example/\nx", "tok"));
}

static void test_prequeue(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1",
                         .state = GW_PAGE_PREQUEUE,
                         .position = -1,
                         .queue_size = -1,
                         .eta_seconds = -1,
                         .poll_after_ms = 10000,
                         .opens_at_ms = 1796119200000LL}; /* 2026-12-01T10:00:00Z */
    char *html = render(&in);
    assert_only_visible(html, "prequeue");
    assert_has(html, "datetime=\"2026-12-01T10:00:00.000Z\"");
    assert_has(html, ">2026-12-01 10:00 UTC</time>");
    assert_has(html, "data-opens-at=\"1796119200000\"");
    assert_has(html, "content=\"10\"");
    assert_has(html, "data-from=\"0\"");
    free(html);

    in.opens_at_ms = 0;
    html = render(&in);
    assert_has(html, ">soon</time>");
    free(html);
}

static void test_terminal_and_unknown(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1", .state = GW_PAGE_SOLD_OUT};
    char *html = render(&in);
    assert_only_visible(html, "sold_out");
    assert_has(html, "<h1 id=\"title\">Sold out</h1>");
    assert_has(html, "content=\"3600\"");
    assert_has(html, "<p hidden>JavaScript is off");
    free(html);

    in.state = GW_PAGE_CLOSED;
    html = render(&in);
    assert_only_visible(html, "closed");
    free(html);

    /* a state outside the enum: the page starts as "new" and the script joins; without
     * JavaScript it does not reload (a GET takes no place) but offers its join form */
    in.state = (gw_page_state_t)99;
    html = render(&in);
    assert_only_visible(html, "new");
    assert_has(html, "data-state=\"new\"");
    assert_has(html, "content=\"3600\"");
    assert_has(html, "<p hidden>JavaScript is off");
    assert_has(html, "<form id=\"join-form\" method=\"post\" action=\"/q/e1/join\">");
    free(html);
    in.state = GW_PAGE_QUEUED;
    in.position = 9;
    in.queue_size = 4; /* sampled before this fan joined */
    in.poll_after_ms = 800;
    html = render(&in);
    assert_has(html, "<dd id=\"queue-size\">9</dd>");
    assert_has(html, "reloads by itself every second.");
    free(html);
    in.state = GW_PAGE_NEW;
    in.event = NULL;
    html = render(&in);
    assert_only_visible(html, "new");
    assert_has(html, "data-event=\"\"");
    free(html);
}

static void test_eta_and_refresh_bounds(void **s)
{
    (void)s;
    static const struct {
        int64_t eta;
        const char *text;
    } cases[] = {
        {-1, "calculating"},        {0, "under a minute"},     {59, "under a minute"},
        {60, "about 1 minute<"},    {61, "about 2 minutes"},   {3599, "about 60 minutes"},
        {3600, "about 1 h<"},       {3601, "about 1 h 1 min"}, {7199, "about 2 h<"},
        {5400, "about 1 h 30 min"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gw_page_info_t in = {.event = "e1",
                             .state = GW_PAGE_QUEUED,
                             .position = 7,
                             .queue_size = 7,
                             .eta_seconds = cases[i].eta,
                             .poll_after_ms = 1};
        char *html = render(&in);
        assert_has(html, cases[i].text);
        /* 1 ms rounds up to 1 s */
        assert_has(html, "content=\"1;url=?from=7\"");
        free(html);
    }
    gw_page_info_t big = {.event = "e1",
                          .state = GW_PAGE_QUEUED,
                          .position = 1000000,
                          .queue_size = 1234567890,
                          .poll_after_ms = INT64_MAX};
    char *html = render(&big);
    assert_has(html, "content=\"600;url=?from=1000000\"");
    assert_has(html, ">1,234,567,890<");
    assert_has(html, ">1,000,000<");
    free(html);
}

static char *answer(int code, const char *json, int *page_code)
{
    json_error_t e;
    json_t *body = json ? json_loads(json, 0, &e) : NULL;
    if (json && body == NULL)
        fail_msg("bad test JSON: %s", e.text);
    size_t len = 0;
    gw_page_info_t base = {.event = "e1"};
    char *html = gw_page_render_answer(&base, code, body, page_code, &len);
    json_decref(body);
    assert_non_null(html);
    assert_int_equal(len, strlen(html));
    if (strstr(html, "{{") != NULL)
        fail_msg("unfilled placeholder near: %.60s", strstr(html, "{{"));
    return html;
}

/* Sold out for now (the room follows the stock): the place is kept, the page refreshes by
 * itself and says so; "left" on a queued page only where the room shows it. */
static void test_returns_and_left(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1",
                         .state = GW_PAGE_RETURNS,
                         .position = 87,
                         .queue_size = 900,
                         .eta_seconds = -1,
                         .poll_after_ms = 12000};
    char *html = render(&in);
    assert_only_visible(html, "returns");
    assert_false(section_hidden(html, "returns"));
    assert_has(html, "data-state=\"returns\"");
    assert_has(html, "<dd id=\"returns-position\">87</dd>");
    assert_has(html, "Sold out, for now.");
    assert_has(html, "<meta http-equiv=\"refresh\" content=\"12\">");
    free(html);
    int code = 0;
    html = answer(200,
                  "{\"event\":\"e1\",\"state\":\"sold_out\",\"returns_possible\":true,"
                  "\"ticket\":\"t\",\"position\":3,\"queue_size\":9,\"held\":4,"
                  "\"poll_after_ms\":2000}",
                  &code);
    assert_int_equal(code, 200);
    assert_has(html, "data-state=\"returns\"");
    free(html);
    html = answer(410, "{\"error\":\"sold_out\",\"message\":\"x\"}", &code);
    assert_has(html, "data-state=\"sold_out\"");
    free(html);
    gw_page_info_t q = {.event = "e1",
                        .state = GW_PAGE_QUEUED,
                        .position = 5,
                        .queue_size = 9,
                        .eta_seconds = 3,
                        .poll_after_ms = 1000,
                        .show_left = true,
                        .left = 1234};
    html = render(&q);
    assert_has(html, "<p class=\"note\" id=\"left\" >1,234 tickets left.</p>");
    free(html);
    q.show_left = false;
    html = render(&q);
    assert_has(html, "<p class=\"note\" id=\"left\" hidden></p>");
    free(html);
}

/* The JSON answers of join/status, as the page renders them for GET /q/{event}. */
static void test_answers(void **s)
{
    (void)s;
    int code = 0;
    char *html = answer(201,
                        "{\"event\":\"e1\",\"state\":\"queued\",\"ticket\":\"t\",\"position\":1234,"
                        "\"queue_size\":50210,\"eta_seconds\":null,\"poll_after_ms\":5000}",
                        &code);
    assert_int_equal(code, 200);
    assert_only_visible(html, "queued");
    assert_has(html, "<dd id=\"position\">1,234</dd>");
    assert_has(html, "Estimated wait: calculating."); /* eta null */
    assert_has(html, "content=\"5;url=?from=1234\"");
    assert_has(html, "<section id=\"s-error\" aria-labelledby=\"title\" hidden>");
    free(html);

    html = answer(200,
                  "{\"event\":\"e1\",\"state\":\"prequeue\",\"opens_at\":\"2026-12-01T10:00:00Z\","
                  "\"ticket\":\"t\",\"poll_after_ms\":10000}",
                  &code);
    assert_int_equal(code, 200);
    assert_only_visible(html, "prequeue");
    assert_has(html, "data-opens-at=\"1796119200000\"");
    free(html);

    html = answer(200,
                  "{\"event\":\"e1\",\"state\":\"admitted\",\"admission_token\":\"h.c.s\","
                  "\"expires_at\":\"x\",\"redirect_url\":\"https://r.example/buy\"}",
                  &code);
    assert_int_equal(code, 200);
    assert_only_visible(html, "admitted");
    assert_has(html, "content=\"0;url=https://r.example/buy#admission_token=h.c.s\"");
    free(html);

    html = answer(200,
                  "{\"event\":\"e1\",\"state\":\"admitted\",\"admission_token\":\"h.c.s\","
                  "\"expires_at\":\"x\",\"redirect_url\":\"https://r.example/buy\","
                  "\"handoff\":\"post\"}",
                  &code);
    assert_has(html, "action=\"https://r.example/buy\" >");
    assert_has(html, "value=\"h.c.s\"");
    assert_lacks(html, "url=https://r.example");
    free(html);

    html = answer(410, "{\"error\":\"sold_out\",\"message\":\"m\"}", &code);
    assert_int_equal(code, 200);
    assert_only_visible(html, "sold_out");
    free(html);
    html = answer(410, "{\"error\":\"closed\",\"message\":\"m\"}", &code);
    assert_int_equal(code, 200);
    assert_only_visible(html, "closed");
    free(html);
}

static void assert_error_page(const char *html, const char *state, const char *text)
{
    char attr[64];
    snprintf(attr, sizeof(attr), "data-state=\"%s\"", state);
    assert_has(html, attr);
    assert_has(html, "<section id=\"s-error\" aria-labelledby=\"title\" >");
    assert_has(html, text);
    assert_true(section_hidden(html, "queued"));
    assert_true(section_hidden(html, "new"));
}

static void test_error_answers(void **s)
{
    (void)s;
    int code = 0;
    char *html = answer(404, "{\"error\":\"unknown_event\",\"message\":\"m\"}", &code);
    assert_int_equal(code, 404);
    assert_error_page(html, "unknown", "There is no waiting room at this address.");
    assert_has(html, "content=\"3600\"");
    free(html);

    html = answer(410, "{\"error\":\"admission_expired\",\"message\":\"m\"}", &code);
    assert_int_equal(code, 200);
    assert_error_page(html, "expired", "has expired");
    free(html);

    html = answer(429, "{\"error\":\"rate_limited\",\"message\":\"m\",\"retry_after_seconds\":7}",
                  &code);
    assert_int_equal(code, 429);
    assert_error_page(html, "busy", "arriving from your network");
    assert_has(html, "content=\"7\"");
    assert_has(html, "data-poll=\"7000\"");
    free(html);

    html = answer(503, "{\"error\":\"unavailable\",\"message\":\"m\"}", &code);
    assert_int_equal(code, 503);
    assert_error_page(html, "unavailable", "tries again by itself");
    assert_has(html, "content=\"5\"");
    free(html);

    html = answer(200, NULL, &code);
    assert_int_equal(code, 503);
    assert_error_page(html, "unavailable", "tries again");
    free(html);

    /* a stale ticket: the page starts over and the script joins */
    html = answer(401, "{\"error\":\"invalid_ticket\",\"message\":\"m\"}", &code);
    assert_int_equal(code, 200);
    assert_only_visible(html, "new");
    free(html);
}

/* A room with proof of work: the script is told (data-pow), the no-JS form gives way to
 * a note, and a form join refused for its missing proof says JavaScript is needed. */
static void test_pow(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1",
                         .state = GW_PAGE_NEW,
                         .position = -1,
                         .queue_size = -1,
                         .eta_seconds = -1,
                         .pow = true,
                         .pow_challenge = "AQ-_x",
                         .pow_bits = 17};
    char *html = render(&in);
    assert_has(html, "data-pow=\"1\"");
    assert_has(html, "data-pow-challenge=\"AQ-_x\" data-pow-bits=\"17\"");
    assert_has(html, "<div hidden><form id=\"join-form\" method=\"post\" action=\"/q/e1/join\">");
    assert_has(html, "<p >To keep ticket bots out");
    free(html);
    in.pow = false;
    html = render(&in);
    assert_has(html, "data-pow=\"0\"");
    assert_has(html, "<div ><form id=\"join-form\" method=\"post\" action=\"/q/e1/join\">");
    assert_has(html, "<p hidden>To keep ticket bots out");
    free(html);
    char *csp = gw_page_csp(&in);
    assert_non_null(strstr(csp, "worker-src 'self'"));
    free(csp);
    int code = 0;
    html = answer(428, "{\"error\":\"pow_required\",\"message\":\"m\"}", &code);
    assert_int_equal(code, 428);
    assert_error_page(html, "javascript", "needs JavaScript");
    free(html);
}

/* The language by Accept-Language: <html lang>, the page's own words, numbers grouped as
 * the language writes them, the script's catalogue; English when nothing fits. */
static void test_languages(void **s)
{
    (void)s;
    static const struct {
        const char *header, *lang, *status, *sold_out;
    } cases[] = {
        {NULL, "en", "You are number 1,234 in line. Estimated wait: about 2 minutes.", "Sold out"},
        {"pt-BR, de;q=0.8, en;q=0.5", "de",
         "Sie sind Nummer 1.234 in der Warteschlange. Geschätzte Wartezeit: etwa 2 Minuten.",
         "Ausverkauft"},
        {"fr-CH", "fr",
         "Vous êtes numéro 1\u202f234 dans la file. Attente estimée\u00a0:\u00a0environ 2 "
         "minutes.",
         "Complet"},
        {"es-419,es;q=0.9", "es",
         "Eres el número 1.234 de la cola. Espera estimada: alrededor de 2 minutos.", "Agotado"},
        {"ja, zh;q=0.5", "en", "You are number 1,234 in line.", "Sold out"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gw_page_info_t in = {.event = "e1",
                             .state = GW_PAGE_QUEUED,
                             .position = 1234,
                             .queue_size = 5000,
                             .eta_seconds = 100,
                             .poll_after_ms = 5000,
                             .accept_language = cases[i].header};
        char *html = render(&in);
        char want[64];
        snprintf(want, sizeof(want), "<html lang=\"%s\">", cases[i].lang);
        assert_has(html, want);
        assert_has(html, cases[i].status);
        /* the script's catalogue: the same language */
        snprintf(want, sizeof(want), "&quot;title_sold_out&quot;:&quot;%s&quot;",
                 cases[i].sold_out);
        assert_has(html, want);
        if (strcmp(cases[i].lang, "en") != 0) {
            /* nothing of the English page is left in a translated one */
            static const char *const english[] = {"Skip to the queue",
                                                  "Waiting room:",
                                                  "Your place",
                                                  "Est. wait",
                                                  "Progress to the front",
                                                  "percent of the way",
                                                  "When it is your turn",
                                                  "Do not open many tabs",
                                                  "You are in the queue",
                                                  "reloads by itself"};
            for (size_t e = 0; e < sizeof(english) / sizeof(english[0]); e++)
                assert_lacks(html, english[e]);
        }
        free(html);
    }
    /* the terminal and error pages too */
    gw_page_info_t base = {.event = "e1", .accept_language = "de"};
    int code = 0;
    size_t len = 0;
    json_t *body = json_pack("{s:s, s:s}", "error", "unknown_event", "message", "m");
    char *html = gw_page_render_answer(&base, 404, body, &code, &len);
    json_decref(body);
    assert_has(html, "<html lang=\"de\">");
    assert_has(html, "Diesen Warteraum gibt es nicht");
    assert_has(html, "Unter dieser Adresse gibt es keinen Warteraum.");
    free(html);
    body = json_pack("{s:s, s:s}", "error", "code_unknown", "message", "unknown code");
    base.accept_language = "es";
    html = gw_page_render_answer(&base, 403, body, &code, &len);
    json_decref(body);
    assert_has(html, "No reconocemos este código.");
    assert_lacks(html, "unknown code");
    free(html);
}

/* A room's look: its title escaped, its logo an allowed URL whose origin alone joins
 * img-src, its colours a hashed <style> of six hex digits each; hostile values never
 * reach the markup, the CSS or the policy. */
static void test_brand(void **s)
{
    (void)s;
    gw_page_info_t in = {.event = "e1",
                         .state = GW_PAGE_QUEUED,
                         .position = 3,
                         .queue_size = 9,
                         .brand = {.title = "</script><script>alert(1)</script>\"'&",
                                   .logo_url = "https://cdn.example.com/l/logo.png?v=1",
                                   .color = "#FFCC00",
                                   .background = "#102030"}};
    char *html = render(&in);
    char *csp = gw_page_csp(&in);
    assert_has(html, "<span id=\"brand-title\">&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
                     "&quot;&#39;&amp;</span>");
    assert_lacks(html, "<script>alert");
    assert_has(html,
               "<img class=\"logo\" src=\"https://cdn.example.com/l/logo.png?v=1\" alt=\"\" >");
    assert_has(csp, "img-src 'self' data: https://cdn.example.com; ");
    const char *style = ":root{--accent:#FFCC00;--accent-fg:#16181d;--bg:#102030;}";
    char want[160], src[80];
    snprintf(want, sizeof(want), "<style>%s</style>", style);
    assert_has(html, want);
    hash_source(style, style + strlen(style), src, sizeof(src));
    assert_has(csp, src);
    assert_int_equal(assert_elements_hashed(html, csp, "style"), 2);
    assert_lacks(csp, "unsafe");
    free(csp);
    free(html);

    gw_page_info_t plain = in;
    plain.brand = (gw_page_brand_t){0};
    char *plain_csp = gw_page_csp(&plain);
    html = render(&plain);
    assert_has(html, "<span id=\"brand-title\">onsale</span>");
    assert_has(html, "<img class=\"logo\" src=\"\" alt=\"\" hidden>");
    free(html);
    /* hostile values are left out whole: the page and its policy as without a brand */
    static const gw_page_brand_t hostile[] = {
        {.color = "red"},
        {.color = "#12345g"},
        {.color = "#1234567"},
        {.color = "#123;}*{background:url(https://evil.example/x)}"},
        {.background = "url(https://evil.example/x)"},
        {.background = "#fff"},
        {.logo_url = "javascript:alert(1)"},
        {.logo_url = "http://evil.example/logo.png"},
        {.logo_url = "https://evil.example/a\"onerror=\"alert(1)"},
        {.logo_url = "https://evil.example/a;script-src *"},
        {.logo_url = "data:image/svg+xml,<svg onload=alert(1)>"},
    };
    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        in.brand = hostile[i];
        html = render(&in);
        csp = gw_page_csp(&in);
        if (strcmp(csp, plain_csp) != 0 && hostile[i].logo_url == NULL)
            fail_msg("case %zu: the policy changed: %s", i, csp);
        assert_lacks(csp, "evil");
        assert_lacks(html, "evil.example/x");
        assert_lacks(html, "url(");
        assert_lacks(html, "onerror=\"");
        assert_lacks(html, "src=\"javascript");
        assert_lacks(html, "src=\"data");
        assert_int_equal(assert_elements_hashed(html, csp, "style"), 1);
        free(csp);
        free(html);
    }
    free(plain_csp);
    assert_true(gw_page_color_valid("#a0B1c2"));
    assert_false(gw_page_color_valid("#a0B1c"));
    assert_false(gw_page_color_valid(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queued),
        cmocka_unit_test(test_progress_baseline),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_phase_and_code_field),
        cmocka_unit_test(test_admitted),
        cmocka_unit_test(test_forward_url),
        cmocka_unit_test(test_csp_hashes),
        cmocka_unit_test(test_prequeue),
        cmocka_unit_test(test_terminal_and_unknown),
        cmocka_unit_test(test_eta_and_refresh_bounds),
        cmocka_unit_test(test_returns_and_left),
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_error_answers),
        cmocka_unit_test(test_pow),
        cmocka_unit_test(test_languages),
        cmocka_unit_test(test_brand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
