/*
 * rsv_hold — see rsv_hold.h.
 *
 * Taking a hold: validate (identifiers, body, token for this event) → catalog lookup
 * (in memory: seat ids, prices, the event's TTLs) → one EVALSHA. When Redis answers
 * NOSEED (first use of the event, or Redis lost its data) the event's state is loaded
 * from Postgres and the script runs once more.
 *
 * A loser's hold costs no script once the seat is sold: the script's TAKEN answer says
 * which seats are sold (not merely held), the worker marks them (rsv_avail_note_sold),
 * and a hold without an Idempotency-Key asking for a seat marked within
 * avail_max_age_ms is answered 409 seat_unavailable from memory, before the token's
 * record is looked up (the seat map is public; nothing is held). With a key the script
 * runs, so a retry of a hold that was taken and then bought is still answered its hold.
 *
 * Best available (docs/design.md "Best available") weighs a window first: the best blocks
 * the worker's snapshot of the event (rsv_avail_seat_hint, waited for when none is fresh)
 * believes free, about max(64, 8N) seats, with the worst of them as the script's bound.
 * The script's answer amends the hint (the seats it found taken, the seats picked); a
 * window without a pick within its bound is tried again with the amended hint and twice
 * the seats, at most BEST_WINDOW_PASSES times, then the whole section is: only a whole
 * pass refuses, so a 409 is true of the section. The best block of a window is leased
 * (marked held in the hint) while its script is in flight, and at most BEST_IN_FLIGHT
 * scripts of an event are in flight from a worker (rsv_avail_best_turn), so the holds
 * one worker sends at once look at different blocks, each chosen from a hint that has
 * learnt what the ones before it found. A whole pass's refusal also answers the requests
 * of its kind that began before it was sent, without a script (best_known_refusal): at
 * the end of a hotspot, refusals do not each read the section.
 */
#include "rsv_hold.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_http.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_text.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "rsv_auth.h"
#include "rsv_avail.h"
#include "rsv_catalog.h"
#include "rsv_rediskeys.h"
#include "rsv_lua.h"
#include "rsv_ids.h"
#include "rsv_req.h"

#define MAX_SEATS_PER_HOLD 50
#define MAX_QUANTITY       100
/* Best available reads every candidate seat in a whole pass: bounded per hold. */
#define MAX_BEST_CANDIDATES 20000
/* A window: at least this many seats (or 8 per seat wanted), twice as many after each
 * window that missed, made of at most BEST_WINDOW_BLOCKS blocks; windows tried before a
 * whole pass. */
#define BEST_WINDOW_SEATS  64
#define BEST_WINDOW_BLOCKS 512
#define BEST_WINDOW_PASSES 3
/* Best-available scripts of one event in flight from one worker at once. */
#define BEST_IN_FLIGHT 16

/* --- metrics ----------------------------------------------------------------- */

const char *const rsv_hold_record_names[RSV_HOLD_RECORD_COUNT] = {
    [RSV_HOLD_RECORD_MATCHED] = "matched",
    [RSV_HOLD_RECORD_MISSING] = "missing",
};

void rsv_hold_metrics_register(rsv_hold_metrics_t *hm, cm_metrics_t *reg)
{
    hm->taken = cm_metrics_counter(reg, "onsale_reserve_holds_total", "holds taken", NULL);
    hm->conflicts =
        cm_metrics_counter(reg, "onsale_reserve_hold_conflicts_total",
                           "hold attempts refused: seat held or sold, pool empty", NULL);
    hm->expired = cm_metrics_counter(reg, "onsale_reserve_holds_expired_total",
                                     "operations that found their hold expired", NULL);
    hm->released = cm_metrics_counter(reg, "onsale_reserve_holds_released_total",
                                      "holds released by their owner", NULL);
    hm->limit_exceeded = cm_metrics_counter(reg, "onsale_reserve_limit_exceeded_total",
                                            "hold attempts over max_per_buyer", NULL);
    cm_metrics_counters(reg, "onsale_reserve_token_records_total",
                        "first holds whose token was judged by its gateway record "
                        "(matched: no signature check; missing: verified instead)",
                        "result", rsv_hold_record_names, RSV_HOLD_RECORD_COUNT, hm->token_records);
}

/* --- views ------------------------------------------------------------------- */

/* Element i of r as a number (0 when r has no element i, or it is not a number). */
static int64_t reply_i64(const cm_redis_reply_t *r, size_t i)
{
    const cm_redis_reply_t *e = cm_redis_reply_at(r, i);
    if (e == NULL)
        return 0;
    if (cm_redis_reply_type(e) == CM_REDIS_INT)
        return cm_redis_reply_int(e);
    const char *s = cm_redis_reply_str(e, NULL);
    return s ? strtoll(s, NULL, 10) : 0;
}

/* Whether element i of r is the string word. */
static bool reply_is(const cm_redis_reply_t *r, size_t i, const char *word)
{
    const cm_redis_reply_t *e = cm_redis_reply_at(r, i);
    const char *s = e ? cm_redis_reply_str(e, NULL) : NULL;
    return s != NULL && strcmp(s, word) == 0;
}

/* The words of the hold scripts, by rsv_hold_status_t (OTHER has none). */
static const char *const status_words[RSV_HOLD_NSTATUS] = {
    [RSV_HOLD_OK] = "OK",
    [RSV_HOLD_EXPIRED] = "EXPIRED",
    [RSV_HOLD_CONVERTED] = "CONVERTED",
    [RSV_HOLD_NOTFOUND] = "NOTFOUND",
    [RSV_HOLD_GONE] = "GONE",
    [RSV_HOLD_STALE] = "STALE",
    [RSV_HOLD_AMOUNT] = "AMOUNT",
    [RSV_HOLD_NOOP] = "NOOP",
};

rsv_hold_status_t rsv_hold_status_parse(const char *word)
{
    for (int i = 0; word && i < RSV_HOLD_OTHER; i++)
        if (strcmp(word, status_words[i]) == 0)
            return (rsv_hold_status_t)i;
    return RSV_HOLD_OTHER;
}

/* The word a script answered: the first element of its array, or NULL when there is none
 * (no reply, not an array, empty, or not a string first). */
static const char *first_word(const cm_redis_reply_t *reply)
{
    if (reply == NULL || cm_redis_reply_type(reply) != CM_REDIS_ARRAY ||
        cm_redis_reply_count(reply) < 1)
        return NULL;
    return cm_redis_reply_str(cm_redis_reply_at(reply, 0), NULL);
}

rsv_hold_status_t rsv_hold_reply_status(const cm_redis_reply_t *reply)
{
    return rsv_hold_status_parse(first_word(reply));
}

static const char *const take_words[RSV_HOLD_TAKE_OTHER] = {
    [RSV_HOLD_TAKE_OK] = "OK",
    [RSV_HOLD_TAKE_REPLAY] = "REPLAY",
    [RSV_HOLD_TAKE_MISMATCH] = "MISMATCH",
    [RSV_HOLD_TAKE_TAKEN] = "TAKEN",
    [RSV_HOLD_TAKE_SOLDOUT] = "SOLDOUT",
    [RSV_HOLD_TAKE_INSUFFICIENT] = "INSUFFICIENT",
    [RSV_HOLD_TAKE_NOBLOCK] = "NOBLOCK",
    [RSV_HOLD_TAKE_LIMIT] = "LIMIT",
    [RSV_HOLD_TAKE_UNVERIFIED] = "UNVERIFIED",
    [RSV_HOLD_TAKE_NOSEED] = "NOSEED",
};

rsv_hold_take_t rsv_hold_take_parse(const cm_redis_reply_t *reply)
{
    const char *word = first_word(reply);
    for (int i = 0; word && i < RSV_HOLD_TAKE_OTHER; i++)
        if (strcmp(word, take_words[i]) == 0)
            return (rsv_hold_take_t)i;
    return RSV_HOLD_TAKE_OTHER;
}

