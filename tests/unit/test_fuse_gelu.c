/* test_fuse_gelu.c - the GELU pattern pass (build/passes/fuse_gelu.c), its fusion into the
 * MatMul epilogue, and the Gelu kernels:
 *   - the three tail orders of the erf form (with Div by sqrt 2 and Mul by 1/sqrt 2) and
 *     the tanh form (Pow and Mul-Mul cubes) become one Gelu node, and the fused graph
 *     computes what the unfused one does;
 *   - wrong constants and intermediates read elsewhere (another node, a graph output)
 *     are left alone;
 *   - MatMul -> Add(bias) -> GELU ends as one MatMul marked kiln_activation = "Gelu";
 *   - the vectorised Gelu against a double-precision reference over edge values (0,
 *     +-tiny, large |x|, NaN, infinities), and identical results at 1 and 2 threads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "build/passes/passes.h"
#include "runtime/session.h"

#include "gelu_ref.h"
#include "graph_builder.h"

#define S(...) ((const char *const[]){__VA_ARGS__})

static void scalar_const(ir_graph *g, const char *name, float value) {
    int32_t v = ir_graph_value(g, name);
    ir_tensor *t = ARENA_NEW(&g->model->arena, ir_tensor);
    t->name = g->values[v].name;
    t->dtype = KILN_DTYPE_FLOAT;
    t->rank = 0;
    t->dims = ARENA_ARRAY(&g->model->arena, int64_t, 1);
    t->count = 1;
    t->nbytes = sizeof value;
    t->data = arena_memdup(&g->model->arena, &value, sizeof value);
    t->where = IR_DATA_OWNED;
    g->values[v].init = t;
    g->values[v].flags |= IR_VALUE_INITIALIZER;
    int32_t *ni = ARENA_ARRAY(&g->model->arena, int32_t, g->n_initializers + 1);
    if (g->n_initializers) memcpy(ni, g->initializers, (size_t)g->n_initializers * sizeof *ni);
    ni[g->n_initializers++] = v;
    g->initializers = ni;
}

static void tensor_const(ir_graph *g, const char *name, int rank, const int64_t *dims, const float *data) {
    scalar_const(g, name, 0.f);
    ir_tensor *t = g->values[ir_graph_find(g, name)].init;
    t->rank = rank;
    t->dims = ARENA_ARRAY(&g->model->arena, int64_t, rank);
    t->count = 1;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i], t->count *= (uint64_t)dims[i];
    t->nbytes = t->count * sizeof(float);
    t->data = arena_memdup(&g->model->arena, data, t->nbytes);
}

#define ROWS 3
#define COLS 37 /* not a multiple of 8: the vector tail is exercised */

/* Pattern variants. Values: x (input [ROWS, COLS]) -> y (output). */
enum variant {
    ERF_DIV_MUL_X_THEN_HALF, /* Mul(Mul(x, a), 0.5), head Div(x, sqrt2) */
    ERF_MULC_HALF_X_FIRST,   /* Mul(Mul(0.5, x), a), head Mul(1/sqrt2, x), Add(1, e) */
    ERF_DIV_A_HALF,          /* Mul(x, Mul(a, 0.5)) */
    TANH_POW,                /* tanh form, x^3 = Pow(x, 3) */
    TANH_MULMUL,             /* tanh form, x^3 = Mul(Mul(x, x), x) */
    BAD_SQRT2,               /* Div by 1.5: not GELU */
    BAD_HALF,                /* 0.6 instead of 0.5 */
    BAD_ONE,                 /* Add 2 instead of 1 */
    SHARED_ERF,              /* Erf output is also a graph output */
    SHARED_ADD,              /* (1 + erf) also read by another node */
    PINNED_MUL               /* x * (1 + erf) is itself a graph output (no second reader) */
};

