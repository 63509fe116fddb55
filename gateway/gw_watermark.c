/*
 * gw_watermark — see gw_watermark.h.
 *
 * The tick: SMEMBERS of the room set (to learn rooms created through other gateways),
 * then one advance.lua per room not already waiting for an answer; every
 * RELIST_TICKS ticks the rooms this gateway knows are re-added to the set (it is the one
 * key outside an event's hash slot, so it may be lost on its own). A Redis outage only
 * freezes the caches (polls keep their last watermark, admissions fail with 503); the
 * next successful tick catches up, since the script accrues from Redis-side time.
 */
#include "gw_watermark.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "gw_metrics.h"
#include "gw_rediskeys.h"
#include "gw_lua.h"
#include "gw_req.h"

#define RATE_WINDOW_MS  10000
#define SAMPLE_EVERY_MS 250
#define RELIST_TICKS    25
#define ADVANCE_HEAD    12 /* advance.lua's reply before the settings pairs */
#define RESTORE_ARGS    6  /* advance.lua's ARGV before the settings pairs */

typedef struct refresh_op {
    gw_server_t *srv;
    char event[CM_IDENT_MAX + 1];
    gw_room_cb cb;
    void *arg;
} refresh_op_t;

void gw_watermark_saw_number(gw_room_t *room, uint64_t gen, uint64_t num)
{
    if (gen == room->s.gen && (int64_t)num > room->n_seen)
        room->n_seen = (int64_t)num;
}

int64_t gw_watermark_now_ms(const gw_room_t *room)
{
    return cm_time_wall_ms() + room->clock_offset_ms;
}

int64_t gw_watermark_queue_size(const gw_room_t *room)
{
    int64_t q = room->n - room->wm;
    return (q > 0 ? q : 0) + room->prequeue;
}

gw_phase_t gw_watermark_phase(const gw_room_t *room, int64_t now_ms)
{
    const gw_settings_t *s = &room->s;
    if (s->sold_out || gw_room_stock_out(room))
        return GW_PHASE_SOLD_OUT;
    if (s->closes_at > 0 && now_ms >= s->closes_at)
        return GW_PHASE_CLOSED;
    if (s->paused || gw_settings_rate_at(s, now_ms) <= 0)
        return GW_PHASE_PAUSED;
    if (!room->opened && s->opens_at > 0 && now_ms < s->opens_at)
        return s->prequeue_at > 0 && now_ms < s->prequeue_at ? GW_PHASE_SCHEDULED
                                                             : GW_PHASE_PREQUEUE;
    int64_t maxa = gw_settings_max_active_at(s, now_ms);
    if (maxa > 0 && room->active >= maxa)
        return GW_PHASE_FULL;
    return GW_PHASE_OPEN;
}

double gw_watermark_rate(const gw_room_t *room)
{
    if (room->s.paused || room->s.sold_out || gw_room_stock_out(room))
        return 0;
    double measured = room->nsamples >= 4 ? room->pass_rate : 0;
    int64_t now = gw_watermark_now_ms(room); /* the phase in force rules (gw_sched.h) */
    return gw_watermark_expected_rate((double)gw_settings_rate_at(&room->s, now) / 60.0, measured,
                                      gw_settings_max_active_at(&room->s, now), room->active);
}

double gw_watermark_expected_rate(double configured, double measured, int64_t max_active,
                                  int64_t active)
{
    if (configured <= 0)
        return 0;
    /* max_active holds the line: numbers pass as shoppers leave, which only the
     * measured rate knows (when there is one yet). */
    if (max_active > 0 && (double)(max_active - active) < configured && measured > 0)
        return measured < configured ? measured : configured;
    /* Otherwise a waiting fan is passed at the configured rate, plus the slots of no-shows
     * passed again. A measured rate below it says only that the line was shorter than
     * what the rate lets in (joins were the limit, as in the first seconds of a sale),
     * not how fast the fans now behind will move. */
    return measured > configured ? measured : configured;
}

