/*
 * cm_drain — see cm_drain.h.
 */
#include "cm_drain.h"

#include <event2/event.h>
#include <signal.h>
#include <stdlib.h>

#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"

struct cm_drain {
    struct event_base *base;
    cm_http_server_t *http;
    const char *name;
    const int *inflight;
    uint64_t limit_ns;
    uint64_t started_ns;
    bool draining;
    int grace_ms;
    struct event *grace;
    struct event *sig_term;
    struct event *sig_int;
    struct event *tick;
};

cm_drain_t *cm_drain_new(struct event_base *base, cm_http_server_t *http, const char *name,
                         const int *inflight, uint64_t limit_ns)
{
    cm_drain_t *d = cm_xcalloc(1, sizeof(*d));
    d->base = base;
    d->http = http;
    d->name = name;
    d->inflight = inflight;
    d->limit_ns = limit_ns;
    return d;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    cm_drain_t *d = arg;
    if (*d->inflight <= 0 || cm_time_mono_ns() - d->started_ns > d->limit_ns) {
        if (*d->inflight > 0)
            cm_log(CM_LOG_WARN, "%s: shutting down with %d requests still in flight", d->name,
                   *d->inflight);
        event_base_loopexit(d->base, NULL);
        return;
    }
    struct timeval tv = {0, 50000};
    evtimer_add(d->tick, &tv);
}

static void stop_accepting(evutil_socket_t fd, short what, void *arg)
{
    cm_drain_t *d = arg;
    cm_log(CM_LOG_INFO, "%s: no longer accepting; finishing %d in-flight requests", d->name,
           *d->inflight);
    d->started_ns = cm_time_mono_ns();
    cm_http_server_stop_accepting(d->http);
    on_tick(-1, 0, d);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    cm_drain_t *d = arg;
    if (d->draining) {
        event_base_loopexit(d->base, NULL);
        return;
    }
    d->draining = true;
    cm_http_server_set_closing(d->http, true);
    if (d->grace_ms > 0) {
        struct timeval tv = {d->grace_ms / 1000, (d->grace_ms % 1000) * 1000};
        cm_log(CM_LOG_INFO, "%s: signal %d: readiness 503, still accepting for %d ms", d->name,
               (int)sig, d->grace_ms);
        d->grace = evtimer_new(d->base, stop_accepting, d);
        if (d->grace != NULL && evtimer_add(d->grace, &tv) == 0)
            return;
    }
    cm_log(CM_LOG_INFO, "%s: signal %d", d->name, (int)sig);
    stop_accepting(-1, 0, d);
}

void cm_drain_set_grace(cm_drain_t *d, int ms)
{
    d->grace_ms = ms > 0 ? ms : 0;
}

int cm_drain_run(cm_drain_t *d)
{
    signal(SIGPIPE, SIG_IGN);
    d->sig_term = evsignal_new(d->base, SIGTERM, on_signal, d);
    d->sig_int = evsignal_new(d->base, SIGINT, on_signal, d);
    d->tick = evtimer_new(d->base, on_tick, d);
    if (d->sig_term == NULL || d->sig_int == NULL || d->tick == NULL)
        return -1;
    event_add(d->sig_term, NULL);
    event_add(d->sig_int, NULL);
    cm_log(CM_LOG_INFO, "%s listening on port %d", d->name, cm_http_server_port(d->http));
    int rc = event_base_dispatch(d->base);
    cm_log(CM_LOG_INFO, "%s stopped", d->name);
    return rc < 0 ? -1 : 0;
}

bool cm_drain_draining(const cm_drain_t *d)
{
    return d && d->draining;
}

void cm_drain_free(cm_drain_t *d)
{
    if (d == NULL)
        return;
    if (d->sig_term)
        event_free(d->sig_term);
    if (d->sig_int)
        event_free(d->sig_int);
    if (d->tick)
        event_free(d->tick);
    if (d->grace)
        event_free(d->grace);
    free(d);
}