static ir_model *build(enum variant v) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    bool extra_out = v == SHARED_ERF || v == SHARED_ADD;
    if (extra_out) set_io(g, S("x"), 1, S("y", "z"), 2);
    else if (v == PINNED_MUL) set_io(g, S("x"), 1, S("y", "xa"), 2);
    else set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){ROWS, COLS}, NULL);
    scalar_const(g, "sqrt2", v == BAD_SQRT2 ? 1.5f : 1.4142135f);
    scalar_const(g, "rsqrt2", 0.70710678f);
    scalar_const(g, "half", v == BAD_HALF ? 0.6f : 0.5f);
    scalar_const(g, "one", v == BAD_ONE ? 2.f : 1.f);
    if (v == TANH_POW || v == TANH_MULMUL) {
        scalar_const(g, "three", 3.f);
        scalar_const(g, "c044", 0.044715f);
        scalar_const(g, "s2pi", 0.7978846f);
        if (v == TANH_POW) add_node(g, "Pow", "pow", S("x", "three"), 2, S("x3"), 1);
        else {
            add_node(g, "Mul", "sq", S("x", "x"), 2, S("x2"), 1);
            add_node(g, "Mul", "cube", S("x2", "x"), 2, S("x3"), 1);
        }
        add_node(g, "Mul", "m044", S("c044", "x3"), 2, S("q"), 1);
        add_node(g, "Add", "inner", S("x", "q"), 2, S("r"), 1);
        add_node(g, "Mul", "scale", S("r", "s2pi"), 2, S("s"), 1);
        add_node(g, "Tanh", "tanh", S("s"), 1, S("e"), 1);
        add_node(g, "Add", "plus1", S("e", "one"), 2, S("a"), 1);
        add_node(g, "Mul", "mx", S("x", "a"), 2, S("xa"), 1);
        add_node(g, "Mul", "mhalf", S("xa", "half"), 2, S("y"), 1);
        return m;
    }
    if (v == ERF_MULC_HALF_X_FIRST) {
        add_node(g, "Mul", "h", S("half", "x"), 2, S("h"), 1);
        add_node(g, "Mul", "scale", S("rsqrt2", "x"), 2, S("d"), 1);
        add_node(g, "Erf", "erf", S("d"), 1, S("e"), 1);
        add_node(g, "Add", "plus1", S("one", "e"), 2, S("a"), 1);
        add_node(g, "Mul", "last", S("h", "a"), 2, S("y"), 1);
        return m;
    }
    add_node(g, "Div", "div", S("x", "sqrt2"), 2, S("d"), 1);
    add_node(g, "Erf", "erf", S("d"), 1, S("e"), 1);
    add_node(g, "Add", "plus1", S("e", "one"), 2, S("a"), 1);
    if (v == SHARED_ERF) add_node(g, "Identity", "side", S("e"), 1, S("z"), 1);
    if (v == SHARED_ADD) add_node(g, "Neg", "side", S("a"), 1, S("z"), 1);
    if (v == ERF_DIV_A_HALF) {
        add_node(g, "Mul", "ahalf", S("a", "half"), 2, S("ah"), 1);
        add_node(g, "Mul", "last", S("x", "ah"), 2, S("y"), 1);
    } else {
        add_node(g, "Mul", "mx", S("x", "a"), 2, S("xa"), 1);
        add_node(g, "Mul", "last", S("half", "xa"), 2, S("y"), 1);
    }
    return m;
}

static float *run_model(ir_model *m, bool passes, int threads, const float *x, int rank, const int64_t *dims,
                        uint64_t *count) {
    rt_session_options o = rt_session_options_default();
    o.threads = threads;
    o.run_passes = passes;
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    rt_value in;
    rt_value_init(&in);
    rt_tensor *t = rt_value_as_tensor(&in);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &e), KILN_OK);
    memcpy(t->data, x, t->count * sizeof(float));
    rt_value outs[2];
    const rt_value *ins[] = {&in};
    st = rt_session_run(s, S("x"), ins, 1, outs, &e);
    if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    *count = outs[0].t.count;
    float *y = malloc(outs[0].t.count * sizeof(float));
    assert_non_null(y);
    memcpy(y, outs[0].t.data, outs[0].t.count * sizeof(float));
    for (int32_t i = 0; i < rt_session_n_outputs(s); i++) rt_value_release(&outs[i]);
    rt_value_release(&in);
    rt_session_free(s);
    return y;
}

static void input_values(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = -9.f + 18.f * (float)i / (float)(n - 1);
    x[5] = 0.f;
    x[6] = -0.f;
    x[7] = 1e-20f;
    x[8] = -3e-3f;
}

/* Fused and unfused outputs agree: both are float approximations of the same function */
static void expect_close(const float *a, const float *b, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        double tol = 2e-6 * fabs((double)b[i]) + 1e-6;
        if (!(fabs((double)a[i] - (double)b[i]) <= tol))
            fail_msg("element %llu: fused %.9g, unfused %.9g", (unsigned long long)i, (double)a[i], (double)b[i]);
    }
}