double gw_watermark_noshow_share(int64_t win_passes, int64_t win_claims, int64_t noshows,
                                 int64_t claimed)
{
    double share = 0;
    if (win_passes >= GW_NOSHOW_MIN_PASSES)
        share = 1.0 - (double)win_claims / (double)win_passes;
    else if (noshows + claimed > 0)
        share = (double)noshows / (double)(noshows + claimed);
    if (share < 0)
        return 0;
    return share > GW_NOSHOW_SHARE_MAX ? GW_NOSHOW_SHARE_MAX : share;
}

double gw_watermark_eta_model(double position, double rate, double recent, double passed,
                              double share, double noshow_grace_s)
{
    if (rate <= 0)
        return -1;
    if (position <= 0)
        return 0;
    if (share <= 0 || noshow_grace_s <= 0)
        return position / rate;
    /* what comes back over the next grace was passed over the last one: at most all the
     * room has passed (just after the opening, little has) */
    double last = (recent > 0 ? recent : rate) * noshow_grace_s;
    if (passed >= 0 && last > passed)
        last = passed;
    double t = 0, left = position, prev = last / noshow_grace_s;
    for (int k = 0; k < 64; k++) { /* one grace period at a time; converges fast */
        double w = rate + share * prev;
        if (left <= w * noshow_grace_s)
            return t + left / w;
        left -= w * noshow_grace_s;
        t += noshow_grace_s;
        prev = w;
    }
    return t + left * (1.0 - share) / rate; /* the steady state */
}

double gw_watermark_eta_ring(double position, double rate, const double *passes, size_t n,
                             double share, int grace_s)
{
    if (rate <= 0)
        return -1;
    if (position <= 0)
        return 0;
    if (share <= 0 || grace_s <= 0)
        return position / rate;
    if (n > (size_t)grace_s) { /* only the last grace comes back */
        passes += n - (size_t)grace_s;
        n = (size_t)grace_s;
    }
    double t = 0, left = position, sum = 0;
    for (int k = 0; k < grace_s; k++) { /* second k comes back from second k - grace_s */
        long i = (long)n - grace_s + k;
        double w = rate + share * (i >= 0 ? passes[i] : 0);
        if (left <= w)
            return t + left / w;
        left -= w;
        t += 1;
        sum += w;
    }
    /* beyond the first grace: what came back over it, one grace at a time */
    double g = (double)grace_s, prev = sum / g;
    for (int k = 0; k < 64; k++) {
        double w = rate + share * prev;
        if (left <= w * g)
            return t + left / w;
        left -= w * g;
        t += g;
        prev = w;
    }
    return t + left * (1.0 - share) / rate; /* the steady state */
}

/* The last grace's passes per second from the room's ring, oldest first, into out (at
 * most GW_PASS_RING - 1); false when the ring does not cover the grace and the room had
 * passed numbers before its oldest second (a gateway started mid-queue: not known). */
static bool ring_passes(const gw_room_t *room, int grace_s, double *out, size_t *n)
{
    if (room->pass_len == 0)
        return false;
    size_t have = room->pass_len - 1, want = (size_t)grace_s;
    size_t oldest = (room->pass_head + GW_PASS_RING - have) % GW_PASS_RING;
    if (have < want && room->pass_ring[oldest] > 0)
        return false;
    *n = have < want ? have : want;
    for (size_t i = 0; i < *n; i++) {
        size_t b = (room->pass_head + GW_PASS_RING - (*n - 1 - i)) % GW_PASS_RING;
        out[i] =
            (double)(room->pass_ring[b] - room->pass_ring[(b + GW_PASS_RING - 1) % GW_PASS_RING]);
    }
    return true;
}

double gw_watermark_retired_share(int64_t retired, int64_t judged)
{
    if (judged < GW_NOSHOW_MIN_PASSES)
        return -1;
    double share = (double)retired / (double)judged;
    if (share < 0)
        return 0;
    return share > GW_NOSHOW_SHARE_MAX ? GW_NOSHOW_SHARE_MAX : share;
}

/* The judged share from the ring (gw_watermark_retired_share): the last rate window's
 * retirements over what was passed in the window a grace before; -1 while the ring is
 * shorter than both. */
