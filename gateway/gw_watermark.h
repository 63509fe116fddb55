/*
 * gw_watermark — each gateway's cached view of every waiting room, and the timer that
 * advances the watermarks.
 *
 * Every tick_ms (≤ 250 ms) the timer runs advance.lua once per known room: the script
 * moves the room's watermark by the time elapsed since anyone last did (idempotent, no
 * leader, N gateways admit at the configured rate in total) and returns the room's
 * settings and counters, which become this gateway's cache. Status polls read only the
 * cache, so they never wait on Redis; a settings change reaches every gateway within
 * one tick. Rooms are discovered through the GW_ROOMS_KEY set.
 *
 * Redis losing its data (invariant 12): every advance also carries what this gateway
 * knows of the room — its settings hash as last read, the highest watermark, the highest
 * number issued or seen in a verified ticket, the claimed count — and advance.lua writes
 * back whatever Redis lacks (max of what any gateway knew). Fans' numbers live in their
 * signed tickets, so every fan keeps their place. A room deleted through the API leaves
 * a tombstone, so it is not written back. Numbering resumes past the highest number this
 * gateway saw plus gw_watermark_restore_jump, so a number another gateway handed out
 * since this one last learned the count is not handed out again (invariant 13).
 *
 * The rooms themselves, and the lookups every handler makes, are the registry's
 * (gw_rooms.h). Loop thread only.
 */
#ifndef GW_WATERMARK_H
#define GW_WATERMARK_H

#include <stdbool.h>
#include <stdint.h>

#include "gw_rooms.h"

typedef struct gw_server gw_server_t;

#define GW_TICK_MAX_MS       250 /* tick_ms's maximum (gw_config.c) */
#define GW_RESTORE_JUMP_MIN  64  /* numbers skipped at least when Redis lost some */
#define GW_FRONT_POLL_MS     100 /* a fan about to be passed polls 100–200 ms after */
#define GW_NOSHOW_MIN_PASSES 50  /* passes in the rate window before its no-show share counts */
#define GW_NOSHOW_SHARE_MAX  0.9 /* a no-show share above this is believed as this */

/** err NULL: room is the refreshed room, or NULL when the event has no waiting room. */
typedef void (*gw_room_cb)(const char *err, gw_room_t *room, void *arg);
/** Runs advance.lua for event now and refreshes its cache; cb (may be NULL) after. */
void gw_watermark_refresh(gw_server_t *srv, const char *event, gw_room_cb cb, void *arg);
/** Starts the periodic timer (loop thread; before dispatch). */
void gw_watermark_start(gw_server_t *srv);

/** Records a verified ticket's number of the room's current generation (loop thread). */
void gw_watermark_saw_number(gw_room_t *room, uint64_t gen, uint64_t num);

/** Now on Redis's clock, estimated from this host's (ms since the epoch). */
int64_t gw_watermark_now_ms(const gw_room_t *room);
/** Fans waiting (numbered, not yet let in) plus the pre-queue. */
int64_t gw_watermark_queue_size(const gw_room_t *room);

/**
 * The room's phase at now_ms (its clock, gw_watermark_now_ms), from its settings and
 * counters as last read: sold out, then closed, paused, before the opening (scheduled or
 * pre-queue), full, open — in that order of precedence. Only GW_PHASE_OPEN means a
 * waiting fan should see the watermark move (the admission-stalled alert asks this).
 * Pure.
 */
gw_phase_t gw_watermark_phase(const gw_room_t *room, int64_t now_ms);
/** Admission rate used for ETAs and poll hints (gw_watermark_expected_rate of the room's
 *  configured and measured pass rates); 0 while paused or sold out. */
double gw_watermark_rate(const gw_room_t *room);
/**
 * The average rate at which the watermark will cover the position numbers ahead of a fan,
 * from the room as last read (recomputed at every poll, so a PATCHed rate counts from
 * the next tick): the configured rate, plus the slots of the live no-show share passed
 * again after the grace (gw_watermark_eta_model); with max_active holding the line, as
 * gw_watermark_rate. 0 while paused, sold out or at rate 0. Pure.
 */
double gw_watermark_rate_ahead(const gw_room_t *room, int64_t position);

/* --- pure estimators (unit-tested) --- */

/**
 * Passes per second a fan waiting now can expect: the configured rate (or the measured
 * rate when higher: no-shows' slots passed again), since a measured rate below it only
 * shows the line was short; with max_active closer than one second's worth of passes,
 * the measured rate (at most the configured one) when there is one.
 */
double gw_watermark_expected_rate(double configured, double measured, int64_t max_active,
                                  int64_t active);
/**
 * The numbers still ahead of a fan at position (as of the room's last read) at mono_ms:
 * the watermark has moved on at rate since that read, for at most GW_TICK_MAX_MS (beyond
 * that the read is stale, not the watermark fast). At least 1 while position > 0. Pure.
 */
int64_t gw_watermark_ahead_now(const gw_room_t *room, int64_t position, double rate,
                               uint64_t mono_ms);
