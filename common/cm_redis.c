/*
 * cm_redis — the one asynchronous Redis client (hiredis async on libevent); the contract
 * is in cm_redis.h.
 *
 * Runs on the loop thread that owns the event_base, and never blocks. One hiredis async
 * context at a time (r->ac). Its lifecycle is a state enum changed only by set_state():
 * DOWN (r->timer is the reconnect backoff, 100 ms doubling to 2 s) → CONNECTING (r->timer
 * is the connect deadline) → UP → DOWN …
 *
 * Every command is a `struct cmd` record with its own deadline timer, linked in r's
 * pending list while its caller waits. hiredis holds the record as privdata until it
 * calls on_reply — always exactly once, with a reply or, when the context goes away,
 * with NULL. A record is freed only when both sides are done with it: the caller has
 * been answered (`answered`) and hiredis has called back (!`in_hiredis`). A command
 * answered by its deadline therefore stays behind as a "zombie" until its late reply
 * arrives and is dropped; zombies are bounded (MAX_ZOMBIES), past which the connection
 * is treated as wedged and reopened.
 *
 * hiredis 0.14 rules relied on here:
 *  - a context that fails to connect is freed by hiredis right after
 *    on_connect(REDIS_ERR); on_disconnect is called only for contexts that connected;
 *  - on any disconnect hiredis first runs every pending reply callback with reply NULL,
 *    then on_disconnect, then frees the context;
 *  - redisAsyncFree() inside a reply callback only sets REDIS_FREEING and hiredis frees
 *    once the callback returns; inside on_connect / on_disconnect, or while hiredis is
 *    already tearing the context down, it would free under hiredis' feet — we never
 *    free there (r->ac_dying marks a context hiredis is already freeing);
 *  - a reply lives only during its callback;
 *  - no per-command timeout exists in async mode: the deadlines are our libevent timers.
 *
 * User callbacks may re-enter (issue commands, even cm_redis_free). Every path that runs
 * one and touches r afterwards holds a reference (hold/release); cm_redis_free answers
 * everything at once but the memory of r goes only when the last reference is dropped.
 */
#include "cm_redis.h"
#include "cm_redis_cluster.h"

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"

#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <openssl/evp.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/* Timed-out commands whose late reply has not come yet; past this the link is wedged. */
#define MAX_ZOMBIES 1024

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct cmd {
    struct cmd *prev, *next; /* in r's pending list while the caller waits */
    cm_redis_t *r;
    cm_redis_cb cb;
    void *arg;
    struct event *deadline;  /* NULL once answered */
    unsigned answered : 1;   /* cb has run, or never will */
    unsigned in_hiredis : 1; /* hiredis holds the record as privdata */
    unsigned zombie : 1;     /* answered by its deadline, reply still due */
    /* EVALSHA keeps its argv (copied into this block) to resend as EVAL on NOSCRIPT. */
    const cm_redis_script_t *script;
    int argc;
    const char **argv;
    size_t *argvlen;
};

struct cm_redis_script {
    char *name;
    char *source;
    char sha[41];
};

struct cm_redis {
    struct event_base *base;
    char *host;
    int port;
    int timeout_ms;
    struct timeval cmd_tv_plain;  /* timeout_ms */
    const struct timeval *cmd_tv; /* the same as a libevent common timeout, when available */
    redisAsyncContext *ac;        /* NULL when there is no context */
    int ac_dying;                 /* hiredis is freeing ac: never free it ourselves */
    enum conn_state state;
    struct event *timer; /* connect deadline (CONNECTING) or backoff (DOWN) */
    int backoff_ms;
    int quiet; /* connection failures already logged at WARN */
    struct cmd *head, *tail;
    size_t nzombies;
    char *auth_user, *auth_password; /* NULL: no AUTH (cm_redis_auth_t) */
    int refs;                        /* paths that will touch r after a user callback */
    int closing;                     /* cm_redis_free was called */
    struct cm_redis_cluster *cl;     /* cluster mode: every call goes there; the rest is unused */
};

static void conn_start(cm_redis_t *r);

