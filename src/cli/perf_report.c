/* perf_report.c - statistics and trtexec-format reports (see perf_report.h). */
#include "cli/perf_report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool perf_verbose = false;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void perf_compute(const double *v, int n, const double *pcts, int n_pct, perf_stats *o) {
    memset(o, 0, sizeof *o);
    o->n = n;
    o->n_pct = n_pct > PERF_MAX_PCT ? PERF_MAX_PCT : n_pct;
    if (n <= 0) return;
    double *s = malloc(sizeof *s * (size_t)n);
    if (!s) return;
    memcpy(s, v, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    o->min = s[0];
    o->max = s[n - 1];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += s[i];
    o->sum = sum;
    o->mean = sum / n;
    o->median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    double var = 0;
    for (int i = 0; i < n; i++) var += (s[i] - o->mean) * (s[i] - o->mean);
    o->stddev = sqrt(var / n);
    o->cov = o->mean > 0 ? 100.0 * o->stddev / o->mean : 0;
    for (int k = 0; k < o->n_pct; k++) {
        long idx = (long)ceil(pcts[k] / 100.0 * n) - 1;
        if (idx < 0) idx = 0;
        if (idx >= n) idx = n - 1;
        o->pct[k] = s[idx];
    }
    free(s);
}

void perf_log(char level, const char *fmt, ...) {
    if (level == 'V' && !perf_verbose) return;
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    char ts[32];
    strftime(ts, sizeof ts, "%m/%d/%Y-%H:%M:%S", &tmv);
    FILE *out = level == 'E' ? stderr : stdout;
    fprintf(out, "[%s] [%c] ", ts, level);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}

static void stats_line(const char *label, const perf_stats *s, const double *pcts, const char *unit) {
    char buf[1024];
    int len = snprintf(buf, sizeof buf, "%s: min = %g %s, max = %g %s, mean = %g %s, median = %g %s", label, s->min,
                       unit, s->max, unit, s->mean, unit, s->median, unit);
    for (int k = 0; k < s->n_pct && len < (int)sizeof buf; k++)
        len += snprintf(buf + len, sizeof buf - (size_t)len, ", percentile(%g%%) = %g %s", pcts[k], s->pct[k], unit);
    perf_log('I', "%s", buf);
}

