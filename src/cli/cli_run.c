/* cli_run.c - `kiln run MODEL.onnx`: runs a model N times on random inputs and prints
 * latency statistics, optionally a per-node / per-op-type profile. The benchmark
 * (bench/bench_cpu.py) drives it; `kiln exec` will subsume it.
 *
 *   kiln run MODEL.onnx [--inputs-random] [--iterations N] [--warmUp N] [--threads N]
 *                       [--shapes name:1x3x224x224,name2:1x128] [--profile] [--int-max N]
 *
 * Symbolic input dims come from --shapes (dims not given default to 1, said on stderr).
 * Integer inputs are drawn from [0, --int-max) (default 100) so ids stay in range for
 * embedding tables; bool inputs are 0/1.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/model_internal.h"
#include "build/memplan.h"
#include "cli/cli.h"
#include "core/cpu_count.h"
#include "runtime/executor.h"
#include "runtime/session.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* dims for input `name` from "--shapes a:1x3,b:2" into dims; returns the rank or -1 */
/* Whether an input's name contains "mask" in any case (attention_mask, input_mask). */
static bool name_says_mask(const char *name) {
    for (const char *p = name; *p; p++) {
        const char *w = "mask";
        size_t i = 0;
        while (w[i] && p[i] && (p[i] | 0x20) == w[i]) i++;
        if (!w[i]) return true;
    }
    return false;
}

static int shape_for(const char *shapes, const char *name, int64_t *dims) {
    if (!shapes) return -1;
    size_t nl = strlen(name);
    const char *p = shapes;
    while (*p) {
        const char *colon = strchr(p, ':');
        if (!colon) return -1;
        const char *end = strchr(colon, ',');
        if (!end) end = colon + strlen(colon);
        if ((size_t)(colon - p) == nl && !strncmp(p, name, nl)) {
            int r = 0;
            const char *q = colon + 1;
            while (q < end && r < RT_MAX_RANK) {
                dims[r++] = strtoll(q, (char **)&q, 10);
                if (*q == 'x') q++;
                else break;
            }
            return r;
        }
        p = *end ? end + 1 : end;
    }
    return -1;
}

typedef struct prof_acc {
    const char *op[4096];
    double ms[4096];
    int n;
    double total;
    int iters;
} prof_acc;

static void prof_cb(const rt_node_profile *p, void *user) {
    prof_acc *a = user;
    double ms = (double)p->total_ns / 1e6 / (double)(p->calls ? p->calls : 1);
    a->total += ms;
    printf("  node %-40s %-22s %9.3f ms\n", p->node->name, p->node->op_type, ms);
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->op[i], p->node->op_type)) {
            a->ms[i] += ms;
            return;
        }
    if (a->n < 4096) {
        a->op[a->n] = p->node->op_type;
        a->ms[a->n++] = ms;
    }
}

/* With a recorded CUDA graph: new input data (every input value halved), one replay and one
 * node-by-node run on it, outputs compared. Catches a graph that reads stale inputs or
 * misses work; prints the largest difference (both runs use the same tactics, so it is
 * normally 0). */
