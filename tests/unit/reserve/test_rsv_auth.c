/*
 * Unit tests for rsv_auth: the admission gate and its verified-token cache. Tokens are
 * signed at run time with a fresh P-256 key; requests are fake cm_req_t objects
 * carrying only the Authorization header.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <strings.h>
#include <event2/thread.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "cm_hash.h"
#include "cm_jwt.h"
#include "cm_reload.h"
#include "cm_req.h"
#include "keys.h"
#include "rsv_auth.h"

#define ISSUER "onsale-gateway"

typedef struct fixture {
    rsv_auth_t *auth;
    rsv_auth_keys_t *keys;
    cm_jwt_signer_t *signer;
    cm_jwt_signer_t *stranger; /* a key the reserve does not trust */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char err[256];
    char *pem = tkey_new_pem(), *other = tkey_new_pem();
    f->signer = cm_jwt_signer_new(NULL, pem, strlen(pem), err, sizeof(err));
    f->stranger =
        cm_jwt_signer_new(cm_jwt_signer_kid(f->signer), other, strlen(other), err, sizeof(err));
    assert_non_null(f->signer);
    assert_non_null(f->stranger);
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_pem(ks, NULL, pem, strlen(pem), err, sizeof(err)), 0);
    f->keys = rsv_auth_keys_new(ks);
    rsv_auth_config_t cfg = {.issuer = ISSUER, .max_lifetime_s = 3600, .cache_size = 64};
    f->auth = rsv_auth_new(NULL, f->keys, &cfg);
    free(pem);
    free(other);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    rsv_auth_free(f->auth);
    rsv_auth_keys_free(f->keys);
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
    strcpy(c.iss, ISSUER);
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

/* A request as rsv_auth_check sees it: an Authorization header and no connection. */
typedef struct fake_req {
    cm_req_t base;
    char *authz;
} fake_req_t;

static const char *fake_header(cm_req_t *r, const char *name)
{
    return strcasecmp(name, "Authorization") == 0 ? ((fake_req_t *)r)->authz : NULL;
}

static const char *peer_addr = "?"; /* every fake request's client address */

static const char *fake_peer(cm_req_t *r)
{
    (void)r;
    return peer_addr;
}

static const cm_req_ops_t fake_ops = {.header = fake_header, .peer = fake_peer};

static cm_req_t *fake_new(const char *authz)
{
    fake_req_t *r = calloc(1, sizeof(*r));
    r->base.ops = &fake_ops;
    r->authz = authz ? strdup(authz) : NULL;
    return &r->base;
}

static void fake_free(cm_req_t *r)
{
    free(((fake_req_t *)r)->authz);
    free(r);
}

static rsv_auth_result_t check(fixture_t *f, const char *authz, const char *event,
                               bool allow_expired, cm_jwt_claims_t *claims)
{
    cm_req_t *req = fake_new(authz);
    result_t res = {-1, NULL};
    rsv_auth_check(f->auth, req, event, allow_expired, claims, on_result, &res);
    fake_free(req);
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

/* Token records (docs/tokens.md): rsv_auth_check_new judges an uncached token without
 * its signature and names its record; rsv_auth_remember caches it once the record held,
 * for new holds only. */
static void new_holds_name_the_token_record_instead_of_verifying(void **state)
{
    fixture_t *f = *state;
    rsv_auth_config_t cfg = {
        .issuer = ISSUER, .max_lifetime_s = 3600, .cache_size = 64, .records = true};
    rsv_auth_t *a = rsv_auth_new(NULL, f->keys, &cfg);
    char *t = token(f->signer, "e1", "fan-r", 600), authz[4200], record[65] = "";
    snprintf(authz, sizeof(authz), "Bearer %s", t);
    cm_req_t *req = fake_new(authz);
    cm_jwt_claims_t c;
    result_t res = {-1, NULL};
    rsv_auth_check_new(a, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_UNVERIFIED);
    assert_string_equal(c.sub, "fan-r");
    assert_int_equal(strlen(record), 64); /* hex SHA-256 of the whole token */
    assert_int_equal(rsv_auth_verifications(a), 0);
    assert_int_equal(rsv_auth_inspected(a), 1);
    /* the record held: a hit for new holds from now on (any gate of the process) … */
    rsv_auth_remember(a, req, &c);
    res.result = -1;
    rsv_auth_check_new(a, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_OK);
    /* … while every other route verifies the signature once, then hits */
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
    assert_int_equal(rsv_auth_verifications(f->auth), 1);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
    assert_int_equal(rsv_auth_verifications(f->auth), 1);
    /* a later record proof does not demote the verified token */
    rsv_auth_remember(a, req, &c);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
    assert_int_equal(rsv_auth_verifications(f->auth), 1);
    fake_free(req);

    /* what inspection refuses never reaches Redis: another event, expired, unknown key */
    char *other = token(f->signer, "e2", "fan-r", 600);
    char *late = token(f->signer, "e1", "fan-r", -60);
    char *stranger = token(f->stranger, "e1", "fan-r", 600); /* same kid, other key: */
    const struct {
        const char *tok;
        int want;
    } cases[] = {{other, RSV_AUTH_WRONG_EVENT},
                 {late, RSV_AUTH_INVALID},
                 {stranger, RSV_AUTH_UNVERIFIED}}; /* …only its record could vouch for it */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(authz, sizeof(authz), "Bearer %s", cases[i].tok);
        req = fake_new(authz);
        res.result = -1;
        rsv_auth_check_new(a, req, "e1", &c, record, on_result, &res);
        assert_int_equal(res.result, cases[i].want);
        fake_free(req);
    }
    /* the gate without records verifies, as rsv_auth_check does */
    snprintf(authz, sizeof(authz), "Bearer %s", stranger);
    req = fake_new(authz);
    res.result = -1;
    rsv_auth_check_new(f->auth, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_INVALID);
    assert_int_equal(rsv_auth_verifications(f->auth), 2);
    fake_free(req);
    rsv_auth_free(a);
    free(t);
    free(other);
    free(late);
    free(stranger);
}

