/*
 * ps_core — the payment-provider simulator; the API is described in ps_core.h.
 *
 * Threads: everything below runs on the event-loop thread except journal_thread(),
 * which owns the ledger file descriptor after start-up: the loop hands it lines
 * through a mutex-protected queue and learns that they are durable through a pipe
 * (the redis bio.c shape). A charge or refund answer is sent only after its line is
 * durable, so a simulator restart never forgets a charge it confirmed to anyone.
 *
 * Records: one per idempotency key (charges and refunds share the key space, as on
 * Stripe) in a chained hash table, plus an id table and an append-only list for the
 * ledger. A record's state only moves forward through rec_set_state():
 *   PROCESSING (outcome not decided or not committed: same key → 409, lookup →
 *   "processing") → WRITING (journal line queued; still 409 / "processing") → DONE
 *   (durable: same key → the stored answer). An errored or lost charge is dropped
 *   while PROCESSING, so nothing was charged and the key may be used again.
 *
 * Delays (latency, late answers) are libevent timers on a pending-request list; a
 * client that hangs up meanwhile is harmless (evhttp detaches the request and frees
 * it when we answer, see cm_http.h).
 */
#include "ps_core.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_http.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "cm_tls.h"

#define NBUCKETS     65536
#define MAX_BODY     16384
#define ID_LEN       40
#define SRC_DELAY    "tok_sim_delay_"
#define SRC_ARRIVE   "tok_sim_arrive_"
#define LIST_MAX     1000
#define LINE_MAX_LEN (1024 * 1024)

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
     "append-only journal of charges and refunds, replayed at start (unset: memory only)"},
    {"ledger_fsync", CM_CFG_BOOL, S(ledger_fsync), "true", 0, 0,
     "fdatasync each batch of journal lines before answering"},
    {"api_key", CM_CFG_STR, S(api_key), NULL, 0, 0,
     "secret key clients must send as Authorization: Bearer (unset: no check)"},
    {"max_records", CM_CFG_INT, S(max_records), "1000000", 100, 100000000,
     "charges plus refunds kept; beyond it new ones get 503"},
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

typedef enum { REC_CHARGE, REC_REFUND } rec_kind_t;
typedef enum { REC_PROCESSING, REC_WRITING, REC_DONE } rec_state_t;

typedef struct rec rec_t;
struct rec {
    rec_t *next_key, *next_id;
    rec_kind_t kind;
    rec_state_t state;
    char *key;
    char hash[65];
    char id[ID_LEN];
    json_t *obj; /* the object as it is now */
    int code;    /* the stored answer, replayed for the same key */
    char *body;
    char *event;   /* metadata.event, for ledger filters */
    rec_t *charge; /* refund: its charge */
    rec_t *refund; /* charge: the refund that took what was left (pending or done) */
    int64_t taken; /* charge: what its refunds take (pending or done) */
    size_t pos;    /* DONE: index in ps->list (the ledger's commit order) */
};

/* --- the journal (writer thread) ----------------------------------------------------- */

typedef void (*journal_cb)(void *arg);

typedef struct jentry {
    struct jentry *next;
    char *line;
    journal_cb done;
    void *arg;
} jentry_t;

typedef struct journal {
    int fd; /* -1: memory only */
    bool fsync;
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    jentry_t *in_head, **in_tail;     /* loop → writer */
    jentry_t *done_head, **done_tail; /* writer → loop */
    bool stop;
    int pipe_r, pipe_w;
    struct event *ev;
} journal_t;

/* --- pending (delayed) requests ------------------------------------------------------ */

typedef enum { OUT_SUCCEED, OUT_DECLINE, OUT_ERROR, OUT_LATE, OUT_LOST } outcome_t;

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
    /* a charge request still on its way (tok_sim_arrive_<ms>): rec is NULL until then */
    json_t *arrive_body;
    char *arrive_key;
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
    journal_t j;
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

