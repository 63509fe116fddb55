/*
 * cm_redis_cluster — Redis Cluster routing for cm_redis: the slot map, one connection per
 * node, redirections and retries. The contract is in cm_redis.h ("Cluster mode").
 *
 * Runs on the loop thread that owns the event_base and never blocks. Each node is a plain
 * single-node cm_redis_t, so connects, reconnects, per-command deadlines and the NOSCRIPT
 * → EVAL fallback (per node: each node has its own script cache) are the single-node
 * code's. This file adds, per cluster command, a `struct ccmd` with a copy of its argv (it
 * may be sent several times), the caller's deadline, and a backoff timer:
 *
 *   send ─▶ node of slot up? ─ yes ─▶ command on that node ─▶ reply
 *              │ no (or unknown)                               │ MOVED: map[slot] = node, refresh,
 * send again ▼                                               │ ASK:   ASKING + send there, once
 *           backoff (10 ms doubling to 250 ms) ─▶ send         │ TRYAGAIN / CLUSTERDOWN: backoff
 *                                                              │ anything else: answer
 *   deadline ─▶ answer cm_err_timeout (a reply still due is dropped when it comes);
 *               sent to a node: wait once more for that node's own deadline
 *
 * A command is resent only when it provably did not run (not sent, or refused with a
 * redirection); one whose connection dropped after it was sent is answered cm_err_closed.
 *
 * The slot map is a 16384-entry table of node indexes loaded from CLUSTER SHARDS, refreshed
 * every second, and sooner (at most every 100 ms) after a MOVED, a lost node or a command
 * that found its node down — which is how a failover is followed: the promoted replica
 * shows up as its shard's master. Whom it asks matters: a replica, a seed or a restarted
 * old master may still describe the map from before a failover, and a client that took
 * its answer would route back to the dead master. So the map is asked of the node a MOVED
 * just named (it holds the slot by the cluster's own word), else of a master of the map
 * in use (round robin), and of any other connected node only when no master is up.
 *
 * Re-entrancy follows cm_redis.c: user callbacks may issue commands or free the client;
 * every entry point holds a reference, and the memory goes with the last one.
 */
#include "cm_redis_cluster.h"

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"

#include <assert.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#define MAX_NODES      64
#define MAX_SEEDS      16
#define MAX_RANGES     1024
#define NO_NODE        0xffff
#define REFRESH_MS     1000
#define REFRESH_MIN_MS 100
#define RETRY_MIN_MS   10
#define RETRY_MAX_MS   250
#define MAX_REDIRECTS  5

struct node {
    char host[64];
    int port;
    cm_redis_t *conn;
    int owns; /* serves at least one slot in the current map */
};

struct ccmd {
    struct ccmd *prev, *next; /* in cl's pending list while the caller waits */
    struct cm_redis_cluster *cl;
    cm_redis_cb cb;
    void *arg;
    struct event *deadline; /* NULL once answered */
    struct event *retry;
    unsigned answered : 1; /* cb has run */
    unsigned inflight : 1; /* a node holds this record as its callback's arg */
    unsigned asked : 1;    /* an ASK was followed: never twice */
    unsigned extended : 1; /* its deadline waited one more period for a node's verdict */
    int ask_node;          /* send ASKING to this node first, then the command; or -1 */
    int sent_node;         /* where the last attempt went */
    int redirects;
    int backoff_ms;
    int slot; /* -1: no key, any master */
    const cm_redis_script_t *script;
    int nkeys;
    int argc;
    const char **argv;
    size_t *argvlen;
};

struct cm_redis_cluster {
    struct event_base *base;
    int timeout_ms;
    char *auth_user, *auth_password; /* NULL: no AUTH (cm_redis_auth_t) */
    SSL_CTX *tls;                    /* NULL: plain TCP; else one reference of ours */
    char *tls_server_name;
    struct timeval cmd_tv_plain;
    const struct timeval *cmd_tv;
    struct node nodes[MAX_NODES];
    int nnodes;
    uint16_t slots[CM_REDIS_SLOTS]; /* node index, NO_NODE when no master is known */
    int have_map;
    int covered; /* every slot has a node */
    struct event *refresh;
    int refreshing;
    uint64_t last_refresh_ns;
    unsigned rr;
    int prefer; /* the node a MOVED named: asked first at the next refresh; or -1 */
    struct ccmd *head, *tail;
    int refs;
    int closing;
};

