/*
 * gw_server — the gateway process: builds one worker instance (gw_server_t, gw_req.h)
 * per worker on the service shell (cm_service), with what the workers share (signing
 * keys and JWKS, ticket secrets, the join limit, proof of work), runs them and tears
 * them down; and the configuration reload hook. Main thread (the hook: the reload
 * thread).
 */
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include "cm_reload.h"
#include "gw_config.h"
#include "gw_req.h"

/**
 * Builds the process from a loaded config (reads keys and secrets, binds, connects):
 * every worker's instance; returns worker 0's.
 */
gw_server_t *gw_server_new(const gw_config_t *cfg, char *err, size_t errlen);
/** Runs every worker until SIGTERM/SIGINT and the drain of in-flight requests. */
int gw_server_run(gw_server_t *srv);
/** Frees every worker (given worker 0); the config strings are the caller's. NULL is fine. */
void gw_server_free(gw_server_t *srv);

/**
 * Main thread, before gw_server_run: GET /admin/config shows rc's effective
 * configuration, and each SIGHUP applies its live keys (gw_config_live: the log level,
 * the operators' token re-read from admin_token_file). rc (borrowed) must outlive the
 * hook: free it before the server. 0, or -1 when the hook cannot be installed.
 */
__attribute__((warn_unused_result)) int gw_server_watch_config(gw_server_t *srv,
                                                               cm_reload_config_t *rc);

#endif
