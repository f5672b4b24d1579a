/* test_precision_fp16.c - the FP16 activations pass (build/passes/precision_fp16.c) on
 * hand-built graphs, without a GPU: which nodes go half, where Casts are inserted (and
 * that they are shared and placed in topological order), which initializers become
 * float16, that graph outputs keep their name and float32 type, that host-read
 * arguments stay float32; and that the CPU backend runs the rewritten graph to the
 * float32 result within float16 rounding. Also the channels-last pass (layout_nhwc.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/io_formats.h"
#include "build/passes/passes.h"
#include "core/dtype.h"
#include "ir/infer.h"
#include "diag/diag.h"
#include "runtime/session.h"

#include "graph_builder.h"



/* Rules under test: every op half except those named in `user` (a NULL-terminated list);
 * input 1 of Clip is read on the host. */
static bool test_node_half(void *user, const ir_model *m, const ir_node *n) {
    (void)m;
    for (const char *const *p = user; p && *p; p++)
        if (!strcmp(*p, n->op_type)) return false;
    return true;
}
static bool test_input_half(void *user, const ir_node *n, int32_t k) {
    (void)user;
    return !(!strcmp(n->op_type, "Clip") && k >= 1);
}

static void infer(ir_model *m) {
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    assert_int_equal(ir_infer(m, NULL, &dl, &e), KILN_OK);
    diag_list_free(&dl);
}

static build_fp16_stats run_pass(ir_model *m, const char *const *float_ops) {
    build_fp16_rules r = {test_node_half, test_input_half, (void *)float_ops};
    build_fp16_stats st;
    kiln_error e = {0};
    assert_int_equal(build_pass_precision_fp16(m, &r, &st, &e), KILN_OK);
    return st;
}

static const ir_node *find_node(const ir_graph *g, const char *name) {
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
    return NULL;
}
static kiln_dtype dt_of(const ir_graph *g, int32_t v) {
    return g->values[v].init ? g->values[v].init->dtype : g->values[v].type.dtype;
}
static int count_op(const ir_graph *g, const char *op) {
    int n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op_type, op);
    return n;
}
/* every node input is produced by an earlier node, or is a graph input / initializer */
static void assert_topological(const ir_graph *g) {
    for (int32_t i = 0; i < g->n_nodes; i++) {
        for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
            int32_t v = g->nodes[i].inputs[k];
            if (v < 0) continue;
            int32_t p = g->values[v].producer;
            assert_true(p < i);
            if (p < 0) assert_true(g->values[v].init || (g->values[v].flags & IR_VALUE_GRAPH_INPUT));
        }
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++) assert_int_equal(g->values[g->nodes[i].outputs[k]].producer, i);
    }
}

/* x -> MatMul(W) -> Add(B) -> Relu -> Softmax (float only) -> y; W, B only read by half nodes */
static ir_model *mlp(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){2, 3}, NULL);
    float w[12], b[4];
    for (int i = 0; i < 12; i++) w[i] = 0.1f * (float)(i - 5);
    for (int i = 0; i < 4; i++) b[i] = 0.25f * (float)i - 0.3f;
    b[3] = -1e30f; /* beyond float16: saturates to -65504 (Relu makes both 0) */
    gb_typed_initializer(g, "W", KILN_DTYPE_FLOAT, 2, (int64_t[]){3, 4}, w, 4);
    gb_typed_initializer(g, "B", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, b, 4);
    add_node(g, "MatMul", "mm", S("x", "W"), 2, S("h"), 1);
    add_node(g, "Add", "add", S("h", "B"), 2, S("a"), 1);
    add_node(g, "Relu", "relu", S("a"), 1, S("r"), 1);
    add_node(g, "Softmax", "sm", S("r"), 1, S("y"), 1);
    infer(m);
    return m;
}

