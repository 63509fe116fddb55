/*
 * cm_access — see cm_access.h. The id check is a bounded scan with no allocation; the
 * fresh id costs 8 bytes of the per-thread CSPRNG reserve (one RAND_bytes per 128
 * requests). The access line goes through cm_log_always, so it follows the log format
 * and the journal priority of every other line but not the log level: access_log is its
 * own switch.
 */
#include "cm_access.h"

#include <stdio.h>
#include <string.h>

#include "cm_http.h"
#include "cm_log.h"
#include "cm_req.h"
#include "cm_time.h"
#include "cm_tls.h"

static bool log_on = true;
static __thread int last_status;

static bool id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static bool hex_run(const char *s, size_t n, bool *all_zero)
{
    *all_zero = true;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false; /* the spec says lowercase */
        if (c != '0')
            *all_zero = false;
    }
    return true;
}

/* version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 = 55 characters. */
static bool trace_id(const char *tp, char *out)
{
    bool zero;
    size_t len = strnlen(tp, 56);
    if (len < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-')
        return false;
    if (!hex_run(tp, 2, &zero) || strncmp(tp, "ff", 2) == 0)
        return false;
    bool v00 = strncmp(tp, "00", 2) == 0;
    if ((v00 && len != 55) || (!v00 && len > 55 && tp[55] != '-'))
        return false;
    if (!hex_run(tp + 3, 32, &zero) || zero)
        return false;
    if (!hex_run(tp + 36, 16, &zero) || zero)
        return false;
    if (!hex_run(tp + 53, 2, &zero))
        return false;
    memcpy(out, tp + 3, 32);
    out[32] = '\0';
    return true;
}

bool cm_access_pick_id(const char *x_request_id, const char *traceparent, char *out)
{
    if (x_request_id != NULL) {
        size_t n = 0;
        while (n <= CM_ACCESS_ID_MAX && x_request_id[n] != '\0' && id_char(x_request_id[n]))
            n++;
        if (n > 0 && n <= CM_ACCESS_ID_MAX && x_request_id[n] == '\0') {
            memcpy(out, x_request_id, n);
            out[n] = '\0';
            return true;
        }
    }
    return traceparent != NULL && trace_id(traceparent, out);
}

void cm_access_new_id(char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[8];
    cm_tls_random_reserve(raw, sizeof(raw));
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * sizeof(raw)] = '\0';
}

void cm_access_set_log(bool on)
{
    __atomic_store_n(&log_on, on, __ATOMIC_RELAXED); /* live: a reload may change it */
}

void cm_access_begin_bare(cm_req_t *req)
{
    req->acc.start_ns = cm_time_mono_ns();
    req->acc.route = NULL;
    cm_access_new_id(req->acc.id);
    cm_log_set_request(req->acc.id);
}

void cm_access_begin(cm_req_t *req)
{
    req->acc.start_ns = cm_time_mono_ns();
    req->acc.route = NULL;
    if (!cm_access_pick_id(cm_http_header(req, "X-Request-Id"), cm_http_header(req, "traceparent"),
                           req->acc.id))
        cm_access_new_id(req->acc.id);
    cm_log_set_request(req->acc.id);
}

void cm_access_end(cm_req_t *req, int code, size_t bytes)
{
    last_status = code;
    if (req->acc.id[0] != '\0' && !req->ops->has_out_header(req, "X-Request-Id"))
        req->ops->add_header(req, "X-Request-Id", req->acc.id);
    if (!__atomic_load_n(&log_on, __ATOMIC_RELAXED))
        return;
    char saved[CM_ACCESS_ID_MAX + 1];
    snprintf(saved, sizeof(saved), "%s", cm_log_request());
    cm_log_set_request(req->acc.id);
    uint64_t us = (cm_time_mono_ns() - req->acc.start_ns) / 1000;
    cm_log_always(CM_LOG_INFO, "access method=%s route=%s status=%d us=%llu bytes=%zu peer=%s",
                  cm_http_method_name(cm_http_method(req))
                      ? cm_http_method_name(cm_http_method(req))
                      : "OTHER",
                  req->acc.route ? req->acc.route : "-", code, (unsigned long long)us, bytes,
                  cm_http_peer(req));
    cm_log_set_request(saved[0] ? saved : NULL);
}

void cm_access_set_route(cm_req_t *req, const char *route)
{
    req->acc.route = route;
}

const char *cm_access_id(cm_req_t *req)
{
    return req->acc.id;
}

int cm_access_last_status(void)
{
    return last_status;
}
