/*
 * gw_metrics — see gw_metrics.h. Main thread: registration happens once, at start-up,
 * before any worker's loop counts.
 */
#include "gw_metrics.h"

#include <stdlib.h>

#include "cm_mem.h"

gw_metrics_t *gw_metrics_new(cm_metrics_t *reg)
{
    gw_metrics_t *m = cm_xcalloc(1, sizeof(*m));
    gw_queue_metrics_register(&m->queue, reg);
    gw_admit_metrics_register(&m->admit, reg);
    gw_dpop_metrics_register(&m->dpop, reg);
    gw_pow_metrics_register(&m->pow, reg);
    m->backend_errors = cm_metrics_counter(reg, "onsale_gateway_backend_errors_total",
                                           "requests answered 503 (Redis or signer failure)", NULL);
    gw_watermark_metrics_register(&m->watermark, reg);
    return m;
}

void gw_metrics_free(gw_metrics_t *m)
{
    free(m);
}