static rec_t *rec_new(ps_server_t *ps, rec_kind_t kind, const char *key, const char *hash)
{
    rec_t *r = cm_xcalloc(1, sizeof(*r));
    r->kind = kind;
    r->state = REC_PROCESSING;
    r->key = cm_xstrdup(key);
    snprintf(r->hash, sizeof(r->hash), "%s", hash);
    unsigned char raw[12];
    char hex[25];
    cm_tls_random(raw, sizeof(raw));
    cm_hex_encode(raw, sizeof(raw), hex);
    snprintf(r->id, sizeof(r->id), "%s_%s", kind == REC_CHARGE ? "ch" : "re", hex);
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
    free(r->key);
    free(r->body);
    free(r->event);
    free(r);
}

/* Removes a PROCESSING record (error or lost charge: nothing happened). */
static void rec_drop(ps_server_t *ps, rec_t *r)
{
    if (r->charge && r->charge->refund == r)
        r->charge->refund = NULL;
    if (r->kind == REC_REFUND && r->charge)
        r->charge->taken -= json_integer_value(json_object_get(r->obj, "amount"));
    rec_t **pp = &ps->by_key[hash_str(r->key)];
    while (*pp && *pp != r)
        pp = &(*pp)->next_key;
    if (*pp)
        *pp = r->next_key;
    ps->nrecords--;
    rec_free(r);
}

/* The one place a record's state changes. DONE records join the id table and ledger. */
static void rec_set_state(ps_server_t *ps, rec_t *r, rec_state_t st)
{
    if (st <= r->state)
        return;
    r->state = st;
    if (st != REC_DONE)
        return;
    uint32_t b = hash_str(r->id);
    r->next_id = ps->by_id[b];
    ps->by_id[b] = r;
    if (ps->nlist == ps->caplist) {
        ps->caplist = ps->caplist ? ps->caplist * 2 : 1024;
        ps->list = cm_xrealloc(ps->list, ps->caplist * sizeof(*ps->list));
    }
    r->pos = ps->nlist;
    ps->list[ps->nlist++] = r;
    if (r->kind == REC_REFUND && r->charge) {
        json_t *c = r->charge->obj;
        json_int_t done = json_integer_value(json_object_get(c, "amount_refunded")) +
                          json_integer_value(json_object_get(r->obj, "amount"));
        json_object_set_new(c, "amount_refunded", json_integer(done));
        json_object_set_new(c, "refunded",
                            json_boolean(done >= json_integer_value(json_object_get(c, "amount"))));
        json_object_set_new(r->charge->obj, "refund", json_string(r->id));
    }
}

/* --- journal ------------------------------------------------------------------------- */

static void *journal_thread(void *arg)
{
    journal_t *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->in_head == NULL && !j->stop)
            pthread_cond_wait(&j->cv, &j->mu);
        if (j->in_head == NULL && j->stop)
            break;
        jentry_t *batch = j->in_head;
        j->in_head = NULL;
        j->in_tail = &j->in_head;
        pthread_mutex_unlock(&j->mu);
        jentry_t *last = NULL;
        for (jentry_t *e = batch; e; e = e->next) {
            size_t len = strlen(e->line), off = 0;
            while (off < len) {
                ssize_t n = write(j->fd, e->line + off, len - off);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0) {
                    /* A simulator that cannot write its ledger must not pretend. */
                    cm_log(CM_LOG_ERROR, "ledger write: %s; exiting", strerror(errno));
                    _exit(3);
                }
                off += (size_t)n;
            }
            last = e;
        }
        if (j->fsync && fdatasync(j->fd) != 0) {
            cm_log(CM_LOG_ERROR, "ledger fdatasync: %s; exiting", strerror(errno));
            _exit(3);
        }
        pthread_mutex_lock(&j->mu);
        *j->done_tail = batch;
        j->done_tail = &last->next;
        pthread_mutex_unlock(&j->mu);
        char one = 1;
        while (write(j->pipe_w, &one, 1) < 0 && errno == EINTR) {
        }
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Loop thread: runs the callbacks of the lines the writer made durable. */
static void on_journal_done(evutil_socket_t fd, short what, void *arg)
{
    journal_t *j = arg;
    char buf[256];
    if (j->pipe_r >= 0)
        while (read(j->pipe_r, buf, sizeof(buf)) > 0) {
        }
    pthread_mutex_lock(&j->mu);
    jentry_t *list = j->done_head;
    j->done_head = NULL;
    j->done_tail = &j->done_head;
    pthread_mutex_unlock(&j->mu);
    while (list) {
        jentry_t *e = list;
        list = e->next;
        e->done(e->arg);
        free(e->line);
        free(e);
    }
}

