/*
 * cm_redis_config — the Redis keys both onsale services read (address or cluster
 * seeds, ACL user and password file, TLS, command deadline), declared once, and the
 * one way to open a client from them. Each service embeds a cm_redis_config_t in its
 * config struct and puts these keys in its table with cm_redis_config_keys, right after
 * the shared server keys.
 *
 * Start-up only: cm_redis_config_open reads the password and key files (each worker
 * calls it before its loop runs).
 */
#ifndef CM_REDIS_CONFIG_H
#define CM_REDIS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_config.h"
#include "cm_redis.h"

struct event_base;

typedef struct cm_redis_config {
    char *host;
    int64_t port;
    char *user;
    char *password_file;
    bool tls;
    char *tls_ca_file;
    char *tls_cert_file;
    char *tls_key_file;
    char *tls_server_name;
    char *cluster; /* NULL: single node */
    int64_t timeout_ms;
} cm_redis_config_t;

/** How many keys cm_redis_config_keys writes. */
#define CM_REDIS_CONFIG_NKEYS 11

/**
 * Writes the Redis keys into out[0 .. CM_REDIS_CONFIG_NKEYS), each offset being base
 * (offsetof(<service config>, <its cm_redis_config_t member>)) plus the field's.
 * Returns the count written.
 */
size_t cm_redis_config_keys(cm_config_opt_t *out, size_t base);

/**
 * A client as the keys say: the password read from password_file (owner-only), the
 * TLS client context made from the tls_* files, single node or cluster. NULL + err
 * when a file is refused or the cluster seeds do not parse.
 */
cm_redis_t *cm_redis_config_open(struct event_base *base, const cm_redis_config_t *c, char *err,
                                 size_t errlen);

#endif