void perf_print_summary(const perf_query *q, int n, double wall_ms, const perf_summary_opts *o, perf_stats *lat_out,
                        perf_stats *comp_out, double *qps_out) {
    double *lat = malloc(sizeof *lat * (size_t)(n ? n : 1));
    double *comp = malloc(sizeof *comp * (size_t)(n ? n : 1));
    if (!lat || !comp) {
        free(lat);
        free(comp);
        return;
    }
    /* GPU: trtexec's Latency is H2D + GPU compute + D2H of the query; Enqueue Time is the
     * host time of the call (kiln's runs return with the outputs on the host, so it
     * includes the wait) */
    double *enq = malloc(sizeof *enq * (size_t)(n ? n : 1));
    double *h2d = malloc(sizeof *h2d * (size_t)(n ? n : 1));
    double *d2h = malloc(sizeof *d2h * (size_t)(n ? n : 1));
    if (!enq || !h2d || !d2h) {
        free(lat), free(comp), free(enq), free(h2d), free(d2h);
        return;
    }
    int n_phased = 0;
    for (int i = 0; i < n; i++) {
        enq[i] = q[i].end_ms - q[i].start_ms;
        lat[i] = !o->cpu && q[i].gpu_phases ? q[i].h2d_ms + q[i].compute_ms + q[i].d2h_ms : enq[i];
        comp[i] = q[i].compute_ms;
        h2d[i] = q[i].h2d_ms;
        d2h[i] = q[i].d2h_ms;
        n_phased += q[i].gpu_phases;
    }
    perf_stats ls, cs, es, hs, ds;
    perf_compute(lat, n, o->pcts, o->n_pct, &ls);
    perf_compute(comp, n, o->pcts, o->n_pct, &cs);
    perf_compute(enq, n, o->pcts, o->n_pct, &es);
    perf_compute(h2d, n, o->pcts, o->n_pct, &hs);
    perf_compute(d2h, n, o->pcts, o->n_pct, &ds);
    double qps = wall_ms > 0 ? n / (wall_ms / 1000.0) : 0;
    perf_log('I', "=== Performance summary ===");
    perf_log('I', "Throughput: %g qps", qps);
    stats_line("Latency", &ls, o->pcts, "ms");
    if (o->cpu) {
        /* A CPU run is synchronous: enqueuing a query is running it. */
        stats_line("Enqueue Time", &cs, o->pcts, "ms");
        perf_log('I', "H2D Latency: not applicable on the CPU backend (inputs are read where they are)");
        stats_line("GPU Compute Time", &cs, o->pcts, "ms");
        perf_log('I', "  (CPU backend: \"GPU Compute Time\" is the engine's compute time on the CPU, %d thread%s per stream)",
                 o->threads, o->threads == 1 ? "" : "s");
        perf_log('I', "D2H Latency: not applicable on the CPU backend (outputs are written where they are read)");
    } else {
        stats_line("Enqueue Time", &es, o->pcts, "ms");
        if (o->no_transfers && n_phased == n)
            perf_log('I', "H2D Latency: not measured (--noDataTransfers: the timed runs copy no inputs)");
        else if (n_phased == n)
            stats_line("H2D Latency", &hs, o->pcts, "ms");
        else
            perf_log('I', "H2D Latency: included in GPU Compute Time (%d of %d queries ran node by node, copies "
                          "interleaved with the layers; see the CUDA graph line above)", n - n_phased, n);
        stats_line("GPU Compute Time", &cs, o->pcts, "ms");
        if (o->no_transfers && n_phased == n)
            perf_log('I', "D2H Latency: not measured (--noDataTransfers: the timed runs copy no outputs)");
        else if (n_phased == n)
            stats_line("D2H Latency", &ds, o->pcts, "ms");
        else
            perf_log('I', "D2H Latency: included in GPU Compute Time (node-by-node runs)");
    }
    perf_log('I', "Total Host Walltime: %g s", wall_ms / 1000.0);
    perf_log('I', "Total GPU Compute Time: %g s%s", cs.sum / 1000.0, o->cpu ? " (CPU compute time, all streams)" : "");
    bool warned = false;
    if (cs.cov > o->cov_warn_percent) {
        perf_log('W', "* %s compute time is unstable, with coefficient of variance = %g%%.", o->cpu ? "CPU" : "GPU", cs.cov);
        perf_log('W', "  Other processes, CPU frequency scaling or more --threads than free cores can cause this; "
                      "pin the run (taskset), close other work, or lower --threads.");
        warned = true;
    }
    /* host-bound: compute covers much less of the wall time than the streams could */
    double busy = wall_ms * (o->streams > 0 ? o->streams : 1);
    if (n > 0 && busy > 0 && cs.sum < 0.8 * busy) {
        perf_log('W', "* Throughput may be bound by host-side work rather than compute: compute covered %.0f%% of "
                      "the wall time across %d stream%s.",
                 100.0 * cs.sum / busy, o->streams, o->streams == 1 ? "" : "s");
        perf_log('W', "  Input preparation, output copies (--exportOutput, --dumpOutput) or very small models cause this.");
        warned = true;
    }
    (void)warned;
    perf_log('I', "Explanations of the performance metrics are printed in the verbose logs.");
    perf_log('V', "=== Explanations of the performance metrics ===");
    perf_log('V', "Total Host Walltime: the host walltime from when the first query (after warmups) starts to when the last query is completed.");
    if (o->cpu) {
        perf_log('V', "GPU Compute Time: on the CPU backend, the time the engine spends computing one query.");
        perf_log('V', "Total GPU Compute Time: the sum of the compute time of all queries.");
        perf_log('V', "Throughput: the number of queries divided by the Total Host Walltime.");
        perf_log('V', "Enqueue Time: on the CPU backend runs are synchronous, so this equals the compute time.");
        perf_log('V', "Latency: the time of one query, from handing inputs over to having outputs.");
    } else {
        perf_log('V', "GPU Compute Time: the GPU time of the recorded CUDA graph of one query (device events).");
        perf_log('V', "Total GPU Compute Time: the sum of the GPU Compute Time of all queries.");
        perf_log('V', "Throughput: the number of queries divided by the Total Host Walltime.");
        perf_log('V', "Enqueue Time: the host time of one run call; kiln's runs return with the outputs on the host, "
                      "so it includes waiting for the GPU.");
        perf_log('V', "H2D Latency: the time of the input copies of one query (page-locked host buffers).");
        perf_log('V', "D2H Latency: the time of the output copies of one query (page-locked host buffers).");
        perf_log('V', "Latency: H2D Latency + GPU Compute Time + D2H Latency of one query.");
    }
    if (lat_out) *lat_out = ls;
    if (comp_out) *comp_out = cs;
    if (qps_out) *qps_out = qps;
    free(lat);
    free(comp);
    free(enq), free(h2d), free(d2h);
}

