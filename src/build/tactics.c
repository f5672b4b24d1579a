/* tactics.c - the CPU tactic table, candidate selection, cache keys and timing (tactics.h). */
#include "build/tactics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_winograd.h"
#include "core/alloc.h"
#include "core/strbuf.h"

const char *build_bytes_str(uint64_t b, char *buf, size_t size) {
    if (b >= (1ull << 30)) snprintf(buf, size, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, size, "%.2f MiB", (double)b / (double)(1ull << 20));
    else if (b >= (1ull << 10)) snprintf(buf, size, "%.1f KiB", (double)b / 1024.0);
    else snprintf(buf, size, "%" PRIu64 " B", b);
    return buf;
}

/* ---- Conv geometry (mirrors cpu_conv.c's choice) ---------------------------------- */

typedef struct conv_shape {
    bool ok;
    int64_t C, M, group, nsp;
    int64_t ksize, osize;
    bool pointwise;
} conv_shape;

static conv_shape conv_geometry(const build_tactic_query *q) {
    conv_shape s = {0};
    if (q->n_in < 2 || q->n_out < 1 || !q->in[0] || !q->in[1] || !q->out[0]) return s;
    const ir_type *x = q->in[0], *w = q->in[1], *y = q->out[0];
    if (x->rank < 3 || w->rank != x->rank || y->rank != x->rank || !x->dims || !w->dims || !y->dims) return s;
    for (int32_t i = 0; i < x->rank; i++)
        if (x->dims[i].kind != IR_DIM_CONST || w->dims[i].kind != IR_DIM_CONST || y->dims[i].kind != IR_DIM_CONST)
            return s;
    s.C = x->dims[1].value;
    s.M = w->dims[0].value;
    s.group = ir_node_attr_int(q->node, "group", 1);
    if (s.group < 1) return s;
    s.nsp = x->rank - 2;
    s.ksize = 1;
    s.osize = 1;
    s.pointwise = true;
    const ir_attr *strides = ir_node_attr(q->node, "strides"), *pads = ir_node_attr(q->node, "pads");
    const ir_attr *autopad = ir_node_attr(q->node, "auto_pad");
    for (int64_t i = 0; i < s.nsp; i++) {
        int64_t k = w->dims[2 + i].value;
        s.ksize *= k;
        s.osize *= y->dims[2 + i].value;
        if (k != 1) s.pointwise = false;
        if (strides && strides->type == IR_ATTR_INTS && i < strides->n && strides->ints[i] != 1) s.pointwise = false;
    }
    if (pads && pads->type == IR_ATTR_INTS)
        for (int32_t i = 0; i < pads->n; i++)
            if (pads->ints[i]) s.pointwise = false;
    if (autopad && autopad->type == IR_ATTR_STRING && autopad->s.len && strncmp(autopad->s.data, "NOTSET", 6) &&
        strncmp(autopad->s.data, "VALID", 5) && !s.pointwise) s.pointwise = false;
    s.ok = true;
    return s;
}

static bool conv_is_depthwise(const conv_shape *s) {
    return s->C / s->group == 1 && s->M / s->group == 1 && s->nsp == 2 && s->C > 1;
}

static bool conv_pointwise_applies(const build_tactic_query *q) {
    conv_shape s = conv_geometry(q);
    return s.ok && !conv_is_depthwise(&s) && s.pointwise;
}
static bool conv_depthwise_applies(const build_tactic_query *q) {
    conv_shape s = conv_geometry(q);
    return s.ok && conv_is_depthwise(&s);
}
static bool conv_im2col_applies(const build_tactic_query *q) {
    conv_shape s = conv_geometry(q);
    return !s.ok || (!conv_is_depthwise(&s) && !s.pointwise); /* unknown geometry: the general path */
}
/* im2col: (C/group) * prod(kernel) * prod(output spatial) floats, reused per image/group */
static uint64_t conv_im2col_scratch(const build_tactic_query *q) {
    conv_shape s = conv_geometry(q);
    if (!s.ok) return 0;
    uint64_t n;
    if (kiln_mul_overflow_u64((uint64_t)(s.C / s.group), (uint64_t)s.ksize, &n) ||
        kiln_mul_overflow_u64(n, (uint64_t)s.osize, &n) || kiln_mul_overflow_u64(n, 4, &n))
        return UINT64_MAX;
    return n;
}

/* Winograd F(4x4, 3x3): 2-D 3x3 stride-1 dilation-1 single-group convs with enough
 * channels (cpu_winograd_applies_dims); scratch as the kernel's own blocking computes it. */