static void test_half_nodes_casts_and_initializers(void **state) {
    (void)state;
    ir_model *m = mlp();
    ir_graph *g = m->graph;
    build_fp16_stats st = run_pass(m, S("Softmax", NULL));
    assert_int_equal(st.half_nodes, 3);
    assert_int_equal(st.float_nodes, 1);
    assert_int_equal(st.initializers_converted, 2); /* W and B */
    assert_int_equal(st.casts, 2);                  /* x -> half, r -> float */
    assert_int_equal(count_op(g, "Cast"), 2);
    assert_topological(g);
    /* the weights are float16 now, with the same values rounded */
    int32_t w = ir_graph_find(g, "W");
    assert_int_equal(dt_of(g, w), KILN_DTYPE_FLOAT16);
    uint16_t h;
    memcpy(&h, (const uint8_t *)g->values[w].init->data + 2, 2);
    assert_true(fabsf(kiln_fp16_to_fp32(h) - (-0.4f)) < 1e-3f);
    memcpy(&h, (const uint8_t *)g->values[ir_graph_find(g, "B")].init->data + 6, 2);
    assert_true(kiln_fp16_to_fp32(h) == -65504.f); /* saturated, not -inf */
    /* the half nodes read and write float16 */
    const ir_node *mm = find_node(g, "mm");
    assert_int_equal(dt_of(g, mm->inputs[0]), KILN_DTYPE_FLOAT16);
    assert_int_equal(g->nodes[g->values[mm->inputs[0]].producer].op_type[0], 'C'); /* Cast of x */
    assert_int_equal(dt_of(g, mm->outputs[0]), KILN_DTYPE_FLOAT16);
    assert_int_equal(dt_of(g, find_node(g, "relu")->outputs[0]), KILN_DTYPE_FLOAT16);
    /* the float32 node reads through a Cast back, and the graph output is float32 */
    const ir_node *sm = find_node(g, "sm");
    assert_int_equal(dt_of(g, sm->inputs[0]), KILN_DTYPE_FLOAT);
    assert_string_equal(g->nodes[g->values[sm->inputs[0]].producer].op_type, "Cast");
    assert_int_equal(dt_of(g, g->outputs[0]), KILN_DTYPE_FLOAT);
    assert_int_equal(dt_of(g, g->inputs[0]), KILN_DTYPE_FLOAT);
    ir_model_free(m);
}

/* --inputIOFormats=fp16: the input arrives in half and its widening Cast is cancelled, so
 * the half MatMul reads the graph input itself and no Cast runs before it. */
static void test_half_input_cancels_the_round_trip(void **state) {
    (void)state;
    ir_model *m = mlp();
    ir_graph *g = m->graph;
    build_io_spec in = {1, {KILN_DTYPE_FLOAT16}};
    kiln_error e = {0};
    int32_t changed = -1;
    assert_int_equal(build_apply_io_formats(m, &in, NULL, &changed, &e), KILN_OK);
    assert_int_equal(changed, 1);
    assert_int_equal(count_op(g, "Cast"), 1); /* x (float16) -> x_as_float32 */
    infer(m); /* sessions infer again before the pass: the retyping must survive it */
    assert_int_equal(dt_of(g, g->inputs[0]), KILN_DTYPE_FLOAT16);
    build_fp16_stats st = run_pass(m, S("Softmax", NULL));
    assert_int_equal(st.casts_cancelled, 1);
    assert_int_equal(st.casts, 1); /* only r -> float for the Softmax */
    assert_int_equal(count_op(g, "Cast"), 1);
    assert_topological(g);
    const ir_node *mm = find_node(g, "mm");
    assert_int_equal(mm->inputs[0], g->inputs[0]);
    assert_int_equal(dt_of(g, g->inputs[0]), KILN_DTYPE_FLOAT16);
    ir_model_free(m);
}

/* A widened value also read by a float32 node keeps its Cast for that reader; half
 * readers still take the float16 source. */
