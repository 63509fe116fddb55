/*
 * rsv_pg — the one asynchronous Postgres client: a fixed pool of libpq connections driven
 * by the event loop; the contract is in rsv_pg.h.
 *
 * Runs on the loop thread that owns the event_base and never blocks after the loop
 * starts (rsv_pg_migrate, at the end, is the one synchronous start-up exception).
 *
 * Each connection is a state machine changed only by conn_set_state():
 *   DOWN --timer--> CONNECTING --PQconnectPoll OK--> IDLE <--query--> BUSY
 *   any failure --> DOWN (reconnect backoff 100 ms doubling to 2 s); a query deadline on
 *   a BUSY connection closes it and reopens it at once (libpq 15 has no non-blocking
 *   cancel, and closing is the one way to stop waiting that never blocks).
 * One timer per connection serves as the connect deadline (CONNECTING) or the backoff
 * (DOWN). Sockets are watched with two persistent events (read, write), recreated
 * whenever libpq's socket may have changed (during connect, PQsocket can change).
 *
 * A statement with parameters runs prepared: the first time a connection sees its SQL it
 * sends Parse (PQsendPrepare) and, once that succeeded, Bind/Execute of the named
 * statement (PQsendQueryPrepared) — one more round trip, once per statement and
 * connection; every later run skips the server's parse, analysis and, once its generic
 * plan is chosen, planning. Up to PREPARED_MAX texts per connection (beyond, and when a
 * Parse fails, the statement runs unnamed as before: the caller sees the same answer).
 * A connection's prepared statements die with it: the list is emptied with every
 * PQfinish. Nothing here ever changes the schema; DDL run by others invalidates the
 * server's cached plans by itself.
 *
 * Each query is one heap block (record, params, SQL) with its deadline timer, started at
 * rsv_pg_query: it waits in a bounded FIFO, runs on one connection, or — when its answer
 * is already known (queue full, connection broke while sending) — sits "doomed" with its
 * timer made active, so that every callback comes from the loop and never from inside
 * rsv_pg_query. Results are gathered until PQgetResult returns NULL; the callback gets
 * the first error result, else the last one. A statement that outlives its deadline is
 * also stopped by the server: every pool session runs with statement_timeout a little
 * over the pool's timeout (a little over, so that our deadline is what callers see).
 *
 * A host given by name (host=db.example, or any name of a host=a,b list) is looked up
 * here first, asynchronously (cm_resolve, evdns on the pool's loop), at the start of
 * every connect attempt — libpq would resolve it with a blocking getaddrinfo inside
 * PQconnectPoll. The connect is then made with hostaddr= lists (host=db,db
 * hostaddr=10.0.0.1,10.0.0.2: one item per address of each name, in the rotated host
 * order, libpq trying them in turn) while host= keeps the names for TLS and the logs.
 * The connect deadline covers the lookups. IP literals and socket directories need no
 * lookup; a conninfo that gives hostaddr itself is used as it is.
 *
 * User callbacks may re-enter (issue queries, even rsv_pg_free). Every path that runs
 * one and touches the pool afterwards holds a reference (hold/release); rsv_pg_free
 * answers everything at once but the pool's memory goes with the last reference.
 */
#include "rsv_pg.h"

#include "cm_err.h"
#include "cm_hash.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_resolve.h"

#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/event.h>
#include <libpq-fe.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define PREPARED_MAX   64 /* statements prepared per connection */
/* pg_advisory_lock key of rsv_pg_migrate: "onsale" as a big-endian integer */
#define MIGRATE_LOCK_KEY "122520172850277"

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_IDLE, CONN_BUSY };
enum query_state { Q_WAITING, Q_RUNNING, Q_DOOMED };

struct conn;

/* One host name's lookup for one connect attempt of one connection. */
struct lookup {
    struct conn *c;
    cm_resolve_req_t *req; /* in flight, or NULL */
    const char *err;       /* the last answer's error (static), or NULL */
    int n;                 /* addresses in the last answer */
    char addrs[CM_RESOLVE_MAX][INET6_ADDRSTRLEN];
};

struct query {
    struct query *prev, *next; /* in pg->waiting or pg->doomed */
    rsv_pg_t *pg;
    struct conn *conn; /* Q_RUNNING: where */
    enum query_state state;
    const char *doom;    /* Q_DOOMED: the error the loop will deliver */
    struct event *timer; /* the deadline; made active by hand when doomed */
    rsv_pg_cb cb;
    void *arg;
    int nparams;
    const char **params; /* in this block */
    char *sql;           /* in this block */
};

struct qlist {
    struct query *head, *tail;
    int n;
};

struct conn {
    rsv_pg_t *pg;
    int id;
    enum conn_state state;
    PGconn *pq;
    int fd;
    struct event *rev, *wev; /* persistent watchers on fd */
    struct event *timer;     /* connect deadline (CONNECTING) or backoff (DOWN) */
    int backoff_ms;
    int quiet;                 /* failures already logged at WARN since the last success */
    struct query *q;           /* CONN_BUSY: the query in flight */
    PGresult *res;             /* the result kept for q */
    char *stmts[PREPARED_MAX]; /* SQL of the statements prepared on pq (named "s<i>") */
    uint64_t hashes[PREPARED_MAX];
    int nstmts;
    int preparing;     /* CONN_BUSY: q's SQL is being prepared as "s<nstmts>" */
    int first_host;    /* several hosts: the one the next connect tries first */
    struct lookup *lk; /* pg->nnames of them when names are looked up, else NULL */
    int pending;       /* lookups in flight */
};

struct rsv_pg {
    struct event_base *base;
    const char **keywords, **values; /* conninfo for PQconnectStartParams, NULL if invalid */
    char *options;                   /* owned value of the "options" keyword */
    PQconninfoOption *parsed;
    int size;
    int timeout_ms;
    int max_queue;
    struct timeval deadline_plain;
    const struct timeval *deadline; /* timeout_ms, as a common timeout when available */
    struct conn *conns;
    struct qlist waiting, doomed;
    int refs;
    int closing;
    /* several hosts (host=a,b …): their lists, split, and where they are in keywords */
    int nhosts;
    char **hosts, **hostaddrs, **ports;   /* nhosts items each, or NULL (not given) */
    int nhost_items, naddr_items, nports; /* items in each list (nports: 1 or nhosts) */
    int host_kw, hostaddr_kw, port_kw;    /* index in keywords/values, or -1 */
    int connect_ms;                       /* deadline of one connect attempt */
    /* host names looked up before each connect (cm_resolve); resolver NULL: none */
    cm_resolve_t *resolver;
    int nnames, nname_ports;    /* host items; port items (1 or nnames, else 0) */
    char **names, **name_ports; /* the host and port lists, split */
};

