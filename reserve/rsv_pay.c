/*
 * rsv_pay — see rsv_pay.h.
 *
 * Shape: one libcurl multi handle per client (so per worker: each worker owns its loop and
 * its rsv_pay), driven by that worker's libevent loop. libcurl tells us which sockets to
 * watch (CURLMOPT_SOCKETFUNCTION → one event per socket) and when it next needs a tick
 * (CURLMOPT_TIMERFUNCTION → one timer); both hand control back through
 * curl_multi_socket_action, after which finished transfers are collected from
 * curl_multi_info_read and reported. Each call is one easy handle (struct call) that is
 * removed and freed when it completes; the multi keeps the connections (its connection
 * cache: keep-alive across calls), and a share handle keeps TLS sessions and DNS answers,
 * so a reconnect resumes the TLS session instead of a full handshake.
 *
 * Why libcurl (issue 9 asked to choose it or argue): it does pooling, keep-alive,
 * asynchronous DNS (Debian's build uses the threaded resolver: getaddrinfo runs on a
 * helper thread, never on the loop), certificate and host-name checks, connect and total
 * deadlines — each of which the evhttp client before it either lacked or had to rebuild by
 * hand. It never blocks here: every transfer runs through curl_multi_socket_action.
 *
 * Library rules relied on: curl_multi_add_handle, _remove_handle and _socket_action must
 * not be called from inside libcurl's own callbacks — we call them only from our event
 * callbacks and from check_done, which runs after curl_multi_socket_action returned. A
 * finished easy handle is removed from the multi before curl_easy_cleanup. Transport
 * retries are off (libcurl retries nothing unless asked; redirects are not followed).
 * curl_global_init runs once per process (pthread_once).
 */
#include "rsv_pay.h"

#include <curl/curl.h>
#include <strings.h>
#include <event2/event.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_reload.h"
#include "cm_time.h"
#include "rsv_pay_adapter.h"

/* Answers are bounded: one charge or refund is a small object; a ledger page (up to
 * PAGE_LIMIT charges with their metadata, rsv_ledger) needs more room. */
#define BODY_MAX      (64 * 1024)
#define LIST_BODY_MAX (4 * 1024 * 1024)

typedef struct call call_t;
struct call {
    call_t *prev, *next;
    rsv_pay_t *p;
    CURL *easy;
    struct curl_slist *headers;
    char *body; /* the answer read so far */
    size_t len;
    size_t max;    /* bound on the answer's size */
    bool too_big;  /* the answer passed max: abandoned */
    bool replayed; /* Idempotent-Replayed: true */
    rsv_pay_answer_cb cb;
    void *arg;
    uint64_t start_ns;
};

/* One socket libcurl asked us to watch. */
typedef struct sock {
    struct sock *prev, *next;
    rsv_pay_t *p;
    curl_socket_t fd;
    struct event *ev;
} sock_t;

struct rsv_pay {
    struct event_base *base;
    rsv_pay_url_t url;
    char *base_url; /* scheme://host:port[/prefix], without a trailing '/' */
    char *ca_file;
    char *return_url;
    const rsv_pay_adapter_t *adapter;
    cm_reload_cell_t *auth; /* "Authorization: Bearer <key>", or "" without a key; live */
    int connect_timeout_ms, timeout_ms;
    CURLM *multi;
    CURLSH *share;
    struct event *timer;
    call_t *calls;
    sock_t *socks;
    int inflight;
    bool closing;
};

/* --- metrics ------------------------------------------------------------------------ */

const char *const rsv_pay_outcome_names[RSV_PAY_OUTCOME_COUNT] = {
    [RSV_PAY_PAID] = "paid",         [RSV_PAY_DECLINED] = "declined", [RSV_PAY_NONE] = "none",
    [RSV_PAY_REFUNDED] = "refunded", [RSV_PAY_UNKNOWN] = "unknown",   [RSV_PAY_LISTED] = "listed",
    [RSV_PAY_ACTION] = "action",
};

const char *const rsv_pay_op_names[RSV_PAY_OP_COUNT] = {
    [RSV_PAY_OP_CHARGE] = "charge",
    [RSV_PAY_OP_LOOKUP] = "lookup",
    [RSV_PAY_OP_REFUND] = "refund",
    [RSV_PAY_OP_LIST] = "list",
};

