/*
 * rsv_auth — see rsv_auth.h.
 *
 * The verified-token cache (token_cache_t) is the process's: it hangs off the keys every
 * worker's gate shares, so a buyer verified on one worker is a hit on every other (with
 * workers = 2 a per-worker cache made half of a buyer's second requests verify again).
 * It is direct-mapped (one slot per hash bucket, a newer token replaces an older one):
 * O(1), bounded memory, no eviction bookkeeping. Lock striping: CACHE_LOCKS mutexes, slot i
 * under lock i % CACHE_LOCKS, each held only to compare or copy one slot, so the loops
 * rarely meet on a lock (memcached's item locks). A slot holds a copy of the token, so a
 * hash collision can never hand one buyer another's claims, and the fingerprint of the
 * policy it was verified under (issuer, lifetime, leeway), so a gate never accepts what a
 * laxer one verified. Each slot remembers the key generation it was verified under; after
 * a reload a hit is honoured only if its kid is still in the keyset, else the slot is
 * emptied. exp and nbf are judged on every use, so an entry never outlives its token.
 *
 * The failure limiter (rsv_auth_fails_t) is a direct-mapped cm_addrtab (FAIL_SLOTS
 * addresses, CM_ADDRTAB_FULL_RESTART): a slot holds one address (its key and its text,
 * compared too, so even two addresses of one 64-bit hash never share), its failures and
 * when its window began. An address that collides with another restarts that slot — the
 * limiter can forget an attacker for a while, never limit an innocent address for
 * another's failures. One table serves every worker of the process (behind the table's
 * mutex, like cm_http's connection counts), so an attacker spreading connections over
 * the workers reaches the limit at fail_limit, not at workers × it. The token cache and
 * the table hash with cm_hash (eight bytes a step: a token is ~400 bytes, hashed on every
 * request); only valid tokens are cached, so nobody chooses the inputs that fill it.
 *
 * Workers take jobs from a mutex-protected FIFO and put finished ones on a done list,
 * then wake the loop with event_active (thread-safe: the base is created after
 * evthread_use_pthreads). The loop thread alone runs the callbacks; the cache and the
 * failure table are shared by the loops and locked. Lock order: a cache lock, then the
 * keys' mutex (never the reverse). Keys: a mutex-guarded pointer to a
 * reference-counted keyset; a verification holds a reference while it runs, so a reload never frees
 * keys in use.
 */
#include "rsv_auth.h"

#include <event2/event.h>
#include <event2/http.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_access.h"
#include "cm_addrtab.h"
#include "cm_dpop.h"
#include "cm_hash.h"
#include "cm_log.h"
#include "cm_http.h"
#include "cm_mem.h"
#include "cm_reload.h"
#include "cm_time.h"
#include "cm_tls.h"

#define TOKEN_MAX   4096
#define MAX_THREADS 16
#define FAIL_SLOTS  4096
#define ADDR_MAX    64
#define CACHE_LOCKS 64 /* a power of two */

typedef struct slot {
    char *token;
    size_t len;
    uint64_t gen;     /* key generation it was verified under */
    uint64_t policy;  /* fingerprint of the policy it was verified under */
    bool record_only; /* proven by its gateway record, not its signature: holds only */
    cm_jwt_claims_t claims;
} slot_t;

typedef struct token_cache {
    pthread_mutex_t locks[CACHE_LOCKS];
    slot_t *slots;
    size_t mask;
} token_cache_t;

struct rsv_auth_keys {
    pthread_mutex_t mu;
    cm_jwt_keyset_t *cur;
    char *path; /* NULL: never reloaded */
    atomic_uint_fast64_t gen;
    token_cache_t *cache; /* made by the first gate (under mu), freed with the keys */
};

typedef struct fail_window {
    char addr[ADDR_MAX]; /* the address itself: a hash collision is a restart, not a share */
    int fails;
    int64_t since; /* monotonic seconds */
} fail_window_t;

struct rsv_auth_fails {
    cm_addrtab_t *tab; /* FAIL_SLOTS direct-mapped fail_window_t */
};