static kiln_status check_graph(rt_session *s, const char **names, const rt_value **ptrs, rt_value *vals,
                               int32_t n_feed, int32_t n_out, kiln_error *e) {
    /* integer inputs are halved too (token ids stay in range, a mask of ones becomes
     * zeros), so models fed only ids (BERT) also see new data */
    for (int32_t i = 0; i < n_feed; i++) {
        rt_tensor *t = &vals[i].t;
        if (t->device != RT_MEM_HOST || !t->data) continue;
        for (uint64_t k = 0; k < t->count; k++) {
            if (t->dtype == KILN_DTYPE_FLOAT) ((float *)t->data)[k] *= 0.5f;
            else if (t->dtype == KILN_DTYPE_INT64) ((int64_t *)t->data)[k] /= 2;
            else if (t->dtype == KILN_DTYPE_INT32) ((int32_t *)t->data)[k] /= 2;
        }
    }
    rt_value *a = calloc((size_t)n_out + 1, sizeof *a), *b = calloc((size_t)n_out + 1, sizeof *b);
    if (!a || !b) {
        free(a), free(b);
        return kiln_err_set(e, KILN_ERR_NOMEM, "out of memory");
    }
    rt_executor *ex = rt_session_executor(s);
    kiln_status st = rt_session_run(s, names, ptrs, n_feed, a, e);
    bool replayed = rt_executor_device_graph_state(ex) == 1;
    rt_executor_set_device_graph(ex, false);
    if (st == KILN_OK) st = rt_session_run(s, names, ptrs, n_feed, b, e);
    double worst = 0, big = 1;
    uint64_t n = 0;
    for (int32_t k = 0; st == KILN_OK && k < n_out; k++) {
        const rt_tensor *x = &a[k].t, *y = &b[k].t;
        if (x->dtype != y->dtype || x->count != y->count) {
            st = kiln_err_set(e, KILN_ERR_RUNTIME, "output %d: the replay and the node-by-node run differ in shape",
                              (int)k);
            break;
        }
        if (x->dtype != KILN_DTYPE_FLOAT) continue;
        for (uint64_t i = 0; i < x->count; i++) {
            double d = fabs((double)((const float *)x->data)[i] - (double)((const float *)y->data)[i]);
            if (!(d <= worst)) worst = d; /* NaN propagates */
            if (fabs((double)((const float *)y->data)[i]) > big) big = fabs((double)((const float *)y->data)[i]);
        }
        n += x->count;
    }
    if (st == KILN_OK)
        printf("cuda graph check: %s vs node-by-node on new inputs: max |diff| = %.3g over %" PRIu64 " values\n",
               replayed ? "replay" : "(no replay!)", worst, n);
    if (st == KILN_OK && (!replayed || !(worst <= 1e-3 * big)))
        st = kiln_err_set(e, KILN_ERR_RUNTIME, "the CUDA graph replay does not match a node-by-node run");
    for (int32_t k = 0; k < n_out; k++) rt_value_release(&a[k]), rt_value_release(&b[k]);
    free(a), free(b);
    return st;
}

