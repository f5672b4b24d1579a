/* fuse_attention.c - one ONNX Attention node (opset 23) for a transformer's attention block.
 *
 * The block as exporters write it (BERT, tools/make_zoo.py), from the projections
 * q, k, v [B, S, H*D] to the merged context [B, S, H*D]:
 *     Q = Transpose(Reshape(q, [0, 0, H, D]), perm 0,2,1,3)         [B, H, S, D]
 *     K = Transpose(Reshape(k, [0, 0, H, D]), perm 0,2,3,1)         [B, H, D, S]
 *     V = Transpose(Reshape(v, [0, 0, H, D]), perm 0,2,1,3)         [B, H, S, D]
 *     P = Softmax(MatMul(Q, K) / c  (or * c)  [+ mask], axis -1)
 *     y = Reshape(Transpose(MatMul(P, V), perm 0,2,1,3), [0, 0, H*D])
 * becomes  y = Attention(q, k, v[, mask]) with q_num_heads = kv_num_heads = H and
 * scale = 1/c (or c): ONNX's Attention with 3-D inputs does exactly the head split, the
 * scaled scores, the additive float mask (broadcast to [B, H, S, L]), the softmax over
 * keys and the head merge. Thirteen nodes become one, which the CUDA backend runs as one
 * fused kernel (cuda_attention.cu) and the CPU backend with its Attention kernel.
 *
 * The pass fires only on a full match: every intermediate read once and not pinned,
 * constant reshape shapes whose first two entries copy (0) or equal the known batch and
 * sequence dims, exact perms, a scalar constant scale, a softmax over the last axis, a
 * mask of known rank <= 4 in the projections' float dtype, q/k/v of rank 3 in one float
 * dtype whose known last dim is H*D. Anything else is left alone (tests: near misses in
 * tests/unit/test_fuse_attention.c). It is not in build_run_passes' default set: the
 * backends' structural passes run it (build_run_host_passes for the CPU, which runs the
 * node fused through its packed GEMM, cpu_attention_fast.h; build_run_device_passes).
 */
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"
#include "ir/ops/ops.h"

static bool is_op(const ir_node *n, const char *op) { return !n->domain[0] && !strcmp(n->op_type, op); }

typedef struct att_ctx {
    ir_graph *g;
    pass_uses *u;
    bool *dead;
} att_ctx;

/* The node producing v when it is an op_type node not yet consumed by another match and
 * v is read exactly once (by the chain) and not pinned. */
static ir_node *chain(const att_ctx *c, int32_t v, const char *op) {
    if (v < 0 || v >= c->g->n_values || c->u->count[v] != 1 || c->u->pinned[v]) return NULL;
    int32_t p = c->g->values[v].producer;
    if (p < 0 || c->dead[p]) return NULL;
    ir_node *n = &c->g->nodes[p];
    if (!is_op(n, op) || n->n_outputs != 1 || pass_has_subgraph(n)) return NULL;
    return n;
}

static bool perm_is(const ir_node *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    const ir_attr *p = ir_node_attr(t, "perm");
    return p && p->type == IR_ATTR_INTS && p->n == 4 && p->ints[0] == a && p->ints[1] == b && p->ints[2] == c &&
           p->ints[3] == d;
}

static kiln_dtype vdt(const ir_graph *g, int32_t v) {
    const ir_value *x = &g->values[v];
    if (x->init) return x->init->dtype;
    return x->type.kind == IR_TYPE_TENSOR ? x->type.dtype : KILN_DTYPE_UNDEFINED;
}

static bool is_float(kiln_dtype t) { return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16; }

/* Static dim i of v, or -1 when unknown. */
static int64_t sdim(const ir_graph *g, int32_t v, int32_t i) {
    const ir_type *t = &g->values[v].type;
    if (t->kind != IR_TYPE_TENSOR || i >= t->rank || t->dims[i].kind != IR_DIM_CONST) return -1;
    return t->dims[i].value;
}

/* An int64 constant vector of n entries. */
static bool const_ints(const ir_graph *g, int32_t v, int64_t *out, int32_t n) {
    const ir_tensor *t = pass_const(g, v);
    if (!t || t->dtype != KILN_DTYPE_INT64 || t->count != (uint64_t)n) return false;
    memcpy(out, t->data, (size_t)n * sizeof *out);
    return true;
}

/* Leading reshape entries: 0 copies the input dim; else the known input dim itself. */
static bool lead_ok(const ir_graph *g, int32_t x, const int64_t *sh) {
    for (int32_t i = 0; i < 2; i++)
        if (sh[i] != 0 && (sh[i] < 1 || sh[i] != sdim(g, x, i))) return false;
    return true;
}

