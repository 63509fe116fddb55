/*
 * rsv_catalog — see rsv_catalog.h.
 *
 * Entries live in a small array (events are few; a linear scan of tens of entries is
 * cheaper than hashing). Concurrent requests for an event being loaded or seeded wait
 * on that one load/seed (a waiter list), so a burst for a cold event costs one query.
 */
#include "rsv_catalog.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_hash.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "rsv_rediskeys.h"
#include "rsv_lua.h"
#include "rsv_req.h"

#define NEGATIVE_TTL_NS     (1000ull * 1000 * 1000)
#define MAX_SEATS_PER_EVENT 200000
#define MAX_SECTIONS        1000
#define MAX_POOLS           100
#define MAX_SEAT_POSITION   100000

typedef struct waiter {
    struct waiter *next;
    rsv_catalog_cb cb;
    rsv_seed_cb seed_cb;
    void *arg;
    bool fresh; /* a recheck: wants a copy loaded at generation gen */
    int64_t gen;
} waiter_t;

typedef enum { ENTRY_LOADING, ENTRY_READY, ENTRY_MISSING } entry_state_t;

/* How a lookup may answer "no such event". ASK: read the catalogue generation in Redis
 * first (the request arrived after every admin change it must see, so a generation read
 * after its arrival tells whether the set of ids can be trusted); CHECKED: that read is
 * done (c->gen_seen); LISTED: the set was listed after the request arrived; ALONE: no set,
 * look the id up in Postgres. */
typedef enum { LOOKUP_ASK, LOOKUP_CHECKED, LOOKUP_LISTED, LOOKUP_ALONE } lookup_t;

typedef struct entry {
    char id[CM_IDENT_MAX + 1];
    entry_state_t state;
    rsv_event_t *ev;
    uint64_t checked_ns; /* last confirmed against Postgres (or found missing) */
    int64_t gen;         /* c->gen_seen when the copy (or "missing") was loaded */
    int64_t load_gen;    /* c->gen_seen when the load out started */
    int refreshing;
    waiter_t *waiters;      /* waiting for the load */
    waiter_t *seed_waiters; /* waiting for the seed */
    int seeding;
} entry_t;

struct rsv_catalog {
    rsv_server_t *srv;
    entry_t **entries;
    size_t n, cap;
    /* Every event id Postgres has (sorted), refreshed at most every catalog_refresh_ms:
     * an id not in it is answered "no such event" without a query, so a flood of
     * made-up event ids costs one query per interval, not one per request. */
    char **known;
    size_t nknown, capknown;
    bool known_loaded, known_loading;
    uint64_t known_ns;
    struct known_waiter *known_waiters; /* ids not in the set, served by the listing out */
    struct known_waiter *known_next;    /* ids not in the set, waiting for the next listing */
    /* The catalogue generation (RSV_CATALOG_GEN_KEY): every admin change sets a new one in Redis
     * after its commit and before its answer. An id not in the set is refused only when a
     * generation read after the request arrived equals the one read before the set was
     * listed; else the ids are listed again first. Reads are coalesced: one GET out at a
     * time, requests arriving meanwhile wait for the next one, so a flood of made-up ids
     * costs about one GET per round trip and no Postgres query. */
    int64_t gen_seen;                 /* the last generation read (-1: none yet) */
    int64_t gen_listed;               /* the generation the set reflects (-1: unknown) */
    int64_t gen_listing;              /* gen_seen when the listing out started */
    struct gen_op *gen_op;            /* the GET out, or NULL */
    struct known_waiter *gen_waiters; /* served by the GET out */
    struct known_waiter *gen_next;    /* arrived after it was sent */
};

typedef struct known_waiter {
    struct known_waiter *next;
    char id[CM_IDENT_MAX + 1];
    rsv_catalog_cb cb;
    void *arg;
    bool fresh; /* rsv_catalog_recheck: a cached copy older than the generation reloads */
} known_waiter_t;

typedef struct gen_op {
    rsv_catalog_t *c; /* NULL once the catalogue is gone */
} gen_op_t;

static void catalog_get(rsv_catalog_t *c, const char *event_id, rsv_catalog_cb cb, void *arg,
                        lookup_t mode);

static const char LOAD_SQL[] =
    "SELECT json_build_object("
    "'currency', e.currency, 'hold_ttl_seconds', e.hold_ttl_seconds,"
    "'checkout_extension_seconds', e.checkout_extension_seconds,"
    "'max_hold_seconds', e.max_hold_seconds, 'max_per_buyer', e.max_per_buyer,"
    "'version', e.version,"
    "'seats', COALESCE((SELECT json_agg(json_build_array(s.seat_id, s.section, s.price,"
    "  s.seat_row, s.seat_pos, COALESCE(s.rank, s.ord))"
    "  ORDER BY s.section, s.ord, s.seat_id) FROM seats s"
    "  WHERE s.event_id = e.event_id AND s.section IS NOT NULL), '[]'),"
    "'pools', COALESCE((SELECT json_agg(json_build_array(p.pool_id, p.capacity, p.price)"
    "  ORDER BY p.pool_id) FROM pools p WHERE p.event_id = e.event_id), '[]'))::text "
    "FROM events e WHERE e.event_id = $1";

static const char VERSION_SQL[] = "SELECT version FROM events WHERE event_id = $1";
static const char KNOWN_SQL[] = "SELECT event_id FROM events";

static const char SEED_SQL[] =
    "SELECT json_build_object("
    "'pools', COALESCE((SELECT json_agg(json_build_array(p.pool_id,"
    "   p.capacity - (SELECT count(*) FROM booking_items b JOIN seats s"
    "      ON s.event_id = b.event_id AND s.seat_id = b.seat_id"
    "      WHERE b.event_id = p.event_id AND s.pool_id = p.pool_id),"
    "   (SELECT COALESCE(max(s.unit_no), 0) FROM booking_items b JOIN seats s"
    "      ON s.event_id = b.event_id AND s.seat_id = b.seat_id"
    "      WHERE b.event_id = p.event_id AND s.pool_id = p.pool_id)))"
    "  FROM pools p WHERE p.event_id = $1), '[]'),"
    "'sold', COALESCE((SELECT json_agg(b.seat_id) FROM booking_items b JOIN seats s"
    "   ON s.event_id = b.event_id AND s.seat_id = b.seat_id"
    "   WHERE b.event_id = $1 AND s.section IS NOT NULL), '[]'),"
    "'buyers', COALESCE((SELECT json_agg(json_build_array(b.buyer, b.booking_id,"
    "   b.quantity::text)) FROM bookings b WHERE b.event_id = $1), '[]'))::text";

/* --- events ------------------------------------------------------------------ */

void rsv_event_ref(rsv_event_t *ev)
{
    ev->refs++;
}

void rsv_event_unref(rsv_event_t *ev)
{
    if (ev == NULL || --ev->refs > 0)
        return;
    for (size_t i = 0; i < ev->nseats; i++)
        free(ev->seats[i].id);
    free(ev->seats);
    free(ev->sections);
    free(ev->pools);
    free(ev->place);
    free(ev->index);
    free(ev);
}