static const char *state_name(enum conn_state s)
{
    switch (s) {
    case CONN_DOWN:
        return "down";
    case CONN_CONNECTING:
        return "connecting";
    case CONN_UP:
        return "up";
    }
    return "?";
}

static void arm_timer(cm_redis_t *r, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    evtimer_add(r->timer, &tv);
}

static void schedule_retry(cm_redis_t *r)
{
    if (r->closing)
        return;
    arm_timer(r, r->backoff_ms);
    r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
}

/** The one place the connection state changes; arms or clears r->timer to match. */
static void set_state(cm_redis_t *r, enum conn_state s)
{
    cm_log(CM_LOG_DEBUG, "redis %s:%d: %s -> %s", r->host, r->port, state_name(r->state),
           state_name(s));
    r->state = s;
    evtimer_del(r->timer);
    switch (s) {
    case CONN_DOWN:
        schedule_retry(r);
        break;
    case CONN_CONNECTING:
        arm_timer(r, r->timeout_ms);
        break;
    case CONN_UP:
        r->backoff_ms = BACKOFF_MIN_MS;
        break;
    }
}

/** Marks the link down (once) and logs why; the reconnect timer starts. */
static void conn_down(cm_redis_t *r, const char *why)
{
    if (r->state == CONN_DOWN)
        return;
    if (r->state == CONN_UP || !r->quiet)
        cm_log(CM_LOG_WARN, "redis %s:%d: %s: %s", r->host, r->port,
               r->state == CONN_UP ? "connection lost" : "cannot connect", why);
    else
        cm_log(CM_LOG_DEBUG, "redis %s:%d: cannot connect: %s", r->host, r->port, why);
    r->quiet = 1;
    set_state(r, CONN_DOWN);
}

static void hold(cm_redis_t *r)
{
    r->refs++;
}

static void destroy(cm_redis_t *r)
{
    event_free(r->timer);
    free(r->host);
    free(r->auth_user);
    if (r->auth_password) {
        memset(r->auth_password, 0, strlen(r->auth_password));
        free(r->auth_password);
    }
    free(r);
}

/** Drops a reference. Returns 1 when the caller may go on touching r, 0 when not. */
static int release(cm_redis_t *r)
{
    assert(r->refs > 0);
    if (--r->refs == 0 && r->closing) {
        destroy(r);
        return 0;
    }
    return !r->closing;
}

static void cmd_free(struct cmd *c)
{
    if (c->deadline != NULL)
        event_free(c->deadline);
    free(c);
}

static void cmd_unlink(cm_redis_t *r, struct cmd *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        r->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        r->tail = c->prev;
    c->prev = c->next = NULL;
}

/**
 * Answers a waiting command: detaches it from r, frees it unless hiredis still holds it,
 * then runs the caller's callback. Returns release()'s verdict on r.
 */
static int answer(cm_redis_t *r, struct cmd *c, const char *err, const redisReply *reply)
{
    cm_redis_cb cb = c->cb;
    void *arg = c->arg;

    assert(!c->answered);
    cmd_unlink(r, c);
    c->answered = 1;
    if (c->deadline != NULL) {
        event_free(c->deadline);
        c->deadline = NULL;
    }
    if (!c->in_hiredis) {
        cmd_free(c);
    } else if (err == cm_err_timeout) {
        c->zombie = 1;
        r->nzombies++;
    }
    hold(r);
    cb(err, (const cm_redis_reply_t *)reply, arg);
    return release(r);
}

/** Closes the context from outside any hiredis callback (timers only). */
static void conn_close(cm_redis_t *r, const char *why)
{
    redisAsyncContext *ac = r->ac;

    conn_down(r, why);
    if (ac == NULL || r->ac_dying)
        return;
    r->ac_dying = 1;
    redisAsyncFree(ac); /* runs on_reply(NULL) for pending commands, then on_disconnect */
    if (!r->closing && r->ac == ac) {
        r->ac = NULL;
        r->ac_dying = 0;
    }
}

