/*
 * rsv_saga — see rsv_saga.h. The state machine's tables are rsv_saga_state.c; this file
 * drives a checkout along them.
 */
#include "rsv_saga.h"

#include <event2/event.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "rsv_rediskeys.h"
#include "rsv_ids.h"
#include "rsv_pay_adapter.h"
#include "rsv_req.h"

/* --- driving a checkout ------------------------------------------------------------------
 *
 * One drive is one heap block (struct saga) that lives until its callback ran. advance()
 * is the state machine: it looks at the checkout's state and issues the one operation
 * that moves it on (a Redis script, a provider call, or a Postgres transition); each
 * completion records its result with step() and calls advance() again. Steps are
 * conditional on the state they leave (onsale_saga_step) and must be in the transition
 * table above, so when another driver moved the checkout first the step reports the
 * state it found and the drive continues from there (or stops at a terminal state with
 * the answer stored there). A drive takes at most MAX_STEPS steps; every external call
 * has a deadline (Redis, Postgres and rsv_pay enforce them), so a drive always ends.
 */

#define MAX_STEPS 24

void rsv_saga_fault(rsv_server_t *srv, const char *when, rsv_saga_state_t state)
{
    const char *f = srv->cfg.fault;
    if (f == NULL || *f == '\0')
        return;
    char want[64];
    int n = snprintf(want, sizeof(want), "%s:%s", when, rsv_saga_state_name(state));
    for (const char *p = f; (p = strstr(p, want)) != NULL; p += n) {
        bool start = p == f || p[-1] == ',';
        bool end = p[n] == '\0' || p[n] == ',';
        if (start && end) {
            cm_log(CM_LOG_WARN, "fault point %s: SIGKILL", want);
            kill(getpid(), SIGKILL);
        }
    }
}

void rsv_saga_metrics_register(rsv_saga_metrics_t *sm, cm_metrics_t *reg)
{
    sm->transitions = cm_metrics_counter(reg, "onsale_reserve_checkout_transitions_total",
                                         "checkout saga transitions committed", NULL);
    sm->refunds = cm_metrics_counter(reg, "onsale_reserve_refunds_total",
                                     "payments refunded (hold expired or unit taken)", NULL);
    sm->late_payments =
        cm_metrics_counter(reg, "onsale_reserve_late_payments_total",
                           "payments that succeeded after their hold expired", NULL);
    sm->uniqueness_conflicts =
        cm_metrics_counter(reg, "onsale_reserve_uniqueness_conflicts_total",
                           "bookings refused by the Postgres unique constraint", NULL);
    sm->booking_failures = cm_metrics_counter(
        reg, "onsale_reserve_booking_failures_total",
        "paid checkouts whose booking insert failed (not a unique conflict)", NULL);
    sm->booking_abandoned = cm_metrics_counter(
        reg, "onsale_reserve_bookings_abandoned_total",
        "paid checkouts refunded because the booking kept failing (alert on any)", NULL);
}

/* --- one drive ------------------------------------------------------------------------- */

typedef struct saga {
    rsv_server_t *srv;
    rsv_saga_row_t row;
    rsv_saga_mode_t mode;
    int64_t extension_ms;
    rsv_hold_view_t view;
    int steps;
    int attempt;           /* provider retries in this drive (retry_charge) */
    uint64_t pay_start_ns; /* when this drive first charged, 0 before */
    struct event *retry;
    bool given_back; /* unconvert ran (or was skipped) in this drive */
    bool extended;   /* this drive extended the hold (view holds its layout) */
    bool charged;    /* the provider confirmed the charge to this drive; not yet in Postgres */
    char booking[RSV_CHECKOUT_ID_MAX]; /* the booking id this drive asked for */
    char *booked_body; /* the 201 answer this drive stored with its booking, or NULL */
    rsv_saga_cb cb;
    void *arg;
    /* the step in flight */
    rsv_saga_state_t to;
    int code;
    char *body;
} saga_t;

static void advance(saga_t *s);
static void convert(saga_t *s);
static void step(saga_t *s, const rsv_saga_state_t *from, rsv_saga_state_t to, const char *reason,
                 int code, char *body, int lease_s);

/* The states a step may leave, for step(): FROM(RSV_SAGA_PAID, ...). */
#define FROM(...) ((const rsv_saga_state_t[]){__VA_ARGS__, RSV_SAGA_INVALID})
static int lease_s(const saga_t *s);

static void saga_end(saga_t *s, const char *err, int code, const char *body, double hold_age)
{
    rsv_saga_end_t end = {
        .err = err, .state = s->row.state, .code = code, .body = body, .hold_age_s = hold_age};
    s->cb(&end, s->arg);
    rsv_hold_view_clear(&s->view);
    if (s->retry)
        event_free(s->retry);
    free(s->body);
    free(s->booked_body);
    free(s);
}

static void saga_fail(saga_t *s, const char *what, const char *err)
{
    cm_log(CM_LOG_WARN, "checkout %s (%s): %s: %s", s->row.id, rsv_saga_state_name(s->row.state),
           what, err ? err : "error");
    saga_end(s, err ? err : cm_err_protocol, 503, NULL, -1);
}

/* Stops short of a terminal state: 202 pending for the buyer. */
static void end_pending(saga_t *s)
{
    json_t *o = json_pack("{s:s, s:s}", "checkout_id", s->row.id, "state", "pending");
    char *b = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    saga_end(s, NULL, 202, b, -1);
    free(b);
}

static char *error_text_id(const char *checkout_id, const char *error, const char *message,
                           json_t *extra)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "error", error, "message", message, "checkout_id",
                          checkout_id);
    if (extra) {
        json_object_update(o, extra);
        json_decref(extra);
    }
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

static char *error_text(const saga_t *s, const char *error, const char *message, json_t *extra)
{
    return error_text_id(s->row.id, error, message, extra);
}

/* --- reading the stored answer after someone else finished --------------------------- */

static void on_row(const char *err, const rsv_pg_result_t *res, void *arg)
{
    saga_t *s = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        saga_fail(s, "reading the checkout", err ? err : cm_err_protocol);
        return;
    }
    s->row.state = rsv_saga_state_parse(rsv_pg_result_value(res, 0, 0));
    if (s->row.state == RSV_SAGA_INVALID) {
        saga_fail(s, "unknown checkout state", cm_err_protocol);
        return;
    }
    snprintf(s->row.charge_id, sizeof(s->row.charge_id), "%s", rsv_pg_result_value(res, 0, 3));
    snprintf(s->row.refund_id, sizeof(s->row.refund_id), "%s", rsv_pg_result_value(res, 0, 4));
    snprintf(s->row.refund_reason, sizeof(s->row.refund_reason), "%s",
             rsv_pg_result_value(res, 0, 5));
    if (rsv_saga_is_terminal(s->row.state)) {
        int code = atoi(rsv_pg_result_value(res, 0, 1));
        saga_end(s, NULL, code ? code : 500, rsv_pg_result_value(res, 0, 2), -1);
        return;
    }
    advance(s);
}

