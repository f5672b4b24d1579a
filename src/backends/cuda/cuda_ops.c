/* cuda_ops.c - which nodes the CUDA backend runs, decided on the host (see cuda_internal.h).
 *
 * The decision uses the op, its attributes and the inferred value types; it never touches
 * the GPU, so it is unit-tested on machines without one (tests/unit/test_cuda_ops.c).
 * Rules worth knowing:
 *  - int64 results stay on the CPU: in exported models they are shape arithmetic
 *    (Shape -> Gather -> Concat -> Reshape) whose values the host needs anyway, so running
 *    them on the GPU would only add copies and synchronisations;
 *  - values of unknown type stay on the CPU (the CPU kernels check types at run time);
 *  - attribute combinations the GPU kernels do not implement (asymmetric conv pads,
 *    Softmax over a non-last axis at opset 13+...) stay on the CPU.
 * Whatever is refused here runs on the CPU backend per node, with a warning naming it.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

#define HOST(k) (1u << (k))

static const cuda_op_desc ops[] = {
    /* elementwise */
    {"Relu", cuda_run_unary, 0}, {"Sigmoid", cuda_run_unary, 0}, {"Tanh", cuda_run_unary, 0},
    {"Erf", cuda_run_unary, 0}, {"Sqrt", cuda_run_unary, 0}, {"Exp", cuda_run_unary, 0},
    {"Log", cuda_run_unary, 0}, {"Neg", cuda_run_unary, 0}, {"Abs", cuda_run_unary, 0},
    {"Reciprocal", cuda_run_unary, 0}, {"Gelu", cuda_run_unary, 0}, {"Clip", cuda_run_unary, HOST(1) | HOST(2)},
    {"LeakyRelu", cuda_run_unary, 0}, {"HardSigmoid", cuda_run_unary, 0}, {"HardSwish", cuda_run_unary, 0},
    {"Softplus", cuda_run_unary, 0}, {"Elu", cuda_run_unary, 0}, {"Floor", cuda_run_unary, 0},
    {"Ceil", cuda_run_unary, 0}, {"Identity", cuda_run_unary, 0}, {"Dropout", cuda_run_unary, 0},
    {"Add", cuda_run_binary, 0}, {"Sub", cuda_run_binary, 0}, {"Mul", cuda_run_binary, 0},
    {"Div", cuda_run_binary, 0}, {"Pow", cuda_run_binary, 0}, {"Max", cuda_run_binary, 0},
    {"Min", cuda_run_binary, 0}, {"Where", cuda_run_where, 0},
    /* data movement */
    {"Reshape", cuda_run_reshape, HOST(1)}, {"Flatten", cuda_run_reshape, 0},
    {"Squeeze", cuda_run_reshape, HOST(1)}, {"Unsqueeze", cuda_run_reshape, HOST(1)},
    {"Transpose", cuda_run_transpose, 0}, {"Concat", cuda_run_concat, 0},
    {"Slice", cuda_run_slice, HOST(1) | HOST(2) | HOST(3) | HOST(4)}, {"Gather", cuda_run_gather, 0},
    {"Cast", cuda_run_cast, 0}, {"Expand", cuda_run_expand, HOST(1)},
    {"Shape", cuda_run_shape, HOST(0)}, /* metadata only: a host int64 result */
    /* normalisation, pooling, reductions */
    {"Softmax", cuda_run_softmax, 0}, {"LogSoftmax", cuda_run_softmax, 0},
    {"LayerNormalization", cuda_run_layernorm, 0}, {"BatchNormalization", cuda_run_batchnorm, 0},
    {"MaxPool", cuda_run_pool, 0}, {"AveragePool", cuda_run_pool, 0},
    {"GlobalAveragePool", cuda_run_global_pool, 0}, {"GlobalMaxPool", cuda_run_global_pool, 0},
    {"ReduceMean", cuda_run_reduce, HOST(1)}, {"ReduceSum", cuda_run_reduce, HOST(1)},
    {"ReduceMax", cuda_run_reduce, HOST(1)}, {"ReduceMin", cuda_run_reduce, HOST(1)},
    /* libraries */
    {"MatMul", cuda_run_matmul, 0}, {"Gemm", cuda_run_gemm, 0},
    /* fused kernels */
    {"Attention", cuda_run_attention, 0},
#if KILN_HAVE_CUDNN
    {"Conv", cuda_run_conv, 0},
