/*
 * rsv_avail — see rsv_avail.h.
 *
 * Sold marks: per event, one timestamp per seat and pool (allocated at the first mark,
 * dropped when the event's version changes or it is invalidated), set from a hold
 * script's TAKEN or SOLDOUT answer or a snapshot's scan. A mark is believed for avail_max_age_ms: a
 * sold seat is final except when a failed booking gives it back (reserve/lua/unconvert.lua),
 * possibly on another reserve, and for that long this worker may still call it sold, the same lag
 * the seat map is allowed.
 *
 * Best available (rsv_hold.c) keeps three things here, per event, beside the snapshot:
 * the hint — the last snapshot's seat statuses, amended by rsv_avail_mark with what the
 * worker's holds learn (seats taken, seats a script found taken), the held and sold
 * marks carried over the next snapshot once (it may have read a seat before it was
 * marked); the turns — a bound on its scripts in flight, so each window is chosen from
 * a hint that learnt what the ones before found; and the latest refusals of whole
 * passes, each the answer of the requests of its kind begun before it was sent.
 *
 * A rebuild is waited for by requests (answered from the new JSON) and by rsv_avail_refresh's
 * callers (given the new totals) alike. A snapshot whose rebuild is under way when the worker
 * stops outlives rsv_avail_free: its Redis and Postgres callbacks still come back (with
 * cm_err_shutdown), and the last one frees it.
 */
#include "rsv_avail.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "rsv_catalog.h"
#include "rsv_rediskeys.h"
#include "rsv_lua.h"
#include "rsv_ids.h"
#include "rsv_req.h"
#include "rsv_stock.h"

#define MGET_CHUNK 500

enum { SEAT_AVAILABLE = RSV_AVAIL_FREE, SEAT_HELD = RSV_AVAIL_HELD, SEAT_SOLD = RSV_AVAIL_SOLD };

typedef struct waiter {
    struct waiter *next;
    rsv_req_t *r; /* a request to answer, or NULL: cb(arg) wants the totals */
    int seats;
    rsv_avail_totals_cb cb;
    void *arg;
} waiter_t;

typedef struct turn {
    struct turn *next;
    rsv_avail_turn_cb cb;
    void *arg;
} turn_t;

typedef struct snap {
    rsv_avail_t *a; /* NULL once rsv_avail_free left a rebuild to finish alone */
    char event[CM_IDENT_MAX + 1];
    uint64_t built_ns;
    uint64_t started_ns; /* when the rebuild in progress began (its scan reads after) */
    int64_t version;
    char *avail_json;
    char *seats_json;
    rsv_avail_totals_t totals;
    /* the last snapshot's seat statuses (best available's hint), of hint_version's seats */
    unsigned char *hint;
    unsigned char *marked; /* per seat: 1 when marked held or sold since the hint was built */
    size_t nhint;
    int64_t hint_version;
    /* best available's turns: scripts in flight, and the ones waiting (FIFO) */
    int turns;
    int turns_max;
    turn_t *turn_head, *turn_tail;
    bool granting;
    /* best available's latest refusals (by section and price), of refusals_version */
    rsv_avail_refusal_t refusals[4];
    size_t nrefusals;
    int64_t refusals_version;
    /* a rebuild in progress */
    int building;
    int pending;
    const char *err;
    rsv_event_t *ev;
    unsigned char *status;
    int64_t (*pool_counts)[2];
    waiter_t *waiters;
    /* sold marks (see the top): mono ns per seat then per pool, 0 = none; for
     * sold_version's items */
    uint64_t *sold_ns;
    size_t nsold;
    int64_t sold_version;
} snap_t;

struct rsv_avail {
    rsv_server_t *srv;
    bool stopping; /* rsv_avail_free is under way: no turn granted */
    snap_t **snaps;
    size_t n, cap;
};

rsv_avail_t *rsv_avail_new(rsv_server_t *srv)
{
    rsv_avail_t *a = cm_xcalloc(1, sizeof(*a));
    a->srv = srv;
    return a;
}

static void answer(snap_t *s, rsv_req_t *r, int seats)
{
    const char *text = seats ? s->seats_json : s->avail_json;
    rsv_reply_text(r, 200, "application/json", text, strlen(text));
    free(r);
}

