/*
 * rsv_lua — the reserve's Redis scripts, compiled into the binary from reserve/lua/
 * (each prefixed with prelude.lua). Registered once; see the scripts for their KEYS,
 * ARGV and replies.
 */
#ifndef RSV_LUA_H
#define RSV_LUA_H

#include "cm_redis.h"

typedef struct rsv_lua {
    cm_redis_script_t *hold_seats;
    cm_redis_script_t *hold_best;
    cm_redis_script_t *hold_pool;
    cm_redis_script_t *get;
    cm_redis_script_t *extend;
    cm_redis_script_t *release;
    cm_redis_script_t *convert;
    cm_redis_script_t *unconvert;
    cm_redis_script_t *seed;
    cm_redis_script_t *avail;
    cm_redis_script_t *done;
    cm_redis_script_t *office_release;
    cm_redis_script_t *stock;
} rsv_lua_t;

/** The scripts (built once, on the first call from any thread; live for the process). */
const rsv_lua_t *rsv_lua(void);

#endif
