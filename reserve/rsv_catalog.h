/*
 * rsv_catalog — events and their inventory, as this process knows them.
 *
 * Postgres is the source; this is a read-through cache on the event-loop thread so
 * the hot path (take a hold) validates seat ids and reads the event's settings with
 * no round trip. A cached event is re-checked against Postgres (its version) every
 * catalog_refresh_ms in the background, so an operator's change made through another
 * reserve process is seen within that time. An event is never "unknown" here once the
 * admin call that created it has answered, on any reserve: every admin change sets a new
 * (random) generation in Redis (RSV_CATALOG_GEN_KEY) before it answers, and an id missing from
 * the cached set of event ids is refused only when a generation read after the request
 * arrived says the set is current (else the ids are listed again first). Those reads are
 * coalesced and the set is kept, so a flood of bogus ids costs about one Redis GET per
 * round trip and no Postgres query; known events cost no round trip at all. Correctness
 * never depends on this cache: Redis scripts and Postgres constraints decide every sale.
 *
 * Also owns the Redis "seed": loading an event's pool counters and sold seats into
 * Redis from Postgres when Redis does not have them (first use, or after Redis lost
 * its data).
 */
#ifndef RSV_CATALOG_H
#define RSV_CATALOG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_metrics.h"
#include "cm_parse.h"

/*
 * The largest unit price (minor units: 10^11 cents = 1,000,000,000.00). A hold has at
 * most 50 seats or 100 pool units, so its amount stays below 10^13: no int64 overflow,
 * and exact where Lua sees it as a double (below 2^53).
 */
#define RSV_PRICE_MAX INT64_C(100000000000)

typedef struct rsv_server rsv_server_t;
typedef struct rsv_catalog rsv_catalog_t;

typedef struct rsv_section {
    char id[CM_IDENT_MAX + 1];
    size_t first, count; /* its seats are seats[first .. first+count) */
} rsv_section_t;

/*
 * A seat's place (best available, docs/design.md "Best available"): row is a number of the
 * event's, the same for the seats of one row of one section and 0 for a seat without a
 * row; rows are numbered in the order they first appear in the operator's list, so a
 * section's rows are consecutive numbers. Two seats are adjacent when they share a row
 * (not 0) and their positions differ by one. rank orders seats best first (lower better).
 */
typedef struct rsv_seat {
    char *id;
    int64_t price;
    uint32_t section; /* index into sections */
    uint32_t row;     /* 0: none */
    int32_t pos;
    int64_t rank;
} rsv_seat_t;

typedef struct rsv_pool {
    char id[CM_IDENT_MAX + 1];
    int64_t capacity;
    int64_t price;
} rsv_pool_t;

typedef struct rsv_event {
    char id[CM_IDENT_MAX + 1];
    char currency[4];
    int64_t hold_ttl_s;
    int64_t checkout_extension_s;
    int64_t max_hold_s;
    int64_t max_per_buyer;
    int64_t version;
    rsv_seat_t *seats; /* ordered by section, then id */
    size_t nseats;
    rsv_section_t *sections;
    size_t nsections;
    rsv_pool_t *pools;
    size_t npools;
    uint32_t *place; /* seats indexes by section, row, position, index (best available) */
    uint32_t *index; /* open-addressing hash of seat ids → seats index + 1 */
    size_t index_mask;
    int refs;
} rsv_event_t;

/** The Redis key of the catalogue generation (one per deployment, not per event). */
#define RSV_CATALOG_GEN_KEY "os:catalog:gen"

/** ev is NULL when the event does not exist; err non-NULL when Postgres failed. */
typedef void (*rsv_catalog_cb)(rsv_event_t *ev, const char *err, void *arg);

rsv_catalog_t *rsv_catalog_new(rsv_server_t *srv);
void rsv_catalog_free(rsv_catalog_t *c);

/**
 * Finds an event: calls cb at once (before returning) when cached, else after loading it
 * from Postgres. The event handed to cb is borrowed for the callback; keep it longer
 * with rsv_event_ref / rsv_event_unref.
 */
void rsv_catalog_get(rsv_catalog_t *c, const char *event_id, rsv_catalog_cb cb, void *arg);
/**
 * Like rsv_catalog_get, for a caller about to refuse what the cached copy lacks (a seat
 * or pool unknown to it): reads the catalogue generation first and, when an admin
 * change was answered since the copy was loaded, loads it again. Costs a Redis round
 * trip (coalesced), so only for the refusing path.
 */
void rsv_catalog_recheck(rsv_catalog_t *c, const char *event_id, rsv_catalog_cb cb, void *arg);

