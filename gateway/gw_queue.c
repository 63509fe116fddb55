/*
 * gw_queue — see gw_queue.h.
 *
 * One operation type (place_op_t) carries a join or a status poll through its awaits:
 * the join script, a refresh of a room this gateway has not cached yet, and the
 * pre-queue lookup. `answer` is the decision every path ends in.
 */
#include "gw_queue.h"

#include <event2/http.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cm_err.h"
#include "cm_http.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_text.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "gw_admit.h"
#include "gw_batch.h"
#include "gw_code.h"
#include "gw_dpop.h"
#include "gw_enqueue.h"
#include "gw_metrics.h"
#include "gw_rediskeys.h"
#include "gw_limit.h"
#include "gw_lua.h"
#include "gw_page.h"
#include "gw_pow.h"
#include "gw_rooms.h"
#include "gw_ticket.h"
#include "gw_watermark.h"

typedef struct place_op {
    gw_req_t r;
    cm_pool_t *pool; /* this worker's pool of operations (srv->place_ops) */
    char event[CM_IDENT_MAX + 1];
    gw_ticket_t t;
    char ticket[GW_TICKET_MAX_LEN];
    int code;
    bool looked_up; /* the pre-queue lookup was done once already */
    bool page;      /* answer with the HTML queue page (GET /q/{event}), not JSON */
    bool fresh;     /* page without a usable ticket: the page starts a join itself */
    bool form;      /* a browser's form POST to join: answered 303 to the page */
    bool keyed;     /* the join named a key (DPoP): the new ticket is bound to jkt */
    unsigned char jkt[GW_TICKET_JKT_LEN];
    gw_pow_proof_t proof; /* the join's verified proof of work (proof.issuer[0]: none) */
    bool coded;           /* the join carries a presale code (ctext: its text, cd: parsed) */
    char ctext[GW_CODE_INPUT_MAX + 1];
    gw_code_t cd;
    char customer[GW_CUSTOMER_MAX + 1]; /* the join's enqueue token's customer; "" = none */
} place_op_t;

static void answer(place_op_t *op, gw_room_t *room);

/* The fan's address: behind HAProxy, the one its PROXY header names. */
static const char *peer_of(cm_req_t *req)
{
    return cm_http_peer(req);
}
static int issue_challenge(gw_server_t *srv, cm_req_t *req, const char *event,
                           char ch[GW_POW_CHALLENGE_LEN + 1], int64_t *expires_s);
static void refuse_proof(place_op_t *op, int code, const char *error, const char *message);
static void refuse_code(place_op_t *op, int status, const char *error, const char *message);

static void op_free(place_op_t *op)
{
    cm_pool_put(op->pool, op);
}

size_t gw_queue_queued_json(char *out, size_t size, const gw_queued_answer_t *a)
{
    cm_text_t t = cm_text_at(out, size);
    CM_TEXT_LIT(&t, "{\"event\":");
    cm_text_json(&t, a->event);
    CM_TEXT_LIT(&t, ",\"state\":\"queued\",\"ticket\":");
    cm_text_json(&t, a->ticket);
    CM_TEXT_LIT(&t, ",\"position\":");
    cm_text_i64(&t, a->position);
    CM_TEXT_LIT(&t, ",\"queue_size\":");
    cm_text_i64(&t, a->queue_size);
    CM_TEXT_LIT(&t, ",\"eta_seconds\":");
    if (a->eta_seconds >= 0)
        cm_text_i64(&t, a->eta_seconds);
    else
        CM_TEXT_LIT(&t, "null");
    CM_TEXT_LIT(&t, ",\"poll_after_ms\":");
    cm_text_i64(&t, a->poll_after_ms);
    if (a->show_left) {
        CM_TEXT_LIT(&t, ",\"left\":");
        cm_text_i64(&t, a->left);
    }
    if (a->paused)
        CM_TEXT_LIT(&t, ",\"paused\":true}");
    else
        CM_TEXT_LIT(&t, ",\"paused\":false}");
    return cm_text_done(&t, out);
}

size_t gw_queue_returns_json(char *out, size_t size, const gw_queued_answer_t *a, int64_t held)
{
    cm_text_t t = cm_text_at(out, size);
    CM_TEXT_LIT(&t, "{\"event\":");
    cm_text_json(&t, a->event);
    CM_TEXT_LIT(&t, ",\"state\":\"sold_out\",\"returns_possible\":true,\"ticket\":");
    cm_text_json(&t, a->ticket);
    CM_TEXT_LIT(&t, ",\"position\":");
    cm_text_i64(&t, a->position);
    CM_TEXT_LIT(&t, ",\"queue_size\":");
    cm_text_i64(&t, a->queue_size);
    CM_TEXT_LIT(&t, ",\"held\":");
    cm_text_i64(&t, held);
    CM_TEXT_LIT(&t, ",\"poll_after_ms\":");
    cm_text_i64(&t, a->poll_after_ms);
    CM_TEXT_LIT(&t, "}");
    return cm_text_done(&t, out);
}

/* Jitter for poll intervals (no secret): xorshift seeded once per thread from the CSPRNG,
 * not a RAND_bytes call per answer (each costs OpenSSL's getpid fork check). */
static uint32_t rnd32(void)
{
    static __thread uint64_t s;
    while (s == 0)
        cm_tls_random(&s, sizeof(s));
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (uint32_t)(s >> 32);
}

/* v's top 53 bits as decimal text (exact as a Lua number and a zset score); its length. */
static size_t score_text(uint64_t v, char out[24])
{
    cm_text_t t = cm_text_at(out, 24);
    cm_text_i64(&t, (int64_t)(v >> 11));
    return cm_text_done(&t, out);
}

/* A random integer below 2^53 as decimal text; its length. */
static size_t random_score(char out[24])
{
    uint64_t v;
    cm_tls_random_reserve(&v, sizeof(v));
    return score_text(v, out);
}

/* Operations come from the worker's pool: no allocation per request once warm. */
#define PLACE_OPS_KEPT 1024

static place_op_t *op_new(gw_server_t *srv, cm_req_t *req, gw_endpoint_t ep, const char *event)
{
    if (srv->place_ops == NULL)
        srv->place_ops = cm_pool_new(sizeof(place_op_t), PLACE_OPS_KEPT);
    place_op_t *op = cm_pool_get(srv->place_ops);
    op->pool = srv->place_ops;
    gw_req_start(&op->r, srv, req, ep);
    snprintf(op->event, sizeof(op->event), "%s", event);
    op->code = 200;
    op->proof.issuer[0] = '\0';
    op->coded = false;
    op->customer[0] = '\0';
    return op;
}

/*
 * The request's ticket: Bearer first, else the cookie. Returns 1 with op->t and
 * op->ticket filled, 0 when there is none, -1 when one was given and does not verify
 * (from_bearer tells which: a bad cookie may be stale, a bad Bearer is an error).
 */
static int read_ticket(place_op_t *op, bool *from_bearer)
{
    gw_server_t *srv = op->r.srv;
    size_t len = 0;
    const char *text = cm_http_bearer(op->r.svc.req, &len);
    *from_bearer = text != NULL;
    if (text == NULL) {
        const char *cookie = cm_http_header(op->r.svc.req, "Cookie");
        text = cookie ? gw_ticket_from_cookie(cookie, op->event, &len) : NULL;
    }
    if (text == NULL)
        return 0;
    if (len >= sizeof(op->ticket) ||
        gw_ticket_decode_any(&srv->ticket_keys, op->event, text, len, &op->t) != 0 ||
        !gw_ticket_fresh(&op->t, cm_time_wall_ms() / 1000, srv->cfg.ticket_max_age_s))
        return -1;
    memcpy(op->ticket, text, len);
    op->ticket[len] = '\0';
    return 1;
}

