/*
 * gw_config — the gateway's configuration: one struct, one table (gw_config.c).
 * Loaded at start-up by cm_config (file → ONSALE_GATEWAY_* env → argv) and again on
 * SIGHUP (cm_reload_config: gw_config_live names what changes without a restart).
 */
#ifndef GW_CONFIG_H
#define GW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_config.h"
#include "cm_redis_config.h"
#include "cm_server_config.h"

typedef struct gw_config {
    cm_server_config_t server; /* the keys every server shares (cm_server_config) */
    cm_redis_config_t redis;   /* redis_* keys (cm_redis_config) */
    char *signing_keys;
    char *ticket_secret_file;
    int64_t ticket_max_age_s;
    char *code_secret_file;         /* presale codes' HMAC secret (gw_code.h); NULL: no codes */
    int64_t code_tries_per_block;   /* joins with a code per minute from one /24 or /64 */
    int64_t code_failures_per_min;  /* unknown codes per minute, all addresses, per gateway */
    char *enqueue_keys_file;        /* the sale site's keys (gw_enqueue.h); NULL: no tokens */
    char *enqueue_audience;         /* the aud an enqueue token must carry */
    char *enqueue_issuer;           /* the iss it must carry; NULL: any */
    int64_t enqueue_max_lifetime_s; /* exp - iat at most */
    char *admin_token_file;
    char *page_languages_dir; /* the queue page's extra languages (gw_lang.h); NULL: none */
    char *issuer;
    char *reserve_url;
    bool allow_loopback_http;
    bool dpop_new_rooms; /* "dpop" of a room created or replaced by a PUT that does not say */
    int64_t join_rate_per_ip;
    int64_t join_burst_per_ip;
    int64_t join_batch_us, join_batch_max;
    int64_t rate_limit_table_size;
    bool pow_new_rooms;
    int64_t pow_base_bits, pow_max_bits, pow_ttl_s, pow_window_s;
    int64_t pow_block_free_per_min, pow_total_free_per_min, pow_table_size;
    int64_t tick_ms;
    int64_t signer_threads;
    int64_t signer_queue;
    int64_t admission_cache_size;
    int64_t poll_min_ms;
    int64_t poll_max_ms;
    int64_t history_interval_ms;
    int64_t history_samples;
    char *log_level;
    char *log_format;
    bool access_log;
} gw_config_t;

/** The whole table (the shared server keys first, then the gateway's own); n: its length.
 * Start-up, main thread (the first call builds it). */
const cm_config_opt_t *gw_config_table(size_t *n);

/** Keys a SIGHUP applies live (NULL-terminated); any other change needs a restart. */
extern const char *const gw_config_live[];

/** Keys whose value is a secret, shown as "***" by GET /admin/config (NULL-terminated). */
extern const char *const gw_config_secret[];

/**
 * The checks that span keys or need the files the keys name: log_level known,
 * poll_min_ms <= poll_max_ms, reserve_url allowed, signing_keys / ticket_secret_file /
 * admin_token_file set, each named file readable (owner-only) and each signing key a
 * P-256 private key. Reads files (start-up, --check-config, the reload thread). 0 or
 * -1 + err. cfg is a const gw_config_t * (void for cm_reload_config_spec_t.check).
 */
int gw_config_check(const void *cfg, char *err, size_t errlen);

#define GW_ENV_PREFIX "ONSALE_GATEWAY_"

#endif