/* x = Transpose(Reshape(src, [0, 0, H, D]), perm): src, H and D; false on a mismatch. */
static bool head_split(const att_ctx *c, int32_t x, const int64_t perm[4], int32_t *src, int64_t *H, int64_t *D,
                       int32_t nodes[2]) {
    ir_node *t = chain(c, x, "Transpose");
    if (!t || t->n_inputs != 1 || !perm_is(t, perm[0], perm[1], perm[2], perm[3])) return false;
    ir_node *r = chain(c, t->inputs[0], "Reshape");
    if (!r || r->n_inputs != 2 || ir_node_attr_int(r, "allowzero", 0) != 0) return false;
    int64_t sh[4];
    if (!const_ints(c->g, r->inputs[1], sh, 4) || sh[2] < 1 || sh[3] < 1) return false;
    int32_t s = r->inputs[0];
    if (s < 0 || !is_float(vdt(c->g, s)) || c->g->values[s].type.rank != 3 || !lead_ok(c->g, s, sh)) return false;
    int64_t last = sdim(c->g, s, 2);
    if (last >= 0 && last != sh[2] * sh[3]) return false;
    *src = s;
    *H = sh[2];
    *D = sh[3];
    nodes[0] = (int32_t)(t - c->g->nodes);
    nodes[1] = (int32_t)(r - c->g->nodes);
    return true;
}

/* A float scalar constant (count 1) as float. */
static bool const_scalar(const ir_graph *g, int32_t v, float *out) {
    const ir_tensor *t = pass_const(g, v);
    if (!t || t->count != 1) return false;
    if (t->dtype == KILN_DTYPE_FLOAT) {
        memcpy(out, t->data, 4);
        return true;
    }
    return false;
}

