/* provenance.c - producer chains for diagnostics (see provenance.h). */
#include "diag/provenance.h"

#include <string.h>

#include "core/strbuf.h"

#define PROV_MAX_HOPS 6

/* Ops whose output has the shape of their (first non-constant) data input, so the
 * value's shape was decided further up. */
static bool keeps_shape(const char *op) {
    static const char *const ops[] = {
        "Identity", "Cast", "CastLike", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Dropout",
        "Gelu", "Erf", "Neg", "Abs", "Clip", "Softmax", "LogSoftmax", "BatchNormalization",
        "LayerNormalization", "InstanceNormalization", "GroupNormalization", "HardSigmoid",
        "HardSwish", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Sqrt", "Exp", "Log", "Add",
        "Sub", "Mul", "Div", "Pow", "Mish", "Reciprocal", "Floor", "Ceil", "Round",
        "QuantizeLinear", "DequantizeLinear", "Not", "Sign", "ThresholdedRelu"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op, ops[i]) == 0) return true;
    return false;
}

static bool valid_id(const ir_graph *g, int32_t v) { return v >= 0 && v < g->n_values; }

const char *diag_value_origin(const ir_graph *g, int32_t value) {
    if (!valid_id(g, value)) return "";
    const ir_value *v = &g->values[value];
    if (v->flags & IR_VALUE_INITIALIZER) return "(initializer)";
    if (v->flags & IR_VALUE_GRAPH_INPUT) return "(graph input)";
    if (v->flags & IR_VALUE_OUTER_SCOPE) return "(from the enclosing graph)";
    return "";
}

/* The data input to follow through a shape-keeping node: the first present input that is
 * not an initializer (a bias or scale is not where the shape came from). */
static int32_t data_input(const ir_graph *g, const ir_node *n) {
    int32_t first = IR_NONE;
    for (int32_t i = 0; i < n->n_inputs; i++) {
        int32_t v = n->inputs[i];
        if (!valid_id(g, v)) continue;
        if (first == IR_NONE) first = v;
        if (!(g->values[v].flags & IR_VALUE_INITIALIZER)) return v;
    }
    return first;
}

const char *diag_provenance(ir_model *m, const ir_graph *g, int32_t value) {
    if (!valid_id(g, value)) return NULL;
    const ir_value *v = &g->values[value];
    if (v->producer < 0 || v->producer >= g->n_nodes) return NULL;
    strbuf sb;
    sb_init(&sb);
    sb_append(&sb, "from ");
    int32_t cur = value;
    for (int hop = 0;; hop++) {
        const ir_value *cv = &g->values[cur];
        if (cv->producer < 0 || cv->producer >= g->n_nodes) break;
        const ir_node *n = &g->nodes[cv->producer];
        if (hop) sb_append(&sb, " <- ");
        sb_printf(&sb, "%s '%s'", n->op_type, n->name);
        int32_t in = keeps_shape(n->op_type) ? data_input(g, n)
                                              : (n->n_inputs > 0 ? n->inputs[0] : IR_NONE);
        if (!valid_id(g, in)) break;
        const ir_value *iv = &g->values[in];
        if (iv->flags & (IR_VALUE_INITIALIZER | IR_VALUE_GRAPH_INPUT)) {
            sb_printf(&sb, " of %s '%s' %s",
                      (iv->flags & IR_VALUE_INITIALIZER) && !(iv->flags & IR_VALUE_GRAPH_INPUT)
                          ? "initializer" : "graph input",
                      iv->name, ir_type_shape_str(m, &iv->type));
            break;
        }
        if (!keeps_shape(n->op_type) || hop + 1 >= PROV_MAX_HOPS) break;
        cur = in;
    }
    const char *r = sb.failed ? NULL : arena_strdup(&m->arena, sb_cstr(&sb));
    sb_free(&sb);
    return r;
}

int32_t diag_shape_origin(const ir_graph *g, int32_t value) {
    int32_t cur = value;
    for (int hop = 0; hop < PROV_MAX_HOPS && valid_id(g, cur); hop++) {
        int32_t pn = g->values[cur].producer;
        if (pn < 0 || pn >= g->n_nodes) return IR_NONE;
        const ir_node *n = &g->nodes[pn];
        if (!keeps_shape(n->op_type)) return pn;
        int32_t in = data_input(g, n);
        if (!valid_id(g, in) || g->values[in].producer < 0) return pn;
        cur = in;
    }
    return IR_NONE;
}