/* Queues a line (ownership taken); done(arg) runs on the loop once it is durable. */
static void journal_append(journal_t *j, char *line, journal_cb done, void *arg)
{
    jentry_t *e = cm_xcalloc(1, sizeof(*e));
    e->line = line;
    e->done = done;
    e->arg = arg;
    pthread_mutex_lock(&j->mu);
    if (j->fd < 0) {
        *j->done_tail = e;
        j->done_tail = &e->next;
        pthread_mutex_unlock(&j->mu);
        event_active(j->ev, EV_READ, 0);
        return;
    }
    *j->in_tail = e;
    j->in_tail = &e->next;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static char *journal_line(const rec_t *r)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:O}", "k",
                          r->kind == REC_CHARGE ? "charge" : "refund", "key", r->key, "hash",
                          r->hash, "id", r->id, "code", r->code, "body", r->body, "obj", r->obj);
    if (r->charge)
        json_object_set_new(o, "charge", json_string(r->charge->id));
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    char *line = cm_xasprintf("%s\n", text);
    free(text);
    return line;
}

/* Start-up only: rebuilds the records from the ledger file. */
static int journal_replay(ps_server_t *ps, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r"); /* blocking-ok: start-up, before the loop */
    if (f == NULL) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "ledger_file %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = cm_xmalloc(LINE_MAX_LEN);
    size_t n = 0, bad = 0;
    while (fgets(line, LINE_MAX_LEN, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *k = json_string_value(json_object_get(o, "k"));
        const char *key = json_string_value(json_object_get(o, "key"));
        const char *hash = json_string_value(json_object_get(o, "hash"));
        const char *id = json_string_value(json_object_get(o, "id"));
        const char *body = json_string_value(json_object_get(o, "body"));
        json_t *obj = json_object_get(o, "obj");
        if (k == NULL || key == NULL || hash == NULL || id == NULL || body == NULL ||
            !json_is_object(obj) || find_key(ps, key) != NULL) {
            bad++; /* a torn last line after a crash, or garbage */
            json_decref(o);
            continue;
        }
        rec_t *r = rec_new(ps, strcmp(k, "charge") == 0 ? REC_CHARGE : REC_REFUND, key, hash);
        snprintf(r->id, sizeof(r->id), "%s", id);
        r->code = (int)json_integer_value(json_object_get(o, "code"));
        r->body = cm_xstrdup(body);
        r->obj = json_incref(obj);
        const char *ev =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "event"));
        r->event = ev ? cm_xstrdup(ev) : NULL;
        const char *ch = json_string_value(json_object_get(o, "charge"));
        if (r->kind == REC_REFUND && ch) {
            r->charge = find_id(ps, ch);
            if (r->charge) {
                r->charge->taken += json_integer_value(json_object_get(obj, "amount"));
                if (r->charge->taken >=
                    json_integer_value(json_object_get(r->charge->obj, "amount")))
                    r->charge->refund = r;
            }
        }
        rec_set_state(ps, r, REC_DONE);
        json_decref(o);
        n++;
    }
    free(line);
    fclose(f);
    cm_log(CM_LOG_INFO, "ledger %s: %zu records replayed%s", path, n,
           bad ? " (unreadable lines skipped)" : "");
    return 0;
}

