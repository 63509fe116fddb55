/*
 * rsv_cors — see rsv_cors.h.
 *
 * The list is small (a few storefronts), so a linear scan of exact strings is the
 * whole lookup. Origins are normalised once at start-up the way browsers serialise
 * them (RFC 6454: lower-case scheme and host, default port omitted), so a request's
 * Origin is compared byte for byte.
 */
#include "rsv_cors.h"

#include <ctype.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_http.h"
#include "cm_mem.h"

#define ALLOW_METHODS  "GET, POST, DELETE"
#define ALLOW_HEADERS  "Authorization, Content-Type, DPoP, Idempotency-Key"
#define EXPOSE_HEADERS "Retry-After, WWW-Authenticate"
#define MAX_AGE        "600"

struct rsv_cors {
    char **origins;
    size_t n;
};

static bool host_char(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-';
}

static bool is_loopback(const char *host, size_t len)
{
    return (len == 9 && memcmp(host, "localhost", 9) == 0) ||
           (len == 9 && memcmp(host, "127.0.0.1", 9) == 0) ||
           (len == 5 && memcmp(host, "[::1]", 5) == 0);
}

int rsv_cors_normalize(const char *origin, size_t len, char *out, size_t outlen, char *err,
                       size_t errlen)
{
    char low[RSV_CORS_ORIGIN_MAX];
    if (len == 0 || len >= sizeof(low)) {
        snprintf(err, errlen, "an origin is 1-%d characters", RSV_CORS_ORIGIN_MAX - 1);
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        low[i] = (char)tolower((unsigned char)origin[i]);
    low[len] = '\0';
    if (memchr(low, '*', len) != NULL) {
        snprintf(err, errlen, "'%s': wildcards are not allowed; list each storefront origin", low);
        return -1;
    }
    bool https = strncmp(low, "https://", 8) == 0;
    if (!https && strncmp(low, "http://", 7) != 0) {
        snprintf(err, errlen, "'%s': an origin starts with https://", low);
        return -1;
    }
    const char *host = low + (https ? 8 : 7);
    const char *p = host;
    if (*p == '[') { /* IPv6 literal */
        while (*p && *p != ']' && (isxdigit((unsigned char)*p) || *p == ':' || *p == '['))
            p++;
        if (*p != ']') {
            snprintf(err, errlen, "'%s': malformed IPv6 host", low);
            return -1;
        }
        p++;
    } else {
        while (host_char(*p))
            p++;
    }
    size_t hostlen = (size_t)(p - host);
    if (hostlen == 0) {
        snprintf(err, errlen, "'%s': no host", low);
        return -1;
    }
    long port = -1;
    if (*p == ':') {
        char *end = NULL;
        if (!isdigit((unsigned char)p[1])) {
            snprintf(err, errlen, "'%s': malformed port", low);
            return -1;
        }
        port = strtol(p + 1, &end, 10);
        if (port < 1 || port > 65535 || end - (p + 1) > 5) {
            snprintf(err, errlen, "'%s': the port is 1-65535", low);
            return -1;
        }
        p = end;
    }
    if (*p != '\0') {
        snprintf(err, errlen, "'%s': an origin is scheme://host[:port], with no path", low);
        return -1;
    }
    if (!https && !is_loopback(host, hostlen)) {
        snprintf(err, errlen, "'%s': plain http is allowed only for loopback storefronts", low);
        return -1;
    }
    if (port == (https ? 443 : 80))
        port = -1;
    int n;
    if (port > 0)
        n = snprintf(out, outlen, "%s%.*s:%ld", https ? "https://" : "http://", (int)hostlen, host,
                     port);
    else
        n = snprintf(out, outlen, "%s%.*s", https ? "https://" : "http://", (int)hostlen, host);
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(err, errlen, "'%s': too long", low);
        return -1;
    }
    return 0;
}

rsv_cors_t *rsv_cors_new(const char *origins, char *err, size_t errlen)
{
    rsv_cors_t *c = cm_xcalloc(1, sizeof(*c));
    const char *p = origins ? origins : "";
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        const char *start = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        if (p == start)
            continue;
        char norm[RSV_CORS_ORIGIN_MAX], why[320];
        if (rsv_cors_normalize(start, (size_t)(p - start), norm, sizeof(norm), why, sizeof(why)) !=
            0) {
            snprintf(err, errlen, "cors_origins: %s", why);
            rsv_cors_free(c);
            return NULL;
        }
        if (rsv_cors_allowed(c, norm))
            continue;
        c->origins = cm_xrealloc(c->origins, (c->n + 1) * sizeof(*c->origins));
        c->origins[c->n++] = cm_xstrdup(norm);
    }
    return c;
}

void rsv_cors_free(rsv_cors_t *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++)
        free(c->origins[i]);
    free(c->origins);
    free(c);
}

size_t rsv_cors_count(const rsv_cors_t *c)
{
    return c ? c->n : 0;
}

bool rsv_cors_allowed(const rsv_cors_t *c, const char *origin)
{
    if (c == NULL || origin == NULL)
        return false;
    for (size_t i = 0; i < c->n; i++) {
        if (strcmp(c->origins[i], origin) == 0)
            return true;
    }
    return false;
}

bool rsv_cors_handle(const rsv_cors_t *c, cm_req_t *req)
{
    const char *origin = cm_http_header(req, "Origin");
    if (origin == NULL)
        return false;
    bool ok = rsv_cors_allowed(c, origin);
    bool preflight = cm_http_method(req) == CM_HTTP_OPTIONS &&
                     cm_http_header(req, "Access-Control-Request-Method") != NULL;
    cm_http_add_header(req, "Vary", "Origin");
    if (ok)
        cm_http_add_header(req, "Access-Control-Allow-Origin", origin);
    if (!preflight) {
        if (ok)
            cm_http_add_header(req, "Access-Control-Expose-Headers", EXPOSE_HEADERS);
        return false;
    }
    if (!ok) {
        cm_http_send_error(req, 403, "origin_not_allowed",
                           "this origin is not in the reserve's cors_origins", NULL);
        return true;
    }
    cm_http_add_header(req, "Access-Control-Allow-Methods", ALLOW_METHODS);
    cm_http_add_header(req, "Access-Control-Allow-Headers", ALLOW_HEADERS);
    cm_http_add_header(req, "Access-Control-Max-Age", MAX_AGE);
    cm_http_send_empty(req, 204);
    return true;
}
