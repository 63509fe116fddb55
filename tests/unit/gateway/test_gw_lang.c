/*
 * Unit tests for gateway/gw_lang.c: Accept-Language parsing and matching (weights,
 * malformed entries, bounds), the built-in catalogues (complete, the same {names} as
 * English), language tags, and an operator's directory of language files (added and
 * reworded languages, fallbacks, every refusal).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gw_lang.h"

static const char *const tags[] = {"en", "de", "fr", "es"};

static const char *pick(const char *header)
{
    return tags[gw_lang_pick(header, tags, 4)];
}

static void test_pick(void **s)
{
    (void)s;
    assert_string_equal(pick(NULL), "en");
    assert_string_equal(pick(""), "en");
    assert_string_equal(pick("de"), "de");
    assert_string_equal(pick("DE-de"), "de");
    assert_string_equal(pick("fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7, *;q=0.5"), "fr");
    assert_string_equal(pick("en;q=0.5, es"), "es");
    assert_string_equal(pick("pt-BR, pt;q=0.9, es;q=0.3"), "es");
    assert_string_equal(pick("pt-BR"), "en");  /* none we have: English */
    assert_string_equal(pick("fr, de"), "fr"); /* equal weights: the first */
    assert_string_equal(pick("de;q=0.5, fr;q=0.500"), "de");
    assert_string_equal(pick("es;q=0, de;q=0.001"), "de"); /* q=0 refuses */
    assert_string_equal(pick("de;q=0"), "en");
    assert_string_equal(pick("*"), "en");
    assert_string_equal(pick("de;Q=1.000"), "de");
    assert_string_equal(pick(" \tes \t;\t q=0.8 , , ,de;q=0.7"), "es");
    /* malformed entries are skipped, the rest still counts */
    assert_string_equal(pick("de;q=2, fr"), "fr");
    assert_string_equal(pick("de;q=1.001, fr;q=0.1"), "fr");
    assert_string_equal(pick("de;q=0.1234, fr;q=0.1"), "fr");
    assert_string_equal(pick("de;q=, fr;q=0.1"), "fr");
    assert_string_equal(pick("de;level=1, fr;q=0.1"), "fr");
    assert_string_equal(pick("d e, fr;q=0.1"), "fr");
    assert_string_equal(pick("de-, fr;q=0.1"), "fr");
    assert_string_equal(pick("-de, fr;q=0.1"), "fr");
    assert_string_equal(pick("deutschland, fr;q=0.1"), "fr"); /* 11 letters: no range */
    assert_string_equal(pick("1de, fr;q=0.1"), "fr");
    assert_string_equal(pick("de;q=-0.5, fr;q=0.1"), "fr");
    assert_string_equal(pick("\xff\xfe, es;q=0.2"), "es");
    assert_string_equal(pick(";;;,,,==="), "en");
    /* "de" does not take "den", nor "fr-ca" the tag "fr-c" */
    static const char *const odd[] = {"en", "den", "fr-c"};
    assert_int_equal(gw_lang_pick("de, fr-ca", odd, 3), 0);
    /* an exact tag before one that merely extends the range */
    static const char *const at[] = {"en", "de-at", "de"};
    assert_int_equal(gw_lang_pick("de", at, 3), 2);
    assert_int_equal(gw_lang_pick("de-AT", at, 3), 1);
    assert_int_equal(gw_lang_pick("de-CH", at, 3), 2);
}

static void test_pick_bounds(void **s)
{
    (void)s;
    /* past GW_LANG_RANGES_MAX ranges, or GW_LANG_HEADER_MAX bytes, nothing more is read */
    char h[8192] = "";
    for (int i = 0; i < GW_LANG_RANGES_MAX; i++)
        strcat(h, "pt;q=0.9,");
    strcat(h, "de");
    assert_string_equal(pick(h), "en");
    memset(h, ' ', sizeof(h) - 1);
    h[sizeof(h) - 1] = '\0';
    memcpy(h + sizeof(h) - 3, "de", 2);
    assert_string_equal(pick(h), "en");
    memcpy(h + 10, "fr", 2);
    h[12] = ',';
    assert_string_equal(pick(h), "fr");
}

/* The {names} of a message, in order, joined. */
static void names_of(const char *m, char *out, size_t n)
{
    out[0] = '\0';
    for (const char *p = m; (p = strchr(p, '{')) != NULL; p++) {
        const char *e = strchr(p, '}');
        assert_non_null(e);
        strncat(out, p, (size_t)(e - p + 1) < n - strlen(out) - 1 ? (size_t)(e - p + 1) : 0);
    }
}