static void conn_start(struct conn *c);
static void dispatch(rsv_pg_t *pg);
static void prepared(struct conn *c);

/* ---- lists, references, callbacks ---- */

static void qlist_push(struct qlist *l, struct query *q)
{
    q->next = NULL;
    q->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = q;
    else
        l->head = q;
    l->tail = q;
    l->n++;
}

static void qlist_push_front(struct qlist *l, struct query *q)
{
    q->prev = NULL;
    q->next = l->head;
    if (l->head != NULL)
        l->head->prev = q;
    else
        l->tail = q;
    l->head = q;
    l->n++;
}

static void qlist_del(struct qlist *l, struct query *q)
{
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        l->head = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    else
        l->tail = q->prev;
    q->prev = q->next = NULL;
    l->n--;
}

static void free_list(char **items, int n)
{
    if (items == NULL)
        return;
    for (int i = 0; i < n; i++)
        free(items[i]);
    free(items);
}

static void hold(rsv_pg_t *pg)
{
    pg->refs++;
}

static void destroy(rsv_pg_t *pg)
{
    for (int i = 0; i < pg->size; i++) {
        event_free(pg->conns[i].timer);
        free(pg->conns[i].lk);
    }
    free(pg->conns);
    cm_resolve_free(pg->resolver);
    free_list(pg->names, pg->nnames);
    free_list(pg->name_ports, pg->nname_ports);
    free(pg->keywords);
    free(pg->values);
    free(pg->options);
    free_list(pg->hosts, pg->nhost_items);
    free_list(pg->hostaddrs, pg->naddr_items);
    free_list(pg->ports, pg->nports);
    if (pg->parsed != NULL)
        PQconninfoFree(pg->parsed);
    free(pg);
}

/** Drops a reference. Returns 1 when the caller may go on touching pg, 0 when not. */
static int release(rsv_pg_t *pg)
{
    assert(pg->refs > 0);
    if (--pg->refs == 0 && pg->closing) {
        destroy(pg);
        return 0;
    }
    return !pg->closing;
}

/**
 * Frees q (which must be in no list and on no connection) and runs its callback.
 * Returns release()'s verdict on pg.
 */
static int notify(rsv_pg_t *pg, struct query *q, const char *err, const PGresult *res)
{
    rsv_pg_cb cb = q->cb;
    void *arg = q->arg;

    event_free(q->timer);
    free(q);
    hold(pg);
    cb(err, res, arg);
    return release(pg);
}

/** Schedules q's answer for the loop (never from inside rsv_pg_query). */
static void doom(rsv_pg_t *pg, struct query *q, const char *err)
{
    q->state = Q_DOOMED;
    q->doom = err;
    q->conn = NULL;
    qlist_push(&pg->doomed, q);
    evtimer_del(q->timer);
    event_active(q->timer, EV_TIMEOUT, 1);
}

/* ---- connections ---- */

static const char *state_name(enum conn_state s)
{
    switch (s) {
    case CONN_DOWN:
        return "down";
    case CONN_CONNECTING:
        return "connecting";
    case CONN_IDLE:
        return "idle";
    case CONN_BUSY:
        return "busy";
    }
    return "?";
}

static void arm_timer(struct conn *c, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
}

static void schedule_retry(struct conn *c)
{
    if (c->pg->closing || c->pg->keywords == NULL)
        return;
    arm_timer(c, c->backoff_ms);
    c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
}

/** The one place a connection's state changes; arms or clears its timer to match. */
static void conn_set_state(struct conn *c, enum conn_state s)
{
    cm_log(CM_LOG_DEBUG, "postgres conn %d: %s -> %s", c->id, state_name(c->state), state_name(s));
    if (s == CONN_IDLE && c->state == CONN_CONNECTING) {
        cm_log(CM_LOG_INFO, "postgres conn %d: connected", c->id);
        c->backoff_ms = BACKOFF_MIN_MS;
        c->quiet = 0;
    }
    c->state = s;
    switch (s) {
    case CONN_DOWN:
        evtimer_del(c->timer);
        schedule_retry(c);
        break;
    case CONN_CONNECTING:
        evtimer_del(c->timer);
        arm_timer(c, c->pg->connect_ms);
        break;
    case CONN_IDLE:
    case CONN_BUSY:
        evtimer_del(c->timer);
        break;
    }
}

static void unwatch(struct conn *c)
{
    if (c->rev != NULL)
        event_free(c->rev);
    if (c->wev != NULL)
        event_free(c->wev);
    c->rev = c->wev = NULL;
    c->fd = -1;
}

static void on_io(evutil_socket_t fd, short what, void *arg);

/* Watches libpq's socket for reading and/or writing. renew: the socket may have changed. */
static int watch(struct conn *c, int rd, int wr, int renew)
{
    int fd = PQsocket(c->pq);

    if (fd < 0)
        return -1;
    if (renew || fd != c->fd) {
        unwatch(c);
        c->rev = event_new(c->pg->base, fd, EV_READ | EV_PERSIST, on_io, c);
        c->wev = event_new(c->pg->base, fd, EV_WRITE | EV_PERSIST, on_io, c);
        if (c->rev == NULL || c->wev == NULL) {
            unwatch(c);
            return -1;
        }
        c->fd = fd;
    }
    if (rd ? event_add(c->rev, NULL) : event_del(c->rev))
        return -1;
    if (wr ? event_add(c->wev, NULL) : event_del(c->wev))
        return -1;
    return 0;
}

/* libpq messages span lines ("…failed\n\tIs the server running…"): log them as one. */
static void one_line(char *out, size_t outlen, const char *msg)
{
    size_t n = 0;
    int space = 0;

    for (const char *p = msg; *p != '\0' && n + 1 < outlen; p++) {
        if (*p == '\n' || *p == '\t' || *p == '\r' || *p == ' ') {
            space = n > 0;
            continue;
        }
        if (space && n + 2 < outlen)
            out[n++] = ' ';
        space = 0;
        out[n++] = *p;
    }
    out[n] = '\0';
}

static void log_failure(struct conn *c, const char *what, const char *why)
{
    char line[512];

    one_line(line, sizeof(line), why);
    cm_log(c->quiet ? CM_LOG_DEBUG : CM_LOG_WARN, "postgres conn %d: %s: %s", c->id, what, line);
    c->quiet = 1;
}

