/*
 * rsv_pay_stripe — the Stripe PaymentIntents adapter of rsv_pay (docs/api.md, "payment
 * provider"). The pure parts are here, unit-tested against fixtures taken from Stripe's
 * published OpenAPI description (tests/fixtures/stripe/): the form bodies sent and the
 * classification of every answer. The calls themselves are rsv_pay.h's.
 *
 * A charge is two exchanges: POST /v1/payment_intents (amount, currency, payment_method,
 * metadata; Idempotency-Key = the checkout id; no money moves) gives the intent's id, then
 * POST /v1/payment_intents/{id}/confirm (return_url; key "cf_" + checkout) moves the money.
 * A lookup repeats the create (Stripe replays its stored answer: the same id) and reads
 * GET /v1/payment_intents/{id}: what the intent is now. Why this shape: docs/api.md,
 * "resolving a charge whose answer never came".
 */
#ifndef RSV_PAY_STRIPE_H
#define RSV_PAY_STRIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rsv_pay.h"

typedef enum {
    RSV_PAY_STRIPE_CREATE,   /* POST /v1/payment_intents */
    RSV_PAY_STRIPE_CONFIRM,  /* POST /v1/payment_intents/{id}/confirm */
    RSV_PAY_STRIPE_RETRIEVE, /* GET /v1/payment_intents/{id} */
    RSV_PAY_STRIPE_REFUND,   /* POST /v1/refunds */
} rsv_pay_stripe_op_t;

/**
 * Classifies one answer (status 0 = none; body may be NULL; replayed: the answer carried
 * Idempotent-Replayed: true). Fills outcome, id, action_url, error_type, error_code.
 * CREATE: NONE with the intent's id when it awaits confirmation (the next step), NONE
 * without an id for a stored 5xx (the create never gave an id, so nothing was ever
 * confirmed), DECLINED for a 400 invalid_request_error (a refused payment method or
 * amount: no intent exists), else UNKNOWN. CONFIRM and RETRIEVE:
 * by the intent's status (succeeded PAID; requires_action ACTION; requires_payment_method
 * DECLINED after a failed attempt; requires_confirmation, canceled NONE; processing,
 * requires_capture UNKNOWN), a 402 card_error DECLINED, a 400
 * payment_intent_unexpected_state by the intent it carries. REFUND: REFUNDED or UNKNOWN.
 */
void rsv_pay_stripe_classify(rsv_pay_stripe_op_t op, int status, const char *body, size_t len,
                             bool replayed, rsv_pay_result_t *out);

/**
 * Parses GET /v1/payment_intents (pure). 0 with out filled (free with
 * rsv_pay_page_clear), or -1 when status is not 200 or the body is not a list. Entries
 * without an id are skipped.
 */
__attribute__((warn_unused_result)) int rsv_pay_stripe_parse_list(int status, const char *body,
                                                                  size_t len, rsv_pay_page_t *out);

/** The form bodies and the list's path (caller frees). */
char *rsv_pay_stripe_create_form(const rsv_pay_charge_req_t *req);
char *rsv_pay_stripe_confirm_form(const char *return_url);
char *rsv_pay_stripe_refund_form(const char *payment_id, int64_t amount);
char *rsv_pay_stripe_list_path(int64_t created_gte, const char *starting_after, int limit);

#endif
