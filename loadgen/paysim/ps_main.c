/*
 * onsale-paysim — entry point of the payment-provider simulator (ps_core.h). Loads
 * the configuration (file → ONSALE_PAYSIM_* → argv), builds the server, and runs the
 * loop until SIGTERM/SIGINT.
 *
 *   onsale-paysim [--config FILE] [--key=value …]
 */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cm_log.h"
#include "ps_core.h"

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    cm_log(CM_LOG_INFO, "signal %d: stopping", (int)sig);
    event_base_loopexit(arg, NULL);
}

int main(int argc, char **argv)
{
    ps_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    char err[512] = "";
    int rc = 1;
    struct event_base *base = NULL;
    struct event *sterm = NULL, *sint = NULL;
    ps_server_t *ps = NULL;
    cm_config_result_t cr =
        cm_config_load(ps_config_table, ps_config_table_len, &cfg, PS_ENV_PREFIX, argc, argv, NULL,
                       0, NULL, err, sizeof(err));
    if (cr == CM_CONFIG_HELP)
        return 0;
    if (cr == CM_CONFIG_ERROR) {
        fprintf(stderr, "onsale-paysim: %s\n", err);
        return 2;
    }
    cm_log_level_t level = CM_LOG_INFO;
    if (cm_log_level_parse(cfg.log_level, &level) != 0) {
        fprintf(stderr, "onsale-paysim: log_level must be debug, info, warn or error\n");
        goto out;
    }
    cm_log_init("paysim", level);
    cm_log_route_libevent();
    signal(SIGPIPE, SIG_IGN);
    base = event_base_new();
    if (base == NULL)
        goto out;
    ps = ps_server_new(base, &cfg, err, sizeof(err));
    if (ps == NULL) {
        cm_log(CM_LOG_ERROR, "%s", err);
        goto out;
    }
    sterm = evsignal_new(base, SIGTERM, on_signal, base);
    sint = evsignal_new(base, SIGINT, on_signal, base);
    event_add(sterm, NULL);
    event_add(sint, NULL);
    cm_log(CM_LOG_INFO, "paysim listening on %s://%s:%d (%zu records)",
           cfg.plain_http ? "http" : "https", cfg.listen_addr, ps_server_port(ps),
           ps_server_records(ps));
    rc = event_base_dispatch(base) < 0 ? 1 : 0;
out:
    ps_server_free(ps);
    if (sterm)
        event_free(sterm);
    if (sint)
        event_free(sint);
    if (base)
        event_base_free(base);
    cm_config_free(ps_config_table, ps_config_table_len, &cfg);
    return rc;
}
