/*
 * cm_service — the service shell (see cm_service.h): what the gateway and reserve did
 * the same way around cm_server, written once.
 *
 * The process part (cm_service_t) is made and freed on the main thread and holds what
 * every worker shares: the loops (cm_server), the TLS context, the operators' token in a
 * reload cell (replaced on SIGHUP, read by any worker through cm_reload_cell_get), the
 * configuration being served, and the service's worker instances (void *: the service
 * knows their type). The worker part (cm_svc_worker_t) is plain data the service embeds
 * in each instance; requests, replies and the shared routes use only it, on that
 * worker's thread.
 */
#include "cm_service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_access.h"
#include "cm_config.h"
#include "cm_drain.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_tls.h"

#define TOKEN_MIN 16
#define TOKEN_MAX 4096

struct cm_service {
    cm_server_t *cs;
    cm_tls_ctx_t *tls;
    cm_reload_cell_t *admin_token; /* char *: the operators' token */
    cm_reload_config_t *config;    /* NULL: no reloads watched */
    char metric_prefix[48];
    char admin_addr[64]; /* admin_listen's address (cm_server_config_opts) */
    void **instances;    /* one per worker */
    void (*unmake)(void *instance);
};

/* --- the process ------------------------------------------------------------------- */

static char *read_token(const char *path, char *err, size_t errlen)
{
    return cm_config_read_secret("admin_token_file", path, TOKEN_MIN, TOKEN_MAX, NULL, err, errlen);
}

cm_service_t *cm_service_new(const cm_service_opts_t *o, char *err, size_t errlen)
{
    cm_service_t *s = cm_xcalloc(1, sizeof(*s));
    snprintf(s->metric_prefix, sizeof(s->metric_prefix), "%s", o->metric_prefix);
    char *token = read_token(o->admin_token_file, err, errlen);
    if (token == NULL)
        goto err;
    s->admin_token = cm_reload_cell_new(token, cm_reload_free_secret, NULL);
    if (cm_server_config_tls(o->server, &s->tls, err, errlen) != 0)
        goto err;
    cm_server_opts_t so = {
        .name = o->name,
        .metric_prefix = o->metric_prefix,
        .tls = s->tls,
        .drain_limit_ns = o->drain_limit_ns,
    };
    if (cm_server_config_opts(o->server, &so, s->admin_addr, sizeof(s->admin_addr), err, errlen) !=
        0)
        goto err;
    so.limits.body_cap = o->body_cap; /* each route's cap known from the head (h1) */
    s->cs = cm_server_new(&so, err, errlen);
    if (s->cs == NULL)
        goto err;
    return s;
err:
    cm_service_free(s);
    return NULL;
}

cm_server_t *cm_service_server(cm_service_t *s)
{
    return s->cs;
}

int cm_service_workers(const cm_service_t *s)
{
    return s->cs ? cm_server_workers(s->cs) : 0;
}

int cm_service_start(cm_service_t *s, void *first, size_t size,
                     void (*make)(void *first, cm_service_t *s, int i, void *instance, char *err,
                                  size_t errlen),
                     void (*unmake)(void *instance), char *err, size_t errlen)
{
    int n = cm_service_workers(s);
    s->instances = cm_xcalloc((size_t)n, sizeof(void *));
    s->unmake = unmake;
    err[0] = '\0';
    for (int i = 0; i < n; i++) {
        s->instances[i] = i == 0 ? first : cm_xcalloc(1, size);
        make(first, s, i, s->instances[i], err, errlen);
        if (err[0] != '\0')
            return -1;
    }
    return 0;
}

void *cm_service_instance(const cm_service_t *s, int i)
{
    return s->instances != NULL && i < cm_service_workers(s) ? s->instances[i] : NULL;
}

int cm_service_run(cm_service_t *s)
{
    return cm_server_run(s->cs);
}

void cm_service_free(cm_service_t *s)
{
    if (s == NULL)
        return;
    for (int i = cm_service_workers(s) - 1; i >= 0 && s->instances; i--)
        if (s->instances[i] != NULL) {
            s->unmake(s->instances[i]);
            if (i > 0) /* instance 0 is the caller's */
                free(s->instances[i]);
        }
    free(s->instances);
    cm_server_free(s->cs); /* the loops and the shared registry */
    cm_tls_free(s->tls);
    cm_reload_cell_free(s->admin_token);
    free(s);
}

int cm_service_watch_config(cm_service_t *s, cm_reload_config_t *rc, cm_reload_apply_fn apply,
                            void *arg)
{
    s->config = rc;
    return cm_reload_config_start(rc, apply, arg);
}

