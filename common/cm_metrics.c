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

#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cm_mem.h"

typedef enum { FAM_COUNTER, FAM_GAUGE, FAM_HISTOGRAM } family_type_t;
typedef enum { SER_COUNTER, SER_GAUGE, SER_GAUGE_FN, SER_COUNTER_FN, SER_HISTOGRAM } series_kind_t;

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
            bool min; /* render the least of the functions, not their sum */
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
    cm_metrics_requests_t **requests; /* owned, freed with the registry */
    size_t nrequests;
};

/* Status codes 100–599 get a series each; anything else is code="other". */
#define CODE_MIN     100
#define CODE_MAX     599
#define CODE_SLOTS   (CODE_MAX - CODE_MIN + 2)
#define CODE_OTHER   (CODE_SLOTS - 1)
#define ENDPOINT_MAX 64

struct cm_metrics_requests {
    cm_metrics_t *m;
    char *name, *help;
    size_t n;
    char **endpoints;
    cm_histogram_t **cache; /* n × CODE_SLOTS, filled on first use; atomic pointers */
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
    if (s->kind == SER_GAUGE_FN || s->kind == SER_COUNTER_FN)
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
    for (size_t i = 0; i < m->nrequests; i++) {
        cm_metrics_requests_t *r = m->requests[i];
        for (size_t j = 0; j < r->n; j++)
            free(r->endpoints[j]);
        free(r->endpoints);
        free(r->cache);
        free(r->name);
        free(r->help);
        free(r);
    }
    free(m->requests);
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

/* key="value" into buf; a name too long for it is a programming error. */
static const char *label_of(char *buf, size_t size, const char *key, const char *value)
{
    int n = snprintf(buf, size, "%s=\"%s\"", key, value);
    assert(n > 0 && (size_t)n < size);
    (void)n;
    return buf;
}

void cm_metrics_counters(cm_metrics_t *m, const char *name, const char *help, const char *key,
                         const char *const *values, size_t n, cm_counter_t **out)
{
    char labels[64];
    for (size_t i = 0; i < n; i++)
        out[i] =
            cm_metrics_counter(m, name, help, label_of(labels, sizeof(labels), key, values[i]));
}

void cm_metrics_gauges(cm_metrics_t *m, const char *name, const char *help, const char *key,
                       const char *const *values, size_t n, cm_gauge_t **out)
{
    char labels[64];
    for (size_t i = 0; i < n; i++)
        out[i] = cm_metrics_gauge(m, name, help, label_of(labels, sizeof(labels), key, values[i]));
}

static void add_fn(cm_metrics_t *m, const char *name, const char *help, const char *labels,
                   family_type_t type, bool min, double (*fn)(void *arg), void *arg)
{
    bool created;
    pthread_mutex_lock(&m->lock);
    family_t *f = get_family(m, name, help, type);
    series_t *s =
        get_series(f, labels, type == FAM_COUNTER ? SER_COUNTER_FN : SER_GAUGE_FN, &created);
    if (!created && s->u.gauge_fn.min != min)
        misuse("gauge function registered as both sum and min", name);
    s->u.gauge_fn.min = min;
    s->u.gauge_fn.v = cm_xrealloc(s->u.gauge_fn.v, (s->u.gauge_fn.n + 1) * sizeof(gauge_fn_t));
    s->u.gauge_fn.v[s->u.gauge_fn.n++] = (gauge_fn_t){fn, arg};
    pthread_mutex_unlock(&m->lock);
}

void cm_metrics_gauge_fn(cm_metrics_t *m, const char *name, const char *help, const char *labels,
                         double (*fn)(void *arg), void *arg)
{
    add_fn(m, name, help, labels, FAM_GAUGE, false, fn, arg);
}

void cm_metrics_gauge_fn_min(cm_metrics_t *m, const char *name, const char *help,
                             const char *labels, double (*fn)(void *arg), void *arg)
{
    add_fn(m, name, help, labels, FAM_GAUGE, true, fn, arg);
}

void cm_metrics_counter_fn(cm_metrics_t *m, const char *name, const char *help, const char *labels,
                           double (*fn)(void *arg), void *arg)
{
    add_fn(m, name, help, labels, FAM_COUNTER, false, fn, arg);
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
    case SER_GAUGE_FN:
    case SER_COUNTER_FN: {
        double v = 0;
        for (size_t i = 0; i < s->u.gauge_fn.n; i++) {
            double x = s->u.gauge_fn.v[i].fn(s->u.gauge_fn.v[i].arg);
            v = !s->u.gauge_fn.min ? v + x : i == 0 || x < v ? x : v;
        }
        buf_key(b, f->name, "", s->labels, NULL);
        buf_double(b, v);
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

cm_metrics_requests_t *cm_metrics_requests(cm_metrics_t *m, const char *name, const char *help,
                                           const char *const *endpoints, size_t n)
{
    cm_metrics_requests_t *r = cm_xcalloc(1, sizeof(*r));
    r->m = m;
    r->name = cm_xstrdup(name);
    r->help = cm_xstrdup(help);
    r->n = n;
    r->endpoints = cm_xcalloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        if (strlen(endpoints[i]) > ENDPOINT_MAX)
            misuse("endpoint name too long", endpoints[i]);
        r->endpoints[i] = cm_xstrdup(endpoints[i]);
    }
    r->cache = cm_xcalloc(n * CODE_SLOTS, sizeof(cm_histogram_t *));
    pthread_mutex_lock(&m->lock);
    m->requests = cm_xrealloc(m->requests, (m->nrequests + 1) * sizeof(*m->requests));
    m->requests[m->nrequests++] = r;
    pthread_mutex_unlock(&m->lock);
    return r;
}

cm_histogram_t *cm_metrics_requests_series(cm_metrics_requests_t *r, size_t endpoint, int code)
{
    if (endpoint >= r->n)
        misuse("endpoint out of range", r->name);
    size_t slot = code >= CODE_MIN && code <= CODE_MAX ? (size_t)(code - CODE_MIN) : CODE_OTHER;
    cm_histogram_t **cell = &r->cache[endpoint * CODE_SLOTS + slot];
    cm_histogram_t *h = __atomic_load_n(cell, __ATOMIC_ACQUIRE);
    if (h != NULL)
        return h;
    char labels[ENDPOINT_MAX + 40];
    if (slot == CODE_OTHER)
        snprintf(labels, sizeof(labels), "endpoint=\"%s\",code=\"other\"", r->endpoints[endpoint]);
    else
        snprintf(labels, sizeof(labels), "endpoint=\"%s\",code=\"%d\"", r->endpoints[endpoint],
                 code);
    /* registration is idempotent: two threads racing here get the same series */
    h = cm_metrics_histogram(r->m, r->name, r->help, labels, cm_metrics_latency_bounds,
                             cm_metrics_latency_nbounds);
    __atomic_store_n(cell, h, __ATOMIC_RELEASE);
    return h;
}

void cm_metrics_requests_observe(cm_metrics_requests_t *r, size_t endpoint, int code,
                                 double seconds)
{
    cm_histogram_observe(cm_metrics_requests_series(r, endpoint, code), seconds);
}

/* ---- process_* (the names every Prometheus client library exports) ---- */

typedef struct proc_stat {
    double utime, stime; /* clock ticks */
    double starttime;    /* clock ticks after boot */
    double vsize;        /* bytes */
    double rss;          /* pages */
} proc_stat_t;

/* /proc/self/stat is generated by the kernel on read (no disk behind it): cheap enough for
 * a scrape. Fields after the ")" that closes the command name, counted from 3 (state). */
static int read_proc_stat(proc_stat_t *out)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    double f[25] = {0};
    int field = 3;
    for (char *tok = strtok(p + 1, " "); tok != NULL && field <= 24; tok = strtok(NULL, " "))
        f[field++] = strtod(tok, NULL);
    if (field <= 24)
        return -1;
    *out = (proc_stat_t){f[14], f[15], f[22], f[23], f[24]};
    return 0;
}

static double proc_cpu_seconds(void *arg)
{
    (void)arg;
    proc_stat_t st;
    return read_proc_stat(&st) == 0 ? (st.utime + st.stime) / (double)sysconf(_SC_CLK_TCK) : 0;
}

static double proc_resident_bytes(void *arg)
{
    (void)arg;
    proc_stat_t st;
    return read_proc_stat(&st) == 0 ? st.rss * (double)sysconf(_SC_PAGESIZE) : 0;
}

static double proc_virtual_bytes(void *arg)
{
    (void)arg;
    proc_stat_t st;
    return read_proc_stat(&st) == 0 ? st.vsize : 0;
}

static double proc_open_fds(void *arg)
{
    (void)arg;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    double n = -1; /* the directory's own descriptor */
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n < 0 ? 0 : n;
}

static double proc_max_fds(void *arg)
{
    (void)arg;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return (double)rl.rlim_cur;
}

/* The boot time (btime in /proc/stat) plus the process's start in ticks after boot. */
static double start_time_seconds(void)
{
    proc_stat_t st;
    char buf[4096];
    double btime = 0;
    FILE *f = fopen("/proc/stat", "re");
    if (f == NULL || read_proc_stat(&st) != 0) {
        if (f != NULL)
            fclose(f);
        return (double)time(NULL);
    }
    while (fgets(buf, sizeof(buf), f) != NULL)
        if (strncmp(buf, "btime ", 6) == 0)
            btime = strtod(buf + 6, NULL);
    fclose(f);
    return btime > 0 ? btime + st.starttime / (double)sysconf(_SC_CLK_TCK) : (double)time(NULL);
}

static double proc_start_time(void *arg)
{
    return *(double *)arg;
}

void cm_metrics_process(cm_metrics_t *m)
{
    static double start; /* one process, one start */
    if (start == 0)
        start = start_time_seconds();
    cm_metrics_counter_fn(m, "process_cpu_seconds_total",
                          "user and system CPU time spent in seconds", NULL, proc_cpu_seconds,
                          NULL);
    cm_metrics_gauge_fn(m, "process_resident_memory_bytes", "resident memory size in bytes", NULL,
                        proc_resident_bytes, NULL);
    cm_metrics_gauge_fn(m, "process_virtual_memory_bytes", "virtual memory size in bytes", NULL,
                        proc_virtual_bytes, NULL);
    cm_metrics_gauge_fn(m, "process_open_fds", "open file descriptors", NULL, proc_open_fds, NULL);
    cm_metrics_gauge_fn(m, "process_max_fds", "the limit of open file descriptors", NULL,
                        proc_max_fds, NULL);
    cm_metrics_gauge_fn(m, "process_start_time_seconds",
                        "start time of the process since the Unix epoch in seconds", NULL,
                        proc_start_time, &start);
}