int rsv_hold_view_parse(const cm_redis_reply_t *reply, rsv_hold_view_t *v)
{
    memset(v, 0, sizeof(*v));
    const char *st = first_word(reply);
    if (st == NULL)
        return -1;
    v->status = rsv_hold_status_parse(st);
    if (cm_redis_reply_count(reply) < 10) {
        switch (v->status) {
        case RSV_HOLD_NOTFOUND:
        case RSV_HOLD_GONE:
        case RSV_HOLD_CONVERTED:
        case RSV_HOLD_OK:
            return 0;
        default:
            return -1;
        }
    }
    v->exp_ms = reply_i64(reply, 1);
    const char *seats = cm_redis_reply_str(cm_redis_reply_at(reply, 2), NULL);
    if (seats && *seats)
        v->seats = cm_xstrdup(seats);
    snprintf(v->pool, sizeof(v->pool), "%s",
             cm_redis_reply_str(cm_redis_reply_at(reply, 3), NULL) ?: "");
    v->qty = reply_i64(reply, 4);
    v->created_ms = reply_i64(reply, 5);
    v->cap_ms = reply_i64(reply, 6);
    v->amount = reply_i64(reply, 7);
    snprintf(v->checkout, sizeof(v->checkout), "%s",
             cm_redis_reply_str(cm_redis_reply_at(reply, 8), NULL) ?: "");
    v->first_unit = reply_i64(reply, 9);
    return 0;
}

void rsv_hold_view_clear(rsv_hold_view_t *v)
{
    free(v->seats);
    v->seats = NULL;
}

/* --- scripts acting on an existing hold ---------------------------------------- */

typedef struct act {
    rsv_server_t *srv;
    const cm_redis_script_t *script;
    char hold_id[RSV_HOLD_ID_MAX + 1];
    char event[CM_IDENT_MAX + 1];
    char *buyer;
    char **extra;
    int nextra;
    cm_redis_cb cb;
    void *arg;
} act_t;

static void act_free(act_t *a)
{
    for (int i = 0; i < a->nextra; i++)
        free(a->extra[i]);
    free(a->extra);
    free(a->buyer);
    free(a);
}

/* Runs a's script with the layout seats/pool (as the hold record has them). 0 or -1. */
static int act_run(act_t *a, const char *seats, const char *pool, cm_redis_cb cb, void *arg)
{
    /* KEYS: hold, buyer, active, pool counter, pool units, pool next, seats... */
    size_t nseats = 0;
    for (const char *p = seats; p && *p; p++)
        nseats += *p == ',';
    nseats += seats && *seats ? 1 : 0;
    size_t nkeys = 6 + nseats;
    size_t argc = nkeys + 4 + (size_t)a->nextra;
    const char **argv = cm_xcalloc(argc, sizeof(char *));
    char **owned = cm_xcalloc(nkeys, sizeof(char *));
    size_t k = 0;
    owned[k++] = rsv_key(a->event, RSV_K_HOLD, a->hold_id);
    owned[k++] = rsv_key(a->event, RSV_K_BUYER, a->buyer);
    owned[k++] = rsv_key(a->event, RSV_K_ACTIVE, NULL);
    owned[k++] = rsv_key(a->event, RSV_K_POOL, pool);
    owned[k++] = rsv_key(a->event, RSV_K_POOL_UNITS, pool);
    owned[k++] = rsv_key(a->event, RSV_K_POOL_NEXT, pool);
    if (nseats) {
        char *copy = cm_xstrdup(seats), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t && k < nkeys; t = strtok_r(NULL, ",", &save))
            owned[k++] = rsv_key(a->event, RSV_K_SEAT, t);
        free(copy);
    }
    size_t n = 0;
    for (size_t i = 0; i < k; i++)
        argv[n++] = owned[i];
    argv[n++] = a->hold_id;
    argv[n++] = a->buyer;
    argv[n++] = seats ? seats : "";
    argv[n++] = pool;
    for (int i = 0; i < a->nextra; i++)
        argv[n++] = a->extra[i];
    int rc = k == nkeys
                 ? cm_redis_eval(a->srv->redis, a->script, cb, arg, (int)nkeys, (int)n, argv, NULL)
                 : -1;
    for (size_t i = 0; i < k; i++)
        free(owned[i]);
    free(owned);
    free(argv);
    return rc;
}

/* get.lua on hold_id (of event) for buyer. 0 or -1 (Redis closed). */
static int read_record(rsv_server_t *srv, const char *event, const char *hold_id, const char *buyer,
                       cm_redis_cb cb, void *arg)
{
    char *hkey = rsv_key(event, RSV_K_HOLD, hold_id);
    const char *argv[] = {hkey, hold_id, buyer};
    int rc = cm_redis_eval(srv->redis, rsv_lua()->get, cb, arg, 1, 3, argv, NULL);
    free(hkey);
    return rc;
}

static void on_act_read(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    act_t *a = arg;
    rsv_hold_view_t v;
    bool bad = err != NULL || rsv_hold_view_parse(reply, &v) != 0;
    if (bad || v.status == RSV_HOLD_NOTFOUND || v.status == RSV_HOLD_GONE) {
        if (!bad)
            rsv_hold_view_clear(&v);
        a->cb(err, reply, a->arg); /* the caller reads the status (or the error) */
        act_free(a);
        return;
    }
    int rc = act_run(a, v.seats, v.pool, a->cb, a->arg);
    rsv_hold_view_clear(&v);
    if (rc != 0)
        a->cb(cm_err_closed, NULL, a->arg);
    act_free(a);
}

static act_t *act_new(rsv_server_t *srv, const cm_redis_script_t *script, const char *hold_id,
                      const char *buyer, int nextra, const char *const *extra, cm_redis_cb cb,
                      void *arg)
{
    act_t *a = cm_xcalloc(1, sizeof(*a));
    if (rsv_hold_id_event(hold_id, a->event) != 0) {
        free(a);
        return NULL;
    }
    a->srv = srv;
    a->script = script;
    snprintf(a->hold_id, sizeof(a->hold_id), "%s", hold_id);
    a->buyer = cm_xstrdup(buyer);
    a->nextra = nextra;
    a->extra = cm_xcalloc((size_t)nextra + 1, sizeof(char *));
    for (int i = 0; i < nextra; i++)
        a->extra[i] = cm_xstrdup(extra[i]);
    a->cb = cb;
    a->arg = arg;
    return a;
}

/* The script's answer when it ran on a layout we remembered: STALE (the record is not
 * what we remembered — never expected, a hold's seats and pool do not change) falls back
 * to reading the record first; anything else is the caller's. */
static void on_act_known(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    act_t *a = arg;
    if (err == NULL && rsv_hold_reply_status(reply) == RSV_HOLD_STALE) {
        if (read_record(a->srv, a->event, a->hold_id, a->buyer, on_act_read, a) != 0) {
            a->cb(cm_err_closed, NULL, a->arg);
            act_free(a);
        }
        return;
    }
    a->cb(err, reply, a->arg);
    act_free(a);
}

static int act_known(rsv_server_t *srv, const cm_redis_script_t *script, const char *hold_id,
                     const char *buyer, const char *seats, const char *pool, int nextra,
                     const char *const *extra, cm_redis_cb cb, void *arg)
{
    act_t *a = act_new(srv, script, hold_id, buyer, nextra, extra, cb, arg);
    if (a == NULL)
        return -1;
    int rc = act_run(a, seats, pool, on_act_known, a);
    if (rc != 0)
        act_free(a);
    return rc;
}

/* Runs script on hold_id of buyer after reading the hold's layout (get.lua). */
static int act(rsv_server_t *srv, const cm_redis_script_t *script, const char *hold_id,
               const char *buyer, int nextra, const char *const *extra, cm_redis_cb cb, void *arg)
{
    act_t *a = act_new(srv, script, hold_id, buyer, nextra, extra, cb, arg);
    if (a == NULL)
        return -1;
    int rc = read_record(srv, a->event, a->hold_id, a->buyer, on_act_read, a);
    if (rc != 0)
        act_free(a);
    return rc;
}

int rsv_hold_op_read(rsv_server_t *srv, const char *hold_id, const char *buyer, cm_redis_cb cb,
                     void *arg)
{
    char event[CM_IDENT_MAX + 1];
    if (rsv_hold_id_event(hold_id, event) != 0)
        return -1;
    return read_record(srv, event, hold_id, buyer, cb, arg);
}

int rsv_hold_op_extend(rsv_server_t *srv, const char *hold_id, const char *buyer,
                       int64_t extension_ms, cm_redis_cb cb, void *arg)
{
    char ext[24], keep[24];
    snprintf(ext, sizeof(ext), "%lld", (long long)extension_ms);
    snprintf(keep, sizeof(keep), "%lld", (long long)srv->cfg.hold_record_keep_s * 1000);
    const char *extra[] = {ext, keep};
    return act(srv, rsv_lua()->extend, hold_id, buyer, 2, extra, cb, arg);
}

