/*
 * cm_parse — the pure parsers every untrusted byte passes through first: identifiers,
 * Idempotency-Keys, RFC 3339 times, integers, booleans, Bearer headers, base64url, hex.
 *
 * Any thread; no allocation, no locale, no global state, no libc time functions (the
 * calendar arithmetic is done here so results never depend on TZ). Every function
 * reads only the bytes it was given and answers yes/no or fills an out-parameter, which
 * is what lets the fuzz targets call them directly. Strictness is deliberate: a value
 * accepted here is one the rest of the code never has to second-guess (no leading
 * whitespace, no '+' signs, no padding, no non-canonical base64 tail bits).
 *
 * cm_parse_url_allowed is a gate, not a URL parser: it accepts a deliberately small
 * grammar (absolute https, plain http to loopback on request) and leaves the rest of the
 * URL opaque. Its host rule is the part that must be exact: "http://127.0.0.1@evil/" or
 * "http://127.0.0.1.evil/" must never count as loopback.
 */
#include "cm_parse.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool is_ident_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

bool cm_parse_ident_n(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > CM_IDENT_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!is_ident_char((unsigned char)s[i]))
            return false;
    }
    return true;
}

bool cm_parse_ident(const char *s)
{
    if (s == NULL)
        return false;
    /* strnlen bounds the scan: a 10 MB string is rejected after 65 bytes. */
    size_t len = strnlen(s, CM_IDENT_MAX + 1);
    return cm_parse_ident_n(s, len);
}

bool cm_parse_idem_key(const char *s)
{
    if (s == NULL)
        return false;
    size_t len = strnlen(s, CM_IDEM_KEY_MAX + 1);
    if (len == 0 || len > CM_IDEM_KEY_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x21 || c > 0x7e)
            return false;
    }
    return true;
}

/* Reads exactly n decimal digits at s into *out. */
static bool digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int64_t y, int m)
{
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : mdays[m - 1];
}

/*
 * Days since 1970-01-01 of a proleptic Gregorian date, and back: the well-known
 * era-based algorithm (400-year eras of 146097 days, March-based years so the leap
 * day is the last day of the year). Exact for every int64 day count we can produce.
 */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;                                   /* [0, 399] */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* [0, 146096] */
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

int cm_parse_rfc3339(const char *s, int64_t *ms_out)
{
    int year, mon, day, hh, mm, ss, off_h = 0, off_m = 0, frac_ms = 0;
    if (s == NULL || strnlen(s, 20) < 20)
        return -1;
    /* "YYYY-MM-DDThh:mm:ss" is fixed width: 19 bytes. */
    if (!digits(s, 4, &year) || s[4] != '-' || !digits(s + 5, 2, &mon) || s[7] != '-' ||
        !digits(s + 8, 2, &day) || (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2, &hh) ||
        s[13] != ':' || !digits(s + 14, 2, &mm) || s[16] != ':' || !digits(s + 17, 2, &ss))
        return -1;
    if (mon < 1 || mon > 12 || day < 1 || day > days_in_month(year, mon) || hh > 23 || mm > 59 ||
        ss > 59) /* leap second 60 is refused: no operator types one, and it has no epoch ms */
        return -1;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        int n = 0;
        while (*p >= '0' && *p <= '9') {
            if (n < 3)
                frac_ms = frac_ms * 10 + (*p - '0');
            n++;
            p++;
        }
        if (n == 0 || n > 9)
            return -1;
        for (; n < 3; n++)
            frac_ms *= 10;
    }
    int sign = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p == '+' ? 1 : -1;
        if (!digits(p + 1, 2, &off_h) || p[3] != ':' || !digits(p + 4, 2, &off_m) || off_h > 23 ||
            off_m > 59)
            return -1;
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    int64_t secs = days_from_civil(year, mon, day) * 86400 + hh * 3600 + mm * 60 + ss;
    secs -= sign * (off_h * 3600 + off_m * 60);
    *ms_out = secs * 1000 + frac_ms;
    return 0;
}