typedef struct job {
    struct job *next;
    char *token;
    size_t len;
    int64_t now;
    cm_jwt_result_t result;
    uint64_t gen;           /* key generation the token was verified under */
    cm_jwt_claims_t claims; /* filled by the worker */
    /* the request's side, used on the loop thread */
    char addr[ADDR_MAX];
    char event[65];
    bool has_event;
    bool allow_expired;
    cm_jwt_claims_t *out;
    cm_req_t *req; /* the caller's, unanswered until cb: its DPoP proof */
    rsv_auth_cb cb;
    void *arg;
} job_t;

struct rsv_auth {
    rsv_auth_keys_t *keys;
    rsv_auth_config_t cfg;
    char *issuer;
    char *origin;      /* cfg.public_origin's copy, NULL when unset */
    cm_redis_t *redis; /* records proofs' jti; borrowed */
    uint64_t policy;   /* fingerprint of issuer, max_lifetime_s, leeway_s */
    token_cache_t *cache;
    rsv_auth_fails_t *fails;
    bool own_fails; /* made by this gate (cfg.fails was NULL) */
    uint64_t verifications, hits, busy, limited, inspected;
    /* workers */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    job_t *todo_head, *todo_tail;
    size_t todo_n;
    job_t *done;
    bool stopping;
    int nthreads;
    pthread_t threads[MAX_THREADS];
    struct event *wake;
};

/* ---- the verified-token cache ---- */

static token_cache_t *cache_new(size_t size)
{
    token_cache_t *c = cm_xcalloc(1, sizeof(*c));
    size_t n = CACHE_LOCKS;
    while (n < size)
        n <<= 1;
    for (int i = 0; i < CACHE_LOCKS; i++)
        pthread_mutex_init(&c->locks[i], NULL);
    c->slots = cm_xcalloc(n, sizeof(slot_t));
    c->mask = n - 1;
    return c;
}

static void cache_free(token_cache_t *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i <= c->mask; i++)
        free(c->slots[i].token);
    for (int i = 0; i < CACHE_LOCKS; i++)
        pthread_mutex_destroy(&c->locks[i]);
    free(c->slots);
    free(c);
}

static pthread_mutex_t *slot_lock(token_cache_t *c, size_t i)
{
    return &c->locks[i & (CACHE_LOCKS - 1)];
}

/* After a reload (on the reload thread): empties every slot whose kid the new keys no
 * longer hold, and marks the rest current. A verification that started under the old
 * keys and lands later carries the old generation; its first hit checks its kid. */
static void cache_sweep(token_cache_t *c, const cm_jwt_keyset_t *ks, uint64_t gen)
{
    for (size_t i = 0; c && i <= c->mask; i++) {
        pthread_mutex_t *mu = slot_lock(c, i);
        pthread_mutex_lock(mu);
        slot_t *s = &c->slots[i];
        if (s->token && !cm_jwt_keyset_has_kid(ks, s->claims.kid)) {
            free(s->token);
            memset(s, 0, sizeof(*s));
        } else if (s->token && s->gen < gen) {
            s->gen = gen;
        }
        pthread_mutex_unlock(mu);
    }
}

/* ---- keys ---- */

static cm_jwt_keyset_t *keys_get(rsv_auth_keys_t *k, uint64_t *gen)
{
    pthread_mutex_lock(&k->mu);
    cm_jwt_keyset_t *ks = cm_jwt_keyset_ref(k->cur);
    *gen = atomic_load(&k->gen);
    pthread_mutex_unlock(&k->mu);
    return ks;
}

rsv_auth_keys_t *rsv_auth_keys_new(cm_jwt_keyset_t *ks)
{
    rsv_auth_keys_t *k = cm_xcalloc(1, sizeof(*k));
    pthread_mutex_init(&k->mu, NULL);
    k->cur = ks;
    atomic_init(&k->gen, 1);
    return k;
}

static int on_reload(void *arg, char *err, size_t errlen)
{
    return rsv_auth_keys_reload(arg, err, errlen);
}

