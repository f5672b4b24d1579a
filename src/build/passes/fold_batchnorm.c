/* fold_batchnorm.c - Conv followed by inference BatchNormalization becomes one Conv.
 *
 * BN(y) = scale * (y - mean) / sqrt(var + eps) + bias is per output channel and affine,
 * so with s = scale / sqrt(var + eps) the Conv's weights become W[m] * s[m] and its bias
 * (b[m] - mean[m]) * s[m] + bias[m]. Requires float32 constant weights and BN
 * parameters, a Conv output read only by the BN, and a BN with one output (inference
 * mode: training_mode unset or 0). New initializers are added; the old ones stay (other
 * nodes may share them) and simply go unused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"

static const float *f32_vec(const ir_graph *g, const ir_node *n, int32_t k, int64_t len) {
    if (k >= n->n_inputs) return NULL;
    const ir_tensor *t = pass_const(g, n->inputs[k]);
    if (!t || t->dtype != KILN_DTYPE_FLOAT || (int64_t)t->count != len || !t->data) return NULL;
    return t->data;
}

kiln_status build_pass_fold_batchnorm(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err) {
    (void)opts;
    ir_graph *g = model->graph;
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    int32_t folded = 0;
    for (int32_t i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        ir_node *c = &g->nodes[i];
        if (c->domain[0] || strcmp(c->op_type, "Conv") || c->n_outputs != 1 || c->outputs[0] < 0 || c->n_inputs < 2)
            continue;
        if (ir_node_attr(c, "kiln_activation")) continue;
        int32_t y = c->outputs[0];
        if (u.count[y] != 1 || u.pinned[y]) continue;
        int32_t j = u.reader[y];
        if (j <= i || dead[j]) continue;
        ir_node *bn = &g->nodes[j];
        if (bn->domain[0] || strcmp(bn->op_type, "BatchNormalization") || bn->n_inputs < 5 || bn->inputs[0] != y)
            continue;
        if (ir_node_attr_int(bn, "training_mode", 0) != 0 || ir_node_attr(bn, "spatial")) continue;
        bool extra_out = false;
        for (int32_t k = 1; k < bn->n_outputs; k++) extra_out |= bn->outputs[k] >= 0;
        if (extra_out || bn->outputs[0] < 0) continue;
        const ir_tensor *w = pass_const(g, c->inputs[1]);
        if (!w || w->dtype != KILN_DTYPE_FLOAT || w->rank < 3 || !w->data) continue;
        int64_t m = w->dims[0];
        if (m <= 0) continue;
        const float *scale = f32_vec(g, bn, 1, m), *beta = f32_vec(g, bn, 2, m), *mean = f32_vec(g, bn, 3, m),
                    *var = f32_vec(g, bn, 4, m);
        const float *b0 = c->n_inputs > 2 && c->inputs[2] >= 0 ? f32_vec(g, c, 2, m) : NULL;
        if (!scale || !beta || !mean || !var || (c->n_inputs > 2 && c->inputs[2] >= 0 && !b0)) continue;
        float eps = ir_node_attr_float(bn, "epsilon", 1e-5f);
        rt_tensor nw, nb;
        memset(&nw, 0, sizeof nw);
        memset(&nb, 0, sizeof nb);
        if ((st = rt_tensor_alloc(&nw, KILN_DTYPE_FLOAT, w->rank, w->dims, err)) != KILN_OK) break;
        if ((st = rt_tensor_alloc(&nb, KILN_DTYPE_FLOAT, 1, &m, err)) != KILN_OK) {
            rt_tensor_release(&nw);
            break;
        }
        uint64_t per = w->count / (uint64_t)m;
        const float *wd = w->data;
        float *nwd = nw.data, *nbd = nb.data;
        for (int64_t o = 0; o < m; o++) {
            double s = (double)scale[o] / sqrt((double)var[o] + (double)eps);
            for (uint64_t k = 0; k < per; k++) nwd[(uint64_t)o * per + k] = (float)(wd[(uint64_t)o * per + k] * s);
            nbd[o] = (float)(((b0 ? (double)b0[o] : 0.0) - mean[o]) * s + beta[o]);
        }
        const char *wname = g->values[c->inputs[1]].name;
        int32_t wv = pass_new_initializer(g, wname, &nw, err);
        int32_t bv = wv == IR_NONE ? IR_NONE : pass_new_initializer(g, wname, &nb, err);
        rt_tensor_release(&nw);
        rt_tensor_release(&nb);
        if (wv == IR_NONE || bv == IR_NONE) {
            st = err && err->code ? err->code : KILN_ERR_NOMEM;
            break;
        }
        c = &g->nodes[i]; /* (values may have moved; nodes did not, but stay safe) */
        bn = &g->nodes[j];
        int32_t *ins = ARENA_ARRAY(&model->arena, int32_t, 3);
        int32_t *outs = ARENA_ARRAY(&model->arena, int32_t, 1);
        if (!ins || !outs) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
            break;
        }
        ins[0] = c->inputs[0];
        ins[1] = wv;
        ins[2] = bv;
        c->inputs = ins;
        c->n_inputs = 3;
        outs[0] = bn->outputs[0];
        c->outputs = outs;
        g->values[y].producer = IR_NONE;
        dead[j] = true;
        folded++;
    }
    if (st == KILN_OK && folded) pass_remove_nodes(g, dead);
    stats->batchnorm_folded += folded;
    free(dead);
    pass_uses_free(&u);
    return st;
}