static double ring_share(const gw_room_t *room, int grace_s)
{
    size_t w = RATE_WINDOW_MS / 1000, g = (size_t)grace_s;
    if (grace_s <= 0 || g + w >= GW_PASS_RING || room->pass_len <= g + w)
        return -1;
    size_t now = room->pass_head, w_ago = (now + GW_PASS_RING - w) % GW_PASS_RING;
    size_t g_ago = (now + GW_PASS_RING - g) % GW_PASS_RING;
    size_t gw_ago = (now + GW_PASS_RING - g - w) % GW_PASS_RING;
    return gw_watermark_retired_share(room->noshow_ring[now] - room->noshow_ring[w_ago],
                                      room->pass_ring[g_ago] - room->pass_ring[gw_ago]);
}

int64_t gw_watermark_ahead_now(const gw_room_t *room, int64_t position, double rate,
                               uint64_t mono_ms)
{
    if (position <= 0 || rate <= 0 || mono_ms <= room->learned_ms)
        return position;
    uint64_t age = mono_ms - room->learned_ms;
    if (age > GW_TICK_MAX_MS)
        age = GW_TICK_MAX_MS;
    int64_t ahead = position - (int64_t)(rate * (double)age / 1000.0);
    return ahead > 0 ? ahead : 1;
}

double gw_watermark_rate_ahead(const gw_room_t *room, int64_t position)
{
    double rate = gw_watermark_rate(room),
           configured = (double)gw_settings_rate_at(&room->s, gw_watermark_now_ms(room)) / 60.0;
    if (rate <= 0 || position <= 0)
        return rate;
    if (rate < configured) /* max_active holds the line: what it lets through is measured */
        return rate;
    bool sampled = room->nsamples >= 4;
    int grace = room->s.noshow_grace_seconds;
    /* the no-show share the grace has judged (ring_share), else the rate window's live
     * one while the ring is shorter than a grace and a window */
    double share = ring_share(room, grace);
    if (share < 0)
        share = sampled ? gw_watermark_noshow_share(room->win_passes, room->win_claims,
                                                    room->noshows, room->claimed)
                        : 0;
    double passes[GW_PASS_RING];
    size_t n = 0;
    double eta =
        share > 0 && grace > 0 && grace < GW_PASS_RING && ring_passes(room, grace, passes, &n)
            ? gw_watermark_eta_ring((double)position, configured, passes, n, share, grace)
            : gw_watermark_eta_model((double)position, configured, sampled ? room->pass_rate : 0,
                                     (double)room->wm, share, (double)grace);
    return eta > 0 ? (double)position / eta : rate;
}

int64_t gw_watermark_eta_s(int64_t position, double rate_per_s)
{
    if (rate_per_s <= 0)
        return -1;
    if (position <= 0)
        return 0;
    /* to the nearest second (rounding up told a 5 s wait 10% too long on average), but a
     * fan still waiting is never told 0 */
    int64_t s = (int64_t)((double)position / rate_per_s + 0.5);
    return s > 0 ? s : 1;
}

int64_t gw_watermark_poll_ms(int64_t position, double rate_per_s, int64_t min_ms, int64_t max_ms,
                             uint32_t rnd)
{
    double base = (double)max_ms;
    if (rate_per_s > 0)
        base = (double)position / rate_per_s * 1000.0 / 10.0;
    if (base < (double)min_ms)
        base = (double)min_ms;
    if (base > (double)max_ms)
        base = (double)max_ms;
    double jitter = 0.8 + 0.4 * ((double)(rnd % 10001) / 10000.0);
    int64_t ms = (int64_t)(base * jitter);
    return ms < 100 ? 100 : ms;
}

