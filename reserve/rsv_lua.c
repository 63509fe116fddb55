/*
 * rsv_lua — see rsv_lua.h. The Lua sources are embedded by CMake (onsale_embed);
 * the shared prelude is concatenated here so every script carries the same helpers.
 */
#include "rsv_lua.h"

#include <pthread.h>

extern const char rsv_lua_prelude[];
extern const char rsv_lua_hold_seats[];
extern const char rsv_lua_hold_best[];
extern const char rsv_lua_hold_pool[];
extern const char rsv_lua_get[];
extern const char rsv_lua_extend[];
extern const char rsv_lua_release[];
extern const char rsv_lua_convert[];
extern const char rsv_lua_unconvert[];
extern const char rsv_lua_seed[];
extern const char rsv_lua_avail[];
extern const char rsv_lua_done[];
extern const char rsv_lua_office_release[];
extern const char rsv_lua_stock[];

static rsv_lua_t scripts;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static cm_redis_script_t *make(const char *name, const char *body)
{
    return cm_redis_script_with_prelude(name, rsv_lua_prelude, body);
}

/* Once per process: every worker thread asks on its first request (a plain flag let two
 * workers build the set at once, racing and leaking one copy). The scripts never change. */
static void build(void)
{
    scripts.hold_seats = make("hold_seats", rsv_lua_hold_seats);
    scripts.hold_best = make("hold_best", rsv_lua_hold_best);
    scripts.hold_pool = make("hold_pool", rsv_lua_hold_pool);
    scripts.get = make("get", rsv_lua_get);
    scripts.extend = make("extend", rsv_lua_extend);
    scripts.release = make("release", rsv_lua_release);
    scripts.convert = make("convert", rsv_lua_convert);
    scripts.unconvert = make("unconvert", rsv_lua_unconvert);
    scripts.seed = make("seed", rsv_lua_seed);
    scripts.avail = make("avail", rsv_lua_avail);
    scripts.done = make("done", rsv_lua_done);
    scripts.office_release = make("office_release", rsv_lua_office_release);
    scripts.stock = make("stock", rsv_lua_stock);
}

const rsv_lua_t *rsv_lua(void)
{
    pthread_once(&once, build);
    return &scripts;
}
