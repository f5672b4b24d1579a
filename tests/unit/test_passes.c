/* test_passes.c - graph passes (constant folding with its budget, Identity/Dropout
 * removal, Conv+BatchNormalization folding, activation fusion marks) and the memory
 * planner, on hand-built graphs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/memplan.h"
#include "build/passes/passes.h"
#include "runtime/session.h"

#include "graph_builder.h"


__attribute__((unused)) static void float_tensor(rt_value *v, int rank, const int64_t *dims, const float *data) {
    rt_value_init(v);
    kiln_error e = {0};
    rt_tensor *t = rt_value_as_tensor(v);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &e), KILN_OK);
    if (t->count) memcpy(t->data, data, t->count * sizeof(float));
}

__attribute__((unused)) static rt_session *open_session(ir_model *m, const rt_session_options *o) {
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    return s;
}




static ir_node *node_at(ir_graph *g, int i) { return &g->nodes[i]; }

static void test_fold_constants_and_budget(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, NULL, 0, S("y"), 1);
    ir_node *n = add_node(g, "Constant", "c", NULL, 0, S("c_out"), 1);
    ir_attr *a = add_attrs(g, n, 1);
    static float vals[100];
    for (int i = 0; i < 100; i++) vals[i] = (float)i;
    a->name = "value_floats";
    a->type = IR_ATTR_FLOATS;
    a->n = 100;
    a->floats = vals;
    add_node(g, "Identity", "id", S("c_out"), 1, S("y"), 1);
    /* budget below 400 bytes: the Constant must not be folded, and nothing allocated */
    build_pass_options o = build_pass_options_default();
    o.fold_max_bytes = 64;
    build_pass_stats st;
    kiln_error e = {0};
    assert_int_equal(build_run_passes_stats(m, &o, &st, &e), KILN_OK);
    assert_int_equal(st.folded, 0);
    assert_int_equal(st.fold_refused, 1);
    assert_int_equal(g->n_nodes, 2);
    /* with the default budget both fold: the graph output becomes an initializer */
    assert_int_equal(build_run_passes_stats(m, NULL, &st, &e), KILN_OK);
    assert_int_equal(st.folded, 2);
    assert_int_equal(g->n_nodes, 0);
    const ir_value *y = &g->values[ir_graph_find(g, "y")];
    assert_non_null(y->init);
    assert_int_equal(y->init->count, 100);
    assert_true(((const float *)y->init->data)[99] == 99.0f);
    /* and the folded model still runs */
    rt_session *s = NULL;
    assert_int_equal(rt_session_create(m, NULL, &s, &e), KILN_OK);
    rt_value out;
    assert_int_equal(rt_session_run(s, NULL, NULL, 0, &out, &e), KILN_OK);
    assert_int_equal(out.t.count, 100);
    assert_true(((float *)out.t.data)[42] == 42.0f);
    rt_value_release(&out);
    rt_session_free(s);
    ir_model_free(m);
}

static void test_remove_identity_and_dropout(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y", "mask"), 2);
    add_node(g, "Identity", "id1", S("x"), 1, S("t1"), 1);
    add_node(g, "Dropout", "drop", S("t1"), 1, S("t2"), 1);           /* inference: removable */
    add_node(g, "Dropout", "drop_mask", S("t2"), 1, S("t3", "mask"), 2); /* mask used: kept */
    add_node(g, "Identity", "id_out", S("t3"), 1, S("y"), 1);          /* writes a graph output: kept */
    build_pass_options o = build_pass_options_default();
    o.fold = false;
    build_pass_stats st;
    kiln_error e = {0};
    assert_int_equal(build_run_passes_stats(m, &o, &st, &e), KILN_OK);
    assert_int_equal(st.identity_removed, 2);
    assert_int_equal(g->n_nodes, 2);
    assert_string_equal(node_at(g, 0)->name, "drop_mask");
    assert_int_equal(node_at(g, 0)->inputs[0], ir_graph_find(g, "x")); /* rewired past both */
    assert_string_equal(node_at(g, 1)->name, "id_out");
    assert_int_equal(g->values[ir_graph_find(g, "y")].producer, 1);
    ir_model_free(m);
}