#endif
};

/* Channels-last forms (domain "kiln.nhwc", made by build/passes/layout_nhwc.c for half
 * convolutions): data tensors [N, H, W, C], Conv weights [O, KH, KW, C/g]. */
static const cuda_op_desc nhwc_ops[] = {
#if KILN_HAVE_CUDNN
    {"Conv", cuda_run_conv, 0},
#endif
    {"MaxPool", cuda_run_pool, 0}, {"AveragePool", cuda_run_pool, 0},
    {"GlobalAveragePool", cuda_run_global_pool, 0}, {"GlobalMaxPool", cuda_run_global_pool, 0},
    {"NchwToNhwc", cuda_run_nchw_to_nhwc, 0}, /* a padded stem's input (ops_nhwc_pack.c) */
};

/* kiln's own fused ops (domain "kiln"): QkvAttention from build/passes/merge_qkv.c. */
static const cuda_op_desc kiln_ops[] = {
    {"QkvAttention", cuda_run_qkv_attention, 0},
};

bool cuda_node_nhwc(const ir_node *node) { return node->domain && !strcmp(node->domain, "kiln.nhwc"); }

const cuda_op_desc *cuda_op_find(const char *domain, const char *op_type) {
    if (domain && !strcmp(domain, "kiln.nhwc")) {
        for (size_t i = 0; i < sizeof nhwc_ops / sizeof nhwc_ops[0]; i++)
            if (!strcmp(nhwc_ops[i].op_type, op_type)) return &nhwc_ops[i];
        return NULL;
    }
    if (domain && !strcmp(domain, "kiln")) {
        for (size_t i = 0; i < sizeof kiln_ops / sizeof kiln_ops[0]; i++)
            if (!strcmp(kiln_ops[i].op_type, op_type)) return &kiln_ops[i];
        return NULL;
    }
    if (domain && domain[0]) return NULL;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(ops[i].op_type, op_type)) return &ops[i];
    return NULL;
}

void cuda_op_foreach(void (*fn)(const char *domain, const char *op_type, void *user), void *user) {
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) fn("", ops[i].op_type, user);
}

bool cuda_op_input_on_host(const ir_node *node, int32_t index) {
    const cuda_op_desc *d = cuda_op_find(node->domain, node->op_type);
    if (!d || index < 0 || index >= 32) return false;
    return (d->host_inputs >> index) & 1u;
}

int cuda_act_code(const char *name) {
    static const struct { const char *n; int c; } map[] = {
        {"Relu", CU_RELU},       {"Sigmoid", CU_SIGMOID},  {"Tanh", CU_TANH},          {"Erf", CU_ERF},
        {"Sqrt", CU_SQRT},       {"Exp", CU_EXP},          {"Log", CU_LOG},            {"Neg", CU_NEG},
        {"Abs", CU_ABS},         {"Reciprocal", CU_RECIP}, {"Clip", CU_CLIP},          {"LeakyRelu", CU_LEAKY},
        {"HardSigmoid", CU_HSIGMOID}, {"HardSwish", CU_HSWISH}, {"Softplus", CU_SOFTPLUS}, {"Elu", CU_ELU},
        {"Floor", CU_FLOOR},     {"Ceil", CU_CEIL},        {"Identity", CU_COPY},      {"Dropout", CU_COPY},
        /* fused-activation names from build/passes/fuse_activation.c (a Gelu op node is
         * dispatched by cuda_run_unary, which reads its approximate attribute itself) */
        {"Gelu", CU_GELU_ERF},   {"GeluTanh", CU_GELU_TANH},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i].n, name)) return map[i].c;
    return -1;
}

static const ir_value *val(const ir_graph *g, int32_t id) {
    return id >= 0 && id < g->n_values ? &g->values[id] : NULL;
}

/* as_half: the question is "could the node run with its float32 tensors stored as float16"
 * (cuda_op_half_ok, for the FP16 pass): float32 inputs read on the GPU count as float16 */
static kiln_dtype in_dtype_as(const ir_graph *g, const ir_node *n, int32_t k, bool as_half) {
    const ir_value *v = k < n->n_inputs ? val(g, n->inputs[k]) : NULL;
    if (!v) return KILN_DTYPE_UNDEFINED;
    kiln_dtype t = v->init ? v->init->dtype : v->type.kind == IR_TYPE_TENSOR ? v->type.dtype : KILN_DTYPE_UNDEFINED;
    if (as_half && t == KILN_DTYPE_FLOAT && !cuda_op_input_on_host(n, k)) t = KILN_DTYPE_FLOAT16;
    return t;
}

