/*
 * cm_drain — see cm_drain.h.
 *
 * The start is an event activated from the signal thread (event_active is thread-safe
 * once evthread_use_pthreads is on); everything else happens on the loop's thread, so
 * the only shared fields are the draining flag and the start count (atomics).
 */
#include "cm_drain.h"

#include <event2/event.h>
#include <stdlib.h>

#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"

#define MAX_HTTP 4

struct cm_drain {
    struct event_base *base;
    cm_http_server_t *http[MAX_HTTP];
    int nhttp;
    const char *name;
    const int *inflight;
    uint64_t limit_ns;
    uint64_t started_ns;
    int draining; /* atomic */
    int starts;   /* atomic: cm_drain_start calls */
    int grace_ms;
    struct event *grace;
    struct event *start;
    struct event *tick;
};

static int inflight_now(const cm_drain_t *d)
{
    return __atomic_load_n(d->inflight, __ATOMIC_RELAXED);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    cm_drain_t *d = arg;
    int n = inflight_now(d);
    if (n <= 0 || cm_time_mono_ns() - d->started_ns > d->limit_ns) {
        if (n > 0)
            cm_log(CM_LOG_WARN, "%s: shutting down with %d requests still in flight", d->name, n);
        event_base_loopexit(d->base, NULL);
        return;
    }
    struct timeval tv = {0, 50000};
    evtimer_add(d->tick, &tv);
}

static void stop_accepting(evutil_socket_t fd, short what, void *arg)
{
    cm_drain_t *d = arg;
    cm_log(CM_LOG_DEBUG, "%s: no longer accepting; finishing %d in-flight requests", d->name,
           inflight_now(d));
    d->started_ns = cm_time_mono_ns();
    for (int i = 0; i < d->nhttp; i++)
        cm_http_server_stop_accepting(d->http[i]);
    on_tick(-1, 0, d);
}

static void on_start(evutil_socket_t fd, short what, void *arg)
{
    cm_drain_t *d = arg;
    if (__atomic_load_n(&d->starts, __ATOMIC_ACQUIRE) > 1) {
        event_base_loopexit(d->base, NULL);
        return;
    }
    if (d->started_ns != 0 || d->grace != NULL)
        return;
    for (int i = 0; i < d->nhttp; i++)
        cm_http_server_set_closing(d->http[i], true);
    if (d->grace_ms > 0) {
        struct timeval tv = {d->grace_ms / 1000, (d->grace_ms % 1000) * 1000};
        d->grace = evtimer_new(d->base, stop_accepting, d);
        if (d->grace != NULL && evtimer_add(d->grace, &tv) == 0)
            return;
    }
    stop_accepting(-1, 0, d);
}

void cm_drain_set_grace(cm_drain_t *d, int ms)
{
    d->grace_ms = ms > 0 ? ms : 0;
}

cm_drain_t *cm_drain_new(struct event_base *base, const char *name, const int *inflight,
                         uint64_t limit_ns)
{
    cm_drain_t *d = cm_xcalloc(1, sizeof(*d));
    d->base = base;
    d->name = name;
    d->inflight = inflight;
    d->limit_ns = limit_ns;
    d->start = event_new(base, -1, 0, on_start, d);
    d->tick = evtimer_new(base, on_tick, d);
    if (d->start == NULL || d->tick == NULL)
        abort();
    return d;
}

void cm_drain_add_http(cm_drain_t *d, cm_http_server_t *http)
{
    if (http != NULL && d->nhttp < MAX_HTTP)
        d->http[d->nhttp++] = http;
}

void cm_drain_start(cm_drain_t *d)
{
    __atomic_store_n(&d->draining, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&d->starts, 1, __ATOMIC_ACQ_REL);
    event_active(d->start, EV_TIMEOUT, 1);
}

bool cm_drain_draining(const cm_drain_t *d)
{
    return d && __atomic_load_n(&d->draining, __ATOMIC_ACQUIRE);
}

void cm_drain_free(cm_drain_t *d)
{
    if (d == NULL)
        return;
    event_free(d->start);
    event_free(d->tick);
    if (d->grace)
        event_free(d->grace);
    free(d);
}
