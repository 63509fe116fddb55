/*
 * cm_reload — see cm_reload.h.
 *
 * One mutex guards the hook list and is held while a round runs, so cm_reload_remove
 * cannot return while its hook is running (the owner may free arg right after).
 * Several SIGHUPs before the thread wakes may collapse into fewer rounds; every round
 * re-reads everything, so nothing is lost. Each round is bracketed by RELOADING=1 and
 * READY=1 to the service manager (cm_notify), so `systemctl reload` returns once it ended.
 *
 * The configuration reloader is one such hook: it loads the file into a new struct,
 * keeps the running value of every key that cannot change live (warning by name), and
 * publishes the result as a new immutable snapshot in a cell, so a worker thread reads
 * either the old snapshot or the new one, never half of each.
 */
#include "cm_reload.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_config.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_notify.h"

typedef struct hook {
    struct hook *next;
    char *what;
    cm_reload_fn fn;
    void *arg;
} hook_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static hook_t *hooks;
static bool started;
static sem_t wake;
static uint64_t rounds;

static void on_sighup(int sig)
{
    (void)sig;
    int saved = errno;
    sem_post(&wake);
    errno = saved;
}

static void run_round(void)
{
    char err[512];
    cm_notify_reloading();
    for (hook_t *h = hooks; h != NULL; h = h->next) {
        err[0] = '\0';
        if (h->fn(h->arg, err, sizeof(err)) == 0)
            cm_log(CM_LOG_INFO, "reload: %s reloaded", h->what);
        else
            cm_log(CM_LOG_ERROR, "reload: %s kept as it was: %s", h->what, err);
    }
    rounds++;
    cm_notify_reloaded();
    pthread_cond_broadcast(&done_cond);
}

