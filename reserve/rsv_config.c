/*
 * rsv_config — every key the reserve reads, with its default, bounds and meaning.
 * Defaults live only here; deploy/reserve.conf.example mirrors this table.
 */
#include "rsv_config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_jwt.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_reload.h"
#include "rsv_cors.h"
#include "rsv_outbox.h"
#include "rsv_webhook.h"

#define S(f) offsetof(rsv_config_t, f)

static const cm_config_opt_t own[] = {
    {"pg_conninfo", CM_CFG_STR, S(pg_conninfo),
     "host=127.0.0.1 port=5432 dbname=onsale user=onsale", 0, 0,
     "libpq connection string of the system of record (no password in it: see "
     "pg_password_file); host names in host= are looked up without blocking, again on "
     "every connect"},
    {"pg_password_file", CM_CFG_STR, S(pg_password_file), NULL, 0, 0,
     "file holding the Postgres password (scram-sha-256), readable by its owner only; "
     "added to pg_conninfo"},
    {"pg_pool_size", CM_CFG_INT, S(pg_pool_size), "24", 1, 256,
     "Postgres connections (all workers together; more connections let commits share WAL "
     "flushes)"},
    {"pg_read_pool_size", CM_CFG_INT, S(pg_read_pool_size), "4", 1, 64,
     "Postgres connections of their own for reads (all workers together; event catalogue, seeding, "
     "checkout "
     "views), so they never queue ahead of confirmations"},
    {"pg_timeout_ms", CM_CFG_INT, S(pg_timeout_ms), "5000", 100, 600000,
     "deadline of one Postgres statement, queueing included"},
    {"pg_max_queue", CM_CFG_INT, S(pg_max_queue), "10000", 1, 1000000,
     "statements waiting for a connection before new ones get 503"},
    {"admission_keys", CM_CFG_STR, S(admission_keys), NULL, 0, 0,
     "file with the gateway's admission public keys: a JWKS document or PEM keys"},
    {"admin_token_file", CM_CFG_STR, S(admin_token_file), NULL, 0, 0,
     "file holding the operators' bearer token"},
    {"token_leeway_s", CM_CFG_INT, S(token_leeway_s), "5", 0, 300,
     "clock skew allowed on admission token exp and nbf"},
    {"token_cache_size", CM_CFG_INT, S(token_cache_size), "65536", 16, 10000000,
     "verified admission tokens remembered (one signature check per buyer)"},
    {"verify_threads", CM_CFG_INT, S(verify_threads), "2", 0, 16,
     "threads verifying new admission tokens off the event loops (all workers together; "
     "0 = on each loop)"},
    {"token_records", CM_CFG_BOOL, S(token_records), "true", 0, 0,
     "a buyer's first hold needs no signature check when Redis holds the record the "
     "gateway wrote of that exact token (docs/tokens.md); false = verify every new token"},
    {"token_issuer", CM_CFG_STR, S(token_issuer), "onsale-gateway", 0, 0,
     "iss every admission token must carry (the gateway's issuer); empty = not checked"},
    {"public_origin", CM_CFG_STR, S(public_origin), NULL, 0, 0,
     "scheme://host[:port] buyers reach this reserve at, the origin a DPoP proof's htu must "
     "name for a bound admission token; empty = https:// (http:// with plain_http) and the "
     "request's Host header"},
    {"token_max_lifetime_s", CM_CFG_INT, S(token_max_lifetime_s), "86400", 0, 31536000,
     "longest admission token accepted (exp - iat); 0 = unlimited"},
    {"verify_max_queue", CM_CFG_INT, S(verify_max_queue), "4096", 1, 1000000,
     "new tokens waiting for a verification thread before new ones get 503"},
    {"auth_fail_limit", CM_CFG_INT, S(auth_fail_limit), "50", 0, 1000000,
     "tokens failing the signature check per address per window before 429 (0 = no limit)"},
    {"auth_fail_window_s", CM_CFG_INT, S(auth_fail_window_s), "10", 1, 3600,
     "the window of auth_fail_limit, and the Retry-After of its 429"},
    {"avail_max_age_ms", CM_CFG_INT, S(avail_max_age_ms), "1000", 0, 60000,
     "how stale the availability and seat map answers may be, and how long a worker "
     "believes a seat or pool it saw sold out (a hold for it is answered 409 without a "
     "script; 0: never)"},
    {"stock_interval_ms", CM_CFG_INT, S(stock_interval_ms), "500", 0, 60000,
     "how often each live event's stock (units left, held, total) is rebuilt and published "
     "to Redis for the gateway, os:{<event>}:stock (0 = no feed)"},
    {"stock_idle_s", CM_CFG_INT, S(stock_idle_s), "900", 1, 86400,
     "an event without a hold, confirm, release or availability request this long stops "
     "being published once it has no unit held"},
    {"catalog_refresh_ms", CM_CFG_INT, S(catalog_refresh_ms), "2000", 100, 600000,
     "how often a cached event is re-checked against Postgres"},
    {"checkout_lease_s", CM_CFG_INT, S(checkout_lease_s), "30", 1, 3600,
     "how long one request owns a checkout before a retry may take it over"},
    {"hold_record_keep_s", CM_CFG_INT, S(hold_record_keep_s), "3600", 60, 604800,
     "how long an expired hold is remembered (to answer hold_expired, not unknown_hold)"},
    {"log_level", CM_CFG_STR, S(log_level), "info", 0, 0, "debug, info, warn or error"},
    {"log_format", CM_CFG_STR, S(log_format), "text", 0, 0,
     "text, or json: one JSON object per line (time, level, program, pid, thread, "
     "request_id, message)"},
    {"access_log", CM_CFG_BOOL, S(access_log), "true", 0, 0,
     "one log line per answered request: method, route, status, microseconds, bytes, peer"},
    {"paysim_url", CM_CFG_STR, S(paysim_url), "https://127.0.0.1:8445", 0, 0,
     "payment provider base URL: https://<host name or IPv4>[:port][/prefix] (names are "
     "resolved off the event loop; plain http:// only to a loopback address, with "
     "allow_loopback_http)"},
    {"allow_loopback_http", CM_CFG_BOOL, S(allow_loopback_http), "false", 0, 0,
     "accept a plain http:// paysim_url when its host is loopback (127.0.0.0/8); any "
     "other host always needs https://"},
    {"pay_return_url", CM_CFG_STR, S(pay_return_url), NULL, 0, 0,
     "where the provider's 3-D Secure page sends the buyer back (the storefront); unset = "
     "public_origin + /shop/ (https://localhost/shop/ without public_origin)"},
    {"paysim_ca", CM_CFG_STR, S(paysim_ca), NULL, 0, 0,
     "PEM CA bundle that signed the provider's certificate (unset: the system store)"},
    {"paysim_api_key", CM_CFG_STR, S(paysim_api_key), NULL, 0, 0,
     "provider secret key, sent as Authorization: Bearer (unset: none); prefer "
     "paysim_api_key_file, which keeps it out of the configuration"},
    {"paysim_api_key_file", CM_CFG_STR, S(paysim_api_key_file), NULL, 0, 0,
     "file holding the provider secret key (owner-only, chmod 600; or credential:NAME "
     "under systemd), re-read on SIGHUP; excludes paysim_api_key"},
    {"pay_webhook_secrets_file", CM_CFG_STR, S(pay_webhook_secrets_file), NULL, 0, 0,
     "file of the provider's webhook signing secrets, one a line (owner-only; or "
     "credential:NAME), any of them verifies, re-read on SIGHUP; unset: POST "
     "/v1/provider/webhook answers 404"},
    {"pay_webhook_tolerance_s", CM_CFG_INT, S(pay_webhook_tolerance_s), "300", 1, 86400,
     "a provider webhook signed further than this from now is refused as a replay"},
    {"pay_connect_timeout_ms", CM_CFG_INT, S(pay_connect_timeout_ms), "1000", 10, 60000,
     "deadline for the connection to the provider (DNS, TCP and TLS handshake)"},
    {"pay_timeout_ms", CM_CFG_INT, S(pay_timeout_ms), "10000", 100, 600000,
     "deadline of one provider call; past it the outcome is unknown (202 pending)"},
    {"reconcile_interval_ms", CM_CFG_INT, S(reconcile_interval_ms), "1000", 50, 600000,
     "how often the reconciler looks for open checkouts"},
    {"reconcile_after_s", CM_CFG_INT, S(reconcile_after_s), "30", 0, 86400,
     "an open checkout untouched this long (and unleased) is finished by the reconciler"},
    {"reconcile_batch", CM_CFG_INT, S(reconcile_batch), "32", 1, 10000,
     "checkouts the reconciler drives at once"},
    {"book_max_attempts", CM_CFG_INT, S(book_max_attempts), "5", 1, 1000,
     "failed booking inserts (not conflicts) before a paid checkout is refunded instead"},
    {"ledger_interval_ms", CM_CFG_INT, S(ledger_interval_ms), "30000", 0, 3600000,
     "how often the provider's charge ledger is checked for unbooked money (0 = never)"},
    {"ledger_window_s", CM_CFG_INT, S(ledger_window_s), "86400", 60, 31536000,
     "how far back the first ledger check after start looks"},
    {"ledger_settle_s", CM_CFG_INT, S(ledger_settle_s), "600", 0, 86400,
     "a charge whose checkout is still open this long after it is logged for an operator "
     "(it is checked again on every ledger check until its checkout settles)"},
    {"fault", CM_CFG_STR, S(fault), NULL, 0, 0,
     "tests only: after:<state>|before:<state>|office:<step>[,...] SIGKILLs the process at "
     "that step"},
    {"cors_origins", CM_CFG_STR, S(cors_origins), "", 0, 0,
     "storefront origins allowed to call the buyer API from a browser (CORS): "
     "https://host[:port], separated by commas; no wildcard"},
    {"shop_queue_url", CM_CFG_STR, S(shop_queue_url), "", 0, 0,
     "waiting-room page the storefront sends a fan back to; {event} is replaced by the "
     "event id (empty: no link)"},
    {"events_url", CM_CFG_STR, S(events_url), NULL, 0, 0,
     "where events out (booking.confirmed, checkout.refunded, room.*) are POSTed, signed: "
     "https://…, plain http:// only to loopback with allow_loopback_http (unset: events are "
     "kept in the outbox table and sent once it is set)"},
    {"events_ca", CM_CFG_STR, S(events_ca), NULL, 0, 0,
     "PEM CA bundle that signed the events receiver's certificate (unset: the system store)"},
    {"events_secret_file", CM_CFG_STR, S(events_secret_file), NULL, 0, 0,
     "file of the events' signing secrets, one a line (at least 16 bytes each), readable by "
     "its owner only: the first signs; reloaded on SIGHUP"},
    {"events_connect_timeout_ms", CM_CFG_INT, S(events_connect_timeout_ms), "2000", 10, 60000,
     "deadline for the connection to the events receiver"},
    {"events_timeout_ms", CM_CFG_INT, S(events_timeout_ms), "10000", 100, 600000,
     "deadline of one delivery; past it the event is retried"},
    {"events_poll_ms", CM_CFG_INT, S(events_poll_ms), "500", 10, 600000,
     "how often the outbox is looked at for due events"},
    {"events_batch", CM_CFG_INT, S(events_batch), "32", 1, 1000,
     "deliveries in flight at most (one per key: a key's next event waits for its last)"},
    {"events_retry_base_ms", CM_CFG_INT, S(events_retry_base_ms), "1000", 10, 3600000,
     "delay before the first retry of a failed delivery, doubled each attempt (jittered)"},
    {"events_retry_max_ms", CM_CFG_INT, S(events_retry_max_ms), "300000", 10, 86400000,
     "the longest delay between two attempts of one event"},
    {"events_retention_hours", CM_CFG_INT, S(events_retention_hours), "168", 1, 87600,
     "how long a delivered event stays in the outbox table (undelivered ones are never "
     "removed)"},
};

