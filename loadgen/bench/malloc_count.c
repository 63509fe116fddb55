/*
 * malloc_count — an LD_PRELOAD shim counting a process's allocation calls, to compare
 * allocations per request between the gateway and nginx (docs/performance.md).
 *
 *   cc -O2 -shared -fPIC -o /tmp/malloc_count.so loadgen/bench/malloc_count.c -lpthread
 *   MALLOC_COUNT_DIR=/tmp/mc LD_PRELOAD=/tmp/malloc_count.so <server …>
 *
 * Every process whose executable's name is listed in MALLOC_COUNT_MATCH (comma-separated;
 * unset: every process) — forked workers included — rewrites MALLOC_COUNT_DIR/<pid>
 * every 100 ms with "malloc calloc realloc free" totals; read it before and after a
 * fixed number of requests. glibc only (calls __libc_malloc & co.).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static unsigned long n_malloc, n_calloc, n_realloc, n_free;

void *malloc(size_t n)
{
    __atomic_add_fetch(&n_malloc, 1, __ATOMIC_RELAXED);
    return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    __atomic_add_fetch(&n_calloc, 1, __ATOMIC_RELAXED);
    return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    __atomic_add_fetch(&n_realloc, 1, __ATOMIC_RELAXED);
    return __libc_realloc(p, n);
}

void free(void *p)
{
    if (p != NULL)
        __atomic_add_fetch(&n_free, 1, __ATOMIC_RELAXED);
    __libc_free(p);
}

static void *writer(void *arg)
{
    (void)arg;
    const char *dir = getenv("MALLOC_COUNT_DIR");
    if (dir == NULL)
        return NULL;
    char path[512], line[160];
    snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
    for (;;) {
        int n = snprintf(line, sizeof(line), "%lu %lu %lu %lu\n",
                         __atomic_load_n(&n_malloc, __ATOMIC_RELAXED),
                         __atomic_load_n(&n_calloc, __ATOMIC_RELAXED),
                         __atomic_load_n(&n_realloc, __ATOMIC_RELAXED),
                         __atomic_load_n(&n_free, __ATOMIC_RELAXED));
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            if (write(fd, line, (size_t)n) < 0) {
            }
            close(fd);
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int wanted(void)
{
    const char *match = getenv("MALLOC_COUNT_MATCH");
    char exe[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (match == NULL)
        return 1;
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    size_t bl = strlen(base);
    for (const char *p = match; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == bl && strncmp(p, base, l) == 0)
            return 1;
        p += l + (e != NULL);
    }
    return 0;
}

static void start(void)
{
    if (!wanted())
        return;
    pthread_t t;
    if (pthread_create(&t, NULL, writer, NULL) == 0)
        pthread_detach(t);
}

__attribute__((constructor)) static void init(void)
{
    pthread_atfork(NULL, NULL, start); /* forked workers count in their own file */
    start();
}
