/*
 * gw_sched — a waiting room's schedule of phases (docs/api.md, "Phases"): e.g. a presale
 * for code holders from 10:00, the general sale from 12:00. Each phase has its own
 * admission rate and max_active, may require a presale code (gw_code.h), and carries the
 * queue page's text for before, during and after it.
 *
 * The schedule is stored in the room's Redis hash twice: `phases`, the JSON the operator
 * sent (validated, canonical), for the gateways; and `phz`, a compact line the scripts
 * read on every admission and advance (prelude.lua's phase_at), so that the phase in force
 * is judged on Redis TIME by whichever gateway asks, with no leader. A room without a
 * schedule is one phase made of its own rate_per_minute and max_active, as before.
 *
 * Pure functions, no event loop: unit-tested on their own. Any thread.
 */
#ifndef GW_SCHED_H
#define GW_SCHED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_SCHED_MAX      8   /* phases per room */
#define GW_SCHED_NAME_MAX 32  /* bytes of a phase name ([a-z0-9_-]) */
#define GW_SCHED_TEXT_MAX 280 /* bytes of each page text (UTF-8, no control characters) */

typedef struct gw_phase_def {
    char name[GW_SCHED_NAME_MAX + 1];
    int64_t starts_ms; /* epoch ms; the phase lasts until the next one starts */
    int64_t rate_per_minute;
    int64_t max_active; /* 0 = unlimited */
    bool requires_code;
    char text_before[GW_SCHED_TEXT_MAX + 1], text_during[GW_SCHED_TEXT_MAX + 1],
        text_after[GW_SCHED_TEXT_MAX + 1];
} gw_phase_def_t;

typedef struct gw_sched {
    size_t n; /* 0 = no schedule */
    gw_phase_def_t p[GW_SCHED_MAX];
} gw_sched_t;

/**
 * Validates the "phases" value of a room body: an array (or null: no schedule) of at
 * most GW_SCHED_MAX objects {name, starts_at, rate_per_minute, max_active?,
 * requires_code?, text_before?, text_during?, text_after?}, names unique, starts_at
 * strictly increasing. Fills out. 0, or -1 with a message for a 400 in err.
 */
__attribute__((warn_unused_result)) int gw_sched_parse(const json_t *v, gw_sched_t *out, char *err,
                                                       size_t errlen);

/** The schedule as the API shows it (an array, [] when none). New reference. */
json_t *gw_sched_json(const gw_sched_t *s);

/**
 * The two Redis fields of s: `phases` (canonical JSON) and `phz` (the scripts' line,
 * "<starts_ms>,<rate>,<max_active>,<0|1>,<name>;…"), both "" for no schedule. Caller
 * frees both (free()).
 */
void gw_sched_fields(const gw_sched_t *s, char **phases, char **phz);

/**
 * Loads the `phases` field of a room's hash (what gw_sched_fields wrote); a missing or
 * malformed one is no schedule. Never fails.
 */
void gw_sched_load(gw_sched_t *s, const char *phases);

/**
 * The phase in force at now_ms (the last one started by then), or -1 before the first
 * (and always without a schedule). *next_ms (may be NULL): when the next one starts, 0
 * when none follows.
 */
int gw_sched_at(const gw_sched_t *s, int64_t now_ms, int64_t *next_ms);

/** The index of the phase named name, or -1. */
int gw_sched_find(const gw_sched_t *s, const char *name);

#endif