const cm_config_opt_t *rsv_config_table(size_t *n)
{
    static const cm_server_config_defaults_t d = {
        .port = "8444",
        .admin_listen = "127.0.0.1:8464",
        .max_connections = "4096",
        .max_body_bytes = "65536",
        .idle_timeout_s = "30",
        .http_engine = "h1",
    };
    static cm_config_opt_t
        table[CM_SERVER_CONFIG_NKEYS + CM_REDIS_CONFIG_NKEYS + sizeof(own) / sizeof(own[0])];
    *n = cm_server_config_table(table, S(server), &d, S(redis), own, sizeof(own) / sizeof(own[0]));
    return table;
}

int rsv_config_add_pg_password(rsv_config_t *cfg, char *err, size_t errlen)
{
    if (cfg->pg_password_file == NULL)
        return 0;
    if (strstr(cfg->pg_conninfo, "password") != NULL) {
        snprintf(err, errlen, "pg_conninfo must not hold a password when pg_password_file is set");
        return -1;
    }
    size_t n = 0;
    char *pw =
        cm_config_read_secret("pg_password_file", cfg->pg_password_file, 1, 1024, &n, err, errlen);
    if (pw == NULL)
        return -1;
    /* libpq conninfo value: single-quoted, with \ and ' escaped by a backslash */
    size_t base = strlen(cfg->pg_conninfo), cap = base + 2 * n + 16;
    char *ci = cm_xmalloc(cap);
    size_t o = (size_t)snprintf(ci, cap, "%s password='", cfg->pg_conninfo);
    for (size_t i = 0; i < n; i++) {
        if (pw[i] == '\\' || pw[i] == '\'')
            ci[o++] = '\\';
        ci[o++] = pw[i];
    }
    ci[o++] = '\'';
    ci[o] = '\0';
    memset(pw, 0, n);
    free(pw);
    free(cfg->pg_conninfo);
    cfg->pg_conninfo = ci;
    return 0;
}

