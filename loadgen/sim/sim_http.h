/*
 * sim_http — the simulator's HTTP/1.1 client: a pool of keep-alive TLS connections to
 * one service, each bound to its own loopback source address before connect(), with a
 * FIFO of requests per connection. Event-loop thread only.
 */
#ifndef SIM_HTTP_H
#define SIM_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
typedef struct ssl_ctx_st sim_tls_ctx_t;

typedef struct sim_pool sim_pool_t;

/** One answer. body is NUL-terminated and lives only during the callback. err is NULL
 * or a short static description of a transport failure (then status is 0). */
typedef struct sim_resp {
    int status;
    const char *body;
    size_t body_len;
    int retry_after_s;   /* Retry-After in seconds, -1 when absent */
    uint64_t latency_ns; /* on the wire: from writing the request to its answer */
    uint64_t waited_ns;  /* before that: behind other requests on its connection, or
                            while the connection was being opened */
    const char *err;
} sim_resp_t;

typedef void (*sim_http_cb)(const sim_resp_t *resp, void *arg);

/** URL like https://127.0.0.1:8443 (no path). src_base is the first source address
 * (e.g. "127.1.0.1"); connection i binds to src_base + i (skipping .0 and .255), or to
 * nothing when src_base is NULL. tls may be NULL for http:// URLs. NULL on a bad URL. */
sim_pool_t *sim_pool_new(struct event_base *base, const char *url, sim_tls_ctx_t *tls, int nconns,
                         const char *src_base, int timeout_s, char *err, size_t errlen);

/** Binds connection i to the source address of connection i % naddrs, so several
 * connections come from one address, as fans behind one carrier-grade NAT do. Call before
 * the first request. naddrs < 1 or ≥ the connections: one each. Returns the addresses. */
int sim_pool_share_sources(sim_pool_t *p, int naddrs);

/** With on, a request goes to an idle connection (else the least loaded of a few)
 * instead of its pin's: for a service whose limits do not look at the client's address,
 * where a fan on a connection of their own would not wait behind other fans. Off by
 * default. */
void sim_pool_spread(sim_pool_t *p, bool on);

/** Queues a request on connection (pin % nconns), or as sim_pool_spread says. headers: "Name:
 * value\r\n" lines or NULL. body may be NULL. The callback runs exactly once, never from inside
 * this call. */
void sim_pool_request(sim_pool_t *p, unsigned pin, const char *method, const char *path,
                      const char *headers, const char *body, sim_http_cb cb, void *arg);

/** The same, ahead of every normal request waiting on that connection (behind the one
 * in flight and earlier urgent ones): a fan who holds a seat does not wait for other
 * fans' first attempts, as they would not on a connection of their own. */
void sim_pool_request_urgent(sim_pool_t *p, unsigned pin, const char *method, const char *path,
                             const char *headers, const char *body, sim_http_cb cb, void *arg);

/** Requests queued or in flight. */
size_t sim_pool_pending(const sim_pool_t *p);

/** Opens every connection not open yet (TLS handshake included), without a request. */
void sim_pool_open_all(sim_pool_t *p);

/** Closes every connection; pending callbacks are not called. Accepts NULL. */
void sim_pool_free(sim_pool_t *p);

/** The URL this pool talks to. */
const char *sim_pool_url(const sim_pool_t *p);

#endif
