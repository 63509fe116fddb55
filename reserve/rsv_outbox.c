/*
 * rsv_outbox — the deliverer of events out (see rsv_outbox.h; the table and its
 * functions in deploy/sql/009_outbox.sql and functions.sql).
 *
 * Shape: two timers on one worker's loop. The claim timer (every events_poll_ms, and at
 * once after a delivery lands, so the next event of a key follows without waiting)
 * asks onsale_outbox_claim for up to `batch − in flight` due events, each the earliest
 * undelivered of its key and leased to this process; each becomes one POST on a libcurl
 * multi handle of this module's own, driven by the same loop (socket and timer callbacks
 * as in rsv_pay, whose shape this follows). When a POST ends, onsale_outbox_done records
 * it: delivered on 2xx, otherwise due again after an exponential, capped, jittered
 * back-off. The stats timer (every 5 s) refreshes the pending and oldest-age gauges and
 * prunes delivered rows past events_retention_hours, a bounded batch at a time.
 *
 * Delivery is at least once: the row is marked only after the receiver's 2xx, so a crash
 * (or SIGKILL) between the answer and the mark sends it again once the lease lapses —
 * receivers deduplicate by the event id. Order per key holds because a key's next event
 * cannot be claimed while an earlier one is undelivered (leased or waiting to retry).
 *
 * Library rules relied on (as in rsv_pay): curl_multi_add_handle/_remove_handle/
 * _socket_action are called only from our event callbacks, never from inside libcurl's;
 * a finished easy handle leaves the multi before curl_easy_cleanup; redirects are not
 * followed, retries are ours. A Postgres result lives only during its callback. Postgres
 * callbacks can outlive rsv_outbox_free (rsv_pg fails them at its own free), so the
 * struct stays until the last of them came back.
 */
#include "rsv_outbox.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_config.h"
#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_reload.h"
#include "cm_time.h"
#include "rsv_pg.h"

#define STATS_INTERVAL_MS 5000
#define PRUNE_LIMIT       1000
#define ANSWER_MAX        (1024 * 1024) /* a receiver's answer is read and dropped */
#define LEASE_MARGIN_S    5
#define SECRET_MIN        16
#define SECRETS_MAX       (sizeof(((rsv_outbox_secrets_t *)0)->s) / sizeof(cm_hmacsig_secret_t))

const char *const rsv_outbox_outcome_names[RSV_OUTBOX_OUTCOME_COUNT] = {
    [RSV_OUTBOX_DELIVERED] = "delivered",
    [RSV_OUTBOX_REFUSED] = "refused",
    [RSV_OUTBOX_TIMEOUT] = "timeout",
    [RSV_OUTBOX_FAILED] = "failed",
};

typedef struct post post_t;
struct post {
    post_t *prev, *next;
    rsv_outbox_t *o;
    char seq[24];
    char id[48];
    int attempts;
    char *body;
    CURL *easy;
    struct curl_slist *headers;
    size_t answered; /* bytes of the receiver's answer seen */
};

typedef struct sock {
    struct sock *prev, *next;
    rsv_outbox_t *o;
    struct event *ev;
} sock_t;

struct rsv_outbox {
    struct event_base *base;
    rsv_pg_t *pg;
    rsv_outbox_metrics_t m;
    char *url, *ca_file;
    int connect_timeout_ms, timeout_ms, poll_ms, batch, retry_base_ms, retry_max_ms;
    int lease_s;
    int64_t retention_s;
    cm_reload_cell_t *secrets; /* rsv_outbox_secrets_t; replaced on SIGHUP */
    CURLM *multi;
    struct event *curl_timer, *claim_timer, *stats_timer;
    post_t *posts;
    sock_t *socks;
    int inflight;   /* POSTs out */
    int pg_pending; /* our Postgres statements not yet answered */
    bool claiming;
    bool closing;
    uint32_t rnd; /* xorshift32 state for the jitter */
};

/* --- pure parts ---------------------------------------------------------------------- */

int64_t rsv_outbox_backoff_ms(int attempts, int base_ms, int max_ms, uint32_t rnd)
{
    if (attempts < 1)
        attempts = 1;
    int64_t d = base_ms > 0 ? base_ms : 1;
    for (int i = 1; i < attempts && d < max_ms; i++)
        d *= 2;
    if (d > max_ms)
        d = max_ms;
    int64_t half = d / 2;
    return d - half + (int64_t)(((uint64_t)half * rnd) >> 32);
}

