/*
 * gw_batch — see gw_batch.h.
 *
 * A worker keeps up to GW_BATCH_ROOMS slots, one per room with joins gathering or a batch
 * in flight. A slot's open batch is sent (detached from the slot: from then on it is the
 * Redis callback's alone, and the slot's next fan opens a new one) at the first of:
 *   - the loop has run what was ready, and no batch of the room is in flight: the joins
 *     read in one pass of the loop go together and an idle Redis adds no wait;
 *   - the room's batch in flight is answered: the joins that came meanwhile go at once;
 *   (both no sooner than gap_us after the room's previous send)
 *   - the window (window_us) ends: the bound a fan waits whatever Redis does;
 *   - it reaches the cap.
 * So batches are as large as Redis is slow: one join per call when it is idle, a whole
 * round trip's arrivals per call under a crowd (group commit). Batches of one room are
 * sent on the worker's one Redis connection in the order they closed, so Redis numbers
 * them in that order too.
 *
 * The argument vector of a send is built in scratch arrays sized once for the cap, not on
 * the stack; cm_redis_eval copies what it is given.
 */
#include "gw_batch.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_text.h"
#include "cm_time.h"
#include "gw_lua.h"

typedef struct entry {
    gw_batch_fan_t fan;
    gw_batch_cb cb;
    void *arg;
} entry_t;

typedef struct slot slot_t;

/* One room's fans in arrival order: gathering in a slot, then in flight. */
typedef struct batch {
    char event[CM_IDENT_MAX + 1];
    slot_t *slot;              /* in flight: its room's slot; NULL once the batcher is gone */
    struct batch *prev, *next; /* in flight: the batcher's list */
    int n;
    entry_t e[];
} batch_t;

struct slot {
    gw_batch_t *owner;
    struct event *timer;          /* the window */
    struct event *soon;           /* made active: once the loop has run what is ready */
    char event[CM_IDENT_MAX + 1]; /* the room (while open or inflight) */
    batch_t *open;                /* NULL: none gathering */
    int inflight;                 /* batches of this room sent and not yet answered */
    uint64_t sent_ns;             /* CLOCK_MONOTONIC of the room's last send */
};

struct gw_batch {
    struct event_base *base;
    cm_redis_t *redis;
    struct timeval window;
    uint64_t gap_ns; /* the least time between two early sends of a room */
    int cap;
    uint64_t sent;
    slot_t slots[GW_BATCH_ROOMS];
    batch_t *flying;   /* every batch in flight (told when the batcher is freed) */
    const char **argv; /* scratch for one send */
    size_t *argvlen;
    int *set_of;     /* per fan: index of its proof's bitmap among the batch's, 0: none */
    char num[3][12]; /* n, m and p as text */
    char *fans;      /* the fans' records (GW_BATCH_FAN bytes each) */
    char *counts;    /* per bitmap: its count of proofs, 4 digits */
    char *owners;    /* per proof, grouped by bitmap: its fan's index (1-based), 4 digits */
};

/* A fan's record in join_batch.lua's ARGV: visitor id, then its score in 16 digits. */
#define GW_BATCH_FAN   48
#define GW_BATCH_SCORE 16
/* the room's keys and a bitmap per fan at most; n, m, p, a lifetime per bitmap, the fans,
 * the counts, the owners and four arguments per fan's proof */
#define ARGV_MAX(cap) (GW_K_COUNT + 6 * (cap) + 6)

gw_batch_t *gw_batch_new(struct event_base *base, cm_redis_t *redis, int64_t window_us,
                         int64_t gap_us, int cap)
{
    gw_batch_t *b = cm_xcalloc(1, sizeof(*b));
    b->base = base;
    b->redis = redis;
    b->window.tv_sec = (time_t)(window_us / 1000000);
    b->window.tv_usec = (suseconds_t)(window_us % 1000000);
    b->gap_ns = (uint64_t)(gap_us < 0 ? 0 : gap_us > window_us ? window_us : gap_us) * 1000;
    b->cap = cap < 1 ? 1 : cap > GW_BATCH_CAP_MAX ? GW_BATCH_CAP_MAX : cap;
    b->argv = cm_xcalloc(ARGV_MAX(b->cap), sizeof(*b->argv));
    b->argvlen = cm_xcalloc(ARGV_MAX(b->cap), sizeof(*b->argvlen));
    b->set_of = cm_xcalloc((size_t)b->cap, sizeof(*b->set_of));
    b->fans = cm_xmalloc((size_t)b->cap * GW_BATCH_FAN);
    b->counts = cm_xmalloc((size_t)b->cap * 4);
    b->owners = cm_xmalloc((size_t)b->cap * 4);
    for (int i = 0; i < GW_BATCH_ROOMS; i++)
        b->slots[i].owner = b;
    return b;
}

