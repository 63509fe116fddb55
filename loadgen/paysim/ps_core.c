/*
 * ps_core — the payment-provider simulator; the API is described in ps_core.h.
 *
 * Threads: everything here runs on the event-loop thread; the ledger file is ps_journal's
 * writer thread's. An answer that commits something (an intent, a confirmation, a refund)
 * is sent only after its journal line is durable, so a simulator restart never forgets a
 * charge it confirmed to anyone.
 *
 * Records: one per idempotency key (intents, confirmations and refunds share the key
 * space, as on Stripe) in a chained hash table, plus an id table and an append-only list
 * for the ledger. A record's state only moves forward through rec_set_state():
 *   PROCESSING (outcome not decided or not committed: same key → 409, the intent reads
 *   "processing") → WRITING (journal line queued; still 409 / "processing") → DONE
 *   (durable: same key → the stored answer; a confirmation leaves its intent as it made
 *   it, a refund adds to the intent's charge). A lost confirmation is dropped while
 *   PROCESSING, so nothing was charged and its key may be used again; a 500 is stored.
 *
 * Delays (latency, late answers) are libevent timers on a pending-request list; a
 * client that hangs up meanwhile is harmless (evhttp detaches the request and frees
 * it when we answer, see cm_http.h).
 */
#include "ps_core.h"

#include <ctype.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_http.h"
#include "ps_webhook.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "ps_form.h"
#include "ps_journal.h"

#define NBUCKETS 65536
#define MAX_BODY 16384
#define ID_LEN   40
#define LIST_MAX 100
/* Stripe refuses more than 99999999 in the smallest unit (amount_too_large); the
 * simulator takes what the reserve may charge (price bound × quantity), docs/api.md. */
#define AMOUNT_MAX 1000000000000000LL

#define S(f) offsetof(ps_config_t, f)

const cm_config_opt_t ps_config_table[] = {
    {"listen_addr", CM_CFG_STR, S(listen_addr), "127.0.0.1", 0, 0, "IPv4 address to listen on"},
    {"port", CM_CFG_INT, S(port), "8445", 0, 65535, "TCP port (0 = any free port)"},
    {"tls_cert", CM_CFG_STR, S(tls_cert), NULL, 0, 0, "PEM certificate chain"},
    {"tls_key", CM_CFG_STR, S(tls_key), NULL, 0, 0,
     "PEM private key of tls_cert (owner-only: chmod 600)"},
    {"plain_http", CM_CFG_BOOL, S(plain_http), "false", 0, 0,
     "serve plain HTTP instead of TLS (tests on loopback only)"},
    {"max_connections", CM_CFG_INT, S(max_connections), "1024", 16, 100000,
     "open connections before the listener pauses"},
    {"idle_timeout_s", CM_CFG_INT, S(idle_timeout_s), "120", 1, 3600,
     "seconds a connection may stay silent (must exceed timeout_ms)"},
    {"ledger_file", CM_CFG_STR, S(ledger_file), NULL, 0, 0,
     "append-only journal of intents, confirmations and refunds, replayed at start (unset: "
     "memory only)"},
    {"ledger_fsync", CM_CFG_BOOL, S(ledger_fsync), "true", 0, 0,
     "fdatasync each batch of journal lines before answering"},
    {"api_key", CM_CFG_STR, S(api_key), NULL, 0, 0,
     "secret key clients must send as Authorization: Bearer (unset: no check)"},
    {"max_records", CM_CFG_INT, S(max_records), "1000000", 100, 100000000,
     "intents, confirmations and refunds kept; beyond it new ones get 503"},
    {"latency_min_ms", CM_CFG_INT, S(latency_min_ms), "20", 0, 600000,
     "lowest simulated processing time"},
    {"latency_max_ms", CM_CFG_INT, S(latency_max_ms), "80", 0, 600000,
     "highest simulated processing time (uniform between min and max)"},
    {"decline_pct", CM_CFG_INT, S(decline_pct), "0", 0, 100, "percent of charges declined"},
    {"error_pct", CM_CFG_INT, S(error_pct), "0", 0, 100,
     "percent of charges answered 500 with nothing charged"},
    {"timeout_pct", CM_CFG_INT, S(timeout_pct), "0", 0, 100,
     "percent of charges whose answer comes only after timeout_ms"},
    {"refund_error_pct", CM_CFG_INT, S(refund_error_pct), "0", 0, 100,
     "percent of refunds answered 500 with nothing refunded"},
    {"timeout_mode", CM_CFG_STR, S(timeout_mode), "late", 0, 0,
     "late: the charge happens, the answer is late; lost: nothing is charged"},
    {"timeout_ms", CM_CFG_INT, S(timeout_ms), "30000", 0, 3600000,
     "delay of a timed-out answer (beyond the client's deadline)"},
    {"webhook_url", CM_CFG_STR, S(webhook_url), NULL, 0, 0,
     "where every intent status change and refund is POSTed as a Stripe-signed event (the "
     "reserve's /v1/provider/webhook; unset: no webhooks)"},
    {"webhook_secret_file", CM_CFG_STR, S(webhook_secret_file), NULL, 0, 0,
     "file whose first line is the webhook signing secret (the reserve's "
     "pay_webhook_secrets_file)"},
    {"webhook_ca_file", CM_CFG_STR, S(webhook_ca_file), NULL, 0, 0,
     "PEM CA bundle to verify an https webhook_url (unset: the system store)"},
    {"log_level", CM_CFG_STR, S(log_level), "info", 0, 0, "debug, info, warn or error"},
};

const size_t ps_config_table_len = sizeof(ps_config_table) / sizeof(ps_config_table[0]);

/* --- settings ------------------------------------------------------------------------ */

typedef enum { TIMEOUT_LATE, TIMEOUT_LOST } timeout_mode_t;

typedef struct settings {
    int64_t latency_min_ms, latency_max_ms;
    double decline_rate, error_rate, timeout_rate, refund_error_rate;
    timeout_mode_t timeout_mode;
    int64_t timeout_ms;
} settings_t;

/* --- records ------------------------------------------------------------------------- */

typedef enum { REC_PI, REC_CONFIRM, REC_REFUND } rec_kind_t;
typedef enum { REC_PROCESSING, REC_WRITING, REC_DONE } rec_state_t;

static const char *const rec_kind_names[] = {"payment_intent", "confirm", "refund"};

typedef struct rec rec_t;
struct rec {
    rec_t *next_key, *next_id;
    rec_kind_t kind;
    rec_state_t state;
    char *key; /* the Idempotency-Key (an internal one when the client sent none) */
    char hash[65];
    char id[ID_LEN];
    json_t *obj;   /* PI: the intent now; CONFIRM: the intent it left; REFUND: the refund */
    json_t *chobj; /* PI: its latest charge (or NULL); CONFIRM: the charge it made */
    int code;      /* the stored answer, replayed for the same key */
    char *body;
    char *event;            /* metadata.event, for ledger filters */
    rec_t *pi;              /* CONFIRM, REFUND: the intent */
    rec_t *confirming;      /* PI: the confirmation in progress, or NULL */
    int64_t refund_pending; /* PI: amount of refunds in progress */
    bool errored_once;      /* PI: pm_sim_error_once / _lost_once spent on its first try */
    char *return_url;       /* CONFIRM: where a 3-D Secure page sends the buyer back */
    size_t pos;             /* PI, REFUND when DONE: index in ps->list (commit order) */
};

/* --- pending (delayed) requests ------------------------------------------------------ */

typedef enum { OUT_SUCCEED, OUT_DECLINE, OUT_ERROR, OUT_LATE, OUT_LOST, OUT_ACTION } outcome_t;

typedef struct pending pending_t;
struct pending {
    pending_t *prev, *next;
    ps_server_t *ps;
    cm_req_t *req;
    struct event *timer;
    rec_t *rec;
    outcome_t outcome;
    bool answered;
    bool late_wait; /* the timer now waits to send a late answer */
    bool silent;    /* no request waits for this commit (the intent of a create+confirm) */
    /* a confirmation still on its way (pm_sim_arrive_<ms>): rec is NULL until then */
    json_t *arrive_body;
    char *arrive_key;
    char *arrive_pi;
    char *redirect; /* a 3-D Secure answer: the browser goes here once it is durable */
};

struct ps_server {
    ps_config_t cfg;
    struct event_base *base;
    cm_tls_ctx_t *tls;
    cm_http_server_t *http;
    settings_t set;
    settings_t defaults; /* the configured settings: what PUT /v1/settings starts from */
    rec_t *by_key[NBUCKETS];
    rec_t *by_id[NBUCKETS];
    rec_t **list; /* DONE records in commit order */
    size_t nlist, caplist;
    size_t nrecords;
    uint64_t requests; /* every request answered or held (GET /v1/stats) */
    pending_t *pending;
    ps_journal_t *j;
    ps_webhook_t *hooks; /* NULL: no webhook_url */
    uint64_t rng;
};

static uint64_t rnd(ps_server_t *ps)
{
    /* xorshift64*: plenty for simulated coin flips */
    ps->rng ^= ps->rng >> 12;
    ps->rng ^= ps->rng << 25;
    ps->rng ^= ps->rng >> 27;
    return ps->rng * 2685821657736338717ull;
}

static double rnd01(ps_server_t *ps)
{
    return (double)(rnd(ps) >> 11) / (double)(1ull << 53);
}

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h & (NBUCKETS - 1);
}

