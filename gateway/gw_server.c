/*
 * gw_server — builds and runs the gateway process (see gw_server.h).
 *
 * Start-up, main thread (before the loops; file reads allowed): signing keys and JWKS,
 * ticket secret, admin token, TLS, the join limit (worker 0 loads them, the others
 * borrow them); then per worker: Redis client, signer threads, admission cache, rooms,
 * metrics (the same shared series), listener, the watermark timer. Shutdown on
 * SIGTERM/SIGINT (cm_server): every worker stops accepting, answers /readyz 503, lets
 * in-flight requests finish (bounded to 10 s), then exits its loop. Teardown fails
 * whatever still waits on Redis or the signer with 503 before the connections are closed.
 */
#include "gw_history.h"
#include "gw_server.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_access.h"
#include "cm_drain.h"
#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "gw_admit.h"
#include "gw_batch.h"
#include "gw_enqueue.h"
#include "gw_lang.h"
#include "gw_limit.h"
#include "gw_metrics.h"
#include "gw_pow.h"
#include "gw_rooms.h"
#include "gw_routes.h"
#include "gw_signer.h"
#include "gw_ticket.h"
#include "gw_watermark.h"

#define DRAIN_LIMIT_NS (10ull * 1000 * 1000 * 1000)
#define MAX_KEY_FILES  16

static const char *const endpoint_names[GW_EP_COUNT] = {
    "healthz", "readyz", "metrics", "jwks", "page", "join", "status", "admin", "dashboard", "other",
};

/* --- start-up ---------------------------------------------------------------------- */

static double gauge_redis(void *arg)
{
    return cm_redis_connected(((gw_server_t *)arg)->redis);
}

static bool redis_ready(void *arg)
{
    return cm_redis_connected(((gw_server_t *)arg)->redis);
}

/* /readyz: this worker's one backend. */
static bool backends(void *arg, json_t *o)
{
    bool up = redis_ready(arg);
    json_object_set_new(o, "redis", json_boolean(up));
    return up;
}

static double gauge_signer(void *arg)
{
    return (double)gw_signer_pending(((gw_server_t *)arg)->pool);
}

/* A secret/token file: cm_config_read_secret (owner-only mode, trimmed, at least min). */
static char *read_secret(const char *what, const char *path, size_t min, size_t *len, char *err,
                         size_t errlen)
{
    return cm_config_read_secret(what, path, min, 4096, len, err, errlen);
}

/* signing_keys (list): every file into the JWKS (*jwks), the last one the signer; 0, or -1
 * + err with nothing made. Start-up, and the reload thread: it reads files. */
static int read_keys(const char *list_text, cm_jwt_signer_t **signer_out, char **jwks_out,
                     int *nkeys_out, char *err, size_t errlen)
{
    int rc = -1;
    char *list = cm_xstrdup(list_text), *save = NULL, *pem = NULL;
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    cm_jwt_signer_t *signer = NULL;
    int nkeys = 0;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ')
            p++;
        size_t plen = strlen(p);
        while (plen && p[plen - 1] == ' ')
            p[--plen] = '\0';
        if (plen == 0)
            continue;
        if (++nkeys > MAX_KEY_FILES) {
            snprintf(err, errlen, "signing_keys: at most %d keys", MAX_KEY_FILES);
            goto out;
        }
        size_t len = 0;
        free(pem);
        /* a private key: owner-only like every secret file */
        pem = cm_config_read_secret("signing_keys", p, 1, 65536, &len, err, errlen);
        if (pem == NULL)
            goto out;
        char why[256];
        if (cm_jwt_keyset_add_pem(ks, NULL, pem, len, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "signing key %s: %s", p, why);
            goto out;
        }
        cm_jwt_signer_free(signer);
        signer = cm_jwt_signer_new(NULL, pem, len, why, sizeof(why));
        if (signer == NULL) {
            snprintf(err, errlen, "signing key %s: %s", p, why);
            goto out;
        }
    }
    if (signer == NULL) {
        snprintf(err, errlen, "signing_keys names no key file");
        goto out;
    }
    *signer_out = signer;
    *jwks_out = cm_jwt_keyset_jwks(ks);
    *nkeys_out = nkeys;
    signer = NULL;
    rc = 0;
