/*
 * cm_http_guard — per-address connection counts and the connection guard (cm_http_int.h).
 *
 * Deadlines (a guard per TLS connection, ex_data of its SSL, freed with it): a timer
 * armed at accept closes a connection whose handshake (SSL_CB_HANDSHAKE_DONE) is not
 * done in time; then the connection is idle until a TLS record arrives (the msg callback
 * sees each record header), which starts a request: it must reach the handler (evhttp's
 * gencb, i.e. head and body read) within request_timeout_s; after the reply is sent
 * (on_complete) it is idle again, and idle time is capped in total — a client trickling
 * a byte at a time never resets it, unlike evhttp's own inactivity timeout. evhttp 2.1
 * has no hook at the end of the head, so head and body share one deadline. Closing is a
 * shutdown(2) of the socket: evhttp sees the EOF and frees the connection itself, so the
 * guard never holds a pointer into evhttp. Only TLS connections are guarded (plain HTTP
 * is for trusted hops and tests).
 */
#include "cm_http_int.h"

#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <arpa/inet.h>

#include "cm_addrtab.h"
#include "cm_hash.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"

/* --- per-address connection counts (shared by the workers) ----------------------------- */

#define ADDR_SLOTS  65536 /* addresses tracked at once; a full table lets connections in */
#define ADDR_PROBES 16

struct cm_http_addrs {
    cm_addrtab_t *tab; /* an int per address: its open connections */
};

cm_http_addrs_t *cm_http_addrs_new(void)
{
    cm_http_addrs_t *a = cm_xcalloc(1, sizeof(*a));
    a->tab = cm_addrtab_new(&(cm_addrtab_config_t){.slots = ADDR_SLOTS,
                                                   .probes = ADDR_PROBES,
                                                   .value_size = sizeof(int),
                                                   .full = CM_ADDRTAB_FULL_PASS});
    return a;
}

void cm_http_addrs_free(cm_http_addrs_t *a)
{
    if (a == NULL)
        return;
    cm_addrtab_free(a->tab);
    free(a);
}

typedef struct count_op {
    int delta, n;
} count_op_t;

static cm_addrtab_verdict_t on_count(void *value, bool fresh, void *arg)
{
    int *count = value;
    count_op_t *op = arg;
    *count += op->delta;
    op->n = *count;
    return *count <= 0 ? CM_ADDRTAB_DROP : CM_ADDRTAB_KEEP;
}

/* Adds delta to addr's count (creating it); returns the new count, or -1 when full. */
static int addrs_add(cm_http_addrs_t *a, uint64_t key, int delta)
{
    count_op_t op = {delta, -1};
    if (cm_addrtab_visit(a->tab, key, delta > 0, on_count, &op) != 0)
        return -1;
    return op.n;
}

int cm_http_addrs_count(cm_http_addrs_t *a, const char *addr)
{
    count_op_t op = {0, 0};
    (void)cm_addrtab_visit(a->tab, cm_hash_str(addr), false, on_count, &op);
    return op.n;
}

/* --- connection guard: deadlines and the per-address cap ------------------------------- */

static void guard_close(guard_t *g, const char *why)
{
    if (g->shut)
        return;
    g->shut = true;
    cm_log(CM_LOG_DEBUG, "closing a connection: %s", why);
    int fd = SSL_get_fd(g->ssl);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

void cm_http_guard_arm(guard_t *g, uint64_t ns)
{
    struct timeval tv = {(time_t)(ns / 1000000000ull), (suseconds_t)((ns % 1000000000ull) / 1000)};
    evtimer_add(g->timer, &tv);
}

void cm_http_guard_idle(guard_t *g)
{
    g->phase = G_IDLE;
    g->idle_since_ns = cm_time_mono_ns();
    int idle = g->over_cap ? OVER_CAP_IDLE_S : g->idle_s;
    if (idle > 0)
        cm_http_guard_arm(g, (uint64_t)idle * SEC_NS);
    else
        evtimer_del(g->timer);
}

void cm_http_on_guard_timer(evutil_socket_t fd, short what, void *arg)
{
    guard_t *g = arg;
    switch (g->phase) {
    case G_HANDSHAKE:
        guard_close(g, "TLS handshake deadline");
        break;
    case G_IDLE:
        guard_close(g, "idle deadline");
        break;
    case G_REQUEST:
        guard_close(g, g->head_s > 0 ? "head deadline" : "request deadline");
        break;
    case G_BODY:
        guard_close(g, "request deadline (body)");
        break;
    case G_HANDLER:
        break;
    }
}

/* Its handshake is over (done, or the connection is gone): one less in flight, and the
 * listener accepts again if the handshake cap had paused it. */
static void guard_handshake_over(guard_t *g)
{
    if (!g->handshaking)
        return;
    g->handshaking = false;
    cm_http_server_t *srv = g->t->srv;
    if (srv != NULL && --srv->handshakes < srv->max_handshakes)
        cm_http_resume_listener(srv);
}

void cm_http_on_guard_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                           void *argp)
{
    guard_t *g = ptr;
    if (g == NULL)
        return;
    guard_handshake_over(g);
    tracker_release(g->t);
    if (g->addr_key != 0)
        addrs_add(g->addrs, g->addr_key, -1);
    event_free(g->timer);
    free(g);
}