void perf_print_averages(const perf_query *q, int n, int avg_runs) {
    if (avg_runs <= 0) return;
    for (int start = 0; start + avg_runs <= n; start += avg_runs) {
        double lat = 0, comp = 0;
        for (int i = start; i < start + avg_runs; i++) {
            lat += q[i].end_ms - q[i].start_ms;
            comp += q[i].compute_ms;
        }
        perf_log('I', "Average on %d runs - GPU latency: %g ms - Host latency: %g ms (enqueue %g ms)", avg_runs,
                 comp / avg_runs, lat / avg_runs, comp / avg_runs);
    }
}

bool perf_export_times(const char *path, const perf_query *q, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "[");
    for (int i = 0; i < n; i++) {
        double s = q[i].start_ms, e = q[i].end_ms;
        double h = q[i].gpu_phases ? q[i].h2d_ms : 0, d = q[i].gpu_phases ? q[i].d2h_ms : 0;
        /* phases laid end to end, ending with the query: [h2d][compute][d2h] */
        double d2h_s = e - d, cs = d2h_s - q[i].compute_ms, h2d_s = cs - h;
        if (h2d_s < s) h2d_s = s;
        fprintf(f,
                "%s\n  { \"startEnqMs\" : %.6f, \"endEnqMs\" : %.6f, \"startH2DMs\" : %.6f, \"endH2DMs\" : %.6f, "
                "\"startComputeMs\" : %.6f, \"endComputeMs\" : %.6f, \"startD2HMs\" : %.6f, \"endD2HMs\" : %.6f, "
                "\"h2dMs\" : %.6f, \"computeMs\" : %.6f, \"d2hMs\" : %.6f, \"latencyMs\" : %.6f, "
                "\"endToEndMs\" : %.6f, \"stream\" : %d }",
                i ? "," : "", s, e, h2d_s, cs, cs, d2h_s, d2h_s, e, h, q[i].compute_ms, d,
                q[i].gpu_phases ? h + q[i].compute_ms + d : e - s, e - s, q[i].stream);
    }
    fprintf(f, "\n]\n");
    return fclose(f) == 0;
}

/* per-layer totals, averages and medians */
typedef struct layer_row {
    double total, avg, median;
} layer_row;

