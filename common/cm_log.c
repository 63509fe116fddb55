/*
 * cm_log — see cm_log.h. Each line is formatted into a stack buffer and written with
 * one write(2) to stderr, so concurrent threads never interleave within a line.
 */
#include "cm_log.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

cm_log_level_t cm_log_level = CM_LOG_INFO;
static char progname[32] = "onsale";

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void cm_log_init(const char *name, cm_log_level_t level)
{
    snprintf(progname, sizeof(progname), "%s", name);
    cm_log_level = level;
}

int cm_log_level_parse(const char *s, cm_log_level_t *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            *out = (cm_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

void cm_log_write(cm_log_level_t level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line),
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, progname, (int)getpid(), level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

static void on_libevent_log(int severity, const char *msg)
{
    cm_log_level_t level = severity == EVENT_LOG_DEBUG  ? CM_LOG_DEBUG
                           : severity == EVENT_LOG_MSG  ? CM_LOG_INFO
                           : severity == EVENT_LOG_WARN ? CM_LOG_WARN
                                                        : CM_LOG_ERROR;
    cm_log(level, "libevent: %s", msg);
}

void cm_log_route_libevent(void)
{
    event_set_log_callback(on_libevent_log);
}
