/*
 * rsv_pay — the reserve's client of the payment provider (docs/api.md, "payment provider"):
 * charge, look a charge up, refund, list the provider's recent payments. An interface with
 * one adapter per provider (rsv_pay_adapter.h); the one adapter today, rsv_pay_stripe.c,
 * speaks Stripe's PaymentIntents API (form bodies, Idempotency-Key, Stripe's error
 * object), which the simulator (loadgen/paysim) serves too. This file is the transport:
 * asynchronous HTTP(S) on the event loop through libcurl's multi interface: connections
 * are kept alive and reused across calls, TLS sessions resumed, host names resolved off the
 * loop (libcurl's threaded resolver; the start-up log line says whether this build has
 * it), the certificate checked against the CA file and the URL's host.
 *
 * Runs on the event-loop thread that owns the base (one client per worker); never blocks.
 * Every HTTP exchange has two deadlines — connect (TCP and TLS established) and request
 * (the whole exchange); when one passes the transfer is abandoned and the caller gets
 * RSV_PAY_UNKNOWN with cm_err_timeout: a charge whose answer never came may or may not have
 * happened, and only a lookup may tell. Transport retries are off: the saga decides what
 * to repeat. Answers are bounded (64 KiB, a list page 4 MiB; larger → UNKNOWN with
 * cm_err_protocol).
 *
 * Idempotency: a charge is created with Idempotency-Key = the checkout id and confirmed
 * with "cf_" + the checkout id (+ "_<attempt>" on a retry), refunds with "rf_" + the
 * checkout id (the caller passes the keys), so repeating any call after a crash is harmless.
 */
#ifndef RSV_PAY_H
#define RSV_PAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_metrics.h"

struct event_base;
typedef struct rsv_pay rsv_pay_t;

#define RSV_PAY_ID_MAX  64
#define RSV_PAY_URL_MAX 1024
#define RSV_PAY_ERR_MAX 64

typedef enum {
    RSV_PAY_PAID,     /* the charge succeeded (id = payment id) */
    RSV_PAY_DECLINED, /* the charge was refused; no money moved (id = payment id if any) */
    RSV_PAY_NONE,     /* lookup: no money moved under that checkout (none was confirmed) */
    RSV_PAY_REFUNDED, /* the refund exists (id = refund id) */
    RSV_PAY_UNKNOWN,  /* no definite answer: timeout, transport error, 5xx, in progress */
    RSV_PAY_LISTED,   /* list: a page of payments (result->page) */
    RSV_PAY_ACTION,   /* the buyer must act first (3-D Secure): result->action_url; not yet
                         decided — a lookup tells later */
    RSV_PAY_OUTCOME_COUNT
} rsv_pay_outcome_t;

/** The outcomes' names (the `outcome` label of payment_outcomes_total). */
extern const char *const rsv_pay_outcome_names[RSV_PAY_OUTCOME_COUNT];

typedef enum {
    RSV_PAY_OP_CHARGE,
    RSV_PAY_OP_LOOKUP,
    RSV_PAY_OP_REFUND,
    RSV_PAY_OP_LIST,
    RSV_PAY_OP_COUNT
} rsv_pay_op_t;

/** The operations' names (the `op` label of payment_seconds). */
extern const char *const rsv_pay_op_names[RSV_PAY_OP_COUNT];

/*
 * The payment series, counted by the saga that reads the answers. A list (the ledger's
 * background pages) is not timed: latency[RSV_PAY_OP_LIST] stays NULL.
 */
typedef struct rsv_pay_metrics {
    cm_counter_t *outcomes[RSV_PAY_OUTCOME_COUNT];
    cm_histogram_t *latency[RSV_PAY_OP_COUNT];
} rsv_pay_metrics_t;

/** Registers the payment series in reg and points pm at them. Main thread, at start. */
void rsv_pay_metrics_register(rsv_pay_metrics_t *pm, cm_metrics_t *reg);

/** One payment of a list page. */
typedef struct rsv_pay_charge {
    char id[RSV_PAY_ID_MAX];
    char checkout[RSV_PAY_ID_MAX]; /* metadata.checkout, else "" (not ours) */
    bool succeeded;                /* status "succeeded" */
    bool refunded;                 /* refunded (fully or in part) */
    int64_t amount;
    int64_t created; /* unix seconds */
} rsv_pay_charge_t;

/** A page of a payment list, newest first (as Stripe lists). */
typedef struct rsv_pay_page {
    rsv_pay_charge_t *items;
    size_t n;
    bool has_more;
} rsv_pay_page_t;

/** Frees a page's items (a list parser allocated them). NULL is fine. */
void rsv_pay_page_clear(rsv_pay_page_t *page);

typedef struct rsv_pay_result {
    rsv_pay_outcome_t outcome;
    const char *err;                  /* NULL when the provider answered, else a cm_err_* */
    int status;                       /* HTTP status of the last exchange, 0: no answer */
    double seconds;                   /* how long the call took (all its exchanges) */
    char id[RSV_PAY_ID_MAX];          /* payment or refund id, "" when unknown */
    char action_url[RSV_PAY_URL_MAX]; /* ACTION: next_action.redirect_to_url.url, or "" */
    char error_type[RSV_PAY_ERR_MAX]; /* the provider's error.type, "" without one */
    char error_code[RSV_PAY_ERR_MAX]; /* error.code (or decline_code), "" without one */
    const rsv_pay_page_t *page;       /* LISTED: the page, else NULL */
} rsv_pay_result_t;

