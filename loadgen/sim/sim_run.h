/*
 * sim_run — one simulated on-sale: the options it runs with, every fan's record, the
 * counters, histograms and series the report shows, and the violations the audit found.
 * Shared by the crowd (sim_crowd.c, which fills it on the loop thread), the audit
 * (sim_audit.c, after the loop) and the report (sim_report.c).
 */
#ifndef SIM_RUN_H
#define SIM_RUN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "sim_scenario.h"
#include "sim_stats.h"

#define SIM_MAX_GATEWAYS 8
#define SIM_MAX_SERVICES 12

typedef struct sim_opts {
    const char *gateway_urls[SIM_MAX_GATEWAYS];
    int ngateways;
    const char *gateway_admin_url; /* default: the first gateway URL */
    const char *reserve_url;
    const char *reserve_admin_url; /* default: reserve_url */
    const char *paysim_url;        /* NULL: no ledger checks, no payment settings */
    const char *ca;
    char *admin_token;         /* the reserve's */
    char *gateway_admin_token; /* the gateway's (a token per service); default: admin_token */
    const char *pg_conninfo;
    const char *redis_host;
    int redis_port;
    const char *redis_user;
    char *redis_password;
    const char *out_dir;
    const char *event; /* NULL: <scenario name>-<random> */
    const char *state_dir;
    struct {
        char name[32];
        int pid;
        const char *pidfile; /* re-read each second: a restarted service is followed */
    } services[SIM_MAX_SERVICES];
    int nservices;
    bool progress; /* live progress line on stderr */
    double scale;  /* multiplies fans (and prequeue fans) when > 0 */
} sim_opts_t;

typedef enum {
    F_NEW,
    F_JOINING,
    F_PREQUEUE,
    F_QUEUED,
    F_ADMITTED,
    F_HOLDING,
    F_CONFIRMING,
    F_DONE,
    F_NSTATES
} sim_fan_state_t;

typedef enum {
    O_NONE,
    O_BOUGHT,    /* booking confirmed */
    O_LOST,      /* admitted, heard "taken" / sold out at the reserve */
    O_SOLD_OUT,  /* the gateway said sold out or closed while queued */
    O_ABANDONED, /* left the queue */
    O_VANISHED,  /* took a hold and walked away */
    O_TOO_SLOW,  /* paid after the hold expired (refunded or refused) */
    O_DECLINED,  /* payment declined (after one retry with another card) */
    O_ERROR,     /* gave up after errors */
    O_CUT,       /* still going when the scenario's duration ran out */
    O_NOUTCOMES
} sim_outcome_t;

typedef enum { B_NORMAL, B_ABANDON, B_VANISH, B_SLOW } sim_behaviour_t;

typedef struct sim_crowd sim_crowd_t;

typedef struct sim_fan {
    sim_crowd_t *crowd;
    uint32_t id;
    uint8_t state, outcome, behaviour;
    bool dbl, retry, ga, in_prequeue;
    bool best;             /* asks for best available in a section instead of naming seats */
    bool leaves;           /* says "I'm done" after losing (frees their max_active place) */
    bool awaiting_returns; /* told "sold out, for now" (returns_since_ns): keeps the place */
    uint8_t gw;            /* which gateway this fan talks to */
    uint16_t hold_attempts, errors, confirm_attempts, polls;
    uint16_t want;         /* units wanted */
    uint16_t confirms_out; /* confirm requests in flight (double click: 2) */
    uint64_t num;          /* queue number (from the ticket) */
    int64_t arrive_ns, join_sent_ns, placed_ns, admitted_ns, first_hold_ns, hold_ns, done_ns;
    int64_t abandon_at_ns;
    int64_t returns_since_ns; /* first told "sold out" with returns possible */
    /* a loser's admitted -> "taken", split: its holds' time before the wire (the
     * simulator's connection queue) and on the wire, summed over its attempts */
    int64_t hold_wait_ns, hold_wire_ns;
    int32_t eta_s;     /* ETA told at join (or after a rate change), -1 when none */
    int64_t eta_at_ns; /* when eta_s was told */
    int32_t seat;      /* first seat index of the hold being tried / held */
    int64_t amount;
    char *ticket, *token;
    char hold_id[160], checkout_id[160], booking_id[160], idem[96];
    struct event *timer;
} sim_fan_t;