rsv_outbox_secrets_t *rsv_outbox_secrets_parse(char *text, char *err, size_t errlen)
{
    rsv_outbox_secrets_t *s = cm_xcalloc(1, sizeof(*s));
    s->text = text;
    s->text_len = strlen(text);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t')
            line++;
        size_t len = strlen(line);
        while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        if (len < SECRET_MIN) {
            snprintf(err, errlen, "events_secret_file: each secret needs at least %d bytes",
                     SECRET_MIN);
            goto err;
        }
        if (s->n == SECRETS_MAX) {
            snprintf(err, errlen, "events_secret_file: at most %zu secrets", SECRETS_MAX);
            goto err;
        }
        s->s[s->n].key = line;
        s->s[s->n].len = len;
        s->n++;
    }
    if (s->n == 0) {
        snprintf(err, errlen, "events_secret_file: no secret in it");
        goto err;
    }
    return s;
err:
    rsv_outbox_secrets_free(s);
    return NULL;
}

rsv_outbox_secrets_t *rsv_outbox_secrets_read(const char *path, char *err, size_t errlen)
{
    size_t len = 0;
    char *text =
        cm_config_read_secret("events_secret_file", path, SECRET_MIN, 4096, &len, err, errlen);
    return text != NULL ? rsv_outbox_secrets_parse(text, err, errlen) : NULL;
}

void rsv_outbox_secrets_free(rsv_outbox_secrets_t *s)
{
    if (s == NULL)
        return;
    if (s->text != NULL) {
        explicit_bzero(s->text, s->text_len); /* strtok_r wrote NULs: strlen would stop */
        free(s->text);
    }
    free(s);
}

static void secrets_free(void *value, void *ctx)
{
    (void)ctx;
    rsv_outbox_secrets_free(value);
}

/* --- lifetime ------------------------------------------------------------------------ */

static void outbox_destroy(rsv_outbox_t *o)
{
    if (o->claim_timer)
        event_free(o->claim_timer);
    if (o->stats_timer)
        event_free(o->stats_timer);
    if (o->curl_timer)
        event_free(o->curl_timer);
    cm_reload_cell_free(o->secrets);
    free(o->url);
    free(o->ca_file);
    free(o);
}

/* Every Postgres callback starts here: false when the outbox is going (and frees it with
 * the last answer). */
static bool pg_answered(rsv_outbox_t *o)
{
    o->pg_pending--;
    if (!o->closing)
        return true;
    if (o->pg_pending == 0)
        outbox_destroy(o);
    return false;
}

static int pg_send(rsv_outbox_t *o, const char *sql, int n, const char *const *params, rsv_pg_cb cb)
{
    if (rsv_pg_query(o->pg, sql, n, params, cb, o) != 0)
        return -1;
    o->pg_pending++;
    return 0;
}

static uint32_t next_rnd(rsv_outbox_t *o)
{
    uint32_t x = o->rnd;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return o->rnd = x;
}