static void test_widening_cast_kept_for_float_readers(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y1", "y2"), 2);
    set_type(g, "x", KILN_DTYPE_FLOAT16, 2, (int64_t[]){2, 3}, NULL);
    float w[6] = {1, 2, 3, 4, 5, 6};
    gb_typed_initializer(g, "W", KILN_DTYPE_FLOAT, 2, (int64_t[]){3, 2}, w, 4);
    ir_node *c = add_node(g, "Cast", "widen", S("x"), 1, S("wide"), 1);
    gb_attr_int(g, c, "to", KILN_DTYPE_FLOAT);
    add_node(g, "MatMul", "mm", S("wide", "W"), 2, S("y1"), 1);
    add_node(g, "Softmax", "sm", S("wide"), 1, S("y2"), 1);
    infer(m);
    build_fp16_stats st = run_pass(m, S("Softmax", NULL));
    assert_int_equal(st.casts_cancelled, 1);
    assert_topological(g);
    assert_int_equal(find_node(g, "mm")->inputs[0], ir_graph_find(g, "x"));
    assert_non_null(find_node(g, "widen")); /* still read by the float32 Softmax */
    assert_int_equal(find_node(g, "sm")->inputs[0], ir_graph_find(g, "wide"));
    ir_model_free(m);
}

static void test_graph_output_of_half_node_keeps_name_and_type(void **state) {
    (void)state;
    ir_model *m = mlp();
    ir_graph *g = m->graph;
    /* everything half: y (Softmax's output, a graph output) comes from a Cast to float32 */
    build_fp16_stats st = run_pass(m, NULL);
    assert_int_equal(st.half_nodes, 4);
    assert_int_equal(st.float_nodes, 0);
    assert_int_equal(st.casts, 2); /* x in, y out */
    assert_topological(g);
    int32_t y = g->outputs[0];
    assert_string_equal(g->values[y].name, "y");
    assert_int_equal(dt_of(g, y), KILN_DTYPE_FLOAT);
    const ir_node *cast = &g->nodes[g->values[y].producer];
    assert_string_equal(cast->op_type, "Cast");
    assert_int_equal(ir_node_attr_int(cast, "to", 0), KILN_DTYPE_FLOAT);
    assert_int_equal(dt_of(g, cast->inputs[0]), KILN_DTYPE_FLOAT16);
    assert_string_equal(g->nodes[g->values[cast->inputs[0]].producer].name, "sm");
    assert_int_equal(g->nodes[g->n_nodes - 1].op_type[0], 'C'); /* placed last, after sm */
    ir_model_free(m);
}

/* A weight read by a half and a float32 node stays float32 (read through one shared Cast);
 * an overridable initializer (also a graph input) is never converted; Clip's host-read
 * bound stays float32; a graph input read by two half nodes gets one Cast. */
