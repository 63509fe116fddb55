/*
 * Unit tests for gateway/gw_signer.c: tokens signed on worker threads come back on the
 * loop thread, verify, and are all accounted for; a full queue answers cm_err_busy at
 * once; freeing the pool fails what it never signed with cm_err_shutdown. It also
 * prints the signing throughput with 1 and 2 threads (information, not an assertion:
 * tests never assert on wall time).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_jwt.h"
#include "cm_time.h"
#include "gw_signer.h"
#include "keys.h"

typedef struct fixture {
    struct event_base *base;
    char *pem;
    cm_jwt_signer_t *signer;
    cm_jwt_keyset_t *ks;
} fixture_t;

typedef struct tally {
    struct event_base *base;
    pthread_t loop_thread;
    int want, ok, busy, shutdown, other, wrong_thread;
    const cm_jwt_keyset_t *ks;
    int verified;
} tally_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    f->base = event_base_new();
    f->pem = tkey_new_pem();
    char err[256];
    f->signer = cm_jwt_signer_new(NULL, f->pem, strlen(f->pem), err, sizeof(err));
    assert_non_null(f->signer);
    f->ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_pem(f->ks, NULL, f->pem, strlen(f->pem), err, sizeof(err)),
                     0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    cm_jwt_keyset_free(f->ks);
    cm_jwt_signer_free(f->signer);
    free(f->pem);
    event_base_free(f->base);
    free(f);
    return 0;
}

static void claims_for(cm_jwt_claims_t *c, int i)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->iss, sizeof(c->iss), "onsale-gateway");
    snprintf(c->sub, sizeof(c->sub), "visitor-%d", i);
    snprintf(c->evt, sizeof(c->evt), "e1");
    snprintf(c->jti, sizeof(c->jti), "jti-%d", i);
    c->iat = c->nbf = 1800000000;
    c->exp = c->iat + 600;
}

static void on_done(const char *err, char *token, void *arg)
{
    tally_t *t = arg;
    if (!pthread_equal(pthread_self(), t->loop_thread))
        t->wrong_thread++;
    if (err == NULL && token != NULL) {
        t->ok++;
        if (t->ks && t->verified < 20) {
            cm_jwt_claims_t out;
            if (cm_jwt_verify(t->ks, token, strlen(token), NULL, 1800000001, &out) == CM_JWT_OK &&
                strncmp(out.sub, "visitor-", 8) == 0)
                t->verified++;
        }
    } else if (err == cm_err_busy) {
        t->busy++;
    } else if (err == cm_err_shutdown) {
        t->shutdown++;
    } else {
        t->other++;
    }
    free(token);
    if (t->ok + t->busy + t->shutdown + t->other == t->want)
        event_base_loopbreak(t->base);
}

/* Runs the loop until the tally is complete (a long timer keeps dispatch from returning
 * early: the signer's wake event is only ever activated, never added). */
static void on_keep(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(arg);
}

static void run_loop(struct event_base *base)
{
    struct event *keep = evtimer_new(base, on_keep, base);
    struct timeval tv = {60, 0};
    evtimer_add(keep, &tv);
    event_base_dispatch(base);
    event_free(keep);
}

static double run_batch(fixture_t *f, int threads, int n, tally_t *t)
{
    gw_signer_t *p = gw_signer_new(f->base, f->signer, threads, (size_t)n);
    assert_non_null(p);
    memset(t, 0, sizeof(*t));
    t->base = f->base;
    t->loop_thread = pthread_self();
    t->want = n;
    t->ks = f->ks;
    uint64_t t0 = cm_time_mono_ns();
    for (int i = 0; i < n; i++) {
        cm_jwt_claims_t c;
        claims_for(&c, i);
        gw_signer_submit(p, &c, on_done, t);
    }
    assert_int_equal(t->ok, 0); /* never called back from inside submit */
    run_loop(f->base);
    double secs = (double)(cm_time_mono_ns() - t0) / 1e9;
    gw_signer_free(p);
    return (double)n / secs;
}

static void test_sign_and_rate(void **state)
{
    fixture_t *f = *state;
    tally_t t;
    int n = getenv("GW_SIGNER_N") ? atoi(getenv("GW_SIGNER_N")) : 2000;
    double r0 = run_batch(f, 0, n, &t); /* inline on the loop thread */
    assert_int_equal(t.ok, n);
    assert_int_equal(t.wrong_thread, 0);
    assert_int_equal(t.verified, 20);
    double r1 = run_batch(f, 1, n, &t);
    assert_int_equal(t.ok, n);
    assert_int_equal(t.wrong_thread, 0);
    assert_int_equal(t.verified, 20);
    double r2 = run_batch(f, 2, n, &t);
    assert_int_equal(t.ok, n);
    assert_int_equal(t.wrong_thread, 0);
    printf("# admission tokens signed: %.0f/s inline, %.0f/s with 1 thread, %.0f/s with 2 threads "
           "(%d each)\n",
           r0, r1, r2, n);
}

static void test_full_queue_is_busy(void **state)
{
    fixture_t *f = *state;
    gw_signer_t *p = gw_signer_new(f->base, f->signer, 1, 4);
    tally_t t = {.base = f->base, .loop_thread = pthread_self(), .want = 200};
    for (int i = 0; i < 200; i++) {
        cm_jwt_claims_t c;
        claims_for(&c, i);
        gw_signer_submit(p, &c, on_done, &t);
    }
    run_loop(f->base);
    assert_true(t.busy > 0);
    assert_int_equal(t.ok + t.busy, 200);
    assert_int_equal(t.other, 0);
    gw_signer_free(p);
}

static void test_free_fails_pending_with_shutdown(void **state)
{
    fixture_t *f = *state;
    gw_signer_t *p = gw_signer_new(f->base, f->signer, 1, 1000);
    tally_t t = {.base = f->base, .loop_thread = pthread_self(), .want = 300};
    for (int i = 0; i < 300; i++) {
        cm_jwt_claims_t c;
        claims_for(&c, i);
        gw_signer_submit(p, &c, on_done, &t);
    }
    gw_signer_free(p); /* every job answered exactly once, on this thread */
    assert_int_equal(t.ok + t.shutdown, 300);
    assert_true(t.shutdown > 0);
    assert_int_equal(t.wrong_thread, 0);
}

int main(void)
{
    if (evthread_use_pthreads() != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sign_and_rate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_queue_is_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_fails_pending_with_shutdown, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
