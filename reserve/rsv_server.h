/*
 * rsv_server — the reserve process: builds one worker instance (rsv_server_t, rsv_req.h)
 * per worker on the service shell (cm_service), with what the workers share (admission
 * keys, the failed-token table, the storefront origins), runs them and tears them down;
 * and the configuration reload hook. Main thread (the hook: the reload thread).
 */
#ifndef RSV_SERVER_H
#define RSV_SERVER_H

#include "cm_reload.h"
#include "rsv_config.h"
#include "rsv_req.h"

/**
 * Builds the process from a loaded config (reads keys, binds, connects): every worker's
 * instance; returns worker 0's. NULL + err.
 */
rsv_server_t *rsv_server_new(const rsv_config_t *cfg, char *err, size_t errlen);
/** Frees every worker (given worker 0); the config strings are the caller's. NULL is fine. */
void rsv_server_free(rsv_server_t *srv);

/**
 * Main thread: runs every worker until SIGTERM/SIGINT and the drain of in-flight
 * requests (cm_service_serve). Meanwhile GET /admin/config shows rc's effective
 * configuration, and each SIGHUP applies its live keys (rsv_config_live: the log level,
 * the operators' token re-read from admin_token_file, cors_origins). rc is taken: freed
 * before this returns, so free the server after. 0 after a clean stop, else 1.
 */
int rsv_server_serve(rsv_server_t *srv, cm_reload_config_t *rc);

#endif