static void flush_waiters(snap_t *s, const char *err)
{
    waiter_t *w = s->waiters;
    s->waiters = NULL;
    while (w) {
        waiter_t *next = w->next;
        if (w->r == NULL) {
            w->cb(err, err ? NULL : &s->totals, w->arg);
        } else if (err) {
            rsv_reply_unavailable(w->r, "reading availability", err);
            free(w->r);
        } else {
            answer(s, w->r, w->seats);
        }
        free(w);
        w = next;
    }
}

static void snap_free(snap_t *s)
{
    free(s->avail_json);
    free(s->seats_json);
    free(s->status);
    free(s->hint);
    free(s->marked);
    free(s->pool_counts);
    free(s->sold_ns);
    rsv_event_unref(s->ev);
    free(s);
}

void rsv_avail_free(rsv_avail_t *a)
{
    if (a == NULL)
        return;
    /* Everyone waiting hears first, while every snapshot still stands: a callback may
     * give a turn back (rsv_avail_best_done), and no turn is granted any more. */
    a->stopping = true;
    for (size_t i = 0; i < a->n; i++) {
        snap_t *s = a->snaps[i];
        while (s->turn_head) {
            turn_t *t = s->turn_head;
            s->turn_head = t->next;
            t->cb(cm_err_shutdown, t->arg);
            free(t);
        }
        s->turn_tail = NULL;
    }
    for (size_t i = 0; i < a->n; i++)
        flush_waiters(a->snaps[i], cm_err_shutdown);
    for (size_t i = 0; i < a->n; i++) {
        snap_t *s = a->snaps[i];
        if (s->building)
            s->a = NULL; /* its last part frees it (part_done) */
        else
            snap_free(s);
    }
    free(a->snaps);
    free(a);
}

static snap_t *find(rsv_avail_t *a, const char *event, int create)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->snaps[i]->event, event) == 0)
            return a->snaps[i];
    if (!create)
        return NULL;
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->snaps = cm_xrealloc(a->snaps, a->cap * sizeof(snap_t *));
    }
    snap_t *s = cm_xcalloc(1, sizeof(*s));
    s->a = a;
    snprintf(s->event, sizeof(s->event), "%s", event);
    a->snaps[a->n++] = s;
    return s;
}

void rsv_avail_invalidate(rsv_avail_t *a, const char *event)
{
    snap_t *s = find(a, event, 0);
    if (s == NULL)
        return;
    s->built_ns = 0;
    free(s->sold_ns);
    s->sold_ns = NULL;
    s->nsold = 0;
}

/* The sold marks of ev, emptied first when they belong to another version of it; NULL
 * when there are none and create is 0. */
static uint64_t *sold_marks(snap_t *s, const rsv_event_t *ev, int create)
{
    size_t items = ev->nseats + ev->npools;
    if (s->sold_ns && (s->sold_version != ev->version || s->nsold != items)) {
        free(s->sold_ns);
        s->sold_ns = NULL;
        s->nsold = 0;
    }
    if (s->sold_ns == NULL && create && items > 0) {
        s->sold_ns = cm_xcalloc(items, sizeof(*s->sold_ns));
        s->nsold = items;
        s->sold_version = ev->version;
    }
    return s->sold_ns;
}

void rsv_avail_note_sold(rsv_avail_t *a, const rsv_event_t *ev, size_t item)
{
    if (a->srv->cfg.avail_max_age_ms <= 0 || item >= ev->nseats + ev->npools)
        return;
    uint64_t *marks = sold_marks(find(a, ev->id, 1), ev, 1);
    marks[item] = cm_time_mono_ns();
}

bool rsv_avail_known_sold(rsv_avail_t *a, const rsv_event_t *ev, size_t item)
{
    snap_t *s = find(a, ev->id, 0);
    uint64_t *marks = s && item < ev->nseats + ev->npools ? sold_marks(s, ev, 0) : NULL;
    if (marks == NULL || marks[item] == 0)
        return false;
    uint64_t max_age = (uint64_t)a->srv->cfg.avail_max_age_ms * 1000000ull;
    return cm_time_mono_ns() - marks[item] <= max_age;
}

