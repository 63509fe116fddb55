/*
 * cm_http_req — requests and responses, whichever engine carries them (cm_http_int.h).
 */
#include "cm_http_int.h"

#include <string.h>
#include <stdio.h>

#include <event2/keyvalq_struct.h>
#include <sys/queue.h>

#include "cm_mem.h"
#include "cm_parse.h"

/* --- requests (any backend) ------------------------------------------------------- */

const char *cm_http_method_name(cm_http_method_t m)
{
    switch (m) {
    case CM_HTTP_GET:
        return "GET";
    case CM_HTTP_HEAD:
        return "HEAD";
    case CM_HTTP_POST:
        return "POST";
    case CM_HTTP_PUT:
        return "PUT";
    case CM_HTTP_DELETE:
        return "DELETE";
    case CM_HTTP_OPTIONS:
        return "OPTIONS";
    case CM_HTTP_PATCH:
        return "PATCH";
    default:
        return NULL;
    }
}

cm_http_method_t cm_http_method(cm_req_t *req)
{
    return req->ops->method(req);
}

const char *cm_http_uri_path(cm_req_t *req)
{
    return req->ops->path(req);
}

const char *cm_http_uri_query(cm_req_t *req)
{
    return req->ops->query(req);
}

const char *cm_http_body(cm_req_t *req, size_t *len)
{
    return req->ops->body(req, len);
}

void cm_http_add_header(cm_req_t *req, const char *name, const char *value)
{
    req->ops->add_header(req, name, value);
}

const char *cm_http_peer(cm_req_t *req)
{
    return req->ops->peer(req);
}

int cm_http_path(cm_req_t *req, char *buf, size_t bufsize, char **segs, int maxsegs)
{
    const char *path = req->ops->path(req);
    return path == NULL ? -1 : cm_parse_path(path, buf, bufsize, segs, maxsegs);
}

const char *cm_http_header(cm_req_t *req, const char *name)
{
    return req->ops->header(req, name);
}

const char *cm_http_bearer(cm_req_t *req, size_t *len)
{
    const char *authz = cm_http_header(req, "Authorization");
    if (authz == NULL)
        return NULL;
    return cm_parse_bearer(authz, len);
}

int cm_http_query(cm_req_t *req, struct evkeyvalq *q)
{
    TAILQ_INIT(q);
    const char *query = req->ops->query(req);
    if (query == NULL)
        return 0;
    return evhttp_parse_query_str(query, q) == 0 ? 0 : -1;
}

json_t *cm_http_read_json(cm_req_t *req, size_t max_bytes, const char **raw, size_t *rawlen)
{
    size_t len = 0;
    const char *text = req->ops->body(req, &len);
    if (len > max_bytes) {
        char msg[96];
        snprintf(msg, sizeof(msg), "the body is over the limit of %zu bytes", max_bytes);
        cm_http_send_error(req, 413, "body_too_large", msg, NULL);
        return NULL;
    }
    if (len == 0) {
        cm_http_send_error(req, 400, "invalid_request", "a JSON object body is required", NULL);
        return NULL;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg), "malformed JSON at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        cm_http_send_error(req, 400, "invalid_request", msg, NULL);
        return NULL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        cm_http_send_error(req, 400, "invalid_request", "the body must be a JSON object", NULL);
        return NULL;
    }
    if (raw) {
        *raw = text;
        *rawlen = len;
    }
    return doc;
}

/* --- responses ------------------------------------------------------------ */

int cm_http_json_string(char *out, size_t size, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    if (size < 3)
        return -1;
    out[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (n + 8 > size)
            return -1;
        if (*p == '"' || *p == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*p;
        } else if (*p < 0x20) {
            memcpy(out + n, "\\u00", 4);
            out[n + 4] = hex[*p >> 4];
            out[n + 5] = hex[*p & 15];
            n += 6;
        } else {
            out[n++] = (char)*p;
        }
    }
    out[n++] = '"';
    out[n] = '\0';
    return (int)n;
}

const char *cm_http_reason(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 402:
        return "Payment Required";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Payload Too Large";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Unknown";
    }
}

void cm_http_send_body(cm_req_t *req, int code, const char *content_type, const char *body,
                       size_t len, bool cacheable)
{
    req->ops->add_header(req, "Content-Type", content_type);
    if (!cacheable)
        req->ops->add_header(req, "Cache-Control", "no-store");
    cm_access_end(req, code, len);
    req->ops->send(req, code, body != NULL ? body : "", len);
}

void cm_http_send_json(cm_req_t *req, int code, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body)
        json_decref(body);
    if (text == NULL)
        text = cm_xstrdup("{}");
    cm_http_send_body(req, code, "application/json", text, strlen(text), false);
    free(text);
}

void cm_http_send_error(cm_req_t *req, int code, const char *error, const char *message,
                        json_t *extra)
{
    json_t *body = json_pack("{s:s, s:s}", "error", error, "message", message);
    if (body == NULL)
        abort();
    if (extra) {
        json_object_update(body, extra);
        json_decref(extra);
    }
    if ((code == 503 || code == 429) && !req->ops->has_out_header(req, "Retry-After"))
        req->ops->add_header(req, "Retry-After", "1");
    cm_http_send_json(req, code, body);
}

void cm_http_send_empty(cm_req_t *req, int code)
{
    req->ops->add_header(req, "Cache-Control", "no-store");
    cm_access_end(req, code, 0);
    req->ops->send(req, code, NULL, 0);
}