uint64_t gw_batch_sent(const gw_batch_t *b)
{
    return b->sent;
}

static void fail_all(batch_t *batch, const char *err)
{
    for (int i = 0; i < batch->n; i++)
        batch->e[i].cb(batch->e[i].arg, err, NULL);
    free(batch);
}

/* Every fan of batch told the one room-wide decision res. */
static void tell_all(batch_t *batch, const gw_join_result_t *res)
{
    for (int i = 0; i < batch->n; i++)
        batch->e[i].cb(batch->e[i].arg, NULL, res);
    free(batch);
}

/* {'queued'|'prequeue', gen, now, first|opens_at, marks}: each fan's own answer. */
static void tell_each(batch_t *batch, const cm_redis_reply_t *reply, bool queued)
{
    if (cm_redis_reply_count(reply) < 5) { /* every element below exists */
        fail_all(batch, cm_err_protocol);
        return;
    }
    size_t len = 0;
    const char *marks = cm_redis_reply_str(cm_redis_reply_at(reply, 4), &len);
    const char *gen = cm_redis_reply_str(cm_redis_reply_at(reply, 1), NULL);
    const cm_redis_reply_t *third = cm_redis_reply_at(reply, 3);
    if (marks == NULL || len != (size_t)batch->n || gen == NULL) {
        fail_all(batch, cm_err_protocol);
        return;
    }
    int64_t now = cm_redis_reply_int(cm_redis_reply_at(reply, 2));
    int64_t next = queued ? cm_redis_reply_int(third) : 0;
    const char *opens = queued ? NULL : cm_redis_reply_str(third, NULL);
    for (int i = 0; i < batch->n; i++) {
        gw_join_result_t res = {.what = gw_lua_join_mark(marks[i]), .gen = gen, .now_ms = now};
        if (res.what == GW_JOIN_QUEUED)
            res.num = next++;
        else if (res.what == GW_JOIN_PREQUEUE_FULL)
            res.at = opens;
        if (res.what == GW_JOIN_BAD) /* a mark join_batch.lua does not make */
            batch->e[i].cb(batch->e[i].arg, cm_err_protocol, NULL);
        else
            batch->e[i].cb(batch->e[i].arg, NULL, &res);
    }
    free(batch);
}

static void flush(slot_t *s);
static void send_early(slot_t *s);

/* batch was answered: off the list; its room's next batch goes now if it was the last. */
static void landed(batch_t *batch)
{
    slot_t *s = batch->slot;
    if (s == NULL)
        return;
    if (batch->prev)
        batch->prev->next = batch->next;
    else
        s->owner->flying = batch->next;
    if (batch->next)
        batch->next->prev = batch->prev;
    if (--s->inflight == 0 && s->open != NULL)
        send_early(s);
}

static void on_batch(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    batch_t *batch = arg;
    landed(batch);
    gw_join_word_t what = err == NULL ? gw_lua_join_word(reply) : GW_JOIN_BAD;
    switch (what) {
    case GW_JOIN_BAD:
        if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ERROR)
            cm_log(CM_LOG_WARN, "join batch: %s", cm_redis_reply_str(reply, NULL));
        fail_all(batch, err ? err : cm_err_protocol);
        return;
    case GW_JOIN_QUEUED:
    case GW_JOIN_PREQUEUE:
        tell_each(batch, reply, what == GW_JOIN_QUEUED);
        return;
    case GW_JOIN_UNKNOWN: /* the room's gate: the same answer for every fan */
    case GW_JOIN_SOLD_OUT:
    case GW_JOIN_CLOSED:
    case GW_JOIN_NOT_OPEN:
    case GW_JOIN_REPLAYED: /* a fan's own words (its mark); as the batch's, told to all */
    case GW_JOIN_PREQUEUE_FULL:
    case GW_JOIN_CODE_REQUIRED: /* the phase needs a code (joins with one skip batches) */
    case GW_JOIN_CODE_UNKNOWN:
    case GW_JOIN_CODE_REVOKED:
    case GW_JOIN_CODE_USED_UP:
    case GW_JOIN_CODE_WRONG_PHASE:
        break;
    }
    const cm_redis_reply_t *at = cm_redis_reply_at(reply, 1);
    gw_join_result_t res = {.what = what, .at = at ? cm_redis_reply_str(at, NULL) : NULL};
    tell_all(batch, &res);
}

