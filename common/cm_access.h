/*
 * cm_access — a request's identity and its access-log line, on both services.
 *
 * Every request gets a request id when cm_http hands it to a handler: a sane incoming
 * X-Request-Id (1–64 of [A-Za-z0-9._-]), else the trace id of a valid W3C traceparent,
 * else 16 fresh random hex digits. The id is echoed as X-Request-Id on the answer, set
 * as this thread's log request id while the handler runs (cm_log_set_request), and
 * readable by the handler (cm_access_id) to carry it on (admission token, Postgres, the
 * payment provider). When the answer is sent, one access line is logged (unless turned
 * off): method, route name (never the raw path or query: they may carry tokens), status,
 * µs since the request was handed over, body bytes and the client's address.
 *
 * Threads: everything runs on the loop thread that owns the request; the on/off switch
 * is set on the main thread before the workers start. cm_access_pick_id is pure (fuzzed).
 */
#ifndef CM_ACCESS_H
#define CM_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CM_ACCESS_ID_MAX 64

typedef struct cm_req cm_req_t;

/** The access state of one request; lives inside struct cm_req (cm_req.h). */
typedef struct cm_access {
    uint64_t start_ns;
    const char *route; /* a static name from the owner's route table; NULL: "-" */
    char id[CM_ACCESS_ID_MAX + 1];
} cm_access_t;

/**
 * The request id a client asked for: x_request_id when it is 1–64 characters of
 * [A-Za-z0-9._-]; else the 32-hex trace id of traceparent when that is a valid W3C
 * trace context ("<2 hex version, not ff>-<32 hex, not all zero>-<16 hex, not all
 * zero>-<2 hex flags>", more fields allowed after a version above 00); else none.
 * Either argument may be NULL. Writes the id to out (CM_ACCESS_ID_MAX + 1 bytes) and
 * returns true, or returns false leaving out untouched.
 */
bool cm_access_pick_id(const char *x_request_id, const char *traceparent, char *out);

/** A fresh id: 16 lowercase hex digits from the per-thread CSPRNG reserve. */
void cm_access_new_id(char *out);

/** Turns the access log on or off (main thread, before the workers start; default on). */
void cm_access_set_log(bool on);

/** Starts a request: its clock, its id (from its headers, else fresh). cm_http. */
void cm_access_begin(cm_req_t *req);
/** Starts a request whose head could not be parsed: a fresh id, no headers read. */
void cm_access_begin_bare(cm_req_t *req);
/**
 * The answer is about to be sent (cm_http, right before the backend's send): adds
 * X-Request-Id, logs the access line, and remembers code for cm_access_last_status.
 */
void cm_access_end(cm_req_t *req, int code, size_t bytes);

/** Names the request's route for its access line: a string that outlives the request. */
void cm_access_set_route(cm_req_t *req, const char *route);
/** The request's id (valid until the answer is sent). */
const char *cm_access_id(cm_req_t *req);
/** The status code of the last answer this thread sent (0 when none yet). */
int cm_access_last_status(void);

#endif