void rsv_pay_metrics_register(rsv_pay_metrics_t *pm, cm_metrics_t *reg)
{
    char labels[32];
    cm_metrics_counters(reg, "onsale_reserve_payment_outcomes_total",
                        "payment provider answers by outcome", "outcome", rsv_pay_outcome_names,
                        RSV_PAY_OUTCOME_COUNT, pm->outcomes);
    for (int op = 0; op < RSV_PAY_OP_COUNT; op++) {
        pm->latency[op] = NULL;
        if (op == RSV_PAY_OP_LIST)
            continue; /* not timed (see rsv_pay_metrics_t) */
        snprintf(labels, sizeof(labels), "op=\"%s\"", rsv_pay_op_names[op]);
        pm->latency[op] = cm_metrics_histogram(
            reg, "onsale_reserve_payment_seconds", "payment provider call latency", labels,
            cm_metrics_latency_bounds, cm_metrics_latency_nbounds);
    }
}

/* --- pure parts ---------------------------------------------------------------------- */

static bool host_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-';
}

int rsv_pay_parse_url(const char *url, rsv_pay_url_t *out)
{
    memset(out, 0, sizeof(*out));
    const char *p;
    if (strncmp(url, "https://", 8) == 0) {
        out->tls = true;
        p = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        p = url + 7;
    } else {
        return -1;
    }
    /* A host name or an IPv4 literal (letters, digits, '.', '-'): no user info, no IPv6
     * brackets, no '%' escapes — whatever reaches libcurl is exactly what was checked. */
    size_t hl = 0;
    while (host_char((unsigned char)p[hl]))
        hl++;
    if (hl == 0 || hl >= sizeof(out->host) || p[0] == '.' || p[0] == '-' || p[hl - 1] == '-')
        return -1;
    memcpy(out->host, p, hl);
    out->host[hl] = '\0';
    p += hl;
    out->port = out->tls ? 443 : 80;
    if (*p == ':') {
        char *end = NULL;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || p[1] < '0' || p[1] > '9' || port < 1 || port > 65535)
            return -1;
        out->port = (int)port;
        p = end;
    }
    if (*p != '\0' && *p != '/')
        return -1;
    size_t pl = strlen(p);
    while (pl > 0 && p[pl - 1] == '/')
        pl--;
    if (pl >= sizeof(out->prefix) || strpbrk(p, "?#% \\") != NULL)
        return -1;
    memcpy(out->prefix, p, pl);
    out->prefix[pl] = '\0';
    return 0;
}
/* --- calls --------------------------------------------------------------------------- */

static void call_unlink(call_t *c)
{
    rsv_pay_t *p = c->p;
    if (c->prev)
        c->prev->next = c->next;
    else
        p->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    p->inflight--;
}

/* Ends a call: takes its easy handle out of the multi, frees everything, then reports. */
static void call_finish(call_t *c, rsv_pay_answer_t *a)
{
    a->seconds = (double)(cm_time_mono_ns() - c->start_ns) / 1e9;
    call_unlink(c);
    curl_multi_remove_handle(c->p->multi, c->easy);
    curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->headers);
    char *body = c->body;
    rsv_pay_answer_cb cb = c->cb;
    void *arg = c->arg;
    free(c);
    cb(a, arg);
    free(body);
}

static void fail_call(call_t *c, const char *err)
{
    rsv_pay_answer_t a = {.err = err};
    call_finish(c, &a);
}

/* A transfer libcurl finished: an answer, or a transport failure (code != CURLE_OK). */
static void on_transfer_done(call_t *c, CURLcode code)
{
    rsv_pay_answer_t a = {0};
    long status = 0;
    if (code == CURLE_OK)
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    if (code != CURLE_OK || status == 0) {
        if (code == CURLE_OPERATION_TIMEDOUT) {
            cm_log(CM_LOG_WARN, "payment provider: no answer within the deadline");
            a.err = cm_err_timeout;
        } else if (c->too_big || code == CURLE_FILESIZE_EXCEEDED) {
            cm_log(CM_LOG_WARN, "payment provider: answer larger than %zu bytes", c->max);
            a.err = cm_err_protocol;
        } else {
            cm_log(CM_LOG_WARN, "payment provider: %s", curl_easy_strerror(code));
            a.err = cm_err_closed;
        }
    } else {
        a.status = (int)status;
        a.body = c->len ? c->body : NULL;
        a.len = c->len;
        a.replayed = c->replayed;
    }
    call_finish(c, &a);
}

/* Reports every finished transfer. Runs after curl_multi_socket_action returned, so the
 * callbacks it runs may start new calls. */
static void check_done(rsv_pay_t *p)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(p->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        call_t *c = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        on_transfer_done(c, m->data.result);
    }
}

static void on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    sock_t *s = arg;
    rsv_pay_t *p = s->p; /* s may be freed by the call below */
    int flags =
        ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(p->multi, fd, flags, &running);
    check_done(p);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    rsv_pay_t *p = arg;
    int running;
    curl_multi_socket_action(p->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(p);
}

static void sock_free(rsv_pay_t *p, sock_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        p->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    event_free(s->ev);
    free(s);
}

