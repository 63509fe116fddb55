/*
 * sim_report — see sim_report.h. Main thread, after the audit; plain stdio.
 *
 * The HTML is generated here rather than from a template engine: a handful of SVG
 * polylines and tables, escaped where they carry text that came from outside (event
 * names, violation details). The page carries its own CSP meta tag forbidding every
 * fetch, so it is exactly as self-contained as it claims.
 */
#include "sim_report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_mem.h"
#include "cm_parse.h"

static const char *const EP_NAMES[EP_N] = {"join",     "status", "hold",  "confirm",
                                           "checkout", "done",   "seats", "admin"};

static double ms(uint64_t us)
{
    return (double)us / 1000.0;
}

static double duration_s(const sim_run_t *r)
{
    double d = (double)r->end_ns / 1e9;
    return d > 0.001 ? d : 0.001;
}

/* "429 rate_limited": n, … for one endpoint's refusals and transport errors. */
static json_t *causes_json(const sim_endpoint_t *e)
{
    json_t *o = json_object();
    char key[64];
    for (int i = 0; i < e->ncauses; i++) {
        snprintf(key, sizeof(key), "%d %s", e->causes[i].status, e->causes[i].code);
        json_object_set_new(o, key, json_integer((json_int_t)e->causes[i].n));
    }
    if (e->other_causes)
        json_object_set_new(o, "other", json_integer((json_int_t)e->other_causes));
    return o;
}

static uint64_t cause_count(const sim_endpoint_t *e, int status, const char *code)
{
    for (int i = 0; i < e->ncauses; i++)
        if (e->causes[i].status == status && strcmp(e->causes[i].code, code) == 0)
            return e->causes[i].n;
    return 0;
}

/* What paced the night, most binding first, each with its evidence: per-address join
 * limits (joins refused 429 rate_limited), the CPU (the services together near every core
 * of the machine, or one process near a whole core of its own), or the operator's
 * admission rate (fans waited in the queue). A rule of thumb read from the figures, not a
 * profile: it says where to look. */