void rsv_avail_mark(rsv_avail_t *a, const rsv_event_t *ev, size_t seat, unsigned char status)
{
    snap_t *s = find(a, ev->id, 0);
    if (s == NULL || s->hint == NULL || s->hint_version != ev->version || s->nhint != ev->nseats ||
        seat >= s->nhint)
        return;
    s->hint[seat] = status;
    if (status == SEAT_AVAILABLE)
        return;
    if (s->marked == NULL)
        s->marked = cm_xcalloc(s->nhint ? s->nhint : 1, 1);
    s->marked[seat] = 1;
}

const unsigned char *rsv_avail_seat_hint(rsv_avail_t *a, const rsv_event_t *ev)
{
    snap_t *s = find(a, ev->id, 0);
    uint64_t max_age = (uint64_t)a->srv->cfg.avail_max_age_ms * 1000000ull;
    if (s == NULL || s->hint == NULL || s->hint_version != ev->version || s->nhint != ev->nseats ||
        s->built_ns == 0 || cm_time_mono_ns() - s->built_ns > max_age)
        return NULL;
    return s->hint;
}

/* Grants the turns waiting while fewer than turns_max are out. Not re-entered: a turn
 * given back from inside a grant's callback is granted again by the outer loop. */
static void grant_turns(snap_t *s)
{
    if (s->granting || s->a == NULL || s->a->stopping)
        return;
    s->granting = true;
    while (s->turn_head && s->turns < s->turns_max) {
        turn_t *t = s->turn_head;
        s->turn_head = t->next;
        if (s->turn_head == NULL)
            s->turn_tail = NULL;
        s->turns++;
        t->cb(NULL, t->arg);
        free(t);
    }
    s->granting = false;
}

void rsv_avail_note_refusal(rsv_avail_t *a, const rsv_event_t *ev, const rsv_avail_refusal_t *r)
{
    snap_t *s = find(a, ev->id, 1);
    const size_t cap = sizeof(s->refusals) / sizeof(s->refusals[0]);
    if (s->refusals_version != ev->version)
        s->nrefusals = 0;
    s->refusals_version = ev->version;
    size_t i = 0, oldest = 0;
    for (; i < s->nrefusals; i++) {
        if (s->refusals[i].section == r->section && s->refusals[i].price == r->price) {
            if (r->sent_ns >= s->refusals[i].sent_ns)
                s->refusals[i] = *r;
            return;
        }
        if (s->refusals[i].sent_ns < s->refusals[oldest].sent_ns)
            oldest = i;
    }
    s->refusals[s->nrefusals < cap ? s->nrefusals++ : oldest] = *r;
}

const rsv_avail_refusal_t *rsv_avail_refusal(rsv_avail_t *a, const rsv_event_t *ev, long section,
                                             int64_t price, uint64_t since_ns)
{
    snap_t *s = find(a, ev->id, 0);
    if (s == NULL || s->refusals_version != ev->version)
        return NULL;
    for (size_t i = 0; i < s->nrefusals; i++) {
        const rsv_avail_refusal_t *r = &s->refusals[i];
        if (r->section == section && r->price == price && r->sent_ns > since_ns)
            return r;
    }
    return NULL;
}

void rsv_avail_best_turn(rsv_avail_t *a, const rsv_event_t *ev, int max, rsv_avail_turn_cb cb,
                         void *arg)
{
    snap_t *s = find(a, ev->id, 1);
    turn_t *t = cm_xcalloc(1, sizeof(*t));
    t->cb = cb;
    t->arg = arg;
    s->turns_max = max > 0 ? max : 1;
    if (s->turn_tail)
        s->turn_tail->next = t;
    else
        s->turn_head = t;
    s->turn_tail = t;
    grant_turns(s);
}

void rsv_avail_best_done(rsv_avail_t *a, const rsv_event_t *ev)
{
    snap_t *s = find(a, ev->id, 0);
    assert(s != NULL && s->turns > 0);
    s->turns--;
    grant_turns(s);
}

void rsv_avail_count(const rsv_event_t *ev, const unsigned char *status,
                     const int64_t (*pool_counts)[2], rsv_avail_totals_t *out)
{
    int64_t left = 0, held = 0, total = (int64_t)ev->nseats;
    for (size_t k = 0; k < ev->nseats; k++) {
        left += status[k] == SEAT_AVAILABLE;
        held += status[k] == SEAT_HELD;
    }
    for (size_t i = 0; i < ev->npools; i++) {
        left += pool_counts[i][0] > 0 ? pool_counts[i][0] : 0;
        held += pool_counts[i][1];
        total += ev->pools[i].capacity;
    }
    out->left = left;
    out->held = held;
    out->total = total;
    out->version = ev->version;
}