size_t cm_format_rfc3339(int64_t ms, char *buf, size_t len)
{
    if (buf == NULL || len < 25)
        return 0;
    /* floor division, so times before 1970 still print correctly */
    int64_t secs = ms / 1000, rem = ms % 1000;
    if (rem < 0) {
        rem += 1000;
        secs--;
    }
    int64_t days = secs / 86400, sod = secs % 86400;
    if (sod < 0) {
        sod += 86400;
        days--;
    }
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    if (y < 0 || y > 9999)
        return 0;
    int n = snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (int)y, m, d,
                     (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60), (int)rem);
    return n == 24 ? 24 : 0;
}

int cm_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (s == NULL)
        return -1;
    bool neg = false;
    if (*s == '-') {
        neg = true;
        s++;
    }
    if (*s < '0' || *s > '9')
        return -1;
    /* Accumulate negatively: -INT64_MIN does not fit, INT64_MIN does. */
    int64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        int dgt = *s - '0';
        if (v < (INT64_MIN + dgt) / 10)
            return -1;
        v = v * 10 - dgt;
    }
    if (*s != '\0')
        return -1;
    if (!neg) {
        if (v == INT64_MIN)
            return -1;
        v = -v;
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int cm_parse_bool(const char *s, bool *out)
{
    static const char *const truthy[] = {"true", "yes", "on", "1"};
    static const char *const falsy[] = {"false", "no", "off", "0"};
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < sizeof(truthy) / sizeof(truthy[0]); i++) {
        if (strcasecmp(s, truthy[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, falsy[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

const char *cm_parse_bearer(const char *authz, size_t *len_out)
{
    if (authz == NULL || strncasecmp(authz, "Bearer", 6) != 0)
        return NULL;
    const char *p = authz + 6;
    if (*p != ' ')
        return NULL;
    while (*p == ' ')
        p++;
    size_t len = strcspn(p, " \t");
    /* trailing blanks are tolerated; a second word is not a token */
    if (len == 0 || p[len + strspn(p + len, " \t")] != '\0')
        return NULL;
    *len_out = len;
    return p;
}

static const char b64url_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t cm_base64url_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64url_alphabet[v >> 18];
        out[o++] = b64url_alphabet[v >> 12 & 63];
        out[o++] = b64url_alphabet[v >> 6 & 63];
        out[o++] = b64url_alphabet[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)in[i] << 16;
        out[o++] = b64url_alphabet[v >> 18];
        out[o++] = b64url_alphabet[v >> 12 & 63];
    } else if (n - i == 2) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
        out[o++] = b64url_alphabet[v >> 18];
        out[o++] = b64url_alphabet[v >> 12 & 63];
        out[o++] = b64url_alphabet[v >> 6 & 63];
    }
    out[o] = '\0';
    return o;
}

/* Each alphabet character's value plus one; 0: not in the alphabet. A table, not a chain
 * of range tests: on random text (challenges, ids) every branch of such a chain is a coin
 * toss the CPU mispredicts, ~10 ns a character (measured on a proof of work's 40). */
static const unsigned char b64url_rev[256] = {
    ['A'] = 1,  ['B'] = 2,  ['C'] = 3,  ['D'] = 4,  ['E'] = 5,  ['F'] = 6,  ['G'] = 7,  ['H'] = 8,
    ['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16,
    ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
    ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32,
    ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40,
    ['o'] = 41, ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
    ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
    ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['-'] = 63, ['_'] = 64};

long cm_base64url_decode(const char *in, size_t n, unsigned char *out, size_t outlen)
{
    /* A lone trailing character carries 6 bits: never a whole byte, so never valid. */
    if (n % 4 == 1)
        return -1;
    size_t need = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (need > outlen || need > (size_t)LONG_MAX)
        return -1;
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned v = b64url_rev[(unsigned char)in[i]];
        if (v == 0)
            return -1;
        acc = (acc << 6 | (v - 1)) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    /* Canonical form only: the unused tail bits must be zero (RFC 4648 section 3.5). */
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
        return -1;
    return (long)o;
}

void cm_hex_encode(const unsigned char *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* What may appear after the authority: printable ASCII without the characters that would
 * break out of an HTML attribute or a header value, or that browsers "fix up". */
static bool url_tail_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && strchr("\"<>\\^`{|}#", c) == NULL;
}

static bool host_name_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-';
}

/* 127.0.0.0/8 written as a dotted quad of decimal octets. */
static bool is_loopback_v4(const char *h, size_t n)
{
    int parts = 0, val = -1, first = -1;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || h[i] == '.') {
            if (val < 0 || val > 255)
                return false;
            if (parts++ == 0)
                first = val;
            val = -1;
        } else if (h[i] >= '0' && h[i] <= '9') {
            val = (val < 0 ? 0 : val * 10) + (h[i] - '0');
            if (val > 255)
                return false;
        } else {
            return false;
        }
    }
    return parts == 4 && first == 127;
}

static bool is_loopback(const char *h, size_t n)
{
    return (n == 9 && strncasecmp(h, "localhost", 9) == 0) ||
           (n == 5 && memcmp(h, "[::1]", 5) == 0) || is_loopback_v4(h, n);
}

bool cm_parse_url_allowed(const char *url, bool allow_loopback_http, size_t *origin_len)
{
    if (url == NULL || strnlen(url, CM_URL_MAX + 1) > CM_URL_MAX)
        return false;
    bool https = strncasecmp(url, "https://", 8) == 0;
    if (!https && strncasecmp(url, "http://", 7) != 0)
        return false;
    const char *host = url + (https ? 8 : 7), *p = host;
    if (*p == '[') { /* IPv6 literal */
        p++;
        while ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F') ||
               *p == ':' || *p == '.')
            p++;
        if (*p != ']' || p == host + 1)
            return false;
        p++;
    } else {
        while (host_name_char((unsigned char)*p))
            p++;
        if (p == host)
            return false;
    }
    size_t host_len = (size_t)(p - host);
    if (*p == ':') {
        const char *d = ++p;
        long port = 0;
        while (*p >= '0' && *p <= '9' && p - d < 5)
            port = port * 10 + (*p++ - '0');
        if (p == d || port < 1 || port > 65535)
            return false;
    }
    if (*p != '\0' && *p != '/' && *p != '?')
        return false; /* "@" (user info), a sixth port digit, anything else in the authority */
    if (!https && !(allow_loopback_http && is_loopback(host, host_len)))
        return false;
    size_t origin = (size_t)(p - url);
    for (; *p; p++)
        if (!url_tail_char((unsigned char)*p))
            return false;
    if (origin_len)
        *origin_len = origin;
    return true;
}