/* The hot answers (a queued or pre-queued fan's status and join) go into a stack buffer,
 * not a JSON tree: numbers, and the two strings escaped by cm_http_json_string (ids and
 * tickets are of a strict charset already). The queued answer, the one of every poll and
 * join, is written by hand (gw_queue_queued_json); the pre-queue's by snprintf. */
#define JSON_BODY_MAX 1024

typedef struct json_text {
    char event[6 * CM_IDENT_MAX + 3];
    char ticket[6 * GW_TICKET_MAX_LEN + 3];
} json_text_t;

static int json_texts(json_text_t *j, const char *event, const char *ticket)
{
    return cm_http_json_string(j->event, sizeof(j->event), event) < 0 ||
                   cm_http_json_string(j->ticket, sizeof(j->ticket), ticket) < 0
               ? -1
               : 0;
}

/* Sends body (n from snprintf) and frees op. */
static void reply_json_text(place_op_t *op, const char *body, int n)
{
    if (n < 0 || n >= JSON_BODY_MAX) {
        gw_reply_unavailable(&op->r, "writing the answer", cm_err_protocol);
    } else {
        gw_reply_text(&op->r, op->code, "application/json", body, (size_t)n);
    }
    op_free(op);
}

/* The phase part of the page (gw_page_info_t): what is in force on Redis time, its text,
 * what comes next, and whether a join now needs a code (the phase of a pre-queue join is
 * the one at the opening, as join.lua judges it). */
static void phase_info(const gw_room_t *room, gw_page_info_t *info)
{
    const gw_sched_t *s = &room->s.sched;
    if (s->n == 0)
        return;
    int64_t now = gw_watermark_now_ms(room), next = 0;
    int at = gw_sched_at(s, now, &next);
    int join_at = gw_sched_at(s, now > room->s.opens_at ? now : room->s.opens_at, NULL);
    info->needs_code = join_at >= 0 && s->p[join_at].requires_code;
    bool over = room->s.closes_at > 0 && now >= room->s.closes_at;
    if (at >= 0) {
        info->phase_name = s->p[at].name;
        info->phase_text = over ? s->p[s->n - 1].text_after : s->p[at].text_during;
    } else {
        info->phase_text = s->p[0].text_before;
    }
    if (next > 0 && !over) {
        info->next_phase_ms = next;
        info->next_text = s->p[at + 1].text_before;
    }
}

/* The schedule for the page's script (gw_page_info_t.phases_json); NULL without one. Caller
 * frees. */
static char *phases_json(const gw_room_t *room)
{
    const gw_sched_t *s = &room->s.sched;
    if (s->n == 0)
        return NULL;
    json_t *arr = json_array();
    for (size_t i = 0; i < s->n; i++)
        json_array_append_new(arr,
                              json_pack("{s:s, s:I, s:s, s:s, s:b}", "n", s->p[i].name, "s",
                                        (json_int_t)s->p[i].starts_ms, "b", s->p[i].text_before,
                                        "d", s->p[i].text_during, "c", s->p[i].requires_code));
    char *out = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return out;
}

/* The queue page for op's room; state and numbers as gw_page_info_t describes. */
static void reply_page(place_op_t *op, gw_room_t *room, gw_page_state_t state, int64_t position,
                       int64_t eta, int64_t poll)
{
    gw_page_info_t info = {
        .event = op->event,
        .state = state,
        .position = position,
        .queue_size = room ? gw_watermark_queue_size(room) : -1,
        .eta_seconds = eta,
        .poll_after_ms = poll,
        .opens_at_ms = room ? room->s.opens_at : 0,
        .pow = room && room->s.pow,
        .langs = gw_server_langs(op->r.srv),
        .show_left = room && room->s.show_left && room->stock_known,
        .left = room ? room->stock_left : -1,
    };
    if (room != NULL)
        gw_settings_brand(&room->s, &info.brand);
    char *phases = NULL;
    if (room != NULL) {
        phase_info(room, &info);
        info.phases_json = phases = phases_json(room);
    }
    char ch[GW_POW_CHALLENGE_LEN + 1];
    int64_t expires;
    if (info.pow && op->fresh && state == GW_PAGE_NEW) { /* the script solves it at once */
        info.pow_bits = issue_challenge(op->r.srv, op->r.svc.req, op->event, ch, &expires);
        info.pow_challenge = ch;
    }
    if (!op->fresh && op->ticket[0])
        gw_ticket_set_cookie(op->r.svc.req, op->event, op->ticket);
    gw_page_queue(op->r.svc.req, &info);
    free(phases);
    gw_req_replied(&op->r);
    op_free(op);
}

static void reply_invalid_ticket(place_op_t *op, const char *why)
{
    if (op->page) { /* a stale or foreign cookie: start afresh */
        op->fresh = true;
        reply_page(op, gw_rooms_find(op->r.srv->rooms, op->event), GW_PAGE_NEW, -1, -1,
                   op->r.srv->cfg.poll_min_ms);
        return;
    }
    cm_counter_inc(op->r.srv->m->queue.rejected_tickets);
    gw_reply_error(&op->r, 401, "invalid_ticket", why, NULL);
    op_free(op);
}

static void reply_prequeue(place_op_t *op, gw_room_t *room)
{
    gw_server_t *srv = op->r.srv;
    int64_t now = gw_watermark_now_ms(room), until = room->s.opens_at - now;
    int64_t poll;
    if (until > srv->cfg.poll_max_ms)
        poll = gw_watermark_poll_ms(0, 0, srv->cfg.poll_max_ms, srv->cfg.poll_max_ms, rnd32());
    else
        poll = (until > 0 ? until : 0) + 100 + (int64_t)(rnd32() % 2000); /* spread the opening */
    char opens[32] = "";
    cm_format_rfc3339(room->s.opens_at, opens, sizeof(opens));
    if (op->page) {
        reply_page(op, room, GW_PAGE_PREQUEUE, -1, -1, poll);
        return;
    }
    json_text_t j;
    if (json_texts(&j, room->event, op->ticket) != 0) {
        gw_reply_unavailable(&op->r, "writing the answer", cm_err_protocol);
        op_free(op);
        return;
    }
    char body[JSON_BODY_MAX];
    int n = snprintf(body, sizeof(body),
                     "{\"event\":%s,\"state\":\"prequeue\",\"opens_at\":\"%s\",\"ticket\":%s,"
                     "\"poll_after_ms\":%" PRId64 ",\"prequeue_size\":%" PRId64 "}",
                     j.event, opens, j.ticket, poll, (int64_t)room->prequeue);
    gw_ticket_set_cookie(op->r.svc.req, room->event, op->ticket);
    reply_json_text(op, body, n);
}

static void reply_queued(place_op_t *op, gw_room_t *room)
{
    gw_server_t *srv = op->r.srv;
    int64_t position = (int64_t)op->t.num - room->wm;
    double rate = gw_watermark_rate_ahead(room, position); /* no-shows ahead, live rate */
    int64_t ahead = gw_watermark_ahead_now(room, position, rate, cm_time_mono_ns() / 1000000);
    int64_t eta = gw_watermark_eta_s(ahead, rate);
    int64_t poll =
        gw_watermark_poll_eta_ms(ahead, rate, srv->cfg.poll_min_ms, srv->cfg.poll_max_ms, rnd32());
    poll = gw_watermark_poll_cap(poll, position,
                                 gw_settings_rate_at(&room->s, gw_watermark_now_ms(room)),
                                 room->s.noshow_grace_seconds);
    if (op->page) {
        reply_page(op, room, GW_PAGE_QUEUED, position, eta, poll);
        return;
    }
    /* The cached count of numbers lags joins by up to one tick; this fan's own number
     * proves the line is at least as long as their position. */
    int64_t queue_size = gw_watermark_queue_size(room);
    if (queue_size < position)
        queue_size = position;
    gw_queued_answer_t a = {
        .event = room->event,
        .ticket = op->ticket,
        .position = position,
        .queue_size = queue_size,
        .eta_seconds = eta,
        .poll_after_ms = poll,
        .paused = room->s.paused,
        .show_left = room->s.show_left && room->stock_known,
        .left = room->stock_left,
    };
    char body[JSON_BODY_MAX];
    size_t n = gw_queue_queued_json(body, sizeof(body), &a);
    gw_ticket_set_cookie(op->r.svc.req, room->event, op->ticket);
    reply_json_text(op, body, n > 0 ? (int)n : -1);
}

