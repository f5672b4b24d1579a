/* test_validate.c - structural validation and topological sorting (src/ir/validate.c) on
 * IR built in code: each class of wiring problem, stable sorting, cycles, outer scope. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/validate.h"

/* ---- building IR in code -------------------------------------------------------------- */

static ir_model *new_model(int64_t ir_version, int64_t opset) {
    ir_model *m = ir_model_new();
    assert_non_null(m);
    m->ir_version = ir_version;
    m->n_opsets = 1;
    m->opsets = ARENA_ARRAY(&m->arena, ir_opset, 4);
    m->opsets[0].domain = "";
    m->opsets[0].version = opset;
    m->graph = ir_graph_new(m, NULL, "main");
    assert_non_null(m->graph);
    return m;
}

static int32_t *push_id(ir_model *m, int32_t *arr, int32_t n, int32_t id) {
    int32_t *na = ARENA_ARRAY(&m->arena, int32_t, (size_t)n + 1);
    assert_non_null(na);
    if (n) memcpy(na, arr, sizeof(int32_t) * (size_t)n);
    na[n] = id;
    return na;
}

static int32_t add_input(ir_graph *g, const char *name) {
    int32_t id = ir_graph_value(g, name);
    assert_int_not_equal(id, IR_NONE);
    g->values[id].flags |= IR_VALUE_GRAPH_INPUT;
    g->inputs = push_id(g->model, g->inputs, g->n_inputs, id);
    g->n_inputs++;
    return id;
}

static int32_t add_init(ir_graph *g, const char *name) {
    int32_t id = ir_graph_value(g, name);
    assert_int_not_equal(id, IR_NONE);
    g->values[id].flags |= IR_VALUE_INITIALIZER;
    g->initializers = push_id(g->model, g->initializers, g->n_initializers, id);
    g->n_initializers++;
    return id;
}

static void add_output(ir_graph *g, const char *name) {
    int32_t id = ir_graph_value(g, name);
    assert_int_not_equal(id, IR_NONE);
    g->values[id].flags |= IR_VALUE_GRAPH_OUTPUT;
    g->outputs = push_id(g->model, g->outputs, g->n_outputs, id);
    g->n_outputs++;
}

/* ins/outs: NULL-terminated name lists; "" is an omitted optional input. Mimics the
 * importer: value->producer is set to the first producer only. */
