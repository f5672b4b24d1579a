/* test_views.c - zero-copy Reshape/Flatten/Squeeze/Unsqueeze (executor.c plan_views):
 * a view's root lives until the view's last reader, through the buffer pool (first run)
 * and the planned arena (later runs), at 1 and 2 threads; chained views; views of
 * initializers and graph inputs; graph outputs that are reshapes still own their data;
 * a consumer of a view cannot change the root another node reads later; KILN_NO_VIEWS=1
 * gives the same results with copies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"

#include "graph_builder.h"

static void const_i64(ir_graph *g, const char *name, int n, const int64_t *vals) {
    gb_initializer(g, name, KILN_DTYPE_INT64, 1, (int64_t[]){n}, vals, (size_t)n * 8);
}

static void const_f32(ir_graph *g, const char *name, int rank, const int64_t *dims, const float *vals, int n) {
    gb_initializer(g, name, KILN_DTYPE_FLOAT, rank, dims, vals, (size_t)n * 4);
}

/* x[2,6] -> outputs:
 *   z  = Reshape(Add(Squeeze(Unsqueeze(Reshape(Neg(x)))), Reshape(Abs(x))), [12])
 *        (a = Neg(x) is only read through a 3-deep view chain while Abs(x) and others
 *        are allocated: a freed too early would be overwritten by them)
 *   q  = Add(a, Neg(Reshape(a, [2,6])))    (0: a consumer of a view leaves a intact)
 *   wx = Add(Reshape(W, [2,6]), x)         (a view of an initializer)
 *   xr = Flatten(x)                        (a graph output reshaping a graph input)
 */
static ir_model *view_model(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("z", "q", "wx", "xr"), 4);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){2, 6}, NULL);
    const_i64(g, "s34", 2, (int64_t[]){3, 4});
    const_i64(g, "s26", 2, (int64_t[]){2, 6});
    const_i64(g, "s12", 1, (int64_t[]){12});
    const_i64(g, "ax0", 1, (int64_t[]){0});
    float w[12];
    for (int i = 0; i < 12; i++) w[i] = (float)(i * 10);
    const_f32(g, "W", 2, (int64_t[]){3, 4}, w, 12);
    add_node(g, "Neg", "neg", S("x"), 1, S("a"), 1);
    add_node(g, "Reshape", "r1", S("a", "s34"), 2, S("r1"), 1);
    add_node(g, "Unsqueeze", "r2", S("r1", "ax0"), 2, S("r2"), 1);
    add_node(g, "Squeeze", "r3", S("r2", "ax0"), 2, S("r3"), 1);
    add_node(g, "Abs", "abs", S("x"), 1, S("b"), 1);
    add_node(g, "Reshape", "rb", S("b", "s34"), 2, S("b2"), 1);
    add_node(g, "Add", "add", S("r3", "b2"), 2, S("y"), 1);
    add_node(g, "Reshape", "rz", S("y", "s12"), 2, S("z"), 1);
    add_node(g, "Reshape", "ra", S("a", "s26"), 2, S("av"), 1);
    add_node(g, "Neg", "negv", S("av"), 1, S("nv"), 1);
    add_node(g, "Add", "addq", S("a", "nv"), 2, S("q"), 1);
    add_node(g, "Reshape", "rw", S("W", "s26"), 2, S("wv"), 1);
    add_node(g, "Add", "addw", S("wv", "x"), 2, S("wx"), 1);
    ir_node *fl = add_node(g, "Flatten", "fl", S("x"), 1, S("xr"), 1);
    gb_attr_int(g, fl, "axis", 0);
    return m;
}

static uint64_t run_model(int threads, int runs, bool check_nan) {
    ir_model *m = view_model();
    rt_session_options o = rt_session_options_default();
    o.threads = threads;
    o.run_passes = false; /* keep every reshape node */
    o.check_nan = check_nan;
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    float xd[12];
    for (int i = 0; i < 12; i++) xd[i] = (float)(i % 2 ? i : -i) * 0.5f;
    rt_value x;
    rt_value_init(&x);
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 2, (int64_t[]){2, 6}, &e), KILN_OK);
    memcpy(x.t.data, xd, sizeof xd);
    const rt_value *ins[] = {&x};
    for (int r = 0; r < runs; r++) {
        rt_value outs[4];
        st = rt_session_run(s, S("x"), ins, 1, outs, &e);
        if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
        assert_int_equal(st, KILN_OK);
        for (int k = 0; k < 4; k++) {
            assert_int_equal(outs[k].kind, IR_TYPE_TENSOR);
            assert_false(outs[k].t.flags & RT_TENSOR_BORROWED); /* graph outputs own their data */
            assert_ptr_not_equal(outs[k].t.data, x.t.data);
        }
        assert_int_equal(outs[0].t.rank, 1);
        assert_int_equal(outs[0].t.dims[0], 12);
        assert_int_equal(outs[3].t.rank, 2);
        assert_int_equal(outs[3].t.dims[0], 1);
        assert_int_equal(outs[3].t.dims[1], 12);
        const float *z = outs[0].t.data, *q = outs[1].t.data, *wx = outs[2].t.data, *xr = outs[3].t.data;
        for (int i = 0; i < 12; i++) {
            assert_true(z[i] == -xd[i] + fabsf(xd[i]));
            assert_true(q[i] == 0.0f);
            assert_true(wx[i] == (float)(i * 10) + xd[i]);
            assert_true(xr[i] == xd[i]);
        }
        for (int k = 0; k < 4; k++) rt_value_release(&outs[k]);
    }
    uint64_t hits = 0, misses = 0;
    rt_executor_arena_counts(rt_session_executor(s), &hits, &misses);
    if (runs >= 3) assert_true(hits > 0); /* later runs went through the planned arena */
    uint64_t peak = rt_executor_peak_bytes(rt_session_executor(s));
    rt_value_release(&x);
    rt_session_free(s);
    ir_model_free(m);
    return peak;
}

