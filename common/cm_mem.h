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

/*
 * cm_pool — a free list of same-sized objects, for an operation allocated per request
 * on one event loop (memcached's per-thread item caches, h2o's mem pools). Not thread
 * safe: one pool per loop, used on that loop's thread only. At most `keep` returned
 * objects are kept; more are freed.
 */
typedef struct cm_pool cm_pool_t;

/** A pool of objects of `size` bytes keeping at most `keep` of them free. */
cm_pool_t *cm_pool_new(size_t size, size_t keep) __attribute__((returns_nonnull));
/** A zeroed object: a kept one when there is one, else a new allocation. */
void *cm_pool_get(cm_pool_t *p) __attribute__((returns_nonnull));
/** Gives obj (from cm_pool_get of p; NULL is fine) back to the pool. */
void cm_pool_put(cm_pool_t *p, void *obj);
/**
 * Frees the kept objects and the pool; NULL is fine. Objects still out may be put back
 * later (a late completion at teardown): the pool is then freed with the last of them.
 */
void cm_pool_free(cm_pool_t *p);
/** Objects handed out and not put back; objects kept for reuse. */
size_t cm_pool_out(const cm_pool_t *p);
size_t cm_pool_kept(const cm_pool_t *p);

#endif