long rsv_event_seat(const rsv_event_t *ev, const char *seat_id)
{
    if (ev->nseats == 0)
        return -1;
    for (size_t i = cm_hash_str(seat_id) & ev->index_mask;; i = (i + 1) & ev->index_mask) {
        uint32_t v = ev->index[i];
        if (v == 0)
            return -1;
        if (strcmp(ev->seats[v - 1].id, seat_id) == 0)
            return (long)(v - 1);
    }
}

long rsv_event_section(const rsv_event_t *ev, const char *section_id)
{
    for (size_t i = 0; i < ev->nsections; i++)
        if (strcmp(ev->sections[i].id, section_id) == 0)
            return (long)i;
    return -1;
}

size_t rsv_event_best_candidates(const rsv_event_t *ev, long section, int64_t price,
                                 bool (*skip)(void *arg, size_t seat), void *arg, uint32_t *out,
                                 size_t cap)
{
    size_t lo = 0, hi = ev->nseats, n = 0;
    if (section >= 0) {
        if ((size_t)section >= ev->nsections)
            return 0;
        lo = ev->sections[section].first;
        hi = lo + ev->sections[section].count;
    }
    for (size_t i = lo; i < hi; i++) {
        uint32_t k = ev->place[i];
        if ((price >= 0 && ev->seats[k].price != price) || (skip && skip(arg, k)))
            continue;
        if (n < cap)
            out[n] = k;
        n++;
    }
    return n;
}

/* A block of best available's window: its ranks added up, its first candidate. */
typedef struct block {
    int64_t sum;
    size_t at;
} block_t;

/* Whether block x is ordered before y: fewer ranks added up, then earlier in place. */
static bool block_before(const block_t *x, const block_t *y)
{
    return x->sum != y->sum ? x->sum < y->sum : x->at < y->at;
}

/* Keeps the cap best blocks seen in heap (a max-heap on block_before: the worst on top). */
static void keep_block(block_t *heap, size_t *n, size_t cap, block_t b)
{
    size_t i;
    if (*n < cap) {
        i = (*n)++;
        while (i > 0 && block_before(&heap[(i - 1) / 2], &b)) {
            heap[i] = heap[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        heap[i] = b;
        return;
    }
    if (cap == 0 || !block_before(&b, &heap[0]))
        return;
    i = 0; /* b replaces the worst: sift it down */
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && block_before(&heap[c], &heap[c + 1]))
            c++;
        if (!block_before(&b, &heap[c]))
            break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = b;
}

static int cmp_blocks(const void *a, const void *b)
{
    const block_t *x = a, *y = b;
    return block_before(x, y) ? -1 : block_before(y, x);
}

void rsv_event_best_window(const rsv_event_t *ev, const uint32_t *cand, size_t ncand, size_t want,
                           bool (*usable)(void *arg, size_t seat), void *arg, size_t seats_min,
                           size_t blocks_max, uint32_t *out, rsv_best_window_t *w)
{
    memset(w, 0, sizeof(*w));
    if (want == 0 || blocks_max == 0 || ncand < want)
        return;
    block_t *heap = cm_xcalloc(blocks_max, sizeof(block_t));
    size_t nheap = 0, run = 0;
    int64_t sum = 0;
    for (size_t i = 0; i < ncand; i++) {
        const rsv_seat_t *s = &ev->seats[cand[i]];
        if (!usable(arg, cand[i])) {
            run = 0;
            continue;
        }
        const rsv_seat_t *p = i > 0 && run > 0 ? &ev->seats[cand[i - 1]] : NULL;
        if (p && s->row != 0 && p->row == s->row && s->pos == p->pos + 1) {
            run++;
        } else {
            run = 1;
            sum = 0;
        }
        sum += s->rank;
        if (run > want)
            sum -= ev->seats[cand[i - want]].rank;
        if (run >= want)
            keep_block(heap, &nheap, blocks_max, (block_t){.sum = sum, .at = i + 1 - want});
    }
    qsort(heap, nheap, sizeof(block_t), cmp_blocks);
    unsigned char *in = cm_xcalloc(ncand, 1);
    size_t taken = 0, nblocks = 0;
    while (nblocks < nheap && taken < seats_min) {
        for (size_t i = heap[nblocks].at; i < heap[nblocks].at + want; i++) {
            taken += !in[i];
            in[i] = 1;
        }
        nblocks++;
    }
    for (size_t i = 0; i < ncand; i++) {
        if (!in[i])
            continue;
        if (nblocks > 0 && i == heap[0].at)
            w->best_at = w->n;
        if (nblocks > 0 && i == heap[nblocks - 1].at)
            w->last_at = w->n;
        out[w->n++] = cand[i];
    }
    if (nblocks > 0)
        w->last_sum = heap[nblocks - 1].sum;
    free(in);
    free(heap);
}

/* --- places: rows numbered, seats in place order ------------------------------ */

typedef struct place_sort {
    const rsv_seat_t *seats;
    const char **rows; /* each seat's row name, NULL: none (while numbering) */
} place_sort_t;

static _Thread_local const place_sort_t *sorting; /* qsort has no argument (glibc: _r) */

/* Seats with a row by section, row name, index: one row's seats side by side. */
static int cmp_row_names(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const rsv_seat_t *s = sorting->seats;
    if (s[x].section != s[y].section)
        return s[x].section < s[y].section ? -1 : 1;
    int c = strcmp(sorting->rows[x], sorting->rows[y]);
    return c ? c : (x < y ? -1 : x > y);
}

/* Seats in place order: section, row number (none last), position, index. */
static int cmp_places(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const rsv_seat_t *s = sorting->seats;
    uint32_t rx = s[x].row ? s[x].row : UINT32_MAX, ry = s[y].row ? s[y].row : UINT32_MAX;
    if (s[x].section != s[y].section)
        return s[x].section < s[y].section ? -1 : 1;
    if (rx != ry)
        return rx < ry ? -1 : 1;
    if (s[x].pos != s[y].pos)
        return s[x].pos < s[y].pos ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether seats x and y (both with a row) are in one row of one section. */
static bool same_row(const rsv_event_t *ev, const char **rows, uint32_t x, uint32_t y)
{
    return ev->seats[x].section == ev->seats[y].section && strcmp(rows[x], rows[y]) == 0;
}

/* Numbers the rows of ev (rows[i]: seat i's row name or NULL) in the order each first
 * appears among the seats, then sorts ev->place. The seats are in section order, so a
 * section's rows get consecutive numbers. Sorts twice: O(n log n) at any row count. */
static void number_rows(rsv_event_t *ev, const char **rows)
{
    place_sort_t ps = {.seats = ev->seats, .rows = rows};
    sorting = &ps;
    uint32_t *byname = cm_xcalloc(ev->nseats ? ev->nseats : 1, sizeof(uint32_t));
    uint32_t *firsts = cm_xcalloc(ev->nseats ? ev->nseats : 1, sizeof(uint32_t));
    size_t n = 0, nrows = 0;
    for (size_t i = 0; i < ev->nseats; i++)
        if (rows[i])
            byname[n++] = (uint32_t)i;
    qsort(byname, n, sizeof(uint32_t), cmp_row_names);
    /* a row's seats are side by side, its first appearance (lowest index) leading */
    for (size_t i = 0; i < n; i++)
        if (i == 0 || !same_row(ev, rows, byname[i - 1], byname[i]))
            firsts[nrows++] = byname[i];
    qsort(firsts, nrows, sizeof(uint32_t), cmp_u32);
    uint32_t row = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || !same_row(ev, rows, byname[i - 1], byname[i])) {
            uint32_t *at = bsearch(&byname[i], firsts, nrows, sizeof(uint32_t), cmp_u32);
            row = (uint32_t)(at - firsts) + 1; /* found: byname[i] is a first */
        }
        ev->seats[byname[i]].row = row;
    }
    for (size_t i = 0; i < ev->nseats; i++)
        ev->place[i] = (uint32_t)i;
    qsort(ev->place, ev->nseats, sizeof(uint32_t), cmp_places);
    sorting = NULL;
    free(firsts);
    free(byname);
}

