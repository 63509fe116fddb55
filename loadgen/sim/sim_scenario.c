/*
 * sim_scenario — see sim_scenario.h. Start-up only, main thread, before the loop.
 *
 * Unknown keys are errors (a misspelt behaviour would silently run another night);
 * every number is range-checked and the message names the key.
 */
#include "sim_scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"
#include "cm_parse.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        goto err;                                                                                  \
    } while (0)

static const char *const top_keys[] = {"name",       "description", "fans",     "arrival",
                                       "inventory",  "room",        "choice",   "seats_per_buyer",
                                       "behaviours", "payment",     "operator", "limits",
                                       "client",     "audit",       "seed",     NULL};

static bool known(const char *k, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(k, *list) == 0)
            return true;
    return false;
}

/* Reads an optional number member into *out within [lo, hi]; -1 on a bad value. */
static int num(json_t *obj, const char *key, double lo, double hi, double *out, char *err,
               size_t errlen, const char *where)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi) {
        snprintf(err, errlen, "%s.%s must be a number from %g to %g", where, key, lo, hi);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

static int check_keys(json_t *obj, const char *where, const char *const *allowed, char *err,
                      size_t errlen)
{
    const char *k;
    json_t *v;
    if (obj == NULL)
        return 0;
    if (!json_is_object(obj)) {
        snprintf(err, errlen, "%s must be an object", where);
        return -1;
    }
    json_object_foreach(obj, k, v)
    {
        (void)v;
        if (!known(k, allowed)) {
            snprintf(err, errlen, "unknown key %s.%s", where, k);
            return -1;
        }
    }
    return 0;
}

/* The index of section id in s (added when new; seat is the index of a seat in it). */
static int section_of(sim_scenario_t *s, const char *id, int seat)
{
    int k = s->nsections;
    for (int j = s->nsections - 1; j >= 0; j--) /* seats come grouped: the last first */
        if (strcmp(s->sections[j].id, id) == 0) {
            k = j;
            break;
        }
    if (k == s->nsections) {
        s->sections = cm_xrealloc(s->sections, (size_t)(k + 1) * sizeof(sim_section_t));
        snprintf(s->sections[k].id, sizeof(s->sections[k].id), "%s", id);
        s->sections[k].first = seat;
        s->nsections++;
    }
    s->sections[k].last = seat;
    return k;
}

/* Expands the inventory the way the reserve does: explicit seats, compact sections
 * (A-<row>-<n>), pools. */
static int expand_inventory(sim_scenario_t *s, char *err, size_t errlen)
{
    json_t *inv = s->inventory, *v;
    size_t i;
    json_t *seats = json_object_get(inv, "seats");
    json_t *sections = json_object_get(inv, "sections");
    json_t *pools = json_object_get(inv, "pools");
    size_t cap = 0;
    if (json_is_array(seats))
        cap += json_array_size(seats);
    json_array_foreach(sections, i, v)
    {
        json_int_t rows = json_integer_value(json_object_get(v, "rows"));
        json_int_t per = json_integer_value(json_object_get(v, "seats_per_row"));
        if (rows < 1 || per < 1 || rows * per > 1000000 ||
            !json_is_string(json_object_get(v, "id"))) {
            snprintf(err, errlen, "inventory.sections[%zu]: id, rows and seats_per_row needed", i);
            return -1;
        }
        cap += (size_t)(rows * per);
    }
    if (cap > 2000000) {
        snprintf(err, errlen, "inventory: more than 2,000,000 seats");
        return -1;
    }
    s->seats = cm_xcalloc(cap ? cap : 1, sizeof(sim_seat_t));
    json_array_foreach(seats, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        if (id == NULL || !cm_parse_ident(id) || strlen(id) >= sizeof(s->seats[0].id)) {
            snprintf(err, errlen, "inventory.seats[%zu].id is missing or invalid", i);
            return -1;
        }
        const char *sec = json_string_value(json_object_get(v, "section"));
        if (sec == NULL || !cm_parse_ident(sec) || s->nsections >= 65535) {
            snprintf(err, errlen, "inventory.seats[%zu].section is missing or invalid", i);
            return -1;
        }
        sim_seat_t *st = &s->seats[s->nseats];
        st->section = (uint16_t)section_of(s, sec, s->nseats);
        s->nseats++;
        snprintf(st->id, sizeof(st->id), "%s", id);
        st->row = 1;
        st->price = json_integer_value(json_object_get(v, "price"));
    }
    json_array_foreach(sections, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        json_int_t rows = json_integer_value(json_object_get(v, "rows"));
        json_int_t per = json_integer_value(json_object_get(v, "seats_per_row"));
        json_int_t price = json_integer_value(json_object_get(v, "price"));
        if (strlen(id) > 30) {
            snprintf(err, errlen, "inventory.sections[%zu].id is too long", i);
            return -1;
        }
        if (s->nsections >= 65535) {
            snprintf(err, errlen, "inventory: more than 65,535 sections");
            return -1;
        }
        for (json_int_t r = 1; r <= rows; r++)
            for (json_int_t n = 1; n <= per; n++) {
                sim_seat_t *st = &s->seats[s->nseats];
                st->section = (uint16_t)section_of(s, id, s->nseats);
                s->nseats++;
                snprintf(st->id, sizeof(st->id), "%s-%lld-%lld", id, (long long)r, (long long)n);
                st->row = (int)r;
                st->price = price;
            }
    }
    s->pools = cm_xcalloc(json_array_size(pools) + 1, sizeof(sim_pool_def_t));
    json_array_foreach(pools, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        json_int_t capacity = json_integer_value(json_object_get(v, "capacity"));
        if (id == NULL || !cm_parse_ident(id) || capacity < 1) {
            snprintf(err, errlen, "inventory.pools[%zu]: id and capacity needed", i);
            return -1;
        }
        sim_pool_def_t *p = &s->pools[s->npools++];
        snprintf(p->id, sizeof(p->id), "%s", id);
        p->capacity = (int)capacity;
        p->price = json_integer_value(json_object_get(v, "price"));
    }
    if (s->nseats == 0 && s->npools == 0) {
        snprintf(err, errlen, "inventory has neither seats nor pools");
        return -1;
    }
    const char *cur = json_string_value(json_object_get(inv, "currency"));
    snprintf(s->currency, sizeof(s->currency), "%s", cur ? cur : "EUR");
    json_t *ttl = json_object_get(inv, "hold_ttl_seconds");
    s->hold_ttl_s = json_is_integer(ttl) ? (int)json_integer_value(ttl) : 300;
    return 0;
}

static int parse_actions(sim_scenario_t *s, json_t *ops, char *err, size_t errlen)
{
    static const char *const keys[] = {"at_s", "patch", "payment", "exec", "label", NULL};
    size_t i;
    json_t *a;
    if (ops == NULL)
        return 0;
    if (!json_is_array(ops)) {
        snprintf(err, errlen, "operator must be an array of actions");
        return -1;
    }
    s->actions = cm_xcalloc(json_array_size(ops) + 1, sizeof(sim_action_t));
    json_array_foreach(ops, i, a)
    {
        char where[32];
        snprintf(where, sizeof(where), "operator[%zu]", i);
        if (check_keys(a, where, keys, err, errlen) != 0)
            return -1;
        sim_action_t *x = &s->actions[s->nactions++];
        json_t *at = json_object_get(a, "at_s");
        if (!json_is_number(at)) {
            snprintf(err, errlen, "%s.at_s (seconds after the first arrival) is required", where);
            return -1;
        }
        x->at_s = json_number_value(at);
        json_t *p = json_object_get(a, "patch");
        json_t *pay = json_object_get(a, "payment");
        const char *ex = json_string_value(json_object_get(a, "exec"));
        const char *label = json_string_value(json_object_get(a, "label"));
        if ((p && !json_is_object(p)) || (pay && !json_is_object(pay)) || (!p && !pay && !ex)) {
            snprintf(err, errlen, "%s needs patch (object), payment (object) or exec (string)",
                     where);
            return -1;
        }
        x->patch = p ? json_incref(p) : NULL;
        x->pay = pay ? json_incref(pay) : NULL;
        x->exec = ex ? cm_xstrdup(ex) : NULL;
        x->label = cm_xstrdup(label ? label : ex ? ex : p ? "room settings" : "payment settings");
    }
    return 0;
}

sim_scenario_t *sim_scenario_load(const char *path, char *err, size_t errlen)
{
    json_error_t je;
    sim_scenario_t *s = cm_xcalloc(1, sizeof(*s));
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (doc == NULL)
        FAIL("%s:%d: %s", path, je.line, je.text);
    if (!json_is_object(doc))
        FAIL("%s: a scenario is a JSON object", path);
    const char *k;
    json_t *v;
    json_object_foreach(doc, k, v)
    {
        (void)v;
        if (!known(k, top_keys))
            FAIL("%s: unknown key '%s'", path, k);
    }
    const char *name = json_string_value(json_object_get(doc, "name"));
    if (name == NULL || strlen(name) > 40 || !cm_parse_ident(name))
        FAIL("name: 1-40 characters of [A-Za-z0-9._-] required");
    s->name = cm_xstrdup(name);
    json_t *fans = json_object_get(doc, "fans");
    if (!json_is_integer(fans) || json_integer_value(fans) < 1 ||
        json_integer_value(fans) > 1000000)
        FAIL("fans must be an integer from 1 to 1000000");
    s->fans = (int)json_integer_value(fans);

    static const char *const arr_keys[] = {"profile",       "window_s",   "rate_per_s",
                                           "prequeue_fans", "prequeue_s", NULL};
    json_t *arr = json_object_get(doc, "arrival");
    if (check_keys(arr, "arrival", arr_keys, err, errlen) != 0)
        goto err;
    const char *prof = json_string_value(json_object_get(arr, "profile"));
    if (prof == NULL || strcmp(prof, "burst") == 0)
        s->arrival = ARR_BURST;
    else if (strcmp(prof, "ramp") == 0)
        s->arrival = ARR_RAMP;
    else if (strcmp(prof, "poisson") == 0)
        s->arrival = ARR_POISSON;
    else if (strcmp(prof, "prequeue") == 0)
        s->arrival = ARR_PREQUEUE;
    else
        FAIL("arrival.profile must be burst, ramp, poisson or prequeue");
    s->window_s = 1.0;
    s->rate_per_s = 1000;
    s->prequeue_s = 5;
    double pq = 0;
    if (num(arr, "window_s", 0, 3600, &s->window_s, err, errlen, "arrival") ||
        num(arr, "rate_per_s", 0.001, 1e7, &s->rate_per_s, err, errlen, "arrival") ||
        num(arr, "prequeue_fans", 0, s->fans, &pq, err, errlen, "arrival") ||
        num(arr, "prequeue_s", 1, 3600, &s->prequeue_s, err, errlen, "arrival"))
        goto err;
    s->prequeue_fans = (int)pq;
    if (s->arrival == ARR_PREQUEUE && s->prequeue_fans < 2)
        FAIL("arrival.prequeue_fans (at least 2) is required with profile prequeue");

    s->inventory = json_incref(json_object_get(doc, "inventory"));
    if (!json_is_object(s->inventory))
        FAIL("inventory (the reserve's PUT /admin/events body) is required");
    if (expand_inventory(s, err, errlen) != 0)
        goto err;
    s->room = json_object_get(doc, "room");
    if (!json_is_object(s->room))
        FAIL("room (the gateway's PUT /admin/events body) is required");
    s->room = json_deep_copy(s->room);

    static const char *const ch_keys[] = {"mode", "zipf_s", "ga_share", "best_share", NULL};
    json_t *ch = json_object_get(doc, "choice");
    if (check_keys(ch, "choice", ch_keys, err, errlen) != 0)
        goto err;
    const char *mode = json_string_value(json_object_get(ch, "mode"));
    if (mode == NULL || strcmp(mode, "uniform") == 0)
        s->choice = CHOICE_UNIFORM;
    else if (strcmp(mode, "hotspot") == 0)
        s->choice = CHOICE_HOTSPOT;
    else
        FAIL("choice.mode must be uniform or hotspot");
    s->zipf_s = 1.0;
    s->ga_share = s->nseats == 0 ? 1.0 : s->npools == 0 ? 0.0 : 0.1;
    if (num(ch, "zipf_s", 0, 10, &s->zipf_s, err, errlen, "choice") ||
        num(ch, "ga_share", 0, 1, &s->ga_share, err, errlen, "choice") ||
        num(ch, "best_share", 0, 1, &s->best_share, err, errlen, "choice"))
        goto err;
    if (s->nseats == 0)
        s->ga_share = 1.0;
    if (s->npools == 0)
        s->ga_share = 0.0;

    json_t *spb = json_object_get(doc, "seats_per_buyer");
    s->seats_min = s->seats_max = 1;
    if (json_is_integer(spb)) {
        s->seats_min = s->seats_max = (int)json_integer_value(spb);
    } else if (json_is_object(spb)) {
        s->seats_min = (int)json_integer_value(json_object_get(spb, "min"));
        s->seats_max = (int)json_integer_value(json_object_get(spb, "max"));
    } else if (spb) {
        FAIL("seats_per_buyer is an integer or {\"min\":…, \"max\":…}");
    }
    if (s->seats_min < 1 || s->seats_max < s->seats_min || s->seats_max > 10)
        FAIL("seats_per_buyer: 1 <= min <= max <= 10");

    static const char *const b_keys[] = {"abandon_queue",      "abandon_after_s",
                                         "vanish_holding",     "pay_too_slowly",
                                         "double_click",       "retry_after_error",
                                         "max_hold_attempts",  "done_when_lost",
                                         "returns_patience_s", NULL};
    json_t *b = json_object_get(doc, "behaviours");
    if (check_keys(b, "behaviours", b_keys, err, errlen) != 0)
        goto err;
    s->retry = 1.0;
    s->abandon_after_s = 2.0;
    s->returns_patience_s = 0;
    double mha = 8;
    if (num(b, "abandon_queue", 0, 1, &s->abandon, err, errlen, "behaviours") ||
        num(b, "abandon_after_s", 0, 3600, &s->abandon_after_s, err, errlen, "behaviours") ||
        num(b, "vanish_holding", 0, 1, &s->vanish, err, errlen, "behaviours") ||
        num(b, "pay_too_slowly", 0, 1, &s->slow, err, errlen, "behaviours") ||
        num(b, "double_click", 0, 1, &s->double_click, err, errlen, "behaviours") ||
        num(b, "retry_after_error", 0, 1, &s->retry, err, errlen, "behaviours") ||
        num(b, "max_hold_attempts", 1, 1000, &mha, err, errlen, "behaviours") ||
        num(b, "done_when_lost", 0, 1, &s->done_when_lost, err, errlen, "behaviours") ||
        num(b, "returns_patience_s", 0, 86400, &s->returns_patience_s, err, errlen, "behaviours"))
        goto err;
    s->max_hold_attempts = (int)mha;
    if (s->abandon + s->vanish + s->slow > 1.0 + 1e-9)
        FAIL("behaviours: abandon_queue + vanish_holding + pay_too_slowly must not exceed 1");

    json_t *pay = json_object_get(doc, "payment");
    if (pay && !json_is_object(pay))
        FAIL("payment must be an object (payment simulator settings)");
    s->payment = pay ? json_incref(pay) : NULL;
    if (parse_actions(s, json_object_get(doc, "operator"), err, errlen) != 0)
        goto err;

    static const char *const l_keys[] = {"duration_s", "settle_s", "sold_out_when_sold", NULL};
    json_t *lim = json_object_get(doc, "limits");
    if (check_keys(lim, "limits", l_keys, err, errlen) != 0)
        goto err;
    s->duration_s = 120;
    s->settle_s = 60;
    if (num(lim, "duration_s", 1, 86400, &s->duration_s, err, errlen, "limits") ||
        num(lim, "settle_s", 0, 3600, &s->settle_s, err, errlen, "limits"))
        goto err;
    s->sold_out_when_sold = !json_is_false(json_object_get(lim, "sold_out_when_sold"));

    static const char *const c_keys[] = {"gateway_conns", "reserve_conns",    "src_base",
                                         "timeout_s",     "fans_per_address", NULL};
    json_t *cl = json_object_get(doc, "client");
    if (check_keys(cl, "client", c_keys, err, errlen) != 0)
        goto err;
    double gc = 256, rc = 64, to = 30, fpa = SIM_FANS_PER_ADDRESS;
    if (num(cl, "gateway_conns", 1, 16384, &gc, err, errlen, "client") ||
        num(cl, "fans_per_address", 0, 1000000, &fpa, err, errlen, "client") ||
        num(cl, "reserve_conns", 1, 16384, &rc, err, errlen, "client") ||
        num(cl, "timeout_s", 1, 600, &to, err, errlen, "client"))
        goto err;
    s->gateway_conns = (int)gc;
    s->fans_per_address = (int)fpa;
    s->reserve_conns = (int)rc;
    s->timeout_s = (int)to;
    const char *src = json_string_value(json_object_get(cl, "src_base"));
    snprintf(s->src_base, sizeof(s->src_base), "%s", src ? src : "127.1.0.1");
    if (strncmp(s->src_base, "127.", 4) != 0)
        FAIL("client.src_base must be a loopback address (127.x.y.z)");

    static const char *const a_keys[] = {"eta_p90_max",      "rate_tolerance", "p_min",
                                         "rate_lower_bound", "sold_share_min", NULL};
    json_t *au = json_object_get(doc, "audit");
    if (check_keys(au, "audit", a_keys, err, errlen) != 0)
        goto err;
    s->rate_tolerance = 0.10;
    s->p_min = 0.001;
    if (num(au, "eta_p90_max", 0, 100, &s->eta_p90_max, err, errlen, "audit") ||
        num(au, "rate_tolerance", 0, 10, &s->rate_tolerance, err, errlen, "audit") ||
        num(au, "p_min", 0, 0.5, &s->p_min, err, errlen, "audit") ||
        num(au, "sold_share_min", 0, 1, &s->sold_share_min, err, errlen, "audit"))
        goto err;
    s->rate_lower_bound = json_is_true(json_object_get(au, "rate_lower_bound"));
    double seed = 1;
    if (num(doc, "seed", 0, 9e15, &seed, err, errlen, "scenario"))
        goto err;
    s->seed = (uint64_t)seed;
    json_decref(doc);
    return s;
err:
    json_decref(doc);
    sim_scenario_free(s);
    return NULL;
}

void sim_scenario_free(sim_scenario_t *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < s->nactions; i++) {
        json_decref(s->actions[i].patch);
        json_decref(s->actions[i].pay);
        free(s->actions[i].exec);
        free(s->actions[i].label);
    }
    free(s->actions);
    json_decref(s->inventory);
    json_decref(s->room);
    json_decref(s->payment);
    free(s->seats);
    free(s->sections);
    free(s->pools);
    free(s->name);
    free(s);
}
