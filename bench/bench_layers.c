/* bench_layers.c - times kiln's dense kernels layer by layer, outside any executor.
 *
 * bench_cpu.py extracts the Conv/MatMul/Gemm layers of a zoo model (shapes after
 * inference at a fixed batch) into a spec file and compiles this driver against
 * build/libkiln.a (CMake builds only src/ and tests/). Each layer runs through the same
 * kernel entry point the executor calls (cpu_kernel_find), on a thread pool of the given
 * size, with fused epilogues as the runtime's fusion pass would mark them.
 *
 * Spec lines (whitespace separated):
 *   conv NAME N C H W M KH KW SH SW PT PL PB PR DH DW GROUP ACT RES
 *   matmul NAME BATCH M K N BIAS ACT          (A [BATCH*M, K] x weight [K, N])
 *   bmm NAME BATCH M K N                      (A [BATCH, M, K] x B [BATCH, K, N])
 * ACT is none|Relu|Clip6|Gelu (any kiln_activation name); RES and BIAS are 0/1.
 * Output: one line per layer "NAME OP MS GFLOPS MIN_MS" (median, its GFLOP/s, minimum), then
 * "total MS" (sum of medians). Conv layers with more than one algorithm (Winograd and
 * implicit GEMM, cpu_conv.h) are timed with each, as the builder's tactic timing would,
 * and report the faster (by median), followed by "ALGO=MS" (median) per algorithm.
 * KILN_BENCH_CONV=gemm|winograd|winograd_f23 times only that one.
 * Usage: bench_layers SPEC THREADS REPEATS
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_kernel.h"
#include "backends/cpu/cpu_winograd.h"

/* KILN_BENCH_CLOCK=thread times with the calling thread's CPU clock: at 1 thread on a
 * machine shared with other jobs it leaves out the time the thread waited for a core
 * (A/B comparisons); wall-clock otherwise. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(bench_clock, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void rnd(rt_value *v, int32_t rank, const int64_t *dims) {
    rt_value_init(v);
    rt_tensor *t = rt_value_as_tensor(v);
    kiln_error e = {0};
    if (rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &e) != KILN_OK) {
        fprintf(stderr, "alloc failed\n");
        exit(1);
    }
    for (uint64_t i = 0; i < t->count; i++) ((float *)t->data)[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
}

static ir_attr ints(const char *name, int n, int64_t *v) {
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = IR_ATTR_INTS;
    a.n = n;
    a.ints = v;
    return a;
}

/* KILN_BENCH_COLD=1: before each run, write a buffer larger than the L3 cache so weights
 * come from memory, as they do inside a whole network (every layer's weights are used
 * once per inference, and ResNet-50's 100 MB do not stay cached).
 * KILN_BENCH_COLD=dirty: the same buffer is written before each run instead of read, so
 * the caches are full of dirty lines, as inside a network (every layer writes its
 * activations) and every line a layer brings in also costs a writeback. ResNet-50's 56x56
 * 1x1 convs, 1 thread, thread clock: medians 15-40% above those with a clean flush, close
 * to their per-node times in `kiln exec` (docs/BENCHMARKS.md, "Session 5: small-K
 * pointwise convs"). */
static float *cold_buf;
static void flush_caches(void) {
    enum { COLD_FLOATS = 16 << 20 }; /* 64 MiB */
    static volatile float sink;
    if (!getenv("KILN_BENCH_COLD")) return;
    if (!cold_buf) { /* written once, then only read: no dirty lines left for the run */
        cold_buf = malloc(COLD_FLOATS * sizeof(float));
        if (cold_buf) memset(cold_buf, 0, COLD_FLOATS * sizeof(float));
    }
    if (!cold_buf) return;
    if (strcmp(getenv("KILN_BENCH_COLD"), "dirty") == 0) {
        static float gen; /* a new value each time: the stores really change the lines */
        gen += 1.f;
        for (size_t i = 0; i < COLD_FLOATS; i += 16) cold_buf[i] = gen;
        return;
    }
    float acc = 0;
    for (size_t i = 0; i < COLD_FLOATS; i += 16) acc += cold_buf[i];
    sink = acc;
}

/* Median time of `reps` runs (after one warm-up) of fn on the node, with its own
 * per-node state, and the minimum in *min_ms; -1 on failure. */