static int32_t add_node(ir_graph *g, const char *name, const char *op, const char *const *ins,
                        const char *const *outs) {
    int32_t ni = ir_graph_add_node(g);
    assert_int_not_equal(ni, IR_NONE);
    int32_t nin = 0, nout = 0;
    while (ins && ins[nin]) nin++;
    while (outs && outs[nout]) nout++;
    int32_t *iv = ARENA_ARRAY(&g->model->arena, int32_t, (size_t)nin + 1);
    int32_t *ov = ARENA_ARRAY(&g->model->arena, int32_t, (size_t)nout + 1);
    for (int32_t i = 0; i < nin; i++) iv[i] = ins[i][0] ? ir_graph_value(g, ins[i]) : IR_NONE;
    for (int32_t i = 0; i < nout; i++) {
        ov[i] = ir_graph_value(g, outs[i]);
        if (g->values[ov[i]].producer == IR_NONE) g->values[ov[i]].producer = ni;
    }
    ir_node *n = ir_graph_node(g, ni);
    n->name = arena_strdup(&g->model->arena, name);
    n->op_type = arena_strdup(&g->model->arena, op);
    n->domain = "";
    n->n_inputs = nin;
    n->inputs = iv;
    n->n_outputs = nout;
    n->outputs = ov;
    return ni;
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static int count_code(const diag_list *d, const char *code, diag_severity sev) {
    int c = 0;
    for (int32_t i = 0; i < d->n; i++)
        if (strcmp(d->items[i].code, code) == 0 && d->items[i].severity == sev) c++;
    return c;
}

static const diag *find_code(const diag_list *d, const char *code) {
    for (int32_t i = 0; i < d->n; i++)
        if (strcmp(d->items[i].code, code) == 0) return &d->items[i];
    return NULL;
}

/* The text a person would see for a diagnostic (freed by the caller). */
static char *render(const diag *d) {
    strbuf sb;
    sb_init(&sb);
    diag_render_text(d, &sb);
    return sb_take(&sb);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_valid_chain_has_no_problems(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_init(g, "w");
    add_node(g, "mm", "MatMul", L("x", "w"), L("y"));
    add_node(g, "relu", "Relu", L("y"), L("z"));
    add_output(g, "z");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_OK);
    assert_int_equal(d.n, 0);
    assert_string_equal(kiln_err_msg(&err), "");
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_duplicate_producer_names_both_nodes(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_node(g, "first", "Relu", L("x"), L("y"));
    add_node(g, "second", "Sigmoid", L("x"), L("y"));
    add_output(g, "y");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    assert_int_equal(count_code(&d, "structure-duplicate-producer", DIAG_ERROR), 1);
    const diag *x = find_code(&d, "structure-duplicate-producer");
    assert_string_equal(x->node, "second");
    assert_non_null(strstr(x->message, "'first' (Relu)"));
    assert_non_null(strstr(x->message, "'y'"));
    /* err holds the rendered first error */
    assert_non_null(strstr(kiln_err_msg(&err), "error[structure-duplicate-producer]: node 'second' (Sigmoid)"));
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_node_output_that_is_graph_input_or_initializer(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_init(g, "w");
    add_node(g, "writes_input", "Constant", NULL, L("x"));
    add_node(g, "writes_init", "Constant", NULL, L("w"));
    add_output(g, "x");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    assert_int_equal(count_code(&d, "structure-duplicate-producer", DIAG_ERROR), 2);
    bool saw_input = false, saw_init = false;
    for (int32_t i = 0; i < d.n; i++) {
        if (strcmp(d.items[i].node, "writes_input") == 0 && strstr(d.items[i].message, "graph input")) saw_input = true;
        if (strcmp(d.items[i].node, "writes_init") == 0 && strstr(d.items[i].message, "initializer")) saw_init = true;
    }
    assert_true(saw_input);
    assert_true(saw_init);
    /* two errors: the message announces the second */
    assert_non_null(strstr(kiln_err_msg(&err), "(and 1 more problem; run `kiln check MODEL` to see all)"));
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_initializer_also_input_is_a_warning(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_input(g, "w");
    add_init(g, "w");
    add_node(g, "mm", "MatMul", L("x", "w"), L("y"));
    add_output(g, "y");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_OK);
    assert_int_equal(d.n_errors, 0);
    assert_int_equal(count_code(&d, "structure-initializer-is-input", DIAG_WARNING), 1);
    assert_non_null(strstr(find_code(&d, "structure-initializer-is-input")->message, "'w'"));
    diag_list_free(&d);
    ir_model_free(m);

    /* IR 3 requires initializers to be inputs: nothing to say there */
    m = new_model(3, 8);
    g = m->graph;
    add_input(g, "w");
    add_init(g, "w");
    add_node(g, "r", "Relu", L("w"), L("y"));
    add_output(g, "y");
    diag_list_init(&d);
    assert_int_equal(ir_validate(m, &d, NULL), KILN_OK);
    assert_int_equal(d.n, 0);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_missing_producer_suggests_closest_name(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "input_ids");
    add_init(g, "embedding.weight");
    add_node(g, "/embedding/Gather", "Gather", L("embedding.weight", "input_idz"), L("h"));
    add_node(g, "other", "Relu", L("input_idz"), L("h2"));
    add_output(g, "h");
    add_output(g, "h2");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    /* one report per missing name, not per consumer */
    assert_int_equal(count_code(&d, "structure-missing-producer", DIAG_ERROR), 1);
    const diag *x = find_code(&d, "structure-missing-producer");
    assert_string_equal(x->node, "/embedding/Gather");
    assert_non_null(strstr(x->message, "input 1 'input_idz'"));
    assert_non_null(x->hint);
    assert_non_null(strstr(x->hint, "did you mean 'input_ids'?"));
    assert_int_equal(x->n_facts, 1);
    assert_non_null(strstr(x->facts[0], "1 other node input also uses 'input_idz'"));
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_output_not_produced(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_node(g, "r", "Relu", L("x"), L("logits"));
    add_output(g, "logit");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    const diag *x = find_code(&d, "structure-output-not-produced");
    assert_non_null(x);
    assert_null(x->node);
    assert_non_null(strstr(x->message, "'logit'"));
    assert_non_null(strstr(x->hint, "did you mean 'logits'?"));
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_cycle_names_nodes_in_order(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_node(g, "pre", "Relu", L("x"), L("p"));
    add_node(g, "B", "Add", L("a", "p"), L("b"));
    add_node(g, "C", "Relu", L("b"), L("c"));
    add_node(g, "A", "Relu", L("c"), L("a"));
    add_node(g, "after", "Relu", L("a"), L("y"));
    add_output(g, "y");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    const diag *x = find_code(&d, "structure-cycle");
    assert_non_null(x);
    /* in data-flow order, starting from the cycle's first node in the file */
    assert_non_null(strstr(x->message, "'B' (Add) -> 'C' (Relu) -> 'A' (Relu) -> 'B' (Add)"));
    assert_non_null(strstr(kiln_err_msg(&err), "structure-cycle"));
    /* a cyclic graph is left as it was */
    assert_string_equal(g->nodes[1].name, "B");
    kiln_err_clear(&err);

    /* the public single-graph sort says the same */
    assert_int_equal(ir_graph_toposort(g, &err), KILN_ERR_INVALID_MODEL);
    assert_non_null(strstr(kiln_err_msg(&err), "'B' (Add) -> 'C' (Relu) -> 'A' (Relu) -> 'B' (Add)"));
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_self_loop_is_a_cycle(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_node(g, "loop", "Relu", L("v"), L("v"));
    add_output(g, "v");
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, NULL, &err), KILN_ERR_INVALID_MODEL);
    assert_non_null(strstr(kiln_err_msg(&err), "'loop' (Relu) -> 'loop' (Relu)"));
    kiln_err_clear(&err);
    ir_model_free(m);
}

static void test_sort_is_stable_for_independent_nodes(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    /* file order: consumer first, then three independent producers; ties keep file order */
    add_node(g, "sum", "Sum", L("p2", "p0"), L("s"));
    add_node(g, "indep_a", "Relu", L("x"), L("a"));
    add_node(g, "p0", "Relu", L("x"), L("p0"));
    add_node(g, "indep_b", "Relu", L("x"), L("b"));
    add_node(g, "p2", "Relu", L("x"), L("p2"));
    add_output(g, "s");
    add_output(g, "a");
    add_output(g, "b");
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, NULL, &err), KILN_OK);
    const char *expect[] = {"indep_a", "p0", "indep_b", "p2", "sum"};
    const int32_t src[] = {1, 2, 3, 4, 0};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(g->nodes[i].name, expect[i]);
        assert_int_equal(g->nodes[i].source_index, src[i]);
    }
    /* producers follow the nodes */
    for (int32_t v = 0; v < g->n_values; v++) {
        int32_t p = g->values[v].producer;
        if (p == IR_NONE) continue;
        bool found = false;
        for (int32_t k = 0; k < g->nodes[p].n_outputs; k++) found |= g->nodes[p].outputs[k] == v;
        assert_true(found);
    }
    assert_int_equal(g->values[ir_graph_find(g, "s")].producer, 4);

    /* an already sorted graph is untouched */
    ir_node *before = g->nodes;
    assert_int_equal(ir_graph_toposort(g, &err), KILN_OK);
    assert_ptr_equal(g->nodes, before);
    ir_model_free(m);
}

static void test_long_reversed_chain_sorts(void **state) {
    (void)state;
    enum { N = 10000 };
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "t0");
    /* node i computes t(i+1) from t(i); written to the file last-first */
    for (int i = N - 1; i >= 0; i--) {
        char in[32], out[32], name[32];
        snprintf(in, sizeof in, "t%d", i);
        snprintf(out, sizeof out, "t%d", i + 1);
        snprintf(name, sizeof name, "n%d", i);
        add_node(g, name, "Relu", (const char *const[]){in, NULL}, (const char *const[]){out, NULL});
    }
    char last[32];
    snprintf(last, sizeof last, "t%d", N);
    add_output(g, last);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, NULL, &err), KILN_OK);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "n%d", i);
        assert_string_equal(g->nodes[i].name, name);
        assert_int_equal(g->nodes[i].source_index, N - 1 - i);
    }
    assert_int_equal(g->values[ir_graph_find(g, last)].producer, N - 1);
    ir_model_free(m);
}

