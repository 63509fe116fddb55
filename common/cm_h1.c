/*
 * cm_h1 — see cm_h1.h. Pure functions on caller-owned memory; any thread.
 *
 * Shape: one pass over the head with a cursor, line by line. Each line is checked for
 * its CRLF first (so a bare CR or LF inside a line is found as "a line ending without
 * CRLF"), then the request line or a header line is cut in place. Character classes are
 * tables (RFC 9110 tchar, visible target characters, field-value octets).
 */
#include "cm_h1.h"

#include <string.h>
#include <strings.h>

/* RFC 9110 tchar: "!#$%&'*+-.^_`|~" DIGIT ALPHA */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-value octets: VCHAR, SP, HTAB, obs-text */
static bool is_vchar_ws(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

size_t cm_h1_head_end(const char *buf, size_t len, size_t *scanned)
{
    size_t i = *scanned;
    for (; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 < len && buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
        if (i + 2 >= len) /* the next bytes decide: look at this LF again */
            break;
    }
    *scanned = i;
    return 0;
}

static int fail(cm_h1_head_t *h, int status, const char *why)
{
    h->status = status;
    h->why = why;
    return -1;
}

static cm_http_method_t method_of(const char *m)
{
    static const struct {
        const char *name;
        cm_http_method_t m;
    } methods[] = {
        {"GET", CM_HTTP_GET},     {"HEAD", CM_HTTP_HEAD},     {"POST", CM_HTTP_POST},
        {"PUT", CM_HTTP_PUT},     {"DELETE", CM_HTTP_DELETE}, {"OPTIONS", CM_HTTP_OPTIONS},
        {"PATCH", CM_HTTP_PATCH},
    };
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strcmp(m, methods[i].name) == 0)
            return methods[i].m;
    return CM_HTTP_OTHER;
}

/* Cuts the line at p (ending before end) at its CRLF; returns the next line or NULL. */
static char *cut_line(char *p, char *end)
{
    char *lf = memchr(p, '\n', (size_t)(end - p));
    if (lf == NULL || lf == p || lf[-1] != '\r')
        return NULL;
    if (memchr(p, '\r', (size_t)(lf - 1 - p)) != NULL)
        return NULL; /* a bare CR inside the line */
    lf[-1] = '\0';
    return lf + 1;
}

static int request_line(char *line, cm_h1_head_t *h)
{
    char *sp1 = strchr(line, ' ');
    if (sp1 == NULL || sp1 == line)
        return fail(h, 400, "malformed request line");
    *sp1 = '\0';
    for (char *c = line; c < sp1; c++)
        if (!is_tchar((unsigned char)*c))
            return fail(h, 400, "malformed method");
    char *target = sp1 + 1;
    char *sp2 = strchr(target, ' ');
    if (sp2 == NULL)
        return fail(h, 400, "malformed request line");
    *sp2 = '\0';
    char *version = sp2 + 1;
    if (strcspn(target, "?") > CM_H1_MAX_PATH)
        return fail(h, 414, "the request target's path is too long");
    if (target[0] != '/')
        return fail(h, 400, "the request target must be a path (origin-form)");
    for (char *c = target; *c; c++)
        if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
            return fail(h, 400, "invalid character in the request target");
    if (strncmp(version, "HTTP/", 5) != 0 || version[5] < '0' || version[5] > '9' ||
        version[6] != '.' || version[7] < '0' || version[7] > '9' || version[8] != '\0')
        return fail(h, 400, "malformed HTTP version");
    if (version[5] != '1' || (version[7] != '0' && version[7] != '1'))
        return fail(h, 505, "only HTTP/1.0 and HTTP/1.1 are served");
    h->minor = version[7] - '0';
    h->method = method_of(line);
    if (h->method == CM_HTTP_OTHER)
        return fail(h, 501, "unknown method");
    h->path = target;
    char *q = strchr(target, '?');
    if (q != NULL) {
        *q = '\0';
        h->query = q + 1;
    }
    return 0;
}

/* Lower-cased comparison of a comma-separated token list against one token. */
static bool has_token(const char *list, const char *token)
{
    size_t tl = strlen(token);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *e = p;
        while (e > start && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - start) == tl && strncasecmp(start, token, tl) == 0)
            return true;
    }
    return false;
}

