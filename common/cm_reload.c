/*
 * cm_reload — see cm_reload.h.
 *
 * One mutex guards the hook list and is held while a round runs, so cm_reload_remove
 * cannot return while its hook is running (the owner may free arg right after).
 * Several SIGHUPs before the thread wakes may collapse into fewer rounds; every round
 * re-reads everything, so nothing is lost. Each round is bracketed by RELOADING=1 and
 * READY=1 to the service manager (cm_notify), so `systemctl reload` returns once it ended.
 */
#include "cm_reload.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
