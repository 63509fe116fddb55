/*
 * cm_server_config — the configuration keys every onsale server shares (listeners,
 * workers, TLS, PROXY v2 sources, limits, deadlines, drain), declared once: their
 * names, ranges and --help text live in cm_server_config.c, and each service embeds a
 * cm_server_config_t in its own config struct and puts these keys at the top of its
 * table with cm_server_config_keys (giving its own defaults where they differ: ports,
 * connection and body limits, idle time). cm_server_config_opts then turns the loaded
 * values into cm_server's options, the same way for every service.
 *
 * Start-up only (main thread): the TLS context is made from files.
 */
#ifndef CM_SERVER_CONFIG_H
#define CM_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_config.h"
#include "cm_redis_config.h"
#include "cm_server.h"

typedef struct cm_server_config {
    char *listen_addr;
    int64_t port;
    int64_t workers;
    char *tls_cert;
    char *tls_key;
    bool plain_http;
    char *proxy_from; /* NULL: no PROXY headers */
    int64_t drain_grace_ms;
    int64_t max_connections;
    int64_t max_body_bytes;
    int64_t max_header_bytes;
    int64_t idle_timeout_s;
    int64_t handshake_timeout_s;
    int64_t request_timeout_s;
    int64_t head_timeout_s;
    char *http_engine; /* "h1" or "evhttp": the fans' listener (cm_http_engine_t) */
    int64_t max_conns_per_addr;
    char *admin_listen;
    int64_t max_handshakes; /* per worker (cm_http_limits_t) */
    int64_t shed_lag_ms;
    int64_t shed_retry_after_s;
} cm_server_config_t;

/** The defaults that differ between services (strings, as in a config table). */
typedef struct cm_server_config_defaults {
    const char *port;
    const char *admin_listen;
    const char *max_connections;
    const char *max_body_bytes;
    const char *idle_timeout_s;
    const char *http_engine; /* NULL: "evhttp" */
} cm_server_config_defaults_t;

/** How many keys cm_server_config_keys writes. */
#define CM_SERVER_CONFIG_NKEYS 21

/**
 * Writes the shared keys into out[0 .. CM_SERVER_CONFIG_NKEYS), each offset being
 * base (offsetof(<service config>, <its cm_server_config_t member>)) plus the field's,
 * with the service's defaults d (borrowed: string literals). Returns the count written.
 */
size_t cm_server_config_keys(cm_config_opt_t *out, size_t base,
                             const cm_server_config_defaults_t *d);

/**
 * A service's whole table in out: the shared server keys (cm_server_config_keys, at
 * base), the Redis keys (cm_redis_config_keys, at redis_base), then its own nown keys.
 * out holds CM_SERVER_CONFIG_NKEYS + CM_REDIS_CONFIG_NKEYS + nown entries. Returns the
 * count. Start-up, main thread.
 */
size_t cm_server_config_table(cm_config_opt_t *out, size_t base,
                              const cm_server_config_defaults_t *d, size_t redis_base,
                              const cm_config_opt_t *own, size_t nown);

/**
 * The TLS server context the keys ask for, in *tls (the caller frees it with
 * cm_tls_free): NULL with plain_http. -1 + err when tls_cert or tls_key is missing or
 * does not load (cm_tls_server_new: a key file readable by others is refused).
 */
__attribute__((warn_unused_result)) int
cm_server_config_tls(const cm_server_config_t *c, cm_tls_ctx_t **tls, char *err, size_t errlen);

/**
 * Fills o's workers, listeners, limits and drain grace from c; name, metric_prefix,
 * tls and drain_limit_ns stay the caller's. admin_listen's address is written to
 * admin_addr (o->admin_addr points there, so it must outlive o's use). 0, or -1 + err
 * when admin_listen is not ip:port or http_engine neither h1 nor evhttp.
 */
__attribute__((warn_unused_result)) int cm_server_config_opts(const cm_server_config_t *c,
                                                              cm_server_opts_t *o, char *admin_addr,
                                                              size_t admin_len, char *err,
                                                              size_t errlen);

#endif