const rsv_pool_t *rsv_event_pool(const rsv_event_t *ev, const char *pool_id)
{
    for (size_t i = 0; i < ev->npools; i++)
        if (strcmp(ev->pools[i].id, pool_id) == 0)
            return &ev->pools[i];
    return NULL;
}

static int64_t int_of(const json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

rsv_event_t *rsv_event_parse(const char *id, const char *text)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    if (doc == NULL)
        return NULL;
    rsv_event_t *ev = cm_xcalloc(1, sizeof(*ev));
    ev->refs = 1;
    snprintf(ev->id, sizeof(ev->id), "%s", id);
    snprintf(ev->currency, sizeof(ev->currency), "%s",
             json_string_value(json_object_get(doc, "currency")) ?: "EUR");
    ev->hold_ttl_s = int_of(doc, "hold_ttl_seconds");
    ev->checkout_extension_s = int_of(doc, "checkout_extension_seconds");
    ev->max_hold_s = int_of(doc, "max_hold_seconds");
    ev->max_per_buyer = int_of(doc, "max_per_buyer");
    ev->version = int_of(doc, "version");

    json_t *seats = json_object_get(doc, "seats");
    ev->nseats = json_array_size(seats);
    ev->seats = cm_xcalloc(ev->nseats, sizeof(rsv_seat_t));
    ev->sections = cm_xcalloc(ev->nseats ? ev->nseats : 1, sizeof(rsv_section_t));
    size_t cap = 16;
    while (cap < ev->nseats * 2)
        cap <<= 1;
    ev->index = cm_xcalloc(cap, sizeof(uint32_t));
    ev->index_mask = cap - 1;
    ev->place = cm_xcalloc(ev->nseats ? ev->nseats : 1, sizeof(uint32_t));
    const char **rows = cm_xcalloc(ev->nseats ? ev->nseats : 1, sizeof(char *));
    for (size_t i = 0; i < ev->nseats; i++) {
        json_t *row = json_array_get(seats, i);
        const char *sid = json_string_value(json_array_get(row, 0));
        const char *sec = json_string_value(json_array_get(row, 1));
        ev->seats[i].id = cm_xstrdup(sid ? sid : "");
        ev->seats[i].price = (int64_t)json_integer_value(json_array_get(row, 2));
        rows[i] = json_string_value(json_array_get(row, 3));
        ev->seats[i].pos = (int32_t)json_integer_value(json_array_get(row, 4));
        ev->seats[i].rank = (int64_t)json_integer_value(json_array_get(row, 5));
        if (ev->nsections == 0 || strcmp(ev->sections[ev->nsections - 1].id, sec ? sec : "")) {
            rsv_section_t *s = &ev->sections[ev->nsections++];
            snprintf(s->id, sizeof(s->id), "%s", sec ? sec : "");
            s->first = i;
        }
        ev->sections[ev->nsections - 1].count++;
        ev->seats[i].section = (uint32_t)(ev->nsections - 1);
        size_t j = cm_hash_str(ev->seats[i].id) & ev->index_mask;
        while (ev->index[j])
            j = (j + 1) & ev->index_mask;
        ev->index[j] = (uint32_t)(i + 1);
    }
    number_rows(ev, rows); /* rows' names live in doc */
    free(rows);
    json_t *pools = json_object_get(doc, "pools");
    ev->npools = json_array_size(pools);
    ev->pools = cm_xcalloc(ev->npools ? ev->npools : 1, sizeof(rsv_pool_t));
    for (size_t i = 0; i < ev->npools; i++) {
        json_t *row = json_array_get(pools, i);
        snprintf(ev->pools[i].id, sizeof(ev->pools[i].id), "%s",
                 json_string_value(json_array_get(row, 0)) ?: "");
        ev->pools[i].capacity = (int64_t)json_integer_value(json_array_get(row, 1));
        ev->pools[i].price = (int64_t)json_integer_value(json_array_get(row, 2));
    }
    json_decref(doc);
    return ev;
}

/* --- metrics ------------------------------------------------------------------ */

void rsv_catalog_metrics_register(rsv_catalog_metrics_t *cm, cm_metrics_t *reg)
{
    cm->queries = cm_metrics_counter(reg, "onsale_reserve_catalog_queries_total",
                                     "Postgres queries of the event catalogue (loads, version "
                                     "checks, event listings; never one per request for an "
                                     "unknown event)",
                                     NULL);
    cm->reseeds = cm_metrics_counter(reg, "onsale_reserve_redis_reseeds_total",
                                     "events whose Redis state was loaded from Postgres", NULL);
}

/* --- the cache ---------------------------------------------------------------- */

rsv_catalog_t *rsv_catalog_new(rsv_server_t *srv)
{
    rsv_catalog_t *c = cm_xcalloc(1, sizeof(*c));
    c->srv = srv;
    c->gen_seen = c->gen_listed = c->gen_listing = -1;
    return c;
}

static void fail_known(known_waiter_t *w)
{
    for (known_waiter_t *next; w; w = next) {
        next = w->next;
        w->cb(NULL, cm_err_shutdown, w->arg);
        free(w);
    }
}

static void fail_waiters(waiter_t *w, int seed, const char *err)
{
    while (w) {
        waiter_t *next = w->next;
        if (seed)
            w->seed_cb(err, w->arg);
        else
            w->cb(NULL, err, w->arg);
        free(w);
        w = next;
    }
}

void rsv_catalog_free(rsv_catalog_t *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++) {
        fail_waiters(c->entries[i]->waiters, 0, cm_err_shutdown);
        fail_waiters(c->entries[i]->seed_waiters, 1, cm_err_shutdown);
        rsv_event_unref(c->entries[i]->ev);
        free(c->entries[i]);
    }
    free(c->entries);
    for (size_t i = 0; i < c->nknown; i++)
        free(c->known[i]);
    free(c->known);
    fail_known(c->known_waiters);
    fail_known(c->known_next);
    fail_known(c->gen_waiters);
    fail_known(c->gen_next);
    if (c->gen_op)
        c->gen_op->c = NULL; /* its reply finds the catalogue gone */
    free(c);
}

