/*
 * rsv_ledger — see rsv_ledger.h.
 *
 * One scan: check the remembered charges of open checkouts (one statement) → list a page
 * from the cursor (rsv_pay_list) → check its candidates in Postgres (one statement) →
 * remember those still open → cursor to the page's end → next page or done. Every step
 * is asynchronous with its own deadline (rsv_pay, rsv_pg), so a scan always ends.
 *
 * The provider lists newest first (Stripe's order), so a pass walks down from the newest
 * payment to `since`; when it reaches the end, the next pass starts at the top again and
 * `since` moves up to the newest creation time that pass saw, less LIST_OVERLAP_S: a
 * payment is listed by its creation time, but it may succeed later (its confirmation
 * still in the network), so the last minutes are read again. A pass cut short by
 * MAX_PAGES goes on from its cursor on the next scan.
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
#include "rsv_req.h"

#define PAGE_LIMIT     100 /* Stripe lists at most 100 a page */
#define MAX_PAGES      40
#define RECHECK_MAX    20000
#define LIST_OVERLAP_S 300

/* A charge whose checkout was open when last seen. */
typedef struct recheck {
    char checkout[RSV_PAY_ID_MAX];
    char charge[RSV_PAY_ID_MAX];
    int64_t created;
    bool told; /* logged as open past ledger_settle_s */
} recheck_t;

struct rsv_ledger {
    rsv_server_t *srv;
    struct event *timer;
    bool busy;                   /* a scan is running */
    bool closing;                /* freed when the scan in flight ends */
    int64_t since;               /* a pass reads the payments created from here on */
    int64_t top;                 /* the newest creation time this pass saw */
    char cursor[RSV_PAY_ID_MAX]; /* this pass read every payment down to this one */
    int pages;
    rsv_pay_page_t page; /* the page being checked */
    recheck_t *open;     /* charges of open checkouts, checked again each scan */
    size_t nopen;
    bool rechecking; /* the query in flight checks `open`, not `page` */
};

static void scan_page(rsv_ledger_t *l);
static void scan_end(rsv_ledger_t *l);

/* The page is read: on to the next one, or the pass is complete, or cut for this scan. */
static void page_read(rsv_ledger_t *l)
{
    for (size_t i = 0; i < l->page.n; i++)
        if (l->page.items[i].created > l->top)
            l->top = l->page.items[i].created;
    snprintf(l->cursor, sizeof(l->cursor), "%s", l->page.items[l->page.n - 1].id);
    bool more = l->page.has_more;
    bool go_on = more && ++l->pages < MAX_PAGES && !l->closing;
    rsv_pay_page_clear(&l->page);
    if (go_on) {
        scan_page(l);
        return;
    }
    if (!more) { /* the pass is complete: the next one starts at the top */
        if (l->top - LIST_OVERLAP_S > l->since)
            l->since = l->top - LIST_OVERLAP_S;
        l->cursor[0] = '\0';
        l->top = 0;
    }
    scan_end(l);
}

static void scan_end(rsv_ledger_t *l)
{
    rsv_pay_page_clear(&l->page);
    l->busy = false;
    if (l->closing) {
        free(l->open);
        free(l);
    }
}

void rsv_ledger_array_append(char **buf, size_t *len, size_t *cap, const char *v, bool first)
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

typedef struct arrays {
    char *cos, *chs;
    size_t lc, cc, lh, ch, n;
} arrays_t;

static void arrays_init(arrays_t *a)
{
    memset(a, 0, sizeof(*a));
    a->cos = cm_xstrdup("{");
    a->chs = cm_xstrdup("{");
    a->lc = a->lh = 1;
    a->cc = a->ch = 2;
}

static void arrays_add(arrays_t *a, const char *checkout, const char *charge)
{
    rsv_ledger_array_append(&a->cos, &a->lc, &a->cc, checkout, a->n == 0);
    rsv_ledger_array_append(&a->chs, &a->lh, &a->ch, charge, a->n == 0);
    a->n++;
}

static void arrays_free(arrays_t *a)
{
    free(a->cos);
    free(a->chs);
}