typedef void (*rsv_catalog_done_cb)(const char *err, void *arg);
/**
 * After an admin change is committed and before it is answered: bumps the catalogue
 * generation in Redis so that every reserve process re-lists event ids before it calls
 * one unknown. cb(err) once Redis answered (err NULL), or at once when it cannot ask.
 */
void rsv_catalog_announce(rsv_catalog_t *c, rsv_catalog_done_cb cb, void *arg);
/** Drops the cached copy so the next get reloads it. */
void rsv_catalog_invalidate(rsv_catalog_t *c, const char *event_id);

void rsv_event_ref(rsv_event_t *ev);
void rsv_event_unref(rsv_event_t *ev);

/**
 * Builds an event from the document the catalogue loads from Postgres ({currency, …,
 * seats: [[id, section, price, row, position, rank]…], pools: [[id, capacity, price]…]},
 * seats in section order): the seat index, the rows numbered, the seats in place order.
 * The event has one reference. NULL when text is not JSON. Pure.
 */
rsv_event_t *rsv_event_parse(const char *id, const char *text);

/** Index of a seat, or -1. */
long rsv_event_seat(const rsv_event_t *ev, const char *seat_id);
/** Index of a section, or -1. */
long rsv_event_section(const rsv_event_t *ev, const char *section_id);

/** The largest rank a seat may carry (ranks of a 50-seat block add up exactly in Lua). */
#define RSV_RANK_MAX 1000000000

/**
 * Best available's candidates: the seats of section (an index, or -1 for any) priced
 * price (or -1 for any price), in place order (section, row, position), leaving out those
 * skip(arg, seat index) says are gone (NULL: none). Writes up to cap seat indexes into
 * out and returns how many there are in all (more than cap: out holds the first cap).
 * Pure.
 */
size_t rsv_event_best_candidates(const rsv_event_t *ev, long section, int64_t price,
                                 bool (*skip)(void *arg, size_t seat), void *arg, uint32_t *out,
                                 size_t cap);

/** What rsv_event_best_window chose: a window of candidates and its bound. */
typedef struct rsv_best_window {
    size_t n;         /* seats in the window, 0: no block is usable */
    size_t best_at;   /* the best block's first seat (an index into the window) */
    size_t last_at;   /* the worst block taken in: its first seat (index into the window) */
    int64_t last_sum; /* … and its ranks added up */
} rsv_best_window_t;

/**
 * Best available's window (docs/design.md "Best available"): among cand (ncand seat
 * indexes of ev in place order, as rsv_event_best_candidates gives them), the blocks of
 * want adjacent seats that usable(arg, seat) all says yes to, ordered by their ranks
 * added up and then place order; the best of them are taken in, in that order, until
 * the seats taken in number at least seats_min (or at most blocks_max blocks are in).
 * Writes the window's seats into out (cap ncand), in place order, and says which
 * block is the best and which the worst taken in: every usable block ordered before or
 * as the worst is in the window, so the best block of the window that is still free,
 * when it is not after the worst, is the best usable block that is still free. Pure.
 */
void rsv_event_best_window(const rsv_event_t *ev, const uint32_t *cand, size_t ncand, size_t want,
                           bool (*usable)(void *arg, size_t seat), void *arg, size_t seats_min,
                           size_t blocks_max, uint32_t *out, rsv_best_window_t *w);

/** A pool, or NULL. */
const rsv_pool_t *rsv_event_pool(const rsv_event_t *ev, const char *pool_id);

/** cb(err) once Redis has the event's working state (seeded from Postgres). */
typedef void (*rsv_seed_cb)(const char *err, void *arg);
void rsv_catalog_seed(rsv_catalog_t *c, rsv_event_t *ev, rsv_seed_cb cb, void *arg);

/**
 * Validates an inventory PUT body (docs/api.md) and normalises it into the document the
 * Postgres function onsale_event_put takes. Returns NULL with a message in err.
 * Pure: no I/O.
 */
json_t *rsv_catalog_normalise(const json_t *body, char *err, size_t errlen);

/* The catalogue's series. */
typedef struct rsv_catalog_metrics {
    cm_counter_t *queries; /* Postgres queries: loads, version checks, listings */
    cm_counter_t *reseeds; /* events whose Redis state was loaded from Postgres */
} rsv_catalog_metrics_t;

/** Registers the catalogue's series in reg and points cm at them. Main thread, at start. */
void rsv_catalog_metrics_register(rsv_catalog_metrics_t *cm, cm_metrics_t *reg);

#endif
