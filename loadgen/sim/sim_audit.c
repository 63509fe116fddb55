/*
 * sim_audit — see sim_audit.h. Main thread, after the crowd's loop has ended.
 *
 * Sources: Postgres (bookings, booking_items, checkouts, pools — the system of record),
 * Redis (seat marks and pool counters under os:{event}:, the key layout of
 * reserve/lua/prelude.lua), the payment provider's PaymentIntents (GET
 * /v1/payment_intents, newest first, their charges expanded; metadata.checkout = the
 * checkout id), and the fans' own record. Each
 * check adds a violation naming itself; the figures go to r->figures for the report.
 * The only library use of its kind in the simulator: libpq and hiredis synchronously,
 * which is fine here because nothing else runs any more.
 */
#include "sim_audit.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_mem.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "sim_http.h"

static const char *const TERMINAL = "('confirmed','failed','released','refunded')";

/* ------------------------------------------------------------------ sources */

static PGresult *q(PGconn *pg, const char *sql, const char *event)
{
    const char *params[1] = {event};
    PGresult *res = PQexecParams(pg, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "onsale-sim: audit query failed: %s", PQerrorMessage(pg));
        PQclear(res);
        return NULL;
    }
    return res;
}

typedef struct {
    sim_run_t *r;
    struct event_base *base;
    sim_pool_t *pool;
    json_t *charges; /* the event's charges collected so far */
    bool failed;
    int pages;
} fetch_t;

static void fetch_page(fetch_t *f, const char *after);

/* One page of GET /v1/payment_intents?created[gte]=…: keeps the event's intents
 * (metadata.event), follows has_more with starting_after. */
static void on_page(const sim_resp_t *resp, void *arg)
{
    fetch_t *f = arg;
    json_t *o = resp->status == 200 ? json_loadb(resp->body, resp->body_len, 0, NULL) : NULL;
    if (o == NULL) {
        fprintf(stderr, "onsale-sim: payment ledger: %s %.*s\n",
                resp->err ? resp->err : "HTTP error",
                (int)(resp->body_len > 300 ? 300 : resp->body_len), resp->body);
        f->failed = true;
        event_base_loopexit(f->base, NULL);
        return;
    }
    f->pages++;
    json_t *data = json_object_get(o, "data"), *c;
    size_t i;
    const char *last = NULL;
    json_array_foreach(data, i, c)
    {
        const char *ev =
            json_string_value(json_object_get(json_object_get(c, "metadata"), "event"));
        if (ev && strcmp(ev, f->r->event) == 0)
            json_array_append(f->charges, c);
        last = json_string_value(json_object_get(c, "id"));
    }
    if (json_is_true(json_object_get(o, "has_more")) && last)
        fetch_page(f, last);
    else
        event_base_loopexit(f->base, NULL);
    json_decref(o);
}

static void fetch_page(fetch_t *f, const char *after)
{
    char path[256];
    snprintf(path, sizeof(path),
             "/v1/payment_intents?created%%5Bgte%%5D=%lld&limit=100"
             "&expand%%5B%%5D=data.latest_charge%s%s",
             (long long)(f->r->wall_start_ms / 1000 - 120), after ? "&starting_after=" : "",
             after ? after : "");
    sim_pool_request(f->pool, 0, "GET", path, NULL, NULL, on_page, f);
}

/* The payment simulator's charges for the event, on a short-lived loop of its own. */
static json_t *fetch_ledger(sim_run_t *r)
{
    char err[256];
    fetch_t f = {.r = r, .base = event_base_new(), .charges = json_array()};
    sim_tls_ctx_t *tls = r->o->ca ? cm_tls_client_new(r->o->ca, err, sizeof(err)) : NULL;
    f.pool = sim_pool_new(f.base, r->o->paysim_url, tls, 1, NULL, 120, err, sizeof(err));
    if (f.pool) {
        fetch_page(&f, NULL);
        event_base_dispatch(f.base);
    } else {
        fprintf(stderr, "onsale-sim: ledger: %s\n", err);
        f.failed = true;
    }
    sim_pool_free(f.pool);
    if (tls)
        cm_tls_free(tls);
    event_base_free(f.base);
    if (f.failed) {
        json_decref(f.charges);
        return NULL;
    }
    return json_pack("{s:o, s:s}", "charges", f.charges, "source", "/v1/payment_intents");
}

static redisContext *redis_connect(sim_run_t *r, const char *host, int port)
{
    struct timeval tv = {5, 0};
    redisContext *rc = redisConnectWithTimeout(host, port, tv);
    if (rc == NULL || rc->err) {
        fprintf(stderr, "onsale-sim: redis %s:%d: %s\n", host, port,
                rc ? rc->errstr : "out of memory");
        redisFree(rc);
        return NULL;
    }
    if (r->o->redis_password) {
        redisReply *rep = r->o->redis_user ? redisCommand(rc, "AUTH %s %s", r->o->redis_user,
                                                          r->o->redis_password)
                                           : redisCommand(rc, "AUTH %s", r->o->redis_password);
        bool ok = rep && rep->type == REDIS_REPLY_STATUS;
        freeReplyObject(rep);
        if (!ok) {
            fprintf(stderr, "onsale-sim: redis AUTH refused\n");
            redisFree(rc);
            return NULL;
        }
    }
    return rc;
}