/* Tries to fuse the block around Softmax node si. */
static kiln_status try_fuse(ir_model *m, att_ctx *c, int32_t si, bool *fused, kiln_error *err) {
    ir_graph *g = c->g;
    *fused = false;
    const ir_node *sm = &g->nodes[si];
    if (sm->n_inputs != 1 || sm->n_outputs != 1) return KILN_OK;
    int64_t axis = ir_node_attr_int(sm, "axis", sm->opset >= 13 || sm->opset == 0 ? -1 : 1);
    if (axis != -1 && axis != 3) return KILN_OK;
    int32_t p = sm->outputs[0];
    if (p < 0 || c->u->count[p] != 1 || c->u->pinned[p]) return KILN_OK;
    /* forwards: P -> MatMul(P, V) -> Transpose -> Reshape */
    int32_t mm2i = c->u->reader[p];
    if (mm2i < 0 || c->dead[mm2i] || !is_op(&g->nodes[mm2i], "MatMul") || g->nodes[mm2i].inputs[0] != p ||
        g->nodes[mm2i].n_inputs != 2)
        return KILN_OK;
    int32_t ctx = g->nodes[mm2i].outputs[0];
    if (ctx < 0 || c->u->count[ctx] != 1 || c->u->pinned[ctx]) return KILN_OK;
    int32_t ti = c->u->reader[ctx];
    if (ti < 0 || c->dead[ti] || !is_op(&g->nodes[ti], "Transpose") || !perm_is(&g->nodes[ti], 0, 2, 1, 3))
        return KILN_OK;
    int32_t ctxt = g->nodes[ti].outputs[0];
    if (ctxt < 0 || c->u->count[ctxt] != 1 || c->u->pinned[ctxt]) return KILN_OK;
    int32_t ri = c->u->reader[ctxt];
    if (ri < 0 || c->dead[ri] || !is_op(&g->nodes[ri], "Reshape") || g->nodes[ri].inputs[0] != ctxt ||
        g->nodes[ri].n_inputs != 2 || ir_node_attr_int(&g->nodes[ri], "allowzero", 0) != 0)
        return KILN_OK;
    /* backwards: Softmax <- [Add mask] <- Div/Mul scale <- MatMul(Q, K) */
    int32_t dead_nodes[16], nd = 0;
    int32_t s = sm->inputs[0], mask = IR_NONE;
    ir_node *add = chain(c, s, "Add");
    if (add) {
        if (add->n_inputs != 2) return KILN_OK;
        /* the scaled scores are the side produced by Div/Mul */
        int32_t k = chain(c, add->inputs[0], "Div") || chain(c, add->inputs[0], "Mul") ? 0 : 1;
        s = add->inputs[k];
        mask = add->inputs[1 - k];
        dead_nodes[nd++] = (int32_t)(add - g->nodes);
    }
    ir_node *sc = chain(c, s, "Div");
    bool div = sc != NULL;
    if (!sc) sc = chain(c, s, "Mul");
    if (!sc || sc->n_inputs != 2) return KILN_OK;
    float cval;
    int32_t scores = sc->inputs[0];
    if (!const_scalar(g, sc->inputs[1], &cval)) {
        if (div || !const_scalar(g, sc->inputs[0], &cval)) return KILN_OK;
        scores = sc->inputs[1];
    }
    if (!(cval > 0.f) || !(cval < 1e30f)) return KILN_OK;
    dead_nodes[nd++] = (int32_t)(sc - g->nodes);
    ir_node *mm1 = chain(c, scores, "MatMul");
    if (!mm1 || mm1->n_inputs != 2) return KILN_OK;
    dead_nodes[nd++] = (int32_t)(mm1 - g->nodes);
    int32_t q, k, v, split[2];
    int64_t Hq, Dq, Hk, Dk, Hv, Dv;
    static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
    if (!head_split(c, mm1->inputs[0], p0213, &q, &Hq, &Dq, split)) return KILN_OK;
    dead_nodes[nd++] = split[0], dead_nodes[nd++] = split[1];
    if (!head_split(c, mm1->inputs[1], p0231, &k, &Hk, &Dk, split)) return KILN_OK;
    dead_nodes[nd++] = split[0], dead_nodes[nd++] = split[1];
    if (!head_split(c, g->nodes[mm2i].inputs[1], p0213, &v, &Hv, &Dv, split)) return KILN_OK;
    dead_nodes[nd++] = split[0], dead_nodes[nd++] = split[1];
    if (Hq != Hk || Hq != Hv || Dq != Dk) return KILN_OK;
    kiln_dtype dt = vdt(g, q);
    if (vdt(g, k) != dt || vdt(g, v) != dt) return KILN_OK;
    if (mask != IR_NONE) {
        const ir_value *mv = &g->values[mask];
        if (vdt(g, mask) != dt || (!mv->init && (mv->type.kind != IR_TYPE_TENSOR || mv->type.rank < 0)) ||
            (mv->init ? mv->init->rank : mv->type.rank) > 4)
            return KILN_OK;
    }
    /* the merge: Reshape(ctx^T, [0, 0, H*Dv]) (or -1 last, or the known dims) */
    int64_t msh[3];
    if (!const_ints(g, g->nodes[ri].inputs[1], msh, 3) || !lead_ok(g, q, msh) ||
        !(msh[2] == -1 || msh[2] == Hv * Dv))
        return KILN_OK;
    dead_nodes[nd++] = mm2i;
    dead_nodes[nd++] = ti;
    dead_nodes[nd++] = si;
    /* the Attention node takes the merge Reshape's slot (all its inputs come earlier) */
    int32_t *ins = ARENA_ARRAY(&m->arena, int32_t, 4);
    ir_attr *at = ARENA_ARRAY(&m->arena, ir_attr, 3);
    char *name = arena_printf(&m->arena, "%s/Attention", sm->name);
    if (!ins || !at || !name) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory fusing attention");
    ins[0] = q, ins[1] = k, ins[2] = v, ins[3] = mask;
    const char *an[3] = {"q_num_heads", "kv_num_heads", "scale"};
    for (int i = 0; i < 3; i++) {
        at[i].name = an[i];
        at[i].type = i < 2 ? IR_ATTR_INT : IR_ATTR_FLOAT;
        at[i].i = Hq;
        at[i].doc = "";
    }
    at[2].f = div ? 1.f / cval : cval;
    ir_node *y = &g->nodes[ri];
    y->name = name;
    y->name_generated = true;
    y->op_type = "Attention";
    y->domain = "";
    y->opset = 23;
    y->op = ir_op_lookup("", "Attention");
    y->inputs = ins;
    y->n_inputs = mask != IR_NONE ? 4 : 3;
    y->attrs = at;
    y->n_attrs = 3;
    for (int32_t i = 0; i < nd; i++) c->dead[dead_nodes[i]] = true;
    *fused = true;
    return KILN_OK;
}

kiln_status build_pass_fuse_attention(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err) {
    (void)opts;
    if (!model || !model->graph) return KILN_OK;
    ir_graph *g = model->graph;
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    att_ctx c = {g, &u, dead};
    int32_t n = 0;
    for (int32_t i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        if (dead[i] || !is_op(&g->nodes[i], "Softmax")) continue;
        bool f = false;
        st = try_fuse(model, &c, i, &f, err);
        n += f;
    }
    if (st == KILN_OK && n) pass_remove_nodes(g, dead);
    if (stats) stats->attention_fused += n;
    free(dead);
    pass_uses_free(&u);
    return st;
}
