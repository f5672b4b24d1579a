/* test_executor.c - the executor and session on hand-built graphs: value flow and
 * lifetimes, subgraphs with outer-scope values (If, Loop, Scan), sequences, and the
 * input checks and error messages users rely on. Only kernels owned by the runtime
 * (Identity, Constant, control flow, sequences) are used, so these tests do not depend
 * on the arithmetic kernels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/bufpool.h"
#include "runtime/session.h"

#include "graph_builder.h"


static void float_tensor(rt_value *v, int rank, const int64_t *dims, const float *data) {
    rt_value_init(v);
    kiln_error e = {0};
    rt_tensor *t = rt_value_as_tensor(v);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &e), KILN_OK);
    if (t->count) memcpy(t->data, data, t->count * sizeof(float));
}

static rt_session *open_session(ir_model *m, const rt_session_options *o) {
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    return s;
}

#define S(...) ((const char *const[]){__VA_ARGS__})

/* ---- tests ----------------------------------------------------------------------------- */

/* x [d0, d1] -> Identity -> y -> Identity -> z (the graph output), on 1 thread; *m gets
 * the model (free it after the session). */
static rt_session *identity_chain(int64_t d0, int64_t d1, ir_model **m) {
    *m = new_model();
    ir_graph *g = (*m)->graph;
    set_io(g, S("x"), 1, S("z"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){d0, d1}, NULL);
    add_node(g, "Identity", "id1", S("x"), 1, S("y"), 1);
    add_node(g, "Identity", "id2", S("y"), 1, S("z"), 1);
    rt_session_options o = rt_session_options_default();
    o.threads = 1;
    return open_session(*m, &o);
}

static void test_identity_chain_and_lifetimes(void **state) {
    (void)state;
    ir_model *m;
    rt_session *s = identity_chain(2, 3, &m);
    rt_value x, out;
    float data[6] = {1, 2, 3, 4, 5, 6};
    float_tensor(&x, 2, (int64_t[]){2, 3}, data);
    const rt_value *ins[] = {&x};
    kiln_error e = {0};
    assert_int_equal(rt_session_run(s, S("x"), ins, 1, &out, &e), KILN_OK);
    assert_int_equal(out.kind, IR_TYPE_TENSOR);
    assert_int_equal(out.t.rank, 2);
    assert_int_equal(out.t.dims[1], 3);
    assert_memory_equal(out.t.data, data, sizeof data);
    assert_ptr_not_equal(out.t.data, x.t.data); /* outputs own their data */
    /* y (24 bytes) and z (24 bytes) were alive together at id2; y was freed after it */
    assert_int_equal(rt_executor_peak_bytes(rt_session_executor(s)), 48);
    rt_value_release(&out);
    rt_value_release(&x);
    rt_session_free(s);
    ir_model_free(m);
}

/* Graph outputs come from the executor's buffer pool: released by the caller, their
 * buffers serve the next run's outputs (no allocation from the system once the pool has
 * them), and an output the caller still holds stays valid after the session is freed
 * (the pool waits for it; ASan in CI checks the buffer is neither used after free nor
 * leaked). */
static void test_graph_outputs_pooled_and_outlive_session(void **state) {
    (void)state;
    ir_model *m;
    rt_session *s = identity_chain(64, 64, &m);
    static float data[64 * 64];
    for (int i = 0; i < 64 * 64; i++) data[i] = (float)i;
    rt_value x, out;
    float_tensor(&x, 2, (int64_t[]){64, 64}, data);
    const rt_value *ins[] = {&x};
    kiln_error e = {0};
    uint64_t misses = 0;
    for (int run = 0; run < 4; run++) {
        assert_int_equal(rt_session_run(s, S("x"), ins, 1, &out, &e), KILN_OK);
        assert_memory_equal(out.t.data, data, sizeof data);
        assert_ptr_equal(out.t.free_fn, rt_bufpool_put); /* the pool's, not the heap's */
        rt_bufpool_stats st = rt_executor_bufpool_stats(rt_session_executor(s));
        if (run == 2) misses = st.misses;
        if (run == 3) assert_int_equal(st.misses, misses); /* steady state: nothing new */
        if (run < 3) rt_value_release(&out);
    }
    rt_session_free(s); /* the last output is still held */
    assert_memory_equal(out.t.data, data, sizeof data);
    rt_value_release(&out);
    rt_value_release(&x);
    ir_model_free(m);
}

