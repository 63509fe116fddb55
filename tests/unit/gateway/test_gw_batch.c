/*
 * Unit tests for gateway/gw_batch.c and lua/join_batch.lua, against a real Redis
 * (tests/support/svc.h): a batch that reaches its cap is sent at once, not when its
 * window ends; a window's partial batch is sent by its timer; the fans of a batch get one
 * contiguous block of numbers in arrival order, after whatever another gateway took; a
 * proof used twice refuses only the fan that replayed it, and join.lua (joins not batched)
 * refuses a replay the same way; pre-queue arrivals are added in
 * order up to max_prequeue; a room that does not exist is told to every fan; while a
 * batch is in flight the next one gathers until it is answered, or until its window ends;
 * and two early sends of a room keep the gap apart.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_redis.h"
#include "gw_batch.h"
#include "gw_lua.h"
#include "gw_rediskeys.h"
#include "svc.h"

#define NFANS   9
#define HOUR_US (3600LL * 1000000)

static svc_redis_t *srv;

typedef struct fixture {
    struct event_base *base;
    cm_redis_t *r;
    gw_batch_t *b;
    int done, replies;
    const char *err[NFANS];
    char what[NFANS][24];
    int64_t num[NFANS];
    long long last; /* the integer answer of the last command */
} fixture_t;

typedef struct call {
    fixture_t *f;
    int i;
} call_t;

static call_t calls[NFANS];

static void on_hard(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    fixture_t *f = arg;
    if (f->replies == 0 ? cm_redis_connected(f->r) : f->done >= f->replies)
        event_base_loopbreak(f->base);
}

/* Runs the loop until `want` answers came (fans or commands; 0: until the client is
 * connected) or max_ms passed. */
static int run_until_done(fixture_t *f, int want, int max_ms)
{
    struct timeval poll_tv = {0, 2000}, hard_tv = {max_ms / 1000, (max_ms % 1000) * 1000};
    struct event *poll = event_new(f->base, -1, EV_PERSIST, on_poll, f);
    struct event *hard = evtimer_new(f->base, on_hard, f->base);
    f->replies = want;
    event_add(poll, &poll_tv);
    event_add(hard, &hard_tv);
    event_base_dispatch(f->base);
    event_free(poll);
    event_free(hard);
    return f->done;
}

static void on_fan(void *arg, const char *err, const gw_join_result_t *res)
{
    call_t *c = arg;
    fixture_t *f = c->f;
    f->err[c->i] = err;
    if (res != NULL) {
        snprintf(f->what[c->i], sizeof(f->what[c->i]), "%s", gw_lua_join_name(res->what));
        f->num[c->i] = res->num;
    }
    f->done++;
}

static void on_cmd(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    fixture_t *f = arg;
    assert_null(err);
    assert_int_not_equal(cm_redis_reply_type(reply), CM_REDIS_ERROR);
    f->last = cm_redis_reply_type(reply) == CM_REDIS_INT ? cm_redis_reply_int(reply) : 0;
    f->done++;
}

/* One Redis command (NULL-terminated words), waited for. */
static void cmd(fixture_t *f, ...)
{
    const char *argv[16];
    int argc = 0;
    va_list ap;
    va_start(ap, f);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc < 16;)
        argv[argc++] = a;
    va_end(ap);
    f->done = 0;
    assert_int_equal(cm_redis_command(f->r, on_cmd, f, argc, argv, NULL), 0);
    assert_int_equal(run_until_done(f, 1, 5000), 1);
    f->done = 0;
}

static void add(fixture_t *f, int i, const char *event, const char *serial, const char *set)
{
    gw_batch_fan_t fan = {0};
    snprintf(fan.visitor, sizeof(fan.visitor), "%032x", i + 1);
    snprintf(fan.score, sizeof(fan.score), "%d", 1000 - i);
    if (serial != NULL) {
        snprintf(fan.proof_serial, sizeof(fan.proof_serial), "%s", serial);
        snprintf(fan.proof_key, sizeof(fan.proof_key), "os:{%s}:q:pw:%s", event, set);
        snprintf(fan.proof_ttl, sizeof(fan.proof_ttl), "120");
    }
    calls[i] = (call_t){f, i};
    gw_batch_add(f->b, event, &fan, on_fan, &calls[i]);
}