static void reread(saga_t *s)
{
    const char *params[] = {s->row.id};
    if (rsv_pg_query(s->srv->pg,
                     "SELECT state, response_code, response_body, charge_id, refund_id, "
                     "refund_reason FROM checkouts WHERE checkout_id = $1",
                     1, params, on_row, s) != 0)
        saga_fail(s, "reading the checkout", cm_err_shutdown);
}

/* --- transitions --------------------------------------------------------------------- */

/* Another driver moved the checkout first (its step did not apply): continue from the
 * state Postgres has, now. */
static void moved_first(saga_t *s, const rsv_pg_result_t *res)
{
    rsv_saga_state_t now = rsv_saga_state_parse(rsv_pg_result_value(res, 0, 1));
    if (now == RSV_SAGA_INVALID) {
        saga_fail(s, "unknown checkout state", cm_err_protocol);
        return;
    }
    cm_log(CM_LOG_INFO, "checkout %s: wanted %s → %s, found %s", s->row.id,
           rsv_saga_state_name(s->row.state), rsv_saga_state_name(s->to), rsv_saga_state_name(now));
    s->row.state = now;
    if (s->to == RSV_SAGA_PAID && s->row.charge_id[0] &&
        (now == RSV_SAGA_RELEASED || now == RSV_SAGA_FAILED)) {
        /* A charge that outlived its checkout (given up as unpaid meanwhile): it holds
         * money, so it is not terminal after all. refunding keeps the charge id and
         * the reconciler retries the refund until the provider confirms it. */
        cm_counter_inc(s->srv->m.saga.late_payments);
        snprintf(s->row.refund_reason, sizeof(s->row.refund_reason), "late_charge");
        step(s, NULL, RSV_SAGA_REFUNDING, "a charge landed after the checkout had ended: refund", 0,
             NULL, lease_s(s));
        return;
    }
    reread(s);
}

static void on_step(const char *err, const rsv_pg_result_t *res, void *arg)
{
    saga_t *s = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        if (err == cm_err_server)
            cm_log(CM_LOG_WARN, "checkout %s: step to %s: %s", s->row.id,
                   rsv_saga_state_name(s->to), rsv_pg_result_message(res));
        saga_fail(s, "recording the checkout", err ? err : cm_err_protocol);
        return;
    }
    if (strcmp(rsv_pg_result_value(res, 0, 0), "t") != 0) {
        moved_first(s, res);
        return;
    }
    rsv_saga_metrics_t *m = &s->srv->m.saga;
    cm_counter_inc(m->transitions);
    s->row.state = s->to;
    rsv_saga_fault(s->srv, "after", s->row.state);
    switch (s->row.state) {
    case RSV_SAGA_REFUNDED:
        cm_counter_inc(m->refunds);
        saga_end(s, NULL, s->code, s->body, -1);
        return;
    case RSV_SAGA_CONFIRMED: {
        double age = -1;
        if (s->view.created_ms > 0)
            age = (double)(cm_time_wall_ms() - s->view.created_ms) / 1000.0;
        saga_end(s, NULL, s->code, s->body, age);
        return;
    }
    case RSV_SAGA_FAILED:
    case RSV_SAGA_RELEASED:
        saga_end(s, NULL, s->code, s->body, -1);
        return;
    case RSV_SAGA_UNKNOWN:
        end_pending(s); /* asked again later (reconciler) or by the buyer's retry */
        return;
    case RSV_SAGA_CREATED:
    case RSV_SAGA_CONVERTING:
    case RSV_SAGA_HOLD_EXTENDED:
    case RSV_SAGA_PAYMENT_REQUESTED:
    case RSV_SAGA_PAID:
    case RSV_SAGA_DECLINED:
    case RSV_SAGA_CONVERTED:
    case RSV_SAGA_REFUNDING:
    case RSV_SAGA_NSTATES:
    case RSV_SAGA_INVALID:
        break;
    case RSV_SAGA_REQUIRES_ACTION:
        saga_end(s, NULL, s->code, s->body, -1); /* 202 with next_action */
        return;
    }
    advance(s);
}

/*
 * Moves the checkout from its current state (or any of from, ended by RSV_SAGA_INVALID)
 * to `to`, with the ids and the answer it brings (body is taken; NULL keeps the stored
 * one). lease_s: renew the lease for that long (0: let it lapse now), -1: keep. The
 * states become names here, where Postgres gets them.
 */
static void step(saga_t *s, const rsv_saga_state_t *from, rsv_saga_state_t to, const char *reason,
                 int code, char *body, int lease_s)
{
    if (++s->steps > MAX_STEPS) {
        free(body);
        saga_fail(s, "too many steps", cm_err_protocol);
        return;
    }
    const rsv_saga_state_t cur[] = {s->row.state, RSV_SAGA_INVALID};
    if (from == NULL)
        from = cur;
    char froms[160] = "{";
    for (size_t i = 0; from[i] != RSV_SAGA_INVALID; i++) {
        if (!rsv_saga_allowed(from[i], to)) {
            /* Our own bug: the transition table of rsv_saga_state has no such move. */
            cm_log(CM_LOG_ERROR, "checkout %s: %s → %s is not a saga transition", s->row.id,
                   rsv_saga_state_name(from[i]), rsv_saga_state_name(to));
            free(body);
            saga_fail(s, "an invalid transition", cm_err_protocol);
            return;
        }
        strncat(froms, rsv_saga_state_name(from[i]), sizeof(froms) - strlen(froms) - 3);
        strcat(froms, from[i + 1] != RSV_SAGA_INVALID ? "," : "");
    }
    strcat(froms, "}");
    rsv_saga_fault(s->srv, "before", to);
    s->to = to;
    free(s->body);
    s->body = body;
    s->code = code;
    char code_s[16], lease[16];
    snprintf(code_s, sizeof(code_s), "%d", code);
    snprintf(lease, sizeof(lease), "%d", lease_s);
    const char *params[] = {s->row.id,
                            froms,
                            rsv_saga_state_name(to),
                            reason,
                            s->row.charge_id[0] ? s->row.charge_id : NULL,
                            s->row.refund_id[0] ? s->row.refund_id : NULL,
                            s->row.refund_reason[0] ? s->row.refund_reason : NULL,
                            code ? code_s : NULL,
                            body,
                            lease_s >= 0 ? lease : NULL};
    if (rsv_pg_query(s->srv->pg,
                     "SELECT applied, state FROM onsale_saga_step($1, $2::text[], $3, $4, $5, "
                     "$6, $7, $8::int, $9, $10::int)",
                     10, params, on_step, s) != 0)
        saga_fail(s, "recording the checkout", cm_err_shutdown);
}

static int lease_s(const saga_t *s)
{
    return (int)s->srv->cfg.checkout_lease_s;
}

/* --- hold extension (foreground, checkout start) ------------------------------------- */