/* Defect: a record proved a token for every route, so whoever could write a record could
 * act as any buyer. A forged token the gate remembered (its record was in Redis) still
 * takes holds, and is refused everywhere else: there its signature is verified. */
static void a_record_proves_new_holds_only(void **state)
{
    fixture_t *f = *state;
    rsv_auth_config_t cfg = {
        .issuer = ISSUER, .max_lifetime_s = 3600, .cache_size = 64, .records = true};
    rsv_auth_t *a = rsv_auth_new(NULL, f->keys, &cfg);
    char *forged = token(f->stranger, "e1", "victim", 600), authz[4200], record[65] = "";
    snprintf(authz, sizeof(authz), "Bearer %s", forged);
    cm_req_t *req = fake_new(authz);
    cm_jwt_claims_t c;
    result_t res = {-1, NULL};
    rsv_auth_check_new(a, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_UNVERIFIED);
    rsv_auth_remember(a, req, &c); /* someone wrote its record */
    res.result = -1;
    rsv_auth_check_new(a, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_OK);
    res.result = -1;
    rsv_auth_check(a, req, "e1", true, &c, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_INVALID);
    assert_int_equal(rsv_auth_verifications(a), 1);
    res.result = -1;
    rsv_auth_check(a, req, NULL, true, &c, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_INVALID);
    fake_free(req);
    rsv_auth_free(a);
    free(forged);
}

/* Defect: with records on, an uncached token was inspected (and its hold script run)
 * before the failure limit was asked, also from an address already limited. */
