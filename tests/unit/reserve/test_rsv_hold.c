/*
 * test_rsv_hold — reserve/rsv_hold.c below its I/O: the one parser of each hold script's
 * answer (rsv_hold_status_parse / rsv_hold_reply_status for every word the scripts send,
 * rsv_hold_take_parse for the take scripts', rsv_hold_view_parse for a described hold,
 * short answers and malformed replies), hold ids (rsv_hold_id_event) and a hold's items
 * as JSON (rsv_hold_json_items). Replies are built from RESP bytes with
 * cm_redis_reply_parse, as Redis sends them; the scripts themselves run against a real
 * Redis in the integration suite (test_reserve_holds, test_reserve_confirm).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rsv_hold.h"

/* A RESP array of the n items: "#123" is the integer 123, "~" a nil, anything else a
 * bulk string. */
static cm_redis_reply_t *array_of(size_t n, const char *const *items)
{
    char buf[4096];
    size_t len = (size_t)snprintf(buf, sizeof(buf), "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++) {
        const char *it = items[i];
        if (it[0] == '#')
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, ":%s\r\n", it + 1);
        else if (strcmp(it, "~") == 0)
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "$-1\r\n");
        else
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "$%zu\r\n%s\r\n", strlen(it), it);
        assert_true(len < sizeof(buf));
    }
    cm_redis_reply_t *r = cm_redis_reply_parse(buf, len);
    assert_non_null(r);
    return r;
}

#define ARRAY(...)                                                                                 \
    array_of(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *),                    \
             (const char *const[]){__VA_ARGS__})

static cm_redis_reply_t *raw(const char *resp)
{
    cm_redis_reply_t *r = cm_redis_reply_parse(resp, strlen(resp));
    assert_non_null(r);
    return r;
}

/* --- status words --------------------------------------------------------------------- */

static void every_script_word_parses(void **state)
{
    (void)state;
    static const struct {
        const char *word;
        rsv_hold_status_t st;
    } words[] = {
        {"OK", RSV_HOLD_OK},
        {"EXPIRED", RSV_HOLD_EXPIRED},
        {"CONVERTED", RSV_HOLD_CONVERTED},
        {"NOTFOUND", RSV_HOLD_NOTFOUND},
        {"GONE", RSV_HOLD_GONE},
        {"STALE", RSV_HOLD_STALE},
        {"AMOUNT", RSV_HOLD_AMOUNT},
        {"NOOP", RSV_HOLD_NOOP},
    };
    bool seen[RSV_HOLD_NSTATUS] = {false};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        assert_int_equal(rsv_hold_status_parse(words[i].word), words[i].st);
        cm_redis_reply_t *r = ARRAY(words[i].word);
        assert_int_equal(rsv_hold_reply_status(r), words[i].st);
        cm_redis_reply_free(r);
        seen[words[i].st] = true;
    }
    for (int s = 0; s < RSV_HOLD_OTHER; s++)
        assert_true(seen[s]); /* every status but OTHER is some script's word */
    /* Words are exact: no case folding, no prefixes. */
    assert_int_equal(rsv_hold_status_parse("ok"), RSV_HOLD_OTHER);
    assert_int_equal(rsv_hold_status_parse("OKAY"), RSV_HOLD_OTHER);
    assert_int_equal(rsv_hold_status_parse(""), RSV_HOLD_OTHER);
    assert_int_equal(rsv_hold_status_parse(NULL), RSV_HOLD_OTHER);
}

static void a_reply_without_a_word_is_other(void **state)
{
    (void)state;
    const char *const replies[] = {
        "*0\r\n",                   /* empty array */
        ":1\r\n",                   /* not an array */
        "$2\r\nOK\r\n",             /* a bare string, not the scripts' array */
        "-ERR boom\r\n",            /* an error reply */
        "*1\r\n:7\r\n",             /* an integer first */
        "*1\r\n$-1\r\n",            /* a nil first */
        "*1\r\n*1\r\n$2\r\nOK\r\n", /* nested */
    };
    for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
        cm_redis_reply_t *r = raw(replies[i]);
        assert_int_equal(rsv_hold_reply_status(r), RSV_HOLD_OTHER);
        assert_int_equal(rsv_hold_take_parse(r), RSV_HOLD_TAKE_OTHER);
        rsv_hold_view_t v;
        assert_int_equal(rsv_hold_view_parse(r, &v), -1);
        assert_null(v.seats);
        cm_redis_reply_free(r);
    }
    assert_int_equal(rsv_hold_reply_status(NULL), RSV_HOLD_OTHER);
}

