/*
 * rsv_stock — see rsv_stock.h.
 *
 * Each worker keeps the events live at it in a small array (a crowd touches one event
 * over and over: the last one found is tried first) and walks it every interval. A round
 * for one event is a chain of callbacks — the lock, then the catalogue, the snapshot and
 * the script, or, when the lock is someone else's, one HGET of the published held — and
 * an event has at most one round in flight; a round that outlasts the interval skips a
 * tick. Live events are dropped by the tick only, never while a round is in flight, so a
 * callback's event is always there. The feed is per worker rather than per process
 * because its inputs are: requests land on every worker, each with its own snapshots and
 * catalogue, and the Redis lock makes the workers of every reserve one feed.
 */
#include "rsv_stock.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_drain.h"
#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "rsv_avail.h"
#include "rsv_catalog.h"
#include "rsv_lua.h"
#include "rsv_rediskeys.h"
#include "rsv_req.h"

const char *const rsv_stock_outcome_names[RSV_STOCK_OUTCOME_COUNT] = {
    [RSV_STOCK_PUBLISHED] = "published",
    [RSV_STOCK_ELSEWHERE] = "elsewhere",
    [RSV_STOCK_FAILED] = "failed",
};

void rsv_stock_metrics_register(rsv_stock_metrics_t *sm, cm_metrics_t *reg)
{
    cm_metrics_counters(reg, "onsale_reserve_stock_rounds_total",
                        "stock feed rounds, one per live event per stock_interval_ms, by outcome",
                        "outcome", rsv_stock_outcome_names, RSV_STOCK_OUTCOME_COUNT, sm->rounds);
}

int64_t rsv_stock_ttl_ms(int64_t interval_ms)
{
    int64_t ttl = interval_ms * RSV_STOCK_TTL_INTERVALS;
    return ttl < RSV_STOCK_TTL_MIN_MS ? RSV_STOCK_TTL_MIN_MS : ttl;
}

int64_t rsv_stock_lock_ms(int64_t interval_ms)
{
    int64_t lock = interval_ms - interval_ms / 10;
    return lock > 0 ? lock : 1;
}

typedef struct live {
    rsv_stock_t *st;
    char event[CM_IDENT_MAX + 1];
    uint64_t touched_ns; /* the last request for it at this worker (mono) */
    int64_t held;        /* held as last published, by this worker or another */
    int64_t next_held;   /* held of the totals being written */
    bool busy;           /* a round in flight */
    bool gone;           /* the catalogue no longer has the event */
    bool failing;        /* the last round failed (logged once per streak) */
} live_t;

struct rsv_stock {
    rsv_server_t *srv;
    struct event *timer;
    live_t **live;
    size_t n, cap;
    size_t last; /* index of the event touched last */
    int busy;    /* rounds in flight */
    bool closing;
};

static void stock_release(rsv_stock_t *st)
{
    for (size_t i = 0; i < st->n; i++)
        free(st->live[i]);
    free(st->live);
    free(st);
}

/* outcome RSV_STOCK_OUTCOME_COUNT: counted as nothing (the event is gone). */
static void round_end(live_t *l, rsv_stock_outcome_t outcome, const char *why)
{
    rsv_stock_t *st = l->st;
    l->busy = false;
    st->busy--;
    if (st->closing) {
        if (st->busy == 0)
            stock_release(st);
        return;
    }
    if (outcome == RSV_STOCK_FAILED && !l->failing)
        cm_log(CM_LOG_WARN, "stock feed of event %s: %s (tried again every interval)", l->event,
               why);
    else if (outcome != RSV_STOCK_FAILED && l->failing)
        cm_log(CM_LOG_INFO, "stock feed of event %s: going again", l->event);
    l->failing = outcome == RSV_STOCK_FAILED;
    if (outcome < RSV_STOCK_OUTCOME_COUNT)
        cm_counter_inc(st->srv->m.stock.rounds[outcome]);
}

static const char *redis_failure(const char *err, const cm_redis_reply_t *reply)
{
    if (err)
        return err;
    if (cm_redis_reply_type(reply) == CM_REDIS_ERROR)
        return cm_redis_reply_str(reply, NULL);
    return NULL;
}

static void on_published(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    live_t *l = arg;
    const char *why = redis_failure(err, reply);
    if (why) {
        round_end(l, RSV_STOCK_FAILED, why);
        return;
    }
    l->held = l->next_held;
    round_end(l, RSV_STOCK_PUBLISHED, NULL);
}

static void on_totals(const char *err, const rsv_avail_totals_t *t, void *arg)
{
    live_t *l = arg;
    rsv_stock_t *st = l->st;
    if (err || st->closing) {
        round_end(l, RSV_STOCK_FAILED, err ? err : cm_err_shutdown);
        return;
    }
    char key[RSV_KEY_MAX], left[24], held[24], total[24], version[24], ttl[24];
    rsv_key_buf(key, sizeof(key), l->event, RSV_K_STOCK, NULL); /* an ident fits */
    snprintf(left, sizeof(left), "%lld", (long long)t->left);
    snprintf(held, sizeof(held), "%lld", (long long)t->held);
    snprintf(total, sizeof(total), "%lld", (long long)t->total);
    snprintf(version, sizeof(version), "%lld", (long long)t->version);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)rsv_stock_ttl_ms(st->srv->cfg.stock_interval_ms));
    const char *argv[] = {key, left, held, total, version, ttl};
    l->next_held = t->held;
    if (cm_redis_eval(st->srv->redis, rsv_lua()->stock, on_published, l, 1, 6, argv, NULL) != 0)
        round_end(l, RSV_STOCK_FAILED, cm_err_closed);
}

