/*
 * gw_lua — see gw_lua.h. The Lua sources are embedded by CMake (onsale_embed); the
 * shared prelude is concatenated here so every script carries the same helpers.
 */
#include "gw_lua.h"

#include <pthread.h>

extern const char gw_lua_prelude[];
extern const char gw_lua_join[];
extern const char gw_lua_join_batch[];
extern const char gw_lua_lookup[];
extern const char gw_lua_advance[];
extern const char gw_lua_admit[];
extern const char gw_lua_settings[];
extern const char gw_lua_delete[];

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
}

const gw_lua_t *gw_lua(void)
{
    pthread_once(&once, build);
    return &scripts;
}