/* --- the set of known event ids ------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_known(const rsv_catalog_t *c, const char *id)
{
    return c->nknown && bsearch(&id, c->known, c->nknown, sizeof(char *), cmp_str) != NULL;
}

static void known_add(rsv_catalog_t *c, const char *id)
{
    if (is_known(c, id))
        return;
    if (c->nknown == c->capknown) {
        c->capknown = c->capknown ? c->capknown * 2 : 64;
        c->known = cm_xrealloc(c->known, c->capknown * sizeof(char *));
    }
    c->known[c->nknown++] = cm_xstrdup(id);
    qsort(c->known, c->nknown, sizeof(char *), cmp_str);
}

typedef struct known_op {
    rsv_catalog_t *c;
    int64_t gen; /* c->gen_seen when the listing started */
} known_op_t;

static void fresh_get(rsv_catalog_t *c, const char *id, rsv_catalog_cb cb, void *arg,
                      lookup_t mode);

static void redispatch(rsv_catalog_t *c, known_waiter_t *w, lookup_t mode)
{
    for (known_waiter_t *next; w; w = next) {
        next = w->next;
        if (w->fresh)
            fresh_get(c, w->id, w->cb, w->arg, mode);
        else
            catalog_get(c, w->id, w->cb, w->arg, mode);
        free(w);
    }
}

static void push_waiter(known_waiter_t **list, const char *id, rsv_catalog_cb cb, void *arg)
{
    known_waiter_t *w = cm_xcalloc(1, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "%s", id);
    w->cb = cb;
    w->arg = arg;
    w->next = *list;
    *list = w;
}

static void refresh_known(rsv_catalog_t *c, uint64_t now, uint64_t max_age);

/* The ids queued while the listing that just ended was out want one started after them. */
static void list_again(rsv_catalog_t *c)
{
    c->known_waiters = c->known_next;
    c->known_next = NULL;
    if (c->known_waiters == NULL)
        return;
    refresh_known(c, cm_time_mono_ns(), 0);
    if (!c->known_loading) { /* could not ask: each looks its id up alone */
        known_waiter_t *w = c->known_waiters;
        c->known_waiters = NULL;
        redispatch(c, w, LOOKUP_ALONE);
    }
}

static void on_known(const char *err, const rsv_pg_result_t *res, void *arg)
{
    known_op_t *op = arg;
    rsv_catalog_t *c = op->c;
    int64_t gen = op->gen;
    free(op);
    c->known_loading = false;
    known_waiter_t *w = c->known_waiters;
    c->known_waiters = NULL;
    if (err) {
        cm_log(CM_LOG_WARN, "listing events: %s", err);
        list_again(c);
        /* keep the set we have; the waiters look their id up themselves */
        redispatch(c, w, LOOKUP_ALONE);
        return;
    }
    for (size_t i = 0; i < c->nknown; i++)
        free(c->known[i]);
    c->nknown = 0;
    int n = rsv_pg_result_rows(res);
    for (int i = 0; i < n; i++) {
        if (c->nknown == c->capknown) {
            c->capknown = c->capknown ? c->capknown * 2 : 64;
            c->known = cm_xrealloc(c->known, c->capknown * sizeof(char *));
        }
        c->known[c->nknown++] = cm_xstrdup(rsv_pg_result_value(res, i, 0));
    }
    if (c->nknown > 1) /* qsort's base may be NULL for none */
        qsort(c->known, c->nknown, sizeof(char *), cmp_str);
    c->known_loaded = true;
    c->known_ns = cm_time_mono_ns();
    c->gen_listed = gen;
    list_again(c);
    redispatch(c, w, LOOKUP_LISTED); /* listed after they arrived: no new wait */
}

/* Re-lists the event ids when the set is older than max_age_ns (one listing at a time). */
static void refresh_known(rsv_catalog_t *c, uint64_t now, uint64_t max_age)
{
    if (c->known_loading || (c->known_loaded && now - c->known_ns <= max_age))
        return;
    known_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->c = c;
    op->gen = c->gen_listing = c->gen_seen;
    c->known_loading = true;
    cm_counter_inc(c->srv->m.catalog.queries);
    if (rsv_pg_query_first(c->srv->pg_read, KNOWN_SQL, 0, NULL, on_known, op) != 0) {
        c->known_loading = false;
        free(op);
    }
}

/* --- the catalogue generation ---------------------------------------------------- */

static void send_gen(rsv_catalog_t *c);

static void on_gen(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    gen_op_t *op = arg;
    rsv_catalog_t *c = op->c;
    free(op);
    if (c == NULL)
        return;
    c->gen_op = NULL;
    known_waiter_t *w = c->gen_waiters;
    c->gen_waiters = c->gen_next; /* they arrived after this GET was sent: the next one */
    c->gen_next = NULL;
    lookup_t mode = LOOKUP_LISTED; /* Redis did not answer: the set as it is decides */
    cm_redis_type_t t = err ? CM_REDIS_ERROR : cm_redis_reply_type(reply);
    if (t == CM_REDIS_NIL || t == CM_REDIS_STR) {
        const char *v = t == CM_REDIS_STR ? cm_redis_reply_str(reply, NULL) : "0";
        c->gen_seen = strtoll(v, NULL, 10);
        mode = LOOKUP_CHECKED;
    } else {
        cm_log(CM_LOG_DEBUG, "reading the catalogue generation: %s",
               err ? err : cm_redis_reply_str(reply, NULL));
    }
    if (c->gen_waiters)
        send_gen(c);
    redispatch(c, w, mode);
}

static void send_gen(rsv_catalog_t *c)
{
    gen_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->c = c;
    const char *argv[] = {"GET", RSV_CATALOG_GEN_KEY};
    c->gen_op = op;
    if (cm_redis_command(c->srv->redis, on_gen, op, 2, argv, NULL) != 0) {
        c->gen_op = NULL;
        free(op);
        known_waiter_t *w = c->gen_waiters;
        c->gen_waiters = NULL;
        redispatch(c, w, LOOKUP_LISTED);
    }
}

/* Before answering "no such event" (or "no such seat", fresh): read the generation (a
 * GET sent after now). */
static void gen_wait_as(rsv_catalog_t *c, const char *id, rsv_catalog_cb cb, void *arg, bool fresh)
{
    known_waiter_t **list = c->gen_op ? &c->gen_next : &c->gen_waiters;
    push_waiter(list, id, cb, arg);
    (*list)->fresh = fresh;
    if (c->gen_op == NULL)
        send_gen(c);
}

static void gen_wait(rsv_catalog_t *c, const char *id, rsv_catalog_cb cb, void *arg)
{
    gen_wait_as(c, id, cb, arg, false);
}

/* An id not in the set, whose set may predate an event created since: it waits for a
 * listing that reflects the generation just read (the one out, or the next). */