static int count_op(const ir_graph *g, const char *op) {
    int c = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, op)) c++;
    return c;
}

static void check_variant(enum variant v, bool should_fuse) {
    ir_model *m = build(v);
    build_pass_options o = build_pass_options_default();
    build_pass_stats st;
    kiln_error e = {0};
    int32_t before = m->graph->n_nodes;
    assert_int_equal(build_run_passes_stats(m, &o, &st, &e), KILN_OK);
    if (!should_fuse) {
        if (st.gelu_fused != 0) fail_msg("variant %d must not fuse", (int)v);
        assert_int_equal(m->graph->n_nodes, before);
        assert_int_equal(count_op(m->graph, "Gelu"), 0);
        ir_model_free(m);
        return;
    }
    if (st.gelu_fused != 1) fail_msg("variant %d: expected one fusion, got %d", (int)v, st.gelu_fused);
    assert_int_equal(m->graph->n_nodes, 1);
    const ir_node *n = &m->graph->nodes[0];
    assert_string_equal(n->op_type, "Gelu");
    assert_int_equal(n->inputs[0], ir_graph_find(m->graph, "x"));
    assert_int_equal(n->outputs[0], ir_graph_find(m->graph, "y"));
    const ir_attr *ap = ir_node_attr(n, "approximate");
    assert_non_null(ap);
    bool tanh_form = v == TANH_POW || v == TANH_MULMUL;
    assert_memory_equal(ap->s.data, tanh_form ? "tanh" : "none", 4);
    ir_model_free(m);

    /* same outputs as the unfused graph */
    float x[ROWS * COLS];
    input_values(x, ROWS * COLS);
    int64_t dims[2] = {ROWS, COLS};
    uint64_t n1, n2;
    ir_model *ma = build(v), *mb = build(v);
    float *ya = run_model(ma, true, 1, x, 2, dims, &n1);
    float *yb = run_model(mb, false, 1, x, 2, dims, &n2);
    assert_int_equal(n1, n2);
    expect_close(ya, yb, n1);
    free(ya);
    free(yb);
    ir_model_free(ma);
    ir_model_free(mb);
}

static void test_erf_forms_fuse(void **state) {
    (void)state;
    check_variant(ERF_DIV_MUL_X_THEN_HALF, true);
    check_variant(ERF_MULC_HALF_X_FIRST, true);
    check_variant(ERF_DIV_A_HALF, true);
}

static void test_tanh_forms_fuse(void **state) {
    (void)state;
    check_variant(TANH_POW, true);
    check_variant(TANH_MULMUL, true);
}

static void test_near_misses_are_left_alone(void **state) {
    (void)state;
    check_variant(BAD_SQRT2, false);
    check_variant(BAD_HALF, false);
    check_variant(BAD_ONE, false);
    check_variant(SHARED_ERF, false);
    check_variant(SHARED_ADD, false);
    check_variant(PINNED_MUL, false);
}

/* x[4,24] MatMul W[24,40] -> Add(bias[40]) -> erf-form GELU: one MatMul node with
 * kiln_bias and kiln_activation = "Gelu"; output equal to the unfused graph. */
static ir_model *build_ffn(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 24}, NULL);
    float w[24 * 40], b[40];
    for (int i = 0; i < 24 * 40; i++) w[i] = (float)((i * 37) % 29 - 14) / 20.f;
    for (int i = 0; i < 40; i++) b[i] = (float)(i % 7 - 3) / 4.f;
    tensor_const(g, "W", 2, (int64_t[]){24, 40}, w);
    tensor_const(g, "B", 1, (int64_t[]){40}, b);
    scalar_const(g, "sqrt2", 1.4142135f);
    scalar_const(g, "half", 0.5f);
    scalar_const(g, "one", 1.f);
    add_node(g, "MatMul", "mm", S("x", "W"), 2, S("xw"), 1);
    add_node(g, "Add", "bias", S("xw", "B"), 2, S("h"), 1);
    add_node(g, "Div", "div", S("h", "sqrt2"), 2, S("d"), 1);
    add_node(g, "Erf", "erf", S("d"), 1, S("e"), 1);
    add_node(g, "Add", "plus1", S("e", "one"), 2, S("a"), 1);
    add_node(g, "Mul", "mx", S("h", "a"), 2, S("ha"), 1);
    add_node(g, "Mul", "last", S("ha", "half"), 2, S("y"), 1);
    return m;
}