static json_t *pacing(const sim_run_t *r)
{
    json_t *a = json_array();
    char ev[200];
    const sim_endpoint_t *join = &r->ep[EP_JOIN];
    uint64_t limited = cause_count(join, 429, "rate_limited");
    if (join->hist.count && limited * 20 > join->hist.count) {
        snprintf(ev, sizeof(ev), "%llu of %llu joins refused 429 rate_limited",
                 (unsigned long long)limited, (unsigned long long)join->hist.count);
        json_array_append_new(
            a, json_pack("{s:s, s:s}", "resource", "per-address join limits", "evidence", ev));
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double total = 0, top = 0;
    const char *top_name = NULL;
    for (int i = 0; i < r->nsvc; i++) {
        double mean = r->svc[i].samples ? r->svc[i].cpu_sum / r->svc[i].samples : 0.0;
        total += mean;
        if (mean > top) {
            top = mean;
            top_name = r->svc[i].name;
        }
    }
    if (top_name && (total >= 85.0 * (double)(cores > 0 ? cores : 1) || top >= 85.0)) {
        snprintf(ev, sizeof(ev), "services %.0f%% of %ld cores on average, %s %.0f%%", total, cores,
                 top_name, top);
        char res[64];
        snprintf(res, sizeof(res), "CPU (%s)", top_name);
        json_array_append_new(a, json_pack("{s:s, s:s}", "resource", res, "evidence", ev));
    }
    double wait = ms(sim_hist_quantile(&r->time_to_admission, .5)) / 1000.0;
    if (wait >= 1.0) {
        snprintf(ev, sizeof(ev), "fans waited %.1f s in the queue at the median", wait);
        json_array_append_new(
            a, json_pack("{s:s, s:s}", "resource", "admission rate", "evidence", ev));
    }
    if (json_array_size(a) == 0)
        json_array_append_new(a,
                              json_pack("{s:s, s:s}", "resource", "arrivals", "evidence",
                                        "nothing saturated: the night went at the crowd's pace"));
    return a;
}

static json_t *headline(const sim_run_t *r)
{
    json_t *h = json_object();
    double wall = r->all_placed_ns >= 0 && r->outcome_count[O_NONE] == 0
                      ? (double)(r->all_placed_ns - r->last_arrival_ns) / 1e9
                      : -1;
    json_object_set_new(h, "all_placed_after_last_arrival_s",
                        wall >= 0 ? json_real(wall) : json_null());
    json_object_set_new(h, "last_arrival_s", json_real((double)r->last_arrival_ns / 1e9));
    json_object_set_new(h, "join_p99_ms",
                        json_real(ms(sim_hist_quantile(&r->ep[EP_JOIN].hist, .99))));
    json_object_set_new(h, "status_p99_ms",
                        json_real(ms(sim_hist_quantile(&r->ep[EP_STATUS].hist, .99))));
    json_object_set_new(h, "hold_p99_ms",
                        json_real(ms(sim_hist_quantile(&r->ep[EP_HOLD].hist, .99))));
    json_object_set_new(h, "taken_p99_ms", json_real(ms(sim_hist_quantile(&r->hold_taken, .99))));
    json_object_set_new(h, "loser_heard_p99_ms",
                        json_real(ms(sim_hist_quantile(&r->loser_heard, .99))));
    int first = -1, last = -1;
    double peak = 0, total = 0;
    for (int i = 0; i < r->s_confirms.n; i++)
        if (r->s_confirms.v[i] > 0) {
            if (first < 0)
                first = i;
            last = i;
            total += r->s_confirms.v[i];
            if (r->s_confirms.v[i] > peak)
                peak = r->s_confirms.v[i];
        }
    json_object_set_new(h, "confirmations", json_real(total));
    json_object_set_new(h, "confirmations_per_s",
                        json_real(first >= 0 ? total / (double)(last - first + 1) : 0));
    json_object_set_new(h, "confirmations_peak_per_s", json_real(peak));
    json_t *eta = json_object_get(r->figures, "eta_error");
    json_object_set(h, "eta_error_p90",
                    eta && json_integer_value(json_object_get(eta, "fans")) > 0
                        ? json_object_get(eta, "p90")
                        : json_null());
    json_object_set_new(h, "units_bought", json_integer((json_int_t)r->units_bought));
    json_object_set_new(h, "inventory_units", json_integer(r->total_units));
    json_object_set_new(
        h, "sold_share",
        json_real(r->total_units > 0 ? (double)r->units_bought / (double)r->total_units : 0.0));
    json_object_set_new(h, "audit", json_string(r->nviol ? "violations" : "clean"));
    json_t *pace = pacing(r);
    json_object_set(h, "paced_by", json_object_get(json_array_get(pace, 0), "resource"));
    json_object_set_new(h, "pacing", pace);
    return h;
}

json_t *sim_report_json(const sim_run_t *r)
{
    json_t *o = json_object();
    char when[40];
    cm_format_rfc3339(r->wall_start_ms, when, sizeof(when));
    json_object_set_new(o, "scenario", json_string(r->sc->name));
    json_object_set_new(o, "event", json_string(r->event));
    json_object_set_new(o, "started_at", json_string(when));
    json_object_set_new(o, "fans", json_integer(r->nfans));
    json_object_set_new(o, "duration_s", json_real(duration_s(r)));
    json_object_set_new(o, "headline", headline(r));
    json_t *out = json_object();
    for (int i = 0; i < O_NOUTCOMES; i++)
        if (i != O_NONE)
            json_object_set_new(out, sim_outcome_name(i), json_integer(r->outcome_count[i]));
    json_object_set_new(o, "outcomes", out);
    json_t *eps = json_object();
    for (int i = 0; i < EP_N; i++) {
        json_t *e = sim_hist_json(&r->ep[i].hist);
        json_object_set_new(e, "req_per_s", json_real((double)r->ep[i].hist.count / duration_s(r)));
        json_object_set_new(
            e, "by_class",
            json_pack("{s:I, s:I, s:I, s:I, s:I}", "error", (json_int_t)r->ep[i].by_class[0], "2xx",
                      (json_int_t)r->ep[i].by_class[2], "3xx", (json_int_t)r->ep[i].by_class[3],
                      "4xx", (json_int_t)r->ep[i].by_class[4], "5xx",
                      (json_int_t)r->ep[i].by_class[5]));
        json_object_set_new(e, "by_cause", causes_json(&r->ep[i]));
        if (r->ep[i].sample[0])
            json_object_set_new(e, "last_unexpected", json_string(r->ep[i].sample));
        json_object_set_new(eps, EP_NAMES[i], e);
    }
    json_object_set_new(o, "endpoints", eps);
    json_object_set_new(
        o, "latencies",
        json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "time_to_place",
                  sim_hist_json(&r->time_to_place), "time_to_admission",
                  sim_hist_json(&r->time_to_admission), "hold_taken", sim_hist_json(&r->hold_taken),
                  "loser_heard_taken", sim_hist_json(&r->loser_heard), "loser_waited",
                  sim_hist_json(&r->loser_waited), "loser_on_the_wire",
                  sim_hist_json(&r->loser_wire), "simulator_loop_lag", sim_hist_json(&r->loop_lag),
                  "hold_to_confirm", sim_hist_json(&r->hold_to_confirm)));
    int n = (int)ceil(duration_s(r)) + 1;
    json_object_set_new(
        o, "series",
        json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "watermark",
                  sim_series_json(&r->s_watermark, n), "queue", sim_series_json(&r->s_queue, n),
                  "admitted", sim_series_json(&r->s_admitted, n), "holds",
                  sim_series_json(&r->s_holds, n), "taken", sim_series_json(&r->s_taken, n),
                  "confirmations", sim_series_json(&r->s_confirms, n), "errors",
                  sim_series_json(&r->s_errors, n), "requests",
                  sim_series_json(&r->s_requests, n)));
    json_t *svc = json_array();
    for (int i = 0; i < r->nsvc; i++)
        json_array_append_new(
            svc, json_pack("{s:s, s:i, s:f, s:f, s:f, s:o, s:o}", "name", r->svc[i].name, "pid",
                           r->svc[i].pid, "peak_rss_mb", (double)r->svc[i].peak_rss_kb / 1024.0,
                           "peak_cpu_pct", r->svc[i].peak_cpu, "mean_cpu_pct",
                           r->svc[i].samples ? r->svc[i].cpu_sum / r->svc[i].samples : 0.0,
                           "cpu_pct", sim_series_json(&r->svc[i].cpu, n), "rss_mb",
                           sim_series_json(&r->svc[i].rss, n)));
    json_object_set_new(o, "services", svc);
    json_object_set(o, "timeline", r->timeline ? r->timeline : json_array());
    json_object_set(o, "figures", r->figures ? r->figures : json_object());
    json_t *v = json_array();
    for (int i = 0; i < r->nviol; i++)
        json_array_append_new(
            v, json_pack("{s:s, s:s}", "check", r->viol[i].check, "detail", r->viol[i].detail));
    json_object_set_new(o, "violations", v);
    return o;
}

