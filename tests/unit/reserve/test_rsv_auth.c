/*
 * Unit tests for rsv_auth: the admission gate and its verified-token cache. Tokens are
 * signed at run time with a fresh P-256 key; requests are bare evhttp_request objects
 * carrying only the Authorization header.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "cm_jwt.h"
#include "rsv_auth.h"

typedef struct fixture {
    rsv_auth_t *auth;
    cm_jwt_signer_t *signer;
    cm_jwt_signer_t *stranger; /* a key the reserve does not trust */
} fixture_t;

static char *new_key_pem(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL);
    char *data = NULL;
    long n = BIO_get_mem_data(b, &data);
    char *pem = malloc((size_t)n + 1); /* BIO memory is not NUL-terminated */
    memcpy(pem, data, (size_t)n);
    pem[n] = '\0';
    BIO_free(b);
    EVP_PKEY_free(k);
    return pem;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char err[256];
    char *pem = new_key_pem(), *other = new_key_pem();
    f->signer = cm_jwt_signer_new(NULL, pem, strlen(pem), err, sizeof(err));
    f->stranger =
        cm_jwt_signer_new(cm_jwt_signer_kid(f->signer), other, strlen(other), err, sizeof(err));
    assert_non_null(f->signer);
    assert_non_null(f->stranger);
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_pem(ks, NULL, pem, strlen(pem), err, sizeof(err)), 0);
    f->auth = rsv_auth_new(NULL, ks, 0, 64, 0);
    free(pem);
    free(other);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    rsv_auth_free(f->auth);
    cm_jwt_signer_free(f->signer);
    cm_jwt_signer_free(f->stranger);
    free(f);
    return 0;
}

static char *token(const cm_jwt_signer_t *s, const char *evt, const char *sub, int64_t exp_in)
{
    cm_jwt_claims_t c;
    memset(&c, 0, sizeof(c));
    int64_t now = (int64_t)time(NULL);
    strcpy(c.iss, "test");
    strcpy(c.sub, sub);
    strcpy(c.evt, evt);
    strcpy(c.jti, "j1");
    c.iat = c.nbf = now - 10;
    c.exp = now + exp_in;
    char *t = cm_jwt_sign(s, &c, CM_JWT_AUDIENCE);
    assert_non_null(t);
    return t;
}

typedef struct result {
    int result;
    const char *why;
} result_t;

static void on_result(rsv_auth_result_t r, const char *why, void *arg)
{
    result_t *res = arg;
    res->result = (int)r;
    res->why = why;
}

static rsv_auth_result_t check(fixture_t *f, const char *authz, const char *event,
                               bool allow_expired, cm_jwt_claims_t *claims)
{
    struct evhttp_request *req = evhttp_request_new(NULL, NULL);
    if (authz)
        evhttp_add_header(evhttp_request_get_input_headers(req), "Authorization", authz);
    result_t res = {-1, NULL};
    rsv_auth_check(f->auth, req, event, allow_expired, claims, on_result, &res);
    evhttp_request_free(req);
    /* with no worker threads the answer is synchronous */
    assert_int_not_equal(res.result, -1);
    return (rsv_auth_result_t)res.result;
}

static rsv_auth_result_t check_token(fixture_t *f, const char *tok, const char *event,
                                     bool allow_expired, cm_jwt_claims_t *claims)
{
    char authz[4200];
    snprintf(authz, sizeof(authz), "Bearer %s", tok);
    return check(f, authz, event, allow_expired, claims);
}

static void valid_token_for_the_event_passes_with_its_claims(void **state)
{
    fixture_t *f = *state;
    char *t = token(f->signer, "e1", "fan-1", 600);
    cm_jwt_claims_t c;
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
    assert_string_equal(c.sub, "fan-1");
    assert_string_equal(c.evt, "e1");
    free(t);
}

static void token_for_another_event_is_wrong_event(void **state)
{
    fixture_t *f = *state;
    char *t = token(f->signer, "e1", "fan-1", 600);
    cm_jwt_claims_t c;
    assert_int_equal(check_token(f, t, "e2", false, &c), RSV_AUTH_WRONG_EVENT);
    free(t);
}