int cm_parse_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int cm_parse_path(const char *path, char *buf, size_t bufsize, char **segs, int maxsegs)
{
    if (path == NULL || path[0] != '/')
        return -1;
    size_t len = strlen(path);
    if (len >= bufsize)
        return -1;
    int n = 0;
    size_t o = 0;
    const char *p = path + 1;
    if (*p == '\0')
        return 0;
    while (*p) {
        if (n == maxsegs)
            return -1;
        segs[n++] = buf + o;
        size_t start = o;
        while (*p && *p != '/') {
            char c = *p++;
            if (c == '%') {
                int hi = cm_parse_hexval(p[0]), lo = hi < 0 ? -1 : cm_parse_hexval(p[1]);
                if (lo < 0)
                    return -1;
                c = (char)(hi * 16 + lo);
                if (c == '\0' || c == '/')
                    return -1;
                p += 2;
            }
            buf[o++] = c;
        }
        buf[o++] = '\0';
        if (o - 1 == start) /* an empty segment: "//" anywhere, even at the end */
            return -1;
        if (*p == '/') {
            p++;
            /* A trailing slash ends the path ("/admin/"). */
            if (*p == '\0')
                break;
        }
    }
    return n;
}

int cm_parse_ip_sockaddr(const char *ip, int port, struct sockaddr_storage *ss, unsigned *len)
{
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof(*ss));
    if (ip == NULL || port < 0 || port > 65535)
        return -1;
    if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof(*a4);
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*a6);
        return 0;
    }
    return -1;
}
