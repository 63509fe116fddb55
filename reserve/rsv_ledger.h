/*
 * rsv_ledger — reconciliation against the payment provider's own ledger (docs/design.md
 * invariant 8): finds money the reserve never heard of.
 *
 * A charge can land after its checkout gave up (the request sat in the network past the
 * lookup that answered "no charge", so the checkout was released). Nothing in Postgres
 * points at it. Every ledger_interval_ms this timer lists the provider's recent payments
 * (rsv_pay_list: GET /v1/payment_intents?created[gte]=…, newest first, page by page)
 * and asks Postgres, one statement per page (onsale_ledger_check), what each succeeded, unrefunded
 * charge's checkout says. A checkout that ended released or failed while the provider holds its
 * money moves to refunding with the charge id saved (written to checkout_transitions);
 * the reconciler then refunds it like any other, retrying until the provider confirms.
 *
 * Runs on the event-loop thread, one scan at a time, at most MAX_PAGES pages per scan.
 * A pass walks the list down to `since`, which then moves up to the pass's newest payment
 * less a few minutes (rsv_ledger.c), so each pass reads what is new and what may have
 * succeeded since it was created; a cut pass resumes from its cursor. A charge
 * whose checkout is still open (its saga resolves it) is remembered and checked again
 * on every scan until the checkout settles, however long that takes (the cursor is past
 * it: dropping it would lose that money if the checkout then ended unpaid); one still
 * open ledger_settle_s after its charge is logged once for an operator. The list is
 * bounded (RECHECK_MAX) and the cursor waits while it is full. Several
 * reserve processes may scan at once: the Postgres step is conditional on the state and
 * the refund's idempotency key is the checkout's, so the money goes back once.
 */
#ifndef RSV_LEDGER_H
#define RSV_LEDGER_H

#include <stdbool.h>
#include <stddef.h>

#include "cm_metrics.h"

typedef struct rsv_server rsv_server_t;
typedef struct rsv_ledger rsv_ledger_t;

/** What onsale_ledger_check said about a charge (metrics index). */
typedef enum {
    RSV_LEDGER_REFUNDING, /* its checkout had ended unpaid: now refunding */
    RSV_LEDGER_BOOKED,    /* its checkout is confirmed with it */
    RSV_LEDGER_OPEN,      /* its checkout's saga still runs */
    RSV_LEDGER_MISMATCH,  /* terminal with another charge, or refunded: for an operator */
    RSV_LEDGER_UNKNOWN,   /* no checkout of ours */
    RSV_LEDGER_NOUTCOMES
} rsv_ledger_outcome_t;

/** The outcome onsale_ledger_check names s ("refunding", "booked", "open", "mismatch",
 * "unknown"); RSV_LEDGER_UNKNOWN for any other text. Pure. */
rsv_ledger_outcome_t rsv_ledger_outcome_parse(const char *s);

/**
 * Appends v as one element of a Postgres text[] literal being built in *buf (heap; *len
 * bytes used, *cap allocated, grown as needed): double-quoted, \ and " escaped, a comma
 * before every element but the first. The caller opens with "{" and closes with "}".
 * Pure.
 */
void rsv_ledger_array_append(char **buf, size_t *len, size_t *cap, const char *v, bool first);

/** The outcomes' names, as onsale_ledger_check writes them (the `outcome` label). */
extern const char *const rsv_ledger_outcome_names[RSV_LEDGER_NOUTCOMES];

/* How reading a ledger page went (the `result` label of ledger_scans_total). */
typedef enum { RSV_LEDGER_SCAN_OK, RSV_LEDGER_SCAN_ERROR, RSV_LEDGER_SCAN_COUNT } rsv_ledger_scan_t;

extern const char *const rsv_ledger_scan_names[RSV_LEDGER_SCAN_COUNT];

/* The ledger check's series. */
typedef struct rsv_ledger_metrics {
    cm_counter_t *charges[RSV_LEDGER_NOUTCOMES]; /* succeeded, unrefunded charges seen */
    cm_counter_t *scans[RSV_LEDGER_SCAN_COUNT];  /* provider ledger pages read */
} rsv_ledger_metrics_t;

/** Registers the ledger check's series in reg and points lm at them. Main thread, at start. */
void rsv_ledger_metrics_register(rsv_ledger_metrics_t *lm, cm_metrics_t *reg);

/** Starts the timer (nothing when srv->cfg.ledger_interval_ms is 0). NULL then. */
rsv_ledger_t *rsv_ledger_new(rsv_server_t *srv);
/** Stops; the struct goes when the scan in flight ends. NULL is fine. */
void rsv_ledger_free(rsv_ledger_t *l);

#endif