/* main: x -> Relu 'make_c' -> c;  If 'branch' (cond) with then/else subgraphs that read c
 * from the outer scope. The If comes first in the file, so only the implicit dependency
 * through the subgraph orders it after 'make_c'. */
static void test_subgraph_outer_scope(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_input(g, "cond");
    int32_t ifn = add_node(g, "branch", "If", L("cond"), L("y"));
    add_node(g, "make_c", "Relu", L("x"), L("c"));
    add_output(g, "y");

    ir_graph *then_g = ir_graph_new(m, g, "then");
    then_g->location = "node 'branch' (If) attribute 'then_branch'";
    add_node(then_g, "then_relu", "Relu", L("c"), L("t_out"));
    add_output(then_g, "t_out");
    ir_graph *else_g = ir_graph_new(m, g, "else");
    else_g->location = "node 'branch' (If) attribute 'else_branch'";
    /* a nested subgraph reading x from two levels up, and a typo */
    add_node(else_g, "else_neg", "Neg", L("c"), L("e_out"));
    add_node(else_g, "else_bad", "Neg", L("cc_typo"), L("e_bad"));
    add_output(else_g, "e_out");

    ir_node *n = ir_graph_node(g, ifn);
    n->n_attrs = 2;
    n->attrs = ARENA_ARRAY(&m->arena, ir_attr, 2);
    n->attrs[0].name = "then_branch";
    n->attrs[0].type = IR_ATTR_GRAPH;
    n->attrs[0].g = then_g;
    n->attrs[1].name = "else_branch";
    n->attrs[1].type = IR_ATTR_GRAPH;
    n->attrs[1].g = else_g;

    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    /* the only error is the typo, reported with its subgraph location */
    assert_int_equal(d.n_errors, 1);
    const diag *x = find_code(&d, "structure-missing-producer");
    assert_non_null(x);
    assert_string_equal(x->node, "else_bad");
    assert_string_equal(x->graph, "node 'branch' (If) attribute 'else_branch'");
    assert_non_null(strstr(x->message, "nor visible from an enclosing graph"));
    char *text = render(x);
    assert_non_null(strstr(text, "  in node 'branch' (If) attribute 'else_branch'\n"));
    free(text);

    assert_true(then_g->values[ir_graph_find(then_g, "c")].flags & IR_VALUE_OUTER_SCOPE);
    assert_true(else_g->values[ir_graph_find(else_g, "c")].flags & IR_VALUE_OUTER_SCOPE);
    assert_false(else_g->values[ir_graph_find(else_g, "cc_typo")].flags & IR_VALUE_OUTER_SCOPE);
    /* the If now runs after the node producing what its branches read */
    assert_string_equal(g->nodes[0].name, "make_c");
    assert_string_equal(g->nodes[1].name, "branch");
    assert_int_equal(g->values[ir_graph_find(g, "y")].producer, 1);
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_nested_subgraph_reads_grandparent(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "cond");
    int32_t outer = add_node(g, "outer_if", "If", L("cond"), L("y"));
    add_node(g, "make_w", "Relu", L("cond"), L("w"));
    add_output(g, "y");
    ir_graph *mid = ir_graph_new(m, g, "mid");
    int32_t inner = add_node(mid, "inner_if", "If", L("cond"), L("m_out"));
    add_output(mid, "m_out");
    ir_graph *leaf = ir_graph_new(m, mid, "leaf");
    add_node(leaf, "use_w", "Relu", L("w"), L("l_out"));
    add_output(leaf, "l_out");
    ir_node *n = ir_graph_node(mid, inner);
    n->n_attrs = 1;
    n->attrs = ARENA_ARRAY(&m->arena, ir_attr, 1);
    n->attrs[0] = (ir_attr){.name = "then_branch", .type = IR_ATTR_GRAPH, .g = leaf};
    n = ir_graph_node(g, outer);
    n->n_attrs = 1;
    n->attrs = ARENA_ARRAY(&m->arena, ir_attr, 1);
    n->attrs[0] = (ir_attr){.name = "then_branch", .type = IR_ATTR_GRAPH, .g = mid};
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, NULL, &err), KILN_OK);
    assert_true(leaf->values[ir_graph_find(leaf, "w")].flags & IR_VALUE_OUTER_SCOPE);
    assert_true(mid->values[ir_graph_find(mid, "cond")].flags & IR_VALUE_OUTER_SCOPE);
    assert_string_equal(g->nodes[0].name, "make_w");
    assert_string_equal(g->nodes[1].name, "outer_if");
    ir_model_free(m);
}