static void on_lookup(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    place_op_t *op = arg;
    gw_server_t *srv = op->r.srv;
    gw_room_t *room = gw_rooms_find(srv->rooms, op->event);
    gw_lookup_word_t what = err == NULL ? gw_lua_lookup_word(reply) : GW_LOOKUP_BAD;
    if (what == GW_LOOKUP_BAD || room == NULL) {
        if (room == NULL && err == NULL) {
            gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
            op_free(op);
            return;
        }
        gw_reply_unavailable(&op->r, "the pre-queue lookup", err ? err : cm_err_protocol);
        op_free(op);
        return;
    }
    switch (what) {
    case GW_LOOKUP_NUMBER:
        op->t.num = (uint64_t)cm_redis_reply_int(cm_redis_reply_at(reply, 1));
        op->t.iat = gw_watermark_now_ms(room) / 1000;
        if (gw_ticket_encode(srv->ticket_secret, srv->ticket_secret_len, op->event, &op->t,
                             op->ticket, sizeof(op->ticket)) == 0) {
            gw_reply_unavailable(&op->r, "issuing a ticket", cm_err_protocol);
            op_free(op);
            return;
        }
        room->opened = true;
        answer(op, room);
        return;
    case GW_LOOKUP_PREQUEUE:
        room->opened = false;
        reply_prequeue(op, room);
        return;
    case GW_LOOKUP_UNKNOWN:
    case GW_LOOKUP_BAD: /* not here: answered above */
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        op_free(op);
        return;
    }
}

static void lookup_number(place_op_t *op)
{
    char score[24];
    const char *argv[GW_K_COUNT + 2];
    size_t argvlen[GW_K_COUNT + 2];
    int argc = gw_rediskeys_cached(op->event, argv, argvlen);
    argvlen[argc] = strlen(gw_ticket_who(&op->t));
    argv[argc++] = gw_ticket_who(&op->t);
    argvlen[argc] = random_score(score);
    argv[argc++] = score;
    op->looked_up = true;
    if (cm_redis_eval(op->r.srv->redis, gw_lua()->lookup, on_lookup, op, GW_K_COUNT, argc, argv,
                      argvlen) != 0) {
        gw_reply_unavailable(&op->r, "the pre-queue lookup", cm_err_closed);
        op_free(op);
    }
}

/* A number the watermark has passed: its admission (gw_admit takes the request over). */
static void admit(place_op_t *op, gw_room_t *room)
{
    gw_req_t r = op->r;
    char ticket[GW_TICKET_MAX_LEN];
    gw_ticket_t t = op->t;
    memcpy(ticket, op->ticket, sizeof(ticket));
    int code = op->code;
    bool page = op->page;
    op_free(op);
    gw_admit_serve(&r, room, &t, ticket, code, page);
}

static void on_proof(gw_dpop_result_t res, void *arg)
{
    place_op_t *op = arg;
    gw_room_t *room = gw_rooms_find(op->r.srv->rooms, op->event);
    if (res == GW_DPOP_OK && room != NULL) {
        admit(op, room);
    } else if (res == GW_DPOP_UNAVAILABLE || room == NULL) {
        gw_reply_unavailable(&op->r, "checking the DPoP proof", cm_err_closed);
        op_free(op);
    } else if (op->page) { /* at the front; the page's script polls with a fresh proof */
        reply_page(op, room, GW_PAGE_QUEUED, 1, 0, op->r.srv->cfg.poll_min_ms);
    } else {
        gw_reply_error(&op->r, 401, res == GW_DPOP_MISSING ? "proof_required" : "invalid_proof",
                       gw_dpop_result_message(res),
                       json_pack("{s:s}", "reason", gw_dpop_result_str(res)));
        op_free(op);
    }
}

/* A room binding tickets to keys admits only with a proof by the ticket's key
 * (gw_dpop): a page navigation, which cannot send one, is shown the front of the line. */
static void prove(place_op_t *op, gw_room_t *room)
{
    char buf[GW_DPOP_MAX_LEN + 1];
    size_t len = 0;
    const char *proof = gw_dpop_of_request(op->r.svc.req, op->page, buf, sizeof(buf), &len);
    if (op->page && proof == NULL) {
        reply_page(op, room, GW_PAGE_QUEUED, 1, 0, op->r.srv->cfg.poll_min_ms);
        return;
    }
    gw_dpop_check(op->r.srv, op->r.svc.req, op->event, proof, len, &op->t, on_proof, op);
}

/* Nothing is left to sell: the operator says so, or the reserve's stock does. */
static bool sold_out(const gw_room_t *room)
{
    return room->s.sold_out || gw_room_stock_out(room);
}

/* The room takes nobody now: sold out, or past closes_at on its clock. */
static bool room_gone(const gw_room_t *room)
{
    return sold_out(room) ||
           (room->s.closes_at > 0 && gw_watermark_now_ms(room) >= room->s.closes_at);
}

/* Sold out by the stock alone, with units still held: the waiting keep their places, since
 * what is not bought comes back to the line (advance.lua passes it on, in order). */
static bool returns_possible(const gw_room_t *room)
{
    return !room->s.sold_out && gw_room_stock_out(room) && room->stock_held > 0 &&
           !(room->s.closes_at > 0 && gw_watermark_now_ms(room) >= room->s.closes_at);
}

void gw_queue_reply_returns(gw_req_t *r, gw_room_t *room, const char *ticket, int64_t position,
                            int code, bool page)
{
    gw_server_t *srv = r->srv;
    /* the front of the line first: returns reach it first, as holds expire */
    int64_t held = room->stock_held > 0 ? room->stock_held : 1;
    int64_t poll = gw_watermark_poll_ms(position, (double)held / 100.0, 2 * srv->cfg.poll_min_ms,
                                        srv->cfg.poll_max_ms, rnd32());
    int64_t queue_size = gw_watermark_queue_size(room);
    if (queue_size < position)
        queue_size = position;
    gw_ticket_set_cookie(r->svc.req, room->event, ticket);
    if (page) {
        gw_page_info_t info = {
            .event = room->event,
            .state = GW_PAGE_RETURNS,
            .position = position,
            .queue_size = queue_size,
            .eta_seconds = -1,
            .poll_after_ms = poll,
            .langs = gw_server_langs(srv),
        };
        gw_settings_brand(&room->s, &info.brand);
        gw_page_queue(r->svc.req, &info);
        gw_req_replied(r);
        return;
    }
    gw_queued_answer_t a = {
        .event = room->event,
        .ticket = ticket,
        .position = position,
        .queue_size = queue_size,
        .eta_seconds = -1,
        .poll_after_ms = poll,
    };
    char body[JSON_BODY_MAX];
    size_t n = gw_queue_returns_json(body, sizeof(body), &a, room->stock_held);
    if (n == 0)
        gw_reply_unavailable(r, "writing the answer", cm_err_protocol);
    else
        gw_reply_text(r, code, "application/json", body, n);
}