rsv_saga_extend_t rsv_saga_extend_verdict(const char *checkout_id, const rsv_hold_view_t *v,
                                          int64_t amount, int *code, char **body,
                                          const char **reason)
{
    *code = 0;
    *body = NULL;
    *reason = NULL;
    switch (v->status) {
    case RSV_HOLD_NOTFOUND:
        *code = 404;
        *reason = "hold not found at checkout start";
        *body = error_text_id(checkout_id, "unknown_hold", "no such hold of yours", NULL);
        return RSV_SAGA_EXTEND_NOTFOUND;
    case RSV_HOLD_EXPIRED:
    case RSV_HOLD_GONE:
        *code = 409;
        *reason = "hold expired before payment";
        *body = error_text_id(checkout_id, "hold_expired",
                              "the hold expired before it was confirmed", NULL);
        return RSV_SAGA_EXTEND_EXPIRED;
    case RSV_HOLD_CONVERTED:
        *code = 409;
        *reason = "hold already converted";
        *body = error_text_id(checkout_id, "hold_converted",
                              "the hold was already confirmed by another checkout", NULL);
        return RSV_SAGA_EXTEND_CONVERTED;
    case RSV_HOLD_OK:
        break;
    case RSV_HOLD_STALE:
    case RSV_HOLD_AMOUNT:
    case RSV_HOLD_NOOP:
    case RSV_HOLD_OTHER:
    case RSV_HOLD_NSTATUS:
        return RSV_SAGA_EXTEND_ERROR;
    }
    if (v->amount != amount) {
        *code = 400;
        *reason = "amount mismatch";
        *body = error_text_id(checkout_id, "amount_mismatch",
                              "payment.amount must equal the hold's amount", NULL);
        return RSV_SAGA_EXTEND_MISMATCH;
    }
    return RSV_SAGA_EXTEND_OK;
}

static void on_extended(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    saga_t *s = arg;
    rsv_hold_view_clear(&s->view);
    if (err || rsv_hold_view_parse(reply, &s->view) != 0) {
        saga_fail(s, "extending the hold", err ? err : cm_err_protocol);
        return;
    }
    const rsv_saga_state_t *from = FROM(RSV_SAGA_CREATED, RSV_SAGA_HOLD_EXTENDED);
    int code;
    char *body;
    const char *reason;
    switch (rsv_saga_extend_verdict(s->row.id, &s->view, s->row.amount, &code, &body, &reason)) {
    case RSV_SAGA_EXTEND_OK:
        break;
    case RSV_SAGA_EXTEND_ERROR:
        saga_fail(s, "extending the hold", cm_err_protocol);
        return;
    case RSV_SAGA_EXTEND_EXPIRED:
        cm_counter_inc(s->srv->m.hold.expired);
        /* fall through */
    default:
        step(s, from, RSV_SAGA_FAILED, reason, code, body, -1);
        return;
    }
    if (s->row.state == RSV_SAGA_CREATED) {
        s->extended = true; /* advance() goes on to payment_requested without a 2nd extend */
        step(s, NULL, RSV_SAGA_HOLD_EXTENDED, "hold extended at checkout start", 0, NULL,
             lease_s(s));
    } else {
        step(s, NULL, RSV_SAGA_PAYMENT_REQUESTED, "payment requested", 0, NULL, lease_s(s));
    }
}

static void extend_hold(saga_t *s)
{
    if (rsv_hold_op_extend(s->srv, s->row.hold_id, s->row.buyer, s->extension_ms, on_extended, s) !=
        0)
        saga_fail(s, "extending the hold", cm_err_closed);
}

/* --- payment ------------------------------------------------------------------------- */

/*
 * Ambiguity resolved in seconds: after a provider 5xx, a dropped connection or a deadline,
 * the buyer's drive repeats the charge RETRY_MAX times on the loop's timer, with jittered
 * exponential back-off, before it leaves the checkout to the reconciler. The create is
 * repeated under the same key (the provider replays its stored answer: the same intent);
 * each retry confirms under a fresh key ("cf_<checkout>_<n>"), because Stripe also stores a
 * 5xx under a key: the intent itself can succeed only once, so a second confirmation of a
 * settled intent only reports how it settled (payment_intent_unexpected_state). A retry
 * starts only while the drive has spent less than two provider deadlines (pay_timeout_ms)
 * charging and its two exchanges would end within the drive's lease, so deadlines that
 * keep passing hand over to the reconciler early and never race it.
 */
#define RETRY_MAX     3
#define RETRY_BASE_MS 200

static void charge(saga_t *s);

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    saga_t *s = arg;
    charge(s);
}

static bool retry_charge(saga_t *s, const rsv_pay_result_t *res)
{
    if (s->mode != RSV_SAGA_FOREGROUND || res->outcome != RSV_PAY_UNKNOWN ||
        s->attempt >= RETRY_MAX)
        return false;
    if (res->err != cm_err_server && res->err != cm_err_timeout && res->err != cm_err_closed)
        return false; /* a protocol surprise or a shutdown: no point asking again now */
    if (s->retry == NULL)
        s->retry = evtimer_new(s->srv->base, on_retry, s);
    /* base·2^n, times a jitter in [0.5, 1.5): drives retrying together spread out */
    int64_t ms = (int64_t)RETRY_BASE_MS << s->attempt;
    uint64_t r = cm_time_mono_ns() ^ ((uint64_t)(uintptr_t)s * 0x9E3779B97F4A7C15ull);
    r ^= r >> 29;
    ms = ms / 2 + (int64_t)(r % (uint64_t)ms);
    int64_t spent_ms = (int64_t)((cm_time_mono_ns() - s->pay_start_ns) / 1000000u);
    int64_t deadline_ms = s->srv->cfg.pay_timeout_ms;
    /* within two deadlines of charging, and the retry's two exchanges within the lease
     * this drive holds (past it the reconciler may take the checkout over) */
    if (spent_ms + ms >= 2 * deadline_ms ||
        spent_ms + ms + 2 * deadline_ms > (int64_t)lease_s(s) * 1000)
        return false;
    s->attempt++;
    cm_log(CM_LOG_WARN, "checkout %s: payment retry %d of %d in %lld ms", s->row.id, s->attempt,
           RETRY_MAX, (long long)ms);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(s->retry, &tv);
    return true;
}

/* Every provider error at warn, with what the provider said and whose checkout it was. */
static void log_provider_error(const saga_t *s, const char *op, const rsv_pay_result_t *res)
{
    if (res->outcome != RSV_PAY_UNKNOWN && res->outcome != RSV_PAY_DECLINED &&
        res->error_type[0] == '\0')
        return;
    if (res->outcome == RSV_PAY_DECLINED && res->status < 500 && res->err == NULL) {
        cm_log(CM_LOG_INFO, "checkout %s: payment declined (status %d, %s/%s)", s->row.id,
               res->status, res->error_type[0] ? res->error_type : "-",
               res->error_code[0] ? res->error_code : "-");
        return;
    }
    cm_log(CM_LOG_WARN,
           "checkout %s: payment provider error on %s: status %d, type %s, code %s (%s)", s->row.id,
           op, res->status, res->error_type[0] ? res->error_type : "-",
           res->error_code[0] ? res->error_code : "-", res->err ? res->err : "answered");
}

