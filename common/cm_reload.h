/*
 * cm_reload — SIGHUP: re-read keys and certificates without a restart.
 *
 * Modules that own something loaded from files (cm_tls: the certificate; rsv_auth: the
 * admission verification keys) register a hook; on SIGHUP every hook runs, in the order
 * added, on one dedicated reload thread — never on an event loop, since a hook reads
 * files — and each hook swaps its new state in atomically for the threads that use it.
 * A hook that fails keeps the old state and logs why. The signal handler only posts a
 * semaphore (async-signal-safe), so every thread may take the signal.
 *
 * Process-wide (a signal is): the first cm_reload_add installs the handler and starts
 * the thread; both live until the process exits.
 */
#ifndef CM_RELOAD_H
#define CM_RELOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Re-reads what arg owns; 0, or -1 with a message in err (the old state stays). */
typedef int (*cm_reload_fn)(void *arg, char *err, size_t errlen);

/**
 * Registers fn(arg) under a name for the logs (copied). Any thread. 0, or -1 when the
 * signal handler or the thread cannot be installed (logged).
 */
__attribute__((warn_unused_result)) int cm_reload_add(const char *what, cm_reload_fn fn, void *arg);

/** Unregisters fn(arg); waits for a reload round that is running it. Any thread. */
void cm_reload_remove(cm_reload_fn fn, void *arg);

/** Asks for a reload round, as SIGHUP does (any thread, async-signal-safe). */
void cm_reload_trigger(void);

/** Reload rounds completed since start (a round runs every hook once). */
uint64_t cm_reload_rounds(void);

/** Waits until more than `after` rounds completed or timeout_ms passed; true if so. */
bool cm_reload_wait(uint64_t after, int timeout_ms);

#endif