/* CURLMOPT_SOCKETFUNCTION: watch fd for what libcurl wants, or stop watching it. */
static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    rsv_pay_t *p = userp;
    sock_t *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s)
            sock_free(p, s);
        curl_multi_assign(p->multi, fd, NULL);
        return 0;
    }
    if (s == NULL) {
        s = cm_xcalloc(1, sizeof(*s));
        s->p = p;
        s->fd = fd;
        s->next = p->socks;
        if (p->socks)
            p->socks->prev = s;
        p->socks = s;
        curl_multi_assign(p->multi, fd, s);
    } else {
        event_free(s->ev);
    }
    short ev = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
               ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    s->ev = event_new(p->base, fd, ev, on_socket_event, s);
    event_add(s->ev, NULL);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: libcurl's next tick, -1 = none. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    rsv_pay_t *p = userp;
    if (timeout_ms < 0) {
        evtimer_del(p->timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(p->timer, &tv);
    return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    call_t *c = arg;
    size_t n = size * nmemb;
    if (c->len + n >= c->max) {
        c->too_big = true;
        return 0; /* abandons the transfer (CURLE_WRITE_ERROR) */
    }
    c->body = cm_xrealloc(c->body, c->len + n + 1);
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = '\0';
    return n;
}

/* CURLOPT_HEADERFUNCTION: notes Idempotent-Replayed: true (Stripe's mark on a stored answer). */
static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    call_t *c = arg;
    size_t n = size * nmemb;
    static const char name[] = "Idempotent-Replayed:";
    size_t nl = sizeof(name) - 1;
    if (n > nl && strncasecmp(data, name, nl) == 0) {
        const char *v = data + nl;
        size_t vl = n - nl;
        while (vl > 0 && (*v == ' ' || *v == '\t')) {
            v++;
            vl--;
        }
        c->replayed = vl >= 4 && strncasecmp(v, "true", 4) == 0;
    }
    return n;
}

int rsv_pay_http(rsv_pay_t *p, bool post, const char *path, const char *key, const char *form,
                 bool big, rsv_pay_answer_cb cb, void *arg)
{
    if (p->closing)
        return -1;
    call_t *c = cm_xcalloc(1, sizeof(*c));
    c->p = p;
    c->cb = cb;
    c->arg = arg;
    c->start_ns = cm_time_mono_ns();
    c->easy = curl_easy_init();
    if (c->easy == NULL)
        abort(); /* allocation failure */
    char *url = cm_xasprintf("%s%s", p->base_url, path);
    CURL *e = c->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    free(url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, c);
    curl_easy_setopt(e, CURLOPT_SHARE, p->share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)p->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)p->timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    c->max = big ? LIST_BODY_MAX : BODY_MAX;
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE, (long)c->max);
    if (p->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, p->ca_file);
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Accept: application/json");
    h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip */
    const char *auth = cm_reload_cell_get(p->auth);
    if (auth[0] != '\0')
        h = curl_slist_append(h, auth); /* copied: a reload may replace it meanwhile */
    if (key) {
        char line[256];
        snprintf(line, sizeof(line), "Idempotency-Key: %s", key);
        h = curl_slist_append(h, line);
    }
    if (post) {
        h = curl_slist_append(h, "Content-Type: application/x-www-form-urlencoded");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(form));
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, form);
    }
    if (h == NULL)
        abort(); /* allocation failure */
    c->headers = h;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    c->next = p->calls;
    if (p->calls)
        p->calls->prev = c;
    p->calls = c;
    p->inflight++;
    /* Starts nothing by itself: libcurl asks for a zero timer, the exchange begins on the
     * loop, so cb is never called from inside this function. */
    CURLMcode mc = curl_multi_add_handle(p->multi, e);
    if (mc != CURLM_OK) {
        cm_log(CM_LOG_ERROR, "payment provider: %s", curl_multi_strerror(mc));
        call_unlink(c);
        curl_easy_cleanup(e);
        curl_slist_free_all(c->headers);
        free(c);
        return -1;
    }
    return 0;
}

/* --- the interface: every call goes to the provider's adapter ------------------------- */

const char *rsv_pay_return_url(const rsv_pay_t *p)
{
    return p->return_url;
}

int rsv_pay_charge(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg)
{
    return p->closing ? -1 : p->adapter->charge(p, req, cb, arg);
}

int rsv_pay_lookup(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg)
{
    return p->closing ? -1 : p->adapter->lookup(p, req, cb, arg);
}

int rsv_pay_refund(rsv_pay_t *p, const char *key, const char *payment_id, int64_t amount,
                   rsv_pay_cb cb, void *arg)
{
    return p->closing ? -1 : p->adapter->refund(p, key, payment_id, amount, cb, arg);
}