void sim_report_print(const sim_run_t *r, FILE *out)
{
    fprintf(out, "\nonsale-sim: %s — event %s, %d fans, %.1f s\n\n", r->sc->name, r->event,
            r->nfans, duration_s(r));
    fprintf(out, "%-9s %9s %8s %9s %9s %9s %9s %7s %7s %6s\n", "endpoint", "count", "req/s",
            "p50 ms", "p90 ms", "p99 ms", "max ms", "4xx", "5xx", "err");
    for (int i = 0; i < EP_N; i++) {
        const sim_hist_t *h = &r->ep[i].hist;
        if (h->count == 0)
            continue;
        fprintf(out, "%-9s %9llu %8.0f %9.2f %9.2f %9.2f %9.2f %7llu %7llu %6llu\n", EP_NAMES[i],
                (unsigned long long)h->count, (double)h->count / duration_s(r),
                ms(sim_hist_quantile(h, .5)), ms(sim_hist_quantile(h, .9)),
                ms(sim_hist_quantile(h, .99)), ms(h->max), (unsigned long long)r->ep[i].by_class[4],
                (unsigned long long)r->ep[i].by_class[5], (unsigned long long)r->ep[i].by_class[0]);
    }
    for (int i = 0; i < EP_N; i++) {
        const sim_endpoint_t *e = &r->ep[i];
        if (e->ncauses == 0)
            continue;
        fprintf(out, "  %-8s refused or failed, by cause:", EP_NAMES[i]);
        for (int k = 0; k < e->ncauses; k++)
            fprintf(out, "%s %d %s %llu", k ? "," : "", e->causes[k].status, e->causes[k].code,
                    (unsigned long long)e->causes[k].n);
        if (e->other_causes)
            fprintf(out, ", other %llu", (unsigned long long)e->other_causes);
        fputc('\n', out);
    }
    for (int i = 0; i < EP_N; i++)
        if (r->ep[i].sample[0])
            fprintf(out, "  last unexpected %s answer: %s\n", EP_NAMES[i], r->ep[i].sample);
    const struct {
        const char *name;
        const sim_hist_t *h;
    } extra[] = {{"time to a place in the queue", &r->time_to_place},
                 {"time to admission", &r->time_to_admission},
                 {"hold answered \"taken\"", &r->hold_taken},
                 {"loser: admitted -> heard taken", &r->loser_heard},
                 {"  of it, holds before the wire", &r->loser_waited},
                 {"  of it, holds on the wire", &r->loser_wire},
                 {"hold -> confirmed", &r->hold_to_confirm},
                 {"the simulator's own loop lag", &r->loop_lag}};
    fprintf(out, "\n%-32s %9s %9s %9s %9s %9s\n", "", "count", "p50 ms", "p90 ms", "p99 ms",
            "max ms");
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
        fprintf(out, "%-32s %9llu %9.1f %9.1f %9.1f %9.1f\n", extra[i].name,
                (unsigned long long)extra[i].h->count, ms(sim_hist_quantile(extra[i].h, .5)),
                ms(sim_hist_quantile(extra[i].h, .9)), ms(sim_hist_quantile(extra[i].h, .99)),
                ms(extra[i].h->max));
    fprintf(out, "\noutcomes:");
    for (int i = 1; i < O_NOUTCOMES; i++)
        if (r->outcome_count[i])
            fprintf(out, " %s %d", sim_outcome_name(i), r->outcome_count[i]);
    json_t *h = headline(r);
    fprintf(out, "\nunits bought %llu of %d: %.2f%% of the inventory sold\n",
            (unsigned long long)r->units_bought, r->total_units,
            100 * json_number_value(json_object_get(h, "sold_share")));
    json_t *pq = json_object_get(r->figures, "prequeue");
    json_t *eta = json_object_get(r->figures, "eta_error");
    json_t *ff = json_object_get(r->figures, "fifo");
    if (json_is_number(json_object_get(h, "all_placed_after_last_arrival_s")))
        fprintf(out, "every fan had a place %.2f s after the last arrival\n",
                json_number_value(json_object_get(h, "all_placed_after_last_arrival_s")));
    fprintf(out, "confirmations/s %.1f (peak %.0f)\n",
            json_number_value(json_object_get(h, "confirmations_per_s")),
            json_number_value(json_object_get(h, "confirmations_peak_per_s")));
    json_t *seen = json_object_get(r->figures, "eta_error_as_seen_by_fans");
    if (eta && seen)
        fprintf(out,
                "ETA error p50 %.0f%% p90 %.0f%% against the watermark (%lld fans); as the "
                "fans saw it p50 %.0f%% p90 %.0f%%; %lld fans told \"sold out, for now\" left "
                "out (no ETA foresees a stock-out)\n",
                100 * json_number_value(json_object_get(eta, "p50")),
                100 * json_number_value(json_object_get(eta, "p90")),
                (long long)json_integer_value(json_object_get(eta, "fans")),
                100 * json_number_value(json_object_get(seen, "p50")),
                100 * json_number_value(json_object_get(seen, "p90")),
                (long long)json_integer_value(json_object_get(eta, "excluded_sold_out_for_now")));
    if (ff)
        fprintf(out, "FIFO: %lld inversions among %lld fans\n",
                (long long)json_integer_value(json_object_get(ff, "inversions")),
                (long long)json_integer_value(json_object_get(ff, "fans_checked")));
    if (pq)
        fprintf(out,
                "pre-queue order at opening: %lld fans, Spearman %.4f (p=%.3g), chi2 %.1f on "
                "%lld df (p=%.3g)\n",
                (long long)json_integer_value(json_object_get(pq, "fans")),
                json_number_value(json_object_get(pq, "spearman")),
                json_number_value(json_object_get(pq, "p_spearman")),
                json_number_value(json_object_get(pq, "chi2")),
                (long long)json_integer_value(json_object_get(pq, "df")),
                json_number_value(json_object_get(pq, "p_chi2")));
    for (int i = 0; i < r->nsvc; i++)
        fprintf(out, "%-10s peak RSS %.1f MB, CPU peak %.0f%% mean %.0f%%\n", r->svc[i].name,
                (double)r->svc[i].peak_rss_kb / 1024.0, r->svc[i].peak_cpu,
                r->svc[i].samples ? r->svc[i].cpu_sum / r->svc[i].samples : 0.0);
    json_t *pace = json_object_get(h, "pacing");
    for (size_t i = 0; i < json_array_size(pace); i++)
        fprintf(out, "%s %s: %s\n", i ? "    then" : "paced by",
                json_string_value(json_object_get(json_array_get(pace, i), "resource")),
                json_string_value(json_object_get(json_array_get(pace, i), "evidence")));
    json_decref(h);
    if (r->nviol == 0) {
        fprintf(out, "\naudit: clean\n");
        return;
    }
    fprintf(out, "\naudit: %d violation(s)\n", r->nviol);
    for (int i = 0; i < r->nviol; i++)
        fprintf(out, "  VIOLATION %s: %s\n", r->viol[i].check, r->viol[i].detail);
}