static void wait_listing(rsv_catalog_t *c, const char *id, rsv_catalog_cb cb, void *arg)
{
    if (c->known_loading) {
        bool covers = c->gen_seen >= 0 && c->gen_listing == c->gen_seen;
        push_waiter(covers ? &c->known_waiters : &c->known_next, id, cb, arg);
        return;
    }
    push_waiter(&c->known_waiters, id, cb, arg);
    refresh_known(c, cm_time_mono_ns(), 0);
    if (!c->known_loading) { /* could not ask: look it up alone */
        known_waiter_t *w = c->known_waiters;
        c->known_waiters = NULL;
        redispatch(c, w, LOOKUP_ALONE);
    }
}

typedef struct announce_op {
    rsv_catalog_done_cb cb;
    void *arg;
} announce_op_t;

static void on_announced(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    announce_op_t *op = arg;
    if (err == NULL && cm_redis_reply_type(reply) != CM_REDIS_STATUS)
        err = cm_err_server;
    op->cb(err, op->arg);
    free(op);
}

/*
 * A new generation is a fresh random number, not the old one plus one: a counter starts
 * again after Redis lost it (FLUSHALL, a failover to a replica that never saw it), so a
 * reserve that read 3 before the loss could read 3 again after two new events and take
 * its stale set of ids for current. A random 62-bit value never comes back (a missing key
 * reads as 0, which no announce writes).
 */
void rsv_catalog_announce(rsv_catalog_t *c, rsv_catalog_done_cb cb, void *arg)
{
    announce_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->cb = cb;
    op->arg = arg;
    uint64_t r;
    cm_tls_random(&r, sizeof(r));
    char gen[24];
    snprintf(gen, sizeof(gen), "%" PRIu64, (r >> 2) | 1);
    const char *argv[] = {"SET", RSV_CATALOG_GEN_KEY, gen};
    if (cm_redis_command(c->srv->redis, on_announced, op, 3, argv, NULL) != 0) {
        free(op);
        cb(cm_err_closed, arg);
    }
}

static entry_t *find(rsv_catalog_t *c, const char *id)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->entries[i]->id, id) == 0)
            return c->entries[i];
    return NULL;
}

static entry_t *add(rsv_catalog_t *c, const char *id)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 16;
        c->entries = cm_xrealloc(c->entries, c->cap * sizeof(entry_t *));
    }
    entry_t *e = cm_xcalloc(1, sizeof(*e));
    snprintf(e->id, sizeof(e->id), "%s", id);
    c->entries[c->n++] = e;
    return e;
}

/* Forgets missing-event entries nobody waits for once there are many of them. */
static void prune_missing(rsv_catalog_t *c)
{
    if (c->n < 1024)
        return;
    size_t o = 0;
    for (size_t i = 0; i < c->n; i++) {
        entry_t *e = c->entries[i];
        if (e->state == ENTRY_MISSING && e->waiters == NULL && !e->refreshing) {
            free(e);
            continue;
        }
        c->entries[o++] = e;
    }
    c->n = o;
}

typedef struct load_op {
    rsv_catalog_t *c;
    char id[CM_IDENT_MAX + 1];
} load_op_t;

static void on_loaded(const char *err, const rsv_pg_result_t *res, void *arg)
{
    load_op_t *op = arg;
    rsv_catalog_t *c = op->c;
    entry_t *e = find(c, op->id);
    free(op);
    if (e == NULL)
        return;
    e->refreshing = 0;
    waiter_t *w = e->waiters;
    e->waiters = NULL;
    if (err) {
        cm_log(CM_LOG_WARN, "loading event %s: %s %s", e->id, err,
               res ? rsv_pg_result_message(res) : "");
        if (e->state == ENTRY_LOADING)
            e->state = ENTRY_MISSING, e->checked_ns = 0;
        fail_waiters(w, 0, err);
        return;
    }
    e->checked_ns = cm_time_mono_ns();
    e->gen = e->load_gen;
    rsv_event_t *ev = NULL;
    if (rsv_pg_result_rows(res) == 1)
        ev = rsv_event_parse(e->id, rsv_pg_result_value(res, 0, 0));
    rsv_event_unref(e->ev);
    e->ev = ev;
    e->state = ev ? ENTRY_READY : ENTRY_MISSING;
    if (ev)
        rsv_event_ref(ev); /* the waiters' borrow, released below */
    char id[CM_IDENT_MAX + 1];
    snprintf(id, sizeof(id), "%s", e->id);
    int64_t gen = e->gen;
    while (w) {
        waiter_t *next = w->next;
        if (w->fresh && w->gen != gen) /* a recheck this load started too early for */
            fresh_get(c, id, w->cb, w->arg, LOOKUP_CHECKED);
        else
            w->cb(ev, NULL, w->arg);
        free(w);
        w = next;
    }
    rsv_event_unref(ev);
}

static void start_load(rsv_catalog_t *c, entry_t *e)
{
    load_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->c = c;
    snprintf(op->id, sizeof(op->id), "%s", e->id);
    const char *params[1] = {e->id};
    e->refreshing = 1;
    e->load_gen = c->gen_seen;
    cm_counter_inc(c->srv->m.catalog.queries);
    if (rsv_pg_query_first(c->srv->pg_read, LOAD_SQL, 1, params, on_loaded, op) != 0) {
        free(op);
        e->refreshing = 0;
        waiter_t *w = e->waiters;
        e->waiters = NULL;
        if (e->state == ENTRY_LOADING)
            e->state = ENTRY_MISSING, e->checked_ns = 0;
        fail_waiters(w, 0, cm_err_shutdown);
    }
}

/* Rechecks that waited on a cached entry whose background check failed: the copy. */
static void serve_cached(entry_t *e)
{
    waiter_t *w = e->waiters;
    e->waiters = NULL;
    rsv_event_t *ev = e->ev;
    if (ev)
        rsv_event_ref(ev);
    for (waiter_t *next; w; w = next) {
        next = w->next;
        w->cb(ev, NULL, w->arg);
        free(w);
    }
    rsv_event_unref(ev);
}

static void on_version(const char *err, const rsv_pg_result_t *res, void *arg)
{
    load_op_t *op = arg;
    rsv_catalog_t *c = op->c;
    entry_t *e = find(c, op->id);
    if (e == NULL) {
        free(op);
        return;
    }
    if (err) {
        e->refreshing = 0; /* keep serving the cached copy; try again later */
        free(op);
        serve_cached(e);
        return;
    }
    int64_t v = rsv_pg_result_rows(res) == 1 ? atoll(rsv_pg_result_value(res, 0, 0)) : -1;
    /* A recheck that waits wants a load that started after it: this check may not be. */
    if (e->ev && v == e->ev->version && e->waiters == NULL) {
        e->refreshing = 0;
        e->checked_ns = cm_time_mono_ns();
        free(op);
        return;
    }
    free(op);
    start_load(c, e); /* changed or deleted: reload in the background */
}

void rsv_catalog_get(rsv_catalog_t *c, const char *event_id, rsv_catalog_cb cb, void *arg)
{
    catalog_get(c, event_id, cb, arg, LOOKUP_ASK);
}