static int journal_start(ps_server_t *ps, char *err, size_t errlen)
{
    journal_t *j = &ps->j;
    j->fd = j->pipe_r = j->pipe_w = -1;
    j->fsync = ps->cfg.ledger_fsync;
    j->in_tail = &j->in_head;
    j->done_tail = &j->done_head;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    if (ps->cfg.ledger_file == NULL) {
        j->ev = event_new(ps->base, -1, 0, on_journal_done, j);
        cm_log(CM_LOG_WARN, "no ledger_file: charges are kept in memory only");
        return 0;
    }
    if (journal_replay(ps, ps->cfg.ledger_file, err, errlen) != 0)
        return -1;
    j->fd = open(ps->cfg.ledger_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    int p[2];
    if (j->fd < 0 || pipe(p) != 0) {
        snprintf(err, errlen, "ledger_file %s: %s", ps->cfg.ledger_file, strerror(errno));
        return -1;
    }
    j->pipe_r = p[0];
    j->pipe_w = p[1];
    for (int i = 0; i < 2; i++) {
        fcntl(p[i], F_SETFL, fcntl(p[i], F_GETFL) | O_NONBLOCK);
        fcntl(p[i], F_SETFD, FD_CLOEXEC);
    }
    j->ev = event_new(ps->base, j->pipe_r, EV_READ | EV_PERSIST, on_journal_done, j);
    event_add(j->ev, NULL);
    if (pthread_create(&j->thread, NULL, journal_thread, j) != 0) {
        snprintf(err, errlen, "cannot start the ledger writer thread");
        return -1;
    }
    j->running = true;
    return 0;
}

/* Flushes and stops the writer, then runs the callbacks of what it wrote. */
static void journal_stop(journal_t *j)
{
    if (j->running) {
        pthread_mutex_lock(&j->mu);
        j->stop = true;
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->thread, NULL);
        j->running = false;
    }
    if (j->ev)
        on_journal_done(-1, 0, j);
    if (j->ev)
        event_free(j->ev);
    j->ev = NULL;
    if (j->fd >= 0)
        close(j->fd);
    if (j->pipe_r >= 0)
        close(j->pipe_r);
    if (j->pipe_w >= 0)
        close(j->pipe_w);
    j->fd = j->pipe_r = j->pipe_w = -1;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
}

/* --- answers ------------------------------------------------------------------------- */

/* Stripe-shaped error: {"error":{"type","code","message"}} plus extra fields inside. */
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

static void send_error(cm_req_t *req, int code, const char *type, const char *ecode,
                       const char *message)
{
    char *b = error_body(type, ecode, message, NULL);
    send_text(req, code, b, false);
    free(b);
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
    free(p);
}

static void pending_arm(pending_t *p, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(p->timer, &tv);
}

/* Answers with the record's stored answer and ends the pending request. */
static void pending_answer_stored(pending_t *p)
{
    send_text(p->req, p->rec->code, p->rec->body, false);
    pending_free(p);
}

static void on_durable(void *arg)
{
    pending_t *p = arg;
    rec_set_state(p->ps, p->rec, REC_DONE);
    /* A late answer waits for its timer (which answers), unless that already fired. */
    if (p->late_wait && evtimer_pending(p->timer, NULL))
        return;
    pending_answer_stored(p);
}

static void commit(pending_t *p)
{
    rec_set_state(p->ps, p->rec, REC_WRITING);
    journal_append(&p->ps->j, journal_line(p->rec), on_durable, p);
}

static json_t *charge_obj(ps_server_t *ps, rec_t *r, const json_t *body, const char *status)
{
    json_t *o = json_pack(
        "{s:s, s:s, s:O, s:O, s:O, s:s, s:b, s:b, s:i, s:s, s:I}", "id", r->id, "object", "charge",
        "amount", json_object_get(body, "amount"), "currency", json_object_get(body, "currency"),
        "source", json_object_get(body, "source") ? json_object_get(body, "source") : json_null(),
        "status", status, "paid", strcmp(status, "succeeded") == 0, "refunded", 0,
        "amount_refunded", 0, "idempotency_key", r->key, "created",
        (json_int_t)(cm_time_wall_ms() / 1000));
    json_t *md = json_object_get(body, "metadata");
    json_object_set_new(o, "metadata", json_is_object(md) ? json_deep_copy(md) : json_object());
    return o;
}