/* The Redis node that serves the event's keys. Every key of an event carries the hash tag
 * {event}, so they share one slot: on a Redis Cluster the node of --redis answers MOVED
 * with the master that owns it, and the audit reads that master (plain commands, one
 * node, no cluster client needed). */
static redisContext *redis_open(sim_run_t *r)
{
    redisContext *rc = redis_connect(r, r->o->redis_host, r->o->redis_port);
    if (rc == NULL)
        return NULL;
    redisReply *rep = redisCommand(rc, "EXISTS os:{%s}:seed", r->event);
    char host[256];
    int port = 0;
    bool moved = rep && rep->type == REDIS_REPLY_ERROR &&
                 sscanf(rep->str, "MOVED %*d %255[^:]:%d", host, &port) == 2 && port > 0;
    freeReplyObject(rep);
    if (!moved)
        return rc;
    redisFree(rc);
    return redis_connect(r, host, port);
}

/* ------------------------------------------------------------------ checks */

/* Waits (up to settle_s) for every checkout of the event to reach a terminal state. */
static void check_terminal(sim_run_t *r, PGconn *pg)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT state, count(*) FROM checkouts WHERE event_id = $1 AND state NOT IN %s "
             "GROUP BY 1",
             TERMINAL);
    int64_t deadline = (int64_t)cm_time_mono_ns() + (int64_t)(r->sc->settle_s * 1e9);
    for (;;) {
        PGresult *res = q(pg, sql, r->event);
        if (res == NULL)
            return;
        int n = PQntuples(res);
        if (n == 0) {
            PQclear(res);
            return;
        }
        if ((int64_t)cm_time_mono_ns() >= deadline) {
            for (int i = 0; i < n; i++)
                sim_run_violation(r, "checkout_terminal",
                                  "%s checkouts still '%s' %.0f s after the night",
                                  PQgetvalue(res, i, 1), PQgetvalue(res, i, 0), r->sc->settle_s);
            PQclear(res);
            return;
        }
        PQclear(res);
        usleep(500000);
    }
}