out:
    if (pem) {
        memset(pem, 0, strlen(pem));
        free(pem);
    }
    cm_jwt_signer_free(signer);
    cm_jwt_keyset_free(ks);
    free(list);
    return rc;
}

static void signer_free(void *signer, void *ctx)
{
    (void)ctx;
    cm_jwt_signer_free(signer);
}

static void text_free(void *text, void *ctx)
{
    (void)ctx;
    free(text);
}

static int load_keys(gw_server_t *srv, char *err, size_t errlen)
{
    cm_jwt_signer_t *signer;
    char *jwks;
    int nkeys;
    if (read_keys(srv->cfg.signing_keys, &signer, &jwks, &nkeys, err, errlen) != 0)
        return -1;
    srv->signer = cm_reload_cell_new(signer, signer_free, NULL);
    srv->jwks = cm_reload_cell_new(jwks, text_free, NULL);
    cm_log(CM_LOG_INFO, "signing admissions with kid %s (%d key(s) published)",
           cm_jwt_signer_kid(signer), nkeys);
    return 0;
}

/* On the reload thread: the keys again; a new set is published and signs from the next
 * admission on (every worker's pool), the old signer retired, never freed, while in use. */
static int reload_keys(gw_server_t *srv, const char *list, char *err, size_t errlen)
{
    cm_jwt_signer_t *signer;
    char *jwks;
    int nkeys;
    if (read_keys(list, &signer, &jwks, &nkeys, err, errlen) != 0)
        return -1;
    const cm_jwt_signer_t *old = cm_reload_cell_get(srv->signer);
    cm_service_t *svc = srv->svc.svc;
    if (strcmp(jwks, cm_reload_cell_get(srv->jwks)) == 0 &&
        strcmp(cm_jwt_signer_kid(signer), cm_jwt_signer_kid(old)) == 0) {
        cm_jwt_signer_free(signer); /* the same keys */
        free(jwks);
        return 0;
    }
    cm_reload_cell_set(srv->jwks, jwks); /* published before anything is signed with it */
    cm_reload_cell_set(srv->signer, signer);
    for (int i = 0; i < cm_service_workers(svc); i++) {
        gw_server_t *w = cm_service_instance(svc, i);
        gw_signer_set_key(w->pool, signer);
    }
    cm_log(CM_LOG_INFO, "reload: signing admissions with kid %s (%d key(s) published)",
           cm_jwt_signer_kid(signer), nkeys);
    return 0;
}

/* ticket_secret_file: a comma-separated list, oldest first; the last one signs. */
static int load_ticket_secrets(gw_server_t *srv, char *err, size_t errlen)
{
    int rc = -1;
    char *list = cm_xstrdup(srv->cfg.ticket_secret_file), *save = NULL;
    gw_ticket_keys_t *k = &srv->ticket_keys;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ')
            p++;
        size_t plen = strlen(p);
        while (plen && p[plen - 1] == ' ')
            p[--plen] = '\0';
        if (plen == 0)
            continue;
        if (k->n == GW_TICKET_MAX_SECRETS) {
            snprintf(err, errlen, "ticket_secret_file: at most %d secrets", GW_TICKET_MAX_SECRETS);
            goto out;
        }
        size_t n = 0;
        unsigned char *s = (unsigned char *)read_secret("ticket_secret_file", p,
                                                        GW_TICKET_SECRET_MIN, &n, err, errlen);
        if (s == NULL)
            goto out;
        k->secret[k->n] = s;
        k->len[k->n++] = n;
    }
    if (k->n == 0) {
        snprintf(err, errlen, "ticket_secret_file names no file");
        goto out;
    }
    srv->ticket_secret = (unsigned char *)k->secret[k->n - 1];
    srv->ticket_secret_len = k->len[k->n - 1];
    if (k->n > 1)
        cm_log(CM_LOG_INFO, "queue tickets: %d secrets verify, the last one signs", k->n);
    rc = 0;
out:
    free(list);
    return rc;
}

static void langs_free(void *langs, void *ctx)
{
    (void)ctx;
    gw_langs_free(langs);
}

