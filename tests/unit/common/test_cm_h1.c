/*
 * Unit tests for cm_h1: where a head ends, and what the strict parser accepts and refuses
 * (each refusal with its status). Heads are copied into a writable buffer as the engine
 * does (the parser cuts them in place).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cm_h1.h"

static char buf[16384];
static cm_h1_head_t head;

/* Parses text as a complete head; returns cm_h1_parse's result (head.status on -1). */
static int parse(const char *text)
{
    size_t len = strlen(text);
    assert_true(len < sizeof(buf));
    memcpy(buf, text, len);
    return cm_h1_parse(buf, len, &head);
}

static void refused(const char *text, int status)
{
    assert_int_equal(parse(text), -1);
    assert_int_equal(head.status, status);
    assert_non_null(head.why);
}

static void test_head_end(void **state)
{
    size_t scanned = 0;
    const char *h = "GET / HTTP/1.1\r\nHost: a\r\n\r\nNEXT";
    assert_int_equal(cm_h1_head_end(h, 10, &scanned), 0);
    assert_int_equal(cm_h1_head_end(h, strlen(h), &scanned), strlen(h) - 4);
    /* the terminator split over two reads */
    scanned = 0;
    assert_int_equal(cm_h1_head_end(h, 26, &scanned), 0);
    assert_int_equal(cm_h1_head_end(h, 27, &scanned), 27);
    /* LF LF ends a head too (then refused as a bare LF) */
    scanned = 0;
    assert_int_equal(cm_h1_head_end("GET / HTTP/1.1\n\nX", 17, &scanned), 16);
}

static void test_get(void **state)
{
    assert_int_equal(parse("GET /q/e1/status?x=1&y=%20 HTTP/1.1\r\nHost: gw\r\n"
                           "Authorization:   Bearer abc  \r\nX-Empty:\r\n\r\n"),
                     0);
    assert_int_equal(head.method, CM_HTTP_GET);
    assert_string_equal(head.path, "/q/e1/status");
    assert_string_equal(head.query, "x=1&y=%20");
    assert_int_equal(head.minor, 1);
    assert_true(head.keep_alive);
    assert_int_equal(head.content_length, -1);
    assert_string_equal(cm_h1_header(&head, "authorization"), "Bearer abc");
    assert_string_equal(cm_h1_header(&head, "X-EMPTY"), "");
    assert_null(cm_h1_header(&head, "Cookie"));
}

