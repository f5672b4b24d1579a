/* tactic_timing.c - times a node's candidate tactics against each other (tactics.h).
 *
 * Every timed run starts with cold caches: inside a network every node's weights are used
 * once per inference and evicted by the others' (ResNet-50's 100 MB), so a tactic whose
 * repacked weights are larger (Winograd's are 1.8-4x) must be timed reading them from
 * memory, not from an L3 that back-to-back runs keep warm.
 *
 * The candidates are timed in alternation, one run of each per round (ABC, then CBA, ...),
 * not one tactic's runs after the other's. On a shared machine the speed drifts by 10-100%
 * within seconds; timed back to back, a slow spell that fell on one tactic's runs decided
 * the choice. Three builds of ResNet-50 at 2 threads with back-to-back timing (session 7):
 * layer1's 3x3 convs measured F(4x4) 1.89 / F(2x2) 1.61 ms in one build and 0.81 / 1.27
 * and 1.06 / 1.92 in the other two, so one engine ran F(2x2) there, which in the network
 * was 1.4 against 1.05 ms per layer (bench/ab_kiln.py, 8 alternating rounds).
 *
 * Each tactic's figure is the minimum over the rounds: the noise only ever adds time.
 * (Session 4, back-to-back timing, ResNet-50 at 2 threads, 4-5 builds each: with the
 * median of 5 runs 5 of 52 stage 1-3 Winograd choices flipped between builds, with the
 * minimum 2 of 65.)
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "build/tactics.h"
#include "backends/cpu/cpu_kernel.h"

/* More than the last-level cache of the machines kiln targets (32 MiB on Zen 3 EPYC). */
#define BUILD_TACTIC_COLD_BYTES (48u << 20)
#define MAX_IO 64

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The node's inputs: initializer data where it reads initializers, deterministic
 * pseudo-random floats elsewhere (integer inputs stay zero: always in range). */
static kiln_status make_inputs(const build_tactic_query *q, rt_value *vals, const rt_value **ins, kiln_error *err) {
    const ir_node *node = q->node;
    uint32_t seed = 12345;
    for (int32_t i = 0; i < q->n_in; i++) {
        const ir_type *ty = q->in[i];
        int32_t vid = i < node->n_inputs ? node->inputs[i] : IR_NONE;
        if (!ty || vid == IR_NONE) continue;
        const ir_value *v = &q->graph->values[vid];
        if (v->init && v->init->data) {
            kiln_status st = rt_tensor_from_ir(rt_value_as_tensor(&vals[i]), v->init, err);
            if (st != KILN_OK) return st;
            ins[i] = &vals[i];
            continue;
        }
        if (ty->kind != IR_TYPE_TENSOR || ty->rank < 0 || ty->rank > RT_MAX_RANK || ty->dtype == KILN_DTYPE_STRING)
            return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "input %d of '%s' is not a plain tensor: not timed", i,
                                node->name);
        int64_t dims[RT_MAX_RANK];
        for (int32_t d = 0; d < ty->rank; d++) {
            if (!ty->dims || ty->dims[d].kind != IR_DIM_CONST)
                return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "input %d of '%s' has no concrete shape", i, node->name);
            dims[d] = ty->dims[d].value;
        }
        rt_tensor *tt = rt_value_as_tensor(&vals[i]);
        kiln_status st = rt_tensor_alloc_zero(tt, ty->dtype, ty->rank, dims, err);
        if (st != KILN_OK) return st;
        if (ty->dtype == KILN_DTYPE_FLOAT) {
            float *f = tt->data;
            for (uint64_t k = 0; k < tt->count; k++) {
                seed = seed * 1664525u + 1013904223u;
                f[k] = (float)(seed >> 9) / 8388608.0f - 1.0f;
            }
        }
        ins[i] = &vals[i];
    }
    return KILN_OK;
}

/* One tactic under timing: its kernel and the node state it keeps between runs. */
typedef struct timed {
    cpu_kernel_fn fn;
    void *state;
    void (*state_free)(void *);
    bool failed;
} timed;

/* One run of tactic t; its time in ms, or -1 (and t->failed) when the kernel failed. */
static double run_once(const build_tactic_query *q, cpu_threadpool *pool, timed *t, const rt_value *const *ins,
                       rt_value *outs) {
    kiln_error kerr = {0};
    cpu_kernel_ctx ctx = {.model = q->model, .graph = q->graph, .node = q->node, .pool = pool, .err = &kerr,
                          .state = &t->state, .state_free = &t->state_free};
    double t0 = now_ms();
    kiln_status st = t->fn(&ctx, ins, q->n_in, outs, q->n_out);
    double t1 = now_ms();
    for (int32_t i = 0; i < q->n_out; i++) rt_value_release(&outs[i]);
    kiln_err_clear(&kerr);
    if (st != KILN_OK) t->failed = true;
    return st == KILN_OK ? t1 - t0 : -1;
}