/* The queue page's languages (page_languages_dir): at start-up, and again on the reload
 * thread, where the new set is published and the old one retired. */
static int load_langs(gw_server_t *srv, const char *dir, char *err, size_t errlen)
{
    gw_langs_t *langs = gw_langs_load(dir, err, errlen);
    if (langs == NULL)
        return -1;
    if (srv->langs == NULL)
        srv->langs = cm_reload_cell_new(langs, langs_free, NULL);
    else
        cm_reload_cell_set(srv->langs, langs);
    if (gw_langs_count(langs) > 4)
        cm_log(CM_LOG_INFO, "queue page: %zu languages", gw_langs_count(langs));
    return 0;
}

static void keyset_free(void *ks, void *ctx)
{
    (void)ctx;
    cm_jwt_keyset_free(ks);
}

/* The sale site's enqueue keys (enqueue_keys_file; none when unset): at start-up, and
 * again on the reload thread, where the new set is published and the old one retired. */
static int load_enqueue_keys(gw_server_t *srv, const char *path, char *err, size_t errlen)
{
    cm_jwt_keyset_t *ks = NULL;
    if (path != NULL && (ks = gw_enqueue_keys_load(path, err, errlen)) == NULL)
        return -1;
    if (srv->enqueue_keys == NULL)
        srv->enqueue_keys = cm_reload_cell_new(ks, keyset_free, NULL);
    else
        cm_reload_cell_set(srv->enqueue_keys, ks);
    return 0;
}

static int load_secrets(gw_server_t *srv, char *err, size_t errlen)
{
    const gw_config_t *cfg = &srv->cfg;
    if (cfg->signing_keys == NULL || cfg->ticket_secret_file == NULL ||
        cfg->admin_token_file == NULL) {
        snprintf(err, errlen, "signing_keys, ticket_secret_file and admin_token_file must be set");
        return -1;
    }
    if (load_keys(srv, err, errlen) != 0)
        return -1;
    if (load_langs(srv, cfg->page_languages_dir, err, errlen) != 0)
        return -1;
    if (load_enqueue_keys(srv, cfg->enqueue_keys_file, err, errlen) != 0)
        return -1;
    if (cfg->code_secret_file != NULL) {
        srv->code_secret =
            (unsigned char *)read_secret("code_secret_file", cfg->code_secret_file,
                                         GW_TICKET_SECRET_MIN, &srv->code_secret_len, err, errlen);
        if (srv->code_secret == NULL)
            return -1;
    }
    return load_ticket_secrets(srv, err, errlen); /* the admin token: cm_service_new */
}

/* On the reload thread: the live keys of a new snapshot (gw_config_live). */
static int on_config_apply(void *arg, const void *p, char *err, size_t errlen)
{
    gw_server_t *srv = arg;
    const gw_config_t *cfg = p;
    cm_service_log_t log;
    if (cm_service_log_parse(&log, cfg->log_level, cfg->log_format, cfg->access_log, err, errlen) !=
        0)
        return -1;
    if (cm_service_reload_token(srv->svc.svc, cfg->admin_token_file, err, errlen) != 0)
        return -1;
    if (reload_keys(srv, cfg->signing_keys, err, errlen) != 0)
        return -1;
    if (load_langs(srv, cfg->page_languages_dir, err, errlen) != 0)
        return -1;
    if (load_enqueue_keys(srv, cfg->enqueue_keys_file, err, errlen) != 0)
        return -1;
    cm_service_log_apply(&log);
    gw_limit_set(srv->limit, cfg->join_rate_per_ip, cfg->join_burst_per_ip);
    return 0;
}

int gw_server_serve(gw_server_t *srv, cm_reload_config_t *rc)
{
    return cm_service_serve(srv->svc.svc, rc, on_config_apply, srv);
}

static double gauge_pow_bits(void *arg)
{
    return gw_pow_base_now(arg, cm_time_mono_ns() / 1000000);
}

/* Proof of work: its MAC key is derived from the signing ticket secret, so every gateway
 * of a deployment checks every other's challenges without a secret of its own. */
