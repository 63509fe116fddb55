/*
 * cm_redis — the one asynchronous Redis client; the contract is in cm_redis.h.
 *
 * Runs on the loop thread that owns the event_base, and never blocks. hiredis does what
 * it is good at, reading RESP (redisReader); commands are written as RESP straight into
 * the connection's output buffer by cm_redis_resp_write (redisFormatCommandArgv costs an
 * allocation and a sprintf per argument: 17 for a join's EVALSHA, docs/performance.md).
 * This module owns the transport: one libevent bufferevent per connection, a plain
 * socket or bufferevent_openssl over it when TLS is configured (Debian's hiredis 0.14
 * has no TLS). One transport serves both so that plain and TLS connections share every
 * rule below; measured against hiredis' async context on plain TCP it costs nothing
 * measurable (docs/sizing.md, "Redis over TLS").
 *
 * The connection's lifecycle is a state enum changed only by set_state(): DOWN (r->timer
 * is the reconnect backoff, 100 ms doubling to 2 s) → CONNECTING (r->timer is the connect
 * deadline, the command deadline but at least 1 s, which covers the TCP connect, the TLS
 * handshake and AUTH) → UP → DOWN …
 * A redis_host that is a name is looked up (cm_resolve, evdns: never blocking) at the
 * start of every CONNECTING, so a name moved by a failover is followed; the connect
 * deadline covers the lookup too, and a failed lookup is a failed connect (logged,
 * retried on the backoff). The addresses of one answer are tried in turn, each with a
 * deadline of its own, before the attempt counts as failed.
 *
 * Every command is a `struct cmd` record with its own deadline timer, linked in r's
 * in-flight FIFO in the order it was written; Redis answers in that order, so each reply
 * read belongs to the head. A deadline judges Redis, not our loop: one that fires while
 * Redis bytes wait unread, while the command is still in our output buffer, or late
 * because a long callback held the loop, gives the command one more period first
 * (on_cmd_timeout), so a reply Redis sent in time is not lost to our own delay. A command
 * answered by its deadline stays in the FIFO as a "zombie" until its late reply arrives and is
 * dropped; zombies are bounded (MAX_ZOMBIES), past which the connection is treated as wedged and
 * reopened. When the connection closes, every record still in the FIFO is answered cm_err_closed
 * (zombies are just freed) — a command that was written is never resent, it may have run.
 *
 * Library rules relied on: an SSL* given to bufferevent_openssl_socket_new(…,
 * BEV_OPT_CLOSE_ON_FREE) belongs to the bufferevent even when that call fails;
 * bufferevent_socket_connect() works on an openssl bufferevent made with fd -1 (it makes
 * the socket, and BEV_EVENT_CONNECTED comes after the handshake); with
 * BEV_OPT_DEFER_CALLBACKS no bufferevent callback runs inside a call we make (a write
 * inside a user callback cannot re-enter the event callback); a reply from
 * redisReaderGetReply is ours to free (freeReplyObject) — callers see it only during
 * their callback.
 *
 * User callbacks may re-enter (issue commands, even cm_redis_free). Every path that runs
 * one and touches r afterwards holds a reference (hold/release) and checks that its
 * connection is still the current one (r->gen); cm_redis_free answers everything at once
 * but the memory of r goes only when the last reference is dropped.
 */
#include "cm_redis.h"
#include "cm_redis_cluster.h"

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_resolve.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/* The connect deadline (lookup, TCP, TLS handshake, AUTH) is the command deadline but
 * never under this: a handshake is several round trips and a key exchange, and a
 * command deadline tuned for answers (tens of ms) would fail every attempt of a busy
 * machine's reconnect, leaving the link down for good. */
