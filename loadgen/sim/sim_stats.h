/*
 * sim_stats — HDR-style latency histograms (log-linear buckets: 64 sub-buckets per power
 * of two, so every recorded value is kept within 1.6 %) and per-second time series.
 * Pure; any thread, no locking (the simulator records from its one loop thread).
 */
#ifndef SIM_STATS_H
#define SIM_STATS_H

#include <jansson.h>
#include <stdint.h>

#define SIM_HIST_BUCKETS (64 * 40)

typedef struct sim_hist {
    uint64_t count;
    uint64_t min, max; /* microseconds */
    double sum;
    uint32_t b[SIM_HIST_BUCKETS];
} sim_hist_t;

/** Records one value in microseconds. */
void sim_hist_add(sim_hist_t *h, uint64_t us);

/** The value at quantile q (0..1) in microseconds, 0 when empty (upper bound of its
 * bucket, clamped to max). */
uint64_t sim_hist_quantile(const sim_hist_t *h, double q);

/** {"count","mean_ms","p50_ms","p90_ms","p99_ms","p999_ms","max_ms","buckets":[[ms,count]…]}
 * (non-empty buckets only). New reference. */
json_t *sim_hist_json(const sim_hist_t *h);

/** A per-second series of doubles, grown on demand (index = whole seconds). */
typedef struct sim_series {
    double *v;
    int n, cap;
} sim_series_t;

void sim_series_add(sim_series_t *s, int sec, double x);
void sim_series_set(sim_series_t *s, int sec, double x);
json_t *sim_series_json(const sim_series_t *s, int n);
void sim_series_free(sim_series_t *s);

/** Upper regularized incomplete gamma Q(a, x): the chi-square p-value is Q(df/2, x/2). */
double sim_stats_gamma_q(double a, double x);

#endif
