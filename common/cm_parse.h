/*
 * cm_parse — pure parsers and validators for everything that arrives from the
 * network or a config file. No libevent, no allocation unless stated, no global
 * state: each function is unit-tested and fuzzed on its own.
 */
#ifndef CM_PARSE_H
#define CM_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CM_IDENT_MAX    64
#define CM_IDEM_KEY_MAX 255

struct sockaddr_storage;

/**
 * An IP literal — IPv4 ("127.0.0.1") or IPv6 ("::1") — and a port as a socket address in
 * *ss, its length in *len. 0, or -1 when ip is neither (a host name is not resolved here).
 */
__attribute__((warn_unused_result)) int
cm_parse_ip_sockaddr(const char *ip, int port, struct sockaddr_storage *ss, unsigned *len);

/** True when s is 1–64 characters of [A-Za-z0-9._-] (docs/api.md identifiers). */
bool cm_parse_ident(const char *s);
/** Same check on a length-delimited string (need not be NUL-terminated). */
bool cm_parse_ident_n(const char *s, size_t len);

/** True when s is an Idempotency-Key: 1–255 visible ASCII characters (0x21–0x7e). */
bool cm_parse_idem_key(const char *s);

/**
 * Parses an RFC 3339 timestamp ("2026-12-01T10:00:00Z", optional fraction, "Z" or
 * "+hh:mm"/"-hh:mm" offset) into milliseconds since the epoch. Returns 0 or -1.
 */
__attribute__((warn_unused_result)) int cm_parse_rfc3339(const char *s, int64_t *ms_out);

/**
 * Writes ms (epoch milliseconds) as "YYYY-MM-DDThh:mm:ss.mmmZ" into buf.
 * Returns the length written (24), or 0 when len is too small (needs 25).
 */
size_t cm_format_rfc3339(int64_t ms, char *buf, size_t len);

/** Strict decimal integer in [min, max]: no sign tricks, no trailing junk. 0 or -1. */
__attribute__((warn_unused_result)) int cm_parse_i64(const char *s, int64_t min, int64_t max,
                                                     int64_t *out);

/** "true"/"false"/"yes"/"no"/"on"/"off"/"1"/"0" (case-insensitive). 0 or -1. */
__attribute__((warn_unused_result)) int cm_parse_bool(const char *s, bool *out);

/**
 * Finds the token in an Authorization header value "Bearer <token>" (scheme
 * case-insensitive, one or more spaces). Returns a pointer into authz and stores
 * its length, or NULL when the header is absent, another scheme, or empty.
 */
const char *cm_parse_bearer(const char *authz, size_t *len_out);

/**
 * base64url without padding. encode writes a NUL-terminated string and returns its
 * length (out needs 4*ceil(n/3)+1 bytes); decode returns the decoded length or -1
 * on a bad character, and accepts no padding.
 */
size_t cm_base64url_encode(const unsigned char *in, size_t n, char *out);
long cm_base64url_decode(const char *in, size_t n, unsigned char *out, size_t outlen);

/** The value of one hex digit (either case), or -1. */
int cm_parse_hexval(char c);

/**
 * Splits a request path ("/q/e1/status", already taken from the request URI, query
 * excluded) into percent-decoded segments written into buf (bufsize bytes), one
 * NUL-terminated string each, pointed to by segs[0..n). A trailing '/' ends the path
 * ("/admin/" is one segment). Returns n (0 for "/"), or -1 when the path does not start
 * with '/', is too long for buf, has more than maxsegs segments, an empty inner segment
 * ("//"), a bad %-escape, or an escape that decodes to NUL or '/'.
 */
int cm_parse_path(const char *path, char *buf, size_t bufsize, char **segs, int maxsegs);

/** Longest URL cm_parse_url_allowed() accepts. */
#define CM_URL_MAX 2048

/**
 * True when url may be called by a service or handed to a browser to go to (docs/api.md: every
 * such URL is https; plain http only to loopback, behind an explicit setting):
 * `https://host[:port][/path][?query]`, or the same with `http://` when
 * allow_loopback_http is set and host is loopback (127.0.0.0/8, "localhost", "[::1]").
 * host is a DNS name or IPv4 literal of [A-Za-z0-9.-], or a bracketed IPv6 literal; no
 * user info ("@" before the path), no fragment, and only printable ASCII other than space
 * and " < > \ ^ ` { | } — so the URL is safe inside an HTML attribute and a CSP header.
 * Scheme case-insensitive; at most CM_URL_MAX bytes. When origin_len is not NULL it
 * receives the length of the origin prefix, scheme://host[:port].
 */
bool cm_parse_url_allowed(const char *url, bool allow_loopback_http, size_t *origin_len);

/** Lower-case hex of n bytes into out (2n+1 bytes). */
void cm_hex_encode(const unsigned char *in, size_t n, char *out);

#endif