static void test_builtins_complete(void **s)
{
    (void)s;
    const gw_langs_t *b = gw_langs_builtin();
    assert_int_equal(gw_langs_count(b), 4);
    for (size_t i = 0; i < 4; i++) {
        const gw_lang_t *l = gw_langs_at(b, i);
        assert_string_equal(l->tag, tags[i]);
        for (int m = 0; m < GW_MSG_COUNT; m++) {
            if (l->msg[m] == NULL || l->msg[m][0] == '\0')
                fail_msg("%s lacks %s", l->tag, gw_lang_key((gw_msg_t)m));
            char want[128], got[128];
            names_of(gw_lang_msg(gw_langs_at(b, 0), (gw_msg_t)m), want, sizeof(want));
            names_of(l->msg[m], got, sizeof(got));
            /* the same names (the order may differ between languages) */
            if (strlen(want) != strlen(got))
                fail_msg("%s %s: {names} %s, English has %s", l->tag, gw_lang_key((gw_msg_t)m), got,
                         want);
        }
    }
    assert_string_equal(gw_langs_choose(NULL, "es-MX")->tag, "es");
    assert_string_equal(gw_lang_key(GW_MSG_STATUS), "status");
    assert_string_equal(gw_lang_msg(NULL, GW_MSG_TITLE_SOLD_OUT), "Sold out");
}

static void test_tags(void **s)
{
    (void)s;
    static const char *const good[] = {"de", "pt-br", "sr-latn-rs", "gsw", "es-419", "zh-hant-tw"};
    static const char *const bad[] = {"",           "d",    "deut",   "DE",           "pt_br",
                                      "pt-",        "-pt",  "pt--br", "en-abcdefghi", "a-b-c-d-e",
                                      "en-a-b-c-d", "../x", "de.json"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (!gw_lang_tag_valid(good[i]))
            fail_msg("refused %s", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (gw_lang_tag_valid(bad[i]))
            fail_msg("took %s", bad[i]);
}

static char dir[64];

static void put(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void clear(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -f %s/*", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_load_dir(void **s)
{
    (void)s;
    snprintf(dir, sizeof(dir), "/tmp/test_gw_lang.XXXXXX");
    assert_non_null(mkdtemp(dir));
    char err[512] = "";
    put("pt-br.json", "{\"title_queued\": \"Você está na fila\", \"thousands_sep\": \".\"}");
    put("de.json", "{\"skip\": \"Direkt zur Warteschlange\"}");
    put("de-at.json", "{}");
    put("README.txt", "ignored");
    gw_langs_t *l = gw_langs_load(dir, err, sizeof(err));
    if (l == NULL)
        fail_msg("%s", err);
    assert_int_equal(gw_langs_count(l), 6);
    const gw_lang_t *pt = gw_langs_choose(l, "pt-BR,pt;q=0.9");
    assert_string_equal(pt->tag, "pt-br");
    assert_string_equal(gw_lang_msg(pt, GW_MSG_TITLE_QUEUED), "Você está na fila");
    assert_string_equal(gw_lang_msg(pt, GW_MSG_TITLE_SOLD_OUT), "Sold out"); /* English */
    const gw_lang_t *de = gw_langs_choose(l, "de");
    assert_string_equal(de->tag, "de");
    assert_string_equal(gw_lang_msg(de, GW_MSG_SKIP), "Direkt zur Warteschlange");
    assert_string_equal(gw_lang_msg(de, GW_MSG_TITLE_SOLD_OUT), "Ausverkauft");
    const gw_lang_t *at = gw_langs_choose(l, "de-AT");
    assert_string_equal(at->tag, "de-at");
    assert_string_equal(gw_lang_msg(at, GW_MSG_TITLE_SOLD_OUT), "Ausverkauft"); /* German */
    assert_string_equal(gw_langs_choose(l, "fr")->tag, "fr");
    gw_langs_free(l);

    static const struct {
        const char *name, *text, *why;
    } refused[] = {
        {"it.json", "{\"nope\": \"x\"}", "unknown key"},
        {"it.json", "{\"skip\": 1}", "must be a string"},
        {"it.json", "{\"skip\": \"a\\nb\"}", "must be a string"},
        {"it.json", "[\"skip\"]", "not a JSON object"},
        {"it.json", "{\"skip\": \"a\", \"skip\": \"b\"}", "not a JSON object"},
        {"it.json", "{", "not a JSON object"},
        {"IT.json", "{}", "not named"},
        {"it_IT.json", "{}", "not named"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        clear();
        put(refused[i].name, refused[i].text);
        err[0] = '\0';
        l = gw_langs_load(dir, err, sizeof(err));
        if (l != NULL)
            fail_msg("took %s: %s", refused[i].name, refused[i].text);
        if (strstr(err, refused[i].why) == NULL)
            fail_msg("%s: %s", refused[i].why, err);
    }
    clear();
    char big[GW_LANG_MSG_MAX + 32];
    snprintf(big, sizeof(big), "{\"skip\": \"%0*d\"}", GW_LANG_MSG_MAX + 1, 0);
    put("it.json", big);
    assert_null(gw_langs_load(dir, err, sizeof(err)));
    clear();
    assert_int_equal(rmdir(dir), 0);
    assert_null(gw_langs_load(dir, err, sizeof(err))); /* a directory that is not there */
    assert_non_null(strstr(err, "page_languages_dir"));
    l = gw_langs_load(NULL, err, sizeof(err));
    assert_int_equal(gw_langs_count(l), 4);
    gw_langs_free(l);
    gw_langs_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_pick_bounds),
        cmocka_unit_test(test_builtins_complete),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_load_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