/* public_origin: unset, or a scheme and an authority with nothing after it. */
static bool origin_ok(const char *o)
{
    if (o == NULL || o[0] == '\0')
        return true;
    const char *auth = strncmp(o, "https://", 8) == 0  ? o + 8
                       : strncmp(o, "http://", 7) == 0 ? o + 7
                                                       : NULL;
    return auth != NULL && auth[0] != '\0' && strpbrk(auth, "/?#@ ") == NULL;
}

int rsv_config_check(const rsv_config_t *cfg, char *err, size_t errlen)
{
    if (!origin_ok(cfg->public_origin)) {
        snprintf(err, errlen, "public_origin must be http(s)://host[:port], no path: %s",
                 cfg->public_origin);
        return -1;
    }
    /* A checkout's lease must outlast its charge with room to record the answer: a charge
     * is two provider calls (create, then confirm: rsv_pay_stripe.c), each with its own
     * pay_timeout_ms, and a lease that lapses mid-charge lets the reconciler drive the same
     * checkout while the charge is still out (docs/hold-ttl.md). */
    int64_t need_ms = 2 * cfg->pay_timeout_ms + RSV_LEASE_MARGIN_MS;
    if (cfg->checkout_lease_s * 1000 < need_ms) {
        snprintf(err, errlen,
                 "checkout_lease_s (%lld s) must be at least 2 x pay_timeout_ms + %d ms (%lld "
                 "ms): a charge is two provider calls, and a shorter lease lets the reconciler "
                 "take a checkout in the middle of its charge",
                 (long long)cfg->checkout_lease_s, RSV_LEASE_MARGIN_MS, (long long)need_ms);
        return -1;
    }
    return 0;
}

