/* fold_scale.c - folds a power-of-two scale after a MatMul into the constant weights that
 * produce one of its operands (host backends; the session runs it after the default passes).
 *
 * BERT's attention scores are Div(MatMul(Q, K^T), 8) with Q = Transpose(Reshape(q)) and
 * q = MatMul(h, Wq) + bq (a kiln_bias mark after fuse_residual, or an explicit Add of a
 * constant). Scaling Wq and bq by s = 1/8 and dropping the Div gives the same scores bit
 * for bit: multiplying by a power of two is exact in binary floating point, so every
 * product h*(s*w), every partial sum, the bias add and the reshape/transpose moves are s
 * times the unscaled ones, and s*x is exactly x/8. (Exact unless some value falls into
 * the subnormal range, |x| < 1.2e-38 after scaling, which the weight check below refuses
 * for the weights themselves.) The Div over [B, 12, 128, 128] and its output buffer go.
 *
 * Fires only on: Div(X, c) with c a float32 scalar constant 2^k, or Mul(X, c) / Mul(c, X)
 * with c = 2^k; X a MatMul output read only by that node and not pinned; one MatMul
 * operand reached through single-reader, unpinned Reshape/Transpose/Squeeze/Unsqueeze
 * nodes from a MatMul with a constant float32 weight (input 1), no activation or
 * residual mark, and either a kiln_bias constant or one Add of a float32 constant after
 * it (also single-reader). Scaled weights are new initializers, so shared constants stay
 * unchanged. It is not in build_run_passes' default set: build_run_host_passes runs it
 * after the attention fusion, so it folds the scales of attention blocks left unfused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"

static bool is_op(const ir_node *n, const char *op) { return !n->domain[0] && !strcmp(n->op_type, op); }

/* The value of a float32 scalar constant that is a power of two (finite, nonzero), or 0. */
static float pow2_scalar(const ir_graph *g, int32_t v) {
    const ir_tensor *t = pass_const(g, v);
    if (!t || t->dtype != KILN_DTYPE_FLOAT || t->count != 1 || !t->data) return 0.f;
    float c;
    memcpy(&c, t->data, sizeof c);
    if (!isfinite(c) || c == 0.f) return 0.f;
    int e;
    float m = frexpf(c, &e);
    return fabsf(m) == 0.5f ? c : 0.f;
}

/* The node producing v when v has exactly one reader and is not pinned, else NULL. */
static ir_node *sole_producer(ir_graph *g, const pass_uses *u, const bool *dead, int32_t v) {
    if (v < 0 || v >= g->n_values || u->count[v] != 1 || u->pinned[v]) return NULL;
    int32_t p = g->values[v].producer;
    if (p < 0 || p >= g->n_nodes || dead[p]) return NULL;
    ir_node *n = &g->nodes[p];
    return n->n_outputs == 1 && n->outputs[0] == v && !pass_has_subgraph(n) ? n : NULL;
}

/* A copy of constant v scaled by s, as a new initializer; -1 when some element would not
 * scale exactly (overflow, or a nonzero value ending subnormal) or on failure. */
static int32_t scaled_const(ir_graph *g, int32_t v, float s, kiln_error *err) {
    const ir_tensor *t = pass_const(g, v);
    if (!t || t->dtype != KILN_DTYPE_FLOAT || (t->count && !t->data) || t->rank > RT_MAX_RANK) return -1;
    rt_tensor tmp;
    memset(&tmp, 0, sizeof tmp);
    if (rt_tensor_alloc(&tmp, KILN_DTYPE_FLOAT, t->rank, t->dims, err) != KILN_OK) return -1;
    if (tmp.count != t->count) {
        rt_tensor_release(&tmp);
        return -1;
    }
    float *d = tmp.data;
    if (t->count) memcpy(d, t->data, (size_t)t->count * sizeof(float)); /* data may be unaligned */
    for (uint64_t i = 0; i < t->count; i++) {
        float y = d[i] * s;
        if (d[i] != 0.f && fpclassify(y) != FP_NORMAL) {
            rt_tensor_release(&tmp);
            return -1;
        }
        d[i] = y;
    }
    int32_t nv = pass_new_initializer(g, g->values[v].name, &tmp, err);
    rt_tensor_release(&tmp);
    return nv;
}

/* Tries to absorb scale s into the weights behind operand value v of the scores MatMul.
 * Returns 1 when done, 0 when the pattern does not match, -1 on an error. */
