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

/** Sets cm_log's threshold from the reload thread (an atomic store the loggers see). */
void cm_reload_set_log_level(int level);

/* --- a value swapped whole on reload ----------------------------------------------- */

/*
 * A cell holds one immutable value (a token string, a parsed allow-list, a config
 * snapshot) that worker threads read while the reload thread replaces it. Readers get
 * the current pointer with an acquire load and may keep using it: a replaced value is
 * retired, not freed, until the cell is freed (reloads are rare; each retires a few
 * hundred bytes), so no reader ever holds freed memory.
 */
typedef struct cm_reload_cell cm_reload_cell_t;

/** Frees one value of a cell; ctx is the cell's. */
typedef void (*cm_reload_free_fn)(void *value, void *ctx);

/** A cell holding value (owned; freed with free_fn(value, ctx), free_fn may be NULL). */
cm_reload_cell_t *cm_reload_cell_new(void *value, cm_reload_free_fn free_fn, void *ctx);
/** The current value (NULL for a NULL cell). Any thread, lock-free. */
void *cm_reload_cell_get(const cm_reload_cell_t *c);
/** Publishes value (owned); the old one is retired until cm_reload_cell_free. */
void cm_reload_cell_set(cm_reload_cell_t *c, void *value);
/** Frees the value and every retired one; no reader may remain. NULL is fine. */
void cm_reload_cell_free(cm_reload_cell_t *c);
/** A free_fn for secret strings: wipes, then frees (ctx unused). */
void cm_reload_free_secret(void *s, void *ctx);

/* --- the whole configuration, re-read on SIGHUP ------------------------------------ */

struct cm_config_opt;
struct json_t;

/** How a service's configuration is re-read (all borrowed for the reloader's life). */
typedef struct cm_reload_config_spec {
    const char *service; /* for the logs: "gateway" */
    const struct cm_config_opt *table;
    size_t n;
    size_t size; /* sizeof the service's config struct */
    const char *env_prefix;
    int argc; /* the command line, re-applied over the file as at start */
    char **argv;
    const char *const *live;   /* NULL-terminated: keys applied without a restart */
    const char *const *secret; /* NULL-terminated: keys shown as "***" */
    /* Validates a freshly loaded struct (cross-key rules, files it names); 0 or -1 + err.
     * Runs on the reload thread (may read files, must not add reload hooks). */
    int (*check)(const void *cfg, char *err, size_t errlen);
} cm_reload_config_spec_t;

/** Applies the live keys of cfg (the new effective snapshot); 0 or -1 + err (kept old). */
typedef int (*cm_reload_apply_fn)(void *arg, const void *cfg, char *err, size_t errlen);

typedef struct cm_reload_config cm_reload_config_t;

/**
 * A reloader whose first snapshot is a deep copy of cfg (the configuration as loaded at
 * start). Main thread, start-up.
 */
cm_reload_config_t *cm_reload_config_new(const cm_reload_config_spec_t *spec, const void *cfg);

/**
 * Registers the SIGHUP hook. Each round loads the file again (defaults → file → env →
 * argv), runs spec->check, then for every key that differs from the running snapshot:
 * a live key is taken, any other is logged as a warning naming it ("needs a restart")
 * and keeps its running value. apply(arg, snapshot) then puts the live keys in force;
 * only if it succeeds is the new snapshot published. A file that does not load or
 * check is logged and changes nothing. 0, or -1 when the hook cannot be installed.
 */
__attribute__((warn_unused_result)) int cm_reload_config_start(cm_reload_config_t *rc,
                                                               cm_reload_apply_fn apply, void *arg);

/** The effective configuration now (a struct of spec->size bytes). Any thread. */
const void *cm_reload_config_current(const cm_reload_config_t *rc);

/** The effective configuration as JSON, secrets masked (cm_config_json). New reference. */
struct json_t *cm_reload_config_json(const cm_reload_config_t *rc);

/** Unregisters the hook and frees every snapshot. NULL is fine. */
void cm_reload_config_free(cm_reload_config_t *rc);

#endif