static void test_input_errors(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("a", "b"), 2, S("ya", "yb"), 2);
    set_type(g, "a", KILN_DTYPE_FLOAT, 2, (int64_t[]){0, 3}, S("batch", NULL));
    set_type(g, "b", KILN_DTYPE_FLOAT, 1, (int64_t[]){0}, S("batch"));
    add_node(g, "Identity", "ia", S("a"), 1, S("ya"), 1);
    add_node(g, "Identity", "ib", S("b"), 1, S("yb"), 1);
    rt_session *s = open_session(m, NULL);
    rt_value a, b, a_bad, b4, outs[2];
    float z[16] = {0};
    float_tensor(&a, 2, (int64_t[]){2, 3}, z);
    float_tensor(&b, 1, (int64_t[]){2}, z);
    float_tensor(&a_bad, 2, (int64_t[]){2, 4}, z);
    float_tensor(&b4, 1, (int64_t[]){4}, z);
    kiln_error e = {0};

    /* missing input: named, with the list of expected inputs */
    assert_int_equal(rt_session_run(s, S("a"), (const rt_value *[]){&a}, 1, outs, &e), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "missing input 'b'"));
    assert_non_null(strstr(kiln_err_msg(&e), "'a' float32[batch, 3]"));
    kiln_err_clear(&e);
    /* unknown input */
    assert_int_equal(rt_session_run(s, S("a", "b", "c"), (const rt_value *[]){&a, &b, &b}, 3, outs, &e),
                     KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "no input named 'c'"));
    kiln_err_clear(&e);
    /* static dim mismatch names input, axis, model value and given value */
    assert_int_equal(rt_session_run(s, S("a", "b"), (const rt_value *[]){&a_bad, &b}, 2, outs, &e),
                     KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "input 'a' axis 1 is 4 but the model fixes it to 3"));
    kiln_err_clear(&e);
    /* symbolic dim shared by two inputs must agree */
    assert_int_equal(rt_session_run(s, S("a", "b"), (const rt_value *[]){&a, &b4}, 2, outs, &e),
                     KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "'batch'"));
    assert_non_null(strstr(kiln_err_msg(&e), "input 'b' axis 0 is 4"));
    kiln_err_clear(&e);
    /* wrong rank */
    assert_int_equal(rt_session_run(s, S("a", "b"), (const rt_value *[]){&b, &b}, 2, outs, &e), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "input 'a' has rank 1"));
    kiln_err_clear(&e);
    /* wrong dtype */
    rt_value ia;
    rt_value_init(&ia);
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&ia), KILN_DTYPE_INT64, 2, (int64_t[]){2, 3}, &e), KILN_OK);
    assert_int_equal(rt_session_run(s, S("a", "b"), (const rt_value *[]){&ia, &b}, 2, outs, &e), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "input 'a' has dtype int64 but the model declares float32"));
    kiln_err_clear(&e);
    /* and the good call works */
    assert_int_equal(rt_session_run(s, S("b", "a"), (const rt_value *[]){&b, &a}, 2, outs, &e), KILN_OK);
    assert_int_equal(outs[0].t.rank, 2);
    assert_int_equal(outs[1].t.rank, 1);
    rt_value_release(&outs[0]);
    rt_value_release(&outs[1]);
    rt_value_release(&a), rt_value_release(&b), rt_value_release(&a_bad), rt_value_release(&b4), rt_value_release(&ia);
    rt_session_free(s);
    ir_model_free(m);
}

static void test_unsupported_op_lists_ops(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    add_node(g, "NoSuchOp", "weird_1", S("x"), 1, S("t"), 1);
    add_node(g, "NoSuchOp", "weird_2", S("t"), 1, S("y"), 1);
    rt_session *s = NULL;
    kiln_error e = {0};
    assert_int_equal(rt_session_create(m, NULL, &s, &e), KILN_ERR_UNSUPPORTED);
    assert_null(s);
    const char *msg = kiln_err_msg(&e);
    assert_non_null(strstr(msg, "unsupported op: NoSuchOp"));
    assert_non_null(strstr(msg, "2 nodes, first 'weird_1'"));
    assert_non_null(strstr(msg, "Identity")); /* the list of ops the backend has */
    kiln_err_clear(&e);
    ir_model_free(m);
}

