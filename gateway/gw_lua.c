/*
 * gw_lua — see gw_lua.h. The Lua sources are embedded by CMake (onsale_embed); the
 * shared prelude is concatenated here so every script carries the same helpers.
 */
#include "gw_lua.h"

extern const char gw_lua_prelude[];
extern const char gw_lua_join[];
extern const char gw_lua_lookup[];
extern const char gw_lua_advance[];
extern const char gw_lua_admit[];
extern const char gw_lua_settings[];
extern const char gw_lua_delete[];

static gw_lua_t scripts;
static int built;

static cm_redis_script_t *make(const char *name, const char *body)
{
    return cm_redis_script_with_prelude(name, gw_lua_prelude, body);
}

const gw_lua_t *gw_lua(void)
{
    if (!built) {
        scripts.join = make("gw_join", gw_lua_join);
        scripts.lookup = make("gw_lookup", gw_lua_lookup);
        scripts.advance = make("gw_advance", gw_lua_advance);
        scripts.admit = make("gw_admit", gw_lua_admit);
        scripts.settings = make("gw_settings", gw_lua_settings);
        scripts.remove = make("gw_delete", gw_lua_delete);
        built = 1;
    }
    return &scripts;
}