int rsv_hold_op_release(rsv_server_t *srv, const char *hold_id, const char *buyer, cm_redis_cb cb,
                        void *arg)
{
    return act(srv, rsv_lua()->release, hold_id, buyer, 0, NULL, cb, arg);
}

/* How long a converted hold's record stays: a replayed conversion still finds it. */
#define CONVERTED_KEEP_MS ((long long)7 * 86400 * 1000)

int rsv_hold_op_convert(rsv_server_t *srv, const char *hold_id, const char *buyer,
                        const rsv_hold_view_t *known, const char *checkout_id, int64_t amount,
                        cm_redis_cb cb, void *arg)
{
    char keep[24], amount_s[24];
    snprintf(keep, sizeof(keep), "%lld", CONVERTED_KEEP_MS);
    snprintf(amount_s, sizeof(amount_s), "%lld", (long long)amount);
    const char *extra[] = {checkout_id, keep, amount_s};
    if (known)
        return act_known(srv, rsv_lua()->convert, hold_id, buyer, known->seats, known->pool, 3,
                         extra, cb, arg);
    return act(srv, rsv_lua()->convert, hold_id, buyer, 3, extra, cb, arg);
}

int rsv_hold_op_unconvert(rsv_server_t *srv, const char *hold_id, const char *buyer,
                          const char *checkout_id, const char *free_seats, const char *free_units,
                          cm_redis_cb cb, void *arg)
{
    const char *extra[] = {checkout_id, free_seats, free_units};
    return act(srv, rsv_lua()->unconvert, hold_id, buyer, 3, extra, cb, arg);
}

int rsv_hold_id_event(const char *hold_id, char event[CM_IDENT_MAX + 1])
{
    size_t n = strlen(hold_id);
    if (n < 34 || n > RSV_HOLD_ID_MAX || hold_id[32] != '.')
        return -1;
    for (int i = 0; i < 32; i++) {
        char c = hold_id[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return -1;
    }
    if (!cm_parse_ident(hold_id + 33))
        return -1;
    memcpy(event, hold_id + 33, n - 33 + 1);
    return 0;
}

void rsv_hold_json_items(json_t *obj, const rsv_hold_view_t *v)
{
    if (v->pool[0]) {
        json_object_set_new(obj, "pool", json_string(v->pool));
        json_object_set_new(obj, "quantity", json_integer(v->qty));
        return;
    }
    json_t *arr = json_array();
    if (v->seats) {
        char *copy = cm_xstrdup(v->seats), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
            json_array_append_new(arr, json_string(t));
        free(copy);
    }
    json_object_set_new(obj, "seats", arr);
}

static json_t *time_json(int64_t ms)
{
    char buf[32];
    cm_format_rfc3339(ms, buf, sizeof(buf));
    return json_string(buf);
}

static json_t *hold_json(const char *hold_id, const char *event, const char *state,
                         const rsv_hold_view_t *v, const char *currency)
{
    json_t *o = json_object();
    json_object_set_new(o, "hold_id", json_string(hold_id));
    json_object_set_new(o, "event", json_string(event));
    json_object_set_new(o, "state", json_string(state));
    rsv_hold_json_items(o, v);
    json_object_set_new(o, "expires_at", time_json(v->exp_ms));
    if (v->cap_ms)
        json_object_set_new(o, "max_expires_at", time_json(v->cap_ms));
    json_object_set_new(o, "amount", json_integer(v->amount));
    if (currency)
        json_object_set_new(o, "currency", json_string(currency));
    return o;
}

/* --- taking a hold -------------------------------------------------------------- */

typedef struct create_op {
    rsv_req_t r;
    char event[CM_IDENT_MAX + 1];
    cm_jwt_claims_t claims;
    json_t *body;
    rsv_event_t *ev;
    char hold_id[RSV_HOLD_ID_MAX + 1];
    const rsv_pool_t *pool;
    int64_t quantity;
    int64_t amount;
    char *seats_csv;
    int seeded;
    char idem[65];     /* sha256(buyer, Idempotency-Key), "" without the header */
    char req_hash[65]; /* sha256 of the canonical body, "" without the header */
    char record[65];   /* sha256 of the token, when unverified */
    bool unverified;   /* the token's signature was not checked: the script needs its record */
    bool rechecked;    /* the event was re-read before refusing an unknown seat or pool */
    uint32_t *cand;    /* best available: the candidate seats (indexes), place order */
    size_t ncand;
    bool split;        /* best available: seats apart may do when no block is left */
    uint32_t *win;     /* best available: the window in flight (seat indexes), or none */
    size_t nwin;       /* 0: the script in flight weighs every candidate */
    uint32_t *lease;   /* the window's best block, marked held in the hint meanwhile */
    size_t nlease;     /* seats of lease still marked (0: none) */
    int misses;        /* best available: windows that held no pick within their bound */
    bool turn;         /* best available: holds one of the event's turns (rsv_avail_best_turn) */
    bool refreshed;    /* best available: waited for a snapshot once already */
    long sec;          /* best available: the section asked for (-1: any) */
    int64_t price;     /* best available: the price level asked for (-1: any) */
    uint64_t start_ns; /* when the request was read (cm_time_mono_ns) */
    uint64_t sent_ns;  /* when the last best-available script was sent */
} create_op_t;

static void best_unlease(create_op_t *op);
static void best_turn_end(create_op_t *op);

static void create_done(create_op_t *op)
{
    best_unlease(op);
    best_turn_end(op);
    json_decref(op->body);
    rsv_event_unref(op->ev);
    free(op->seats_csv);
    free(op->cand);
    free(op->win);
    free(op->lease);
    free(op);
}

static void run_create(create_op_t *op);

static void on_create_seeded(const char *err, void *arg)
{
    create_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "loading the event into Redis", err);
        create_done(op);
        return;
    }
    run_create(op);
}

static void on_replayed(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    create_op_t *op = arg;
    rsv_hold_view_t v;
    if (err || rsv_hold_view_parse(reply, &v) != 0) {
        rsv_reply_unavailable(&op->r, "reading the hold", err ? err : cm_err_protocol);
    } else if (v.status == RSV_HOLD_NOTFOUND || v.status == RSV_HOLD_GONE) {
        rsv_reply_error(&op->r, 404, "unknown_hold", "the hold of this Idempotency-Key is gone",
                        NULL);
    } else {
        const char *state = v.status == RSV_HOLD_OK          ? "held"
                            : v.status == RSV_HOLD_CONVERTED ? "converted"
                                                             : "expired";
        rsv_reply_json(
            &op->r, 200,
            hold_json(op->hold_id, op->event, state, &v, op->ev ? op->ev->currency : NULL));
        rsv_hold_view_clear(&v);
    }
    create_done(op);
}

/* The same Idempotency-Key and body again: the hold taken the first time, as it is now. */
static void replay_hold(create_op_t *op)
{
    if (read_record(op->r.srv, op->event, op->hold_id, op->claims.sub, on_replayed, op) != 0) {
        rsv_reply_unavailable(&op->r, "reading the hold", cm_err_closed);
        create_done(op);
    }
}