guard_t *cm_http_guard_of_ssl(const SSL *ssl)
{
    return ssl != NULL && cm_http_ssl_guard_index >= 0
               ? SSL_get_ex_data(ssl, cm_http_ssl_guard_index)
               : NULL;
}

/* The client's address of a TLS connection: the PROXY header's, else the socket peer's. */
void cm_http_ssl_peer(SSL *ssl, char *out, size_t outlen)
{
    proxy_conn_t *pc =
        cm_http_ssl_proxy_index >= 0 ? SSL_get_ex_data(ssl, cm_http_ssl_proxy_index) : NULL;
    if (pc != NULL && pc->peer[0] != '\0') {
        snprintf(out, outlen, "%s", pc->peer);
        return;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    out[0] = '\0';
    if (getpeername(SSL_get_fd(ssl), (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)outlen);
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)outlen);
}

void cm_http_on_ssl_info(const SSL *ssl, int where, int ret)
{
    if (!(where & SSL_CB_HANDSHAKE_DONE))
        return;
    guard_t *g = cm_http_guard_of_ssl(ssl);
    if (g == NULL || g->phase != G_HANDSHAKE)
        return;
    guard_handshake_over(g);
    if (g->addrs != NULL && g->cap > 0) {
        char addr[INET6_ADDRSTRLEN + 8];
        cm_http_ssl_peer((SSL *)ssl, addr, sizeof(addr));
        if (addr[0] != '\0') {
            uint64_t key = cm_hash_str(addr);
            int n = addrs_add(g->addrs, key, 1);
            if (n >= 0)
                g->addr_key = key;
            if (n > g->cap) {
                g->over_cap = true;
                cm_log(CM_LOG_DEBUG, "%s: over %d connections", addr, g->cap);
            }
        }
    }
    cm_http_guard_idle(g);
}

/* A request starts (its first byte arrived on an idle connection): the head deadline, or
 * the whole request's when there is no separate one. */
void cm_http_guard_request(guard_t *g)
{
    if (g->phase != G_IDLE)
        return;
    g->phase = G_REQUEST;
    g->request_start_ns = cm_time_mono_ns();
    int s = g->head_s > 0 ? g->head_s : g->request_s;
    if (s > 0)
        cm_http_guard_arm(g, (uint64_t)s * SEC_NS);
    else
        evtimer_del(g->timer);
}

/* The h1 engine has the whole head: the body gets what is left of the request deadline. */
void cm_http_guard_body(guard_t *g)
{
    g->phase = G_BODY;
    if (g->request_s <= 0) {
        evtimer_del(g->timer);
        return;
    }
    uint64_t deadline = g->request_start_ns + (uint64_t)g->request_s * SEC_NS,
             now = cm_time_mono_ns();
    cm_http_guard_arm(g, deadline > now ? deadline - now : 1);
}

/* Every TLS record read: one arriving on an idle connection starts a request. */
void cm_http_on_ssl_msg(int write_p, int version, int content_type, const void *buf, size_t len,
                        SSL *ssl, void *arg)
{
    if (write_p || content_type != SSL3_RT_HEADER)
        return;
    cm_http_guard_request(arg);
}