static int setup(void **state)
{
    static fixture_t f;
    memset(&f, 0, sizeof(f));
    cm_redis_auth_t auth = {.user = SVC_REDIS_USER, .password = svc_password()};
    f.base = event_base_new();
    f.r = cm_redis_new_auth(f.base, SVC_HOST, svc_redis_port(srv), 5000, &auth);
    run_until_done(&f, 0, 5000);
    assert_true(cm_redis_connected(f.r));
    cmd(&f, "FLUSHALL", NULL);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    gw_batch_free(f->b);
    cm_redis_free(f->r);
    event_base_free(f->base);
    return 0;
}

/* An open room: its settings hash with a gen; open since the epoch. */
static void open_room(fixture_t *f, const char *event)
{
    char key[128];
    snprintf(key, sizeof(key), "os:{%s}:q:cfg", event);
    cmd(f, "HSET", key, "gen", "1234", "opens_at", "0", NULL);
}

static void test_cap_sends_without_waiting_for_the_window(void **state)
{
    fixture_t *f = *state;
    open_room(f, "cap");
    f->b = gw_batch_new(f->base, f->r, HOUR_US, 0, 3); /* the timer would wait an hour */
    for (int i = 0; i < 2; i++)
        add(f, i, "cap", NULL, NULL);
    assert_int_equal(gw_batch_sent(f->b), 0);
    add(f, 2, "cap", NULL, NULL);
    assert_int_equal(gw_batch_sent(f->b), 1); /* sent by the third join itself */
    assert_int_equal(run_until_done(f, 3, 10000), 3);
    assert_int_equal(gw_batch_sent(f->b), 1);
    for (int i = 0; i < 3; i++) {
        assert_null(f->err[i]);
        assert_string_equal(f->what[i], "queued");
        assert_int_equal(f->num[i], i + 1); /* arrival order */
    }
}

static void test_window_sends_a_partial_batch(void **state)
{
    fixture_t *f = *state;
    open_room(f, "win");
    f->b = gw_batch_new(f->base, f->r, 20000, 0, 256);
    add(f, 0, "win", NULL, NULL);
    add(f, 1, "win", NULL, NULL);
    assert_int_equal(gw_batch_sent(f->b), 0); /* gathering */
    assert_int_equal(run_until_done(f, 2, 10000), 2);
    assert_int_equal(gw_batch_sent(f->b), 1);
    assert_int_equal(f->num[0], 1);
    assert_int_equal(f->num[1], 2);
}

/* Redis busy (DEBUG SLEEP 1 from another connection): the room's first batch is in flight,
 * so the next one gathers — until the first is answered (window an hour), or until its
 * window ends (window 50 ms) while the first is still out. */
static fixture_t sleeper; /* the connection that keeps Redis asleep, and its answer */

static void busy_redis(fixture_t *f, cm_redis_t **other)
{
    cm_redis_auth_t auth = {.user = SVC_REDIS_USER, .password = svc_password()};
    memset(&sleeper, 0, sizeof(sleeper));
    sleeper.base = f->base;
    *other = sleeper.r = cm_redis_new_auth(f->base, SVC_HOST, svc_redis_port(srv), 5000, &auth);
    run_until_done(&sleeper, 0, 5000);
    const char *argv[] = {"DEBUG", "SLEEP", "1"};
    assert_int_equal(cm_redis_command(sleeper.r, on_cmd, &sleeper, 3, argv, NULL), 0);
    run_until_done(&sleeper, 1, 50); /* the sleep reaches Redis first (not a wait for it) */
}

