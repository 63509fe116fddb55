/*
 * rsv_auth — see rsv_auth.h.
 *
 * The cache is direct-mapped (one slot per hash bucket, a newer token replaces an
 * older one): O(1), bounded memory, no eviction bookkeeping. A slot holds a copy of
 * the token, so a hash collision can never hand one buyer another's claims.
 *
 * Workers take jobs from a mutex-protected FIFO and put finished ones on a done list,
 * then wake the loop with event_active (thread-safe: the base is created after
 * evthread_use_pthreads). The loop thread alone touches the cache and the callbacks.
 */
#include "rsv_auth.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_http.h"
#include "cm_mem.h"

#define TOKEN_MAX   4096
#define MAX_THREADS 16

typedef struct slot {
    char *token;
    size_t len;
    cm_jwt_claims_t claims;
} slot_t;

typedef struct job {
    struct job *next;
    char *token;
    size_t len;
    int64_t now;
    cm_jwt_result_t result;
    cm_jwt_claims_t claims; /* filled by the worker */
    /* the request's side, used on the loop thread */
    char event[65];
    bool has_event;
    bool allow_expired;
    cm_jwt_claims_t *out;
    rsv_auth_cb cb;
    void *arg;
} job_t;

struct rsv_auth {
    cm_jwt_keyset_t *keys;
    int64_t leeway;
    slot_t *slots;
    size_t mask;
    uint64_t verifications;
    uint64_t hits;
    /* workers */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    job_t *todo_head, *todo_tail;
    job_t *done;
    bool stopping;
    int nthreads;
    pthread_t threads[MAX_THREADS];
    struct event *wake;
};

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Judges the time and event claims of a correctly signed token. */
static rsv_auth_result_t judge(const rsv_auth_t *a, const cm_jwt_claims_t *c, int64_t now,
                               const char *event, bool allow_expired, const char **why)
{
    if (c->nbf - a->leeway > now) {
        *why = "not yet valid";
        return RSV_AUTH_INVALID;
    }
    if (c->exp + a->leeway <= now && !allow_expired) {
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

/* Loop thread: records a verification's outcome and answers its caller. */
static void complete(rsv_auth_t *a, job_t *j)
{
    const char *why = NULL;
    rsv_auth_result_t r;
    if (j->result == CM_JWT_OK || j->result == CM_JWT_EXPIRED) {
        slot_t *s = &a->slots[hash(j->token, j->len) & a->mask];
        free(s->token);
        s->token = j->token;
        s->len = j->len;
        s->claims = j->claims;
        j->token = NULL;
        *j->out = j->claims;
        r = judge(a, &j->claims, (int64_t)time(NULL), j->has_event ? j->event : NULL,
                  j->allow_expired, &why);
    } else {
        why = cm_jwt_result_str(j->result);
        r = RSV_AUTH_INVALID;
    }
    j->cb(r, why, j->arg);
    free(j->token);
    free(j);
}

static void verify(const rsv_auth_t *a, job_t *j)
{
    cm_jwt_policy_t pol = {.leeway_s = a->leeway};
    j->result = cm_jwt_verify(a->keys, j->token, j->len, &pol, j->now, &j->claims);
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
        pthread_mutex_unlock(&a->lock);
        verify(a, j); /* the keyset is read-only: safe from any thread */
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

rsv_auth_t *rsv_auth_new(struct event_base *base, cm_jwt_keyset_t *keys, int64_t leeway_s,
                         size_t cache_size, int threads)
{
    rsv_auth_t *a = cm_xcalloc(1, sizeof(*a));
    size_t n = 16;
    while (n < cache_size)
        n <<= 1;
    a->keys = keys;
    a->leeway = leeway_s;
    a->slots = cm_xcalloc(n, sizeof(slot_t));
    a->mask = n - 1;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (base && threads > 0) {
        a->wake = event_new(base, -1, 0, on_wake, a);
        for (int i = 0; i < threads; i++)
            if (pthread_create(&a->threads[a->nthreads], NULL, worker, a) == 0)
                a->nthreads++;
    }
    return a;
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
    for (size_t i = 0; i <= a->mask; i++)
        free(a->slots[i].token);
    free(a->slots);
    cm_jwt_keyset_free(a->keys);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    free(a);
}

void rsv_auth_check(rsv_auth_t *a, struct evhttp_request *req, const char *event,
                    bool allow_expired, cm_jwt_claims_t *claims, rsv_auth_cb cb, void *arg)
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
    slot_t *s = &a->slots[hash(tok, len) & a->mask];
    if (s->token && s->len == len && memcmp(s->token, tok, len) == 0) {
        a->hits++;
        *claims = s->claims;
        rsv_auth_result_t r = judge(a, claims, now, event, allow_expired, &why);
        cb(r, why, arg);
        return;
    }
    a->verifications++;
    job_t *j = cm_xcalloc(1, sizeof(*j));
    j->token = cm_xstrndup(tok, len);
    j->len = len;
    j->now = now;
    j->has_event = event != NULL;
    if (event)
        snprintf(j->event, sizeof(j->event), "%s", event);
    j->allow_expired = allow_expired;
    j->out = claims;
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
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

uint64_t rsv_auth_verifications(const rsv_auth_t *a)
{
    return a->verifications;
}

uint64_t rsv_auth_hits(const rsv_auth_t *a)
{
    return a->hits;
}