/* ------------------------------------------------------------------ HTML */

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

typedef struct {
    const char *name, *color;
    const sim_series_t *s;
} line_t;

/* One time-series chart: x = seconds, y = linear from 0 to the max of its lines. */
static void svg_series(FILE *f, const char *title, const line_t *lines, int nl, int n)
{
    const int W = 560, H = 200, L = 48, B = 24, T = 10;
    double max = 1;
    for (int k = 0; k < nl; k++)
        for (int i = 0; i < lines[k].s->n && i < n; i++)
            if (lines[k].s->v[i] > max)
                max = lines[k].s->v[i];
    fprintf(f, "<figure><figcaption>");
    esc(f, title);
    fprintf(f, "</figcaption><svg viewBox=\"0 0 %d %d\" role=\"img\">", W, H + B + T);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"ax\"/>", L, T + H, W, T + H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"ax\"/>", L, T, L, T + H);
    for (int g = 0; g <= 4; g++) {
        double y = T + H - g * H / 4.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>", L, y, W,
                y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%.0f</text>", L - 4, y + 4,
                max * g / 4.0);
    }
    int steps = n > 1 ? n - 1 : 1;
    for (int g = 0; g <= 5; g++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"xl\">%.0fs</text>", L + (W - L) * g / 5.0,
                T + H + 16, steps * g / 5.0);
    for (int k = 0; k < nl; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"",
                lines[k].color);
        for (int i = 0; i < n; i++) {
            double v = i < lines[k].s->n ? lines[k].s->v[i] : 0;
            fprintf(f, "%.1f,%.1f ", L + (double)(W - L) * i / steps, T + H - H * v / max);
        }
        fprintf(f, "\"/>");
    }
    fprintf(f, "</svg><div class=\"legend\">");
    for (int k = 0; k < nl; k++) {
        fprintf(f, "<span><i style=\"background:%s\"></i>", lines[k].color);
        esc(f, lines[k].name);
        fprintf(f, "</span>");
    }
    fprintf(f, "</div></figure>\n");
}

