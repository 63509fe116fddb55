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
/** Frees every worker (given worker 0); the config strings are the caller's. NULL is fine. */
void gw_server_free(gw_server_t *srv);

/**
 * Main thread: runs every worker until SIGTERM/SIGINT and the drain of in-flight
 * requests (cm_service_serve). Meanwhile GET /admin/config shows rc's effective
 * configuration, and each SIGHUP applies its live keys (gw_config_live: the log level,
 * the operators' token re-read from admin_token_file). rc is taken: freed before this
 * returns, so free the server after. 0 after a clean stop, else 1.
 */
int gw_server_serve(gw_server_t *srv, cm_reload_config_t *rc);

#endif
