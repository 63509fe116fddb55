/*
 * gw_signer — see gw_signer.h.
 *
 * Threads: the loop thread submits and reaps; workers only sign. Shared state is the
 * two lists under one mutex: `todo` (FIFO, bounded) and `done`. A worker moves a job
 * from todo to done and calls event_active on the wake event; the loop's on_wake takes
 * the whole done list under the lock and runs the callbacks outside it. A full queue
 * fails the job at once (cm_err_busy) via the same done path, so callbacks never
 * re-enter the caller.
 */
#include "gw_signer.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"

typedef struct job {
    struct job *next;
    cm_jwt_claims_t claims;
    gw_signer_cb cb;
    void *arg;
    char *token;
    const char *err;
} job_t;

typedef struct list {
    job_t *head, *tail;
    size_t n;
} list_t;

struct gw_signer {
    const cm_jwt_signer_t *signer; /* swapped by gw_signer_set_key (a reload): atomic */
    struct event *wake;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    list_t todo, done;
    size_t busy; /* jobs a worker is signing */
    size_t max_queue;
    bool stopping;
    int nthreads;
    pthread_t *threads;
};

static void push(list_t *l, job_t *j)
{
    j->next = NULL;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

static job_t *pop(list_t *l)
{
    job_t *j = l->head;
    if (j) {
        l->head = j->next;
        if (l->head == NULL)
            l->tail = NULL;
        l->n--;
    }
    return j;
}

static void *worker(void *arg)
{
    gw_signer_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && p->todo.head == NULL)
            pthread_cond_wait(&p->cond, &p->mu);
        if (p->stopping)
            break;
        job_t *j = pop(&p->todo);
        p->busy++;
        pthread_mutex_unlock(&p->mu);
        j->token =
            cm_jwt_sign(__atomic_load_n(&p->signer, __ATOMIC_ACQUIRE), &j->claims, CM_JWT_AUDIENCE);
        j->err = j->token ? NULL : cm_err_server;
        pthread_mutex_lock(&p->mu);
        p->busy--;
        push(&p->done, j);
        event_active(p->wake, EV_READ, 1);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void run_done(list_t *l)
{
    job_t *j;
    while ((j = pop(l)) != NULL) {
        j->cb(j->err, j->token, j->arg);
        free(j);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    gw_signer_t *p = arg;
    pthread_mutex_lock(&p->mu);
    list_t got = p->done;
    p->done = (list_t){0};
    pthread_mutex_unlock(&p->mu);
    run_done(&got);
}

void gw_signer_set_key(gw_signer_t *p, const cm_jwt_signer_t *signer)
{
    __atomic_store_n(&p->signer, signer, __ATOMIC_RELEASE);
}

gw_signer_t *gw_signer_new(struct event_base *base, const cm_jwt_signer_t *signer, int nthreads,
                           size_t max_queue)
{
    gw_signer_t *p = cm_xcalloc(1, sizeof(*p));
    p->signer = signer;
    p->max_queue = max_queue;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->wake = event_new(base, -1, 0, on_wake, p);
    p->threads = cm_xcalloc((size_t)nthreads, sizeof(pthread_t));
    for (; p->nthreads < nthreads; p->nthreads++) {
        if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) != 0) {
            cm_log(CM_LOG_ERROR, "signer: cannot start worker thread %d", p->nthreads);
            gw_signer_free(p);
            return NULL;
        }
    }
    return p;
}

void gw_signer_submit(gw_signer_t *p, const cm_jwt_claims_t *claims, gw_signer_cb cb, void *arg)
{
    job_t *j = cm_xcalloc(1, sizeof(*j));
    j->claims = *claims;
    j->cb = cb;
    j->arg = arg;
    if (p->nthreads == 0 && !p->stopping) {
        /* inline: sign now on this loop thread; answer on its next turn */
        j->token =
            cm_jwt_sign(__atomic_load_n(&p->signer, __ATOMIC_ACQUIRE), &j->claims, CM_JWT_AUDIENCE);
        j->err = j->token ? NULL : cm_err_server;
    }
    pthread_mutex_lock(&p->mu);
    if (p->nthreads == 0 && !p->stopping) {
        push(&p->done, j);
        event_active(p->wake, EV_READ, 1);
    } else if (p->todo.n >= p->max_queue || p->stopping) {
        j->err = p->stopping ? cm_err_shutdown : cm_err_busy;
        push(&p->done, j);
        event_active(p->wake, EV_READ, 1);
    } else {
        push(&p->todo, j);
        pthread_cond_signal(&p->cond);
    }
    pthread_mutex_unlock(&p->mu);
}

size_t gw_signer_pending(const gw_signer_t *p)
{
    gw_signer_t *q = (gw_signer_t *)p; /* the lock is not part of the logical state */
    pthread_mutex_lock(&q->mu);
    size_t n = q->todo.n + q->busy;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void gw_signer_free(gw_signer_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    /* Workers are gone: finish what they signed, then fail what they never started. */
    run_done(&p->done);
    job_t *j;
    while ((j = pop(&p->todo)) != NULL) {
        j->cb(cm_err_shutdown, NULL, j->arg);
        free(j);
    }
    if (p->wake)
        event_free(p->wake);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