/** The result lives only during the callback. Called exactly once, always from the loop. */
typedef void (*rsv_pay_cb)(const rsv_pay_result_t *res, void *arg);

typedef struct rsv_pay_config {
    const char *url;        /* http(s)://<host name or IPv4>[:port][/prefix] */
    const char *ca_file;    /* PEM CA bundle for https (NULL: the system store) */
    const char *api_key;    /* sent as Authorization: Bearer (NULL: none) */
    const char *return_url; /* where a 3-D Secure page sends the buyer back (NULL: a default) */
    int connect_timeout_ms;
    int timeout_ms;
} rsv_pay_config_t;

/* The return_url without one configured (the reserve passes pay_return_url). */
#define RSV_PAY_RETURN_URL "https://localhost/shop/"

/** What a charge is, for rsv_pay_charge and rsv_pay_lookup (strings borrowed). */
typedef struct rsv_pay_charge_req {
    const char *key;            /* the checkout id: the create's Idempotency-Key */
    int attempt;                /* 0, or the saga's retry number (a fresh confirm key) */
    int64_t amount;             /* in the currency's smallest unit */
    const char *currency;       /* ISO 4217, any case */
    const char *payment_method; /* NULL or "": pm_card_visa */
    const char *event;
    const char *request_id; /* NULL or "": not sent */
} rsv_pay_charge_req_t;

/** A parsed provider URL (rsv_pay_parse_url). */
typedef struct rsv_pay_url {
    bool tls;
    char host[256]; /* a host name or an IPv4 literal */
    int port;
    char prefix[128]; /* path prefix without the trailing '/', "" for none */
} rsv_pay_url_t;

/**
 * Parses url. Returns 0, or -1 (not http/https, a host that is not a plain name or IPv4
 * literal — no user info, IPv6 brackets or escapes —, bad port, query or fragment).
 */
__attribute__((warn_unused_result)) int rsv_pay_parse_url(const char *url, rsv_pay_url_t *out);

/**
 * A client for cfg (strings copied) with the provider's adapter. Start-up only (the CA
 * file is read). NULL with a message in err.
 */
rsv_pay_t *rsv_pay_new(struct event_base *base, const rsv_pay_config_t *cfg, char *err,
                       size_t errlen);
/**
 * The provider key from now on (a reload; NULL or "": none). Any thread: a request being
 * sent uses the key it read, the next one the new key. True when the key changed.
 */
bool rsv_pay_set_api_key(rsv_pay_t *p, const char *key);

/** Closes every call in flight (each callback gets UNKNOWN + cm_err_shutdown), frees. */
void rsv_pay_free(rsv_pay_t *p);
/** Calls in flight. */
int rsv_pay_inflight(const rsv_pay_t *p);

/**
 * Charges req: creates the payment (idempotent under req->key, no money moves) and
 * confirms it (key "cf_" + key [+ "_" + attempt]). PAID, DECLINED, ACTION or UNKNOWN.
 * A repeated charge must send the same req (the provider compares the parameters under
 * one key). Returns 0 (cb will be called) or -1 when shutting down.
 */
__attribute__((warn_unused_result)) int
rsv_pay_charge(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg);
/**
 * Asks what became of req's charge without moving money: PAID, DECLINED, NONE (nothing
 * was confirmed, or the confirmation failed), ACTION or UNKNOWN. Same return.
 */
__attribute__((warn_unused_result)) int
rsv_pay_lookup(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg);
/**
 * Refunds payment_id with Idempotency-Key key: amount (smallest unit) or 0 for all that
 * is left. REFUNDED (also when a full refund finds it refunded already) or UNKNOWN (an
 * over-refund: UNKNOWN with error_code amount_too_large). Same return.
 */
__attribute__((warn_unused_result)) int rsv_pay_refund(rsv_pay_t *p, const char *key,
                                                       const char *payment_id, int64_t amount,
                                                       rsv_pay_cb cb, void *arg);
/**
 * Cancels payment_id (a 3-D Secure challenge nobody answered) with Idempotency-Key key:
 * NONE when it is canceled (no money moved, now or ever), PAID or DECLINED when it had
 * settled first (the intent as it is), UNKNOWN otherwise. Same return.
 */
__attribute__((warn_unused_result)) int
rsv_pay_cancel(rsv_pay_t *p, const char *key, const char *payment_id, rsv_pay_cb cb, void *arg);
/**
 * The payments created at or after created_gte, newest first, limit a page, after
 * starting_after (NULL or "" for the first page): LISTED (res->page, valid during the
 * callback) or UNKNOWN.
 */
__attribute__((warn_unused_result)) int rsv_pay_list(rsv_pay_t *p, int64_t created_gte,
                                                     const char *starting_after, int limit,
                                                     rsv_pay_cb cb, void *arg);

#endif
