/*
 * cm_redis_cluster — the cluster half of cm_redis, private to the module (only
 * cm_redis.c includes this header; callers use cm_redis.h, whose contract holds for
 * both modes). Loop thread only.
 */
#ifndef CM_REDIS_CLUSTER_H
#define CM_REDIS_CLUSTER_H

#include "cm_redis.h"

struct cm_redis_cluster;

/** NULL when seeds does not parse. */
struct cm_redis_cluster *cm_redis_cluster_new(struct event_base *base, const char *seeds,
                                              int timeout_ms, const cm_redis_auth_t *auth);
/** Answers every pending command with cm_err_shutdown, closes every node. */
void cm_redis_cluster_free(struct cm_redis_cluster *cl);
int cm_redis_cluster_connected(const struct cm_redis_cluster *cl);
/** A command (s NULL) or a script (s, nkeys) routed by its first key; cm_redis_command's
 *  return rule: -1 (cb never called) while no slot map is known. */
int cm_redis_cluster_send(struct cm_redis_cluster *cl, const cm_redis_script_t *s, cm_redis_cb cb,
                          void *arg, int nkeys, int argc, const char **argv, const size_t *argvlen);

#endif
