/*
 * Unit tests for the hand-written text of gateway/gw_queue.c (the queued answer and the
 * ticket cookie): byte for byte what the snprintf formats they replaced wrote, for the
 * longest event id, extreme numbers, null ETA, JSON escaping; and every too-small buffer
 * refused whole (0), never a cut text or a byte past it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cm_http.h"
#include "cm_parse.h"
#include "gw_queue.h"
#include "gw_ticket.h"

/* The former formatting of the queued answer (snprintf + cm_http_json_string). */
static int reference_json(char *out, size_t size, const gw_queued_answer_t *a)
{
    char ev[6 * CM_IDENT_MAX + 3], tk[6 * GW_TICKET_MAX_LEN + 3], eta[24] = "null", left[40] = "";
    assert_true(cm_http_json_string(ev, sizeof(ev), a->event) > 0);
    assert_true(cm_http_json_string(tk, sizeof(tk), a->ticket) > 0);
    if (a->eta_seconds >= 0)
        snprintf(eta, sizeof(eta), "%" PRId64, a->eta_seconds);
    if (a->show_left)
        snprintf(left, sizeof(left), ",\"left\":%" PRId64, a->left);
    return snprintf(out, size,
                    "{\"event\":%s,\"state\":\"queued\",\"ticket\":%s,\"position\":%" PRId64
                    ",\"queue_size\":%" PRId64 ",\"eta_seconds\":%s,\"poll_after_ms\":%" PRId64
                    "%s,\"paused\":%s}",
                    ev, tk, a->position, a->queue_size, eta, a->poll_after_ms, left,
                    a->paused ? "true" : "false");
}

/* gw_queue_queued_json equals the reference, and refuses every buffer one byte short. */
static void assert_json_as_reference(const gw_queued_answer_t *a)
{
    char want[2048], got[2048];
    int n = reference_json(want, sizeof(want), a);
    assert_true(n > 0 && (size_t)n < sizeof(want));
    memset(got, '#', sizeof(got));
    assert_int_equal(gw_queue_queued_json(got, sizeof(got), a), (size_t)n);
    assert_string_equal(got, want);
    for (size_t size = 0; size <= (size_t)n; size++) {
        memset(got, '#', sizeof(got));
        assert_int_equal(gw_queue_queued_json(got, size, a), 0);
        assert_int_equal(got[size], '#'); /* nothing written past the size given */
    }
    assert_int_equal(gw_queue_queued_json(got, (size_t)n + 1, a), (size_t)n);
    assert_string_equal(got, want);
}

static void test_queued_json_as_before(void **state)
{
    (void)state;
    char longest[CM_IDENT_MAX + 1], ticket[GW_TICKET_MAX_LEN];
    memset(longest, 'e', CM_IDENT_MAX);
    longest[CM_IDENT_MAX] = '\0';
    memset(ticket, 'T', sizeof(ticket) - 1);
    ticket[sizeof(ticket) - 1] = '\0';
    gw_queued_answer_t a = {"bench-join", "AQAAAAAAAAAB", 1, 1, 0, 1000, false, false, 0};
    assert_json_as_reference(&a);
    a = (gw_queued_answer_t){longest,   ticket, INT64_MAX, INT64_MAX, INT64_MAX,
                             INT64_MAX, true,   false,     0};
    assert_json_as_reference(&a);
    a = (gw_queued_answer_t){"e", "t", 0, 0, -1, 0, true, false, 0}; /* eta null */
    assert_json_as_reference(&a);
    a = (gw_queued_answer_t){"e", "t", INT64_MIN, -1, -5, INT64_MIN, false, false, 0}; /* signs */
    assert_json_as_reference(&a);
    const int64_t edges[] = {9, 10, 99, 100, 999999999, 1000000000, 9007199254740993};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        a = (gw_queued_answer_t){"e",   "t",   edges[i], edges[i] + 1, edges[i], edges[i],
                                 false, false, 0};
        assert_json_as_reference(&a);
    }
    /* the units left, where the room shows them */
    a = (gw_queued_answer_t){"e", "t", 5, 9, 2, 1000, false, true, 0};
    assert_json_as_reference(&a);
    a = (gw_queued_answer_t){"e", "t", 5, 9, 2, 1000, true, true, 1234567};
    assert_json_as_reference(&a);
    /* escaping (ids and tickets are of a strict charset; the writer escapes anyway) */
    a = (gw_queued_answer_t){"q\"uote\\back", "tab\there\x01", 3, 4, 5, 6, false, false, 0};
    assert_json_as_reference(&a);
}

/* The kept place while nothing is left but units are held: parses as docs/api.md says,
 * and a buffer one byte short is refused whole. */
static void test_returns_json(void **state)
{
    (void)state;
    gw_queued_answer_t a = {"ev\"1", "tick", 42, 100, -1, 2500, false, false, 0};
    char got[512];
    size_t n = gw_queue_returns_json(got, sizeof(got), &a, 17);
    assert_true(n > 0);
    assert_string_equal(got,
                        "{\"event\":\"ev\\\"1\",\"state\":\"sold_out\",\"returns_possible\":true,"
                        "\"ticket\":\"tick\",\"position\":42,\"queue_size\":100,\"held\":17,"
                        "\"poll_after_ms\":2500}");
    for (size_t size = 0; size <= n; size++) {
        memset(got, '#', sizeof(got));
        assert_int_equal(gw_queue_returns_json(got, size, &a, 17), 0);
        assert_int_equal(got[size], '#');
    }
}

static void test_cookie_as_before(void **state)
{
    (void)state;
    char longest[CM_IDENT_MAX + 1], ticket[GW_TICKET_MAX_LEN];
    memset(longest, 'e', CM_IDENT_MAX);
    longest[CM_IDENT_MAX] = '\0';
    memset(ticket, 'T', sizeof(ticket) - 1);
    ticket[sizeof(ticket) - 1] = '\0';
    const char *events[] = {"e", "bench-join", longest};
    const char *tickets[] = {"t", "AQAAAAAAAAAB-_", ticket};
    for (size_t i = 0; i < 3; i++) {
        char want[512], got[512];
        int n = snprintf(want, sizeof(want),
                         GW_COOKIE_PREFIX
                         "%s=%s; HttpOnly; Secure; SameSite=Lax; Path=/q/%s; Max-Age=86400",
                         events[i], tickets[i], events[i]);
        assert_int_equal(gw_ticket_cookie_text(got, sizeof(got), events[i], tickets[i]), (size_t)n);
        assert_string_equal(got, want);
        for (size_t size = 0; size <= (size_t)n; size++) {
            memset(got, '#', sizeof(got));
            assert_int_equal(gw_ticket_cookie_text(got, size, events[i], tickets[i]), 0);
            assert_int_equal(got[size], '#');
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queued_json_as_before),
        cmocka_unit_test(test_returns_json),
        cmocka_unit_test(test_cookie_as_before),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