static void test_shared_and_host_inputs(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x", "O"), 2, S("y", "z", "c"), 3);
    set_type(g, "x", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, NULL);
    float wv[4] = {1, 2, 3, 4}, ov[4] = {0.5f, 0.5f, 0.5f, 0.5f}, lo = 0.f, hi = 2.f;
    gb_typed_initializer(g, "W", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, wv, 4);
    gb_typed_initializer(g, "O", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, ov, 4);
    g->values[ir_graph_find(g, "O")].flags |= IR_VALUE_GRAPH_INPUT;
    gb_typed_initializer(g, "lo", KILN_DTYPE_FLOAT, 0, NULL, &lo, 4);
    gb_typed_initializer(g, "hi", KILN_DTYPE_FLOAT, 0, NULL, &hi, 4);
    add_node(g, "Mul", "mul", S("x", "W"), 2, S("p"), 1);      /* half */
    add_node(g, "Sub", "sub", S("x", "W"), 2, S("y"), 1);      /* float32 (refused) */
    add_node(g, "Add", "add", S("p", "O"), 2, S("q"), 1);      /* half, O overridable */
    add_node(g, "Clip", "clip", S("q", "lo", "hi"), 3, S("z"), 1);
    add_node(g, "Sigmoid", "sig", S("x"), 1, S("c"), 1);       /* half, second reader of x */
    add_node(g, "Shape", "shape", S("p"), 1, S("p_shape"), 1);  /* reads dims only: no Cast */
    infer(m);
    build_fp16_stats st = run_pass(m, S("Sub", "Shape", NULL)); /* Shape: as the GPU rules say */
    assert_topological(g);
    assert_int_equal(st.initializers_converted, 0);
    assert_int_equal(dt_of(g, ir_graph_find(g, "W")), KILN_DTYPE_FLOAT);
    assert_int_equal(dt_of(g, ir_graph_find(g, "O")), KILN_DTYPE_FLOAT);
    assert_int_equal(dt_of(g, ir_graph_find(g, "lo")), KILN_DTYPE_FLOAT);
    const ir_node *mul = find_node(g, "mul"), *sub = find_node(g, "sub"), *sig = find_node(g, "sig");
    const ir_node *add = find_node(g, "add"), *clip = find_node(g, "clip");
    assert_int_equal(dt_of(g, mul->inputs[1]), KILN_DTYPE_FLOAT16);          /* Cast of W */
    assert_int_equal(sub->inputs[1], ir_graph_find(g, "W"));                  /* float32 reader untouched */
    assert_int_equal(mul->inputs[0], sig->inputs[0]);                         /* one Cast of x, shared */
    assert_int_equal(dt_of(g, add->inputs[1]), KILN_DTYPE_FLOAT16);          /* Cast of O */
    assert_int_equal(clip->inputs[1], ir_graph_find(g, "lo"));               /* host bound: float32 */
    assert_int_equal(dt_of(g, clip->inputs[0]), KILN_DTYPE_FLOAT16);
    assert_int_equal(st.casts, 3 /* x, W, O */ + 2 /* z, c outputs */);
    assert_int_equal(find_node(g, "shape")->inputs[0], find_node(g, "mul")->outputs[0]); /* the half value */
    for (int i = 0; i < 3; i++) assert_int_equal(dt_of(g, g->outputs[i]), KILN_DTYPE_FLOAT);
    ir_model_free(m);
}

/* A second run finds nothing to change (GPU engines store the rewritten graph and the
 * session runs the pass again when loading them). */
static void test_second_run_changes_nothing(void **state) {
    (void)state;
    for (int variant = 0; variant < 2; variant++) {
        ir_model *m = mlp();
        (void)run_pass(m, variant ? NULL : S("Softmax", NULL));
        int32_t n = m->graph->n_nodes, nv = m->graph->n_values;
        build_fp16_stats st = run_pass(m, variant ? NULL : S("Softmax", NULL));
        assert_int_equal(st.casts, 0);
        assert_int_equal(st.initializers_converted, 0);
        assert_int_equal(m->graph->n_nodes, n);
        assert_int_equal(m->graph->n_values, nv);
        ir_model_free(m);
    }
}

/* Nodes without float tensors are never asked about and keep their types. */
static void test_no_float_tensors_untouched(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("i"), 1, S("o"), 1);
    set_type(g, "i", KILN_DTYPE_INT64, 1, (int64_t[]){3}, NULL);
    add_node(g, "Neg", "neg", S("i"), 1, S("o"), 1);
    infer(m);
    build_fp16_stats st = run_pass(m, NULL);
    assert_int_equal(st.half_nodes, 0);
    assert_int_equal(st.casts, 0);
    assert_int_equal(g->n_nodes, 1);
    assert_int_equal(dt_of(g, ir_graph_find(g, "o")), KILN_DTYPE_INT64);
    ir_model_free(m);
}

