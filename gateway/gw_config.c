/*
 * gw_config — every key the gateway reads, with its default, bounds and meaning.
 * Defaults live only here; deploy/gateway.conf.example mirrors this table.
 */
#include "gw_config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_jwt.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "gw_lang.h"
#include "gw_enqueue.h"
#include "gw_ticket.h"

#define S(f) offsetof(gw_config_t, f)

static const cm_config_opt_t own[] = {
    {"signing_keys", CM_CFG_STR, S(signing_keys), NULL, 0, 0,
     "comma-separated EC P-256 private key PEM files (owner-only: chmod 600); the last signs, all "
     "are published "
     "in the JWKS (rotate: append a new key, drop an old one after admission_ttl)"},
    {"ticket_secret_file", CM_CFG_STR, S(ticket_secret_file), NULL, 0, 0,
     "comma-separated files each holding a queue-ticket HMAC secret (at least 32 "
     "characters, owner-only mode; the same list on every gateway): the last signs, all "
     "verify (rotate: append a new one, drop the oldest after ticket_max_age_s)"},
    {"ticket_max_age_s", CM_CFG_INT, S(ticket_max_age_s), "604800", 60, 31536000,
     "oldest queue ticket accepted, in seconds since it was issued (older: 401 "
     "invalid_ticket, the fan joins again)"},
    {"code_secret_file", CM_CFG_STR, S(code_secret_file), NULL, 0, 0,
     "file holding the presale codes' HMAC secret (at least 32 characters, owner-only mode; "
     "the same on every gateway): codes are derived from it, so a new secret voids every "
     "code issued; unset, rooms take no codes"},
    {"code_tries_per_block", CM_CFG_INT, S(code_tries_per_block), "30", 1, 1000000,
     "joins with a presale code per minute from one /24 (IPv4) or /64 (IPv6) address "
     "block; more are 429 rate_limited"},
    {"code_failures_per_min", CM_CFG_INT, S(code_failures_per_min), "6000", 1, 100000000,
     "unknown presale codes per minute this gateway answers, all addresses together; past "
     "it every code is 429 rate_limited until the minute's budget refills (guessing)"},
    {"enqueue_keys_file", CM_CFG_STR, S(enqueue_keys_file), NULL, 0, 0,
     "the sale site's public keys for enqueue tokens (a JWKS document or PEM keys, EC P-256): "
     "customers it sends with a token it signed get one place each (docs/api.md); unset, "
     "joins take no enqueue token and no room can be invite_only"},
    {"enqueue_audience", CM_CFG_STR, S(enqueue_audience), "onsale-gateway", 0, 0,
     "the aud an enqueue token must carry"},
    {"enqueue_issuer", CM_CFG_STR, S(enqueue_issuer), NULL, 0, 0,
     "the iss an enqueue token must carry (unset: any; the keys decide)"},
    {"enqueue_max_lifetime_s", CM_CFG_INT, S(enqueue_max_lifetime_s), "900", 10, 86400,
     "longest life (exp - iat, seconds) of an enqueue token the gateway accepts"},
    {"admin_token_file", CM_CFG_STR, S(admin_token_file), NULL, 0, 0,
     "file holding the operators' bearer token"},
    {"page_languages_dir", CM_CFG_STR, S(page_languages_dir), NULL, 0, 0,
     "directory of the queue page's extra languages, one <tag>.json per language (\"pt-br.json\"; "
     "en, de, fr and es are built in, and a file of theirs rewords them); checked at start "
     "and on reload (docs/operations.md, \"The queue page\")"},
    {"issuer", CM_CFG_STR, S(issuer), "onsale-gateway", 0, 0, "iss claim of admission tokens"},
    {"reserve_url", CM_CFG_STR, S(reserve_url), "https://127.0.0.1:8444", 0, 0,
     "where admitted fans go when a room sets no redirect_url (https; see "
     "allow_loopback_http)"},
    {"allow_loopback_http", CM_CFG_BOOL, S(allow_loopback_http), "false", 0, 0,
     "accept plain http:// for reserve_url and rooms' redirect_url when the host is "
     "loopback (127.0.0.0/8, localhost, [::1]); any other host always needs https://"},
    {"dpop_new_rooms", CM_CFG_BOOL, S(dpop_new_rooms), "true", 0, 0,
     "the \"dpop\" setting of a room whose PUT does not name it: true binds its tickets to "
     "the joining browser's key (docs/api.md, DPoP)"},
    {"join_rate_per_ip", CM_CFG_INT, S(join_rate_per_ip), "600", 0, 1000000,
     "new joins per minute from one client address, an IPv6 one by its /64 (0 = unlimited; "
     "joins with a valid proof of work are not counted)"},
    {"join_burst_per_ip", CM_CFG_INT, S(join_burst_per_ip), "200", 1, 1000000,
     "joins one client address may make at once before join_rate_per_ip applies (a "
     "carrier-grade NAT address serves 60 to over 100 subscribers)"},
    {"join_batch_us", CM_CFG_INT, S(join_batch_us), "1000", 0, 1000000,
     "longest a new join waits, in microseconds, for the others of its room on the same "
     "worker while the room's previous batch is in Redis: each batch is numbered by one "
     "Redis script (0 = one script per join)"},
    {"join_batch_max", CM_CFG_INT, S(join_batch_max), "256", 1, 1024,
     "joins that send their batch at once, before its window ends"},
    {"rate_limit_table_size", CM_CFG_INT, S(rate_limit_table_size), "65536", 16, 10000000,
     "client addresses tracked by the join limit (idle ones are forgotten first)"},
    {"pow_new_rooms", CM_CFG_BOOL, S(pow_new_rooms), "true", 0, 0,
     "rooms created (PUT) without a \"pow\" setting ask for a proof of work on join"},
    {"pow_base_bits", CM_CFG_INT, S(pow_base_bits), "16", 0, 32,
     "proof-of-work difficulty (leading zero bits) of a quiet address block"},
    {"pow_max_bits", CM_CFG_INT, S(pow_max_bits), "24", 0, 32,
     "highest proof-of-work difficulty the rates can raise a challenge to"},
    {"pow_ttl_s", CM_CFG_INT, S(pow_ttl_s), "120", 10, 3600,
     "seconds a proof-of-work challenge may be solved and used in"},
    {"pow_window_s", CM_CFG_INT, S(pow_window_s), "60", 1, 3600,
     "time constant of the rates the difficulty follows (how fast it falls back)"},
    {"pow_block_free_per_min", CM_CFG_INT, S(pow_block_free_per_min), "30", 0, 100000000,
     "challenges per minute one /24 or /64 gets at base difficulty; each doubling past it "
     "adds a bit (0 = no rise)"},
    {"pow_total_free_per_min", CM_CFG_INT, S(pow_total_free_per_min), "6000", 0, 100000000,
     "joins per minute this gateway takes at base difficulty; each doubling past it adds a "
     "bit for everyone (0 = no rise)"},
    {"pow_table_size", CM_CFG_INT, S(pow_table_size), "65536", 16, 10000000,
     "address blocks the proof-of-work rates track (the longest idle is forgotten first)"},
    {"tick_ms", CM_CFG_INT, S(tick_ms), "200", 10, 250,
     "period of the watermark timer: advance in Redis and refresh the cached watermark"},
    {"signer_threads", CM_CFG_INT, S(signer_threads), "0", 0, 64,
     "threads that sign admission tokens off the event loops (all workers together, split "
     "over them); 0 = on each loop (cheapest)"},
    {"signer_queue", CM_CFG_INT, S(signer_queue), "20000", 16, 10000000,
     "admission tokens waiting to be signed before new admissions get 503"},
    {"admission_cache_size", CM_CFG_INT, S(admission_cache_size), "200000", 16, 100000000,
     "signed admission tokens kept in memory for repeated polls"},
    {"poll_min_ms", CM_CFG_INT, S(poll_min_ms), "1000", 100, 600000,
     "poll_after_ms told to fans at the front of the queue (one expected to be let in "
     "sooner is asked back just after that)"},
    {"poll_max_ms", CM_CFG_INT, S(poll_max_ms), "30000", 100, 3600000,
     "poll_after_ms told to fans far back in the queue"},
    {"history_interval_ms", CM_CFG_INT, S(history_interval_ms), "2000", 100, 600000,
     "how often each waiting room's live numbers are sampled for the dashboard's history"},
    {"history_samples", CM_CFG_INT, S(history_samples), "150", 10, 100000,
     "samples kept per waiting room (with the interval: the history's length)"},
    {"log_level", CM_CFG_STR, S(log_level), "info", 0, 0, "debug, info, warn or error"},
    {"log_format", CM_CFG_STR, S(log_format), "text", 0, 0,
     "text, or json: one JSON object per line (time, level, program, pid, thread, "
     "request_id, message)"},
    {"access_log", CM_CFG_BOOL, S(access_log), "true", 0, 0,
     "one log line per answered request: method, route, status, microseconds, bytes, peer"},
};

