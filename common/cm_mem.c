/*
 * cm_mem — see cm_mem.h. Out of memory is not an error path onsale can recover
 * from mid-request, so it ends the process loudly instead of spreading NULL checks.
 * cm_pool keeps returned objects on a singly linked list threaded through their own
 * first bytes (objects are at least a pointer in size).
 */
#include "cm_mem.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void oom(size_t n)
{
    char msg[96];
    int len = snprintf(msg, sizeof(msg), "onsale: out of memory allocating %zu bytes\n", n);
    ssize_t w = write(STDERR_FILENO, msg, (size_t)len);
    (void)w;
    abort();
}

void *cm_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        oom(n);
    return p;
}

void *cm_xcalloc(size_t count, size_t n)
{
    void *p = calloc(count ? count : 1, n ? n : 1);
    if (p == NULL)
        oom(count * n);
    return p;
}

void *cm_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        oom(n);
    return q;
}

char *cm_xstrdup(const char *s)
{
    return cm_xstrndup(s, strlen(s));
}

char *cm_xstrndup(const char *s, size_t n)
{
    char *p = cm_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *cm_xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort();
    char *p = cm_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

struct cm_pool {
    size_t size, keep;
    size_t out, nkept;
    void *kept; /* the free list: each kept object starts with the next one's address */
    bool freed; /* cm_pool_free came while objects were out */
};

cm_pool_t *cm_pool_new(size_t size, size_t keep)
{
    cm_pool_t *p = cm_xcalloc(1, sizeof(*p));
    p->size = size < sizeof(void *) ? sizeof(void *) : size;
    p->keep = keep;
    return p;
}

void *cm_pool_get(cm_pool_t *p)
{
    void *obj = p->kept;
    if (obj != NULL) {
        memcpy(&p->kept, obj, sizeof(void *));
        p->nkept--;
        memset(obj, 0, p->size);
    } else {
        obj = cm_xcalloc(1, p->size);
    }
    p->out++;
    return obj;
}

static void drop_kept(cm_pool_t *p)
{
    while (p->kept != NULL) {
        void *obj = p->kept;
        memcpy(&p->kept, obj, sizeof(void *));
        free(obj);
    }
    p->nkept = 0;
}

void cm_pool_put(cm_pool_t *p, void *obj)
{
    if (obj == NULL)
        return;
    p->out--;
    if (p->freed || p->nkept >= p->keep) {
        free(obj);
        if (p->freed && p->out == 0)
            free(p);
        return;
    }
    memcpy(obj, &p->kept, sizeof(void *));
    p->kept = obj;
    p->nkept++;
}

void cm_pool_free(cm_pool_t *p)
{
    if (p == NULL)
        return;
    drop_kept(p);
    if (p->out > 0)
        p->freed = true;
    else
        free(p);
}

size_t cm_pool_out(const cm_pool_t *p)
{
    return p->out;
}

size_t cm_pool_kept(const cm_pool_t *p)
{
    return p->nkept;
}
