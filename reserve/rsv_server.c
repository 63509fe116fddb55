/*
 * rsv_server — builds and runs the reserve process (see rsv_server.h).
 *
 * Start-up, main thread (before the loops; file reads allowed): admin token and TLS
 * (shared); then per worker: keys and token verifier, Redis and Postgres clients,
 * caches, the stock feed, payment client, reconciler (worker 0), metrics (the same shared series),
 * listener. Shutdown on SIGTERM/SIGINT (cm_server): every worker stops accepting,
 * answers /readyz 503, lets in-flight requests finish (bounded to 10 s), then exits its
 * loop.
 */
#include "rsv_server.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_access.h"
#include "cm_drain.h"
#include "cm_err.h"
#include "cm_jwt.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "cm_tls.h"
#include "rsv_auth.h"
#include "rsv_avail.h"
#include "rsv_catalog.h"
#include "rsv_cors.h"
#include "rsv_outbox.h"
#include "rsv_pay.h"
#include "rsv_reconcile.h"
#include "rsv_office.h"
#include "rsv_routes.h"
#include "rsv_stock.h"

#define DRAIN_LIMIT_NS (10ull * 1000 * 1000 * 1000)

static const char *const endpoint_names[RSV_EP_COUNT] = {
    "healthz",          "readyz",          "metrics",         "availability",    "seats",
    "hold_create",      "hold_get",        "hold_extend",     "hold_release",    "confirm",
    "checkout_get",     "admin_event_put", "admin_event_get", "admin_checkouts", "done",
    "provider_webhook", "other",
};

/* --- lifecycle ----------------------------------------------------------------------- */

static double gauge_pg(void *arg)
{
    return rsv_pg_connected(((rsv_server_t *)arg)->pg);
}

static double gauge_redis(void *arg)
{
    return cm_redis_connected(((rsv_server_t *)arg)->redis);
}

static bool backends_ready(void *arg)
{
    rsv_server_t *srv = arg;
    return cm_redis_connected(srv->redis) && rsv_pg_connected(srv->pg) > 0;
}

/* /readyz: this worker's backends. */
static bool backends(void *arg, json_t *o)
{
    rsv_server_t *srv = arg;
    bool redis = cm_redis_connected(srv->redis);
    bool pg = rsv_pg_connected(srv->pg) > 0;
    json_object_set_new(o, "redis", json_boolean(redis));
    json_object_set_new(o, "postgres", json_boolean(pg));
    return redis && pg;
}

static void cors_free(void *cors, void *ctx)
{
    (void)ctx;
    rsv_cors_free(cors);
}

/* On the reload thread: the live keys of a new snapshot (rsv_config_live). */
static int on_config_apply(void *arg, const void *p, char *err, size_t errlen)
{
    rsv_server_t *srv = arg;
    const rsv_config_t *cfg = p;
    cm_service_t *svc = srv->svc.svc;
    cm_service_log_t log;
    if (cm_service_log_parse(&log, cfg->log_level, cfg->log_format, cfg->access_log, err, errlen) !=
        0)
        return -1;
    rsv_server_t *w0 = cm_service_instance(svc, 0); /* the one with the deliverer */
    rsv_outbox_secrets_t *sec = NULL;
    if (w0->outbox != NULL && cfg->events_url != NULL && cfg->events_url[0] != '\0') {
        sec = rsv_outbox_secrets_read(cfg->events_secret_file, err, errlen);
        if (sec == NULL)
            return -1;
    }
    rsv_cors_t *cors = rsv_cors_new(cfg->cors_origins, err, errlen);
    if (cors == NULL) {
        rsv_outbox_secrets_free(sec);
        return -1;
    }
    char *key = rsv_config_pay_key(cfg, err, errlen); /* the files re-read on every reload */
    rsv_webhook_secrets_t *hooks =
        key ? rsv_webhook_secrets_load(cfg->pay_webhook_secrets_file, err, errlen) : NULL;
    if (hooks == NULL || cm_service_reload_token(svc, cfg->admin_token_file, err, errlen) != 0) {
        rsv_webhook_secrets_free(hooks, NULL);
        cm_reload_free_secret(key, NULL);
        rsv_outbox_secrets_free(sec);
        rsv_cors_free(cors);
        return -1;
    }
    rsv_outbox_set_secrets(w0->outbox, sec);
    cm_reload_cell_set(srv->cors, cors);
    cm_reload_cell_set(srv->webhook_secrets, hooks);
    bool replaced = false;
    for (int i = 0; i < cm_service_workers(svc); i++) { /* each has a client of its own */
        rsv_server_t *w = cm_service_instance(svc, i);
        replaced |= rsv_pay_set_api_key(w->pay, key);
    }
    if (replaced)
        cm_log(CM_LOG_INFO, "reload: payment provider key replaced");
    cm_reload_free_secret(key, NULL);
    cm_service_log_apply(&log);
    return 0;
}