static bool conv_winograd_geometry(const build_tactic_query *q, int64_t *N, int64_t *C, int64_t *M, int64_t *OH,
                                   int64_t *OW) {
    conv_shape s = conv_geometry(q);
    if (!s.ok || s.nsp != 2) return false;
    int64_t k[2] = {q->in[1]->dims[2].value, q->in[1]->dims[3].value}, st[2] = {1, 1}, dil[2] = {1, 1};
    const ir_attr *a = ir_node_attr(q->node, "strides"), *d = ir_node_attr(q->node, "dilations");
    if (a && (a->type != IR_ATTR_INTS || a->n != 2)) return false;
    if (d && (d->type != IR_ATTR_INTS || d->n != 2)) return false;
    for (int i = 0; i < 2; i++) {
        if (a) st[i] = a->ints[i];
        if (d) dil[i] = d->ints[i];
    }
    if (!cpu_winograd_applies_dims(2, k, st, dil, s.group, s.C, s.M)) return false;
    *N = q->in[0]->dims[0].value;
    *C = s.C;
    *M = s.M;
    *OH = q->out[0]->dims[2].value;
    *OW = q->out[0]->dims[3].value;
    return true;
}
static bool conv_winograd_applies(const build_tactic_query *q) {
    int64_t N, C, M, OH, OW;
    return conv_winograd_geometry(q, &N, &C, &M, &OH, &OW);
}
static uint64_t conv_winograd_scratch_tile(const build_tactic_query *q, int tile) {
    int64_t N, C, M, OH, OW;
    cpu_winograd_blocking b;
    /* the blocking depends on the thread count; 2 threads stands for the usual case */
    if (!conv_winograd_geometry(q, &N, &C, &M, &OH, &OW) || !cpu_winograd_plan(tile, N, C, M, OH, OW, 2, &b))
        return UINT64_MAX;
    return b.scratch_floats * 4;
}
static uint64_t conv_winograd_scratch(const build_tactic_query *q) {
    return conv_winograd_scratch_tile(q, CPU_WINOGRAD_F43);
}
static uint64_t conv_winograd_f23_scratch(const build_tactic_query *q) {
    return conv_winograd_scratch_tile(q, CPU_WINOGRAD_F23);
}

/* Order matters when tactics are not timed (time_tactics off): the first that applies is
 * what cpu_conv runs without a kiln_tactic attribute. */
static const build_tactic builtin[] = {
    {"", "Conv", "conv_pointwise_gemm", 0, conv_pointwise_applies, NULL, NULL},
    {"", "Conv", "conv_depthwise_direct", 0, conv_depthwise_applies, NULL, NULL},
    {"", "Conv", CPU_CONV_TACTIC_WINOGRAD, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, conv_winograd_applies,
     conv_winograd_scratch, cpu_conv_run_winograd},
    {"", "Conv", CPU_CONV_TACTIC_WINOGRAD_F23, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, conv_winograd_applies,
     conv_winograd_f23_scratch, cpu_conv_run_winograd_f23},
    {"", "Conv", CPU_CONV_TACTIC_GEMM, 0, conv_im2col_applies, conv_im2col_scratch, cpu_conv_run_gemm},
};

static bool tactic_matches(const build_tactic *t, const build_tactic_query *q, uint64_t features) {
    const char *dom = q->node->domain ? q->node->domain : "";
    if (!t->op_type || strcmp(t->op_type, q->node->op_type) || strcmp(t->domain ? t->domain : "", dom)) return false;
    if ((t->features & features) != t->features) return false;
    return !t->applies || t->applies(q);
}

int32_t build_tactics_for_node(const build_tactic_registry *reg, const build_tactic_query *q, uint64_t features,
                               const build_tactic **out, int32_t cap, build_tactic *generic, char *generic_name) {
    int32_t n = 0;
    bool have_kernel = cpu_kernel_find(q->node->domain, q->node->op_type, q->node->opset) != NULL;
    if (reg)
        for (int32_t i = 0; i < reg->n_extra; i++) {
            const build_tactic *t = &reg->extra[i];
            if (n < cap && (t->run || have_kernel) && tactic_matches(t, q, features)) out[n++] = t;
        }
    if (have_kernel)
        for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
            if (n < cap && tactic_matches(&builtin[i], q, features)) out[n++] = &builtin[i];
    if (n || !have_kernel || cap < 1) return n;
    /* no specific rows: the op's registered kernel, no scratch */
    snprintf(generic_name, 64, "%s", q->node->op_type);
    memset(generic, 0, sizeof *generic);
    generic->domain = q->node->domain;
    generic->op_type = q->node->op_type;
    generic->name = generic_name;
    out[0] = generic;
    return 1;
}