int cm_service_serve(cm_service_t *s, cm_reload_config_t *rc, cm_reload_apply_fn apply, void *arg)
{
    int rc_run = 1;
    if (cm_service_watch_config(s, rc, apply, arg) != 0)
        cm_log(CM_LOG_ERROR, "cannot install the SIGHUP reload of the configuration");
    else
        rc_run = cm_service_run(s) == 0 ? 0 : 1;
    cm_reload_config_free(rc); /* no reload may run on a freed server */
    s->config = NULL;
    return rc_run;
}

int cm_service_reload_token(cm_service_t *s, const char *path, char *err, size_t errlen)
{
    char *token = read_token(path, err, errlen);
    if (token == NULL)
        return -1;
    if (strcmp(cm_reload_cell_get(s->admin_token), token) != 0) {
        cm_reload_cell_set(s->admin_token, token);
        cm_log(CM_LOG_INFO, "reload: operator token replaced");
    } else {
        cm_reload_free_secret(token, NULL);
    }
    return 0;
}

int cm_service_log_parse(cm_service_log_t *out, const char *level, const char *format,
                         bool access_log, char *err, size_t errlen)
{
    out->access_log = access_log;
    return cm_log_settings_parse(level, format, &out->level, &out->format, err, errlen);
}

void cm_service_log_apply(const cm_service_log_t *l)
{
    cm_reload_set_log_level(l->level);
    cm_log_set_format(l->format);
    cm_access_set_log(l->access_log);
}

void cm_service_log_start(const cm_service_log_t *l, const char *name)
{
    cm_log_set_format(l->format);
    cm_access_set_log(l->access_log);
    cm_log_init(name, l->level);
    cm_log_route_libevent();
}

/* --- a worker ---------------------------------------------------------------------- */

void cm_svc_worker_init(cm_svc_worker_t *w, cm_service_t *s, int i,
                        const cm_svc_worker_spec_t *spec)
{
    char name[80];
    snprintf(name, sizeof(name), "%s_request_seconds", s->metric_prefix);
    w->svc = s;
    w->worker = cm_server_worker(s->cs, i);
    w->base = cm_worker_base(w->worker);
    w->drain = cm_worker_drain(w->worker);
    w->metrics = cm_server_metrics(s->cs);
    w->endpoints = spec->endpoints;
    w->backends = spec->backends;
    w->backends_arg = spec->arg;
    w->down = spec->down;
    w->requests =
        cm_metrics_requests(w->metrics, name, "request latency by endpoint and status code",
                            spec->endpoints, spec->nendpoints);
}

cm_reload_config_t *cm_svc_config(const cm_svc_worker_t *w)
{
    return w->svc->config;
}

bool cm_svc_admin_ok(const cm_svc_worker_t *w, cm_req_t *req)
{
    return cm_server_bearer_ok(req, cm_reload_cell_get(w->svc->admin_token));
}

bool cm_svc_admin_gate(cm_svc_worker_t *w, cm_req_t *req, size_t ep)
{
    if (cm_svc_admin_ok(w, req))
        return true;
    cm_svc_refuse(w, req, ep, 401, "unauthorized", "an operator bearer token is required");
    return false;
}

typedef struct sync_op {
    char event[CM_IDENT_MAX + 1];
    void (*fn)(void *peer, const char *event, cm_bcast_t *b);
    void (*done)(void *arg);
    void *arg;
} sync_op_t;

/* On a peer's thread. */
static void on_peer(void *peer, void *arg, cm_bcast_t *b)
{
    sync_op_t *op = arg;
    op->fn(peer, op->event, b);
}

static void on_synced(void *arg)
{
    sync_op_t *op = arg;
    op->done(op->arg);
    free(op);
}

void cm_svc_sync_event(cm_svc_worker_t *w, const char *event,
                       void (*fn)(void *peer, const char *event, cm_bcast_t *b),
                       void (*done)(void *arg), void *arg)
{
    sync_op_t *op = cm_xcalloc(1, sizeof(*op));
    snprintf(op->event, sizeof(op->event), "%s", event);
    op->fn = fn;
    op->done = done;
    op->arg = arg;
    cm_worker_broadcast(w->worker, on_peer, op, on_synced);
}

/* --- the shared routes ------------------------------------------------------------- */

static void health(cm_svc_worker_t *w, cm_req_t *req)
{
    cm_svc_req_t r;
    cm_svc_req_start(&r, w, req, CM_SVC_EP_HEALTH);
    cm_svc_reply_json(&r, 200, json_pack("{s:s}", "status", "ok"));
}