int64_t gw_watermark_poll_eta_ms(int64_t position, double rate_per_s, int64_t min_ms,
                                 int64_t max_ms, uint32_t rnd)
{
    double u = (double)(rnd % 10001) / 10000.0;
    if (rate_per_s <= 0) /* paused: about max_ms, not in step */
        return (int64_t)((double)max_ms * (0.8 + 0.4 * u));
    double eta = (double)(position > 0 ? position : 0) / rate_per_s * 1000.0;
    /* just after the watermark is expected to pass them: one poll, not ten (the wait a
     * fan sees is the ETA plus this margin, so it is kept small) */
    double ms = eta * (1.01 + 0.05 * u);
    if (ms > (double)max_ms) /* far back: within the last fifth below max_ms, not in step */
        return (int64_t)((double)max_ms * (0.8 + 0.2 * u));
    /* The front of the queue: poll_min_ms, unless the watermark should pass them sooner:
     * then just after that and a tick (a fan one poll short of admission would otherwise
     * wait a whole poll_min_ms for it: most of a short wait). */
    if (ms < (double)min_ms)
        ms = position > 0 && eta < (double)min_ms ? ms + GW_FRONT_POLL_MS * (1.0 + u)
                                                  : (double)min_ms * (1.0 + 0.2 * u);
    if (ms > (double)min_ms * 1.2 && eta < (double)min_ms)
        ms = (double)min_ms * (1.0 + 0.2 * u);
    return (int64_t)ms;
}

int64_t gw_watermark_poll_cap(int64_t poll_ms, int64_t position, int64_t rate_per_minute,
                              int64_t grace_seconds)
{
    double passed_meanwhile = (double)rate_per_minute / 60000.0 * (double)poll_ms;
    int64_t cap = grace_seconds * 1000 / 2;
    if ((double)position <= passed_meanwhile + 1 && poll_ms > cap)
        return cap < 100 ? 100 : cap;
    return poll_ms;
}

int64_t gw_watermark_restore_jump(double join_peak_per_s, uint64_t stale_ms)
{
    double peak = join_peak_per_s > 0 ? join_peak_per_s : 0;
    /* Joins need Redis: a gateway cut off longer than the rate window learns of the loss
     * after the gateways that were not (they tick every GW_TICK_MAX_MS at most), so
     * its staleness counts up to the window, not without bound (one hole, not a huge one). */
    if (stale_ms > RATE_WINDOW_MS)
        stale_ms = RATE_WINDOW_MS;
    double jump = 2.0 * peak * (double)(stale_ms + GW_TICK_MAX_MS) / 1000.0 + 0.999;
    return jump > GW_RESTORE_JUMP_MIN ? (int64_t)jump : GW_RESTORE_JUMP_MIN;
}

/* The fastest join rate between consecutive samples from old to now (ring positions). */
static double join_peak(const gw_room_t *room, size_t span)
{
    double peak = 0;
    for (size_t i = 0; i < span; i++) {
        const gw_sample_t *b = &room->samples[(room->head + GW_SAMPLES - 1 - i) % GW_SAMPLES];
        const gw_sample_t *a = &room->samples[(room->head + GW_SAMPLES - 2 - i) % GW_SAMPLES];
        double dt = (double)(b->mono_ms - a->mono_ms) / 1000.0;
        if (dt > 0 && (double)(b->n - a->n) / dt > peak)
            peak = (double)(b->n - a->n) / dt;
    }
    return peak;
}

/* The watermark and the no-shows at the end of this second: a new ring entry once a
 * second has passed (seconds without a read repeat the last values: nothing seen passed
 * in them). */
static void ring_note(gw_room_t *room, uint64_t mono_ms)
{
    uint64_t sec = mono_ms / 1000;
    if (room->pass_len > 0 && room->wm < room->pass_ring[room->pass_head])
        room->pass_len = 0; /* a new generation of the room: its numbers start again */
    if (room->pass_len == 0) {
        room->pass_head = 0;
        room->pass_len = 1;
        room->pass_sec = sec;
    } else if (sec > room->pass_sec) {
        uint64_t gap = sec - room->pass_sec;
        int64_t last = room->pass_ring[room->pass_head];
        int64_t last_ns = room->noshow_ring[room->pass_head];
        for (uint64_t i = 1; i < gap && i < GW_PASS_RING; i++) {
            room->pass_head = (room->pass_head + 1) % GW_PASS_RING;
            room->pass_ring[room->pass_head] = last;
            room->noshow_ring[room->pass_head] = last_ns;
        }
        room->pass_head = (room->pass_head + 1) % GW_PASS_RING;
        room->pass_len += gap < GW_PASS_RING ? (size_t)gap : GW_PASS_RING;
        if (room->pass_len > GW_PASS_RING)
            room->pass_len = GW_PASS_RING;
        room->pass_sec = sec;
    }
    room->pass_ring[room->pass_head] = room->wm;
    room->noshow_ring[room->pass_head] = room->noshows;
}