/* Waits for the sleep's own answer, then closes its connection. */
static void awake(cm_redis_t *other)
{
    run_until_done(&sleeper, 1, 5000);
    assert_int_equal(sleeper.done, 1);
    cm_redis_free(other);
}

static void test_next_batch_goes_when_the_one_in_flight_is_answered(void **state)
{
    fixture_t *f = *state;
    open_room(f, "fly");
    f->b = gw_batch_new(f->base, f->r, HOUR_US, 0, 256);
    cm_redis_t *other = NULL;
    busy_redis(f, &other);
    add(f, 0, "fly", NULL, NULL);
    run_until_done(f, 1, 20); /* sent after the loop's pass; Redis still asleep */
    assert_int_equal(gw_batch_sent(f->b), 1);
    add(f, 1, "fly", NULL, NULL);
    add(f, 2, "fly", NULL, NULL);
    run_until_done(f, 1, 20);
    assert_int_equal(gw_batch_sent(f->b), 1); /* gathering behind the first */
    assert_int_equal(run_until_done(f, 3, 10000), 3);
    assert_int_equal(gw_batch_sent(f->b), 2);
    for (int i = 0; i < 3; i++)
        assert_int_equal(f->num[i], i + 1);
    awake(other);
}

static void test_window_bounds_the_wait_behind_a_slow_batch(void **state)
{
    fixture_t *f = *state;
    open_room(f, "slow");
    f->b = gw_batch_new(f->base, f->r, 50000, 0, 256);
    cm_redis_t *other = NULL;
    busy_redis(f, &other);
    add(f, 0, "slow", NULL, NULL);
    run_until_done(f, 1, 20);
    add(f, 1, "slow", NULL, NULL);
    run_until_done(f, 1, 200); /* past the window, Redis still asleep */
    assert_int_equal(f->done, 0);
    assert_int_equal(gw_batch_sent(f->b), 2);
    assert_int_equal(run_until_done(f, 2, 10000), 2);
    assert_int_equal(f->num[0], 1);
    assert_int_equal(f->num[1], 2);
    awake(other);
}

/* Redis answers fast, but a room's early sends keep gap_us apart: the second join waits
 * for the gap (500 ms here), not for the window (an hour). */
static void test_early_sends_keep_the_gap(void **state)
{
    fixture_t *f = *state;
    open_room(f, "gap");
    f->b = gw_batch_new(f->base, f->r, HOUR_US, 500000, 256);
    add(f, 0, "gap", NULL, NULL); /* a quiet room: sent after the loop's pass */
    assert_int_equal(run_until_done(f, 1, 5000), 1);
    add(f, 1, "gap", NULL, NULL);
    run_until_done(f, 2, 5); /* a few passes of the loop, far inside the gap */
    assert_int_equal(gw_batch_sent(f->b), 1);
    assert_int_equal(run_until_done(f, 2, 10000), 2);
    assert_int_equal(gw_batch_sent(f->b), 2);
    assert_int_equal(f->num[1], 2);
}

/* Another gateway's batch between two of ours: each block stays contiguous and distinct
 * (a wrong INCRBY offset would hand out a number twice or skip one). */
