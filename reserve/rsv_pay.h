/*
 * rsv_pay — the reserve's client of the payment provider (docs/api.md, "payment provider"):
 * charge, look a charge up by idempotency key, refund, list the ledger's recent charges.
 * Asynchronous HTTP(S) on the event loop through libcurl's multi interface: connections
 * are kept alive and reused across calls, TLS sessions resumed, host names resolved off the
 * loop (libcurl's threaded resolver; the start-up log line says whether this build has
 * it), the certificate checked against the CA file and the URL's host.
 *
 * Runs on the event-loop thread that owns the base (one client per worker); never blocks.
 * Every call has two deadlines — connect (TCP and TLS established) and request (the whole
 * exchange); when one passes the transfer is abandoned and the caller gets
 * RSV_PAY_UNKNOWN with cm_err_timeout: a charge whose answer never came may or may not have
 * happened, and only a lookup by its idempotency key may tell. Transport retries are off:
 * the saga decides what to repeat. Answers are bounded (64 KiB, a ledger page 4 MiB;
 * larger → UNKNOWN with cm_err_protocol).
 *
 * Idempotency: charges are sent with Idempotency-Key = the checkout id, refunds with
 * "rf_" + the checkout id (the caller passes them), so repeating any call after a crash
 * is harmless.
 */
#ifndef RSV_PAY_H
#define RSV_PAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_metrics.h"

struct event_base;
typedef struct rsv_pay rsv_pay_t;

#define RSV_PAY_ID_MAX 64

typedef enum {
    RSV_PAY_PAID,     /* the charge succeeded (id = charge id) */
    RSV_PAY_DECLINED, /* the charge was refused; no money moved (id = charge id if any) */
    RSV_PAY_NONE,     /* lookup: the provider has no charge under that key */
    RSV_PAY_REFUNDED, /* the refund exists (id = refund id) */
    RSV_PAY_UNKNOWN,  /* no definite answer: timeout, transport error, 5xx, in progress */
    RSV_PAY_LISTED,   /* list: a page of the ledger (result->page) */
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

/** One charge of a ledger page. */
typedef struct rsv_pay_charge {
    char id[RSV_PAY_ID_MAX];
    char checkout[RSV_PAY_ID_MAX]; /* metadata.checkout, else the idempotency key, else "" */
    bool succeeded;                /* status "succeeded" */
    bool refunded;                 /* refunded (fully or in part) */
    int64_t amount;
    int64_t created; /* unix seconds */
} rsv_pay_charge_t;

/** A page of GET /v1/charges?created_gte=…: charges oldest first. */
typedef struct rsv_pay_page {
    rsv_pay_charge_t *items;
    size_t n;
    bool has_more;
} rsv_pay_page_t;

typedef struct rsv_pay_result {
    rsv_pay_outcome_t outcome;
    const char *err;            /* NULL when the provider answered, else a cm_err_* */
    int status;                 /* HTTP status, 0 when there was no answer */
    double seconds;             /* how long the call took */
    char id[RSV_PAY_ID_MAX];    /* charge or refund id, "" when unknown */
    const rsv_pay_page_t *page; /* LISTED: the page, else NULL */
} rsv_pay_result_t;

/** The result lives only during the callback. Called exactly once, always from the loop. */
typedef void (*rsv_pay_cb)(const rsv_pay_result_t *res, void *arg);

typedef struct rsv_pay_config {
    const char *url;     /* http(s)://<host name or IPv4>[:port][/prefix] */
    const char *ca_file; /* PEM CA bundle for https (NULL: the system store) */
    const char *api_key; /* sent as Authorization: Bearer (NULL: none) */
    int connect_timeout_ms;
    int timeout_ms;
} rsv_pay_config_t;

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
 * Classifies a provider answer (pure; unit-tested): status 0 = no answer. body may be
 * NULL. Fills out->outcome and out->id.
 */
void rsv_pay_classify(rsv_pay_op_t op, int status, const char *body, size_t len,
                      rsv_pay_result_t *out);

/**
 * A client for cfg (strings copied). Start-up only (the CA file is read). NULL with a
 * message in err.
 */
/**
 * Parses a list answer (pure; unit-tested). 0 with out filled (free with
 * rsv_pay_page_clear), or -1 when status is not 200 or the body is not a charge list.
 * Entries without an id are skipped.
 */
__attribute__((warn_unused_result)) int rsv_pay_parse_list(int status, const char *body, size_t len,
                                                           rsv_pay_page_t *out);
/** Frees what rsv_pay_parse_list allocated. NULL is fine. */
void rsv_pay_page_clear(rsv_pay_page_t *page);

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
 * POST /v1/charges {amount, currency, source, metadata:{event, checkout[, request_id]}}
 * with Idempotency-Key key; request_id (NULL or "" = not sent) is the checkout's request
 * id, so the provider's dashboard finds the charge by it. A repeated charge must send the
 * same request_id (the provider compares the parameters under one key). Returns 0 (cb
 * will be called) or -1 when shutting down.
 */
__attribute__((warn_unused_result)) int rsv_pay_charge(rsv_pay_t *p, const char *key,
                                                       int64_t amount, const char *currency,
                                                       const char *source, const char *event,
                                                       const char *request_id, rsv_pay_cb cb,
                                                       void *arg);
/** GET /v1/charges?idempotency_key=key: PAID, DECLINED, NONE or UNKNOWN. Same return. */
__attribute__((warn_unused_result)) int rsv_pay_lookup(rsv_pay_t *p, const char *key, rsv_pay_cb cb,
                                                       void *arg);
/**
 * POST /v1/refunds {charge[, amount]} with Idempotency-Key key: REFUNDED or UNKNOWN.
 * amount 0 refunds what is left of the charge, else that many minor units. Same return.
 */
__attribute__((warn_unused_result)) int rsv_pay_refund(rsv_pay_t *p, const char *key,
                                                       const char *charge_id, int64_t amount,
                                                       rsv_pay_cb cb, void *arg);
/**
 * GET /v1/charges?created_gte=…&limit=…[&starting_after=…]: LISTED (res->page, valid
 * during the callback) or UNKNOWN. starting_after NULL or "" for the first page.
 */
__attribute__((warn_unused_result)) int rsv_pay_list(rsv_pay_t *p, int64_t created_gte,
                                                     const char *starting_after, int limit,
                                                     rsv_pay_cb cb, void *arg);

#endif