void gw_watermark_sample(gw_room_t *room, uint64_t mono_ms)
{
    ring_note(room, mono_ms);
    if (room->nsamples > 0) {
        const gw_sample_t *last = &room->samples[(room->head + GW_SAMPLES - 1) % GW_SAMPLES];
        if (mono_ms - last->mono_ms < SAMPLE_EVERY_MS)
            return;
    }
    room->samples[room->head] = (gw_sample_t){mono_ms, room->wm, room->n, room->claimed};
    room->head = (room->head + 1) % GW_SAMPLES;
    if (room->nsamples < GW_SAMPLES)
        room->nsamples++;
    /* oldest sample inside the window */
    const gw_sample_t *now = &room->samples[(room->head + GW_SAMPLES - 1) % GW_SAMPLES];
    const gw_sample_t *old = now;
    size_t span = 0;
    for (size_t i = 1; i < room->nsamples; i++) {
        const gw_sample_t *s = &room->samples[(room->head + GW_SAMPLES - 1 - i) % GW_SAMPLES];
        if (now->mono_ms - s->mono_ms > RATE_WINDOW_MS)
            break;
        old = s;
        span = i;
    }
    room->join_peak = join_peak(room, span);
    double dt = (double)(now->mono_ms - old->mono_ms) / 1000.0;
    if (dt <= 0)
        return;
    room->win_passes = now->wm - old->wm;
    room->win_claims = now->claimed - old->claimed;
    room->pass_rate = (double)(now->wm - old->wm) / dt;
    room->join_rate = (double)(now->n - old->n) / dt;
    room->claim_rate = (double)(now->claimed - old->claimed) / dt;
}

/* Applies an advance.lua answer {1, now, wm, n, claimed, active, noshows, opened, prequeue,
 * restored, left, held, cfg pairs…}. Returns false when the room does not exist (then this gateway
 * forgets it: it was deleted, or this gateway never knew it). */
static bool apply(gw_room_t *r, const cm_redis_reply_t *reply)
{
    size_t n = cm_redis_reply_count(reply);
    if (cm_redis_reply_type(reply) != CM_REDIS_ARRAY || n < 1 ||
        cm_redis_reply_int(cm_redis_reply_at(reply, 0)) != 1 || n < ADVANCE_HEAD) {
        if (cm_redis_reply_type(reply) == CM_REDIS_ARRAY && n >= 1 &&
            cm_redis_reply_int(cm_redis_reply_at(reply, 0)) == 0) {
            gw_rooms_clear_raw(r);
            r->s.gen = 0;
        }
        r->present = false;
        return false;
    }
    int64_t v[ADVANCE_HEAD];
    for (size_t i = 0; i < ADVANCE_HEAD; i++)
        v[i] = cm_redis_reply_int(cm_redis_reply_at(reply, i));
    r->clock_offset_ms = v[1] - cm_time_wall_ms();
    r->wm = v[2];
    r->n = v[3];
    r->claimed = v[4];
    r->active = v[5];
    r->noshows = v[6];
    r->opened = v[7] == 1;
    r->prequeue = v[8];
    r->restored = v[9] == 1;
    r->stock_known = v[11] >= 0;
    r->stock_left = v[10];
    r->stock_held = v[11];
    gw_settings_defaults(&r->s);
    gw_rooms_clear_raw(r);
    r->cfg_raw = cm_xcalloc(n - ADVANCE_HEAD + 1, sizeof(char *));
    for (size_t i = ADVANCE_HEAD; i + 1 < n; i += 2) {
        const char *k = cm_redis_reply_str(cm_redis_reply_at(reply, i), NULL);
        const char *val = cm_redis_reply_str(cm_redis_reply_at(reply, i + 1), NULL);
        if (k && val) {
            gw_settings_set(&r->s, k, val);
            r->cfg_raw[r->ncfg_raw++] = cm_xstrdup(k);
            r->cfg_raw[r->ncfg_raw++] = cm_xstrdup(val);
        }
    }
    if (r->n_seen < r->n)
        r->n_seen = r->n;
    r->present = true;
    r->learned_ms = cm_time_mono_ns() / 1000000;
    gw_watermark_sample(r, r->learned_ms);
    cm_gauge_set(r->g_queue, (double)gw_watermark_queue_size(r));
    cm_gauge_set(r->g_wm, (double)r->wm);
    cm_gauge_set(r->g_n, (double)r->n);
    cm_gauge_set(r->g_claimed, (double)r->claimed);
    cm_gauge_set(r->g_active, (double)r->active);
    cm_gauge_set(r->g_noshows, (double)r->noshows);
    cm_gauge_set(r->g_left, (double)r->stock_left);
    cm_gauge_set(r->g_held, (double)r->stock_held);
    gw_phase_t phase = gw_watermark_phase(r, gw_watermark_now_ms(r));
    for (int k = 0; k < GW_NPHASES; k++)
        cm_gauge_set(r->g_phase[k], k == (int)phase ? 1 : 0);
    return true;
}