static int32_t in_rank(const ir_graph *g, const ir_node *n, int32_t k) {
    const ir_value *v = k < n->n_inputs ? val(g, n->inputs[k]) : NULL;
    if (!v) return -1;
    if (v->init) return v->init->rank;
    return v->type.kind == IR_TYPE_TENSOR ? v->type.rank : -1;
}

static bool why(char *buf, size_t size, const char *fmt, const char *a) {
    if (buf && size) snprintf(buf, size, fmt, a);
    return false;
}

static bool is_movable(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_BOOL ||
           t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8 || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_INT64;
}

static bool is_float(kiln_dtype t) { return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16; }

static bool cast_code_ok(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_INT64 || t == KILN_DTYPE_INT32 ||
           t == KILN_DTYPE_BOOL || t == KILN_DTYPE_DOUBLE;
}

static bool can_run(const ir_model *model, const ir_node *node, char *whybuf, size_t why_size, bool prefer,
                    bool as_half);

bool cuda_op_supported(const ir_model *model, const ir_node *node, char *why_buf, size_t why_size) {
    return can_run(model, node, why_buf, why_size, true, false);
}

bool cuda_op_can_run(const ir_model *model, const ir_node *node, char *why_buf, size_t why_size) {
    return can_run(model, node, why_buf, why_size, false, false);
}

bool cuda_op_half_ok(const ir_model *model, const ir_node *node, char *why_buf, size_t why_size) {
    const char *op = node->op_type;
    /* Cast's output type is its attribute and Shape reads metadata only: neither has
     * float tensors to store in half; they keep their types */
    if (!strcmp(op, "Cast") || !strcmp(op, "Shape"))
        return why(why_buf, why_size, "%s keeps its declared types", op);
    /* NchwToNhwc (a padded stem's input) is made after the FP16 pass with the types it
     * needs; saying yes here made an FP16 pass re-run over a saved engine's graph put a
     * second Cast in front of it (float32 -> float16 -> the pack) */
    if (cuda_node_nhwc(node) && !strcmp(op, "NchwToNhwc"))
        return why(why_buf, why_size, "%s keeps its declared types", op);
    return can_run(model, node, why_buf, why_size, true, true);
}