/* 201 with the hold just taken: what hold_json gives for it, in the same order. */
static void reply_created(create_op_t *op, int64_t exp_ms)
{
    const char *currency = op->ev->currency;
    char stack[2048], exp[32], *out = stack;
    size_t worst = CM_TEXT_JSON_WORST(strlen(op->hold_id) + strlen(op->event) +
                                      (op->seats_csv ? 2 * strlen(op->seats_csv) : 0) +
                                      (op->pool ? strlen(op->pool->id) : 0) +
                                      (currency ? strlen(currency) : 0)) +
                   256;
    if (worst > sizeof(stack))
        out = cm_xmalloc(worst);
    cm_text_t t = cm_text_at(out, worst > sizeof(stack) ? worst : sizeof(stack));
    CM_TEXT_LIT(&t, "{\"hold_id\":");
    cm_text_json(&t, op->hold_id);
    CM_TEXT_LIT(&t, ",\"event\":");
    cm_text_json(&t, op->event);
    CM_TEXT_LIT(&t, ",\"state\":\"held\",");
    if (op->pool) {
        CM_TEXT_LIT(&t, "\"pool\":");
        cm_text_json(&t, op->pool->id);
        CM_TEXT_LIT(&t, ",\"quantity\":");
        cm_text_i64(&t, op->quantity);
    } else { /* seat ids are identifiers: no comma inside one */
        CM_TEXT_LIT(&t, "\"seats\":[");
        char *copy = cm_xstrdup(op->seats_csv ?: ""), *save = NULL;
        int i = 0;
        for (char *id = strtok_r(copy, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
            if (i++)
                CM_TEXT_LIT(&t, ",");
            cm_text_json(&t, id);
        }
        free(copy);
        CM_TEXT_LIT(&t, "]");
    }
    cm_format_rfc3339(exp_ms, exp, sizeof(exp));
    CM_TEXT_LIT(&t, ",\"expires_at\":");
    cm_text_json(&t, exp);
    CM_TEXT_LIT(&t, ",\"amount\":");
    cm_text_i64(&t, op->amount);
    if (currency) {
        CM_TEXT_LIT(&t, ",\"currency\":");
        cm_text_json(&t, currency);
    }
    CM_TEXT_LIT(&t, "}");
    size_t n = cm_text_done(&t, out);
    if (n == 0)
        rsv_reply_unavailable(&op->r, "writing the answer", cm_err_protocol);
    else
        rsv_reply_text(&op->r, 201, "application/json", out, n);
    if (out != stack)
        free(out);
}

/* The full verification of a token whose record was missing; then the hold, once more. */
static void on_create_verified(rsv_auth_result_t a, const char *why, void *arg)
{
    create_op_t *op = arg;
    if (a != RSV_AUTH_OK) {
        rsv_reply_auth(&op->r, a, why);
        create_done(op);
        return;
    }
    run_create(op);
}

/* 409 seat_unavailable naming the seats the script found held or sold (1-based indexes,
 * negative for sold ones: those are marked sold on this worker). */
static void reply_taken(create_op_t *op, const cm_redis_reply_t *reply)
{
    json_t *seats = json_object_get(op->body, "seats");
    json_t *un = json_array();
    for (size_t i = 1; i < cm_redis_reply_count(reply); i++) {
        long long idx = cm_redis_reply_int(cm_redis_reply_at(reply, i));
        json_t *seat = json_array_get(seats, (size_t)((idx < 0 ? -idx : idx) - 1));
        if (seat == NULL)
            continue;
        json_array_append(un, seat);
        long k = rsv_event_seat(op->ev, json_string_value(seat));
        if (idx < 0 && k >= 0)
            rsv_avail_note_sold(op->r.srv->avail, op->ev, (size_t)k);
    }
    rsv_reply_error(&op->r, 409, "seat_unavailable", "a requested seat is held or sold",
                    json_pack("{s:o}", "unavailable", un));
}

/* hold_best.lua's OK: the seats it picked (element 3) and their amount (4) become the
 * hold's, as a seat hold's request names them. false when the reply lacks them. */
static bool best_taken(create_op_t *op, const cm_redis_reply_t *reply)
{
    const char *seats = cm_redis_reply_str(cm_redis_reply_at(reply, 2), NULL);
    if (seats == NULL || *seats == '\0')
        return false;
    free(op->seats_csv);
    op->seats_csv = cm_xstrdup(seats);
    op->amount = reply_i64(reply, 3);
    char *copy = cm_xstrdup(seats), *save = NULL;
    for (char *id = strtok_r(copy, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
        long k = rsv_event_seat(op->ev, id);
        if (k >= 0)
            rsv_avail_mark(op->r.srv->avail, op->ev, (size_t)k, RSV_AVAIL_HELD);
    }
    free(copy);
    return true;
}

/* Ends the lease of op's window (its best block back to free in the hint), once. */
static void best_unlease(create_op_t *op)
{
    if (op->nlease == 0 || op->r.srv->avail == NULL) /* NULL: the worker is stopping */
        return;
    for (size_t i = 0; i < op->nlease; i++)
        rsv_avail_mark(op->r.srv->avail, op->ev, op->lease[i], RSV_AVAIL_FREE);
    op->nlease = 0;
}

/* Gives op's turn back, if it has one (the worker stopping took them all). */
static void best_turn_end(create_op_t *op)
{
    if (op->turn && op->r.srv->avail)
        rsv_avail_best_done(op->r.srv->avail, op->ev);
    op->turn = false;
}

/* What a window's answer teaches the hint: the lease ends, and the candidates it found
 * taken (element at, comma-joined 1-based indexes, negative for sold) are held or sold
 * there — sold ones marked sold on this worker too (rsv_avail_note_sold). */
static void best_learn(create_op_t *op, const cm_redis_reply_t *reply, size_t at)
{
    best_unlease(op);
    const cm_redis_reply_t *e = cm_redis_reply_at(reply, at);
    const char *taken = e ? cm_redis_reply_str(e, NULL) : NULL;
    for (const char *p = taken; p && *p;) {
        char *end;
        long long idx = strtoll(p, &end, 10);
        size_t i = (size_t)(idx < 0 ? -idx : idx);
        if (end == p)
            break;
        p = *end == ',' ? end + 1 : end;
        if (i < 1 || i > op->nwin)
            continue;
        uint32_t seat = op->win[i - 1];
        if (idx < 0)
            rsv_avail_note_sold(op->r.srv->avail, op->ev, seat);
        rsv_avail_mark(op->r.srv->avail, op->ev, seat, idx < 0 ? RSV_AVAIL_SOLD : RSV_AVAIL_HELD);
    }
}

static void on_create_reply(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    create_op_t *op = arg;
    rsv_hold_metrics_t *m = &op->r.srv->m.hold;
    if (err || cm_redis_reply_type(reply) != CM_REDIS_ARRAY) {
        if (!err)
            cm_log(CM_LOG_ERROR, "hold script: %s", cm_redis_reply_str(reply, NULL) ?: "?");
        rsv_reply_unavailable(&op->r, "taking the hold", err ? err : cm_err_server);
        create_done(op);
        return;
    }
    rsv_hold_take_t took = rsv_hold_take_parse(reply);
    if (op->nwin > 0) {
        /* A window: what it found teaches the hint; without a pick within its bound
         * (NOBLOCK), the next window or the whole section is weighed. */
        best_learn(op, reply, took == RSV_HOLD_TAKE_OK ? 4 : 2);
        if (took == RSV_HOLD_TAKE_NOBLOCK || took == RSV_HOLD_TAKE_INSUFFICIENT ||
            took == RSV_HOLD_TAKE_SOLDOUT) {
            op->misses++;
            run_create(op); /* with the same turn */
            return;
        }
    }
    if (op->cand && op->nwin == 0 &&
        (took == RSV_HOLD_TAKE_NOBLOCK || took == RSV_HOLD_TAKE_INSUFFICIENT ||
         took == RSV_HOLD_TAKE_SOLDOUT)) {
        /* A whole pass refused: the answer of every request of its kind begun before
         * it was sent, too (best_known_refusal). */
        rsv_avail_refusal_t f = {.section = op->sec,
                                 .price = op->price,
                                 .want = op->quantity,
                                 .free = took == RSV_HOLD_TAKE_SOLDOUT ? 0 : reply_i64(reply, 1),
                                 .sent_ns = op->sent_ns};
        rsv_avail_note_refusal(op->r.srv->avail, op->ev, &f);
    }
    best_turn_end(op);
    if (op->unverified && took == RSV_HOLD_TAKE_UNVERIFIED) {
        /* No record of this token (not from our gateway, or Redis lost it): verify it. */
        cm_counter_inc(m->token_records[RSV_HOLD_RECORD_MISSING]);
        op->unverified = false;
        rsv_auth_check(op->r.srv->auth, op->r.svc.req, op->event, false, &op->claims,
                       on_create_verified, op);
        return;
    }
    if (op->unverified && took != RSV_HOLD_TAKE_NOSEED) {
        /* The record matched: the gateway signed exactly this token. */
        cm_counter_inc(m->token_records[RSV_HOLD_RECORD_MATCHED]);
        op->unverified = false;
        rsv_auth_remember(op->r.srv->auth, op->r.svc.req, &op->claims);
    }
    /* a genuine buyer's hold (its token's record matched, or it was verified): the event
     * is live for the stock feed — a forged token makes no work there either */
    rsv_stock_touch(op->r.srv->stock, op->ev->id);
    if (took == RSV_HOLD_TAKE_NOSEED && !op->seeded) {
        op->seeded = 1;
        rsv_catalog_seed(op->r.srv->catalog, op->ev, on_create_seeded, op);
        return;
    }
    switch (took) {
    case RSV_HOLD_TAKE_OK:
        cm_counter_inc(m->taken);
        if (op->cand && !best_taken(op, reply)) {
            rsv_reply_unavailable(&op->r, "taking the hold", cm_err_protocol);
            break;
        }
        reply_created(op, reply_i64(reply, 1));
        break;
    case RSV_HOLD_TAKE_REPLAY: {
        const char *hid = cm_redis_reply_str(cm_redis_reply_at(reply, 1), NULL);
        if (hid && strlen(hid) < sizeof(op->hold_id)) {
            snprintf(op->hold_id, sizeof(op->hold_id), "%s", hid);
            replay_hold(op); /* answers 200 with the hold taken under this key */
            return;
        }
        rsv_reply_unavailable(&op->r, "taking the hold", cm_err_protocol);
        break;
    }
    case RSV_HOLD_TAKE_MISMATCH:
        rsv_reply_error(&op->r, 422, "idempotency_key_reused",
                        "this Idempotency-Key was used for a different hold request", NULL);
        break;
    case RSV_HOLD_TAKE_TAKEN:
        cm_counter_inc(m->conflicts);
        reply_taken(op, reply);
        break;
    case RSV_HOLD_TAKE_SOLDOUT:
        cm_counter_inc(m->conflicts);
        if (op->cand) {
            rsv_reply_error(&op->r, 409, "sold_out", "no seat of this kind is left", NULL);
            break;
        }
        if (reply_is(reply, 1, "sold"))
            rsv_avail_note_sold(op->r.srv->avail, op->ev,
                                op->ev->nseats + (size_t)(op->pool - op->ev->pools));
        rsv_reply_error(&op->r, 409, "sold_out", "the pool has no units left", NULL);
        break;
    case RSV_HOLD_TAKE_INSUFFICIENT:
        cm_counter_inc(m->conflicts);
        rsv_reply_error(&op->r, 409, "insufficient",
                        op->cand ? "fewer seats of this kind are left than requested"
                                 : "fewer units are left than requested",
                        json_pack("{s:I}", "available", (json_int_t)reply_i64(reply, 1)));
        break;
    case RSV_HOLD_TAKE_NOBLOCK:
        cm_counter_inc(m->conflicts);
        rsv_reply_error(&op->r, 409, "no_adjacent_seats",
                        "no block of that many adjacent seats is left (allow_split takes seats "
                        "apart)",
                        json_pack("{s:I}", "available", (json_int_t)reply_i64(reply, 1)));
        break;
    case RSV_HOLD_TAKE_LIMIT:
        cm_counter_inc(m->limit_exceeded);
        rsv_reply_error(&op->r, 429, "limit_exceeded", "this buyer reached the per-buyer limit",
                        json_pack("{s:I}", "max_per_buyer", (json_int_t)op->ev->max_per_buyer));
        break;
    case RSV_HOLD_TAKE_NOSEED:     /* again after seeding */
    case RSV_HOLD_TAKE_UNVERIFIED: /* with a verified token */
    case RSV_HOLD_TAKE_OTHER:
        cm_log(CM_LOG_ERROR, "hold script answered %s", first_word(reply) ?: "");
        rsv_reply_unavailable(&op->r, "taking the hold", cm_err_protocol);
        break;
    }
    create_done(op);
}

/* The hold script's keys, in one buffer: no allocation for a hold of up to a few seats. */
typedef struct hold_keys {
    char stack[24 * RSV_KEY_MAX];
    char *buf;
    size_t cap, used;
} hold_keys_t;

/* The next key of hk, or NULL when it does not fit (an identifier longer than checked). */
static const char *hold_key(hold_keys_t *hk, const char *event, const char *kind, const char *id)
{
    char *k = rsv_key_buf(hk->buf + hk->used, hk->cap - hk->used, event, kind, id);
    if (k != NULL)
        hk->used += strlen(k) + 1;
    return k;
}

/* v in decimal into buf (24 bytes: any int64); returns buf. Six per hold: not snprintf. */
static char *dec(char buf[24], int64_t v)
{
    cm_text_t t = cm_text_at(buf, 24);
    cm_text_i64(&t, v);
    cm_text_done(&t, buf);
    return buf;
}

/* hold_best.lua over op's candidates (KEYS and ARGV there): each candidate a key and its
 * place, 34 digits in one string (BEST_PLACE_LEN). 0 or -1. */
/* The 34 digits of a seat's place for hold_best.lua: row (6), position (6), rank (10),
 * price (12), each zero-padded. The catalogue bounds each: rows and positions below 10^6
 * (200,000 seats, positions to 100,000), ranks to 10^9, prices to 10^11. Returns 34. */
#define BEST_PLACE_LEN 34
static int place_digits(char *out, const rsv_seat_t *st)
{
    return snprintf(out, BEST_PLACE_LEN + 1, "%06u%06d%010lld%012lld", st->row,
                    st->pos > 0 ? st->pos : 0, (long long)st->rank, (long long)st->price);
}

/* Whether the hint believes a seat free (rsv_event_best_window's usable). */
static bool hint_free(void *arg, size_t seat)
{
    const unsigned char *hint = arg;
    return hint[seat] == RSV_AVAIL_FREE;
}

/* Chooses what op's next script weighs: a window of the hint's best blocks (op->win,
 * op->nwin; its worst block's ranks added up and first seat in bound_sum and bound_at;
 * its best block leased), or every candidate (op->nwin 0, bounds "") once
 * BEST_WINDOW_PASSES windows were tried, when no fresh snapshot is to be had, or when
 * the hint believes no block of N free. */
static void best_window(create_op_t *op, char bound_sum[24], char bound_at[24])
{
    bound_sum[0] = bound_at[0] = '\0';
    op->nwin = 0;
    const unsigned char *hint =
        op->misses < BEST_WINDOW_PASSES ? rsv_avail_seat_hint(op->r.srv->avail, op->ev) : NULL;
    if (hint == NULL)
        return;
    size_t want = (size_t)op->quantity;
    size_t seats = (8 * want > BEST_WINDOW_SEATS ? 8 * want : BEST_WINDOW_SEATS) << op->misses;
    if (op->win == NULL)
        op->win = cm_xcalloc(op->ncand ? op->ncand : 1, sizeof(uint32_t));
    rsv_best_window_t w;
    rsv_event_best_window(op->ev, op->cand, op->ncand, want, hint_free, (void *)hint, seats,
                          BEST_WINDOW_BLOCKS, op->win, &w);
    if (w.n == 0 || w.n >= op->ncand) /* no block believed free, or no cheaper than all */
        return;
    op->nwin = w.n;
    dec(bound_sum, w.last_sum);
    dec(bound_at, (int64_t)w.last_at + 1);
    if (op->lease == NULL)
        op->lease = cm_xcalloc(want, sizeof(uint32_t));
    for (size_t i = 0; i < want; i++) {
        op->lease[i] = op->win[w.best_at + i];
        rsv_avail_mark(op->r.srv->avail, op->ev, op->lease[i], RSV_AVAIL_HELD);
    }
    op->nlease = want;
}

static int run_best(create_op_t *op)
{
    rsv_server_t *srv = op->r.srv;
    rsv_event_t *ev = op->ev;
    char ttl[24], maxhold[24], limit[24], keep[24], want[24], bound_sum[24], bound_at[24];
    best_window(op, bound_sum, bound_at);
    op->sent_ns = cm_time_mono_ns();
    const uint32_t *cand = op->nwin ? op->win : op->cand;
    size_t ncand = op->nwin ? op->nwin : op->ncand;
    dec(ttl, ev->hold_ttl_s * 1000);
    dec(maxhold, ev->max_hold_s * 1000);
    dec(limit, ev->max_per_buyer);
    dec(keep, srv->cfg.hold_record_keep_s * 1000);
    dec(want, op->quantity);
    size_t cap = 8 * RSV_KEY_MAX;
    for (size_t i = 0; i < ncand; i++)
        cap += strlen(op->event) + strlen(ev->seats[cand[i]].id) + 16;
    hold_keys_t hk = {.buf = cm_xmalloc(cap), .cap = cap};
    char *places = cm_xmalloc(ncand * BEST_PLACE_LEN + 1);
    const char **argv = cm_xcalloc(5 + ncand + 13, sizeof(char *));
    const char *e = op->event;
    size_t a = 0;
    argv[a++] = hold_key(&hk, e, RSV_K_SEED, NULL);
    argv[a++] = hold_key(&hk, e, RSV_K_HOLD, op->hold_id);
    argv[a++] = hold_key(&hk, e, RSV_K_BUYER, op->claims.sub);
    argv[a++] = hold_key(&hk, e, RSV_K_ACTIVE, NULL);
    argv[a++] = hold_key(&hk, e, RSV_K_IDEM, op->idem);
    for (size_t i = 0; i < ncand; i++)
        argv[a++] = hold_key(&hk, e, RSV_K_SEAT, ev->seats[cand[i]].id);
    const char *fixed[] = {
        op->hold_id, op->claims.sub,        ttl,  maxhold,      limit,
        want,        op->split ? "1" : "0", keep, op->req_hash, op->unverified ? op->record : ""};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[a++] = fixed[i];
    char *p = places;
    *p = '\0';
    for (size_t i = 0; i < ncand; i++)
        p += place_digits(p, &ev->seats[cand[i]]);
    argv[a++] = places;
    argv[a++] = bound_sum;
    argv[a++] = bound_at;
    bool fits = true;
    for (size_t i = 0; i < a; i++)
        fits = fits && argv[i] != NULL;
    int rc = fits ? cm_redis_eval(srv->redis, rsv_lua()->hold_best, on_create_reply, op,
                                  (int)(5 + ncand), (int)a, argv, NULL)
                  : -1;
    free(argv);
    free(places);
    free(hk.buf);
    return rc;
}

/* The snapshot best available waited for is built (err NULL) or not (then no hint: the
 * whole section is weighed). */
static void on_best_snapshot(const char *err, const rsv_avail_totals_t *t, void *arg)
{
    create_op_t *op = arg;
    (void)t;
    if (err == cm_err_shutdown) {
        rsv_reply_unavailable(&op->r, "taking the hold", err);
        create_done(op);
        return;
    }
    run_create(op);
}

/* A whole pass of op's kind (section, price level) sent after op began found no block
 * of N or fewer: true at an instant of op's life, so op's answer too, without a script,
 * when op wants at least as many seats and, with seats apart allowed, fewer are free
 * than it wants. Not with an Idempotency-Key (the script may replay). true: answered. */
static bool best_known_refusal(create_op_t *op)
{
    if (op->idem[0] != '\0')
        return false;
    const rsv_avail_refusal_t *f =
        rsv_avail_refusal(op->r.srv->avail, op->ev, op->sec, op->price, op->start_ns);
    if (f == NULL || op->quantity < f->want || (op->split && f->free >= op->quantity))
        return false;
    cm_counter_inc(op->r.srv->m.hold.conflicts);
    json_int_t free_seats = (json_int_t)f->free;
    if (free_seats == 0)
        rsv_reply_error(&op->r, 409, "sold_out", "no seat of this kind is left", NULL);
    else if (free_seats < op->quantity)
        rsv_reply_error(&op->r, 409, "insufficient",
                        "fewer seats of this kind are left than requested",
                        json_pack("{s:I}", "available", free_seats));
    else
        rsv_reply_error(&op->r, 409, "no_adjacent_seats",
                        "no block of that many adjacent seats is left (allow_split takes seats "
                        "apart)",
                        json_pack("{s:I}", "available", free_seats));
    create_done(op);
    return true;
}

/* A turn to run best available's script (err NULL), or the worker stopping. */
static void on_best_turn(const char *err, void *arg)
{
    create_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "taking the hold", err);
        create_done(op);
        return;
    }
    op->turn = true;
    run_create(op);
}