/* Latency distributions: the share of requests at or under x ms, x on a log scale. */
static void svg_cdf(FILE *f, const char *title, const char *const *names,
                    const sim_hist_t *const *hs, int nh)
{
    static const char *const colors[] = {"#2563eb", "#16a34a", "#dc2626", "#9333ea",
                                         "#ea580c", "#0891b2", "#4b5563"};
    const int W = 560, H = 200, L = 48, B = 24, T = 10;
    double lo = 0.1, hi = 10;
    for (int k = 0; k < nh; k++)
        if (hs[k]->count && ms(hs[k]->max) > hi)
            hi = ms(hs[k]->max);
    double llo = log10(lo), lhi = log10(hi * 1.2);
    fprintf(f, "<figure><figcaption>");
    esc(f, title);
    fprintf(f, "</figcaption><svg viewBox=\"0 0 %d %d\" role=\"img\">", W, H + B + T);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"ax\"/>", L, T + H, W, T + H);
    for (int g = 0; g <= 4; g++) {
        double y = T + H - g * H / 4.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>", L, y, W,
                y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%d%%</text>", L - 4, y + 4, g * 25);
    }
    for (double d = pow(10, ceil(llo)); d <= hi * 1.2; d *= 10)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"xl\">%gms</text>",
                L + (W - L) * (log10(d) - llo) / (lhi - llo), T + H + 16, d);
    for (int k = 0; k < nh; k++) {
        if (hs[k]->count == 0)
            continue;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"",
                colors[k % 7]);
        for (int p = 0; p <= 100; p++) {
            double q = p < 100 ? p / 100.0 : 1.0;
            double x = ms(sim_hist_quantile(hs[k], q));
            if (x < lo)
                x = lo;
            fprintf(f, "%.1f,%.1f ", L + (W - L) * (log10(x) - llo) / (lhi - llo), T + H - H * q);
        }
        fprintf(f, "\"/>");
    }
    fprintf(f, "</svg><div class=\"legend\">");
    for (int k = 0; k < nh; k++)
        if (hs[k]->count)
            fprintf(f, "<span><i style=\"background:%s\"></i>%s</span>", colors[k % 7], names[k]);
    fprintf(f, "</div></figure>\n");
}