/* c's session is gone (PQfinish): so are its prepared statements. */
static void forget_statements(struct conn *c)
{
    for (int i = 0; i < c->nstmts; i++)
        free(c->stmts[i]);
    c->nstmts = 0;
    c->preparing = 0;
}

/**
 * Closes the connection and returns its in-flight query (detached, for the caller to
 * answer). reopen_now: connect again at once instead of after the backoff.
 */
static void cancel_lookups(struct conn *c)
{
    for (int i = 0; c->lk != NULL && i < c->pg->nnames; i++) {
        cm_resolve_cancel(c->lk[i].req);
        c->lk[i].req = NULL;
    }
    c->pending = 0;
}

static struct query *conn_drop(struct conn *c, const char *what, const char *why, int reopen_now)
{
    struct query *q = c->q;

    log_failure(c, what, why);
    cancel_lookups(c);
    c->q = NULL;
    if (q != NULL)
        q->conn = NULL;
    unwatch(c);
    if (c->res != NULL) {
        PQclear(c->res);
        c->res = NULL;
    }
    if (c->pq != NULL) {
        PQfinish(c->pq);
        c->pq = NULL;
    }
    forget_statements(c);
    conn_set_state(c, CONN_DOWN);
    if (reopen_now && !c->pg->closing) {
        evtimer_del(c->timer);
        conn_start(c);
    }
    return q;
}

/* Answers a query that died with its connection; returns 0 if the pool went away. */
static int conn_lost(struct conn *c, const char *why)
{
    rsv_pg_t *pg = c->pg;
    struct query *q = conn_drop(c, "connection lost", why, 0);

    if (q == NULL)
        return 1;
    return notify(pg, q, cm_err_closed, NULL);
}

static void on_notice(void *arg, const PGresult *res)
{
    struct conn *c = arg;
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

    cm_log(sev != NULL && strcmp(sev, "WARNING") == 0 ? CM_LOG_WARN : CM_LOG_DEBUG,
           "postgres conn %d: %s: %s", c != NULL ? c->id : -1, sev ? sev : "NOTICE",
           msg ? msg : "");
}

/* "a,b,c" from items, starting at first: "b,c,a" for first 1. */
static char *rotated(char **items, int n, int first)
{
    size_t len = 1;
    char *out, *p;

    for (int i = 0; i < n; i++)
        len += strlen(items[i]) + 1;
    out = p = cm_xcalloc(1, len);
    for (int i = 0; i < n; i++) {
        const char *item = items[(first + i) % n];
        size_t l = strlen(item);
        if (i > 0)
            *p++ = ',';
        memcpy(p, item, l);
        p += l;
    }
    return out;
}

/*
 * Starts a connect. With several hosts, libpq tries them in order and skips one that
 * refuses or is read-only, but a host that accepts TCP and never answers (a frozen or
 * cut-off old primary) holds the attempt until our connect deadline: each connection
 * then starts its next attempt one host further (first_host), so such a host cannot
 * keep the pool from the others.
 */
static PGconn *start_connect(struct conn *c)
{
    rsv_pg_t *pg = c->pg;
    const char **values;
    char *lists[3] = {NULL, NULL, NULL};
    PGconn *pq;
    size_t n = 0;

    if (pg->nhosts < 2 || c->first_host == 0)
        return PQconnectStartParams(pg->keywords, pg->values, 0);
    while (pg->keywords[n] != NULL)
        n++;
    values = cm_xcalloc(n + 1, sizeof(char *));
    memcpy(values, pg->values, n * sizeof(char *));
    if (pg->host_kw >= 0)
        values[pg->host_kw] = lists[0] = rotated(pg->hosts, pg->nhosts, c->first_host);
    if (pg->hostaddr_kw >= 0)
        values[pg->hostaddr_kw] = lists[1] = rotated(pg->hostaddrs, pg->nhosts, c->first_host);
    if (pg->port_kw >= 0 && pg->nports == pg->nhosts)
        values[pg->port_kw] = lists[2] = rotated(pg->ports, pg->nhosts, c->first_host);
    pq = PQconnectStartParams(pg->keywords, values, 0); /* copies what it keeps */
    for (int i = 0; i < 3; i++)
        free(lists[i]);
    free(values);
    return pq;
}

/*
 * The host, hostaddr and port lists of a connect after c's lookups: for each host in the
 * order this attempt tries them (from first_host), one item per address of a name, and
 * one item with an empty hostaddr (libpq: connect by host) for the others.
 */
static void resolved_lists(struct conn *c, char **host, char **addr, char **port)
{
    rsv_pg_t *pg = c->pg;
    size_t cap = (size_t)pg->nnames * CM_RESOLVE_MAX;
    char **h = cm_xcalloc(cap, sizeof(char *)), **a = cm_xcalloc(cap, sizeof(char *));
    char **p = cm_xcalloc(cap, sizeof(char *)), empty[1] = "";
    int n = 0, first = pg->nhosts >= 2 ? c->first_host % pg->nnames : 0;

    for (int k = 0; k < pg->nnames; k++) {
        int i = (first + k) % pg->nnames;
        char *port_i = pg->nname_ports == pg->nnames ? pg->name_ports[i] : NULL;
        int items = cm_resolve_needed(pg->names[i]) ? c->lk[i].n : 1;
        for (int j = 0; j < items; j++, n++) {
            h[n] = pg->names[i];
            a[n] = cm_resolve_needed(pg->names[i]) ? c->lk[i].addrs[j] : empty;
            p[n] = port_i;
        }
    }
    *host = rotated(h, n, 0);
    *addr = rotated(a, n, 0);
    *port = pg->nname_ports == pg->nnames && pg->nnames > 0 ? rotated(p, n, 0) : NULL;
    free(h);
    free(a);
    free(p);
}

/* PQconnectStartParams with the addresses c's lookups found (pg->resolver is set). */
static PGconn *start_resolved(struct conn *c)
{
    rsv_pg_t *pg = c->pg;
    char *host, *addr, *port;
    const char **kw, **values;
    PGconn *pq;
    size_t n = 0;

    while (pg->keywords[n] != NULL)
        n++;
    kw = cm_xcalloc(n + 2, sizeof(char *));
    values = cm_xcalloc(n + 2, sizeof(char *));
    memcpy(kw, pg->keywords, n * sizeof(char *));
    memcpy(values, pg->values, n * sizeof(char *));
    resolved_lists(c, &host, &addr, &port);
    values[pg->host_kw] = host;
    if (port != NULL)
        values[pg->port_kw] = port;
    kw[n] = "hostaddr"; /* none in the conninfo: pg->resolver would be NULL */
    values[n] = addr;
    pq = PQconnectStartParams(kw, values, 0); /* copies what it keeps */
    free(host);
    free(addr);
    free(port);
    free(kw);
    free(values);
    return pq;
}

