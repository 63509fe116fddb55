/*
 * sim_scenario — a scenario file (JSON, a loadgen/scenarios file) parsed and validated
 * into one struct. Pure: no libevent, no I/O besides reading the file at start-up.
 * The keys are documented in loadgen/scenarios/README.md.
 */
#ifndef SIM_SCENARIO_H
#define SIM_SCENARIO_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Fans behind one source address in the default crowd: a carrier-grade NAT address
 * handed out in 1,024-port blocks serves 63 subscribers (64,512 / 1,024); measured CGNAT
 * addresses serve over 100 (loadgen/scenarios/README.md, "A crowd's addresses"). */
#define SIM_FANS_PER_ADDRESS 64

typedef enum { ARR_BURST, ARR_RAMP, ARR_POISSON, ARR_PREQUEUE } sim_arrival_t;
typedef enum { CHOICE_UNIFORM, CHOICE_HOTSPOT } sim_choice_t;

/** A seat of the seated map, in map order (rows first). */
typedef struct sim_seat {
    char id[48];
    int row;          /* 1-based within its section */
    uint16_t section; /* index into the scenario's sections */
    int64_t price;
} sim_seat_t;

/** A section of the seated map: its name and the span of seat indexes holding its seats. */
typedef struct sim_section {
    char id[65];
    int first, last; /* seats[first .. last] (others' seats may sit between them) */
} sim_section_t;

typedef struct sim_pool_def {
    char id[65];
    int capacity;
    int64_t price;
} sim_pool_def_t;

typedef struct sim_action {
    double at_s;   /* seconds after the first arrival (negative: before) */
    json_t *patch; /* gateway room PATCH body, or NULL */
    json_t *pay;   /* payment simulator settings, or NULL */
    char *exec;    /* shell command (fault injection through deploy/onsale), or NULL */
    char *label;
} sim_action_t;

typedef struct sim_scenario {
    char *name;
    int fans;
    sim_arrival_t arrival;
    double window_s;   /* burst/ramp: arrivals spread over this many seconds */
    double rate_per_s; /* poisson: mean arrivals per second */
    int prequeue_fans; /* prequeue: fans that arrive before opening */
    double prequeue_s; /* prequeue: seconds the pre-queue lasts before opening */
    json_t *inventory; /* reserve PUT /admin/events body (as written) */
    json_t *room;      /* gateway PUT /admin/events body (as written) */
    sim_seat_t *seats; /* expanded seated map */
    int nseats;
    sim_section_t *sections;
    int nsections;
    sim_pool_def_t *pools;
    int npools;
    char currency[4];
    int hold_ttl_s;
    sim_choice_t choice;
    double zipf_s;     /* hotspot: weight of row r is 1/r^zipf_s */
    double ga_share;   /* share of buyers who want the GA pool (when both exist) */
    double best_share; /* share of seated buyers who ask for best available */
    int seats_min, seats_max;
    /* behaviours: fractions of fans */
    double abandon, vanish, slow, double_click, retry;
    double done_when_lost;     /* share of losers who press "I'm done" (POST …/done) */
    double returns_patience_s; /* a fan told "sold out, for now" keeps the place this long */
    double abandon_after_s;    /* an abandoning fan leaves after this long in the queue */
    int max_hold_attempts;
    json_t *payment; /* payment simulator settings at start, or NULL */
    sim_action_t *actions;
    int nactions;
    bool sold_out_when_sold; /* operator closes the room once everything is booked */
    double duration_s;       /* hard stop, counted from the first arrival */
    double settle_s;         /* audit: how long checkouts get to become terminal */
    /* client */
    int gateway_conns, reserve_conns;
    int fans_per_address; /* 0: one source address per gateway connection */
    char src_base[16];
    int timeout_s;
    uint64_t seed;
    /* audit thresholds (figures only when <= 0) */
    double eta_p90_max;
    double rate_tolerance; /* claimed admissions per 10 s: +-this fraction of the rate */
    double p_min;          /* uniformity test: fail below this p-value */
    double sold_share_min; /* fail when units bought / units in the event is below this */
    bool rate_lower_bound; /* also fail windows below the rate while fans wait */
} sim_scenario_t;

/** Loads and validates path; NULL with err filled on any problem. */
sim_scenario_t *sim_scenario_load(const char *path, char *err, size_t errlen);

/** Accepts NULL. */
void sim_scenario_free(sim_scenario_t *s);

#endif