int rsv_server_serve(rsv_server_t *srv, cm_reload_config_t *rc)
{
    return cm_service_serve(srv->svc.svc, rc, on_config_apply, srv);
}

/* One worker's instance on its loop; the shared parts are borrowed from worker 0. */
static void worker_new(void *arg, cm_service_t *svc, int i, void *instance, char *err,
                       size_t errlen)
{
    rsv_server_t *first = arg, *srv = instance;
    const rsv_config_t *cfg = &first->cfg;
    int n = cm_service_workers(svc);
    if (i > 0) {
        srv->cfg = first->cfg;
        srv->keys = first->keys;
        srv->auth_fails = first->auth_fails;
        srv->cors = first->cors;
        srv->webhook_secrets = first->webhook_secrets;
    }
    cm_svc_worker_spec_t spec = {endpoint_names, RSV_EP_COUNT, backends, srv,
                                 "a backing store is unreachable"};
    cm_svc_worker_init(&srv->svc, svc, i, &spec);
    cm_worker_t *w = srv->svc.worker;
    srv->index = i;
    srv->base = srv->svc.base;
    rsv_metrics_register(&srv->m, srv->svc.metrics);
    /* Thread counts and the Postgres pool are per process: split over the workers. */
    int pool = (int)((cfg->pg_pool_size + n - 1) / n);
    rsv_auth_config_t ac = {
        .issuer = cfg->token_issuer,
        .leeway_s = cfg->token_leeway_s,
        .max_lifetime_s = cfg->token_max_lifetime_s,
        .cache_size = (size_t)cfg->token_cache_size,
        .threads = cfg->verify_threads > 0 ? (int)((cfg->verify_threads + n - 1) / n) : 0,
        .max_queue = (size_t)cfg->verify_max_queue,
        .fail_limit = (int)cfg->auth_fail_limit,
        .fail_window_s = (int)cfg->auth_fail_window_s,
        .fails = first->auth_fails,
        .records = cfg->token_records,
        .public_origin = cfg->public_origin,
        .plain_http = cfg->server.plain_http,
    };
    srv->auth = rsv_auth_new(srv->base, srv->keys, &ac);
    srv->redis = cm_redis_config_open(srv->base, &cfg->redis, err, errlen); /* before its loop */
    if (srv->redis == NULL)
        return;
    rsv_auth_use_redis(srv->auth, srv->redis); /* the jti of bound tokens' proofs */
    srv->pg = rsv_pg_new(srv->base, cfg->pg_conninfo, pool, (int)cfg->pg_timeout_ms,
                         (int)cfg->pg_max_queue);
    int read_pool = (int)((cfg->pg_read_pool_size + n - 1) / n);
    srv->pg_read = rsv_pg_new(srv->base, cfg->pg_conninfo, read_pool, (int)cfg->pg_timeout_ms,
                              (int)cfg->pg_max_queue);
    srv->catalog = rsv_catalog_new(srv);
    srv->avail = rsv_avail_new(srv);
    srv->stock = rsv_stock_new(srv); /* every worker: requests touch events on each */
    char *key = rsv_config_pay_key(cfg, err, errlen); /* start-up: may read its file */
    if (key == NULL)
        return;
    char *ret = cfg->pay_return_url && cfg->pay_return_url[0]
                    ? cm_xstrdup(cfg->pay_return_url)
                    : cm_xasprintf("%s/shop/", cfg->public_origin && cfg->public_origin[0]
                                                   ? cfg->public_origin
                                                   : "https://localhost");
    rsv_pay_config_t pc = {
        .url = cfg->paysim_url,
        .ca_file = cfg->paysim_ca,
        .api_key = key,
        .return_url = ret,
        .connect_timeout_ms = (int)cfg->pay_connect_timeout_ms,
        .timeout_ms = (int)cfg->pay_timeout_ms,
    };
    srv->pay = rsv_pay_new(srv->base, &pc, err, errlen);
    free(ret);
    cm_reload_free_secret(key, NULL);
    if (srv->pay == NULL)
        return;
    if (i == 0) /* one reconciler per process is enough (several are safe) */
        srv->reconcile = rsv_reconcile_new(srv);
    if (i == 0) /* the box office's refund driver, likewise */
        srv->office = rsv_office_new(srv);
    if (i == 0) { /* one deliverer of events out, likewise */
        rsv_outbox_config_t oc = {
            .url = cfg->events_url,
            .ca_file = cfg->events_ca,
            .secret_file = cfg->events_secret_file,
            .connect_timeout_ms = (int)cfg->events_connect_timeout_ms,
            .timeout_ms = (int)cfg->events_timeout_ms,
            .poll_ms = (int)cfg->events_poll_ms,
            .batch = (int)cfg->events_batch,
            .retry_base_ms = (int)cfg->events_retry_base_ms,
            .retry_max_ms = (int)cfg->events_retry_max_ms,
            .retention_s = cfg->events_retention_hours * 3600,
        };
        srv->outbox = rsv_outbox_new(srv->base, srv->pg, srv->svc.metrics, &oc, err, errlen);
        if (srv->outbox == NULL)
            return;
    }
    if (cm_worker_listen(w, rsv_routes_dispatch, rsv_routes_admin, srv, err, errlen) != 0)
        return;
    cm_worker_gauge(w, "onsale_reserve_postgres_connections", "Postgres connections up", gauge_pg,
                    srv);
    cm_worker_gauge_min(w, "onsale_reserve_redis_up",
                        "1 while every worker's Redis connection is up, else 0", gauge_redis, srv);
    cm_worker_gauge(w, "onsale_reserve_redis_connections", "Redis connections up (one per worker)",
                    gauge_redis, srv);
    cm_worker_readiness(w, backends_ready, srv);
    err[0] = '\0'; /* made: whatever a step wrote there is no error */
}

