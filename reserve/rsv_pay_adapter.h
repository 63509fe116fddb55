/*
 * rsv_pay_adapter — the seam between rsv_pay's transport (rsv_pay.c: libcurl on the loop)
 * and a provider's adapter (rsv_pay_stripe.c): what an adapter implements, and the one
 * HTTP exchange the transport offers it. Loop thread only, like rsv_pay.
 */
#ifndef RSV_PAY_ADAPTER_H
#define RSV_PAY_ADAPTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rsv_pay.h"

/** A provider: the five calls of rsv_pay.h, same contracts. */
typedef struct rsv_pay_adapter {
    const char *name;
    int (*charge)(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg);
    int (*lookup)(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg);
    int (*refund)(rsv_pay_t *p, const char *key, const char *payment_id, int64_t amount,
                  rsv_pay_cb cb, void *arg);
    int (*list)(rsv_pay_t *p, int64_t created_gte, const char *starting_after, int limit,
                rsv_pay_cb cb, void *arg);
    int (*cancel)(rsv_pay_t *p, const char *key, const char *payment_id, rsv_pay_cb cb, void *arg);
} rsv_pay_adapter_t;

/** Stripe's PaymentIntents API (rsv_pay_stripe.c). */
extern const rsv_pay_adapter_t rsv_pay_stripe;

/** One HTTP exchange's answer. Valid during the callback only. */
typedef struct rsv_pay_answer {
    int status;       /* 0: no answer (err says why) */
    const char *err;  /* NULL, or cm_err_timeout / _protocol / _closed / _shutdown */
    const char *body; /* NUL-terminated, NULL when empty */
    size_t len;
    bool replayed; /* the provider said Idempotent-Replayed: true (a stored answer) */
    double seconds;
} rsv_pay_answer_t;

typedef void (*rsv_pay_answer_cb)(const rsv_pay_answer_t *a, void *arg);

/**
 * Sends one request: GET path, or POST path with form (application/x-www-form-urlencoded)
 * and, when key is not NULL, Idempotency-Key: key. big: the answer may be a list page (4
 * MiB bound instead of 64 KiB). 0 (cb runs later, exactly once) or -1 when shutting down.
 */
__attribute__((warn_unused_result)) int rsv_pay_http(rsv_pay_t *p, bool post, const char *path,
                                                     const char *key, const char *form, bool big,
                                                     rsv_pay_answer_cb cb, void *arg);
/** The return_url a confirmation sends (rsv_pay_config_t). */
const char *rsv_pay_return_url(const rsv_pay_t *p);

#endif
