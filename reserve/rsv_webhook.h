/*
 * rsv_webhook — the payment provider's events in: POST /v1/provider/webhook (docs/api.md,
 * "Provider webhooks"), Stripe's scheme: a JSON event {id, type, created, data:{object}}
 * signed in the Stripe-Signature header (cm_hmacsig: HMAC-SHA256 over "<t>.<body>", any of
 * the configured secrets, pay_webhook_tolerance_s either side of now).
 *
 * A webhook is a second source of truth beside the saga's own calls and lookups, and never
 * a faster way to move money on its own word: a verified event is recorded once by its id
 * (a replay is a no-op), and in the same transaction
 *   - an open checkout it names is made due for the reconciler at once (checkouts.nudged_at:
 *     the next reconciler tick looks the payment up and moves the checkout as it would
 *     after reconcile_after_s), so events out of order, or racing the saga's own answer,
 *     move the checkout once — every move is still the saga's conditional step;
 *   - a payment that succeeded for a checkout already released or failed moves it to
 *     refunding, exactly as the ledger check does (onsale_ledger_check): the money is
 *     given back;
 *   - anything else (a settled checkout, an object that is not ours) is only recorded.
 * Event types other than payment_intent.*, charge.* and refund.* are answered 200 and not
 * stored.
 *
 * Worker threads: the handler runs on its worker's loop; the secrets are a reload cell
 * shared by the workers (rsv_server.c re-reads pay_webhook_secrets_file on SIGHUP).
 */
#ifndef RSV_WEBHOOK_H
#define RSV_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#include "cm_http.h"
#include "cm_metrics.h"

typedef struct rsv_server rsv_server_t;

/** The most secrets one file may hold (one a line; the first signs at the provider). */
#define RSV_WEBHOOK_SECRETS_MAX 8

/** The webhook secrets in force. */
typedef struct rsv_webhook_secrets rsv_webhook_secrets_t;

/**
 * Reads path (cm_config_read_secret: owner-only): one secret a line, 8-256 printable
 * characters each, blank lines skipped, at most RSV_WEBHOOK_SECRETS_MAX. path NULL: an
 * empty set (webhooks are refused 404). Start-up and the reload thread (blocking I/O).
 * NULL with a message naming the key and the line.
 */
rsv_webhook_secrets_t *rsv_webhook_secrets_load(const char *path, char *err, size_t errlen);

/** How many secrets s holds (0: webhooks off). */
size_t rsv_webhook_secrets_count(const rsv_webhook_secrets_t *s);

/** Frees s, wiping the secrets (a cm_reload_free_fn: ctx unused). NULL is fine. */
void rsv_webhook_secrets_free(void *s, void *ctx);

#define RSV_WEBHOOK_FIELD_MAX 128

/** What the reserve reads of one event (rsv_webhook_parse). */
typedef struct rsv_webhook_event {
    char id[RSV_WEBHOOK_FIELD_MAX];        /* evt_… */
    char type[RSV_WEBHOOK_FIELD_MAX];      /* payment_intent.succeeded, charge.refunded, … */
    char object_id[RSV_WEBHOOK_FIELD_MAX]; /* the payment: the intent (a charge's or a
                                              refund's payment_intent), else the object id */
    char checkout[RSV_WEBHOOK_FIELD_MAX];  /* metadata.checkout, "" when absent */
    int64_t created;                       /* unix seconds, 0 when absent */
    int relevant;                          /* 1: payment_intent.*, charge.* or refund.* */
} rsv_webhook_event_t;

/**
 * Parses an event body (pure; unit-tested and fuzzed). 0 with ev filled, or -1 with *why
 * (static text) when the body is not a JSON object with a string id and type, an object
 * data.object with a string id (for a relevant type), or a field is longer than
 * RSV_WEBHOOK_FIELD_MAX - 1 or holds control characters.
 */
int rsv_webhook_parse(const char *body, size_t len, rsv_webhook_event_t *ev, const char **why);

/** The outcomes of an event (the `outcome` label of provider_webhooks_total). */
typedef enum {
    RSV_WEBHOOK_NUDGED,    /* an open checkout made due for the reconciler now */
    RSV_WEBHOOK_REFUNDING, /* a late payment of a released/failed checkout: refunding */
    RSV_WEBHOOK_SETTLED,   /* the checkout is settled already: recorded only */
    RSV_WEBHOOK_NOT_OURS,  /* no checkout of ours: recorded only */
    RSV_WEBHOOK_DUPLICATE, /* this event id was received before: nothing done */
    RSV_WEBHOOK_IGNORED,   /* a type the reserve does not read: not stored */
    RSV_WEBHOOK_REFUSED,   /* the signature is missing, malformed, wrong or stale */
    RSV_WEBHOOK_INVALID,   /* signed, but the body does not parse */
    RSV_WEBHOOK_OUTCOME_COUNT
} rsv_webhook_outcome_t;

typedef struct rsv_webhook_metrics {
    cm_counter_t *events[RSV_WEBHOOK_OUTCOME_COUNT];
} rsv_webhook_metrics_t;

/** Registers onsale_reserve_provider_webhooks_total{outcome}. Main thread, at start. */
void rsv_webhook_metrics_register(rsv_webhook_metrics_t *m, cm_metrics_t *reg);

/** POST /v1/provider/webhook. */
void rsv_webhook_handle(rsv_server_t *srv, cm_req_t *req);

#endif
