/*
 * gw_config — every key the gateway reads, with its default, bounds and meaning.
 * Defaults live only here; deploy/gateway.conf.example mirrors this table.
 */
#include "gw_config.h"

#include <stddef.h>

#define S(f) offsetof(gw_config_t, f)

const cm_config_opt_t gw_config_table[] = {
    {"listen_addr", CM_CFG_STR, S(listen_addr), "127.0.0.1", 0, 0, "IPv4 address to listen on"},
    {"port", CM_CFG_INT, S(port), "8443", 0, 65535, "TCP port (0 = any free port)"},
    {"workers", CM_CFG_INT, S(workers), "0", 0, 256,
     "worker threads, one event loop and listener (SO_REUSEPORT) each; 0 = one per core"},
    {"tls_cert", CM_CFG_STR, S(tls_cert), NULL, 0, 0, "PEM certificate chain (ECDSA P-256)"},
    {"tls_key", CM_CFG_STR, S(tls_key), NULL, 0, 0,
     "PEM private key of tls_cert (owner-only: chmod 600)"},
    {"plain_http", CM_CFG_BOOL, S(plain_http), "false", 0, 0,
     "serve plain HTTP instead of TLS (only behind a trusted hop)"},
    {"proxy_from", CM_CFG_STR, S(proxy_from), NULL, 0, 0,
     "addresses/CIDR blocks (comma-separated) of load balancers whose connections start with "
     "a PROXY v2 header naming the client (HAProxy send-proxy-v2); needs TLS"},
    {"drain_grace_ms", CM_CFG_INT, S(drain_grace_ms), "0", 0, 60000,
     "after SIGTERM, keep accepting this long while /readyz answers 503 and replies close "
     "their connections, so a load balancer moves traffic away first (set above its check "
     "interval x fall); 0: stop accepting at once"},
    {"max_connections", CM_CFG_INT, S(max_connections), "16384", 16, 1000000,
     "open client connections (all workers together) before the listeners pause"},
    {"max_body_bytes", CM_CFG_INT, S(max_body_bytes), "16384", 1024, 16777216,
     "largest JSON request body (larger: 413 body_too_large)"},
    {"max_header_bytes", CM_CFG_INT, S(max_header_bytes), "8192", 1024, 1048576,
     "largest request line plus headers"},
    {"idle_timeout_s", CM_CFG_INT, S(idle_timeout_s), "60", 1, 3600,
     "seconds a connection may wait between requests, in all (a trickle of bytes does not "
     "extend it), before it is closed"},
    {"handshake_timeout_s", CM_CFG_INT, S(handshake_timeout_s), "10", 1, 3600,
     "seconds a new connection has to complete its TLS handshake"},
    {"request_timeout_s", CM_CFG_INT, S(request_timeout_s), "30", 1, 3600,
     "seconds from the first byte of a request until its head and body are read"},
    {"max_conns_per_addr", CM_CFG_INT, S(max_conns_per_addr), "2048", 0, 1000000,
     "open connections from one client address (the PROXY header's behind a balancer); "
     "more get 429 too_many_connections; 0 = unlimited"},
    {"admin_listen", CM_CFG_STR, S(admin_listen), "127.0.0.1:8463", 0, 0,
     "ip:port of the admin listener (admin API, dashboard, /metrics; loopback by default); "
     "the fans' port answers those paths 404"},
    {"redis_host", CM_CFG_STR, S(redis_host), "127.0.0.1", 0, 0, "Redis IPv4 address"},
    {"redis_port", CM_CFG_INT, S(redis_port), "6379", 1, 65535, "Redis port"},
    {"redis_user", CM_CFG_STR, S(redis_user), NULL, 0, 0,
     "Redis ACL user to authenticate as (AUTH user password on every connection)"},
    {"redis_password_file", CM_CFG_STR, S(redis_password_file), NULL, 0, 0,
     "file holding the Redis password, readable by its owner only (unset: no AUTH)"},
    {"redis_tls", CM_CFG_BOOL, S(redis_tls), "off", 0, 0,
     "speak TLS to Redis (its tls-port; every cluster node's tls-port with redis_cluster)"},
    {"redis_tls_ca_file", CM_CFG_STR, S(redis_tls_ca_file), NULL, 0, 0,
     "PEM file of the CA(s) that signed Redis' certificate (unset: the system store)"},
    {"redis_tls_cert_file", CM_CFG_STR, S(redis_tls_cert_file), NULL, 0, 0,
     "client certificate (PEM chain) presented to Redis when it asks (tls-auth-clients); "
     "needs redis_tls_key_file"},
    {"redis_tls_key_file", CM_CFG_STR, S(redis_tls_key_file), NULL, 0, 0,
     "private key of redis_tls_cert_file"},
    {"redis_tls_server_name", CM_CFG_STR, S(redis_tls_server_name), NULL, 0, 0,
     "name Redis' certificate must carry (and SNI); unset: the certificate must carry "
     "the IP address connected to"},
    {"redis_cluster", CM_CFG_STR, S(redis_cluster), NULL, 0, 0,
     "Redis Cluster seed nodes ip:port[,ip:port...]; when set, redis_host/redis_port are "
     "unused and the slot map comes from CLUSTER SHARDS"},
    {"redis_timeout_ms", CM_CFG_INT, S(redis_timeout_ms), "1000", 10, 60000,
     "deadline of one Redis command"},
    {"signing_keys", CM_CFG_STR, S(signing_keys), NULL, 0, 0,
     "comma-separated EC P-256 private key PEM files (owner-only: chmod 600); the last signs, all "
     "are published "
     "in the JWKS (rotate: append a new key, drop an old one after admission_ttl)"},
    {"ticket_secret_file", CM_CFG_STR, S(ticket_secret_file), NULL, 0, 0,
     "comma-separated files each holding a queue-ticket HMAC secret (at least 32 "
     "characters, owner-only mode; the same list on every gateway): the last signs, all "
     "verify (rotate: append a new one, drop the oldest after ticket_max_age_s)"},
    {"ticket_max_age_s", CM_CFG_INT, S(ticket_max_age_s), "604800", 60, 31536000,
     "oldest queue ticket accepted, in seconds since it was issued (older: 401 "
     "invalid_ticket, the fan joins again)"},
    {"admin_token_file", CM_CFG_STR, S(admin_token_file), NULL, 0, 0,
     "file holding the operators' bearer token"},
    {"issuer", CM_CFG_STR, S(issuer), "onsale-gateway", 0, 0, "iss claim of admission tokens"},
    {"reserve_url", CM_CFG_STR, S(reserve_url), "https://127.0.0.1:8444", 0, 0,
     "where admitted fans go when a room sets no redirect_url (https; see "
     "allow_loopback_http)"},
    {"allow_loopback_http", CM_CFG_BOOL, S(allow_loopback_http), "false", 0, 0,
     "accept plain http:// for reserve_url and rooms' redirect_url when the host is "
     "loopback (127.0.0.0/8, localhost, [::1]); any other host always needs https://"},
    {"join_rate_per_ip", CM_CFG_INT, S(join_rate_per_ip), "60", 0, 1000000,
     "new joins per minute from one client address (0 = unlimited)"},
    {"join_burst_per_ip", CM_CFG_INT, S(join_burst_per_ip), "20", 1, 1000000,
     "joins one client address may make at once before join_rate_per_ip applies"},
    {"rate_limit_table_size", CM_CFG_INT, S(rate_limit_table_size), "65536", 16, 10000000,
     "client addresses tracked by the join limit (idle ones are forgotten first)"},
    {"tick_ms", CM_CFG_INT, S(tick_ms), "200", 10, 250,
     "period of the watermark timer: advance in Redis and refresh the cached watermark"},
    {"signer_threads", CM_CFG_INT, S(signer_threads), "0", 0, 64,
     "threads that sign admission tokens off the event loops (all workers together, split "
     "over them); 0 = on each loop (cheapest)"},
    {"signer_queue", CM_CFG_INT, S(signer_queue), "20000", 16, 10000000,
     "admission tokens waiting to be signed before new admissions get 503"},
    {"admission_cache_size", CM_CFG_INT, S(admission_cache_size), "200000", 16, 100000000,
     "signed admission tokens kept in memory for repeated polls"},
    {"poll_min_ms", CM_CFG_INT, S(poll_min_ms), "1000", 100, 600000,
     "poll_after_ms told to fans at the front of the queue"},
    {"poll_max_ms", CM_CFG_INT, S(poll_max_ms), "30000", 100, 3600000,
     "poll_after_ms told to fans far back in the queue"},
    {"history_interval_ms", CM_CFG_INT, S(history_interval_ms), "2000", 100, 600000,
     "how often each waiting room's live numbers are sampled for the dashboard's history"},
    {"history_samples", CM_CFG_INT, S(history_samples), "150", 10, 100000,
     "samples kept per waiting room (with the interval: the history's length)"},
    {"log_level", CM_CFG_STR, S(log_level), "info", 0, 0, "debug, info, warn or error"},
};

const size_t gw_config_table_len = sizeof(gw_config_table) / sizeof(gw_config_table[0]);
