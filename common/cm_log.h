/*
 * cm_log — leveled logging to stderr for every onsale process.
 *
 * Runs on whichever thread calls it; one write(2) per line so lines from worker
 * threads never interleave. The level is tested before formatting (cm_log macro),
 * so a disabled debug line costs one compare. Never pass tokens, tickets, keys or
 * Authorization headers to it.
 *
 * Two formats: text ("<time> <program>[<pid>] <level>: [req=<id>] <message>") and JSON
 * (one object per line: time, level, program, pid, thread, message, request_id when
 * known). When stderr is the journal (systemd sets $JOURNAL_STREAM to stderr's
 * "<st_dev>:<st_ino>"), each line starts with the syslog priority "<N>" (sd-daemon(3)),
 * so journalctl -p filters by level. The request id is a per-thread value set while a
 * request is being handled (cm_log_set_request).
 */
#ifndef CM_LOG_H
#define CM_LOG_H

#include <stddef.h>

#include <stdbool.h>

typedef enum { CM_LOG_DEBUG = 0, CM_LOG_INFO, CM_LOG_WARN, CM_LOG_ERROR } cm_log_level_t;
typedef enum { CM_LOG_TEXT = 0, CM_LOG_JSON } cm_log_format_t;

extern cm_log_level_t cm_log_level;

/** Sets the program name shown on each line and the threshold; looks at $JOURNAL_STREAM
 *  (main thread, at start). */
void cm_log_init(const char *progname, cm_log_level_t level);

/** Parses "debug", "info", "warn" or "error". Returns 0, or -1 when unknown. */
__attribute__((warn_unused_result)) int cm_log_level_parse(const char *s, cm_log_level_t *out);

/** Parses "text" or "json". Returns 0, or -1 when unknown. */
__attribute__((warn_unused_result)) int cm_log_format_parse(const char *s, cm_log_format_t *out);

/** Sets the line format (main thread, before the workers start). */
void cm_log_set_format(cm_log_format_t f);

/** Whether lines carry the journal's "<N>" priority prefix (decided by cm_log_init). */
bool cm_log_journal(void);

/**
 * The request id this thread's lines carry from now on (copied, at most 64 bytes), or
 * NULL for none. cm_http sets it while a request's handler runs and for its access line.
 */
void cm_log_set_request(const char *id);
/** This thread's request id ("" when none). */
const char *cm_log_request(void);

/**
 * A service's logging settings from its config (log_level, log_format): both parsed, or -1
 * with err naming the bad key. Start-up, --check-config and a reload all use it.
 */
__attribute__((warn_unused_result)) int cm_log_settings_parse(const char *level, const char *format,
                                                              cm_log_level_t *level_out,
                                                              cm_log_format_t *format_out,
                                                              char *err, size_t errlen);

/** Formats and writes one line; use the cm_log() macro instead. */
void cm_log_write(cm_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Writes one line whatever the threshold (the access log: its own on/off switch). */
void cm_log_always(cm_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Routes libevent's internal warnings through cm_log. */
void cm_log_route_libevent(void);

#define cm_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) >= __atomic_load_n(&cm_log_level, __ATOMIC_RELAXED))                           \
            cm_log_write((level), __VA_ARGS__);                                                    \
    } while (0)

#endif