void rsv_catalog_recheck(rsv_catalog_t *c, const char *event_id, rsv_catalog_cb cb, void *arg)
{
    gen_wait_as(c, event_id, cb, arg, true);
}

/* After the generation read of a recheck: a cached copy loaded before the generation
 * read is loaded again (the caller gets the new one); else as any lookup. */
static void fresh_get(rsv_catalog_t *c, const char *id, rsv_catalog_cb cb, void *arg, lookup_t mode)
{
    entry_t *e = find(c, id);
    if (mode != LOOKUP_CHECKED || e == NULL || e->state != ENTRY_READY || e->gen == c->gen_seen) {
        catalog_get(c, id, cb, arg, mode);
        return;
    }
    waiter_t *w = cm_xcalloc(1, sizeof(*w));
    w->cb = cb;
    w->arg = arg;
    w->fresh = true;
    w->gen = c->gen_seen;
    w->next = e->waiters;
    e->waiters = w;
    if (!e->refreshing) /* else the check or load out serves it (again if too early) */
        start_load(c, e);
}

static void catalog_get(rsv_catalog_t *c, const char *event_id, rsv_catalog_cb cb, void *arg,
                        lookup_t mode)
{
    uint64_t now = cm_time_mono_ns();
    entry_t *e = find(c, event_id);
    refresh_known(c, now, (uint64_t)c->srv->cfg.catalog_refresh_ms * 1000000ull);
    /* An id not in the set (or while the first listing is still out, so that a burst at a
     * fresh worker costs one query): "no such event" once the generation says the set is
     * current, else after a new listing. */
    if (mode != LOOKUP_ALONE && e == NULL && (c->known_loaded || c->known_loading) &&
        !is_known(c, event_id)) {
        if (mode == LOOKUP_ASK)
            gen_wait(c, event_id, cb, arg);
        else if (mode == LOOKUP_LISTED || (c->known_loaded && c->gen_listed == c->gen_seen))
            cb(NULL, NULL, arg); /* no such event, as of every admin change answered: no query */
        else
            wait_listing(c, event_id, cb, arg);
        return;
    }
    if (e == NULL) {
        prune_missing(c);
        e = add(c, event_id);
        e->state = ENTRY_LOADING;
    } else if (e->state == ENTRY_MISSING && !e->refreshing) {
        if (mode == LOOKUP_ASK) {
            gen_wait(c, event_id, cb, arg);
            return;
        }
        /* Found missing before an admin change, or now listed: look again. */
        bool changed = (mode == LOOKUP_CHECKED && e->gen != c->gen_seen) ||
                       (mode == LOOKUP_LISTED && is_known(c, event_id));
        if (changed || now - e->checked_ns > NEGATIVE_TTL_NS)
            e->state = ENTRY_LOADING;
    }
    if (e->state == ENTRY_READY) {
        uint64_t max_age = (uint64_t)c->srv->cfg.catalog_refresh_ms * 1000000ull;
        if (!e->refreshing && now - e->checked_ns > max_age) {
            load_op_t *op = cm_xcalloc(1, sizeof(*op));
            op->c = c;
            snprintf(op->id, sizeof(op->id), "%s", e->id);
            const char *params[1] = {e->id};
            e->refreshing = 1;
            cm_counter_inc(c->srv->m.catalog.queries);
            if (rsv_pg_query(c->srv->pg_read, VERSION_SQL, 1, params, on_version, op) != 0) {
                e->refreshing = 0;
                free(op);
            }
        }
        rsv_event_t *ev = e->ev;
        rsv_event_ref(ev);
        cb(ev, NULL, arg);
        rsv_event_unref(ev);
        return;
    }
    if (e->state == ENTRY_MISSING) {
        cb(NULL, NULL, arg);
        return;
    }
    waiter_t *w = cm_xcalloc(1, sizeof(*w));
    w->cb = cb;
    w->arg = arg;
    w->next = e->waiters;
    e->waiters = w;
    if (!e->refreshing)
        start_load(c, e);
}

void rsv_catalog_invalidate(rsv_catalog_t *c, const char *event_id)
{
    known_add(c, event_id); /* created or replaced here: known at once */
    entry_t *e = find(c, event_id);
    if (e == NULL)
        return;
    e->checked_ns = 0; /* a missing entry is looked up again on the next get */
    if (e->state == ENTRY_READY && !e->refreshing) {
        rsv_event_unref(e->ev);
        e->ev = NULL;
        e->state = ENTRY_LOADING; /* the next get loads the new version */
    }
}

/* --- seeding Redis from Postgres ---------------------------------------------- */

typedef struct seed_op {
    rsv_catalog_t *c;
    char id[CM_IDENT_MAX + 1];
} seed_op_t;

static void finish_seed(rsv_catalog_t *c, const char *id, const char *err)
{
    entry_t *e = find(c, id);
    if (e == NULL)
        return;
    e->seeding = 0;
    waiter_t *w = e->seed_waiters;
    e->seed_waiters = NULL;
    fail_waiters(w, 1, err);
}

static void on_seeded(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    seed_op_t *op = arg;
    if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ERROR) {
        cm_log(CM_LOG_ERROR, "seed script for %s: %s", op->id, cm_redis_reply_str(reply, NULL));
        err = cm_err_server;
    }
    if (err == NULL) {
        if (cm_redis_reply_int(reply) == 1) {
            cm_counter_inc(op->c->srv->m.catalog.reseeds);
            cm_log(CM_LOG_INFO, "event %s: Redis state loaded from Postgres", op->id);
        }
    }
    finish_seed(op->c, op->id, err);
    free(op);
}