static void relist(gw_server_t *srv);
static void unlist(gw_server_t *srv, const gw_room_t *r);

static void on_advance(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    refresh_op_t *op = arg;
    gw_server_t *srv = op->srv;
    gw_room_t *r = gw_rooms_add(srv->rooms, srv->svc.metrics, op->event);
    r->refreshing = false;
    const char *why = err;
    if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ERROR) {
        cm_log(CM_LOG_WARN, "advance %s: %s", op->event, cm_redis_reply_str(reply, NULL));
        why = cm_err_server;
    }
    if (why != NULL) {
        cm_counter_inc(srv->m->watermark.advance_errors);
        if (op->cb)
            op->cb(why, NULL, op->arg);
    } else {
        bool exists = apply(r, reply);
        if (exists && r->restored) {
            cm_log(CM_LOG_WARN,
                   "waiting room %s was missing from Redis: written back from this gateway's "
                   "memory (watermark %" PRId64 ", last number %" PRId64 ")",
                   r->event, r->wm, r->n);
            relist(srv);
        } else if (!exists && !r->unlisted) {
            unlist(srv, r); /* deleted (or never created): not worth a tick of anyone's */
        }
        r->unlisted = !exists;
        if (op->cb)
            op->cb(NULL, exists ? r : NULL, op->arg);
    }
    free(op);
}

void gw_watermark_refresh(gw_server_t *srv, const char *event, gw_room_cb cb, void *arg)
{
    refresh_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->srv = srv;
    snprintf(op->event, sizeof(op->event), "%s", event);
    op->cb = cb;
    op->arg = arg;
    gw_room_t *r = gw_rooms_get(srv->rooms, event);
    size_t npairs = r && r->s.gen != 0 ? r->ncfg_raw : 0;
    const char **argv = cm_xcalloc(GW_K_COUNT + RESTORE_ARGS + npairs, sizeof(char *));
    gw_rediskeys_t keys;
    int argc = gw_rediskeys_argv(event, &keys, argv);
    char gen[21] = "", wm[24] = "0", n[24] = "0", claimed[24] = "0", jump[24] = "0";
    if (npairs > 0) {
        gw_settings_gen_text(r->s.gen, gen);
        snprintf(wm, sizeof(wm), "%" PRId64, r->wm);
        snprintf(n, sizeof(n), "%" PRId64, r->n_seen > r->n ? r->n_seen : r->n);
        snprintf(claimed, sizeof(claimed), "%" PRId64, r->claimed);
        uint64_t now = cm_time_mono_ns() / 1000000;
        snprintf(
            jump, sizeof(jump), "%" PRId64,
            gw_watermark_restore_jump(r->join_peak, now > r->learned_ms ? now - r->learned_ms : 0));
    }
    argv[argc++] = gen;
    argv[argc++] = wm;
    argv[argc++] = n;
    argv[argc++] = claimed;
    argv[argc++] = r && r->opened ? "1" : "0";
    argv[argc++] = jump;
    for (size_t i = 0; i < npairs; i++)
        argv[argc++] = r->cfg_raw[i];
    cm_counter_inc(srv->m->watermark.advance_runs);
    int rc =
        cm_redis_eval(srv->redis, gw_lua()->advance, on_advance, op, GW_K_COUNT, argc, argv, NULL);
    free(argv);
    if (rc != 0) {
        cm_counter_inc(srv->m->watermark.advance_errors);
        if (cb)
            cb(cm_err_closed, NULL, arg);
        free(op);
        return;
    }
    if (r)
        r->refreshing = true;
}