static int is_noscript(const redisReply *reply)
{
    return reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
           strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

static void on_reply(redisAsyncContext *ac, void *reply_, void *privdata)
{
    struct cmd *c = privdata;
    redisReply *reply = reply_;
    cm_redis_t *r = ac->data;

    c->in_hiredis = 0;
    if (c->answered) { /* a late reply after the deadline, or shutdown already answered */
        if (c->zombie && r != NULL)
            r->nzombies--;
        cmd_free(c);
        return;
    }
    assert(r != NULL && c->r == r);
    if (reply == NULL) { /* hiredis is tearing the context down */
        r->ac_dying = 1;
        conn_down(r, ac->c.err ? ac->c.errstr : "connection closed");
        answer(r, c, cm_err_closed, NULL);
        return;
    }
    if (c->script != NULL && is_noscript(reply)) {
        /* The server lost its script cache: same command as EVAL, same deadline. */
        c->argv[0] = "EVAL";
        c->argvlen[0] = 4;
        c->argv[1] = c->script->source;
        c->argvlen[1] = strlen(c->script->source);
        c->script = NULL;
        if (redisAsyncCommandArgv(ac, on_reply, c, c->argc, c->argv, c->argvlen) == REDIS_OK) {
            c->in_hiredis = 1;
            return;
        }
        answer(r, c, cm_err_closed, NULL);
        return;
    }
    answer(r, c, NULL, reply);
}

static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct cmd *c = arg;
    cm_redis_t *r = c->r;

    hold(r);
    if (!answer(r, c, cm_err_timeout, NULL))
        goto out;
    if (r->nzombies > MAX_ZOMBIES && r->state == CONN_UP)
        conn_close(r, "too many commands past their deadline");
out:
    release(r);
}

/*
 * The reply to the connect-time AUTH. NULL reply: the context is going away (deadline,
 * shutdown), whose own path handles r. A refusal closes the context from inside this
 * reply callback, where hiredis defers the free until we return; the backoff timer then
 * tries again (an operator may be fixing the password).
 */
static void on_auth(redisAsyncContext *ac, void *reply_, void *privdata)
{
    cm_redis_t *r = ac->data;
    redisReply *reply = reply_;

    (void)privdata;
    if (r == NULL || reply == NULL || r->ac != ac || r->state != CONN_CONNECTING)
        return;
    if (reply->type == REDIS_REPLY_STATUS) {
        cm_log(CM_LOG_INFO, "redis %s:%d: connected (as %s)", r->host, r->port,
               r->auth_user ? r->auth_user : "default");
        r->quiet = 0;
        set_state(r, CONN_UP);
        return;
    }
    cm_log(r->quiet ? CM_LOG_DEBUG : CM_LOG_ERROR, "redis %s:%d: AUTH as %s refused: %.200s",
           r->host, r->port, r->auth_user ? r->auth_user : "default",
           reply->type == REDIS_REPLY_ERROR && reply->str ? reply->str : "unexpected reply");
    conn_close(r, "authentication failed");
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    cm_redis_t *r = ac->data;

    if (r == NULL)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees ac as soon as we return */
        r->ac = NULL;
        r->ac_dying = 0;
        /* ac->errstr is only filled in after this callback; c.errstr is already set */
        conn_down(r, ac->c.err ? ac->c.errstr : "connect failed");
        return;
    }
    redisEnableKeepAlive((redisContext *)&ac->c);
    if (r->auth_password != NULL) {
        /* Still CONNECTING (the connect deadline covers AUTH): up once Redis says OK. */
        const char *argv[3] = {"AUTH", r->auth_user, r->auth_password};
        int argc = r->auth_user ? 3 : 2;
        if (argc == 2)
            argv[1] = r->auth_password;
        if (redisAsyncCommandArgv((redisAsyncContext *)ac, on_auth, NULL, argc, argv, NULL) !=
            REDIS_OK)
            cm_log(CM_LOG_WARN, "redis %s:%d: cannot send AUTH", r->host, r->port);
        return; /* (a failure to queue it ends at the connect deadline) */
    }
    cm_log(CM_LOG_INFO, "redis %s:%d: connected", r->host, r->port);
    r->quiet = 0;
    set_state(r, CONN_UP);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    cm_redis_t *r = ac->data;

    if (r == NULL)
        return;
    if (r->ac == ac) { /* hiredis frees ac as soon as we return */
        r->ac = NULL;
        r->ac_dying = 0;
    }
    assert(r->nzombies == 0); /* every record of ac got its callback before this one */
    conn_down(r, ac->c.err ? ac->c.errstr : "closed");
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    cm_redis_t *r = arg;

    switch (r->state) {
    case CONN_DOWN:
        if (r->ac != NULL) /* hiredis has not finished with the old context yet */
            schedule_retry(r);
        else
            conn_start(r);
        break;
    case CONN_CONNECTING:
        conn_close(r, "connect timed out");
        break;
    case CONN_UP:
        break;
    }
}

