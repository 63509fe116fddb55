/*
 * sim_stats — see sim_stats.h. Pure functions over caller-owned memory.
 *
 * The histogram follows HdrHistogram's layout with 6 significant bits: values below 64
 * get a bucket each, then every power of two is cut into 64 equal sub-buckets. The
 * incomplete gamma function is the usual series / continued-fraction pair (Press et al.,
 * Numerical Recipes §6.2), written out here rather than pulling a maths library in.
 */
#include "sim_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cm_mem.h"

static int bucket_of(uint64_t v)
{
    if (v < 64)
        return (int)v;
    int e = 63 - __builtin_clzll(v);
    int idx = (e - 5) * 64 + (int)((v >> (e - 6)) & 63);
    return idx < SIM_HIST_BUCKETS ? idx : SIM_HIST_BUCKETS - 1;
}

static uint64_t bucket_top(int idx)
{
    if (idx < 64)
        return (uint64_t)idx;
    int e = idx / 64 + 5;
    uint64_t sub = (uint64_t)(idx % 64);
    return ((64 + sub + 1) << (e - 6)) - 1;
}

void sim_hist_add(sim_hist_t *h, uint64_t us)
{
    if (h->count == 0 || us < h->min)
        h->min = us;
    if (us > h->max)
        h->max = us;
    h->count++;
    h->sum += (double)us;
    h->b[bucket_of(us)]++;
}

uint64_t sim_hist_quantile(const sim_hist_t *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t want = (uint64_t)ceil(q * (double)h->count);
    if (want < 1)
        want = 1;
    uint64_t seen = 0;
    for (int i = 0; i < SIM_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= want) {
            uint64_t top = bucket_top(i);
            return top > h->max ? h->max : top;
        }
    }
    return h->max;
}

json_t *sim_hist_json(const sim_hist_t *h)
{
    json_t *b = json_array();
    for (int i = 0; i < SIM_HIST_BUCKETS; i++)
        if (h->b[i])
            json_array_append_new(
                b, json_pack("[f, I]", (double)bucket_top(i) / 1000.0, (json_int_t)h->b[i]));
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:o}", "count", (json_int_t)h->count,
                     "mean_ms", h->count ? h->sum / (double)h->count / 1000.0 : 0.0, "p50_ms",
                     sim_hist_quantile(h, 0.50) / 1000.0, "p90_ms",
                     sim_hist_quantile(h, 0.90) / 1000.0, "p99_ms",
                     sim_hist_quantile(h, 0.99) / 1000.0, "p999_ms",
                     sim_hist_quantile(h, 0.999) / 1000.0, "max_ms", h->max / 1000.0, "buckets", b);
}

static void grow(sim_series_t *s, int sec)
{
    if (sec < s->cap)
        return;
    int cap = s->cap ? s->cap : 64;
    while (cap <= sec)
        cap *= 2;
    s->v = cm_xrealloc(s->v, (size_t)cap * sizeof(double));
    memset(s->v + s->cap, 0, (size_t)(cap - s->cap) * sizeof(double));
    s->cap = cap;
}

void sim_series_add(sim_series_t *s, int sec, double x)
{
    if (sec < 0)
        sec = 0;
    grow(s, sec);
    s->v[sec] += x;
    if (sec + 1 > s->n)
        s->n = sec + 1;
}

void sim_series_set(sim_series_t *s, int sec, double x)
{
    if (sec < 0)
        sec = 0;
    grow(s, sec);
    s->v[sec] = x;
    if (sec + 1 > s->n)
        s->n = sec + 1;
}

json_t *sim_series_json(const sim_series_t *s, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real(i < s->n ? s->v[i] : 0.0));
    return a;
}

void sim_series_free(sim_series_t *s)
{
    free(s->v);
    memset(s, 0, sizeof(*s));
}

static double gamma_p_series(double a, double x)
{
    double ap = a, sum = 1.0 / a, del = sum;
    for (int n = 0; n < 1000; n++) {
        ap += 1;
        del *= x / ap;
        sum += del;
        if (fabs(del) < fabs(sum) * 1e-15)
            break;
    }
    return sum * exp(-x + a * log(x) - lgamma(a));
}

static double gamma_q_cf(double a, double x)
{
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny)
            d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double sim_stats_gamma_q(double a, double x)
{
    if (x <= 0 || a <= 0)
        return 1.0;
    if (x < a + 1)
        return 1.0 - gamma_p_series(a, x);
    return gamma_q_cf(a, x);
}