static void answer(place_op_t *op, gw_room_t *room)
{
    if (op->fresh) {
        gw_page_state_t state = !room_gone(room) ? GW_PAGE_NEW
                                : sold_out(room) ? GW_PAGE_SOLD_OUT
                                                 : GW_PAGE_CLOSED;
        reply_page(op, room, state, -1, -1, op->r.srv->cfg.poll_min_ms);
        return;
    }
    if (op->t.gen != room->s.gen) {
        reply_invalid_ticket(op, "the ticket belongs to an earlier waiting room of this event");
        return;
    }
    gw_watermark_saw_number(room, op->t.gen, op->t.num);
    if (op->t.num == 0) {
        if (!room->opened && !op->looked_up && gw_watermark_now_ms(room) < room->s.opens_at) {
            reply_prequeue(op, room);
            return;
        }
        if (op->looked_up) { /* opened on our clock, not yet on Redis's */
            reply_prequeue(op, room);
            return;
        }
        lookup_number(op);
        return;
    }
    if ((int64_t)op->t.num <= room->wm) {
        if (room->s.dpop) {
            prove(op, room);
            return;
        }
        admit(op, room);
        return;
    }
    if (!room_gone(room)) {
        reply_queued(op, room);
    } else if (returns_possible(room)) {
        gw_queue_reply_returns(&op->r, room, op->ticket, (int64_t)op->t.num - room->wm, op->code,
                               op->page);
        op_free(op);
    } else if (op->page) {
        reply_page(op, room, sold_out(room) ? GW_PAGE_SOLD_OUT : GW_PAGE_CLOSED, -1, -1,
                   op->r.srv->cfg.poll_max_ms);
    } else {
        gw_reply_gone(&op->r, sold_out(room));
        op_free(op);
    }
}

static void on_room(const char *err, gw_room_t *room, void *arg)
{
    place_op_t *op = arg;
    if (err != NULL) {
        gw_reply_unavailable(&op->r, "loading the waiting room", err);
        op_free(op);
        return;
    }
    if (room == NULL) {
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        op_free(op);
        return;
    }
    answer(op, room);
}

/* answer() once the room is cached (a refresh first if this gateway has not seen it). */
static void answer_with_room(place_op_t *op)
{
    gw_room_t *room = gw_rooms_find(op->r.srv->rooms, op->event);
    if (room != NULL)
        answer(op, room);
    else
        gw_watermark_refresh(op->r.srv, op->event, on_room, op);
}

void gw_queue_status(gw_server_t *srv, cm_req_t *req, const char *event)
{
    place_op_t *op = op_new(srv, req, GW_EP_STATUS, event);
    cm_counter_inc(srv->m->queue.status_polls);
    bool bearer;
    int got = read_ticket(op, &bearer);
    if (got <= 0) {
        reply_invalid_ticket(op, got == 0 ? "a queue ticket is required (join first)"
                                          : "the queue ticket is not valid for this event");
        return;
    }
    answer_with_room(op);
}

/* A browser's form join: the cookie, then 303 to the page (which shows the place). */
static void see_page(place_op_t *op)
{
    char where[CM_IDENT_MAX + 8];
    gw_room_t *room = gw_rooms_find(op->r.srv->rooms, op->event);
    if (room != NULL)
        gw_watermark_saw_number(room, op->t.gen, op->t.num);
    snprintf(where, sizeof(where), "/q/%s", op->event);
    gw_ticket_set_cookie(op->r.svc.req, op->event, op->ticket);
    cm_http_add_header(op->r.svc.req, "Location", where);
    gw_reply_text(&op->r, 303, "text/plain; charset=utf-8", "", 0);
    op_free(op);
}

/* What one join's decision says, from join.lua's reply (gw_join_result_t); its strings
 * live as long as reply. False for a reply of the wrong shape (an error reply logged). */
static bool join_result(const char *err, const cm_redis_reply_t *reply, gw_join_result_t *res)
{
    memset(res, 0, sizeof(*res));
    res->what = err == NULL ? gw_lua_join_word(reply) : GW_JOIN_BAD;
    if (res->what == GW_JOIN_BAD) {
        if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ERROR)
            cm_log(CM_LOG_WARN, "join: %s", cm_redis_reply_str(reply, NULL));
        return false;
    }
    const cm_redis_reply_t *second = cm_redis_reply_at(reply, 1);
    if (res->what == GW_JOIN_QUEUED || res->what == GW_JOIN_PREQUEUE) {
        res->gen = second ? cm_redis_reply_str(second, NULL) : NULL;
        res->num =
            cm_redis_reply_count(reply) >= 4 ? cm_redis_reply_int(cm_redis_reply_at(reply, 2)) : 0;
        res->now_ms =
            cm_redis_reply_count(reply) >= 4 ? cm_redis_reply_int(cm_redis_reply_at(reply, 3)) : 0;
    } else if (second != NULL) {
        res->at = cm_redis_reply_str(second, NULL);
    }
    return true;
}

static void join_done(void *arg, const char *err, const gw_join_result_t *res);

static void on_join(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    gw_join_result_t res;
    if (join_result(err, reply, &res))
        join_done(arg, NULL, &res);
    else
        join_done(arg, err ? err : cm_err_protocol, NULL);
}

/* A new place Redis gave op: its ticket, then the answer. Frees op (or hands it on). */
static void placed(place_op_t *op, const gw_join_result_t *res)
{
    gw_server_t *srv = op->r.srv;
    if (res->gen == NULL || gw_settings_gen_parse(res->gen, &op->t.gen) != 0) {
        gw_reply_unavailable(&op->r, "joining the queue", cm_err_protocol);
        op_free(op);
        return;
    }
    op->t.num = (uint64_t)res->num;
    op->t.iat = res->now_ms / 1000;
    op->t.bound = op->keyed;
    memcpy(op->t.jkt, op->jkt, sizeof(op->jkt));
    if (gw_ticket_encode(srv->ticket_secret, srv->ticket_secret_len, op->event, &op->t, op->ticket,
                         sizeof(op->ticket)) == 0) {
        gw_reply_unavailable(&op->r, "issuing a ticket", cm_err_protocol);
        op_free(op);
        return;
    }
    cm_counter_inc(srv->m->queue.joins);
    if (op->coded)
        cm_counter_inc(srv->m->queue.codes[GW_CODE_PLACED]);
    if (op->proof.issuer[0])
        gw_pow_count_join(srv->pow, cm_time_mono_ns() / 1000000);
    if (op->form) {
        see_page(op);
        return;
    }
    op->code = 201;
    /* A prequeue ticket whose room has just opened must not be looked up before the
     * join has even been answered: report the pre-queue; the next poll exchanges it. */
    op->looked_up = op->t.num == 0;
    answer_with_room(op);
}

/* The API's answer to a join that took no place: sold out, closed, not open yet, the
 * pre-queue full (with when to come back). Frees op. */
static void refuse(place_op_t *op, const gw_join_result_t *res)
{
    char when[32] = "";
    int64_t v = 0;
    if (res->at && cm_parse_i64(res->at, 0, INT64_MAX, &v) == 0 &&
        (v > 0 || res->what == GW_JOIN_NOT_OPEN))
        cm_format_rfc3339(v, when, sizeof(when));
    if (res->what == GW_JOIN_SOLD_OUT || res->what == GW_JOIN_CLOSED)
        gw_reply_gone(&op->r, res->what == GW_JOIN_SOLD_OUT);
    else if (res->what == GW_JOIN_PREQUEUE_FULL)
        gw_reply_error(&op->r, 409, "prequeue_full",
                       "the pre-queue is full; join again once the waiting room opens",
                       json_pack("{s:s}", "opens_at", when));
    else
        gw_reply_error(&op->r, 409, "not_open", "the waiting room does not accept fans yet",
                       json_pack("{s:s}", "prequeue_at", when));
    op_free(op);
}

