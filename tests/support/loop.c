/*
 * loop — see loop.h. A persistent tick checks the predicate, a one-shot timer is the
 * deadline; either breaks the loop.
 */
#include "loop.h"

struct until {
    struct event_base *base;
    int (*pred)(void *);
    void *arg;
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct until *u = arg;
    if (u->pred(u->arg))
        event_base_loopbreak(u->base);
}

static void on_hard(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

int tloop_until(struct event_base *base, int (*pred)(void *), void *arg, int max_ms)
{
    struct until u = {base, pred, arg};
    struct timeval tick_tv = {0, 2000};
    struct timeval hard_tv = {max_ms / 1000, (max_ms % 1000) * 1000};
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, &u);
    struct event *hard = evtimer_new(base, on_hard, base);

    if (!pred(arg)) {
        event_add(tick, &tick_tv);
        event_add(hard, &hard_tv);
        event_base_dispatch(base);
    }
    event_free(tick);
    event_free(hard);
    return pred(arg);
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

void tloop_for(struct event_base *base, int ms)
{
    tloop_until(base, never, NULL, ms);
}