static void *reload_thread(void *unused)
{
    (void)unused;
    for (;;) {
        while (sem_wait(&wake) != 0) /* EINTR: another signal arrived */
            ;
        pthread_mutex_lock(&mu);
        run_round();
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* Under mu. */
static int start(void)
{
    pthread_t th;
    pthread_attr_t attr;
    struct sigaction sa;
    if (sem_init(&wake, 0, 0) != 0) {
        cm_log(CM_LOG_ERROR, "reload: sem_init: %s", strerror(errno));
        return -1;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, reload_thread, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        cm_log(CM_LOG_ERROR, "reload: cannot start the reload thread: %s", strerror(rc));
        sem_destroy(&wake);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sighup;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGHUP, &sa, NULL) != 0) {
        cm_log(CM_LOG_ERROR, "reload: sigaction(SIGHUP): %s", strerror(errno));
        return -1; /* the thread stays, idle; cm_reload_trigger still works */
    }
    started = true;
    return 0;
}

int cm_reload_add(const char *what, cm_reload_fn fn, void *arg)
{
    int rc = 0;
    pthread_mutex_lock(&mu);
    if (!started)
        rc = start();
    if (rc == 0) {
        hook_t *h = cm_xcalloc(1, sizeof(*h));
        h->what = cm_xstrdup(what);
        h->fn = fn;
        h->arg = arg;
        hook_t **tail = &hooks;
        while (*tail != NULL)
            tail = &(*tail)->next;
        *tail = h;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

void cm_reload_remove(cm_reload_fn fn, void *arg)
{
    pthread_mutex_lock(&mu);
    for (hook_t **p = &hooks; *p != NULL; p = &(*p)->next) {
        if ((*p)->fn == fn && (*p)->arg == arg) {
            hook_t *h = *p;
            *p = h->next;
            free(h->what);
            free(h);
            break;
        }
    }
    pthread_mutex_unlock(&mu);
}

void cm_reload_trigger(void)
{
    on_sighup(SIGHUP);
}

uint64_t cm_reload_rounds(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = rounds;
    pthread_mutex_unlock(&mu);
    return n;
}

bool cm_reload_wait(uint64_t after, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&mu);
    while (rounds <= after && pthread_cond_timedwait(&done_cond, &mu, &deadline) == 0)
        ;
    bool ok = rounds > after;
    pthread_mutex_unlock(&mu);
    return ok;
}

void cm_reload_set_log_level(int level)
{
    __atomic_store_n(&cm_log_level, (cm_log_level_t)level,
                     __ATOMIC_RELAXED); /* cm_log.h reads it so */
}

/* --- cells ------------------------------------------------------------------------- */

typedef struct retired {
    struct retired *next;
    void *value;
} retired_t;

struct cm_reload_cell {
    void *_Atomic value;
    cm_reload_free_fn free_fn;
    void *ctx;
    pthread_mutex_t mu; /* guards old */
    retired_t *old;
};

cm_reload_cell_t *cm_reload_cell_new(void *value, cm_reload_free_fn free_fn, void *ctx)
{
    cm_reload_cell_t *c = cm_xcalloc(1, sizeof(*c));
    atomic_init(&c->value, value);
    c->free_fn = free_fn;
    c->ctx = ctx;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void *cm_reload_cell_get(const cm_reload_cell_t *c)
{
    if (c == NULL)
        return NULL;
    return atomic_load_explicit(&((cm_reload_cell_t *)c)->value, memory_order_acquire);
}

void cm_reload_cell_set(cm_reload_cell_t *c, void *value)
{
    void *old = atomic_exchange_explicit(&c->value, value, memory_order_acq_rel);
    if (old == NULL)
        return;
    retired_t *r = cm_xcalloc(1, sizeof(*r));
    r->value = old;
    pthread_mutex_lock(&c->mu);
    r->next = c->old;
    c->old = r;
    pthread_mutex_unlock(&c->mu);
}

void cm_reload_cell_free(cm_reload_cell_t *c)
{
    if (c == NULL)
        return;
    void *v = atomic_load(&c->value);
    if (v != NULL && c->free_fn != NULL)
        c->free_fn(v, c->ctx);
    for (retired_t *r = c->old, *next; r != NULL; r = next) {
        next = r->next;
        if (c->free_fn != NULL)
            c->free_fn(r->value, c->ctx);
        free(r);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void cm_reload_free_secret(void *s, void *ctx)
{
    (void)ctx;
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

/* --- the configuration ------------------------------------------------------------- */

struct cm_reload_config {
    cm_reload_config_spec_t spec;
    cm_reload_cell_t *current; /* the effective snapshot: a spec.size struct */
    cm_reload_apply_fn apply;
    void *arg;
    bool hooked;
};

/* A cell's free_fn: ctx is the reloader, whose table says which fields are strings. */
static void snapshot_free(void *cfg, void *ctx)
{
    const cm_reload_config_t *rc = ctx;
    cm_config_free(rc->spec.table, rc->spec.n, cfg);
    free(cfg);
}

cm_reload_config_t *cm_reload_config_new(const cm_reload_config_spec_t *spec, const void *cfg)
{
    cm_reload_config_t *rc = cm_xcalloc(1, sizeof(*rc));
    rc->spec = *spec;
    void *snap = cm_xcalloc(1, spec->size);
    cm_config_copy(spec->table, spec->n, snap, cfg);
    rc->current = cm_reload_cell_new(snap, snapshot_free, rc);
    return rc;
}

const void *cm_reload_config_current(const cm_reload_config_t *rc)
{
    return cm_reload_cell_get(rc->current);
}

json_t *cm_reload_config_json(const cm_reload_config_t *rc)
{
    return cm_config_json(rc->spec.table, rc->spec.n, cm_reload_config_current(rc),
                          rc->spec.secret);
}

/* Keeps the running value of every key that cannot change live; logs each. Returns how
 * many live keys changed. */
static int merge(const cm_reload_config_spec_t *sp, void *next, const void *cur)
{
    int live = 0;
    for (size_t i = 0; i < sp->n; i++) {
        const cm_config_opt_t *o = &sp->table[i];
        if (cm_config_equal(o, next, cur))
            continue;
        if (cm_config_in(sp->live, o->name)) {
            cm_log(CM_LOG_INFO, "reload: %s changed (applied live)", o->name);
            live++;
            continue;
        }
        cm_log(CM_LOG_WARN,
               "reload: %s changed in the configuration but needs a restart; the running "
               "value stays until then",
               o->name);
        cm_config_copy_key(o, next, cur);
    }
    return live;
}

/* The reload hook: on the reload thread. */
static int on_config_reload(void *arg, char *err, size_t errlen)
{
    cm_reload_config_t *rc = arg;
    const cm_reload_config_spec_t *sp = &rc->spec;
    void *next = cm_xcalloc(1, sp->size);
    int pos[8];
    size_t npos = 0;
    cm_config_result_t r = cm_config_load(sp->table, sp->n, next, sp->env_prefix, sp->argc,
                                          sp->argv, pos, 8, &npos, err, errlen);
    if (r != CM_CONFIG_OK) {
        if (r == CM_CONFIG_HELP)
            snprintf(err, errlen, "the command line asks for --help");
        free(next);
        return -1;
    }
    if (sp->check != NULL && sp->check(next, err, errlen) != 0)
        goto fail;
    merge(sp, next, cm_reload_config_current(rc));
    if (rc->apply != NULL && rc->apply(rc->arg, next, err, errlen) != 0)
        goto fail;
    cm_reload_cell_set(rc->current, next);
    return 0;
fail:
    snapshot_free(next, rc);
    return -1;
}

int cm_reload_config_start(cm_reload_config_t *rc, cm_reload_apply_fn apply, void *arg)
{
    rc->apply = apply;
    rc->arg = arg;
    char what[96];
    snprintf(what, sizeof(what), "%s configuration", rc->spec.service);
    if (cm_reload_add(what, on_config_reload, rc) != 0)
        return -1;
    rc->hooked = true;
    return 0;
}

void cm_reload_config_free(cm_reload_config_t *rc)
{
    if (rc == NULL)
        return;
    if (rc->hooked)
        cm_reload_remove(on_config_reload, rc);
    cm_reload_cell_free(rc->current);
    free(rc);
}
