/*
 * ps_journal — see ps_journal.h.
 */
#include "ps_journal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_log.h"
#include "cm_mem.h"

#define LINE_MAX_LEN (1024 * 1024)

typedef struct jentry {
    struct jentry *next;
    char *line;
    ps_journal_cb done;
    void *arg;
} jentry_t;

struct ps_journal {
    int fd; /* -1: memory only */
    bool fsync;
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    jentry_t *in_head, **in_tail;     /* loop → writer */
    jentry_t *done_head, **done_tail; /* writer → loop */
    bool stop;
    int pipe_r, pipe_w;
    struct event *ev;
};

static void *journal_thread(void *arg)
{
    ps_journal_t *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->in_head == NULL && !j->stop)
            pthread_cond_wait(&j->cv, &j->mu);
        if (j->in_head == NULL && j->stop)
            break;
        jentry_t *batch = j->in_head;
        j->in_head = NULL;
        j->in_tail = &j->in_head;
        pthread_mutex_unlock(&j->mu);
        jentry_t *last = NULL;
        for (jentry_t *e = batch; e; e = e->next) {
            size_t len = strlen(e->line), off = 0;
            while (off < len) {
                ssize_t n = write(j->fd, e->line + off, len - off);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0) {
                    /* A simulator that cannot write its ledger must not pretend. */
                    cm_log(CM_LOG_ERROR, "ledger write: %s; exiting", strerror(errno));
                    _exit(3);
                }
                off += (size_t)n;
            }
            last = e;
        }
        if (j->fsync && fdatasync(j->fd) != 0) {
            cm_log(CM_LOG_ERROR, "ledger fdatasync: %s; exiting", strerror(errno));
            _exit(3);
        }
        pthread_mutex_lock(&j->mu);
        *j->done_tail = batch;
        j->done_tail = &last->next;
        pthread_mutex_unlock(&j->mu);
        char one = 1;
        while (write(j->pipe_w, &one, 1) < 0 && errno == EINTR) {
        }
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Loop thread: runs the callbacks of the lines the writer made durable. */
static void on_journal_done(evutil_socket_t fd, short what, void *arg)
{
    ps_journal_t *j = arg;
    char buf[256];
    if (j->pipe_r >= 0)
        while (read(j->pipe_r, buf, sizeof(buf)) > 0) {
        }
    pthread_mutex_lock(&j->mu);
    jentry_t *list = j->done_head;
    j->done_head = NULL;
    j->done_tail = &j->done_head;
    pthread_mutex_unlock(&j->mu);
    while (list) {
        jentry_t *e = list;
        list = e->next;
        e->done(e->arg);
        free(e->line);
        free(e);
    }
}

/* Queues a line (ownership taken); done(arg) runs on the loop once it is durable. */
void ps_journal_append(ps_journal_t *j, char *line, ps_journal_cb done, void *arg)
{
    jentry_t *e = cm_xcalloc(1, sizeof(*e));
    e->line = line;
    e->done = done;
    e->arg = arg;
    pthread_mutex_lock(&j->mu);
    if (j->fd < 0) {
        *j->done_tail = e;
        j->done_tail = &e->next;
        pthread_mutex_unlock(&j->mu);
        event_active(j->ev, EV_READ, 0);
        return;
    }
    *j->in_tail = e;
    j->in_tail = &e->next;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Start-up only: rebuilds the records from the ledger file. */
static int journal_replay(const char *path, ps_journal_replay_cb replay, void *arg, char *err,
                          size_t errlen)
{
    FILE *f = fopen(path, "r"); /* blocking-ok: start-up, before the loop */
    if (f == NULL) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "ledger_file %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = cm_xmalloc(LINE_MAX_LEN);
    size_t n = 0, bad = 0;
    while (fgets(line, LINE_MAX_LEN, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (replay(o, arg) == 0)
            n++;
        else
            bad++; /* a torn last line after a crash, an older format, or garbage */
        json_decref(o);
    }
    free(line);
    fclose(f);
    cm_log(CM_LOG_INFO, "ledger %s: %zu records replayed%s", path, n,
           bad ? " (unreadable lines skipped)" : "");
    return 0;
}

ps_journal_t *ps_journal_new(struct event_base *base, const char *path, bool fsync,
                             ps_journal_replay_cb replay, void *arg, char *err, size_t errlen)
{
    ps_journal_t *j = cm_xcalloc(1, sizeof(*j));
    j->fd = j->pipe_r = j->pipe_w = -1;
    j->fsync = fsync;
    j->in_tail = &j->in_head;
    j->done_tail = &j->done_head;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    if (path == NULL) {
        j->ev = event_new(base, -1, 0, on_journal_done, j);
        cm_log(CM_LOG_WARN, "no ledger_file: payments are kept in memory only");
        return j;
    }
    if (journal_replay(path, replay, arg, err, errlen) != 0)
        goto err;
    j->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    int p[2];
    if (j->fd < 0 || pipe(p) != 0) {
        snprintf(err, errlen, "ledger_file %s: %s", path, strerror(errno));
        goto err;
    }
    j->pipe_r = p[0];
    j->pipe_w = p[1];
    for (int i = 0; i < 2; i++) {
        fcntl(p[i], F_SETFL, fcntl(p[i], F_GETFL) | O_NONBLOCK);
        fcntl(p[i], F_SETFD, FD_CLOEXEC);
    }
    j->ev = event_new(base, j->pipe_r, EV_READ | EV_PERSIST, on_journal_done, j);
    event_add(j->ev, NULL);
    if (pthread_create(&j->thread, NULL, journal_thread, j) != 0) {
        snprintf(err, errlen, "cannot start the ledger writer thread");
        goto err;
    }
    j->running = true;
    return j;
err:
    ps_journal_free(j);
    return NULL;
}

/* Flushes and stops the writer, then runs the callbacks of what it wrote. */
void ps_journal_free(ps_journal_t *j)
{
    if (j == NULL)
        return;
    if (j->running) {
        pthread_mutex_lock(&j->mu);
        j->stop = true;
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->thread, NULL);
        j->running = false;
    }
    if (j->ev)
        on_journal_done(-1, 0, j);
    if (j->ev)
        event_free(j->ev);
    j->ev = NULL;
    if (j->fd >= 0)
        close(j->fd);
    if (j->pipe_r >= 0)
        close(j->pipe_r);
    if (j->pipe_w >= 0)
        close(j->pipe_w);
    j->fd = j->pipe_r = j->pipe_w = -1;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}