static bool can_run(const ir_model *model, const ir_node *node, char *whybuf, size_t why_size, bool prefer,
                    bool as_half) {
    const ir_graph *g = model ? model->graph : NULL;
    if (!g || node < g->nodes || node >= g->nodes + g->n_nodes)
        return why(whybuf, why_size, "%s: only main-graph nodes run on the GPU", node->op_type);
    const cuda_op_desc *d = cuda_op_find(node->domain, node->op_type);
    if (!d) return why(whybuf, why_size, "no CUDA kernel for %s", node->op_type);
    const char *op = node->op_type;
    for (int32_t a = 0; a < node->n_attrs; a++)
        if (node->attrs[a].type == IR_ATTR_GRAPH || node->attrs[a].type == IR_ATTR_GRAPHS)
            return why(whybuf, why_size, "%s has a subgraph", op);
    /* every output must have a known tensor type; int64 outputs are shape arithmetic */
    for (int32_t k = 0; k < node->n_outputs; k++) {
        const ir_value *v = val(g, node->outputs[k]);
        if (!v) continue;
        if (v->type.kind != IR_TYPE_TENSOR || v->type.dtype == KILN_DTYPE_UNDEFINED)
            return why(whybuf, why_size, "%s: output type unknown (type inference did not reach it)", op);
        if (prefer && v->type.dtype == KILN_DTYPE_INT64)
            return why(whybuf, why_size, "%s: int64 output (shape arithmetic stays on the host)", op);
        if (k > 0) return why(whybuf, why_size, "%s: only the first output is computed on the GPU", op);
    }
    kiln_dtype t0 = in_dtype_as(g, node, 0, as_half);
    if (d->run == cuda_run_shape) return true;
    if (d->run == cuda_run_nchw_to_nhwc) { /* float32/float16 in, its `to` (or the same) out */
        const ir_attr *to = ir_node_attr(node, "to");
        if (!is_float(t0) || in_rank(g, node, 0) != 4 ||
            (to && (to->type != IR_ATTR_INT || !is_float((kiln_dtype)to->i))))
            return why(whybuf, why_size, "%s: only 4-D float32/float16 tensors", op);
        return true;
    }
    bool movement = d->run == cuda_run_reshape || d->run == cuda_run_transpose || d->run == cuda_run_concat ||
                    d->run == cuda_run_slice || d->run == cuda_run_gather || d->run == cuda_run_expand;
    if (movement) {
        if (!is_movable(t0)) return why(whybuf, why_size, "%s: dtype not handled on the GPU", op);
        if (d->run == cuda_run_gather) {
            kiln_dtype ti = in_dtype_as(g, node, 1, as_half);
            if (ti != KILN_DTYPE_INT64 && ti != KILN_DTYPE_INT32)
                return why(whybuf, why_size, "%s: indices must be int32/int64", op);
        }
        return true;
    }
    if (d->run == cuda_run_cast) {
        const ir_value *o = val(g, node->outputs[0]);
        if (!cast_code_ok(t0) || !o || !cast_code_ok(o->type.dtype))
            return why(whybuf, why_size, "%s: dtype pair not handled on the GPU", op);
        return true;
    }
    if (d->run == cuda_run_where) {
        kiln_dtype tx = in_dtype_as(g, node, 1, as_half);
        if (in_dtype_as(g, node, 0, as_half) != KILN_DTYPE_BOOL || !is_float(tx) ||
            in_dtype_as(g, node, 2, as_half) != tx)
            return why(whybuf, why_size, "%s: only bool condition with float32/float16 values", op);
        return true;
    }
    /* the rest computes in float32 on float32 or float16 tensors (one dtype per node) */
    for (int32_t k = 0; k < node->n_inputs; k++) {
        if (node->inputs[k] < 0 || cuda_op_input_on_host(node, k)) continue;
        if (d->run == cuda_run_reduce && k > 0) continue;
        /* Attention's additive mask: float32 or float16 whatever Q/K/V are (the FP16 pass
         * keeps masks float32: (1 - m) * -10000 overflows half); bool masks stay on the CPU */
        if ((d->run == cuda_run_attention && k == 3) || (d->run == cuda_run_qkv_attention && k == 1)) {
            if (!is_float(in_dtype_as(g, node, k, false)))
                return why(whybuf, why_size, "%s: only float32/float16 masks on the GPU", op);
            continue;
        }
        if (!is_float(t0) || in_dtype_as(g, node, k, as_half) != t0)
            return why(whybuf, why_size, "%s: the GPU kernels take float32 (or float16) inputs of one dtype", op);
    }
    if (d->run == cuda_run_binary && node->n_inputs != 2)
        return why(whybuf, why_size, "%s: only two operands on the GPU", op);
    if (d->run == cuda_run_softmax && node->opset >= 13) {
        int64_t axis = ir_node_attr_int(node, "axis", -1);
        int32_t r = in_rank(g, node, 0);
        if (r < 0 || !(axis == -1 || axis == r - 1))
            return why(whybuf, why_size, "%s: only the last axis on the GPU", op);
    }
    if (cuda_node_nhwc(node) && (t0 != KILN_DTYPE_FLOAT16 || in_rank(g, node, 0) != 4 || node->n_outputs != 1))
        return why(whybuf, why_size, "%s: channels-last runs only 2-D float16 nodes", op);
    if (d->run == cuda_run_attention) {
        /* the fused kernel: no past/present caches, no softcap, no qk output, a float mask
         * (the dtype loop above) and head sizes up to CUDA_ATT_MAX_D */
        int32_t r = in_rank(g, node, 0);
        if (node->n_inputs > 4 || node->n_outputs > 1)
            return why(whybuf, why_size, "%s: past/present key-values or extra outputs stay on the CPU", op);
        if (ir_node_attr_float(node, "softcap", 0.f) != 0.f)
            return why(whybuf, why_size, "%s: softcap stays on the CPU", op);
        if (r != 3 && r != 4) return why(whybuf, why_size, "%s: Q must be 3-D or 4-D", op);
        const ir_value *q = val(g, node->inputs[0]), *vv = node->n_inputs > 2 ? val(g, node->inputs[2]) : NULL;
        int64_t hq = r == 3 ? ir_node_attr_int(node, "q_num_heads", 0) : 1;
        int64_t hk = r == 3 ? ir_node_attr_int(node, "kv_num_heads", 0) : 1;
        if (!q || !vv || hq < 1 || hk < 1 || q->type.rank != r || vv->type.rank != r ||
            q->type.dims[r - 1].kind != IR_DIM_CONST || vv->type.dims[r - 1].kind != IR_DIM_CONST ||
            q->type.dims[r - 1].value / hq > CUDA_ATT_MAX_D || vv->type.dims[r - 1].value / hk > CUDA_ATT_MAX_D)
            return why(whybuf, why_size, "%s: head sizes must be known and at most 128 on the GPU", op);
        /* a mask narrower than the key length (padded with -inf by the CPU kernel) */
        const ir_value *mk = node->n_inputs > 3 ? val(g, node->inputs[3]) : NULL, *kk = val(g, node->inputs[1]);
        int32_t mr = mk ? (mk->init ? mk->init->rank : mk->type.rank) : 0;
        if (mk && (mr < 1 || mk->init || !kk || kk->type.rank != r || mk->type.dims[mr - 1].kind != IR_DIM_CONST ||
                   kk->type.dims[r == 3 ? 1 : 2].kind != IR_DIM_CONST ||
                   mk->type.dims[mr - 1].value != kk->type.dims[r == 3 ? 1 : 2].value)) {
            bool same_sym = mk && !mk->init && kk && mr >= 1 && kk->type.rank == r &&
                            mk->type.dims[mr - 1].kind == IR_DIM_SYM &&
                            kk->type.dims[r == 3 ? 1 : 2].kind == IR_DIM_SYM &&
                            mk->type.dims[mr - 1].sym == kk->type.dims[r == 3 ? 1 : 2].sym;
            if (!same_sym) return why(whybuf, why_size, "%s: the mask must span the key length on the GPU", op);
        }
    }
    if (d->run == cuda_run_qkv_attention) {
        /* packed [B, S, 3*H*D] with a known width, head size up to CUDA_ATT_MAX_D; the mask
         * (if any) spans the sequence (merge_qkv.c only makes nodes that passed the same
         * Attention checks, but engines are read from files) */
        const ir_value *x = val(g, node->inputs[0]);
        int64_t h = ir_node_attr_int(node, "q_num_heads", 0);
        if (!x || x->type.rank != 3 || x->type.dims[2].kind != IR_DIM_CONST || h < 1 || node->n_inputs > 2 ||
            node->n_outputs != 1 || x->type.dims[2].value % (3 * h) || x->type.dims[2].value / (3 * h) > CUDA_ATT_MAX_D ||
            ir_node_attr_int(node, "kv_num_heads", h) != h)
            return why(whybuf, why_size, "%s: needs a known packed width 3 x heads x head size (<= 128)", op);
    }
    if (d->run == cuda_run_batchnorm && ir_node_attr_int(node, "training_mode", 0) != 0)
        return why(whybuf, why_size, "%s: training mode", op);
    if (d->run == cuda_run_pool) {
        const ir_attr *ks = ir_node_attr(node, "kernel_shape");
        const ir_attr *ap = ir_node_attr(node, "auto_pad");
        if (!ks || ks->n != 2 || in_rank(g, node, 0) != 4)
            return why(whybuf, why_size, "%s: only 2-D pooling on the GPU", op);
        if (ap && ap->s.len && !(ap->s.len == 6 && !memcmp(ap->s.data, "NOTSET", 6)) &&
            !(ap->s.len == 5 && !memcmp(ap->s.data, "VALID", 5)))
            return why(whybuf, why_size, "%s: auto_pad SAME_* stays on the CPU", op);
        if (ir_node_attr_int(node, "storage_order", 0) != 0)
            return why(whybuf, why_size, "%s: storage_order 1", op);
    }
    if (d->run == cuda_run_global_pool && in_rank(g, node, 0) < 3)
        return why(whybuf, why_size, "%s: needs N, C and spatial axes", op);
    if (d->run == cuda_run_matmul && (in_rank(g, node, 0) < 2 || in_rank(g, node, 1) < 2))
        return why(whybuf, why_size, "%s: 1-D operands stay on the CPU", op);
    if (d->run == cuda_run_reduce) {
        bool axes_input = node->n_inputs > 1 && node->inputs[1] >= 0;
        if (axes_input) {
            const ir_value *v = val(g, node->inputs[1]);
            if (!v || !v->init) return why(whybuf, why_size, "%s: axes must be a constant", op);
        }
    }
#if KILN_HAVE_CUDNN
    if (d->run == cuda_run_conv) {
        int32_t r = in_rank(g, node, 0);
        if (r != 4 && r != 3) return why(whybuf, why_size, "%s: only 1-D and 2-D convolutions on the GPU", op);
        const ir_attr *ap = ir_node_attr(node, "auto_pad");
        if (ap && ap->s.len && !(ap->s.len == 6 && !memcmp(ap->s.data, "NOTSET", 6)) &&
            !(ap->s.len == 5 && !memcmp(ap->s.data, "VALID", 5)))
            return why(whybuf, why_size, "%s: auto_pad SAME_* stays on the CPU", op);
        const ir_attr *pads = ir_node_attr(node, "pads");
        if (pads && pads->n % 2 == 0)
            for (int32_t i = 0; i < pads->n / 2; i++)
                if (pads->ints[i] != pads->ints[i + pads->n / 2])
                    return why(whybuf, why_size, "%s: asymmetric pads (cuDNN needs symmetric ones)", op);
        const ir_attr *act = ir_node_attr(node, "kiln_activation");
        if (act) {
            char name[32];
            size_t len = act->s.len < sizeof name - 1 ? (size_t)act->s.len : sizeof name - 1;
            memcpy(name, act->s.data, len);
            name[len] = 0;
            if (cuda_act_code(name) < 0) return why(whybuf, why_size, "%s: fused activation not on the GPU", op);
        }
    }
#endif
    if ((d->run == cuda_run_matmul || d->run == cuda_run_gemm) && ir_node_attr(node, "kiln_activation")) {
        const ir_attr *act = ir_node_attr(node, "kiln_activation");
        char name[32];
        size_t len = act->s.len < sizeof name - 1 ? (size_t)act->s.len : sizeof name - 1;
        memcpy(name, act->s.data, len);
        name[len] = 0;
        if (cuda_act_code(name) < 0) return why(whybuf, why_size, "%s: fused activation not on the GPU", op);
    }
    return true;
}

