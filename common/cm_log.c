/*
 * cm_log — see cm_log.h. Each line is formatted into a stack buffer and written with
 * one write(2) to stderr, so concurrent threads never interleave within a line. The
 * format, the journal flag and the program name are set on the main thread before any
 * worker starts and only read afterwards; the request id and the thread id are
 * thread-local, so nothing here takes a lock.
 */
#include "cm_log.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 2048
#define REQ_ID_MAX     64

cm_log_level_t cm_log_level = CM_LOG_INFO;
static char progname[32] = "onsale";
static cm_log_format_t format = CM_LOG_TEXT;
static bool journal;
static __thread char request_id[REQ_ID_MAX + 1];
static __thread long thread_id;

static const char *const level_names[] = {"debug", "info", "warn", "error"};
/* syslog priorities: LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR */
static const char level_prio[] = {'7', '6', '4', '3'};

/* $JOURNAL_STREAM is "<device>:<inode>" of the stream journald gave us; it is ours only
 * while stderr is still that stream (a shell redirect inherits the variable). */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
        return false;
    if (fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void cm_log_init(const char *name, cm_log_level_t level)
{
    snprintf(progname, sizeof(progname), "%s", name);
    __atomic_store_n(&cm_log_level, level, __ATOMIC_RELAXED);
    journal = stderr_is_journal();
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

int cm_log_format_parse(const char *s, cm_log_format_t *out)
{
    if (strcasecmp(s, "text") == 0)
        *out = CM_LOG_TEXT;
    else if (strcasecmp(s, "json") == 0)
        *out = CM_LOG_JSON;
    else
        return -1;
    return 0;
}

void cm_log_set_format(cm_log_format_t f)
{
    __atomic_store_n(&format, f, __ATOMIC_RELAXED); /* live: a reload may change it */
}

bool cm_log_journal(void)
{
    return journal;
}

void cm_log_set_request(const char *id)
{
    snprintf(request_id, sizeof(request_id), "%s", id ? id : "");
}

const char *cm_log_request(void)
{
    return request_id;
}

/* Appends s to line[*n] as the inside of a JSON string (quotes, backslashes and control
 * characters escaped); stops short of the end, leaving room for the closing bytes. */
static void json_escape(char *line, size_t *n, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p && *n + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            line[(*n)++] = '\\';
            line[(*n)++] = (char)*p;
        } else if (*p < 0x20) {
            memcpy(line + *n, "\\u00", 4);
            line[*n + 4] = hex[*p >> 4];
            line[*n + 5] = hex[*p & 15];
            *n += 6;
        } else {
            line[(*n)++] = (char)*p;
        }
    }
}

static size_t put(char *line, size_t n, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t put(char *line, size_t n, size_t cap, const char *fmt, ...)
{
    if (n >= cap)
        return n;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, cap - n, fmt, ap);
    va_end(ap);
    if (m < 0)
        return n;
    return n + (size_t)m < cap ? n + (size_t)m : cap - 1;
}

static void format_time(char *out, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

static void write_line(cm_log_level_t level, const char *fmt, va_list ap)
{
    char line[LINE_MAX_BYTES], msg[LINE_MAX_BYTES], when[64];
    size_t cap = sizeof(line) - 1; /* room for the newline */
    size_t n = 0;
    if (thread_id == 0)
        thread_id = (long)syscall(SYS_gettid);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    format_time(when, sizeof(when));
    if (journal)
        n = put(line, n, cap, "<%c>", level_prio[level]);
    if (__atomic_load_n(&format, __ATOMIC_RELAXED) == CM_LOG_JSON) {
        n = put(line, n, cap,
                "{\"time\":\"%s\",\"level\":\"%s\",\"program\":\"%s\",\"pid\":%d,"
                "\"thread\":%ld,",
                when, level_names[level], progname, (int)getpid(), thread_id);
        if (request_id[0] != '\0')
            n = put(line, n, cap, "\"request_id\":\"%s\",", request_id);
        n = put(line, n, cap, "\"message\":\"");
        json_escape(line, &n, cap, msg);
        n = put(line, n, cap, "\"}");
    } else {
        n = put(line, n, cap, "%s %s[%d] %s: ", when, progname, (int)getpid(), level_names[level]);
        if (request_id[0] != '\0')
            n = put(line, n, cap, "[req=%s] ", request_id);
        n = put(line, n, cap, "%s", msg);
    }
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void cm_log_write(cm_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_line(level, fmt, ap);
    va_end(ap);
}

void cm_log_always(cm_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_line(level, fmt, ap);
    va_end(ap);
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

int cm_log_settings_parse(const char *level, const char *format_name, cm_log_level_t *level_out,
                          cm_log_format_t *format_out, char *err, size_t errlen)
{
    if (cm_log_level_parse(level, level_out) != 0) {
        snprintf(err, errlen, "log_level must be debug, info, warn or error");
        return -1;
    }
    if (cm_log_format_parse(format_name, format_out) != 0) {
        snprintf(err, errlen, "log_format must be text or json");
        return -1;
    }
    return 0;
}
