/*
 * cm_metrics — a Prometheus registry: counters, gauges and histograms, rendered in
 * the text exposition format (version 0.0.4) for GET /metrics.
 *
 * Thread-safe: one registry serves every worker thread of a process (so /metrics shows
 * totals). Updates are relaxed atomics with no lookup, because callers keep the
 * returned pointer; registration and render take the registry's lock. Series live as
 * long as the registry. Series of one name with different label sets share one
 * HELP/TYPE block.
 */
#ifndef CM_METRICS_H
#define CM_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct cm_metrics cm_metrics_t;
typedef struct cm_counter cm_counter_t;
typedef struct cm_gauge cm_gauge_t;
typedef struct cm_histogram cm_histogram_t;

cm_metrics_t *cm_metrics_new(void);
void cm_metrics_free(cm_metrics_t *m);

/**
 * Registers a series. name: [a-zA-Z_:][a-zA-Z0-9_:]*; labels: NULL or the inside of the
 * braces, already formatted, e.g. "endpoint=\"hold\",code=\"201\"". Registering the same
 * name and labels twice returns the first series. Aborts on a malformed name (a
 * programming error, not input).
 */
cm_counter_t *cm_metrics_counter(cm_metrics_t *m, const char *name, const char *help,
                                 const char *labels);
cm_gauge_t *cm_metrics_gauge(cm_metrics_t *m, const char *name, const char *help,
                             const char *labels);
/**
 * A gauge whose value is read from fn(arg) at render time, on the scraping thread.
 * Registering the same name and labels again adds a function: the series renders the
 * sum (one function per worker gives the process total).
 */
void cm_metrics_gauge_fn(cm_metrics_t *m, const char *name, const char *help, const char *labels,
                         double (*fn)(void *arg), void *arg);
/**
 * One series per value of a label: out[i] is name{key="values[i]"}, registered in the
 * order of values (an enum's names table, so out is indexed by the enum). Values are
 * label-safe words (no quote or backslash), under 60 characters with their key.
 */
void cm_metrics_counters(cm_metrics_t *m, const char *name, const char *help, const char *key,
                         const char *const *values, size_t n, cm_counter_t **out);
void cm_metrics_gauges(cm_metrics_t *m, const char *name, const char *help, const char *key,
                       const char *const *values, size_t n, cm_gauge_t **out);
/** bounds: ascending upper bounds (the +Inf bucket is implicit); copied. */
cm_histogram_t *cm_metrics_histogram(cm_metrics_t *m, const char *name, const char *help,
                                     const char *labels, const double *bounds, size_t nbounds);

/**
 * Like cm_metrics_gauge_fn, but the series renders the least of its functions: a
 * "<thing>_up" that is 1 only while every worker's connection is up.
 */
void cm_metrics_gauge_fn_min(cm_metrics_t *m, const char *name, const char *help,
                             const char *labels, double (*fn)(void *arg), void *arg);
/** A counter whose value is read from fn(arg) at render time (sums like gauge_fn). */
void cm_metrics_counter_fn(cm_metrics_t *m, const char *name, const char *help, const char *labels,
                           double (*fn)(void *arg), void *arg);

/**
 * Request latency histograms name{endpoint="<endpoints[i]>",code="<status>"} with the
 * latency buckets below. A series is registered the first time its endpoint and status
 * code are observed, so the label set stays bounded by the route table times the codes
 * the service answers (codes outside 100–599 are code="other"). Owned by the registry
 * (freed with it). Any thread.
 */
typedef struct cm_metrics_requests cm_metrics_requests_t;
cm_metrics_requests_t *cm_metrics_requests(cm_metrics_t *m, const char *name, const char *help,
                                           const char *const *endpoints, size_t n);
/** The series of one endpoint index and status code (registering it on first use). */
cm_histogram_t *cm_metrics_requests_series(cm_metrics_requests_t *r, size_t endpoint, int code);
void cm_metrics_requests_observe(cm_metrics_requests_t *r, size_t endpoint, int code,
                                 double seconds);

/**
 * Registers the process_* series Prometheus clients export: CPU seconds, resident and
 * virtual memory, open and maximum file descriptors, start time. Read from /proc/self at
 * render time (the scraping thread; the kernel builds these files on read). Main thread,
 * at start (it reads /proc/stat once for the start time).
 */
void cm_metrics_process(cm_metrics_t *m);

/** Latency buckets in seconds, 0.5 ms … 10 s, for request histograms. */
extern const double cm_metrics_latency_bounds[];
extern const size_t cm_metrics_latency_nbounds;

void cm_counter_inc(cm_counter_t *c);
void cm_counter_add(cm_counter_t *c, uint64_t n);
uint64_t cm_counter_value(const cm_counter_t *c);
void cm_gauge_set(cm_gauge_t *g, double v);
void cm_gauge_add(cm_gauge_t *g, double delta);
double cm_gauge_value(const cm_gauge_t *g);
void cm_histogram_observe(cm_histogram_t *h, double v);
uint64_t cm_histogram_count(const cm_histogram_t *h);

/** Renders every series; returns a heap string (caller frees) and its length in *len. */
char *cm_metrics_render(const cm_metrics_t *m, size_t *len);

#endif
