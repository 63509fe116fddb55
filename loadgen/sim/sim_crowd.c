/*
 * sim_crowd — see sim_crowd.h. Everything here runs on the one event-loop thread.
 *
 * Shape: one sim_fan_t per fan (100,000 fit in a few tens of MB), each a small state
 * machine driven by HTTP answers and one libevent timer of its own (poll_after_ms,
 * Retry-After, think time). Arrivals are a sorted array walked by a 1 ms timer, so the
 * loop never holds 100,000 pending timers at once. Fans talk through sim_http pools: the
 * gateway pool's connections each have their own loopback source address and a fan
 * always uses the same connection (so the same address) unless its gateway dies, when
 * it moves to the next gateway. The operator's actions are timers too; `exec` actions
 * run a shell command as a child (deploy/onsale for faults) reaped on SIGCHLD.
 * Nothing here blocks except the once-a-second /proc reads for the services' RSS and
 * CPU (procfs answers from memory).
 */
#define _GNU_SOURCE
#include "sim_crowd.h"

#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "sim_http.h"

extern char **environ;

struct sim_crowd {
    sim_run_t *r;
    struct event_base *base;
    sim_tls_ctx_t *tls;
    sim_pool_t *gw[SIM_MAX_GATEWAYS];
    int ngw;
    sim_pool_t *rsv, *gwadmin, *rsvadmin, *paysim;
    sim_pool_t *rsvmap;     /* the reserve's seat map, read every SEAT_MAP_S (one connection) */
    char admin_hdr[512];    /* the reserve's admin token */
    char gw_admin_hdr[512]; /* the gateway's */
    uint64_t rng;
    int next_arrival;
    int64_t *order;       /* arrival time per fan id (fans are numbered in arrival order) */
    uint8_t *taken;       /* seats known to be taken: the fans' seat map (refresh_seat_map) */
    int32_t *marked_ms;   /* per seat: when an answer last said taken (ms after t0) */
    int32_t map_asked_ms; /* when the seat map being read was asked for */
    int *seat_by_id;      /* seat indexes sorted by id, built at the first refresh */
    bool map_in_flight;
    double *cdf; /* hotspot: cumulative seat weights */
    struct event *arrivals, *tick, *deadline, *sigchld;
    struct event *lag; /* the loop-lag probe: a timer every LAG_PROBE_MS */
    uint64_t lag_due_ns;
    struct event **action_ev;
    struct action_arg {
        sim_crowd_t *c;
        int i;
    } * action_arg;
    json_t **action_rec;
    pid_t *action_pid;
    int setup_step;
    bool finished, sold_out_sent;
    bool deadline_extended; /* on_deadline let the fans waiting for returns finish */
    int done;
    uint64_t last_requests;
    char err[256];
    int failed;
};

/* ------------------------------------------------------------------- small helpers */