static void run_create(create_op_t *op)
{
    rsv_server_t *srv = op->r.srv;
    rsv_event_t *ev = op->ev;
    if (op->cand && !op->turn) {
        rsv_avail_best_turn(srv->avail, ev, BEST_IN_FLIGHT, on_best_turn, op);
        return;
    }
    if (op->cand && best_known_refusal(op))
        return;
    if (op->cand && !op->refreshed && srv->cfg.avail_max_age_ms > 0 &&
        rsv_avail_seat_hint(srv->avail, ev) == NULL) {
        /* No fresh snapshot: built now, the turns waiting for it share the rebuild.
         * With avail_max_age_ms 0 there is never one: every pass is whole. */
        op->refreshed = true;
        rsv_avail_refresh(srv->avail, ev, on_best_snapshot, op);
        return;
    }
    if (op->cand) {
        if (run_best(op) != 0) {
            rsv_reply_unavailable(&op->r, "taking the hold", cm_err_closed);
            create_done(op);
        }
        return;
    }
    char ttl[24], maxhold[24], limit[24], amount[24], keep[24], qty[24];
    dec(ttl, ev->hold_ttl_s * 1000);
    dec(maxhold, ev->max_hold_s * 1000);
    dec(limit, ev->max_per_buyer);
    dec(amount, op->amount);
    dec(keep, srv->cfg.hold_record_keep_s * 1000);
    dec(qty, op->quantity);
    json_t *seats = op->pool ? NULL : json_object_get(op->body, "seats");
    size_t n = json_array_size(seats);
    hold_keys_t hk = {.buf = hk.stack, .cap = sizeof(hk.stack)};
    if ((n + 8) * RSV_KEY_MAX > sizeof(hk.stack)) { /* more seats than the stack holds */
        hk.cap = (n + 8) * RSV_KEY_MAX;
        hk.buf = cm_xmalloc(hk.cap);
    }
    const char *e = op->event;
    const char *seed = hold_key(&hk, e, RSV_K_SEED, NULL);
    const char *hkey = hold_key(&hk, e, RSV_K_HOLD, op->hold_id);
    const char *bkey = hold_key(&hk, e, RSV_K_BUYER, op->claims.sub);
    const char *akey = hold_key(&hk, e, RSV_K_ACTIVE, NULL);
    const char *ikey = hold_key(&hk, e, RSV_K_IDEM, op->idem);
    /* the token record is read by the script, not declared: the reserve's Redis user
     * may read tk: keys, not write them, and ACLs want write access to declared keys */
    const char *need = op->unverified ? op->record : "";
    int rc = -1;
    if (op->pool) {
        const char *pkey = hold_key(&hk, e, RSV_K_POOL, op->pool->id);
        const char *ukey = hold_key(&hk, e, RSV_K_POOL_UNITS, op->pool->id);
        const char *argv[] = {seed,         hkey,        bkey,           pkey, ukey,         akey,
                              ikey,         op->hold_id, op->claims.sub, ttl,  maxhold,      limit,
                              op->pool->id, qty,         amount,         keep, op->req_hash, need};
        if (pkey && ukey && seed && hkey && bkey && akey && ikey)
            rc = cm_redis_eval(srv->redis, rsv_lua()->hold_pool, on_create_reply, op, 7, 18, argv,
                               NULL);
    } else {
        const char *stack_argv[5 + 16 + 10], **argv = stack_argv;
        if (n > 16)
            argv = cm_xcalloc(5 + n + 10, sizeof(char *));
        size_t a = 0;
        argv[a++] = seed;
        argv[a++] = hkey;
        argv[a++] = bkey;
        argv[a++] = akey;
        argv[a++] = ikey;
        bool fits = seed && hkey && bkey && akey && ikey;
        for (size_t i = 0; i < n; i++) {
            argv[a] = hold_key(&hk, e, RSV_K_SEAT, json_string_value(json_array_get(seats, i)));
            fits = fits && argv[a++] != NULL;
        }
        argv[a++] = op->hold_id;
        argv[a++] = op->claims.sub;
        argv[a++] = ttl;
        argv[a++] = maxhold;
        argv[a++] = limit;
        argv[a++] = op->seats_csv;
        argv[a++] = amount;
        argv[a++] = keep;
        argv[a++] = op->req_hash;
        argv[a++] = need;
        if (fits)
            rc = cm_redis_eval(srv->redis, rsv_lua()->hold_seats, on_create_reply, op, (int)(5 + n),
                               (int)a, argv, NULL);
        if (argv != stack_argv)
            free(argv);
    }
    if (hk.buf != hk.stack)
        free(hk.buf);
    if (rc != 0) {
        rsv_reply_unavailable(&op->r, "taking the hold", cm_err_closed);
        create_done(op);
    }
}