static int header_line(char *line, cm_h1_head_t *h)
{
    if (line[0] == ' ' || line[0] == '\t')
        return fail(h, 400, "folded header lines (obs-fold) are not accepted");
    char *colon = line;
    while (*colon && is_tchar((unsigned char)*colon))
        colon++;
    if (colon == line || *colon != ':')
        return fail(h, 400, "malformed header line");
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    char *e = v + strlen(v);
    for (char *c = v; c < e; c++)
        if (!is_vchar_ws((unsigned char)*c))
            return fail(h, 400, "invalid character in a header value");
    while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *e = '\0';
    if (h->nheaders == CM_H1_MAX_HEADERS)
        return fail(h, 431, "too many header lines");
    h->headers[h->nheaders].name = line;
    h->headers[h->nheaders].value = v;
    h->nheaders++;
    return 0;
}

/* Content-Length, Transfer-Encoding, Host, Connection, Expect. */
static int framing(cm_h1_head_t *h)
{
    int hosts = 0;
    bool te = false;
    const char *te_value = NULL, *connection = NULL;
    for (int i = 0; i < h->nheaders; i++) {
        const char *n = h->headers[i].name, *v = h->headers[i].value;
        if (strcasecmp(n, "Content-Length") == 0) {
            if (h->content_length >= 0)
                return fail(h, 400, "more than one Content-Length");
            if (*v == '\0' || strlen(v) > 15 || strspn(v, "0123456789") != strlen(v))
                return fail(h, 400, "invalid Content-Length");
            int64_t n64 = 0;
            for (const char *c = v; *c; c++)
                n64 = n64 * 10 + (*c - '0');
            h->content_length = n64;
        } else if (strcasecmp(n, "Transfer-Encoding") == 0) {
            te = true;
            te_value = v;
        } else if (strcasecmp(n, "Host") == 0) {
            hosts++;
        } else if (strcasecmp(n, "Connection") == 0) {
            connection = v;
        } else if (strcasecmp(n, "Expect") == 0) {
            if (strcasecmp(v, "100-continue") != 0)
                return fail(h, 417, "only Expect: 100-continue is understood");
            h->expect_continue = true;
        }
    }
    if (te && h->content_length >= 0)
        return fail(h, 400, "Transfer-Encoding and Content-Length together");
    if (te)
        return has_token(te_value, "chunked")
                   ? fail(h, 411, "chunked request bodies are not accepted; send Content-Length")
                   : fail(h, 501, "unknown Transfer-Encoding");
    if (hosts > 1 || (hosts == 0 && h->minor == 1))
        return fail(h, 400, "HTTP/1.1 needs exactly one Host header");
    if (h->minor == 1)
        h->keep_alive = connection == NULL || !has_token(connection, "close");
    else
        h->keep_alive = connection != NULL && has_token(connection, "keep-alive");
    return 0;
}

int cm_h1_parse(char *buf, size_t len, cm_h1_head_t *h)
{
    memset(h, 0, offsetof(cm_h1_head_t, headers));
    h->status = 0;
    h->why = NULL;
    h->content_length = -1;
    char *p = buf, *end = buf + len;
    buf[len] = '\0';
    if (memchr(buf, '\0', len) != NULL)
        return fail(h, 400, "NUL byte in the request head");
    for (int i = 0; i < CM_H1_MAX_EMPTY && end - p >= 2 && p[0] == '\r' && p[1] == '\n'; i++)
        p += 2;
    char *next = cut_line(p, end);
    if (next == NULL)
        return fail(h, 400, "lines must end in CRLF");
    if (request_line(p, h) != 0)
        return -1;
    p = next;
    for (;;) {
        next = cut_line(p, end);
        if (next == NULL)
            return fail(h, 400, "lines must end in CRLF");
        if (*p == '\0') /* the empty line */
            break;
        if (header_line(p, h) != 0)
            return -1;
        p = next;
    }
    if (next != end)
        return fail(h, 400, "bytes after the end of the head");
    return framing(h);
}

bool cm_h1_line_path_too_long(const char *buf, size_t len)
{
    const char *sp = memchr(buf, ' ', len);
    if (sp == NULL)
        return false;
    const char *path = sp + 1, *end = buf + len;
    size_t n = 0;
    while (path + n < end && path[n] != '?' && path[n] != ' ')
        n++;
    return n > CM_H1_MAX_PATH;
}

const char *cm_h1_header(const cm_h1_head_t *h, const char *name)
{
    for (int i = 0; i < h->nheaders; i++)
        if (strcasecmp(h->headers[i].name, name) == 0)
            return h->headers[i].value;
    return NULL;
}

const char *cm_h1_error_word(int status)
{
    switch (status) {
    case 411:
        return "length_required";
    case 413:
        return "body_too_large";
    case 414:
        return "uri_too_long";
    case 417:
        return "expectation_failed";
    case 431:
        return "header_too_large";
    case 501:
        return "not_implemented";
    case 505:
        return "http_version_not_supported";
    default:
        return "invalid_request";
    }
}