static void test_versions_and_opset_imports(void **state) {
    (void)state;
    ir_model *m = new_model(2, 99);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_node(g, "r", "Relu", L("x"), L("y"));
    ir_node *custom = ir_graph_node(g, add_node(g, "c", "MyOp", L("y"), L("z")));
    custom->domain = "com.example";
    add_output(g, "z");
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    const diag *x = find_code(&d, "structure-ir-version");
    assert_non_null(x);
    assert_non_null(strstr(x->message, "IR version 2"));
    assert_non_null(strstr(x->message, "3 to 14"));
    x = find_code(&d, "structure-opset-version");
    assert_non_null(x);
    assert_non_null(strstr(x->message, "opset 99"));
    assert_non_null(strstr(x->hint, "version_converter"));
    /* a custom domain without an import is a warning */
    assert_int_equal(count_code(&d, "structure-missing-opset-import", DIAG_WARNING), 1);
    assert_non_null(strstr(find_code(&d, "structure-missing-opset-import")->message, "'com.example'"));
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);

    /* ai.onnx ops without an ai.onnx import: an error, once per graph */
    m = new_model(8, 17);
    m->opsets[0].domain = "ai.onnx.ml";
    g = m->graph;
    add_input(g, "x");
    add_node(g, "r1", "Relu", L("x"), L("y"));
    add_node(g, "r2", "Relu", L("y"), L("z"));
    add_output(g, "z");
    diag_list_init(&d);
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    assert_int_equal(count_code(&d, "structure-missing-opset-import", DIAG_ERROR), 1);
    x = find_code(&d, "structure-missing-opset-import");
    assert_string_equal(x->node, "r1");
    assert_non_null(strstr(x->message, "'ai.onnx' is used by 2 nodes"));
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_function_body_is_validated(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    ir_node *call = ir_graph_node(g, add_node(g, "call", "MyFn", L("x"), L("y")));
    call->domain = "local";
    m->opsets[1] = (ir_opset){.domain = "local", .version = 1};
    m->n_opsets = 2;
    add_output(g, "y");
    ir_graph *body = ir_graph_new(m, NULL, "MyFn");
    add_input(body, "a");
    add_node(body, "f_relu", "Relu", L("b"), L("out"));
    add_output(body, "out");
    m->functions = ARENA_ARRAY(&m->arena, ir_function, 1);
    m->n_functions = 1;
    m->functions[0] = (ir_function){.name = "MyFn", .domain = "local", .body = body};
    diag_list d;
    diag_list_init(&d);
    kiln_error err = {0};
    assert_int_equal(ir_validate(m, &d, &err), KILN_ERR_INVALID_MODEL);
    const diag *x = find_code(&d, "structure-missing-producer");
    assert_non_null(x);
    assert_string_equal(x->node, "f_relu");
    assert_string_equal(x->graph, "function 'local.MyFn'");
    /* a function's formal input is not an outer-scope value of the main graph */
    assert_false(body->values[ir_graph_find(body, "b")].flags & IR_VALUE_OUTER_SCOPE);
    kiln_err_clear(&err);
    diag_list_free(&d);
    ir_model_free(m);
}

