/*
 * rsv_done — see rsv_done.h.
 *
 * Flow: token (valid now, for this event) → reserve/lua/done.lua over the buyer's zset
 * and the active set → 200 {"event", "active", "active_until"?}. The event need not be
 * in the catalogue: the token alone says the gateway admitted this buyer to it.
 */
#include "rsv_done.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "rsv_auth.h"
#include "rsv_rediskeys.h"
#include "rsv_lua.h"
#include "rsv_req.h"

typedef struct done_op {
    rsv_req_t r;
    char event[CM_IDENT_MAX + 1];
    cm_jwt_claims_t claims;
} done_op_t;

static void on_done_reply(const char *err, const cm_redis_reply_t *reply, void *arg)
{
    done_op_t *op = arg;
    const char *st = NULL, *until = NULL;
    if (err == NULL && cm_redis_reply_type(reply) == CM_REDIS_ARRAY &&
        cm_redis_reply_count(reply) == 2) {
        st = cm_redis_reply_str(cm_redis_reply_at(reply, 0), NULL);
        until = cm_redis_reply_str(cm_redis_reply_at(reply, 1), NULL);
    }
    if (st == NULL || strcmp(st, "OK") != 0 || until == NULL) {
        if (err == NULL)
            cm_log(CM_LOG_ERROR, "done script gave an unexpected reply");
        rsv_reply_unavailable(&op->r, "ending the activity", err ? err : cm_err_protocol);
        free(op);
        return;
    }
    int64_t until_ms = strtoll(until, NULL, 10);
    json_t *o = json_pack("{s:s, s:b}", "event", op->event, "active", until_ms > 0);
    if (until_ms > 0) {
        char buf[32];
        cm_format_rfc3339(until_ms, buf, sizeof(buf));
        json_object_set_new(o, "active_until", json_string(buf));
    }
    rsv_reply_json(&op->r, 200, o);
    free(op);
}

static void on_done_auth(rsv_auth_result_t a, const char *why, void *arg)
{
    done_op_t *op = arg;
    if (a != RSV_AUTH_OK) {
        rsv_reply_auth(&op->r, a, why);
        free(op);
        return;
    }
    char *bkey = rsv_key(op->event, RSV_K_BUYER, op->claims.sub);
    char *akey = rsv_key(op->event, RSV_K_ACTIVE, NULL);
    const char *argv[] = {bkey, akey, op->claims.sub};
    int rc = cm_redis_eval(op->r.srv->redis, rsv_lua()->done, on_done_reply, op, 2, 3, argv, NULL);
    free(bkey);
    free(akey);
    if (rc != 0) {
        rsv_reply_unavailable(&op->r, "ending the activity", cm_err_closed);
        free(op);
    }
}

void rsv_done_handle(rsv_server_t *srv, cm_req_t *req, const char *event)
{
    done_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, RSV_EP_DONE);
    snprintf(op->event, sizeof(op->event), "%s", event);
    /* Like taking a hold: a token that is valid now (an expired admission has lapsed). */
    rsv_auth_check(srv->auth, req, event, false, &op->claims, on_done_auth, op);
}