/**
 * The live no-show share of passed numbers, in [0, GW_NOSHOW_SHARE_MAX]: 1 − claims /
 * passes of the rate window once it passed at least GW_NOSHOW_MIN_PASSES numbers (a
 * no-show is seen as soon as its slot goes unclaimed, long before the grace retires it),
 * else noshows / (noshows + claimed) of the room so far, else 0.
 */
double gw_watermark_noshow_share(int64_t win_passes, int64_t win_claims, int64_t noshows,
                                 int64_t claimed);
/**
 * The no-show share the grace has judged: the slots retired unclaimed over the last rate
 * window (each is retired a grace after it was passed) over the numbers passed in the
 * same window a grace earlier, in [0, GW_NOSHOW_SHARE_MAX]; -1 below GW_NOSHOW_MIN_PASSES.
 * Unlike the rate window's 1 − claims / passes it does not move with when fans happen to
 * poll (after a rate change, fans told the old ETA claim late, then all at once). Pure.
 */
double gw_watermark_retired_share(int64_t retired, int64_t judged);
/**
 * Seconds until the watermark has covered position numbers: it passes rate numbers a
 * second (the claims the room meters) plus, noshow_grace_s after each pass, the no-show
 * share of it again. So over the next grace it moves at rate + share × what was passed
 * over the last one (recent × grace, the pass rate measured now, but at most passed,
 * everything the room has passed: just after the opening little comes back), over the
 * one after at rate + share × that, and so on towards rate / (1 − share). passed < 0:
 * no bound. -1 when rate <= 0. Pure.
 */
double gw_watermark_eta_model(double position, double rate, double recent, double passed,
                              double share, double noshow_grace_s);
/**
 * gw_watermark_eta_model with what was passed over the last grace known second by second:
 * passes[i] numbers in the i-th of the last n seconds (oldest first, n ≤ grace_s; the room
 * passed nothing before them when n < grace_s). Future second k moves the watermark by
 * rate + share × what was passed grace_s seconds before it (a recorded second, then one
 * of these future seconds), so a rate change or a burst of passes a grace ago is
 * followed where it lands instead of being spread over the whole grace; after the first
 * grace, one grace at a time as gw_watermark_eta_model. -1 when rate <= 0. Pure.
 */
double gw_watermark_eta_ring(double position, double rate, const double *passes, size_t n,
                             double share, int grace_s);
/** Seconds until position reaches the front at rate_per_s, to the nearest second and at
 *  least 1 while position > 0; -1 when unknown (rate 0). */
int64_t gw_watermark_eta_s(int64_t position, double rate_per_s);
/**
 * poll_after_ms for a fan at position: about a tenth of the expected wait, clamped to
 * [min_ms, max_ms], with ±20% jitter from rnd, so a long queue does not poll in step.
 */
int64_t gw_watermark_poll_ms(int64_t position, double rate_per_s, int64_t min_ms, int64_t max_ms,
                             uint32_t rnd);
/**
 * poll_after_ms for a queued fan at position: just after their expected wait (1–6%
 * later, from rnd), at least min_ms (up to 20% more) unless the wait is shorter than
 * min_ms: then the wait plus 100–200 ms (GW_FRONT_POLL_MS, one tick); when that is beyond max_ms,
 * 80–100% of max_ms; max_ms ±20% while the rate is 0 (paused). A fan polls about once when the rate
 * holds, instead of every tenth of the wait: on a big night the polls are what a gateway serves
 * most.
 */
int64_t gw_watermark_poll_eta_ms(int64_t position, double rate_per_s, int64_t min_ms,
                                 int64_t max_ms, uint32_t rnd);
/**
 * poll_ms capped so that a fan the watermark may pass before their next poll comes
 * back within half the no-show grace (else an honest fan would be counted a no-show and
 * their slot passed again): applies when position <= what the configured rate passes
 * in poll_ms, even while paused (a resume may pass them at once).
 */
int64_t gw_watermark_poll_cap(int64_t poll_ms, int64_t position, int64_t rate_per_minute,
                              int64_t grace_seconds);
/**
 * The restore jump (advance.lua ARGV[6]): how many numbers other gateways may have
 * handed out that this gateway has not seen, stale_ms after it last learned the room's
 * count, when the room's joins came at most join_peak_per_s: twice the peak over the
 * staleness (counted up to 10 s) plus one longest tick (GW_TICK_MAX_MS, an advance in
 * flight), and never fewer than GW_RESTORE_JUMP_MIN.
 */
int64_t gw_watermark_restore_jump(double join_peak_per_s, uint64_t stale_ms);
/** Records a sample (at most one per 250 ms) and recomputes the room's rates. */
void gw_watermark_sample(gw_room_t *room, uint64_t mono_ms);

/* The advance's series. */
typedef struct gw_watermark_metrics {
    cm_counter_t *advance_runs;   /* runs of the advance script */
    cm_counter_t *advance_errors; /* failed runs */
} gw_watermark_metrics_t;

/** Registers the advance's series in reg and points wm at them. Main thread, at start. */
void gw_watermark_metrics_register(gw_watermark_metrics_t *wm, cm_metrics_t *reg);

#endif