static void check_units(sim_run_t *r, PGconn *pg)
{
    PGresult *res = q(pg,
                      "SELECT seat_id, count(*) FROM booking_items WHERE event_id = $1 "
                      "GROUP BY 1 HAVING count(*) > 1",
                      r->event);
    for (int i = 0; res && i < PQntuples(res); i++)
        sim_run_violation(r, "unit_booked_twice", "seat %s is booked %s times",
                          PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
    PQclear(res);
    res = q(pg,
            "SELECT p.pool_id, p.capacity, coalesce(sum(b.quantity), 0) FROM pools p "
            "LEFT JOIN bookings b ON b.event_id = p.event_id AND b.pool_id = p.pool_id "
            "WHERE p.event_id = $1 GROUP BY 1, 2",
            r->event);
    for (int i = 0; res && i < PQntuples(res); i++)
        if (atol(PQgetvalue(res, i, 2)) > atol(PQgetvalue(res, i, 1)))
            sim_run_violation(r, "ga_over_capacity", "pool %s sold %s of %s", PQgetvalue(res, i, 0),
                              PQgetvalue(res, i, 2), PQgetvalue(res, i, 1));
    PQclear(res);
    /* Own record: no two fans were told they bought the same seat. */
    int *owner = cm_xcalloc((size_t)r->sc->nseats + 1, sizeof(int));
    for (int i = 0; i < r->nfans; i++) {
        sim_fan_t *f = &r->fans[i];
        if (f->outcome != O_BOUGHT || f->ga)
            continue;
        for (int k = 0; k < f->want && f->seat + k < r->sc->nseats; k++) {
            if (owner[f->seat + k])
                sim_run_violation(r, "unit_booked_twice",
                                  "fans %d and %u were both told they bought seat %s",
                                  owner[f->seat + k] - 1, f->id, r->sc->seats[f->seat + k].id);
            owner[f->seat + k] = (int)f->id + 1;
        }
    }
    free(owner);
}

typedef struct {
    const char *checkout;
    const char *charge;
    bool kept, refunded;
    int bookings;
} charge_t;

static int cmp_charge(const void *a, const void *b)
{
    return strcmp(((const charge_t *)a)->checkout, ((const charge_t *)b)->checkout);
}

static charge_t *find_charge(charge_t *v, size_t n, const char *checkout, size_t *count)
{
    charge_t key = {.checkout = checkout};
    charge_t *hit = bsearch(&key, v, n, sizeof(charge_t), cmp_charge);
    *count = 0;
    if (hit == NULL)
        return NULL;
    while (hit > v && strcmp((hit - 1)->checkout, checkout) == 0)
        hit--;
    for (charge_t *p = hit; p < v + n && strcmp(p->checkout, checkout) == 0; p++)
        (*count)++;
    return hit;
}

/* Bookings against kept charges, refunds against checkouts, one charge per purchase. */
static void check_money(sim_run_t *r, PGconn *pg, json_t *ledger)
{
    json_t *charges = json_object_get(ledger, "charges");
    size_t n = 0, i;
    json_t *c;
    charge_t *v = cm_xcalloc(json_array_size(charges) + 1, sizeof(charge_t));
    long kept = 0, refunded = 0;
    json_array_foreach(charges, i, c)
    {
        const char *co =
            json_string_value(json_object_get(json_object_get(c, "metadata"), "checkout"));
        const char *st = json_string_value(json_object_get(c, "status"));
        if (co == NULL || st == NULL || strcmp(st, "succeeded") != 0)
            continue;
        v[n].checkout = co;
        v[n].charge = json_string_value(json_object_get(c, "id"));
        /* refunded, in full or in part: the intent's charge says (expanded) */
        json_t *ch = json_object_get(c, "latest_charge");
        v[n].refunded = json_integer_value(json_object_get(ch, "amount_refunded")) > 0;
        v[n].kept = !v[n].refunded;
        kept += v[n].kept;
        refunded += v[n].refunded;
        n++;
    }
    qsort(v, n, sizeof(charge_t), cmp_charge);
    for (size_t k = 0; k + 1 < n; k++)
        if (strcmp(v[k].checkout, v[k + 1].checkout) == 0 &&
            (k == 0 || strcmp(v[k - 1].checkout, v[k].checkout) != 0))
            sim_run_violation(r, "duplicate_charge",
                              "checkout %s was charged more than once (%s, %s)", v[k].checkout,
                              v[k].charge, v[k + 1].charge);
    PGresult *res =
        q(pg, "SELECT b.booking_id, b.checkout_id FROM bookings b WHERE b.event_id = $1", r->event);
    long bookings = res ? PQntuples(res) : 0;
    for (int k = 0; res && k < PQntuples(res); k++) {
        size_t cnt = 0, nkept = 0;
        charge_t *h = find_charge(v, n, PQgetvalue(res, k, 1), &cnt);
        for (size_t j = 0; h && j < cnt; j++) {
            nkept += h[j].kept;
            h[j].bookings++;
        }
        if (nkept != 1)
            sim_run_violation(r, "booking_without_charge",
                              "booking %s (checkout %s) is matched by %zu kept charges",
                              PQgetvalue(res, k, 0), PQgetvalue(res, k, 1), nkept);
    }
    PQclear(res);
    for (size_t k = 0; k < n; k++)
        if (v[k].kept && v[k].bookings == 0)
            sim_run_violation(r, "charge_without_booking",
                              "charge %s (checkout %s) was kept but nothing was booked",
                              v[k].charge, v[k].checkout);
    /* Refunds: exactly the charges whose checkout did not end confirmed. */
    res = q(pg, "SELECT checkout_id, state FROM checkouts WHERE event_id = $1", r->event);
    for (int k = 0; res && k < PQntuples(res); k++) {
        const char *co = PQgetvalue(res, k, 0), *st = PQgetvalue(res, k, 1);
        size_t cnt = 0;
        charge_t *h = find_charge(v, n, co, &cnt);
        for (size_t j = 0; h && j < cnt; j++) {
            if (h[j].refunded && strcmp(st, "confirmed") == 0)
                sim_run_violation(r, "refund_of_confirmed",
                                  "charge %s was refunded but checkout %s is confirmed",
                                  h[j].charge, co);
            if (h[j].kept && strcmp(st, "confirmed") != 0 && strcmp(st, "created") != 0 &&
                strcmp(st, "converting") != 0)
                sim_run_violation(r, "charge_not_refunded",
                                  "charge %s was kept but checkout %s ended '%s'", h[j].charge, co,
                                  st);
        }
        if (strcmp(st, "refunded") == 0 && (h == NULL || !h->refunded))
            sim_run_violation(r, "refund_missing",
                              "checkout %s is 'refunded' but the ledger shows no refund", co);
    }
    PQclear(res);
    res = q(pg,
            "SELECT hold_id, count(*) FROM checkouts WHERE event_id = $1 AND state = 'confirmed' "
            "GROUP BY 1 HAVING count(*) > 1",
            r->event);
    for (int k = 0; res && k < PQntuples(res); k++)
        sim_run_violation(r, "duplicate_purchase", "hold %s was confirmed by %s checkouts",
                          PQgetvalue(res, k, 0), PQgetvalue(res, k, 1));
    PQclear(res);
    /* Own record: every fan told "confirmed" has that booking in Postgres. */
    long missing = 0;
    for (int k = 0; k < r->nfans; k++) {
        sim_fan_t *f = &r->fans[k];
        if (f->outcome != O_BOUGHT || f->booking_id[0] == '\0')
            continue;
        const char *params[1] = {f->booking_id};
        PGresult *b = PQexecParams(pg, "SELECT 1 FROM bookings WHERE booking_id = $1", 1, NULL,
                                   params, NULL, NULL, 0);
        if (PQresultStatus(b) == PGRES_TUPLES_OK && PQntuples(b) == 0 && missing++ < 20)
            sim_run_violation(r, "confirmed_without_booking",
                              "fan %u was told booking %s, which Postgres does not have", f->id,
                              f->booking_id);
        PQclear(b);
    }
    json_object_set_new(r->figures, "money",
                        json_pack("{s:i, s:i, s:i}", "bookings", (int)bookings, "kept_charges",
                                  (int)kept, "refunded_charges", (int)refunded));
    free(v);
}

/* sold (Postgres) + held + available (Redis) = inventory, and Redis' sold marks are
 * exactly Postgres' booked seats. */
static void check_inventory(sim_run_t *r, PGconn *pg, redisContext *rc)
{
    char prefix[96];
    snprintf(prefix, sizeof(prefix), "os:{%s}:", r->event);
    redisReply *seed = redisCommand(rc, "EXISTS %sseed", prefix);
    bool seeded = seed && seed->type == REDIS_REPLY_INTEGER && seed->integer == 1;
    freeReplyObject(seed);
    PGresult *res = q(pg,
                      "SELECT count(*) FROM booking_items bi JOIN seats s USING (event_id, "
                      "seat_id) WHERE bi.event_id = $1 AND s.section IS NOT NULL",
                      r->event);
    long sold_pg = res ? atol(PQgetvalue(res, 0, 0)) : -1;
    PQclear(res);
    long sold_r = 0, held = 0;
    if (seeded) {
        for (int i = 0; i < r->sc->nseats; i += 500) {
            int m = r->sc->nseats - i < 500 ? r->sc->nseats - i : 500;
            for (int k = 0; k < m; k++)
                redisAppendCommand(rc, "GET %ss:%s", prefix, r->sc->seats[i + k].id);
            for (int k = 0; k < m; k++) {
                redisReply *rep = NULL;
                if (redisGetReply(rc, (void **)&rep) != REDIS_OK)
                    return;
                if (rep->type == REDIS_REPLY_STRING) {
                    if (strncmp(rep->str, "sold", 4) == 0 &&
                        (rep->str[4] == '\0' || rep->str[4] == ':'))
                        sold_r++;
                    else
                        held++;
                }
                freeReplyObject(rep);
            }
        }
        /* Redis marking more sold than Postgres booked loses sales (inventory_leak); the
         * other way round a booked seat could be held again (inventory_balance). */
        if (sold_r > sold_pg)
            sim_run_violation(r, "inventory_leak",
                              "seats: Redis marks %ld sold, Postgres booked %ld: %ld seats can "
                              "be neither held nor bought",
                              sold_r, sold_pg, sold_r - sold_pg);
        else if (sold_r < sold_pg)
            sim_run_violation(r, "inventory_balance",
                              "seats: Postgres booked %ld, Redis marks only %ld sold", sold_pg,
                              sold_r);
    }
    long avail = r->sc->nseats - (seeded ? sold_r : sold_pg) - held;
    if (avail < 0)
        sim_run_violation(r, "inventory_balance", "seats: sold %ld + held %ld exceed %d", sold_r,
                          held, r->sc->nseats);
    json_t *pools = json_array();
    for (int i = 0; i < r->sc->npools; i++) {
        const sim_pool_def_t *p = &r->sc->pools[i];
        const char *params[2] = {r->event, p->id};
        res = PQexecParams(pg,
                           "SELECT coalesce(sum(quantity), 0) FROM bookings WHERE event_id = $1 "
                           "AND pool_id = $2",
                           2, NULL, params, NULL, NULL, 0);
        long psold = PQresultStatus(res) == PGRES_TUPLES_OK ? atol(PQgetvalue(res, 0, 0)) : -1;
        PQclear(res);
        long pavail = -1, pheld = 0, pexpired = 0;
        if (seeded) {
            redisReply *a = redisCommand(rc, "GET %sp:%s", prefix, p->id);
            if (a && a->type == REDIS_REPLY_STRING)
                pavail = atol(a->str);
            freeReplyObject(a);
            redisReply *t = redisCommand(rc, "TIME");
            double now_ms = t && t->type == REDIS_REPLY_ARRAY && t->elements == 2
                                ? atof(t->element[0]->str) * 1000 + atof(t->element[1]->str) / 1000
                                : 0;
            freeReplyObject(t);
            /* Held units: pu:<pool>, one member '<hold>#<i>' per unit, score = expiry (an
             * expired member is a free unit); older layouts kept pe:<pool> members
             * '<qty>:<hold>'. */
            redisReply *z = redisCommand(rc, "ZRANGE %spu:%s 0 -1 WITHSCORES", prefix, p->id);
            for (size_t k = 0; z && z->type == REDIS_REPLY_ARRAY && k + 1 < z->elements; k += 2) {
                if (atof(z->element[k + 1]->str) > now_ms)
                    pheld++;
                else
                    pexpired++;
            }
            freeReplyObject(z);
            z = redisCommand(rc, "ZRANGE %spe:%s 0 -1 WITHSCORES", prefix, p->id);
            for (size_t k = 0; z && z->type == REDIS_REPLY_ARRAY && k + 1 < z->elements; k += 2) {
                long qty = atol(z->element[k]->str);
                if (atof(z->element[k + 1]->str) > now_ms)
                    pheld += qty;
                else
                    pexpired += qty;
            }
            freeReplyObject(z);
            long total = psold + pheld + pavail + pexpired;
            if (pavail >= 0 && total < p->capacity)
                sim_run_violation(r, "inventory_leak",
                                  "pool %s: sold %ld + held %ld + available %ld (+%ld expiring) "
                                  "< capacity %d: %ld units can be neither held nor bought",
                                  p->id, psold, pheld, pavail, pexpired, p->capacity,
                                  p->capacity - total);
            else if (pavail >= 0 && total > p->capacity)
                sim_run_violation(r, "inventory_balance",
                                  "pool %s: sold %ld + held %ld + available %ld (+%ld expiring) "
                                  "!= capacity %d",
                                  p->id, psold, pheld, pavail, pexpired, p->capacity);
        }
        json_array_append_new(pools, json_pack("{s:s, s:i, s:I, s:I, s:I, s:i}", "pool", p->id,
                                               "capacity", p->capacity, "sold", (json_int_t)psold,
                                               "held", (json_int_t)pheld, "available",
                                               (json_int_t)(pavail + pexpired), "seeded", seeded));
    }
    json_object_set_new(r->figures, "inventory",
                        json_pack("{s:i, s:I, s:I, s:I, s:b, s:o}", "seats", r->sc->nseats, "sold",
                                  (json_int_t)sold_pg, "held", (json_int_t)held, "available",
                                  (json_int_t)avail, "redis_seeded", seeded, "pools", pools));
}

/* ------------------------------------------------------------------ order and fairness */

static const sim_run_t *g_run; /* qsort context (main thread only) */

static int64_t got_number_at(const sim_run_t *r, const sim_fan_t *f)
{
    if (f->in_prequeue)
        return (r->opens_at_ms - r->wall_start_ms) * 1000000LL;
    return f->placed_ns;
}

static int by_numbered(const void *a, const void *b)
{
    const sim_fan_t *x = &g_run->fans[*(const int *)a], *y = &g_run->fans[*(const int *)b];
    int64_t p = got_number_at(g_run, x), q2 = got_number_at(g_run, y);
    return (p > q2) - (p < q2);
}

static int by_sent(const void *a, const void *b)
{
    const sim_fan_t *x = &g_run->fans[*(const int *)a], *y = &g_run->fans[*(const int *)b];
    return (x->join_sent_ns > y->join_sent_ns) - (x->join_sent_ns < y->join_sent_ns);
}

/* FIFO: a fan who had their number before another fan even asked is ahead of them. */
static void check_fifo(sim_run_t *r)
{
    int n = 0;
    int *a = cm_xcalloc((size_t)r->nfans + 1, sizeof(int));
    int *b = cm_xcalloc((size_t)r->nfans + 1, sizeof(int));
    for (int i = 0; i < r->nfans; i++)
        if (r->fans[i].num > 0 && r->fans[i].placed_ns >= 0) {
            a[n] = b[n] = i;
            n++;
        }
    g_run = r;
    qsort(a, (size_t)n, sizeof(int), by_numbered);
    qsort(b, (size_t)n, sizeof(int), by_sent);
    uint64_t maxnum = 0;
    long inversions = 0;
    int j = 0;
    for (int k = 0; k < n; k++) {
        const sim_fan_t *fb = &r->fans[b[k]];
        if (fb->in_prequeue)
            continue;
        while (j < n && got_number_at(r, &r->fans[a[j]]) < fb->join_sent_ns) {
            if (r->fans[a[j]].num > maxnum)
                maxnum = r->fans[a[j]].num;
            j++;
        }
        if (maxnum > fb->num && inversions++ < 10)
            sim_run_violation(r, "fifo_order",
                              "fan %u asked after a fan with number %llu already had it, yet got "
                              "number %llu",
                              fb->id, (unsigned long long)maxnum, (unsigned long long)fb->num);
    }
    json_object_set_new(
        r->figures, "fifo",
        json_pack("{s:i, s:I}", "fans_checked", n, "inversions", (json_int_t)inversions));
    free(a);
    free(b);
}

void sim_audit_uniformity(const int *x, const int *y, int n, double *spearman, double *p_spearman,
                          double *chi2, int *df, double *p_chi2)
{
    double d2 = 0;
    for (int i = 0; i < n; i++)
        d2 += (double)(x[i] - y[i]) * (double)(x[i] - y[i]);
    double nn = n;
    *spearman = n > 1 ? 1.0 - 6.0 * d2 / (nn * (nn * nn - 1.0)) : 0;
    double z = fabs(*spearman) * sqrt(nn - 1.0);
    *p_spearman = erfc(z / sqrt(2.0));
    int k = (int)floor(sqrt(nn / 5.0));
    if (k > 10)
        k = 10;
    if (k < 2) {
        *chi2 = 0;
        *df = 0;
        *p_chi2 = 1;
        return;
    }
    long *cell = cm_xcalloc((size_t)(k * k), sizeof(long));
    for (int i = 0; i < n; i++)
        cell[(long)x[i] * k / n * k + (long)y[i] * k / n]++;
    /* Expected count of each cell from its row and column totals (deciles of a
     * permutation are equal-sized up to rounding). */
    long *row = cm_xcalloc((size_t)k, sizeof(long)), *col = cm_xcalloc((size_t)k, sizeof(long));
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) {
            row[i] += cell[i * k + j];
            col[j] += cell[i * k + j];
        }
    double x2 = 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) {
            double e = (double)row[i] * (double)col[j] / nn;
            if (e > 0)
                x2 += ((double)cell[i * k + j] - e) * ((double)cell[i * k + j] - e) / e;
        }
    *chi2 = x2;
    *df = (k - 1) * (k - 1);
    *p_chi2 = sim_stats_gamma_q(*df / 2.0, x2 / 2.0);
    free(cell);
    free(row);
    free(col);
}

