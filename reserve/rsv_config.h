/*
 * rsv_config — the reserve's configuration: one struct, one table (rsv_config.c).
 * Loaded at start-up by cm_config (file → ONSALE_RESERVE_* env → argv) and again on
 * SIGHUP (cm_reload_config: rsv_config_live names what changes without a restart).
 */
#ifndef RSV_CONFIG_H
#define RSV_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_config.h"
#include "cm_redis_config.h"
#include "cm_server_config.h"

typedef struct rsv_config {
    cm_server_config_t server; /* the keys every server shares (cm_server_config) */
    cm_redis_config_t redis;   /* redis_* keys (cm_redis_config) */
    char *pg_conninfo;
    char *pg_password_file;
    int64_t pg_pool_size;
    int64_t pg_read_pool_size;
    int64_t pg_timeout_ms;
    int64_t pg_max_queue;
    char *admission_keys;
    char *admin_token_file;
    int64_t token_leeway_s;
    int64_t token_cache_size;
    int64_t verify_threads;
    bool token_records;
    char *token_issuer;
    char *public_origin; /* NULL/"": the Host header (rsv_auth's DPoP htu) */
    int64_t token_max_lifetime_s;
    int64_t verify_max_queue;
    int64_t auth_fail_limit;
    int64_t auth_fail_window_s;
    int64_t avail_max_age_ms;
    int64_t stock_interval_ms;
    int64_t stock_idle_s;
    int64_t catalog_refresh_ms;
    int64_t checkout_lease_s;
    int64_t hold_record_keep_s;
    char *log_level;
    char *log_format;
    bool access_log;
    char *paysim_url;
    bool allow_loopback_http;
    char *paysim_ca;
    char *pay_return_url; /* NULL: public_origin + /shop/ */
    char *paysim_api_key;
    char *paysim_api_key_file;
    char *pay_webhook_secrets_file;
    int64_t pay_webhook_tolerance_s;
    int64_t pay_connect_timeout_ms;
    int64_t pay_timeout_ms;
    int64_t reconcile_interval_ms;
    int64_t reconcile_after_s;
    int64_t reconcile_batch;
    int64_t book_max_attempts;
    int64_t ledger_interval_ms;
    int64_t ledger_window_s;
    int64_t ledger_settle_s;
    char *fault;
    char *cors_origins;
    char *shop_queue_url;
    char *events_url; /* events out (rsv_outbox); NULL/"": kept, not sent */
    char *events_ca;
    char *events_secret_file;
    int64_t events_connect_timeout_ms;
    int64_t events_timeout_ms;
    int64_t events_poll_ms;
    int64_t events_batch;
    int64_t events_retry_base_ms;
    int64_t events_retry_max_ms;
    int64_t events_retention_hours;
} rsv_config_t;

/**
 * Start-up: when pg_password_file is set, reads it (cm_config_read_secret) and appends
 * password='…' (quoted for libpq) to cfg->pg_conninfo, which must not hold a password
 * of its own. 0, or -1 with a message.
 */
int rsv_config_add_pg_password(rsv_config_t *cfg, char *err, size_t errlen);

/**
 * The provider's secret key in force: the contents of paysim_api_key_file when it is set
 * (cm_config_read_secret: owner-only, trimmed), else paysim_api_key, else "" (none).
 * Reads a file (start-up, the reload thread). A new heap string the caller wipes and
 * frees (cm_reload_free_secret), or NULL with a message.
 */
char *rsv_config_pay_key(const rsv_config_t *cfg, char *err, size_t errlen);

/** How much longer than pay_timeout_ms a checkout's lease must be (rsv_config_check). */
#define RSV_LEASE_MARGIN_MS 5000

/**
 * Start-up: the checks that span several keys (each key's own bounds are in the table):
 * checkout_lease_s must exceed twice pay_timeout_ms (a charge's two provider calls) by
 * RSV_LEASE_MARGIN_MS. 0, or -1 with a
 * message naming the keys.
 */
int rsv_config_check(const rsv_config_t *cfg, char *err, size_t errlen);

/** Keys a SIGHUP applies live (NULL-terminated); any other change needs a restart. */
extern const char *const rsv_config_live[];

/** Keys whose value is a secret, shown as "***" by GET /admin/config (NULL-terminated). */
extern const char *const rsv_config_secret[];

/**
 * Everything start-up checks short of sockets and backends: log_level known,
 * paysim_url allowed, rsv_config_check, admission_keys and admin_token_file set, the
 * admin token, pg_password_file and paysim_api_key_file readable (owner-only; the key
 * inline and in a file both set is refused), the admission keys and the
 * CORS origins parsed. Reads files (start-up, --check-config, the reload thread). 0 or
 * -1 + err. cfg is a const rsv_config_t * (void for cm_reload_config_spec_t.check).
 */
int rsv_config_validate(const void *cfg, char *err, size_t errlen);

/** The whole table (the shared server keys first, then the reserve's own); n: its length.
 * Start-up, main thread (the first call builds it). */
const cm_config_opt_t *rsv_config_table(size_t *n);

#define RSV_ENV_PREFIX "ONSALE_RESERVE_"

#endif