/* A join's answer once Redis decided (join.lua alone, or its batch's join_batch.lua). */
static void join_done(void *arg, const char *err, const gw_join_result_t *res)
{
    place_op_t *op = arg;
    gw_server_t *srv = op->r.srv;
    if (res == NULL) {
        gw_reply_unavailable(&op->r, "joining the queue", err ? err : cm_err_protocol);
        op_free(op);
        return;
    }
    switch (res->what) {
    case GW_JOIN_QUEUED:
    case GW_JOIN_PREQUEUE:
        placed(op, res);
        return;
    case GW_JOIN_REPLAYED:
        refuse_proof(op, 409, "pow_replayed", "this proof of work placed a fan already");
        return;
    case GW_JOIN_SOLD_OUT:
    case GW_JOIN_CLOSED:
    case GW_JOIN_NOT_OPEN:
    case GW_JOIN_PREQUEUE_FULL:
        if (op->page) { /* the page says so (no place was taken) */
            op->fresh = true;
            reply_page(op, gw_rooms_find(srv->rooms, op->event),
                       res->what == GW_JOIN_SOLD_OUT ? GW_PAGE_SOLD_OUT
                       : res->what == GW_JOIN_CLOSED ? GW_PAGE_CLOSED
                                                     : GW_PAGE_NEW,
                       -1, -1, srv->cfg.poll_max_ms);
            return;
        }
        refuse(op, res);
        return;
    case GW_JOIN_CODE_REQUIRED:
        refuse_code(op, 403, "code_required",
                    "this phase of the sale is for presale code holders: join with your code");
        return;
    case GW_JOIN_CODE_UNKNOWN:
        cm_counter_inc(srv->m->queue.codes[GW_CODE_UNKNOWN]);
        refuse_code(op, 403, "code_unknown", "no such presale code for this waiting room");
        return;
    case GW_JOIN_CODE_REVOKED:
        cm_counter_inc(srv->m->queue.codes[GW_CODE_REVOKED]);
        refuse_code(op, 403, "code_revoked", "this presale code has been revoked");
        return;
    case GW_JOIN_CODE_USED_UP:
        cm_counter_inc(srv->m->queue.codes[GW_CODE_USED_UP]);
        refuse_code(op, 409, "code_used_up", "this presale code has placed all the fans it may");
        return;
    case GW_JOIN_CODE_WRONG_PHASE:
        cm_counter_inc(srv->m->queue.codes[GW_CODE_WRONG_PHASE]);
        refuse_code(op, 409, "code_wrong_phase",
                    "this presale code is for another phase of the sale than the one now");
        return;
    case GW_JOIN_UNKNOWN:
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        break;
    case GW_JOIN_BAD:
        gw_reply_unavailable(&op->r, "joining the queue", cm_err_protocol);
        break;
    }
    op_free(op);
}

/* --- proof of work (gw_pow.h): a challenge, and the check before a new place ------------ */

/* A new challenge for the request's address block into ch; its difficulty. */
static int issue_challenge(gw_server_t *srv, cm_req_t *req, const char *event,
                           char ch[GW_POW_CHALLENGE_LEN + 1], int64_t *expires_s)
{
    char block[GW_POW_BLOCK_MAX];
    gw_pow_block(peer_of(req), block);
    int bits = gw_pow_take_bits(srv->pow, block, cm_time_mono_ns() / 1000000);
    int64_t now = cm_time_wall_ms() / 1000;
    gw_pow_issue(srv->pow, event, block, bits, now, ch, GW_POW_CHALLENGE_LEN + 1);
    *expires_s = now + gw_pow_ttl(srv->pow);
    cm_counter_inc(srv->m->pow.challenges);
    return bits;
}

/* A new challenge as the API shows it: {algorithm, challenge, difficulty, expires…}. */
static json_t *challenge_json(gw_server_t *srv, cm_req_t *req, const char *event)
{
    char ch[GW_POW_CHALLENGE_LEN + 1], when[32] = "";
    int64_t expires;
    int bits = issue_challenge(srv, req, event, ch, &expires);
    int64_t ttl = gw_pow_ttl(srv->pow);
    cm_format_rfc3339(expires * 1000, when, sizeof(when));
    return json_pack("{s:s, s:s, s:i, s:s, s:I}", "algorithm", "sha256-leading-zero-bits",
                     "challenge", ch, "difficulty", bits, "expires_at", when, "expires_in_seconds",
                     (json_int_t)ttl);
}

void gw_queue_challenge(gw_server_t *srv, cm_req_t *req, const char *event)
{
    gw_req_t r;
    gw_req_start(&r, srv, req, GW_EP_JOIN);
    cm_http_add_header(req, "Cache-Control", "no-store");
    gw_reply_json(&r, 200, challenge_json(srv, req, event));
}

/* Refuses a join for its proof, with a fresh challenge to solve. Frees op. */
static void refuse_proof(place_op_t *op, int code, const char *error, const char *message)
{
    gw_server_t *srv = op->r.srv;
    cm_counter_inc(srv->m->pow.refused);
    gw_pow_count_refused(srv->pow);
    cm_http_add_header(op->r.svc.req, "Cache-Control", "no-store");
    if (op->form) { /* a form without the page's script: it cannot solve a challenge */
        json_t *body = json_pack("{s:s, s:s}", "error", "pow_required", "message", message);
        gw_reply_page(&op->r, code, body); /* steals body */
        op_free(op);
        return;
    }
    json_t *extra = json_pack("{s:o}", "pow", challenge_json(srv, op->r.svc.req, op->event));
    gw_reply_error(&op->r, code, error, message, extra);
    op_free(op);
}

static const char *proof_message(gw_pow_result_t res)
{
    switch (res) {
    case GW_POW_MALFORMED:
        return "the Onsale-Pow header must be <challenge>.<nonce> (docs/api.md)";
    case GW_POW_FORGED:
        return "the challenge was not issued by this waiting room to this network";
    case GW_POW_EXPIRED:
        return "the challenge has expired; solve the new one";
    case GW_POW_WEAK:
        return "the nonce does not solve the challenge";
    case GW_POW_OK:
        break;
    }
    return "this waiting room asks for a proof of work on join: solve the challenge and send "
           "it in the Onsale-Pow header";
}

static void take_place(place_op_t *op);

/* A room with pow on takes a new place only with a valid proof (its used-mark follows). */
/* Refuses a join for its code (the form's page shows the error). Frees op. */
static void refuse_code_after(place_op_t *op, int status, const char *error, const char *message,
                              int retry_s)
{
    cm_http_add_header(op->r.svc.req, "Cache-Control", "no-store");
    if (op->form) {
        json_t *body = json_pack("{s:s, s:s}", "error", error, "message", message);
        if (retry_s > 0)
            json_object_set_new(body, "retry_after_seconds", json_integer(retry_s));
        gw_reply_page(&op->r, status, body); /* steals body */
        op_free(op);
        return;
    }
    gw_reply_error(&op->r, status, error, message,
                   retry_s > 0 ? json_pack("{s:i}", "retry_after_seconds", retry_s) : NULL);
    op_free(op);
}

static void refuse_code(place_op_t *op, int status, const char *error, const char *message)
{
    refuse_code_after(op, status, error, message, 0);
}

/* Refuses a join for its enqueue token, or for having none in an invite-only room (the
 * form's page shows the error). Frees op. */
static void refuse_enqueue(place_op_t *op, gw_enqueue_result_t res)
{
    cm_http_add_header(op->r.svc.req, "Cache-Control", "no-store");
    json_t *body = json_pack("{s:s}", "reason", gw_enqueue_reason(res));
    if (op->form) {
        json_object_set_new(body, "error", json_string(gw_enqueue_error(res)));
        json_object_set_new(body, "message", json_string(gw_enqueue_message(res)));
        gw_reply_page(&op->r, gw_enqueue_status(res), body); /* steals body */
    } else {
        gw_reply_error(&op->r, gw_enqueue_status(res), gw_enqueue_error(res),
                       gw_enqueue_message(res), body);
    }
    op_free(op);
}

/* An unknown or malformed code: one more against the gateway's budget of failures
 * (code_failures_per_min); once it is spent every code is refused until it refills. */
