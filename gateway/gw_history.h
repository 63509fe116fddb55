/*
 * gw_history — the last minutes of each waiting room's live numbers, kept by this
 * gateway so the operator dashboard's charts open with history instead of starting empty.
 *
 * A timer samples every room this gateway knows every `history_interval_ms` into a
 * bounded ring per room (`history_samples` entries; the oldest is overwritten). Rooms
 * that disappear lose their ring. Memory is bounded by rooms × samples × 64 bytes.
 * Served by GET /admin/events/{event}/history (gw_admin.c). One per gateway worker, used
 * only on that worker's loop thread (each worker samples the rooms it serves).
 */
#ifndef GW_HISTORY_H
#define GW_HISTORY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct event_base;
typedef struct gw_rooms gw_rooms_t;
typedef struct gw_room gw_room_t;
typedef struct gw_history gw_history_t;

/** The values of one sample, in this order after its time (the JSON's "fields"). */
#define GW_HISTORY_NFIELDS 7
extern const char *const gw_history_fields[GW_HISTORY_NFIELDS];

/** One room's ring (pure: unit-tested without a loop). */
typedef struct gw_history_ring {
    size_t cap, len, head; /* head: where the next sample goes */
    int64_t *t_ms;         /* wall clock of each sample */
    double *v;             /* cap × GW_HISTORY_NFIELDS; NAN = unknown */
} gw_history_ring_t;

/** A ring of cap samples (cap ≥ 1). */
void gw_history_ring_init(gw_history_ring_t *r, size_t cap);
void gw_history_ring_clear(gw_history_ring_t *r);
/** Appends a sample, overwriting the oldest when full. */
void gw_history_ring_push(gw_history_ring_t *r, int64_t t_ms, const double *values);
/** The i-th sample, oldest first (i < len): its time, and its values into out. */
int64_t gw_history_ring_at(const gw_history_ring_t *r, size_t i, double *out);

/** Samples rooms (the watermark's room cache, borrowed) every interval_ms on base's loop,
 * capacity samples per room; the timer starts at once. */
gw_history_t *gw_history_new(struct event_base *base, gw_rooms_t *rooms, int interval_ms,
                             int capacity);
void gw_history_free(gw_history_t *h);
/** Takes one sample of every room now (the timer's work; tests call it too). */
void gw_history_sample(gw_history_t *h);
/**
 * {"event", "interval_ms", "capacity", "fields": [...], "samples": [[t_ms, v...], ...]}
 * for the room of event, oldest first (new reference); an empty "samples" when the room is
 * known but not sampled yet.
 */
json_t *gw_history_json(const gw_history_t *h, const char *event);

#endif