/* Decides the charge's fate now that its latency has passed. */
static void finish_charge(pending_t *p)
{
    ps_server_t *ps = p->ps;
    rec_t *r = p->rec;
    if (p->outcome == OUT_ERROR || p->outcome == OUT_LOST) {
        /* Nothing was charged: forget the key, answer an error nobody may hear. */
        rec_drop(ps, r);
        if (p->outcome == OUT_ERROR)
            send_error(p->req, 500, "api_error", "simulated_error",
                       "simulated provider error; nothing was charged");
        else
            send_error(p->req, 503, "api_error", "simulated_timeout",
                       "simulated lost request; nothing was charged");
        pending_free(p);
        return;
    }
    bool declined = p->outcome == OUT_DECLINE;
    json_object_set_new(r->obj, "status", json_string(declined ? "failed" : "succeeded"));
    json_object_set_new(r->obj, "paid", json_boolean(!declined));
    if (declined) {
        json_object_set_new(r->obj, "failure_code", json_string("card_declined"));
        r->code = 402;
        r->body =
            error_body("card_error", "card_declined", "Your card was declined.",
                       json_pack("{s:s, s:s}", "decline_code", "generic_decline", "charge", r->id));
    } else {
        r->code = 200;
        r->body = json_dumps(r->obj, JSON_COMPACT);
    }
    commit(p);
}

static void charge_arrived(ps_server_t *ps, cm_req_t *req, const char *key, json_t *body);

