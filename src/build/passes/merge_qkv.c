/* merge_qkv.c - one GEMM for an attention block's Q, K and V projections.
 *
 * After fuse_attention.c a transformer layer reads
 *     q = MatMul(x, Wq) [+ bq]   k = MatMul(x, Wk) [+ bk]   v = MatMul(x, Wv) [+ bv]
 *     y = Attention(q, k, v[, mask])            (3-D, q_num_heads = kv_num_heads = H)
 * with the biases already folded into the MatMuls as kiln_bias (fuse_residual.c). Three
 * GEMMs of [B*S, K] x [K, N] are three launches that each fill a third of the GPU at
 * small batch; this pass makes them one:
 *     qkv = MatMul(x, [Wq | Wk | Wv]) [+ [bq | bk | bv]]      [B, S, 3N]
 *     y   = kiln.QkvAttention(qkv[, mask])
 * QkvAttention (domain "kiln", ir/ops/ops_qkv_attention.c) is ONNX Attention reading Q,
 * K and V as the three thirds of qkv: the CUDA kernel reads them in place through row
 * strides (cuda_attention.c), and so does the CPU's fused float32 kernel
 * (cpu_qkv_attention.c, cpu_attention_rows; other cases copy them out and run
 * Attention). The attributes q_num_heads, kv_num_heads, scale and is_causal are kept as
 * they are.
 *
 * Conditions (anything else is left alone): the Attention node has 3 or 4 inputs and one
 * output, no softcap / qk_matmul_output_mode, equal head counts; q, k, v are distinct
 * values each produced by a MatMul read only by the Attention and not pinned; the three
 * MatMuls read the same rank-3 float32 x and float32 constant 2-D weights [K, N] of equal
 * K and N, carry no attribute but a kiln_bias on input 2 (all three or none, float32
 * constants [N]). The merged MatMul takes the place of the first of the three (x and the
 * constants exist before it), so the node order stays topological.
 *
 * Device-only: build_run_device_passes runs it after the attention fusion (on the CPU
 * one merged GEMM measured no faster than three, build_run_host_passes). The old weights
 * stay in the graph unread until pass_drop_unread_initializers removes them.
 */
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"
#include "ir/ops/ops.h"

static bool is_op(const ir_node *n, const char *domain, const char *op) {
    return !strcmp(n->domain, domain) && !strcmp(n->op_type, op);
}

static const ir_tensor *const_f32(const ir_graph *g, int32_t v, int32_t rank) {
    const ir_tensor *t = pass_const(g, v);
    return t && t->dtype == KILN_DTYPE_FLOAT && t->rank == rank && t->data ? t : NULL;
}

/* The MatMul producing v for the merge, or -1. */
static int32_t proj(const ir_graph *g, const pass_uses *u, const bool *dead, int32_t v) {
    if (v < 0 || v >= g->n_values || u->count[v] != 1 || u->pinned[v]) return -1;
    int32_t p = g->values[v].producer;
    if (p < 0 || dead[p]) return -1;
    const ir_node *n = &g->nodes[p];
    if (!is_op(n, "", "MatMul") || n->n_outputs != 1 || (n->n_inputs != 2 && n->n_inputs != 3)) return -1;
    for (int32_t a = 0; a < n->n_attrs; a++)
        if (strcmp(n->attrs[a].name, "kiln_bias") || n->attrs[a].type != IR_ATTR_INT || n->attrs[a].i != 2) return -1;
    if ((n->n_inputs == 3) != (n->n_attrs == 1)) return -1;
    const ir_tensor *w = const_f32(g, n->inputs[1], 2);
    if (!w || (n->n_inputs == 3 && (!const_f32(g, n->inputs[2], 1) || pass_const(g, n->inputs[2])->dims[0] != w->dims[1])))
        return -1;
    return p;
}

/* Columns side by side: out[K, sum N] from three [K, N_i] (or three [N_i] when K = 1). */
static kiln_status concat_cols(ir_graph *g, const char *base, const ir_tensor *const t[3], int64_t K, int32_t rank,
                               int32_t *out, kiln_error *err) {
    int64_t n[3], total = 0;
    for (int i = 0; i < 3; i++) total += n[i] = t[i]->dims[rank - 1];
    int64_t dims[2] = {K, total};
    rt_tensor r;
    memset(&r, 0, sizeof r);
    kiln_status st = rank == 2 ? rt_tensor_alloc(&r, KILN_DTYPE_FLOAT, 2, dims, err)
                               : rt_tensor_alloc(&r, KILN_DTYPE_FLOAT, 1, &dims[1], err);
    if (st != KILN_OK) return st;
    char *dst = r.data;
    for (int64_t row = 0; row < K; row++)
        for (int i = 0; i < 3; i++) {
            size_t bytes = (size_t)n[i] * sizeof(float);
            /* initializer data may be unaligned (mapped files): bytes only */
            memcpy(dst, (const char *)t[i]->data + (size_t)row * bytes, bytes);
            dst += bytes;
        }
    *out = pass_new_initializer(g, base, &r, err);
    rt_tensor_release(&r);
    return *out == IR_NONE ? KILN_ERR_NOMEM : KILN_OK;
}