static rec_t *find_key(ps_server_t *ps, const char *key)
{
    for (rec_t *r = ps->by_key[hash_str(key)]; r; r = r->next_key)
        if (strcmp(r->key, key) == 0)
            return r;
    return NULL;
}

static rec_t *find_id(ps_server_t *ps, const char *id)
{
    for (rec_t *r = ps->by_id[hash_str(id)]; r; r = r->next_id)
        if (strcmp(r->id, id) == 0)
            return r;
    return NULL;
}

static void new_id(char *out, size_t cap, const char *prefix)
{
    unsigned char raw[12];
    char hex[25];
    cm_tls_random(raw, sizeof(raw));
    cm_hex_encode(raw, sizeof(raw), hex);
    snprintf(out, cap, "%s_%s", prefix, hex);
}

static rec_t *rec_new(ps_server_t *ps, rec_kind_t kind, const char *key, const char *hash)
{
    rec_t *r = cm_xcalloc(1, sizeof(*r));
    r->kind = kind;
    r->state = REC_PROCESSING;
    r->key = cm_xstrdup(key);
    snprintf(r->hash, sizeof(r->hash), "%s", hash);
    new_id(r->id, sizeof(r->id), kind == REC_PI ? "pi" : kind == REC_REFUND ? "re" : "pic");
    uint32_t b = hash_str(key);
    r->next_key = ps->by_key[b];
    ps->by_key[b] = r;
    ps->nrecords++;
    return r;
}

static void rec_free(rec_t *r)
{
    if (r == NULL)
        return;
    json_decref(r->obj);
    json_decref(r->chobj);
    free(r->key);
    free(r->body);
    free(r->event);
    free(r->return_url);
    free(r);
}

/* Removes a PROCESSING record (an error or a lost request: nothing happened). */
static void rec_drop(ps_server_t *ps, rec_t *r)
{
    if (r->pi && r->pi->confirming == r)
        r->pi->confirming = NULL;
    if (r->kind == REC_REFUND && r->pi)
        r->pi->refund_pending -= json_integer_value(json_object_get(r->obj, "amount"));
    rec_t **pp = &ps->by_key[hash_str(r->key)];
    while (*pp && *pp != r)
        pp = &(*pp)->next_key;
    if (*pp)
        *pp = r->next_key;
    ps->nrecords--;
    rec_free(r);
}

static void list_add(ps_server_t *ps, rec_t *r)
{
    uint32_t b = hash_str(r->id);
    r->next_id = ps->by_id[b];
    ps->by_id[b] = r;
    if (ps->nlist == ps->caplist) {
        ps->caplist = ps->caplist ? ps->caplist * 2 : 1024;
        ps->list = cm_xrealloc(ps->list, ps->caplist * sizeof(*ps->list));
    }
    r->pos = ps->nlist;
    ps->list[ps->nlist++] = r;
}

/*
 * The one place a record's state changes, and where a DONE record takes effect (live and
 * on replay alike): an intent joins the id table and the ledger; a confirmation leaves
 * the intent as it made it; a refund adds its amount to the intent's charge.
 */
static void rec_set_state(ps_server_t *ps, rec_t *r, rec_state_t st)
{
    if (st <= r->state)
        return;
    r->state = st;
    if (st != REC_DONE)
        return;
    if (r->kind == REC_PI) {
        list_add(ps, r);
        return;
    }
    rec_t *pi = r->pi;
    if (r->kind == REC_CONFIRM) {
        if (pi && pi->confirming == r)
            pi->confirming = NULL;
        if (pi && r->obj) { /* NULL: a stored 5xx, the intent untouched */
            json_decref(pi->obj);
            pi->obj = json_deep_copy(r->obj);
            if (r->chobj) {
                json_decref(pi->chobj);
                pi->chobj = json_deep_copy(r->chobj);
            }
        }
        return;
    }
    list_add(ps, r);
    if (pi && pi->chobj) {
        json_int_t amount = json_integer_value(json_object_get(r->obj, "amount"));
        json_int_t done =
            json_integer_value(json_object_get(pi->chobj, "amount_refunded")) + amount;
        json_int_t total = json_integer_value(json_object_get(pi->chobj, "amount"));
        json_object_set_new(pi->chobj, "amount_refunded", json_integer(done));
        json_object_set_new(pi->chobj, "refunded", json_boolean(done >= total));
        pi->refund_pending = pi->refund_pending > amount ? pi->refund_pending - amount : 0;
    }
}

/* --- journal lines ----------------------------------------------------------------------- */

static char *journal_line(const rec_t *r)
{
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:s}", "k", rec_kind_names[r->kind], "key", r->key,
                  "hash", r->hash, "id", r->id, "code", r->code, "body", r->body ? r->body : "");
    if (r->obj)
        json_object_set(o, "obj", r->obj);
    if (r->chobj)
        json_object_set(o, "charge_obj", r->chobj);
    if (r->pi)
        json_object_set_new(o, "pi", json_string(r->pi->id));
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    char *line = cm_xasprintf("%s\n", text);
    free(text);
    return line;
}

static int kind_parse(const char *k, rec_kind_t *out)
{
    for (int i = 0; k && i < 3; i++)
        if (strcmp(k, rec_kind_names[i]) == 0) {
            *out = (rec_kind_t)i;
            return 0;
        }
    return -1;
}

/* One journal line back into a record; -1 for a line that is not one of ours. */
static int replay_line(json_t *o, void *arg)
{
    ps_server_t *ps = arg;
    rec_kind_t kind;
    const char *key = json_string_value(json_object_get(o, "key"));
    const char *hash = json_string_value(json_object_get(o, "hash"));
    const char *id = json_string_value(json_object_get(o, "id"));
    const char *body = json_string_value(json_object_get(o, "body"));
    const char *pid = json_string_value(json_object_get(o, "pi"));
    json_t *obj = json_object_get(o, "obj");
    json_t *chobj = json_object_get(o, "charge_obj");
    if (kind_parse(json_string_value(json_object_get(o, "k")), &kind) != 0 || key == NULL ||
        hash == NULL || id == NULL || body == NULL || find_key(ps, key) != NULL)
        return -1;
    rec_t *pi = pid ? find_id(ps, pid) : NULL;
    if ((kind != REC_PI && pi == NULL) || ((kind != REC_CONFIRM) && !json_is_object(obj)))
        return -1;
    rec_t *r = rec_new(ps, kind, key, hash);
    snprintf(r->id, sizeof(r->id), "%s", id);
    r->code = (int)json_integer_value(json_object_get(o, "code"));
    r->body = cm_xstrdup(body);
    r->obj = json_is_object(obj) ? json_incref(obj) : NULL;
    r->chobj = json_is_object(chobj) ? json_incref(chobj) : NULL;
    r->pi = pi;
    const char *ev = json_string_value(json_object_get(json_object_get(obj, "metadata"), "event"));
    if (ev == NULL && pi)
        ev = pi->event;
    r->event = ev ? cm_xstrdup(ev) : NULL;
    rec_set_state(ps, r, REC_DONE);
    return 0;
}

/* --- answers ------------------------------------------------------------------------- */

/* Stripe's error object: {"error":{"type","code","message"[,"param"]}} plus extra members
 * (decline_code, payment_intent, …) inside; extra is stolen. */