/* --- the take scripts ------------------------------------------------------------------ */

static void every_take_answer_parses(void **state)
{
    (void)state;
    static const struct {
        const char *word;
        rsv_hold_take_t t;
    } words[] = {
        {"OK", RSV_HOLD_TAKE_OK},
        {"REPLAY", RSV_HOLD_TAKE_REPLAY},
        {"MISMATCH", RSV_HOLD_TAKE_MISMATCH},
        {"TAKEN", RSV_HOLD_TAKE_TAKEN},
        {"SOLDOUT", RSV_HOLD_TAKE_SOLDOUT},
        {"INSUFFICIENT", RSV_HOLD_TAKE_INSUFFICIENT},
        {"NOBLOCK", RSV_HOLD_TAKE_NOBLOCK},
        {"LIMIT", RSV_HOLD_TAKE_LIMIT},
        {"UNVERIFIED", RSV_HOLD_TAKE_UNVERIFIED},
        {"NOSEED", RSV_HOLD_TAKE_NOSEED},
        {"EXPIRED", RSV_HOLD_TAKE_OTHER}, /* a word of the other scripts */
        {"taken", RSV_HOLD_TAKE_OTHER},
    };
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        cm_redis_reply_t *r = ARRAY(words[i].word, "#3");
        assert_int_equal(rsv_hold_take_parse(r), words[i].t);
        cm_redis_reply_free(r);
    }
}

/* --- described holds ------------------------------------------------------------------- */

static void a_described_hold_fills_the_view(void **state)
{
    (void)state;
    /* describe() in lua/prelude.lua: status, exp, seats, pool, qty, created, cap, amount,
     * checkout, first unit — numbers as strings or integers. */
    cm_redis_reply_t *r = ARRAY("OK", "1700000060000", "A1,A2", "", "2", "#1700000000000",
                                "1700000900000", "#3000", "", "0");
    rsv_hold_view_t v;
    assert_int_equal(rsv_hold_view_parse(r, &v), 0);
    assert_int_equal(v.status, RSV_HOLD_OK);
    assert_int_equal(v.exp_ms, 1700000060000LL);
    assert_string_equal(v.seats, "A1,A2");
    assert_string_equal(v.pool, "");
    assert_int_equal(v.qty, 2);
    assert_int_equal(v.created_ms, 1700000000000LL);
    assert_int_equal(v.cap_ms, 1700000900000LL);
    assert_int_equal(v.amount, 3000);
    assert_string_equal(v.checkout, "");
    assert_int_equal(v.first_unit, 0);
    rsv_hold_view_clear(&v);
    assert_null(v.seats);
    rsv_hold_view_clear(&v); /* twice is fine */
    cm_redis_reply_free(r);

    r = ARRAY("CONVERTED", "5", "", "floor", "3", "1", "0", "4500", "co_abc", "#17");
    assert_int_equal(rsv_hold_view_parse(r, &v), 0);
    assert_int_equal(v.status, RSV_HOLD_CONVERTED);
    assert_null(v.seats); /* no seats: NULL, not "" */
    assert_string_equal(v.pool, "floor");
    assert_int_equal(v.qty, 3);
    assert_string_equal(v.checkout, "co_abc");
    assert_int_equal(v.first_unit, 17);
    cm_redis_reply_free(r);

    /* A full description carries any word (convert's AMOUNT, EXPIRED): the caller
     * decides; nils read as empty. */
    r = ARRAY("AMOUNT", "~", "~", "~", "~", "~", "~", "~", "~", "~");
    assert_int_equal(rsv_hold_view_parse(r, &v), 0);
    assert_int_equal(v.status, RSV_HOLD_AMOUNT);
    assert_null(v.seats);
    assert_string_equal(v.pool, "");
    assert_int_equal(v.amount, 0);
    cm_redis_reply_free(r);
}