/* The TLS certificate's and the admission keys' contents are re-read by their own hooks
 * (cm_tls, rsv_auth); a new path in tls_cert, tls_key or admission_keys is a restart.
 * docs/operations.md has the table. */
const char *const rsv_config_live[] = {"log_level",           "log_format",
                                       "access_log",          "admin_token_file",
                                       "cors_origins",        "paysim_api_key",
                                       "paysim_api_key_file", "pay_webhook_secrets_file",
                                       "events_secret_file",  NULL};

const char *const rsv_config_secret[] = {"paysim_api_key", NULL};

static int check_readable(const char *key, const char *path, size_t min, char *err, size_t errlen)
{
    char *s = cm_config_read_secret(key, path, min, 4096, NULL, err, errlen);
    if (s == NULL)
        return -1;
    explicit_bzero(s, strlen(s));
    free(s);
    return 0;
}

/* A provider key is a single line of printable ASCII (a Stripe key is sk_live_…): a
 * control character or a space would break, or forge, the Authorization header. */
static bool pay_key_ok(const char *k)
{
    for (; *k; k++)
        if ((unsigned char)*k <= 0x20 || (unsigned char)*k >= 0x7f)
            return false;
    return true;
}

char *rsv_config_pay_key(const rsv_config_t *cfg, char *err, size_t errlen)
{
    const char *file = cfg->paysim_api_key_file;
    if (file != NULL && cfg->paysim_api_key != NULL) {
        snprintf(err, errlen,
                 "paysim_api_key and paysim_api_key_file are both set: keep one "
                 "(the file)");
        return NULL;
    }
    char *key = file == NULL ? cm_xstrdup(cfg->paysim_api_key ? cfg->paysim_api_key : "")
                             : cm_config_read_secret("paysim_api_key_file", file, 8, 1024, NULL,
                                                     err, errlen);
    if (key != NULL && !pay_key_ok(key)) {
        snprintf(err, errlen,
                 "%s: the provider key must be one line of printable characters without spaces",
                 file ? file : "paysim_api_key");
        cm_reload_free_secret(key, NULL);
        return NULL;
    }
    return key;
}