/* One worker's own parts (not the shared ones). */
static void worker_free(void *instance)
{
    rsv_server_t *srv = instance;
    rsv_auth_free(srv->auth); /* first: its workers may still answer requests */
    srv->auth = NULL;
    rsv_reconcile_free(srv->reconcile);
    srv->reconcile = NULL;
    rsv_office_free(srv->office);
    srv->office = NULL;
    rsv_stock_free(srv->stock); /* its rounds in flight end as the clients below go */
    srv->stock = NULL;
    rsv_outbox_free(srv->outbox); /* before pg: its statements come back as shutdown */
    srv->outbox = NULL;
    rsv_pay_free(srv->pay); /* its callbacks may still record steps: before pg and redis */
    srv->pay = NULL;
    if (srv->svc.worker)
        cm_worker_close(srv->svc.worker);
    rsv_avail_free(srv->avail);
    srv->avail = NULL;
    rsv_catalog_free(srv->catalog);
    srv->catalog = NULL;
    rsv_pg_free(srv->pg);
    srv->pg = NULL;
    rsv_pg_free(srv->pg_read);
    srv->pg_read = NULL;
    cm_redis_free(srv->redis);
    srv->redis = NULL;
}

rsv_server_t *rsv_server_new(const rsv_config_t *cfg, char *err, size_t errlen)
{
    rsv_server_t *srv = cm_xcalloc(1, sizeof(*srv));
    srv->cfg = *cfg;
    if (cfg->admission_keys == NULL || cfg->admin_token_file == NULL) {
        snprintf(err, errlen, "admission_keys and admin_token_file must be set");
        goto err;
    }
    srv->keys = rsv_auth_keys_load(cfg->admission_keys, err, errlen);
    if (srv->keys == NULL)
        goto err;
    srv->auth_fails = rsv_auth_fails_new();
    if (rsv_config_check(cfg, err, errlen) != 0)
        goto err;
    cm_service_opts_t o = {
        .name = "reserve",
        .metric_prefix = "onsale_reserve",
        .server = &cfg->server,
        .admin_token_file = cfg->admin_token_file,
        .body_cap = rsv_routes_body_cap, /* each route's cap known from the head (h1) */
        .drain_limit_ns = DRAIN_LIMIT_NS,
    };
    srv->svc.svc = cm_service_new(&o, err, errlen); /* the admin token, TLS, the loops */
    if (srv->svc.svc == NULL)
        goto err;
    rsv_cors_t *cors = rsv_cors_new(cfg->cors_origins, err, errlen);
    if (cors == NULL)
        goto err;
    srv->cors = cm_reload_cell_new(cors, cors_free, NULL);
    rsv_webhook_secrets_t *hooks =
        rsv_webhook_secrets_load(cfg->pay_webhook_secrets_file, err, errlen);
    if (hooks == NULL)
        goto err;
    srv->webhook_secrets = cm_reload_cell_new(hooks, rsv_webhook_secrets_free, NULL);
    if (cfg->fault && *cfg->fault)
        cm_log(CM_LOG_WARN, "fault points armed: %s (tests only)", cfg->fault);
    if (cm_service_start(srv->svc.svc, srv, sizeof(*srv), worker_new, worker_free, err, errlen) !=
        0)
        goto err;
    return srv;
err:
    rsv_server_free(srv);
    return NULL;
}

void rsv_server_free(rsv_server_t *srv)
{
    if (srv == NULL)
        return;
    if (srv->svc.svc == NULL || cm_service_instance(srv->svc.svc, 0) == NULL)
        worker_free(srv);          /* the workers were never made */
    cm_service_free(srv->svc.svc); /* every worker, the loops, the shared registry */
    rsv_auth_keys_free(srv->keys);
    rsv_auth_fails_free(srv->auth_fails);
    cm_reload_cell_free(srv->cors);
    cm_reload_cell_free(srv->webhook_secrets);
    free(srv);
}
