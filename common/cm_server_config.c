/*
 * cm_server_config — see cm_server_config.h. The table below is the one place the
 * shared keys are declared; a service's --help and its conf example show them with the
 * service's own defaults where cm_server_config_defaults_t says so.
 */
#include "cm_server_config.h"

#include <stdio.h>
#include <string.h>

#define S(f) offsetof(cm_server_config_t, f)

/* Defaults NULL here are the service's (cm_server_config_defaults_t) or unset. */
static const cm_config_opt_t keys[CM_SERVER_CONFIG_NKEYS] = {
    {"listen_addr", CM_CFG_STR, S(listen_addr), "127.0.0.1", 0, 0,
     "IPv4 or IPv6 address to listen on (0.0.0.0 or :: for every address)"},
    {"port", CM_CFG_INT, S(port), NULL, 0, 65535, "TCP port (0 = any free port)"},
    {"workers", CM_CFG_INT, S(workers), "0", 0, 256,
     "worker threads, one event loop and listener (SO_REUSEPORT) each; 0 = one per core"},
    {"tls_cert", CM_CFG_STR, S(tls_cert), NULL, 0, 0, "PEM certificate chain (ECDSA P-256)"},
    {"tls_key", CM_CFG_STR, S(tls_key), NULL, 0, 0,
     "PEM private key of tls_cert (owner-only: chmod 600)"},
    {"plain_http", CM_CFG_BOOL, S(plain_http), "false", 0, 0,
     "serve plain HTTP instead of TLS (only behind a trusted hop)"},
    {"proxy_from", CM_CFG_STR, S(proxy_from), NULL, 0, 0,
     "addresses/CIDR blocks (comma-separated) of load balancers whose connections start with "
     "a PROXY v2 header naming the client (HAProxy send-proxy-v2); needs TLS"},
    {"drain_grace_ms", CM_CFG_INT, S(drain_grace_ms), "0", 0, 60000,
     "after SIGTERM, keep accepting this long while /readyz answers 503 and replies close "
     "their connections, so a load balancer moves traffic away first (set above its check "
     "interval x fall); 0: stop accepting at once"},
    {"max_connections", CM_CFG_INT, S(max_connections), NULL, 16, 1000000,
     "open client connections (all workers together) before the listeners pause"},
    {"max_body_bytes", CM_CFG_INT, S(max_body_bytes), NULL, 1024, 16777216,
     "largest JSON request body (larger: 413 body_too_large)"},
    {"max_header_bytes", CM_CFG_INT, S(max_header_bytes), "8192", 1024, 1048576,
     "largest request line plus headers"},
    {"idle_timeout_s", CM_CFG_INT, S(idle_timeout_s), NULL, 1, 3600,
     "seconds a connection may wait between requests, in all (a trickle of bytes does not "
     "extend it), before it is closed"},
    {"handshake_timeout_s", CM_CFG_INT, S(handshake_timeout_s), "10", 1, 3600,
     "seconds a new connection has to complete its TLS handshake"},
    {"request_timeout_s", CM_CFG_INT, S(request_timeout_s), "30", 1, 3600,
     "seconds from the first byte of a request until its head and body are read"},
    {"head_timeout_s", CM_CFG_INT, S(head_timeout_s), "10", 1, 3600,
     "seconds from the first byte of a request until its head (request line and headers) "
     "is read; the body then has the rest of request_timeout_s (http_engine = h1 only)"},
    {"http_engine", CM_CFG_STR, S(http_engine), NULL, 0, 0,
     "what serves HTTP on the fans' listener: h1 (onsale's own strict HTTP/1.1 engine: "
     "per-route body caps, a head deadline, lean answers) or evhttp (libevent's); the admin "
     "listener always runs evhttp"},
    {"max_conns_per_addr", CM_CFG_INT, S(max_conns_per_addr), "2048", 0, 1000000,
     "open connections from one client address (the PROXY header's behind a balancer); "
     "more get 429 too_many_connections; 0 = unlimited"},
    {"admin_listen", CM_CFG_STR, S(admin_listen), NULL, 0, 0,
     "ip:port or [ipv6]:port of the admin listener (admin API, dashboard, /metrics; loopback by "
     "default); "
     "the fans' port answers those paths 404"},
    {"max_handshakes", CM_CFG_INT, S(max_handshakes), "256", 0, 100000,
     "TLS handshakes in flight per worker before its listener stops accepting until one "
     "completes (new connections wait in the kernel's backlog); 0 = no cap"},
    {"shed_lag_ms", CM_CFG_INT, S(shed_lag_ms), "500", 0, 60000,
     "while a worker's loop lags more than this, new requests on the fans' listener (not "
     "/healthz, /readyz) get 503 overloaded with Retry-After before any work; 0 = never"},
    {"shed_retry_after_s", CM_CFG_INT, S(shed_retry_after_s), "2", 1, 600,
     "the Retry-After (seconds) of a 503 overloaded"},
};