static char *error_body(const char *type, const char *code, const char *message, json_t *extra)
{
    json_t *e = json_pack("{s:s, s:s, s:s}", "type", type, "code", code, "message", message);
    if (extra) {
        json_object_update(e, extra);
        json_decref(extra);
    }
    json_t *o = json_pack("{s:o}", "error", e);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static void send_text(cm_req_t *req, int code, const char *body, bool replayed)
{
    if (replayed)
        cm_http_add_header(req, "Idempotent-Replayed", "true");
    cm_http_send_body(req, code, "application/json", body, strlen(body), false);
}

static void send_error_x(cm_req_t *req, int code, const char *type, const char *ecode,
                         const char *message, json_t *extra)
{
    char *b = error_body(type, ecode, message, extra);
    send_text(req, code, b, false);
    free(b);
}

static void send_error(cm_req_t *req, int code, const char *type, const char *ecode,
                       const char *message)
{
    send_error_x(req, code, type, ecode, message, NULL);
}

static void send_param_error(cm_req_t *req, const char *ecode, const char *param,
                             const char *message)
{
    send_error_x(req, 400, "invalid_request_error", ecode, message,
                 json_pack("{s:s}", "param", param));
}

/* --- pending requests ---------------------------------------------------------------- */

static void on_pending_timer(evutil_socket_t fd, short what, void *arg);

static pending_t *pending_new(ps_server_t *ps, cm_req_t *req, rec_t *rec, outcome_t out)
{
    pending_t *p = cm_xcalloc(1, sizeof(*p));
    p->ps = ps;
    p->req = req;
    p->rec = rec;
    p->outcome = out;
    p->timer = evtimer_new(ps->base, on_pending_timer, p);
    p->next = ps->pending;
    if (ps->pending)
        ps->pending->prev = p;
    ps->pending = p;
    return p;
}

static void pending_free(pending_t *p)
{
    ps_server_t *ps = p->ps;
    if (p->prev)
        p->prev->next = p->next;
    else
        ps->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    event_free(p->timer);
    json_decref(p->arrive_body);
    free(p->arrive_key);
    free(p->arrive_pi);
    free(p->redirect);
    free(p);
}

static void pending_arm(pending_t *p, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(p->timer, &tv);
}

/* Answers with the record's stored answer and ends the pending request. */
static void send_page(cm_req_t *req, int code, const char *title, const char *text);

static void pending_answer_stored(pending_t *p)
{
    if (p->redirect && p->redirect[0]) {
        cm_http_add_header(p->req, "Location", p->redirect);
        send_page(p->req, 302, "Authentication answered", "Returning to the shop.");
    } else if (p->redirect) { /* no return_url: nowhere to go back to */
        send_page(p->req, 200, "Authentication answered", "You can close this page.");
    } else if (!p->silent) {
        send_text(p->req, p->rec->code, p->rec->body, false);
    }
    pending_free(p);
}

/* A committed record's webhook: an intent's new status, a refund of its charge. */
static void announce(ps_server_t *ps, const rec_t *r)
{
    if (ps->hooks == NULL || r->pi == NULL)
        return;
    if (r->kind == REC_REFUND) {
        if (r->pi->chobj)
            ps_webhook_send(ps->hooks, "charge.refunded", r->pi->chobj);
        return;
    }
    if (r->kind != REC_CONFIRM || r->obj == NULL)
        return;
    static const char *const types[][2] = {
        {"succeeded", "payment_intent.succeeded"},
        {"requires_action", "payment_intent.requires_action"},
        {"requires_payment_method", "payment_intent.payment_failed"},
        {"canceled", "payment_intent.canceled"},
    };
    const char *st = json_string_value(json_object_get(r->obj, "status"));
    for (size_t i = 0; st && i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(st, types[i][0]) == 0)
            ps_webhook_send(ps->hooks, types[i][1], r->obj);
}

static void on_durable(void *arg)
{
    pending_t *p = arg;
    rec_set_state(p->ps, p->rec, REC_DONE);
    announce(p->ps, p->rec);
    /* A late answer waits for its timer (which answers), unless that already fired; until
     * it leaves, whoever asks sees the intent "processing" (the charge is made, but nobody
     * has been told: a lookup answers only once the late answer is out). */
    if (p->late_wait && evtimer_pending(p->timer, NULL)) {
        if (p->rec->pi)
            p->rec->pi->confirming = p->rec;
        return;
    }
    pending_answer_stored(p);
}

static void commit(pending_t *p)
{
    rec_set_state(p->ps, p->rec, REC_WRITING);
    ps_journal_append(p->ps->j, journal_line(p->rec), on_durable, p);
}

/* --- objects ------------------------------------------------------------------------- */

static json_int_t now_s(void)
{
    return (json_int_t)(cm_time_wall_ms() / 1000);
}

/* A new PaymentIntent from a validated create body. */
static json_t *pi_obj(const rec_t *r, const json_t *body, json_int_t amount)
{
    char secret[80];
    new_id(secret, sizeof(secret), "secret");
    char *cs = cm_xasprintf("%s_%s", r->id, secret);
    const char *pm = json_string_value(json_object_get(body, "payment_method"));
    json_t *types = json_object_get(body, "payment_method_types");
    json_t *md = json_object_get(body, "metadata");
    const char *desc = json_string_value(json_object_get(body, "description"));
    char cur[4] = {0};
    for (size_t i = 0; i < 3; i++)
        cur[i] =
            (char)tolower((unsigned char)json_string_value(json_object_get(body, "currency"))[i]);
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:I, s:b, s:s, s:s, s:s, s:o, s:n, s:n, s:n, "
        "s:n, s:n, s:o, s:o}",
        "id", r->id, "object", "payment_intent", "amount", amount, "amount_capturable",
        (json_int_t)0, "amount_received", (json_int_t)0, "currency", cur, "status",
        pm ? "requires_confirmation" : "requires_payment_method", "created", now_s(), "livemode", 0,
        "capture_method", "automatic", "confirmation_method", "automatic", "client_secret", cs,
        "payment_method", pm ? json_string(pm) : json_null(), "latest_charge", "next_action",
        "last_payment_error", "canceled_at", "cancellation_reason", "payment_method_types",
        json_is_array(types) ? json_deep_copy(types) : json_pack("[s]", "card"), "metadata",
        json_is_object(md) ? json_deep_copy(md) : json_object());
    json_object_set_new(o, "description", desc ? json_string(desc) : json_null());
    free(cs);
    return o;
}

/* The charge a confirmation made of pi (status "succeeded" or "failed"). */
static json_t *charge_obj(const json_t *pi, bool ok)
{
    char id[ID_LEN];
    new_id(id, sizeof(id), "ch");
    json_int_t amount = json_integer_value(json_object_get(pi, "amount"));
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:b, s:b, s:b, s:s, s:O, s:O, s:I, s:O, s:O}", "id",
                     id, "object", "charge", "amount", amount, "amount_captured", ok ? amount : 0,
                     "amount_refunded", (json_int_t)0, "refunded", 0, "paid", ok, "captured", ok,
                     "status", ok ? "succeeded" : "failed", "payment_intent",
                     json_object_get(pi, "id"), "currency", json_object_get(pi, "currency"),
                     "created", now_s(), "metadata", json_object_get(pi, "metadata"),
                     "payment_method", json_object_get(pi, "payment_method"));
}

/* Settles the intent object o by its new charge chobj: "succeeded", or back to
 * "requires_payment_method" with lpe (a new reference, taken) as its last_payment_error. */
static void settle_intent(json_t *o, const json_t *chobj, json_t *lpe)
{
    json_object_set(o, "latest_charge", json_object_get(chobj, "id"));
    json_object_set_new(o, "next_action", json_null());
    if (lpe == NULL) {
        json_object_set_new(o, "status", json_string("succeeded"));
        json_object_set(o, "amount_received", json_object_get(o, "amount"));
        json_object_set_new(o, "last_payment_error", json_null());
    } else {
        json_object_set_new(o, "status", json_string("requires_payment_method"));
        json_object_set_new(o, "last_payment_error", lpe);
    }
}

/* The intent as a client sees it now: "processing" while a confirmation runs, its charge
 * expanded when asked (expand[]=latest_charge). A new reference. */
static json_t *pi_view(const rec_t *pi, bool expand)
{
    json_t *o = json_deep_copy(pi->obj);
    if (pi->confirming)
        json_object_set_new(o, "status", json_string("processing"));
    if (expand && pi->chobj)
        json_object_set(o, "latest_charge", pi->chobj);
    return o;
}

/* --- outcomes ------------------------------------------------------------------------ */

/* "pm_sim_X" and "tok_sim_X" name the same simulated behaviour X. */
static const char *sim_suffix(const char *pm)
{
    if (pm == NULL)
        return NULL;
    if (strncmp(pm, "pm_sim_", 7) == 0)
        return pm + 7;
    if (strncmp(pm, "tok_sim_", 8) == 0)
        return pm + 8;
    return NULL;
}

static bool pm_declines(const char *pm)
{
    return pm && (strncmp(pm, "pm_card_chargeDeclined", 22) == 0 ||
                  strncmp(pm, "pm_card_visa_chargeDeclined", 27) == 0 ||
                  strcmp(pm, "tok_chargeDeclined") == 0 || strcmp(pm, "pm_sim_decline") == 0);
}

static bool pm_needs_action(const char *pm)
{
    return pm && (strcmp(pm, "pm_card_threeDSecure2Required") == 0 ||
                  strcmp(pm, "pm_card_authenticationRequired") == 0 ||
                  strcmp(pm, "tok_threeDSecure2Required") == 0 || strcmp(pm, "pm_sim_action") == 0);
}

/* How long a confirmation still sits in the network (pm_sim_arrive_<ms>), or -1. */
static int64_t arrive_ms(const char *pm)
{
    const char *x = sim_suffix(pm);
    int64_t ms;
    if (x && strncmp(x, "arrive_", 7) == 0 && cm_parse_i64(x + 7, 0, 3600000, &ms) == 0)
        return ms;
    return -1;
}

static outcome_t draw_outcome(ps_server_t *ps, const char *pm, rec_t *pi, int64_t *latency_ms)
{
    const settings_t *s = &ps->set;
    int64_t span = s->latency_max_ms - s->latency_min_ms;
    *latency_ms = s->latency_min_ms + (span > 0 ? (int64_t)(rnd(ps) % (uint64_t)(span + 1)) : 0);
    if (pm_declines(pm))
        return OUT_DECLINE;
    if (pm_needs_action(pm))
        return OUT_ACTION;
    const char *x = sim_suffix(pm);
    if (x) {
        int64_t d;
        if (strcmp(x, "error") == 0)
            return OUT_ERROR;
        if (strcmp(x, "error_once") == 0) {
            if (pi->errored_once)
                return OUT_SUCCEED;
            pi->errored_once = true;
            return OUT_ERROR;
        }
        if (strcmp(x, "late") == 0)
            return OUT_LATE;
        if (strcmp(x, "lost") == 0)
            return OUT_LOST;
        if (strncmp(x, "arrive_", 7) == 0) {
            *latency_ms = 0;
            return OUT_SUCCEED;
        }
        if (strncmp(x, "delay_", 6) == 0 && cm_parse_i64(x + 6, 0, 3600000, &d) == 0) {
            *latency_ms = d;
            return OUT_SUCCEED;
        }
    }
    double v = rnd01(ps);
    if (v < s->timeout_rate)
        return s->timeout_mode == TIMEOUT_LATE ? OUT_LATE : OUT_LOST;
    v -= s->timeout_rate;
    if (v < s->error_rate)
        return OUT_ERROR;
    v -= s->error_rate;
    if (v < s->decline_rate)
        return OUT_DECLINE;
    return OUT_SUCCEED;
}

