/*
 * cm_redis_config — see cm_redis_config.h. The one place the Redis keys are declared.
 */
#include "cm_redis_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_tls.h"

#define S(f) offsetof(cm_redis_config_t, f)

static const cm_config_opt_t keys[CM_REDIS_CONFIG_NKEYS] = {
    {"redis_host", CM_CFG_STR, S(host), "127.0.0.1", 0, 0,
     "Redis address (IPv4 or IPv6) or host name; a name is looked up without blocking "
     "the loop before every connect, so a name moved by a failover is followed"},
    {"redis_port", CM_CFG_INT, S(port), "6379", 1, 65535, "Redis port"},
    {"redis_user", CM_CFG_STR, S(user), NULL, 0, 0,
     "Redis ACL user to authenticate as (AUTH user password on every connection)"},
    {"redis_password_file", CM_CFG_STR, S(password_file), NULL, 0, 0,
     "file holding the Redis password, readable by its owner only (unset: no AUTH)"},
    {"redis_tls", CM_CFG_BOOL, S(tls), "off", 0, 0,
     "speak TLS to Redis (its tls-port; every cluster node's tls-port with redis_cluster)"},
    {"redis_tls_ca_file", CM_CFG_STR, S(tls_ca_file), NULL, 0, 0,
     "PEM file of the CA(s) that signed Redis' certificate (unset: the system store)"},
    {"redis_tls_cert_file", CM_CFG_STR, S(tls_cert_file), NULL, 0, 0,
     "client certificate (PEM chain) presented to Redis when it asks (tls-auth-clients); "
     "needs redis_tls_key_file"},
    {"redis_tls_key_file", CM_CFG_STR, S(tls_key_file), NULL, 0, 0,
     "private key of redis_tls_cert_file"},
    {"redis_tls_server_name", CM_CFG_STR, S(tls_server_name), NULL, 0, 0,
     "name Redis' certificate must carry (and SNI); unset: the certificate must carry "
     "the IP address connected to"},
    {"redis_cluster", CM_CFG_STR, S(cluster), NULL, 0, 0,
     "Redis Cluster seed nodes ip:port[,ip:port...] (IP addresses, no names); when set, "
     "redis_host/redis_port are "
     "unused and the slot map comes from CLUSTER SHARDS"},
    {"redis_timeout_ms", CM_CFG_INT, S(timeout_ms), "1000", 10, 60000,
     "deadline of one Redis command (and of a connect, at least 1 s)"},
};

size_t cm_redis_config_keys(cm_config_opt_t *out, size_t base)
{
    for (size_t i = 0; i < CM_REDIS_CONFIG_NKEYS; i++) {
        out[i] = keys[i];
        out[i].offset += base;
    }
    return CM_REDIS_CONFIG_NKEYS;
}

static void forget(char *secret)
{
    if (secret != NULL) {
        memset(secret, 0, strlen(secret));
        free(secret);
    }
}

cm_redis_t *cm_redis_config_open(struct event_base *base, const cm_redis_config_t *c, char *err,
                                 size_t errlen)
{
    char *password = NULL;
    if (c->password_file != NULL) {
        password = cm_config_read_secret("redis_password_file", c->password_file, 1, 4096, NULL,
                                         err, errlen);
        if (password == NULL)
            return NULL;
    }
    cm_tls_ctx_t *tls = NULL;
    if (c->tls) {
        char why[300];
        tls = cm_tls_client_new_cert(c->tls_ca_file, c->tls_cert_file, c->tls_key_file, why,
                                     sizeof(why));
        if (tls == NULL) {
            snprintf(err, errlen, "redis_tls: %s", why);
            forget(password);
            return NULL;
        }
    }
    cm_redis_auth_t auth = {c->user, password, tls, c->tls_server_name};
    cm_redis_t *r =
        cm_redis_open(base, c->host, (int)c->port, c->cluster, (int)c->timeout_ms, &auth);
    cm_tls_free(tls); /* cm_redis holds its own reference */
    forget(password); /* and its own copy */
    if (r == NULL)
        snprintf(err, errlen, "redis_cluster: expected ip:port[,ip:port...]");
    return r;
}