static void card(FILE *f, const char *label, const char *value, const char *cls)
{
    fprintf(f, "<div class=\"card %s\"><div class=\"v\">", cls);
    esc(f, value);
    fprintf(f, "</div><div class=\"l\">");
    esc(f, label);
    fprintf(f, "</div></div>");
}

static void html(const sim_run_t *r, FILE *f)
{
    json_t *h = headline(r);
    fprintf(f, "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
               "style-src 'unsafe-inline'; img-src data:\">"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
               "<title>onsale-sim: ");
    esc(f, r->sc->name);
    fprintf(f, "</title><style>"
               "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#111;background:#fafafa}"
               "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}"
               ".sub{color:#555}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:16px 0}"
               ".card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 14px;"
               "min-width:150px}.card .v{font-size:20px;font-weight:600}.card .l{color:#555;"
               "font-size:12px}.ok{border-color:#16a34a}.ok .v{color:#16a34a}.bad{border-color:"
               "#dc2626}.bad .v{color:#dc2626}.grid2{display:grid;grid-template-columns:repeat("
               "auto-fill,minmax(460px,1fr));gap:12px}figure{background:#fff;border:1px solid "
               "#ddd;border-radius:6px;margin:0;padding:8px}figcaption{font-weight:600;"
               "margin-bottom:4px}svg{width:100%%;height:auto}.ax{stroke:#333}.grid{stroke:#eee}"
               ".yl{font-size:10px;text-anchor:end;fill:#555}.xl{font-size:10px;"
               "text-anchor:middle;fill:#555}.legend span{margin-right:12px;font-size:12px}"
               ".legend i{display:inline-block;width:10px;height:10px;margin-right:4px}"
               "table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;"
               "padding:4px 8px;text-align:right}th{background:#f0f0f0}td:first-child,"
               "th:first-child{text-align:left}.viol td{text-align:left;color:#b91c1c}"
               "</style></head><body>\n");
    char when[40];
    cm_format_rfc3339(r->wall_start_ms, when, sizeof(when));
    fprintf(f, "<h1>onsale-sim — ");
    esc(f, r->sc->name);
    fprintf(f, "</h1><div class=\"sub\">event ");
    esc(f, r->event);
    fprintf(f, " · %d fans · started %s · %.1f s</div>\n<div class=\"cards\">", r->nfans, when,
            duration_s(r));
    char buf[96];
    snprintf(buf, sizeof(buf), "%s", r->nviol ? "VIOLATIONS" : "CLEAN");
    card(f, r->nviol ? "audit: see below" : "audit: every check passed", buf,
         r->nviol ? "bad" : "ok");
    json_t *w = json_object_get(h, "all_placed_after_last_arrival_s");
    if (json_is_number(w))
        snprintf(buf, sizeof(buf), "%.2f s", json_number_value(w));
    else
        snprintf(buf, sizeof(buf), "not all");
    card(f, "all fans placed, after the last arrival", buf, "");
    snprintf(buf, sizeof(buf), "%.1f / %.1f ms",
             json_number_value(json_object_get(h, "join_p99_ms")),
             json_number_value(json_object_get(h, "status_p99_ms")));
    card(f, "p99 join / status", buf, "");
    snprintf(buf, sizeof(buf), "%.1f ms", json_number_value(json_object_get(h, "hold_p99_ms")));
    card(f, "p99 hold", buf, "");
    snprintf(buf, sizeof(buf), "%.1f ms", json_number_value(json_object_get(h, "taken_p99_ms")));
    card(f, "p99 a loser hears \"taken\"", buf, "");
    snprintf(buf, sizeof(buf), "%.1f /s",
             json_number_value(json_object_get(h, "confirmations_per_s")));
    card(f, "confirmations", buf, "");
    snprintf(buf, sizeof(buf), "%.2f %% (%llu / %d)",
             100 * json_number_value(json_object_get(h, "sold_share")),
             (unsigned long long)r->units_bought, r->total_units);
    card(f, "inventory sold (units sold / inventory)", buf, "");
    json_t *eta = json_object_get(h, "eta_error_p90");
    if (json_is_number(eta)) {
        json_int_t out = json_integer_value(
            json_object_get(json_object_get(r->figures, "eta_error"), "excluded_sold_out_for_now"));
        snprintf(buf, sizeof(buf), "%.0f %%", 100 * json_number_value(eta));
        card(f,
             out > 0 ? "ETA error p90 (fans told \"sold out, for now\" left out)" : "ETA error p90",
             buf, "");
    }
    fprintf(f, "</div>\n");
    if (r->nviol) {
        fprintf(f, "<h2>Audit violations</h2><table class=\"viol\"><tr><th>check</th><th>"
                   "detail</th></tr>");
        for (int i = 0; i < r->nviol; i++) {
            fprintf(f, "<tr><td>");
            esc(f, r->viol[i].check);
            fprintf(f, "</td><td>");
            esc(f, r->viol[i].detail);
            fprintf(f, "</td></tr>");
        }
        fprintf(f, "</table>\n");
    }
    int n = (int)ceil(duration_s(r)) + 1;
    fprintf(f, "<h2>Over time</h2><div class=\"grid2\">");
    line_t q[] = {{"fans waiting (queue + pre-queue)", "#2563eb", &r->s_queue},
                  {"watermark (numbers let in)", "#16a34a", &r->s_watermark}};
    svg_series(f, "Queue length and watermark", q, 2, n);
    line_t a[] = {{"admissions/s", "#16a34a", &r->s_admitted},
                  {"holds/s", "#9333ea", &r->s_holds},
                  {"confirmations/s", "#ea580c", &r->s_confirms}};
    svg_series(f, "Admissions, holds, confirmations per second", a, 3, n);
    line_t e[] = {{"requests/s", "#4b5563", &r->s_requests}};
    svg_series(f, "Requests per second", e, 1, n);
    line_t er[] = {{"errors/s (transport, 5xx)", "#dc2626", &r->s_errors},
                   {"\"taken\" answers/s", "#0891b2", &r->s_taken}};
    svg_series(f, "Errors and \"taken\" per second", er, 2, n);
    fprintf(f, "</div>\n<h2>Latency distributions</h2><div class=\"grid2\">");
    const sim_hist_t *hs[EP_N];
    for (int i = 0; i < EP_N; i++)
        hs[i] = &r->ep[i].hist;
    svg_cdf(f, "Per endpoint (share of requests answered within x)", EP_NAMES, hs, EP_N);
    const char *const xn[] = {"hold answered taken", "loser heard taken", "time to admission",
                              "hold to confirmed"};
    const sim_hist_t *xs[] = {&r->hold_taken, &r->loser_heard, &r->time_to_admission,
                              &r->hold_to_confirm};
    svg_cdf(f, "Fans' waits", xn, xs, 4);
    fprintf(f, "</div>\n<h2>Per endpoint</h2><table><tr><th>endpoint</th><th>count</th><th>"
               "req/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th><th>4xx"
               "</th><th>5xx</th><th>errors</th></tr>");
    for (int i = 0; i < EP_N; i++) {
        const sim_hist_t *x = &r->ep[i].hist;
        fprintf(f,
                "<tr><td>%s</td><td>%llu</td><td>%.0f</td><td>%.2f</td><td>%.2f</td><td>%.2f"
                "</td><td>%.2f</td><td>%llu</td><td>%llu</td><td>%llu</td></tr>",
                EP_NAMES[i], (unsigned long long)x->count, (double)x->count / duration_s(r),
                ms(sim_hist_quantile(x, .5)), ms(sim_hist_quantile(x, .9)),
                ms(sim_hist_quantile(x, .99)), ms(x->max), (unsigned long long)r->ep[i].by_class[4],
                (unsigned long long)r->ep[i].by_class[5], (unsigned long long)r->ep[i].by_class[0]);
    }
    fprintf(f, "</table>\n<h2>Refusals and errors by cause</h2><table><tr><th>endpoint</th>"
               "<th>status</th><th>cause</th><th>count</th></tr>");
    for (int i = 0; i < EP_N; i++)
        for (int k = 0; k < r->ep[i].ncauses; k++) {
            const sim_cause_t *c = &r->ep[i].causes[k];
            fprintf(f, "<tr><td>%s</td><td>%d</td><td>", EP_NAMES[i], c->status);
            esc(f, c->code);
            fprintf(f, "</td><td>%llu</td></tr>", (unsigned long long)c->n);
        }
    json_t *pace = json_object_get(h, "pacing");
    fprintf(f, "</table>\n<h2>What paced the night</h2><ol>");
    for (size_t i = 0; i < json_array_size(pace); i++) {
        fprintf(f, "<li><b>");
        esc(f, json_string_value(json_object_get(json_array_get(pace, i), "resource")));
        fprintf(f, "</b>: ");
        esc(f, json_string_value(json_object_get(json_array_get(pace, i), "evidence")));
        fprintf(f, "</li>");
    }
    fprintf(f, "</ol>\n<h2>Outcomes</h2><table><tr>");
    for (int i = 1; i < O_NOUTCOMES; i++)
        fprintf(f, "<th>%s</th>", sim_outcome_name(i));
    fprintf(f, "</tr><tr>");
    for (int i = 1; i < O_NOUTCOMES; i++)
        fprintf(f, "<td>%d</td>", r->outcome_count[i]);
    fprintf(f, "</tr></table>\n");
    if (r->nsvc) {
        fprintf(f, "<h2>Services</h2><table><tr><th>process</th><th>peak RSS MB</th><th>peak "
                   "CPU %%</th><th>mean CPU %%</th></tr>");
        for (int i = 0; i < r->nsvc; i++) {
            fprintf(f, "<tr><td>");
            esc(f, r->svc[i].name);
            fprintf(f, "</td><td>%.1f</td><td>%.0f</td><td>%.0f</td></tr>",
                    (double)r->svc[i].peak_rss_kb / 1024.0, r->svc[i].peak_cpu,
                    r->svc[i].samples ? r->svc[i].cpu_sum / r->svc[i].samples : 0.0);
        }
        fprintf(f, "</table>\n");
    }
    json_t *figs = r->figures;
    if (figs) {
        char *s = json_dumps(figs, JSON_INDENT(1) | JSON_SORT_KEYS);
        fprintf(f, "<h2>Audit figures</h2><details><summary>fairness, ETA, admission "
                   "windows, inventory, money</summary><pre>");
        esc(f, s);
        fprintf(f, "</pre></details>\n");
        free(s);
    }
    if (r->timeline && json_array_size(r->timeline)) {
        fprintf(f, "<h2>Operator timeline</h2><table><tr><th>at</th><th>action</th><th>"
                   "result</th></tr>");
        size_t i;
        json_t *t;
        json_array_foreach(r->timeline, i, t)
        {
            fprintf(f, "<tr><td>%.1f s</td><td>", json_number_value(json_object_get(t, "at_s")));
            esc(f, json_string_value(json_object_get(t, "label")));
            fprintf(f, "</td><td>");
            json_t *st = json_object_get(t, "status");
            json_t *ex = json_object_get(t, "exit");
            if (json_is_integer(st))
                fprintf(f, "HTTP %lld", (long long)json_integer_value(st));
            else if (json_is_integer(ex))
                fprintf(f, "exit %lld", (long long)json_integer_value(ex));
            fprintf(f, "</td></tr>");
        }
        fprintf(f, "</table>\n");
    }
    fprintf(f, "</body></html>\n");
    json_decref(h);
}