static void short_answers_only_for_words_that_need_no_description(void **state)
{
    (void)state;
    static const struct {
        const char *word;
        int rc;
    } cases[] = {
        {"NOTFOUND", 0}, {"GONE", 0},   {"CONVERTED", 0}, {"OK", 0}, /* release's answers */
        {"EXPIRED", -1}, {"STALE", -1}, {"NOOP", -1},     {"WHAT", -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cm_redis_reply_t *r = ARRAY(cases[i].word);
        rsv_hold_view_t v;
        assert_int_equal(rsv_hold_view_parse(r, &v), cases[i].rc);
        if (cases[i].rc == 0) {
            assert_int_equal(v.status, rsv_hold_status_parse(cases[i].word));
            assert_null(v.seats);
            assert_int_equal(v.exp_ms, 0);
        }
        cm_redis_reply_free(r);
    }
    /* Nine elements is still short. */
    cm_redis_reply_t *r = ARRAY("EXPIRED", "1", "A1", "", "1", "1", "1", "1", "");
    rsv_hold_view_t v;
    assert_int_equal(rsv_hold_view_parse(r, &v), -1);
    cm_redis_reply_free(r);
}

static void overlong_fields_are_cut_not_overrun(void **state)
{
    (void)state;
    char pool[200], checkout[200];
    memset(pool, 'p', sizeof(pool) - 1);
    pool[sizeof(pool) - 1] = '\0';
    memset(checkout, 'c', sizeof(checkout) - 1);
    checkout[sizeof(checkout) - 1] = '\0';
    cm_redis_reply_t *r = ARRAY("OK", "1", "", pool, "1", "1", "1", "1", checkout, "1");
    rsv_hold_view_t v;
    assert_int_equal(rsv_hold_view_parse(r, &v), 0);
    assert_int_equal(strlen(v.pool), sizeof(v.pool) - 1);
    assert_int_equal(strlen(v.checkout), sizeof(v.checkout) - 1);
    cm_redis_reply_free(r);
}

/* --- ids and items --------------------------------------------------------------------- */

static void hold_ids_carry_their_event(void **state)
{
    (void)state;
    char event[CM_IDENT_MAX + 1];
    assert_int_equal(rsv_hold_id_event("0123456789abcdef0123456789abcdef.demo-1", event), 0);
    assert_string_equal(event, "demo-1");
    const char *bad[] = {
        "",
        "0123456789abcdef0123456789abcdef.",         /* no event */
        "0123456789abcdef0123456789abcdef",          /* no dot */
        "0123456789ABCDEF0123456789abcdef.demo",     /* upper-case hex */
        "0123456789abcdef0123456789abcde.demo",      /* 31 hex */
        "0123456789abcdef0123456789abcdef0.demo",    /* 33 hex */
        "0123456789abcdef0123456789abcdef.de mo",    /* not an identifier */
        "0123456789abcdef0123456789abcdef.demo/../x" /* not an identifier */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(rsv_hold_id_event(bad[i], event), -1);
    char longest[RSV_HOLD_ID_MAX + 2];
    memset(longest, 'a', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    longest[32] = '.';
    assert_int_equal(rsv_hold_id_event(longest, event), -1); /* one past the longest */
    longest[sizeof(longest) - 2] = '\0';
    assert_int_equal(rsv_hold_id_event(longest, event), 0);
    assert_int_equal(strlen(event), CM_IDENT_MAX);
}

static void items_are_seats_or_a_pool(void **state)
{
    (void)state;
    rsv_hold_view_t v;
    memset(&v, 0, sizeof(v));
    v.seats = strdup("A1,B2,C3");
    json_t *o = json_object();
    rsv_hold_json_items(o, &v);
    char *t = json_dumps(o, JSON_COMPACT);
    assert_string_equal(t, "{\"seats\":[\"A1\",\"B2\",\"C3\"]}");
    free(t);
    json_decref(o);
    rsv_hold_view_clear(&v);

    snprintf(v.pool, sizeof(v.pool), "floor");
    v.qty = 4;
    o = json_object();
    rsv_hold_json_items(o, &v);
    t = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(t, "{\"pool\":\"floor\",\"quantity\":4}");
    free(t);
    json_decref(o);

    memset(&v, 0, sizeof(v)); /* neither (a record without items): an empty seat list */
    o = json_object();
    rsv_hold_json_items(o, &v);
    t = json_dumps(o, JSON_COMPACT);
    assert_string_equal(t, "{\"seats\":[]}");
    free(t);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_script_word_parses),
        cmocka_unit_test(a_reply_without_a_word_is_other),
        cmocka_unit_test(every_take_answer_parses),
        cmocka_unit_test(a_described_hold_fills_the_view),
        cmocka_unit_test(short_answers_only_for_words_that_need_no_description),
        cmocka_unit_test(overlong_fields_are_cut_not_overrun),
        cmocka_unit_test(hold_ids_carry_their_event),
        cmocka_unit_test(items_are_seats_or_a_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