static void test_batches_take_contiguous_blocks(void **state)
{
    fixture_t *f = *state;
    open_room(f, "blk");
    f->b = gw_batch_new(f->base, f->r, HOUR_US, 0, 4);
    for (int i = 0; i < 4; i++)
        add(f, i, "blk", NULL, NULL);
    assert_int_equal(run_until_done(f, 4, 10000), 4);
    cmd(f, "INCRBY", "os:{blk}:q:n", "10", NULL); /* numbers 5..14 went elsewhere */
    for (int i = 4; i < 8; i++)
        add(f, i, "blk", NULL, NULL);
    assert_int_equal(run_until_done(f, 4, 10000), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(f->num[i], i + 1);
    for (int i = 4; i < 8; i++)
        assert_int_equal(f->num[i], 15 + (i - 4));
}

static void test_replayed_proof_refuses_only_its_fan(void **state)
{
    fixture_t *f = *state;
    open_room(f, "pow");
    f->b = gw_batch_new(f->base, f->r, HOUR_US, 0, 4);
    add(f, 0, "pow", "5", "7:a");
    add(f, 1, "pow", "5", "7:a"); /* the same proof again */
    add(f, 2, "pow", "5", "7:b"); /* the same serial of another issuer: another proof */
    add(f, 3, "pow", NULL, NULL);
    assert_int_equal(run_until_done(f, 4, 10000), 4);
    assert_string_equal(f->what[0], "queued");
    assert_int_equal(f->num[0], 1);
    assert_string_equal(f->what[1], "replayed");
    assert_string_equal(f->what[2], "queued");
    assert_int_equal(f->num[2], 2);
    assert_string_equal(f->what[3], "queued");
    assert_int_equal(f->num[3], 3);
    /* the proofs stay used for the next batch: its replays (also one inside the batch)
     * refuse their own fans, its fresh proofs are placed */
    add(f, 4, "pow", "5", "7:a");
    add(f, 5, "pow", "130000", "7:a");
    add(f, 6, "pow", "130000", "7:a");
    add(f, 7, "pow", "0", "8:a");
    assert_int_equal(run_until_done(f, 8, 10000), 8);
    assert_string_equal(f->what[4], "replayed");
    assert_string_equal(f->what[5], "queued");
    assert_int_equal(f->num[5], 4);
    assert_string_equal(f->what[6], "replayed");
    assert_string_equal(f->what[7], "queued");
    assert_int_equal(f->num[7], 5);
    /* a bit per proof: serials 5 and 130000 in one bitmap, each bitmap living as long as
     * its bucket's challenges (the fans' 120 s) */
    cmd(f, "BITCOUNT", "os:{pow}:q:pw:7:a", NULL);
    assert_int_equal(f->last, 2);
    cmd(f, "GETBIT", "os:{pow}:q:pw:7:a", "130000", NULL);
    assert_int_equal(f->last, 1);
    cmd(f, "TTL", "os:{pow}:q:pw:8:a", NULL);
    assert_true(f->last > 100 && f->last <= 120);
    /* a batch still gathering when the batcher goes is told shutdown */
    add(f, 8, "pow", "9", "7:a");
    gw_batch_free(f->b);
    f->b = NULL;
    assert_ptr_equal(f->err[8], cm_err_shutdown);
}

static void on_join(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    fixture_t *f = arg;
    assert_null(err);
    assert_int_equal(cm_redis_reply_type(reply), CM_REDIS_ARRAY);
    size_t len = 0;
    const char *what = cm_redis_reply_str(cm_redis_reply_at(reply, 0), &len);
    snprintf(f->what[0], sizeof(f->what[0]), "%.*s", (int)len, what);
    f->done++;
}

/* join.lua for one new fan of event with the proof serial in bitmap set; its answer's
 * first word in f->what[0]. */
static void join_one(fixture_t *f, const char *event, const char *serial, const char *set)
{
    const char *argv[GW_K_COUNT + 5];
    size_t argvlen[GW_K_COUNT + 5];
    char key[128];
    int argc = gw_rediskeys_cached(event, argv, argvlen);
    snprintf(key, sizeof(key), "os:{%s}:q:pw:%s", event, set);
    const char *args[] = {key, "0123456789abcdef0123456789abcdef", "42", serial, "120"};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++, argc++) {
        argv[argc] = args[i];
        argvlen[argc] = strlen(args[i]);
    }
    f->done = 0;
    assert_int_equal(
        cm_redis_eval(f->r, gw_lua()->join, on_join, f, GW_K_COUNT + 1, argc, argv, argvlen), 0);
    assert_int_equal(run_until_done(f, 1, 5000), 1);
}

