/*
 * gw_lua — the gateway's Redis scripts, compiled into the binary from gateway/lua/
 * (each prefixed with prelude.lua, which documents the key layout). Registered once;
 * see each script for its KEYS, ARGV and reply.
 */
#ifndef GW_LUA_H
#define GW_LUA_H

#include "cm_redis.h"

typedef struct gw_lua {
    cm_redis_script_t *join;
    cm_redis_script_t *join_batch; /* join.lua for the fans of one batch (gw_batch) */
    cm_redis_script_t *lookup;
    cm_redis_script_t *advance;
    cm_redis_script_t *admit;
    cm_redis_script_t *settings;
    cm_redis_script_t *remove;
} gw_lua_t;

/** The scripts (built once, on the first call from any thread; live for the process). */
const gw_lua_t *gw_lua(void);

#endif