/* ---- pure routing functions ---- */

uint16_t cm_redis_crc16(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned cm_redis_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);

    if (open != NULL) {
        size_t start = (size_t)(open - key) + 1;
        const char *close = memchr(key + start, '}', len - start);
        if (close != NULL && close > key + start)
            return cm_redis_crc16(key + start, (size_t)(close - (key + start))) & 16383;
    }
    return cm_redis_crc16(key, len) & 16383;
}

static int has_prefix(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

/* Reads a decimal number of at most 5 digits from s[*i..len) up to a space or the end. */
static long read_num(const char *s, size_t len, size_t *i)
{
    long v = 0;
    size_t start = *i;

    while (*i < len && s[*i] >= '0' && s[*i] <= '9' && *i - start < 5)
        v = v * 10 + (s[(*i)++] - '0');
    if (*i == start || (*i < len && s[*i] != ' '))
        return -1;
    return v;
}

cm_redis_redir_t cm_redis_redirect_parse(const char *err, size_t len, unsigned *slot, char *host,
                                         size_t hostlen, int *port)
{
    cm_redis_redir_t kind;
    size_t i, addr, colon, end;
    long s, p;

    if (has_prefix(err, len, "MOVED ")) {
        kind = CM_REDIS_REDIR_MOVED;
        i = 6;
    } else if (has_prefix(err, len, "ASK ")) {
        kind = CM_REDIS_REDIR_ASK;
        i = 4;
    } else if (has_prefix(err, len, "TRYAGAIN")) {
        return CM_REDIS_REDIR_TRYAGAIN;
    } else if (has_prefix(err, len, "CLUSTERDOWN")) {
        return CM_REDIS_REDIR_DOWN;
    } else {
        return CM_REDIS_REDIR_NONE;
    }
    s = read_num(err, len, &i);
    if (s < 0 || s >= CM_REDIS_SLOTS || i >= len)
        return CM_REDIS_REDIR_NONE;
    addr = ++i;
    for (end = addr; end < len && err[end] != ' '; end++)
        ;
    if (end != len) /* nothing may follow the address */
        return CM_REDIS_REDIR_NONE;
    for (colon = end; colon > addr && err[colon - 1] != ':'; colon--)
        ;
    if (colon == addr) /* no ':' at all */
        return CM_REDIS_REDIR_NONE;
    colon--; /* at the ':' */
    if (colon - addr >= hostlen)
        return CM_REDIS_REDIR_NONE;
    i = colon + 1;
    p = read_num(err, end, &i);
    if (p <= 0 || p > 65535 || i != end)
        return CM_REDIS_REDIR_NONE;
    memcpy(host, err + addr, colon - addr);
    host[colon - addr] = '\0';
    *slot = (unsigned)s;
    *port = (int)p;
    return kind;
}

static int str_is(const cm_redis_reply_t *r, const char *want)
{
    size_t len;
    const char *s = r != NULL ? cm_redis_reply_str(r, &len) : NULL;
    return s != NULL && len == strlen(want) && memcmp(s, want, len) == 0;
}

/* The value of field name in a RESP2 flat map (array of key, value, …); NULL if absent. */
static const cm_redis_reply_t *map_get(const cm_redis_reply_t *map, const char *name)
{
    size_t n = cm_redis_reply_count(map);
    for (size_t i = 0; i + 1 < n; i += 2)
        if (str_is(cm_redis_reply_at(map, i), name))
            return cm_redis_reply_at(map, i + 1);
    return NULL;
}

/* Picks the shard's master (an online one first) into out; 0 found, -1 none / malformed. */
static int shard_master(const cm_redis_reply_t *nodes, cm_redis_range_t *out, int tls)
{
    int found = 0;

    for (size_t i = 0; i < cm_redis_reply_count(nodes); i++) {
        const cm_redis_reply_t *n = cm_redis_reply_at(nodes, i);
        const cm_redis_reply_t *ip = map_get(n, "ip"),
                               *port = map_get(n, tls ? "tls-port" : "port");
        size_t len;
        const char *s;

        if (cm_redis_reply_type(n) != CM_REDIS_ARRAY || !str_is(map_get(n, "role"), "master"))
            continue;
        if (ip == NULL || port == NULL || cm_redis_reply_type(port) != CM_REDIS_INT)
            continue;
        s = cm_redis_reply_str(ip, &len);
        if (s == NULL || len == 0 || len >= sizeof(out->host) || cm_redis_reply_int(port) <= 0 ||
            cm_redis_reply_int(port) > 65535)
            continue;
        if (found && !str_is(map_get(n, "health"), "online"))
            continue;
        memcpy(out->host, s, len);
        out->host[len] = '\0';
        out->port = (int)cm_redis_reply_int(port);
        found = 1;
    }
    return found ? 0 : -1;
}

int cm_redis_shards_parse(const cm_redis_reply_t *reply, cm_redis_range_t *out, int max, int tls)
{
    int n = 0;

    if (reply == NULL || cm_redis_reply_type(reply) != CM_REDIS_ARRAY)
        return -1;
    for (size_t i = 0; i < cm_redis_reply_count(reply); i++) {
        const cm_redis_reply_t *shard = cm_redis_reply_at(reply, i);
        const cm_redis_reply_t *slots = map_get(shard, "slots"), *nodes = map_get(shard, "nodes");
        cm_redis_range_t m;
        size_t ns;

        if (cm_redis_reply_type(shard) != CM_REDIS_ARRAY || slots == NULL || nodes == NULL ||
            cm_redis_reply_type(slots) != CM_REDIS_ARRAY ||
            cm_redis_reply_type(nodes) != CM_REDIS_ARRAY)
            return -1;
        ns = cm_redis_reply_count(slots);
        if (ns % 2 != 0)
            return -1;
        if (shard_master(nodes, &m, tls) != 0)
            continue; /* no master right now: its slots stay unserved */
        for (size_t j = 0; j < ns; j += 2) {
            const cm_redis_reply_t *a = cm_redis_reply_at(slots, j),
                                   *b = cm_redis_reply_at(slots, j + 1);
            long long s, e;
            if (cm_redis_reply_type(a) != CM_REDIS_INT || cm_redis_reply_type(b) != CM_REDIS_INT)
                return -1;
            s = cm_redis_reply_int(a);
            e = cm_redis_reply_int(b);
            if (s < 0 || e < s || e >= CM_REDIS_SLOTS || n >= max)
                return -1;
            out[n] = m;
            out[n].start = (unsigned)s;
            out[n].end = (unsigned)e;
            n++;
        }
    }
    return n;
}

/* ---- references ---- */

static void hold(struct cm_redis_cluster *cl)
{
    cl->refs++;
}

/* Drops a reference; 1 when the caller may go on using cl. */
static int release(struct cm_redis_cluster *cl)
{
    assert(cl->refs > 0);
    if (--cl->refs == 0 && cl->closing) {
        event_free(cl->refresh);
        free(cl->auth_user);
        if (cl->auth_password) {
            memset(cl->auth_password, 0, strlen(cl->auth_password));
            free(cl->auth_password);
        }
        SSL_CTX_free(cl->tls);
        free(cl->tls_server_name);
        free(cl);
        return 0;
    }
    return !cl->closing;
}

/* ---- nodes and the slot map ---- */

static int node_find(struct cm_redis_cluster *cl, const char *host, int port)
{
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].port == port && strcmp(cl->nodes[i].host, host) == 0)
            return i;
    return -1;
}