const cm_config_opt_t *gw_config_table(size_t *n)
{
    static const cm_server_config_defaults_t d = {
        .port = "8443",
        .admin_listen = "127.0.0.1:8463",
        .max_connections = "16384",
        .max_body_bytes = "16384",
        .idle_timeout_s = "60",
        .http_engine = "h1",
    };
    static cm_config_opt_t
        table[CM_SERVER_CONFIG_NKEYS + CM_REDIS_CONFIG_NKEYS + sizeof(own) / sizeof(own[0])];
    *n = cm_server_config_table(table, S(server), &d, S(redis), own, sizeof(own) / sizeof(own[0]));
    return table;
}

/* The TLS certificate and key files' contents are re-read by cm_tls's own hook; a new
 * path in tls_cert/tls_key is a restart. docs/operations.md has the table. */
const char *const gw_config_live[] = {"log_level",         "log_format",
                                      "access_log",        "admin_token_file",
                                      "join_rate_per_ip",  "join_burst_per_ip",
                                      "signing_keys",      "page_languages_dir",
                                      "enqueue_keys_file", NULL};

const char *const gw_config_secret[] = {NULL};

/* Each file of a comma-separated list through fn; 0 or -1 + err. */
static int each_file(const char *key, const char *list,
                     int (*fn)(const char *key, const char *path, char *err, size_t errlen),
                     char *err, size_t errlen)
{
    char *copy = cm_xstrdup(list), *save = NULL;
    int rc = 0, n = 0;
    for (char *p = strtok_r(copy, ",", &save); p != NULL && rc == 0;
         p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ')
            p++;
        size_t len = strlen(p);
        while (len > 0 && p[len - 1] == ' ')
            p[--len] = '\0';
        if (len == 0)
            continue;
        n++;
        rc = fn(key, p, err, errlen);
    }
    free(copy);
    if (rc == 0 && n == 0) {
        snprintf(err, errlen, "%s names no file", key);
        rc = -1;
    }
    return rc;
}