static void expired_token_only_where_allowed(void **state)
{
    fixture_t *f = *state;
    char *t = token(f->signer, "e1", "fan-1", -5);
    cm_jwt_claims_t c;
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(check_token(f, t, "e1", true, &c), RSV_AUTH_OK);
    assert_string_equal(c.sub, "fan-1");
    /* cached now: the expiry is still judged on every use */
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    free(t);
}

static void untrusted_missing_and_garbage_tokens_are_invalid(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    char *t = token(f->stranger, "e1", "fan-1", 600);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(check_token(f, t, "e1", true, &c), RSV_AUTH_INVALID);
    free(t);
    assert_int_equal(check(f, NULL, "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(check(f, "Bearer ", "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(check(f, "Bearer a.b.c", "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(check(f, "Basic Zm9vOmJhcg==", "e1", false, &c), RSV_AUTH_INVALID);
}

static void a_token_is_verified_once_then_served_from_the_cache(void **state)
{
    fixture_t *f = *state;
    char *t = token(f->signer, "e1", "fan-2", 600);
    cm_jwt_claims_t c;
    uint64_t v0 = rsv_auth_verifications(f->auth), h0 = rsv_auth_hits(f->auth);
    for (int i = 0; i < 10; i++)
        assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
    assert_int_equal(rsv_auth_verifications(f->auth) - v0, 1);
    assert_int_equal(rsv_auth_hits(f->auth) - h0, 9);
    /* a forged token that differs in one signature character is verified, and refused */
    size_t n = strlen(t);
    t[n - 2] = t[n - 2] == 'A' ? 'B' : 'A';
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    free(t);
}

typedef struct burst {
    int answered, ok;
    struct event_base *base;
} burst_t;

static void on_burst(rsv_auth_result_t r, const char *why, void *arg)
{
    burst_t *b = arg;
    b->answered++;
    b->ok += r == RSV_AUTH_OK;
    if (b->answered == 40)
        event_base_loopexit(b->base, NULL);
}

static void worker_threads_verify_off_the_loop_and_answer_on_it(void **state)
{
    fixture_t *f = *state;
    evthread_use_pthreads();
    burst_t b = {0, 0, event_base_new()};
    char err[256];
    char *pem = new_key_pem();
    cm_jwt_signer_t *signer = cm_jwt_signer_new(NULL, pem, strlen(pem), err, sizeof(err));
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_pem(ks, NULL, pem, strlen(pem), err, sizeof(err)), 0);
    rsv_auth_t *auth = rsv_auth_new(b.base, ks, 0, 64, 2);
    cm_jwt_claims_t claims[40];
    struct evhttp_request *reqs[40];
    for (int i = 0; i < 40; i++) {
        char sub[16];
        snprintf(sub, sizeof(sub), "fan-%d", i);
        /* every fourth token is signed by an untrusted key */
        char *t = token(i % 4 == 3 ? f->stranger : signer, "e1", sub, 600);
        char authz[4200];
        snprintf(authz, sizeof(authz), "Bearer %s", t);
        free(t);
        reqs[i] = evhttp_request_new(NULL, NULL);
        evhttp_add_header(evhttp_request_get_input_headers(reqs[i]), "Authorization", authz);
        rsv_auth_check(auth, reqs[i], "e1", false, &claims[i], on_burst, &b);
    }
    assert_int_equal(b.answered, 0); /* nothing answered inside the calls */
    struct timeval hard = {5, 0};
    event_base_loopexit(b.base, &hard);
    event_base_dispatch(b.base);
    assert_int_equal(b.answered, 40);
    assert_int_equal(b.ok, 30);
    assert_string_equal(claims[0].sub, "fan-0");
    assert_string_equal(claims[38].sub, "fan-38");
    for (int i = 0; i < 40; i++)
        evhttp_request_free(reqs[i]);
    rsv_auth_free(auth);
    cm_jwt_signer_free(signer);
    free(pem);
    event_base_free(b.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(valid_token_for_the_event_passes_with_its_claims, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(token_for_another_event_is_wrong_event, setup, teardown),
        cmocka_unit_test_setup_teardown(expired_token_only_where_allowed, setup, teardown),
        cmocka_unit_test_setup_teardown(untrusted_missing_and_garbage_tokens_are_invalid, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_token_is_verified_once_then_served_from_the_cache, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(worker_threads_verify_off_the_loop_and_answer_on_it, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
