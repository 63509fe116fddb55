/*
 * Unit tests for gateway/gw_lua.c: every worker thread asks for the script set on its
 * first request, all at once after a start. The set must be built exactly once: with a
 * plain "built" flag several threads built it together, each could see its own copy, and
 * all but one copy leaked (LeakSanitizer in an ASan gateway's log).
 *
 * And the reply words: every word a script returns parses to that script's enum, and
 * the enum's names are the scripts' words; anything else is the enum's 0 (BAD).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gw_lua.h"

extern const char gw_lua_prelude[];
extern const char gw_lua_join[];
extern const char gw_lua_join_batch[];
extern const char gw_lua_lookup[];
extern const char gw_lua_admit[];
extern const char gw_lua_settings[];

#define NTHREADS 8

static pthread_barrier_t start;

typedef struct seen {
    gw_lua_t copy; /* the script pointers as this thread read them on return */
} seen_t;

static void *first_request(void *arg)
{
    seen_t *s = arg;
    pthread_barrier_wait(&start);
    s->copy = *gw_lua();
    return NULL;
}

static void test_built_once_when_every_worker_asks_at_once(void **state)
{
    (void)state;
    pthread_t t[NTHREADS];
    seen_t seen[NTHREADS];
    pthread_barrier_init(&start, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, first_request, &seen[i]), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    const gw_lua_t *now = gw_lua();
    for (int i = 0; i < NTHREADS; i++)
        assert_memory_equal(&seen[i].copy, now, sizeof(*now));
    assert_non_null(now->admit);
    assert_string_equal(cm_redis_script_name(now->admit), "gw_admit");
}

/* A reply {word, 1} as Redis would send it; the caller frees it. */
static cm_redis_reply_t *reply_of(const char *word)
{
    char buf[128];
    int n = snprintf(buf, sizeof(buf), "*2\r\n$%zu\r\n%s\r\n:1\r\n", strlen(word), word);
    cm_redis_reply_t *r = cm_redis_reply_parse(buf, (size_t)n);
    assert_non_null(r);
    return r;
}

typedef int (*parse_fn)(const cm_redis_reply_t *);

static int join_word(const cm_redis_reply_t *r)
{
    return (int)gw_lua_join_word(r);
}
static int lookup_word(const cm_redis_reply_t *r)
{
    return (int)gw_lua_lookup_word(r);
}
static int admit_word(const cm_redis_reply_t *r)
{
    return (int)gw_lua_admit_word(r);
}
static int settings_word(const cm_redis_reply_t *r)
{
    return (int)gw_lua_settings_word(r);
}

static int parse_word(parse_fn fn, const char *word)
{
    cm_redis_reply_t *r = reply_of(word);
    int w = fn(r);
    cm_redis_reply_free(r);
    return w;
}

/* Every word a script answers with, read from its source ("return {'w'", and the
 * prelude's gate "return nil, nil, {'w'"), is one of its enum's (not 0). */
static void words_of_source_parse(const char *src, parse_fn fn)
{
    static const char *const openers[] = {"return {'", "return nil, nil, {'"};
    int seen = 0;
    for (size_t k = 0; k < 2; k++) {
        for (const char *p = src; (p = strstr(p, openers[k])) != NULL;) {
            p += strlen(openers[k]);
            const char *end = strchr(p, '\'');
            assert_non_null(end);
            char word[32] = "";
            assert_true((size_t)(end - p) < sizeof(word));
            memcpy(word, p, (size_t)(end - p));
            if (fn(NULL) != 0 || parse_word(fn, word) == 0)
                fail_msg("a script answers '%s', which its parser does not know", word);
            seen++;
        }
    }
    assert_true(seen > 0);
}

static void test_every_word_a_script_returns_parses(void **state)
{
    (void)state;
    words_of_source_parse(gw_lua_join, join_word);
    words_of_source_parse(gw_lua_join_batch, join_word);
    words_of_source_parse(gw_lua_prelude, join_word); /* the room's gate, for joins */
    words_of_source_parse(gw_lua_lookup, lookup_word);
    words_of_source_parse(gw_lua_admit, admit_word);
    words_of_source_parse(gw_lua_settings, settings_word);
    /* settings.lua's outcomes come from a variable, not a literal return */
    for (const char *const *w = (const char *const[]){"created", "replaced", "patched", NULL};
         *w != NULL; w++)
        assert_int_not_equal(parse_word(settings_word, *w), 0);
}

static void test_names_are_the_words(void **state)
{
    (void)state;
    for (int w = 1; w < GW_JOIN_WORDS; w++)
        assert_int_equal(parse_word(join_word, gw_lua_join_name((gw_join_word_t)w)), w);
    for (int w = 1; w < GW_SETTINGS_WORDS; w++)
        assert_int_equal(parse_word(settings_word, gw_lua_settings_name((gw_settings_word_t)w)), w);
    assert_string_equal(gw_lua_join_name(GW_JOIN_BAD), "bad");
    assert_string_equal(gw_lua_join_name((gw_join_word_t)GW_JOIN_WORDS), "bad");
    assert_int_equal(gw_lua_join_mark('q'), GW_JOIN_QUEUED);
    assert_int_equal(gw_lua_join_mark('p'), GW_JOIN_PREQUEUE);
    assert_int_equal(gw_lua_join_mark('r'), GW_JOIN_REPLAYED);
    assert_int_equal(gw_lua_join_mark('f'), GW_JOIN_PREQUEUE_FULL);
    assert_int_equal(gw_lua_join_mark('x'), GW_JOIN_BAD);
    assert_int_equal(gw_lua_join_mark('\0'), GW_JOIN_BAD);
}

static void test_what_is_not_a_word_is_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "$6\r\nqueued\r\n",             /* the word, not in an array */
        "*0\r\n",                       /* no first element */
        "*1\r\n:7\r\n",                 /* an integer first */
        "*1\r\n$-1\r\n",                /* nil first */
        "-ERR join_batch: no\r\n",      /* an error reply */
        "*1\r\n$5\r\nqueue\r\n",        /* a prefix of a word */
        "*1\r\n$7\r\nqueued2\r\n",      /* a word and more */
        "*1\r\n$6\r\nQUEUED\r\n",       /* another case */
        "*1\r\n$6\r\nnumber\r\n",       /* another script's word */
        "*1\r\n*1\r\n$6\r\nqueued\r\n", /* nested */
    };
    assert_int_equal(gw_lua_join_word(NULL), GW_JOIN_BAD);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cm_redis_reply_t *r = cm_redis_reply_parse(bad[i], strlen(bad[i]));
        assert_non_null(r);
        assert_int_equal(gw_lua_join_word(r), GW_JOIN_BAD);
        cm_redis_reply_free(r);
    }
    assert_int_equal(parse_word(admit_word, "queued"), GW_ADMIT_BAD);
    assert_int_equal(parse_word(lookup_word, "new"), GW_LOOKUP_BAD);
    assert_int_equal(parse_word(settings_word, "number"), GW_SETTINGS_BAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_built_once_when_every_worker_asks_at_once),
        cmocka_unit_test(test_every_word_a_script_returns_parses),
        cmocka_unit_test(test_names_are_the_words),
        cmocka_unit_test(test_what_is_not_a_word_is_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