/* Starts libpq's connect (after the lookups, when there are some). */
static void open_connection(struct conn *c)
{
    c->pq = c->pg->resolver != NULL ? start_resolved(c) : start_connect(c);
    if (c->pq == NULL || PQstatus(c->pq) == CONNECTION_BAD) {
        log_failure(c, "cannot connect", c->pq ? PQerrorMessage(c->pq) : "out of memory");
        if (c->pq != NULL)
            PQfinish(c->pq);
        c->pq = NULL;
        if (c->state != CONN_DOWN)
            conn_set_state(c, CONN_DOWN); /* and the backoff */
        else
            schedule_retry(c);
        return;
    }
    PQsetNoticeReceiver(c->pq, on_notice, c);
    conn_set_state(c, CONN_CONNECTING);
    /* libpq: start as if PQconnectPoll had returned PGRES_POLLING_WRITING */
    if (watch(c, 0, 1, 1) != 0)
        conn_drop(c, "cannot connect", "cannot watch the socket", 0);
}

/* All of c's lookups answered: connect to what they found, or fail the attempt. */
static void lookups_done(struct conn *c)
{
    rsv_pg_t *pg = c->pg;
    char why[300] = "";
    int found = 0;

    for (int i = 0; i < pg->nnames; i++) {
        if (!cm_resolve_needed(pg->names[i])) {
            found++;
            continue;
        }
        found += c->lk[i].n;
        if (c->lk[i].err != NULL && why[0] == '\0')
            snprintf(why, sizeof(why), "cannot resolve %s: %s", pg->names[i], c->lk[i].err);
    }
    if (found == 0) {
        conn_drop(c, "cannot connect", why, 0);
        return;
    }
    if (why[0] != '\0') /* another host still has addresses: go on with those */
        cm_log(CM_LOG_DEBUG, "postgres conn %d: %s", c->id, why);
    open_connection(c);
}

static void on_lookup(const char *err, const cm_resolve_addr_t *addrs, int n, void *arg)
{
    struct lookup *lk = arg;

    lk->req = NULL;
    lk->err = err;
    lk->n = 0;
    for (int i = 0; i < n; i++) {
        const struct sockaddr *sa = (const struct sockaddr *)&addrs[i].ss;
        const void *ip = sa->sa_family == AF_INET6
                             ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                             : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
        if (inet_ntop(sa->sa_family, ip, lk->addrs[lk->n], sizeof(lk->addrs[0])) != NULL)
            lk->n++;
    }
    if (--lk->c->pending == 0)
        lookups_done(lk->c);
}

/* A connect attempt: look the host names up first when there are any, else connect. */
static void conn_start(struct conn *c)
{
    rsv_pg_t *pg = c->pg;

    if (pg->resolver == NULL) {
        open_connection(c);
        return;
    }
    conn_set_state(c, CONN_CONNECTING); /* the connect deadline covers the lookups */
    for (int i = 0; i < pg->nnames; i++) {
        c->lk[i].c = c;
        c->lk[i].n = 0;
        c->lk[i].err = NULL;
        if (!cm_resolve_needed(pg->names[i]))
            continue;
        c->pending++; /* callbacks come from the loop, never inside cm_resolve_start */
        c->lk[i].req = cm_resolve_start(pg->resolver, pg->names[i], 0, on_lookup, &c->lk[i]);
    }
}

static void connect_step(struct conn *c)
{
    switch (PQconnectPoll(c->pq)) {
    case PGRES_POLLING_READING:
        if (watch(c, 1, 0, 1) != 0)
            conn_drop(c, "cannot connect", "cannot watch the socket", 0);
        return;
    case PGRES_POLLING_WRITING:
        if (watch(c, 0, 1, 1) != 0)
            conn_drop(c, "cannot connect", "cannot watch the socket", 0);
        return;
    case PGRES_POLLING_OK:
        break;
    default:
        conn_drop(c, "cannot connect", PQerrorMessage(c->pq), 0);
        return;
    }
    if (PQsetnonblocking(c->pq, 1) != 0 || watch(c, 1, 0, 1) != 0) {
        conn_drop(c, "cannot connect", PQerrorMessage(c->pq), 0);
        return;
    }
    conn_set_state(c, CONN_IDLE);
    dispatch(c->pg);
}

static int is_ok(const PGresult *res)
{
    ExecStatusType st = PQresultStatus(res);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

/* Keeps the first error result, else the last result. Returns -1 on COPY (unsupported). */
static int keep_result(struct conn *c, PGresult *res)
{
    ExecStatusType st = PQresultStatus(res);

    if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
        PQclear(res);
        return -1;
    }
    if (c->res == NULL) {
        c->res = res;
    } else if (!is_ok(c->res)) {
        PQclear(res);
    } else {
        PQclear(c->res);
        c->res = res;
    }
    return 0;
}

/*
 * A prepared statement whose result columns changed under it (another session's DDL,
 * e.g. a column added to a table it reads with *): Postgres refuses to run it again.
 * The connection is reopened, so that each of its statements is prepared afresh; the
 * one query that met it gets the error.
 */
static int stale_statement(const PGresult *res)
{
    const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return st != NULL && strcmp(st, "0A000") == 0;
}

/*
 * A write refused because the session is read-only (25006): the node it reached is, or
 * has just become, a standby — a failover moved the primary (pg_auto_failover makes a
 * primary read-only while it drains, a demoted one comes back as a standby). Nothing was
 * written. The connection is reopened at once, so that target_session_attrs=read-write
 * finds the node that takes writes; the query is answered as a lost connection, which
 * every caller already treats as "retry later" (503), never as a broken statement.
 */
static int read_only_session(const PGresult *res)
{
    const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return st != NULL && strcmp(st, "25006") == 0;
}

