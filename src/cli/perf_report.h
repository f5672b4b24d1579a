/* perf_report.h - timing statistics and trtexec-style reports for `kiln exec`.
 *
 * Output mirrors trtexec so scripts that parse it keep working: log lines prefixed
 * "[MM/DD/YYYY-HH:MM:SS] [I] ", the "=== Performance summary ===" block (Throughput,
 * Latency, Enqueue Time, H2D Latency, GPU Compute Time, D2H Latency with min, max, mean,
 * median and percentiles; Total Host Walltime, Total GPU Compute Time), the unstable /
 * host-bound warnings, and the --exportTimes / --exportProfile JSON and --dumpProfile
 * table layouts. Fields that have no meaning on the CPU backend say so instead of
 * printing a made-up number (see docs/EXEC.md).
 */
#ifndef KILN_CLI_PERF_REPORT_H
#define KILN_CLI_PERF_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/strbuf.h"

#define PERF_MAX_PCT 16

typedef struct perf_stats {
    int n;
    double min, max, mean, median, sum, stddev, cov; /* cov: stddev / mean, percent */
    double pct[PERF_MAX_PCT];
    int n_pct;
} perf_stats;

/* Statistics of n samples (need not be sorted; v is not modified). Percentiles use the
 * nearest-rank method. n == 0 gives all zeros. */
void perf_compute(const double *v, int n, const double *pcts, int n_pct, perf_stats *out);

/* One query's timestamps, in ms since the start of the timed phase. On the CPU backend
 * there are no transfers: H2D and D2H are empty intervals at the compute edges. */
typedef struct perf_query {
    double start_ms, end_ms;   /* the whole query (latency) */
    double compute_ms;         /* time inside the engine's run */
    int stream;
    /* GPU (appended): the query's copies, from device events around a graph replay;
     * gpu_phases false when the run was not a replay (node by node: the copies are
     * interleaved with the nodes and compute_ms is the host time of the whole run). */
    double h2d_ms, d2h_ms;
    bool gpu_phases;
} perf_query;

/* Logging in trtexec's format: level 'I', 'W', 'E', 'V'. Verbose lines print only when
 * perf_verbose is set. */
extern bool perf_verbose;
void perf_log(char level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

typedef struct perf_summary_opts {
    const double *pcts;
    int n_pct;
    bool cpu; /* CPU backend: say which GPU fields do not apply */
    int streams;
    int threads;
    double cov_warn_percent; /* warn above this coefficient of variance */
    /* GPU (appended, when !cpu): runs were timed without data transfers (--noDataTransfers) */
    bool no_transfers;
} perf_summary_opts;

/* Prints the === Performance summary === block for the queries; returns the stats of
 * latency and compute in *lat / *comp (may be NULL) and throughput in *qps. */
void perf_print_summary(const perf_query *q, int n, double walltime_ms, const perf_summary_opts *o,
                        perf_stats *lat, perf_stats *comp, double *qps);

/* --avgRuns progress lines: "Average on N runs - GPU latency: ..." style, CPU wording. */
void perf_print_averages(const perf_query *q, int n, int avg_runs);

/* --exportTimes: trtexec's per-query JSON array. */
bool perf_export_times(const char *path, const perf_query *q, int n);

/* Per-layer profile: layer names and per-run times (ms), runs x layers row-major. */
typedef struct perf_layer_profile {
    int n_layers, n_runs;
    const char **names;
    const char **ops;
    const char **tactics; /* may be NULL */
    double *times;        /* [n_runs * n_layers] */
} perf_layer_profile;

/* --dumpProfile: the trtexec profile table. */
void perf_print_profile(const perf_layer_profile *p);
/* --exportProfile: [{"count": N}, {"name": ..., "timeMs": ..., "averageMs": ..., "medianMs": ...,
 * "percentage": ...}, ...] */
bool perf_export_profile(const char *path, const perf_layer_profile *p);
/* The same facts appended to a JSON report (an array value). */
void perf_profile_json(const perf_layer_profile *p, strbuf *sb);
/* A stats object {"min":..,"max":..,...,"percentiles":{"90":..}} into sb. */
void perf_stats_json(const perf_stats *s, const double *pcts, strbuf *sb);

#endif