static gw_pow_t *pow_new(gw_server_t *srv)
{
    static const char label[] = "onsale proof-of-work challenge key v1";
    const gw_config_t *cfg = &srv->cfg;
    unsigned char key[32];
    gw_ticket_hmac(srv->ticket_secret, srv->ticket_secret_len, label, sizeof(label) - 1, key);
    gw_pow_config_t c = {
        .base_bits = (int)cfg->pow_base_bits,
        .max_bits =
            (int)(cfg->pow_max_bits > cfg->pow_base_bits ? cfg->pow_max_bits : cfg->pow_base_bits),
        .ttl_s = cfg->pow_ttl_s,
        .window_s = cfg->pow_window_s,
        .block_free_per_min = cfg->pow_block_free_per_min,
        .total_free_per_min = cfg->pow_total_free_per_min,
        .table_size = (size_t)cfg->pow_table_size,
    };
    gw_pow_t *p = gw_pow_new(key, sizeof(key), &c);
    explicit_bzero(key, sizeof(key));
    return p;
}

/* One worker's instance on its loop; the shared parts are borrowed from worker 0. */
static void worker_new(void *arg, cm_service_t *svc, int i, void *instance, char *err,
                       size_t errlen)
{
    gw_server_t *first = arg, *srv = instance;
    const gw_config_t *cfg = &first->cfg;
    int n = cm_service_workers(svc);
    if (i > 0) {
        srv->cfg = first->cfg;
        srv->ticket_secret = first->ticket_secret;
        srv->ticket_secret_len = first->ticket_secret_len;
        srv->ticket_keys = first->ticket_keys; /* borrowed: the first worker owns them */
        srv->signer = first->signer;
        srv->jwks = first->jwks;
        srv->langs = first->langs;
        srv->enqueue_keys = first->enqueue_keys;
        srv->limit = first->limit;
        srv->pow = first->pow;
        srv->code_secret = first->code_secret; /* borrowed, like the ticket keys */
        srv->code_secret_len = first->code_secret_len;
        srv->code_tries = first->code_tries;
        srv->code_failures = first->code_failures;
        srv->code_lock_ms = first->code_lock_ms;
    }
    cm_svc_worker_spec_t spec = {endpoint_names, GW_EP_COUNT, backends, srv,
                                 "Redis is unreachable"};
    cm_svc_worker_init(&srv->svc, svc, i, &spec);
    cm_worker_t *w = srv->svc.worker;
    srv->index = i;
    srv->base = srv->svc.base;
    srv->m = i == 0 ? gw_metrics_new(srv->svc.metrics) : first->m; /* the shared series */
    srv->rooms = gw_rooms_new();
    srv->admit = gw_admit_new((size_t)cfg->admission_cache_size);
    /* the setting is per process: split over the workers (0 stays 0: sign on the loop) */
    int threads = (int)((cfg->signer_threads + n - 1) / n);
    srv->pool = gw_signer_new(srv->base, cm_reload_cell_get(srv->signer), threads,
                              (size_t)cfg->signer_queue);
    if (srv->pool == NULL) {
        snprintf(err, errlen, "cannot start the signer threads");
        return;
    }
    srv->redis = cm_redis_config_open(srv->base, &cfg->redis, err, errlen); /* before its loop */
    if (srv->redis == NULL)
        return;
    if (cm_worker_listen(w, gw_routes_dispatch, gw_routes_admin, srv, err, errlen) != 0)
        return;
    cm_worker_gauge_min(w, "onsale_gateway_redis_up",
                        "1 while every worker's Redis connection is up, else 0", gauge_redis, srv);
    cm_worker_gauge(w, "onsale_gateway_redis_connections", "Redis connections up (one per worker)",
                    gauge_redis, srv);
    cm_worker_readiness(w, redis_ready, srv);
    cm_worker_gauge(w, "onsale_gateway_signer_pending", "admission tokens queued or being signed",
                    gauge_signer, srv);
    gw_watermark_start(srv);
    srv->history = gw_history_new(srv->base, srv->rooms, (int)cfg->history_interval_ms,
                                  (int)cfg->history_samples);
    err[0] = '\0'; /* made: whatever a step wrote there is no error */
}

