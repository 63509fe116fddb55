/*
 * cm_metrics — the Prometheus registry behind GET /metrics on both services.
 *
 * Owns every family (one name, one HELP/TYPE) and every series under it (one label
 * set). One registry serves every worker thread of a process, so /metrics shows totals:
 * updates are relaxed atomics (a counter increment is one locked add, an observation a
 * short scan of ~14 bounds plus three atomic adds); registration and rendering take one
 * mutex (registration happens at start-up and when a new room appears, rendering once a
 * scrape). Series are allocated one by one and never move, so the pointer a caller keeps
 * is its whole hot path. Buckets are stored per bucket and made cumulative while
 * rendering; families are walked in registration order so the output is stable and
 * diffable. A gauge function registered several times under one name and label set
 * (once per worker) renders the sum of its functions.
 */
#include "cm_metrics.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"

typedef enum { FAM_COUNTER, FAM_GAUGE, FAM_HISTOGRAM } family_type_t;
typedef enum { SER_COUNTER, SER_GAUGE, SER_GAUGE_FN, SER_HISTOGRAM } series_kind_t;

struct cm_counter {
    uint64_t value; /* atomic */
};

struct cm_gauge {
    uint64_t bits; /* atomic: the double's bit pattern */
};

struct cm_histogram {
    double *bounds;
    size_t nbounds;
    uint64_t *buckets; /* nbounds + 1 (the last is +Inf); not cumulative; atomic */
    uint64_t count;    /* atomic */
    uint64_t sum_bits; /* atomic: the double's bit pattern */
};

typedef struct gauge_fn {
    double (*fn)(void *arg);
    void *arg;
} gauge_fn_t;

typedef struct series {
    series_kind_t kind;
    char *labels; /* NULL when the series has none */
    union {
        cm_counter_t counter;
        cm_gauge_t gauge;
        cm_histogram_t histogram;
        struct {
            gauge_fn_t *v;
            size_t n;
        } gauge_fn;
    } u;
} series_t;

typedef struct family {
    char *name;
    char *help;
    family_type_t type;
    series_t **series;
    size_t nseries;
} family_t;

struct cm_metrics {
    pthread_mutex_t lock; /* registration and render */
    family_t **families;
    size_t nfamilies;
};

static double bits_to_double(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof(d));
    return d;
}

static uint64_t double_to_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof(b));
    return b;
}

static void atomic_add_double(uint64_t *bits, double delta)
{
    uint64_t old = __atomic_load_n(bits, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(bits, &old, double_to_bits(bits_to_double(old) + delta),
                                        true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

const double cm_metrics_latency_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,    0.25,  0.5,    1,     2.5,  5,     10};
const size_t cm_metrics_latency_nbounds =
    sizeof(cm_metrics_latency_bounds) / sizeof(cm_metrics_latency_bounds[0]);

cm_metrics_t *cm_metrics_new(void)
{
    cm_metrics_t *m = cm_xcalloc(1, sizeof(cm_metrics_t));
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

static void series_free(series_t *s)
{
    if (s->kind == SER_HISTOGRAM) {
        free(s->u.histogram.bounds);
        free(s->u.histogram.buckets);
    }
    if (s->kind == SER_GAUGE_FN)
        free(s->u.gauge_fn.v);
    free(s->labels);
    free(s);
}

void cm_metrics_free(cm_metrics_t *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nfamilies; i++) {
        family_t *f = m->families[i];
        for (size_t j = 0; j < f->nseries; j++)
            series_free(f->series[j]);
        free(f->series);
        free(f->name);
        free(f->help);
        free(f);
    }
    free(m->families);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static bool valid_name(const char *name)
{
    if (name == NULL || name[0] == '\0' || (name[0] >= '0' && name[0] <= '9'))
        return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == ':'))
            return false;
    }
    return true;
}

static void misuse(const char *what, const char *name)
{
    fprintf(stderr, "cm_metrics: %s: %s\n", what, name ? name : "(null)");
    abort();
}

static family_t *get_family(cm_metrics_t *m, const char *name, const char *help, family_type_t type)
{
    if (!valid_name(name))
        misuse("malformed metric name", name);
    for (size_t i = 0; i < m->nfamilies; i++) {
        family_t *f = m->families[i];
        if (strcmp(f->name, name) == 0) {
            if (f->type != type)
                misuse("metric registered with two types", name);
            return f;
        }
    }
    family_t *f = cm_xcalloc(1, sizeof(*f));
    f->name = cm_xstrdup(name);
    f->help = cm_xstrdup(help ? help : "");
    f->type = type;
    m->families = cm_xrealloc(m->families, (m->nfamilies + 1) * sizeof(*m->families));
    m->families[m->nfamilies++] = f;
    return f;
}

/*
 * The series of f with these labels, or a new one of the given kind. *created tells
 * which, so the caller initialises only new series.
 */