static void build_json(snap_t *s)
{
    rsv_event_t *ev = s->ev;
    char as_of[32];
    cm_format_rfc3339(cm_time_wall_ms(), as_of, sizeof(as_of));
    json_t *av = json_pack("{s:s, s:s, s:I}", "event", ev->id, "as_of", as_of, "version",
                           (json_int_t)ev->version);
    json_t *sections = json_array();
    for (size_t i = 0; i < ev->nsections; i++) {
        rsv_section_t *sec = &ev->sections[i];
        int64_t n[3] = {0, 0, 0};
        for (size_t k = sec->first; k < sec->first + sec->count; k++)
            n[s->status[k]]++;
        json_array_append_new(sections,
                              json_pack("{s:s, s:I, s:I, s:I, s:I}", "id", sec->id, "total",
                                        (json_int_t)sec->count, "available", (json_int_t)n[0],
                                        "held", (json_int_t)n[1], "sold", (json_int_t)n[2]));
    }
    json_t *pools = json_array();
    for (size_t i = 0; i < ev->npools; i++) {
        int64_t avail = s->pool_counts[i][0], held = s->pool_counts[i][1];
        if (avail < 0)
            avail = 0;
        int64_t sold = ev->pools[i].capacity - avail - held;
        json_array_append_new(
            pools, json_pack("{s:s, s:I, s:I, s:I, s:I}", "id", ev->pools[i].id, "capacity",
                             (json_int_t)ev->pools[i].capacity, "available", (json_int_t)avail,
                             "held", (json_int_t)held, "sold", (json_int_t)(sold < 0 ? 0 : sold)));
    }
    json_object_set_new(av, "sections", sections);
    json_object_set_new(av, "pools", pools);
    free(s->avail_json);
    s->avail_json = json_dumps(av, JSON_COMPACT);
    json_decref(av);

    static const char *const names[] = {"available", "held", "sold"};
    json_t *sm = json_pack("{s:s, s:s, s:I}", "event", ev->id, "as_of", as_of, "version",
                           (json_int_t)ev->version);
    json_t *seats = json_array();
    for (size_t k = 0; k < ev->nseats; k++)
        json_array_append_new(seats, json_pack("{s:s, s:s, s:s, s:I}", "id", ev->seats[k].id,
                                               "section", ev->sections[ev->seats[k].section].id,
                                               "status", names[s->status[k]], "price",
                                               (json_int_t)ev->seats[k].price));
    json_object_set_new(sm, "seats", seats);
    free(s->seats_json);
    s->seats_json = json_dumps(sm, JSON_COMPACT);
    json_decref(sm);
}

