/*
 * cm_h1 — a strict, minimal HTTP/1.1 request head parser (pure: no libevent, no malloc),
 * the parsing half of cm_http's own HTTP/1.1 engine (CM_HTTP_ENGINE_H1).
 *
 * The engine copies a complete head (request line and header lines up to the empty
 * line) into a buffer it owns and cm_h1_parse() takes it apart in place: it writes NULs
 * over the delimiters, so the method, target, path, query and every header name and
 * value become C strings pointing into that buffer, kept in a fixed array (no allocation
 * per header). Policy (RFC 9112, read strictly; each refusal names its reason):
 *   - lines end in CRLF; a bare LF or CR anywhere in the head is 400 (no guessing about
 *     line ends: that is where request smuggling lives). Up to two empty lines before the
 *     request line are skipped (clients may send a CRLF after a body);
 *   - request line: `METHOD SP origin-form SP HTTP/1.x`, single spaces; the target is
 *     visible ASCII starting with '/'; its path (up to '?') at most CM_H1_MAX_PATH bytes
 *     (longer: 414). The query is bounded only by the head's own cap (the engine's
 *     max_header_bytes), as evhttp bounds it: links carry long queries (a storefront's
 *     `?event=…&…`), while no route has a path near that long;
 *     HTTP/1.0 and HTTP/1.1 only (another HTTP/x.y: 505); an unknown method is 501;
 *   - header lines `name: value`: the name a token with no space before the colon, the
 *     value without control characters (HTAB allowed), leading/trailing blanks dropped;
 *     a line starting with a blank (obs-fold) is 400; more than CM_H1_MAX_HEADERS is 431;
 *   - Content-Length: digits only, at most one header (a repeat, even equal, is 400);
 *     any Transfer-Encoding is refused — 411 for chunked (send Content-Length; every
 *     onsale body is small JSON), 501 for other codings, 400 with Content-Length too;
 *   - HTTP/1.1 needs exactly one Host; HTTP/1.0 at most one;
 *   - keep-alive: HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with
 *     `Connection: keep-alive`.
 */
#ifndef CM_H1_H
#define CM_H1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_http.h"

#define CM_H1_MAX_HEADERS 64
#define CM_H1_MAX_PATH    2048 /* the target's path; its query fills the head if it must */
#define CM_H1_MAX_EMPTY   2    /* empty lines skipped before a request line */

typedef struct cm_h1_header {
    const char *name;
    const char *value;
} cm_h1_header_t;

typedef struct cm_h1_head {
    cm_http_method_t method;
    const char *path;  /* the target up to '?', not decoded */
    const char *query; /* after '?', not decoded; NULL when the target has no '?' */
    int minor;         /* HTTP/1.<minor>: 0 or 1 */
    bool keep_alive;
    bool expect_continue;   /* Expect: 100-continue */
    int64_t content_length; /* -1: no Content-Length header */
    int nheaders;
    cm_h1_header_t headers[CM_H1_MAX_HEADERS];
    /* on failure: the status to answer and why (a constant string) */
    int status;
    const char *why;
} cm_h1_head_t;

/**
 * Where the head in buf[0..len) ends: the offset just past its terminating empty line,
 * 0 when it is not complete yet. A head ends at the first LF followed by CRLF or by LF
 * (the latter is then refused by cm_h1_parse). *scanned keeps the search's progress
 * between calls on a growing buffer (start it at 0).
 */
size_t cm_h1_head_end(const char *buf, size_t len, size_t *scanned);

/**
 * Parses the complete head buf[0..len) (len from cm_h1_head_end) in place into h; buf
 * must have room for one more byte (buf[len] is written). The strings in h point into
 * buf. Returns 0, or -1 with h->status (400, 411, 414, 431, 501, 505) and h->why.
 */
int cm_h1_parse(char *buf, size_t len, cm_h1_head_t *h);

/**
 * Whether an incomplete request line buf[0..len) (no LF seen yet) already has a path
 * longer than CM_H1_MAX_PATH, so the engine can answer 414 before the line ends. A long
 * line whose path is short (a long query) is not: the head's cap bounds it.
 */
bool cm_h1_line_path_too_long(const char *buf, size_t len);

/** A header of a parsed head (case-insensitive name; the first of several), or NULL. */
const char *cm_h1_header(const cm_h1_head_t *h, const char *name);

/** The error code word docs/api.md uses for an HTTP status the parser answers. */
const char *cm_h1_error_word(int status);

#endif