static void on_relisted(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    (void)reply;
    (void)arg;
    if (err != NULL)
        cm_log(CM_LOG_DEBUG, "re-listing the waiting rooms: %s", err);
}

/* SREM of a room that no longer exists, which a relist may have raced back into the set
 * (a PUT re-adds it; every gateway holding a live room re-adds it within RELIST_TICKS). */
static void unlist(gw_server_t *srv, const gw_room_t *r)
{
    const char *argv[] = {"SREM", GW_ROOMS_KEY, r->event};
    if (cm_redis_command(srv->redis, on_relisted, NULL, 3, argv, NULL) != 0)
        cm_log(CM_LOG_DEBUG, "unlisting %s: Redis is down", r->event);
}

/* SADD of every room this gateway knows to exist (discovery heals after a loss). */
static void relist(gw_server_t *srv)
{
    size_t n;
    gw_room_t **rooms = gw_rooms_all(srv->rooms, &n);
    const char **argv = cm_xcalloc(n + 2, sizeof(char *));
    int argc = 0;
    argv[argc++] = "SADD";
    argv[argc++] = GW_ROOMS_KEY;
    for (size_t i = 0; i < n; i++) {
        if (rooms[i]->present)
            argv[argc++] = rooms[i]->event;
    }
    if (argc > 2 && cm_redis_command(srv->redis, on_relisted, NULL, argc, argv, NULL) != 0)
        cm_log(CM_LOG_DEBUG, "re-listing the waiting rooms: Redis is down");
    free(argv);
}

static void on_members(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    gw_server_t *srv = arg;
    if (err != NULL || cm_redis_reply_type(reply) != CM_REDIS_ARRAY)
        return;
    for (size_t i = 0; i < cm_redis_reply_count(reply); i++) {
        const char *ev = cm_redis_reply_str(cm_redis_reply_at(reply, i), NULL);
        if (ev && cm_parse_ident(ev))
            gw_rooms_add(srv->rooms, srv->svc.metrics, ev);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    gw_server_t *srv = arg;
    if (cm_redis_connected(srv->redis)) {
        const char *argv[] = {"SMEMBERS", GW_ROOMS_KEY};
        if (cm_redis_command(srv->redis, on_members, srv, 2, argv, NULL) != 0)
            cm_log(CM_LOG_DEBUG, "tick: Redis is down");
        if (gw_rooms_count_pass(srv->rooms) % RELIST_TICKS == 0)
            relist(srv);
        size_t n;
        gw_room_t **rooms = gw_rooms_all(srv->rooms, &n); /* refresh adds no room */
        for (size_t i = 0; i < n; i++) {
            if (!rooms[i]->refreshing)
                gw_watermark_refresh(srv, rooms[i]->event, NULL, NULL);
        }
    }
    struct timeval tv = {0, (suseconds_t)srv->cfg.tick_ms * 1000};
    evtimer_add(srv->tick, &tv);
}

void gw_watermark_start(gw_server_t *srv)
{
    srv->tick = evtimer_new(srv->base, on_tick, srv);
    struct timeval tv = {0, 1000};
    evtimer_add(srv->tick, &tv);
}

void gw_watermark_metrics_register(gw_watermark_metrics_t *wm, cm_metrics_t *reg)
{
    wm->advance_runs = cm_metrics_counter(reg, "onsale_gateway_watermark_advances_total",
                                          "runs of the watermark advance script", NULL);
    wm->advance_errors = cm_metrics_counter(reg, "onsale_gateway_watermark_errors_total",
                                            "failed runs of the watermark advance script", NULL);
}