/* PQgetResult said NULL: answers the query; the connection goes idle or down. */
static void finish_query(struct conn *c)
{
    rsv_pg_t *pg = c->pg;
    struct query *q = c->q;
    PGresult *res = c->res;
    const char *err;

    c->q = NULL;
    c->res = NULL;
    q->conn = NULL;
    if (PQstatus(c->pq) != CONNECTION_OK) {
        /* an error result here is the server going away (57P01 …), not our query */
        if (res != NULL)
            PQclear(res);
        res = NULL;
        err = cm_err_closed;
        conn_drop(c, "connection lost", PQerrorMessage(c->pq), 0);
    } else {
        err = res == NULL ? cm_err_protocol : is_ok(res) ? NULL : cm_err_server;
        conn_set_state(c, CONN_IDLE);
        if (err == cm_err_server && read_only_session(res)) {
            conn_drop(c, "read-only node, looking for the primary", PQresultErrorMessage(res), 1);
            PQclear(res);
            res = NULL;
            err = cm_err_closed;
        } else if (err == cm_err_server && c->nstmts > 0 && stale_statement(res))
            conn_drop(c, "prepared statements reset", PQresultErrorMessage(res), 1);
        else if (watch(c, 1, 0, 0) != 0)
            conn_drop(c, "connection lost", "cannot watch the socket", 0);
    }
    hold(pg);
    if (notify(pg, q, err, res))
        dispatch(pg);
    if (res != NULL)
        PQclear(res);
    release(pg);
}

static void busy_io(struct conn *c, short what)
{
    PGconn *pq = c->pq;
    int flush;

    if ((what & EV_READ) && !PQconsumeInput(pq)) {
        conn_lost(c, PQerrorMessage(pq));
        return;
    }
    flush = PQflush(pq);
    if (flush < 0 || watch(c, 1, flush == 1, 0) != 0) {
        conn_lost(c, PQerrorMessage(pq));
        return;
    }
    while (!PQisBusy(pq)) {
        PGresult *res = PQgetResult(pq);
        if (res == NULL) {
            if (c->preparing && PQstatus(pq) == CONNECTION_OK)
                prepared(c);
            else
                finish_query(c);
            return;
        }
        if (keep_result(c, res) != 0) {
            rsv_pg_t *pg = c->pg;
            struct query *q = conn_drop(c, "protocol", "COPY is not supported", 0);
            notify(pg, q, cm_err_protocol, NULL);
            return;
        }
    }
}

static void idle_io(struct conn *c)
{
    PGnotify *n;

    /* Nothing is expected while idle: a server going away (EOF, FATAL notice). */
    if (!PQconsumeInput(c->pq) || PQstatus(c->pq) != CONNECTION_OK) {
        conn_lost(c, PQerrorMessage(c->pq));
        return;
    }
    while ((n = PQnotifies(c->pq)) != NULL)
        PQfreemem(n);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    switch (c->state) {
    case CONN_CONNECTING:
        connect_step(c);
        break;
    case CONN_IDLE:
        idle_io(c);
        break;
    case CONN_BUSY:
        busy_io(c, what);
        break;
    case CONN_DOWN:
        break;
    }
}

static void on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    if (c->state == CONN_DOWN)
        conn_start(c);
    else if (c->state == CONN_CONNECTING) {
        if (c->pg->nhosts > 1) /* a silent host: the next attempt starts past it */
            c->first_host = (c->first_host + 1) % c->pg->nhosts;
        conn_drop(c, "cannot connect",
                  c->pending > 0 ? "host name lookup timed out" : "connect timed out", 0);
    }
}

/* ---- queries ---- */

/* Index of sql among c's prepared statements, or -1. */
static int find_statement(const struct conn *c, const char *sql, uint64_t h)
{
    for (int i = 0; i < c->nstmts; i++)
        if (c->hashes[i] == h && strcmp(c->stmts[i], sql) == 0)
            return i;
    return -1;
}

/*
 * Sends q on c: a statement with parameters as prepared "s<i>" when c has it, else its
 * Parse first when c has room (prepared() sends the execution), else unnamed. Returns
 * libpq's verdict (1 sent).
 */
static int send_statement(struct conn *c, struct query *q)
{
    char name[16];

    if (q->nparams == 0)
        return PQsendQuery(c->pq, q->sql);
    uint64_t h = cm_hash_str(q->sql);
    int i = find_statement(c, q->sql, h);
    if (i >= 0) {
        snprintf(name, sizeof(name), "s%d", i);
        return PQsendQueryPrepared(c->pq, name, q->nparams, q->params, NULL, NULL, 0);
    }
    if (c->nstmts < PREPARED_MAX) {
        snprintf(name, sizeof(name), "s%d", c->nstmts);
        c->hashes[c->nstmts] = h;
        c->preparing = 1;
        return PQsendPrepare(c->pq, name, q->sql, q->nparams, NULL);
    }
    return PQsendQueryParams(c->pq, q->sql, q->nparams, NULL, q->params, NULL, NULL, 0);
}

/*
 * The Parse of c's query ended (PQgetResult said NULL, the connection is fine): on
 * success the statement is c's, then the query runs — prepared, or unnamed when the
 * Parse failed, so that its caller gets the error an unnamed run gives.
 */
static void prepared(struct conn *c)
{
    struct query *q = c->q;
    PGresult *res = c->res;
    char name[16];
    int ok, flush;

    c->res = NULL;
    c->preparing = 0;
    if (res != NULL && is_ok(res)) {
        snprintf(name, sizeof(name), "s%d", c->nstmts);
        c->stmts[c->nstmts++] = cm_xstrdup(q->sql);
        ok = PQsendQueryPrepared(c->pq, name, q->nparams, q->params, NULL, NULL, 0);
    } else {
        ok = PQsendQueryParams(c->pq, q->sql, q->nparams, NULL, q->params, NULL, NULL, 0);
    }
    if (res != NULL)
        PQclear(res);
    flush = ok ? PQflush(c->pq) : -1;
    if (flush < 0 || watch(c, 1, flush == 1, 0) != 0)
        conn_lost(c, PQerrorMessage(c->pq));
}