static void test_constant_check_nan_and_limits(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, NULL, 0, S("y"), 1);
    ir_node *n = add_node(g, "Constant", "make_nan", NULL, 0, S("c"), 1);
    ir_attr *a = add_attrs(g, n, 1);
    float vals[4] = {1, 2, NAN, 4};
    a->name = "value_floats";
    a->type = IR_ATTR_FLOATS;
    a->n = 4;
    a->floats = vals;
    add_node(g, "Identity", "after", S("c"), 1, S("y"), 1);
    rt_session_options o = rt_session_options_default();
    o.check_nan = true;
    rt_session *s = open_session(m, &o);
    rt_value out;
    kiln_error e = {0};
    assert_int_equal(rt_session_run(s, NULL, NULL, 0, &out, &e), KILN_ERR_RUNTIME);
    assert_non_null(strstr(kiln_err_msg(&e), "node 'make_nan' (Constant) produced NaN"));
    assert_non_null(strstr(kiln_err_msg(&e), "flat element 2"));
    kiln_err_clear(&e);
    rt_session_free(s);
    /* without the check the NaN flows through */
    o.check_nan = false;
    o.max_tensor_bytes = 8; /* 4 floats = 16 bytes: over the cap */
    s = open_session(m, &o);
    assert_int_equal(rt_session_run(s, NULL, NULL, 0, &out, &e), KILN_ERR_LIMIT);
    assert_non_null(strstr(kiln_err_msg(&e), "over the per-tensor limit of 8 bytes"));
    assert_non_null(strstr(kiln_err_msg(&e), "make_nan"));
    kiln_err_clear(&e);
    assert_int_equal(rt_tensor_alloc_limit(), 0); /* restored after the run */
    rt_session_free(s);
    o.max_tensor_bytes = 0;
    o.profile = true;
    s = open_session(m, &o);
    assert_int_equal(rt_session_run(s, NULL, NULL, 0, &out, &e), KILN_OK);
    assert_true(isnan(((float *)out.t.data)[2]));
    rt_value_release(&out);
    rt_session_free(s);
    ir_model_free(m);
}

static void count_profile(const rt_node_profile *p, void *user) { *(int *)user += (int)p->calls; }

/* If whose branches read the outer-scope values x and w. */
static void test_if_outer_scope(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("cond", "x", "w"), 3, S("y"), 1);
    ir_graph *then_g = ir_graph_new(m, g, "then");
    ir_graph *else_g = ir_graph_new(m, g, "else");
    add_node(then_g, "Identity", "t_id", S("x"), 1, S("t_out"), 1);
    set_io(then_g, NULL, 0, S("t_out"), 1);
    add_node(else_g, "Identity", "e_id", S("w"), 1, S("e_out"), 1);
    set_io(else_g, NULL, 0, S("e_out"), 1);
    /* x goes through an Identity first so its lifetime must extend to the If */
    ir_graph *gg = g;
    (void)gg;
    ir_node *n = add_node(g, "If", "the_if", S("cond"), 1, S("y"), 1);
    ir_attr *a = add_attrs(g, n, 2);
    a[0].name = "then_branch";
    a[0].type = IR_ATTR_GRAPH;
    a[0].g = then_g;
    a[1].name = "else_branch";
    a[1].type = IR_ATTR_GRAPH;
    a[1].g = else_g;
    rt_session_options o = rt_session_options_default();
    o.profile = true;
    rt_session *s = open_session(m, &o);
    rt_value c, x, w, out;
    rt_value_init(&c);
    kiln_error e = {0};
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&c), KILN_DTYPE_BOOL, 0, NULL, &e), KILN_OK);
    float fx[2] = {1, 2}, fw[3] = {7, 8, 9};
    float_tensor(&x, 1, (int64_t[]){2}, fx);
    float_tensor(&w, 1, (int64_t[]){3}, fw);
    const rt_value *ins[] = {&c, &x, &w};
    *(uint8_t *)c.t.data = 1;
    assert_int_equal(rt_session_run(s, S("cond", "x", "w"), ins, 3, &out, &e), KILN_OK);
    assert_int_equal(out.t.dims[0], 2);
    assert_memory_equal(out.t.data, fx, sizeof fx);
    rt_value_release(&out);
    *(uint8_t *)c.t.data = 0;
    assert_int_equal(rt_session_run(s, S("cond", "x", "w"), ins, 3, &out, &e), KILN_OK);
    assert_int_equal(out.t.dims[0], 3);
    assert_memory_equal(out.t.data, fw, sizeof fw);
    rt_value_release(&out);
    int calls = 0;
    rt_executor_foreach_profile(rt_session_executor(s), count_profile, &calls);
    assert_int_equal(calls, 4); /* If twice, each branch's Identity once */
    rt_value_release(&c), rt_value_release(&x), rt_value_release(&w);
    rt_session_free(s);
    ir_model_free(m);
}