static uint64_t rnd(sim_crowd_t *c)
{
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double rnd01(sim_crowd_t *c)
{
    return (double)(rnd(c) >> 11) / 9007199254740992.0;
}

static int64_t now_rel(sim_crowd_t *c)
{
    return (int64_t)cm_time_mono_ns() - c->r->t0_ns;
}

static int sec_of(int64_t ns)
{
    return ns < 0 ? 0 : (int)(ns / 1000000000LL);
}

const char *sim_outcome_name(int o)
{
    static const char *const n[] = {"none",     "bought",   "lost",     "sold_out", "abandoned",
                                    "vanished", "too_slow", "declined", "error",    "cut"};
    return o >= 0 && o < O_NOUTCOMES ? n[o] : "?";
}

const char *sim_state_name(int s)
{
    static const char *const n[] = {"new",      "joining", "prequeue",   "queued",
                                    "admitted", "holding", "confirming", "done"};
    return s >= 0 && s < F_NSTATES ? n[s] : "?";
}

void sim_run_violation(sim_run_t *r, const char *check, const char *fmt, ...)
{
    if (r->nviol == r->capviol) {
        r->capviol = r->capviol ? r->capviol * 2 : 16;
        r->viol = cm_xrealloc(r->viol, (size_t)r->capviol * sizeof(*r->viol));
    }
    va_list ap;
    va_start(ap, fmt);
    char *d = NULL;
    if (vasprintf(&d, fmt, ap) < 0)
        abort();
    va_end(ap);
    r->viol[r->nviol].check = cm_xstrdup(check);
    r->viol[r->nviol].detail = d;
    r->nviol++;
}

/* The error code of a refusal's body: the value of its first "error" member, found by
 * a bounded scan (every refusal of both services is {"error": "<code>", ...}; parsing the
 * JSON of each of a few hundred thousand 429s would cost the crowd more than it measures). */
static void error_code(const sim_resp_t *resp, char *out, size_t outlen)
{
    snprintf(out, outlen, "-");
    if (resp->err) {
        snprintf(out, outlen, "%s", resp->err);
        return;
    }
    const char *b = resp->body, *end = resp->body ? resp->body + resp->body_len : NULL;
    static const char key[] = "\"error\"";
    for (const char *p = b; p && p + sizeof(key) - 1 < end; p++) {
        if (memcmp(p, key, sizeof(key) - 1) != 0)
            continue;
        p += sizeof(key) - 1;
        while (p < end && (*p == ' ' || *p == ':'))
            p++;
        if (p >= end || *p != '"')
            return;
        size_t n = 0;
        for (p++; p < end && *p != '"' && n + 1 < outlen; p++)
            if (isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-')
                out[n++] = *p;
        out[n] = '\0';
        if (n == 0)
            snprintf(out, outlen, "-");
        return;
    }
}

static void count_cause(sim_endpoint_t *e, const sim_resp_t *resp)
{
    char code[sizeof(e->causes[0].code)];
    error_code(resp, code, sizeof(code));
    int status = resp->err ? 0 : resp->status;
    for (int i = 0; i < e->ncauses; i++) {
        if (e->causes[i].status == status && strcmp(e->causes[i].code, code) == 0) {
            e->causes[i].n++;
            return;
        }
    }
    if (e->ncauses == SIM_MAX_CAUSES) {
        e->other_causes++;
        return;
    }
    sim_cause_t *k = &e->causes[e->ncauses++];
    k->status = status;
    snprintf(k->code, sizeof(k->code), "%s", code);
    k->n = 1;
}

static void record(sim_crowd_t *c, int ep, const sim_resp_t *resp)
{
    sim_run_t *r = c->r;
    sim_hist_add(&r->ep[ep].hist, resp->latency_ns / 1000);
    int cls = resp->err ? 0 : resp->status / 100;
    if (cls < 0 || cls > 5)
        cls = 0;
    r->ep[ep].by_class[cls]++;
    if (cls == 0 || cls >= 4)
        count_cause(&r->ep[ep], resp);
    if (resp->err)
        snprintf(r->ep[ep].sample, sizeof(r->ep[ep].sample), "%s", resp->err);
    else if (resp->status >= 400 && resp->status != 409 && resp->status != 410 &&
             resp->status != 429)
        snprintf(r->ep[ep].sample, sizeof(r->ep[ep].sample), "HTTP %d %.200s", resp->status,
                 resp->body);
    r->requests++;
    int s = sec_of(now_rel(c));
    sim_series_add(&r->s_requests, s, 1);
    if (cls == 0 || cls == 5) {
        r->errors++;
        sim_series_add(&r->s_errors, s, 1);
    }
}

/* The watermark was at least wm at this second (it never goes back within a room): from
 * the admin API once a second, and from every fan's answer — "queued" at position p for
 * number n says n - p, "admitted" says n — so the series stays fine-grained when the
 * admin answers come late on a busy machine (the ETA audit reads it). */
static void saw_watermark(sim_crowd_t *c, double wm)
{
    sim_series_t *s = &c->r->s_watermark;
    int sec = sec_of(now_rel(c));
    if (sec < 0 || wm <= 0)
        return;
    if (sec >= s->n || s->v[sec] < wm)
        sim_series_set(s, sec, wm);
}

static void set_state(sim_fan_t *f, int st)
{
    sim_run_t *r = f->crowd->r;
    r->state_count[f->state]--;
    r->state_count[st]++;
    f->state = (uint8_t)st;
}

static void finish_night(sim_crowd_t *c);
static void record(sim_crowd_t *c, int ep, const sim_resp_t *resp);

static void on_left(const sim_resp_t *resp, void *arg)
{
    record(arg, EP_DONE, resp);
}

/* A loser who presses "I'm done" (the storefront's button): the reserve stops counting
 * them toward the room's max_active at once, not after their admission's TTL. Nobody
 * waits for the answer (the fan has left); it goes into the endpoint table. */
static void say_done(sim_fan_t *f)
{
    sim_crowd_t *c = f->crowd;
    char path[128];
    char *hdr = cm_xasprintf("Authorization: Bearer %s\r\n", f->token);
    snprintf(path, sizeof(path), "/v1/events/%s/done", c->r->event);
    sim_pool_request(c->rsv, f->id, "POST", path, hdr, NULL, on_left, c);
    free(hdr);
}

static void fan_done(sim_fan_t *f, int outcome)
{
    sim_crowd_t *c = f->crowd;
    sim_run_t *r = c->r;
    if (f->state == F_DONE)
        return;
    evtimer_del(f->timer);
    set_state(f, F_DONE);
    f->outcome = (uint8_t)outcome;
    r->outcome_count[outcome]++;
    f->done_ns = now_rel(c);
    if (outcome == O_LOST && f->admitted_ns > 0) {
        sim_hist_add(&r->loser_heard, (uint64_t)(f->done_ns - f->admitted_ns) / 1000);
        sim_hist_add(&r->loser_waited, (uint64_t)f->hold_wait_ns / 1000);
        sim_hist_add(&r->loser_wire, (uint64_t)f->hold_wire_ns / 1000);
    }
    if (outcome == O_LOST && f->leaves && f->token && !c->finished)
        say_done(f);
    free(f->token);
    f->token = NULL;
    if (++c->done == r->nfans)
        finish_night(c);
}

static void fan_later(sim_fan_t *f, int64_t ms, event_callback_fn fn)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_assign(f->timer, f->crowd->base, fn, f);
    evtimer_add(f->timer, &tv);
}

static json_t *parse_body(const sim_resp_t *resp)
{
    if (resp->err || resp->body_len == 0)
        return NULL;
    return json_loadb(resp->body, resp->body_len, 0, NULL);
}

static const char *jstr(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* Queue number carried by a v1 ticket: base64url of 73 bytes, big-endian u64 at 9. */
static uint64_t ticket_number(const char *t)
{
    unsigned char raw[80];
    long n = cm_base64url_decode(t, strlen(t), raw, sizeof(raw));
    if (n != 73 || raw[0] != 1)
        return 0;
    uint64_t v = 0;
    for (int i = 9; i < 17; i++)
        v = (v << 8) | raw[i];
    return v;
}

/* -------------------------------------------------------------------- the queue */

static void do_join(evutil_socket_t fd, short what, void *arg);
static void do_status(evutil_socket_t fd, short what, void *arg);
static void do_hold(evutil_socket_t fd, short what, void *arg);
static void do_confirm(evutil_socket_t fd, short what, void *arg);

/* After a transport error or 5xx: retry (moving to the next gateway when the connection
 * failed), or give up when this fan does not retry. */
static void retry_or_give_up(sim_fan_t *f, const sim_resp_t *resp, event_callback_fn fn, int64_t ms)
{
    sim_crowd_t *c = f->crowd;
    f->errors++;
    if (!f->retry || f->errors > 50) {
        fan_done(f, O_ERROR);
        return;
    }
    if (resp && resp->err && c->ngw > 1 && (fn == do_join || fn == do_status))
        f->gw = (uint8_t)((f->gw + 1) % c->ngw);
    fan_later(f, ms + (int64_t)(rnd(c) % 200), fn);
}

static void on_abandon(evutil_socket_t fd, short what, void *arg)
{
    fan_done(arg, O_ABANDONED);
}

static void schedule_poll(sim_fan_t *f, int64_t poll_ms)
{
    if (poll_ms < 50)
        poll_ms = 50;
    if (f->behaviour == B_ABANDON && f->abandon_at_ns > 0) {
        int64_t left = (f->abandon_at_ns - now_rel(f->crowd)) / 1000000;
        if (left < poll_ms) {
            fan_later(f, left < 0 ? 0 : left, on_abandon);
            return;
        }
    }
    fan_later(f, poll_ms, do_status);
}

static void admitted(sim_fan_t *f, json_t *o)
{
    sim_crowd_t *c = f->crowd;
    sim_run_t *r = c->r;
    const char *tok = jstr(o, "admission_token");
    if (tok == NULL) {
        fan_done(f, O_ERROR);
        return;
    }
    free(f->token);
    f->token = cm_xstrdup(tok);
    f->admitted_ns = now_rel(c);
    sim_series_add(&r->s_admitted, sec_of(f->admitted_ns), 1);
    if (f->placed_ns >= 0)
        sim_hist_add(&r->time_to_admission, (uint64_t)(f->admitted_ns - f->placed_ns) / 1000);
    set_state(f, F_ADMITTED);
    do_hold(-1, 0, f);
}

static void placed(sim_fan_t *f)
{
    sim_crowd_t *c = f->crowd;
    sim_run_t *r = c->r;
    if (f->placed_ns >= 0)
        return;
    f->placed_ns = now_rel(c);
    sim_hist_add(&r->time_to_place, (uint64_t)(f->placed_ns - f->arrive_ns) / 1000);
    if (f->placed_ns > r->all_placed_ns)
        r->all_placed_ns = f->placed_ns;
    if (f->behaviour == B_ABANDON)
        f->abandon_at_ns =
            f->placed_ns + (int64_t)(r->sc->abandon_after_s * (0.5 + rnd01(c)) * 1e9);
}

/* A join or status answer: queued / prequeue / admitted, or an error. */
static void on_place(sim_fan_t *f, const sim_resp_t *resp, bool is_join)
{
    if (f->state == F_DONE)
        return;
    if (resp->err || resp->status >= 500) {
        retry_or_give_up(f, resp, is_join && f->ticket == NULL ? do_join : do_status, 1000);
        return;
    }
    if (resp->status == 429) {
        int64_t ms = resp->retry_after_s > 0 ? resp->retry_after_s * 1000 : 1000;
        fan_later(f, ms + (int64_t)(rnd(f->crowd) % 500), is_join ? do_join : do_status);
        return;
    }
    json_t *o = parse_body(resp);
    const char *st = jstr(o, "state");
    const char *e = jstr(o, "error");
    if (resp->status == 410) {
        placed(f); /* an answer: where the fan stands is "nowhere, it is over" */
        fan_done(f, O_SOLD_OUT);
    } else if (resp->status == 401 && e && strcmp(e, "invalid_ticket") == 0) {
        /* A ticket the gateway no longer honours: a person would join again. */
        free(f->ticket);
        f->ticket = NULL;
        retry_or_give_up(f, resp, do_join, 200);
    } else if ((resp->status == 200 || resp->status == 201) && st) {
        const char *t = jstr(o, "ticket");
        if (t && (f->ticket == NULL || strcmp(t, f->ticket) != 0)) {
            free(f->ticket);
            f->ticket = cm_xstrdup(t);
            uint64_t n = ticket_number(t);
            if (n)
                f->num = n;
        }
        json_t *pa = json_object_get(o, "poll_after_ms");
        int64_t poll = json_is_integer(pa) ? json_integer_value(pa) : 1000;
        if (strcmp(st, "admitted") == 0) {
            placed(f);
            saw_watermark(f->crowd, (double)f->num);
            admitted(f, o);
        } else if (strcmp(st, "queued") == 0) {
            placed(f);
            json_t *pos = json_object_get(o, "position");
            if (f->num > 0 && json_is_integer(pos))
                saw_watermark(f->crowd, (double)f->num - (double)json_integer_value(pos));
            /* the ETA told at join, or the first one told once a rate change was known
             * (the one before it could not know) */
            sim_run_t *r = f->crowd->r;
            int64_t now = now_rel(f->crowd);
            bool retell = r->rate_changed_ns >= 0 && f->eta_at_ns < r->rate_changed_ns &&
                          now >= r->rate_changed_ns;
            if (is_join || f->eta_s < 0 || retell) {
                json_t *eta = json_object_get(o, "eta_seconds");
                f->eta_s = json_is_integer(eta) ? (int32_t)json_integer_value(eta) : -1;
                f->eta_at_ns = now;
            }
            if (f->state != F_QUEUED)
                set_state(f, F_QUEUED);
            schedule_poll(f, poll);
        } else if (strcmp(st, "sold_out") == 0 &&
                   json_is_true(json_object_get(o, "returns_possible"))) {
            /* Sold out for now (docs/api.md): units in other fans' baskets may come back to
             * the line. The fan keeps the place for returns_patience_s, then gives up. */
            placed(f);
            int64_t now = now_rel(f->crowd);
            if (!f->awaiting_returns) {
                f->awaiting_returns = true;
                f->returns_since_ns = now;
            }
            if ((double)(now - f->returns_since_ns) / 1e9 >= f->crowd->r->sc->returns_patience_s) {
                fan_done(f, O_SOLD_OUT);
            } else {
                if (f->state != F_QUEUED)
                    set_state(f, F_QUEUED);
                schedule_poll(f, poll);
            }
        } else if (strcmp(st, "prequeue") == 0) {
            placed(f);
            f->in_prequeue = true;
            if (f->state != F_PREQUEUE)
                set_state(f, F_PREQUEUE);
            schedule_poll(f, poll);
        } else {
            fan_done(f, O_ERROR);
        }
    } else {
        fan_done(f, O_ERROR);
    }
    json_decref(o);
}

static void on_join(const sim_resp_t *resp, void *arg)
{
    sim_fan_t *f = arg;
    record(f->crowd, EP_JOIN, resp);
    on_place(f, resp, true);
}

static void on_status(const sim_resp_t *resp, void *arg)
{
    sim_fan_t *f = arg;
    record(f->crowd, EP_STATUS, resp);
    on_place(f, resp, false);
}

static void do_join(evutil_socket_t fd, short what, void *arg)
{
    sim_fan_t *f = arg;
    sim_crowd_t *c = f->crowd;
    if (f->state == F_DONE)
        return;
    if (f->state == F_NEW)
        set_state(f, F_JOINING);
    if (f->join_sent_ns < 0)
        f->join_sent_ns = now_rel(c);
    char path[128];
    snprintf(path, sizeof(path), "/q/%s/join", c->r->event);
    sim_pool_request(c->gw[f->gw], f->id, "POST", path, NULL, NULL, on_join, f);
}

static void do_status(evutil_socket_t fd, short what, void *arg)
{
    sim_fan_t *f = arg;
    sim_crowd_t *c = f->crowd;
    if (f->state == F_DONE)
        return;
    if (f->ticket == NULL) {
        do_join(fd, what, arg);
        return;
    }
    char path[128], hdr[256];
    snprintf(path, sizeof(path), "/q/%s/status", c->r->event);
    snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\n", f->ticket);
    f->polls++;
    sim_pool_request(c->gw[f->gw], f->id, "GET", path, hdr, NULL, on_status, f);
}

/* -------------------------------------------------------------------- holds */

static bool block_free(sim_crowd_t *c, int i, int want)
{
    sim_scenario_t *s = c->r->sc;
    if (i < 0 || i + want > s->nseats)
        return false;
    for (int k = 0; k < want; k++)
        if (c->taken[i + k] || s->seats[i + k].row != s->seats[i].row)
            return false;
    return true;
}

/* Picks a block of `want` adjacent seats as a person would: by the scenario's choice
 * (uniform or everybody wants the front rows), skipping seats known to be taken;
 * -1 when none is left. */
static int pick_seats(sim_crowd_t *c, int want)
{
    sim_scenario_t *s = c->r->sc;
    for (int tries = 0; tries < 64; tries++) {
        int i;
        if (s->choice == CHOICE_HOTSPOT) {
            double x = rnd01(c) * c->cdf[s->nseats - 1];
            int lo = 0, hi = s->nseats - 1;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (c->cdf[mid] < x)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            i = lo;
        } else {
            i = (int)(rnd(c) % (uint64_t)s->nseats);
        }
        if (block_free(c, i, want))
            return i;
        if (block_free(c, i - want + 1, want))
            return i - want + 1;
    }
    int start = (int)(rnd(c) % (uint64_t)s->nseats);
    for (int k = 0; k < s->nseats; k++) {
        int i = (start + k) % s->nseats;
        if (block_free(c, i, want))
            return i;
    }
    return want > 1 ? pick_seats(c, 1) : -1;
}

static void on_hold(const sim_resp_t *resp, void *arg);

static void do_hold(evutil_socket_t fd, short what, void *arg)
{
    sim_fan_t *f = arg;
    sim_crowd_t *c = f->crowd;
    sim_scenario_t *s = c->r->sc;
    if (f->state == F_DONE)
        return;
    if (f->state != F_HOLDING)
        set_state(f, F_HOLDING);
    if (f->first_hold_ns < 0)
        f->first_hold_ns = now_rel(c);
    json_t *body;
    if (f->ga) {
        const sim_pool_def_t *p = &s->pools[f->id % (uint32_t)s->npools];
        body = json_pack("{s:s, s:i}", "pool", p->id, "quantity", (int)f->want);
        f->amount = p->price * f->want;
    } else if (f->best) {
        /* The section of the seat this fan would have picked (the map may lag: everybody
         * asks the reserve at least once); the reserve picks the seats. */
        int i = pick_seats(c, 1);
        if (i < 0 && f->hold_attempts > 0) {
            fan_done(f, O_LOST);
            return;
        }
        if (i < 0)
            i = (int)(rnd(c) % (uint64_t)s->nseats);
        f->seat = i; /* its section is where the reserve picks */
        body = json_pack("{s:s, s:i}", "section", s->sections[s->seats[i].section].id, "quantity",
                         (int)f->want);
    } else {
        int i = pick_seats(c, f->want);
        if (i < 0 && f->hold_attempts == 0) {
            /* The seat map may lag: everybody asks the reserve at least once. */
            f->want = 1;
            i = (int)(rnd(c) % (uint64_t)s->nseats);
        } else if (i < 0) {
            fan_done(f, O_LOST);
            return;
        }
        if (!block_free(c, i, f->want))
            f->want = 1;
        f->seat = i;
        json_t *a = json_array();
        f->amount = 0;
        for (int k = 0; k < f->want; k++) {
            json_array_append_new(a, json_string(s->seats[i + k].id));
            f->amount += s->seats[i + k].price;
        }
        body = json_pack("{s:o}", "seats", a);
    }
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char path[128];
    char *hdr = cm_xasprintf("Authorization: Bearer %s\r\n", f->token);
    snprintf(path, sizeof(path), "/v1/events/%s/holds", c->r->event);
    f->hold_attempts++;
    sim_pool_request(c->rsv, f->id, "POST", path, hdr, b, on_hold, f);
    free(hdr);
    free(b);
}

/* Seat i seen taken in an answer, now (the seat map refresh keeps what it learned since). */
static void mark_seat(sim_crowd_t *c, int i)
{
    c->taken[i] = 1;
    c->marked_ms[i] = (int32_t)(now_rel(c) / 1000000);
}

static void mark_taken(sim_fan_t *f, json_t *o)
{
    sim_crowd_t *c = f->crowd;
    sim_scenario_t *s = c->r->sc;
    json_t *un = json_object_get(o, "unavailable");
    size_t i;
    json_t *v;
    bool any = false;
    json_array_foreach(un, i, v)
    {
        const char *id = json_string_value(v);
        for (int k = 0; id && k < f->want && f->seat + k < s->nseats; k++)
            if (strcmp(s->seats[f->seat + k].id, id) == 0) {
                mark_seat(c, f->seat + k);
                any = true;
            }
    }
    if (!any)
        for (int k = 0; k < f->want && f->seat + k < s->nseats; k++)
            mark_seat(c, f->seat + k);
}

/* A best-available hold's seats (the reserve's answer): where they are in the map, how
 * many and what they cost. The reserve picks one row's consecutive seats, which the map
 * keeps side by side, so the hold is f->seat .. f->seat + want - 1 like a named one.
 * 0, or -1 when the seats are not such a block of the map. */
static int best_held(sim_fan_t *f, json_t *o)
{
    sim_scenario_t *s = f->crowd->r->sc;
    json_t *seats = json_object_get(o, "seats");
    size_t n = json_array_size(seats);
    const char *first = json_string_value(json_array_get(seats, 0));
    if (n == 0 || n > UINT16_MAX || first == NULL)
        return -1;
    if (f->seat < 0 || f->seat >= s->nseats)
        return -1;
    const sim_section_t *sec = &s->sections[s->seats[f->seat].section]; /* the one asked */
    int at = -1;
    for (int i = sec->first; i <= sec->last && at < 0; i++)
        if (strcmp(s->seats[i].id, first) == 0)
            at = i;
    if (at < 0 || at + (int)n > s->nseats)
        return -1;
    for (size_t k = 0; k < n; k++)
        if (strcmp(s->seats[at + (int)k].id, json_string_value(json_array_get(seats, k)) ?: "") !=
            0)
            return -1;
    f->seat = at;
    f->want = (uint16_t)n;
    f->amount = (int64_t)json_integer_value(json_object_get(o, "amount"));
    return 0;
}

static void on_vanish(evutil_socket_t fd, short what, void *arg)
{
    fan_done(arg, O_VANISHED);
}

static void on_hold(const sim_resp_t *resp, void *arg)
{
    sim_fan_t *f = arg;
    sim_crowd_t *c = f->crowd;
    sim_run_t *r = c->r;
    record(c, EP_HOLD, resp);
    if (f->state == F_DONE)
        return;
    f->hold_wait_ns += (int64_t)resp->waited_ns;
    f->hold_wire_ns += (int64_t)resp->latency_ns;
    if (resp->err || resp->status >= 500) {
        retry_or_give_up(f, resp, do_hold, 500);
        return;
    }
    json_t *o = parse_body(resp);
    const char *e = jstr(o, "error");
    if (resp->status == 201 && f->best && best_held(f, o) != 0) {
        fan_done(f, O_ERROR); /* seats the simulator cannot place: never expected */
    } else if (resp->status == 201) {
        const char *id = jstr(o, "hold_id");
        snprintf(f->hold_id, sizeof(f->hold_id), "%s", id ? id : "");
        f->hold_ns = now_rel(c);
        sim_series_add(&r->s_holds, sec_of(f->hold_ns), 1);
        if (!f->ga)
            for (int k = 0; k < f->want; k++)
                mark_seat(c, f->seat + k);
        if (f->behaviour == B_VANISH)
            fan_later(f, 0, on_vanish);
        else if (f->behaviour == B_SLOW) /* dawdles past the hold's life, then pays */
            fan_later(f, (int64_t)r->sc->hold_ttl_s * 1000 + 1500, do_confirm);
        else
            fan_later(f, (int64_t)(rnd(c) % 200), do_confirm);
    } else if (resp->status == 409) {
        sim_hist_add(&r->hold_taken, resp->latency_ns / 1000);
        sim_series_add(&r->s_taken, sec_of(now_rel(c)), 1);
        json_t *av = json_object_get(o, "available");
        if (f->best && e && strcmp(e, "no_adjacent_seats") == 0 && f->want > 1 &&
            f->hold_attempts < r->sc->max_hold_attempts) {
            f->want = 1; /* no block left: one seat will do */
            do_hold(-1, 0, f);
        } else if ((f->ga || f->best) && e && strcmp(e, "insufficient") == 0 &&
                   json_is_integer(av) && json_integer_value(av) > 0 &&
                   f->hold_attempts < r->sc->max_hold_attempts) {
            f->want = (uint16_t)json_integer_value(av);
            do_hold(-1, 0, f);
        } else if (!f->ga && e && strcmp(e, "seat_unavailable") == 0 &&
                   f->hold_attempts < r->sc->max_hold_attempts) {
            mark_taken(f, o);
            do_hold(-1, 0, f);
        } else {
            if (!f->ga && e && strcmp(e, "seat_unavailable") == 0)
                mark_taken(f, o);
            fan_done(f, O_LOST);
        }
    } else {
        fan_done(f, O_ERROR);
    }
    json_decref(o);
}

/* -------------------------------------------------------------------- checkout */

static void on_confirm(const sim_resp_t *resp, void *arg);
static void on_checkout(const sim_resp_t *resp, void *arg);

static void send_confirm(sim_fan_t *f)
{
    sim_crowd_t *c = f->crowd;
    char path[256];
    snprintf(path, sizeof(path), "/v1/holds/%s/confirm", f->hold_id);
    char *hdr =
        cm_xasprintf("Authorization: Bearer %s\r\nIdempotency-Key: %s\r\n", f->token, f->idem);
    char *body =
        cm_xasprintf("{\"payment\":{\"amount\":%lld,\"currency\":\"%s\",\"source\":\"tok_visa\"}}",
                     (long long)f->amount, c->r->sc->currency);
    f->confirms_out++;
    sim_pool_request_urgent(c->rsv, f->id, "POST", path, hdr, body, on_confirm, f);
    free(hdr);
    free(body);
}

static void do_confirm(evutil_socket_t fd, short what, void *arg)
{
    sim_fan_t *f = arg;
    sim_crowd_t *c = f->crowd;
    if (f->state == F_DONE)
        return;
    if (f->state != F_CONFIRMING) {
        set_state(f, F_CONFIRMING);
        f->confirm_attempts++;
        snprintf(f->idem, sizeof(f->idem), "%s-%u-%u", c->r->event, f->id,
                 (unsigned)f->confirm_attempts);
    }
    send_confirm(f);
    if (f->dbl && f->confirm_attempts == 1 && f->confirms_out == 1)
        send_confirm(f); /* the double click: same key, same body, at once */
}

static void bought(sim_fan_t *f, json_t *o)
{
    sim_crowd_t *c = f->crowd;
    sim_run_t *r = c->r;
    const char *bid = jstr(o, "booking_id");
    if (bid && f->booking_id[0] && strcmp(bid, f->booking_id) != 0) {
        r->dup_bookings_seen++;
        sim_run_violation(r, "idempotency",
                          "fan %u was told two bookings (%s, %s) for one Idempotency-Key", f->id,
                          f->booking_id, bid);
    }
    if (bid)
        snprintf(f->booking_id, sizeof(f->booking_id), "%s", bid);
    const char *cid = jstr(o, "checkout_id");
    if (cid)
        snprintf(f->checkout_id, sizeof(f->checkout_id), "%s", cid);
    if (f->state == F_DONE)
        return;
    int64_t t = now_rel(c);
    sim_series_add(&r->s_confirms, sec_of(t), 1);
    if (f->hold_ns > 0)
        sim_hist_add(&r->hold_to_confirm, (uint64_t)(t - f->hold_ns) / 1000);
    r->units_bought += f->want;
    fan_done(f, O_BOUGHT);
}

static void checkout_later(evutil_socket_t fd, short what, void *arg)
{
    sim_fan_t *f = arg;
    sim_crowd_t *c = f->crowd;
    if (f->state == F_DONE)
        return;
    char path[256];
    snprintf(path, sizeof(path), "/v1/checkouts/%s", f->checkout_id);
    char *hdr = cm_xasprintf("Authorization: Bearer %s\r\n", f->token);
    sim_pool_request_urgent(c->rsv, f->id, "GET", path, hdr, NULL, on_checkout, f);
    free(hdr);
}

static void checkout_state(sim_fan_t *f, json_t *o)
{
    const char *st = jstr(o, "state");
    if (st == NULL || strcmp(st, "pending") == 0) {
        fan_later(f, 500, checkout_later);
    } else if (strcmp(st, "confirmed") == 0) {
        bought(f, o);
    } else if (strcmp(st, "refunded") == 0) {
        fan_done(f, O_TOO_SLOW);
    } else if (strcmp(st, "failed") == 0) {
        fan_done(f, O_DECLINED);
    } else if (strcmp(st, "released") == 0) {
        fan_done(f, O_TOO_SLOW);
    } else {
        fan_later(f, 500, checkout_later); /* an internal state shown: still going */
    }
}

static void on_checkout(const sim_resp_t *resp, void *arg)
{
    sim_fan_t *f = arg;
    record(f->crowd, EP_CHECKOUT, resp);
    if (f->state == F_DONE)
        return;
    if (resp->err || resp->status >= 500 || resp->status == 429) {
        fan_later(f, 1000, checkout_later);
        return;
    }
    json_t *o = parse_body(resp);
    if (resp->status == 200)
        checkout_state(f, o);
    else
        fan_done(f, O_ERROR);
    json_decref(o);
}

static void on_confirm(const sim_resp_t *resp, void *arg)
{
    sim_fan_t *f = arg;
    sim_crowd_t *c = f->crowd;
    record(c, EP_CONFIRM, resp);
    f->confirms_out--;
    json_t *o = parse_body(resp);
    const char *e = jstr(o, "error");
    if (resp->status == 200 || resp->status == 201) {
        bought(f, o); /* also checks a double click's second answer after the first */
    } else if (f->state == F_DONE) {
        /* the other click already settled it */
    } else if (resp->err || resp->status >= 500) {
        if (f->confirms_out == 0)
            retry_or_give_up(f, resp, do_confirm, 1000); /* same key: one purchase */
    } else if (resp->status == 202) {
        const char *cid = jstr(o, "checkout_id");
        snprintf(f->checkout_id, sizeof(f->checkout_id), "%s", cid ? cid : "");
        if (f->confirms_out == 0)
            fan_later(f, 500, checkout_later);
    } else if (resp->status == 409 && e && strcmp(e, "in_progress") == 0) {
        if (f->confirms_out == 0) /* nobody else will answer: ask again, same key */
            fan_later(f, 300, do_confirm);
    } else if (resp->status == 402) {
        if (f->confirm_attempts < 2 && f->confirms_out == 0) {
            set_state(f, F_HOLDING); /* another card: a new purchase attempt, new key */
            fan_later(f, 200, do_confirm);
        } else if (f->confirms_out == 0) {
            fan_done(f, O_DECLINED);
        }
    } else if (resp->status == 409 || resp->status == 404 || resp->status == 410) {
        fan_done(f, O_TOO_SLOW);
    } else if (f->confirms_out == 0) {
        fan_done(f, O_ERROR);
    }
    json_decref(o);
}

/* -------------------------------------------------------------------- arrivals */

static void on_arrivals(evutil_socket_t fd, short what, void *arg)
{
    sim_crowd_t *c = arg;
    sim_run_t *r = c->r;
    int64_t now = now_rel(c);
    int n = 0;
    while (c->next_arrival < r->nfans && r->fans[c->next_arrival].arrive_ns <= now && n < 20000) {
        sim_fan_t *f = &r->fans[c->next_arrival++];
        do_join(-1, 0, f);
        n++;
    }
    if (c->next_arrival < r->nfans) {
        struct timeval tv = {0, 1000};
        evtimer_add(c->arrivals, &tv);
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void plan_fans(sim_crowd_t *c)
{
    sim_run_t *r = c->r;
    sim_scenario_t *s = r->sc;
    int n = r->nfans;
    int64_t *t = cm_xcalloc((size_t)n, sizeof(int64_t));
    double acc = 0;
    int pq = s->arrival == ARR_PREQUEUE ? (int)(s->prequeue_fans * (double)n / s->fans) : 0;
    if (s->arrival == ARR_PREQUEUE && pq < 2)
        pq = n < 2 ? n : 2;
    for (int i = 0; i < n; i++) {
        double x;
        switch (s->arrival) {
        case ARR_RAMP:
            x = s->window_s * sqrt(rnd01(c));
            break;
        case ARR_POISSON:
            acc += -log(1.0 - rnd01(c)) / s->rate_per_s;
            x = acc;
            break;
        case ARR_PREQUEUE:
            x = i < pq ? s->prequeue_s * 0.8 * rnd01(c)
                       : s->prequeue_s + 0.5 + s->window_s * rnd01(c);
            break;
        default:
            x = s->window_s * rnd01(c);
        }
        t[i] = (int64_t)(x * 1e9);
    }
    qsort(t, (size_t)n, sizeof(int64_t), cmp_i64);
    for (int i = 0; i < n; i++) {
        sim_fan_t *f = &r->fans[i];
        f->crowd = c;
        f->id = (uint32_t)i;
        f->arrive_ns = t[i];
        f->placed_ns = f->admitted_ns = f->first_hold_ns = f->hold_ns = f->join_sent_ns = -1;
        f->done_ns = -1;
        f->eta_s = -1;
        f->eta_at_ns = -1;
        f->gw = (uint8_t)(i % c->ngw);
        double b = rnd01(c);
        f->behaviour = b < s->abandon                         ? B_ABANDON
                       : b < s->abandon + s->vanish           ? B_VANISH
                       : b < s->abandon + s->vanish + s->slow ? B_SLOW
                                                              : B_NORMAL;
        f->dbl = rnd01(c) < s->double_click;
        f->retry = rnd01(c) < s->retry;
        f->leaves = s->done_when_lost > 0 && rnd01(c) < s->done_when_lost; /* no draw at 0 */
        f->ga = rnd01(c) < s->ga_share;
        f->best = !f->ga && s->best_share > 0 && rnd01(c) < s->best_share; /* no draw at 0 */
        f->want =
            (uint16_t)(s->seats_min + (int)(rnd(c) % (uint64_t)(s->seats_max - s->seats_min + 1)));
        f->timer = evtimer_new(c->base, do_join, f);
    }
    r->last_arrival_ns = n ? t[n - 1] : 0;
    r->state_count[F_NEW] = n;
    free(t);
}

/* -------------------------------------------------------------------- operator */

static void on_admin_reply(const sim_resp_t *resp, void *arg)
{
    json_t *rec = arg;
    json_object_set_new(rec, "status", json_integer(resp->err ? 0 : resp->status));
    if (resp->err)
        json_object_set_new(rec, "error", json_string(resp->err));
    else if (resp->status >= 300)
        json_object_set_new(rec, "error", json_stringn(resp->body, resp->body_len));
}

static json_t *timeline_add(sim_crowd_t *c, const char *what, const char *label)
{
    json_t *rec = json_pack("{s:f, s:s, s:s}", "at_s", (double)now_rel(c) / 1e9, "kind", what,
                            "label", label);
    json_array_append_new(c->r->timeline, rec);
    return rec;
}

static void room_patch(sim_crowd_t *c, json_t *patch, const char *label)
{
    json_t *rec = timeline_add(c, "patch", label);
    if (json_object_get(patch, "rate_per_minute") != NULL)
        c->r->rate_changed_ns = now_rel(c) + SIM_RATE_KNOWN_NS;
    char path[128];
    snprintf(path, sizeof(path), "/admin/events/%s", c->r->event);
    char *body = json_dumps(patch, JSON_COMPACT);
    sim_pool_request(c->gwadmin, 0, "PATCH", path, c->gw_admin_hdr, body, on_admin_reply, rec);
    free(body);
}

static void run_exec(sim_crowd_t *c, int i)
{
    sim_action_t *a = &c->r->sc->actions[i];
    json_t *rec = timeline_add(c, "exec", a->label);
    c->action_rec[i] = rec;
    setenv("SIM_EVENT", c->r->event, 1);
    char *argv[] = {"/bin/sh", "-c", a->exec, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
    if (rc != 0) {
        json_object_set_new(rec, "error", json_string(strerror(rc)));
        return;
    }
    c->action_pid[i] = pid;
}

static void on_action(evutil_socket_t fd, short what, void *arg)
{
    struct action_arg *aa = arg;
    sim_crowd_t *c = aa->c;
    int i = aa->i;
    sim_action_t *a = &c->r->sc->actions[i];
    if (c->finished)
        return;
    if (a->patch)
        room_patch(c, a->patch, a->label);
    if (a->pay && c->paysim) {
        json_t *rec = timeline_add(c, "payment", a->label);
        char *body = json_dumps(a->pay, JSON_COMPACT);
        sim_pool_request(c->paysim, 0, "PATCH", "/v1/settings", NULL, body, on_admin_reply, rec);
        free(body);
    }
    if (a->exec)
        run_exec(c, i);
}

static void on_sigchld(evutil_socket_t fd, short what, void *arg)
{
    sim_crowd_t *c = arg;
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int i = 0; i < c->r->sc->nactions; i++)
            if (c->action_pid[i] == pid) {
                c->action_pid[i] = 0;
                json_object_set_new(c->action_rec[i], "exit",
                                    json_integer(WIFEXITED(st) ? WEXITSTATUS(st) : -1));
                json_object_set_new(c->action_rec[i], "done_s",
                                    json_real((double)now_rel(c) / 1e9));
            }
    }
}

/* -------------------------------------------------------------------- the seat map */

/* The fans' seat map (c->taken) is what their storefront pages show: seats marked taken
 * from the reserve's answers as they come (a hold of ours, "seat_unavailable"), and read
 * again from the reserve's own map (GET /v1/events/{event}/seats, at most a second old)
 * every SEAT_MAP_S seconds, as a storefront page refreshes its map. So a seat whose hold
 * expired or was released shows free again: without the refresh a seat once seen taken
 * stayed taken all night, and fans admitted for the units that came back saw none free
 * and gave up. A seat an answer said taken after the map's snapshot could have been made
 * stays taken: the map may be a second old when asked for and arrive seconds later on a
 * busy night, and it must not undo what the fans learned since. One request at a time on
 * a connection of its own; a 50,000-seat map is about 4 MB, parsed once per SEAT_MAP_S on
 * the loop. */
#define SEAT_MAP_S      5
#define SEAT_MAP_LAG_MS 1000 /* how old the reserve's map may be when asked for (docs/api.md) */

static int cmp_seat_id(const void *a, const void *b, void *arg)
{
    const sim_seat_t *seats = arg;
    return strcmp(seats[*(const int *)a].id, seats[*(const int *)b].id);
}

/* The index of seat id in the scenario's map: the reserve lists the seats in the order
 * the scenario's map expands them, so `hint` (its place in the answer) is tried first. */
static int seat_index(sim_crowd_t *c, const char *id, int hint)
{
    sim_scenario_t *s = c->r->sc;
    if (hint < s->nseats && strcmp(s->seats[hint].id, id) == 0)
        return hint;
    if (c->seat_by_id == NULL) {
        c->seat_by_id = cm_xcalloc((size_t)s->nseats, sizeof(int));
        for (int i = 0; i < s->nseats; i++)
            c->seat_by_id[i] = i;
        qsort_r(c->seat_by_id, (size_t)s->nseats, sizeof(int), cmp_seat_id, s->seats);
    }
    int lo = 0, hi = s->nseats - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, d = strcmp(s->seats[c->seat_by_id[mid]].id, id);
        if (d == 0)
            return c->seat_by_id[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static void on_seat_map(const sim_resp_t *resp, void *arg)
{
    sim_crowd_t *c = arg;
    c->map_in_flight = false;
    record(c, EP_SEATS, resp);
    if (resp->err || resp->status != 200 || c->finished)
        return;
    json_t *o = json_loadb(resp->body, resp->body_len, 0, NULL);
    size_t k;
    json_t *seat;
    json_array_foreach(json_object_get(o, "seats"), k, seat)
    {
        const char *id = jstr(seat, "id"), *st = jstr(seat, "status");
        int i = id && st ? seat_index(c, id, (int)k) : -1;
        if (i < 0)
            continue;
        if (strcmp(st, "available") != 0)
            c->taken[i] = 1;
        else if (c->marked_ms[i] < c->map_asked_ms - SEAT_MAP_LAG_MS)
            c->taken[i] = 0; /* not seen taken since the map's snapshot was made */
    }
    json_decref(o);
}

static void refresh_seat_map(sim_crowd_t *c)
{
    if (c->r->sc->nseats == 0 || c->map_in_flight || c->finished)
        return;
    char path[128];
    snprintf(path, sizeof(path), "/v1/events/%s/seats", c->r->event);
    c->map_in_flight = true;
    c->map_asked_ms = (int32_t)(now_rel(c) / 1000000);
    sim_pool_request(c->rsvmap, 0, "GET", path, NULL, NULL, on_seat_map, c);
}

/* -------------------------------------------------------------------- services, progress */

static void on_room_stats(const sim_resp_t *resp, void *arg)
{
    sim_crowd_t *c = arg;
    if (resp->status != 200)
        return;
    json_t *o = json_loadb(resp->body, resp->body_len, 0, NULL);
    json_t *wm = json_object_get(json_object_get(o, "stats"), "watermark");
    if (json_is_number(wm))
        saw_watermark(c, json_number_value(wm));
    json_decref(o);
}

static void sample_service(sim_crowd_t *c, int i, int sec)
{
    sim_run_t *r = c->r;
    sim_opts_t *o = r->o;
    int pid = o->services[i].pid;
    if (o->services[i].pidfile) {
        FILE *pf = fopen(o->services[i].pidfile, "r"); /* procfs-like: a tiny local file */
        if (pf) {
            if (fscanf(pf, "%d", &pid) != 1)
                pid = 0;
            fclose(pf);
        }
    }
    r->svc[i].pid = pid;
    if (pid <= 0)
        return;
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, stt = 0;
    long rss_pages = 0;
    if (p == NULL || sscanf(p + 2,
                            "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu "
                            "%*d %*d %*d %*d %*d %*d %*u %*u %ld",
                            &ut, &stt, &rss_pages) != 3)
        return;
    uint64_t ticks = ut + stt;
    long hz = sysconf(_SC_CLK_TCK);
    if (r->svc[i].last_pid == pid && r->svc[i].last_ticks <= ticks) {
        double cpu = 100.0 * (double)(ticks - r->svc[i].last_ticks) / (double)hz;
        if (cpu > r->svc[i].peak_cpu)
            r->svc[i].peak_cpu = cpu;
        r->svc[i].cpu_sum += cpu;
        r->svc[i].samples++;
        sim_series_set(&r->svc[i].cpu, sec, cpu);
    }
    r->svc[i].last_pid = pid;
    r->svc[i].last_ticks = ticks;
    uint64_t rss_kb = (uint64_t)rss_pages * (uint64_t)(sysconf(_SC_PAGESIZE) / 1024);
    sim_series_set(&r->svc[i].rss, sec, (double)rss_kb / 1024.0);
    if (rss_kb > r->svc[i].peak_rss_kb)
        r->svc[i].peak_rss_kb = rss_kb;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    sim_crowd_t *c = arg;
    sim_run_t *r = c->r;
    int64_t now = now_rel(c);
    int sec = sec_of(now);
    int queued = r->state_count[F_QUEUED] + r->state_count[F_PREQUEUE];
    sim_series_set(&r->s_queue, sec, queued);
    for (int i = 0; i < r->nsvc; i++)
        sample_service(c, i, sec);
    if (!c->finished) { /* the watermark: when each number was let in (ETA accuracy) */
        if (sec > 0 && sec - 1 < r->s_watermark.n) /* carried forward until answered */
            saw_watermark(c, r->s_watermark.v[sec - 1]);
        char path[128];
        snprintf(path, sizeof(path), "/admin/events/%s", r->event);
        sim_pool_request(c->gwadmin, 0, "GET", path, c->gw_admin_hdr, NULL, on_room_stats, c);
    }
    if (r->o->progress) {
        uint64_t rps = r->requests - c->last_requests;
        fprintf(stderr,
                "\r[%s %6.1fs] joining %d queued %d admitted %d holding %d paying %d done %d/%d "
                "| %llu req/s | errors %llu   ",
                now < 0 ? "setup" : "sale", (double)now / 1e9, r->state_count[F_JOINING], queued,
                r->state_count[F_ADMITTED], r->state_count[F_HOLDING], r->state_count[F_CONFIRMING],
                r->state_count[F_DONE], r->nfans, (unsigned long long)rps,
                (unsigned long long)r->errors);
        fflush(stderr);
    }
    c->last_requests = r->requests;
    if (now > 0 && sec % SEAT_MAP_S == 0)
        refresh_seat_map(c);
    /* The operator closes the room once every unit is booked. */
    if (r->sc->sold_out_when_sold && !c->sold_out_sent &&
        r->units_bought >= (uint64_t)r->total_units) {
        c->sold_out_sent = true;
        r->sold_out_ns = now_rel(c);
        json_t *p = json_pack("{s:b}", "sold_out", 1);
        room_patch(c, p, "sold out: every unit is booked");
        json_decref(p);
    }
}

/* -------------------------------------------------------------------- end */

/* The simulator's own loop lag: how late a LAG_PROBE_MS timer fires, i.e. how long the
 * loop was busy with other fans' answers. Every latency the simulator measures includes
 * up to this much of its own delay (an answer waits in the socket meanwhile). */
#define LAG_PROBE_MS 10

static void on_lag(evutil_socket_t fd, short what, void *arg)
{
    sim_crowd_t *c = arg;
    uint64_t now = cm_time_mono_ns();
    if (c->lag_due_ns)
        sim_hist_add(&c->r->loop_lag, now > c->lag_due_ns ? (now - c->lag_due_ns) / 1000 : 0);
    c->lag_due_ns = now + LAG_PROBE_MS * 1000000ull;
    struct timeval tv = {0, LAG_PROBE_MS * 1000};
    evtimer_add(c->lag, &tv);
}

static void finish_night(sim_crowd_t *c)
{
    sim_run_t *r = c->r;
    if (c->finished)
        return;
    c->finished = true;
    r->end_ns = now_rel(c);
    evtimer_del(c->arrivals);
    evtimer_del(c->lag);
    for (int i = 0; i < r->nfans; i++)
        if (r->fans[i].state != F_DONE) {
            fan_done(&r->fans[i], O_CUT);
        }
    on_tick(-1, 0, c);
    if (r->o->progress)
        fputc('\n', stderr);
    /* Requests still in flight are dropped with their pools; the audit waits for the
     * reserve to settle what they started. */
    event_base_loopexit(c->base, NULL);
}

/* The scenario's hard stop (limits.duration_s): whoever is still going is cut. Except
 * when the only fans left are waiting for returns (told "sold out, for now"): the night
 * is otherwise done and their own patience bounds them, so it runs on, once, for
 * returns_patience_s, and they leave as a person would — sold out at the first "sold out"
 * past their patience, with a ticket, or at the 410 once everything is booked. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    sim_crowd_t *c = arg;
    sim_run_t *r = c->r;
    bool only_returns = !c->deadline_extended && r->sc->returns_patience_s > 0;
    for (int i = 0; only_returns && i < r->nfans; i++)
        if (r->fans[i].state != F_DONE && !r->fans[i].awaiting_returns)
            only_returns = false;
    if (only_returns) {
        c->deadline_extended = true;
        timeline_add(c, "limit", "duration_s: the fans waiting for returns see out their patience");
        int64_t ms = (int64_t)(r->sc->returns_patience_s * 1000);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(c->deadline, &tv);
        return;
    }
    finish_night(c);
}

/* -------------------------------------------------------------------- set-up */

static void start_night(sim_crowd_t *c);

static void on_setup(const sim_resp_t *resp, void *arg)
{
    sim_crowd_t *c = arg;
    record(c, EP_ADMIN, resp);
    static const char *const what[] = {"reserve PUT /admin/events", "gateway PUT /admin/events",
                                       "payment simulator settings"};
    if (resp->err || resp->status >= 300) {
        snprintf(c->err, sizeof(c->err), "%s/%s: HTTP %d %s %.*s", what[c->setup_step], c->r->event,
                 resp->status, resp->err ? resp->err : "refused:", (int)resp->body_len, resp->body);
        c->failed = 1;
        event_base_loopexit(c->base, NULL);
        return;
    }
    c->setup_step++;
    start_night(c);
}

static void start_night(sim_crowd_t *c)
{
    sim_run_t *r = c->r;
    sim_scenario_t *s = r->sc;
    char path[128];
    snprintf(path, sizeof(path), "/admin/events/%s", r->event);
    if (c->setup_step == 0) {
        char *b = json_dumps(s->inventory, JSON_COMPACT);
        sim_pool_request(c->rsvadmin, 0, "PUT", path, c->admin_hdr, b, on_setup, c);
        free(b);
        return;
    }
    if (c->setup_step == 1) {
        json_t *room = json_deep_copy(s->room);
        /* t0 (the first arrival) is half a second after the room is created. */
        r->t0_ns = (int64_t)cm_time_mono_ns() + 500000000LL;
        r->wall_start_ms = cm_time_wall_ms() + 500;
        int64_t t0_wall = r->wall_start_ms;
        if (s->arrival == ARR_PREQUEUE) {
            char a[40], b[40];
            cm_format_rfc3339(t0_wall - 1000, a, sizeof(a));
            r->opens_at_ms = t0_wall + (int64_t)(s->prequeue_s * 1000);
            cm_format_rfc3339(r->opens_at_ms, b, sizeof(b));
            json_object_set_new(room, "prequeue_at", json_string(a));
            json_object_set_new(room, "opens_at", json_string(b));
            json_object_set_new(room, "mode", json_string("random_at_open"));
        }
        /* The crowd's fans send no DPoP proofs: their rooms do not bind tickets to keys
         * unless the scenario says so (docs/api.md, DPoP). */
        if (json_object_get(room, "dpop") == NULL)
            json_object_set_new(room, "dpop", json_false());
        /* The simulated fans join without solving a proof of work (docs/api.md): a
         * scenario measures the queue, not the puzzle. */
        json_object_set_new(room, "pow", json_false());
        char *body = json_dumps(room, JSON_COMPACT);
        json_decref(room);
        sim_pool_request(c->gwadmin, 0, "PUT", path, c->gw_admin_hdr, body, on_setup, c);
        free(body);
        return;
    }
    if (c->setup_step == 2 && c->paysim) {
        /* PUT, not PATCH: the scenario defines the provider completely, and a knob it does
         * not name is the simulator's default, not what an earlier night left behind. */
        char *b = s->payment ? json_dumps(s->payment, JSON_COMPACT) : cm_xstrdup("{}");
        sim_pool_request(c->paysim, 0, "PUT", "/v1/settings", NULL, b, on_setup, c);
        free(b);
        return;
    }
    /* Go: arrivals are relative to t0, set when the room was created. */
    r->all_placed_ns = -1;
    r->rate_changed_ns = -1;
    struct timeval tv = {0, 1000};
    evtimer_add(c->arrivals, &tv);
    struct timeval one = {1, 0};
    evtimer_add(c->tick, &one);
    on_lag(-1, 0, c);
    int64_t dl = (int64_t)(s->duration_s * 1000) - now_rel(c) / 1000000;
    struct timeval dtv = {dl / 1000, (dl % 1000) * 1000};
    evtimer_add(c->deadline, &dtv);
    for (int i = 0; i < s->nactions; i++) {
        int64_t ms = (int64_t)(s->actions[i].at_s * 1000) - now_rel(c) / 1000000;
        if (ms < 0)
            ms = 0;
        struct timeval atv = {ms / 1000, (ms % 1000) * 1000};
        c->action_arg[i].c = c;
        c->action_arg[i].i = i;
        c->action_ev[i] = evtimer_new(c->base, on_action, &c->action_arg[i]);
        evtimer_add(c->action_ev[i], &atv);
    }
}

static char *src_plus(const char *base, uint32_t off)
{
    unsigned a, b, cc, d;
    if (sscanf(base, "%u.%u.%u.%u", &a, &b, &cc, &d) != 4)
        return cm_xstrdup(base);
    uint32_t v = (a << 24 | b << 16 | cc << 8 | d) + off;
    return cm_xasprintf("%u.%u.%u.%u", v >> 24, (v >> 16) & 255, (v >> 8) & 255, v & 255);
}

int sim_crowd_run(sim_run_t *r, char *err, size_t errlen)
{
    sim_opts_t *o = r->o;
    sim_scenario_t *s = r->sc;
    int rc = -1;
    sim_crowd_t *c = cm_xcalloc(1, sizeof(*c));
    c->r = r;
    c->rng = s->seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL;
    signal(SIGPIPE, SIG_IGN);
    c->base = event_base_new();
    if (o->ca) {
        c->tls = cm_tls_client_new(o->ca, err, errlen);
        if (c->tls == NULL)
            goto out;
    }
    c->ngw = o->ngateways;
    int per = s->gateway_conns / c->ngw;
    for (int g = 0; g < c->ngw; g++) {
        char *src = src_plus(s->src_base, (uint32_t)(g * per * 2));
        c->gw[g] = sim_pool_new(c->base, o->gateway_urls[g], c->tls, per < 1 ? 1 : per, src,
                                s->timeout_s, err, errlen);
        free(src);
        if (c->gw[g] == NULL)
            goto out;
        if (s->fans_per_address > 0) { /* the crowd's addresses, split over the gateways */
            int addrs = (r->nfans + s->fans_per_address - 1) / s->fans_per_address;
            sim_pool_share_sources(c->gw[g], (addrs + c->ngw - 1) / c->ngw);
        }
    }
    char *rsrc = src_plus(s->src_base, 40000);
    c->rsv = sim_pool_new(c->base, o->reserve_url, c->tls, s->reserve_conns, rsrc, s->timeout_s,
                          err, errlen);
    free(rsrc);
    if (c->rsv == NULL)
        goto out;
    c->rsvmap = sim_pool_new(c->base, o->reserve_url, c->tls, 1, NULL, s->timeout_s, err, errlen);
    if (c->rsvmap == NULL)
        goto out;
    /* The reserve limits nothing per address: a fan's hold or confirm takes whichever
     * connection is free, as on a connection of their own (the gateway's pools stay
     * pinned: there a fan's address is what the join limit counts). */
    sim_pool_spread(c->rsv, true);
    c->gwadmin = sim_pool_new(c->base, o->gateway_admin_url, c->tls, 1, NULL, 30, err, errlen);
    c->rsvadmin = sim_pool_new(c->base, o->reserve_admin_url, c->tls, 1, NULL, 30, err, errlen);
    if (c->gwadmin == NULL || c->rsvadmin == NULL)
        goto out;
    if (o->paysim_url) {
        c->paysim = sim_pool_new(c->base, o->paysim_url, c->tls, 1, NULL, 60, err, errlen);
        if (c->paysim == NULL)
            goto out;
    }
    snprintf(c->admin_hdr, sizeof(c->admin_hdr), "Authorization: Bearer %s\r\n",
             o->admin_token ? o->admin_token : "");
    const char *gwtok = o->gateway_admin_token ? o->gateway_admin_token : o->admin_token;
    snprintf(c->gw_admin_hdr, sizeof(c->gw_admin_hdr), "Authorization: Bearer %s\r\n",
             gwtok ? gwtok : "");
    c->taken = cm_xcalloc((size_t)s->nseats + 1, 1);
    c->marked_ms = cm_xcalloc((size_t)s->nseats + 1, sizeof(int32_t));
    if (s->nseats > 0) {
        c->cdf = cm_xcalloc((size_t)s->nseats, sizeof(double));
        double acc = 0;
        for (int i = 0; i < s->nseats; i++) {
            acc += s->choice == CHOICE_HOTSPOT ? pow((double)s->seats[i].row, -s->zipf_s) : 1.0;
            c->cdf[i] = acc;
        }
    }
    r->total_units = s->nseats;
    for (int i = 0; i < s->npools; i++)
        r->total_units += s->pools[i].capacity;
    r->fans = cm_xcalloc((size_t)r->nfans, sizeof(sim_fan_t));
    c->arrivals = evtimer_new(c->base, on_arrivals, c);
    c->tick = event_new(c->base, -1, EV_PERSIST, on_tick, c);
    c->deadline = evtimer_new(c->base, on_deadline, c);
    c->lag = evtimer_new(c->base, on_lag, c);
    c->sigchld = evsignal_new(c->base, SIGCHLD, on_sigchld, c);
    event_add(c->sigchld, NULL);
    c->action_rec = cm_xcalloc((size_t)s->nactions + 1, sizeof(json_t *));
    c->action_pid = cm_xcalloc((size_t)s->nactions + 1, sizeof(pid_t));
    c->action_ev = cm_xcalloc((size_t)s->nactions + 1, sizeof(struct event *));
    c->action_arg = cm_xcalloc((size_t)s->nactions + 1, sizeof(*c->action_arg));
    r->timeline = json_array();
    r->sold_out_ns = -1;
    r->nsvc = o->nservices;
    for (int i = 0; i < o->nservices; i++)
        snprintf(r->svc[i].name, sizeof(r->svc[i].name), "%s", o->services[i].name);
    plan_fans(c);
    start_night(c);
    event_base_dispatch(c->base);
    if (c->failed) {
        snprintf(err, errlen, "%s", c->err);
        goto out;
    }
    /* Wait (bounded) for operator commands still running, e.g. a restart. */
    for (int i = 0; i < s->nactions; i++)
        if (c->action_pid[i] > 0) {
            int st = 0;
            if (waitpid(c->action_pid[i], &st, 0) == c->action_pid[i])
                json_object_set_new(c->action_rec[i], "exit",
                                    json_integer(WIFEXITED(st) ? WEXITSTATUS(st) : -1));
        }
    rc = 0;
out:
    for (int i = 0; r->fans && i < r->nfans; i++) {
        if (r->fans[i].timer)
            event_free(r->fans[i].timer);
        r->fans[i].timer = NULL;
        free(r->fans[i].token);
        r->fans[i].token = NULL;
    }
    for (int g = 0; g < c->ngw; g++)
        sim_pool_free(c->gw[g]);
    sim_pool_free(c->rsv);
    sim_pool_free(c->rsvmap);
    sim_pool_free(c->gwadmin);
    sim_pool_free(c->rsvadmin);
    sim_pool_free(c->paysim);
    if (c->arrivals)
        event_free(c->arrivals);
    if (c->tick)
        event_free(c->tick);
    if (c->deadline)
        event_free(c->deadline);
    if (c->lag)
        event_free(c->lag);
    if (c->sigchld)
        event_free(c->sigchld);
    for (int i = 0; c->action_ev && i < s->nactions; i++)
        if (c->action_ev[i])
            event_free(c->action_ev[i]);
    free(c->action_ev);
    free(c->action_arg);
    free(c->action_rec);
    free(c->action_pid);
    free(c->taken);
    free(c->seat_by_id);
    free(c->marked_ms);
    free(c->cdf);
    if (c->tls)
        cm_tls_free(c->tls);
    if (c->base)
        event_base_free(c->base);
    free(c);
    return rc;
}