/* Decides a confirmation now that its latency has passed. */
static void finish_confirm(pending_t *p)
{
    ps_server_t *ps = p->ps;
    rec_t *r = p->rec;
    rec_t *pi = r->pi;
    if (p->outcome == OUT_LOST) {
        /* Nothing was charged: forget the key, answer an error nobody may hear. */
        rec_drop(ps, r);
        if (!p->silent)
            send_error(p->req, 503, "api_error", "simulated_timeout",
                       "simulated lost request; nothing was charged");
        pending_free(p);
        return;
    }
    if (p->outcome == OUT_ERROR) {
        /* Stripe stores a 500 under its key like any answer: the intent is untouched. */
        r->code = 500;
        r->body = error_body("api_error", "simulated_error",
                             "simulated provider error; nothing was charged", NULL);
        commit(p);
        return;
    }
    json_t *o = json_deep_copy(pi->obj);
    json_decref(r->obj);
    r->obj = o;
    if (p->outcome == OUT_ACTION) {
        /* The challenge page's address carries a secret of its own: only whoever was sent
         * there (the buyer's browser) can answer it. */
        char token[ID_LEN];
        new_id(token, sizeof(token), "acs");
        char *url =
            cm_xasprintf("%s://%s:%d/v1/sim/authenticate/%s?token=%s", ps->tls ? "https" : "http",
                         ps->cfg.listen_addr, ps_server_port(ps), pi->id, token);
        json_object_set_new(o, "status", json_string("requires_action"));
        json_object_set_new(o, "next_action",
                            json_pack("{s:s, s:{s:s, s:o}}", "type", "redirect_to_url",
                                      "redirect_to_url", "url", url, "return_url",
                                      r->return_url ? json_string(r->return_url) : json_null()));
        free(url);
        r->code = 200;
        r->body = json_dumps(o, JSON_COMPACT);
        commit(p);
        return;
    }
    bool ok = p->outcome != OUT_DECLINE;
    r->chobj = charge_obj(o, ok);
    if (ok) {
        settle_intent(o, r->chobj, NULL);
        r->code = 200;
        r->body = json_dumps(o, JSON_COMPACT);
    } else {
        settle_intent(o, r->chobj,
                      json_pack("{s:s, s:s, s:s, s:s, s:O}", "type", "card_error", "code",
                                "card_declined", "decline_code", "generic_decline", "message",
                                "Your card was declined.", "charge",
                                json_object_get(r->chobj, "id")));
        r->code = 402;
        r->body =
            error_body("card_error", "card_declined", "Your card was declined.",
                       json_pack("{s:s, s:O, s:O}", "decline_code", "generic_decline", "charge",
                                 json_object_get(r->chobj, "id"), "payment_intent", o));
    }
    commit(p);
}

static void confirm_arrived(ps_server_t *ps, cm_req_t *req, const char *key, const char *pi_id,
                            json_t *body);

static void on_pending_timer(evutil_socket_t fd, short what, void *arg)
{
    pending_t *p = arg;
    if (p->rec == NULL && p->arrive_body == NULL) { /* lost on its way in */
        send_error(p->req, 503, "api_error", "simulated_timeout",
                   "simulated lost request; nothing was charged");
        pending_free(p);
        return;
    }
    if (p->rec == NULL) {
        /* A delayed confirmation reaches the provider now. */
        ps_server_t *ps = p->ps;
        cm_req_t *req = p->req;
        json_t *body = p->arrive_body;
        char *key = p->arrive_key, *pid = p->arrive_pi;
        p->arrive_body = NULL;
        p->arrive_key = p->arrive_pi = NULL;
        pending_free(p);
        confirm_arrived(ps, req, key, pid, body);
        json_decref(body);
        free(key);
        free(pid);
        return;
    }
    if (p->late_wait) {
        if (p->rec->state == REC_DONE) {
            if (p->rec->pi && p->rec->pi->confirming == p->rec)
                p->rec->pi->confirming = NULL;
            pending_answer_stored(p);
        }
        return; /* still writing: on_durable answers */
    }
    if (p->rec->kind == REC_CONFIRM) {
        finish_confirm(p);
        return;
    }
    commit(p);
}

/* --- request helpers ----------------------------------------------------------------- */

static bool authorized(ps_server_t *ps, cm_req_t *req)
{
    if (ps->cfg.api_key == NULL)
        return true;
    size_t len = 0;
    const char *tok = cm_http_bearer(req, &len);
    size_t want = strlen(ps->cfg.api_key);
    if (tok == NULL)
        return false;
    unsigned char diff = (unsigned char)(len != want);
    for (size_t i = 0; i < want; i++)
        diff |= (unsigned char)(ps->cfg.api_key[i] ^ (i < len ? tok[i] : 0));
    return diff == 0;
}

static bool check_auth(ps_server_t *ps, cm_req_t *req)
{
    if (authorized(ps, req))
        return true;
    send_error(req, 401, "invalid_request_error", "api_key_invalid", "Invalid API Key provided.");
    return false;
}

/* The request identity for idempotency: path + canonical body. */
static void request_hash(const char *path, const json_t *body, char out[65])
{
    char *canon = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    char *ident = cm_xasprintf("%s\n%s", path, canon ? canon : "");
    cm_tls_sha256_hex(ident, strlen(ident), out);
    free(ident);
    free(canon);
}

/*
 * Stripe's idempotency gate: true when it answered (a replay of the stored answer, other
 * parameters under the key, the key's request still running), false when the key is new.
 */
static bool idempotency_gate(ps_server_t *ps, cm_req_t *req, const char *key, const char *hash)
{
    rec_t *r = find_key(ps, key);
    if (r == NULL)
        return false;
    if (strcmp(r->hash, hash) != 0) {
        send_error(req, 400, "idempotency_error", "idempotency_key_reused",
                   "Keys for idempotent requests can only be used with the same parameters "
                   "they were first used with.");
    } else if (r->state != REC_DONE) {
        send_error(req, 409, "idempotency_error", "idempotency_key_in_use",
                   "There is currently another in-progress request using this Idempotent "
                   "Key.");
    } else {
        send_text(req, r->code, r->body, true);
    }
    return true;
}

/* The parameters an operation takes: anything else is Stripe's parameter_unknown. */
static bool params_known(cm_req_t *req, const json_t *body, const char *const *known)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        bool found = false;
        for (size_t i = 0; known[i] && !found; i++)
            found = strcmp(k, known[i]) == 0;
        if (!found) {
            char msg[160];
            snprintf(msg, sizeof(msg), "Received unknown parameter: %.100s", k);
            send_param_error(req, "parameter_unknown", k, msg);
            return false;
        }
    }
    return true;
}

/*
 * Reads a POST: the key, the form body. Stripe's Idempotency-Key is optional; without one
 * the request gets a key of its own (never replayed). Answers and returns NULL on a bad
 * request. *key points into keybuf or the request.
 */
static json_t *read_mutation(ps_server_t *ps, cm_req_t *req, const char **key, char *keybuf,
                             size_t keylen)
{
    if (!check_auth(ps, req))
        return NULL;
    *key = cm_http_header(req, "Idempotency-Key");
    if (*key == NULL) {
        new_id(keybuf, keylen, " auto"); /* a space: no client key has one at the front */
        *key = keybuf;
    } else if (!cm_parse_idem_key(*key)) {
        send_error(req, 400, "invalid_request_error", "idempotency_key_invalid",
                   "an Idempotency-Key header is 1-255 visible ASCII characters");
        return NULL;
    }
    size_t len = 0;
    const char *text = cm_http_body(req, &len);
    if (len > MAX_BODY) {
        send_error(req, 400, "invalid_request_error", "parameter_invalid", "body too large");
        return NULL;
    }
    char bad[80];
    json_t *b = ps_form_parse(text ? text : "", len, bad, sizeof(bad));
    if (b == NULL) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "Invalid form body near \"%s\" (application/x-www-form-urlencoded expected)", bad);
        send_error(req, 400, "invalid_request_error", "parameter_invalid", msg);
        return NULL;
    }
    if (ps->nrecords >= (size_t)ps->cfg.max_records) {
        json_decref(b);
        send_error(req, 503, "api_error", "capacity", "the simulator is full (max_records)");
        return NULL;
    }
    return b;
}

static bool metadata_ok(cm_req_t *req, const json_t *md)
{
    if (md == NULL)
        return true;
    if (!json_is_object(md) || json_object_size(md) > 50) {
        send_param_error(req, "parameter_invalid_object", "metadata",
                         "metadata is an object of up to 50 string values");
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)md, k, v)
    {
        if (!json_is_string(v) || strlen(k) > 40 || strlen(json_string_value(v)) > 500) {
            send_param_error(req, "parameter_invalid_string", "metadata",
                             "metadata keys are up to 40 characters, values up to 500");
            return false;
        }
    }
    return true;
}

/* --- endpoints ----------------------------------------------------------------------- */

static void start_confirm(ps_server_t *ps, cm_req_t *req, rec_t *pi, const char *key,
                          const char *hash, const json_t *body, bool silent);

static const char *const create_params[] = {"amount",
                                            "currency",
                                            "payment_method",
                                            "payment_method_types",
                                            "confirm",
                                            "metadata",
                                            "return_url",
                                            "description",
                                            "capture_method",
                                            "confirmation_method",
                                            "expand",
                                            "receipt_email",
                                            "statement_descriptor_suffix",
                                            NULL};