/* Hands q to idle connection c. Returns 0 when sent (or doomed), -1 when c is broken. */
static int send_query(struct conn *c, struct query *q)
{
    rsv_pg_t *pg = c->pg;
    int ok, flush;

    ok = send_statement(c, q);
    if (!ok) {
        c->preparing = 0;
        if (PQstatus(c->pq) == CONNECTION_OK) { /* libpq refused the query itself */
            cm_log(CM_LOG_ERROR, "postgres conn %d: cannot send query: %s", c->id,
                   PQerrorMessage(c->pq));
            doom(pg, q, cm_err_protocol);
            return 0;
        }
        return -1;
    }
    q->state = Q_RUNNING;
    q->conn = c;
    c->q = q;
    conn_set_state(c, CONN_BUSY);
    flush = PQflush(c->pq);
    if (flush < 0 || watch(c, 1, flush == 1, 0) != 0) {
        /* the query may have left: it must not be retried, only answered */
        q = conn_drop(c, "connection lost", PQerrorMessage(c->pq), 0);
        doom(pg, q, cm_err_closed);
    }
    return 0;
}

/* Starts waiting queries on idle connections, oldest first. Never calls user code. */
static void dispatch(rsv_pg_t *pg)
{
    for (int i = 0; i < pg->size && pg->waiting.head != NULL && !pg->closing; i++) {
        struct conn *c = &pg->conns[i];
        while (c->state == CONN_IDLE && pg->waiting.head != NULL) {
            struct query *q = pg->waiting.head;
            qlist_del(&pg->waiting, q);
            if (send_query(c, q) != 0) {
                qlist_push_front(&pg->waiting, q); /* never left: safe on another one */
                conn_drop(c, "connection lost", PQerrorMessage(c->pq), 0);
            }
        }
    }
}

/* Index of the host c is connected to in pg's lists, or -1. */
static int host_index(const rsv_pg_t *pg, PGconn *pq)
{
    const char *host = PQhost(pq), *port = PQport(pq);

    for (int i = 0; host != NULL && port != NULL && i < pg->nhosts; i++) {
        const char *h = pg->hosts != NULL ? pg->hosts[i] : pg->hostaddrs[i];
        const char *p = pg->ports == NULL ? NULL : pg->ports[pg->nports == 1 ? 0 : i];
        if (strcmp(h, host) == 0 && (p == NULL ? strcmp(port, "5432") == 0 : strcmp(p, port) == 0))
            return i;
    }
    return -1;
}

/*
 * With several hosts, a query past its deadline may mean its server went silent (a
 * frozen or cut-off primary after a failover: no reset ever comes). Its idle peers on
 * the same server would each wait a whole deadline too before finding out: they are
 * closed and reopened now, and they and c start their next connect past that host.
 * A server that was only slow costs each of them one reconnect.
 */
static void leave_silent_host(struct conn *c)
{
    rsv_pg_t *pg = c->pg;
    int k = host_index(pg, c->pq);

    if (k < 0)
        return;
    c->first_host = (k + 1) % pg->nhosts;
    for (int i = 0; i < pg->size; i++) {
        struct conn *o = &pg->conns[i];
        if (o == c || o->state != CONN_IDLE || host_index(pg, o->pq) != k)
            continue;
        o->first_host = c->first_host;
        conn_drop(o, "server silent", "another query on it timed out: reconnecting", 1);
    }
}

static void on_query_timer(evutil_socket_t fd, short what, void *arg)
{
    struct query *q = arg;
    rsv_pg_t *pg = q->pg;
    const char *err = cm_err_timeout;

    switch (q->state) {
    case Q_WAITING:
        qlist_del(&pg->waiting, q);
        if (rsv_pg_connected(pg) == 0)
            err = cm_err_closed; /* it never had a connection to run on */
        break;
    case Q_RUNNING:
        /* the server may still be running it: drop that connection, open a fresh one */
        if (pg->nhosts > 1)
            leave_silent_host(q->conn);
        conn_drop(q->conn, "query timed out", "closing the connection", 1);
        break;
    case Q_DOOMED:
        qlist_del(&pg->doomed, q);
        err = q->doom;
        break;
    }
    notify(pg, q, err, NULL);
}

static int query(rsv_pg_t *pg, bool first, const char *sql, int nparams, const char *const *params,
                 rsv_pg_cb cb, void *arg)
{
    size_t size = sizeof(struct query) + (size_t)nparams * sizeof(char *) + strlen(sql) + 1;
    struct query *q;
    char *p;

    assert(sql != NULL && cb != NULL && nparams >= 0 && nparams <= 65535);
    if (pg->closing)
        return -1;
    for (int i = 0; i < nparams; i++)
        if (params[i] != NULL)
            size += strlen(params[i]) + 1;
    q = cm_xcalloc(1, size);
    q->pg = pg;
    q->cb = cb;
    q->arg = arg;
    q->nparams = nparams;
    q->params = (const char **)(q + 1);
    p = (char *)(q->params + nparams);
    for (int i = 0; i < nparams; i++) {
        if (params[i] == NULL)
            continue;
        size_t len = strlen(params[i]) + 1;
        memcpy(p, params[i], len);
        q->params[i] = p;
        p += len;
    }
    q->sql = p;
    memcpy(p, sql, strlen(sql) + 1);
    q->timer = evtimer_new(pg->base, on_query_timer, q);
    if (q->timer == NULL) {
        cm_log(CM_LOG_ERROR, "postgres: cannot create a timer");
        abort();
    }

    q->state = Q_WAITING;
    if (first)
        qlist_push_front(&pg->waiting, q);
    else
        qlist_push(&pg->waiting, q);
    evtimer_add(q->timer, pg->deadline);
    dispatch(pg);
    if (q->state == Q_WAITING && pg->waiting.n > pg->max_queue) {
        qlist_del(&pg->waiting, q);
        doom(pg, q, cm_err_busy);
    }
    return 0;
}

int rsv_pg_query(rsv_pg_t *pg, const char *sql, int nparams, const char *const *params,
                 rsv_pg_cb cb, void *arg)
{
    return query(pg, false, sql, nparams, params, cb, arg);
}

int rsv_pg_query_first(rsv_pg_t *pg, const char *sql, int nparams, const char *const *params,
                       rsv_pg_cb cb, void *arg)
{
    return query(pg, true, sql, nparams, params, cb, arg);
}

int rsv_pg_connected(const rsv_pg_t *pg)
{
    int n = 0;
    for (int i = 0; i < pg->size; i++)
        n += pg->conns[i].state == CONN_IDLE || pg->conns[i].state == CONN_BUSY;
    return n;
}

/* ---- pool ---- */

/* Splits "a,b" into items (*n of them). */
static char **split_list(const char *list, int *n)
{
    char *copy = cm_xstrdup(list), *save = NULL, **items;
    int count = 1;

    for (const char *p = list; *p != '\0'; p++)
        count += *p == ',';
    items = cm_xcalloc((size_t)count, sizeof(char *));
    *n = 0;
    for (char *t = strtok_r(copy, ",", &save); t != NULL && *n < count;
         t = strtok_r(NULL, ",", &save))
        items[(*n)++] = cm_xstrdup(t);
    free(copy);
    return items;
}