/* Loop with a trip count: carries a sequence (SequenceInsert of an outer value) and
 * stacks iter_num as a scan output. */
static void test_loop_sequence_and_scan_outputs(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("M", "x"), 2, S("seq_final", "iters", "len"), 3);
    ir_graph *body = ir_graph_new(m, g, "body");
    set_io(body, S("i", "cond_in", "seq_in"), 3, S("cond_out", "seq_out", "i_out"), 3);
    add_node(body, "Identity", "b_cond", S("cond_in"), 1, S("cond_out"), 1);
    add_node(body, "SequenceInsert", "b_ins", S("seq_in", "x"), 2, S("seq_out"), 1);
    add_node(body, "Identity", "b_iter", S("i"), 1, S("i_out"), 1);
    set_type(body, "i_out", KILN_DTYPE_INT64, 0, NULL, NULL);
    add_node(g, "SequenceEmpty", "empty", NULL, 0, S("seq0"), 1);
    ir_node *n = add_node(g, "Loop", "loop", S("M", "", "seq0"), 3, S("seq_final", "iters"), 2);
    ir_attr *a = add_attrs(g, n, 1);
    a->name = "body";
    a->type = IR_ATTR_GRAPH;
    a->g = body;
    add_node(g, "SequenceLength", "len_node", S("seq_final"), 1, S("len"), 1);
    rt_session *s = open_session(m, NULL);
    kiln_error e = {0};
    rt_value mv, x, outs[3];
    rt_value_init(&mv);
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&mv), KILN_DTYPE_INT64, 0, NULL, &e), KILN_OK);
    *(int64_t *)mv.t.data = 3;
    float fx[2] = {5, 6};
    float_tensor(&x, 1, (int64_t[]){2}, fx);
    assert_int_equal(rt_session_run(s, S("M", "x"), (const rt_value *[]){&mv, &x}, 2, outs, &e), KILN_OK);
    assert_int_equal(outs[0].kind, IR_TYPE_SEQUENCE);
    assert_int_equal(outs[0].n_items, 3);
    assert_memory_equal(outs[0].items[2].t.data, fx, sizeof fx);
    assert_int_equal(outs[1].t.rank, 1);
    assert_int_equal(outs[1].t.dims[0], 3);
    assert_int_equal(((int64_t *)outs[1].t.data)[2], 2);
    assert_int_equal(*(int64_t *)outs[2].t.data, 3);
    for (int i = 0; i < 3; i++) rt_value_release(&outs[i]);
    /* zero iterations: empty sequence, scan output of shape [0] with the declared dtype */
    *(int64_t *)mv.t.data = 0;
    assert_int_equal(rt_session_run(s, S("M", "x"), (const rt_value *[]){&mv, &x}, 2, outs, &e), KILN_OK);
    assert_int_equal(outs[0].n_items, 0);
    assert_int_equal(outs[1].t.dtype, KILN_DTYPE_INT64);
    assert_int_equal(outs[1].t.dims[0], 0);
    for (int i = 0; i < 3; i++) rt_value_release(&outs[i]);
    rt_value_release(&mv), rt_value_release(&x);
    rt_session_free(s);
    ir_model_free(m);
}

/* Scan over axis 0, reversed input direction: the state passes through, the scan output
 * is each slice, so the output is the input reversed. */
