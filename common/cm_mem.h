/*
 * cm_mem — allocation that aborts on out-of-memory, so callers never handle NULL
 * from an allocator (the same rule as redis zmalloc / h2o h2o_mem_alloc).
 */
#ifndef CM_MEM_H
#define CM_MEM_H

#include <stddef.h>

void *cm_xmalloc(size_t n) __attribute__((malloc, returns_nonnull));
void *cm_xcalloc(size_t count, size_t n) __attribute__((malloc, returns_nonnull));
void *cm_xrealloc(void *p, size_t n) __attribute__((returns_nonnull));
char *cm_xstrdup(const char *s) __attribute__((malloc, returns_nonnull));
char *cm_xstrndup(const char *s, size_t n) __attribute__((malloc, returns_nonnull));
/** printf into a fresh heap string; the caller frees it. */
char *cm_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2), returns_nonnull));

#endif
