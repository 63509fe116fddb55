/*
 * gw_history — see gw_history.h.
 *
 * A flat array of (event, ring) pairs, scanned linearly: a gateway serves a handful of
 * rooms, and the timer touches each once per interval. Values are copied from the room
 * cache the watermark timer keeps current, so sampling costs no Redis round trip.
 */
#include "gw_history.h"

#include <event2/event.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "gw_rooms.h"
#include "gw_watermark.h"

const char *const gw_history_fields[GW_HISTORY_NFIELDS] = {
    "queue_size",     "joins_per_second", "admissions_per_second", "active", "eta_last_seconds",
    "admitted_total", "watermark",
};

typedef struct entry {
    char event[CM_IDENT_MAX + 1];
    gw_history_ring_t ring;
} entry_t;

struct gw_history {
    gw_rooms_t *rooms_of; /* the watermark's room cache (borrowed) */
    struct event *timer;
    int interval_ms;
    size_t capacity;
    entry_t *rooms;
    size_t n;
};

/* --- the ring ---------------------------------------------------------------------- */

void gw_history_ring_init(gw_history_ring_t *r, size_t cap)
{
    r->cap = cap ? cap : 1;
    r->len = r->head = 0;
    r->t_ms = cm_xcalloc(r->cap, sizeof(*r->t_ms));
    r->v = cm_xcalloc(r->cap * GW_HISTORY_NFIELDS, sizeof(*r->v));
}

void gw_history_ring_clear(gw_history_ring_t *r)
{
    free(r->t_ms);
    free(r->v);
    memset(r, 0, sizeof(*r));
}

void gw_history_ring_push(gw_history_ring_t *r, int64_t t_ms, const double *values)
{
    r->t_ms[r->head] = t_ms;
    memcpy(r->v + r->head * GW_HISTORY_NFIELDS, values, GW_HISTORY_NFIELDS * sizeof(double));
    r->head = (r->head + 1) % r->cap;
    if (r->len < r->cap)
        r->len++;
}

int64_t gw_history_ring_at(const gw_history_ring_t *r, size_t i, double *out)
{
    size_t k = (r->head + r->cap - r->len + i) % r->cap;
    memcpy(out, r->v + k * GW_HISTORY_NFIELDS, GW_HISTORY_NFIELDS * sizeof(double));
    return r->t_ms[k];
}

/* --- sampling ---------------------------------------------------------------------- */

static entry_t *find(const gw_history_t *h, const char *event)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->rooms[i].event, event) == 0)
            return &h->rooms[i];
    }
    return NULL;
}

static void values_of(const gw_room_t *room, double *v)
{
    double rate = gw_watermark_rate(room);
    int64_t q = gw_watermark_queue_size(room);
    int64_t eta = gw_watermark_eta_s(q, rate);
    v[0] = (double)q;
    v[1] = room->join_rate;
    v[2] = room->claim_rate;
    v[3] = (double)room->active;
    v[4] = eta < 0 ? NAN : (double)eta;
    v[5] = (double)room->claimed;
    v[6] = (double)room->wm;
}

void gw_history_sample(gw_history_t *h)
{
    size_t n = 0;
    gw_room_t **rooms = gw_rooms_all(h->rooms_of, &n);
    int64_t now = cm_time_wall_ms();
    /* forget rooms that are gone */
    for (size_t i = 0; i < h->n;) {
        gw_room_t *r = gw_rooms_find(h->rooms_of, h->rooms[i].event);
        if (r == NULL || !r->present) {
            gw_history_ring_clear(&h->rooms[i].ring);
            h->rooms[i] = h->rooms[--h->n];
        } else {
            i++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!rooms[i]->present)
            continue;
        entry_t *e = find(h, rooms[i]->event);
        if (e == NULL) {
            h->rooms = cm_xrealloc(h->rooms, (h->n + 1) * sizeof(*h->rooms));
            e = &h->rooms[h->n++];
            snprintf(e->event, sizeof(e->event), "%s", rooms[i]->event);
            gw_history_ring_init(&e->ring, h->capacity);
        }
        double v[GW_HISTORY_NFIELDS];
        values_of(rooms[i], v);
        gw_history_ring_push(&e->ring, now, v);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    gw_history_sample(arg);
}

gw_history_t *gw_history_new(struct event_base *base, gw_rooms_t *rooms, int interval_ms,
                             int capacity)
{
    gw_history_t *h = cm_xcalloc(1, sizeof(*h));
    h->rooms_of = rooms;
    h->interval_ms = interval_ms > 0 ? interval_ms : 1000;
    h->capacity = capacity > 0 ? (size_t)capacity : 1;
    h->timer = event_new(base, -1, EV_PERSIST, on_timer, h);
    if (h->timer == NULL)
        abort();
    struct timeval tv = {h->interval_ms / 1000, (h->interval_ms % 1000) * 1000};
    event_add(h->timer, &tv);
    return h;
}

void gw_history_free(gw_history_t *h)
{
    if (h == NULL)
        return;
    if (h->timer)
        event_free(h->timer);
    for (size_t i = 0; i < h->n; i++)
        gw_history_ring_clear(&h->rooms[i].ring);
    free(h->rooms);
    free(h);
}

json_t *gw_history_json(const gw_history_t *h, const char *event)
{
    json_t *fields = json_array();
    for (int f = 0; f < GW_HISTORY_NFIELDS; f++)
        json_array_append_new(fields, json_string(gw_history_fields[f]));
    json_t *samples = json_array();
    const entry_t *e = find(h, event);
    for (size_t i = 0; e && i < e->ring.len; i++) {
        double v[GW_HISTORY_NFIELDS];
        int64_t t = gw_history_ring_at(&e->ring, i, v);
        json_t *s = json_array();
        json_array_append_new(s, json_integer(t));
        for (int f = 0; f < GW_HISTORY_NFIELDS; f++) {
            if (isnan(v[f]))
                json_array_append_new(s, json_null());
            else if (v[f] == floor(v[f]) && fabs(v[f]) < 9e15)
                json_array_append_new(s, json_integer((json_int_t)v[f]));
            else
                json_array_append_new(s, json_real(round(v[f] * 1000) / 1000));
        }
        json_array_append_new(samples, s);
    }
    return json_pack("{s:s, s:i, s:I, s:o, s:o}", "event", event, "interval_ms", h->interval_ms,
                     "capacity", (json_int_t)h->capacity, "fields", fields, "samples", samples);
}