static void arm(struct event *ev, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* --- recording an outcome ------------------------------------------------------------ */

static void on_done_recorded(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_outbox_t *o = arg;
    if (!pg_answered(o))
        return;
    if (err != NULL) {
        /* the lease lapses and the event is sent again: at least once */
        cm_log(CM_LOG_WARN, "events out: recording a delivery failed: %s %s", err,
               res ? rsv_pg_result_message(res) : "");
        return;
    }
    arm(o->claim_timer, 0); /* the key's next event may be due now */
}

static void post_free(post_t *p)
{
    rsv_outbox_t *o = p->o;
    if (p->prev)
        p->prev->next = p->next;
    else
        o->posts = p->next;
    if (p->next)
        p->next->prev = p->prev;
    o->inflight--;
    curl_multi_remove_handle(o->multi, p->easy);
    curl_easy_cleanup(p->easy);
    curl_slist_free_all(p->headers);
    free(p->body);
    free(p);
}

static void on_post_done(post_t *p, CURLcode code)
{
    rsv_outbox_t *o = p->o;
    long status = 0;
    char why[160];
    rsv_outbox_outcome_t outcome;
    if (code == CURLE_OK)
        curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE, &status);
    if (code == CURLE_OK && status >= 200 && status < 300) {
        outcome = RSV_OUTBOX_DELIVERED;
    } else if (code == CURLE_OK) {
        outcome = RSV_OUTBOX_REFUSED;
        snprintf(why, sizeof(why), "status %ld", status);
    } else if (code == CURLE_OPERATION_TIMEDOUT) {
        outcome = RSV_OUTBOX_TIMEOUT;
        snprintf(why, sizeof(why), "no answer within %d ms", o->timeout_ms);
    } else {
        outcome = RSV_OUTBOX_FAILED;
        snprintf(why, sizeof(why), "%s", curl_easy_strerror(code));
    }
    cm_counter_inc(o->m.deliveries[outcome]);
    char retry[24];
    int64_t delay =
        rsv_outbox_backoff_ms(p->attempts, o->retry_base_ms, o->retry_max_ms, next_rnd(o));
    snprintf(retry, sizeof(retry), "%lld", (long long)delay);
    const char *params[3] = {p->seq, outcome == RSV_OUTBOX_DELIVERED ? NULL : why, retry};
    if (outcome != RSV_OUTBOX_DELIVERED)
        cm_log(CM_LOG_WARN, "events out: %s (attempt %d) not delivered: %s; again in %lld ms",
               p->id, p->attempts, why, (long long)delay);
    if (pg_send(o, "SELECT onsale_outbox_done($1::bigint, $2, $3::int)", 3, params,
                on_done_recorded) != 0)
        cm_log(CM_LOG_WARN, "events out: %s: cannot record the outcome (shutting down)", p->id);
    post_free(p);
}

/* --- the HTTP client (libcurl multi on our loop) ------------------------------------- */

static void check_done(rsv_outbox_t *o)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(o->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        post_t *p = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&p);
        on_post_done(p, msg->data.result);
    }
}

static void on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    rsv_outbox_t *o = ((sock_t *)arg)->o;
    int running;
    int flags =
        ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    curl_multi_socket_action(o->multi, fd, flags, &running);
    check_done(o);
}

static void on_curl_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rsv_outbox_t *o = arg;
    int running;
    curl_multi_socket_action(o->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(o);
}

static void sock_free(rsv_outbox_t *o, sock_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        o->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    event_free(s->ev);
    free(s);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    rsv_outbox_t *o = userp;
    sock_t *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s)
            sock_free(o, s);
        curl_multi_assign(o->multi, fd, NULL);
        return 0;
    }
    if (s == NULL) {
        s = cm_xcalloc(1, sizeof(*s));
        s->o = o;
        s->next = o->socks;
        if (o->socks)
            o->socks->prev = s;
        o->socks = s;
        curl_multi_assign(o->multi, fd, s);
    } else {
        event_free(s->ev);
    }
    short ev = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
               ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    s->ev = event_new(o->base, fd, ev, on_socket_event, s);
    event_add(s->ev, NULL);
    return 0;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    rsv_outbox_t *o = userp;
    if (timeout_ms < 0)
        evtimer_del(o->curl_timer);
    else
        arm(o->curl_timer, (int)timeout_ms);
    return 0;
}

static size_t on_answer(char *data, size_t size, size_t nmemb, void *arg)
{
    (void)data;
    post_t *p = arg;
    size_t n = size * nmemb;
    p->answered += n;
    return p->answered > ANSWER_MAX ? 0 : n; /* 0 abandons: a receiver that never stops */
}

static struct curl_slist *add_header(struct curl_slist *h, const char *name, const char *value)
{
    char line[256];
    snprintf(line, sizeof(line), "%s: %s", name, value);
    return curl_slist_append(h, line);
}

