/* engine_sample.h - builds a small engine_plan by hand (no ONNX reader needed) for the
 * engine format tests: symbolic and constant dims, an inline and a mapped initializer,
 * every attribute kind the format stores, a string tensor, and an If-style subgraph.
 * Header-only (static functions) so each test file gets its own copy. */
#ifndef KILN_TESTS_ENGINE_SAMPLE_H
#define KILN_TESTS_ENGINE_SAMPLE_H

#include <string.h>

#include "engine/engine.h"
#include "ir/graph.h"

static ir_tensor *sample_tensor(ir_model *m, const char *name, int64_t d0, int64_t d1, float base) {
    ir_tensor *t = ARENA_NEW(&m->arena, ir_tensor);
    t->name = arena_strdup(&m->arena, name);
    t->dtype = KILN_DTYPE_FLOAT;
    t->rank = 2;
    t->dims = ARENA_ARRAY(&m->arena, int64_t, 2);
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->count = (uint64_t)(d0 * d1);
    t->nbytes = t->count * 4;
    float *f = arena_alloc(&m->arena, t->nbytes);
    for (uint64_t i = 0; i < t->count; i++) f[i] = base + (float)i * 0.5f;
    t->data = f;
    t->where = IR_DATA_OWNED;
    t->doc = "";
    return t;
}

static void sample_set_tensor_type(ir_model *m, ir_value *v, int32_t rank, const ir_dim *dims) {
    v->type.kind = IR_TYPE_TENSOR;
    v->type.dtype = KILN_DTYPE_FLOAT;
    v->type.rank = rank;
    v->type.dims = ARENA_ARRAY(&m->arena, ir_dim, rank);
    memcpy(v->type.dims, dims, sizeof(ir_dim) * (size_t)rank);
}

static int32_t sample_node(ir_graph *g, const char *name, const char *op, int32_t in0, int32_t in1, int32_t out) {
    ir_model *m = g->model;
    int32_t idx = ir_graph_add_node(g);
    ir_node *n = ir_graph_node(g, idx);
    n->name = arena_strdup(&m->arena, name);
    n->op_type = arena_strdup(&m->arena, op);
    n->opset = 17;
    n->n_inputs = in1 == -2 ? 1 : 2;
    n->inputs = ARENA_ARRAY(&m->arena, int32_t, 2);
    n->inputs[0] = in0;
    n->inputs[1] = in1;
    n->n_outputs = 1;
    n->outputs = ARENA_ARRAY(&m->arena, int32_t, 1);
    n->outputs[0] = out;
    ir_val(g, out)->producer = idx;
    return idx;
}