static void push(gw_batch_t *b, int *argc, const char *s, size_t len)
{
    b->argv[*argc] = s;
    b->argvlen[*argc] = len;
    (*argc)++;
}

/* The proof bitmaps of batch, distinct, as KEYS[12 ..] (fills b->set_of); their count. */
static int push_sets(gw_batch_t *b, batch_t *batch, int *argc)
{
    int m = 0, first = *argc;
    for (int i = 0; i < batch->n; i++) {
        const char *key = batch->e[i].fan.proof_key;
        b->set_of[i] = 0;
        if (key[0] == '\0')
            continue;
        for (int j = 0; j < m && b->set_of[i] == 0; j++)
            if (strcmp(b->argv[first + j], key) == 0)
                b->set_of[i] = j + 1;
        if (b->set_of[i] == 0) {
            push(b, argc, key, strlen(key));
            b->set_of[i] = ++m;
        }
    }
    return m;
}

static size_t int_text(char out[12], int v)
{
    cm_text_t t = cm_text_at(out, 12);
    cm_text_i64(&t, v);
    return cm_text_done(&t, out);
}

/* The fans' records: visitor id, then the score right-aligned in zeros. */
static size_t fan_records(gw_batch_t *b, const batch_t *batch)
{
    char *out = b->fans;
    for (int i = 0; i < batch->n; i++, out += GW_BATCH_FAN) {
        const gw_batch_fan_t *f = &batch->e[i].fan;
        size_t len = strlen(f->score);
        len = len > GW_BATCH_SCORE ? GW_BATCH_SCORE : len;
        memcpy(out, f->visitor, GW_VISITOR_LEN);
        memset(out + GW_VISITOR_LEN, '0', GW_BATCH_SCORE - len);
        memcpy(out + GW_BATCH_FAN - len, f->score, len);
    }
    return (size_t)batch->n * GW_BATCH_FAN;
}

/* Four digits of v (0..9999) at out. */
static void digits4(char *out, int v)
{
    for (int k = 3; k >= 0; k--, v /= 10)
        out[k] = (char)('0' + v % 10);
}

/* The proofs grouped by bitmap, as join_batch.lua takes them: each bitmap's count (4
 * digits), each proof's fan (4 digits, in the order of the proofs), and each proof as the
 * four arguments of a BITFIELD subcommand, SET u1 <serial> 1, so that the script hands a
 * bitmap's run of them to one BITFIELD as they came. Returns the new argc. */
static int push_proofs(gw_batch_t *b, const batch_t *batch, int m, int argc)
{
    int counted = 0, owned = 0, first = argc + 2;
    argc = first;
    for (int j = 1; j <= m; j++) {
        int cnt = 0;
        for (int i = 0; i < batch->n; i++) {
            if (b->set_of[i] != j)
                continue;
            const char *serial = batch->e[i].fan.proof_serial;
            digits4(b->owners + 4 * owned++, i + 1);
            push(b, &argc, "SET", 3);
            push(b, &argc, "u1", 2);
            push(b, &argc, serial, strlen(serial));
            push(b, &argc, "1", 1);
            cnt++;
        }
        digits4(b->counts + 4 * counted++, cnt);
    }
    b->argv[first - 2] = b->counts;
    b->argvlen[first - 2] = 4 * (size_t)counted;
    b->argv[first - 1] = b->owners;
    b->argvlen[first - 1] = 4 * (size_t)owned;
    return argc;
}

static void send_batch(gw_batch_t *b, batch_t *batch, slot_t *s)
{
    int argc = gw_rediskeys_cached(batch->event, b->argv, b->argvlen);
    int m = push_sets(b, batch, &argc), nkeys = argc, p = 0;
    for (int i = 0; i < batch->n; i++)
        p += b->set_of[i] != 0;
    push(b, &argc, b->num[0], int_text(b->num[0], batch->n));
    push(b, &argc, b->num[1], int_text(b->num[1], m));
    push(b, &argc, b->num[2], int_text(b->num[2], p));
    for (int i = 0, j = 0; i < batch->n && j < m; i++)
        if (b->set_of[i] == j + 1) { /* first fan of set j+1: its lifetime */
            const char *ttl = batch->e[i].fan.proof_ttl;
            push(b, &argc, ttl, strlen(ttl));
            j++;
        }
    push(b, &argc, b->fans, fan_records(b, batch));
    argc = push_proofs(b, batch, m, argc);
    b->sent++;
    if (cm_redis_eval(b->redis, gw_lua()->join_batch, on_batch, batch, nkeys, argc, b->argv,
                      b->argvlen) != 0) {
        fail_all(batch, cm_err_closed);
        return;
    }
    batch->slot = s;
    batch->prev = NULL;
    if (s != NULL) {
        s->inflight++;
        batch->next = b->flying;
        if (b->flying)
            b->flying->prev = batch;
        b->flying = batch;
    }
}

