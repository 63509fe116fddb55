/*
 * gw_signer — ES256 signing of admission tokens, on worker threads or inline.
 *
 * cm_jwt_sign costs ~25 µs of CPU (bench_crypto.sh). With nthreads > 0, jobs go from
 * the loop to a bounded queue served by N threads; each result is put on a done list
 * and the loop is woken with event_active (libevent's pthreads locking must be on:
 * evthread_use_pthreads() before the base is created), like redis bio.c. With
 * nthreads = 0 the loop signs inline in gw_signer_submit and the callback runs on the
 * loop's next turn: no queue, no thread wake-up, no context switch — cheaper per token
 * (bench_admit.sh), at the price of ~25 µs of loop time per admission. Callbacks run on
 * the loop thread only, so the rest of the gateway stays single-threaded. Every
 * function is for the loop thread that owns the pool; the cm_jwt signer is shared
 * read-only and is safe from any number of threads and pools at once.
 */
#ifndef GW_SIGNER_H
#define GW_SIGNER_H

#include <stddef.h>

#include "cm_jwt.h"

struct event_base;
typedef struct gw_signer gw_signer_t;

/**
 * Completion, on the loop thread: err NULL and token (heap, the callee owns it) on
 * success; else token NULL and err cm_err_busy (queue full, nothing signed),
 * cm_err_server (signing failed) or cm_err_shutdown (the pool is being freed).
 */
typedef void (*gw_signer_cb)(const char *err, char *token, void *arg);

/**
 * Starts nthreads workers (0 = sign inline on the loop) signing with signer (borrowed;
 * must outlive the pool) and at most max_queue jobs waiting. NULL when a thread cannot
 * be started.
 */
gw_signer_t *gw_signer_new(struct event_base *base, const cm_jwt_signer_t *signer, int nthreads,
                           size_t max_queue);

/**
 * Signs with signer from the next job on (a reload's new key). Any thread; the old signer
 * must stay alive (a job may be signing with it): the caller retires it, never frees it.
 */
void gw_signer_set_key(gw_signer_t *p, const cm_jwt_signer_t *signer);

/**
 * Queues claims (copied) for signing; cb runs later on the loop thread, exactly once —
 * never from inside this call.
 */
void gw_signer_submit(gw_signer_t *p, const cm_jwt_claims_t *claims, gw_signer_cb cb, void *arg);

/** Jobs queued or being signed right now. */
size_t gw_signer_pending(const gw_signer_t *p);

/**
 * Stops the workers (after the job each is signing), fails every job not yet handed
 * back with cm_err_shutdown (on the calling loop thread), and frees. NULL is fine.
 */
void gw_signer_free(gw_signer_t *p);

#endif