/* POST /v1/payment_intents */
static void post_intent(ps_server_t *ps, cm_req_t *req)
{
    const char *key = NULL;
    char keybuf[64];
    json_t *body = read_mutation(ps, req, &key, keybuf, sizeof(keybuf));
    if (body == NULL)
        return;
    int64_t amount = 0;
    const char *cur = json_string_value(json_object_get(body, "currency"));
    const char *am = json_string_value(json_object_get(body, "amount"));
    const char *confirm = json_string_value(json_object_get(body, "confirm"));
    const char *cap = json_string_value(json_object_get(body, "capture_method"));
    json_t *pmv = json_object_get(body, "payment_method");
    if (!params_known(req, body, create_params) ||
        !metadata_ok(req, json_object_get(body, "metadata"))) {
    } else if (am == NULL || cm_parse_i64(am, 1, AMOUNT_MAX, &amount) != 0) {
        send_param_error(req, am ? "parameter_invalid_integer" : "parameter_missing", "amount",
                         "amount is a positive integer in the currency's smallest unit");
    } else if (cur == NULL || strlen(cur) != 3) {
        send_param_error(req, cur ? "parameter_invalid_string" : "parameter_missing", "currency",
                         "currency is a three-letter ISO code");
    } else if (pmv && !json_is_string(pmv)) {
        send_param_error(req, "parameter_invalid_string", "payment_method",
                         "payment_method is a PaymentMethod id");
    } else if (confirm && strcmp(confirm, "true") != 0 && strcmp(confirm, "false") != 0) {
        send_param_error(req, "parameter_invalid_boolean", "confirm", "confirm is true or false");
    } else if (cap && strcmp(cap, "automatic") != 0) {
        send_param_error(req, "parameter_invalid_string", "capture_method",
                         "the simulator captures automatically only");
    } else if (json_object_get(body, "return_url") && !(confirm && strcmp(confirm, "true") == 0)) {
        send_param_error(req, "parameter_invalid_string", "return_url",
                         "return_url can only be passed when confirm=true");
    } else {
        bool now = confirm && strcmp(confirm, "true") == 0;
        char hash[65];
        request_hash("/v1/payment_intents", body, hash);
        if (idempotency_gate(ps, req, key, hash)) {
            json_decref(body);
            return;
        }
        /* With confirm=true the intent is one record and the confirmation, which holds the
         * request's key and answer, another (the intent then has an internal key). */
        char ikey[80];
        snprintf(ikey, sizeof(ikey), " intent %s", key);
        rec_t *r = rec_new(ps, REC_PI, now ? ikey : key, hash);
        r->obj = pi_obj(r, body, (json_int_t)amount);
        const char *ev =
            json_string_value(json_object_get(json_object_get(body, "metadata"), "event"));
        r->event = ev ? cm_xstrdup(ev) : NULL;
        r->code = 200;
        r->body = now ? cm_xstrdup("") : json_dumps(r->obj, JSON_COMPACT);
        pending_t *p = pending_new(ps, req, r, OUT_SUCCEED);
        p->silent = now;
        commit(p);
        if (now)
            start_confirm(ps, req, r, key, hash, body, false);
    }
    json_decref(body);
}

static const char *const confirm_params[] = {"payment_method", "return_url", "expand", NULL};

/* The intent named in a path, answering 404 when there is none. */
static rec_t *intent_of(ps_server_t *ps, cm_req_t *req, const char *id)
{
    rec_t *pi = find_id(ps, id);
    if (pi == NULL || pi->kind != REC_PI) {
        char msg[160];
        snprintf(msg, sizeof(msg), "No such payment_intent: '%.64s'", id);
        send_error_x(req, 404, "invalid_request_error", "resource_missing", msg,
                     json_pack("{s:s}", "param", "intent"));
        return NULL;
    }
    return pi;
}

/* POST /v1/payment_intents/{id}/confirm */
static void post_confirm(ps_server_t *ps, cm_req_t *req, const char *id)
{
    const char *key = NULL;
    char keybuf[64];
    json_t *body = read_mutation(ps, req, &key, keybuf, sizeof(keybuf));
    if (body == NULL)
        return;
    rec_t *pi = NULL;
    if (params_known(req, body, confirm_params) && (pi = intent_of(ps, req, id)) != NULL) {
        const char *pm = json_string_value(json_object_get(body, "payment_method"));
        if (pm == NULL)
            pm = json_string_value(json_object_get(pi->obj, "payment_method"));
        int64_t ms = arrive_ms(pm);
        const char *x = sim_suffix(pm);
        if (x && strcmp(x, "lost_once") == 0 && !pi->errored_once && find_key(ps, key) == NULL) {
            /* Lost in the network on its way in: the provider never sees it, the client
             * hears nothing until timeout_ms; the intent's next confirmation goes through. */
            pi->errored_once = true;
            pending_t *p = pending_new(ps, req, NULL, OUT_LOST);
            pending_arm(p, ps->set.timeout_ms);
        } else if (ms >= 0 && find_key(ps, key) == NULL) {
            /* Held in the network: the provider sees nothing of it until the timer fires. */
            pending_t *p = pending_new(ps, req, NULL, OUT_SUCCEED);
            p->arrive_body = json_incref(body);
            p->arrive_key = cm_xstrdup(key);
            p->arrive_pi = cm_xstrdup(id);
            pending_arm(p, ms);
        } else {
            confirm_arrived(ps, req, key, id, body);
        }
    }
    json_decref(body);
}

/* A valid confirmation as it reaches the provider (body borrowed). */
static void confirm_arrived(ps_server_t *ps, cm_req_t *req, const char *key, const char *pi_id,
                            json_t *body)
{
    char path[128], hash[65];
    snprintf(path, sizeof(path), "/v1/payment_intents/%s/confirm", pi_id);
    request_hash(path, body, hash);
    if (idempotency_gate(ps, req, key, hash))
        return;
    rec_t *pi = intent_of(ps, req, pi_id);
    if (pi == NULL)
        return;
    start_confirm(ps, req, pi, key, hash, body, false);
}

/* Confirms pi under key: refused unless it awaits confirmation (or a new payment method). */
static void start_confirm(ps_server_t *ps, cm_req_t *req, rec_t *pi, const char *key,
                          const char *hash, const json_t *body, bool silent)
{
    const char *st = json_string_value(json_object_get(pi->obj, "status"));
    const char *pm = json_string_value(json_object_get(body, "payment_method"));
    bool confirmable =
        pi->confirming == NULL && (strcmp(st, "requires_confirmation") == 0 ||
                                   (strcmp(st, "requires_payment_method") == 0 && pm != NULL));
    if (!confirmable) {
        json_t *view = pi_view(pi, false);
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "You cannot confirm this PaymentIntent because it has a status of %s.",
                 json_string_value(json_object_get(view, "status")));
        send_error_x(req, 400, "invalid_request_error", "payment_intent_unexpected_state", msg,
                     json_pack("{s:o}", "payment_intent", view));
        return;
    }
    if (pm) {
        json_object_set_new(pi->obj, "payment_method", json_string(pm));
    } else if (json_is_null(json_object_get(pi->obj, "payment_method"))) {
        send_param_error(req, "payment_intent_unexpected_state", "payment_method",
                         "You cannot confirm this PaymentIntent because it's missing a payment "
                         "method.");
        return;
    }
    const char *ru = json_string_value(json_object_get(body, "return_url"));
    rec_t *r = rec_new(ps, REC_CONFIRM, key, hash);
    r->return_url = ru ? cm_xstrdup(ru) : NULL;
    r->pi = pi;
    r->event = pi->event ? cm_xstrdup(pi->event) : NULL;
    pi->confirming = r;
    int64_t latency = 0;
    outcome_t out = draw_outcome(ps, json_string_value(json_object_get(pi->obj, "payment_method")),
                                 pi, &latency);
    pending_t *p = pending_new(ps, req, r, out);
    p->silent = silent;
    cm_log(CM_LOG_DEBUG, "confirm %s key %s: outcome %d latency %lld ms", pi->id, key, (int)out,
           (long long)latency);
    if (out == OUT_LATE) {
        /* Charged at once; the answer waits for timeout_ms (armed first, so on_durable
         * knows a timer is running). */
        pending_arm(p, ps->set.timeout_ms);
        p->late_wait = true;
        finish_confirm(p);
        return;
    }
    pending_arm(p, out == OUT_LOST ? ps->set.timeout_ms : latency);
}

/* The query string as Stripe reads it (created[gte]=…, expand[]=…): a new object, or NULL
 * after answering 400. */
static json_t *read_query(cm_req_t *req)
{
    const char *qs = cm_http_uri_query(req);
    char bad[80];
    json_t *q = ps_form_parse(qs ? qs : "", qs ? strlen(qs) : 0, bad, sizeof(bad));
    if (q == NULL)
        send_error(req, 400, "invalid_request_error", "parameter_invalid", "malformed query");
    return q;
}

static bool want_expand(const json_t *q, const char *what)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(q, "expand"), i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), what) == 0)
            return true;
    }
    return false;
}

/* GET /v1/payment_intents/{id}[?expand[]=latest_charge] */
static void get_intent(ps_server_t *ps, cm_req_t *req, const char *id)
{
    if (!check_auth(ps, req))
        return;
    json_t *q = read_query(req);
    if (q == NULL)
        return;
    rec_t *pi = intent_of(ps, req, id);
    if (pi)
        cm_http_send_json(req, 200, pi_view(pi, want_expand(q, "latest_charge")));
    json_decref(q);
}