/* --- 3-D Secure ---------------------------------------------------------------------
 *
 * A charge answered requires_action: the buyer must authenticate at the provider's page
 * (res->action_url) before anything is decided. The checkout moves to requires_action with
 * the 202 answer that carries next_action, after the hold was extended to its max life
 * (max_expires_at: the extend script never goes past it), and the buyer's lease lapses: the
 * webhook's nudge or the reconciler's lookup tells how the challenge ended. A lookup that
 * still finds the intent waiting once the hold has expired (nobody answered within the
 * hold's max life) cancels the intent and releases the checkout; an intent that settled
 * first is recorded as it settled (paid → refunding through the expired hold).
 */

static void on_cancel(const rsv_pay_result_t *res, void *arg);
static void on_payment(const rsv_pay_result_t *res, void *arg);

static char *action_body(const saga_t *s, const char *url)
{
    const char *ru = rsv_pay_return_url(s->srv->pay);
    json_t *o = json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}}}", "checkout_id", s->row.id, "state",
                          "requires_action", "next_action", "type", "redirect_to_url",
                          "redirect_to_url", "url", url, "return_url", ru ? ru : "");
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

static void on_action_extended(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    saga_t *s = arg;
    rsv_hold_view_t v;
    if (err || rsv_hold_view_parse(reply, &v) != 0) {
        /* The hold keeps the life it had: the challenge may still be answered in time. */
        cm_log(CM_LOG_WARN, "checkout %s: extending the hold for 3-D Secure: %s", s->row.id,
               err ? err : cm_err_protocol);
    } else {
        rsv_hold_view_clear(&v);
    }
    char *body = s->body;
    s->body = NULL;
    step(s, FROM(RSV_SAGA_PAYMENT_REQUESTED, RSV_SAGA_UNKNOWN), RSV_SAGA_REQUIRES_ACTION,
         "the provider asks the buyer to authenticate (3-D Secure)", 202, body, 0);
}

/* The hold's max life, in ms: far more than any event allows, so the extend script caps it
 * at the hold's max_expires_at. */
#define ACTION_EXTENSION_MS (86400LL * 7 * 1000)

static void on_abandon_view(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    saga_t *s = arg;
    rsv_hold_view_t v;
    if (err || rsv_hold_view_parse(reply, &v) != 0) {
        saga_fail(s, "reading the hold", err ? err : cm_err_protocol);
        return;
    }
    bool live = v.status == RSV_HOLD_OK && v.exp_ms > cm_time_wall_ms();
    rsv_hold_view_clear(&v);
    if (live) {
        end_pending(s); /* the buyer still has time to answer the challenge */
        return;
    }
    char key[RSV_CHECKOUT_ID_MAX + 4];
    snprintf(key, sizeof(key), "cn_%s", s->row.id);
    cm_log(CM_LOG_INFO, "checkout %s: 3-D Secure unanswered within the hold's life: cancel %s",
           s->row.id, s->row.charge_id);
    if (rsv_pay_cancel(s->srv->pay, key, s->row.charge_id, on_cancel, s) != 0)
        saga_fail(s, "canceling the payment", cm_err_shutdown);
}

static void on_cancel(const rsv_pay_result_t *res, void *arg)
{
    saga_t *s = arg;
    if (res->outcome == RSV_PAY_NONE) {
        cm_counter_inc(s->srv->m.reconcile.actions[RSV_RECONCILE_RELEASED]);
        step(s, FROM(RSV_SAGA_REQUIRES_ACTION), RSV_SAGA_RELEASED,
             "authentication abandoned: the intent is canceled", 409,
             error_text(s, "payment_not_completed",
                        "the payment was not authenticated in time; nothing was charged", NULL),
             -1);
        return;
    }
    if (res->outcome == RSV_PAY_ACTION || res->outcome == RSV_PAY_UNKNOWN) {
        end_pending(s); /* the cancel did not go through: asked again later */
        return;
    }
    on_payment(res, arg); /* settled before the cancel: paid or declined */
}

static void action_required(saga_t *s, const rsv_pay_result_t *res)
{
    if (res->id[0])
        snprintf(s->row.charge_id, sizeof(s->row.charge_id), "%s", res->id);
    if (s->row.state != RSV_SAGA_REQUIRES_ACTION) {
        cm_log(CM_LOG_INFO, "checkout %s: the provider asks the buyer to authenticate (%s)",
               s->row.id, res->action_url[0] ? res->action_url : "no URL");
        free(s->body);
        s->body = action_body(s, res->action_url);
        if (rsv_hold_op_extend(s->srv, s->row.hold_id, s->row.buyer, ACTION_EXTENSION_MS,
                               on_action_extended, s) != 0)
            on_action_extended(cm_err_closed, NULL, s);
        return;
    }
    if (s->mode == RSV_SAGA_BACKGROUND && s->row.charge_id[0]) {
        if (rsv_hold_op_read(s->srv, s->row.hold_id, s->row.buyer, on_abandon_view, s) != 0)
            saga_fail(s, "reading the hold", cm_err_closed);
        return;
    }
    /* The buyer asked again while the challenge waits: the same 202 with next_action. */
    char *body = action_body(s, res->action_url);
    saga_end(s, NULL, 202, body, -1);
    free(body);
}

static void record_payment(saga_t *s, const rsv_pay_result_t *res)
{
    rsv_reconcile_metrics_t *m = &s->srv->m.reconcile;
    const rsv_saga_state_t *from =
        FROM(RSV_SAGA_PAYMENT_REQUESTED, RSV_SAGA_UNKNOWN, RSV_SAGA_REQUIRES_ACTION);
    switch (res->outcome) {
    case RSV_PAY_PAID:
        /* Not committed on its own (merge (b), docs/confirm.md): the charge is recorded,
         * passing through paid, by the commit that books it or refunds it. A crash before
         * that leaves the checkout where it was; the provider is asked again by key. */
        snprintf(s->row.charge_id, sizeof(s->row.charge_id), "%s", res->id);
        s->charged = true;
        convert(s);
        return;
    case RSV_PAY_DECLINED:
        snprintf(s->row.charge_id, sizeof(s->row.charge_id), "%s", res->id);
        step(s, from, RSV_SAGA_DECLINED, "the provider declined the charge", 0, NULL, lease_s(s));
        return;
    case RSV_PAY_NONE:
        cm_counter_inc(m->actions[RSV_RECONCILE_RELEASED]);
        step(s, from, RSV_SAGA_RELEASED, "the provider has no charge under this checkout's key",
             409,
             error_text(s, "payment_not_completed",
                        "the payment did not go through; nothing was charged", NULL),
             -1);
        return;
    case RSV_PAY_ACTION:
        action_required(s, res);
        return;
    default:
        break;
    }
    if (retry_charge(s, res))
        return;
    if (s->row.state == RSV_SAGA_REQUIRES_ACTION) {
        end_pending(s); /* no definite answer: asked again later */
        return;
    }
    if (s->row.state == RSV_SAGA_PAYMENT_REQUESTED) {
        /* Foreground: the buyer gets 202 and the reconciler takes over (lease lapses). */
        step(s, NULL, RSV_SAGA_UNKNOWN,
             res->err ? res->err : "no definite answer from the provider", 0, NULL,
             s->mode == RSV_SAGA_FOREGROUND ? 0 : lease_s(s));
        return;
    }
    end_pending(s); /* stays unknown: asked again later */
}