static void a_limited_address_is_refused_before_its_token_is_inspected(void **state)
{
    fixture_t *f = *state;
    rsv_auth_config_t cfg = {.issuer = ISSUER,
                             .max_lifetime_s = 3600,
                             .cache_size = 64,
                             .records = true,
                             .fail_limit = 2,
                             .fail_window_s = 3600};
    rsv_auth_t *a = rsv_auth_new(NULL, f->keys, &cfg);
    char *forged = token(f->stranger, "e1", "mallory", 600), authz[4200], record[65] = "";
    snprintf(authz, sizeof(authz), "Bearer %s", forged);
    cm_req_t *req = fake_new(authz);
    cm_jwt_claims_t c;
    result_t res = {-1, NULL};
    for (int i = 0; i < 2; i++) { /* what the hold does when the record is missing */
        rsv_auth_check_new(a, req, "e1", &c, record, on_result, &res);
        assert_int_equal(res.result, RSV_AUTH_UNVERIFIED);
        rsv_auth_check(a, req, "e1", false, &c, on_result, &res);
        assert_int_equal(res.result, RSV_AUTH_INVALID);
    }
    assert_int_equal(rsv_auth_inspected(a), 2);
    res.result = -1;
    rsv_auth_check_new(a, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_LIMITED);
    assert_int_equal(rsv_auth_inspected(a), 2); /* no parse, no hold script */
    assert_int_equal(rsv_auth_limited(a), 1);
    fake_free(req);
    rsv_auth_free(a);
    free(forged);
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
    char *pem = tkey_new_pem();
    cm_jwt_signer_t *signer = cm_jwt_signer_new(NULL, pem, strlen(pem), err, sizeof(err));
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_pem(ks, NULL, pem, strlen(pem), err, sizeof(err)), 0);
    rsv_auth_keys_t *keys = rsv_auth_keys_new(ks);
    rsv_auth_config_t cfg = {.issuer = ISSUER, .cache_size = 64, .threads = 2};
    rsv_auth_t *auth = rsv_auth_new(b.base, keys, &cfg);
    cm_jwt_claims_t claims[40];
    cm_req_t *reqs[40];
    for (int i = 0; i < 40; i++) {
        char sub[16];
        snprintf(sub, sizeof(sub), "fan-%d", i);
        /* every fourth token is signed by an untrusted key */
        char *t = token(i % 4 == 3 ? f->stranger : signer, "e1", sub, 600);
        char authz[4200];
        snprintf(authz, sizeof(authz), "Bearer %s", t);
        free(t);
        reqs[i] = fake_new(authz);
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
        fake_free(reqs[i]);
    rsv_auth_free(auth);
    rsv_auth_keys_free(keys);
    cm_jwt_signer_free(signer);
    free(pem);
    event_base_free(b.base);
}

static char *token_with(const cm_jwt_signer_t *s, const char *iss, int64_t iat, int64_t exp)
{
    cm_jwt_claims_t c;
    memset(&c, 0, sizeof(c));
    strcpy(c.iss, iss);
    strcpy(c.sub, "fan-x");
    strcpy(c.evt, "e1");
    strcpy(c.jti, "j2");
    c.iat = c.nbf = iat;
    c.exp = exp;
    char *t = cm_jwt_sign(s, &c, CM_JWT_AUDIENCE);
    assert_non_null(t);
    return t;
}

static void issuer_and_maximum_lifetime_are_enforced(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    int64_t now = (int64_t)time(NULL);
    char *t = token_with(f->signer, ISSUER, now - 10, now + 3000);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
    free(t);
    t = token_with(f->signer, "someone-else", now - 10, now + 3000);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    free(t);
    t = token_with(f->signer, "", now - 10, now + 3000); /* no iss at all */
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    free(t);
    /* max_lifetime_s is 3600: a day-long token is refused though correctly signed */
    t = token_with(f->signer, ISSUER, now - 10, now + 86400);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    free(t);
    /* an old iat cannot hide a far exp either way */
    t = token_with(f->signer, ISSUER, now - 86400, now + 600);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
    free(t);
}

static void failed_verifications_limit_the_address(void **state)
{
    fixture_t *f = *state;
    rsv_auth_config_t cfg = {
        .issuer = ISSUER, .cache_size = 64, .fail_limit = 3, .fail_window_s = 3600};
    rsv_auth_t *saved = f->auth;
    f->auth = rsv_auth_new(NULL, f->keys, &cfg);
    cm_jwt_claims_t c;
    char *good = token(f->signer, "e1", "fan-ok", 600), *other = token(f->signer, "e1", "b", 600);
    assert_int_equal(check_token(f, good, "e1", false, &c), RSV_AUTH_OK); /* now cached */
    char *forged = token(f->stranger, "e1", "mallory", 600);
    for (int i = 0; i < 3; i++)
        assert_int_equal(check_token(f, forged, "e1", false, &c), RSV_AUTH_INVALID);
    uint64_t v = rsv_auth_verifications(f->auth);
    /* the limit reached: no more verifications for this address, forged or not */
    assert_int_equal(check_token(f, forged, "e1", false, &c), RSV_AUTH_LIMITED);
    assert_int_equal(check_token(f, other, "e1", false, &c), RSV_AUTH_LIMITED);
    assert_int_equal(rsv_auth_verifications(f->auth), v);
    assert_int_equal(rsv_auth_limited(f->auth), 2);
    /* a token already verified costs nothing and still works */
    assert_int_equal(check_token(f, good, "e1", false, &c), RSV_AUTH_OK);
    /* missing tokens cost nothing either, and are not counted as limited */
    assert_int_equal(check(f, NULL, "e1", false, &c), RSV_AUTH_INVALID);
    rsv_auth_free(f->auth);
    f->auth = saved;
    free(good);
    free(other);
    free(forged);
}

