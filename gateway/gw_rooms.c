/*
 * gw_rooms — see gw_rooms.h. The registry is an array of room pointers grown by
 * doubling; a room, once added, keeps its address until gw_rooms_free, which is what lets
 * handlers hold a room across an await. Loop thread only.
 */
#include "gw_rooms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"

struct gw_rooms {
    gw_room_t **v;
    size_t n, cap;
    unsigned passes; /* of the watermark's timer (gw_rooms_count_pass) */
};

const char *const gw_phase_names[GW_NPHASES] = {
    "scheduled", "prequeue", "open", "full", "paused", "sold_out", "closed",
};

void gw_rooms_clear_raw(gw_room_t *r)
{
    for (size_t i = 0; i < r->ncfg_raw; i++)
        free(r->cfg_raw[i]);
    free(r->cfg_raw);
    r->cfg_raw = NULL;
    r->ncfg_raw = 0;
}

gw_rooms_t *gw_rooms_new(void)
{
    return cm_xcalloc(1, sizeof(gw_rooms_t));
}

void gw_rooms_free(gw_rooms_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++) {
        gw_rooms_clear_raw(t->v[i]);
        free(t->v[i]);
    }
    free(t->v);
    free(t);
}

static gw_room_t *find(gw_rooms_t *t, const char *event)
{
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->v[i]->event, event) == 0)
            return t->v[i];
    }
    return NULL;
}

gw_room_t *gw_rooms_add(gw_rooms_t *t, cm_metrics_t *m, const char *event)
{
    gw_room_t *r = find(t, event);
    if (r)
        return r;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = cm_xrealloc(t->v, t->cap * sizeof(*t->v));
    }
    r = cm_xcalloc(1, sizeof(*r));
    snprintf(r->event, sizeof(r->event), "%s", event);
    gw_settings_defaults(&r->s);
    char labels[96];
    snprintf(labels, sizeof(labels), "event=\"%s\"", event);
    r->g_queue =
        cm_metrics_gauge(m, "onsale_gateway_queue_size",
                         "fans waiting (numbered and not let in, plus the pre-queue)", labels);
    r->g_wm =
        cm_metrics_gauge(m, "onsale_gateway_watermark", "highest queue number let in", labels);
    r->g_n = cm_metrics_gauge(m, "onsale_gateway_numbers_issued", "highest queue number handed out",
                              labels);
    r->g_claimed =
        cm_metrics_gauge(m, "onsale_gateway_admissions_claimed",
                         "passed numbers that claimed their admission (all gateways)", labels);
    r->g_active = cm_metrics_gauge(m, "onsale_gateway_active_shoppers",
                                   "admitted fans still shopping", labels);
    r->g_noshows = cm_metrics_gauge(m, "onsale_gateway_noshows",
                                    "passed numbers that never claimed within the grace", labels);
    r->g_left = cm_metrics_gauge(m, "onsale_gateway_stock_left",
                                 "units neither sold nor held, as the reserve last published "
                                 "them (-1: unknown)",
                                 labels);
    r->g_held = cm_metrics_gauge(m, "onsale_gateway_stock_held",
                                 "units in live holds, as the reserve last published them "
                                 "(-1: unknown)",
                                 labels);
    cm_gauge_set(r->g_left, -1);
    cm_gauge_set(r->g_held, -1);
    for (int k = 0; k < GW_NPHASES; k++) {
        char pl[128];
        snprintf(pl, sizeof(pl), "%s,phase=\"%s\"", labels, gw_phase_names[k]);
        r->g_phase[k] =
            cm_metrics_gauge(m, "onsale_gateway_room_phase",
                             "1 for the room's phase (scheduled, prequeue, open, full, paused, "
                             "sold_out, closed), 0 for the others",
                             pl);
    }
    t->v[t->n++] = r;
    return r;
}

gw_room_t *gw_rooms_find(gw_rooms_t *t, const char *event)
{
    gw_room_t *r = find(t, event);
    return r && r->present ? r : NULL;
}

gw_room_t **gw_rooms_all(gw_rooms_t *t, size_t *n)
{
    *n = t->n;
    return t->v;
}

gw_room_t *gw_rooms_get(gw_rooms_t *t, const char *event)
{
    return find(t, event);
}

void gw_rooms_forget(gw_rooms_t *t, const char *event)
{
    gw_room_t *r = find(t, event);
    if (r == NULL)
        return;
    r->present = false;
    gw_rooms_clear_raw(r);
    r->s.gen = 0;
    r->wm = r->n = r->n_seen = r->claimed = 0;
    r->opened = false;
    r->stock_known = false;
    r->pass_len = 0;
    for (int k = 0; k < GW_NPHASES; k++)
        cm_gauge_set(r->g_phase[k], 0); /* a deleted room is in no phase */
}

unsigned gw_rooms_count_pass(gw_rooms_t *t)
{
    return ++t->passes;
}
