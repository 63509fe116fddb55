/*
 * cm_mem — see cm_mem.h. Out of memory is not an error path onsale can recover
 * from mid-request, so it ends the process loudly instead of spreading NULL checks.
 */
#include "cm_mem.h"

#include <stdarg.h>
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
