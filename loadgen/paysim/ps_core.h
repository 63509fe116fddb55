/*
 * ps_core — the payment-provider simulator (a Stripe-like API for development and
 * tests): charges, refunds, lookup by idempotency key, a ledger for audits, and
 * runtime settings that drive every branch of the reserve's checkout saga.
 *
 * Runs on one event-loop thread (cm_http, TLS or plain) plus one journal writer
 * thread. The API (JSON bodies, Stripe's idempotency rules):
 *
 *   POST /v1/charges   Idempotency-Key; {"amount","currency","source","metadata"}
 *                      200 charge (status "succeeded") | 402 card_declined (a failed
 *                      charge is recorded) | 500 api_error (nothing recorded: the same
 *                      key may be retried) | 409 idempotency_key_in_use (the same key is
 *                      being processed) | 400 idempotency_error (same key, other params)
 *   POST /v1/refunds   Idempotency-Key; {"charge": "ch_…"[, "amount": n]} (no amount:
 *                      all that is left) — 200 refund | 404 | 400 charge_already_refunded
 *                      (nothing left) | 400 charge_failed | 400 amount_too_large
 *   GET  /v1/charges?idempotency_key=K   200 the charge as it is now ("processing"
 *                      while undecided or not yet durable) | 404 resource_missing
 *   GET  /v1/charges?created_gte=T&limit=N[&starting_after=ch_…]   the ledger's charges
 *                      created at or after unix time T, in the order they were committed
 *                      (oldest first), N per page (1-1000, default 100):
 *                      {"object":"list","data":[charge…],"has_more":bool}; each charge
 *                      carries its metadata, status, refunded and amount_refunded
 *   GET  /v1/ledger[?event=E]            {"charges":[…],"refunds":[…]} (metadata.event = E)
 *   GET|PATCH|PUT /v1/settings           latency, decline/error/timeout rates, timeout mode,
 *                                        refund_error_rate (refunds answered 500, nothing done);
 *                                        PATCH changes the keys it names, PUT sets every key
 *                                        (those it does not name to the configured defaults)
 *   GET  /v1/stats                       {"requests","tls_handshakes","tls_resumed"}: how
 *                                        clients use connections (keep-alive, resumption)
 *   GET  /healthz
 *
 * Sources drive single requests without touching the global settings (so tests can
 * run side by side): "tok_chargeDeclined" declines, "tok_sim_error" answers 500,
 * "tok_sim_late" charges but answers only after timeout_ms, "tok_sim_lost" charges
 * nothing and answers only after timeout_ms, "tok_sim_delay_<ms>" sets the latency,
 * "tok_sim_arrive_<ms>" is a request that reaches the provider only after <ms> (held in
 * the network): until then a lookup of its key answers 404, then it is charged.
 *
 * Persistence: every committed charge and refund is one JSON line appended to
 * ledger_file by the writer thread (fdatasync'ed when ledger_fsync); an answer is sent
 * only once its line is durable, and the file is replayed at start. The loop thread
 * never touches the file after start-up.
 */
#ifndef PS_CORE_H
#define PS_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_config.h"

struct event_base;
typedef struct ps_server ps_server_t;

typedef struct ps_config {
    char *listen_addr;
    int64_t port;
    char *tls_cert;
    char *tls_key;
    bool plain_http;
    int64_t max_connections;
    int64_t idle_timeout_s;
    char *ledger_file;
    bool ledger_fsync;
    char *api_key;
    int64_t max_records;
    int64_t latency_min_ms;
    int64_t latency_max_ms;
    int64_t decline_pct;
    int64_t error_pct;
    int64_t timeout_pct;
    int64_t refund_error_pct;
    char *timeout_mode;
    int64_t timeout_ms;
    char *log_level;
} ps_config_t;

extern const cm_config_opt_t ps_config_table[];
extern const size_t ps_config_table_len;

#define PS_ENV_PREFIX "ONSALE_PAYSIM_"

/**
 * Builds the simulator on base: loads the ledger file (start-up: blocking reads),
 * starts the writer thread, binds the listener. NULL with a message in err. cfg is
 * copied (its strings must outlive the server).
 */
ps_server_t *ps_server_new(struct event_base *base, const ps_config_t *cfg, char *err,
                           size_t errlen);
/** The bound port. */
int ps_server_port(const ps_server_t *ps);
/** Charges and refunds known (replayed plus new). */
size_t ps_server_records(const ps_server_t *ps);
/**
 * Answers every delayed request (503), stops the writer after it flushed what it had,
 * frees. Call from the loop thread after the loop stopped. NULL is fine.
 */
void ps_server_free(ps_server_t *ps);

#endif