/* The node at host:port, connecting to it if it is new; -1 when the table is full. */
static int node_get(struct cm_redis_cluster *cl, const char *host, int port)
{
    int i = node_find(cl, host, port);
    struct node *n;

    if (i >= 0)
        return i;
    if (cl->nnodes == MAX_NODES || strlen(host) >= sizeof(n->host)) {
        cm_log(CM_LOG_WARN, "redis cluster: cannot add node %s:%d", host, port);
        return -1;
    }
    n = &cl->nodes[cl->nnodes];
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    cm_redis_auth_t auth = {cl->auth_user, cl->auth_password, cl->tls, cl->tls_server_name};
    n->conn = cm_redis_new_auth(cl->base, host, port, cl->timeout_ms, &auth);
    return cl->nnodes++;
}

static int node_up(const struct cm_redis_cluster *cl, int i)
{
    return i >= 0 && i < cl->nnodes && cm_redis_connected(cl->nodes[i].conn);
}

static void on_shards(const char *err, const cm_redis_reply_t *reply, void *arg);

static void arm_refresh(struct cm_redis_cluster *cl, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    evtimer_del(cl->refresh);
    evtimer_add(cl->refresh, &tv);
}

/* Asks for a fresh map soon: at once unless one was asked for less than 100 ms ago. */
static void refresh_soon(struct cm_redis_cluster *cl)
{
    uint64_t now = cm_time_mono_ns(), next = cl->last_refresh_ns + REFRESH_MIN_MS * 1000000ULL;

    if (cl->refreshing || cl->closing)
        return;
    arm_refresh(cl, now >= next ? 0 : (int)((next - now) / 1000000ULL) + 1);
}

