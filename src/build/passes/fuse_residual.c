/* fuse_residual.c - marks an Add after a Conv/MatMul for the producer's GEMM epilogue.
 *
 * Two rewrites, both leaving the Add's work to the producer's epilogue (cpu_gemm.h):
 *   - MatMul -> Add(constant 1-D bias of N = the output's last dim) becomes one MatMul
 *     with internal attribute kiln_bias = index of the bias, appended as an input
 *     (every transformer projection: the bias add is folded into the GEMM's store);
 *   - Conv or MatMul -> Add(other tensor of exactly the same shape) becomes one node with
 *     kiln_residual = index of the other tensor, appended as an input (ResNet's skip
 *     connection, a transformer's residual stream).
 * The producer then writes the Add's output and the Add is removed. Conditions: the
 * producer's output has one reader (the Add) and is not pinned, it carries no fused
 * activation yet (the epilogue order is act(AB + bias + residual), so an Add after an
 * activation cannot move inside), shapes are known and equal (no broadcasting in the
 * epilogue), the types are float32, and for a residual the other input is produced
 * before the producer (node order stays topological). Runs before fuse_activation so that
 * Conv -> Add -> Relu ends as one Conv with both marks. Repeated rounds let
 * MatMul -> Add(bias) -> Add(residual) collapse fully.
 */
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"
#include "diag/diag.h"
#include "ir/infer.h"

static bool same_dim(const ir_dim *a, const ir_dim *b) {
    if (a->kind != b->kind) return false;
    if (a->kind == IR_DIM_CONST) return a->value == b->value;
    if (a->kind == IR_DIM_SYM) return a->sym == b->sym;
    return false;
}

static bool known_f32(const ir_value *v) {
    return v->type.kind == IR_TYPE_TENSOR && v->type.dtype == KILN_DTYPE_FLOAT && v->type.rank >= 0;
}

static bool same_shape(const ir_value *a, const ir_value *b) {
    if (!known_f32(a) || !known_f32(b) || a->type.rank != b->type.rank) return false;
    for (int32_t i = 0; i < a->type.rank; i++)
        if (!same_dim(&a->type.dims[i], &b->type.dims[i])) return false;
    return true;
}

static bool is_op(const ir_node *n, const char *op) { return !n->domain[0] && !strcmp(n->op_type, op); }

/* Appends input value v and an int attribute name=index to node p (arena memory). */
static bool add_input_attr(ir_model *model, ir_node *p, int32_t v, const char *name) {
    int32_t *ins = ARENA_ARRAY(&model->arena, int32_t, p->n_inputs + 1);
    if (!ins) return false;
    if (p->n_inputs) memcpy(ins, p->inputs, (size_t)p->n_inputs * sizeof *ins);
    ins[p->n_inputs] = v;
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = IR_ATTR_INT;
    a.i = p->n_inputs;
    if (!ir_node_set_attr(model, p, &a)) return false;
    p->inputs = ins;
    p->n_inputs++;
    return true;
}

static kiln_status fuse_round(ir_model *model, int32_t *fused_out, kiln_error *err) {
    ir_graph *g = model->graph;
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    int32_t fused = 0;
    for (int32_t j = 0; j < g->n_nodes; j++) {
        ir_node *add = &g->nodes[j];
        if (dead[j] || !is_op(add, "Add") || add->n_inputs != 2 || add->n_outputs != 1 || add->outputs[0] < 0) continue;
        /* candidate producers: either input; prefer the later one so the other is ready */
        int32_t best = -1, best_k = -1;
        for (int32_t k = 0; k < 2; k++) {
            int32_t v = add->inputs[k];
            if (v < 0 || add->inputs[1 - k] < 0 || add->inputs[0] == add->inputs[1]) continue;
            int32_t pi = g->values[v].producer;
            if (pi < 0 || pi >= j || dead[pi]) continue;
            ir_node *p = &g->nodes[pi];
            if (!(is_op(p, "Conv") || is_op(p, "MatMul")) || p->n_outputs != 1 || p->outputs[0] != v) continue;
            if (u.count[v] != 1 || u.pinned[v] || ir_node_attr(p, "kiln_activation") || pass_has_subgraph(p)) continue;
            if (pi > best) best = pi, best_k = k;
        }
        if (best < 0) continue;
        ir_node *p = &g->nodes[best];
        int32_t y = add->inputs[best_k], other = add->inputs[1 - best_k];
        const ir_value *yv = &g->values[y], *ov = &g->values[other], *zv = &g->values[add->outputs[0]];
        const ir_tensor *c = pass_const(g, other);
        const char *mark = NULL;
        if (is_op(p, "MatMul") && c && !ir_node_attr(p, "kiln_bias") && !ir_node_attr(p, "kiln_residual") &&
            c->dtype == KILN_DTYPE_FLOAT && c->rank == 1 && known_f32(yv) && yv->type.rank >= 1 &&
            yv->type.dims[yv->type.rank - 1].kind == IR_DIM_CONST &&
            yv->type.dims[yv->type.rank - 1].value == c->dims[0] && same_shape(yv, zv)) {
            mark = "kiln_bias";
        } else if (!ir_node_attr(p, "kiln_residual") && same_shape(yv, ov) && same_shape(yv, zv)) {
            int32_t op = g->values[other].producer;
            if (op >= best) continue; /* produced after the producer: would break the order */
            mark = "kiln_residual";
        }
        if (!mark) continue;
        if (!add_input_attr(model, p, other, mark)) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
            break;
        }
        int32_t *outs = ARENA_ARRAY(&model->arena, int32_t, 1);
        if (!outs) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
            break;
        }
        outs[0] = add->outputs[0];
        p->outputs = outs;
        g->values[add->outputs[0]].producer = best;
        g->values[y].producer = IR_NONE;
        dead[j] = true;
        fused++;
    }
    if (st == KILN_OK && fused) pass_remove_nodes(g, dead);
    *fused_out = fused;
    free(dead);
    pass_uses_free(&u);
    return st;
}

kiln_status build_pass_fuse_residual(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                     kiln_error *err) {
    (void)opts;
    /* Shapes of intermediates decide every fusion here, so infer them first (types the
     * importer left unknown). Inference problems only mean fewer fusions: diagnostics are
     * dropped and a failed inference leaves unknown types, which never fuse. */
    {
        diag_list dl;
        diag_list_init(&dl);
        kiln_error ierr = {0};
        ir_infer_options io = {NULL, 0, false};
        kiln_status ist = ir_infer(model, &io, &dl, &ierr);
        diag_list_free(&dl);
        if (ist == KILN_ERR_NOMEM) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inferring shapes");
    }
    for (int round = 0; round < 3; round++) {
        int32_t fused = 0;
        kiln_status st = fuse_round(model, &fused, err);
        if (st != KILN_OK) return st;
        stats->residual_fused += fused;
        if (!fused) break;
    }
    return KILN_OK;
}