static void run_model(ir_model *m, const float *x, float *y, int ny) {
    rt_session_options o = rt_session_options_default();
    o.threads = 1;
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    rt_value in, out;
    rt_value_init(&in);
    rt_tensor *t = rt_value_as_tensor(&in);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, 2, (int64_t[]){2, 3}, &e), KILN_OK);
    memcpy(t->data, x, 6 * sizeof(float));
    const rt_value *ins[] = {&in};
    st = rt_session_run(s, S("x"), ins, 1, &out, &e);
    if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    assert_int_equal(out.t.dtype, KILN_DTYPE_FLOAT);
    assert_int_equal((int)out.t.count, ny);
    memcpy(y, out.t.data, (size_t)ny * sizeof(float));
    rt_value_release(&out);
    rt_value_release(&in);
    rt_session_free(s);
}

/* The CPU backend runs what the pass produces (float16 MatMul/Add/Relu, Casts) and gets
 * the float32 answer within float16 rounding, both with a float32 tail and all-half. */
static void test_cpu_runs_rewritten_graph(void **state) {
    (void)state;
    const float x[6] = {0.3f, -1.2f, 2.0f, 0.7f, 0.1f, -0.4f};
    float ref[8], got[8];
    ir_model *m = mlp();
    run_model(m, x, ref, 8);
    ir_model_free(m);
    for (int variant = 0; variant < 2; variant++) {
        m = mlp();
        (void)run_pass(m, variant ? NULL : S("Softmax", NULL));
        run_model(m, x, got, 8);
        for (int i = 0; i < 8; i++) assert_true(fabsf(got[i] - ref[i]) <= 5e-3f + 5e-3f * fabsf(ref[i]));
        ir_model_free(m);
    }
}


/* ---- channels-last regions (layout_nhwc.c) ---- */

static bool all_ok(void *user, const ir_model *m, const ir_node *n) {
    (void)user, (void)m;
    assert_string_equal(n->domain, "kiln.nhwc"); /* asked as it would be */
    return true;
}

static const int64_t *perm_of(const ir_node *n) {
    const ir_attr *a = ir_node_attr(n, "perm");
    assert_non_null(a);
    assert_int_equal(a->n, 4);
    return a->ints;
}

/* x -> Conv(W) -> MaxPool -> GlobalAveragePool -> Flatten -> y, and the Conv's output is
 * also a graph output: one NHWC region with a Transpose in, the Flatten reading the
 * [N, 1, 1, C] pool output directly, one Transpose back to NCHW for the pinned output; the weight is stored [O, KH, KW, C]. (The CPU has
 * no kiln.nhwc kernels: the session runs this pass for device backends only.) */
