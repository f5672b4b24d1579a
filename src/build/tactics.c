/* tactics.c - the CPU tactic table, candidate selection and cache keys (tactics.h); timing is in tactic_timing.c. */
#include "build/tactics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_gemv.h"
#include "backends/cpu/cpu_matmul.h"
#include "backends/cpu/cpu_winograd.h"
#include "core/alloc.h"
#include "core/cpu_count.h"
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

/* The kernel's own geometry of a 2-D conv (pads, auto_pad, strides, dilations), for the
 * tactics that apply by it; false for other ranks, bad attributes (the kernel reports
 * them when it runs) and convs the P16 layout pass put in its own layout. */
static bool conv_geom_2d(const build_tactic_query *q, conv_shape *s, cpu_conv_geom *g) {
    *s = conv_geometry(q);
    if (!s->ok || s->nsp != 2 || ir_node_attr_int(q->node, "kiln_p16", 0)) return false;
    int64_t x_dims[2] = {q->in[0]->dims[2].value, q->in[0]->dims[3].value};
    int64_t k_dims[2] = {q->in[1]->dims[2].value, q->in[1]->dims[3].value};
    kiln_error err = {0};
    cpu_kernel_ctx ctx = {.node = q->node, .err = &err};
    bool ok = cpu_conv_geom_init(&ctx, CPU_GEOM_CONV, 2, x_dims, k_dims, g) == KILN_OK;
    kiln_err_clear(&err);
    return ok;
}

/* The channels-in-lanes direct conv (AVX-512): where cpu_conv_c16_offered offers it. */
static bool conv_c16_tactic_applies(const build_tactic_query *q) {
    conv_shape s;
    cpu_conv_geom g;
    return conv_geom_2d(q, &s, &g) && !conv_is_depthwise(&s) && cpu_conv_c16_offered(&g, s.group, s.C, s.M);
}
/* its padded input copy: N x C x (H + pads) x (W + pads) floats; pads bounded by the kernel */
static uint64_t conv_c16_scratch(const build_tactic_query *q) {
    conv_shape s = conv_geometry(q);
    if (!s.ok || s.nsp != 2) return 0;
    uint64_t hp = (uint64_t)(q->in[0]->dims[2].value + q->in[1]->dims[2].value),
             wp = (uint64_t)(q->in[0]->dims[3].value + q->in[1]->dims[3].value), n;
    if (kiln_mul_overflow_u64((uint64_t)s.C, hp, &n) || kiln_mul_overflow_u64(n, wp, &n) ||
        kiln_mul_overflow_u64(n, (uint64_t)q->in[0]->dims[0].value, &n) || kiln_mul_overflow_u64(n, 4, &n))
        return UINT64_MAX;
    return n;
}

/* The AMX bf16x3 conv (cpu_conv_amx_applies) */
static bool conv_amx_tactic_applies(const build_tactic_query *q) {
    conv_shape s;
    cpu_conv_geom g;
    return conv_geom_2d(q, &s, &g) && cpu_conv_amx_applies(&g, s.group, s.C, s.M);
}
/* its split input: (N * OH * OW rounded up to 32) x (C * KH * KW rounded up to 32) x 2
 * bfloat16 */
static uint64_t conv_amx_scratch(const build_tactic_query *q) {
    conv_shape s = conv_geometry(q);
    if (!s.ok) return 0;
    uint64_t rows = ((uint64_t)q->out[0]->dims[0].value * (uint64_t)s.osize + 31) / 32 * 32;
    return rows * (((uint64_t)s.C * (uint64_t)s.ksize + 31) / 32 * 32) * 4;
}

/* ---- MatMul ------------------------------------------------------------------------ */

/* The AMX bf16x3 GEMM: float32 A with more rows than the few-row kernels take (they run
 * instead below CPU_GEMV_MAX_M rows, whatever the tactic), times a constant 2-D float32
 * B (an initializer, not also a graph input), as the kernel's packed path requires. */
static bool matmul_bf16x3_applies(const build_tactic_query *q) {
    /* inputs past the two operands are fused ones (kiln_bias, kiln_residual) */
    if (q->n_in < 2 || !q->in[0] || !q->in[1] || q->node->n_inputs < 2) return false;
    const ir_type *a = q->in[0], *b = q->in[1];
    if (a->kind != IR_TYPE_TENSOR || b->kind != IR_TYPE_TENSOR || a->dtype != KILN_DTYPE_FLOAT ||
        b->dtype != KILN_DTYPE_FLOAT || b->rank != 2 || a->rank < 2 || !a->dims)
        return false;
    cpu_kernel_ctx ctx = {.node = q->node, .graph = q->graph};
    if (!cpu_input_is_const(&ctx, 1)) return false; /* the test the kernel applies */
    int64_t rows = 1;
    for (int32_t i = 0; i + 1 < a->rank; i++) {
        if (a->dims[i].kind != IR_DIM_CONST) return false;
        rows *= a->dims[i].value;
    }
    return rows > CPU_GEMV_MAX_M;
}

/* Order matters when tactics are not timed (time_tactics off): the first that applies is
 * what cpu_conv runs without a kiln_tactic attribute. */
static const build_tactic builtin[] = {
    {"", "Conv", CPU_CONV_TACTIC_WINOGRAD, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, conv_winograd_applies,
     conv_winograd_scratch, cpu_conv_run_winograd, false},
    {"", "Conv", CPU_CONV_TACTIC_WINOGRAD_F23, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, conv_winograd_applies,
     conv_winograd_f23_scratch, cpu_conv_run_winograd_f23, false},
    /* after Winograd, before the GEMMs: without timing, cpu_conv runs it wherever it is a
     * candidate and Winograd does not apply */
    {"", "Conv", CPU_CONV_TACTIC_C16, CPU_FEATURE_AVX512F, conv_c16_tactic_applies, conv_c16_scratch,
     cpu_conv_run_c16, false},
    {"", "Conv", CPU_CONV_TACTIC_POINTWISE, 0, conv_pointwise_applies, NULL, cpu_conv_run_gemm, false},
    {"", "Conv", "conv_depthwise_direct", 0, conv_depthwise_applies, NULL, NULL, false},
    {"", "Conv", CPU_CONV_TACTIC_GEMM, 0, conv_im2col_applies, conv_im2col_scratch, cpu_conv_run_gemm, false},
    /* last: without timing a conv never takes it */
    {"", "Conv", CPU_CONV_TACTIC_AMX, CPU_FEATURE_AMX | CPU_FEATURE_AVX512F | CPU_FEATURE_AVX512BW,
     conv_amx_tactic_applies, conv_amx_scratch, cpu_conv_run_amx, true},
    /* FP32 first: without timing, MatMul stays FP32 */
    {"", "MatMul", CPU_MATMUL_TACTIC_FP32, 0, NULL, NULL, cpu_matmul_run_fp32, false},
    {"", "MatMul", CPU_MATMUL_TACTIC_BF16X3, CPU_FEATURE_AMX | CPU_FEATURE_AVX512F | CPU_FEATURE_AVX512BW,
     matmul_bf16x3_applies, NULL, cpu_matmul_run_bf16x3, true},
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
    return kiln_usable_cpus(); /* what cpu_threadpool_create uses for 0 */
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