static void test_unbatched_join_refuses_a_replayed_proof(void **state)
{
    fixture_t *f = *state;
    open_room(f, "one");
    join_one(f, "one", "3", "9:a");
    assert_string_equal(f->what[0], "queued");
    join_one(f, "one", "3", "9:a");
    assert_string_equal(f->what[0], "replayed");
    join_one(f, "one", "3", "9:b"); /* another issuer's serial 3 */
    assert_string_equal(f->what[0], "queued");
    cmd(f, "INCRBY", "os:{one}:q:n", "0", NULL); /* two numbers taken, none for the replay */
    assert_int_equal(f->last, 2);
    cmd(f, "BITCOUNT", "os:{one}:q:pw:9:a", NULL);
    assert_int_equal(f->last, 1);
    cmd(f, "TTL", "os:{one}:q:pw:9:a", NULL);
    assert_true(f->last > 100 && f->last <= 120);
}

static void test_prequeue_takes_arrivals_in_order_up_to_its_bound(void **state)
{
    fixture_t *f = *state;
    cmd(f, "HSET", "os:{pre}:q:cfg", "gen", "77", "opens_at", "99999999999999", "mode", "fifo",
        "max_prequeue", "2", NULL);
    f->b = gw_batch_new(f->base, f->r, HOUR_US, 0, 3);
    for (int i = 0; i < 3; i++)
        add(f, i, "pre", NULL, NULL);
    assert_int_equal(run_until_done(f, 3, 10000), 3);
    assert_string_equal(f->what[0], "prequeue");
    assert_string_equal(f->what[1], "prequeue");
    assert_string_equal(f->what[2], "prequeue_full");
    assert_int_equal(f->num[0], 0);
}

/* A batch whose script times out: every fan of it gets the error (gw_queue answers each
 * 503 with Retry-After), none a number. */
static void test_a_timed_out_batch_fails_every_fan(void **state)
{
    fixture_t *f = *state;
    open_room(f, "late");
    cm_redis_auth_t auth = {.user = SVC_REDIS_USER, .password = svc_password()};
    cm_redis_t *quick = cm_redis_new_auth(f->base, SVC_HOST, svc_redis_port(srv), 200, &auth);
    fixture_t g = {.base = f->base, .r = quick};
    run_until_done(&g, 0, 5000);
    cm_redis_t *other = NULL;
    busy_redis(f, &other); /* asleep for 1 s, past the 200 ms deadline */
    f->b = gw_batch_new(f->base, quick, HOUR_US, 0, 3);
    for (int i = 0; i < 3; i++)
        add(f, i, "late", NULL, NULL);
    assert_int_equal(run_until_done(f, 3, 10000), 3);
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(f->err[i], cm_err_timeout);
        assert_string_equal(f->what[i], "");
    }
    gw_batch_free(f->b);
    f->b = NULL;
    cm_redis_free(quick);
    awake(other);
}

static void test_unknown_room_is_told_to_every_fan(void **state)
{
    fixture_t *f = *state;
    f->b = gw_batch_new(f->base, f->r, HOUR_US, 0, 2);
    add(f, 0, "nowhere", NULL, NULL);
    add(f, 1, "nowhere", NULL, NULL);
    assert_int_equal(run_until_done(f, 2, 10000), 2);
    assert_string_equal(f->what[0], "unknown");
    assert_string_equal(f->what[1], "unknown");
}

static int group_setup(void **state)
{
    (void)state;
    cm_log_init("test_gw_batch", CM_LOG_WARN);
    srv = svc_redis_start();
    return srv == NULL ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    svc_redis_stop(srv);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unbatched_join_refuses_a_replayed_proof, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cap_sends_without_waiting_for_the_window, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_window_sends_a_partial_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_batch_goes_when_the_one_in_flight_is_answered,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_bounds_the_wait_behind_a_slow_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_early_sends_keep_the_gap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches_take_contiguous_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replayed_proof_refuses_only_its_fan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prequeue_takes_arrivals_in_order_up_to_its_bound,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_timed_out_batch_fails_every_fan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_room_is_told_to_every_fan, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