static void count_failure(gw_server_t *srv, int64_t now_ms)
{
    int wait = gw_limit_take(srv->code_failures, "*", now_ms);
    if (wait > 0)
        atomic_store(srv->code_lock_ms, now_ms + (int64_t)wait * 1000);
}

/*
 * A join's code before anything else: the address block's tries, the gateway's failure
 * budget, the check character, the MAC (under the room's generation). What needs the
 * room's state (batch, uses, revocation, phase) is join.lua's. 0, or -1 once refused.
 */
static int check_code(place_op_t *op, gw_room_t *room)
{
    gw_server_t *srv = op->r.srv;
    int64_t now = cm_time_mono_ns() / 1000000;
    char block[GW_POW_BLOCK_MAX];
    gw_pow_block(peer_of(op->r.svc.req), block);
    int wait = gw_limit_take(srv->code_tries, block, now);
    if (wait <= 0 && atomic_load(srv->code_lock_ms) > now)
        wait = (int)((atomic_load(srv->code_lock_ms) - now) / 1000) + 1;
    if (wait > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", wait);
        cm_http_add_header(op->r.svc.req, "Retry-After", ra);
        cm_counter_inc(srv->m->queue.codes[GW_CODE_LIMITED]);
        refuse_code_after(op, 429, "rate_limited", "too many presale codes tried; retry later",
                          wait);
        return -1;
    }
    if (gw_code_parse(op->ctext, strlen(op->ctext), &op->cd) != 0) {
        count_failure(srv, now);
        cm_counter_inc(srv->m->queue.codes[GW_CODE_MALFORMED]);
        refuse_code(op, 400, "code_malformed",
                    "this is not a presale code: check each character (17, hyphens aside)");
        return -1;
    }
    if (srv->code_secret == NULL ||
        !gw_code_genuine(srv->code_secret, srv->code_secret_len, op->event, room->s.gen, &op->cd)) {
        count_failure(srv, now);
        cm_counter_inc(srv->m->queue.codes[GW_CODE_UNKNOWN]);
        refuse_code(op, 403, "code_unknown", "no such presale code for this waiting room");
        return -1;
    }
    return 0;
}

static void check_proof(place_op_t *op, gw_room_t *room)
{
    if (room->s.invite_only && op->customer[0] == '\0') {
        cm_counter_inc(op->r.srv->m->queue.enqueue[GW_ENQ_MISSING]);
        refuse_enqueue(op, GW_ENQ_MISSING);
        return;
    }
    if (op->coded && check_code(op, room) != 0)
        return;
    if (!room->s.pow) {
        take_place(op);
        return;
    }
    gw_server_t *srv = op->r.srv;
    const char *proof = cm_http_header(op->r.svc.req, "Onsale-Pow");
    if (proof == NULL) {
        refuse_proof(op, 428, "pow_required", proof_message(GW_POW_OK));
        return;
    }
    char block[GW_POW_BLOCK_MAX];
    gw_pow_block(peer_of(op->r.svc.req), block);
    gw_pow_result_t res = gw_pow_check(srv->pow, op->event, block, proof, strlen(proof),
                                       cm_time_wall_ms() / 1000, &op->proof);
    if (res != GW_POW_OK) {
        op->proof.issuer[0] = '\0';
        refuse_proof(op, res == GW_POW_MALFORMED ? 400 : 403, gw_pow_error(res),
                     proof_message(res));
        return;
    }
    take_place(op);
}

static void on_room_to_place(const char *err, gw_room_t *room, void *arg)
{
    place_op_t *op = arg;
    if (err != NULL) {
        gw_reply_unavailable(&op->r, "loading the waiting room", err);
        op_free(op);
    } else if (room == NULL) {
        gw_reply_error(&op->r, 404, "unknown_event", "no waiting room for this event", NULL);
        op_free(op);
    } else {
        check_proof(op, room);
    }
}

/* check_proof() once the room's settings are cached. */
static void place_with_proof(place_op_t *op)
{
    gw_room_t *room = gw_rooms_find(op->r.srv->rooms, op->event);
    if (room != NULL)
        check_proof(op, room);
    else
        gw_watermark_refresh(op->r.srv, op->event, on_room_to_place, op);
}

/*
 * Where op's proof is marked used: its serial's bit in the bitmap of the challenges of
 * its issuer whose expiry falls in the same GW_POW_BUCKET_S-second bucket,
 * "os:{<event>}:q:pw:<bucket>:<issuer>" (the room's hash slot), set by join.lua (SETBIT)
 * or join_batch.lua (BITFIELD); in ttl the seconds until the bucket's end, when every
 * challenge in it has expired (the bitmap's lifetime). A bit per proof, where a set of
 * ids took ~40 bytes and a hash-table insert each (docs/design.md, "Bot defences").
 */
static void proof_set(const place_op_t *op, char *key, size_t keylen, char ttl[24])
{
    int64_t bucket = op->proof.expires_s / GW_POW_BUCKET_S;
    int64_t left = (bucket + 1) * GW_POW_BUCKET_S - cm_time_wall_ms() / 1000 + 1;
    cm_text_t t = cm_text_at(key, keylen); /* cm_text, not snprintf: every join with a proof */
    CM_TEXT_LIT(&t, "os:{");
    cm_text_str(&t, op->event);
    CM_TEXT_LIT(&t, "}:q:pw:");
    cm_text_i64(&t, bucket);
    CM_TEXT_LIT(&t, ":");
    cm_text_str(&t, op->proof.issuer);
    cm_text_done(&t, key);
    t = cm_text_at(ttl, 24);
    cm_text_i64(&t, left > 1 ? left : 1);
    cm_text_done(&t, ttl);
}

/* op's serial as decimal text (the bit's offset); its length. */
static size_t proof_serial(const place_op_t *op, char out[12])
{
    cm_text_t t = cm_text_at(out, 12);
    cm_text_i64(&t, op->proof.serial);
    return cm_text_done(&t, out);
}

/* KEYS[12] of join.lua: op's bitmap (proof_set). Returns the new argc; *nkeys grows by one. */
static int proof_key(place_op_t *op, const char **argv, size_t *argvlen, int argc, char *key,
                     size_t keylen, char ttl[24], int *nkeys)
{
    proof_set(op, key, keylen, ttl);
    argv[argc] = key;
    argvlen[argc] = strlen(key);
    (*nkeys)++;
    return argc + 1;
}

/*
 * The key a new place is bound to: the DPoP proof's jwk (its signature is not checked
 * here: a ticket bound to a key the sender does not hold is of no use to anyone). 0, or
 * -1 once a 400 was sent: a malformed proof, or none for a room known to require one.
 */
static int bind_key(place_op_t *op)
{
    gw_dpop_proof_t p;
    size_t len = 0;
    const char *proof = gw_dpop_of_request(op->r.svc.req, false, NULL, 0, &len);
    gw_room_t *room = gw_rooms_find(op->r.srv->rooms, op->event);
    gw_dpop_result_t res = GW_DPOP_MISSING;
    if (proof != NULL && (res = gw_dpop_parse_key(proof, len, &p)) == GW_DPOP_OK) {
        op->keyed = true;
        gw_dpop_jkt_bytes(p.jkt, op->jkt);
        return 0;
    }
    if (proof == NULL && (room == NULL || !room->s.dpop))
        return 0;
    gw_dpop_count_refused(op->r.srv, room != NULL ? op->event : NULL);
    gw_reply_error(&op->r, 400, res == GW_DPOP_MISSING ? "proof_required" : "invalid_proof",
                   res == GW_DPOP_MISSING
                       ? "this waiting room binds tickets to the browser that joins: send a "
                         "DPoP proof (docs/api.md); browsers need JavaScript"
                       : gw_dpop_result_message(res),
                   json_pack("{s:s}", "reason", gw_dpop_result_str(res)));
    op_free(op);
    return -1;
}