size_t cm_server_config_keys(cm_config_opt_t *out, size_t base,
                             const cm_server_config_defaults_t *d)
{
    for (size_t i = 0; i < CM_SERVER_CONFIG_NKEYS; i++) {
        out[i] = keys[i];
        out[i].offset += base;
        const char *name = keys[i].name;
        if (strcmp(name, "port") == 0)
            out[i].def = d->port;
        else if (strcmp(name, "admin_listen") == 0)
            out[i].def = d->admin_listen;
        else if (strcmp(name, "max_connections") == 0)
            out[i].def = d->max_connections;
        else if (strcmp(name, "max_body_bytes") == 0)
            out[i].def = d->max_body_bytes;
        else if (strcmp(name, "idle_timeout_s") == 0)
            out[i].def = d->idle_timeout_s;
        else if (strcmp(name, "http_engine") == 0)
            out[i].def = d->http_engine != NULL ? d->http_engine : "evhttp";
    }
    return CM_SERVER_CONFIG_NKEYS;
}

size_t cm_server_config_table(cm_config_opt_t *out, size_t base,
                              const cm_server_config_defaults_t *d, size_t redis_base,
                              const cm_config_opt_t *own, size_t nown)
{
    size_t n = cm_server_config_keys(out, base, d);
    n += cm_redis_config_keys(out + n, redis_base);
    memcpy(out + n, own, nown * sizeof(*own));
    return n + nown;
}

int cm_server_config_tls(const cm_server_config_t *c, cm_tls_ctx_t **tls, char *err, size_t errlen)
{
    *tls = NULL;
    if (c->plain_http)
        return 0;
    if (c->tls_cert == NULL || c->tls_key == NULL) {
        snprintf(err, errlen, "tls_cert and tls_key must be set (or plain_http = true)");
        return -1;
    }
    *tls = cm_tls_server_new(c->tls_cert, c->tls_key, err, errlen);
    return *tls == NULL ? -1 : 0;
}

int cm_server_config_opts(const cm_server_config_t *c, cm_server_opts_t *o, char *admin_addr,
                          size_t admin_len, char *err, size_t errlen)
{
    int admin_port = 0;
    if (cm_server_parse_listen(c->admin_listen, admin_addr, admin_len, &admin_port) != 0) {
        snprintf(err, errlen, "admin_listen: expected ip:port or [ipv6]:port, got '%s'",
                 c->admin_listen ? c->admin_listen : "");
        return -1;
    }
    if (c->http_engine == NULL || strcmp(c->http_engine, "evhttp") == 0) {
        o->limits.engine = CM_HTTP_ENGINE_EVHTTP;
    } else if (strcmp(c->http_engine, "h1") == 0) {
        o->limits.engine = CM_HTTP_ENGINE_H1;
    } else {
        snprintf(err, errlen, "http_engine: expected h1 or evhttp, got '%s'", c->http_engine);
        return -1;
    }
    o->limits.head_timeout_s = (int)c->head_timeout_s;
    o->workers = (int)c->workers;
    o->listen_addr = c->listen_addr;
    o->port = (int)c->port;
    o->admin_addr = admin_addr;
    o->admin_port = admin_port;
    o->limits.max_header_bytes = (size_t)c->max_header_bytes;
    o->limits.max_body_bytes = (size_t)c->max_body_bytes;
    o->limits.idle_timeout_s = (int)c->idle_timeout_s;
    o->limits.max_connections = (int)c->max_connections;
    o->limits.proxy_from = c->proxy_from;
    o->limits.handshake_timeout_s = (int)c->handshake_timeout_s;
    o->limits.request_timeout_s = (int)c->request_timeout_s;
    o->limits.max_conns_per_addr = (int)c->max_conns_per_addr;
    o->limits.max_handshakes = (int)c->max_handshakes;
    o->limits.shed_lag_ms = (int)c->shed_lag_ms;
    o->limits.shed_retry_after_s = (int)c->shed_retry_after_s;
    o->drain_grace_ms = (int)c->drain_grace_ms;
    return 0;
}