/* One claimed event out: signed now (the receiver checks the timestamp's age). */
static void post_start(rsv_outbox_t *o, const char *seq, const char *id, int attempts,
                       const char *body)
{
    const rsv_outbox_secrets_t *sec = cm_reload_cell_get(o->secrets);
    char sig[CM_HMACSIG_SIGN_MAX];
    size_t blen = strlen(body);
    if (cm_hmacsig_sign(&sec->s[0], (int64_t)time(NULL), body, blen, sig, sizeof(sig)) != 0) {
        cm_log(CM_LOG_ERROR, "events out: %s: signing failed", id);
        return; /* its lease lapses and it is claimed again */
    }
    post_t *p = cm_xcalloc(1, sizeof(*p));
    p->o = o;
    snprintf(p->seq, sizeof(p->seq), "%s", seq);
    snprintf(p->id, sizeof(p->id), "%s", id);
    p->attempts = attempts;
    p->body = cm_xstrdup(body);
    p->easy = curl_easy_init();
    if (p->easy == NULL)
        abort(); /* allocation failure */
    CURL *e = p->easy;
    curl_easy_setopt(e, CURLOPT_URL, o->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, p);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_answer);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, p);
    if (o->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_file);
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "User-Agent: onsale-reserve");
    h = curl_slist_append(h, "Expect:");
    h = add_header(h, "Onsale-Signature", sig);
    h = add_header(h, "Onsale-Event-Id", id);
    p->headers = h;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)blen);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, p->body);
    p->next = o->posts;
    if (o->posts)
        o->posts->prev = p;
    o->posts = p;
    o->inflight++;
    CURLMcode mc = curl_multi_add_handle(o->multi, e);
    if (mc != CURLM_OK) {
        cm_log(CM_LOG_ERROR, "events out: %s", curl_multi_strerror(mc));
        post_free(p);
    }
}

/* --- the timers ---------------------------------------------------------------------- */

static void on_claimed(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_outbox_t *o = arg;
    if (!pg_answered(o))
        return;
    o->claiming = false;
    arm(o->claim_timer, o->poll_ms);
    if (err != NULL) {
        cm_log(CM_LOG_WARN, "events out: claim failed: %s %s", err,
               res ? rsv_pg_result_message(res) : "");
        return;
    }
    for (int i = 0; i < rsv_pg_result_rows(res); i++)
        post_start(o, rsv_pg_result_value(res, i, 0), rsv_pg_result_value(res, i, 1),
                   atoi(rsv_pg_result_value(res, i, 2)), rsv_pg_result_value(res, i, 3));
}

static void on_claim_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rsv_outbox_t *o = arg;
    if (o->claiming)
        return; /* on_claimed re-arms */
    int room = o->batch - o->inflight;
    if (room <= 0) {
        arm(o->claim_timer, o->poll_ms);
        return;
    }
    char limit[16], lease[16];
    snprintf(limit, sizeof(limit), "%d", room);
    snprintf(lease, sizeof(lease), "%d", o->lease_s);
    const char *params[2] = {limit, lease};
    if (pg_send(o, "SELECT seq, id, attempts, body FROM onsale_outbox_claim($1::int, $2::int)", 2,
                params, on_claimed) != 0)
        return;
    o->claiming = true;
}

static void on_stats(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_outbox_t *o = arg;
    if (!pg_answered(o))
        return;
    arm(o->stats_timer, STATS_INTERVAL_MS);
    if (err != NULL || rsv_pg_result_rows(res) != 1)
        return;
    cm_gauge_set(o->m.pending, atof(rsv_pg_result_value(res, 0, 0)));
    cm_gauge_set(o->m.oldest, atof(rsv_pg_result_value(res, 0, 1)));
}

static void on_stats_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rsv_outbox_t *o = arg;
    char keep[24], limit[16];
    snprintf(keep, sizeof(keep), "%lld", (long long)o->retention_s);
    snprintf(limit, sizeof(limit), "%d", PRUNE_LIMIT);
    const char *params[2] = {keep, limit};
    if (pg_send(o,
                "SELECT pending, oldest_seconds, pruned FROM onsale_outbox_stats($1::int, $2::int)",
                2, params, on_stats) != 0)
        return;
}

/* --- lifecycle ----------------------------------------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static bool global_ok;

static void global_init(void)
{
    global_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

/* The gauges always (rows are kept without a receiver too); the deliveries counter only
 * where events are delivered, so its presence says a deliverer runs (the
 * OnsaleEventsUndelivered alert keys on it). */
