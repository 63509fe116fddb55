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
/** Runs every worker until SIGTERM/SIGINT and the drain of in-flight requests. */
int rsv_server_run(rsv_server_t *srv);
/** Frees every worker (given worker 0); the config strings are the caller's. NULL is fine. */
void rsv_server_free(rsv_server_t *srv);

/**
 * Main thread, before rsv_server_run: GET /admin/config shows rc's effective
 * configuration, and each SIGHUP applies its live keys (rsv_config_live: the log level,
 * the operators' token re-read from admin_token_file, cors_origins). rc (borrowed) must
 * outlive the hook: free it before the server. 0, or -1 when the hook cannot be installed.
 */
__attribute__((warn_unused_result)) int rsv_server_watch_config(rsv_server_t *srv,
                                                                cm_reload_config_t *rc);

#endif
