/* graph_builder.h - a tiny IR graph builder shared by the runtime unit tests
 * (test_executor.c, test_passes.c, the pass tests): a model with opset 17, nodes wired by
 * value name, attributes, initializers, graph inputs/outputs and declared types, without
 * going through a file. */
#ifndef KILN_TESTS_UNIT_GRAPH_BUILDER_H
#define KILN_TESTS_UNIT_GRAPH_BUILDER_H

#include <string.h>

#include "ir/graph.h"


static inline ir_model *new_model(void) {
    ir_model *m = ir_model_new();
    m->opsets = ARENA_ARRAY(&m->arena, ir_opset, 1);
    m->opsets[0].domain = "";
    m->opsets[0].version = 17;
    m->n_opsets = 1;
    m->graph = ir_graph_new(m, NULL, "main");
    return m;
}

static inline int32_t *id_list(ir_graph *g, const char *const *names, int n) {
    int32_t *ids = ARENA_ARRAY(&g->model->arena, int32_t, n > 0 ? n : 1);
    for (int i = 0; i < n; i++) ids[i] = names[i][0] ? ir_graph_value(g, names[i]) : IR_NONE;
    return ids;
}

static inline ir_node *add_node(ir_graph *g, const char *op, const char *name, const char *const *ins, int n_in,
                         const char *const *outs, int n_out) {
    int32_t id = ir_graph_add_node(g);
    ir_node *n = ir_graph_node(g, id);
    n->op_type = op;
    n->name = name;
    n->domain = "";
    n->opset = 17;
    n->inputs = id_list(g, ins, n_in);
    n->n_inputs = n_in;
    n->outputs = id_list(g, outs, n_out);
    n->n_outputs = n_out;
    for (int i = 0; i < n_out; i++)
        if (n->outputs[i] >= 0) g->values[n->outputs[i]].producer = id;
    return n;
}

static inline ir_attr *add_attrs(ir_graph *g, ir_node *n, int count) {
    n->attrs = ARENA_ARRAY(&g->model->arena, ir_attr, count);
    n->n_attrs = count;
    return n->attrs;
}

static inline void set_io(ir_graph *g, const char *const *ins, int n_in, const char *const *outs, int n_out) {
    g->inputs = id_list(g, ins, n_in);
    g->n_inputs = n_in;
    for (int i = 0; i < n_in; i++) g->values[g->inputs[i]].flags |= IR_VALUE_GRAPH_INPUT;
    g->outputs = id_list(g, outs, n_out);
    g->n_outputs = n_out;
}

static inline void set_type(ir_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                     const char *const *syms) {
    ir_value *v = &g->values[ir_graph_value(g, name)];
    v->type.kind = IR_TYPE_TENSOR;
    v->type.dtype = dt;
    v->type.rank = rank;
    v->type.dims = ARENA_ARRAY(&g->model->arena, ir_dim, rank > 0 ? rank : 1);
    for (int i = 0; i < rank; i++) {
        if (syms && syms[i]) {
            v->type.dims[i].kind = IR_DIM_SYM;
            v->type.dims[i].sym = ir_sym_leaf(g->model, syms[i]);
        } else {
            v->type.dims[i].kind = IR_DIM_CONST;
            v->type.dims[i].value = dims[i];
        }
    }
}

#ifndef S
#define S(...) ((const char *const[]){__VA_ARGS__})
#endif

/* An initializer named `name` holding a copy of nbytes of data; the value's declared type
 * is left as it is (tests of passes that must not rely on it). */
static inline ir_tensor *gb_initializer(ir_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                                        const void *data, size_t nbytes) {
    int32_t v = ir_graph_value(g, name);
    ir_tensor *t = ARENA_NEW(&g->model->arena, ir_tensor);
    t->name = g->values[v].name;
    t->dtype = dt;
    t->rank = rank;
    t->dims = ARENA_ARRAY(&g->model->arena, int64_t, rank > 0 ? rank : 1);
    t->count = 1;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i], t->count *= (uint64_t)dims[i];
    t->nbytes = nbytes;
    t->data = arena_memdup(&g->model->arena, data, nbytes);
    t->where = IR_DATA_OWNED;
    g->values[v].init = t;
    g->values[v].flags |= IR_VALUE_INITIALIZER;
    int32_t *ni = ARENA_ARRAY(&g->model->arena, int32_t, g->n_initializers + 1);
    if (g->n_initializers) memcpy(ni, g->initializers, (size_t)g->n_initializers * sizeof *ni);
    ni[g->n_initializers++] = v;
    g->initializers = ni;
    return t;
}

/* The same with count x elem_size bytes, and the value typed as a tensor of dt. */
static inline ir_tensor *gb_typed_initializer(ir_graph *g, const char *name, kiln_dtype dt, int rank,
                                              const int64_t *dims, const void *data, size_t elem_size) {
    uint64_t count = 1;
    for (int i = 0; i < rank; i++) count *= (uint64_t)dims[i];
    ir_tensor *t = gb_initializer(g, name, dt, rank, dims, data, (size_t)count * elem_size);
    ir_value *v = &g->values[ir_graph_value(g, name)];
    v->type.kind = IR_TYPE_TENSOR;
    v->type.dtype = dt;
    return t;
}

/* Gives n one INTS / INT attribute (replacing its attributes). */
static inline void gb_attr_ints(ir_graph *g, ir_node *n, const char *name, const int64_t *v, int count) {
    ir_attr *a = add_attrs(g, n, 1);
    a->name = name;
    a->type = IR_ATTR_INTS;
    a->n = count;
    a->ints = ARENA_ARRAY(&g->model->arena, int64_t, count);
    memcpy(a->ints, v, (size_t)count * sizeof *v);
}

static inline void gb_attr_int(ir_graph *g, ir_node *n, const char *name, int64_t v) {
    ir_attr *a = add_attrs(g, n, 1);
    a->name = name;
    a->type = IR_ATTR_INT;
    a->i = v;
}

#endif
