/*
 * cm_redis — the one asynchronous Redis client (hiredis async on libevent).
 *
 * Runs on the event-loop thread that owns the base; never blocks: connect, commands
 * and reconnects are all asynchronous. Every command has a deadline: when it passes
 * the callback gets cm_err_timeout and a late reply is dropped. When the connection
 * drops, every pending callback gets cm_err_closed (exactly once) and the client
 * reconnects in the background with capped backoff; commands issued while it is down
 * fail at once with cm_err_closed (never queued without bound).
 *
 * Lua scripts are registered once (cm_redis_script_new) and run with EVALSHA; a
 * NOSCRIPT answer (Redis restarted or flushed its script cache) is retried
 * transparently with EVAL, so callers never see it.
 *
 * Only this module includes hiredis. A reply handed to a callback lives only during
 * that callback (hiredis frees it afterwards): copy what you keep.
 */
#ifndef CM_REDIS_H
#define CM_REDIS_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
typedef struct cm_redis cm_redis_t;
typedef struct cm_redis_script cm_redis_script_t;
typedef struct redisReply cm_redis_reply_t;

typedef enum {
    CM_REDIS_NIL = 0,
    CM_REDIS_INT,
    CM_REDIS_STR, /* bulk string */
    CM_REDIS_STATUS,
    CM_REDIS_ARRAY,
    CM_REDIS_ERROR,
} cm_redis_type_t;

/**
 * err: NULL when Redis answered (the reply may still be an error reply: check its
 * type), else cm_err_timeout / cm_err_closed / cm_err_shutdown with reply NULL.
 */
typedef void (*cm_redis_cb)(const char *err, const cm_redis_reply_t *reply, void *arg);

/** Starts connecting to host:port (an IP address; no DNS). timeout_ms bounds connect
 *  and each command. NULL never. */
cm_redis_t *cm_redis_new(struct event_base *base, const char *host, int port, int timeout_ms);
/** Fails every pending callback with cm_err_shutdown, then frees. NULL is fine. */
void cm_redis_free(cm_redis_t *r);
/** 1 while the connection is up. */
int cm_redis_connected(const cm_redis_t *r);

/**
 * Sends one command (binary-safe argv; argvlen NULL means every argument is a
 * NUL-terminated string). Returns 0 when sent — cb will be called
 * exactly once — or -1 when not connected (cb is not called).
 */
__attribute__((warn_unused_result)) int cm_redis_command(cm_redis_t *r, cm_redis_cb cb, void *arg,
                                                         int argc, const char **argv,
                                                         const size_t *argvlen);

/** A script: its source is kept and its SHA1 computed once. Lives for the process. */
cm_redis_script_t *cm_redis_script_new(const char *name, const char *source);
/** A script made of a shared prelude (helper functions) followed by body. */
cm_redis_script_t *cm_redis_script_with_prelude(const char *name, const char *prelude,
                                                const char *body);
void cm_redis_script_free(cm_redis_script_t *s);

/**
 * Runs a script: EVALSHA sha nkeys keys… args… (falls back to EVAL on NOSCRIPT).
 * argv holds the nkeys keys first, then the arguments. Same return rule as
 * cm_redis_command.
 */
__attribute__((warn_unused_result)) int cm_redis_eval(cm_redis_t *r, const cm_redis_script_t *s,
                                                      cm_redis_cb cb, void *arg, int nkeys,
                                                      int argc, const char **argv,
                                                      const size_t *argvlen);

/* Reply accessors (hiredis stays private to this module). */
cm_redis_type_t cm_redis_reply_type(const cm_redis_reply_t *r);
long long cm_redis_reply_int(const cm_redis_reply_t *r);
/** String of STR, STATUS and ERROR replies (NUL-terminated), length in *len (may be NULL). */
const char *cm_redis_reply_str(const cm_redis_reply_t *r, size_t *len);
size_t cm_redis_reply_count(const cm_redis_reply_t *r);
const cm_redis_reply_t *cm_redis_reply_at(const cm_redis_reply_t *r, size_t i);

#endif
