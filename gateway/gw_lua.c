/*
 * gw_lua — see gw_lua.h. The Lua sources are embedded by CMake (onsale_embed); the
 * shared prelude is concatenated here so every script carries the same helpers.
 */
#include "gw_lua.h"

#include <pthread.h>
#include <string.h>

extern const char gw_lua_prelude[];
extern const char gw_lua_join[];
extern const char gw_lua_join_batch[];
extern const char gw_lua_lookup[];
extern const char gw_lua_advance[];
extern const char gw_lua_admit[];
extern const char gw_lua_settings[];
extern const char gw_lua_delete[];
extern const char gw_lua_codes[];

static gw_lua_t scripts;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static cm_redis_script_t *make(const char *name, const char *body)
{
    return cm_redis_script_with_prelude(name, gw_lua_prelude, body);
}

/* Once per process: every worker thread asks on its first request (a plain flag let two
 * workers build the set at once, racing and leaking one copy). The scripts never change. */
static void build(void)
{
    scripts.join = make("gw_join", gw_lua_join);
    scripts.join_batch = make("gw_join_batch", gw_lua_join_batch);
    scripts.lookup = make("gw_lookup", gw_lua_lookup);
    scripts.advance = make("gw_advance", gw_lua_advance);
    scripts.admit = make("gw_admit", gw_lua_admit);
    scripts.settings = make("gw_settings", gw_lua_settings);
    scripts.remove = make("gw_delete", gw_lua_delete);
    scripts.codes = make("gw_codes", gw_lua_codes);
}

const gw_lua_t *gw_lua(void)
{
    pthread_once(&once, build);
    return &scripts;
}

/* The words of each script, indexed by its enum (0: none). */
static const char *const join_words[GW_JOIN_WORDS] = {
    [GW_JOIN_QUEUED] = "queued",
    [GW_JOIN_PREQUEUE] = "prequeue",
    [GW_JOIN_REPLAYED] = "replayed",
    [GW_JOIN_PREQUEUE_FULL] = "prequeue_full",
    [GW_JOIN_UNKNOWN] = "unknown",
    [GW_JOIN_SOLD_OUT] = "sold_out",
    [GW_JOIN_CLOSED] = "closed",
    [GW_JOIN_NOT_OPEN] = "not_open",
    [GW_JOIN_CODE_REQUIRED] = "code_required",
    [GW_JOIN_CODE_UNKNOWN] = "code_unknown",
    [GW_JOIN_CODE_REVOKED] = "code_revoked",
    [GW_JOIN_CODE_USED_UP] = "code_used_up",
    [GW_JOIN_CODE_WRONG_PHASE] = "code_wrong_phase",
};
static const char *const lookup_words[GW_LOOKUP_WORDS] = {
    [GW_LOOKUP_NUMBER] = "number",
    [GW_LOOKUP_PREQUEUE] = "prequeue",
    [GW_LOOKUP_UNKNOWN] = "unknown",
};
static const char *const admit_words[GW_ADMIT_WORDS] = {
    [GW_ADMIT_NEW] = "new",           [GW_ADMIT_EXISTING] = "existing",
    [GW_ADMIT_WAIT] = "wait",         [GW_ADMIT_NOT_YET] = "not_yet",
    [GW_ADMIT_SOLD_OUT] = "sold_out", [GW_ADMIT_STOCK_OUT] = "stock_out",
    [GW_ADMIT_CLOSED] = "closed",     [GW_ADMIT_UNKNOWN] = "unknown",
};
static const char *const settings_words[GW_SETTINGS_WORDS] = {
    [GW_SETTINGS_CREATED] = "created", [GW_SETTINGS_REPLACED] = "replaced",
    [GW_SETTINGS_PATCHED] = "patched", [GW_SETTINGS_INVALID] = "invalid",
    [GW_SETTINGS_UNKNOWN] = "unknown",
};

/* The index of reply's first word in words[1 .. n), 0 when it is none of them. */
static int word_of(const cm_redis_reply_t *reply, const char *const *words, int n)
{
    if (reply == NULL || cm_redis_reply_type(reply) != CM_REDIS_ARRAY ||
        cm_redis_reply_count(reply) < 1)
        return 0;
    const cm_redis_reply_t *first = cm_redis_reply_at(reply, 0);
    if (cm_redis_reply_type(first) != CM_REDIS_STR && cm_redis_reply_type(first) != CM_REDIS_STATUS)
        return 0;
    size_t len = 0;
    const char *w = cm_redis_reply_str(first, &len);
    for (int i = 1; w != NULL && i < n; i++)
        if (strlen(words[i]) == len && memcmp(words[i], w, len) == 0)
            return i;
    return 0;
}

gw_join_word_t gw_lua_join_word(const cm_redis_reply_t *reply)
{
    return (gw_join_word_t)word_of(reply, join_words, GW_JOIN_WORDS);
}

gw_lookup_word_t gw_lua_lookup_word(const cm_redis_reply_t *reply)
{
    return (gw_lookup_word_t)word_of(reply, lookup_words, GW_LOOKUP_WORDS);
}

gw_admit_word_t gw_lua_admit_word(const cm_redis_reply_t *reply)
{
    return (gw_admit_word_t)word_of(reply, admit_words, GW_ADMIT_WORDS);
}

gw_settings_word_t gw_lua_settings_word(const cm_redis_reply_t *reply)
{
    return (gw_settings_word_t)word_of(reply, settings_words, GW_SETTINGS_WORDS);
}

gw_join_word_t gw_lua_join_mark(char mark)
{
    switch (mark) {
    case 'q':
        return GW_JOIN_QUEUED;
    case 'p':
        return GW_JOIN_PREQUEUE;
    case 'r':
        return GW_JOIN_REPLAYED;
    case 'f':
        return GW_JOIN_PREQUEUE_FULL;
    default:
        return GW_JOIN_BAD;
    }
}

const char *gw_lua_join_name(gw_join_word_t w)
{
    return w > GW_JOIN_BAD && w < GW_JOIN_WORDS ? join_words[w] : "bad";
}

const char *gw_lua_settings_name(gw_settings_word_t w)
{
    return w > GW_SETTINGS_BAD && w < GW_SETTINGS_WORDS ? settings_words[w] : "bad";
}