static void metrics_register(rsv_outbox_metrics_t *m, cm_metrics_t *reg, bool delivering)
{
    m->pending = cm_metrics_gauge(reg, "onsale_reserve_events_pending",
                                  "events out not yet delivered (refreshed every 5 s)", NULL);
    m->oldest = cm_metrics_gauge(reg, "onsale_reserve_events_oldest_pending_seconds",
                                 "age of the oldest event out not yet delivered (0: none; "
                                 "refreshed every 5 s)",
                                 NULL);
    if (delivering)
        cm_metrics_counters(reg, "onsale_reserve_events_deliveries_total",
                            "deliveries of events out, by how they ended", "outcome",
                            rsv_outbox_outcome_names, RSV_OUTBOX_OUTCOME_COUNT, m->deliveries);
}

rsv_outbox_t *rsv_outbox_new(struct event_base *base, rsv_pg_t *pg, cm_metrics_t *reg,
                             const rsv_outbox_config_t *cfg, char *err, size_t errlen)
{
    rsv_outbox_t *o = cm_xcalloc(1, sizeof(*o));
    o->base = base;
    o->pg = pg;
    bool delivering = cfg->url != NULL && cfg->url[0] != '\0';
    metrics_register(&o->m, reg, delivering);
    o->connect_timeout_ms = cfg->connect_timeout_ms;
    o->timeout_ms = cfg->timeout_ms;
    o->poll_ms = cfg->poll_ms;
    o->batch = cfg->batch > 0 ? cfg->batch : 1;
    o->retry_base_ms = cfg->retry_base_ms;
    o->retry_max_ms = cfg->retry_max_ms;
    o->retention_s = cfg->retention_s;
    o->lease_s = (cfg->connect_timeout_ms + cfg->timeout_ms) / 1000 + LEASE_MARGIN_S;
    o->rnd = (uint32_t)(cm_time_mono_ns() ^ ((uint64_t)getpid() << 16)) | 1u;
    o->stats_timer = evtimer_new(base, on_stats_tick, o);
    arm(o->stats_timer, 0);
    if (!delivering) {
        cm_log(CM_LOG_INFO, "events out: no events_url, events are kept in the outbox");
        return o;
    }
    rsv_outbox_secrets_t *sec = rsv_outbox_secrets_read(cfg->secret_file, err, errlen);
    if (sec == NULL)
        goto err;
    o->secrets = cm_reload_cell_new(sec, secrets_free, NULL);
    pthread_once(&global_once, global_init);
    if (!global_ok) {
        snprintf(err, errlen, "libcurl failed to initialise");
        goto err;
    }
    o->url = cm_xstrdup(cfg->url);
    o->ca_file = cfg->ca_file ? cm_xstrdup(cfg->ca_file) : NULL;
    o->multi = curl_multi_init();
    if (o->multi == NULL)
        abort(); /* allocation failure */
    curl_multi_setopt(o->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(o->multi, CURLMOPT_SOCKETDATA, o);
    curl_multi_setopt(o->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(o->multi, CURLMOPT_TIMERDATA, o);
    o->curl_timer = evtimer_new(base, on_curl_timeout, o);
    o->claim_timer = evtimer_new(base, on_claim_tick, o);
    arm(o->claim_timer, 0);
    cm_log(CM_LOG_INFO, "events out: delivering to %.*s…", 48, o->url);
    return o;
err:
    o->closing = true;
    outbox_destroy(o);
    return NULL;
}

void rsv_outbox_set_secrets(rsv_outbox_t *o, rsv_outbox_secrets_t *secrets)
{
    if (secrets == NULL)
        return; /* nothing new (events_url is a restart: the running one keeps signing) */
    if (o == NULL || o->secrets == NULL) {
        rsv_outbox_secrets_free(secrets);
        return;
    }
    cm_reload_cell_set(o->secrets, secrets);
}

int rsv_outbox_inflight(const rsv_outbox_t *o)
{
    return o ? o->inflight : 0;
}

void rsv_outbox_free(rsv_outbox_t *o)
{
    if (o == NULL)
        return;
    o->closing = true;
    while (o->posts)
        post_free(o->posts);
    if (o->multi)
        curl_multi_cleanup(o->multi);
    o->multi = NULL;
    if (o->curl_timer)
        evtimer_del(o->curl_timer);
    while (o->socks)
        sock_free(o, o->socks);
    if (o->claim_timer)
        evtimer_del(o->claim_timer);
    if (o->stats_timer)
        evtimer_del(o->stats_timer);
    if (o->pg_pending == 0)
        outbox_destroy(o);
}