static void test_matmul_bias_gelu_epilogue(void **state) {
    (void)state;
    ir_model *m = build_ffn();
    build_pass_stats st;
    kiln_error e = {0};
    assert_int_equal(build_run_passes_stats(m, NULL, &st, &e), KILN_OK);
    assert_int_equal(st.gelu_fused, 1);
    assert_int_equal(st.residual_fused, 1);
    assert_int_equal(st.activation_fused, 1);
    assert_int_equal(m->graph->n_nodes, 1);
    const ir_node *n = &m->graph->nodes[0];
    assert_string_equal(n->op_type, "MatMul");
    const ir_attr *act = ir_node_attr(n, "kiln_activation");
    assert_non_null(act);
    assert_int_equal((int)act->s.len, 4);
    assert_memory_equal(act->s.data, "Gelu", 4);
    assert_non_null(ir_node_attr(n, "kiln_bias"));
    ir_model_free(m);

    float x[4 * 24];
    for (int i = 0; i < 4 * 24; i++) x[i] = (float)((i * 13) % 17 - 8) / 5.f;
    int64_t dims[2] = {4, 24};
    uint64_t n1, n2;
    ir_model *ma = build_ffn(), *mb = build_ffn();
    float *ya = run_model(ma, true, 1, x, 2, dims, &n1);
    float *yb = run_model(mb, false, 1, x, 2, dims, &n2);
    assert_int_equal(n1, 160);
    assert_int_equal(n1, n2);
    expect_close(ya, yb, n1);
    free(ya);
    free(yb);
    ir_model_free(ma);
    ir_model_free(mb);
}

/* Both vector-math tables (AVX2 when present, and the portable one) against double. */
static void check_gelu_table(const cpu_vmath *vm) {
    static const float edge[] = {0.f,    -0.f,   1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.5f,  -0.5f, 1.f,  -1.f,
                                 2.5f,   -2.5f,  3.9f,   -3.9f,   5.f,   -5.f,   7.5f,  -7.5f, 9.f,  -9.f,
                                 10.5f,  -10.5f, 12.f,   -12.f,   13.f,  -13.f,  14.f,  -14.f, 20.f, -20.f,
                                 100.f,  -100.f, 1e30f,  -1e30f,  3.4e38f, -3.4e38f};
    enum { NE = sizeof edge / sizeof edge[0] };
    int n = NE + 2000;
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    memcpy(x, edge, sizeof edge);
    for (int i = NE; i < n; i++) x[i] = -15.f + 30.f * (float)(i - NE) / 1999.f;
    double worst = check_gelu_values(vm, x, n, NULL);
    printf("%s gelu: worst relative error %.3g over %d values\n", vm->isa, worst, n);
    /* NaN propagates; +inf stays +inf */
    float sp[3] = {NAN, INFINITY, -NAN}, sy[3];
    vm->gelu(sp, sy, 3);
    assert_true(isnan(sy[0]));
    assert_true(isinf(sy[1]) && sy[1] > 0);
    assert_true(isnan(sy[2]));
    /* tanh form: a smooth function of x, against double */
    vm->gelu_tanh(x + NE, y + NE, 2000);
    for (int i = NE; i < n; i++) {
        double v = x[i];
        /* 0.5 v (1 + tanh u) written as v / (1 + e^-2u): no cancellation in double either */
        double r = v / (1.0 + exp(-2.0 * sqrt(2.0 / 3.14159265358979324) * (v + 0.044715 * v * v * v)));
        /* 1e-5: u = 0.798 (x + 0.044715 x^3) rounded to float moves e^-2u by up to 2|u| ulp */
        if (!(fabs((double)y[i] - r) <= 1e-5 * fabs(r) + 1e-30))
            fail_msg("%s gelu_tanh(%.9g) = %.9g, reference %.9g", vm->isa, v, (double)y[i], r);
    }
    free(x);
    free(y);
}

static void test_gelu_kernel_accuracy(void **state) {
    (void)state;
    check_each_gelu_table(check_gelu_table);
}

/* The GELU epilogue of the packed GEMM on edge values: C = A * ones(1 x N) puts each edge
 * value in a whole row, so every value goes through the full-tile path (kernel store, then
 * gelu_tile), the partial-row tile (store_tile) and the partial-width columns
 * (cpu_epilogue_apply): N = 20 = 16 + 4, M = 39 (6 full panels and a 3-row one). */