static void on_event(rsv_event_t *ev, const char *err, void *arg)
{
    live_t *l = arg;
    rsv_stock_t *st = l->st;
    if (err || st->closing) {
        round_end(l, RSV_STOCK_FAILED, err ? err : cm_err_shutdown);
    } else if (ev == NULL) {
        l->gone = true;
        round_end(l, RSV_STOCK_OUTCOME_COUNT, NULL);
    } else {
        rsv_avail_refresh(st->srv->avail, ev, on_totals, l);
    }
}

/* The lock was another's: what it published last keeps the event live here or not. */
static void on_held(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    live_t *l = arg;
    const char *why = redis_failure(err, reply);
    if (why) {
        round_end(l, RSV_STOCK_FAILED, why);
        return;
    }
    const char *v = cm_redis_reply_str(reply, NULL); /* NULL: no hash (yet, or any more) */
    l->held = v ? strtoll(v, NULL, 10) : 0;
    round_end(l, RSV_STOCK_ELSEWHERE, NULL);
}

static void on_lock(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    live_t *l = arg;
    rsv_stock_t *st = l->st;
    const char *why = redis_failure(err, reply);
    if (why == NULL && st->closing)
        why = cm_err_shutdown;
    if (why) {
        round_end(l, RSV_STOCK_FAILED, why);
        return;
    }
    if (cm_redis_reply_type(reply) != CM_REDIS_NIL) { /* OK: this interval is ours */
        rsv_catalog_get(st->srv->catalog, l->event, on_event, l);
        return;
    }
    char key[RSV_KEY_MAX];
    rsv_key_buf(key, sizeof(key), l->event, RSV_K_STOCK, NULL);
    const char *argv[] = {"HGET", key, "held"};
    if (cm_redis_command(st->srv->redis, on_held, l, 3, argv, NULL) != 0)
        round_end(l, RSV_STOCK_FAILED, cm_err_closed);
}

static void round_start(live_t *l)
{
    rsv_stock_t *st = l->st;
    l->busy = true;
    st->busy++;
    char key[RSV_KEY_MAX], px[24];
    rsv_key_buf(key, sizeof(key), l->event, RSV_K_STOCK_LOCK, NULL);
    snprintf(px, sizeof(px), "%lld", (long long)rsv_stock_lock_ms(st->srv->cfg.stock_interval_ms));
    const char *argv[] = {"SET", key, "1", "NX", "PX", px};
    if (cm_redis_command(st->srv->redis, on_lock, l, 6, argv, NULL) != 0)
        round_end(l, RSV_STOCK_FAILED, cm_err_closed);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rsv_stock_t *st = arg;
    if (cm_drain_draining(st->srv->svc.drain))
        return; /* the other reserves take over */
    uint64_t now = cm_time_mono_ns();
    uint64_t idle = (uint64_t)st->srv->cfg.stock_idle_s * 1000000000ull;
    size_t i = 0;
    while (i < st->n) {
        live_t *l = st->live[i];
        if (!l->busy && (l->gone || (now - l->touched_ns > idle && l->held <= 0))) {
            free(l);
            st->live[i] = st->live[--st->n];
            continue;
        }
        if (!l->busy)
            round_start(l);
        i++;
    }
}

rsv_stock_t *rsv_stock_new(rsv_server_t *srv)
{
    int64_t ms = srv->cfg.stock_interval_ms;
    if (ms <= 0)
        return NULL;
    rsv_stock_t *st = cm_xcalloc(1, sizeof(*st));
    st->srv = srv;
    st->timer = event_new(srv->base, -1, EV_PERSIST, on_tick, st);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_add(st->timer, &tv);
    return st;
}

void rsv_stock_touch(rsv_stock_t *st, const char *event)
{
    if (st == NULL)
        return;
    uint64_t now = cm_time_mono_ns();
    if (st->last < st->n && strcmp(st->live[st->last]->event, event) == 0) {
        st->live[st->last]->touched_ns = now;
        return;
    }
    for (size_t i = 0; i < st->n; i++) {
        if (strcmp(st->live[i]->event, event) == 0) {
            st->live[i]->touched_ns = now;
            st->last = i;
            return;
        }
    }
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 16;
        st->live = cm_xrealloc(st->live, st->cap * sizeof(*st->live));
    }
    live_t *l = cm_xcalloc(1, sizeof(*l));
    l->st = st;
    snprintf(l->event, sizeof(l->event), "%s", event);
    l->touched_ns = now;
    st->last = st->n;
    st->live[st->n++] = l;
}

void rsv_stock_free(rsv_stock_t *st)
{
    if (st == NULL)
        return;
    event_free(st->timer);
    st->timer = NULL;
    st->closing = true;
    if (st->busy == 0)
        stock_release(st);
}