/*
 * Finds host, hostaddr and port among the keywords; with more than one host, keeps them
 * split for start_connect. A connect_timeout (seconds) bounds each connect attempt (an
 * asynchronous connect does not apply it by itself), else the query deadline does.
 */
static int split_hosts(rsv_pg_t *pg)
{
    int nh, na;

    pg->host_kw = pg->hostaddr_kw = pg->port_kw = -1;
    pg->connect_ms = pg->timeout_ms;
    for (int i = 0; pg->keywords[i] != NULL; i++) {
        const char *k = pg->keywords[i], *v = pg->values[i];
        if (strcmp(k, "host") == 0)
            pg->host_kw = i;
        else if (strcmp(k, "hostaddr") == 0)
            pg->hostaddr_kw = i;
        else if (strcmp(k, "port") == 0)
            pg->port_kw = i;
        else if (strcmp(k, "connect_timeout") == 0 && atoi(v) >= 2 &&
                 atoi(v) * 1000 < pg->timeout_ms)
            pg->connect_ms = atoi(v) * 1000; /* libpq: values under 2 s mean 2 s */
    }
    if (pg->host_kw >= 0 && strchr(pg->values[pg->host_kw], ',') != NULL)
        pg->hosts = split_list(pg->values[pg->host_kw], &pg->nhost_items);
    if (pg->hostaddr_kw >= 0 && strchr(pg->values[pg->hostaddr_kw], ',') != NULL)
        pg->hostaddrs = split_list(pg->values[pg->hostaddr_kw], &pg->naddr_items);
    nh = pg->nhost_items;
    na = pg->naddr_items;
    pg->nhosts = nh > na ? nh : na;
    if (pg->nhosts < 2)
        return 0;
    if ((pg->hosts != NULL && nh != pg->nhosts) || (pg->hostaddrs != NULL && na != pg->nhosts)) {
        cm_log(CM_LOG_ERROR, "postgres: invalid conninfo: host and hostaddr list different hosts");
        return -1;
    }
    if (pg->port_kw >= 0) {
        pg->ports = split_list(pg->values[pg->port_kw], &pg->nports);
        if (pg->nports != 1 && pg->nports != pg->nhosts) {
            cm_log(CM_LOG_ERROR, "postgres: invalid conninfo: %d ports for %d hosts", pg->nports,
                   pg->nhosts);
            return -1;
        }
    }
    return 0;
}

/*
 * When the host list holds a name and the conninfo gives no hostaddr (which would win),
 * keeps the host and port lists for the lookups and makes the pool's resolver (start-up:
 * it reads resolv.conf). Without a resolver libpq would resolve, blocking: logged.
 */
static void setup_names(rsv_pg_t *pg)
{
    bool any = false;

    if (pg->host_kw < 0 || pg->hostaddr_kw >= 0)
        return;
    pg->names = split_list(pg->values[pg->host_kw], &pg->nnames);
    for (int i = 0; i < pg->nnames; i++)
        any = any || cm_resolve_needed(pg->names[i]);
    if (!any) {
        free_list(pg->names, pg->nnames);
        pg->names = NULL;
        pg->nnames = 0;
        return;
    }
    if (pg->port_kw >= 0)
        pg->name_ports = split_list(pg->values[pg->port_kw], &pg->nname_ports);
    pg->resolver = cm_resolve_new(pg->base);
    if (pg->resolver == NULL)
        cm_log(CM_LOG_ERROR, "postgres: no resolver: libpq will look host names up itself");
}

/*
 * Turns conninfo into keyword/value arrays, adding "-c statement_timeout=…" to the
 * session options so the server also gives up on a statement past its deadline.
 */
static int parse_conninfo(rsv_pg_t *pg, const char *conninfo)
{
    char *errmsg = NULL;
    size_t n = 0, i = 0;
    const char *old_options = NULL;

    pg->parsed = PQconninfoParse(conninfo, &errmsg);
    if (pg->parsed == NULL) {
        cm_log(CM_LOG_ERROR, "postgres: invalid conninfo: %s", errmsg ? errmsg : "out of memory");
        PQfreemem(errmsg);
        return -1;
    }
    for (PQconninfoOption *o = pg->parsed; o->keyword != NULL; o++)
        n++;
    pg->keywords = cm_xcalloc(n + 2, sizeof(char *));
    pg->values = cm_xcalloc(n + 2, sizeof(char *));
    for (PQconninfoOption *o = pg->parsed; o->keyword != NULL; o++) {
        if (o->val == NULL)
            continue;
        if (strcmp(o->keyword, "options") == 0) {
            old_options = o->val;
            continue;
        }
        pg->keywords[i] = o->keyword;
        pg->values[i] = o->val;
        i++;
    }
    if (split_hosts(pg) != 0) {
        free(pg->keywords);
        free(pg->values);
        pg->keywords = pg->values = NULL;
        return -1;
    }
    setup_names(pg);
    /* a margin over our deadline, so that ours fires first and the answer is a timeout */
    pg->options = cm_xasprintf("%s%s-c statement_timeout=%d", old_options ? old_options : "",
                               old_options ? " " : "", pg->timeout_ms + pg->timeout_ms / 4 + 100);
    pg->keywords[i] = "options";
    pg->values[i] = pg->options;
    return 0;
}

rsv_pg_t *rsv_pg_new(struct event_base *base, const char *conninfo, int size, int timeout_ms,
                     int max_queue)
{
    rsv_pg_t *pg = cm_xcalloc(1, sizeof(*pg));
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    int valid;

    assert(base != NULL && conninfo != NULL && size > 0 && timeout_ms > 0 && max_queue >= 0);
    pg->base = base;
    pg->size = size;
    pg->timeout_ms = timeout_ms;
    pg->max_queue = max_queue;
    pg->deadline_plain = tv;
    /* every query deadline has the same duration: a common timeout is a FIFO, not a heap */
    pg->deadline = event_base_init_common_timeout(base, &tv);
    if (pg->deadline == NULL)
        pg->deadline = &pg->deadline_plain;
    valid = parse_conninfo(pg, conninfo) == 0;
    pg->conns = cm_xcalloc((size_t)size, sizeof(struct conn));
    for (int i = 0; i < size; i++) {
        struct conn *c = &pg->conns[i];
        c->pg = pg;
        c->id = i;
        c->fd = -1;
        c->state = CONN_DOWN;
        c->backoff_ms = BACKOFF_MIN_MS;
        if (pg->resolver != NULL)
            c->lk = cm_xcalloc((size_t)pg->nnames, sizeof(struct lookup));
        c->timer = evtimer_new(base, on_conn_timer, c);
        if (c->timer == NULL) {
            cm_log(CM_LOG_ERROR, "postgres: cannot create a timer");
            abort();
        }
        if (valid)
            conn_start(c);
    }
    return pg;
}