static void flush(slot_t *s)
{
    batch_t *batch = s->open;
    s->open = NULL;
    evtimer_del(s->timer);
    event_del(s->soon);
    if (batch != NULL) {
        s->sent_ns = cm_time_mono_ns();
        send_batch(s->owner, batch, s);
    }
}

static void on_window(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flush(arg);
}

/*
 * Nothing of s's room in flight: its batch goes now, or gap_ns after the room's last
 * send — the timer moved earlier than the window's end (the batch opened after that
 * send, so its window ends later still). The gap caps a worker's calls per room at one
 * per gap_ns however fast Redis answers, so a crowd's batches stay large.
 */
static void send_early(slot_t *s)
{
    uint64_t now = cm_time_mono_ns(), next = s->sent_ns + s->owner->gap_ns;
    if (now >= next) {
        flush(s);
        return;
    }
    struct timeval tv = {.tv_sec = (time_t)((next - now) / 1000000000),
                         .tv_usec = (suseconds_t)((next - now) % 1000000000 / 1000)};
    evtimer_add(s->timer, &tv);
}

/* The loop ran what was ready: send unless a batch of the room is in flight. */
static void on_soon(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    slot_t *s = arg;
    if (s->inflight == 0 && s->open != NULL)
        send_early(s);
}

static batch_t *batch_new(int cap, const char *event)
{
    batch_t *batch = cm_xmalloc(sizeof(*batch) + (size_t)cap * sizeof(entry_t));
    snprintf(batch->event, sizeof(batch->event), "%s", event);
    batch->slot = NULL;
    batch->prev = batch->next = NULL;
    batch->n = 0;
    return batch;
}

/* The slot gathering event's batch, else an idle one (opened for event); NULL: none. */
static slot_t *slot_for(gw_batch_t *b, const char *event)
{
    slot_t *idle = NULL;
    for (int i = 0; i < GW_BATCH_ROOMS; i++) {
        slot_t *s = &b->slots[i];
        if (s->open == NULL && s->inflight == 0) {
            if (idle == NULL)
                idle = s;
        } else if (strcmp(s->event, event) == 0) {
            return s;
        }
    }
    if (idle != NULL) {
        if (strcmp(idle->event, event) != 0)
            idle->sent_ns = 0; /* another room's time: this one has been quiet */
        snprintf(idle->event, sizeof(idle->event), "%s", event);
        if (idle->timer == NULL) {
            idle->timer = evtimer_new(b->base, on_window, idle);
            idle->soon = event_new(b->base, -1, 0, on_soon, idle);
        }
    }
    return idle;
}

void gw_batch_add(gw_batch_t *b, const char *event, const gw_batch_fan_t *fan, gw_batch_cb cb,
                  void *arg)
{
    slot_t *s = slot_for(b, event);
    batch_t *batch = s ? s->open : batch_new(1, event); /* every slot busy: alone */
    if (s != NULL && batch == NULL) {
        batch = s->open = batch_new(b->cap, event);
        evtimer_add(s->timer, &b->window);
        if (s->inflight == 0)
            event_active(s->soon, EV_TIMEOUT, 1);
    }
    entry_t *e = &batch->e[batch->n++];
    e->fan = *fan;
    e->cb = cb;
    e->arg = arg;
    if (s == NULL)
        send_batch(b, batch, NULL);
    else if (batch->n >= b->cap)
        flush(s);
}

void gw_batch_free(gw_batch_t *b)
{
    if (b == NULL)
        return;
    for (batch_t *f = b->flying; f != NULL; f = f->next)
        f->slot = NULL; /* cm_redis answers them later: nothing to tell us */
    for (int i = 0; i < GW_BATCH_ROOMS; i++) {
        slot_t *s = &b->slots[i];
        if (s->open != NULL)
            fail_all(s->open, cm_err_shutdown);
        if (s->timer != NULL) {
            event_free(s->timer);
            event_free(s->soon);
        }
    }
    free(b->argv);
    free(b->argvlen);
    free(b->set_of);
    free(b->counts);
    free(b->owners);
    free(b->fans);
    free(b);
}
