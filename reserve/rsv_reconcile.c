/*
 * rsv_reconcile — see rsv_reconcile.h.
 *
 * The reconciler timer claims at most reconcile_batch checkouts at a time and keeps at
 * most that many drives (rsv_saga_drive) in flight; every few ticks it refreshes the
 * checkouts-by-state gauges with one GROUP BY. It owns the provider-ledger check
 * (rsv_ledger), a timer of its own.
 */
#include "rsv_reconcile.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_drain.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "rsv_ledger.h"
#include "rsv_req.h"

#define GAUGE_EVERY_TICKS 5

/* --- metrics ------------------------------------------------------------------------- */

const char *const rsv_reconcile_action_names[RSV_RECONCILE_ACTION_COUNT] = {
    [RSV_RECONCILE_CLAIMED] = "claimed",
    [RSV_RECONCILE_FINISHED] = "finished",
    [RSV_RECONCILE_RELEASED] = "released",
    [RSV_RECONCILE_LOOKUP] = "lookup",
};

void rsv_reconcile_metrics_register(rsv_reconcile_metrics_t *rm, cm_metrics_t *reg)
{
    cm_metrics_counters(reg, "onsale_reserve_reconciler_actions_total", "reconciler actions",
                        "action", rsv_reconcile_action_names, RSV_RECONCILE_ACTION_COUNT,
                        rm->actions);
    cm_metrics_gauges(reg, "onsale_reserve_checkouts",
                      "checkouts by state (refreshed every few seconds)", "state",
                      rsv_saga_state_names, RSV_SAGA_NSTATES, rm->checkouts);
    rm->oldest_open = cm_metrics_gauge(
        reg, "onsale_reserve_oldest_open_checkout_seconds",
        "age of the oldest checkout not yet confirmed, failed, released or refunded (0: none; "
        "refreshed every few seconds)",
        NULL);
}

/* --- the reconciler ------------------------------------------------------------------ */

struct rsv_reconcile {
    rsv_server_t *srv;
    struct event *timer;
    int running;
    bool claiming;
    bool closing;
    uint64_t ticks;
    rsv_ledger_t *ledger; /* the provider-ledger check, a timer of its own */
};

static void reconcile_release(rsv_reconcile_t *r)
{
    if (r->closing && r->running == 0 && !r->claiming)
        free(r);
}

static void on_reconciled(const rsv_saga_end_t *end, void *arg)
{
    rsv_reconcile_t *r = arg;
    rsv_server_t *srv = r->srv;
    r->running--;
    if (end->err == NULL && rsv_saga_is_terminal(end->state))
        cm_counter_inc(srv->m.reconcile.actions[RSV_RECONCILE_FINISHED]);
    cm_log(CM_LOG_INFO, "reconciler: checkout now %s%s%s", rsv_saga_state_name(end->state),
           end->err ? ": " : "", end->err ? end->err : "");
    reconcile_release(r);
}

static void on_deferred(const char *err, const rsv_pg_result_t *res, void *arg)
{
    (void)err, (void)res, (void)arg;
}

/* A drive that stopped short of a terminal state gets its lease shortened so it is
 * tried again after a back-off (attempts seconds, capped at 30). */
typedef struct bg {
    rsv_reconcile_t *r;
    char id[RSV_CHECKOUT_ID_MAX];
    int attempts;
} bg_t;

static void on_bg_end(const rsv_saga_end_t *end, void *arg)
{
    bg_t *b = arg;
    rsv_reconcile_t *r = b->r;
    if (!rsv_saga_is_terminal(end->state) && !r->closing) {
        char retry[16];
        snprintf(retry, sizeof(retry), "%d", b->attempts < 30 ? b->attempts : 30);
        const char *params[] = {b->id, retry};
        if (rsv_pg_query(r->srv->pg, "SELECT onsale_reconcile_defer($1, $2::int)", 2, params,
                         on_deferred, NULL) != 0) {
            /* shutting down: the lease lapses on its own */
        }
    }
    free(b);
    on_reconciled(end, r);
}