void rsv_pg_free(rsv_pg_t *pg)
{
    struct query *q;

    if (pg == NULL || pg->closing)
        return;
    pg->closing = 1;
    hold(pg);
    for (int i = 0; i < pg->size; i++) {
        struct conn *c = &pg->conns[i];
        evtimer_del(c->timer);
        q = c->q;
        c->q = NULL;
        unwatch(c);
        if (c->res != NULL)
            PQclear(c->res);
        c->res = NULL;
        if (c->pq != NULL)
            PQfinish(c->pq);
        c->pq = NULL;
        forget_statements(c);
        cancel_lookups(c);
        conn_set_state(c, CONN_DOWN); /* no reconnect: the pool is closing */
        if (q != NULL)
            notify(pg, q, cm_err_shutdown, NULL);
    }
    while ((q = pg->waiting.head) != NULL) {
        qlist_del(&pg->waiting, q);
        notify(pg, q, cm_err_shutdown, NULL);
    }
    while ((q = pg->doomed.head) != NULL) { /* already decided: deliver that answer now */
        qlist_del(&pg->doomed, q);
        notify(pg, q, q->doom, NULL);
    }
    release(pg);
}

/* ---- results ---- */

int rsv_pg_result_rows(const rsv_pg_result_t *res)
{
    return res != NULL ? PQntuples(res) : 0;
}

int rsv_pg_result_cols(const rsv_pg_result_t *res)
{
    return res != NULL ? PQnfields(res) : 0;
}

const char *rsv_pg_result_value(const rsv_pg_result_t *res, int row, int col)
{
    const char *v;

    if (res == NULL || row < 0 || row >= PQntuples(res) || col < 0 || col >= PQnfields(res))
        return "";
    v = PQgetvalue(res, row, col);
    return v != NULL ? v : "";
}

int rsv_pg_result_isnull(const rsv_pg_result_t *res, int row, int col)
{
    if (res == NULL || row < 0 || row >= PQntuples(res) || col < 0 || col >= PQnfields(res))
        return 1;
    return PQgetisnull(res, row, col);
}

const char *rsv_pg_result_sqlstate(const rsv_pg_result_t *res)
{
    const char *s = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s != NULL ? s : "";
}

const char *rsv_pg_result_message(const rsv_pg_result_t *res)
{
    const char *s = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    return s != NULL ? s : "";
}

/* ---- migrations (synchronous, start-up only) ---- */

static void set_err(char *err, size_t errlen, const char *what, const char *msg)
{
    char line[512];

    one_line(line, sizeof(line), msg);
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", what, line);
}

/* Runs sql (optionally one parameter); 0 when it succeeded. *out keeps the result. */
static int run(PGconn *conn, const char *sql, const char *param, PGresult **out, char *err,
               size_t errlen, const char *what)
{
    PGresult *res;
    int ok;

    if (param != NULL)
        res = PQexecParams(conn, sql, 1, NULL, &param, NULL, NULL, 0); /* blocking-ok: migrate */
    else
        res = PQexec(conn, sql); /* blocking-ok: migrate, start-up only */
    ok = res != NULL && is_ok(res);

    if (!ok)
        set_err(err, errlen, what, res != NULL ? PQresultErrorMessage(res) : PQerrorMessage(conn));
    if (out != NULL && ok)
        *out = res;
    else
        PQclear(res);
    return ok ? 0 : -1;
}

static void on_migrate_notice(void *arg, const PGresult *res)
{
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    cm_log(CM_LOG_DEBUG, "postgres migrate: %s", msg ? msg : "");
}

/* Applies migration i unless it is recorded. 0, or -1 with err set. */
static int migrate_one(PGconn *conn, const char *name, const char *sql, char *err, size_t errlen)
{
    PGresult *res = NULL;
    int applied;

    if (run(conn, "SELECT 1 FROM schema_migrations WHERE name = $1", name, &res, err, errlen,
            name) != 0)
        return -1;
    applied = PQntuples(res) > 0;
    PQclear(res);
    if (applied)
        return 0;
    if (run(conn, "BEGIN", NULL, NULL, err, errlen, name) != 0)
        return -1;
    if (run(conn, sql, NULL, NULL, err, errlen, name) != 0 ||
        run(conn, "INSERT INTO schema_migrations (name) VALUES ($1)", name, NULL, err, errlen,
            name) != 0 ||
        run(conn, "COMMIT", NULL, NULL, err, errlen, name) != 0) {
        PQclear(PQexec(conn, "ROLLBACK")); /* blocking-ok: migrate, start-up only */
        return -1;
    }
    cm_log(CM_LOG_INFO, "postgres: applied migration %s", name);
    return 0;
}

int rsv_pg_migrate(const char *conninfo, const char *const *names, const char *const *sqls,
                   size_t n, char *err, size_t errlen)
{
    PGconn *conn = PQconnectdb(conninfo); /* blocking-ok: migrate, start-up only */
    int locked = 0, rc = -1;

    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        set_err(err, errlen, "connect", conn ? PQerrorMessage(conn) : "out of memory");
        goto out;
    }
    PQsetNoticeReceiver(conn, on_migrate_notice, NULL);
    /* the lock first: concurrent CREATE TABLE IF NOT EXISTS can still collide */
    if (run(conn, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", NULL, NULL, err, errlen,
            "advisory lock") != 0)
        goto out;
    locked = 1;
    if (run(conn,
            "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, "
            "applied_at timestamptz DEFAULT now())",
            NULL, NULL, err, errlen, "schema_migrations") != 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (migrate_one(conn, names[i], sqls[i], err, errlen) != 0)
            goto out;
    rc = 0;
out:
    static const char unlock[] = "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")";
    if (locked)
        PQclear(PQexec(conn, unlock)); /* blocking-ok: migrate, start-up only */
    PQfinish(conn);
    return rc;
}
