/*
 * gw_metrics — the gateway's series, gathered: one struct per module that counts them
 * (each declared and registered in its module's header: gw_queue, gw_admit, gw_dpop,
 * gw_pow, gw_watermark), and the replies' backend_errors.
 *
 * One gw_metrics_t per process, made with worker 0 and borrowed by the others (the
 * registry's series are shared and thread-safe; the struct is read-only once made). It
 * lives apart from gw_req.h because those modules' headers include gw_req.h: the worker
 * instance holds a pointer, and a handler that counts includes this header.
 */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include "cm_metrics.h"
#include "gw_admit.h"
#include "gw_dpop.h"
#include "gw_pow.h"
#include "gw_queue.h"
#include "gw_watermark.h"

struct gw_metrics {
    gw_queue_metrics_t queue;
    gw_admit_metrics_t admit;
    gw_dpop_metrics_t dpop;
    gw_pow_metrics_t pow;
    cm_counter_t *backend_errors; /* 503s for a Redis or signer failure (gw_reply_unavailable) */
    gw_watermark_metrics_t watermark;
};

/** Registers every module's series in reg; the caller frees the result (gw_metrics_free).
 *  Main thread, at start. */
gw_metrics_t *gw_metrics_new(cm_metrics_t *reg);
/** NULL is fine; the series stay the registry's. */
void gw_metrics_free(gw_metrics_t *m);

#endif