static void on_payment(const rsv_pay_result_t *res, void *arg)
{
    saga_t *s = arg;
    cm_counter_inc(s->srv->m.pay.outcomes[res->outcome]);
    if (res->outcome == RSV_PAY_PAID)
        rsv_saga_fault(s->srv, "before", RSV_SAGA_PAID);
    record_payment(s, res);
}

static void on_pay_timed(const rsv_pay_result_t *res, void *arg, rsv_pay_op_t op)
{
    saga_t *s = arg;
    cm_histogram_observe(s->srv->m.pay.latency[op], res->seconds);
}

static void on_charge(const rsv_pay_result_t *res, void *arg)
{
    on_pay_timed(res, arg, RSV_PAY_OP_CHARGE);
    log_provider_error(arg, "charge", res);
    on_payment(res, arg);
}

static void on_lookup(const rsv_pay_result_t *res, void *arg)
{
    on_pay_timed(res, arg, RSV_PAY_OP_LOOKUP);
    log_provider_error(arg, "lookup", res);
    on_payment(res, arg);
}

/* The charge as the provider knows it: the same for every drive of this checkout. */
static rsv_pay_charge_req_t charge_req(const saga_t *s)
{
    rsv_pay_charge_req_t r = {
        .key = s->row.id,
        .attempt = s->attempt,
        .amount = s->row.amount,
        .currency = s->row.currency,
        .payment_method = s->row.source[0] ? s->row.source : NULL,
        .event = s->row.event,
        .request_id = s->row.request_id,
    };
    return r;
}

static void charge(saga_t *s)
{
    if (s->pay_start_ns == 0)
        s->pay_start_ns = cm_time_mono_ns();
    rsv_pay_charge_req_t r = charge_req(s);
    if (rsv_pay_charge(s->srv->pay, &r, on_charge, s) != 0)
        saga_fail(s, "charging", cm_err_shutdown);
}

static void lookup(saga_t *s)
{
    cm_counter_inc(s->srv->m.reconcile.actions[RSV_RECONCILE_LOOKUP]);
    rsv_pay_charge_req_t r = charge_req(s);
    if (rsv_pay_lookup(s->srv->pay, &r, on_lookup, s) != 0)
        saga_fail(s, "asking the provider", cm_err_shutdown);
}

/* --- refund -------------------------------------------------------------------------- */

/* Why a checkout is refunded, by the refund_reason the saga or Postgres wrote. */
static const struct {
    const char *reason;
    rsv_saga_refund_t why;
} refund_whys[] = {
    {"hold_expired",
     {"hold_expired", 409, "the payment outlived the hold; it was refunded", false}},
    /* give_back: found by the booking step, after convert.lua marked the units sold
     * (merge (b), docs/confirm.md); the give-back only acts on a hold this checkout
     * converted, so a late charge caught before converting costs one read. */
    {"late_charge",
     {"payment_not_completed", 409,
      "the payment did not complete in time; the charge that came later was refunded", true}},
    {"booking_failed",
     {"booking_failed", 500, "the booking could not be recorded; the payment was refunded", true}},
    {"sold_out",
     {"sold_out", 409, "the pool had no free unit left; the payment was refunded", true}},
    {"hold_changed",
     {"hold_changed", 409,
      "the hold's items changed while it was being paid for; the payment was refunded", true}},
    {"seat_unavailable",
     {"seat_unavailable", 409, "a unit of this hold was already booked; the payment was refunded",
      true}},
};

rsv_saga_refund_t rsv_saga_refund_why(const char *reason)
{
    if (reason == NULL || reason[0] == '\0')
        reason = "hold_expired"; /* written before reasons were */
    for (size_t i = 0; i < sizeof(refund_whys) / sizeof(refund_whys[0]); i++)
        if (strcmp(reason, refund_whys[i].reason) == 0)
            return refund_whys[i].why;
    /* A reason of another version: named as it is, answered like a unit taken. */
    rsv_saga_refund_t other = {
        reason, 409, "a unit of this hold was already booked; the payment was refunded", false};
    return other;
}

static void on_refund(const rsv_pay_result_t *res, void *arg)
{
    saga_t *s = arg;
    on_pay_timed(res, arg, RSV_PAY_OP_REFUND);
    if (res->outcome != RSV_PAY_REFUNDED) {
        cm_log(CM_LOG_WARN,
               "checkout %s: refund of %s not confirmed (%s, status %d, type %s, code %s); "
               "retried later",
               s->row.id, s->row.charge_id, res->err ? res->err : "?", res->status,
               res->error_type[0] ? res->error_type : "-",
               res->error_code[0] ? res->error_code : "-");
        end_pending(s);
        return;
    }
    snprintf(s->row.refund_id, sizeof(s->row.refund_id), "%s", res->id);
    rsv_saga_refund_t why = rsv_saga_refund_why(s->row.refund_reason);
    json_t *extra =
        json_pack("{s:{s:s, s:s, s:I, s:s}}", "refund", "status", "refunded", "id", res->id,
                  "amount", (json_int_t)s->row.amount, "currency", s->row.currency);
    step(s, FROM(RSV_SAGA_REFUNDING), RSV_SAGA_REFUNDED, "payment refunded", why.code,
         error_text(s, why.error, why.message, extra), -1);
}

static void refund(saga_t *s)
{
    char key[RSV_CHECKOUT_ID_MAX + 4];
    snprintf(key, sizeof(key), "rf_%s", s->row.id);
    if (rsv_pay_refund(s->srv->pay, key, s->row.charge_id, 0, on_refund, s) != 0)
        saga_fail(s, "refunding", cm_err_shutdown);
}

/* --- conversion ---------------------------------------------------------------------- */