/* One worker's own parts (not the shared ones). */
static void worker_free(void *instance)
{
    gw_server_t *srv = instance;
    /* Waiters first (they answer 503 on still-open connections), then the connections:
     * the joins still gathering for a batch, then the commands in flight. */
    gw_batch_free(srv->batch);
    srv->batch = NULL;
    cm_redis_free(srv->redis);
    srv->redis = NULL;
    gw_signer_free(srv->pool);
    srv->pool = NULL;
    if (srv->svc.worker)
        cm_worker_close(srv->svc.worker);
    if (srv->tick)
        event_free(srv->tick);
    srv->tick = NULL;
    gw_admit_free(srv->admit);
    srv->admit = NULL;
    gw_history_free(srv->history);
    srv->history = NULL;
    gw_rooms_free(srv->rooms);
    srv->rooms = NULL;
    cm_pool_free(srv->place_ops); /* last: operations still out come back to it */
    srv->place_ops = NULL;
}

gw_server_t *gw_server_new(const gw_config_t *cfg, char *err, size_t errlen)
{
    gw_server_t *srv = cm_xcalloc(1, sizeof(*srv));
    srv->cfg = *cfg;
    if (load_secrets(srv, err, errlen) != 0)
        goto err;
    srv->limit = gw_limit_new(cfg->join_rate_per_ip, cfg->join_burst_per_ip,
                              (size_t)cfg->rate_limit_table_size);
    srv->pow = pow_new(srv);
    srv->code_tries = gw_limit_new(cfg->code_tries_per_block, cfg->code_tries_per_block,
                                   (size_t)cfg->rate_limit_table_size);
    srv->code_failures = gw_limit_new(cfg->code_failures_per_min, cfg->code_failures_per_min, 16);
    srv->code_lock_ms = cm_xcalloc(1, sizeof(*srv->code_lock_ms));
    cm_service_opts_t o = {
        .name = "gateway",
        .metric_prefix = "onsale_gateway",
        .server = &cfg->server,
        .admin_token_file = cfg->admin_token_file,
        .body_cap = gw_routes_body_cap, /* join's cap known from the head (h1) */
        .drain_limit_ns = DRAIN_LIMIT_NS,
    };
    srv->svc.svc = cm_service_new(&o, err, errlen);
    if (srv->svc.svc == NULL)
        goto err;
    cm_metrics_gauge_fn(
        cm_server_metrics(cm_service_server(srv->svc.svc)), "onsale_gateway_pow_base_difficulty",
        "proof-of-work difficulty (leading zero bits) a quiet address block is given now", NULL,
        gauge_pow_bits, srv->pow);
    if (cm_service_start(srv->svc.svc, srv, sizeof(*srv), worker_new, worker_free, err, errlen) !=
        0)
        goto err;
    return srv;
err:
    gw_server_free(srv);
    return NULL;
}

/* --- run / shutdown ---------------------------------------------------------------- */

void gw_server_free(gw_server_t *srv)
{
    if (srv == NULL)
        return;
    if (srv->svc.svc == NULL || cm_service_instance(srv->svc.svc, 0) == NULL)
        worker_free(srv);          /* the workers were never made */
    cm_service_free(srv->svc.svc); /* every worker, the loops, the shared registry */
    gw_metrics_free(srv->m);       /* after the workers: their last answers count */
    gw_limit_free(srv->limit);
    gw_limit_free(srv->code_tries);
    gw_limit_free(srv->code_failures);
    free((void *)srv->code_lock_ms);
    if (srv->code_secret != NULL) {
        memset(srv->code_secret, 0, srv->code_secret_len);
        free(srv->code_secret);
    }
    gw_pow_free(srv->pow);
    cm_reload_cell_free(srv->signer);
    cm_reload_cell_free(srv->jwks);
    cm_reload_cell_free(srv->langs);
    cm_reload_cell_free(srv->enqueue_keys);
    for (int i = 0; i < srv->ticket_keys.n; i++) {
        unsigned char *s = (unsigned char *)srv->ticket_keys.secret[i];
        memset(s, 0, srv->ticket_keys.len[i]);
        free(s);
    }
    free(srv);
}