cm_svc_readiness_t cm_svc_readiness(json_t *backends, bool backends_up, bool workers, bool draining,
                                    const char *down)
{
    bool up = backends_up && workers;
    json_t *o = json_pack("{s:s}", "status", up ? "ready" : "unavailable");
    json_object_update(o, backends);
    json_decref(backends);
    json_object_set_new(o, "workers", json_boolean(workers));
    cm_svc_readiness_t a = {.code = 200, .message = NULL, .body = o};
    if (!up || draining) {
        a.code = 503;
        a.message = draining ? "shutting down" : down;
    }
    return a;
}

static void ready(cm_svc_worker_t *w, cm_req_t *req)
{
    cm_svc_req_t r;
    cm_svc_req_start(&r, w, req, CM_SVC_EP_READY);
    json_t *backends = json_object();
    bool up = w->backends == NULL || w->backends(w->backends_arg, backends);
    /* this worker now, and every worker at its last sample: a request may land on any */
    bool workers = cm_server_ready(cm_worker_server(w->worker));
    bool draining = cm_drain_draining(cm_worker_drain(w->worker));
    cm_svc_readiness_t a = cm_svc_readiness(backends, up, workers, draining, w->down);
    if (a.code == 200)
        cm_svc_reply_json(&r, 200, a.body);
    else
        cm_svc_reply_error(&r, a.code, "unavailable", a.message, a.body);
}

static void metrics(cm_svc_worker_t *w, cm_req_t *req)
{
    cm_svc_req_t r;
    cm_svc_req_start(&r, w, req, CM_SVC_EP_METRICS);
    size_t len = 0;
    char *text = cm_metrics_render(w->metrics, &len);
    cm_svc_reply_text(&r, 200, "text/plain; version=0.0.4", text, len);
    free(text);
}

int cm_svc_shared_endpoint(cm_http_method_t method, char **seg, int n, bool admin)
{
    if (n != 1 || method != CM_HTTP_GET)
        return -1;
    if (strcmp(seg[0], "healthz") == 0)
        return CM_SVC_EP_HEALTH;
    if (strcmp(seg[0], "readyz") == 0)
        return CM_SVC_EP_READY;
    if (admin && strcmp(seg[0], "metrics") == 0)
        return CM_SVC_EP_METRICS;
    return -1;
}

bool cm_svc_route_shared(cm_svc_worker_t *w, cm_req_t *req, char **seg, int n, bool admin)
{
    switch (cm_svc_shared_endpoint(cm_http_method(req), seg, n, admin)) {
    case CM_SVC_EP_HEALTH:
        health(w, req);
        return true;
    case CM_SVC_EP_READY:
        ready(w, req);
        return true;
    case CM_SVC_EP_METRICS:
        metrics(w, req);
        return true;
    default:
        return false;
    }
}

/* --- requests ---------------------------------------------------------------------- */

void cm_svc_req_start(cm_svc_req_t *r, cm_svc_worker_t *w, cm_req_t *req, size_t ep)
{
    r->w = w;
    r->req = req;
    r->ep = ep;
    r->start_ns = cm_worker_req_begin(w->worker);
    cm_access_set_route(req, w->endpoints[ep]);
}

void cm_svc_req_replied(cm_svc_req_t *r)
{
    cm_worker_req_end(r->w->worker, r->w->requests, r->ep, r->start_ns);
    r->req = NULL;
}

void cm_svc_reply_json(cm_svc_req_t *r, int code, json_t *body)
{
    cm_http_send_json(r->req, code, body);
    cm_svc_req_replied(r);
}

void cm_svc_reply_error(cm_svc_req_t *r, int code, const char *error, const char *message,
                        json_t *extra)
{
    cm_http_send_error(r->req, code, error, message, extra);
    cm_svc_req_replied(r);
}

void cm_svc_reply_empty(cm_svc_req_t *r, int code)
{
    cm_http_send_empty(r->req, code);
    cm_svc_req_replied(r);
}

void cm_svc_reply_text(cm_svc_req_t *r, int code, const char *ctype, const char *body, size_t len)
{
    cm_http_send_body(r->req, code, ctype, body, len, false);
    cm_svc_req_replied(r);
}

void cm_svc_reply_unavailable(cm_svc_req_t *r, const char *what, const char *err)
{
    cm_server_reply_unavailable(r->req, what, err);
    cm_svc_req_replied(r);
}

void cm_svc_refuse(cm_svc_worker_t *w, cm_req_t *req, size_t ep, int code, const char *error,
                   const char *message)
{
    cm_svc_req_t r;
    cm_svc_req_start(&r, w, req, ep);
    cm_svc_reply_error(&r, code, error, message, NULL);
}
