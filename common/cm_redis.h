/*
 * cm_redis — the one asynchronous Redis client (libevent bufferevents, plain TCP or TLS;
 * hiredis formats commands and parses replies).
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
 * Cluster mode (cm_redis_new_cluster) keeps the same contract over a Redis Cluster: the
 * slot map comes from CLUSTER SHARDS (Redis 7.0), each command goes to the master of the
 * CRC16 slot of its first key (its {hash tag} when it has one) over one connection per
 * node, MOVED refreshes the map and resends, ASK sends ASKING and resends once, and
 * TRYAGAIN / CLUSTERDOWN or a node that is down are retried with backoff within the
 * command's deadline. A command that was sent is never resent after its connection
 * dropped (it may have run): the caller gets cm_err_closed as in single-node mode.
 * Cluster code lives in cm_redis_cluster.c.
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

/**
 * Credentials and transport security. Credentials (Redis 6+ ACL): every new connection sends AUTH
 * user password (or AUTH password when user is NULL) as a connect-time step and counts as up only
 * once Redis accepted it; a refusal is logged (never the password) and the connection retried with
 * the usual backoff. password NULL: no AUTH. The strings are copied.
 */
typedef struct cm_redis_auth {
    const char *user;
    const char *password;
    /* TLS to Redis (optional): a client context from cm_tls_client_new_cert (the CA that
     * signed Redis' certificate, and a client certificate when Redis asks for one); NULL:
     * plain TCP. The client takes its own reference (SSL_CTX_up_ref). */
    struct ssl_ctx_st *tls;
    /* The name Redis' certificate must carry (also sent as SNI); NULL or "": the host
     * name when the host is one, else the IP address connected to (an IP SAN). Copied. */
    const char *tls_server_name;
} cm_redis_auth_t;

/** Starts connecting to host:port. host is an IP address or a name; a name is looked up
 *  asynchronously (cm_resolve.h: resolv.conf and /etc/hosts are read here, at start-up)
 *  before every connect, each of its addresses tried in turn, and a failed lookup is
 *  logged and retried like a failed connect. With TLS and no tls_server_name, the
 *  certificate must carry that name. timeout_ms bounds each command, and the connect
 *  (lookup, TLS handshake and AUTH included) too, but never under 1 s. NULL never. A
 *  certificate that does not verify is a connect failure like any other: logged with
 *  OpenSSL's reason ("certificate verify failed (certificate: …)") and retried with the
 *  usual backoff. */
cm_redis_t *cm_redis_new(struct event_base *base, const char *host, int port, int timeout_ms);
/** cm_redis_new with credentials (auth may be NULL: none). */
cm_redis_t *cm_redis_new_auth(struct event_base *base, const char *host, int port, int timeout_ms,
                              const cm_redis_auth_t *auth);
/**
 * Cluster mode: seeds is "ip:port[,ip:port…]" (IP addresses, at most 16). The client asks
 * a connected seed for CLUSTER SHARDS, connects to every master, and refreshes the map
 * every second and on MOVED / lost nodes — asking the node a MOVED named, else a master
 * of its current map (a replica may describe the map from before a failover), and any
 * other node only when none of them is up. cm_redis_connected() is 1 once every slot has
 * a master and each such master's connection is up. NULL when seeds does not parse.
 */
cm_redis_t *cm_redis_new_cluster(struct event_base *base, const char *seeds, int timeout_ms);
/** cm_redis_new_cluster with credentials, used on every node's connection. */
cm_redis_t *cm_redis_new_cluster_auth(struct event_base *base, const char *seeds, int timeout_ms,
                                      const cm_redis_auth_t *auth);
/** cluster_seeds NULL or "": cm_redis_new_auth(host, port); else
 *  cm_redis_new_cluster_auth(seeds) (host and port unused). auth may be NULL. NULL when
 *  the seeds do not parse. */