static series_t *get_series(family_t *f, const char *labels, series_kind_t kind, bool *created)
{
    if (labels != NULL && labels[0] == '\0')
        labels = NULL;
    for (size_t i = 0; i < f->nseries; i++) {
        series_t *s = f->series[i];
        if ((s->labels == NULL && labels == NULL) ||
            (s->labels != NULL && labels != NULL && strcmp(s->labels, labels) == 0)) {
            if (s->kind != kind)
                misuse("series registered twice with different kinds", f->name);
            *created = false;
            return s;
        }
    }
    series_t *s = cm_xcalloc(1, sizeof(*s));
    s->kind = kind;
    s->labels = labels ? cm_xstrdup(labels) : NULL;
    f->series = cm_xrealloc(f->series, (f->nseries + 1) * sizeof(*f->series));
    f->series[f->nseries++] = s;
    *created = true;
    return s;
}

cm_counter_t *cm_metrics_counter(cm_metrics_t *m, const char *name, const char *help,
                                 const char *labels)
{
    bool created;
    pthread_mutex_lock(&m->lock);
    family_t *f = get_family(m, name, help, FAM_COUNTER);
    cm_counter_t *c = &get_series(f, labels, SER_COUNTER, &created)->u.counter;
    pthread_mutex_unlock(&m->lock);
    return c;
}

cm_gauge_t *cm_metrics_gauge(cm_metrics_t *m, const char *name, const char *help,
                             const char *labels)
{
    bool created;
    pthread_mutex_lock(&m->lock);
    family_t *f = get_family(m, name, help, FAM_GAUGE);
    cm_gauge_t *g = &get_series(f, labels, SER_GAUGE, &created)->u.gauge;
    pthread_mutex_unlock(&m->lock);
    return g;
}

void cm_metrics_gauge_fn(cm_metrics_t *m, const char *name, const char *help, const char *labels,
                         double (*fn)(void *arg), void *arg)
{
    bool created;
    pthread_mutex_lock(&m->lock);
    family_t *f = get_family(m, name, help, FAM_GAUGE);
    series_t *s = get_series(f, labels, SER_GAUGE_FN, &created);
    s->u.gauge_fn.v = cm_xrealloc(s->u.gauge_fn.v, (s->u.gauge_fn.n + 1) * sizeof(gauge_fn_t));
    s->u.gauge_fn.v[s->u.gauge_fn.n++] = (gauge_fn_t){fn, arg};
    pthread_mutex_unlock(&m->lock);
}

cm_histogram_t *cm_metrics_histogram(cm_metrics_t *m, const char *name, const char *help,
                                     const char *labels, const double *bounds, size_t nbounds)
{
    bool created;
    for (size_t i = 1; i < nbounds; i++) {
        if (!(bounds[i - 1] < bounds[i]))
            misuse("histogram bounds not ascending", name);
    }
    pthread_mutex_lock(&m->lock);
    family_t *f = get_family(m, name, help, FAM_HISTOGRAM);
    series_t *s = get_series(f, labels, SER_HISTOGRAM, &created);
    cm_histogram_t *h = &s->u.histogram;
    if (created) {
        h->nbounds = nbounds;
        h->bounds = cm_xmalloc(nbounds * sizeof(double));
        memcpy(h->bounds, bounds, nbounds * sizeof(double));
        h->buckets = cm_xcalloc(nbounds + 1, sizeof(uint64_t));
    }
    pthread_mutex_unlock(&m->lock);
    return h;
}

void cm_counter_inc(cm_counter_t *c)
{
    __atomic_fetch_add(&c->value, 1, __ATOMIC_RELAXED);
}

void cm_counter_add(cm_counter_t *c, uint64_t n)
{
    __atomic_fetch_add(&c->value, n, __ATOMIC_RELAXED);
}

uint64_t cm_counter_value(const cm_counter_t *c)
{
    return __atomic_load_n(&c->value, __ATOMIC_RELAXED);
}

void cm_gauge_set(cm_gauge_t *g, double v)
{
    __atomic_store_n(&g->bits, double_to_bits(v), __ATOMIC_RELAXED);
}

void cm_gauge_add(cm_gauge_t *g, double delta)
{
    atomic_add_double(&g->bits, delta);
}

double cm_gauge_value(const cm_gauge_t *g)
{
    return bits_to_double(__atomic_load_n(&g->bits, __ATOMIC_RELAXED));
}