/* The files the keys name: each one read and parsed as start-up would. */
static int check_files(const rsv_config_t *cfg, char *err, size_t errlen)
{
    if (check_readable("admin_token_file", cfg->admin_token_file, 16, err, errlen) != 0)
        return -1;
    char *key = rsv_config_pay_key(cfg, err, errlen);
    if (key == NULL)
        return -1;
    cm_reload_free_secret(key, NULL);
    rsv_webhook_secrets_t *hooks =
        rsv_webhook_secrets_load(cfg->pay_webhook_secrets_file, err, errlen);
    if (hooks == NULL)
        return -1;
    rsv_webhook_secrets_free(hooks, NULL);
    if (cfg->pg_password_file != NULL) {
        if (cfg->pg_conninfo != NULL && strstr(cfg->pg_conninfo, "password") != NULL) {
            snprintf(err, errlen,
                     "pg_conninfo must not hold a password when pg_password_file is set");
            return -1;
        }
        if (check_readable("pg_password_file", cfg->pg_password_file, 1, err, errlen) != 0)
            return -1;
    }
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    int rc = cm_jwt_keyset_load_file(ks, cfg->admission_keys, err, errlen);
    cm_jwt_keyset_free(ks);
    if (rc != 0)
        return -1;
    rsv_cors_t *cors = rsv_cors_new(cfg->cors_origins, err, errlen);
    if (cors == NULL)
        return -1;
    rsv_cors_free(cors);
    return 0;
}

int rsv_config_validate(const void *p, char *err, size_t errlen)
{
    const rsv_config_t *cfg = p;
    cm_log_level_t level;
    cm_log_format_t format;
    if (cm_log_settings_parse(cfg->log_level, cfg->log_format, &level, &format, err, errlen) != 0)
        return -1;
    if (!cm_parse_url_allowed(cfg->paysim_url, cfg->allow_loopback_http, NULL)) {
        snprintf(err, errlen,
                 "paysim_url must be an https:// URL (plain http:// only to a "
                 "loopback address, with allow_loopback_http)");
        return -1;
    }
    if (rsv_config_check(cfg, err, errlen) != 0)
        return -1;
    if (cfg->events_url != NULL && cfg->events_url[0] != '\0') {
        if (!cm_parse_url_allowed(cfg->events_url, cfg->allow_loopback_http, NULL)) {
            snprintf(err, errlen,
                     "events_url must be an https:// URL (plain http:// only to a loopback "
                     "address, with allow_loopback_http)");
            return -1;
        }
        rsv_outbox_secrets_t *sec =
            cfg->events_secret_file ? rsv_outbox_secrets_read(cfg->events_secret_file, err, errlen)
                                    : NULL;
        if (sec == NULL) {
            if (cfg->events_secret_file == NULL)
                snprintf(err, errlen, "events_url needs events_secret_file");
            return -1;
        }
        rsv_outbox_secrets_free(sec);
    }
    if (cfg->admission_keys == NULL || cfg->admin_token_file == NULL) {
        snprintf(err, errlen, "admission_keys and admin_token_file must be set");
        return -1;
    }
    return check_files(cfg, err, errlen);
}