static void test_views_pool_and_arena(void **state) {
    (void)state;
    unsetenv("KILN_NO_VIEWS");
    run_model(1, 4, false);
    run_model(2, 4, false);
    run_model(1, 2, true); /* --checkNaN reads every output, views included */
}

/* a = Neg(x); v = Reshape(a); v2 = Reshape(v); y = Add(a, v2): peak live bytes are a + v2 + y with copies,
 * a + y with a view. */
static uint64_t small_peak(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 4}, NULL);
    const_i64(g, "s", 2, (int64_t[]){2, 8});
    const_i64(g, "s2", 2, (int64_t[]){4, 4});
    add_node(g, "Neg", "neg", S("x"), 1, S("a"), 1);
    add_node(g, "Reshape", "r", S("a", "s"), 2, S("v"), 1);
    add_node(g, "Reshape", "r2", S("v", "s2"), 2, S("v2"), 1);
    add_node(g, "Add", "add", S("a", "v2"), 2, S("y"), 1);
    rt_session_options o = rt_session_options_default();
    o.threads = 1;
    o.run_passes = false;
    rt_session *s = NULL;
    kiln_error e = {0};
    assert_int_equal(rt_session_create(m, &o, &s, &e), KILN_OK);
    rt_value x, y;
    rt_value_init(&x);
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 4}, &e), KILN_OK);
    for (int i = 0; i < 16; i++) ((float *)x.t.data)[i] = (float)i;
    assert_int_equal(rt_session_run(s, S("x"), (const rt_value *[]){&x}, 1, &y, &e), KILN_OK);
    for (int i = 0; i < 16; i++) assert_true(((float *)y.t.data)[i] == -2.0f * (float)i);
    uint64_t peak = rt_executor_peak_bytes(rt_session_executor(s));
    rt_value_release(&x), rt_value_release(&y);
    rt_session_free(s);
    ir_model_free(m);
    return peak;
}

static void test_views_save_memory(void **state) {
    (void)state;
    unsetenv("KILN_NO_VIEWS");
    assert_int_equal(small_peak(), 2 * 64); /* a and y */
    setenv("KILN_NO_VIEWS", "1", 1);
    assert_int_equal(small_peak(), 3 * 64); /* a, v2 and y with copies (v is freed after r2) */
    run_model(1, 3, false);                 /* the big model's checks pass with copies too */
    unsetenv("KILN_NO_VIEWS");
}

/* a = Neg(x) is read only through v = Reshape(a); b = Abs(x) is made after a's last
 * direct reader, while v is still to be read: with a's lifetime not extended, the pool
 * (run 1) or the arena plan (runs 2+) hands b a's storage and y = v + b comes out wrong. */
static void test_root_outlives_direct_readers(void **state) {
    (void)state;
    unsetenv("KILN_NO_VIEWS");
    for (int threads = 1; threads <= 2; threads++) {
        ir_model *m = new_model();
        ir_graph *g = m->graph;
        set_io(g, S("x"), 1, S("y"), 1);
        set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){8, 8}, NULL);
        const_i64(g, "s", 1, (int64_t[]){64});
        add_node(g, "Neg", "neg", S("x"), 1, S("a"), 1);
        add_node(g, "Reshape", "r", S("a", "s"), 2, S("v"), 1);
        add_node(g, "Abs", "abs", S("x"), 1, S("b0"), 1);
        add_node(g, "Reshape", "rb", S("b0", "s"), 2, S("b"), 1);
        add_node(g, "Add", "add", S("v", "b"), 2, S("y"), 1);
        rt_session_options o = rt_session_options_default();
        o.threads = threads;
        o.run_passes = false;
        rt_session *s = NULL;
        kiln_error e = {0};
        assert_int_equal(rt_session_create(m, &o, &s, &e), KILN_OK);
        rt_value x, y;
        rt_value_init(&x);
        assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 2, (int64_t[]){8, 8}, &e), KILN_OK);
        float *xd = x.t.data;
        for (int i = 0; i < 64; i++) xd[i] = (float)(i % 3 ? i : -i);
        for (int r = 0; r < 4; r++) {
            assert_int_equal(rt_session_run(s, S("x"), (const rt_value *[]){&x}, 1, &y, &e), KILN_OK);
            const float *yd = y.t.data;
            for (int i = 0; i < 64; i++) assert_true(yd[i] == -xd[i] + fabsf(xd[i]));
            rt_value_release(&y);
        }
        uint64_t hits = 0, misses = 0;
        rt_executor_arena_counts(rt_session_executor(s), &hits, &misses);
        assert_true(hits > 0);
        rt_value_release(&x);
        rt_session_free(s);
        ir_model_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views_pool_and_arena),
        cmocka_unit_test(test_views_save_memory),
        cmocka_unit_test(test_root_outlives_direct_readers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