const char *const rsv_ledger_outcome_names[RSV_LEDGER_NOUTCOMES] = {
    [RSV_LEDGER_REFUNDING] = "refunding", [RSV_LEDGER_BOOKED] = "booked",
    [RSV_LEDGER_OPEN] = "open",           [RSV_LEDGER_MISMATCH] = "mismatch",
    [RSV_LEDGER_UNKNOWN] = "unknown",
};

const char *const rsv_ledger_scan_names[RSV_LEDGER_SCAN_COUNT] = {
    [RSV_LEDGER_SCAN_OK] = "ok",
    [RSV_LEDGER_SCAN_ERROR] = "error",
};

void rsv_ledger_metrics_register(rsv_ledger_metrics_t *lm, cm_metrics_t *reg)
{
    cm_metrics_counters(reg, "onsale_reserve_ledger_charges_total",
                        "succeeded, unrefunded provider charges seen by the ledger check",
                        "outcome", rsv_ledger_outcome_names, RSV_LEDGER_NOUTCOMES, lm->charges);
    cm_metrics_counters(reg, "onsale_reserve_ledger_scans_total", "provider ledger pages read",
                        "result", rsv_ledger_scan_names, RSV_LEDGER_SCAN_COUNT, lm->scans);
}

rsv_ledger_outcome_t rsv_ledger_outcome_parse(const char *s)
{
    for (int i = 0; i < RSV_LEDGER_NOUTCOMES; i++)
        if (strcmp(s, rsv_ledger_outcome_names[i]) == 0)
            return (rsv_ledger_outcome_t)i;
    return RSV_LEDGER_UNKNOWN;
}

static void on_checked(const char *err, const rsv_pg_result_t *res, void *arg);

/* Asks Postgres about the pairs in a (consumed). 0, or -1 when it could not ask. */
static int check(rsv_ledger_t *l, arrays_t *a)
{
    a->cos = cm_xrealloc(a->cos, a->lc + 2);
    a->chs = cm_xrealloc(a->chs, a->lh + 2);
    strcat(a->cos, "}");
    strcat(a->chs, "}");
    const char *params[] = {a->cos, a->chs};
    int rc = rsv_pg_query(l->srv->pg,
                          "SELECT checkout_id, charge_id, outcome, coalesce(state, '') "
                          "FROM onsale_ledger_check($1::text[], $2::text[])",
                          2, params, on_checked, l);
    arrays_free(a);
    return rc;
}

static void remember_open(rsv_ledger_t *l, const char *co, const char *ch, int64_t created)
{
    for (size_t i = 0; i < l->nopen; i++)
        if (strcmp(l->open[i].charge, ch) == 0)
            return;
    if (l->open == NULL)
        l->open = cm_xcalloc(RECHECK_MAX, sizeof(*l->open));
    recheck_t *x = &l->open[l->nopen++];
    snprintf(x->checkout, sizeof(x->checkout), "%s", co);
    snprintf(x->charge, sizeof(x->charge), "%s", ch);
    x->created = created;
}

/* Once per charge: its checkout is still open ledger_settle_s after the charge. */
static void tell_unsettled(recheck_t *x, int64_t settled)
{
    if (x->told || x->created >= settled)
        return;
    x->told = true;
    cm_log(CM_LOG_WARN,
           "ledger: checkout %s is still open past ledger_settle_s with charge %s at the "
           "provider; checked again on every scan until it settles",
           x->checkout, x->charge);
}