static char *ok_body(const saga_t *s, const char *booking_id)
{
    json_t *o = json_object();
    json_object_set_new(o, "checkout_id", json_string(s->row.id));
    json_object_set_new(o, "booking_id", json_string(booking_id));
    json_object_set_new(o, "state", json_string("confirmed"));
    json_object_set_new(o, "event", json_string(s->row.event));
    json_object_set_new(o, "hold_id", json_string(s->row.hold_id));
    rsv_hold_json_items(o, &s->view);
    json_object_set_new(o, "amount", json_integer(s->row.amount));
    json_object_set_new(o, "currency", json_string(s->row.currency));
    json_object_set_new(o, "charge_id", json_string(s->row.charge_id));
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

/*
 * The units as a Postgres text[] literal (identifiers: nothing to escape), or NULL when
 * the hold record in Redis is not what we wrote (too many units, an over-long id): the
 * length of every piece is checked, never truncated.
 */
static char *units_literal(const rsv_hold_view_t *v)
{
    if (v->qty < 0 || v->qty > 1000 || strlen(v->pool) > CM_IDENT_MAX)
        return NULL;
    size_t cap =
        4 + (v->seats ? strlen(v->seats) * 3 + 2 : 0) + (size_t)v->qty * (strlen(v->pool) + 4 + 21);
    char *out = cm_xmalloc(cap);
    size_t len = 0;
    out[len++] = '{';
    if (v->pool[0]) {
        for (int64_t i = 0; i < v->qty; i++) {
            int n = snprintf(out + len, cap - len, "%s\"%s#%lld\"", i ? "," : "", v->pool,
                             (long long)(v->first_unit + i));
            if (n < 0 || (size_t)n >= cap - len) {
                free(out);
                return NULL;
            }
            len += (size_t)n;
        }
    } else if (v->seats) {
        out[len++] = '"';
        for (const char *p = v->seats; *p; p++) {
            if (*p == ',') {
                memcpy(out + len, "\",\"", 3);
                len += 3;
            } else if (*p == '"' || *p == '\\' || *p == '{' || *p == '}') {
                free(out); /* never written by us: seat ids are identifiers */
                return NULL;
            } else {
                out[len++] = *p;
            }
        }
        out[len++] = '"';
    }
    if (len + 2 > cap) {
        free(out);
        return NULL;
    }
    out[len++] = '}';
    out[len] = '\0';
    return out;
}

/* What onsale_saga_book did (its outcome column), parsed in one place. */
typedef enum {
    BOOK_CONFIRMED, /* paid → converted → confirmed, now or by an earlier drive */
    BOOK_CONVERTED, /* left converted by an earlier version */
    BOOK_FAILED,    /* the insert failed: retried later */
    BOOK_REFUNDING, /* paid → refunding: refund_reason says why */
    BOOK_OTHER,     /* 'state': not paid, nothing done */
} book_outcome_t;

static book_outcome_t book_outcome(const char *outcome)
{
    static const char *const words[BOOK_OTHER] = {
        [BOOK_CONFIRMED] = "confirmed",
        [BOOK_CONVERTED] = "converted",
        [BOOK_FAILED] = "failed",
        [BOOK_REFUNDING] = "refunding",
    };
    for (int i = 0; i < BOOK_OTHER; i++)
        if (strcmp(outcome, words[i]) == 0)
            return (book_outcome_t)i;
    return BOOK_OTHER;
}

/* paid → converted → confirmed, committed together (migration 004) with our booking id. */
static void booked(saga_t *s)
{
    s->row.state = RSV_SAGA_CONFIRMED;
    cm_counter_add(s->srv->m.saga.transitions, 2);
    rsv_saga_fault(s->srv, "after", RSV_SAGA_CONFIRMED);
    double age =
        s->view.created_ms > 0 ? (double)(cm_time_wall_ms() - s->view.created_ms) / 1000.0 : -1;
    char *body = s->booked_body;
    s->booked_body = NULL;
    saga_end(s, NULL, 201, body, age);
    free(body);
}

/* paid → refunding committed by the booking step: a unit taken, sold out, or the insert
 * kept failing. */
static void book_refused(saga_t *s, const char *reason, const char *detail, int failures)
{
    if (strcmp(reason, "late_charge") == 0) {
        cm_counter_inc(s->srv->m.saga.late_payments);
        cm_log(CM_LOG_WARN, "checkout %s: charge %s landed after the checkout had ended; refund",
               s->row.id, s->row.charge_id);
    } else if (strcmp(reason, "booking_failed") == 0) {
        cm_counter_inc(s->srv->m.saga.booking_failures);
        cm_counter_inc(s->srv->m.saga.booking_abandoned);
        cm_log(CM_LOG_ERROR,
               "checkout %s: booking failed %d times (%s); the payment is refunded (alert: "
               "paid and not booked)",
               s->row.id, failures, detail);
    } else {
        cm_counter_inc(s->srv->m.saga.uniqueness_conflicts);
    }
    s->row.state = RSV_SAGA_REFUNDING;
    s->charged = false;
    snprintf(s->row.refund_reason, sizeof(s->row.refund_reason), "%s", reason);
    cm_counter_inc(s->srv->m.saga.transitions);
    rsv_saga_fault(s->srv, "after", RSV_SAGA_REFUNDING);
}

static void on_booked(const char *err, const rsv_pg_result_t *res, void *arg)
{
    saga_t *s = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        if (err == cm_err_server)
            cm_log(CM_LOG_WARN, "checkout %s: booking: %s", s->row.id, rsv_pg_result_message(res));
        saga_fail(s, "booking", err ? err : cm_err_protocol);
        return;
    }
    const char *outcome = rsv_pg_result_value(res, 0, 0);
    const char *reason = rsv_pg_result_value(res, 0, 2);
    const char *detail = rsv_pg_result_value(res, 0, 3);
    int failures = atoi(rsv_pg_result_value(res, 0, 4));
    switch (book_outcome(outcome)) {
    case BOOK_CONFIRMED:
        if (strcmp(rsv_pg_result_value(res, 0, 1), s->booking) != 0) {
            /* Booked by an earlier drive: its answer is stored (a replay answers the
             * original booking id). */
            s->row.state = RSV_SAGA_CONFIRMED;
            reread(s);
            return;
        }
        booked(s);
        return;
    case BOOK_CONVERTED:
        /* Left converted by an earlier version: converted → confirmed with the stored
         * answer, read back. */
        free(s->booked_body);
        s->booked_body = NULL;
        s->row.state = RSV_SAGA_CONVERTED;
        break;
    case BOOK_FAILED:
        /* Not a conflict: the charge is recorded (paid); the booking is retried by the
         * reconciler, refunded after book_max_attempts. */
        s->row.state = RSV_SAGA_PAID;
        s->charged = false;
        cm_counter_inc(s->srv->m.saga.booking_failures);
        cm_log(CM_LOG_WARN, "checkout %s: booking failed (attempt %d of %lld): %s", s->row.id,
               failures, (long long)s->srv->cfg.book_max_attempts, detail);
        saga_fail(s, "booking", cm_err_server);
        return;
    case BOOK_REFUNDING:
        book_refused(s, reason, detail, failures);
        break;
    case BOOK_OTHER:
        reread(s);
        return;
    }
    advance(s);
}

static void on_paid_refund(const char *err, const rsv_pg_result_t *res, void *arg)
{
    saga_t *s = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        if (err == cm_err_server)
            cm_log(CM_LOG_WARN, "checkout %s: recording the charge for refund: %s", s->row.id,
                   rsv_pg_result_message(res));
        saga_fail(s, "recording the checkout", err ? err : cm_err_protocol);
        return;
    }
    if (strcmp(rsv_pg_result_value(res, 0, 0), "t") != 0) {
        /* Moved on by another drive (refunding, refunded): continue from what it has. */
        s->charged = false;
        reread(s);
        return;
    }
    s->charged = false;
    s->row.state = RSV_SAGA_REFUNDING;
    snprintf(s->row.refund_reason, sizeof(s->row.refund_reason), "%s",
             rsv_pg_result_value(res, 0, 2));
    cm_counter_inc(s->srv->m.saga.transitions);
    rsv_saga_fault(s->srv, "after", RSV_SAGA_REFUNDING);
    advance(s);
}