/* A hold without an Idempotency-Key on a seat (or a pool) this worker saw sold moments
 * ago: 409 seat_unavailable naming those seats (or sold_out) from memory, no script. true
 * when answered. */
static bool refuse_known_sold(create_op_t *op)
{
    if (op->idem[0] != '\0')
        return false;
    if (op->pool) {
        size_t item = op->ev->nseats + (size_t)(op->pool - op->ev->pools);
        if (!rsv_avail_known_sold(op->r.srv->avail, op->ev, item))
            return false;
        cm_counter_inc(op->r.srv->m.hold.conflicts);
        rsv_reply_error(&op->r, 409, "sold_out", "the pool has no units left", NULL);
        create_done(op);
        return true;
    }
    json_t *seats = json_object_get(op->body, "seats");
    json_t *sold = NULL;
    size_t i;
    json_t *s;
    json_array_foreach(seats, i, s)
    {
        long k = rsv_event_seat(op->ev, json_string_value(s));
        if (k >= 0 && rsv_avail_known_sold(op->r.srv->avail, op->ev, (size_t)k)) {
            if (sold == NULL)
                sold = json_array();
            json_array_append(sold, s);
        }
    }
    if (sold == NULL)
        return false;
    cm_counter_inc(op->r.srv->m.hold.conflicts);
    rsv_reply_error(&op->r, 409, "seat_unavailable", "a requested seat is held or sold",
                    json_pack("{s:o}", "unavailable", sold));
    create_done(op);
    return true;
}