static void on_seed_data(const char *err, const rsv_pg_result_t *res, void *arg)
{
    seed_op_t *op = arg;
    rsv_catalog_t *c = op->c;
    json_t *doc = NULL;
    const char **argv = NULL;
    char **owned = NULL;
    size_t nowned = 0;
    if (err) {
        cm_log(CM_LOG_WARN, "seed data for %s: %s", op->id, err);
        goto fail;
    }
    doc = json_loads(rsv_pg_result_value(res, 0, 0), 0, NULL);
    if (doc == NULL) {
        err = cm_err_protocol;
        goto fail;
    }
    json_t *pools = json_object_get(doc, "pools");
    json_t *sold = json_object_get(doc, "sold");
    json_t *buyers = json_object_get(doc, "buyers");
    size_t np = json_array_size(pools), ns = json_array_size(sold);
    size_t nb = json_array_size(buyers);
    /* KEYS: seed, per pool (counter, next unit, units held), sold seats, per booking its
     * buyer's set; ARGV: pool count, per pool (available, last unit), sold count, per
     * booking (booking id, units). Every key declared (lua/seed.lua). */
    size_t nkeys = 1 + np * 3 + ns + nb;
    size_t argc = nkeys + 1 + np * 2 + 1 + nb * 2;
    argv = cm_xcalloc(argc, sizeof(char *));
    owned = cm_xcalloc(nkeys + np * 2 + 2, sizeof(char *));
    size_t a = 0;
    argv[a++] = owned[nowned++] = rsv_key(op->id, RSV_K_SEED, NULL);
    for (size_t i = 0; i < np; i++) {
        const char *pid = json_string_value(json_array_get(json_array_get(pools, i), 0));
        if (pid == NULL) {
            err = cm_err_protocol;
            goto fail;
        }
        argv[a++] = owned[nowned++] = rsv_key(op->id, RSV_K_POOL, pid);
        argv[a++] = owned[nowned++] = rsv_key(op->id, RSV_K_POOL_NEXT, pid);
        argv[a++] = owned[nowned++] = rsv_key(op->id, RSV_K_POOL_UNITS, pid);
    }
    for (size_t i = 0; i < ns; i++) {
        const char *sid = json_string_value(json_array_get(sold, i));
        if (sid == NULL) {
            err = cm_err_protocol;
            goto fail;
        }
        argv[a++] = owned[nowned++] = rsv_key(op->id, RSV_K_SEAT, sid);
    }
    for (size_t i = 0; i < nb; i++) {
        const char *buyer = json_string_value(json_array_get(json_array_get(buyers, i), 0));
        if (buyer == NULL) {
            err = cm_err_protocol;
            goto fail;
        }
        argv[a++] = owned[nowned++] = rsv_key(op->id, RSV_K_BUYER, buyer);
    }
    argv[a++] = owned[nowned++] = cm_xasprintf("%zu", np);
    for (size_t i = 0; i < np; i++) {
        json_t *row = json_array_get(pools, i);
        argv[a++] = owned[nowned++] =
            cm_xasprintf("%lld", (long long)json_integer_value(json_array_get(row, 1)));
        argv[a++] = owned[nowned++] =
            cm_xasprintf("%lld", (long long)json_integer_value(json_array_get(row, 2)));
    }
    argv[a++] = owned[nowned++] = cm_xasprintf("%zu", ns);
    for (size_t i = 0; i < nb; i++) {
        json_t *row = json_array_get(buyers, i);
        for (size_t k = 1; k < 3; k++)
            argv[a++] = json_string_value(json_array_get(row, k));
    }
    for (size_t i = 0; i < a; i++)
        if (argv[i] == NULL) {
            err = cm_err_protocol;
            goto fail;
        }
    if (cm_redis_eval(c->srv->redis, rsv_lua()->seed, on_seeded, op, (int)nkeys, (int)a, argv,
                      NULL) != 0) {
        err = cm_err_closed;
        goto fail;
    }
    op = NULL; /* on_seeded owns it now */
    goto out;
fail:
    finish_seed(c, op->id, err);
    free(op);
out:
    for (size_t i = 0; i < nowned; i++)
        free(owned[i]);
    free(owned);
    free(argv);
    json_decref(doc);
}

void rsv_catalog_seed(rsv_catalog_t *c, rsv_event_t *ev, rsv_seed_cb cb, void *arg)
{
    entry_t *e = find(c, ev->id);
    if (e == NULL) {
        e = add(c, ev->id);
        e->state = ENTRY_MISSING;
    }
    waiter_t *w = cm_xcalloc(1, sizeof(*w));
    w->seed_cb = cb;
    w->arg = arg;
    w->next = e->seed_waiters;
    e->seed_waiters = w;
    if (e->seeding)
        return;
    e->seeding = 1;
    seed_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->c = c;
    snprintf(op->id, sizeof(op->id), "%s", ev->id);
    const char *params[1] = {ev->id};
    if (rsv_pg_query_first(c->srv->pg_read, SEED_SQL, 1, params, on_seed_data, op) != 0) {
        free(op);
        finish_seed(c, ev->id, cm_err_shutdown);
    }
}

/* --- inventory validation ------------------------------------------------------ */

