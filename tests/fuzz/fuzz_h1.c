/*
 * Fuzz target: cm_h1's pure parser — cm_h1_head_end over the input, then cm_h1_parse on
 * the head it finds, in a writable copy as the engine does. Properties beyond "no crash":
 * a head ends inside the input; a refusal names a 4xx/5xx status and a reason; an accepted
 * head has its method, a path starting with '/', HTTP/1.0 or 1.1, every header name and
 * value inside the buffer and no CR or LF in any value, and a Content-Length only when
 * the header is there. The engine around it (reading, deadlines, pipelining, late
 * answers) is fuzz_h1_conn.
 */
#include "fuzz.h"
#include <stdint.h>
#include <string.h>

#include "cm_h1.h"

#define MAX_INPUT (16 * 1024)

/* The pure parser on the same bytes, as one head. */
static void check_parser(const uint8_t *data, size_t size)
{
    static char buf[MAX_INPUT + 1];
    size_t scanned = 0;
    size_t end = cm_h1_head_end((const char *)data, size, &scanned);
    if (end == 0)
        return;
    CHECK(end <= size);
    memcpy(buf, data, end);
    cm_h1_head_t h;
    if (cm_h1_parse(buf, end, &h) != 0) {
        CHECK(h.status >= 400 && h.status < 600 && h.why != NULL);
        return;
    }
    CHECK(h.path >= buf && h.path < buf + end && h.path[0] == '/');
    CHECK(h.minor == 0 || h.minor == 1);
    CHECK(h.method != CM_HTTP_OTHER && h.method != 0);
    for (int i = 0; i < h.nheaders; i++) {
        CHECK(h.headers[i].name >= buf && h.headers[i].name < buf + end);
        CHECK(strpbrk(h.headers[i].value, "\r\n") == NULL);
        CHECK(h.headers[i].name[0] != '\0');
    }
    if (h.content_length >= 0)
        CHECK(cm_h1_header(&h, "content-length") != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size <= MAX_INPUT)
        check_parser(data, size);
    return 0;
}