static void on_claimed(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_reconcile_t *r = arg;
    r->claiming = false;
    if (err) {
        cm_log(CM_LOG_DEBUG, "reconciler: claim: %s", err);
        reconcile_release(r);
        return;
    }
    int n = rsv_pg_result_rows(res);
    for (int i = 0; i < n && !r->closing; i++) {
        rsv_saga_row_t row;
        memset(&row, 0, sizeof(row));
#define COL(field, c) snprintf(row.field, sizeof(row.field), "%s", rsv_pg_result_value(res, i, c))
        COL(id, 0);
        row.state = rsv_saga_state_parse(rsv_pg_result_value(res, i, 1));
        COL(event, 2);
        COL(buyer, 3);
        COL(hold_id, 4);
        COL(currency, 6);
        COL(charge_id, 7);
        COL(refund_id, 8);
        COL(refund_reason, 9);
        COL(source, 10);
        COL(request_id, 12); /* the charge's metadata: a lookup repeats the create as it was */
#undef COL
        row.amount = strtoll(rsv_pg_result_value(res, i, 5), NULL, 10);
        bg_t *b = cm_xcalloc(1, sizeof(*b));
        b->r = r;
        snprintf(b->id, sizeof(b->id), "%s", row.id);
        b->attempts = atoi(rsv_pg_result_value(res, i, 11));
        r->running++;
        cm_counter_inc(r->srv->m.reconcile.actions[RSV_RECONCILE_CLAIMED]);
        cm_log(CM_LOG_INFO, "reconciler: checkout %s in %s (attempt %d)", row.id,
               rsv_pg_result_value(res, i, 1), b->attempts);
        rsv_saga_drive(r->srv, &row, RSV_SAGA_BACKGROUND, 0, on_bg_end, b);
    }
    reconcile_release(r);
}

static void on_state_counts(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_reconcile_metrics_t *m = &((rsv_server_t *)arg)->m.reconcile;
    if (err)
        return;
    for (int k = 0; k < RSV_SAGA_NSTATES; k++)
        cm_gauge_set(m->checkouts[k], 0);
    double oldest = 0;
    for (int i = 0; i < rsv_pg_result_rows(res); i++) {
        rsv_saga_state_t st = rsv_saga_state_parse(rsv_pg_result_value(res, i, 0));
        if (st == RSV_SAGA_INVALID)
            continue;
        double age = strtod(rsv_pg_result_value(res, i, 2), NULL);
        if (!rsv_saga_is_terminal(st) && age > oldest)
            oldest = age;
        cm_gauge_set(m->checkouts[st], strtod(rsv_pg_result_value(res, i, 1), NULL));
    }
    cm_gauge_set(m->oldest_open, oldest);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rsv_reconcile_t *r = arg;
    rsv_server_t *srv = r->srv;
    if (r->closing || cm_drain_draining(srv->svc.drain))
        return;
    if (++r->ticks % GAUGE_EVERY_TICKS == 1) {
        if (rsv_pg_query(srv->pg_read,
                         "SELECT state, count(*), extract(epoch FROM now() - min(created_at)) "
                         "FROM checkouts GROUP BY state",
                         0, NULL, on_state_counts, srv) != 0) {
            /* shutting down */
        }
    }
    int room = (int)srv->cfg.reconcile_batch - r->running;
    if (r->claiming || room <= 0 || rsv_pg_connected(srv->pg) == 0)
        return;
    char after[16], lease[16], limit[16];
    snprintf(after, sizeof(after), "%lld", (long long)srv->cfg.reconcile_after_s);
    snprintf(lease, sizeof(lease), "%lld", (long long)srv->cfg.checkout_lease_s);
    snprintf(limit, sizeof(limit), "%d", room);
    const char *params[] = {after, lease, limit};
    r->claiming = true;
    if (rsv_pg_query(srv->pg,
                     "SELECT r.checkout_id, r.state, r.event_id, r.buyer, r.hold_id, r.amount, "
                     "r.currency, r.charge_id, r.refund_id, r.refund_reason, r.payment_source, "
                     "r.attempts, coalesce(k.request_id, '') "
                     "FROM onsale_reconcile_claim($1::int, $2::int, $3::int) r "
                     "JOIN checkouts k ON k.checkout_id = r.checkout_id",
                     3, params, on_claimed, r) != 0)
        r->claiming = false;
}

rsv_reconcile_t *rsv_reconcile_new(rsv_server_t *srv)
{
    rsv_reconcile_t *r = cm_xcalloc(1, sizeof(*r));
    r->srv = srv;
    r->timer = event_new(srv->base, -1, EV_PERSIST, on_tick, r);
    int64_t ms = srv->cfg.reconcile_interval_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_add(r->timer, &tv);
    r->ledger = rsv_ledger_new(srv);
    return r;
}

int rsv_reconcile_running(const rsv_reconcile_t *r)
{
    return r ? r->running : 0;
}

void rsv_reconcile_free(rsv_reconcile_t *r)
{
    if (r == NULL)
        return;
    event_free(r->timer);
    r->timer = NULL;
    rsv_ledger_free(r->ledger);
    r->ledger = NULL;
    r->closing = true;
    reconcile_release(r);
}