/* Sends CLUSTER SHARDS to node i; 1 when sent. */
static int ask_shards(struct cm_redis_cluster *cl, int i)
{
    static const char *argv[] = {"CLUSTER", "SHARDS"};

    if (!node_up(cl, i) || cm_redis_command(cl->nodes[i].conn, on_shards, cl, 2, argv, NULL) != 0)
        return 0;
    cl->refreshing = 1;
    cl->last_refresh_ns = cm_time_mono_ns();
    return 1;
}

/* Asks for the map: the node a MOVED named, else a master of the map in use, else (no
 * map yet, or none of its masters is up) any connected node; round robin within each. */
static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    struct cm_redis_cluster *cl = arg;
    int prefer = cl->prefer;

    if (cl->refreshing)
        return;
    cl->prefer = -1;
    if (prefer >= 0 && ask_shards(cl, prefer))
        return;
    for (int masters_only = 1; masters_only >= 0; masters_only--) {
        for (int k = 0; k < cl->nnodes; k++) {
            int i = (int)((cl->rr + (unsigned)k) % (unsigned)cl->nnodes);
            if (masters_only && !cl->nodes[i].owns)
                continue;
            if (ask_shards(cl, i)) {
                cl->rr = (unsigned)i + 1;
                return;
            }
        }
    }
    arm_refresh(cl, REFRESH_MIN_MS); /* no node is up yet */
}

/* Installs a parsed map; returns 1 when it differs from the one in use. */
static int map_apply(struct cm_redis_cluster *cl, const cm_redis_range_t *rg, int n)
{
    uint16_t next[CM_REDIS_SLOTS];
    int changed = !cl->have_map, covered = 1;

    for (int s = 0; s < CM_REDIS_SLOTS; s++)
        next[s] = NO_NODE;
    for (int k = 0; k < n; k++) {
        int i = node_get(cl, rg[k].host, rg[k].port);
        for (unsigned s = rg[k].start; i >= 0 && s <= rg[k].end; s++)
            next[s] = (uint16_t)i;
    }
    for (int i = 0; i < cl->nnodes; i++)
        cl->nodes[i].owns = 0;
    for (int s = 0; s < CM_REDIS_SLOTS; s++) {
        if (next[s] == NO_NODE)
            covered = 0;
        else
            cl->nodes[next[s]].owns = 1;
        if (next[s] != cl->slots[s])
            changed = 1;
        cl->slots[s] = next[s];
    }
    cl->have_map = 1;
    cl->covered = covered;
    return changed;
}

static void on_shards(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    struct cm_redis_cluster *cl = arg;
    cm_redis_range_t *rg;
    int n;

    if (cl->closing)
        return;
    cl->refreshing = 0;
    if (err != NULL || reply == NULL) {
        arm_refresh(cl, REFRESH_MIN_MS);
        return;
    }
    rg = cm_xmalloc(MAX_RANGES * sizeof(*rg));
    n = cm_redis_shards_parse(reply, rg, MAX_RANGES, cl->tls != NULL);
    if (n < 0) {
        cm_log(CM_LOG_WARN, "redis cluster: CLUSTER SHARDS answered something unexpected%s%s",
               cm_redis_reply_type(reply) == CM_REDIS_ERROR ? ": " : "",
               cm_redis_reply_type(reply) == CM_REDIS_ERROR ? cm_redis_reply_str(reply, NULL) : "");
        arm_refresh(cl, REFRESH_MS);
    } else {
        if (map_apply(cl, rg, n)) {
            int masters = 0;
            for (int i = 0; i < cl->nnodes; i++)
                masters += cl->nodes[i].owns;
            cm_log(CM_LOG_INFO, "redis cluster: slot map: %d ranges on %d masters%s", n, masters,
                   cl->covered ? "" : " (some slots have no master)");
        }
        arm_refresh(cl, cl->covered ? REFRESH_MS : REFRESH_MIN_MS);
    }
    free(rg);
}