static void test_post_and_keep_alive(void **state)
{
    assert_int_equal(parse("POST /q/e/join HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n"
                           "Connection: foo, Close\r\nExpect: 100-continue\r\n\r\n"),
                     0);
    assert_int_equal(head.method, CM_HTTP_POST);
    assert_int_equal(head.content_length, 2);
    assert_false(head.keep_alive);
    assert_true(head.expect_continue);
    assert_null(head.query);
    /* HTTP/1.0: keep-alive only when asked; no Host needed */
    assert_int_equal(parse("GET / HTTP/1.0\r\n\r\n"), 0);
    assert_false(head.keep_alive);
    assert_int_equal(parse("HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 0);
    assert_true(head.keep_alive);
    assert_int_equal(head.method, CM_HTTP_HEAD);
    /* leading empty lines (a CRLF after a previous body) */
    assert_int_equal(parse("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 0);
}

static void test_refused_lines(void **state)
{
    refused("GET / HTTP/1.1\nHost: a\r\n\r\n", 400);           /* bare LF */
    refused("GET / HTTP/1.1\r\nHost: a\n\n", 400);             /* bare LF at the end */
    refused("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400);      /* bare CR */
    refused("GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", 400);   /* obs-fold */
    refused("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400);        /* space before colon */
    refused("GET / HTTP/1.1\r\nHo(st: a\r\n\r\n", 400);        /* not a token */
    refused("GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400);     /* control character */
    refused("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);        /* two spaces */
    refused("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400);      /* space in the target */
    refused("GET http://x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400); /* absolute-form */
    refused("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400);
    refused("GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400);
    refused("GET /\r\n\r\n", 400); /* HTTP/0.9 */
    refused("G\x80T / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), 0);
    memcpy(buf, "GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n", 29);
    assert_int_equal(cm_h1_parse(buf, 29, &head), -1); /* NUL */
    assert_int_equal(head.status, 400);
}

static void test_refused_framing(void **state)
{
    refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400);
    refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400);
    refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", 400);
    refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400);
    refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400);
    refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400);
    refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 411);
    refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            400);
    refused("GET / HTTP/1.1\r\n\r\n", 400);                       /* no Host */
    refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400); /* two */
    refused("GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n", 417);
}

static void test_refused_version_method_sizes(void **state)
{
    refused("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
    refused("GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505);
    refused("BREW / HTTP/1.1\r\nHost: a\r\n\r\n", 501);
    char *big = malloc(CM_H1_MAX_PATH + 64);
    memset(big, 'a', CM_H1_MAX_PATH + 64);
    memcpy(big, "GET /", 5);
    memcpy(big + CM_H1_MAX_PATH + 6, " HTTP/1.1\r\nHost: a\r\n\r\n", 23);
    big[CM_H1_MAX_PATH + 29] = '\0';
    refused(big, 414);
    free(big);
    char many[8192] = "GET / HTTP/1.1\r\nHost: a\r\n";
    for (int i = 0; i < CM_H1_MAX_HEADERS; i++)
        strcat(many, "X-A: b\r\n");
    strcat(many, "\r\n");
    refused(many, 431);
}

/* Regression: a storefront link `/shop?event=…` with a 3000-byte query was refused 414
 * (the cap was on the whole target); the path is capped, the query fills the head. */
static void test_long_query_is_kept_whole(void **state)
{
    static char text[8192];
    char q[3100];
    memset(q, 'y', sizeof(q) - 1);
    q[sizeof(q) - 1] = '\0';
    snprintf(text, sizeof(text), "GET /shop?event=demo&x=%s HTTP/1.1\r\nHost: a\r\n\r\n", q);
    assert_int_equal(parse(text), 0);
    assert_string_equal(head.path, "/shop");
    assert_int_equal(strlen(head.query), strlen("event=demo&x=") + strlen(q));
    assert_memory_equal(head.query, "event=demo&x=yyy", 16);
    /* a path of exactly the cap is served */
    char path[CM_H1_MAX_PATH + 1];
    memset(path, 'p', sizeof(path) - 1);
    path[0] = '/';
    path[sizeof(path) - 1] = '\0';
    snprintf(text, sizeof(text), "GET %s?%s HTTP/1.1\r\nHost: a\r\n\r\n", path, q);
    assert_int_equal(parse(text), 0);
    assert_int_equal(strlen(head.path), CM_H1_MAX_PATH);
    /* one byte more is 414, however short the query */
    snprintf(text, sizeof(text), "GET %sp?q=1 HTTP/1.1\r\nHost: a\r\n\r\n", path);
    refused(text, 414);
}

/* The engine's early 414, while the request line is still arriving. */
static void test_line_path_too_long(void **state)
{
    static char line[CM_H1_MAX_PATH + 4096];
    memset(line, 'a', sizeof(line));
    memcpy(line, "GET /", 5);
    assert_true(cm_h1_line_path_too_long(line, CM_H1_MAX_PATH + 5));
    assert_false(cm_h1_line_path_too_long(line, CM_H1_MAX_PATH + 4)); /* exactly the cap */
    line[100] = '?';                                                  /* a long query */
    assert_false(cm_h1_line_path_too_long(line, sizeof(line)));
    assert_false(cm_h1_line_path_too_long("GET / HTTP/1.1", 14));
    memset(line, 'G', sizeof(line)); /* no space yet: no path */
    assert_false(cm_h1_line_path_too_long(line, sizeof(line)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_end),
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_post_and_keep_alive),
        cmocka_unit_test(test_refused_lines),
        cmocka_unit_test(test_refused_framing),
        cmocka_unit_test(test_refused_version_method_sizes),
        cmocka_unit_test(test_long_query_is_kept_whole),
        cmocka_unit_test(test_line_path_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