/* One created[…] bound of a list query; 0 when absent or valid, -1 when malformed. */
static int bound(const json_t *q, const char *name, int64_t *out)
{
    json_t *c = json_object_get(q, "created");
    if (c == NULL)
        return 0;
    if (!json_is_object(c))
        return -1;
    json_t *v = json_object_get(c, name);
    return v == NULL ? 0 : cm_parse_i64(json_string_value(v), 0, INT64_MAX / 2, out);
}

/* GET /v1/payment_intents?created[gte|gt|lte|lt]=…&limit=…&starting_after=…: newest first. */
static void list_intents(ps_server_t *ps, cm_req_t *req)
{
    if (!check_auth(ps, req))
        return;
    json_t *q = read_query(req);
    if (q == NULL)
        return;
    int64_t gte = 0, gt = -1, lte = INT64_MAX / 2, lt = INT64_MAX / 2, limit = 10;
    const char *lim = json_string_value(json_object_get(q, "limit"));
    const char *after = json_string_value(json_object_get(q, "starting_after"));
    bool expand = want_expand(q, "data.latest_charge");
    if (bound(q, "gte", &gte) || bound(q, "gt", &gt) || bound(q, "lte", &lte) ||
        bound(q, "lt", &lt) || (lim && cm_parse_i64(lim, 1, LIST_MAX, &limit) != 0)) {
        send_param_error(req, "parameter_invalid_integer", lim ? "limit" : "created",
                         "created[…] are unix times, limit an integer from 1 to 100");
        json_decref(q);
        return;
    }
    size_t i = ps->nlist;
    if (after) {
        rec_t *a = find_id(ps, after);
        if (a == NULL || a->kind != REC_PI || a->state != REC_DONE) {
            send_param_error(req, "resource_missing", "starting_after",
                             "starting_after names no payment_intent");
            json_decref(q);
            return;
        }
        i = a->pos;
    }
    json_decref(q);
    json_t *data = json_array();
    bool more = false;
    while (i-- > 0) {
        rec_t *r = ps->list[i];
        json_int_t c = json_integer_value(json_object_get(r->obj, "created"));
        if (r->kind != REC_PI || c < gte || c <= gt || c > lte || c >= lt)
            continue;
        if ((int64_t)json_array_size(data) == limit) {
            more = true;
            break;
        }
        json_array_append_new(data, pi_view(r, expand));
    }
    cm_http_send_json(req, 200,
                      json_pack("{s:s, s:s, s:o, s:b}", "object", "list", "url",
                                "/v1/payment_intents", "data", data, "has_more", more));
}

static const char *const refund_params[] = {"payment_intent", "amount", "reason",
                                            "metadata",       "expand", NULL};

/* POST /v1/refunds {payment_intent[, amount]} */
static void post_refund(ps_server_t *ps, cm_req_t *req)
{
    const char *key = NULL;
    char keybuf[64];
    json_t *body = read_mutation(ps, req, &key, keybuf, sizeof(keybuf));
    if (body == NULL)
        return;
    const char *pid = json_string_value(json_object_get(body, "payment_intent"));
    const char *am = json_string_value(json_object_get(body, "amount"));
    int64_t amount = 0;
    char hash[65];
    rec_t *pi = NULL;
    if (!params_known(req, body, refund_params) ||
        !metadata_ok(req, json_object_get(body, "metadata")))
        goto out;
    if (pid == NULL) {
        send_param_error(req, "parameter_missing", "payment_intent",
                         "payment_intent (the PaymentIntent id) is required");
        goto out;
    }
    if (am && cm_parse_i64(am, 1, AMOUNT_MAX, &amount) != 0) {
        send_param_error(req, "parameter_invalid_integer", "amount",
                         "amount is a positive integer");
        goto out;
    }
    request_hash("/v1/refunds", body, hash);
    if (idempotency_gate(ps, req, key, hash))
        goto out;
    pi = find_id(ps, pid);
    if (pi == NULL || pi->kind != REC_PI) {
        char msg[160];
        snprintf(msg, sizeof(msg), "No such payment_intent: '%.64s'", pid);
        send_param_error(req, "resource_missing", "payment_intent", msg);
        goto out;
    }
    const char *st = json_string_value(json_object_get(pi->obj, "status"));
    if (strcmp(st, "succeeded") != 0 || pi->chobj == NULL) {
        send_param_error(req, "payment_intent_unexpected_state", "payment_intent",
                         "This PaymentIntent does not have a successful charge to refund.");
        goto out;
    }
    int64_t total = json_integer_value(json_object_get(pi->chobj, "amount"));
    int64_t left = total - json_integer_value(json_object_get(pi->chobj, "amount_refunded")) -
                   pi->refund_pending;
    if (left <= 0) {
        send_error_x(req, 400, "invalid_request_error", "charge_already_refunded",
                     "Charge has already been refunded.",
                     json_pack("{s:O}", "charge", json_object_get(pi->chobj, "id")));
        goto out;
    }
    if (amount == 0)
        amount = left;
    if (amount > left) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "Refund amount (%lld) is greater than unrefunded amount on charge (%lld)",
                 (long long)amount, (long long)left);
        send_param_error(req, "amount_too_large", "amount", msg);
        goto out;
    }
    if (ps->set.refund_error_rate > 0 && rnd01(ps) < ps->set.refund_error_rate) {
        send_error(req, 500, "api_error", "simulated_error",
                   "simulated provider error; nothing was refunded");
        goto out;
    }
    rec_t *r = rec_new(ps, REC_REFUND, key, hash);
    r->pi = pi;
    pi->refund_pending += amount;
    r->event = pi->event ? cm_xstrdup(pi->event) : NULL;
    const char *reason = json_string_value(json_object_get(body, "reason"));
    json_t *md = json_object_get(body, "metadata");
    r->obj = json_pack(
        "{s:s, s:s, s:I, s:O, s:O, s:s, s:s, s:I, s:o, s:o}", "id", r->id, "object", "refund",
        "amount", (json_int_t)amount, "currency", json_object_get(pi->obj, "currency"), "charge",
        json_object_get(pi->chobj, "id"), "payment_intent", pi->id, "status", "succeeded",
        "created", now_s(), "reason", reason ? json_string(reason) : json_null(), "metadata",
        json_is_object(md) ? json_deep_copy(md) : json_object());
    r->code = 200;
    r->body = json_dumps(r->obj, JSON_COMPACT);
    int64_t latency = 0;
    (void)draw_outcome(ps, NULL, pi, &latency);
    pending_t *p = pending_new(ps, req, r, OUT_SUCCEED);
    pending_arm(p, latency);
out:
    json_decref(body);
}

/* GET /v1/ledger[?event=E] (simulator only): every intent (its charge expanded) and refund. */
static void get_ledger(ps_server_t *ps, cm_req_t *req)
{
    if (!check_auth(ps, req))
        return;
    struct evkeyvalq q;
    if (cm_http_query(req, &q) != 0) {
        send_error(req, 400, "invalid_request_error", "parameter_invalid", "malformed query");
        return;
    }
    const char *ev = evhttp_find_header(&q, "event");
    json_t *intents = json_array(), *refunds = json_array();
    for (size_t i = 0; i < ps->nlist; i++) {
        rec_t *r = ps->list[i];
        if (ev && (r->event == NULL || strcmp(ev, r->event) != 0))
            continue;
        if (r->kind == REC_PI)
            json_array_append_new(intents, pi_view(r, true));
        else
            json_array_append(refunds, r->obj);
    }
    int processing = 0;
    for (pending_t *p = ps->pending; p; p = p->next)
        processing += p->rec && p->rec->state != REC_DONE;
    evhttp_clear_headers(&q);
    cm_http_send_json(req, 200,
                      json_pack("{s:o, s:o, s:i}", "payment_intents", intents, "refunds", refunds,
                                "processing", processing));
}

static json_t *settings_json(const settings_t *s)
{
    return json_pack("{s:I, s:I, s:f, s:f, s:f, s:f, s:s, s:I}", "latency_min_ms",
                     (json_int_t)s->latency_min_ms, "latency_max_ms", (json_int_t)s->latency_max_ms,
                     "decline_rate", s->decline_rate, "error_rate", s->error_rate, "timeout_rate",
                     s->timeout_rate, "refund_error_rate", s->refund_error_rate, "timeout_mode",
                     s->timeout_mode == TIMEOUT_LATE ? "late" : "lost", "timeout_ms",
                     (json_int_t)s->timeout_ms);
}

/* Applies a partial settings document to a copy; NULL on success, else the message. */
static const char *settings_apply(settings_t *s, const json_t *doc)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)doc, k, v)
    {
        if (strcmp(k, "latency_min_ms") == 0 || strcmp(k, "latency_max_ms") == 0 ||
            strcmp(k, "timeout_ms") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 3600000)
                return "latencies and timeout_ms are integers from 0 to 3600000";
            int64_t x = (int64_t)json_integer_value(v);
            if (k[0] == 't')
                s->timeout_ms = x;
            else if (strstr(k, "min"))
                s->latency_min_ms = x;
            else
                s->latency_max_ms = x;
        } else if (strcmp(k, "decline_rate") == 0 || strcmp(k, "error_rate") == 0 ||
                   strcmp(k, "timeout_rate") == 0) {
            if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
                return "rates are numbers from 0 to 1";
            double x = json_number_value(v);
            if (k[0] == 'd')
                s->decline_rate = x;
            else if (k[0] == 'e')
                s->error_rate = x;
            else
                s->timeout_rate = x;
        } else if (strcmp(k, "refund_error_rate") == 0) {
            if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
                return "rates are numbers from 0 to 1";
            s->refund_error_rate = json_number_value(v);
        } else if (strcmp(k, "timeout_mode") == 0) {
            const char *m = json_string_value(v);
            if (m && strcmp(m, "late") == 0)
                s->timeout_mode = TIMEOUT_LATE;
            else if (m && strcmp(m, "lost") == 0)
                s->timeout_mode = TIMEOUT_LOST;
            else
                return "timeout_mode is \"late\" or \"lost\"";
        }
    }
    if (s->latency_min_ms > s->latency_max_ms)
        return "latency_min_ms must not exceed latency_max_ms";
    if (s->decline_rate + s->error_rate + s->timeout_rate > 1.0 + 1e-9)
        return "decline_rate + error_rate + timeout_rate must not exceed 1";
    return NULL;
}

