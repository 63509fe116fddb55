/*
 * cm_shed — see cm_shed.h. Runs on the thread of the loop it was made on.
 *
 * Shape: one non-persistent timer, re-armed from each firing, so every probe measures
 * the lag of that one wait (a persistent timer would carry a late firing into the next).
 * The probe's verdict (lagging or not) is told to the owner when it changes: cm_http
 * stops accepting while it lags, since new connections' handshakes are what a crowd
 * brings most of.
 * A request checks the last probe's lag and, so that one long pass is seen while it is
 * still going, how overdue the next probe is: a clock read per request and nothing
 * else, the cost the policy is allowed to have on the hot path (docs/design.md).
 */
#include "cm_shed.h"

#include <stdio.h>
#include <stdlib.h>

#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"

#define MS_NS 1000000ll

struct cm_shed {
    struct event *probe; /* NULL: lag_ms 0 */
    int64_t lag_ms;      /* 0: never shed for lag */
    uint64_t due_ns;     /* when the probe should fire (monotonic) */
    int64_t last_lag_ns; /* how late the last probe fired */
    cm_counter_t *counters[CM_SHED_NCAUSES];
    int retry_after_s;
    char retry_after[16];
    uint64_t shed_since_log; /* sheds since the last WARN */
    bool lagging;            /* the last probe's verdict */
    void (*on_lag)(bool lagging, void *arg);
    void *arg;
};

static void arm(cm_shed_t *s)
{
    const struct timeval tv = {0, CM_SHED_PROBE_MS * 1000};

    s->due_ns = cm_time_mono_ns() + (uint64_t)CM_SHED_PROBE_MS * MS_NS;
    evtimer_add(s->probe, &tv);
}

static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    cm_shed_t *s = arg;
    int64_t late = (int64_t)(cm_time_mono_ns() - s->due_ns);

    (void)fd;
    (void)what;
    s->last_lag_ns = late > 0 ? late : 0;
    arm(s);
    if (s->lagging != (s->last_lag_ns > s->lag_ms * MS_NS)) {
        s->lagging = !s->lagging;
        if (s->lagging)
            cm_shed_count(s, CM_SHED_ACCEPT_LAG);
        if (s->on_lag != NULL)
            s->on_lag(s->lagging, s->arg);
    }
    if (s->shed_since_log > 0 && !s->lagging) {
        cm_log(CM_LOG_WARN, "overload: shed %llu requests (loop lag past %lld ms); caught up",
               (unsigned long long)s->shed_since_log, (long long)s->lag_ms);
        s->shed_since_log = 0;
    }
}

cm_shed_t *cm_shed_new(struct event_base *base, int lag_ms, int retry_after_s,
                       cm_counter_t *const counters[CM_SHED_NCAUSES],
                       void (*on_lag)(bool lagging, void *arg), void *arg)
{
    cm_shed_t *s = cm_xcalloc(1, sizeof(*s));

    s->on_lag = on_lag;
    s->arg = arg;
    s->lag_ms = lag_ms > 0 ? lag_ms : 0;
    s->retry_after_s = retry_after_s > 0 ? retry_after_s : 1;
    snprintf(s->retry_after, sizeof(s->retry_after), "%d", s->retry_after_s);
    for (int i = 0; counters != NULL && i < CM_SHED_NCAUSES; i++)
        s->counters[i] = counters[i];
    if (s->lag_ms > 0) {
        s->probe = evtimer_new(base, on_probe, s);
        if (s->probe == NULL) {
            cm_log(CM_LOG_ERROR, "shed: cannot create a timer");
            abort();
        }
        arm(s);
    }
    return s;
}

void cm_shed_free(cm_shed_t *s)
{
    if (s == NULL)
        return;
    if (s->probe != NULL)
        event_free(s->probe);
    free(s);
}

int64_t cm_shed_lag_ms(const cm_shed_t *s)
{
    int64_t overdue;

    if (s->probe == NULL)
        return 0;
    overdue = (int64_t)(cm_time_mono_ns() - s->due_ns);
    return (overdue > s->last_lag_ns ? overdue : s->last_lag_ns) / MS_NS;
}

bool cm_shed_lagging(const cm_shed_t *s)
{
    return s != NULL && s->lagging;
}

void cm_shed_count(cm_shed_t *s, cm_shed_cause_t cause)
{
    if (s != NULL && s->counters[cause] != NULL)
        cm_counter_inc(s->counters[cause]);
}

bool cm_shed_request(cm_shed_t *s)
{
    if (s == NULL || s->probe == NULL || cm_shed_lag_ms(s) <= s->lag_ms)
        return false;
    if (s->shed_since_log++ == 0)
        cm_log(CM_LOG_WARN,
               "overload: the loop lags %lld ms (shed_lag_ms %lld): new requests "
               "get 503 overloaded",
               (long long)cm_shed_lag_ms(s), (long long)s->lag_ms);
    cm_shed_count(s, CM_SHED_LOOP_LAG);
    return true;
}

int cm_shed_retry_after_s(const cm_shed_t *s)
{
    return s->retry_after_s;
}

const char *cm_shed_retry_after(const cm_shed_t *s)
{
    return s->retry_after;
}

const char *cm_shed_cause_name(cm_shed_cause_t cause)
{
    switch (cause) {
    case CM_SHED_LOOP_LAG:
        return "loop_lag";
    case CM_SHED_HANDSHAKES:
        return "handshakes";
    case CM_SHED_ACCEPT_LAG:
        return "accept_lag";
    case CM_SHED_NCAUSES:
        break;
    }
    return "?";
}