static void test_scan_reverse(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("s0", "xs"), 2, S("s_final", "ys"), 2);
    ir_graph *body = ir_graph_new(m, g, "body");
    set_io(body, S("s", "x"), 2, S("s_out", "y"), 2);
    add_node(body, "Identity", "b_s", S("s"), 1, S("s_out"), 1);
    add_node(body, "Identity", "b_y", S("x"), 1, S("y"), 1);
    ir_node *n = add_node(g, "Scan", "scan", S("s0", "xs"), 2, S("s_final", "ys"), 2);
    ir_attr *a = add_attrs(g, n, 3);
    a[0].name = "body";
    a[0].type = IR_ATTR_GRAPH;
    a[0].g = body;
    a[1].name = "num_scan_inputs";
    a[1].type = IR_ATTR_INT;
    a[1].i = 1;
    static int64_t dirs[1] = {1};
    a[2].name = "scan_input_directions";
    a[2].type = IR_ATTR_INTS;
    a[2].n = 1;
    a[2].ints = dirs;
    rt_session *s = open_session(m, NULL);
    rt_value s0, xs, outs[2];
    float f0[1] = {42}, fx[6] = {1, 2, 3, 4, 5, 6};
    float_tensor(&s0, 1, (int64_t[]){1}, f0);
    float_tensor(&xs, 2, (int64_t[]){3, 2}, fx);
    kiln_error e = {0};
    assert_int_equal(rt_session_run(s, S("s0", "xs"), (const rt_value *[]){&s0, &xs}, 2, outs, &e), KILN_OK);
    float want[6] = {5, 6, 3, 4, 1, 2};
    assert_int_equal(outs[1].t.rank, 2);
    assert_memory_equal(outs[1].t.data, want, sizeof want);
    assert_memory_equal(outs[0].t.data, f0, sizeof f0);
    rt_value_release(&outs[0]), rt_value_release(&outs[1]);
    rt_value_release(&s0), rt_value_release(&xs);
    rt_session_free(s);
    ir_model_free(m);
}

static void test_split_concat_sequence(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y", "n"), 2);
    ir_node *sp = add_node(g, "SplitToSequence", "split", S("x"), 1, S("seq"), 1);
    ir_attr *a = add_attrs(g, sp, 1);
    a->name = "axis";
    a->type = IR_ATTR_INT;
    a->i = 1;
    add_node(g, "SequenceLength", "len", S("seq"), 1, S("n"), 1);
    ir_node *cc = add_node(g, "ConcatFromSequence", "concat", S("seq"), 1, S("y"), 1);
    a = add_attrs(g, cc, 2);
    a[0].name = "axis";
    a[0].type = IR_ATTR_INT;
    a[0].i = 0;
    a[1].name = "new_axis";
    a[1].type = IR_ATTR_INT;
    a[1].i = 1;
    rt_session *s = open_session(m, NULL);
    rt_value x, outs[2];
    float fx[6] = {1, 2, 3, 4, 5, 6}; /* [2, 3] */
    float_tensor(&x, 2, (int64_t[]){2, 3}, fx);
    kiln_error e = {0};
    assert_int_equal(rt_session_run(s, S("x"), (const rt_value *[]){&x}, 1, outs, &e), KILN_OK);
    /* split into 3 columns of [2] (keepdims=1 keeps [2,1]), stacked on a new axis 0: the transpose */
    assert_int_equal(*(int64_t *)outs[1].t.data, 3);
    assert_int_equal(outs[0].t.rank, 3);
    assert_int_equal(outs[0].t.dims[0], 3);
    assert_int_equal(outs[0].t.dims[1], 2);
    float want[6] = {1, 4, 2, 5, 3, 6};
    assert_memory_equal(outs[0].t.data, want, sizeof want);
    rt_value_release(&outs[0]), rt_value_release(&outs[1]), rt_value_release(&x);
    rt_session_free(s);
    ir_model_free(m);
}

static void test_backend_errors(void **state) {
    (void)state;
    ir_model *m = new_model();
    set_io(m->graph, NULL, 0, NULL, 0);
    rt_session_options o = rt_session_options_default();
    o.backend = "cuda";
    rt_session *s = NULL;
    kiln_error e = {0};
    assert_int_equal(rt_session_create(m, &o, &s, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "--backend cpu"));
    kiln_err_clear(&e);
    o.backend = "tpu";
    assert_int_equal(rt_session_create(m, &o, &s, &e), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "unknown backend 'tpu'"));
    kiln_err_clear(&e);
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_chain_and_lifetimes),
        cmocka_unit_test(test_graph_outputs_pooled_and_outlive_session),
        cmocka_unit_test(test_input_errors),
        cmocka_unit_test(test_unsupported_op_lists_ops),
        cmocka_unit_test(test_constant_check_nan_and_limits),
        cmocka_unit_test(test_if_outer_scope),
        cmocka_unit_test(test_loop_sequence_and_scan_outputs),
        cmocka_unit_test(test_scan_reverse),
        cmocka_unit_test(test_split_concat_sequence),
        cmocka_unit_test(test_backend_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