/* The new place of op (its visitor id drawn, v its lottery score) numbered with the
 * other joins of its batch (gw_batch.h): join_batch.lua instead of join.lua. */
static void join_batched(place_op_t *op, uint64_t v)
{
    gw_server_t *srv = op->r.srv;
    if (srv->batch == NULL)
        srv->batch =
            gw_batch_new(srv->base, srv->redis, srv->cfg.join_batch_us,
                         srv->cfg.join_batch_us / GW_BATCH_GAP_DIV, (int)srv->cfg.join_batch_max);
    gw_batch_fan_t fan;
    memcpy(fan.visitor, op->t.visitor, sizeof(fan.visitor));
    score_text(v, fan.score);
    fan.proof_key[0] = fan.proof_serial[0] = fan.proof_ttl[0] = '\0';
    if (op->proof.issuer[0]) {
        proof_serial(op, fan.proof_serial);
        proof_set(op, fan.proof_key, sizeof(fan.proof_key), fan.proof_ttl);
    }
    gw_batch_add(srv->batch, op->event, &fan, join_done, op);
}

/* A new place: the per-address limit, then join.lua (or its batch's join_batch.lua). A join that
 * brought a valid proof of work has paid for its place already (the difficulty rises with its
 * address block's challenge rate, gw_pow.h): the address bucket is for rooms without proofs.
 * Nor does a customer's join count (a valid enqueue token, gw_enqueue.h): the sale site
 * vouches for one customer, who has one place however often and from wherever they join. */
static void take_place(place_op_t *op)
{
    gw_server_t *srv = op->r.srv;
    cm_req_t *req = op->r.svc.req;
    bool cust = op->customer[0] != '\0';
    int wait = op->proof.issuer[0] || cust
                   ? 0
                   : gw_limit_take(srv->limit, peer_of(req), cm_time_mono_ns() / 1000000);
    if (wait > 0) {
        cm_counter_inc(srv->m->queue.rate_limited);
        if (op->page) { /* the page's script retries the join and sees the 429 itself */
            op->fresh = true;
            reply_page(op, gw_rooms_find(srv->rooms, op->event), GW_PAGE_NEW, -1, -1,
                       (int64_t)wait * 1000);
            return;
        }
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", wait);
        cm_http_add_header(req, "Retry-After", ra);
        gw_reply_error(&op->r, 429, "rate_limited", "too many joins from this address; retry later",
                       json_pack("{s:i}", "retry_after_seconds", wait));
        op_free(op);
        return;
    }
    memset(&op->t, 0, sizeof(op->t));
    /* the visitor id and the lottery score from the thread's CSPRNG reserve */
    unsigned char raw[GW_VISITOR_LEN / 2 + sizeof(uint64_t)];
    uint64_t v;
    cm_tls_random_reserve(raw, sizeof(raw));
    cm_hex_encode(raw, GW_VISITOR_LEN / 2, op->t.visitor);
    memcpy(&v, raw + GW_VISITOR_LEN / 2, sizeof(v));
    memcpy(op->t.customer, op->customer, sizeof(op->customer));
    if (srv->cfg.join_batch_us > 0 && !op->coded && !cust) {
        join_batched(op, v);
        return;
    }
    char score[24], used[GW_KEY_MAX + GW_POW_ISSUER_LEN + 32], ttl[24], serial[12];
    char ckeys[4][GW_KEY_MAX], batch[8], cserial[12], custkey[GW_KEY_MAX];
    static const char *const ctails[4] = {GW_KEY_HOLDERS, GW_KEY_BATCHES, GW_KEY_USES,
                                          GW_KEY_REVOKED};
    const char *argv[GW_K_COUNT + 13];
    size_t argvlen[GW_K_COUNT + 13];
    int argc = gw_rediskeys_cached(op->event, argv, argvlen), nkeys = GW_K_COUNT;
    for (int i = 0; op->coded && i < 4; i++) { /* KEYS[12..15]: the code's (join.lua) */
        argvlen[argc] = gw_rediskeys_extra(op->event, ctails[i], ckeys[i]);
        argv[argc++] = ckeys[i];
        nkeys++;
    }
    if (op->proof.issuer[0]) /* then the proof's used-mark (join.lua) */
        argc = proof_key(op, argv, argvlen, argc, used, sizeof(used), ttl, &nkeys);
    if (cust) { /* last: the room's customers (join.lua) */
        argvlen[argc] = gw_rediskeys_extra(op->event, GW_KEY_CUSTOMERS, custkey);
        argv[argc++] = custkey;
        nkeys++;
    }
    argvlen[argc] = strlen(gw_ticket_who(&op->t)); /* ARGV[1]: who owns the place */
    argv[argc++] = gw_ticket_who(&op->t);
    argvlen[argc] = score_text(v, score);
    argv[argc++] = score;
    if (op->proof.issuer[0]) { /* ARGV[3], ARGV[4]: the proof's serial, the bitmap's lifetime */
        argvlen[argc] = proof_serial(op, serial);
        argv[argc++] = serial;
        argvlen[argc] = strlen(ttl);
        argv[argc++] = ttl;
    } else if (op->coded || cust) {
        argv[argc] = argv[argc + 1] = "";
        argvlen[argc] = argvlen[argc + 1] = 0;
        argc += 2;
    }
    if (op->coded) { /* ARGV[5], ARGV[6]: the code's batch and serial */
        argvlen[argc] = (size_t)snprintf(batch, sizeof(batch), "%u", op->cd.batch);
        argv[argc++] = batch;
        argvlen[argc] = (size_t)snprintf(cserial, sizeof(cserial), "%" PRIu32, op->cd.serial);
        argv[argc++] = cserial;
    } else if (cust) {
        argv[argc] = argv[argc + 1] = "";
        argvlen[argc] = argvlen[argc + 1] = 0;
        argc += 2;
    }
    if (cust) { /* ARGV[7]: the place is a customer's, KEYS' last their hash */
        argvlen[argc] = 1;
        argv[argc++] = "1";
    }
    if (cm_redis_eval(srv->redis, gw_lua()->join, on_join, op, nkeys, argc, argv, argvlen) != 0) {
        gw_reply_unavailable(&op->r, "joining the queue", cm_err_closed);
        op_free(op);
    }
}

void gw_queue_page(gw_server_t *srv, cm_req_t *req, const char *event)
{
    place_op_t *op = op_new(srv, req, GW_EP_PAGE, event);
    op->page = true;
    bool bearer;
    int got = read_ticket(op, &bearer);
    gw_room_t *room = gw_rooms_find(srv->rooms, event);
    if (got > 0 && (room == NULL || room->s.gen == op->t.gen)) {
        answer_with_room(op);
        return;
    }
    /* No usable ticket: the page, without a place. A GET takes nothing (a link or an
     * <img> on another site cannot make browsers queue); the page joins by a same-origin
     * POST — from its script, or its form without JavaScript. */
    op->ticket[0] = '\0';
    op->fresh = true;
    answer_with_room(op);
}

/*
 * True when a browser says this request comes from another site: Sec-Fetch-Site other
 * than same-origin/none, or an Origin that is not this gateway's own (the Host the
 * browser addressed). Origin "null" (what a page with Referrer-Policy no-referrer sends
 * on its own form POST) passes only with Sec-Fetch-Site: same-origin. API clients send
 * neither header and are not affected.
 */