uint64_t build_tactic_scratch(const build_tactic *t, const build_tactic_query *q) {
    return t->scratch ? t->scratch(q) : 0;
}

static void key_type(strbuf *sb, const ir_type *t) {
    if (!t) {
        sb_append(sb, "none");
        return;
    }
    sb_append(sb, kiln_dtype_name(t->dtype));
    sb_putc(sb, '[');
    for (int32_t i = 0; i < t->rank && t->dims; i++)
        sb_printf(sb, "%s%" PRId64, i ? "," : "", t->dims[i].kind == IR_DIM_CONST ? t->dims[i].value : -1);
    sb_putc(sb, ']');
}

char *build_tactic_key(const build_tactic_query *q, uint64_t features) {
    strbuf sb;
    sb_init(&sb);
    const ir_node *n = q->node;
    sb_printf(&sb, "%s%s%s|%" PRId64 "|", n->domain && *n->domain ? n->domain : "", n->domain && *n->domain ? "::" : "",
              n->op_type, n->opset);
    for (int32_t i = 0; i < n->n_attrs; i++) {
        const ir_attr *a = &n->attrs[i];
        if (!strcmp(a->name, BUILD_TACTIC_ATTR)) continue;
        sb_printf(&sb, "%s=", a->name);
        switch (a->type) {
        case IR_ATTR_INT: sb_printf(&sb, "%" PRId64, a->i); break;
        case IR_ATTR_FLOAT: sb_printf(&sb, "%.9g", (double)a->f); break;
        case IR_ATTR_STRING: sb_append_n(&sb, a->s.data, (size_t)a->s.len); break;
        case IR_ATTR_INTS:
            sb_putc(&sb, '[');
            for (int32_t k = 0; k < a->n; k++) sb_printf(&sb, "%s%" PRId64, k ? "," : "", a->ints[k]);
            sb_putc(&sb, ']');
            break;
        case IR_ATTR_FLOATS:
            sb_putc(&sb, '[');
            for (int32_t k = 0; k < a->n; k++) sb_printf(&sb, "%s%.9g", k ? "," : "", (double)a->floats[k]);
            sb_putc(&sb, ']');
            break;
        default: sb_printf(&sb, "<%s>", ir_attr_type_name(a->type)); break;
        }
        sb_putc(&sb, ';');
    }
    sb_putc(&sb, '|');
    for (int32_t i = 0; i < q->n_in; i++) {
        if (i) sb_putc(&sb, ',');
        key_type(&sb, q->in[i]);
    }
    uint64_t isa = features & (CPU_FEATURE_AVX2 | CPU_FEATURE_FMA | CPU_FEATURE_AVX512F | CPU_FEATURE_AVX512BW |
                               CPU_FEATURE_AVX512VL | CPU_FEATURE_AVX512DQ | CPU_FEATURE_F16C |
                               CPU_FEATURE_AVX512_VNNI | CPU_FEATURE_AVX512_BF16 | CPU_FEATURE_AMX);
    sb_printf(&sb, "|isa=%" PRIx64, isa);
    return sb.failed ? (sb_free(&sb), NULL) : sb_take(&sb);
}

int build_tactic_threads_resolve(int threads) {
    if (threads > 0) return threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN); /* what cpu_threadpool_create uses for 0 */
    return n > 0 && n < 4096 ? (int)n : 1;
}

char *build_tactic_key_threads(const build_tactic_query *q, uint64_t features, int threads) {
    char *base = build_tactic_key(q, features);
    if (!base) return NULL;
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "%s|threads=%d", base, build_tactic_threads_resolve(threads));
    free(base);
    return sb.failed ? (sb_free(&sb), NULL) : sb_take(&sb);
}

/* More than the last-level cache of the machines kiln targets (32 MiB on Zen 3 EPYC). */
#define BUILD_TACTIC_COLD_BYTES (48u << 20)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