static void part_done(snap_t *s)
{
    if (--s->pending > 0)
        return;
    s->building = 0;
    if (s->a == NULL) { /* the worker stopped meanwhile; its waiters were answered */
        snap_free(s);
        return;
    }
    if (s->err == NULL) {
        rsv_avail_count(s->ev, s->status, (const int64_t(*)[2])s->pool_counts, &s->totals);
        build_json(s);
        s->built_ns = cm_time_mono_ns();
        s->version = s->ev->version;
        /* Sold marks come from rebuilds a request waits for, as they always did, not from
         * the stock feed's own: a feed rebuilding every stock_interval_ms would keep a mark
         * fresh up to a give-back or a Redis restore, and a hold right after it would be
         * refused from memory for up to avail_max_age_ms. */
        bool asked = false;
        for (const waiter_t *w = s->waiters; w && !asked; w = w->next)
            asked = w->r != NULL;
        for (size_t k = 0; asked && k < s->ev->nseats; k++)
            if (s->status[k] == SEAT_SOLD)
                rsv_avail_note_sold(s->a, s->ev, k);
        for (size_t i = 0; asked && i < s->ev->npools; i++)
            if (s->pool_counts[i][0] <= 0 && s->pool_counts[i][1] == 0)
                rsv_avail_note_sold(s->a, s->ev, s->ev->nseats + i);
        /* A mark made before this scan of an item it found not sold is dropped: a failed
         * booking gave it back (unconvert.lua), on whatever worker or reserve. So what a
         * worker calls sold lags a give-back by one rebuild, which the stock feed makes
         * every stock_interval_ms for a live event, not by avail_max_age_ms. A mark made
         * meanwhile is kept: the scan may have read before it. */
        uint64_t *marks = sold_marks(s, s->ev, 0);
        for (size_t k = 0; marks && k < s->ev->nseats; k++)
            if (s->status[k] != SEAT_SOLD && marks[k] < s->started_ns)
                marks[k] = 0;
        for (size_t i = 0; marks && i < s->ev->npools; i++)
            if ((s->pool_counts[i][0] > 0 || s->pool_counts[i][1] > 0) &&
                marks[s->ev->nseats + i] < s->started_ns)
                marks[s->ev->nseats + i] = 0;
        /* The new statuses become the hint, with this worker's marks made since the last
         * one where the scan says free: the scan may have read before the mark. */
        if (s->hint && s->marked && s->hint_version == s->ev->version && s->nhint == s->ev->nseats)
            for (size_t k = 0; k < s->nhint; k++)
                if (s->marked[k] && s->status[k] == SEAT_AVAILABLE)
                    s->status[k] = s->hint[k];
        free(s->hint);
        free(s->marked);
        s->marked = NULL;
        s->hint = s->status;
        s->nhint = s->ev->nseats;
        s->hint_version = s->ev->version;
        s->status = NULL;
    }
    free(s->status);
    s->status = NULL;
    free(s->pool_counts);
    s->pool_counts = NULL;
    rsv_event_unref(s->ev);
    s->ev = NULL;
    flush_waiters(s, s->err);
}

typedef struct part {
    snap_t *s;
    size_t first, count; /* seats chunk, or pool index when count == 0 */
} part_t;

static void on_mget(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    part_t *p = arg;
    snap_t *s = p->s;
    if (err || cm_redis_reply_type(reply) != CM_REDIS_ARRAY ||
        cm_redis_reply_count(reply) != p->count) {
        s->err = err ? err : cm_err_protocol;
    } else {
        for (size_t i = 0; i < p->count; i++) {
            const char *v = cm_redis_reply_str(cm_redis_reply_at(reply, i), NULL);
            s->status[p->first + i] = v == NULL                    ? SEAT_AVAILABLE
                                      : strncmp(v, "sold", 4) == 0 ? SEAT_SOLD
                                                                   : SEAT_HELD;
        }
    }
    free(p);
    part_done(s);
}

static void on_pool(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    part_t *p = arg;
    snap_t *s = p->s;
    if (err || cm_redis_reply_type(reply) != CM_REDIS_ARRAY || cm_redis_reply_count(reply) != 2)
        s->err = err ? err : cm_err_protocol;
    else {
        s->pool_counts[p->first][0] = cm_redis_reply_int(cm_redis_reply_at(reply, 0));
        s->pool_counts[p->first][1] = cm_redis_reply_int(cm_redis_reply_at(reply, 1));
    }
    free(p);
    part_done(s);
}

static void scan(rsv_avail_t *a, snap_t *s)
{
    rsv_event_t *ev = s->ev;
    char prefix[96];
    rsv_key_prefix(ev->id, prefix, sizeof(prefix));
    s->status = cm_xcalloc(ev->nseats ? ev->nseats : 1, 1);
    s->pool_counts = cm_xcalloc(ev->npools ? ev->npools : 1, sizeof(*s->pool_counts));
    s->pending = 1; /* held until every part is sent */
    for (size_t first = 0; first < ev->nseats; first += MGET_CHUNK) {
        size_t count = ev->nseats - first < MGET_CHUNK ? ev->nseats - first : MGET_CHUNK;
        const char **argv = cm_xcalloc(count + 1, sizeof(char *));
        char **keys = cm_xcalloc(count, sizeof(char *));
        argv[0] = "MGET";
        for (size_t i = 0; i < count; i++)
            argv[i + 1] = keys[i] = rsv_key(ev->id, RSV_K_SEAT, ev->seats[first + i].id);
        part_t *p = cm_xcalloc(1, sizeof(*p));
        p->s = s;
        p->first = first;
        p->count = count;
        s->pending++;
        if (cm_redis_command(a->srv->redis, on_mget, p, (int)count + 1, argv, NULL) != 0) {
            s->pending--;
            s->err = cm_err_closed;
            free(p);
        }
        for (size_t i = 0; i < count; i++)
            free(keys[i]);
        free(keys);
        free(argv);
        if (s->err)
            break;
    }
    for (size_t i = 0; i < ev->npools && s->err == NULL; i++) {
        char *pkey = rsv_key(ev->id, RSV_K_POOL, ev->pools[i].id);
        char *ukey = rsv_key(ev->id, RSV_K_POOL_UNITS, ev->pools[i].id);
        const char *argv[] = {pkey, ukey};
        part_t *p = cm_xcalloc(1, sizeof(*p));
        p->s = s;
        p->first = i;
        s->pending++;
        if (cm_redis_eval(a->srv->redis, rsv_lua()->avail, on_pool, p, 2, 2, argv, NULL) != 0) {
            s->pending--;
            s->err = cm_err_closed;
            free(p);
        }
        free(pkey);
        free(ukey);
    }
    part_done(s);
}