/* x[batch,16] -> MatMul W[16,16] -> Add b[1,16] -> If(cond){Relu} -> z */
static engine_plan *sample_plan(void) {
    engine_plan *p = engine_plan_new();
    ir_model *m = ir_model_new();
    p->model = m;
    m->ir_version = 8;
    m->producer_name = "kiln-test";
    m->producer_version = "1";
    m->opsets = ARENA_ARRAY(&m->arena, ir_opset, 1);
    m->opsets[0].domain = "";
    m->opsets[0].version = 17;
    m->n_opsets = 1;
    m->metadata = ARENA_ARRAY(&m->arena, ir_kv, 1);
    m->metadata[0].key = "author";
    m->metadata[0].value = "tests";
    m->n_metadata = 1;
    int32_t batch = ir_sym_leaf(m, "batch");
    ir_graph *g = ir_graph_new(m, NULL, "main");
    m->graph = g;
    ir_dim d_b = {IR_DIM_SYM, batch, 0}, d16 = {IR_DIM_CONST, 0, 16}, d1 = {IR_DIM_CONST, 0, 1};
    int32_t x = ir_graph_add_value(g, "x");
    ir_dim xd[2] = {d_b, d16};
    sample_set_tensor_type(m, ir_val(g, x), 2, xd);
    ir_val(g, x)->flags = IR_VALUE_GRAPH_INPUT | IR_VALUE_HAS_VALUE_INFO;
    int32_t w = ir_graph_add_value(g, "W");
    ir_val(g, w)->init = sample_tensor(m, "W", 16, 16, 1.0f); /* 1024 bytes: WEIGHTS */
    ir_val(g, w)->flags = IR_VALUE_INITIALIZER;
    ir_dim wd[2] = {d16, d16};
    sample_set_tensor_type(m, ir_val(g, w), 2, wd);
    int32_t b = ir_graph_add_value(g, "b");
    ir_val(g, b)->init = sample_tensor(m, "b", 1, 16, -2.0f); /* 64 bytes: inline */
    ir_val(g, b)->flags = IR_VALUE_INITIALIZER;
    ir_dim bd[2] = {d1, d16};
    sample_set_tensor_type(m, ir_val(g, b), 2, bd);
    int32_t cond = ir_graph_add_value(g, "cond");
    ir_val(g, cond)->flags = IR_VALUE_GRAPH_INPUT;
    ir_val(g, cond)->type.kind = IR_TYPE_TENSOR;
    ir_val(g, cond)->type.dtype = KILN_DTYPE_BOOL;
    ir_val(g, cond)->type.rank = 0;
    int32_t y = ir_graph_add_value(g, "y");
    int32_t s = ir_graph_add_value(g, "s");
    int32_t z = ir_graph_add_value(g, "z");
    sample_set_tensor_type(m, ir_val(g, z), 2, xd);
    ir_val(g, z)->flags = IR_VALUE_GRAPH_OUTPUT;

    sample_node(g, "/fc/MatMul", "MatMul", x, w, y);
    sample_node(g, "/fc/Add", "Add", y, b, s);
    int32_t ifn = sample_node(g, "/gate/If", "If", cond, -2, z);

    /* then/else branches: Relu over the outer-scope 's' */
    ir_graph *branches[2];
    for (int k = 0; k < 2; k++) {
        ir_graph *sg = ir_graph_new(m, g, k ? "else" : "then");
        sg->location = "node '/gate/If' (If)";
        int32_t outer = ir_graph_add_value(sg, "s");
        ir_val(sg, outer)->flags = IR_VALUE_OUTER_SCOPE;
        int32_t r = ir_graph_add_value(sg, k ? "r_else" : "r_then");
        sample_node(sg, k ? "relu_else" : "relu_then", k ? "Neg" : "Relu", outer, -2, r);
        sg->outputs = ARENA_ARRAY(&m->arena, int32_t, 1);
        sg->outputs[0] = r;
        sg->n_outputs = 1;
        branches[k] = sg;
    }
    ir_node *n = ir_graph_node(g, ifn);
    n->n_attrs = 8;
    n->attrs = ARENA_ARRAY(&m->arena, ir_attr, 8);
    n->attrs[0] = (ir_attr){.name = "then_branch", .type = IR_ATTR_GRAPH, .g = branches[0]};
    n->attrs[1] = (ir_attr){.name = "else_branch", .type = IR_ATTR_GRAPH, .g = branches[1]};
    n->attrs[2] = (ir_attr){.name = "alpha", .type = IR_ATTR_FLOAT, .f = 0.25f};
    n->attrs[3] = (ir_attr){.name = "axis", .type = IR_ATTR_INT, .i = -1};
    n->attrs[4] = (ir_attr){.name = "mode", .type = IR_ATTR_STRING, .s = {"nearest", 7}};
    int64_t *ints = ARENA_ARRAY(&m->arena, int64_t, 3);
    ints[0] = 1, ints[1] = 2, ints[2] = 3;
    n->attrs[5] = (ir_attr){.name = "pads", .type = IR_ATTR_INTS, .n = 3, .ints = ints};
    ir_tensor *st = ARENA_NEW(&m->arena, ir_tensor);
    st->name = "labels";
    st->dtype = KILN_DTYPE_STRING;
    st->rank = 1;
    st->dims = ARENA_ARRAY(&m->arena, int64_t, 1);
    st->dims[0] = 2;
    st->count = 2;
    st->strings = ARENA_ARRAY(&m->arena, ir_bytes, 2);
    st->strings[0] = (ir_bytes){"cat", 3};
    st->strings[1] = (ir_bytes){"dog", 3};
    st->doc = "";
    n->attrs[6] = (ir_attr){.name = "labels", .type = IR_ATTR_TENSOR, .t = st};
    ir_bytes *strs = ARENA_ARRAY(&m->arena, ir_bytes, 2);
    strs[0] = (ir_bytes){"a", 1};
    strs[1] = (ir_bytes){"bc", 2};
    n->attrs[7] = (ir_attr){.name = "names", .type = IR_ATTR_STRINGS, .n = 2, .strings = strs};

    g->inputs = ARENA_ARRAY(&m->arena, int32_t, 2);
    g->inputs[0] = x;
    g->inputs[1] = cond;
    g->n_inputs = 2;
    g->outputs = ARENA_ARRAY(&m->arena, int32_t, 1);
    g->outputs[0] = z;
    g->n_outputs = 1;
    g->initializers = ARENA_ARRAY(&m->arena, int32_t, 2);
    g->initializers[0] = w;
    g->initializers[1] = b;
    g->n_initializers = 2;

    /* metadata */
    p->header.backend = ENGINE_BACKEND_CPU;
    p->header.required_features = 0;
    p->meta.kiln_version = KILN_VERSION_STRING;
    p->meta.source_model = "sample.onnx";
    p->meta.backend_name = "cpu";
    p->meta.build_seconds = 0.5;
    p->meta.workspace_limit = 1 << 20;
    p->meta.build_threads = 2;
    p->n_profiles = 1;
    p->profiles = ARENA_ARRAY(&p->arena, engine_profile, 1);
    p->profiles[0].n_inputs = 1;
    engine_profile_input *pi = ARENA_ARRAY(&p->arena, engine_profile_input, 1);
    p->profiles[0].inputs = pi;
    pi->name = "x";
    pi->rank = 2;
    pi->min = ARENA_ARRAY(&p->arena, int64_t, 2);
    pi->opt = ARENA_ARRAY(&p->arena, int64_t, 2);
    pi->max = ARENA_ARRAY(&p->arena, int64_t, 2);
    pi->min[0] = 1, pi->opt[0] = 4, pi->max[0] = 8;
    pi->min[1] = pi->opt[1] = pi->max[1] = 16;
    engine_plan_describe_io(p, NULL);
    p->n_layers = 3;
    p->layers = ARENA_ARRAY(&p->arena, engine_layer, 3);
    const char *tactics[3] = {"gemm_blas", "add_broadcast", "if_subgraph"};
    for (int i = 0; i < 3; i++) {
        engine_layer *l = &p->layers[i];
        l->node = i;
        l->name = g->nodes[i].name;
        l->op_type = g->nodes[i].op_type;
        l->tactic = tactics[i];
        l->precision = ENGINE_PREC_FP32;
        l->scratch_bytes = (uint64_t)i * 100;
        l->time_ms = 0.01 * i;
    }
    p->mem.workspace_limit = 1 << 20;
    p->mem.max_scratch_bytes = 200;
    p->mem.n_profiles = 1;
    p->mem.activation_max = ARENA_ARRAY(&p->arena, uint64_t, 1);
    p->mem.activation_opt = ARENA_ARRAY(&p->arena, uint64_t, 1);
    p->mem.activation_max[0] = 8 * 16 * 4 * 3;
    p->mem.activation_opt[0] = 4 * 16 * 4 * 3;
    return p;
}

#endif