static layer_row *layer_rows(const perf_layer_profile *p, double *grand) {
    layer_row *rows = calloc((size_t)(p->n_layers ? p->n_layers : 1), sizeof *rows);
    double *col = malloc(sizeof *col * (size_t)(p->n_runs ? p->n_runs : 1));
    *grand = 0;
    if (!rows || !col) {
        free(rows);
        free(col);
        return NULL;
    }
    for (int l = 0; l < p->n_layers; l++) {
        for (int r = 0; r < p->n_runs; r++) col[r] = p->times[(size_t)r * (size_t)p->n_layers + (size_t)l];
        perf_stats s;
        perf_compute(col, p->n_runs, NULL, 0, &s);
        rows[l].total = s.sum;
        rows[l].avg = s.mean;
        rows[l].median = s.median;
        *grand += s.sum;
    }
    free(col);
    return rows;
}

void perf_print_profile(const perf_layer_profile *p) {
    double grand;
    layer_row *rows = layer_rows(p, &grand);
    if (!rows) return;
    perf_log('I', "%s", "");
    perf_log('I', "=== Profile (%d iterations ) ===", p->n_runs);
    perf_log('I', "   Time(ms)     Avg.(ms)   Median(ms)   Time(%%)   Layer");
    double avg_total = 0, med_total = 0;
    for (int l = 0; l < p->n_layers; l++) {
        perf_log('I', "%11.2f %12.4f %12.4f %9.1f   %s", rows[l].total, rows[l].avg, rows[l].median,
                 grand > 0 ? 100.0 * rows[l].total / grand : 0.0, p->names[l]);
        avg_total += rows[l].avg;
        med_total += rows[l].median;
    }
    perf_log('I', "%11.2f %12.4f %12.4f %9.1f   Total", grand, avg_total, med_total, grand > 0 ? 100.0 : 0.0);
    perf_log('I', "%s", "");
    free(rows);
}

void perf_profile_json(const perf_layer_profile *p, strbuf *sb) {
    double grand;
    layer_row *rows = layer_rows(p, &grand);
    if (!rows) return;
    sb_printf(sb, "[\n  { \"count\" : %d }", p->n_runs);
    for (int l = 0; l < p->n_layers; l++) {
        sb_append(sb, ",\n  { \"name\" : ");
        sb_json_string(sb, p->names[l], strlen(p->names[l]));
        if (p->ops) {
            sb_append(sb, ", \"op\" : ");
            sb_json_string(sb, p->ops[l], strlen(p->ops[l]));
        }
        if (p->tactics && p->tactics[l]) {
            sb_append(sb, ", \"tactic\" : ");
            sb_json_string(sb, p->tactics[l], strlen(p->tactics[l]));
        }
        sb_printf(sb, ", \"timeMs\" : %.6f, \"averageMs\" : %.6f, \"medianMs\" : %.6f, \"percentage\" : %.4f }",
                  rows[l].total, rows[l].avg, rows[l].median, grand > 0 ? 100.0 * rows[l].total / grand : 0.0);
    }
    sb_append(sb, "\n]");
    free(rows);
}

bool perf_export_profile(const char *path, const perf_layer_profile *p) {
    strbuf sb;
    sb_init(&sb);
    perf_profile_json(p, &sb);
    sb_putc(&sb, '\n');
    FILE *f = fopen(path, "w");
    bool ok = f && !sb.failed && fwrite(sb.data, 1, sb.len, f) == sb.len;
    if (f && fclose(f) != 0) ok = false;
    sb_free(&sb);
    return ok;
}

void perf_stats_json(const perf_stats *s, const double *pcts, strbuf *sb) {
    sb_printf(sb, "{\"n\": %d, \"min\": %.6f, \"max\": %.6f, \"mean\": %.6f, \"median\": %.6f, \"stddev\": %.6f, "
                  "\"cov_percent\": %.4f, \"sum\": %.6f, \"percentiles\": {",
              s->n, s->min, s->max, s->mean, s->median, s->stddev, s->cov, s->sum);
    for (int k = 0; k < s->n_pct; k++) sb_printf(sb, "%s\"%g\": %.6f", k ? ", " : "", pcts[k], s->pct[k]);
    sb_append(sb, "}}");
}