cm_redis_t *cm_redis_open(struct event_base *base, const char *host, int port,
                          const char *cluster_seeds, int timeout_ms, const cm_redis_auth_t *auth);
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
/** The name given at creation (for logs). */
const char *cm_redis_script_name(const cm_redis_script_t *s);
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

/**
 * The RESP form of a command (what hiredis' redisFormatCommandArgv writes, without its
 * allocation and its sprintf per argument): cm_redis_resp_len gives the exact size,
 * cm_redis_resp_write writes it into out (at least that many bytes) and returns it.
 * argvlen NULL: every argument is a C string. Pure, any thread.
 */
size_t cm_redis_resp_len(int argc, const char **argv, const size_t *argvlen);
size_t cm_redis_resp_write(char *out, int argc, const char **argv, const size_t *argvlen);

/* Reply accessors (hiredis stays private to this module). */
cm_redis_type_t cm_redis_reply_type(const cm_redis_reply_t *r);
long long cm_redis_reply_int(const cm_redis_reply_t *r);
/** String of STR, STATUS and ERROR replies (NUL-terminated), length in *len (may be NULL). */
const char *cm_redis_reply_str(const cm_redis_reply_t *r, size_t *len);
size_t cm_redis_reply_count(const cm_redis_reply_t *r);
const cm_redis_reply_t *cm_redis_reply_at(const cm_redis_reply_t *r, size_t i);

/* ---- Cluster routing: pure functions (no I/O), unit-tested ---- */

#define CM_REDIS_SLOTS 16384

/** CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with. */
uint16_t cm_redis_crc16(const void *buf, size_t len);
/** The hash slot of a key: CRC16 of its hash tag (the bytes between the first '{' and
 *  the next '}', when not empty) or of the whole key, modulo 16384. */
unsigned cm_redis_key_slot(const char *key, size_t len);

typedef enum {
    CM_REDIS_REDIR_NONE = 0, /* not a cluster error */
    CM_REDIS_REDIR_MOVED,    /* slot lives elsewhere for good: update the map, resend */
    CM_REDIS_REDIR_ASK,      /* slot migrating: ASKING + resend there once */
    CM_REDIS_REDIR_TRYAGAIN, /* multi-key command during a migration: retry later */
    CM_REDIS_REDIR_DOWN,     /* CLUSTERDOWN: retry later */
} cm_redis_redir_t;

/**
 * Classifies an error reply's text ("MOVED 3999 127.0.0.1:6381", "ASK …", "TRYAGAIN …",
 * "CLUSTERDOWN …"). For MOVED / ASK fills *slot, host (NUL-terminated, empty when the
 * server sent no endpoint — then it is the node that answered) and *port; a MOVED or ASK
 * that does not parse is CM_REDIS_REDIR_NONE.
 */
cm_redis_redir_t cm_redis_redirect_parse(const char *err, size_t len, unsigned *slot, char *host,
                                         size_t hostlen, int *port);

/** One range of slots and the address of the master serving it. */
typedef struct {
    unsigned start, end; /* inclusive */
    char host[64];
    int port;
} cm_redis_range_t;

/**
 * Reads a CLUSTER SHARDS reply (RESP2 flat maps) into at most max ranges, one per slot
 * range, each with its shard's master (role "master"; a shard without one is skipped).
 * tls: take each master's "tls-port" (a cluster run with tls-cluster yes) instead of its
 * "port". Returns the number of ranges, or -1 when the reply is not shaped like one.
 */
int cm_redis_shards_parse(const cm_redis_reply_t *reply, cm_redis_range_t *out, int max, int tls);

/** Parses one RESP2 reply from bytes (tests and fuzzing); NULL when incomplete/invalid.
 *  Free with cm_redis_reply_free. */
cm_redis_reply_t *cm_redis_reply_parse(const char *buf, size_t len);
void cm_redis_reply_free(cm_redis_reply_t *reply);

#endif
