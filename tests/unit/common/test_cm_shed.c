/*
 * Unit tests for common/cm_shed.c: the loop-lag probe on a real event loop. A callback
 * that holds the loop makes the policy shed (counted, Retry-After as configured) while
 * the hold is still going and until the probe has seen the loop catch up; the owner's
 * hook hears when lagging starts and stops. Loops run until done or a hard timeout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "cm_metrics.h"
#include "cm_shed.h"

#define HARD_MS 5000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct fx {
    struct event_base *base;
    cm_metrics_t *m;
    cm_counter_t *counters[CM_SHED_NCAUSES];
    cm_shed_t *shed;
    int lag_on, lag_off;  /* hook calls */
    int shed_during_hold; /* cm_shed_request inside the holding callback */
};

static void on_lag(bool lagging, void *arg)
{
    struct fx *f = arg;
    if (lagging)
        f->lag_on++;
    else
        f->lag_off++;
}

/* Holds the loop 200 ms (a burst of handshakes), asking the policy at the end. */
static void on_hold(evutil_socket_t fd, short what, void *arg)
{
    struct fx *f = arg;
    int64_t t0 = mono_ms();
    while (mono_ms() - t0 < 200)
        ;
    f->shed_during_hold = cm_shed_request(f->shed);
}

static void on_check(evutil_socket_t fd, short what, void *arg)
{
    struct fx *f = arg;
    if (f->lag_off > 0)
        event_base_loopbreak(f->base);
}

static void on_hard(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(arg);
}

static void test_a_held_loop_sheds_then_recovers(void **state)
{
    static struct fx f;
    const struct timeval later = {0, 120000}, tick = {0, 5000}, hard = {HARD_MS / 1000, 0};
    (void)state;

    memset(&f, 0, sizeof(f));
    f.base = event_base_new();
    f.m = cm_metrics_new();
    for (int i = 0; i < CM_SHED_NCAUSES; i++) {
        char label[48];
        snprintf(label, sizeof(label), "cause=\"%s\"", cm_shed_cause_name((cm_shed_cause_t)i));
        f.counters[i] = cm_metrics_counter(f.m, "t_shed_total", "shed", label);
    }
    f.shed = cm_shed_new(f.base, 50, 3, f.counters, on_lag, &f);
    assert_false(cm_shed_request(f.shed)); /* an idle loop: no lag */
    assert_string_equal(cm_shed_retry_after(f.shed), "3");
    assert_int_equal(cm_shed_retry_after_s(f.shed), 3);

    struct event *hold = evtimer_new(f.base, on_hold, &f);
    struct event *check = event_new(f.base, -1, EV_PERSIST, on_check, &f);
    struct event *stop = evtimer_new(f.base, on_hard, f.base);
    evtimer_add(hold, &later);
    event_add(check, &tick);
    evtimer_add(stop, &hard);
    event_base_dispatch(f.base);

    /* inside the hold, the overdue probe already counts: shed while it goes on */
    assert_true(f.shed_during_hold);
    assert_int_equal(cm_counter_value(f.counters[CM_SHED_LOOP_LAG]), 1);
    /* the late probe said "lagging" once, a timely one after it "caught up" */
    assert_int_equal(f.lag_on, 1);
    assert_int_equal(f.lag_off, 1);
    assert_int_equal(cm_counter_value(f.counters[CM_SHED_ACCEPT_LAG]), 1);
    assert_false(cm_shed_lagging(f.shed));
    assert_false(cm_shed_request(f.shed));
    assert_int_equal(cm_counter_value(f.counters[CM_SHED_LOOP_LAG]), 1);

    cm_shed_count(f.shed, CM_SHED_HANDSHAKES);
    cm_shed_count(NULL, CM_SHED_HANDSHAKES); /* no policy: nothing */
    assert_int_equal(cm_counter_value(f.counters[CM_SHED_HANDSHAKES]), 1);

    event_free(hold);
    event_free(check);
    event_free(stop);
    cm_shed_free(f.shed);
    cm_metrics_free(f.m);
    event_base_free(f.base);
}

static void test_no_lag_budget_never_sheds(void **state)
{
    struct event_base *base = event_base_new();
    cm_shed_t *s = cm_shed_new(base, 0, 2, NULL, NULL, NULL);
    (void)state;

    assert_false(cm_shed_request(s));
    assert_int_equal(cm_shed_lag_ms(s), 0);
    cm_shed_count(s, CM_SHED_HANDSHAKES); /* no counters: nothing */
    /* no probe was armed */
    assert_int_equal(event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED), 0);
    cm_shed_free(s);
    cm_shed_free(NULL);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_held_loop_sheds_then_recovers),
        cmocka_unit_test(test_no_lag_budget_never_sheds),
    };
    return cmocka_run_group_tests_name("cm_shed", tests, NULL, NULL);
}
