/*
 * rsv_ledger — see rsv_ledger.h.
 *
 * One scan: list a page (rsv_pay_list) → check its candidates in Postgres → advance the
 * settled cursor over the page's settled prefix → next page or done. Every step is
 * asynchronous with its own deadline (rsv_pay, rsv_pg), so a scan always ends.
 */
#include "rsv_ledger.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_drain.h"
#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "rsv_pay.h"
#include "rsv_server.h"

#define PAGE_LIMIT 200
#define MAX_PAGES  20

struct rsv_ledger {
    rsv_server_t *srv;
    struct event *timer;
    bool busy;    /* a scan is running */
    bool closing; /* freed when the scan in flight ends */
    int64_t since;
    char cursor[RSV_PAY_ID_MAX]; /* every charge up to this one is settled */
    bool moving;                 /* this scan still advances the cursor */
    char next[RSV_PAY_ID_MAX];   /* starting_after of the next page of this scan */
    int pages;
    /* the page being checked */
    rsv_pay_page_t page;
    bool *settled;
};

static void scan_page(rsv_ledger_t *l);

static void scan_end(rsv_ledger_t *l)
{
    rsv_pay_page_clear(&l->page);
    free(l->settled);
    l->settled = NULL;
    l->busy = false;
    if (l->closing)
        free(l);
}

/* Postgres text[] literal of ids: each element double-quoted, \ and " escaped. */
static void append_elem(char **buf, size_t *len, size_t *cap, const char *v, bool first)
{
    size_t need = *len + strlen(v) * 2 + 8;
    if (need > *cap) {
        *cap = need * 2;
        *buf = cm_xrealloc(*buf, *cap);
    }
    char *p = *buf + *len;
    if (!first)
        *p++ = ',';
    *p++ = '"';
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            *p++ = '\\';
        *p++ = *v;
    }
    *p++ = '"';
    *p = '\0';
    *len = (size_t)(p - *buf);
}

static rsv_ledger_outcome_t outcome_of(const char *s)
{
    static const char *const names[] = {"refunding", "booked", "open", "mismatch", "unknown"};
    for (int i = 0; i < RSV_LEDGER_NOUTCOMES; i++)
        if (strcmp(s, names[i]) == 0)
            return (rsv_ledger_outcome_t)i;
    return RSV_LEDGER_UNKNOWN;
}

/* Advances the cursor over the page's settled prefix, then reads on or ends. */
static void page_done(rsv_ledger_t *l)
{
    for (size_t i = 0; i < l->page.n && l->moving; i++) {
        if (l->settled[i])
            snprintf(l->cursor, sizeof(l->cursor), "%s", l->page.items[i].id);
        else
            l->moving = false;
    }
    bool more = l->page.has_more && l->page.n > 0 && ++l->pages < MAX_PAGES && !l->closing;
    if (more)
        snprintf(l->next, sizeof(l->next), "%s", l->page.items[l->page.n - 1].id);
    rsv_pay_page_clear(&l->page);
    free(l->settled);
    l->settled = NULL;
    if (more)
        scan_page(l);
    else
        scan_end(l);
}

static void on_checked(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_ledger_t *l = arg;
    rsv_server_t *srv = l->srv;
    if (err) {
        cm_log(CM_LOG_WARN, "ledger check: postgres: %s", err);
        scan_end(l); /* the cursor stays: the page is read again next time */
        return;
    }
    int64_t young = cm_time_wall_ms() / 1000 - srv->cfg.ledger_settle_s;
    int rows = rsv_pg_result_rows(res);
    for (int r = 0; r < rows; r++) {
        const char *co = rsv_pg_result_value(res, r, 0);
        const char *ch = rsv_pg_result_value(res, r, 1);
        rsv_ledger_outcome_t o = outcome_of(rsv_pg_result_value(res, r, 2));
        const char *state = rsv_pg_result_value(res, r, 3);
        cm_counter_inc(srv->m.ledger_charges[o]);
        if (o == RSV_LEDGER_REFUNDING)
            cm_log(CM_LOG_WARN,
                   "ledger: charge %s of checkout %s landed after the checkout ended unpaid; "
                   "refunding it",
                   ch, co);
        else if (o == RSV_LEDGER_MISMATCH)
            cm_log(CM_LOG_ERROR,
                   "ledger: charge %s is not refunded but checkout %s is %s with another "
                   "charge (operator: check it)",
                   ch, co, state);
        /* Match the row to the page's entry of that charge. */
        for (size_t i = 0; i < l->page.n; i++) {
            if (strcmp(l->page.items[i].id, ch) != 0)
                continue;
            l->settled[i] = o != RSV_LEDGER_OPEN || l->page.items[i].created < young;
            break;
        }
    }
    page_done(l);
}