/*
 * A charged checkout whose hold cannot be booked goes to refunding with refund_reason why.
 * A charge this drive holds but Postgres does not (merge (b)) is recorded in the same
 * commit (onsale_saga_paid_refund: through paid, or late_charge for a checkout that ended
 * meanwhile); a checkout already paid takes the one step.
 */
static void refund_charged(saga_t *s, const char *why, const char *reason)
{
    snprintf(s->row.refund_reason, sizeof(s->row.refund_reason), "%s", why);
    if (!s->charged) {
        step(s, NULL, RSV_SAGA_REFUNDING, reason, 0, NULL, lease_s(s));
        return;
    }
    if (++s->steps > MAX_STEPS) {
        saga_fail(s, "too many steps", cm_err_protocol);
        return;
    }
    rsv_saga_fault(s->srv, "before", RSV_SAGA_REFUNDING);
    char lease[16];
    snprintf(lease, sizeof(lease), "%d", lease_s(s));
    const char *params[] = {s->row.id, s->row.charge_id, why, reason, lease};
    if (rsv_pg_query(s->srv->pg,
                     "SELECT applied, state, refund_reason "
                     "FROM onsale_saga_paid_refund($1, $2, $3, $4, $5::int)",
                     5, params, on_paid_refund, s) != 0)
        saga_fail(s, "recording the checkout", cm_err_shutdown);
}

/* The hold this drive extended (and charged for) has other items than the one it converted:
 * its record changed under the charge and the convert script's STALE made the conversion read
 * it again. A drive that did not extend knows no other layout than the record's. */
static bool items_changed(const saga_t *s, const char *charged_seats, const char *charged_pool)
{
    if (!s->extended)
        return false;
    return strcmp(charged_seats ? charged_seats : "", s->view.seats ? s->view.seats : "") != 0 ||
           strcmp(charged_pool, s->view.pool) != 0;
}

static void on_converted(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    saga_t *s = arg;
    char *charged_seats = s->view.seats, charged_pool[sizeof(s->view.pool)];
    snprintf(charged_pool, sizeof(charged_pool), "%s", s->view.pool);
    s->view.seats = NULL;
    rsv_hold_view_clear(&s->view);
    int parsed = err ? -1 : rsv_hold_view_parse(reply, &s->view);
    bool changed = parsed == 0 && items_changed(s, charged_seats, charged_pool);
    free(charged_seats);
    if (parsed != 0) {
        saga_fail(s, "converting the hold", err ? err : cm_err_protocol);
        return;
    }
    if (s->view.status != RSV_HOLD_OK) {
        /* The payment outlived the hold (or the hold is gone): it goes back. */
        cm_counter_inc(s->srv->m.saga.late_payments);
        refund_charged(s, "hold_expired", "paid, but the hold had expired at conversion: refund");
        return;
    }
    if (changed) {
        /* Never book other items than the ones paid for: what the conversion took in Redis
         * goes back (needs_giveback), then the payment. */
        cm_log(CM_LOG_ERROR,
               "checkout %s: hold %s changed its items while being paid for; the payment is "
               "refunded",
               s->row.id, s->row.hold_id);
        refund_charged(s, "hold_changed",
                       "paid, but the hold's items changed under the charge: refund");
        return;
    }
    char *booking = s->booking;
    rsv_random_id(booking, sizeof(s->booking), "bk_");
    char *units = units_literal(&s->view);
    if (units == NULL) {
        cm_log(CM_LOG_ERROR, "checkout %s: the hold's units in Redis are malformed", s->row.id);
        saga_fail(s, "booking", cm_err_protocol);
        return;
    }
    char *body = ok_body(s, booking);
    char max[16];
    snprintf(max, sizeof(max), "%lld", (long long)s->srv->cfg.book_max_attempts);
    const char *params[] = {s->row.id, booking, s->view.pool[0] ? s->view.pool : NULL, units,
                            body,      max,     s->charged ? s->row.charge_id : NULL};
    rsv_saga_fault(s->srv, "before", RSV_SAGA_CONVERTED);
    int rc = rsv_pg_query(s->srv->pg,
                          "SELECT outcome, booking_id, refund_reason, detail, failures "
                          "FROM onsale_saga_book($1, $2, $3, $4::text[], $5, $6::int, $7)",
                          7, params, on_booked, s);
    free(units);
    free(s->booked_body);
    s->booked_body = body; /* what onsale_saga_book stores if it books with our id */
    if (rc != 0)
        saga_fail(s, "booking", cm_err_shutdown);
}

static void convert(saga_t *s)
{
    /* The layout is known from this drive's extend: no read first (the script checks it
     * against the record anyway). */
    const rsv_hold_view_t *known = s->extended && s->view.status == RSV_HOLD_OK ? &s->view : NULL;
    if (rsv_hold_op_convert(s->srv, s->row.hold_id, s->row.buyer, known, s->row.id, s->row.amount,
                            on_converted, s) != 0)
        saga_fail(s, "converting the hold", cm_err_closed);
}

/* --- giving back what a refused conversion took in Redis ------------------------------ */

/* Postgres refused a booking whose hold Redis had already converted: the seats' sold
 * marks, the pool units and the buyer-limit entry go back (the units Postgres has not
 * booked to anyone), before the refund. Any failure here is logged and the refund goes
 * ahead: money first. */
static bool needs_giveback(const saga_t *s)
{
    return !s->given_back && rsv_saga_refund_why(s->row.refund_reason).give_back;
}

static void giveback_end(saga_t *s, const char *what, const char *err)
{
    if (what)
        cm_log(CM_LOG_WARN, "checkout %s: giving back the hold's units: %s: %s", s->row.id, what,
               err ? err : "error");
    s->given_back = true;
    refund(s);
}

static void on_given_back(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    saga_t *s = arg;
    rsv_hold_status_t st = err ? RSV_HOLD_OTHER : rsv_hold_reply_status(reply);
    if (st == RSV_HOLD_OTHER) {
        giveback_end(s, "unconvert", err ? err : cm_err_protocol);
        return;
    }
    if (st == RSV_HOLD_OK)
        cm_log(CM_LOG_INFO, "checkout %s: gave back %lld seats, %lld pool units", s->row.id,
               cm_redis_reply_int(cm_redis_reply_at(reply, 1)),
               cm_redis_reply_int(cm_redis_reply_at(reply, 2)));
    giveback_end(s, NULL, NULL); /* NOOP, NOTFOUND, GONE: nothing (left) to give back */
}