/* ---- broadcasting math ---- */

bool cuda_bcast_shape(const int64_t *a, int32_t ra, const int64_t *b, int32_t rb, int64_t *out, int32_t *rank) {
    int32_t r = ra > rb ? ra : rb;
    for (int32_t i = 0; i < r; i++) {
        int64_t da = i < r - ra ? 1 : a[i - (r - ra)];
        int64_t db = i < r - rb ? 1 : b[i - (r - rb)];
        if (da != db && da != 1 && db != 1) return false;
        out[i] = da == 1 ? db : da;
    }
    *rank = r;
    return true;
}

void cuda_bcast_strides(const int64_t *d, int32_t r, const int64_t *out, int32_t out_rank, int64_t *str) {
    int64_t s = 1;
    for (int32_t i = out_rank - 1; i >= 0; i--) {
        int32_t j = i - (out_rank - r);
        int64_t dim = j >= 0 ? d[j] : 1;
        str[i] = (dim == 1 && out[i] != 1) ? 0 : s;
        if (j >= 0) s *= dim;
    }
}

void cuda_bcast_simplify(cuda_bcast *bc, int n_operands) {
    /* drop size-1 axes, then merge axis i-1 into i when every operand's stride chains */
    int32_t r = 0;
    for (int32_t i = 0; i < bc->rank; i++) {
        if (bc->dims[i] == 1 && bc->rank > 1) continue;
        bc->dims[r] = bc->dims[i];
        for (int k = 0; k < n_operands; k++) bc->str[k][r] = bc->str[k][i];
        r++;
    }
    if (r == 0) {
        r = 1;
        bc->dims[0] = 1;
        for (int k = 0; k < n_operands; k++) bc->str[k][0] = 0;
    }
    int32_t w = 0;
    for (int32_t i = 1; i < r; i++) {
        bool ok = true;
        for (int k = 0; k < n_operands && ok; k++)
            ok = bc->str[k][w] == bc->str[k][i] * bc->dims[i];
        if (ok) {
            bc->dims[w] *= bc->dims[i];
            for (int k = 0; k < n_operands; k++) bc->str[k][w] = bc->str[k][i];
        } else {
            w++;
            bc->dims[w] = bc->dims[i];
            for (int k = 0; k < n_operands; k++) bc->str[k][w] = bc->str[k][i];
        }
    }
    bc->rank = w + 1;
}