static void settings_endpoint(ps_server_t *ps, cm_req_t *req)
{
    if (!authorized(ps, req)) {
        send_error(req, 401, "invalid_request_error", "unauthorized", "Invalid API key.");
        return;
    }
    cm_http_method_t m = cm_http_method(req);
    if (m == CM_HTTP_PATCH || m == CM_HTTP_PUT || m == CM_HTTP_POST) {
        json_t *doc = cm_http_read_json(req, MAX_BODY, NULL, NULL);
        if (doc == NULL)
            return;
        /* PUT defines the provider completely: what it does not name is the configured
         * default, whatever an earlier PATCH left. PATCH (and POST) change what they name. */
        settings_t s = m == CM_HTTP_PUT ? ps->defaults : ps->set;
        const char *bad = settings_apply(&s, doc);
        json_decref(doc);
        if (bad) {
            send_error(req, 400, "invalid_request_error", "parameter_invalid", bad);
            return;
        }
        ps->set = s;
        cm_log(CM_LOG_INFO, "settings changed");
    } else if (m != CM_HTTP_GET) {
        send_error(req, 405, "invalid_request_error", "method_not_allowed", "GET, PUT or PATCH");
        return;
    }
    cm_http_send_json(req, 200, settings_json(&ps->set));
}

/* How clients use their connections: requests against TLS handshakes (full and resumed)
 * tell whether a client keeps its connections alive and resumes its sessions. */
static void get_stats(ps_server_t *ps, cm_req_t *req)
{
    long hs = 0, resumed = 0;
    cm_tls_server_counts(ps->tls, &hs, &resumed);
    cm_http_send_json(req, 200,
                      json_pack("{s:I, s:I, s:I}", "requests", (json_int_t)ps->requests,
                                "tls_handshakes", (json_int_t)hs, "tls_resumed",
                                (json_int_t)resumed));
}

/* --- 3-D Secure and cancellation --------------------------------------------------------
 *
 * A confirmation that needs the buyer (pm_card_threeDSecure2Required, …) leaves the intent
 * requires_action with next_action.redirect_to_url.url = /v1/sim/authenticate/{id}?token=T:
 * a challenge page (HTML, no script, a CSP that allows nothing but the form) whose Approve
 * and Fail buttons POST the token back. Approve makes the intent succeeded (a charge), Fail
 * requires_payment_method with last_payment_error (a failed charge); either is journaled
 * like a confirmation (an internal key per challenge) and the browser is then sent to the
 * confirmation's return_url (payment_intent and redirect_status added). A wrong token is
 * 403, an intent no longer waiting 409: nothing changes. An unanswered challenge stays
 * requires_action until the client cancels the intent.
 */

static const char PAGE_CSP[] = "default-src 'none'; form-action 'self' http: https:; "
                               "frame-ancestors 'none'; base-uri 'none'";

static void send_page(cm_req_t *req, int code, const char *title, const char *text)
{
    char *html = cm_xasprintf("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                              "<title>%s</title></head><body><h1>%s</h1><p>%s</p></body></html>",
                              title, title, text);
    cm_http_add_header(req, "Content-Security-Policy", PAGE_CSP);
    cm_http_add_header(req, "Cache-Control", "no-store");
    cm_http_send_body(req, code, "text/html; charset=utf-8", html, strlen(html), false);
    free(html);
}

/* The challenge's token, from the intent's next_action url ("" when it waits for none). */
static const char *challenge_token(const rec_t *pi)
{
    const char *st = json_string_value(json_object_get(pi->obj, "status"));
    const json_t *rtu = json_object_get(json_object_get(pi->obj, "next_action"), "redirect_to_url");
    const char *url = json_string_value(json_object_get(rtu, "url"));
    const char *t = url ? strstr(url, "?token=") : NULL;
    if (st == NULL || strcmp(st, "requires_action") != 0 || t == NULL || pi->confirming)
        return "";
    return t + 7;
}

static bool token_equal(const char *want, const char *got)
{
    size_t n = strlen(want);
    if (got == NULL || n == 0 || strlen(got) != n)
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(want[i] ^ got[i]);
    return diff == 0;
}

/* An http(s) URL fit for a Location header (visible ASCII, no spaces), else NULL. */
static const char *return_url_of(const rec_t *pi)
{
    const json_t *rtu = json_object_get(json_object_get(pi->obj, "next_action"), "redirect_to_url");
    const char *u = json_string_value(json_object_get(rtu, "return_url"));
    if (u == NULL || (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) ||
        strlen(u) > 2000)
        return NULL;
    for (const char *c = u; *c; c++)
        if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
            return NULL;
    return u;
}

/* GET /v1/sim/authenticate/{id}?token=T: the challenge page. */
static void get_challenge(ps_server_t *ps, cm_req_t *req, const char *id)
{
    json_t *q = read_query(req);
    if (q == NULL)
        return;
    rec_t *pi = find_id(ps, id);
    const char *got = json_string_value(json_object_get(q, "token"));
    if (pi == NULL || pi->kind != REC_PI) {
        send_page(req, 404, "No such payment", "There is no payment to authenticate here.");
    } else if (challenge_token(pi)[0] == '\0') {
        send_page(req, 409, "Already answered", "This payment does not wait for you any more.");
    } else if (!token_equal(challenge_token(pi), got)) {
        send_page(req, 403, "Not yours", "This authentication link is not valid.");
    } else {
        json_int_t amount = json_integer_value(json_object_get(pi->obj, "amount"));
        const char *cur = json_string_value(json_object_get(pi->obj, "currency"));
        char *html = cm_xasprintf(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>Authenticate your payment</title></head><body>"
            "<h1>Authenticate your payment</h1><p>Payment <code>%s</code>: %lld %s (minor "
            "units). This is the simulator's test page.</p>"
            "<form method=\"post\" action=\"/v1/sim/authenticate/%s\">"
            "<input type=\"hidden\" name=\"token\" value=\"%s\">"
            "<button type=\"submit\" name=\"answer\" value=\"approve\" id=\"approve\">Approve"
            "</button> <button type=\"submit\" name=\"answer\" value=\"fail\" id=\"fail\">Fail"
            "</button></form></body></html>",
            pi->id, (long long)amount, cur ? cur : "", pi->id, got);
        cm_http_add_header(req, "Content-Security-Policy", PAGE_CSP);
        cm_http_add_header(req, "Cache-Control", "no-store");
        cm_http_send_body(req, 200, "text/html; charset=utf-8", html, strlen(html), false);
        free(html);
    }
    json_decref(q);
}

/* POST /v1/sim/authenticate/{id} token=T&answer=approve|fail */
static void post_challenge(ps_server_t *ps, cm_req_t *req, const char *id)
{
    size_t len = 0;
    const char *text = cm_http_body(req, &len);
    char bad[80];
    json_t *b = len > MAX_BODY ? NULL : ps_form_parse(text ? text : "", len, bad, sizeof(bad));
    if (b == NULL) {
        send_page(req, 400, "Bad answer", "The form could not be read.");
        return;
    }
    rec_t *pi = find_id(ps, id);
    const char *got = json_string_value(json_object_get(b, "token"));
    const char *answer = json_string_value(json_object_get(b, "answer"));
    bool approve = answer && strcmp(answer, "approve") == 0;
    if (pi == NULL || pi->kind != REC_PI) {
        send_page(req, 404, "No such payment", "There is no payment to authenticate here.");
    } else if (challenge_token(pi)[0] == '\0') {
        send_page(req, 409, "Already answered", "This payment does not wait for you any more.");
    } else if (!token_equal(challenge_token(pi), got)) {
        send_page(req, 403, "Not yours", "This authentication link is not valid.");
    } else if (!approve && !(answer && strcmp(answer, "fail") == 0)) {
        send_page(req, 400, "Bad answer", "answer is approve or fail.");
    } else if (ps->nrecords >= (size_t)ps->cfg.max_records) {
        send_page(req, 503, "Busy", "The simulator is full (max_records).");
    } else {
        char key[128];
        snprintf(key, sizeof(key), " auth %s %s", pi->id, got);
        rec_t *r = rec_new(ps, REC_CONFIRM, key, "");
        r->pi = pi;
        r->event = pi->event ? cm_xstrdup(pi->event) : NULL;
        pi->confirming = r;
        json_t *o = json_deep_copy(pi->obj);
        r->obj = o;
        r->chobj = charge_obj(o, approve);
        settle_intent(o, r->chobj,
                      approve ? NULL
                              : json_pack("{s:s, s:s, s:s, s:O}", "type", "card_error", "code",
                                          "payment_intent_authentication_failure", "message",
                                          "The provided payment method has failed authentication.",
                                          "charge", json_object_get(r->chobj, "id")));
        r->code = 200;
        r->body = json_dumps(o, JSON_COMPACT);
        pending_t *p = pending_new(ps, req, r, approve ? OUT_SUCCEED : OUT_DECLINE);
        const char *ru = return_url_of(pi);
        p->redirect =
            ru ? cm_xasprintf("%s%cpayment_intent=%s&redirect_status=%s", ru,
                              strchr(ru, '?') ? '&' : '?', pi->id, approve ? "succeeded" : "failed")
               : cm_xstrdup("");
        cm_log(CM_LOG_INFO, "intent %s: 3-D Secure %s", pi->id, approve ? "approved" : "failed");
        commit(p);
    }
    json_decref(b);
}

