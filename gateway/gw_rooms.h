/*
 * gw_rooms — the registry of waiting rooms one gateway knows: each room's cached view
 * (gw_room_t: settings and counters as the watermark tick last read them, the samples
 * its rates come from, its gauges), found by event id.
 *
 * The watermark tick (gw_watermark.c) adds rooms as it discovers them and fills them in;
 * handlers look rooms up and read them. A handful of rooms per gateway: a plain array
 * searched in order. Rooms are never freed before the registry is: a deleted room is only
 * marked absent (gw_rooms_forget), so operations in flight may keep a room pointer across
 * an await. Loop thread only.
 */
#ifndef GW_ROOMS_H
#define GW_ROOMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_metrics.h"
#include "cm_parse.h"
#include "gw_settings.h"

#define GW_SAMPLES 64
#define GW_PASS_RING                                                                               \
    600 /* seconds of watermark kept per room (the longest grace the                               \
           per-second ETA model covers; beyond it, the rate window's) */

typedef struct gw_sample {
    uint64_t mono_ms;
    int64_t wm, n, claimed;
} gw_sample_t;

/** Where a room stands (gw_watermark_phase; the onsale_gateway_room_phase gauge). */
typedef enum {
    GW_PHASE_SCHEDULED, /* before prequeue_at: joins wait for it */
    GW_PHASE_PREQUEUE,  /* before opens_at: fans gather, nobody is let in yet */
    GW_PHASE_OPEN,      /* admitting at the rate */
    GW_PHASE_FULL,      /* open, but max_active shoppers are in: numbers pass as they leave */
    GW_PHASE_PAUSED,    /* an operator paused it (or its rate is 0) */
    GW_PHASE_SOLD_OUT,  /* nothing left to sell: the operator says so, or the stock does */
    GW_PHASE_CLOSED,    /* closes_at passed */
    GW_NPHASES
} gw_phase_t;

/** The phase label values, by gw_phase_t ("scheduled", "prequeue", "open", …). */
extern const char *const gw_phase_names[GW_NPHASES];

typedef struct gw_room {
    char event[CM_IDENT_MAX + 1];
    bool present;    /* the room exists in Redis (as of the last refresh) */
    bool refreshing; /* an advance is in flight */
    gw_settings_t s;
    bool opened;             /* the pre-queue has been numbered */
    int64_t wm;              /* highest number let in */
    int64_t n;               /* highest number handed out */
    int64_t claimed;         /* admissions claimed (JWT issued), all gateways */
    int64_t active;          /* active shoppers */
    int64_t noshows;         /* passed numbers that never claimed */
    int64_t prequeue;        /* fans in the pre-queue */
    bool stock_known;        /* the reserve's stock was fresh at the last advance: */
    int64_t stock_left;      /* units neither sold nor held, as it was published */
    int64_t stock_held;      /* units in live holds (advance.lua, prelude.lua's stock_at) */
    int64_t clock_offset_ms; /* Redis TIME − this host's wall clock */
    int64_t n_seen;          /* highest number issued here or seen in a verified ticket */
    char **cfg_raw;          /* the settings hash as Redis last returned it (pairs) */
    size_t ncfg_raw;
    bool restored; /* the last advance wrote the room back (Redis had lost it) */
    bool unlisted; /* not found, and removed from the room list since */
    gw_sample_t samples[GW_SAMPLES];
    size_t nsamples, head;
    double pass_rate, join_rate, claim_rate; /* per second over the last ~10 s */
    int64_t win_passes, win_claims; /* numbers passed and admissions claimed in those ~10 s */
    double join_peak; /* fastest joins per second between two samples of those ~10 s */
    /* the watermark and the no-shows at the end of each of the last seconds (monotonic
     * seconds, the newest pass_sec at [pass_head]): what was passed one grace ago, second
     * by second, and what the grace has judged of it since */
    int64_t pass_ring[GW_PASS_RING], noshow_ring[GW_PASS_RING];
    size_t pass_len, pass_head;
    uint64_t pass_sec;
    uint64_t learned_ms; /* monotonic ms of the last advance answer (when n was learned) */
    cm_gauge_t *g_queue, *g_wm, *g_n, *g_claimed, *g_active, *g_noshows, *g_left, *g_held;
    cm_gauge_t *g_phase[GW_NPHASES]; /* one-hot: 1 for the room's phase, 0 for the rest */
} gw_room_t;

/** True when the stock is known and no unit is left (gw_room_t.stock_left). */
static inline bool gw_room_stock_out(const gw_room_t *r)
{
    return r->stock_known && r->stock_left <= 0;
}

typedef struct gw_rooms gw_rooms_t;

/** An empty registry. NULL never. */
gw_rooms_t *gw_rooms_new(void);
/** Frees every room, then t; NULL is fine. */
void gw_rooms_free(gw_rooms_t *t);
/** The room of event in t if it is known to exist, else NULL. */
gw_room_t *gw_rooms_find(gw_rooms_t *t, const char *event);
/** The room of event in t whether it exists or not (a room once seen), else NULL. */
gw_room_t *gw_rooms_get(gw_rooms_t *t, const char *event);
/**
 * The room of event in t, added (absent, default settings, its gauges registered in m)
 * when t has never seen it. Never NULL; event must be an identifier (cm_parse_ident).
 */
gw_room_t *gw_rooms_add(gw_rooms_t *t, cm_metrics_t *m, const char *event);
/** Every room of t ever seen (present or not); count in *n. The array is borrowed. */
gw_room_t **gw_rooms_all(gw_rooms_t *t, size_t *n);
/** Marks the room absent and forgets what it knew of it (after DELETE); unknown: nothing. */
void gw_rooms_forget(gw_rooms_t *t, const char *event);
/** Drops the room's settings as Redis last returned them (cfg_raw). */
void gw_rooms_clear_raw(gw_room_t *r);
/** Counts one pass of the watermark's timer over t and returns how many there have been
 *  (for the work done every so many passes). */
unsigned gw_rooms_count_pass(gw_rooms_t *t);

#endif