int rsv_pay_cancel(rsv_pay_t *p, const char *key, const char *payment_id, rsv_pay_cb cb, void *arg)
{
    return p->closing ? -1 : p->adapter->cancel(p, key, payment_id, cb, arg);
}

int rsv_pay_list(rsv_pay_t *p, int64_t created_gte, const char *starting_after, int limit,
                 rsv_pay_cb cb, void *arg)
{
    return p->closing ? -1 : p->adapter->list(p, created_gte, starting_after, limit, cb, arg);
}

/* --- lifecycle ----------------------------------------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static bool global_ok;

static void global_init(void)
{
    global_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    if (!global_ok)
        return;
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    bool async_dns = (v->features & CURL_VERSION_ASYNCHDNS) != 0;
    cm_log(async_dns ? CM_LOG_INFO : CM_LOG_WARN, "payment provider client: libcurl %s, %s, DNS %s",
           v->version, v->ssl_version ? v->ssl_version : "no TLS",
           async_dns ? "asynchronous (resolver off the loop)"
                     : "SYNCHRONOUS: name the provider by IP address or it blocks the loop");
}

/* The Authorization line for key (NULL or "": none, an empty line); owned by the caller. */
static char *auth_line(const char *key)
{
    return key != NULL && key[0] != '\0' ? cm_xasprintf("Authorization: Bearer %s", key)
                                         : cm_xstrdup("");
}

bool rsv_pay_set_api_key(rsv_pay_t *p, const char *key)
{
    const char *now = cm_reload_cell_get(p->auth);
    char *line = auth_line(key);
    if (strcmp(now, line) == 0) {
        cm_reload_free_secret(line, NULL);
        return false;
    }
    cm_reload_cell_set(p->auth, line);
    return true;
}

rsv_pay_t *rsv_pay_new(struct event_base *base, const rsv_pay_config_t *cfg, char *err,
                       size_t errlen)
{
    rsv_pay_t *p = cm_xcalloc(1, sizeof(*p));
    p->base = base;
    p->adapter = &rsv_pay_stripe;
    p->return_url =
        cm_xstrdup(cfg->return_url && cfg->return_url[0] ? cfg->return_url : RSV_PAY_RETURN_URL);
    p->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 1000;
    p->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 10000;
    if (cfg->url == NULL || rsv_pay_parse_url(cfg->url, &p->url) != 0) {
        snprintf(err, errlen, "paysim_url must be http(s)://<host name or IPv4>[:port][/prefix]");
        goto err;
    }
    pthread_once(&global_once, global_init);
    if (!global_ok) {
        snprintf(err, errlen, "libcurl failed to initialise");
        goto err;
    }
    p->base_url = cm_xasprintf("%s://%s:%d%s", p->url.tls ? "https" : "http", p->url.host,
                               p->url.port, p->url.prefix);
    if (cfg->ca_file) {
        FILE *f = fopen(cfg->ca_file, "r"); /* blocking-ok: start-up, before the loop runs */
        if (f == NULL) {
            snprintf(err, errlen, "paysim_ca %s: cannot be read", cfg->ca_file);
            goto err;
        }
        fclose(f);
        p->ca_file = cm_xstrdup(cfg->ca_file);
    }
    p->auth = cm_reload_cell_new(auth_line(cfg->api_key), cm_reload_free_secret, NULL);
    p->share = curl_share_init();
    p->multi = curl_multi_init();
    if (p->share == NULL || p->multi == NULL)
        abort(); /* allocation failure */
    /* TLS sessions and DNS answers outlive a closed connection: a reconnect resumes. Only
     * this loop's thread uses the share, so it needs no lock callbacks. */
    curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_multi_setopt(p->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(p->multi, CURLMOPT_SOCKETDATA, p);
    curl_multi_setopt(p->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(p->multi, CURLMOPT_TIMERDATA, p);
    p->timer = evtimer_new(base, on_timer, p);
    return p;
err:
    rsv_pay_free(p);
    return NULL;
}

int rsv_pay_inflight(const rsv_pay_t *p)
{
    return p ? p->inflight : 0;
}

void rsv_pay_free(rsv_pay_t *p)
{
    if (p == NULL)
        return;
    p->closing = true;
    while (p->calls)
        fail_call(p->calls, cm_err_shutdown);
    if (p->multi)
        curl_multi_cleanup(p->multi); /* closes the cached connections */
    while (p->socks)
        sock_free(p, p->socks);
    if (p->share)
        curl_share_cleanup(p->share);
    if (p->timer)
        event_free(p->timer);
    free(p->base_url);
    free(p->ca_file);
    free(p->return_url);
    cm_reload_cell_free(p->auth);
    free(p);
}
