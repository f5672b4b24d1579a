/* test_fold_scale.c - the fold_scale pass: attention's Div by a power of two after
 * MatMul(Q, K) goes into Q's projection weights and bias, with bit-identical results
 * (session runs with and without the pass, through the default passes' kiln_bias mark
 * and through an explicit Add); near misses are left alone: a scale that is not a power
 * of two, a scores value that is a graph output, a projection without constant weights. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/passes.h"
#include "runtime/session.h"

#include "graph_builder.h"

static void add_const(ir_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims, const void *vals,
                      uint64_t count) {
    gb_initializer(g, name, dt, rank, dims, vals, (size_t)(count * (uint64_t)kiln_dtype_bits(dt) / 8));
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f - 0.5f) * 3.0f;
}

enum { DIV8, DIV3, MUL_QUARTER, PINNED, NO_CONST_W };

/* h[4,16] -> q = MatMul(h, Wq) (+ bq) -> Reshape [4,2,4] -> Transpose [2,4,4];
 * scores = MatMul(Q, k) with k[2,4,4] an input; y = Softmax(scale(scores)). */
static ir_model *attn_model(int variant) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    bool pinned = variant == PINNED;
    bool wconst = variant != NO_CONST_W;
    if (pinned)
        set_io(g, S("h", "k", "Wq"), wconst ? 2 : 3, S("y", "scores"), 2);
    else if (wconst)
        set_io(g, S("h", "k"), 2, S("y"), 1);
    else
        set_io(g, S("h", "k", "Wq"), 3, S("y"), 1);
    set_type(g, "h", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 16}, NULL);
    set_type(g, "k", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 4, 4}, NULL);
    if (!wconst) set_type(g, "Wq", KILN_DTYPE_FLOAT, 2, (int64_t[]){16, 8}, NULL);
    uint32_t seed = 7;
    float w[128], b[8];
    for (int i = 0; i < 128; i++) w[i] = frand(&seed);
    for (int i = 0; i < 8; i++) b[i] = frand(&seed);
    if (wconst) add_const(g, "Wq", KILN_DTYPE_FLOAT, 2, (int64_t[]){16, 8}, w, 128);
    add_const(g, "bq", KILN_DTYPE_FLOAT, 1, (int64_t[]){8}, b, 8);
    add_const(g, "shp", KILN_DTYPE_INT64, 1, (int64_t[]){3}, (int64_t[]){4, 2, 4}, 3);
    float c = variant == DIV3 ? 3.f : variant == MUL_QUARTER ? 0.25f : 8.f;
    add_const(g, "c", KILN_DTYPE_FLOAT, 0, NULL, &c, 1);
    add_node(g, "MatMul", "proj", S("h", "Wq"), 2, S("q0"), 1);
    add_node(g, "Add", "bias", S("q0", "bq"), 2, S("q"), 1);
    add_node(g, "Reshape", "split", S("q", "shp"), 2, S("q4"), 1);
    ir_node *t = add_node(g, "Transpose", "heads", S("q4"), 1, S("Q"), 1);
    gb_attr_ints(g, t, "perm", (int64_t[]){1, 0, 2}, 3);
    add_node(g, "MatMul", "scores", S("Q", "k"), 2, S("scores"), 1);
    if (variant == MUL_QUARTER)
        add_node(g, "Mul", "scale", S("c", "scores"), 2, S("scaled"), 1);
    else
        add_node(g, "Div", "scale", S("scores", "c"), 2, S("scaled"), 1);
    add_node(g, "Softmax", "sm", S("scaled"), 1, S("y"), 1);
    return m;
}

static int count_op(const ir_graph *g, const char *op) {
    int c = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) c += !strcmp(g->nodes[i].op_type, op);
    return c;
}

/* Runs the variant through a session (default passes, then fold_scale unless disabled)
 * and returns y (16*2 floats) in out; *n_scale = Div+Mul nodes left. */