static void on_checked(const char *err, const rsv_pg_result_t *res, void *arg)
{
    rsv_ledger_t *l = arg;
    rsv_server_t *srv = l->srv;
    bool rechecking = l->rechecking;
    l->rechecking = false;
    if (err) {
        cm_log(CM_LOG_WARN, "ledger check: postgres: %s", err);
        scan_end(l); /* the cursor stays: the page is read again next time */
        return;
    }
    int64_t settled = cm_time_wall_ms() / 1000 - srv->cfg.ledger_settle_s;
    int rows = rsv_pg_result_rows(res);
    size_t keep = 0;
    for (int r = 0; r < rows; r++) {
        const char *co = rsv_pg_result_value(res, r, 0);
        const char *ch = rsv_pg_result_value(res, r, 1);
        rsv_ledger_outcome_t o = rsv_ledger_outcome_parse(rsv_pg_result_value(res, r, 2));
        const char *state = rsv_pg_result_value(res, r, 3);
        if (!rechecking || o != RSV_LEDGER_OPEN)
            cm_counter_inc(srv->m.ledger.charges[o]);
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
        if (rechecking) {
            /* rows come back in the order asked: row r is open[r]. Kept until its
             * checkout settles, however long that takes: the cursor is past it. */
            if ((size_t)r < l->nopen && o == RSV_LEDGER_OPEN) {
                tell_unsettled(&l->open[r], settled);
                l->open[keep++] = l->open[r];
            }
            continue;
        }
        if (o == RSV_LEDGER_OPEN)
            for (size_t i = 0; i < l->page.n; i++)
                if (strcmp(l->page.items[i].id, ch) == 0) {
                    remember_open(l, co, ch, l->page.items[i].created);
                    break;
                }
    }
    if (rechecking) {
        l->nopen = keep;
        scan_page(l);
        return;
    }
    page_read(l);
}

static void on_page(const rsv_pay_result_t *res, void *arg)
{
    rsv_ledger_t *l = arg;
    rsv_server_t *srv = l->srv;
    if (res->outcome != RSV_PAY_LISTED) {
        cm_counter_inc(srv->m.ledger.scans[RSV_LEDGER_SCAN_ERROR]);
        cm_log(CM_LOG_WARN, "ledger: listing charges: %s (status %d)", res->err ? res->err : "?",
               res->status);
        if (res->status == 404 && l->cursor[0])
            l->cursor[0] = '\0'; /* the provider forgot our cursor: the pass starts again */
        scan_end(l);
        return;
    }
    cm_counter_inc(srv->m.ledger.scans[RSV_LEDGER_SCAN_OK]);
    if (res->page->n == 0) {
        l->cursor[0] = '\0'; /* the pass is complete */
        l->top = 0;
        scan_end(l);
        return;
    }
    /* Copied: the result's page lives only during this callback. */
    l->page = *res->page;
    l->page.items = cm_xcalloc(res->page->n + 1, sizeof(*l->page.items));
    memcpy(l->page.items, res->page->items, res->page->n * sizeof(*l->page.items));
    arrays_t a;
    arrays_init(&a);
    for (size_t i = 0; i < l->page.n; i++) {
        const rsv_pay_charge_t *c = &l->page.items[i];
        if (c->succeeded && !c->refunded && c->checkout[0]) /* else nothing held, or not ours */
            arrays_add(&a, c->checkout, c->id);
    }
    if (a.n == 0) {
        arrays_free(&a);
        page_read(l);
        return;
    }
    if (check(l, &a) != 0)
        scan_end(l);
}

static void scan_page(rsv_ledger_t *l)
{
    if (l->nopen + PAGE_LIMIT > RECHECK_MAX) {
        cm_log(CM_LOG_WARN, "ledger: %zu charges of open checkouts to watch; new charges wait",
               l->nopen);
        scan_end(l);
        return;
    }
    if (rsv_pay_list(l->srv->pay, l->since, l->cursor, PAGE_LIMIT, on_page, l) != 0)
        scan_end(l);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rsv_ledger_t *l = arg;
    rsv_server_t *srv = l->srv;
    if (l->busy || l->closing || cm_drain_draining(srv->svc.drain) || srv->pay == NULL)
        return;
    l->busy = true;
    l->pages = 0;
    if (l->nopen == 0) {
        scan_page(l);
        return;
    }
    arrays_t a;
    arrays_init(&a);
    for (size_t i = 0; i < l->nopen; i++)
        arrays_add(&a, l->open[i].checkout, l->open[i].charge);
    l->rechecking = true;
    if (check(l, &a) != 0) {
        l->rechecking = false;
        scan_end(l);
    }
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
    if (!l->busy) {
        free(l->open);
        free(l);
    }
}
