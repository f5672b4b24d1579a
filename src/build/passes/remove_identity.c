/* remove_identity.c - drops Identity nodes and inference-mode Dropout nodes.
 *
 * Consumers are rewired to read the node's input directly. Kept when the output is
 * pinned (a graph output, or read by name from a subgraph) since renaming those would
 * change the model's interface, or when the input is not a plain tensor value we know
 * (Identity also passes sequences and optionals: rewiring is still correct for them,
 * so only Dropout checks its mode). Dropout is removed only when it cannot be in
 * training mode (no training_mode input, or a constant false one) and its mask output
 * is unused.
 */
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"

static bool dropout_is_identity(const ir_graph *g, const ir_node *n, const pass_uses *u) {
    if (n->n_inputs >= 3 && n->inputs[2] >= 0) {
        const ir_tensor *t = pass_const(g, n->inputs[2]);
        if (!t || t->dtype != KILN_DTYPE_BOOL || t->count != 1 || !t->data || *(const uint8_t *)t->data) return false;
    }
    if (n->n_outputs >= 2 && n->outputs[1] >= 0 && (u->count[n->outputs[1]] || u->pinned[n->outputs[1]])) return false;
    return true;
}

kiln_status build_pass_remove_identity(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                       kiln_error *err) {
    (void)opts;
    ir_graph *g = model->graph;
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    int32_t removed = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        ir_node *n = &g->nodes[i];
        if (n->domain[0]) continue;
        bool is_id = !strcmp(n->op_type, "Identity");
        bool is_drop = !strcmp(n->op_type, "Dropout");
        if (!is_id && !is_drop) continue;
        if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        int32_t in = n->inputs[0], out = n->outputs[0];
        if (u.pinned[out]) continue;
        if (is_drop && !dropout_is_identity(g, n, &u)) continue;
        pass_replace_uses(g, out, in);
        u.count[in] += u.count[out];
        dead[i] = true;
        removed++;
    }
    if (removed) pass_remove_nodes(g, dead);
    stats->identity_removed += removed;
    free(dead);
    pass_uses_free(&u);
    return KILN_OK;
}
