/*
 * gw_admin — the operators' API for waiting rooms (docs/api.md: PUT/PATCH/GET/DELETE
 * /admin/events/{event}, GET /admin/events). The caller has checked the admin token.
 *
 * Writes go through settings.lua / delete.lua (atomic per room) and then refresh this
 * gateway's cache at once; every other gateway picks the change up on its next tick
 * (≤ 250 ms). Loop thread only.
 */
#ifndef GW_ADMIN_H
#define GW_ADMIN_H

#include <jansson.h>

#include "gw_req.h"
#include "gw_rooms.h"
#include "cm_http.h"

/** PUT (partial false) or PATCH (partial true) /admin/events/{event}. */
void gw_admin_event_write(gw_server_t *srv, cm_req_t *req, const char *event, bool partial);
/** GET /admin/events/{event}: settings plus live stats. */
void gw_admin_event_get(gw_server_t *srv, cm_req_t *req, const char *event);
/** DELETE /admin/events/{event}. */
void gw_admin_event_delete(gw_server_t *srv, cm_req_t *req, const char *event);
/** GET /admin/events: every waiting room this gateway knows, with stats. */
void gw_admin_events_list(gw_server_t *srv, cm_req_t *req);

/** GET /admin/events/{event}/history: the room's sampled numbers (gw_history.h). */
void gw_admin_event_history(gw_server_t *srv, cm_req_t *req, const char *event);

/** GET /admin/config: the effective configuration, secrets masked (cm_config_json). */
void gw_admin_config(gw_server_t *srv, cm_req_t *req);

/**
 * A room's "stats" as the admin API shows them, before stats.pow and the DPoP counts:
 * queue_size, admitted_total, active, watermark, numbers_issued, prequeue_size, noshows,
 * the three rates per second, eta_last_seconds (null while nothing moves) and opened.
 * New reference. Pure.
 */
json_t *gw_admin_stats_json(const gw_room_t *room);

/** A PUT without "pow": the gateway's pow_new_rooms (on) fills the "pow" field of the n
 * parsed settings in kv ("1" or "0"); nothing when kv has none. Pure. */
void gw_admin_pow_default(gw_setting_kv_t *kv, int n, bool on);

/** A room as the admin API shows it: event, settings, stats (with stats.pow; new reference). */
/** The phase in force at now_ms (Redis time) as the admin API shows it: {current: its name
 *  or null (no schedule, or before its first phase), next_at: when the next starts or null}.
 *  New reference. */
json_t *gw_admin_phase_json(const gw_settings_t *s, int64_t now_ms);

json_t *gw_admin_room_json(gw_server_t *srv, const gw_room_t *room);

#endif