kiln_status build_tactic_time(const build_tactic *t, const build_tactic_query *q, cpu_threadpool *pool, int reps,
                              double *ms, kiln_error *err) {
    const ir_node *node = q->node;
    for (int32_t i = 0; i < node->n_attrs; i++)
        if (node->attrs[i].type == IR_ATTR_GRAPH || node->attrs[i].type == IR_ATTR_GRAPHS)
            return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "node '%s' has subgraphs: not timed", node->name);
    cpu_kernel_fn fn = t->run ? t->run : cpu_kernel_find(node->domain, node->op_type, node->opset);
    if (!fn) return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "no kernel for %s", node->op_type);
    if (q->n_in > 64 || q->n_out > 64) return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "too many inputs to time");
    rt_value vals[64], outs[64];
    const rt_value *ins[64];
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < q->n_in; i++) {
        rt_value_init(&vals[i]);
        ins[i] = NULL;
    }
    for (int32_t i = 0; i < q->n_out; i++) rt_value_init(&outs[i]);
    uint32_t seed = 12345;
    for (int32_t i = 0; i < q->n_in && st == KILN_OK; i++) {
        const ir_type *ty = q->in[i];
        int32_t vid = i < node->n_inputs ? node->inputs[i] : IR_NONE;
        if (!ty || vid == IR_NONE) continue;
        const ir_value *v = &q->graph->values[vid];
        if (v->init && v->init->data) {
            st = rt_tensor_from_ir(rt_value_as_tensor(&vals[i]), v->init, err);
            ins[i] = &vals[i];
            continue;
        }
        if (ty->kind != IR_TYPE_TENSOR || ty->rank < 0 || ty->rank > RT_MAX_RANK || ty->dtype == KILN_DTYPE_STRING) {
            st = kiln_err_set(err, KILN_ERR_UNSUPPORTED, "input %d of '%s' is not a plain tensor: not timed", i, node->name);
            break;
        }
        int64_t dims[RT_MAX_RANK];
        for (int32_t d = 0; d < ty->rank; d++) {
            if (!ty->dims || ty->dims[d].kind != IR_DIM_CONST) {
                st = kiln_err_set(err, KILN_ERR_UNSUPPORTED, "input %d of '%s' has no concrete shape", i, node->name);
                break;
            }
            dims[d] = ty->dims[d].value;
        }
        if (st != KILN_OK) break;
        rt_tensor *tt = rt_value_as_tensor(&vals[i]);
        st = rt_tensor_alloc_zero(tt, ty->dtype, ty->rank, dims, err);
        if (st != KILN_OK) break;
        if (ty->dtype == KILN_DTYPE_FLOAT) {
            float *f = tt->data;
            for (uint64_t k = 0; k < tt->count; k++) f[k] = (float)((seed = seed * 1664525u + 1013904223u) >> 9) / 8388608.0f - 1.0f;
        }
        /* integer inputs (indices, shapes) stay zero: always in range */
        ins[i] = &vals[i];
    }
    double samples[64];
    int n = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    void *state = NULL;
    void (*state_free)(void *) = NULL;
    /* Each timed run starts with cold caches: inside a network every node's weights are
     * used once per inference and evicted by the others' (ResNet-50's 100 MB), so a
     * tactic whose repacked weights are larger (Winograd's are 1.8-4x) must be timed
     * reading them from memory, not from an L3 that back-to-back runs keep warm. */
    size_t cold_n = (size_t)BUILD_TACTIC_COLD_BYTES / sizeof(float);
    float *cold = malloc(cold_n * sizeof(float));
    /* written once (untouched pages would all map the one zero page), then only read
     * before each run: reads evict without leaving dirty lines for the run to write back */
    if (cold) memset(cold, 0, cold_n * sizeof(float));
    volatile float sink = 0;
    for (int r = 0; r <= n && st == KILN_OK; r++) { /* r == 0 warms up (state, caches) */
        cpu_kernel_ctx ctx = {.model = q->model, .graph = q->graph, .node = node, .pool = pool, .err = err,
                              .state = &state, .state_free = &state_free};
        if (cold) {
            float acc = 0;
            for (size_t k = 0; k < cold_n; k += 16) acc += cold[k];
            sink = acc;
        }
        double t0 = now_ms();
        st = fn(&ctx, ins, q->n_in, outs, q->n_out);
        double t1 = now_ms();
        for (int32_t i = 0; i < q->n_out; i++) rt_value_release(&outs[i]);
        if (r > 0) samples[r - 1] = t1 - t0;
    }
    free(cold);
    (void)sink;
    if (state && state_free) state_free(state);
    for (int32_t i = 0; i < q->n_in; i++) rt_value_release(&vals[i]);
    if (st != KILN_OK) return st;
    qsort(samples, (size_t)n, sizeof samples[0], cmp_d);
    /* The minimum, not the median: on a shared machine the noise only ever adds time, and
     * with 5 samples the median still carried it. ResNet-50 at 2 threads, 4-5 builds each
     * at load 1-1.4: with the median, 5 of 52 stage 1-3 Winograd choices flipped to the
     * other tile size from build to build and the 7x7 layers went F(2x2), F(4x4) or the
     * GEMM; with the minimum 2 of 65 flipped and the 7x7 layers were F(2x2) every time. */
    *ms = samples[0];
    return KILN_OK;
}
