/*
 * Fuzz target: the request path, as the services take it apart. The input is a request
 * target ("/q/e1/status?x=1"); it goes through libevent's URI parser with the flags
 * evhttp uses for request lines, then our segment splitter (cm_parse_path) on the path
 * and libevent's query parser on the query, exactly the steps cm_http_path and
 * cm_http_query take. The splitter also runs on the raw bytes. Properties beyond "no
 * crash": every segment is non-empty, holds no '/' or NUL, and all of them fit the
 * buffer; a path without '%' splits into exactly its own '/'-separated pieces.
 */
#include "fuzz.h"
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "cm_parse.h"

#define MAXSEGS 8

static void split_and_check(const char *path)
{
    char buf[1024], *segs[MAXSEGS];
    int n = cm_parse_path(path, buf, sizeof(buf), segs, MAXSEGS);
    if (n < 0)
        return;
    CHECK(n <= MAXSEGS);
    CHECK(path[0] == '/');
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        CHECK(segs[i] >= buf && segs[i] < buf + sizeof(buf));
        size_t len = strlen(segs[i]);
        CHECK(len > 0);
        CHECK(strchr(segs[i], '/') == NULL);
        total += len + 1;
    }
    CHECK(total <= strlen(path) + 1);
    if (strchr(path, '%') == NULL) { /* no escapes: the pieces are the path's own */
        const char *p = path + 1;
        for (int i = 0; i < n; i++) {
            size_t len = strlen(segs[i]);
            CHECK(strncmp(p, segs[i], len) == 0);
            p += len;
            CHECK(*p == '/' || *p == '\0');
            if (*p == '/')
                p++;
        }
        CHECK(*p == '\0');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    split_and_check(s);
    struct evhttp_uri *uri = evhttp_uri_parse_with_flags(s, EVHTTP_URI_NONCONFORMANT);
    if (uri != NULL) {
        const char *path = evhttp_uri_get_path(uri);
        if (path != NULL)
            split_and_check(path);
        const char *query = evhttp_uri_get_query(uri);
        if (query != NULL) {
            struct evkeyvalq q;
            TAILQ_INIT(&q);
            if (evhttp_parse_query_str(query, &q) == 0)
                (void)evhttp_find_header(&q, "from");
            evhttp_clear_headers(&q);
        }
        evhttp_uri_free(uri);
    }
    free(s);
    return 0;
}