void cm_histogram_observe(cm_histogram_t *h, double v)
{
    size_t i = 0;
    while (i < h->nbounds && !(v <= h->bounds[i]))
        i++;
    /* NaN fails every <= and lands in +Inf, as Prometheus clients do */
    __atomic_fetch_add(&h->buckets[i], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
    atomic_add_double(&h->sum_bits, v);
}

uint64_t cm_histogram_count(const cm_histogram_t *h)
{
    return __atomic_load_n(&h->count, __ATOMIC_RELAXED);
}

/* ---- rendering ---- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_put(buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap)
            b->cap = b->cap ? b->cap * 2 : 4096;
        b->p = cm_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_str(buf_t *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* Shortest of %.15g / %.17g that reads back as the same double; Prometheus spellings of
 * the non-finite values. */
static void buf_double(buf_t *b, double v)
{
    char tmp[40];
    if (isnan(v))
        snprintf(tmp, sizeof(tmp), "NaN");
    else if (isinf(v))
        snprintf(tmp, sizeof(tmp), v > 0 ? "+Inf" : "-Inf");
    else {
        snprintf(tmp, sizeof(tmp), "%.15g", v);
        if (strtod(tmp, NULL) != v)
            snprintf(tmp, sizeof(tmp), "%.17g", v);
    }
    buf_str(b, tmp);
}

static void buf_u64(buf_t *b, uint64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
    buf_str(b, tmp);
}

/* HELP text escapes backslash and newline (exposition format 0.0.4). */
static void buf_help(buf_t *b, const char *help)
{
    for (const char *p = help; *p; p++) {
        if (*p == '\\')
            buf_str(b, "\\\\");
        else if (*p == '\n')
            buf_str(b, "\\n");
        else
            buf_put(b, p, 1);
    }
}

/* "name[suffix]{labels[,extra]} " — the series key up to its value. */
static void buf_key(buf_t *b, const char *name, const char *suffix, const char *labels,
                    const char *extra)
{
    buf_str(b, name);
    buf_str(b, suffix);
    if (labels != NULL || extra != NULL) {
        buf_str(b, "{");
        if (labels != NULL)
            buf_str(b, labels);
        if (labels != NULL && extra != NULL)
            buf_str(b, ",");
        if (extra != NULL)
            buf_str(b, extra);
        buf_str(b, "}");
    }
    buf_str(b, " ");
}

static void render_histogram(buf_t *b, const char *name, const series_t *s)
{
    const cm_histogram_t *h = &s->u.histogram;
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        buf_t le = {0};
        buf_str(&le, "le=\"");
        if (i < h->nbounds)
            buf_double(&le, h->bounds[i]);
        else
            buf_str(&le, "+Inf");
        buf_str(&le, "\"");
        cumulative += __atomic_load_n(&h->buckets[i], __ATOMIC_RELAXED);
        buf_key(b, name, "_bucket", s->labels, le.p);
        buf_u64(b, cumulative);
        buf_str(b, "\n");
        free(le.p);
    }
    buf_key(b, name, "_sum", s->labels, NULL);
    buf_double(b, bits_to_double(__atomic_load_n(&h->sum_bits, __ATOMIC_RELAXED)));
    buf_str(b, "\n");
    buf_key(b, name, "_count", s->labels, NULL);
    buf_u64(b, cumulative); /* = the +Inf bucket, even while observations race the scrape */
    buf_str(b, "\n");
}

static void render_series(buf_t *b, const family_t *f, const series_t *s)
{
    switch (s->kind) {
    case SER_COUNTER:
        buf_key(b, f->name, "", s->labels, NULL);
        buf_u64(b, cm_counter_value(&s->u.counter));
        break;
    case SER_GAUGE:
        buf_key(b, f->name, "", s->labels, NULL);
        buf_double(b, cm_gauge_value(&s->u.gauge));
        break;
    case SER_GAUGE_FN: {
        double sum = 0;
        for (size_t i = 0; i < s->u.gauge_fn.n; i++)
            sum += s->u.gauge_fn.v[i].fn(s->u.gauge_fn.v[i].arg);
        buf_key(b, f->name, "", s->labels, NULL);
        buf_double(b, sum);
        break;
    }
    case SER_HISTOGRAM:
        render_histogram(b, f->name, s);
        return;
    }
    buf_str(b, "\n");
}

char *cm_metrics_render(const cm_metrics_t *cm, size_t *len)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    buf_t b = {0};
    buf_put(&b, "", 0);
    cm_metrics_t *m = (cm_metrics_t *)cm; /* the lock is the only thing written */
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nfamilies; i++) {
        const family_t *f = m->families[i];
        buf_str(&b, "# HELP ");
        buf_str(&b, f->name);
        buf_str(&b, " ");
        buf_help(&b, f->help);
        buf_str(&b, "\n# TYPE ");
        buf_str(&b, f->name);
        buf_str(&b, " ");
        buf_str(&b, type_names[f->type]);
        buf_str(&b, "\n");
        for (size_t j = 0; j < f->nseries; j++)
            render_series(&b, f, f->series[j]);
    }
    pthread_mutex_unlock(&m->lock);
    if (len != NULL)
        *len = b.len;
    return b.p;
}

void cm_metrics_endpoint_latency(cm_metrics_t *m, const char *name, const char *help,
                                 const char *const *endpoints, size_t n, cm_histogram_t **out)
{
    for (size_t i = 0; i < n; i++) {
        char labels[128];
        snprintf(labels, sizeof(labels), "endpoint=\"%s\"", endpoints[i]);
        out[i] = cm_metrics_histogram(m, name, help, labels, cm_metrics_latency_bounds,
                                      cm_metrics_latency_nbounds);
    }
}