static int numeric_host(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* A connection attempt failed before a context existed: log it, stay DOWN, retry later. */
static void connect_failed(cm_redis_t *r, const char *why)
{
    cm_log(r->quiet ? CM_LOG_DEBUG : CM_LOG_WARN, "redis %s:%d: cannot connect: %s", r->host,
           r->port, why);
    r->quiet = 1;
    schedule_retry(r);
}

/* Opens a new context; called in state DOWN with no context. */
static void conn_start(cm_redis_t *r)
{
    redisAsyncContext *ac = redisAsyncConnect(r->host, r->port);

    if (ac == NULL) {
        connect_failed(r, "out of memory");
        return;
    }
    if (ac->err) { /* e.g. ECONNREFUSED at once on loopback */
        connect_failed(r, ac->errstr);
        redisAsyncFree(ac);
        return;
    }
    if (redisLibeventAttach(ac, r->base) != REDIS_OK) {
        redisAsyncFree(ac);
        connect_failed(r, "cannot attach to the event loop");
        return;
    }
    ac->data = r;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    r->ac = ac;
    r->ac_dying = 0;
    set_state(r, CONN_CONNECTING);
}

cm_redis_t *cm_redis_new(struct event_base *base, const char *host, int port, int timeout_ms)
{
    return cm_redis_new_auth(base, host, port, timeout_ms, NULL);
}

cm_redis_t *cm_redis_new_auth(struct event_base *base, const char *host, int port, int timeout_ms,
                              const cm_redis_auth_t *auth)
{
    cm_redis_t *r = cm_xcalloc(1, sizeof(*r));
    if (auth != NULL && auth->password != NULL) {
        r->auth_user = auth->user ? cm_xstrdup(auth->user) : NULL;
        r->auth_password = cm_xstrdup(auth->password);
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};

    assert(base != NULL && host != NULL && timeout_ms > 0);
    r->base = base;
    r->host = cm_xstrdup(host);
    r->port = port;
    r->timeout_ms = timeout_ms;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->state = CONN_DOWN;
    r->timer = evtimer_new(base, on_timer, r);
    if (r->timer == NULL) {
        cm_log(CM_LOG_ERROR, "redis: cannot create a timer");
        abort();
    }
    /* All command deadlines share one duration: a common timeout keeps them in a FIFO
     * instead of the timer heap. */
    r->cmd_tv_plain = tv;
    r->cmd_tv = event_base_init_common_timeout(base, &tv);
    if (r->cmd_tv == NULL)
        r->cmd_tv = &r->cmd_tv_plain;
    if (!numeric_host(host)) {
        /* hiredis would resolve a name with blocking getaddrinfo: refuse, stay down. */
        cm_log(CM_LOG_ERROR, "redis: host \"%s\" is not an IP address; not connecting", host);
        return r;
    }
    conn_start(r);
    return r;
}

cm_redis_t *cm_redis_new_cluster(struct event_base *base, const char *seeds, int timeout_ms)
{
    return cm_redis_new_cluster_auth(base, seeds, timeout_ms, NULL);
}

cm_redis_t *cm_redis_new_cluster_auth(struct event_base *base, const char *seeds, int timeout_ms,
                                      const cm_redis_auth_t *auth)
{
    struct cm_redis_cluster *cl = cm_redis_cluster_new(base, seeds, timeout_ms, auth);
    cm_redis_t *r;

    if (cl == NULL)
        return NULL;
    r = cm_xcalloc(1, sizeof(*r));
    r->base = base;
    r->cl = cl;
    return r;
}

cm_redis_t *cm_redis_open(struct event_base *base, const char *host, int port,
                          const char *cluster_seeds, int timeout_ms, const cm_redis_auth_t *auth)
{
    if (cluster_seeds != NULL && cluster_seeds[0] != '\0')
        return cm_redis_new_cluster_auth(base, cluster_seeds, timeout_ms, auth);
    return cm_redis_new_auth(base, host, port, timeout_ms, auth);
}

void cm_redis_free(cm_redis_t *r)
{
    if (r != NULL && r->cl != NULL) { /* the cluster keeps its own references */
        cm_redis_cluster_free(r->cl);
        free(r);
        return;
    }
    if (r == NULL || r->closing)
        return;
    r->closing = 1;
    hold(r);
    evtimer_del(r->timer);
    while (r->head != NULL)
        answer(r, r->head, cm_err_shutdown, NULL);
    if (r->ac != NULL) {
        r->ac->data = NULL; /* its remaining callbacks see only answered records */
        if (!r->ac_dying)
            redisAsyncFree(r->ac); /* deferred by hiredis when inside a reply callback */
        r->ac = NULL;
    }
    release(r);
}

int cm_redis_connected(const cm_redis_t *r)
{
    if (r->cl != NULL)
        return cm_redis_cluster_connected(r->cl);
    return !r->closing && r->state == CONN_UP;
}

static struct cmd *cmd_new(cm_redis_t *r, cm_redis_cb cb, void *arg, size_t extra)
{
    struct cmd *c = cm_xcalloc(1, sizeof(*c) + extra);

    c->r = r;
    c->cb = cb;
    c->arg = arg;
    c->deadline = evtimer_new(r->base, on_cmd_timeout, c);
    if (c->deadline == NULL) {
        cm_log(CM_LOG_ERROR, "redis: cannot create a timer");
        abort();
    }
    return c;
}

/* Hands c to hiredis and starts its deadline; on failure c is freed and -1 returned. */
static int cmd_send(cm_redis_t *r, struct cmd *c, int argc, const char **argv,
                    const size_t *argvlen)
{
    if (redisAsyncCommandArgv(r->ac, on_reply, c, argc, argv, argvlen) != REDIS_OK) {
        cmd_free(c);
        return -1;
    }
    c->in_hiredis = 1;
    c->prev = r->tail;
    if (r->tail != NULL)
        r->tail->next = c;
    else
        r->head = c;
    r->tail = c;
    evtimer_add(c->deadline, r->cmd_tv);
    return 0;
}

/* argvlen NULL: every argument is a C string (hiredis applies the same rule) */
static size_t arg_len(const char **argv, const size_t *argvlen, int i)
{
    return argvlen != NULL ? argvlen[i] : strlen(argv[i]);
}

int cm_redis_command(cm_redis_t *r, cm_redis_cb cb, void *arg, int argc, const char **argv,
                     const size_t *argvlen)
{
    assert(cb != NULL && argc > 0 && argv != NULL);
    if (r->cl != NULL)
        return cm_redis_cluster_send(r->cl, NULL, cb, arg, 0, argc, argv, argvlen);
    if (!cm_redis_connected(r) || r->ac == NULL || r->ac_dying)
        return -1;
    return cmd_send(r, cmd_new(r, cb, arg, 0), argc, argv, argvlen);
}

int cm_redis_eval(cm_redis_t *r, const cm_redis_script_t *s, cm_redis_cb cb, void *arg, int nkeys,
                  int argc, const char **argv, const size_t *argvlen)
{
    size_t total = 0, off;
    int n = argc + 3, i;
    char nkeys_str[16], *data;
    struct cmd *c;

    assert(s != NULL && cb != NULL && argc >= 0 && nkeys >= 0 && nkeys <= argc);
    if (r->cl != NULL)
        return cm_redis_cluster_send(r->cl, s, cb, arg, nkeys, argc, argv, argvlen);
    if (!cm_redis_connected(r) || r->ac == NULL || r->ac_dying)
        return -1;
    snprintf(nkeys_str, sizeof(nkeys_str), "%d", nkeys);
    for (i = 0; i < argc; i++)
        total += arg_len(argv, argvlen, i);
    total += strlen(nkeys_str);
    /* one block: record, argv[n], argvlen[n], then the bytes of nkeys and the args */
    c = cmd_new(r, cb, arg, n * (sizeof(char *) + sizeof(size_t)) + total);
    c->script = s;
    c->argc = n;
    c->argv = (const char **)(c + 1);
    c->argvlen = (size_t *)(c->argv + n);
    data = (char *)(c->argvlen + n);
    c->argv[0] = "EVALSHA";
    c->argvlen[0] = 7;
    c->argv[1] = s->sha;
    c->argvlen[1] = 40;
    off = strlen(nkeys_str);
    memcpy(data, nkeys_str, off);
    c->argv[2] = data;
    c->argvlen[2] = off;
    for (i = 0; i < argc; i++) {
        size_t len = arg_len(argv, argvlen, i);
        if (len > 0)
            memcpy(data + off, argv[i], len);
        c->argv[i + 3] = data + off;
        c->argvlen[i + 3] = len;
        off += len;
    }
    return cmd_send(r, c, c->argc, c->argv, c->argvlen);
}

cm_redis_script_t *cm_redis_script_new(const char *name, const char *source)
{
    cm_redis_script_t *s = cm_xcalloc(1, sizeof(*s));
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0, i;

    s->name = cm_xstrdup(name);
    s->source = cm_xstrdup(source);
    if (EVP_Digest(source, strlen(source), md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20) {
        cm_log(CM_LOG_ERROR, "redis: SHA1 of script %s failed", name);
        abort();
    }
    for (i = 0; i < mdlen; i++)
        snprintf(s->sha + 2 * i, 3, "%02x", md[i]);
    return s;
}

cm_redis_script_t *cm_redis_script_with_prelude(const char *name, const char *prelude,
                                                const char *body)
{
    char *src = cm_xasprintf("%s\n%s", prelude, body);
    cm_redis_script_t *s = cm_redis_script_new(name, src);
    free(src);
    return s;
}

const char *cm_redis_script_name(const cm_redis_script_t *s)
{
    return s->name;
}

void cm_redis_script_free(cm_redis_script_t *s)
{
    if (s == NULL)
        return;
    free(s->name);
    free(s->source);
    free(s);
}

cm_redis_type_t cm_redis_reply_type(const cm_redis_reply_t *r)
{
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        return CM_REDIS_INT;
    case REDIS_REPLY_STRING:
        return CM_REDIS_STR;
    case REDIS_REPLY_STATUS:
        return CM_REDIS_STATUS;
    case REDIS_REPLY_ARRAY:
        return CM_REDIS_ARRAY;
    case REDIS_REPLY_ERROR:
        return CM_REDIS_ERROR;
    default:
        return CM_REDIS_NIL;
    }
}

long long cm_redis_reply_int(const cm_redis_reply_t *r)
{
    return r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
}

const char *cm_redis_reply_str(const cm_redis_reply_t *r, size_t *len)
{
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS &&
        r->type != REDIS_REPLY_ERROR) {
        if (len != NULL)
            *len = 0;
        return NULL;
    }
    if (len != NULL)
        *len = r->len;
    return r->str;
}

size_t cm_redis_reply_count(const cm_redis_reply_t *r)
{
    return r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
}

const cm_redis_reply_t *cm_redis_reply_at(const cm_redis_reply_t *r, size_t i)
{
    if (r->type != REDIS_REPLY_ARRAY || i >= r->elements)
        return NULL;
    return r->element[i];
}

cm_redis_reply_t *cm_redis_reply_parse(const char *buf, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;

    if (rd == NULL)
        return NULL;
    if (redisReaderFeed(rd, buf, len) != REDIS_OK || redisReaderGetReply(rd, &reply) != REDIS_OK)
        reply = NULL;
    redisReaderFree(rd);
    return reply;
}

void cm_redis_reply_free(cm_redis_reply_t *reply)
{
    if (reply != NULL)
        freeReplyObject(reply);
}