static void on_page(const rsv_pay_result_t *res, void *arg)
{
    rsv_ledger_t *l = arg;
    rsv_server_t *srv = l->srv;
    if (res->outcome != RSV_PAY_LISTED) {
        cm_counter_inc(srv->m.ledger_scans[1]);
        cm_log(CM_LOG_WARN, "ledger: listing charges: %s (status %d)", res->err ? res->err : "?",
               res->status);
        if (res->status == 404 && l->next[0]) {
            /* The provider no longer knows our cursor (a reset ledger): from `since`. */
            l->cursor[0] = '\0';
        }
        scan_end(l);
        return;
    }
    cm_counter_inc(srv->m.ledger_scans[0]);
    /* Copied: the result's page lives only during this callback. */
    l->page = *res->page;
    l->page.items = cm_xcalloc(res->page->n + 1, sizeof(*l->page.items));
    memcpy(l->page.items, res->page->items, res->page->n * sizeof(*l->page.items));
    l->settled = cm_xcalloc(l->page.n + 1, sizeof(*l->settled));
    size_t lc = 0, cc = 0, lh = 0, ch = 0, ncand = 0;
    char *cos = cm_xstrdup("{"), *chs = cm_xstrdup("{");
    lc = lh = 1;
    cc = ch = 2;
    for (size_t i = 0; i < l->page.n; i++) {
        const rsv_pay_charge_t *c = &l->page.items[i];
        if (!c->succeeded || c->refunded || c->checkout[0] == '\0') {
            l->settled[i] = true; /* nothing held, or not ours */
            continue;
        }
        append_elem(&cos, &lc, &cc, c->checkout, ncand == 0);
        append_elem(&chs, &lh, &ch, c->id, ncand == 0);
        ncand++;
    }
    if (ncand == 0) {
        free(cos);
        free(chs);
        page_done(l);
        return;
    }
    cos = cm_xrealloc(cos, lc + 2);
    chs = cm_xrealloc(chs, lh + 2);
    strcat(cos, "}");
    strcat(chs, "}");
    const char *params[] = {cos, chs};
    int rc = rsv_pg_query(srv->pg,
                          "SELECT checkout_id, charge_id, outcome, coalesce(state, '') "
                          "FROM onsale_ledger_check($1::text[], $2::text[])",
                          2, params, on_checked, l);
    free(cos);
    free(chs);
    if (rc != 0)
        scan_end(l);
}

static void scan_page(rsv_ledger_t *l)
{
    if (rsv_pay_list(l->srv->pay, l->since, l->next, PAGE_LIMIT, on_page, l) != 0)
        scan_end(l);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rsv_ledger_t *l = arg;
    rsv_server_t *srv = l->srv;
    if (l->busy || l->closing || cm_drain_draining(srv->drain) || srv->pay == NULL)
        return;
    l->busy = true;
    l->moving = true;
    l->pages = 0;
    snprintf(l->next, sizeof(l->next), "%s", l->cursor);
    scan_page(l);
}

rsv_ledger_t *rsv_ledger_new(rsv_server_t *srv)
{
    int64_t ms = srv->cfg.ledger_interval_ms;
    if (ms <= 0)
        return NULL;
    rsv_ledger_t *l = cm_xcalloc(1, sizeof(*l));
    l->srv = srv;
    l->since = cm_time_wall_ms() / 1000 - srv->cfg.ledger_window_s;
    l->timer = event_new(srv->base, -1, EV_PERSIST, on_tick, l);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_add(l->timer, &tv);
    return l;
}

void rsv_ledger_free(rsv_ledger_t *l)
{
    if (l == NULL)
        return;
    event_free(l->timer);
    l->timer = NULL;
    l->closing = true;
    if (!l->busy)
        free(l);
}