static void on_seeded(const char *err, void *arg)
{
    snap_t *s = arg;
    if (err == NULL && s->a == NULL)
        err = cm_err_shutdown;
    if (err) {
        s->err = err;
        s->pending = 1;
        part_done(s);
        return;
    }
    scan(s->a, s);
}

static void on_seed_checked(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    snap_t *s = arg;
    if (err || s->a == NULL) {
        on_seeded(err ? err : cm_err_shutdown, s);
    } else if (cm_redis_reply_type(reply) == CM_REDIS_INT && cm_redis_reply_int(reply) == 1) {
        scan(s->a, s);
    } else {
        /* Redis lost the event (or never had it): load it from Postgres first. */
        rsv_catalog_seed(s->a->srv->catalog, s->ev, on_seeded, s);
    }
}

/* w waits for s's rebuild, started now unless one is under way. */
static void wait_for_rebuild(rsv_avail_t *a, snap_t *s, rsv_event_t *ev, waiter_t *w)
{
    w->next = s->waiters;
    s->waiters = w;
    if (s->building)
        return;
    s->building = 1;
    s->started_ns = cm_time_mono_ns();
    s->err = NULL;
    rsv_event_ref(ev);
    s->ev = ev;
    char *key = rsv_key(ev->id, RSV_K_SEED, NULL);
    const char *argv[] = {"EXISTS", key};
    int rc = cm_redis_command(a->srv->redis, on_seed_checked, s, 2, argv, NULL);
    free(key);
    if (rc != 0)
        on_seeded(cm_err_closed, s);
}

void rsv_avail_refresh(rsv_avail_t *a, rsv_event_t *ev, rsv_avail_totals_cb cb, void *arg)
{
    waiter_t *w = cm_xcalloc(1, sizeof(*w));
    w->cb = cb;
    w->arg = arg;
    wait_for_rebuild(a, find(a, ev->id, 1), ev, w);
}

static void on_event(rsv_event_t *ev, const char *err, void *arg)
{
    rsv_req_t *r = arg;
    rsv_avail_t *a = r->srv->avail;
    int seats = r->svc.ep == RSV_EP_SEATS;
    if (err) {
        rsv_reply_unavailable(r, "loading the event", err);
        free(r);
        return;
    }
    if (ev == NULL) {
        rsv_reply_error(r, 404, "unknown_event", "no such event", NULL);
        free(r);
        return;
    }
    rsv_stock_touch(r->srv->stock, ev->id);
    snap_t *s = find(a, ev->id, 1);
    uint64_t max_age = (uint64_t)r->srv->cfg.avail_max_age_ms * 1000000ull;
    if (s->avail_json && s->version == ev->version && cm_time_mono_ns() - s->built_ns <= max_age) {
        answer(s, r, seats);
        return;
    }
    waiter_t *w = cm_xcalloc(1, sizeof(*w));
    w->r = r;
    w->seats = seats;
    wait_for_rebuild(a, s, ev, w);
}

void rsv_avail_serve(rsv_server_t *srv, cm_req_t *req, const char *event, int seats)
{
    rsv_req_t *r = cm_xcalloc(1, sizeof(*r));
    rsv_req_start(r, srv, req, seats ? RSV_EP_SEATS : RSV_EP_AVAILABILITY);
    rsv_catalog_get(srv->catalog, event, on_event, r);
}
