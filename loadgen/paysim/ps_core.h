/*
 * ps_core — the payment-provider simulator: Stripe's PaymentIntents surface as Stripe
 * documents it (docs/api.md, "Payment provider"; tests/fixtures/stripe pins it against
 * Stripe's OpenAPI description), a ledger for audits, and runtime settings that drive
 * every branch of the reserve's checkout saga.
 *
 * Runs on one event-loop thread (cm_http, TLS or plain) plus one journal writer
 * thread. The API (form bodies — ps_form —, Stripe's idempotency rules: an optional
 * Idempotency-Key; the same key and parameters replay the stored answer with
 * Idempotent-Replayed: true, other parameters 400 idempotency_error, a request still
 * running 409; Stripe's error object):
 *
 *   POST /v1/payment_intents  amount, currency, payment_method, payment_method_types[],
 *                      metadata[…], confirm, return_url (with confirm=true), description,
 *                      capture_method=automatic: 200 the intent (requires_confirmation,
 *                      or the confirmation's answer with confirm=true) | 400
 *                      parameter_unknown / parameter_missing / parameter_invalid_*
 *   POST /v1/payment_intents/{id}/confirm  payment_method, return_url: 200 the intent
 *                      (succeeded, requires_action with next_action.redirect_to_url) |
 *                      402 card_error card_declined (the intent inside) | 500 api_error
 *                      (stored under the key; nothing charged) | 400
 *                      payment_intent_unexpected_state (not awaiting confirmation, the
 *                      intent inside) | 404 resource_missing
 *   GET  /v1/payment_intents/{id}[?expand[]=latest_charge]  the intent now ("processing"
 *                      while a confirmation is undecided, not yet durable, or its late
 *                      answer not yet sent)
 *   GET  /v1/payment_intents?created[gte|gt|lte|lt]=T&limit=N&starting_after=ID
 *                      [&expand[]=data.latest_charge]  newest first, 1-100 a page
 *   POST /v1/payment_intents/{id}/cancel  [cancellation_reason]: 200 the intent canceled
 *                      (from requires_payment_method, requires_confirmation or
 *                      requires_action) | 400 payment_intent_unexpected_state (the intent
 *                      inside) | 404
 *   GET  /v1/sim/authenticate/{id}?token=T  the 3-D Secure challenge page (HTML, no script,
 *                      strict CSP); POST token=T&answer=approve|fail: the intent succeeded or
 *                      requires_payment_method (last_payment_error), then 302 to the
 *                      confirmation's return_url | 403 wrong token | 409 not waiting | 400
 *   POST /v1/refunds   payment_intent[, amount][, reason, metadata]: 200 refund | 400
 *                      amount_too_large (more than is left) / charge_already_refunded /
 *                      payment_intent_unexpected_state (nothing to refund)
 *   GET  /v1/ledger[?event=E]            {"payment_intents":[…],"refunds":[…],"processing"}
 *   GET|PATCH|PUT /v1/settings           latency, decline/error/timeout rates, timeout mode,
 *                                        refund_error_rate (refunds answered 500, nothing done);
 *                                        PATCH changes the keys it names, PUT sets every key
 *                                        (those it does not name to the configured defaults)
 *   GET  /v1/stats                       {"requests","tls_handshakes","tls_resumed"}: how
 *                                        clients use connections (keep-alive, resumption)
 *   GET  /healthz
 *
 * Payment methods drive single confirmations without touching the global settings (so
 * tests can run side by side; each pm_sim_X also as tok_sim_X): pm_card_chargeDeclined
 * (and tok_chargeDeclined) declines, pm_card_threeDSecure2Required requires action,
 * pm_sim_error answers 500, pm_sim_error_once answers 500 to an intent's first
 * confirmation only, pm_sim_lost_once loses an intent's first confirmation on its way in
 * (never seen; no answer until timeout_ms), pm_sim_late charges but answers only after
 * timeout_ms, pm_sim_lost
 * charges nothing and answers only after timeout_ms, pm_sim_delay_<ms> sets the latency,
 * pm_sim_arrive_<ms> is a confirmation that reaches the provider only after <ms> (held in
 * the network): until then the intent reads requires_confirmation, then it is charged.
 *
 * Webhooks (webhook_url, ps_webhook.h): every committed status change of an intent and
 * every refund, Stripe-signed, from a sender thread of their own.
 *
 * Persistence: every committed intent, confirmation and refund is one JSON line appended
 * to ledger_file by the writer thread (fdatasync'ed when ledger_fsync); an answer is sent
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
    char *webhook_url;
    char *webhook_secret_file;
    char *webhook_ca_file;
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