int cli_run(int argc, char **argv) {
    const char *path = NULL, *shapes = NULL;
    int iters = 10, warm = 2, threads = 0;
    bool profile = false, no_tf32 = false, fp16 = false, no_graph = false;
    const char *backend = "cpu";
    int64_t int_max = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kiln run MODEL.onnx [--inputs-random] [--iterations N] [--warmUp N] [--threads N]\n"
                   "                [--shapes name:1x3x224x224,...] [--profile] [--int-max N]\n"
                   "                [--backend cpu|cuda] [--noTF32] [--fp16|--best] [--useCudaGraph|--noCudaGraph]\n"
                   "  cuda: runs with unchanged input shapes are recorded once as a CUDA graph and\n"
                   "  replayed (on by default; --noCudaGraph runs node by node)\n");
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--inputs-random")) {
        } else if (!strcmp(a, "--profile")) profile = true;
        else if (!strcmp(a, "--iterations") && has) iters = atoi(argv[++i]);
        else if (!strcmp(a, "--warmUp") && has) warm = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && has) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--backend") && has) backend = argv[++i];
        else if (!strcmp(a, "--noTF32")) no_tf32 = true;
        else if (!strcmp(a, "--fp16") || !strcmp(a, "--best")) fp16 = true; /* --best: the fastest allowed = FP16 */
        else if (!strcmp(a, "--useCudaGraph")) no_graph = false;
        else if (!strcmp(a, "--noCudaGraph")) no_graph = true;
        else if (!strcmp(a, "--shapes") && has) shapes = argv[++i];
        else if (!strcmp(a, "--int-max") && has) int_max = strtoll(argv[++i], NULL, 10);
        else if (a[0] == '-') return cli_usage_error("run", "unknown option '%s' (see kiln run --help)", a);
        else if (!path) path = a;
        else return cli_usage_error("run", "more than one model given ('%s' and '%s')", path, a);
    }
    if (!path) return cli_usage_error("run", "no model given: kiln run MODEL.onnx");
    if (iters < 1 || iters > 100000 || warm < 0 || int_max < 1)
        return cli_usage_error("run", "--iterations must be 1..100000, --warmUp >= 0, --int-max >= 1");
    kiln_model *km = NULL;
    if (kiln_model_load_file(path, NULL, &km) != KILN_OK) {
        fprintf(stderr, "kiln run: %s\n", kiln_model_errmsg(km));
        kiln_model_free(km);
        return CLI_EXIT_FAILED;
    }
    ir_model *m = kiln_model_ir(km);
    rt_session_options so = rt_session_options_default();
    so.threads = threads;
    int usable = kiln_usable_cpus();
    if (threads > usable && strcmp(backend, "cuda") != 0)
        fprintf(stderr, "kiln run: warning: --threads %d on %d usable CPU(s) (affinity mask, cgroup quota): kiln's "
                        "workers spin between layers, so threads that share a CPU slow every layer down\n",
                threads, usable);
    so.profile = profile;
    /* for the memory line (planned arena vs lower bound); per-node size accounting would
     * keep a device executor from recording CUDA graphs, so not on cuda */
    so.record_sizes = strcmp(backend, "cuda") != 0;
    so.backend = backend;
    so.no_tf32 = no_tf32;
    so.fp16 = fp16;
    so.no_device_graph = no_graph;
    so.run_passes = true;
    rt_session *s = NULL;
    kiln_error e = {0};
    int rc = CLI_EXIT_FAILED;
    const ir_graph *g = m->graph;
    int32_t n_feed = 0, n_out = 0;
    const char **names = calloc((size_t)g->n_inputs + 1, sizeof *names);
    rt_value *vals = calloc((size_t)g->n_inputs + 1, sizeof *vals);
    const rt_value **ptrs = calloc((size_t)g->n_inputs + 1, sizeof *ptrs);
    rt_value *outs = NULL;
    double *times = calloc((size_t)iters, sizeof *times);
    if (!names || !vals || !ptrs || !times) goto done;
    if (rt_session_create(m, &so, &s, &e) != KILN_OK) {
        fprintf(stderr, "kiln run: %s\n", kiln_err_msg(&e));
        goto done;
    }
    uint32_t seed = 1;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        if (v->flags & IR_VALUE_INITIALIZER) continue;
        if (v->type.kind != IR_TYPE_TENSOR || v->type.rank < 0) {
            fprintf(stderr, "kiln run: input '%s' is not a tensor of known rank; random inputs cannot be made\n",
                    v->name);
            goto done;
        }
        int64_t dims[RT_MAX_RANK];
        int r = shape_for(shapes, v->name, dims);
        if (r >= 0 && r != v->type.rank) {
            fprintf(stderr, "kiln run: --shapes gives %d dims for '%s', the model declares %d\n", r, v->name,
                    v->type.rank);
            goto done;
        }
        if (r < 0)
            for (int32_t d = 0; d < v->type.rank; d++) {
                dims[d] = v->type.dims[d].kind == IR_DIM_CONST ? v->type.dims[d].value : 1;
                if (v->type.dims[d].kind != IR_DIM_CONST)
                    fprintf(stderr, "kiln run: input '%s' dim %d is symbolic; using 1 (set it with --shapes)\n",
                            v->name, d);
            }
        rt_value_init(&vals[n_feed]);
        rt_tensor *t = rt_value_as_tensor(&vals[n_feed]);
        if (rt_tensor_alloc(t, v->type.dtype, v->type.rank, dims, &e) != KILN_OK) {
            fprintf(stderr, "kiln run: input '%s': %s\n", v->name, kiln_err_msg(&e));
            goto done;
        }
        /* Integer inputs named like a mask (attention_mask, ...) get 0/1: a random 0..99
         * "mask" drives (1 - mask) * -10000 far outside float16's range, which no real
         * input does. */
        int64_t imax = name_says_mask(v->name) ? 2 : int_max;
        for (uint64_t k = 0; k < t->count; k++) {
            seed = seed * 1664525u + 1013904223u;
            uint32_t rnd = seed >> 8;
            switch (t->dtype) {
            case KILN_DTYPE_FLOAT: ((float *)t->data)[k] = (float)(rnd & 0xffff) / 32768.f - 1.f; break;
            case KILN_DTYPE_INT64: ((int64_t *)t->data)[k] = (int64_t)(rnd % (uint64_t)imax); break;
            case KILN_DTYPE_INT32: ((int32_t *)t->data)[k] = (int32_t)(rnd % (uint64_t)imax); break;
            case KILN_DTYPE_BOOL: ((uint8_t *)t->data)[k] = (uint8_t)(rnd & 1); break;
            default:
                if (k == 0) memset(t->data, 0, t->nbytes);
                break;
            }
        }
        if (!strcmp(backend, "cuda")) cli_pin_host_tensor(t); /* full-speed H2D copies, as kiln exec */
        names[n_feed] = v->name;
        ptrs[n_feed] = &vals[n_feed];
        n_feed++;
    }
    n_out = rt_session_n_outputs(s);
    outs = calloc((size_t)n_out + 1, sizeof *outs);
    if (!outs) goto done;
    double ph_sum[3] = {0, 0, 0};
    int ph_n = 0;
    for (int it = -warm; it < iters; it++) {
        for (int32_t k = 0; k < n_out; k++) rt_value_init(&outs[k]);
        double t0 = now_ms();
        if (rt_session_run(s, names, ptrs, n_feed, outs, &e) != KILN_OK) {
            fprintf(stderr, "kiln run: %s\n", kiln_err_msg(&e));
            goto done;
        }
        double t = now_ms() - t0;
        if (it >= 0) times[it] = t;
        uint64_t ph[3];
        rt_executor_last_phase_ns(rt_session_executor(s), &ph[0], &ph[1], &ph[2]);
        if (it >= 0 && ph[1]) {
            for (int k = 0; k < 3; k++) ph_sum[k] += (double)ph[k] / 1e6;
            ph_n++;
        }
        for (int32_t k = 0; k < n_out; k++) rt_value_release(&outs[k]);
    }
    double sum = 0;
    for (int i = 0; i < iters; i++) sum += times[i];
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    printf("%s: %d iterations, %d warm-up, threads %d, backend %s%s\n", path, iters, warm, threads, backend,
           strcmp(backend, "cuda") ? "" : fp16 ? " (FP16)" : no_tf32 ? " (FP32)" : " (TF32)");
    printf("latency: median = %.3f ms, mean = %.3f ms, p90 = %.3f ms, min = %.3f ms\n", times[iters / 2],
           sum / iters, times[(iters * 9) / 10 < iters ? (iters * 9) / 10 : iters - 1], times[0]);
    if (!strcmp(backend, "cuda")) {
        rt_executor *ex = rt_session_executor(s);
        if (rt_executor_device_graph_state(ex) == 1) {
            printf("cuda graph: replayed; mean of %d runs: h2d %.3f ms, compute %.3f ms, d2h %.3f ms (device "
                   "events)\n", ph_n, ph_n ? ph_sum[0] / ph_n : 0, ph_n ? ph_sum[1] / ph_n : 0,
                   ph_n ? ph_sum[2] / ph_n : 0);
            int32_t hn = rt_executor_device_graph_host_nodes(ex);
            if (hn)
                printf("cuda graph: %d shape node%s evaluated on the host once per input shape, their values "
                       "constants of the graph\n", (int)hn, hn == 1 ? "" : "s");
            if (check_graph(s, names, ptrs, vals, n_feed, n_out, &e) != KILN_OK) {
                fprintf(stderr, "kiln run: cuda graph check: %s\n", kiln_err_msg(&e));
                goto done;
            }
        } else {
            printf("cuda graph: not used (%s)\n", rt_executor_device_graph_why(ex));
        }
        const rt_backend *be = rt_session_backend(s);
        if (be->mem_report) {
            rt_device_mem dm;
            be->mem_report(rt_session_backend_ctx(s), &dm);
            uint64_t w = rt_executor_device_weight_bytes(ex);
            uint64_t act = dm.pool_used_peak > w ? dm.pool_used_peak - w : 0;
            printf("device memory: weights %.2f MiB, activations and I/O %.2f MiB (peak in use, minus weights), "
                   "workspace %.2f MiB; total %.2f MiB\n", (double)w / (1 << 20), (double)act / (1 << 20),
                   (double)dm.workspace / (1 << 20), (double)(dm.pool_used_peak + dm.workspace) / (1 << 20));
        }
    }
    {
        /* Memory: the lifetime plan (build/memplan.c) over this run's real sizes, its lower
         * bound, and what the executor's buffer pool really holds for intermediates. */
        const uint64_t *sizes = rt_executor_value_sizes(rt_session_executor(s));
        build_memplan plan;
        kiln_error pe = {0};
        if (sizes && build_memplan_graph(rt_session_model(s)->graph, sizes, &plan, &pe) == KILN_OK) {
            rt_bufpool_stats bs = rt_executor_bufpool_stats(rt_session_executor(s));
            printf("memory: planned arena %.2f MiB for %d tensors (lower bound %.2f MiB, no reuse %.2f MiB); "
                   "buffer pool holds %.2f MiB (%" PRIu64 " allocations, %" PRIu64 " reused)\n",
                   plan.arena_bytes / 1048576.0, (int)plan.n_tensors, plan.lower_bound / 1048576.0,
                   plan.total_bytes / 1048576.0, bs.bytes_owned / 1048576.0, bs.misses, bs.hits);
            build_memplan_free(&plan);
        }
        kiln_err_clear(&pe);
        const rt_backend *mb = rt_session_backend(s);
        if (!strcmp(backend, "cpu") && mb->mem_report) {
            rt_device_mem cm;
            mb->mem_report(rt_session_backend_ctx(s), &cm);
            printf("kernel scratch: %.2f MiB, one set shared by all layers\n", (double)cm.workspace / 1048576.0);
        }
        uint64_t hits = 0, misses = 0;
        rt_executor_arena_counts(rt_session_executor(s), &hits, &misses);
        if (rt_executor_arena_bytes(rt_session_executor(s)))
            printf("activation arena: %.2f MiB in use; %" PRIu64 " node outputs placed in it, %" PRIu64
                   " fell back to the pool since it was planned (sizes that differ from the plan)\n",
                   rt_executor_arena_bytes(rt_session_executor(s)) / 1048576.0, hits, misses);
    }
    if (profile) {
        static prof_acc acc;
        memset(&acc, 0, sizeof acc);
        acc.iters = iters + warm;
        printf("profile (mean per call over %d runs incl. warm-up):\n", acc.iters);
        rt_executor_foreach_profile(rt_session_executor(s), prof_cb, &acc);
        printf("by op type:\n");
        for (int i = 0; i < acc.n; i++)
            printf("  %-22s %9.3f ms  %5.1f%%\n", acc.op[i], acc.ms[i], acc.total > 0 ? 100 * acc.ms[i] / acc.total : 0);
    }
    rc = CLI_EXIT_OK;
done:
    for (int32_t i = 0; i < n_feed; i++) rt_value_release(&vals[i]);
    free(names);
    free(vals);
    free(ptrs);
    free(outs);
    free(times);
    rt_session_free(s);
    kiln_err_clear(&e);
    kiln_model_free(km);
    return rc;
}