static void test_fold_batchnorm_into_conv(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    float w[2 * 1 * 1 * 1] = {2, 3}, b[2] = {1, -1};
    float scale[2] = {1, 2}, beta[2] = {0.5f, 0}, mean[2] = {1, 2}, var[2] = {3, 0};
    gb_initializer(g, "W", KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 1, 1, 1}, w, sizeof w);
    gb_initializer(g, "B", KILN_DTYPE_FLOAT, 1, (int64_t[]){2}, b, sizeof b);
    gb_initializer(g, "s", KILN_DTYPE_FLOAT, 1, (int64_t[]){2}, scale, sizeof scale);
    gb_initializer(g, "be", KILN_DTYPE_FLOAT, 1, (int64_t[]){2}, beta, sizeof beta);
    gb_initializer(g, "mu", KILN_DTYPE_FLOAT, 1, (int64_t[]){2}, mean, sizeof mean);
    gb_initializer(g, "var", KILN_DTYPE_FLOAT, 1, (int64_t[]){2}, var, sizeof var);
    add_node(g, "Conv", "conv", S("x", "W", "B"), 3, S("c"), 1);
    ir_node *bn = add_node(g, "BatchNormalization", "bn", S("c", "s", "be", "mu", "var"), 5, S("y"), 1);
    ir_attr *a = add_attrs(g, bn, 1);
    a->name = "epsilon";
    a->type = IR_ATTR_FLOAT;
    a->f = 1.0f;
    build_pass_options o = build_pass_options_default();
    o.fold = false;
    o.fuse_activation = false;
    build_pass_stats st;
    kiln_error e = {0};
    assert_int_equal(build_run_passes_stats(m, &o, &st, &e), KILN_OK);
    assert_int_equal(st.batchnorm_folded, 1);
    assert_int_equal(g->n_nodes, 1);
    ir_node *c = node_at(g, 0);
    assert_string_equal(c->op_type, "Conv");
    assert_int_equal(c->outputs[0], ir_graph_find(g, "y"));
    const float *nw = g->values[c->inputs[1]].init->data, *nb = g->values[c->inputs[2]].init->data;
    /* s = scale / sqrt(var + eps) = {1/2, 2/1}; W' = W*s; B' = (B - mean)*s + beta */
    assert_true(fabsf(nw[0] - 1.0f) < 1e-6f && fabsf(nw[1] - 6.0f) < 1e-6f);
    assert_true(fabsf(nb[0] - 0.5f) < 1e-6f && fabsf(nb[1] - (-6.0f)) < 1e-6f);
    ir_model_free(m);
}

static void test_fuse_activation_marks(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y", "z"), 2);
    float w[1] = {1};
    gb_initializer(g, "W", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 1, 1, 1}, w, sizeof w);
    add_node(g, "Conv", "conv1", S("x", "W"), 2, S("c1"), 1);
    ir_node *lr = add_node(g, "LeakyRelu", "act1", S("c1"), 1, S("y"), 1);
    ir_attr *a = add_attrs(g, lr, 1);
    a->name = "alpha";
    a->type = IR_ATTR_FLOAT;
    a->f = 0.3f;
    /* c2 has two readers: not fused */
    add_node(g, "Conv", "conv2", S("x", "W"), 2, S("c2"), 1);
    add_node(g, "Relu", "act2", S("c2"), 1, S("r2"), 1);
    add_node(g, "Sum", "sum", S("c2", "r2"), 2, S("z"), 1);
    build_pass_options o = build_pass_options_default();
    o.fold = false;
    build_pass_stats st;
    kiln_error e = {0};
    assert_int_equal(build_run_passes_stats(m, &o, &st, &e), KILN_OK);
    assert_int_equal(st.activation_fused, 1);
    assert_int_equal(g->n_nodes, 4);
    ir_node *c1 = node_at(g, 0);
    const ir_attr *act = ir_node_attr(c1, "kiln_activation");
    assert_non_null(act);
    assert_int_equal((int)act->s.len, 9);
    assert_memory_equal(act->s.data, "LeakyRelu", 9);
    assert_true(ir_node_attr_float(c1, "kiln_activation_alpha", 0) == 0.3f);
    assert_int_equal(c1->outputs[0], ir_graph_find(g, "y"));
    assert_null(ir_node_attr(node_at(g, 1), "kiln_activation"));
    ir_model_free(m);
}

static void test_memplan(void **state) {
    (void)state;
    /* a chain a -> b -> c -> d: only neighbours overlap, so two slots suffice */
    uint64_t sizes[4] = {100, 200, 100, 200};
    int32_t first[4] = {0, 1, 2, 3}, last[4] = {1, 2, 3, 3};
    build_memplan p;
    kiln_error e = {0};
    assert_int_equal(build_memplan_compute(4, sizes, first, last, &p, &e), KILN_OK);
    assert_int_equal(p.n_tensors, 4);
    assert_int_equal(p.total_bytes, 128 + 256 + 128 + 256);
    assert_int_equal(p.lower_bound, 128 + 256);
    assert_int_equal(p.arena_bytes, 128 + 256);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            if (i == j || first[i] > last[j] || first[j] > last[i]) continue;
            uint64_t ai = p.offsets[i], aj = p.offsets[j];
            uint64_t si = (sizes[i] + 63) / 64 * 64, sj = (sizes[j] + 63) / 64 * 64;
            assert_true(ai + si <= aj || aj + sj <= ai); /* live together: disjoint */
        }
    build_memplan_free(&p);
    /* random lifetimes: never overlapping, never below the lower bound */
    enum { N = 200 };
    uint64_t rs[N];
    int32_t rf[N], rl[N];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        rs[i] = 1 + (seed >> 8) % 5000;
        rf[i] = (int32_t)((seed >> 4) % 50);
        rl[i] = rf[i] + (int32_t)((seed >> 12) % 10);
    }
    assert_int_equal(build_memplan_compute(N, rs, rf, rl, &p, &e), KILN_OK);
    assert_true(p.arena_bytes >= p.lower_bound);
    assert_true(p.arena_bytes <= p.total_bytes);
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) {
            if (rf[i] > rl[j] || rf[j] > rl[i]) continue;
            uint64_t si = (rs[i] + 63) / 64 * 64, sj = (rs[j] + 63) / 64 * 64;
            assert_true(p.offsets[i] + si <= p.offsets[j] || p.offsets[j] + sj <= p.offsets[i]);
        }
    build_memplan_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_constants_and_budget), cmocka_unit_test(test_remove_identity_and_dropout),
        cmocka_unit_test(test_fold_batchnorm_into_conv),  cmocka_unit_test(test_fuse_activation_marks),
        cmocka_unit_test(test_memplan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