/* ---- commands ---- */

static void ccmd_free(struct ccmd *c)
{
    if (c->deadline != NULL)
        event_free(c->deadline);
    event_free(c->retry);
    free(c);
}

static void ccmd_unlink(struct cm_redis_cluster *cl, struct ccmd *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        cl->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        cl->tail = c->prev;
    c->prev = c->next = NULL;
}

/* Answers the caller (exactly once). The caller of answer() holds a reference on cl. */
static void answer(struct ccmd *c, const char *err, const cm_redis_reply_t *reply)
{
    cm_redis_cb cb = c->cb;
    void *arg = c->arg;

    assert(!c->answered);
    ccmd_unlink(c->cl, c);
    c->answered = 1;
    event_free(c->deadline);
    c->deadline = NULL;
    evtimer_del(c->retry);
    if (!c->inflight)
        ccmd_free(c);
    cb(err, reply, arg);
}

static void backoff(struct ccmd *c)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = c->backoff_ms * 1000};

    evtimer_add(c->retry, &tv);
    c->backoff_ms = c->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : c->backoff_ms * 2;
}

static int pick_node(struct cm_redis_cluster *cl, const struct ccmd *c)
{
    if (c->ask_node >= 0)
        return c->ask_node;
    if (c->slot >= 0)
        return cl->slots[c->slot] == NO_NODE ? -1 : cl->slots[c->slot];
    for (int k = 0; k < cl->nnodes; k++) { /* no key: any master that is up */
        int i = (int)((cl->rr + (unsigned)k) % (unsigned)cl->nnodes);
        if (cl->nodes[i].owns && node_up(cl, i)) {
            cl->rr = (unsigned)i + 1;
            return i;
        }
    }
    return -1;
}

static void on_node_reply(const char *err, const cm_redis_reply_t *reply, void *arg);

static void on_asking(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    (void)err, (void)reply, (void)arg; /* its answer is +OK; the command after it matters */
}

/* One attempt; 0 when the command is on its way, -1 when it could not be sent. */
static int attempt(struct ccmd *c)
{
    struct cm_redis_cluster *cl = c->cl;
    int i = pick_node(cl, c), rc;
    cm_redis_t *conn;

    if (!node_up(cl, i)) {
        refresh_soon(cl);
        return -1;
    }
    conn = cl->nodes[i].conn;
    if (c->ask_node >= 0) {
        static const char *asking[] = {"ASKING"};
        if (cm_redis_command(conn, on_asking, NULL, 1, asking, NULL) != 0)
            return -1;
    }
    if (c->script != NULL)
        rc = cm_redis_eval(conn, c->script, on_node_reply, c, c->nkeys, c->argc, c->argv,
                           c->argvlen);
    else
        rc = cm_redis_command(conn, on_node_reply, c, c->argc, c->argv, c->argvlen);
    if (rc != 0)
        return -1;
    c->inflight = 1;
    c->sent_node = i;
    c->ask_node = -1;
    return 0;
}

/* Follows a MOVED or ASK; 0 when the command was sent again or will be. */
static int redirect(struct ccmd *c, cm_redis_redir_t kind, unsigned slot, const char *host,
                    int port)
{
    struct cm_redis_cluster *cl = c->cl;
    int i;

    if (++c->redirects > MAX_REDIRECTS || (kind == CM_REDIS_REDIR_ASK && c->asked))
        return -1;
    if (host[0] == '\0') /* no endpoint given: the node that answered */
        host = cl->nodes[c->sent_node].host;
    i = node_get(cl, host, port);
    if (i < 0)
        return -1;
    if (kind == CM_REDIS_REDIR_MOVED) {
        cl->slots[slot] = (uint16_t)i;
        cl->nodes[i].owns = 1;
        cl->prefer = i;
        refresh_soon(cl);
    } else {
        c->asked = 1;
        c->ask_node = i;
    }
    if (attempt(c) != 0)
        backoff(c);
    return 0;
}