static const char *const cancel_params[] = {"cancellation_reason", NULL};

/* POST /v1/payment_intents/{id}/cancel [cancellation_reason]: while nothing was charged. */
static void post_cancel(ps_server_t *ps, cm_req_t *req, const char *id)
{
    const char *key = NULL;
    char keybuf[64];
    json_t *body = read_mutation(ps, req, &key, keybuf, sizeof(keybuf));
    if (body == NULL)
        return;
    char path[128], hash[65];
    snprintf(path, sizeof(path), "/v1/payment_intents/%.64s/cancel", id);
    request_hash(path, body, hash);
    const char *why = json_string_value(json_object_get(body, "cancellation_reason"));
    rec_t *pi = NULL;
    if (!params_known(req, body, cancel_params) || idempotency_gate(ps, req, key, hash) ||
        (pi = intent_of(ps, req, id)) == NULL) {
        json_decref(body);
        return;
    }
    const char *st = json_string_value(json_object_get(pi->obj, "status"));
    bool cancelable = pi->confirming == NULL && (strcmp(st, "requires_payment_method") == 0 ||
                                                 strcmp(st, "requires_confirmation") == 0 ||
                                                 strcmp(st, "requires_action") == 0);
    if (why && strcmp(why, "abandoned") != 0 && strcmp(why, "requested_by_customer") != 0 &&
        strcmp(why, "duplicate") != 0 && strcmp(why, "fraudulent") != 0) {
        send_param_error(req, "parameter_invalid_string", "cancellation_reason",
                         "cancellation_reason is abandoned, duplicate, fraudulent or "
                         "requested_by_customer");
    } else if (!cancelable) {
        json_t *view = pi_view(pi, false);
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "You cannot cancel this PaymentIntent because it has a status of %s.",
                 json_string_value(json_object_get(view, "status")));
        send_error_x(req, 400, "invalid_request_error", "payment_intent_unexpected_state", msg,
                     json_pack("{s:o}", "payment_intent", view));
    } else {
        rec_t *r = rec_new(ps, REC_CONFIRM, key, hash);
        r->pi = pi;
        r->event = pi->event ? cm_xstrdup(pi->event) : NULL;
        pi->confirming = r;
        json_t *o = json_deep_copy(pi->obj);
        r->obj = o;
        json_object_set_new(o, "status", json_string("canceled"));
        json_object_set_new(o, "canceled_at", json_integer(now_s()));
        json_object_set_new(o, "cancellation_reason", why ? json_string(why) : json_null());
        json_object_set_new(o, "next_action", json_null());
        r->code = 200;
        r->body = json_dumps(o, JSON_COMPACT);
        commit(pending_new(ps, req, r, OUT_SUCCEED));
    }
    json_decref(body);
}

static void on_request(cm_req_t *req, void *arg)
{
    ps_server_t *ps = arg;
    char buf[512];
    char *seg[4];
    int n = cm_http_path(req, buf, sizeof(buf), seg, 4);
    cm_http_method_t m = cm_http_method(req);
    ps->requests++;
    if (n == 1 && strcmp(seg[0], "healthz") == 0) {
        cm_http_send_json(req, 200, json_pack("{s:s}", "status", "ok"));
        return;
    }
    if (n >= 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "payment_intents") == 0) {
        if (n == 2 && m == CM_HTTP_POST)
            return post_intent(ps, req);
        if (n == 2 && m == CM_HTTP_GET)
            return list_intents(ps, req);
        if (n == 3 && m == CM_HTTP_GET)
            return get_intent(ps, req, seg[2]);
        if (n == 4 && m == CM_HTTP_POST && strcmp(seg[3], "confirm") == 0)
            return post_confirm(ps, req, seg[2]);
        if (n == 4 && m == CM_HTTP_POST && strcmp(seg[3], "cancel") == 0)
            return post_cancel(ps, req, seg[2]);
    }
    if (n == 4 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "sim") == 0 &&
        strcmp(seg[2], "authenticate") == 0) {
        if (m == CM_HTTP_GET)
            return get_challenge(ps, req, seg[3]);
        if (m == CM_HTTP_POST)
            return post_challenge(ps, req, seg[3]);
    }
    if (n == 2 && strcmp(seg[0], "v1") == 0) {
        if (strcmp(seg[1], "refunds") == 0 && m == CM_HTTP_POST)
            return post_refund(ps, req);
        if (strcmp(seg[1], "ledger") == 0 && m == CM_HTTP_GET)
            return get_ledger(ps, req);
        if (strcmp(seg[1], "settings") == 0)
            return settings_endpoint(ps, req);
        if (strcmp(seg[1], "stats") == 0 && m == CM_HTTP_GET)
            return get_stats(ps, req);
    }
    send_error(req, 404, "invalid_request_error", "not_found", "Unrecognized request URL.");
}

/* --- lifecycle ----------------------------------------------------------------------- */

ps_server_t *ps_server_new(struct event_base *base, const ps_config_t *cfg, char *err,
                           size_t errlen)
{
    ps_server_t *ps = cm_xcalloc(1, sizeof(*ps));
    ps->cfg = *cfg;
    ps->base = base;
    cm_tls_random(&ps->rng, sizeof(ps->rng));
    ps->rng |= 1;
    ps->set.latency_min_ms = cfg->latency_min_ms;
    ps->set.latency_max_ms = cfg->latency_max_ms;
    ps->set.decline_rate = (double)cfg->decline_pct / 100.0;
    ps->set.error_rate = (double)cfg->error_pct / 100.0;
    ps->set.timeout_rate = (double)cfg->timeout_pct / 100.0;
    ps->set.refund_error_rate = (double)cfg->refund_error_pct / 100.0;
    ps->set.timeout_ms = cfg->timeout_ms;
    if (cfg->timeout_mode && strcmp(cfg->timeout_mode, "lost") == 0) {
        ps->set.timeout_mode = TIMEOUT_LOST;
    } else if (cfg->timeout_mode && strcmp(cfg->timeout_mode, "late") != 0) {
        snprintf(err, errlen, "timeout_mode must be late or lost");
        goto err;
    }
    if (ps->set.latency_min_ms > ps->set.latency_max_ms ||
        cfg->decline_pct + cfg->error_pct + cfg->timeout_pct > 100) {
        snprintf(err, errlen,
                 "latency_min_ms > latency_max_ms, or decline+error+timeout over 100%%");
        goto err;
    }
    ps->defaults = ps->set;
    if (!cfg->plain_http) {
        if (cfg->tls_cert == NULL || cfg->tls_key == NULL) {
            snprintf(err, errlen, "tls_cert and tls_key must be set (or plain_http = true)");
            goto err;
        }
        ps->tls = cm_tls_server_new(cfg->tls_cert, cfg->tls_key, err, errlen);
        if (ps->tls == NULL)
            goto err;
    }
    if (cfg->webhook_url && cfg->webhook_url[0]) {
        ps->hooks = ps_webhook_new(cfg->webhook_url, cfg->webhook_secret_file, cfg->webhook_ca_file,
                                   err, errlen);
        if (ps->hooks == NULL)
            goto err;
    }
    ps->j = ps_journal_new(base, cfg->ledger_file, cfg->ledger_fsync, replay_line, ps, err, errlen);
    if (ps->j == NULL)
        goto err;
    cm_http_limits_t lim = {
        .max_header_bytes = 8192,
        .max_body_bytes = MAX_BODY,
        .idle_timeout_s = (int)cfg->idle_timeout_s,
        .max_connections = (int)cfg->max_connections,
    };
    ps->http = cm_http_server_new(base, cfg->listen_addr, (int)cfg->port, ps->tls, &lim, on_request,
                                  ps, err, errlen);
    if (ps->http == NULL)
        goto err;
    return ps;
err:
    ps_server_free(ps);
    return NULL;
}

int ps_server_port(const ps_server_t *ps)
{
    return cm_http_server_port(ps->http);
}

size_t ps_server_records(const ps_server_t *ps)
{
    return ps->nrecords;
}

void ps_server_free(ps_server_t *ps)
{
    if (ps == NULL)
        return;
    ps_journal_free(ps->j); /* answers what became durable */
    while (ps->pending) {
        pending_t *p = ps->pending;
        if (p->rec && p->rec->state == REC_PROCESSING)
            rec_drop(ps, p->rec); /* rec NULL: a request still on its way */
        send_error(p->req, 503, "api_error", "shutting_down", "the simulator is stopping");
        pending_free(p);
    }
    cm_http_server_free(ps->http);
    ps_webhook_free(ps->hooks); /* after the journal: its last answers may announce */
    for (size_t b = 0; b < NBUCKETS; b++) {
        rec_t *r = ps->by_key[b];
        while (r) {
            rec_t *next = r->next_key;
            rec_free(r);
            r = next;
        }
    }
    free(ps->list);
    cm_tls_free(ps->tls);
    free(ps);
}