static int absorb(ir_model *model, ir_graph *g, const pass_uses *u, const bool *dead, int32_t v, float s,
                  kiln_error *err) {
    ir_node *n = sole_producer(g, u, dead, v);
    for (int hops = 0; n && hops < 8 && (is_op(n, "Reshape") || is_op(n, "Transpose") || is_op(n, "Squeeze") ||
                                        is_op(n, "Unsqueeze"));
         hops++)
        n = n->n_inputs >= 1 ? sole_producer(g, u, dead, n->inputs[0]) : NULL;
    if (!n) return 0;
    ir_node *add = NULL;
    int32_t add_k = -1;
    if (is_op(n, "Add") && n->n_inputs == 2) {
        for (int32_t k = 0; k < 2 && add_k < 0; k++) {
            const ir_tensor *c = pass_const(g, n->inputs[1 - k]);
            ir_node *p = sole_producer(g, u, dead, n->inputs[k]);
            if (c && c->dtype == KILN_DTYPE_FLOAT && p && is_op(p, "MatMul")) add = n, add_k = 1 - k, n = p;
        }
        if (!add) return 0;
    }
    if (!is_op(n, "MatMul") || n->n_inputs < 2 || ir_node_attr(n, "kiln_activation") ||
        ir_node_attr(n, "kiln_residual"))
        return 0;
    const ir_tensor *w = pass_const(g, n->inputs[1]);
    if (!w || w->dtype != KILN_DTYPE_FLOAT) return 0;
    const ir_attr *ba = ir_node_attr(n, "kiln_bias");
    int32_t bias_k = -1;
    if (ba) {
        if (ba->type != IR_ATTR_INT || ba->i < 2 || ba->i >= n->n_inputs || !pass_const(g, n->inputs[ba->i])) return 0;
        bias_k = (int32_t)ba->i;
    }
    /* every scaled copy first, then rewire: a refusal leaves the graph unchanged (an
     * unused new initializer at worst) */
    int32_t nw = scaled_const(g, n->inputs[1], s, err);
    int32_t nb = bias_k >= 0 ? scaled_const(g, n->inputs[bias_k], s, err) : -2;
    int32_t na = add ? scaled_const(g, add->inputs[add_k], s, err) : -2;
    if (err && err->msg) return -1;
    if (nw < 0 || nb == -1 || na == -1) return 0;
    (void)model;
    n->inputs[1] = nw;
    if (bias_k >= 0) n->inputs[bias_k] = nb;
    if (add) add->inputs[add_k] = na;
    return 1;
}

kiln_status build_pass_fold_scale(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                  kiln_error *err) {
    (void)opts;
    if (!model || !model->graph) return KILN_OK;
    ir_graph *g = model->graph;
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    int32_t folded = 0;
    for (int32_t j = 0; j < g->n_nodes && st == KILN_OK; j++) {
        ir_node *d = &g->nodes[j];
        bool is_div = is_op(d, "Div");
        if (dead[j] || !(is_div || is_op(d, "Mul")) || d->n_inputs != 2 || d->n_outputs != 1 || d->outputs[0] < 0)
            continue;
        int32_t xk = -1;
        float c = 0.f;
        for (int32_t k = 0; k < 2 && xk < 0; k++) {
            if (is_div && k == 1) break; /* Div(c, X) is not a scale */
            float ck = pow2_scalar(g, d->inputs[1 - k]);
            ir_node *m = ck != 0.f ? sole_producer(g, &u, dead, d->inputs[k]) : NULL;
            if (m && is_op(m, "MatMul") && m->n_inputs == 2 && !ir_node_attr(m, "kiln_bias") &&
                !ir_node_attr(m, "kiln_activation") && !ir_node_attr(m, "kiln_residual"))
                xk = k, c = ck;
        }
        if (xk < 0) continue;
        int32_t x = d->inputs[xk];
        int32_t mi = g->values[x].producer;
        ir_node *m = &g->nodes[mi];
        /* the scalar must not broadcast X to a larger rank: rank 0, or [1] on X of rank >= 1 */
        const ir_tensor *ct = pass_const(g, d->inputs[1 - xk]);
        const ir_value *xv = &g->values[x];
        if (ct->rank > 1 || (ct->rank == 1 && (xv->type.kind != IR_TYPE_TENSOR || xv->type.rank < 1))) continue;
        float s = is_div ? 1.f / c : c;
        int r = 0;
        for (int32_t side = 0; side < 2 && r == 0; side++) r = absorb(model, g, &u, dead, m->inputs[side], s, err);
        if (r < 0) {
            st = err && err->msg ? KILN_ERR_NOMEM : KILN_ERR_INTERNAL;
            break;
        }
        if (r == 0) continue;
        /* the MatMul now writes the Div's output */
        int32_t *outs = ARENA_ARRAY(&model->arena, int32_t, 1);
        if (!outs) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
            break;
        }
        outs[0] = d->outputs[0];
        m->outputs = outs;
        g->values[d->outputs[0]].producer = mi;
        g->values[x].producer = IR_NONE;
        dead[j] = true;
        folded++;
    }
    if (st == KILN_OK && folded) pass_remove_nodes(g, dead);
    if (stats) stats->scale_folded += folded;
    free(dead);
    pass_uses_free(&u);
    return st;
}