static void on_node_reply(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    struct ccmd *c = arg;
    struct cm_redis_cluster *cl = c->cl;
    cm_redis_redir_t kind = CM_REDIS_REDIR_NONE;
    unsigned slot = 0;
    char host[64];
    int port = 0;

    c->inflight = 0;
    if (c->answered) { /* its deadline, or shutdown, answered it already */
        ccmd_free(c);
        return;
    }
    hold(cl);
    if (err != NULL) {
        if (err == cm_err_closed)
            refresh_soon(cl);
        answer(c, err, NULL);
        goto out;
    }
    if (cm_redis_reply_type(reply) == CM_REDIS_ERROR) {
        size_t len;
        const char *s = cm_redis_reply_str(reply, &len);
        kind = cm_redis_redirect_parse(s, len, &slot, host, sizeof(host), &port);
    }
    switch (kind) {
    case CM_REDIS_REDIR_MOVED:
    case CM_REDIS_REDIR_ASK:
        if (redirect(c, kind, slot, host, port) != 0)
            answer(c, NULL, reply);
        break;
    case CM_REDIS_REDIR_DOWN:
        refresh_soon(cl);
        /* fall through */
    case CM_REDIS_REDIR_TRYAGAIN:
        backoff(c); /* its deadline answers it if the cluster does not recover in time */
        break;
    case CM_REDIS_REDIR_NONE:
        answer(c, NULL, reply);
        break;
    }
out:
    release(cl);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct ccmd *c = arg;
    struct cm_redis_cluster *cl = c->cl;

    /* Sent and not answered yet: the node's own deadline judges what Redis answered
     * (cm_redis.c gives it one more period when our loop was to blame), so this one waits
     * once for that verdict instead of racing it. */
    if (c->inflight && !c->extended) {
        c->extended = 1;
        evtimer_add(c->deadline, cl->cmd_tv);
        return;
    }
    hold(cl);
    answer(c, cm_err_timeout, NULL);
    release(cl);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct ccmd *c = arg;
    struct cm_redis_cluster *cl = c->cl;

    hold(cl);
    if (attempt(c) != 0)
        backoff(c);
    release(cl);
}

static size_t arg_len(const char **argv, const size_t *argvlen, int i)
{
    return argvlen != NULL ? argvlen[i] : strlen(argv[i]);
}

int cm_redis_cluster_send(struct cm_redis_cluster *cl, const cm_redis_script_t *s, cm_redis_cb cb,
                          void *arg, int nkeys, int argc, const char **argv, const size_t *argvlen)
{
    size_t total = 0, off = 0;
    struct ccmd *c;
    char *data;
    int key;

    if (cl->closing || !cl->have_map) {
        if (!cl->closing)
            refresh_soon(cl);
        return -1;
    }
    for (int i = 0; i < argc; i++)
        total += arg_len(argv, argvlen, i);
    c = cm_xcalloc(1, sizeof(*c) + (size_t)argc * (sizeof(char *) + sizeof(size_t)) + total + 1);
    c->cl = cl;
    c->cb = cb;
    c->arg = arg;
    c->script = s;
    c->nkeys = nkeys;
    c->argc = argc;
    c->argv = (const char **)(c + 1);
    c->argvlen = (size_t *)(c->argv + argc);
    data = (char *)(c->argvlen + argc);
    for (int i = 0; i < argc; i++) {
        size_t len = arg_len(argv, argvlen, i);
        if (len > 0)
            memcpy(data + off, argv[i], len);
        c->argv[i] = data + off;
        c->argvlen[i] = len;
        off += len;
    }
    /* the first key: a script's KEYS[1], a command's first argument */
    key = s != NULL ? (nkeys > 0 ? 0 : -1) : (argc > 1 ? 1 : -1);
    c->slot = key >= 0 ? (int)cm_redis_key_slot(c->argv[key], c->argvlen[key]) : -1;
    c->ask_node = -1;
    c->sent_node = -1;
    c->backoff_ms = RETRY_MIN_MS;
    c->deadline = evtimer_new(cl->base, on_deadline, c);
    c->retry = evtimer_new(cl->base, on_retry, c);
    if (c->deadline == NULL || c->retry == NULL) {
        cm_log(CM_LOG_ERROR, "redis cluster: cannot create a timer");
        abort();
    }
    c->prev = cl->tail;
    if (cl->tail != NULL)
        cl->tail->next = c;
    else
        cl->head = c;
    cl->tail = c;
    evtimer_add(c->deadline, cl->cmd_tv);
    if (attempt(c) != 0)
        backoff(c); /* never answered from inside this call */
    return 0;
}

