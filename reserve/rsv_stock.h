/*
 * rsv_stock — the stock feed: what is still buyable of each live event, published to
 * Redis for the gateway (docs/design.md, "The stock feed").
 *
 * Event-loop thread, one per worker. Every stock_interval_ms a worker takes, for each
 * event it keeps live, the interval's lock (os:{<event>}:stockl, SET NX PX: one rebuild
 * per interval per event across every worker and reserve), rebuilds the event's
 * availability snapshot (rsv_avail_refresh: exact at read time) and writes its totals
 * with reserve/lua/stock.lua into the hash os:{<event>}:stock — left, held, total,
 * version, at (Redis TIME, ms) — which expires after ten intervals (at least 5 s), so a
 * reserve that stops leaves no stock behind. An event is live while a hold, confirm,
 * release or availability request for it reached this worker within stock_idle_s, or
 * while the last published held is above zero (units may still come back). The gateway
 * may only read the hash: the seats, holds and pools stay the reserve's.
 */
#ifndef RSV_STOCK_H
#define RSV_STOCK_H

#include <stdint.h>

#include "cm_metrics.h"

typedef struct rsv_server rsv_server_t;
typedef struct rsv_stock rsv_stock_t;

/* One round of the feed for one event (the `outcome` label of stock_rounds_total). */
typedef enum {
    RSV_STOCK_PUBLISHED, /* this worker rebuilt the snapshot and wrote the hash */
    RSV_STOCK_ELSEWHERE, /* another worker or reserve holds this interval's lock */
    RSV_STOCK_FAILED,    /* Redis or Postgres did not answer: tried again next interval */
    RSV_STOCK_OUTCOME_COUNT
} rsv_stock_outcome_t;

extern const char *const rsv_stock_outcome_names[RSV_STOCK_OUTCOME_COUNT];

typedef struct rsv_stock_metrics {
    cm_counter_t *rounds[RSV_STOCK_OUTCOME_COUNT];
} rsv_stock_metrics_t;

/** Registers the feed's series in reg and points sm at them. Main thread, at start. */
void rsv_stock_metrics_register(rsv_stock_metrics_t *sm, cm_metrics_t *reg);

/** The longest life of the hash: ten intervals, at least 5 s. */
#define RSV_STOCK_TTL_MIN_MS    5000
#define RSV_STOCK_TTL_INTERVALS 10

/** The hash's PEXPIRE for interval_ms. Pure. */
int64_t rsv_stock_ttl_ms(int64_t interval_ms);
/** The lock's PX for interval_ms: a little under the interval, so the worker that took
 *  it finds it lapsed at its next tick. Pure. */
int64_t rsv_stock_lock_ms(int64_t interval_ms);

/** Starts the worker's feed timer (srv->cfg.stock_interval_ms; 0: NULL, no feed). */
rsv_stock_t *rsv_stock_new(rsv_server_t *srv);
/**
 * A request for event (one the catalogue knows) reached this worker: the event is live
 * for stock_idle_s from now. Cheap (a scan of the worker's live events). s NULL: nothing.
 */
void rsv_stock_touch(rsv_stock_t *s, const char *event);
/** Stops the timer; the struct goes with the last round in flight (whose callbacks come
 *  back with cm_err_shutdown as the worker's clients are freed). NULL is fine. */
void rsv_stock_free(rsv_stock_t *s);

#endif