static int by_num(const void *a, const void *b)
{
    const sim_fan_t *x = &g_run->fans[*(const int *)a], *y = &g_run->fans[*(const int *)b];
    return (x->num > y->num) - (x->num < y->num);
}

/* Pre-queue: the order at opening against the order of arrival. */
static void check_prequeue(sim_run_t *r)
{
    int n = 0;
    int *idx = cm_xcalloc((size_t)r->nfans + 1, sizeof(int));
    for (int i = 0; i < r->nfans; i++) /* fan ids are in arrival order */
        if (r->fans[i].in_prequeue && r->fans[i].num > 0)
            idx[n++] = i;
    int *x = cm_xcalloc((size_t)n + 1, sizeof(int)), *y = cm_xcalloc((size_t)n + 1, sizeof(int));
    int *pos = cm_xcalloc((size_t)r->nfans + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        pos[idx[i]] = i;
    g_run = r;
    qsort(idx, (size_t)n, sizeof(int), by_num);
    for (int i = 0; i < n; i++) {
        x[pos[idx[i]]] = pos[idx[i]];
        y[pos[idx[i]]] = i;
    }
    double rs = 0, ps = 1, chi2 = 0, pc = 1;
    int df = 0;
    if (n >= 2)
        sim_audit_uniformity(x, y, n, &rs, &ps, &chi2, &df, &pc);
    json_object_set_new(r->figures, "prequeue",
                        json_pack("{s:i, s:f, s:f, s:f, s:i, s:f, s:f}", "fans", n, "spearman", rs,
                                  "p_spearman", ps, "chi2", chi2, "df", df, "p_chi2", pc, "p_min",
                                  r->sc->p_min));
    if (n < 2)
        sim_run_violation(r, "prequeue_uniformity", "only %d pre-queue fans got a number", n);
    else if (ps < r->sc->p_min || pc < r->sc->p_min)
        sim_run_violation(r, "prequeue_uniformity",
                          "order at opening is not a uniform shuffle of arrival: Spearman %.4f "
                          "(p=%.3g), chi2 %.1f on %d df (p=%.3g), threshold p=%g",
                          rs, ps, chi2, df, pc, r->sc->p_min);
    free(idx);
    free(x);
    free(y);
    free(pos);
}

/* The operator's rate at second t (from the room settings and the timeline). */
static void rate_at(sim_run_t *r, double t, double *rate, bool *paused, bool *changed_near)
{
    json_t *v = json_object_get(r->sc->room, "rate_per_minute");
    *rate = json_is_number(v) ? json_number_value(v) : 0;
    *paused = json_is_true(json_object_get(r->sc->room, "paused"));
    *changed_near = false;
    for (int i = 0; i < r->sc->nactions; i++) {
        sim_action_t *a = &r->sc->actions[i];
        if (a->patch == NULL)
            continue;
        if (fabs(a->at_s - t) < 11 || (a->at_s > t - 10 && a->at_s < t + 1))
            *changed_near = true;
        if (a->at_s <= t) {
            json_t *rp = json_object_get(a->patch, "rate_per_minute");
            if (json_is_number(rp))
                *rate = json_number_value(rp);
            json_t *pp = json_object_get(a->patch, "paused");
            if (json_is_boolean(pp))
                *paused = json_is_true(pp);
            json_t *ma = json_object_get(a->patch, "max_active");
            if (json_is_integer(ma) && json_integer_value(ma) > 0)
                *changed_near = true; /* max_active limits the flow, not the rate */
        }
    }
}

/* Claimed admissions per 10 s window against the operator's rate. */
static void check_rate(sim_run_t *r)
{
    int secs = r->s_admitted.n;
    json_t *wins = json_array();
    json_t *ma = json_object_get(r->sc->room, "max_active");
    bool limited = json_is_integer(ma) && json_integer_value(ma) > 0;
    int checked = 0;
    for (int w = 0; w + 10 <= secs; w += 10) {
        double count = 0;
        bool backlog = true;
        for (int s = w; s < w + 10; s++) {
            count += r->s_admitted.v[s];
            if (s >= r->s_queue.n || r->s_queue.v[s] < 1)
                backlog = false;
        }
        double rate;
        bool paused, near;
        rate_at(r, w + 5, &rate, &paused, &near);
        double expect = paused ? 0 : rate / 6.0;
        double hi = expect * (1 + r->sc->rate_tolerance) + 2;
        double lo = expect * (1 - r->sc->rate_tolerance) - 2;
        json_array_append_new(
            wins, json_pack("{s:i, s:f, s:f}", "from_s", w, "admitted", count, "expected", expect));
        /* Windows around an operator change, or after the room closed, judge nothing. */
        if (near || (r->sold_out_ns >= 0 && (int64_t)(w + 10) * 1000000000LL > r->sold_out_ns))
            continue;
        if (count > hi)
            sim_run_violation(r, "admission_rate",
                              "%.0f admissions in [%d s, %d s) against %.0f expected (+%.0f%%)",
                              count, w, w + 10, expect, r->sc->rate_tolerance * 100);
        /* Below the rate only counts while enough fans were waiting all window long. */
        if (r->sc->rate_lower_bound && backlog && !limited && r->s_queue.v[w + 9] >= expect &&
            count < lo)
            sim_run_violation(r, "admission_rate",
                              "%.0f admissions in [%d s, %d s) with fans waiting, against %.0f "
                              "expected (-%.0f%%)",
                              count, w, w + 10, expect, r->sc->rate_tolerance * 100);
        checked++;
    }
    json_object_set_new(r->figures, "admission_windows", wins);
    json_object_set_new(r->figures, "admission_windows_checked", json_integer(checked));
}

static int sec_of_ns(int64_t ns)
{
    return ns < 0 ? 0 : (int)(ns / 1000000000LL);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* p50/p90 of |ETA told - actual wait| / actual wait (and the median of the signed error,
 * bias_p50: above 0 when ETAs run long), over fans who waited at least 5 s
 * after it was told (below that the error is the poll interval). The ETA is the one told
 * at join or, after an operator's rate change, the first told once the gateways knew of
 * it (no ETA could know of a change still to come: a fan told one only before it, and
 * passed before polling again, is left out). Likewise no ETA can foresee a stock-out: a
 * fan ever told "sold out, for now" (sim_fan_t.awaiting_returns) waited for units to come
 * back, not for the rate, and is left out too, counted in excluded_sold_out_for_now.
 * Two actual waits from then: until the watermark passed the fan's number (admission,
 * from the room's stats once a second), and until the fan itself saw "admitted" (which
 * adds the polling delay). */
static json_t *eta_errors(sim_run_t *r, bool by_watermark, int *count)
{
    double *e = cm_xcalloc((size_t)r->nfans + 1, sizeof(double));
    double *sg = cm_xcalloc((size_t)r->nfans + 1, sizeof(double)); /* signed: + told too long */
    int n = 0, sold_out_for_now = 0;
    for (int i = 0; i < r->nfans; i++) {
        sim_fan_t *f = &r->fans[i];
        if (f->eta_s < 0 || f->placed_ns < 0 || f->in_prequeue || f->num == 0)
            continue;
        if (f->awaiting_returns) {
            sold_out_for_now++;
            continue;
        }
        int64_t told = f->eta_at_ns >= 0 ? f->eta_at_ns : f->placed_ns;
        double at = -1;
        if (by_watermark) {
            for (int s = sec_of_ns(told); s < r->s_watermark.n; s++)
                if (r->s_watermark.v[s] >= (double)f->num) {
                    at = (double)s;
                    break;
                }
        } else if (f->admitted_ns >= 0) {
            at = (double)f->admitted_ns / 1e9;
        }
        if (at < 0)
            continue;
        if (r->rate_changed_ns >= 0 && told < r->rate_changed_ns &&
            at * 1e9 > (double)r->rate_changed_ns)
            continue; /* told before the change, passed after it before being told again */
        double actual = at - (double)told / 1e9;
        if (actual < 5.0)
            continue;
        sg[n] = ((double)f->eta_s - actual) / actual;
        e[n++] = fabs((double)f->eta_s - actual) / actual;
    }
    qsort(e, (size_t)n, sizeof(double), cmp_double);
    qsort(sg, (size_t)n, sizeof(double), cmp_double);
    double p50 = n ? e[(int)(0.5 * (n - 1))] : 0, p90 = n ? e[(int)(0.9 * (n - 1))] : 0;
    double bias = n ? sg[(int)(0.5 * (n - 1))] : 0;
    free(e);
    free(sg);
    *count = n;
    return json_pack("{s:i, s:f, s:f, s:f, s:i}", "fans", n, "p50", p50, "p90", p90, "bias_p50",
                     bias, "excluded_sold_out_for_now", sold_out_for_now);
}

static void check_eta(sim_run_t *r)
{
    int n = 0, n2 = 0;
    json_t *wm = eta_errors(r, true, &n);
    json_t *seen = eta_errors(r, false, &n2);
    double p90 = json_number_value(json_object_get(wm, "p90"));
    json_object_set_new(r->figures, "eta_error", wm);
    json_object_set_new(r->figures, "eta_error_as_seen_by_fans", seen);
    if (r->sc->eta_p90_max > 0 && n > 0 && p90 > r->sc->eta_p90_max)
        sim_run_violation(r, "eta_accuracy", "ETA error p90 %.0f%% exceeds %.0f%% (%d fans)",
                          p90 * 100, r->sc->eta_p90_max * 100, n);
}

/* The share of the inventory sold: units bought (the fans' record, each told "confirmed")
 * over the units of the event. Below audit.sold_share_min it is a violation; the figure is
 * always reported. */
static void check_sold_share(sim_run_t *r)
{
    double share = r->total_units > 0 ? (double)r->units_bought / (double)r->total_units : 0;
    json_object_set_new(r->figures, "sold_share",
                        json_pack("{s:I, s:i, s:f, s:f}", "units_bought",
                                  (json_int_t)r->units_bought, "inventory_units", r->total_units,
                                  "share", share, "min", r->sc->sold_share_min));
    if (r->sc->sold_share_min > 0 && share < r->sc->sold_share_min)
        sim_run_violation(r, "sold_share",
                          "%llu of %d units sold (%.2f%%), below the scenario's %.2f%%",
                          (unsigned long long)r->units_bought, r->total_units, share * 100,
                          r->sc->sold_share_min * 100);
}

static void check_places(sim_run_t *r)
{
    long none = 0;
    for (int i = 0; i < r->nfans; i++) {
        sim_fan_t *f = &r->fans[i];
        if (f->placed_ns < 0 && f->outcome != O_SOLD_OUT)
            none++;
    }
    if (none)
        sim_run_violation(r, "every_fan_placed", "%ld fans never got a place in the queue", none);
}

static void check_reconciliation(sim_run_t *r, json_t *ledger);

int sim_audit_run(sim_run_t *r)
{
    if (r->figures == NULL)
        r->figures = json_object();
    check_places(r);
    if (r->sc->arrival == ARR_PREQUEUE)
        check_prequeue(r);
    json_t *mode = json_object_get(r->sc->room, "mode");
    if (r->sc->arrival == ARR_PREQUEUE || mode == NULL ||
        strcmp(json_string_value(mode) ? json_string_value(mode) : "", "fifo") == 0)
        check_fifo(r);
    check_rate(r);
    check_eta(r);
    check_sold_share(r);
    PGconn *pg = PQconnectdb(r->o->pg_conninfo);
    if (PQstatus(pg) != CONNECTION_OK) {
        sim_run_violation(r, "audit_sources", "cannot connect to Postgres: %s", PQerrorMessage(pg));
    } else {
        check_terminal(r, pg);
        check_units(r, pg);
        if (r->o->paysim_url) {
            json_t *ledger = fetch_ledger(r);
            if (ledger == NULL)
                sim_run_violation(r, "audit_sources", "cannot read the payment ledger");
            else
                check_money(r, pg, ledger);
            if (ledger)
                check_reconciliation(r, ledger);
            json_decref(r->ledger);
            r->ledger = ledger;
        }
        redisContext *rc = redis_open(r);
        if (rc == NULL)
            sim_run_violation(r, "audit_sources", "cannot connect to Redis");
        else
            check_inventory(r, pg, rc);
        redisFree(rc);
    }
    PQfinish(pg);
    return r->nviol;
}

/* ------------------------------------------------------- box-office export */

typedef struct {
    struct event_base *base;
    char *body;
    int status;
} csv_fetch_t;

static void on_csv(const sim_resp_t *resp, void *arg)
{
    csv_fetch_t *f = arg;
    f->status = resp->status;
    if (resp->status == 200) {
        f->body = cm_xmalloc(resp->body_len + 1);
        memcpy(f->body, resp->body, resp->body_len);
        f->body[resp->body_len] = '\0';
    }
    event_base_loopexit(f->base, NULL);
}

/* The reserve's reconciliation export (GET /admin/events/{e}/reconciliation.csv, lines
 * "event,currency,kind,count,amount") against the provider's charges: the succeeded
 * charges' count and sum, and the sum refunded of them, are the export's `charges` and
 * `refunds` lines. */
static void check_reconciliation(sim_run_t *r, json_t *ledger)
{
    char err[256], path[160], hdr[600];
    csv_fetch_t f = {.base = event_base_new()};
    sim_tls_ctx_t *tls = r->o->ca ? cm_tls_client_new(r->o->ca, err, sizeof(err)) : NULL;
    sim_pool_t *pool =
        sim_pool_new(f.base, r->o->reserve_admin_url, tls, 1, NULL, 60, err, sizeof(err));
    if (pool) {
        snprintf(path, sizeof(path), "/admin/events/%s/reconciliation.csv", r->event);
        snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\n",
                 r->o->admin_token ? r->o->admin_token : "");
        sim_pool_request(pool, 0, "GET", path, hdr, NULL, on_csv, &f);
        event_base_dispatch(f.base);
    }
    sim_pool_free(pool);
    if (tls)
        cm_tls_free(tls);
    event_base_free(f.base);
    if (f.body == NULL) {
        sim_run_violation(r, "audit_sources", "cannot read the reconciliation export (%d)",
                          f.status);
        return;
    }
    long long want[2][2] = {{0, 0}, {0, 0}}, got[2][2] = {{-1, -1}, {-1, -1}};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(ledger, "charges"), i, c)
    {
        const char *st = json_string_value(json_object_get(c, "status"));
        if (st == NULL || strcmp(st, "succeeded") != 0)
            continue;
        want[0][0]++;
        want[0][1] += json_integer_value(json_object_get(c, "amount"));
        /* an intent's refunds are on its charge (expanded: latest_charge) */
        want[1][1] += json_integer_value(
            json_object_get(json_object_get(c, "latest_charge"), "amount_refunded"));
    }
    char *save = NULL;
    for (char *line = strtok_r(f.body, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char *amount = strrchr(line, ',');
        if (amount == NULL)
            continue;
        *amount++ = '\0';
        char *count = strrchr(line, ',');
        if (count == NULL)
            continue;
        *count++ = '\0';
        char *kind = strrchr(line, ',');
        kind = kind ? kind + 1 : line;
        int k = strcmp(kind, "charges") == 0 ? 0 : strcmp(kind, "refunds") == 0 ? 1 : -1;
        if (k >= 0) {
            got[k][0] = atoll(count);
            got[k][1] = atoll(amount);
        }
    }
    free(f.body);
    if (got[0][0] != want[0][0] || got[0][1] != want[0][1])
        sim_run_violation(r, "reconciliation_charges",
                          "the reserve's export says %lld charges of %lld, the provider %lld of "
                          "%lld",
                          got[0][0], got[0][1], want[0][0], want[0][1]);
    if (got[1][1] != want[1][1])
        sim_run_violation(r, "reconciliation_refunds",
                          "the reserve's export says %lld refunded, the provider %lld", got[1][1],
                          want[1][1]);
    json_object_set_new(r->figures, "reconciliation",
                        json_pack("{s:I, s:I, s:I}", "charges", (json_int_t)got[0][0], "charged",
                                  (json_int_t)got[0][1], "refunded", (json_int_t)got[1][1]));
}