/* ---- lifecycle ---- */

/* Parses "ip:port[,ip:port…]" into the node table; -1 when it does not parse. */
static int add_seeds(struct cm_redis_cluster *cl, const char *seeds)
{
    const char *p = seeds;
    int n = 0;

    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        char item[80], *colon, *stop;
        long port;

        if (len == 0 || len >= sizeof(item) || ++n > MAX_SEEDS)
            return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        colon = strrchr(item, ':');
        if (colon == NULL || colon == item)
            return -1;
        *colon = '\0';
        port = strtol(colon + 1, &stop, 10);
        if (*stop != '\0' || colon[1] == '\0' || port <= 0 || port > 65535)
            return -1;
        if (node_get(cl, item, (int)port) < 0)
            return -1;
        p += len;
        if (*p == ',' && *++p == '\0') /* a trailing comma */
            return -1;
    }
    return n > 0 ? 0 : -1;
}

struct cm_redis_cluster *cm_redis_cluster_new(struct event_base *base, const char *seeds,
                                              int timeout_ms, const cm_redis_auth_t *auth)
{
    struct cm_redis_cluster *cl = cm_xcalloc(1, sizeof(*cl));
    if (auth != NULL && auth->password != NULL) {
        cl->auth_user = auth->user ? cm_xstrdup(auth->user) : NULL;
        cl->auth_password = cm_xstrdup(auth->password);
    }
    if (auth != NULL && auth->tls != NULL) {
        SSL_CTX_up_ref(auth->tls);
        cl->tls = auth->tls;
        if (auth->tls_server_name != NULL && auth->tls_server_name[0] != '\0')
            cl->tls_server_name = cm_xstrdup(auth->tls_server_name);
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};

    assert(base != NULL && seeds != NULL && timeout_ms > 0);
    cl->base = base;
    cl->timeout_ms = timeout_ms;
    cl->cmd_tv_plain = tv;
    cl->cmd_tv = event_base_init_common_timeout(base, &tv);
    if (cl->cmd_tv == NULL)
        cl->cmd_tv = &cl->cmd_tv_plain;
    for (int s = 0; s < CM_REDIS_SLOTS; s++)
        cl->slots[s] = NO_NODE;
    cl->prefer = -1;
    cl->refresh = evtimer_new(base, on_refresh_timer, cl);
    if (cl->refresh == NULL) {
        cm_log(CM_LOG_ERROR, "redis cluster: cannot create a timer");
        abort();
    }
    if (add_seeds(cl, seeds) != 0) {
        cm_log(CM_LOG_ERROR, "redis cluster: seeds \"%s\" are not ip:port[,ip:port…]", seeds);
        cm_redis_cluster_free(cl);
        return NULL;
    }
    arm_refresh(cl, 0); /* the first CLUSTER SHARDS as soon as a seed is up */
    return cl;
}

void cm_redis_cluster_free(struct cm_redis_cluster *cl)
{
    if (cl == NULL || cl->closing)
        return;
    cl->closing = 1;
    hold(cl);
    evtimer_del(cl->refresh);
    while (cl->head != NULL)
        answer(cl->head, cm_err_shutdown, NULL);
    for (int i = 0; i < cl->nnodes; i++) {
        cm_redis_free(cl->nodes[i].conn); /* answers what it still holds: records are freed */
        cl->nodes[i].conn = NULL;
    }
    release(cl);
}

int cm_redis_cluster_connected(const struct cm_redis_cluster *cl)
{
    if (cl->closing || !cl->have_map || !cl->covered)
        return 0;
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].owns && !cm_redis_connected(cl->nodes[i].conn))
            return 0;
    return 1;
}
