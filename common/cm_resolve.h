/*
 * cm_resolve — host names to addresses without blocking the loop (libevent's evdns).
 *
 * One resolver per client that needs one (a cm_redis with a redis_host name, a Postgres
 * pool with a host name), made at start-up on the loop's thread: cm_resolve_new reads
 * /etc/resolv.conf and /etc/hosts once (file I/O, before the loop runs). After that,
 * every lookup is a UDP exchange driven by the loop; /etc/hosts answers ("localhost")
 * come without any packet. Lookups are made afresh each time they are asked for, so a
 * caller that resolves before every connect follows a name that moved.
 *
 * Test hook: ONSALE_TEST_NAMESERVER=ip[:port] in the environment replaces resolv.conf's
 * servers with that one (the tests point it at a UDP socket that never answers, to show
 * that the loop goes on meanwhile). Never set it in production.
 */
#ifndef CM_RESOLVE_H
#define CM_RESOLVE_H

#include <stdbool.h>
#include <sys/socket.h>

struct event_base;
typedef struct cm_resolve cm_resolve_t;
typedef struct cm_resolve_req cm_resolve_req_t;

/* Addresses kept from one answer: enough for the A and AAAA records of a service. */
#define CM_RESOLVE_MAX 8

typedef struct {
    struct sockaddr_storage ss;
    unsigned len;
} cm_resolve_addr_t;

/**
 * err: NULL with 1..CM_RESOLVE_MAX addresses (in the resolver's order, port set), or a
 * static message ("nodename nor servname provided, or not known", …) with n 0. addrs
 * lives only during the callback.
 */
typedef void (*cm_resolve_cb)(const char *err, const cm_resolve_addr_t *addrs, int n, void *arg);

/** True when host is a name to look up: not empty, not an IP literal, not a '/' path. */
bool cm_resolve_needed(const char *host);

/** A resolver on base (start-up only: reads resolv.conf and hosts). NULL on failure
 *  (logged). Loop thread. */
cm_resolve_t *cm_resolve_new(struct event_base *base);
/** Frees the resolver; requests must have been answered or cancelled. NULL is fine. */
void cm_resolve_free(cm_resolve_t *rs);

/**
 * Looks name up (TCP addresses of any family, port filled in). cb runs exactly once,
 * always later from the loop (never inside this call), unless cancelled first. The
 * request is the caller's handle until cb runs or it is cancelled. Never NULL.
 */
cm_resolve_req_t *cm_resolve_start(cm_resolve_t *rs, const char *name, int port, cm_resolve_cb cb,
                                   void *arg);
/** Forgets a pending request: its cb will not run. The resolver may be freed right after. */
void cm_resolve_cancel(cm_resolve_req_t *req);

#endif