static void on_create_event(rsv_event_t *ev, const char *err, void *arg);

/* Whether body asks for best available: it names a section or a price level. */
static bool is_best(const json_t *body)
{
    return json_object_get(body, "section") != NULL || json_object_get(body, "price") != NULL;
}

/* Best available's candidates leave out the seats this worker saw sold moments ago. */
static bool seat_known_sold(void *arg, size_t seat)
{
    create_op_t *op = arg;
    return rsv_avail_known_sold(op->r.srv->avail, op->ev, seat);
}

/* A seat or pool the cached event lacks may be an operator's change made through another
 * reserve: ask once more, after the catalogue generation, before a 404. */
static bool recheck_event(create_op_t *op)
{
    if (op->rechecked)
        return false;
    op->rechecked = true;
    rsv_event_unref(op->ev);
    op->ev = NULL;
    op->amount = 0;
    rsv_catalog_recheck(op->r.srv->catalog, op->event, on_create_event, op);
    return true;
}

/* Best available: the section's (and price level's) seats become op's candidates, those
 * known sold left out. true when op was answered (an unknown section or price level, too
 * many seats to weigh, nothing left) or is being looked up again; false: run the script. */
static bool best_candidates(create_op_t *op)
{
    const rsv_event_t *ev = op->ev;
    const char *section = json_string_value(json_object_get(op->body, "section"));
    json_t *price = json_object_get(op->body, "price");
    int64_t at = price ? (int64_t)json_integer_value(price) : -1;
    long sec = section ? rsv_event_section(ev, section) : -1;
    if (section && sec < 0) {
        if (recheck_event(op))
            return true;
        rsv_reply_error(&op->r, 404, "unknown_section", "no such section in this event", NULL);
        create_done(op);
        return true;
    }
    size_t all = rsv_event_best_candidates(ev, sec, at, NULL, NULL, NULL, 0);
    if (all == 0) {
        rsv_reply_error(&op->r, 404, "unknown_price",
                        "no seat of this event or section has that price", NULL);
        create_done(op);
        return true;
    }
    if (all > MAX_BEST_CANDIDATES) {
        rsv_reply_error(&op->r, 400, "invalid_request",
                        "best available weighs at most 20000 seats: name a section, or a "
                        "section and a price level",
                        NULL);
        create_done(op);
        return true;
    }
    op->sec = sec;
    op->price = at;
    op->cand = cm_xcalloc(all, sizeof(uint32_t));
    op->ncand = rsv_event_best_candidates(ev, sec, at, seat_known_sold, op, op->cand, all);
    op->quantity = (int64_t)json_integer_value(json_object_get(op->body, "quantity"));
    op->split = json_is_true(json_object_get(op->body, "allow_split"));
    if (op->ncand == 0 && op->idem[0] == '\0') { /* with a key the script may replay */
        cm_counter_inc(op->r.srv->m.hold.conflicts);
        rsv_reply_error(&op->r, 409, "sold_out", "no seat of this kind is left", NULL);
        create_done(op);
        return true;
    }
    return false;
}

static void on_create_event(rsv_event_t *ev, const char *err, void *arg)
{
    create_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "loading the event", err);
        create_done(op);
        return;
    }
    if (ev == NULL) {
        rsv_reply_error(&op->r, 404, "unknown_event", "no such event", NULL);
        create_done(op);
        return;
    }
    rsv_event_ref(ev);
    op->ev = ev;
    json_t *seats = json_object_get(op->body, "seats");
    if (is_best(op->body)) {
        if (!best_candidates(op))
            run_create(op);
        return;
    }
    if (seats) {
        json_t *unknown = json_array();
        size_t i;
        json_t *s;
        size_t csvlen = 0;
        json_array_foreach(seats, i, s)
        {
            long idx = rsv_event_seat(ev, json_string_value(s));
            if (idx < 0)
                json_array_append(unknown, s);
            else
                op->amount += ev->seats[idx].price;
            csvlen += strlen(json_string_value(s)) + 1;
        }
        if (json_array_size(unknown) && recheck_event(op)) {
            json_decref(unknown);
            return;
        }
        if (json_array_size(unknown)) {
            rsv_reply_error(&op->r, 404, "unknown_seat", "no such seat in this event",
                            json_pack("{s:o}", "unknown", unknown));
            create_done(op);
            return;
        }
        json_decref(unknown);
        op->seats_csv = cm_xmalloc(csvlen + 1);
        op->seats_csv[0] = '\0';
        json_array_foreach(seats, i, s)
        {
            if (i)
                strcat(op->seats_csv, ",");
            strcat(op->seats_csv, json_string_value(s));
        }
        op->quantity = (int64_t)json_array_size(seats);
        if (refuse_known_sold(op))
            return;
    } else {
        const char *pool = json_string_value(json_object_get(op->body, "pool"));
        op->pool = rsv_event_pool(ev, pool);
        if (op->pool == NULL && recheck_event(op))
            return;
        if (op->pool == NULL) {
            rsv_reply_error(&op->r, 404, "unknown_pool", "no such pool in this event", NULL);
            create_done(op);
            return;
        }
        op->quantity = (int64_t)json_integer_value(json_object_get(op->body, "quantity"));
        op->amount = op->pool->price * op->quantity;
        if (refuse_known_sold(op))
            return;
    }
    run_create(op);
}

/* Checks a best-available body (section and/or price, quantity, allow_split); NULL when
 * fine, else the message for a 400. */
static const char *check_best(const json_t *body)
{
    json_t *section = json_object_get(body, "section"), *price = json_object_get(body, "price");
    json_t *split = json_object_get(body, "allow_split");
    if (section &&
        (json_string_value(section) == NULL || !cm_parse_ident(json_string_value(section))))
        return "section must be an identifier of 1-64 characters of [A-Za-z0-9._-]";
    if (price && (!json_is_integer(price) || json_integer_value(price) < 0 ||
                  json_integer_value(price) > RSV_PRICE_MAX))
        return "price must be an integer from 0 to 100000000000 (minor units)";
    json_t *q = json_object_get(body, "quantity");
    if (!json_is_integer(q) || json_integer_value(q) < 1 ||
        json_integer_value(q) > MAX_SEATS_PER_HOLD)
        return "quantity must be an integer from 1 to 50 (seats of one hold)";
    if (split && !json_is_boolean(split))
        return "allow_split must be true or false";
    return NULL;
}

/* Checks the hold request body; NULL when fine, else the message for a 400. */
static const char *check_body(const json_t *body)
{
    json_t *seats = json_object_get(body, "seats");
    json_t *pool = json_object_get(body, "pool");
    bool best = is_best(body);
    if ((seats != NULL) + (pool != NULL) + best != 1)
        return "give one of: seats (an array of seat ids), pool and quantity, or section "
               "and/or price with quantity (best available)";
    if (best)
        return check_best(body);
    if (json_object_get(body, "allow_split"))
        return "allow_split goes with best available (section or price) only";
    if (seats) {
        size_t n = json_array_size(seats);
        if (!json_is_array(seats) || n == 0 || n > MAX_SEATS_PER_HOLD)
            return "seats must be an array of 1 to 50 seat ids";
        for (size_t i = 0; i < n; i++) {
            const char *s = json_string_value(json_array_get(seats, i));
            if (s == NULL || !cm_parse_ident(s))
                return "each seat id must be 1-64 characters of [A-Za-z0-9._-]";
            for (size_t j = 0; j < i; j++)
                if (strcmp(s, json_string_value(json_array_get(seats, j))) == 0)
                    return "a seat appears twice";
        }
        return NULL;
    }
    const char *p = json_string_value(pool);
    if (p == NULL || !cm_parse_ident(p))
        return "pool must be an identifier of 1-64 characters of [A-Za-z0-9._-]";
    json_t *q = json_object_get(body, "quantity");
    if (!json_is_integer(q) || json_integer_value(q) < 1 || json_integer_value(q) > MAX_QUANTITY)
        return "quantity must be an integer from 1 to 100";
    return NULL;
}