static void run_variant(int variant, bool fold, float *out, int *n_scale) {
    if (fold)
        unsetenv("KILN_NO_FOLD_SCALE");
    else
        setenv("KILN_NO_FOLD_SCALE", "1", 1);
    ir_model *m = attn_model(variant);
    rt_session_options o = rt_session_options_default();
    o.threads = 1;
    o.run_passes = true;
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    *n_scale = count_op(m->graph, "Div") + count_op(m->graph, "Mul");
    uint32_t seed = 99;
    rt_value h, k, wq, outs[2];
    rt_value_init(&h), rt_value_init(&k), rt_value_init(&wq);
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&h), KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 16}, &e), KILN_OK);
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&k), KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 4, 4}, &e), KILN_OK);
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&wq), KILN_DTYPE_FLOAT, 2, (int64_t[]){16, 8}, &e), KILN_OK);
    for (int i = 0; i < 64; i++) ((float *)h.t.data)[i] = frand(&seed) * 1e3f;
    for (int i = 0; i < 32; i++) ((float *)k.t.data)[i] = frand(&seed);
    uint32_t ws = 7;
    for (int i = 0; i < 128; i++) ((float *)wq.t.data)[i] = frand(&ws);
    const rt_value *ins[] = {&h, &k, &wq};
    int n_in = variant == NO_CONST_W ? 3 : 2;
    int n_out = variant == PINNED ? 2 : 1;
    st = rt_session_run(s, S("h", "k", "Wq"), ins, n_in, outs, &e);
    if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    memcpy(out, outs[0].t.data, 32 * sizeof(float));
    for (int i = 0; i < n_out; i++) rt_value_release(&outs[i]);
    rt_value_release(&h), rt_value_release(&k), rt_value_release(&wq);
    rt_session_free(s);
    ir_model_free(m);
    unsetenv("KILN_NO_FOLD_SCALE");
}

static void test_folds_exactly(void **state) {
    (void)state;
    int variants[] = {DIV8, MUL_QUARTER};
    for (int i = 0; i < 2; i++) {
        float a[32], b[32];
        int na, nb;
        run_variant(variants[i], true, a, &na);
        run_variant(variants[i], false, b, &nb);
        assert_int_equal(na, 0);             /* the scale node is gone */
        assert_int_equal(nb, 1);             /* and there without the pass */
        assert_memory_equal(a, b, sizeof a); /* bit for bit */
    }
}

static void test_near_misses_left_alone(void **state) {
    (void)state;
    int variants[] = {DIV3, PINNED, NO_CONST_W};
    for (int i = 0; i < 3; i++) {
        float a[32], b[32];
        int na, nb;
        run_variant(variants[i], true, a, &na);
        run_variant(variants[i], false, b, &nb);
        assert_int_equal(na, 1);
        assert_int_equal(nb, 1);
        assert_memory_equal(a, b, sizeof a);
    }
}

/* The pass alone on the unfused form (explicit Add of the bias): stats and the graph. */
static void test_pass_on_explicit_add(void **state) {
    (void)state;
    ir_model *m = attn_model(DIV8);
    build_pass_stats st;
    memset(&st, 0, sizeof st);
    kiln_error e = {0};
    int before_inits = m->graph->n_initializers;
    assert_int_equal(build_pass_fold_scale(m, NULL, &st, &e), KILN_OK);
    assert_int_equal(st.scale_folded, 1);
    assert_int_equal(count_op(m->graph, "Div"), 0);
    assert_int_equal(m->graph->n_initializers, before_inits + 2); /* scaled Wq and bq */
    /* the scores MatMul writes the old Div output, read by the Softmax */
    int32_t sm = -1;
    for (int32_t i = 0; i < m->graph->n_nodes; i++)
        if (!strcmp(m->graph->nodes[i].op_type, "Softmax")) sm = i;
    assert_true(sm >= 0);
    int32_t prod = m->graph->values[m->graph->nodes[sm].inputs[0]].producer;
    assert_string_equal(m->graph->nodes[prod].op_type, "MatMul");
    /* running it again finds nothing */
    assert_int_equal(build_pass_fold_scale(m, NULL, &st, &e), KILN_OK);
    assert_int_equal(st.scale_folded, 1);
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folds_exactly),
        cmocka_unit_test(test_near_misses_left_alone),
        cmocka_unit_test(test_pass_on_explicit_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