kiln_status build_tactics_time(const build_tactic *const *ts, int32_t n_t, const build_tactic_query *q,
                               cpu_threadpool *pool, int rounds, double *ms, kiln_error *err) {
    const ir_node *node = q->node;
    for (int32_t k = 0; k < n_t; k++) ms[k] = -1;
    for (int32_t i = 0; i < node->n_attrs; i++)
        if (node->attrs[i].type == IR_ATTR_GRAPH || node->attrs[i].type == IR_ATTR_GRAPHS)
            return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "node '%s' has subgraphs: not timed", node->name);
    if (q->n_in > MAX_IO || q->n_out > MAX_IO)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "too many inputs to time");
    if (n_t < 1) return KILN_OK;
    timed *tt = calloc((size_t)n_t, sizeof *tt);
    if (!tt) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory timing tactics");
    for (int32_t k = 0; k < n_t; k++) {
        tt[k].fn = ts[k]->run ? ts[k]->run : cpu_kernel_find(node->domain, node->op_type, node->opset);
        tt[k].failed = tt[k].fn == NULL;
    }
    rt_value vals[MAX_IO], outs[MAX_IO];
    const rt_value *ins[MAX_IO];
    for (int32_t i = 0; i < q->n_in; i++) {
        rt_value_init(&vals[i]);
        ins[i] = NULL;
    }
    for (int32_t i = 0; i < q->n_out; i++) rt_value_init(&outs[i]);
    kiln_status st = make_inputs(q, vals, ins, err);
    size_t cold_n = (size_t)BUILD_TACTIC_COLD_BYTES / sizeof(float);
    float *cold = st == KILN_OK ? malloc(cold_n * sizeof(float)) : NULL;
    /* written once (untouched pages would all map the one zero page), then only read
     * before each run: reads evict without leaving dirty lines for the run to write back */
    if (cold) memset(cold, 0, cold_n * sizeof(float));
    volatile float sink = 0;
    int n_rounds = rounds < 1 ? 1 : rounds;
    /* round 0 warms up (node state: packed weights, scratch) and is not counted */
    for (int r = 0; r <= n_rounds && st == KILN_OK; r++)
        for (int32_t j = 0; j < n_t; j++) {
            int32_t k = r % 2 ? n_t - 1 - j : j;
            timed *t = &tt[k];
            if (t->failed) continue;
            if (cold) {
                float acc = 0;
                for (size_t c = 0; c < cold_n; c += 16) acc += cold[c];
                sink = acc;
            }
            double sample = run_once(q, pool, t, ins, outs);
            if (r > 0 && sample >= 0 && (ms[k] < 0 || sample < ms[k])) ms[k] = sample;
        }
    (void)sink;
    free(cold);
    for (int32_t k = 0; k < n_t; k++) {
        if (tt[k].failed) ms[k] = -1;
        if (tt[k].state && tt[k].state_free) tt[k].state_free(tt[k].state);
    }
    free(tt);
    for (int32_t i = 0; i < q->n_in; i++) rt_value_release(&vals[i]);
    return st;
}

kiln_status build_tactics_time_c16(const build_tactic *const *ts, int32_t n_t, const build_tactic_query *q,
                                   cpu_threadpool *pool, int rounds, double *ms, kiln_error *err) {
    const ir_node *n = q->node;
    ir_attr *attrs = calloc((size_t)n->n_attrs + 1, sizeof *attrs);
    if (!attrs) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory timing tactics");
    int32_t na = 0;
    for (int32_t i = 0; i < n->n_attrs; i++)
        if (!n->attrs[i].name || strcmp(n->attrs[i].name, "kiln_c16")) attrs[na++] = n->attrs[i];
    attrs[na].name = "kiln_c16";
    attrs[na].type = IR_ATTR_INT;
    attrs[na].i = 1 | 2 | (ir_node_attr_int(n, "kiln_residual", -1) > 0 ? 4 : 0);
    ir_node copy = *n;
    copy.attrs = attrs;
    copy.n_attrs = na + 1;
    build_tactic_query cq = *q;
    cq.node = &copy;
    kiln_status st = build_tactics_time(ts, n_t, &cq, pool, rounds, ms, err);
    free(attrs);
    return st;
}

kiln_status build_tactic_time(const build_tactic *t, const build_tactic_query *q, cpu_threadpool *pool, int reps,
                              double *ms, kiln_error *err) {
    kiln_status st = build_tactics_time(&t, 1, q, pool, reps, ms, err);
    if (st == KILN_OK && *ms < 0)
        st = kiln_err_set(err, KILN_ERR_UNSUPPORTED, "tactic %s failed on '%s'", t->name, q->node->name);
    return st;
}