int sim_report_write(const sim_run_t *r, const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/report.json", dir);
    json_t *o = sim_report_json(r);
    int rc = json_dump_file(o, path, JSON_INDENT(1));
    json_decref(o);
    if (rc != 0) {
        snprintf(err, errlen, "cannot write %s", path);
        return -1;
    }
    /* The simulator's own record, one line per fan (times in ms after the first arrival,
     * -1 when the fan never got there). */
    snprintf(path, sizeof(path), "%s/fans.csv", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "fan,number,prequeue,behaviour,double_click,outcome,arrive_ms,join_sent_ms,"
               "placed_ms,eta_s,admitted_ms,first_hold_ms,hold_ms,done_ms,hold_attempts\n");
    static const char *const beh[] = {"normal", "abandon", "vanish", "slow"};
    for (int i = 0; i < r->nfans; i++) {
        const sim_fan_t *x = &r->fans[i];
#define MS(v) ((v) < 0 ? -1LL : (long long)((v) / 1000000))
        fprintf(f, "%u,%llu,%d,%s,%d,%s,%lld,%lld,%lld,%d,%lld,%lld,%lld,%lld,%u\n", x->id,
                (unsigned long long)x->num, x->in_prequeue, beh[x->behaviour & 3], x->dbl,
                sim_outcome_name(x->outcome), MS(x->arrive_ns), MS(x->join_sent_ns),
                MS(x->placed_ns), x->eta_s, MS(x->admitted_ns), MS(x->first_hold_ns),
                MS(x->hold_ns), MS(x->done_ns), x->hold_attempts);
#undef MS
    }
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%s/report.html", dir);
    f = fopen(path, "w");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    html(r, f);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