int rsv_auth_keys_reload(rsv_auth_keys_t *k, char *err, size_t errlen)
{
    if (k->path == NULL) {
        snprintf(err, errlen, "these keys were not loaded from a file");
        return -1;
    }
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    if (cm_jwt_keyset_load_file(ks, k->path, err, errlen) != 0) {
        cm_jwt_keyset_free(ks);
        return -1;
    }
    pthread_mutex_lock(&k->mu);
    cm_jwt_keyset_t *old = k->cur;
    k->cur = cm_jwt_keyset_ref(ks);
    uint64_t gen = atomic_fetch_add(&k->gen, 1) + 1;
    token_cache_t *cache = k->cache;
    pthread_mutex_unlock(&k->mu);
    cm_jwt_keyset_free(old); /* freed when the last verification using it ends */
    cache_sweep(cache, ks, gen);
    cm_jwt_keyset_free(ks);
    return 0;
}

rsv_auth_keys_t *rsv_auth_keys_load(const char *path, char *err, size_t errlen)
{
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    if (cm_jwt_keyset_load_file(ks, path, err, errlen) != 0) { /* start-up */
        cm_jwt_keyset_free(ks);
        return NULL;
    }
    rsv_auth_keys_t *k = rsv_auth_keys_new(ks);
    k->path = cm_xstrdup(path);
    if (cm_reload_add("admission keys", on_reload, k) != 0) {
        snprintf(err, errlen, "cannot install the SIGHUP reload of %s", path);
        rsv_auth_keys_free(k);
        return NULL;
    }
    return k;
}