static int get_int(const json_t *body, const char *key, int64_t def, int64_t min, int64_t max,
                   int64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(body, key);
    if (v == NULL || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        snprintf(err, errlen, "%s must be an integer from %lld to %lld", key, (long long)min,
                 (long long)max);
        return -1;
    }
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* A seat's place as the normalised document carries it: a row (NULL: none), the position
 * along it, its rank (-1: its place in the list, counted from 1). */
typedef struct seat_place {
    const char *row;
    int64_t pos, rank;
} seat_place_t;

static int add_seat(json_t *seats, const char *id, const char *section, int64_t price,
                    seat_place_t pl, char *err, size_t errlen)
{
    if (!cm_parse_ident(id)) {
        snprintf(err, errlen, "seat id '%.80s' is not 1-64 characters of [A-Za-z0-9._-]", id);
        return -1;
    }
    if (json_array_size(seats) >= MAX_SEATS_PER_EVENT) {
        snprintf(err, errlen, "more than %d seats", MAX_SEATS_PER_EVENT);
        return -1;
    }
    int64_t rank = pl.rank >= 0 ? pl.rank : (int64_t)json_array_size(seats) + 1;
    json_array_append_new(seats,
                          json_pack("[s,s,I,o,o,I]", id, section, (json_int_t)price,
                                    pl.row ? json_string(pl.row) : json_null(),
                                    pl.row ? json_integer(pl.pos) : json_null(), (json_int_t)rank));
    return 0;
}

/* The optional row, position and rank of seats[i] (an explicit seat). 0 or -1 (err). */
static int seat_place(const json_t *s, size_t i, seat_place_t *pl, char *err, size_t errlen)
{
    json_t *row = json_object_get(s, "row"), *pos = json_object_get(s, "position");
    json_t *rank = json_object_get(s, "rank");
    *pl = (seat_place_t){NULL, 0, -1};
    if ((row == NULL) != (pos == NULL) ||
        (row && (json_string_value(row) == NULL || !cm_parse_ident(json_string_value(row)) ||
                 !json_is_integer(pos) || json_integer_value(pos) < 1 ||
                 json_integer_value(pos) > MAX_SEAT_POSITION))) {
        snprintf(err, errlen,
                 "seats[%zu]: row (an identifier) and position (integer from 1 to %d) go "
                 "together",
                 i, MAX_SEAT_POSITION);
        return -1;
    }
    if (rank && (!json_is_integer(rank) || json_integer_value(rank) < 0 ||
                 json_integer_value(rank) > RSV_RANK_MAX)) {
        snprintf(err, errlen, "seats[%zu].rank must be an integer from 0 to %d", i, RSV_RANK_MAX);
        return -1;
    }
    if (row) {
        pl->row = json_string_value(row);
        pl->pos = json_integer_value(pos);
    }
    if (rank)
        pl->rank = json_integer_value(rank);
    return 0;
}

static int normalise_seats(const json_t *body, json_t *seats, char *err, size_t errlen)
{
    json_t *list = json_object_get(body, "seats");
    if (list && !json_is_array(list)) {
        snprintf(err, errlen, "seats must be an array");
        return -1;
    }
    size_t i;
    json_t *s;
    json_array_foreach(list, i, s)
    {
        const char *id = json_string_value(json_object_get(s, "id"));
        const char *sec = json_string_value(json_object_get(s, "section"));
        json_t *price = json_object_get(s, "price");
        if (!json_is_object(s) || id == NULL || sec == NULL || !json_is_integer(price) ||
            json_integer_value(price) < 0 || json_integer_value(price) > RSV_PRICE_MAX) {
            snprintf(err, errlen,
                     "seats[%zu] needs id, section (strings) and price (integer from 0 to "
                     "%lld)",
                     i, (long long)RSV_PRICE_MAX);
            return -1;
        }
        if (!cm_parse_ident(sec)) {
            snprintf(err, errlen, "seats[%zu].section is not a valid identifier", i);
            return -1;
        }
        seat_place_t pl;
        if (seat_place(s, i, &pl, err, errlen) ||
            add_seat(seats, id, sec, json_integer_value(price), pl, err, errlen))
            return -1;
    }
    list = json_object_get(body, "sections");
    if (list && !json_is_array(list)) {
        snprintf(err, errlen, "sections must be an array");
        return -1;
    }
    json_array_foreach(list, i, s)
    {
        const char *id = json_string_value(json_object_get(s, "id"));
        json_t *rows = json_object_get(s, "rows"), *per = json_object_get(s, "seats_per_row");
        json_t *price = json_object_get(s, "price");
        if (!json_is_object(s) || id == NULL || !cm_parse_ident(id) || !json_is_integer(rows) ||
            !json_is_integer(per) || !json_is_integer(price) || json_integer_value(rows) < 1 ||
            json_integer_value(rows) > 1000 || json_integer_value(per) < 1 ||
            json_integer_value(per) > 1000 || json_integer_value(price) < 0 ||
            json_integer_value(price) > RSV_PRICE_MAX || strlen(id) > CM_IDENT_MAX - 10) {
            snprintf(err, errlen,
                     "sections[%zu] needs id (identifier up to 54 chars), rows and "
                     "seats_per_row (1-1000) and price (integer from 0 to %lld)",
                     i, (long long)RSV_PRICE_MAX);
            return -1;
        }
        json_int_t nper = json_integer_value(per);
        for (json_int_t r = 1; r <= json_integer_value(rows); r++)
            for (json_int_t n = 1; n <= nper; n++) {
                char sid[CM_IDENT_MAX + 1], row[24];
                snprintf(sid, sizeof(sid), "%s-%lld-%lld", id, (long long)r, (long long)n);
                snprintf(row, sizeof(row), "%lld", (long long)r);
                /* front rows first, a row's middle before its ends */
                json_int_t off = 2 * n - nper - 1;
                seat_place_t pl = {row, n, (r - 1) * 2000 + (off < 0 ? -off : off)};
                if (add_seat(seats, sid, id, json_integer_value(price), pl, err, errlen))
                    return -1;
            }
    }
    return 0;
}

static int cmp_seat_rows(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    return strcmp(json_string_value(json_array_get(x, 0)), json_string_value(json_array_get(y, 0)));
}

static int check_unique(json_t *rows, const char *what, char *err, size_t errlen)
{
    size_t n = json_array_size(rows);
    if (n < 2)
        return 0;
    json_t **v = cm_xcalloc(n, sizeof(json_t *));
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(rows, i);
    qsort(v, n, sizeof(json_t *), cmp_seat_rows);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++)
        if (cmp_seat_rows(&v[i - 1], &v[i]) == 0) {
            snprintf(err, errlen, "%s id '%s' appears twice", what,
                     json_string_value(json_array_get(v[i], 0)));
            rc = -1;
        }
    free(v);
    return rc;
}

json_t *rsv_catalog_normalise(const json_t *body, char *err, size_t errlen)
{
    json_t *doc = json_object();
    json_t *seats = json_array(), *pools = json_array();
    json_object_set_new(doc, "seats", seats);
    json_object_set_new(doc, "pools", pools);
    int64_t ttl, ext, maxhold, perbuyer;
    const char *cur = "EUR";
    json_t *c = json_object_get(body, "currency");
    if (c) {
        cur = json_string_value(c);
        if (cur == NULL || strlen(cur) != 3 || cur[0] < 'A' || cur[0] > 'Z' || cur[1] < 'A' ||
            cur[1] > 'Z' || cur[2] < 'A' || cur[2] > 'Z') {
            snprintf(err, errlen, "currency must be a three-letter ISO 4217 code");
            goto err;
        }
    }
    if (get_int(body, "hold_ttl_seconds", 300, 1, 86400, &ttl, err, errlen) ||
        get_int(body, "checkout_extension_seconds", 300, 0, 86400, &ext, err, errlen) ||
        get_int(body, "max_hold_seconds", ttl > 900 ? ttl : 900, 1, 86400 * 7, &maxhold, err,
                errlen) ||
        get_int(body, "max_per_buyer", 8, 0, 100000, &perbuyer, err, errlen))
        goto err;
    if (maxhold < ttl) {
        snprintf(err, errlen, "max_hold_seconds must be at least hold_ttl_seconds");
        goto err;
    }
    json_object_set_new(doc, "currency", json_string(cur));
    json_object_set_new(doc, "hold_ttl_seconds", json_integer(ttl));
    json_object_set_new(doc, "checkout_extension_seconds", json_integer(ext));
    json_object_set_new(doc, "max_hold_seconds", json_integer(maxhold));
    json_object_set_new(doc, "max_per_buyer", json_integer(perbuyer));
    if (normalise_seats(body, seats, err, errlen))
        goto err;
    json_t *list = json_object_get(body, "pools");
    if (list && !json_is_array(list)) {
        snprintf(err, errlen, "pools must be an array");
        goto err;
    }
    size_t i;
    json_t *p;
    json_array_foreach(list, i, p)
    {
        const char *id = json_string_value(json_object_get(p, "id"));
        json_t *capv = json_object_get(p, "capacity"), *price = json_object_get(p, "price");
        if (!json_is_object(p) || id == NULL || !cm_parse_ident(id) || !json_is_integer(capv) ||
            json_integer_value(capv) < 1 || json_integer_value(capv) > 1000000 ||
            !json_is_integer(price) || json_integer_value(price) < 0 ||
            json_integer_value(price) > RSV_PRICE_MAX) {
            snprintf(err, errlen,
                     "pools[%zu] needs id (identifier), capacity (1-1000000) and price "
                     "(integer from 0 to %lld)",
                     i, (long long)RSV_PRICE_MAX);
            goto err;
        }
        if (json_array_size(pools) >= MAX_POOLS) {
            snprintf(err, errlen, "more than %d pools", MAX_POOLS);
            goto err;
        }
        json_array_append_new(
            pools, json_pack("[s,I,I]", id, json_integer_value(capv), json_integer_value(price)));
    }
    if (json_array_size(seats) == 0 && json_array_size(pools) == 0) {
        snprintf(err, errlen, "an event needs seats, sections or pools");
        goto err;
    }
    if (check_unique(seats, "seat", err, errlen) || check_unique(pools, "pool", err, errlen))
        goto err;
    return doc;
err:
    json_decref(doc);
    return NULL;
}