static int check_secret(const char *key, const char *path, char *err, size_t errlen)
{
    size_t min = strcmp(key, "ticket_secret_file") == 0 || strcmp(key, "code_secret_file") == 0
                     ? GW_TICKET_SECRET_MIN
                     : 16;
    char *s = cm_config_read_secret(key, path, min, 4096, NULL, err, errlen);
    if (s == NULL)
        return -1;
    explicit_bzero(s, strlen(s));
    free(s);
    return 0;
}

static int check_signing_key(const char *key, const char *path, char *err, size_t errlen)
{
    size_t len = 0;
    char *pem = cm_config_read_secret(key, path, 1, 65536, &len, err, errlen);
    if (pem == NULL)
        return -1;
    char why[256];
    cm_jwt_signer_t *s = cm_jwt_signer_new(NULL, pem, len, why, sizeof(why));
    explicit_bzero(pem, len);
    free(pem);
    if (s == NULL) {
        snprintf(err, errlen, "signing key %s: %s", path, why);
        return -1;
    }
    cm_jwt_signer_free(s);
    return 0;
}

int gw_config_check(const void *p, char *err, size_t errlen)
{
    const gw_config_t *cfg = p;
    cm_log_level_t level;
    cm_log_format_t format;
    if (cm_log_settings_parse(cfg->log_level, cfg->log_format, &level, &format, err, errlen) != 0)
        return -1;
    if (cfg->poll_min_ms > cfg->poll_max_ms) {
        snprintf(err, errlen, "poll_min_ms must not exceed poll_max_ms");
        return -1;
    }
    if (!cm_parse_url_allowed(cfg->reserve_url, cfg->allow_loopback_http, NULL)) {
        snprintf(err, errlen,
                 "reserve_url must be an https:// URL without user info or #fragment (plain "
                 "http:// only to a loopback host, with allow_loopback_http)");
        return -1;
    }
    if (cfg->signing_keys == NULL || cfg->ticket_secret_file == NULL ||
        cfg->admin_token_file == NULL) {
        snprintf(err, errlen, "signing_keys, ticket_secret_file and admin_token_file must be set");
        return -1;
    }
    if (check_secret("admin_token_file", cfg->admin_token_file, err, errlen) != 0)
        return -1;
    gw_langs_t *langs = gw_langs_load(cfg->page_languages_dir, err, errlen);
    if (langs == NULL)
        return -1;
    gw_langs_free(langs);
    if (cfg->enqueue_keys_file != NULL) {
        cm_jwt_keyset_t *ks = gw_enqueue_keys_load(cfg->enqueue_keys_file, err, errlen);
        if (ks == NULL)
            return -1;
        cm_jwt_keyset_free(ks);
    }
    if (each_file("ticket_secret_file", cfg->ticket_secret_file, check_secret, err, errlen) != 0)
        return -1;
    if (cfg->code_secret_file != NULL &&
        check_secret("code_secret_file", cfg->code_secret_file, err, errlen) != 0)
        return -1;
    return each_file("signing_keys", cfg->signing_keys, check_signing_key, err, errlen);
}