void rsv_auth_keys_free(rsv_auth_keys_t *k)
{
    if (k == NULL)
        return;
    if (k->path != NULL)
        cm_reload_remove(on_reload, k);
    cm_jwt_keyset_free(k->cur);
    cache_free(k->cache);
    free(k->path);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* ---- the gate ---- */

static int64_t mono_s(void)
{
    return (int64_t)(cm_time_mono_ns() / 1000000000ull);
}

rsv_auth_fails_t *rsv_auth_fails_new(void)
{
    rsv_auth_fails_t *f = cm_xcalloc(1, sizeof(*f));
    f->tab = cm_addrtab_new(&(cm_addrtab_config_t){.slots = FAIL_SLOTS,
                                                   .probes = 1,
                                                   .value_size = sizeof(fail_window_t),
                                                   .full = CM_ADDRTAB_FULL_RESTART});
    return f;
}

void rsv_auth_fails_free(rsv_auth_fails_t *f)
{
    if (f == NULL)
        return;
    cm_addrtab_free(f->tab);
    free(f);
}

typedef struct fail_op {
    const char *addr;
    int64_t now, window_s;
    int add;   /* failures to count */
    int fails; /* the address's failures in its window, after add */
} fail_op_t;

/* The address's window, restarted if it ended or the slot held another; then add. */
static cm_addrtab_verdict_t on_fail_window(void *value, bool fresh, void *arg)
{
    fail_window_t *w = value;
    fail_op_t *op = arg;
    if (fresh || strcmp(w->addr, op->addr) != 0 || op->now - w->since >= op->window_s) {
        snprintf(w->addr, sizeof(w->addr), "%s", op->addr);
        w->fails = 0;
        w->since = op->now;
    }
    w->fails += op->add;
    op->fails = w->fails;
    return CM_ADDRTAB_KEEP;
}

/* The address's failures in its window after adding add. */
static int fail_window(rsv_auth_t *a, const char *addr, int add)
{
    fail_op_t op = {addr, mono_s(), a->cfg.fail_window_s, add, 0};
    (void)cm_addrtab_visit(a->fails->tab, cm_hash_str(addr), true, on_fail_window, &op);
    return op.fails; /* a restarting table always has the slot */
}

static bool is_limited(rsv_auth_t *a, const char *addr)
{
    if (a->cfg.fail_limit <= 0)
        return false;
    return fail_window(a, addr, 0) >= a->cfg.fail_limit;
}

static void count_failure(rsv_auth_t *a, const char *addr)
{
    if (a->cfg.fail_limit <= 0)
        return;
    (void)fail_window(a, addr, 1);
}

/* Judges the time and event claims of a correctly signed token. */
static rsv_auth_result_t judge(const rsv_auth_t *a, const cm_jwt_claims_t *c, int64_t now,
                               const char *event, bool allow_expired, const char **why)
{
    if (c->nbf - a->cfg.leeway_s > now) {
        *why = "not yet valid";
        return RSV_AUTH_INVALID;
    }
    if (c->exp + a->cfg.leeway_s <= now && !allow_expired) {
        *why = "expired";
        return RSV_AUTH_INVALID;
    }
    if (event && strcmp(c->evt, event) != 0) {
        *why = "token for another event";
        return RSV_AUTH_WRONG_EVENT;
    }
    *why = NULL;
    return RSV_AUTH_OK;
}

/* Remembers a token: correctly signed, or (record_only) proven by its gateway record,
 * which never replaces the same token verified. Takes j->token. Any thread. */
static void cache_put(rsv_auth_t *a, job_t *j, bool record_only)
{
    size_t i = cm_hash(j->token, j->len) & a->cache->mask;
    pthread_mutex_t *mu = slot_lock(a->cache, i);
    pthread_mutex_lock(mu);
    slot_t *s = &a->cache->slots[i];
    char *old = s->token;
    if (record_only && old && !s->record_only && s->len == j->len &&
        memcmp(old, j->token, j->len) == 0) {
        pthread_mutex_unlock(mu);
        return; /* j->token stays the caller's */
    }
    s->token = j->token;
    s->len = j->len;
    s->gen = j->gen;
    s->policy = a->policy;
    s->record_only = record_only;
    s->claims = j->claims;
    pthread_mutex_unlock(mu);
    j->token = NULL;
    free(old);
}

/* ---- bound tokens: the request's DPoP proof ---- */

/* The client's address: the PROXY v2 source behind a balancer, else the socket's peer
 * (cm_http_peer; "?" for a request without a connection, as in the unit tests). */
static void peer_addr(cm_req_t *req, char out[ADDR_MAX])
{
    snprintf(out, ADDR_MAX, "%s", cm_http_peer(req));
}

typedef struct proof_op {
    rsv_auth_result_t r; /* the answer once the jti is claimed */
    const char *why;
    rsv_auth_cb cb;
    void *arg;
} proof_op_t;

static void on_proof_claim(cm_dpop_result_t res, void *arg)
{
    proof_op_t *op = arg;
    rsv_auth_result_t r = op->r;
    const char *why = op->why;
    if (res == CM_DPOP_REPLAYED) {
        r = RSV_AUTH_INVALID_PROOF;
        why = cm_dpop_result_str(res);
    } else if (res != CM_DPOP_OK) {
        r = RSV_AUTH_PROOF_UNAVAILABLE;
        why = "recording the DPoP proof";
    }
    rsv_auth_cb cb = op->cb;
    void *cb_arg = op->arg;
    free(op);
    cb(r, why, cb_arg);
}

/* The proof of req for a token bound to claims->cnf_jkt: CM_DPOP_OK with p filled. */
static cm_dpop_result_t judge_proof(const rsv_auth_t *a, cm_req_t *req,
                                    const cm_jwt_claims_t *claims, cm_dpop_proof_t *p)
{
    const char *proof = cm_http_header(req, "DPoP");
    if (proof == NULL)
        return CM_DPOP_MISSING;
    if (!cm_dpop_jkt_valid(claims->cnf_jkt))
        return CM_DPOP_WRONG_KEY; /* signed by the gateway, yet no key can match it */
    unsigned char jkt[32];
    cm_dpop_jkt_bytes(claims->cnf_jkt, jkt, sizeof(jkt));
    cm_dpop_want_t want = {
        .method = cm_http_method_name(cm_http_method(req))
                      ? cm_http_method_name(cm_http_method(req))
                      : "",
        .origin = a->origin,
        .host = cm_http_header(req, "Host"),
        .path = cm_http_uri_path(req),
        .plain_http = a->cfg.plain_http,
        .jkt = jkt,
        .jkt_len = sizeof(jkt),
    };
    return cm_dpop_verify(proof, strlen(proof), &want, (int64_t)time(NULL), p);
}

/* A token the gateway signed for a request names it (the rid claim, docs/tokens.md): one
 * line under this request's id that names the admission's, so one search finds both. */
static void log_admission(const char *req_id, const cm_jwt_claims_t *c)
{
    if (c->rid[0] == '\0' || CM_LOG_INFO < __atomic_load_n(&cm_log_level, __ATOMIC_RELAXED))
        return;
    char saved[CM_ACCESS_ID_MAX + 1];
    snprintf(saved, sizeof(saved), "%s", cm_log_request());
    cm_log_set_request(req_id);
    cm_log(CM_LOG_INFO, "token admission=%s event=%s", c->rid, c->evt);
    cm_log_set_request(saved[0] ? saved : NULL);
}

/* Answers a check: a token that passed (r OK or UNVERIFIED) and is bound to a key is
 * answered r only once its request's proof passed and its jti was claimed. Loop thread. */
static void answer(rsv_auth_t *a, cm_req_t *req, const cm_jwt_claims_t *claims, rsv_auth_result_t r,
                   const char *why, rsv_auth_cb cb, void *arg)
{
    if ((r != RSV_AUTH_OK && r != RSV_AUTH_UNVERIFIED) || claims->cnf_jkt[0] == '\0') {
        if (r == RSV_AUTH_OK || r == RSV_AUTH_UNVERIFIED)
            log_admission(cm_access_id(req), claims);
        cb(r, why, arg);
        return;
    }
    char addr[ADDR_MAX];
    peer_addr(req, addr);
    if (is_limited(a, addr)) { /* a stolen token's owner-less proofs cost no more ECDSA */
        a->limited++;
        cb(RSV_AUTH_LIMITED, "too many failed proofs from this address", arg);
        return;
    }
    cm_dpop_proof_t p;
    cm_dpop_result_t res = judge_proof(a, req, claims, &p);
    if (res != CM_DPOP_OK) {
        if (res == CM_DPOP_BAD_SIGNATURE)
            count_failure(a, addr);
        cb(res == CM_DPOP_MISSING ? RSV_AUTH_PROOF_REQUIRED : RSV_AUTH_INVALID_PROOF,
           cm_dpop_result_str(res), arg);
        return;
    }
    log_admission(cm_access_id(req), claims);
    proof_op_t *op = cm_xcalloc(1, sizeof(*op));
    *op = (proof_op_t){r, why, cb, arg};
    cm_dpop_claim(a->redis, claims->evt, p.jti, on_proof_claim, op);
}

/* Loop thread: records a verification's outcome and answers its caller. */
static void complete(rsv_auth_t *a, job_t *j)
{
    const char *why = NULL;
    rsv_auth_result_t r;
    if (j->result == CM_JWT_OK || j->result == CM_JWT_EXPIRED) {
        cache_put(a, j, false);
        *j->out = j->claims;
        r = judge(a, &j->claims, (int64_t)time(NULL), j->has_event ? j->event : NULL,
                  j->allow_expired, &why);
        answer(a, j->req, j->out, r, why, j->cb, j->arg);
        free(j->token);
        free(j);
        return;
    } else {
        if (j->result == CM_JWT_BAD_SIGNATURE) /* the only failure that cost an ECDSA check */
            count_failure(a, j->addr);
        why = cm_jwt_result_str(j->result);
        r = RSV_AUTH_INVALID;
    }
    j->cb(r, why, j->arg);
    free(j->token);
    free(j);
}

static void verify(rsv_auth_t *a, job_t *j)
{
    cm_jwt_policy_t pol = {
        .issuer = a->issuer,
        .leeway_s = a->cfg.leeway_s,
        .max_lifetime_s = a->cfg.max_lifetime_s,
    };
    cm_jwt_keyset_t *ks = keys_get(a->keys, &j->gen);
    j->result = cm_jwt_verify(ks, j->token, j->len, &pol, j->now, &j->claims);
    cm_jwt_keyset_free(ks);
}

static void *worker(void *arg)
{
    rsv_auth_t *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (a->todo_head == NULL && !a->stopping)
            pthread_cond_wait(&a->cond, &a->lock);
        if (a->stopping)
            break;
        job_t *j = a->todo_head;
        a->todo_head = j->next;
        if (a->todo_head == NULL)
            a->todo_tail = NULL;
        a->todo_n--;
        pthread_mutex_unlock(&a->lock);
        verify(a, j);
        pthread_mutex_lock(&a->lock);
        j->next = a->done;
        a->done = j;
        event_active(a->wake, EV_READ, 0);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    rsv_auth_t *a = arg;
    pthread_mutex_lock(&a->lock);
    job_t *list = a->done;
    a->done = NULL;
    pthread_mutex_unlock(&a->lock);
    /* The list is newest first; answer in arrival order. */
    job_t *rev = NULL;
    while (list) {
        job_t *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    while (rev) {
        job_t *next = rev->next;
        complete(a, rev);
        rev = next;
    }
}

static uint64_t policy_fingerprint(const rsv_auth_config_t *cfg)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "%s|%lld|%lld", cfg->issuer ? cfg->issuer : "",
                     (long long)cfg->max_lifetime_s, (long long)cfg->leeway_s);
    return cm_hash(buf, n > 0 && (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

rsv_auth_t *rsv_auth_new(struct event_base *base, rsv_auth_keys_t *keys,
                         const rsv_auth_config_t *cfg)
{
    rsv_auth_t *a = cm_xcalloc(1, sizeof(*a));
    a->keys = keys;
    a->cfg = *cfg;
    a->issuer = cfg->issuer && cfg->issuer[0] ? cm_xstrdup(cfg->issuer) : NULL;
    a->cfg.issuer = a->issuer;
    a->origin = cfg->public_origin && cfg->public_origin[0] ? cm_xstrdup(cfg->public_origin) : NULL;
    a->cfg.public_origin = a->origin;
    if (a->cfg.fail_window_s <= 0)
        a->cfg.fail_window_s = 1;
    a->policy = policy_fingerprint(&a->cfg);
    pthread_mutex_lock(&keys->mu);
    if (keys->cache == NULL)
        keys->cache = cache_new(cfg->cache_size);
    a->cache = keys->cache;
    pthread_mutex_unlock(&keys->mu);
    a->own_fails = cfg->fails == NULL;
    a->fails = a->own_fails ? rsv_auth_fails_new() : cfg->fails;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    int threads = cfg->threads > MAX_THREADS ? MAX_THREADS : cfg->threads;
    if (base && threads > 0) {
        a->wake = event_new(base, -1, 0, on_wake, a);
        for (int i = 0; i < threads; i++)
            if (pthread_create(&a->threads[a->nthreads], NULL, worker, a) == 0)
                a->nthreads++;
    }
    return a;
}

void rsv_auth_use_redis(rsv_auth_t *a, cm_redis_t *redis)
{
    a->redis = redis;
}

void rsv_auth_free(rsv_auth_t *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    a->stopping = true;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    for (int i = 0; i < a->nthreads; i++)
        pthread_join(a->threads[i], NULL);
    /* Unfinished and finished-but-unclaimed checks are answered, then freed. */
    job_t *lists[2] = {a->todo_head, a->done};
    for (int l = 0; l < 2; l++)
        for (job_t *j = lists[l], *next; j; j = next) {
            next = j->next;
            j->cb(RSV_AUTH_INVALID, "shutting down", j->arg);
            free(j->token);
            free(j);
        }
    if (a->wake)
        event_free(a->wake);
    if (a->own_fails)
        rsv_auth_fails_free(a->fails);
    free(a->issuer);
    free(a->origin);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    free(a);
}

/* A cache hit still stands if the keys changed since only when its kid is still held;
 * else the slot is emptied. Called with the slot's lock held. */
static bool hit_still_keyed(rsv_auth_t *a, slot_t *s)
{
    uint64_t gen = atomic_load(&a->keys->gen);
    if (s->gen == gen)
        return true;
    cm_jwt_keyset_t *ks = keys_get(a->keys, &gen);
    bool held = cm_jwt_keyset_has_kid(ks, s->claims.kid);
    cm_jwt_keyset_free(ks);
    if (held) {
        s->gen = gen;
        return true;
    }
    free(s->token);
    memset(s, 0, sizeof(*s));
    return false;
}

/* Copies the claims of tok into out when the cache holds it under this gate's policy and
 * its key is still trusted; a token proven only by its record counts for a new hold
 * (for_hold) alone. Any thread. */
static bool cache_get(rsv_auth_t *a, const char *tok, size_t len, bool for_hold,
                      cm_jwt_claims_t *out)
{
    size_t i = cm_hash(tok, len) & a->cache->mask;
    pthread_mutex_t *mu = slot_lock(a->cache, i);
    pthread_mutex_lock(mu);
    slot_t *s = &a->cache->slots[i];
    bool hit = s->token && s->len == len && s->policy == a->policy &&
               (for_hold || !s->record_only) && memcmp(s->token, tok, len) == 0 &&
               hit_still_keyed(a, s);
    if (hit)
        *out = s->claims;
    pthread_mutex_unlock(mu);
    return hit;
}

/* Judges a token the cache does not hold without its signature (rsv_auth_check_new); false
 * (nothing answered) for a token bound to a key, which is verified instead: its proof is
 * judged once, after the verification, and a record's follow-up check would find its jti
 * spent. */
static bool inspect(rsv_auth_t *a, const char *tok, size_t len, const char *event, int64_t now,
                    cm_jwt_claims_t *claims, char record[65], const char *req_id, rsv_auth_cb cb,
                    void *arg)
{
    cm_jwt_policy_t pol = {
        .issuer = a->issuer,
        .leeway_s = a->cfg.leeway_s,
        .max_lifetime_s = a->cfg.max_lifetime_s,
    };
    uint64_t gen;
    cm_jwt_keyset_t *ks = keys_get(a->keys, &gen);
    cm_jwt_result_t jr = cm_jwt_inspect(ks, tok, len, &pol, now, claims);
    cm_jwt_keyset_free(ks);
    if (jr != CM_JWT_OK) {
        cb(RSV_AUTH_INVALID, cm_jwt_result_str(jr), arg);
        return true;
    }
    if (claims->cnf_jkt[0] != '\0')
        return false;
    const char *why = NULL;
    rsv_auth_result_t r = judge(a, claims, now, event, false, &why);
    if (r != RSV_AUTH_OK) {
        cb(r, why, arg);
        return true;
    }
    cm_tls_sha256_hex(tok, len, record);
    a->inspected++;
    log_admission(req_id, claims);
    cb(RSV_AUTH_UNVERIFIED, NULL, arg);
    return true;
}

static bool queue_full(rsv_auth_t *a)
{
    if (a->nthreads == 0 || a->cfg.max_queue == 0)
        return false;
    pthread_mutex_lock(&a->lock);
    bool full = a->todo_n >= a->cfg.max_queue;
    pthread_mutex_unlock(&a->lock);
    return full;
}

/* rsv_auth_check, and rsv_auth_check_new when record is not NULL. */
static void check(rsv_auth_t *a, cm_req_t *req, const char *event, bool allow_expired,
                  cm_jwt_claims_t *claims, char *record, rsv_auth_cb cb, void *arg)
{
    size_t len = 0;
    const char *tok = cm_http_bearer(req, &len);
    const char *why = NULL;
    if (tok == NULL || len == 0) {
        cb(RSV_AUTH_INVALID, "no bearer token", arg);
        return;
    }
    if (len > TOKEN_MAX) {
        cb(RSV_AUTH_INVALID, "token too long", arg);
        return;
    }
    int64_t now = (int64_t)time(NULL);
    if (cache_get(a, tok, len, record != NULL, claims)) {
        a->hits++;
        rsv_auth_result_t r = judge(a, claims, now, event, allow_expired, &why);
        answer(a, req, claims, r, why, cb, arg);
        return;
    }
    /* Before any work on an unknown token — its parse, the hold script's look for its
     * record, a verification: an address over its failures, a full queue. */
    char addr[ADDR_MAX];
    peer_addr(req, addr);
    if (is_limited(a, addr)) {
        a->limited++;
        cb(RSV_AUTH_LIMITED, "too many failed tokens from this address", arg);
        return;
    }
    if (queue_full(a)) {
        a->busy++;
        cb(RSV_AUTH_BUSY, "verification queue full", arg);
        return;
    }
    if (record != NULL && a->cfg.records &&
        inspect(a, tok, len, event, now, claims, record, cm_access_id(req), cb, arg))
        return;
    a->verifications++;
    job_t *j = cm_xcalloc(1, sizeof(*j));
    j->token = cm_xstrndup(tok, len);
    j->len = len;
    j->now = now;
    memcpy(j->addr, addr, sizeof(addr));
    j->has_event = event != NULL;
    if (event)
        snprintf(j->event, sizeof(j->event), "%s", event);
    j->allow_expired = allow_expired;
    j->out = claims;
    j->req = req;
    j->cb = cb;
    j->arg = arg;
    if (a->nthreads == 0) {
        verify(a, j);
        complete(a, j);
        return;
    }
    pthread_mutex_lock(&a->lock);
    if (a->todo_tail)
        a->todo_tail->next = j;
    else
        a->todo_head = j;
    a->todo_tail = j;
    a->todo_n++;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

void rsv_auth_check(rsv_auth_t *a, cm_req_t *req, const char *event, bool allow_expired,
                    cm_jwt_claims_t *claims, rsv_auth_cb cb, void *arg)
{
    check(a, req, event, allow_expired, claims, NULL, cb, arg);
}

void rsv_auth_check_new(rsv_auth_t *a, cm_req_t *req, const char *event, cm_jwt_claims_t *claims,
                        char record[65], rsv_auth_cb cb, void *arg)
{
    check(a, req, event, false, claims, record, cb, arg);
}

void rsv_auth_remember(rsv_auth_t *a, cm_req_t *req, const cm_jwt_claims_t *claims)
{
    size_t len = 0;
    const char *tok = cm_http_bearer(req, &len);
    if (tok == NULL || len == 0 || len > TOKEN_MAX)
        return;
    job_t j = {
        .token = cm_xstrndup(tok, len),
        .len = len,
        .gen = 0, /* older than any keys: the first hit checks the kid is still held */
        .claims = *claims,
    };
    cache_put(a, &j, true);
    free(j.token); /* NULL unless the token was already cached as verified */
}

uint64_t rsv_auth_inspected(const rsv_auth_t *a)
{
    return a->inspected;
}

uint64_t rsv_auth_verifications(const rsv_auth_t *a)
{
    return a->verifications;
}

uint64_t rsv_auth_hits(const rsv_auth_t *a)
{
    return a->hits;
}

uint64_t rsv_auth_busy(const rsv_auth_t *a)
{
    return a->busy;
}

uint64_t rsv_auth_limited(const rsv_auth_t *a)
{
    return a->limited;
}

size_t rsv_auth_keys_cached(rsv_auth_keys_t *k)
{
    size_t n = 0;
    pthread_mutex_lock(&k->mu);
    token_cache_t *c = k->cache;
    pthread_mutex_unlock(&k->mu);
    for (size_t i = 0; c && i <= c->mask; i++) {
        pthread_mutex_t *mu = slot_lock(c, i);
        pthread_mutex_lock(mu);
        n += c->slots[i].token != NULL;
        pthread_mutex_unlock(mu);
    }
    return n;
}

size_t rsv_auth_keys_cache_capacity(rsv_auth_keys_t *k)
{
    pthread_mutex_lock(&k->mu);
    size_t n = k->cache ? k->cache->mask + 1 : 0;
    pthread_mutex_unlock(&k->mu);
    return n;
}

void rsv_auth_metrics_register(rsv_auth_metrics_t *am, cm_metrics_t *reg)
{
    am->invalid_tokens =
        cm_metrics_counter(reg, "onsale_reserve_invalid_tokens_total",
                           "requests with a missing or invalid admission token", NULL);
}