static double time_layer(cpu_kernel_fn fn, const ir_node *node, const ir_graph *graph, cpu_threadpool *pool,
                         const rt_value *const *ins, int32_t n_in, int reps, const char *name, double *min_ms) {
    kiln_error err = {0};
    rt_value out[1];
    void *state = NULL;
    void (*state_free)(void *) = NULL;
    cpu_kernel_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.node = node;
    ctx.graph = graph;
    ctx.pool = pool;
    ctx.err = &err;
    ctx.state = &state;
    ctx.state_free = &state_free;
    double times[256];
    int r_count = reps < 256 ? reps : 256;
    for (int r = -1; r < r_count; r++) { /* one warm-up run */
        rt_value_init(&out[0]);
        flush_caches();
        double t0 = now_ms();
        if (fn(&ctx, ins, n_in, out, 1) != KILN_OK) {
            fprintf(stderr, "%s: %s\n", name, kiln_err_msg(&err));
            return -1;
        }
        double t = now_ms() - t0;
        if (r >= 0) times[r] = t;
        rt_value_release(&out[0]);
    }
    /* median */
    for (int i = 1; i < r_count; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double tmp = times[j];
            times[j] = times[j - 1];
            times[j - 1] = tmp;
        }
    if (state && state_free) state_free(state);
    *min_ms = times[0];
    return times[r_count / 2];
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_layers SPEC THREADS REPEATS\n");
        return 2;
    }
    /* Each timed call allocates its output and the loop frees it. With glibc's defaults a
     * large output is a fresh mmap every time, so every run paid a page fault (and the
     * kernel's zeroing) per 4 KiB of output: ~0.4 ms for a 3.2 MB stage-1 output, and
     * worse at 2 threads (faults serialise on the address space). Inside a network the
     * executor places outputs in its planned arena and never faults, so keep freed memory
     * in the heap for reuse (KILN_BENCH_MMAP=1 restores the old behaviour). */
    if (!getenv("KILN_BENCH_MMAP")) {
        mallopt(M_MMAP_THRESHOLD, 1 << 30);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    const char *clk = getenv("KILN_BENCH_CLOCK");
    if (clk && !strcmp(clk, "thread")) bench_clock = CLOCK_THREAD_CPUTIME_ID;
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    int threads = atoi(argv[2]), reps = atoi(argv[3]);
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    if (cpu_threadpool_create(threads, &pool, &err) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_err_msg(&err));
        return 1;
    }
    char line[512];
    double total = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[16], name[256], act[16] = "none";
        if (sscanf(line, "%15s %255s", kind, name) != 2) continue;
        rt_value in[4], out[1];
        int32_t n_in = 0;
        ir_attr attrs[10];
        int32_t n_attrs = 0;
        int64_t k[2], s[2], p[4], d[2];
        double flops = 0;
        const char *op = NULL;
        if (!strcmp(kind, "conv")) {
            long long N, C, H, W, M, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, G;
            int res = 0;
            if (sscanf(line, "%*s %*s %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %15s %d",
                       &N, &C, &H, &W, &M, &KH, &KW, &SH, &SW, &PT, &PL, &PB, &PR, &DH, &DW, &G, act, &res) < 17)
                continue;
            op = "Conv";
            rnd(&in[0], 4, (int64_t[]){N, C, H, W});
            rnd(&in[1], 4, (int64_t[]){M, C / G, KH, KW});
            rnd(&in[2], 1, (int64_t[]){M});
            n_in = 3;
            k[0] = KH, k[1] = KW, s[0] = SH, s[1] = SW, d[0] = DH, d[1] = DW;
            p[0] = PT, p[1] = PL, p[2] = PB, p[3] = PR;
            attrs[n_attrs++] = ints("kernel_shape", 2, k);
            attrs[n_attrs++] = ints("strides", 2, s);
            attrs[n_attrs++] = ints("pads", 4, p);
            attrs[n_attrs++] = ints("dilations", 2, d);
            memset(&attrs[n_attrs], 0, sizeof attrs[0]);
            attrs[n_attrs].name = "group";
            attrs[n_attrs].type = IR_ATTR_INT;
            attrs[n_attrs++].i = G;
            long long OH = (H + PT + PB - ((KH - 1) * DH + 1)) / SH + 1, OW = (W + PL + PR - ((KW - 1) * DW + 1)) / SW + 1;
            if (res) {
                rnd(&in[3], 4, (int64_t[]){N, M, OH, OW});
                n_in = 4;
                memset(&attrs[n_attrs], 0, sizeof attrs[0]);
                attrs[n_attrs].name = "kiln_residual";
                attrs[n_attrs].type = IR_ATTR_INT;
                attrs[n_attrs++].i = 3;
            }
            flops = 2.0 * N * M * OH * OW * (C / G) * KH * KW;
        } else if (!strcmp(kind, "matmul") || !strcmp(kind, "bmm")) {
            long long B, M, K, N;
            int bias = 0;
            if (sscanf(line, "%*s %*s %lld %lld %lld %lld %d %15s", &B, &M, &K, &N, &bias, act) < 4) continue;
            op = "MatMul";
            if (!strcmp(kind, "matmul")) {
                rnd(&in[0], 3, (int64_t[]){B, M, K});
                rnd(&in[1], 2, (int64_t[]){K, N});
                n_in = 2;
                if (bias) {
                    rnd(&in[2], 1, (int64_t[]){N});
                    n_in = 3;
                    memset(&attrs[n_attrs], 0, sizeof attrs[0]);
                    attrs[n_attrs].name = "kiln_bias";
                    attrs[n_attrs].type = IR_ATTR_INT;
                    attrs[n_attrs++].i = 2;
                }
            } else {
                rnd(&in[0], 3, (int64_t[]){B, M, K});
                rnd(&in[1], 3, (int64_t[]){B, K, N});
                n_in = 2;
            }
            flops = 2.0 * B * M * K * N;
        } else
            continue;
        if (strcmp(act, "none") != 0) {
            memset(&attrs[n_attrs], 0, sizeof attrs[0]);
            attrs[n_attrs].name = "kiln_activation";
            attrs[n_attrs].type = IR_ATTR_STRING;
            const char *an = !strcmp(act, "Clip6") ? "Clip" : act;
            attrs[n_attrs].s.data = an;
            attrs[n_attrs++].s.len = strlen(an);
            if (!strcmp(act, "Clip6")) {
                memset(&attrs[n_attrs], 0, sizeof attrs[0]);
                attrs[n_attrs].name = "kiln_activation_min";
                attrs[n_attrs].type = IR_ATTR_FLOAT;
                attrs[n_attrs++].f = 0.f;
                memset(&attrs[n_attrs], 0, sizeof attrs[0]);
                attrs[n_attrs].name = "kiln_activation_max";
                attrs[n_attrs].type = IR_ATTR_FLOAT;
                attrs[n_attrs++].f = 6.f;
            }
        }
        int32_t out_ids[1] = {4};
        /* A tiny graph so kernels see which inputs are constant: input 1 (the weight of
         * conv/matmul; not of bmm) is an initializer, as in the real models, which lets
         * them use the packed-weight GEMM (cpu_gemm_packed.h). */
        int32_t in_ids[4] = {0, 1, 2, 3};
        ir_tensor dummy_init;
        memset(&dummy_init, 0, sizeof dummy_init);
        ir_value vals[5];
        memset(vals, 0, sizeof vals);
        if (strcmp(kind, "bmm") != 0) vals[1].init = &dummy_init;
        ir_graph graph;
        memset(&graph, 0, sizeof graph);
        graph.values = vals;
        graph.n_values = 5;
        ir_node node;
        memset(&node, 0, sizeof node);
        node.name = name;
        node.op_type = op;
        node.domain = "";
        node.opset = 17;
        node.attrs = attrs;
        node.n_attrs = n_attrs;
        node.n_outputs = 1;
        node.outputs = out_ids;
        node.n_inputs = n_in;
        node.inputs = in_ids;
        const rt_value *ins[4] = {&in[0], &in[1], n_in > 2 ? &in[2] : NULL, n_in > 3 ? &in[3] : NULL};
        cpu_kernel_fn fns[3] = {cpu_kernel_find("", op, 17), NULL, NULL};
        const char *names[3] = {"default", NULL, NULL};
        int nf = 1;
        if (!strcmp(op, "Conv") && cpu_winograd_applies_dims(2, k, s, d, attrs[4].i, in[0].t.dims[1], in[1].t.dims[0])) {
            const char *only = getenv("KILN_BENCH_CONV");
            nf = 0;
            if (!only || !strcmp(only, "gemm")) fns[nf] = cpu_conv_run_gemm, names[nf++] = "gemm";
            if (!only || !strcmp(only, "winograd")) fns[nf] = cpu_conv_run_winograd, names[nf++] = "winograd";
            if (!only || !strcmp(only, "winograd_f23")) fns[nf] = cpu_conv_run_winograd_f23, names[nf++] = "f23";
        }
        double med = 1e30, best = 1e30, meds[3], mins[3];
        for (int v = 0; v < nf; v++) {
            meds[v] = time_layer(fns[v], &node, &graph, pool, ins, n_in, reps, name, &mins[v]);
            if (meds[v] < 0) return 1;
            if (meds[v] < med) {
                med = meds[v];
                best = mins[v];
            }
        }
        total += med;
        /* the minimum too: on a shared machine it is the steadier A/B figure */
        printf("%s %s %.4f %.2f %.4f", name, op, med, flops / med / 1e6, best);
        if (nf > 1 || strcmp(names[0], "default"))
            for (int v = 0; v < nf; v++) printf(" %s=%.4f", names[v], meds[v]);
        printf("\n");
        for (int i = 0; i < n_in; i++) rt_value_release(&in[i]);
    }
    printf("total %.4f\n", total);
    fclose(f);
    cpu_threadpool_free(pool);
    return 0;
}