/* Two addresses whose failures land in one slot of the table (4096 slots, rsv_auth.c's
 * FAIL_SLOTS, one per address): the second restarts the slot, so it is never charged the
 * first's failures, and the first is forgotten, never the other way round. */
static void addresses_sharing_a_slot_never_share_failures(void **state)
{
    fixture_t *f = *state;
    rsv_auth_config_t cfg = {
        .issuer = ISSUER, .cache_size = 64, .fail_limit = 3, .fail_window_s = 3600};
    rsv_auth_t *saved = f->auth;
    f->auth = rsv_auth_new(NULL, f->keys, &cfg);
    static char other[32];
    const char *first = "192.0.2.1";
    for (int i = 0;; i++) {
        snprintf(other, sizeof(other), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        if ((cm_hash_str(other) & 4095) == (cm_hash_str(first) & 4095))
            break;
    }
    cm_jwt_claims_t c;
    char *forged = token(f->stranger, "e1", "mallory", 600);
    peer_addr = first;
    for (int i = 0; i < 3; i++)
        assert_int_equal(check_token(f, forged, "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(check_token(f, forged, "e1", false, &c), RSV_AUTH_LIMITED);
    peer_addr = other; /* its own count, from 0 */
    assert_int_equal(check_token(f, forged, "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(check_token(f, forged, "e1", false, &c), RSV_AUTH_INVALID);
    peer_addr = first; /* forgotten: verified again */
    assert_int_equal(check_token(f, forged, "e1", false, &c), RSV_AUTH_INVALID);
    peer_addr = "?";
    rsv_auth_free(f->auth);
    f->auth = saved;
    free(forged);
}

typedef struct tally {
    int answered, ok, busy;
} tally_t;

static void on_tally(rsv_auth_result_t r, const char *why, void *arg)
{
    tally_t *t = arg;
    t->answered++;
    t->ok += r == RSV_AUTH_OK;
    t->busy += r == RSV_AUTH_BUSY;
}

#define QUEUE_BURST 200

static void a_full_verification_queue_answers_busy(void **state)
{
    fixture_t *f = *state;
    evthread_use_pthreads();
    struct event_base *base = event_base_new();
    rsv_auth_config_t cfg = {.issuer = ISSUER, .cache_size = 1024, .threads = 1, .max_queue = 2};
    rsv_auth_t *auth = rsv_auth_new(base, f->keys, &cfg);
    static cm_jwt_claims_t claims[QUEUE_BURST];
    static cm_req_t *reqs[QUEUE_BURST];
    static char *toks[QUEUE_BURST];
    tally_t t = {0};
    for (int i = 0; i < QUEUE_BURST; i++) {
        char sub[16], authz[4200];
        snprintf(sub, sizeof(sub), "fan-%d", i);
        toks[i] = token(f->signer, "e1", sub, 600);
        snprintf(authz, sizeof(authz), "Bearer %s", toks[i]);
        reqs[i] = fake_new(authz);
    }
    for (int i = 0; i < QUEUE_BURST; i++)
        rsv_auth_check(auth, reqs[i], "e1", false, &claims[i], on_tally, &t);
    /* the busy answers came at once; at most max_queue + 1 (being verified) wait at a time */
    assert_true(t.busy > 0);
    assert_int_equal(t.answered, t.busy);
    assert_int_equal(rsv_auth_busy(auth), (uint64_t)t.busy);
    struct timeval tick = {0, 20000};
    for (int spins = 0; spins < 250 && t.answered < QUEUE_BURST; spins++) {
        event_base_loopexit(base, &tick);
        event_base_dispatch(base);
    }
    assert_int_equal(t.answered, QUEUE_BURST);
    assert_int_equal(t.ok + t.busy, QUEUE_BURST);
    assert_true(t.ok >= 1);
    for (int i = 0; i < QUEUE_BURST; i++) {
        fake_free(reqs[i]);
        free(toks[i]);
    }
    rsv_auth_free(auth);
    event_base_free(base);
}

static char *public_pem_of_signer_key(const char *priv)
{
    BIO *in = BIO_new_mem_buf(priv, -1), *out = BIO_new(BIO_s_mem());
    EVP_PKEY *k = PEM_read_bio_PrivateKey(in, NULL, NULL, NULL);
    assert_non_null(k);
    PEM_write_bio_PUBKEY(out, k);
    char *data = NULL;
    long n = BIO_get_mem_data(out, &data);
    char *pem = malloc((size_t)n + 1); /* BIO memory is not NUL-terminated */
    memcpy(pem, data, (size_t)n);
    pem[n] = '\0';
    BIO_free(in);
    BIO_free(out);
    EVP_PKEY_free(k);
    return pem;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void sighup_reloads_the_keys_from_their_file(void **state)
{
    (void)state;
    char err[256], path[] = "/tmp/onsale-test-keys-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char *a_priv = tkey_new_pem(), *b_priv = tkey_new_pem();
    char *a_pub = public_pem_of_signer_key(a_priv), *b_pub = public_pem_of_signer_key(b_priv);
    cm_jwt_signer_t *a = cm_jwt_signer_new(NULL, a_priv, strlen(a_priv), err, sizeof(err));
    cm_jwt_signer_t *b = cm_jwt_signer_new(NULL, b_priv, strlen(b_priv), err, sizeof(err));
    write_file(path, a_pub);
    rsv_auth_keys_t *keys = rsv_auth_keys_load(path, err, sizeof(err));
    assert_non_null(keys);
    rsv_auth_config_t cfg = {.issuer = ISSUER, .cache_size = 64};
    fixture_t f = {.auth = rsv_auth_new(NULL, keys, &cfg)};
    cm_jwt_claims_t c;
    char *ta = token(a, "e1", "fan-a", 600), *tb = token(b, "e1", "fan-b", 600);
    assert_int_equal(check_token(&f, ta, "e1", false, &c), RSV_AUTH_OK); /* cached */
    assert_int_equal(check_token(&f, tb, "e1", false, &c), RSV_AUTH_INVALID);

    /* the operator rotates: B replaces A in the file, then SIGHUP */
    write_file(path, b_pub);
    uint64_t rounds = cm_reload_rounds();
    assert_int_equal(raise(SIGHUP), 0);
    assert_true(cm_reload_wait(rounds, 10000));
    assert_int_equal(check_token(&f, tb, "e1", false, &c), RSV_AUTH_OK);
    assert_string_equal(c.sub, "fan-b");
    /* A's token was cached, but A is gone: refused at its next use */
    assert_int_equal(check_token(&f, ta, "e1", false, &c), RSV_AUTH_INVALID);

    /* a broken file keeps the keys that work */
    write_file(path, "not a key\n");
    assert_int_equal(rsv_auth_keys_reload(keys, err, sizeof(err)), -1);
    assert_int_equal(check_token(&f, tb, "e1", false, &c), RSV_AUTH_OK);

    rsv_auth_free(f.auth);
    rsv_auth_keys_free(keys);
    cm_jwt_signer_free(a);
    cm_jwt_signer_free(b);
    free(ta);
    free(tb);
    free(a_priv);
    free(b_priv);
    free(a_pub);
    free(b_pub);
    unlink(path);
}

/* With workers = 2 a buyer's next request may land on the other worker; the
 * cache is the process's, so it is a hit there, not a second verification. */
static void a_token_verified_on_one_worker_is_a_hit_on_another(void **state)
{
    fixture_t *f = *state;
    rsv_auth_config_t cfg = {.issuer = ISSUER, .max_lifetime_s = 3600, .cache_size = 64};
    rsv_auth_t *a = f->auth, *b = rsv_auth_new(NULL, f->keys, &cfg);
    char *t = token(f->signer, "e1", "fan-ab", 600);
    cm_jwt_claims_t c;
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK); /* worker A verifies */
    assert_int_equal(rsv_auth_verifications(a), 1);
    f->auth = b;
    memset(&c, 0, sizeof(c));
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK); /* worker B: a hit */
    assert_string_equal(c.sub, "fan-ab");
    assert_int_equal(rsv_auth_verifications(b), 0);
    assert_int_equal(rsv_auth_hits(b), 1);
    /* a hit is still judged against this request's event and clock */
    assert_int_equal(check_token(f, t, "e2", false, &c), RSV_AUTH_WRONG_EVENT);
    /* a gate with another policy (no issuer check, other lifetime) does not take the
     * hit: what one policy verified is not what another would have */
    rsv_auth_config_t lax = {.cache_size = 64};
    f->auth = rsv_auth_new(NULL, f->keys, &lax);
    assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
    assert_int_equal(rsv_auth_verifications(f->auth), 1);
    rsv_auth_free(f->auth);
    rsv_auth_free(b);
    f->auth = a;
    free(t);
}

/* The cache holds at most its capacity (the first gate's cache_size, rounded up to a
 * power of two) however many distinct buyers come, and forged tokens never enter it. */
static void the_process_cache_is_bounded_and_holds_no_forgery(void **state)
{
    fixture_t *f = *state;
    size_t cap = rsv_auth_keys_cache_capacity(f->keys);
    assert_int_equal(cap, 64);
    cm_jwt_claims_t c;
    for (int i = 0; i < 400; i++) {
        char sub[16];
        snprintf(sub, sizeof(sub), "fan-%d", i);
        char *t = token(f->signer, "e1", sub, 600);
        assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_OK);
        free(t);
        assert_true(rsv_auth_keys_cached(f->keys) <= cap);
    }
    assert_true(rsv_auth_keys_cached(f->keys) > cap / 2); /* it was used */
    assert_int_equal(rsv_auth_verifications(f->auth), 400);
    /* a forged token occupies nothing: the cache's content is unchanged after 50 */
    rsv_auth_config_t cfg = {.issuer = ISSUER, .max_lifetime_s = 3600, .cache_size = 64};
    rsv_auth_t *fresh = rsv_auth_new(NULL, f->keys, &cfg);
    assert_int_equal(rsv_auth_keys_cache_capacity(f->keys), cap); /* shared, not resized */
    rsv_auth_free(fresh);
    size_t before = rsv_auth_keys_cached(f->keys);
    uint64_t v = rsv_auth_verifications(f->auth);
    for (int i = 0; i < 50; i++) {
        char sub[16];
        snprintf(sub, sizeof(sub), "mallory-%d", i);
        char *t = token(f->stranger, "e1", sub, 600);
        assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
        assert_int_equal(check_token(f, t, "e1", false, &c), RSV_AUTH_INVALID);
        free(t);
    }
    assert_int_equal(rsv_auth_verifications(f->auth) - v, 100); /* never a hit */
    assert_int_equal(rsv_auth_keys_cached(f->keys), before);
}

/* A key removed by a reload stops accepting what it signed on every worker: the reload
 * empties its tokens' slots at once, and the other worker's next use verifies again. */
static void a_reload_evicts_the_removed_keys_tokens_from_every_worker(void **state)
{
    (void)state;
    char err[256], path[] = "/tmp/onsale-test-keys-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char *a_priv = tkey_new_pem(), *b_priv = tkey_new_pem();
    char *a_pub = public_pem_of_signer_key(a_priv), *b_pub = public_pem_of_signer_key(b_priv);
    cm_jwt_signer_t *a = cm_jwt_signer_new(NULL, a_priv, strlen(a_priv), err, sizeof(err));
    cm_jwt_signer_t *b = cm_jwt_signer_new(NULL, b_priv, strlen(b_priv), err, sizeof(err));
    char both[8192];
    snprintf(both, sizeof(both), "%s%s", a_pub, b_pub);
    write_file(path, both);
    rsv_auth_keys_t *keys = rsv_auth_keys_load(path, err, sizeof(err));
    assert_non_null(keys);
    rsv_auth_config_t cfg = {.issuer = ISSUER, .cache_size = 64};
    fixture_t w1 = {.auth = rsv_auth_new(NULL, keys, &cfg)};
    fixture_t w2 = {.auth = rsv_auth_new(NULL, keys, &cfg)};
    cm_jwt_claims_t c;
    char *ta = token(a, "e1", "fan-a", 600), *tb = NULL;
    assert_int_equal(check_token(&w1, ta, "e1", false, &c), RSV_AUTH_OK);
    /* B's token must not share A's slot (direct-mapped: it would evict A's) */
    for (int i = 0; i < 20 && rsv_auth_keys_cached(keys) != 2; i++) {
        char sub[16];
        snprintf(sub, sizeof(sub), "fan-b%d", i);
        free(tb);
        tb = token(b, "e1", sub, 600);
        assert_int_equal(check_token(&w1, tb, "e1", false, &c), RSV_AUTH_OK);
        if (rsv_auth_keys_cached(keys) != 2) /* evicted A's: put A back */
            assert_int_equal(check_token(&w1, ta, "e1", false, &c), RSV_AUTH_OK);
    }
    assert_int_equal(rsv_auth_keys_cached(keys), 2);

    write_file(path, b_pub); /* A is retired */
    assert_int_equal(rsv_auth_keys_reload(keys, err, sizeof(err)), 0);
    assert_int_equal(rsv_auth_keys_cached(keys), 1); /* A's token is gone already */
    assert_int_equal(check_token(&w2, ta, "e1", false, &c), RSV_AUTH_INVALID);
    assert_int_equal(rsv_auth_verifications(w2.auth), 1); /* it had to verify: no hit */
    /* B's token survived the reload and is a hit on the other worker */
    assert_int_equal(check_token(&w2, tb, "e1", false, &c), RSV_AUTH_OK);
    assert_int_equal(strncmp(c.sub, "fan-b", 5), 0);
    assert_int_equal(rsv_auth_hits(w2.auth), 1);
    assert_int_equal(check_token(&w1, ta, "e1", false, &c), RSV_AUTH_INVALID);

    rsv_auth_free(w1.auth);
    rsv_auth_free(w2.auth);
    rsv_auth_keys_free(keys);
    cm_jwt_signer_free(a);
    cm_jwt_signer_free(b);
    free(ta);
    free(tb);
    free(a_priv);
    free(b_priv);
    free(a_pub);
    free(b_pub);
    unlink(path);
}

/* A token cached through its record (rsv_auth_remember) is dropped like any other when
 * its key leaves the keys, at the reload or at its next use. */
static void a_remembered_token_of_a_removed_key_is_refused(void **state)
{
    (void)state;
    char err[256], path[] = "/tmp/onsale-test-keys-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char *a_priv = tkey_new_pem(), *b_priv = tkey_new_pem();
    char *a_pub = public_pem_of_signer_key(a_priv), *b_pub = public_pem_of_signer_key(b_priv);
    cm_jwt_signer_t *a = cm_jwt_signer_new(NULL, a_priv, strlen(a_priv), err, sizeof(err));
    write_file(path, a_pub);
    rsv_auth_keys_t *keys = rsv_auth_keys_load(path, err, sizeof(err));
    assert_non_null(keys);
    rsv_auth_config_t cfg = {.issuer = ISSUER, .cache_size = 64, .records = true};
    fixture_t w = {.auth = rsv_auth_new(NULL, keys, &cfg)};
    char *ta = token(a, "e1", "fan-a", 600), authz[4200], record[65];
    snprintf(authz, sizeof(authz), "Bearer %s", ta);
    cm_req_t *req = fake_new(authz);
    cm_jwt_claims_t c;
    result_t res = {-1, NULL};
    rsv_auth_check_new(w.auth, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_UNVERIFIED);
    rsv_auth_remember(w.auth, req, &c);
    res.result = -1;
    rsv_auth_check_new(w.auth, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_OK);
    assert_int_equal(rsv_auth_hits(w.auth), 1);

    write_file(path, b_pub); /* A is retired */
    assert_int_equal(rsv_auth_keys_reload(keys, err, sizeof(err)), 0);
    assert_int_equal(rsv_auth_keys_cached(keys), 0);
    assert_int_equal(check_token(&w, ta, "e1", false, &c), RSV_AUTH_INVALID);
    res.result = -1;
    rsv_auth_check_new(w.auth, req, "e1", &c, record, on_result, &res);
    assert_int_equal(res.result, RSV_AUTH_INVALID); /* unknown kid, before any record */

    fake_free(req);
    rsv_auth_free(w.auth);
    rsv_auth_keys_free(keys);
    cm_jwt_signer_free(a);
    free(ta);
    free(a_priv);
    free(b_priv);
    free(a_pub);
    free(b_pub);
    unlink(path);
}

/* Workers hammer the one cache at once (each thread is a worker with its own gate and
 * its own verification threads) while the keys reload underneath: every answer is right,
 * and under ThreadSanitizer (ONSALE_SANITIZE=thread) no access races. */
#define HAMMER_THREADS 4
#define HAMMER_TOKENS  48
#define HAMMER_ROUNDS  40

typedef struct hammer {
    rsv_auth_keys_t *keys;
    char **authz; /* HAMMER_TOKENS; every fourth is forged */
    int ok, invalid, other;
    uint64_t hits;
} hammer_t;

static void *hammer_worker(void *arg)
{
    hammer_t *h = arg;
    rsv_auth_config_t cfg = {.issuer = ISSUER, .cache_size = 32};
    rsv_auth_t *auth = rsv_auth_new(NULL, h->keys, &cfg);
    fixture_t f = {.auth = auth};
    for (int r = 0; r < HAMMER_ROUNDS; r++)
        for (int i = 0; i < HAMMER_TOKENS; i++) {
            cm_jwt_claims_t c;
            rsv_auth_result_t res =
                check(&f, h->authz[(i * 7 + r) % HAMMER_TOKENS], "e1", false, &c);
            h->ok += res == RSV_AUTH_OK;
            h->invalid += res == RSV_AUTH_INVALID;
            h->other += res != RSV_AUTH_OK && res != RSV_AUTH_INVALID;
        }
    h->hits = rsv_auth_hits(auth);
    rsv_auth_free(auth);
    return NULL;
}

static void workers_hammer_the_shared_cache_while_keys_reload(void **state)
{
    fixture_t *f = *state;
    char err[256], path[] = "/tmp/onsale-test-keys-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char *priv = tkey_new_pem(), *pub = public_pem_of_signer_key(priv);
    cm_jwt_signer_t *signer = cm_jwt_signer_new(NULL, priv, strlen(priv), err, sizeof(err));
    write_file(path, pub);
    rsv_auth_keys_t *keys = rsv_auth_keys_load(path, err, sizeof(err));
    assert_non_null(keys);
    char *authz[HAMMER_TOKENS];
    for (int i = 0; i < HAMMER_TOKENS; i++) {
        char sub[16], *t;
        snprintf(sub, sizeof(sub), "fan-%d", i);
        t = token(i % 4 == 3 ? f->stranger : signer, "e1", sub, 600);
        authz[i] = malloc(strlen(t) + 8);
        sprintf(authz[i], "Bearer %s", t);
        free(t);
    }
    /* the first gate sizes the cache: 64 slots for 36 good tokens, so collisions too */
    rsv_auth_config_t cfg = {.issuer = ISSUER, .cache_size = 32};
    rsv_auth_t *sizing = rsv_auth_new(NULL, keys, &cfg);
    hammer_t h[HAMMER_THREADS];
    pthread_t th[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++) {
        h[i] = (hammer_t){.keys = keys, .authz = authz};
        assert_int_equal(pthread_create(&th[i], NULL, hammer_worker, &h[i]), 0);
    }
    for (int i = 0; i < 5; i++) /* same keys each time: nothing may be refused */
        assert_int_equal(rsv_auth_keys_reload(keys, err, sizeof(err)), 0);
    uint64_t hits = 0;
    for (int i = 0; i < HAMMER_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(h[i].ok, HAMMER_ROUNDS * HAMMER_TOKENS * 3 / 4);
        assert_int_equal(h[i].invalid, HAMMER_ROUNDS * HAMMER_TOKENS / 4);
        assert_int_equal(h[i].other, 0);
        hits += h[i].hits;
    }
    assert_true(hits > 0);
    assert_true(rsv_auth_keys_cached(keys) <= rsv_auth_keys_cache_capacity(keys));
    rsv_auth_free(sizing);
    rsv_auth_keys_free(keys);
    for (int i = 0; i < HAMMER_TOKENS; i++)
        free(authz[i]);
    cm_jwt_signer_free(signer);
    free(priv);
    free(pub);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(issuer_and_maximum_lifetime_are_enforced, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_verifications_limit_the_address, setup, teardown),
        cmocka_unit_test_setup_teardown(addresses_sharing_a_slot_never_share_failures, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_full_verification_queue_answers_busy, setup, teardown),
        cmocka_unit_test(sighup_reloads_the_keys_from_their_file),
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
        cmocka_unit_test_setup_teardown(a_token_verified_on_one_worker_is_a_hit_on_another, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(the_process_cache_is_bounded_and_holds_no_forgery, setup,
                                        teardown),
        cmocka_unit_test(a_reload_evicts_the_removed_keys_tokens_from_every_worker),
        cmocka_unit_test(a_remembered_token_of_a_removed_key_is_refused),
        cmocka_unit_test_setup_teardown(a_record_proves_new_holds_only, setup, teardown),
        cmocka_unit_test_setup_teardown(a_limited_address_is_refused_before_its_token_is_inspected,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(new_holds_name_the_token_record_instead_of_verifying, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(workers_hammer_the_shared_cache_while_keys_reload, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