static void test_layout_nhwc_region(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y", "c"), 2);
    set_type(g, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 8, 8, 8}, NULL);
    static float w[8 * 8 * 3 * 3];
    for (int i = 0; i < 576; i++) w[i] = (float)i;
    gb_typed_initializer(g, "W", KILN_DTYPE_FLOAT, 4, (int64_t[]){8, 8, 3, 3}, w, 4);
    ir_node *conv = add_node(g, "Conv", "conv", S("x", "W"), 2, S("c"), 1);
    ir_attr *a = add_attrs(g, conv, 1);
    a->name = "pads";
    a->type = IR_ATTR_INTS;
    a->n = 4;
    a->ints = ARENA_ARRAY(&m->arena, int64_t, 4);
    for (int i = 0; i < 4; i++) a->ints[i] = 1;
    ir_node *mp = add_node(g, "MaxPool", "pool", S("c"), 1, S("p"), 1);
    a = add_attrs(g, mp, 1);
    a->name = "kernel_shape";
    a->type = IR_ATTR_INTS;
    a->n = 2;
    a->ints = ARENA_ARRAY(&m->arena, int64_t, 2);
    a->ints[0] = a->ints[1] = 2;
    add_node(g, "GlobalAveragePool", "gap", S("p"), 1, S("gp"), 1);
    add_node(g, "Flatten", "flat", S("gp"), 1, S("y"), 1);
    infer(m);
    build_layout_rules r = {all_ok, NULL, 0};
    int32_t moved = 0;
    kiln_error e = {0};
    assert_int_equal(build_pass_layout_nhwc(m, &r, &moved, &e), KILN_OK);
    assert_int_equal(moved, 3);
    assert_topological(g);
    assert_int_equal(count_op(g, "Transpose"), 2);
    const ir_node *cv = find_node(g, "conv"), *gap = find_node(g, "gap"), *fl = find_node(g, "flat");
    assert_string_equal(cv->domain, "kiln.nhwc");
    assert_string_equal(find_node(g, "pool")->domain, "kiln.nhwc");
    assert_string_equal(gap->domain, "kiln.nhwc");
    assert_string_equal(fl->domain, "");
    /* x enters through Transpose(0,2,3,1) */
    const ir_node *tin = &g->nodes[g->values[cv->inputs[0]].producer];
    assert_string_equal(tin->op_type, "Transpose");
    assert_int_equal(perm_of(tin)[3], 1);
    assert_int_equal(g->values[cv->inputs[0]].type.dims[3].value, 8); /* [1, 8, 8, 8] */
    assert_int_equal(g->values[cv->inputs[1]].init->dims[3], 8);      /* [8, 3, 3, 8] */
    assert_int_equal(g->values[cv->inputs[1]].init->dims[1], 3);
    /* weight [O, C, KH, KW] -> [O, KH, KW, C]: element (o=1, c=2, y=0, x=1) moves */
    const ir_tensor *wt = g->values[cv->inputs[1]].init;
    assert_non_null(wt);
    float got;
    memcpy(&got, (const uint8_t *)wt->data + 4 * (((1 * 3 + 0) * 3 + 1) * 8 + 2), 4);
    assert_true(got == w[((1 * 8 + 2) * 3 + 0) * 3 + 1]);
    /* Flatten reads GAP's [1, 1, 1, 8] NHWC output as it is (same bytes as NCHW) */
    assert_string_equal(g->nodes[g->values[fl->inputs[0]].producer].name, "gap");
    assert_int_equal(g->values[fl->inputs[0]].type.dims[3].value, 8);
    /* the pinned Conv output "c" keeps its name, NCHW, from a Transpose back */
    int32_t cv_out = ir_graph_find(g, "c");
    const ir_node *tc = &g->nodes[g->values[cv_out].producer];
    assert_string_equal(tc->op_type, "Transpose");
    assert_int_equal(g->values[cv_out].type.dims[1].value, 8); /* [1, 8, 8, 8] NCHW */
    assert_int_equal(g->values[cv_out].type.dims[3].value, 8);
    assert_string_equal(g->nodes[g->values[tc->inputs[0]].producer].name, "conv");
    ir_model_free(m);

    /* a 3-channel stem convolution is not moved */
    m = new_model();
    g = m->graph;
    set_io(g, S("x"), 1, S("c"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 3, 8, 8}, NULL);
    gb_typed_initializer(g, "W", KILN_DTYPE_FLOAT, 4, (int64_t[]){8, 3, 3, 3}, w, 4);
    add_node(g, "Conv", "stem", S("x", "W"), 2, S("c"), 1);
    infer(m);
    assert_int_equal(build_pass_layout_nhwc(m, &r, &moved, &e), KILN_OK);
    assert_int_equal(moved, 0);
    assert_int_equal(g->n_nodes, 1);
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_nodes_casts_and_initializers),
        cmocka_unit_test(test_graph_output_of_half_node_keeps_name_and_type),
        cmocka_unit_test(test_half_input_cancels_the_round_trip),
        cmocka_unit_test(test_widening_cast_kept_for_float_readers),
        cmocka_unit_test(test_shared_and_host_inputs),
        cmocka_unit_test(test_no_float_tensors_untouched),
        cmocka_unit_test(test_second_run_changes_nothing),
        cmocka_unit_test(test_cpu_runs_rewritten_graph),
        cmocka_unit_test(test_layout_nhwc_region),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