static void on_pending_timer(evutil_socket_t fd, short what, void *arg)
{
    pending_t *p = arg;
    if (p->rec == NULL) {
        /* A delayed request reaches the provider now. */
        ps_server_t *ps = p->ps;
        cm_req_t *req = p->req;
        json_t *body = p->arrive_body;
        char *key = p->arrive_key;
        p->arrive_body = NULL;
        p->arrive_key = NULL;
        pending_free(p);
        charge_arrived(ps, req, key, body);
        json_decref(body);
        free(key);
        return;
    }
    if (p->late_wait) {
        if (p->rec->state == REC_DONE)
            pending_answer_stored(p);
        return; /* still writing: on_durable answers */
    }
    if (p->rec->kind == REC_REFUND) {
        commit(p);
        return;
    }
    finish_charge(p);
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
 * Common idempotency gate. Returns the existing record's handling: true when it
 * answered (replay, mismatch, in progress), false when the key is new.
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

/* Reads Idempotency-Key and the JSON body; answers and returns NULL on a bad request. */
static json_t *read_mutation(ps_server_t *ps, cm_req_t *req, const char **key)
{
    if (!authorized(ps, req)) {
        send_error(req, 401, "invalid_request_error", "unauthorized", "Invalid API key.");
        return NULL;
    }
    *key = cm_http_header(req, "Idempotency-Key");
    if (*key == NULL || !cm_parse_idem_key(*key)) {
        send_error(req, 400, "invalid_request_error", "idempotency_key_missing",
                   "an Idempotency-Key header of 1-255 visible ASCII characters is required");
        return NULL;
    }
    size_t len = 0;
    const char *text = cm_http_body(req, &len);
    if (len == 0 || len > MAX_BODY) {
        send_error(req, 400, "invalid_request_error", "parameter_invalid",
                   "a JSON object body is required");
        return NULL;
    }
    json_t *b = json_loadb(text, len, 0, NULL);
    if (!json_is_object(b)) {
        json_decref(b);
        send_error(req, 400, "invalid_request_error", "parameter_invalid",
                   "the body must be a JSON object");
        return NULL;
    }
    if (ps->nrecords >= (size_t)ps->cfg.max_records) {
        json_decref(b);
        send_error(req, 503, "api_error", "capacity", "the simulator is full (max_records)");
        return NULL;
    }
    return b;
}

static outcome_t draw_outcome(ps_server_t *ps, const char *source, int64_t *latency_ms)
{
    const settings_t *s = &ps->set;
    int64_t span = s->latency_max_ms - s->latency_min_ms;
    *latency_ms = s->latency_min_ms + (span > 0 ? (int64_t)(rnd(ps) % (uint64_t)(span + 1)) : 0);
    if (source) {
        if (strcmp(source, "tok_chargeDeclined") == 0)
            return OUT_DECLINE;
        if (strcmp(source, "tok_sim_error") == 0)
            return OUT_ERROR;
        if (strcmp(source, "tok_sim_late") == 0)
            return OUT_LATE;
        if (strcmp(source, "tok_sim_lost") == 0)
            return OUT_LOST;
        int64_t d;
        if (strncmp(source, SRC_ARRIVE, strlen(SRC_ARRIVE)) == 0) {
            *latency_ms = 0;
            return OUT_SUCCEED;
        }
        if (strncmp(source, SRC_DELAY, strlen(SRC_DELAY)) == 0 &&
            cm_parse_i64(source + strlen(SRC_DELAY), 0, 3600000, &d) == 0) {
            *latency_ms = d;
            return OUT_SUCCEED;
        }
    }
    double x = rnd01(ps);
    if (x < s->timeout_rate)
        return s->timeout_mode == TIMEOUT_LATE ? OUT_LATE : OUT_LOST;
    x -= s->timeout_rate;
    if (x < s->error_rate)
        return OUT_ERROR;
    x -= s->error_rate;
    if (x < s->decline_rate)
        return OUT_DECLINE;
    return OUT_SUCCEED;
}

/* --- endpoints ----------------------------------------------------------------------- */

static void post_charge(ps_server_t *ps, cm_req_t *req)
{
    const char *key = NULL;
    json_t *body = read_mutation(ps, req, &key);
    if (body == NULL)
        return;
    json_t *amount = json_object_get(body, "amount");
    json_t *cur = json_object_get(body, "currency");
    json_t *src = json_object_get(body, "source");
    json_t *md = json_object_get(body, "metadata");
    if (!json_is_integer(amount) || json_integer_value(amount) < 0 || !json_is_string(cur) ||
        (src && !json_is_string(src)) || (md && !json_is_object(md))) {
        json_decref(body);
        send_error(req, 400, "invalid_request_error", "parameter_invalid",
                   "amount (integer >= 0), currency (string), source (string), metadata "
                   "(object) expected");
        return;
    }
    int64_t arrive_ms;
    const char *source = json_string_value(src);
    if (source && strncmp(source, SRC_ARRIVE, strlen(SRC_ARRIVE)) == 0 &&
        cm_parse_i64(source + strlen(SRC_ARRIVE), 0, 3600000, &arrive_ms) == 0) {
        /* Held in the network: the provider sees nothing of it until the timer fires. */
        pending_t *p = pending_new(ps, req, NULL, OUT_SUCCEED);
        p->arrive_body = body;
        p->arrive_key = cm_xstrdup(key);
        pending_arm(p, arrive_ms);
        return;
    }
    charge_arrived(ps, req, key, body);
    json_decref(body);
}

/* A valid charge request as it reaches the provider (body is borrowed). */
static void charge_arrived(ps_server_t *ps, cm_req_t *req, const char *key, json_t *body)
{
    json_t *src = json_object_get(body, "source");
    json_t *md = json_object_get(body, "metadata");
    char hash[65];
    request_hash("/v1/charges", body, hash);
    if (idempotency_gate(ps, req, key, hash))
        return;
    rec_t *r = rec_new(ps, REC_CHARGE, key, hash);
    r->obj = charge_obj(ps, r, body, "processing");
    const char *ev = json_string_value(json_object_get(md, "event"));
    r->event = ev ? cm_xstrdup(ev) : NULL;
    int64_t latency = 0;
    outcome_t out = draw_outcome(ps, json_string_value(src), &latency);
    pending_t *p = pending_new(ps, req, r, out);
    cm_log(CM_LOG_DEBUG, "charge %s key %s: outcome %d latency %lld ms", r->id, key, (int)out,
           (long long)latency);
    if (out == OUT_LATE) {
        /* Charged at once; the answer waits for timeout_ms (armed first, so on_durable
         * knows a timer is running). */
        pending_arm(p, ps->set.timeout_ms);
        p->late_wait = true;
        finish_charge(p);
        return;
    }
    pending_arm(p, out == OUT_LOST ? ps->set.timeout_ms : latency);
}

static void post_refund(ps_server_t *ps, cm_req_t *req)
{
    const char *key = NULL;
    json_t *body = read_mutation(ps, req, &key);
    if (body == NULL)
        return;
    const char *chid = json_string_value(json_object_get(body, "charge"));
    if (chid == NULL) {
        json_decref(body);
        send_error(req, 400, "invalid_request_error", "parameter_missing",
                   "charge (the charge id) is required");
        return;
    }
    char hash[65];
    request_hash("/v1/refunds", body, hash);
    if (idempotency_gate(ps, req, key, hash)) {
        json_decref(body);
        return;
    }
    rec_t *ch = find_id(ps, chid);
    if (ch == NULL || ch->kind != REC_CHARGE) {
        json_decref(body);
        send_error(req, 404, "invalid_request_error", "resource_missing", "No such charge.");
        return;
    }
    const char *status = json_string_value(json_object_get(ch->obj, "status"));
    if (status == NULL || strcmp(status, "succeeded") != 0) {
        json_decref(body);
        send_error(req, 400, "invalid_request_error", "charge_failed",
                   "This charge did not succeed; there is nothing to refund.");
        return;
    }
    if (ch->refund) {
        json_decref(body);
        char *b = error_body("invalid_request_error", "charge_already_refunded",
                             "Charge has already been refunded.",
                             json_pack("{s:s}", "refund", ch->refund->id));
        send_text(req, 400, b, false);
        free(b);
        return;
    }
    /* amount: optional, at most what is left; without it, all that is left. */
    json_int_t left = json_integer_value(json_object_get(ch->obj, "amount")) - ch->taken;
    json_t *want = json_object_get(body, "amount");
    if (want && (!json_is_integer(want) || json_integer_value(want) < 1 ||
                 json_integer_value(want) > left)) {
        json_decref(body);
        send_error(req, 400, "invalid_request_error", "amount_too_large",
                   "amount must be a positive integer no larger than what is left to refund");
        return;
    }
    json_int_t amount = want ? json_integer_value(want) : left;
    if (ps->set.refund_error_rate > 0 && rnd01(ps) < ps->set.refund_error_rate) {
        json_decref(body);
        send_error(req, 500, "api_error", "simulated_error",
                   "simulated provider error; nothing was refunded");
        return;
    }
    rec_t *r = rec_new(ps, REC_REFUND, key, hash);
    r->charge = ch;
    ch->taken += amount;
    if (amount == left)
        ch->refund = r;
    r->event = ch->event ? cm_xstrdup(ch->event) : NULL;
    r->obj =
        json_pack("{s:s, s:s, s:o, s:O, s:s, s:s, s:s, s:I}", "id", r->id, "object", "refund",
                  "amount", json_integer(amount), "currency", json_object_get(ch->obj, "currency"),
                  "charge", ch->id, "status", "succeeded", "idempotency_key", key, "created",
                  (json_int_t)(cm_time_wall_ms() / 1000));
    json_object_set(r->obj, "metadata", json_object_get(ch->obj, "metadata"));
    r->code = 200;
    r->body = json_dumps(r->obj, JSON_COMPACT);
    json_decref(body);
    int64_t latency = 0;
    (void)draw_outcome(ps, NULL, &latency);
    pending_t *p = pending_new(ps, req, r, OUT_SUCCEED);
    pending_arm(p, latency);
}

/* GET /v1/charges?created_gte=T&limit=N[&starting_after=ID]: committed charges, oldest
 * commit first. Answers and returns. */
static void list_charges(ps_server_t *ps, cm_req_t *req, struct evkeyvalq *q)
{
    int64_t gte = 0, limit = 100;
    const char *lim = evhttp_find_header(q, "limit");
    const char *after = evhttp_find_header(q, "starting_after");
    if (cm_parse_i64(evhttp_find_header(q, "created_gte"), 0, INT64_MAX / 2, &gte) != 0 ||
        (lim && cm_parse_i64(lim, 1, LIST_MAX, &limit) != 0)) {
        send_error(req, 400, "invalid_request_error", "parameter_invalid",
                   "created_gte is a unix time, limit an integer from 1 to 1000");
        return;
    }
    size_t i = 0;
    if (after) {
        rec_t *a = find_id(ps, after);
        if (a == NULL || a->kind != REC_CHARGE || a->state != REC_DONE) {
            send_error(req, 404, "invalid_request_error", "resource_missing",
                       "starting_after names no charge");
            return;
        }
        i = a->pos + 1;
    }
    json_t *data = json_array();
    bool more = false;
    for (; i < ps->nlist; i++) {
        rec_t *r = ps->list[i];
        if (r->kind != REC_CHARGE ||
            json_integer_value(json_object_get(r->obj, "created")) < (json_int_t)gte)
            continue;
        if ((int64_t)json_array_size(data) == limit) {
            more = true;
            break;
        }
        json_array_append(data, r->obj);
    }
    cm_http_send_json(
        req, 200, json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", more));
}

static void get_charge(ps_server_t *ps, cm_req_t *req)
{
    if (!authorized(ps, req)) {
        send_error(req, 401, "invalid_request_error", "unauthorized", "Invalid API key.");
        return;
    }
    struct evkeyvalq q;
    if (cm_http_query(req, &q) != 0) {
        send_error(req, 400, "invalid_request_error", "parameter_invalid", "malformed query");
        return;
    }
    const char *key = evhttp_find_header(&q, "idempotency_key");
    rec_t *r = key ? find_key(ps, key) : NULL;
    if (key == NULL && evhttp_find_header(&q, "created_gte")) {
        list_charges(ps, req, &q);
    } else if (key == NULL) {
        send_error(req, 400, "invalid_request_error", "parameter_missing",
                   "idempotency_key or created_gte is required");
    } else if (r == NULL || r->kind != REC_CHARGE) {
        send_error(req, 404, "invalid_request_error", "resource_missing",
                   "No charge with that idempotency key.");
    } else {
        json_t *o = json_deep_copy(r->obj);
        if (r->state != REC_DONE) /* undecided, or decided but not yet durable */
            json_object_set_new(o, "status", json_string("processing"));
        cm_http_send_json(req, 200, o);
    }
    evhttp_clear_headers(&q);
}

static void get_ledger(ps_server_t *ps, cm_req_t *req)
{
    if (!authorized(ps, req)) {
        send_error(req, 401, "invalid_request_error", "unauthorized", "Invalid API key.");
        return;
    }
    struct evkeyvalq q;
    if (cm_http_query(req, &q) != 0) {
        send_error(req, 400, "invalid_request_error", "parameter_invalid", "malformed query");
        return;
    }
    const char *ev = evhttp_find_header(&q, "event");
    json_t *charges = json_array(), *refunds = json_array();
    for (size_t i = 0; i < ps->nlist; i++) {
        rec_t *r = ps->list[i];
        if (ev && (r->event == NULL || strcmp(ev, r->event) != 0))
            continue;
        json_array_append(r->kind == REC_CHARGE ? charges : refunds, r->obj);
    }
    int processing = 0;
    for (pending_t *p = ps->pending; p; p = p->next)
        processing += p->rec && p->rec->state != REC_DONE;
    evhttp_clear_headers(&q);
    cm_http_send_json(req, 200,
                      json_pack("{s:o, s:o, s:i}", "charges", charges, "refunds", refunds,
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
    if (n == 2 && strcmp(seg[0], "v1") == 0) {
        if (strcmp(seg[1], "charges") == 0 && m == CM_HTTP_POST)
            return post_charge(ps, req);
        if (strcmp(seg[1], "charges") == 0 && m == CM_HTTP_GET)
            return get_charge(ps, req);
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
    ps->j.fd = ps->j.pipe_r = ps->j.pipe_w = -1;
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
    if (journal_start(ps, err, errlen) != 0)
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
    journal_stop(&ps->j); /* answers what became durable */
    while (ps->pending) {
        pending_t *p = ps->pending;
        if (p->rec && p->rec->state == REC_PROCESSING)
            rec_drop(ps, p->rec); /* rec NULL: a request still on its way */
        send_error(p->req, 503, "api_error", "shutting_down", "the simulator is stopping");
        pending_free(p);
    }
    cm_http_server_free(ps->http);
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
