/* fuse_activation.c - marks an activation for the producing Conv/Gemm/MatMul to apply.
 *
 * Conv -> Relu becomes one Conv node with the internal attribute kiln_activation="Relu"
 * (plus kiln_activation_alpha/beta/min/max where the activation has parameters; a Gelu
 * becomes "Gelu" or, with approximate="tanh", "GeluTanh"); the
 * CPU kernels apply it in their GEMM epilogue while the output is still in cache
 * (cpu_gemm.c, cpu_epilogue_from_node). The activation node is removed and the producer
 * writes the activation's output. Only float32 producers whose output has exactly one
 * reader (the activation) and is not pinned are fused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"

static bool is_producer_op(const ir_node *n) {
    return !n->domain[0] && (!strcmp(n->op_type, "Conv") || !strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "MatMul"));
}

static bool const_scalar_f32(const ir_graph *g, const ir_node *n, int32_t k, float *out) {
    if (k >= n->n_inputs || n->inputs[k] < 0) return true; /* absent: keep the default */
    const ir_tensor *t = pass_const(g, n->inputs[k]);
    if (!t || t->dtype != KILN_DTYPE_FLOAT || t->count != 1 || !t->data) return false;
    *out = *(const float *)t->data;
    return true;
}

/* Fills the attributes to add; false when this activation cannot be fused. */
static bool activation_attrs(const ir_graph *g, const ir_node *act, ir_attr *attrs, int32_t *n_attrs, arena *a) {
    const char *op = act->op_type;
    *n_attrs = 1;
    attrs[0].name = "kiln_activation";
    attrs[0].type = IR_ATTR_STRING;
    attrs[0].s.data = op;
    attrs[0].s.len = strlen(op);
    attrs[0].doc = "";
    if (act->domain[0]) return false;
    if (!strcmp(op, "Relu") || !strcmp(op, "Sigmoid") || !strcmp(op, "Tanh") || !strcmp(op, "HardSwish")) return true;
    if (!strcmp(op, "Gelu")) {
        /* the epilogue name says which formula: "Gelu" (erf) or "GeluTanh" */
        const ir_attr *ap = ir_node_attr(act, "approximate");
        bool tanh_form = ap && ap->type == IR_ATTR_STRING && ap->s.len == 4 && !memcmp(ap->s.data, "tanh", 4);
        if (ap && !tanh_form && !(ap->type == IR_ATTR_STRING && ap->s.len == 4 && !memcmp(ap->s.data, "none", 4)))
            return false; /* an invalid value: leave it to the Gelu kernel to report */
        if (tanh_form) {
            attrs[0].s.data = "GeluTanh";
            attrs[0].s.len = 8;
        }
        return true;
    }
    if (!strcmp(op, "LeakyRelu") || !strcmp(op, "HardSigmoid")) {
        bool hs = op[0] == 'H';
        attrs[1].name = "kiln_activation_alpha";
        attrs[1].type = IR_ATTR_FLOAT;
        attrs[1].f = ir_node_attr_float(act, "alpha", hs ? 0.2f : 0.01f);
        attrs[1].doc = "";
        *n_attrs = 2;
        if (hs) {
            attrs[2].name = "kiln_activation_beta";
            attrs[2].type = IR_ATTR_FLOAT;
            attrs[2].f = ir_node_attr_float(act, "beta", 0.5f);
            attrs[2].doc = "";
            *n_attrs = 3;
        }
        return true;
    }
    if (!strcmp(op, "Clip")) {
        float lo = -INFINITY, hi = INFINITY;
        if (act->opset > 0 && act->opset < 11) {
            lo = ir_node_attr_float(act, "min", -INFINITY);
            hi = ir_node_attr_float(act, "max", INFINITY);
        } else if (!const_scalar_f32(g, act, 1, &lo) || !const_scalar_f32(g, act, 2, &hi)) {
            return false;
        }
        attrs[1] = (ir_attr){.name = "kiln_activation_min", .type = IR_ATTR_FLOAT, .f = lo, .doc = ""};
        attrs[2] = (ir_attr){.name = "kiln_activation_max", .type = IR_ATTR_FLOAT, .f = hi, .doc = ""};
        *n_attrs = 3;
        return true;
    }
    (void)a;
    return false;
}

kiln_status build_pass_fuse_activation(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                       kiln_error *err) {
    (void)opts;
    ir_graph *g = model->graph;
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    int32_t fused = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        ir_node *p = &g->nodes[i];
        if (!is_producer_op(p) || p->n_outputs != 1 || p->outputs[0] < 0 || ir_node_attr(p, "kiln_activation")) continue;
        int32_t y = p->outputs[0];
        if (u.count[y] != 1 || u.pinned[y]) continue;
        const ir_value *yv = &g->values[y];
        /* the epilogue is float32 only: require the type to be known */
        if (yv->type.kind != IR_TYPE_TENSOR || yv->type.dtype != KILN_DTYPE_FLOAT) {
            /* types of intermediates are often unknown here: float32 weights or inputs tell */
            bool f32 = false;
            for (int32_t k = 0; k < p->n_inputs && k < 2 && !f32; k++) {
                int32_t v = p->inputs[k];
                const ir_tensor *w = pass_const(g, v);
                f32 = (w && w->dtype == KILN_DTYPE_FLOAT) ||
                      (v >= 0 && g->values[v].type.kind == IR_TYPE_TENSOR && g->values[v].type.dtype == KILN_DTYPE_FLOAT);
            }
            if (!f32) continue;
        }
        int32_t j = u.reader[y];
        if (j <= i || dead[j]) continue;
        ir_node *act = &g->nodes[j];
        if (act->n_inputs < 1 || act->inputs[0] != y || act->n_outputs != 1 || act->outputs[0] < 0) continue;
        ir_attr extra[3];
        int32_t n_extra = 0;
        memset(extra, 0, sizeof extra);
        if (!activation_attrs(g, act, extra, &n_extra, &model->arena)) continue;
        ir_attr *na = ARENA_ARRAY(&model->arena, ir_attr, p->n_attrs + n_extra);
        if (!na) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
            break;
        }
        if (p->n_attrs) memcpy(na, p->attrs, (size_t)p->n_attrs * sizeof *na);
        memcpy(na + p->n_attrs, extra, (size_t)n_extra * sizeof *na);
        p->attrs = na;
        p->n_attrs += n_extra;
        /* the producer now writes the activation's output; its old output is unused */
        int32_t z = act->outputs[0];
        int32_t *outs = ARENA_ARRAY(&model->arena, int32_t, 1);
        if (!outs) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
            break;
        }
        outs[0] = z;
        p->outputs = outs;
        g->values[y].producer = IR_NONE;
        dead[j] = true;
        fused++;
    }
    if (st == KILN_OK && fused) pass_remove_nodes(g, dead);
    stats->activation_fused += fused;
    free(dead);
    pass_uses_free(&u);
    return st;
}
