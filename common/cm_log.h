/*
 * cm_log — leveled logging to stderr for every onsale process.
 *
 * Runs on whichever thread calls it; one write(2) per line so lines from worker
 * threads never interleave. The level is tested before formatting (cm_log macro),
 * so a disabled debug line costs one compare. Never pass tokens, tickets, keys or
 * Authorization headers to it.
 */
#ifndef CM_LOG_H
#define CM_LOG_H

typedef enum { CM_LOG_DEBUG = 0, CM_LOG_INFO, CM_LOG_WARN, CM_LOG_ERROR } cm_log_level_t;

extern cm_log_level_t cm_log_level;

/** Sets the program name shown on each line and the threshold. */
void cm_log_init(const char *progname, cm_log_level_t level);

/** Parses "debug", "info", "warn" or "error". Returns 0, or -1 when unknown. */
__attribute__((warn_unused_result)) int cm_log_level_parse(const char *s, cm_log_level_t *out);

/** Formats and writes one line; use the cm_log() macro instead. */
void cm_log_write(cm_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Routes libevent's internal warnings through cm_log. */
void cm_log_route_libevent(void);

#define cm_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) >= cm_log_level)                                                               \
            cm_log_write((level), __VA_ARGS__);                                                    \
    } while (0)

#endif
