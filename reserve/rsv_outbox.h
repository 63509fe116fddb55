/*
 * rsv_outbox — the deliverer of events out (docs/api.md, "Events out"): the rows the
 * outbox table (deploy/sql/009_outbox.sql) holds, POSTed to the operator's events_url,
 * signed with cm_hmacsig, at least once, in order per key.
 *
 * Runs on one worker's event loop (worker 0; several reserve processes are safe: rows are
 * claimed with FOR UPDATE SKIP LOCKED and a lease). Postgres through rsv_pg, the POSTs
 * through a libcurl multi handle of its own on the same loop; nothing blocks.
 */
#ifndef RSV_OUTBOX_H
#define RSV_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "cm_hmacsig.h"
#include "cm_metrics.h"

struct event_base;
typedef struct rsv_pg rsv_pg_t;
typedef struct rsv_outbox rsv_outbox_t;

/* How one delivery ended (the `outcome` label of events_deliveries_total). */
typedef enum {
    RSV_OUTBOX_DELIVERED, /* the receiver answered 2xx */
    RSV_OUTBOX_REFUSED,   /* the receiver answered another status: retried */
    RSV_OUTBOX_TIMEOUT,   /* no answer within events_timeout_ms: retried */
    RSV_OUTBOX_FAILED,    /* no connection, or it broke: retried */
    RSV_OUTBOX_OUTCOME_COUNT
} rsv_outbox_outcome_t;

extern const char *const rsv_outbox_outcome_names[RSV_OUTBOX_OUTCOME_COUNT];

/** The deliverer's settings (rsv_config's events_* keys). */
typedef struct rsv_outbox_config {
    const char *url;         /* NULL or "": rows are kept, nothing is sent */
    const char *ca_file;     /* PEM bundle for the receiver's certificate; NULL: system */
    const char *secret_file; /* owner-only: one secret a line, the first signs */
    int connect_timeout_ms, timeout_ms;
    int poll_ms;         /* how often due events are looked for */
    int batch;           /* deliveries in flight at most */
    int retry_base_ms;   /* the first retry's delay; doubled each attempt */
    int retry_max_ms;    /* the cap of the delay */
    int64_t retention_s; /* how long a delivered row is kept */
} rsv_outbox_config_t;

/** The deliverer's series. */
typedef struct rsv_outbox_metrics {
    cm_counter_t *deliveries[RSV_OUTBOX_OUTCOME_COUNT];
    cm_gauge_t *pending; /* undelivered events (refreshed every few seconds) */
    cm_gauge_t *oldest;  /* age (s) of the oldest undelivered event, 0: none */
} rsv_outbox_metrics_t;

/** A set of signing secrets read from a file; the first signs, every one verifies. */
typedef struct rsv_outbox_secrets {
    char *text;      /* the file's text, split in place */
    size_t text_len; /* its length before the split, for the wipe */
    size_t n;
    cm_hmacsig_secret_t s[8];
} rsv_outbox_secrets_t;

/**
 * Splits text (a heap string, taken in every case: owned by the result and wiped when it
 * is freed, or wiped and freed at once on error) into secrets: one a line, blank lines
 * and surrounding spaces skipped, each at least 16 bytes, at most 8. NULL with a message
 * in err otherwise. Pure, any thread.
 */
rsv_outbox_secrets_t *rsv_outbox_secrets_parse(char *text, char *err, size_t errlen);
/** Reads path (cm_config_read_secret: owner-only) and parses it. Blocking file I/O:
 *  start-up or the reload thread. */
rsv_outbox_secrets_t *rsv_outbox_secrets_read(const char *path, char *err, size_t errlen);
/** Wipes and frees; NULL is fine. */
void rsv_outbox_secrets_free(rsv_outbox_secrets_t *s);

/**
 * The delay before the next try after `attempts` failed ones (1 = the first): base × 2^
 * (attempts − 1), capped at max, then "equal jitter": half of it fixed and the other half
 * scaled by rnd / 2^32, so retries of many events spread out. Pure.
 */
int64_t rsv_outbox_backoff_ms(int attempts, int base_ms, int max_ms, uint32_t rnd);

/**
 * Starts the deliverer on base (its loop's thread from then on): registers its series in
 * reg, reads the secrets (start-up: blocking read), and starts its timers. With no url
 * only the gauges are kept. NULL with a message in err (a bad URL or secret file).
 */
rsv_outbox_t *rsv_outbox_new(struct event_base *base, rsv_pg_t *pg, cm_metrics_t *reg,
                             const rsv_outbox_config_t *cfg, char *err, size_t errlen);

/** Replaces the secrets (owned; SIGHUP: the reload thread reads the file, the loop signs
 *  with the new first secret from its next delivery). NULL changes nothing; secrets for
 *  an outbox that does not deliver are freed. Any thread. */
void rsv_outbox_set_secrets(rsv_outbox_t *o, rsv_outbox_secrets_t *secrets);

/** Deliveries in flight. */
int rsv_outbox_inflight(const rsv_outbox_t *o);

/** Stops: abandons the POSTs in flight (their rows' leases lapse and they are sent again),
 *  frees. Its loop's thread; NULL is fine. Must run before pg is freed. */
void rsv_outbox_free(rsv_outbox_t *o);

#endif