static void on_create_auth(rsv_auth_result_t a, const char *why, void *arg)
{
    create_op_t *op = arg;
    rsv_server_t *srv = op->r.srv;
    cm_req_t *req = op->r.svc.req;
    op->unverified = a == RSV_AUTH_UNVERIFIED;
    if (a != RSV_AUTH_OK && a != RSV_AUTH_UNVERIFIED) {
        rsv_reply_auth(&op->r, a, why);
        create_done(op);
        return;
    }
    op->body = cm_http_read_json(req, (size_t)srv->cfg.server.max_body_bytes, NULL, NULL);
    if (op->body == NULL) {
        rsv_req_replied(&op->r);
        create_done(op);
        return;
    }
    const char *bad = check_body(op->body);
    if (bad) {
        rsv_reply_error(&op->r, 400, "invalid_request", bad, NULL);
        create_done(op);
        return;
    }
    const char *key = cm_http_header(req, "Idempotency-Key");
    if (key) {
        if (!cm_parse_idem_key(key)) {
            rsv_reply_error(&op->r, 400, "invalid_request",
                            "Idempotency-Key must be 1-255 visible ASCII characters", NULL);
            create_done(op);
            return;
        }
        /* The key is the buyer's: the same key from another buyer is another request. */
        char *ident = cm_xasprintf("%s\n%s", op->claims.sub, key);
        cm_tls_sha256_hex(ident, strlen(ident), op->idem);
        free(ident);
        char *canon = json_dumps(op->body, JSON_COMPACT | JSON_SORT_KEYS);
        cm_tls_sha256_hex(canon, strlen(canon), op->req_hash);
        free(canon);
    }
    rsv_hex_id(op->hold_id, sizeof(op->hold_id), op->event);
    rsv_catalog_get(srv->catalog, op->event, on_create_event, op);
}

void rsv_hold_create(rsv_server_t *srv, cm_req_t *req, const char *event)
{
    create_op_t *op = cm_xcalloc(1, sizeof(*op));
    op->start_ns = cm_time_mono_ns();
    rsv_req_start(&op->r, srv, req, RSV_EP_HOLD_CREATE);
    snprintf(op->event, sizeof(op->event), "%s", event);
    /* Taking a new hold needs a token that is valid now; a buyer's first one may be
     * proven by the gateway's record of it instead of its signature. */
    rsv_auth_check_new(srv->auth, req, event, &op->claims, op->record, on_create_auth, op);
}

/* --- operations on an existing hold -------------------------------------------------- */

typedef enum { OP_GET, OP_EXTEND, OP_RELEASE } hold_verb_t;

typedef struct hold_op {
    rsv_req_t r;
    hold_verb_t verb;
    char hold_id[RSV_HOLD_ID_MAX + 1];
    char event[CM_IDENT_MAX + 1];
    cm_jwt_claims_t claims;
    rsv_event_t *ev;
} hold_op_t;

static void hold_op_done(hold_op_t *op)
{
    rsv_event_unref(op->ev);
    free(op);
}

static void on_hold_reply(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    hold_op_t *op = arg;
    rsv_hold_view_t v;
    if (err || rsv_hold_view_parse(reply, &v) != 0) {
        if (!err)
            cm_log(CM_LOG_ERROR, "hold script gave an unexpected reply");
        rsv_reply_unavailable(&op->r, "reading the hold", err ? err : cm_err_protocol);
        hold_op_done(op);
        return;
    }
    const char *currency = op->ev ? op->ev->currency : NULL;
    if (v.status == RSV_HOLD_NOTFOUND || v.status == RSV_HOLD_GONE) {
        rsv_reply_error(&op->r, 404, "unknown_hold", "no such hold of yours", NULL);
    } else if (v.status == RSV_HOLD_EXPIRED) {
        cm_counter_inc(op->r.srv->m.hold.expired);
        if (op->verb == OP_RELEASE)
            rsv_reply_empty(&op->r, 204); /* already free: releasing is idempotent */
        else
            rsv_reply_error(&op->r, 409, "hold_expired", "the hold has expired", NULL);
    } else if (v.status == RSV_HOLD_CONVERTED) {
        if (op->verb == OP_GET && v.exp_ms) {
            json_t *o = hold_json(op->hold_id, op->event, "converted", &v, currency);
            json_object_set_new(o, "checkout_id", json_string(v.checkout));
            rsv_reply_json(&op->r, 200, o);
        } else {
            rsv_reply_error(&op->r, 409, "hold_converted", "the hold was already converted", NULL);
        }
    } else if (op->verb == OP_RELEASE) {
        cm_counter_inc(op->r.srv->m.hold.released);
        rsv_reply_empty(&op->r, 204);
    } else {
        rsv_reply_json(&op->r, 200, hold_json(op->hold_id, op->event, "held", &v, currency));
    }
    rsv_hold_view_clear(&v);
    hold_op_done(op);
}

static void run_hold_op(hold_op_t *op)
{
    rsv_server_t *srv = op->r.srv;
    int64_t ext_ms = (op->ev ? op->ev->checkout_extension_s : 0) * 1000;
    int rc;
    if (op->verb == OP_GET)
        rc = rsv_hold_op_read(srv, op->hold_id, op->claims.sub, on_hold_reply, op);
    else if (op->verb == OP_EXTEND)
        rc = rsv_hold_op_extend(srv, op->hold_id, op->claims.sub, ext_ms, on_hold_reply, op);
    else
        rc = rsv_hold_op_release(srv, op->hold_id, op->claims.sub, on_hold_reply, op);
    if (rc != 0) {
        rsv_reply_unavailable(&op->r, "reading the hold", cm_err_closed);
        hold_op_done(op);
    }
}

static void on_hold_event(rsv_event_t *ev, const char *err, void *arg)
{
    hold_op_t *op = arg;
    if (err) {
        rsv_reply_unavailable(&op->r, "loading the event", err);
        hold_op_done(op);
        return;
    }
    if (ev == NULL) {
        rsv_reply_error(&op->r, 404, "unknown_hold", "no such hold of yours", NULL);
        hold_op_done(op);
        return;
    }
    rsv_event_ref(ev);
    op->ev = ev;
    rsv_stock_touch(op->r.srv->stock, ev->id);
    run_hold_op(op);
}

static void on_hold_auth(rsv_auth_result_t a, const char *why, void *arg)
{
    hold_op_t *op = arg;
    if (a != RSV_AUTH_OK) {
        rsv_reply_auth(&op->r, a, why);
        hold_op_done(op);
        return;
    }
    rsv_catalog_get(op->r.srv->catalog, op->event, on_hold_event, op);
}

static void hold_op_start(rsv_server_t *srv, cm_req_t *req, const char *hold_id, hold_verb_t verb,
                          rsv_endpoint_t ep)
{
    hold_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, ep);
    op->verb = verb;
    if (rsv_hold_id_event(hold_id, op->event) != 0) {
        rsv_reply_error(&op->r, 404, "unknown_hold", "no such hold of yours", NULL);
        hold_op_done(op);
        return;
    }
    snprintf(op->hold_id, sizeof(op->hold_id), "%s", hold_id);
    /* The owner's token may have expired while they shop: the hold's life decides. */
    rsv_auth_check(srv->auth, req, op->event, true, &op->claims, on_hold_auth, op);
}

void rsv_hold_get(rsv_server_t *srv, cm_req_t *req, const char *hold_id)
{
    hold_op_start(srv, req, hold_id, OP_GET, RSV_EP_HOLD_GET);
}

void rsv_hold_extend(rsv_server_t *srv, cm_req_t *req, const char *hold_id)
{
    hold_op_start(srv, req, hold_id, OP_EXTEND, RSV_EP_HOLD_EXTEND);
}

void rsv_hold_release(rsv_server_t *srv, cm_req_t *req, const char *hold_id)
{
    hold_op_start(srv, req, hold_id, OP_RELEASE, RSV_EP_HOLD_RELEASE);
}