static bool cross_site(gw_server_t *srv, cm_req_t *req)
{
    const char *site = cm_http_header(req, "Sec-Fetch-Site");
    if (site && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0)
        return true;
    const char *origin = cm_http_header(req, "Origin");
    if (origin == NULL)
        return false;
    if (strcmp(origin, "null") == 0)
        return site == NULL || strcmp(site, "same-origin") != 0;
    const char *host = cm_http_header(req, "Host");
    if (host == NULL)
        return true;
    const char *rest = NULL;
    if (strncmp(origin, "https://", 8) == 0)
        rest = origin + 8;
    else if (srv->cfg.server.plain_http && strncmp(origin, "http://", 7) == 0)
        rest = origin + 7;
    return rest == NULL || strcasecmp(rest, host) != 0;
}

static bool form_post(cm_req_t *req)
{
    const char *ct = cm_http_header(req, "Content-Type");
    return ct && strncasecmp(ct, "application/x-www-form-urlencoded", 33) == 0;
}

/* A form's field `name=` (application/x-www-form-urlencoded, '+' for spaces) into out;
 * false when absent or longer than out. A code and an enqueue token have no other escapes
 * (an escaped one does not verify, as any malformed value). */
static bool form_field(cm_req_t *req, const char *name, char *out, size_t outlen)
{
    size_t len = 0, nlen = strlen(name);
    const char *body = cm_http_body(req, &len);
    const char *p = body, *end = body ? body + len : NULL;
    while (p != NULL && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        if ((size_t)(stop - p) > nlen && memcmp(p, name, nlen) == 0 && p[nlen] == '=') {
            size_t n = 0;
            for (const char *q = p + nlen + 1; q < stop && n + 1 < outlen; q++)
                out[n++] = *q == '+' ? ' ' : *q;
            out[n] = '\0';
            return (size_t)(stop - p - nlen - 1) < outlen;
        }
        p = amp ? amp + 1 : end;
    }
    return false;
}

/* The join's presale code: the Onsale-Code header, or a form's field. 0, or -1 once a 400
 * was sent (a code too long to be one). */
static int read_code(place_op_t *op)
{
    const char *h = cm_http_header(op->r.svc.req, "Onsale-Code");
    char buf[GW_CODE_INPUT_MAX + 2];
    if (h == NULL && op->form && form_field(op->r.svc.req, "code", buf, sizeof(buf)))
        h = buf;
    if (h == NULL || h[0] == '\0')
        return 0;
    size_t n = strlen(h);
    if (n > GW_CODE_INPUT_MAX) {
        gw_reply_error(&op->r, 400, "code_malformed",
                       "a presale code is 17 characters (hyphens and spaces aside)", NULL);
        op_free(op);
        return -1;
    }
    memcpy(op->ctext, h, n + 1);
    op->coded = true;
    return 0;
}

/* The join's enqueue token: the Onsale-Enqueue header, or a form's field `enqueue` (read
 * into buf); NULL when there is none. A request that brings one joins as the customer: it
 * is the customer's place that answers, not the ticket of an earlier join from this
 * browser, and it is the one join another site's page may send. */
static const char *enqueue_text(place_op_t *op, char *buf, size_t buflen)
{
    const char *h = cm_http_header(op->r.svc.req, "Onsale-Enqueue");
    if (h == NULL && op->form && form_field(op->r.svc.req, "enqueue", buf, buflen))
        h = buf;
    return h != NULL && h[0] != '\0' ? h : NULL;
}

/* The join's enqueue token (enqueue_text, NULL: none) checked: the sale site's customer
 * into op->customer, and the token's presale code, when the request brought none, as the
 * join's code. 0 (none given, or a valid one), or -1 once refused. Whether the room needs
 * one is check_proof's (the room's settings). Called after read_code. */
static int read_enqueue(place_op_t *op, const char *token)
{
    gw_server_t *srv = op->r.srv;
    if (token == NULL)
        return 0;
    gw_enqueue_policy_t pol = {srv->cfg.enqueue_audience, srv->cfg.enqueue_issuer,
                               srv->cfg.enqueue_max_lifetime_s};
    gw_enqueue_claims_t claims;
    gw_enqueue_result_t res =
        gw_enqueue_verify(cm_reload_cell_get(srv->enqueue_keys), &pol, op->event, token,
                          strlen(token), cm_time_wall_ms() / 1000, &claims);
    cm_counter_inc(srv->m->queue.enqueue[res]);
    if (res == GW_ENQ_OK) {
        memcpy(op->customer, claims.customer, sizeof(op->customer));
        if (!op->coded && claims.code[0] != '\0') { /* the site's code for its customer */
            memcpy(op->ctext, claims.code, sizeof(op->ctext));
            op->coded = true;
        }
        return 0;
    }
    refuse_enqueue(op, res);
    return -1;
}

void gw_queue_join(gw_server_t *srv, cm_req_t *req, const char *event)
{
    place_op_t *op = op_new(srv, req, GW_EP_JOIN, event);
    op->form = form_post(req);
    char ebuf[GW_ENQUEUE_MAX_LEN + 2];
    const char *enqueue = enqueue_text(op, ebuf, sizeof(ebuf));
    /* Another site's page may send a browser to join only with that browser's customer's
     * enqueue token (the sale site's own form: the token, checked below, is its consent). */
    if (cross_site(srv, req) && enqueue == NULL) {
        cm_counter_inc(srv->m->queue.rejected_tickets);
        gw_reply_error(&op->r, 403, "cross_site",
                       "a browser may join only from this waiting room's own page", NULL);
        op_free(op);
        return;
    }
    op->page = op->form; /* its errors are pages too */
    bool bearer;
    int got = read_ticket(op, &bearer);
    if (got < 0 && bearer) {
        reply_invalid_ticket(op, "the queue ticket is not valid for this event");
        return;
    }
    if (got > 0 && enqueue == NULL) {
        gw_room_t *room = gw_rooms_find(srv->rooms, event);
        if (room == NULL || room->s.gen == op->t.gen || bearer) {
            cm_counter_inc(srv->m->queue.rejoins);
            if (op->form) {
                see_page(op);
                return;
            }
            answer_with_room(op); /* the same place, never a better one */
            return;
        }
        /* a cookie of an earlier room of this event: take a new place */
    }
    if (bind_key(op) != 0 || read_code(op) != 0 || read_enqueue(op, enqueue) != 0)
        return;
    place_with_proof(op);
}

void gw_queue_metrics_register(gw_queue_metrics_t *qm, cm_metrics_t *reg)
{
    qm->joins = cm_metrics_counter(reg, "onsale_gateway_joins_total",
                                   "new places handed out (queue and pre-queue)", NULL);
    qm->rejoins = cm_metrics_counter(reg, "onsale_gateway_rejoins_total",
                                     "joins answered with the place of a valid ticket", NULL);
    qm->status_polls =
        cm_metrics_counter(reg, "onsale_gateway_status_polls_total", "status polls received", NULL);
    qm->rejected_tickets =
        cm_metrics_counter(reg, "onsale_gateway_rejected_tickets_total",
                           "requests with a missing or invalid queue ticket", NULL);
    qm->rate_limited = cm_metrics_counter(reg, "onsale_gateway_rate_limited_total",
                                          "joins refused by the per-address limit", NULL);
    static const char *const outcomes[] = {"placed",  "malformed",   "unknown", "revoked",
                                           "used_up", "wrong_phase", "limited"};
    const char *reasons[GW_ENQ_COUNT];
    for (int i = 0; i < GW_ENQ_COUNT; i++)
        reasons[i] = gw_enqueue_reason((gw_enqueue_result_t)i);
    cm_metrics_counters(reg, "onsale_gateway_enqueue_tokens_total",
                        "joins with the sale site's enqueue token, and joins refused for having "
                        "none in an invite-only room (missing), by outcome",
                        "outcome", reasons, GW_ENQ_COUNT, qm->enqueue);
    cm_metrics_counters(reg, "onsale_gateway_codes_total",
                        "joins with a presale code, by outcome (guessing shows as unknown, "
                        "malformed and limited)",
                        "outcome", outcomes, sizeof(outcomes) / sizeof(outcomes[0]), qm->codes);
}