static kiln_status try_merge(ir_model *m, pass_uses *u, bool *dead, int32_t ai, bool *merged, kiln_error *err) {
    ir_graph *g = m->graph;
    *merged = false;
    ir_node *at = &g->nodes[ai];
    if ((at->n_inputs != 3 && at->n_inputs != 4) || at->n_outputs != 1) return KILN_OK;
    int64_t h = ir_node_attr_int(at, "q_num_heads", 0);
    if (h < 1 || ir_node_attr_int(at, "kv_num_heads", 0) != h || ir_node_attr(at, "softcap") ||
        ir_node_attr(at, "qk_matmul_output_mode"))
        return KILN_OK;
    int32_t q = at->inputs[0], k = at->inputs[1], v = at->inputs[2];
    if (q == k || q == v || k == v) return KILN_OK;
    int32_t p[3] = {proj(g, u, dead, q), proj(g, u, dead, k), proj(g, u, dead, v)};
    if (p[0] < 0 || p[1] < 0 || p[2] < 0) return KILN_OK;
    const ir_node *mm[3] = {&g->nodes[p[0]], &g->nodes[p[1]], &g->nodes[p[2]]};
    int32_t x = mm[0]->inputs[0];
    const ir_value *xv = x >= 0 ? &g->values[x] : NULL;
    if (!xv || xv->init || xv->type.kind != IR_TYPE_TENSOR || xv->type.dtype != KILN_DTYPE_FLOAT || xv->type.rank != 3)
        return KILN_OK;
    const ir_tensor *w[3], *b[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        if (mm[i]->inputs[0] != x || mm[i]->n_inputs != mm[0]->n_inputs) return KILN_OK;
        w[i] = pass_const(g, mm[i]->inputs[1]);
        if (mm[i]->n_inputs == 3) b[i] = pass_const(g, mm[i]->inputs[2]);
        if (w[i]->dims[0] != w[0]->dims[0] || w[i]->dims[1] != w[0]->dims[1]) return KILN_OK;
    }
    int64_t K = w[0]->dims[0], N = w[0]->dims[1];
    if (N % h || (xv->type.dims[2].kind == IR_DIM_CONST && xv->type.dims[2].value != K)) return KILN_OK;
    /* the merged weights and bias */
    int32_t wv = IR_NONE, bv = IR_NONE;
    kiln_status st = concat_cols(g, g->values[mm[0]->inputs[1]].name, w, K, 2, &wv, err);
    if (st == KILN_OK && b[0]) st = concat_cols(g, g->values[mm[0]->inputs[2]].name, b, 1, 1, &bv, err);
    if (st != KILN_OK) return st;
    /* the packed output [B, S, 3N] */
    const char *qkv_name = arena_printf(&m->arena, "%s_qkv", g->values[q].name);
    int32_t qkv = qkv_name ? ir_graph_add_value(g, qkv_name) : IR_NONE;
    ir_dim *dims = ARENA_ARRAY(&m->arena, ir_dim, 3);
    int32_t *mins = ARENA_ARRAY(&m->arena, int32_t, 3), *ains = ARENA_ARRAY(&m->arena, int32_t, 2);
    if (qkv == IR_NONE || !dims || !mins || !ains)
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory merging Q/K/V projections");
    /* g->values may have moved (new values): take pointers again */
    xv = &g->values[x];
    dims[0] = xv->type.dims[0];
    dims[1] = xv->type.dims[1];
    dims[2] = ir_dim_const(3 * N);
    ir_value *qv = &g->values[qkv];
    qv->type.kind = IR_TYPE_TENSOR;
    qv->type.dtype = KILN_DTYPE_FLOAT;
    qv->type.rank = 3;
    qv->type.dims = dims;
    /* the first projection (in node order) becomes the merged GEMM */
    int32_t first = p[0] < p[1] ? (p[0] < p[2] ? p[0] : p[2]) : (p[1] < p[2] ? p[1] : p[2]);
    ir_node *mn = &g->nodes[first];
    mins[0] = x, mins[1] = wv, mins[2] = bv;
    mn->inputs = mins;
    mn->n_inputs = bv != IR_NONE ? 3 : 2;
    mn->outputs[0] = qkv;
    qv->producer = first;
    g->values[q].producer = IR_NONE; /* unread from here on */
    mn->name = arena_printf(&m->arena, "%s/qkv", at->name);
    if (!mn->name) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory merging Q/K/V projections");
    mn->name_generated = true;
    /* the attention reads the packed projection */
    ains[0] = qkv;
    ains[1] = at->n_inputs == 4 ? at->inputs[3] : IR_NONE;
    at = &g->nodes[ai];
    at->inputs = ains;
    at->n_inputs = ains[1] != IR_NONE ? 2 : 1;
    at->domain = "kiln";
    at->op_type = "QkvAttention";
    at->opset = 1;
    at->op = ir_op_lookup("kiln", "QkvAttention");
    for (int i = 0; i < 3; i++)
        if (p[i] != first) dead[p[i]] = true;
    *merged = true;
    return KILN_OK;
}

kiln_status build_pass_merge_qkv(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                 kiln_error *err) {
    (void)opts;
    if (!model || !model->graph) return KILN_OK;
    ir_graph *g = model->graph;
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    int32_t n = 0;
    for (int32_t i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        if (dead[i] || !is_op(&g->nodes[i], "", "Attention")) continue;
        bool f = false;
        st = try_merge(model, &u, dead, i, &f, err);
        n += f;
    }
    if (st == KILN_OK && n) pass_remove_nodes(g, dead);
    if (stats) stats->qkv_merged += n;
    free(dead);
    pass_uses_free(&u);
    return st;
}