typedef struct sim_violation {
    char *check;
    char *detail;
} sim_violation_t;

/* One cause of refusals: an HTTP status with the error code of its body
 * ({"error": "<code>"}), or status 0 with the transport error. */
typedef struct sim_cause {
    int status;
    char code[40];
    uint64_t n;
} sim_cause_t;

#define SIM_MAX_CAUSES 16

typedef struct sim_endpoint {
    const char *name;
    sim_hist_t hist;
    uint64_t by_class[6]; /* 0 = transport error, 1..5 = 1xx..5xx */
    char sample[240];     /* the last answer >= 400 other than 409/429, for the report */
    sim_cause_t causes[SIM_MAX_CAUSES]; /* 4xx, 5xx and transport errors by cause */
    int ncauses;
    uint64_t other_causes; /* answers whose cause did not fit in causes[] */
} sim_endpoint_t;

enum { EP_JOIN, EP_STATUS, EP_HOLD, EP_CONFIRM, EP_CHECKOUT, EP_DONE, EP_SEATS, EP_ADMIN, EP_N };

#define SIM_RATE_KNOWN_NS 500000000LL

typedef struct sim_run {
    sim_scenario_t *sc;
    sim_opts_t *o;
    char event[72];
    int64_t wall_start_ms; /* wall clock at t0 (first arrival) */
    int64_t t0_ns;         /* monotonic clock at the first arrival */
    int64_t end_ns;        /* relative to t0: when the last fan finished */
    int64_t last_arrival_ns;
    int64_t all_placed_ns; /* when the last fan got a place in the queue, -1 if never */
    /* when the gateways knew of the operator's last rate change, -1 if none: its PATCH
     * sent + SIM_RATE_KNOWN_NS (the answer and one gateway tick, at most 250 ms) */
    int64_t rate_changed_ns;
    int64_t opens_at_ms; /* prequeue: the room's opening (wall clock), else 0 */
    int64_t sold_out_ns; /* when the operator closed the room as sold out, else -1 */
    sim_fan_t *fans;
    int nfans;
    int state_count[F_NSTATES];
    int outcome_count[O_NOUTCOMES];
    uint64_t requests, errors, units_bought;
    int total_units;
    sim_endpoint_t ep[EP_N];
    sim_hist_t time_to_place, time_to_admission, hold_taken, loser_heard, hold_to_confirm;
    sim_hist_t loser_waited, loser_wire; /* loser_heard's parts (sim_fan_t.hold_wait_ns) */
    sim_hist_t loop_lag;                 /* the simulator's own loop lag (sim_crowd.c) */
    sim_series_t s_queue, s_admitted, s_holds, s_confirms, s_errors, s_requests, s_taken;
    sim_series_t s_watermark; /* the room's watermark, sampled once a second (admin API) */
    struct {
        char name[32];
        int pid;
        uint64_t peak_rss_kb;
        double peak_cpu, cpu_sum;
        int samples;
        uint64_t last_ticks;
        int last_pid;
        sim_series_t cpu, rss;
    } svc[SIM_MAX_SERVICES];
    int nsvc;
    json_t *timeline; /* operator actions as they ran */
    json_t *ledger;   /* the provider's PaymentIntents of the event (GET /v1/payment_intents) */
    json_t *figures;  /* audit figures (fairness, ETA, rates, …) */
    sim_violation_t *viol;
    int nviol, capviol;
    int dup_bookings_seen; /* own record: one fan told two different booking ids */
} sim_run_t;

/** Adds a violation (check name, printf detail). */
void sim_run_violation(sim_run_t *r, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *sim_outcome_name(int o);
const char *sim_state_name(int s);

#endif