static void on_units_free(const char *err, const rsv_pg_result_t *res, void *arg)
{
    saga_t *s = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        giveback_end(s, "asking Postgres which units are free", err ? err : cm_err_protocol);
        return;
    }
    if (rsv_hold_op_unconvert(s->srv, s->row.hold_id, s->row.buyer, s->row.id,
                              rsv_pg_result_value(res, 0, 0), rsv_pg_result_value(res, 0, 1),
                              on_given_back, s) != 0)
        giveback_end(s, "unconvert", cm_err_closed);
}

static void on_giveback_view(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    saga_t *s = arg;
    rsv_hold_view_t v;
    if (err || rsv_hold_view_parse(reply, &v) != 0) {
        giveback_end(s, "reading the hold", err ? err : cm_err_protocol);
        return;
    }
    if (v.status != RSV_HOLD_CONVERTED || strcmp(v.checkout, s->row.id) != 0) {
        rsv_hold_view_clear(&v); /* not converted by us (or given back before): nothing */
        giveback_end(s, NULL, NULL);
        return;
    }
    char *units = units_literal(&v);
    bool pool = v.pool[0] != '\0';
    rsv_hold_view_clear(&v);
    if (units == NULL) {
        giveback_end(s, "the hold's units", cm_err_protocol);
        return;
    }
    const char *params[] = {s->row.event, units};
    /* Of a pool, only units Postgres has: one past the capacity (handed out by a stale
     * Redis counter) was never there to give back. */
    int rc = rsv_pg_query(s->srv->pg,
                          pool ? "SELECT array_to_string(f, ','), cardinality(f) "
                                 "FROM onsale_units_free($1, ARRAY(SELECT s.seat_id FROM seats s "
                                 "WHERE s.event_id = $1 AND s.seat_id = ANY ($2::text[]))) f"
                               : "SELECT array_to_string(f, ','), cardinality(f) "
                                 "FROM onsale_units_free($1, $2::text[]) f",
                          2, params, on_units_free, s);
    free(units);
    if (rc != 0)
        giveback_end(s, "asking Postgres which units are free", cm_err_shutdown);
}

static void giveback(saga_t *s)
{
    if (rsv_hold_op_read(s->srv, s->row.hold_id, s->row.buyer, on_giveback_view, s) != 0)
        giveback_end(s, "reading the hold", cm_err_closed);
}

/* --- the state machine --------------------------------------------------------------- */

static void on_confirm_body(const char *err, const rsv_pg_result_t *res, void *arg)
{
    saga_t *s = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        saga_fail(s, "reading the booking", err ? err : cm_err_protocol);
        return;
    }
    /* converted → confirmed keeps the 201 answer the booking step stored. */
    char *body = cm_xstrdup(rsv_pg_result_value(res, 0, 0));
    step(s, NULL, RSV_SAGA_CONFIRMED, "booking confirmed", 201, body, -1);
}

/* converted, left by an earlier version: the booking now confirms in its own transaction
 * (onsale_saga_book), so only an old checkout is here. */
static void confirm_converted(saga_t *s)
{
    const char *params[] = {s->row.id};
    if (rsv_pg_query(s->srv->pg, "SELECT response_body FROM checkouts WHERE checkout_id = $1", 1,
                     params, on_confirm_body, s) != 0)
        saga_fail(s, "reading the booking", cm_err_shutdown);
}

/* The one place a drive decides what a state needs next. */
static void advance(saga_t *s)
{
    bool fg = s->mode == RSV_SAGA_FOREGROUND;
    switch (s->row.state) {
    case RSV_SAGA_CONFIRMED:
    case RSV_SAGA_FAILED:
    case RSV_SAGA_RELEASED:
    case RSV_SAGA_REFUNDED:
        reread(s); /* terminal: the stored answer */
        return;
    case RSV_SAGA_HOLD_EXTENDED:
        if (fg && s->extended) {
            /* Extended by this drive a moment ago: the same check again adds nothing. */
            step(s, NULL, RSV_SAGA_PAYMENT_REQUESTED, "payment requested", 0, NULL, lease_s(s));
            return;
        }
        /* fall through */
    case RSV_SAGA_CREATED:
        if (fg) {
            extend_hold(s);
        } else {
            cm_counter_inc(s->srv->m.reconcile.actions[RSV_RECONCILE_RELEASED]);
            step(s, NULL, RSV_SAGA_RELEASED, "abandoned before payment was requested", 409,
                 error_text(s, "payment_not_completed",
                            "the checkout was abandoned before payment; nothing was charged", NULL),
                 -1);
        }
        return;
    case RSV_SAGA_REQUIRES_ACTION:
        lookup(s); /* the buyer's turn: never confirm again, only ask how it ended */
        return;
    case RSV_SAGA_PAYMENT_REQUESTED:
    case RSV_SAGA_UNKNOWN:
    case RSV_SAGA_CONVERTING:
        /* Foreground repeats the charge (same key: the provider answers the original);
         * the reconciler only asks, so a buyer who walked away is never charged late. */
        if (fg)
            charge(s);
        else
            lookup(s);
        return;
    case RSV_SAGA_PAID:
        convert(s);
        return;
    case RSV_SAGA_DECLINED:
        step(s, NULL, RSV_SAGA_FAILED, "payment declined", 402,
             error_text(s, "payment_declined",
                        "the payment was declined; the hold stays until it expires", NULL),
             -1);
        return;
    case RSV_SAGA_CONVERTED:
        confirm_converted(s);
        return;
    case RSV_SAGA_REFUNDING:
        if (needs_giveback(s))
            giveback(s);
        else
            refund(s);
        return;
    case RSV_SAGA_NSTATES:
    case RSV_SAGA_INVALID:
        break;
    }
    saga_fail(s, "unknown checkout state", cm_err_protocol);
}

static saga_t *saga_new(rsv_server_t *srv, const rsv_saga_row_t *row, rsv_saga_mode_t mode,
                        int64_t extension_ms, rsv_saga_cb cb, void *arg)
{
    saga_t *s = cm_xcalloc(1, sizeof(*s));
    s->srv = srv;
    s->row = *row;
    s->mode = mode;
    s->extension_ms = extension_ms;
    s->cb = cb;
    s->arg = arg;
    return s;
}

void rsv_saga_drive_extended(rsv_server_t *srv, const rsv_saga_row_t *row, int64_t extension_ms,
                             rsv_hold_view_t *extended, rsv_saga_cb cb, void *arg)
{
    saga_t *s = saga_new(srv, row, RSV_SAGA_FOREGROUND, extension_ms, cb, arg);
    s->view = *extended; /* taken */
    memset(extended, 0, sizeof(*extended));
    s->extended = true;
    advance(s); /* a terminal state answers from the loop, with the stored answer */
}

void rsv_saga_drive(rsv_server_t *srv, const rsv_saga_row_t *row, rsv_saga_mode_t mode,
                    int64_t extension_ms, rsv_saga_cb cb, void *arg)
{
    saga_t *s = saga_new(srv, row, mode, extension_ms, cb, arg);
    advance(s); /* a terminal state answers from the loop, with the stored answer */
}