static void test_omitted_optional_inputs_are_fine(void **state) {
    (void)state;
    ir_model *m = new_model(8, 17);
    ir_graph *g = m->graph;
    add_input(g, "x");
    add_node(g, "clip", "Clip", L("x", "", ""), L("y"));
    add_output(g, "y");
    assert_int_equal(ir_validate(m, NULL, NULL), KILN_OK);
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_chain_has_no_problems),
        cmocka_unit_test(test_duplicate_producer_names_both_nodes),
        cmocka_unit_test(test_node_output_that_is_graph_input_or_initializer),
        cmocka_unit_test(test_initializer_also_input_is_a_warning),
        cmocka_unit_test(test_missing_producer_suggests_closest_name),
        cmocka_unit_test(test_output_not_produced),
        cmocka_unit_test(test_cycle_names_nodes_in_order),
        cmocka_unit_test(test_self_loop_is_a_cycle),
        cmocka_unit_test(test_sort_is_stable_for_independent_nodes),
        cmocka_unit_test(test_long_reversed_chain_sorts),
        cmocka_unit_test(test_subgraph_outer_scope),
        cmocka_unit_test(test_nested_subgraph_reads_grandparent),
        cmocka_unit_test(test_versions_and_opset_imports),
        cmocka_unit_test(test_function_body_is_validated),
        cmocka_unit_test(test_omitted_optional_inputs_are_fine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