static void test_gelu_epilogue_edges(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA, the packed GEMM (and its GELU epilogue) is not used\n");
        return;
    }
    static const float edge[] = {0.f,   -0.f,  1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.5f,  -0.5f,  1.f,   -1.f,
                                 2.5f,  -2.5f, 3.9f,   -3.9f,   5.f,   -5.f,   7.5f,  -7.5f,  9.f,   -9.f,
                                 10.5f, -10.5f, 12.f,  -12.f,   13.f,  -13.f,  14.f,  -14.f,  20.f,  -20.f,
                                 100.f, -100.f, 1e30f, -1e30f,  NAN,   INFINITY, -3.f, 0.125f, -0.125f};
    enum { M = sizeof edge / sizeof edge[0], N = 20 };
    float ones[N], C[M * N];
    for (int j = 0; j < N; j++) ones[j] = 1.f;
    for (int k = 0; k < 2; k++) {
        cpu_gemm_packed pb;
        cpu_gemm_scratch sc = {0};
        kiln_error e = {0};
        assert_int_equal(cpu_gemm_pack_b(ones, N, 1, N, &pb, &e), KILN_OK);
        cpu_epilogue ep;
        memset(&ep, 0, sizeof ep);
        ep.act.kind = k ? CPU_ACT_GELU_TANH : CPU_ACT_GELU;
        for (int i = 0; i < M * N; i++) C[i] = -1.f;
        assert_int_equal(cpu_sgemm_packed(NULL, M, N, 1, NULL, edge, 1, &pb, NULL, 0, C, N, &ep, &sc, &e), KILN_OK);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double x = edge[i], y = C[i * N + j];
                if (isnan(x)) {
                    if (!isnan(y)) fail_msg("gelu(NaN) gave %g at column %d", y, j);
                    continue;
                }
                if (isinf(x)) {
                    if (!(isinf(y) && y > 0)) fail_msg("gelu(+inf) gave %g at column %d", y, j);
                    continue;
                }
                double r = k ? x / (1.0 + exp(-2.0 * sqrt(2.0 / 3.14159265358979324) * (x + 0.044715 * x * x * x)))
                             : ref_gelu(x);
                double tol = k ? 1e-5 * fabs(r) + 1e-30 : 1e-6 * fabs(r) + 1e-30;
                if (!(fabs(y - r) <= tol))
                    fail_msg("%s epilogue: gelu(%.9g) = %.9g at column %d, reference %.9g", k ? "tanh" : "erf", x, y, j,
                             r);
            }
        cpu_gemm_packed_free(&pb);
        cpu_gemm_scratch_free(&sc);
    }
}

/* The standalone Gelu op (opset 20) on 1 and 2 threads: bit-identical outputs. */
static ir_model *build_gelu_op(int64_t rows, int64_t cols) {
    ir_model *m = new_model();
    m->opsets[0].version = 20;
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){rows, cols}, NULL);
    ir_node *n = add_node(g, "Gelu", "gelu", S("x"), 1, S("y"), 1);
    n->opset = 20;
    return m;
}

static void test_gelu_op_threads_identical(void **state) {
    (void)state;
    int64_t dims[2] = {37, 1001}; /* 37037 elements: several 4096-element chunks and a tail */
    int64_t n = dims[0] * dims[1];
    float *x = malloc((size_t)n * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = -8.f + 16.f * (float)((i * 7919) % n) / (float)n;
    uint64_t n1, n2;
    ir_model *ma = build_gelu_op(dims[0], dims[1]), *mb = build_gelu_op(dims[0], dims[1]);
    float *ya = run_model(ma, false, 1, x, 2, dims, &n1);
    float *yb = run_model(mb, false, 2, x, 2, dims, &n2);
    assert_int_equal(n1, (uint64_t)n);
    assert_int_equal(n2, (uint64_t)n);
    assert_memory_equal(ya, yb, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i += 997) {
        double r = ref_gelu((double)x[i]);
        assert_true(fabs((double)ya[i] - r) <= 1e-6 * fabs(r) + 1e-30);
    }
    free(x);
    free(ya);
    free(yb);
    ir_model_free(ma);
    ir_model_free(mb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_erf_forms_fuse),
        cmocka_unit_test(test_tanh_forms_fuse),
        cmocka_unit_test(test_near_misses_are_left_alone),
        cmocka_unit_test(test_matmul_bias_gelu_epilogue),
        cmocka_unit_test(test_gelu_kernel_accuracy),
        cmocka_unit_test(test_gelu_epilogue_edges),
        cmocka_unit_test(test_gelu_op_threads_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