#define CONNECT_MIN_MS 1000
/* Timed-out commands whose late reply has not come yet; past this the link is wedged. */
#define MAX_ZOMBIES 1024
/* TCP keepalive like hiredis' redisEnableKeepAlive: probe after 15 s idle, every 5 s. */
#define KEEPALIVE_IDLE_S  15
#define KEEPALIVE_INTVL_S 5
#define KEEPALIVE_CNT     3

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct cmd {
    struct cmd *prev, *next; /* in r's in-flight FIFO, in the order written */
    cm_redis_t *r;
    cm_redis_cb cb; /* NULL: the connect-time AUTH */
    void *arg;
    struct event *deadline; /* in this block (cmd_new); NULL once answered */
    unsigned answered : 1;  /* cb has run, or never will */
    unsigned zombie : 1;    /* answered by its deadline, reply still due */
    unsigned extended : 1;  /* its deadline was given its one more period (on_cmd_timeout) */
    struct timeval due;     /* when the deadline should fire, on the loop's cached clock */
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
    int connect_ms;               /* max(timeout_ms, CONNECT_MIN_MS) */
    struct timeval cmd_tv_plain;  /* timeout_ms */
    const struct timeval *cmd_tv; /* the same as a libevent common timeout, when available */
    struct bufferevent *bev;      /* NULL when there is no connection */
    redisReader *reader;          /* fresh for each connection */
    unsigned gen;                 /* bumped whenever bev changes */
    enum conn_state state;
    struct event *timer; /* connect deadline (CONNECTING) or backoff (DOWN) */
    int backoff_ms;
    int quiet; /* connection failures already logged at WARN */
    struct cmd *head, *tail;
    size_t nzombies;
    char *auth_user, *auth_password; /* NULL: no AUTH (cm_redis_auth_t) */
    SSL_CTX *tls;                    /* NULL: plain TCP; else one reference of ours */
    char *tls_server_name;           /* NULL: the certificate must name r->host */
    int refs;                        /* paths that will touch r after a user callback */
    int closing;                     /* cm_redis_free was called */
    struct cm_redis_cluster *cl;     /* cluster mode: every call goes there; the rest is unused */
    cm_resolve_t *resolver;          /* host is a name: looked up before each connect; else NULL */
    cm_resolve_req_t *lookup;        /* CONNECTING: the lookup in flight, or NULL */
    cm_resolve_addr_t addrs[CM_RESOLVE_MAX]; /* the addresses of this attempt */
    int naddrs, next_addr;                   /* how many; the one to try next */
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
        arm_timer(r, r->connect_ms);
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
    cm_resolve_free(r->resolver); /* NULL is fine; no lookup is pending any more */
    free(r->host);
    free(r->auth_user);
    if (r->auth_password) {
        memset(r->auth_password, 0, strlen(r->auth_password));
        free(r->auth_password);
    }
    SSL_CTX_free(r->tls); /* NULL is fine */
    free(r->tls_server_name);
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
        event_del(c->deadline);
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

static void cmd_append(cm_redis_t *r, struct cmd *c)
{
    c->prev = r->tail;
    c->next = NULL;
    if (r->tail != NULL)
        r->tail->next = c;
    else
        r->head = c;
    r->tail = c;
}

/* Starts (or restarts) c's deadline: one period from the loop's cached now. */
static void cmd_arm(cm_redis_t *r, struct cmd *c)
{
    struct timeval now;

    if (event_base_gettimeofday_cached(r->base, &now) != 0)
        evutil_gettimeofday(&now, NULL);
    evutil_timeradd(&now, &r->cmd_tv_plain, &c->due);
    evtimer_add(c->deadline, r->cmd_tv);
}

/**
 * Answers a waiting command (it stays where it is: the caller unlinks and frees it, or
 * leaves it in the FIFO as a zombie after a timeout), then runs the caller's callback.
 * Returns release()'s verdict on r.
 */
static int answer(cm_redis_t *r, struct cmd *c, const char *err, const redisReply *reply)
{
    cm_redis_cb cb = c->cb;
    void *arg = c->arg;

    assert(!c->answered);
    c->answered = 1;
    if (c->deadline != NULL) {
        event_del(c->deadline);
        c->deadline = NULL;
    }
    if (err == cm_err_timeout) {
        c->zombie = 1;
        r->nzombies++;
    }
    hold(r);
    if (cb != NULL)
        cb(err, (const cm_redis_reply_t *)reply, arg);
    return release(r);
}

/**
 * Drops the connection (if any) and answers every command still in flight with err
 * (cm_err_shutdown once cm_redis_free was called). The FIFO is detached first, so the
 * callbacks see an empty client and may issue commands (which fail: it is not up).
 * Returns release()'s verdict on r.
 */
static int drop_connection(cm_redis_t *r, const char *err)
{
    struct cmd *c = r->head;

    if (r->lookup != NULL) { /* its callback will not run */
        cm_resolve_cancel(r->lookup);
        r->lookup = NULL;
    }
    if (r->bev != NULL) {
        bufferevent_free(r->bev); /* closes the socket; frees the SSL */
        r->bev = NULL;
    }
    r->gen++;
    if (r->reader != NULL) {
        redisReaderFree(r->reader);
        r->reader = NULL;
    }
    r->head = r->tail = NULL;
    r->nzombies = 0;
    hold(r);
    while (c != NULL) {
        struct cmd *next = c->next;
        if (!c->answered)
            answer(r, c, r->closing ? cm_err_shutdown : err, NULL);
        cmd_free(c);
        c = next;
    }
    return release(r);
}

static void connect_next(cm_redis_t *r);

/** Closes the connection, answering what it still owes with cm_err_closed. A connect
 *  that fails while the name's answer holds more addresses goes on with the next. */
static void conn_close(cm_redis_t *r, const char *why)
{
    if (r->state == CONN_CONNECTING && r->bev != NULL && r->next_addr < r->naddrs && !r->closing) {
        cm_log(CM_LOG_DEBUG, "redis %s:%d: cannot connect to address %d of %d: %s", r->host,
               r->port, r->next_addr, r->naddrs, why);
        if (drop_connection(r, cm_err_closed))
            connect_next(r);
        return;
    }
    conn_down(r, why);
    drop_connection(r, cm_err_closed);
}

static int is_noscript(const redisReply *reply)
{
    return reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
           strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* Decimal digits of n. */
static size_t digits(size_t n)
{
    size_t d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

/* n in decimal at p (no NUL); returns the number of digits written. */
static size_t put_decimal(char *p, size_t n)
{
    size_t d = digits(n);
    for (size_t i = d; i > 0; i--) {
        p[i - 1] = (char)('0' + n % 10);
        n /= 10;
    }
    return d;
}

/* tag, n in decimal, CRLF; returns the end. */
static char *put_header(char *p, char tag, size_t n)
{
    *p++ = tag;
    p += put_decimal(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* argvlen NULL: every argument is a C string (hiredis applies the same rule) */
static size_t arg_len(const char **argv, const size_t *argvlen, int i)
{
    return argvlen != NULL ? argvlen[i] : strlen(argv[i]);
}

size_t cm_redis_resp_len(int argc, const char **argv, const size_t *argvlen)
{
    size_t total = 1 + digits((size_t)argc) + 2;
    for (int i = 0; i < argc; i++) {
        size_t len = arg_len(argv, argvlen, i);
        total += 1 + digits(len) + 2 + len + 2;
    }
    return total;
}

size_t cm_redis_resp_write(char *out, int argc, const char **argv, const size_t *argvlen)
{
    char *p = put_header(out, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t len = arg_len(argv, argvlen, i);
        p = put_header(p, '$', len);
        if (len > 0)
            memcpy(p, argv[i], len);
        p += len;
        *p++ = '\r';
        *p++ = '\n';
    }
    return (size_t)(p - out);
}

/* Writes argv as RESP straight into the output buffer's free space. 0 or -1. */
static int write_command(cm_redis_t *r, int argc, const char **argv, const size_t *argvlen)
{
    struct evbuffer *out = bufferevent_get_output(r->bev);
    struct evbuffer_iovec v;
    size_t len = cm_redis_resp_len(argc, argv, argvlen);

    if (evbuffer_reserve_space(out, (ev_ssize_t)len, &v, 1) != 1 || v.iov_len < len)
        return -1;
    v.iov_len = cm_redis_resp_write(v.iov_base, argc, argv, argvlen);
    return evbuffer_commit_space(out, &v, 1) == 0 ? 0 : -1;
}

/* The reply to the connect-time AUTH: up once Redis says OK, else closed and retried. */
static void on_auth(cm_redis_t *r, const redisReply *reply)
{
    if (reply->type == REDIS_REPLY_STATUS) {
        cm_log(CM_LOG_INFO, "redis %s:%d: connected%s (as %s)", r->host, r->port,
               r->tls ? " over TLS" : "", r->auth_user ? r->auth_user : "default");
        r->quiet = 0;
        set_state(r, CONN_UP);
        return;
    }
    cm_log(r->quiet ? CM_LOG_DEBUG : CM_LOG_ERROR, "redis %s:%d: AUTH as %s refused: %.200s",
           r->host, r->port, r->auth_user ? r->auth_user : "default",
           reply->type == REDIS_REPLY_ERROR && reply->str ? reply->str : "unexpected reply");
    conn_close(r, "authentication failed");
}

/**
 * One reply, for the head of the FIFO. Returns 1 when the caller may read on (r is alive
 * and still on the same connection), 0 when not.
 */
static int on_reply(cm_redis_t *r, redisReply *reply)
{
    struct cmd *c = r->head;
    unsigned gen = r->gen;
    int ok;

    if (c == NULL) {
        freeReplyObject(reply);
        conn_close(r, "a reply nobody asked for");
        return 0;
    }
    cmd_unlink(r, c);
    if (c->zombie) { /* its caller was answered by the deadline: drop the late reply */
        r->nzombies--;
        cmd_free(c);
        freeReplyObject(reply);
        return 1;
    }
    if (c->cb == NULL) {
        cmd_free(c);
        on_auth(r, reply);
        freeReplyObject(reply);
        return r->gen == gen;
    }
    if (c->script != NULL && is_noscript(reply)) {
        /* The server lost its script cache: same command as EVAL, same deadline. */
        freeReplyObject(reply);
        c->argv[0] = "EVAL";
        c->argvlen[0] = 4;
        c->argv[1] = c->script->source;
        c->argvlen[1] = strlen(c->script->source);
        c->script = NULL;
        if (write_command(r, c->argc, c->argv, c->argvlen) == 0) {
            cmd_append(r, c);
            return 1;
        }
        ok = answer(r, c, cm_err_closed, NULL);
        cmd_free(c);
        return ok && r->gen == gen;
    }
    ok = answer(r, c, NULL, reply);
    cmd_free(c);
    freeReplyObject(reply);
    return ok && r->gen == gen;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    cm_redis_t *r = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_iovec v[8];
    int n;

    /* Hand everything read to the RESP reader, then answer what it completes. */
    while ((n = evbuffer_peek(in, -1, NULL, v, 8)) > 0) {
        size_t total = 0;
        for (int i = 0; i < n && i < 8; i++) {
            if (redisReaderFeed(r->reader, v[i].iov_base, v[i].iov_len) != REDIS_OK) {
                conn_close(r, "out of memory reading a reply");
                return;
            }
            total += v[i].iov_len;
        }
        evbuffer_drain(in, total);
    }
    hold(r);
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(r->reader, &reply) != REDIS_OK) {
            char why[160];
            snprintf(why, sizeof(why), "protocol error: %.120s", r->reader->errstr);
            conn_close(r, why);
            break;
        }
        if (reply == NULL || !on_reply(r, reply))
            break;
    }
    release(r);
}

/* Why a connection failed, from errno and OpenSSL's queue (which this empties). */
static void failure_reason(cm_redis_t *r, short what, char *why, size_t len)
{
    unsigned long e, first = 0;
    int sock_err = EVUTIL_SOCKET_ERROR();
    SSL *ssl = r->bev != NULL && r->tls != NULL ? bufferevent_openssl_get_ssl(r->bev) : NULL;

    /* libevent 2.1 queues SSL_get_error()'s code (library 0) before OpenSSL's own
     * errors: keep the first real one. */
    if (ssl != NULL)
        while ((e = bufferevent_get_openssl_error(r->bev)) != 0)
            if (first == 0 && ERR_GET_LIB(e) != 0)
                first = e;
    if (ssl != NULL && SSL_get_verify_result(ssl) != X509_V_OK) {
        snprintf(why, len, "TLS: certificate verify failed (certificate: %s)",
                 X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
    } else if (first != 0) {
        char buf[200];
        ERR_error_string_n(first, buf, sizeof(buf));
        snprintf(why, len, "TLS: %s", buf);
    } else if (what & BEV_EVENT_EOF) {
        snprintf(why, len, "%sconnection closed by the server", r->tls ? "TLS: " : "");
    } else {
        /* over TLS, e.g. a reset right after the handshake: Redis refused our certificate */
        snprintf(why, len, "%s%s", r->tls ? "TLS: " : "",
                 sock_err ? evutil_socket_error_to_string(sock_err) : "error");
    }
}

static void set_keepalive(evutil_socket_t fd)
{
    int on = 1, idle = KEEPALIVE_IDLE_S, intvl = KEEPALIVE_INTVL_S, cnt = KEEPALIVE_CNT;

    /* Best effort, like hiredis: a failure only loses early detection of a dead peer. */
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

/* Connected (TLS handshake done, when TLS): AUTH first if configured, else up. */
static void on_connected(cm_redis_t *r)
{
    set_keepalive(bufferevent_getfd(r->bev));
    if (r->auth_password != NULL) {
        /* Still CONNECTING (the connect deadline covers AUTH): up once Redis says OK. */
        const char *argv[3] = {"AUTH", r->auth_user, r->auth_password};
        int argc = r->auth_user ? 3 : 2;
        struct cmd *c;
        if (argc == 2)
            argv[1] = r->auth_password;
        if (write_command(r, argc, argv, NULL) != 0) {
            conn_close(r, "cannot send AUTH");
            return;
        }
        c = cm_xcalloc(1, sizeof(*c));
        c->r = r;
        c->answered = 1; /* nobody waits for it but on_auth */
        cmd_append(r, c);
        return;
    }
    cm_log(CM_LOG_INFO, "redis %s:%d: connected%s", r->host, r->port, r->tls ? " over TLS" : "");
    r->quiet = 0;
    set_state(r, CONN_UP);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    cm_redis_t *r = arg;
    char why[300];

    if (bev != r->bev)
        return;
    if (what & BEV_EVENT_CONNECTED) {
        on_connected(r);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        failure_reason(r, what, why, sizeof(why));
        conn_close(r, why);
    }
}

/* A deadline firing this much past its due time was held up by our own loop. */
#define LATE_MS 20

/**
 * Whether a deadline that just fired may be our loop's fault rather than Redis': bytes
 * from Redis wait unread (in the socket, or read but not yet parsed: the deferred read
 * callback is queued), the command has not all left our output buffer, or the deadline
 * itself fired late because a long callback held the loop (then the command may have
 * been written only in this pass). Costs an ioctl, only when a deadline fires.
 */
static bool loop_may_be_late(cm_redis_t *r, const struct cmd *c)
{
    struct timeval now, late;
    int unread = 0;

    if (r->bev == NULL)
        return false;
    if (evbuffer_get_length(bufferevent_get_input(r->bev)) > 0 ||
        evbuffer_get_length(bufferevent_get_output(r->bev)) > 0)
        return true;
    if (ioctl(bufferevent_getfd(r->bev), FIONREAD, &unread) == 0 && unread > 0)
        return true;
    if (event_base_gettimeofday_cached(r->base, &now) != 0)
        return false;
    evutil_timersub(&now, &c->due, &late);
    return late.tv_sec > 0 || (late.tv_sec == 0 && late.tv_usec > LATE_MS * 1000);
}

static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct cmd *c = arg;
    cm_redis_t *r = c->r;

    (void)fd;
    (void)what;
    /* The deadline judges Redis, not our loop: when the loop may be to blame, the
     * command gets one more period, in which a reply already on its way is read (the
     * read events have the loop's top priority). Once only: a Redis that is really
     * silent is still answered cm_err_timeout, at most one period later. */
    if (!c->extended && loop_may_be_late(r, c)) {
        c->extended = 1;
        cmd_arm(r, c);
        return;
    }
    hold(r);
    if (!answer(r, c, cm_err_timeout, NULL))
        goto out;
    if (r->nzombies > MAX_ZOMBIES && r->state == CONN_UP)
        conn_close(r, "too many commands past their deadline");
out:
    release(r);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    cm_redis_t *r = arg;

    (void)fd;
    (void)what;
    switch (r->state) {
    case CONN_DOWN:
        conn_start(r);
        break;
    case CONN_CONNECTING:
        conn_close(r, r->lookup != NULL ? "host name lookup timed out" : "connect timed out");
        break;
    case CONN_UP:
        break;
    }
}

/* A connection attempt failed before it started: log it, go or stay DOWN, retry later. */
static void connect_failed(cm_redis_t *r, const char *why)
{
    if (r->state != CONN_DOWN) { /* after a lookup: the same log, the same backoff */
        conn_down(r, why);
        return;
    }
    cm_log(r->quiet ? CM_LOG_DEBUG : CM_LOG_WARN, "redis %s:%d: cannot connect: %s", r->host,
           r->port, why);
    r->quiet = 1;
    schedule_retry(r);
}

/* A new bufferevent for one connection: plain, or TLS checking the server's name. */
static struct bufferevent *new_bev(cm_redis_t *r)
{
    const int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
    /* the name to check: redis_tls_server_name, else a redis_host that is a name */
    const char *name = r->tls_server_name ? r->tls_server_name : r->resolver ? r->host : NULL;
    SSL *ssl;
    int ok;

    if (r->tls == NULL)
        return bufferevent_socket_new(r->base, -1, opts);
    ssl = SSL_new(r->tls);
    if (ssl == NULL)
        return NULL;
    if (name != NULL)
        ok = SSL_set_tlsext_host_name(ssl, name) == 1 && SSL_set1_host(ssl, name) == 1;
    else /* no name configured: the certificate must carry the address as an IP SAN */
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), r->host) == 1;
    if (!ok) {
        SSL_free(ssl);
        return NULL;
    }
    /* From here on the bufferevent owns ssl, even if this call fails. */
    return bufferevent_openssl_socket_new(r->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, opts);
}

/* Connects to r->addrs[r->next_addr++]: in state DOWN (an IP host) or CONNECTING (a
 * name's answer), with no connection. */
static void connect_next(cm_redis_t *r)
{
    const cm_resolve_addr_t *a = &r->addrs[r->next_addr++];

    assert(r->bev == NULL);
    r->reader = redisReaderCreate();
    r->bev = new_bev(r);
    if (r->reader == NULL || r->bev == NULL) {
        drop_connection(r, cm_err_closed);
        connect_failed(r, "out of memory");
        return;
    }
    r->gen++;
    bufferevent_setcb(r->bev, on_read, NULL, on_event, r);
    if (bufferevent_enable(r->bev, EV_READ | EV_WRITE) != 0 ||
        bufferevent_socket_connect(r->bev, (const struct sockaddr *)&a->ss, (int)a->len) != 0) {
        /* e.g. out of sockets; a refused connect on loopback comes as an event */
        char why[120];
        snprintf(why, sizeof(why), "%s", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        drop_connection(r, cm_err_closed);
        connect_failed(r, why);
        return;
    }
    /* The loop's highest priority (0), so that where a base has several (cm_server's
     * workers) a pass with Redis bytes to move runs before client work and before the
     * commands' deadlines (which keep the default, lower priority). Set only now: the
     * connect (setfd) re-assigns the bufferevent's events at the default priority. It
     * fails only for an event already active (a connect refused at once), which the
     * next connection retries: nothing to report. */
    (void)bufferevent_priority_set(r->bev, 0);
    set_state(r, CONN_CONNECTING);
}

static void on_lookup(const char *err, const cm_resolve_addr_t *addrs, int n, void *arg)
{
    cm_redis_t *r = arg;
    char why[200];

    r->lookup = NULL;
    if (err != NULL) {
        snprintf(why, sizeof(why), "cannot resolve the name: %s", err);
        conn_close(r, why);
        return;
    }
    memcpy(r->addrs, addrs, (size_t)n * sizeof(*addrs));
    r->naddrs = n;
    r->next_addr = 0;
    connect_next(r);
}

/* Opens a new connection; called in state DOWN with none. */
static void conn_start(cm_redis_t *r)
{
    assert(r->bev == NULL);
    r->naddrs = r->next_addr = 0;
    if (r->resolver != NULL) {
        set_state(r, CONN_CONNECTING); /* the connect deadline covers the lookup */
        r->lookup = cm_resolve_start(r->resolver, r->host, r->port, on_lookup, r);
        return;
    }
    if (cm_parse_ip_sockaddr(r->host, r->port, &r->addrs[0].ss, &r->addrs[0].len) != 0) {
        connect_failed(r, "not an IP address");
        return;
    }
    r->naddrs = 1;
    connect_next(r);
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
    if (auth != NULL && auth->tls != NULL) {
        SSL_CTX_up_ref(auth->tls);
        r->tls = auth->tls;
        if (auth->tls_server_name != NULL && auth->tls_server_name[0] != '\0')
            r->tls_server_name = cm_xstrdup(auth->tls_server_name);
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};

    assert(base != NULL && host != NULL && timeout_ms > 0);
    r->base = base;
    r->host = cm_xstrdup(host);
    r->port = port;
    r->timeout_ms = timeout_ms;
    r->connect_ms = timeout_ms > CONNECT_MIN_MS ? timeout_ms : CONNECT_MIN_MS;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->state = CONN_DOWN;
    r->timer = evtimer_new(base, on_timer, r);
    if (r->timer == NULL) {
        cm_log(CM_LOG_ERROR, "redis: cannot create a timer");
        abort();
    }
    /* All command deadlines share one duration: a common timeout keeps them in a FIFO
     * instead of the timer heap. It also orders them after a reply already read: the
     * queue's expiry runs as an event of its own, and the deadlines it activates queue up
     * behind the deferred read callback that the socket's read scheduled in the same
     * pass (test_reply_read_before_its_deadline). */
    r->cmd_tv_plain = tv;
    r->cmd_tv = event_base_init_common_timeout(base, &tv);
    if (r->cmd_tv == NULL)
        r->cmd_tv = &r->cmd_tv_plain;
    if (cm_resolve_needed(host)) {
        /* start-up: reads resolv.conf and /etc/hosts; the lookups go through the loop */
        r->resolver = cm_resolve_new(base);
        if (r->resolver == NULL) {
            cm_log(CM_LOG_ERROR, "redis: host \"%s\": no resolver; not connecting", host);
            return r;
        }
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
    drop_connection(r, cm_err_shutdown);
    release(r);
}

int cm_redis_connected(const cm_redis_t *r)
{
    if (r->cl != NULL)
        return cm_redis_cluster_connected(r->cl);
    return !r->closing && r->state == CONN_UP;
}

/* Rounded up to the strictest alignment (the parts of one cmd block). */
static size_t aligned(size_t n)
{
    const size_t a = _Alignof(max_align_t);
    return (n + a - 1) / a * a;
}

/* A record's block: the record, its deadline's event, then extra bytes for the caller. */
static size_t cmd_head_size(void)
{
    return aligned(sizeof(struct cmd)) + aligned(event_get_struct_event_size());
}

static void *cmd_extra(struct cmd *c)
{
    return (char *)c + cmd_head_size();
}

/* One allocation per command: the deadline's event lives in the record's block. */
static struct cmd *cmd_new(cm_redis_t *r, cm_redis_cb cb, void *arg, size_t extra)
{
    struct cmd *c = cm_xcalloc(1, cmd_head_size() + extra);

    c->r = r;
    c->cb = cb;
    c->arg = arg;
    c->deadline = (struct event *)((char *)c + aligned(sizeof(struct cmd)));
    if (event_assign(c->deadline, r->base, -1, 0, on_cmd_timeout, c) != 0) {
        cm_log(CM_LOG_ERROR, "redis: cannot create a timer");
        abort();
    }
    return c;
}

/* Writes c's command and starts its deadline; on failure c is freed and -1 returned. */
static int cmd_send(cm_redis_t *r, struct cmd *c, int argc, const char **argv,
                    const size_t *argvlen)
{
    if (write_command(r, argc, argv, argvlen) != 0) {
        cmd_free(c);
        return -1;
    }
    cmd_append(r, c);
    cmd_arm(r, c);
    return 0;
}

int cm_redis_command(cm_redis_t *r, cm_redis_cb cb, void *arg, int argc, const char **argv,
                     const size_t *argvlen)
{
    assert(cb != NULL && argc > 0 && argv != NULL);
    if (r->cl != NULL)
        return cm_redis_cluster_send(r->cl, NULL, cb, arg, 0, argc, argv, argvlen);
    if (!cm_redis_connected(r) || r->bev == NULL)
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
    if (!cm_redis_connected(r) || r->bev == NULL)
        return -1;
    off = put_decimal(nkeys_str, (size_t)nkeys);
    for (i = 0; i < argc; i++)
        total += arg_len(argv, argvlen, i);
    total += off;
    /* one block: record, argv[n], argvlen[n], then the bytes of nkeys and the args */
    c = cmd_new(r, cb, arg, n * (sizeof(char *) + sizeof(size_t)) + total);
    c->script = s;
    c->argc = n;
    c->argv = cmd_extra(c);
    c->argvlen = (size_t *)(c->argv + n);
    data = (char *)(c->argvlen + n);
    c->argv[0] = "EVALSHA";
    c->argvlen[0] = 7;
    c->argv[1] = s->sha;
    c->argvlen[1] = 40;
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
