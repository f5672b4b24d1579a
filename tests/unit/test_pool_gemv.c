/* test_pool_gemv.c - the glue kernels around ResNet's convolutions against naive
 * references written here: the separable 2-D MaxPool fast path (cpu_pool.c,
 * cpu_pool_avx2.c) over pads, strides, dilations, ceil_mode, odd sizes and NaNs, with the
 * AVX2 and the portable row kernels; the few-row GEMV path of Gemm/MatMul (cpu_gemv*.c)
 * and Gemm's packed constant-weight path, M = 1..8, N not a multiple of 8/16, transB both
 * ways, alpha, bias, residual and activation marks. Every group runs inline and on a
 * 2-thread pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"

#include "kernel_harness.h"

/* Runs op once per fresh node state and again with the state kept (packed weights);
 * inputs marked in const_mask are initializers of the node's graph (cpu_input_is_const). */
static void run_node(const char *op, ir_attr *attrs, int32_t n_attrs, rt_value *in, int32_t n_in,
                     uint32_t const_mask, rt_value *out) {
    int32_t in_ids[6] = {0, 1, 2, 3, 4, 5}, out_ids[1] = {6};
    ir_tensor dummy;
    memset(&dummy, 0, sizeof dummy);
    ir_value vals[7];
    memset(vals, 0, sizeof vals);
    for (int32_t i = 0; i < n_in; i++)
        if (const_mask & (1u << i)) vals[i].init = &dummy;
    ir_graph graph;
    memset(&graph, 0, sizeof graph);
    graph.values = vals;
    graph.n_values = 7;
    ir_node node;
    memset(&node, 0, sizeof node);
    node.name = "glue";
    node.op_type = op;
    node.domain = "";
    node.opset = 17;
    node.attrs = attrs;
    node.n_attrs = n_attrs;
    node.n_inputs = n_in;
    node.inputs = in_ids;
    node.n_outputs = 1;
    node.outputs = out_ids;
    void *state = NULL;
    void (*state_free)(void *) = NULL;
    kiln_error err = {0};
    cpu_kernel_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.node = &node;
    ctx.graph = &graph;
    ctx.pool = test_pool;
    ctx.err = &err;
    ctx.state = &state;
    ctx.state_free = &state_free;
    const rt_value *ins[6];
    for (int32_t i = 0; i < n_in; i++) ins[i] = &in[i];
    cpu_kernel_fn fn = cpu_kernel_find("", op, 17);
    assert_non_null(fn);
    rt_value_init(out);
    kiln_status st = fn(&ctx, ins, n_in, out, 1);
    if (st != KILN_OK) fail_msg("%s failed: %s", op, kiln_err_msg(&err));
    rt_value again;
    rt_value_init(&again);
    assert_int_equal(fn(&ctx, ins, n_in, &again, 1), KILN_OK);
    assert_memory_equal(again.t.data, out->t.data, out->t.nbytes);
    rt_value_release(&again);
    if (state && state_free) state_free(state);
}

/* ---- MaxPool ------------------------------------------------------------------------- */

typedef struct mp_case {
    int64_t H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, ceil;
} mp_case;

static int64_t mp_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1, int64_t ceil_mode) {
    int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + p0) o--; /* last window must start inside */
    return o;
}

/* the definition: the maximum over the window's valid positions, NaN when one is NaN,
 * -inf when the window lies entirely in the padding */
static float mp_ref(const float *x, const mp_case *c, int64_t oh, int64_t ow) {
    float acc = -INFINITY;
    bool any = false;
    for (int64_t a = 0; a < c->kh; a++)
        for (int64_t b = 0; b < c->kw; b++) {
            int64_t ih = oh * c->sh - c->pt + a * c->dh, iw = ow * c->sw - c->pl + b * c->dw;
            if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
            float v = x[ih * c->W + iw];
            if (isnan(v)) return NAN;
            if (!any || v > acc) acc = v;
            any = true;
        }
    return acc;
}

static void check_maxpool(const mp_case *c, int64_t N, int64_t C, bool with_nan) {
    int64_t dims[4] = {N, C, c->H, c->W};
    rt_value x, y;
    mk(&x, 4, dims);
    float *X = x.t.data;
    if (with_nan)
        for (uint64_t i = 0; i < x.t.count; i += 7) X[i] = NAN;
    int64_t ks[2] = {c->kh, c->kw}, ss[2] = {c->sh, c->sw}, ds[2] = {c->dh, c->dw};
    int64_t pads[4] = {c->pt, c->pl, c->pb, c->pr};
    ir_attr at[5] = {a_ints("kernel_shape", 2, ks), a_ints("strides", 2, ss), a_ints("dilations", 2, ds),
                     a_ints("pads", 4, pads), a_int("ceil_mode", c->ceil)};
    run_node("MaxPool", at, 5, &x, 1, 0, &y);
    int64_t OH = mp_out(c->H, c->kh, c->sh, c->dh, c->pt, c->pb, c->ceil);
    int64_t OW = mp_out(c->W, c->kw, c->sw, c->dw, c->pl, c->pr, c->ceil);
    assert_int_equal(y.t.rank, 4);
    assert_int_equal(y.t.dims[2], OH);
    assert_int_equal(y.t.dims[3], OW);
    const float *Y = y.t.data;
    for (int64_t p = 0; p < N * C; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float want = mp_ref(X + p * c->H * c->W, c, oh, ow), got = Y[(p * OH + oh) * OW + ow];
                bool same = isnan(want) ? isnan(got) : got == want;
                if (!same)
                    fail_msg("MaxPool %lldx%lld k%lldx%lld s%lldx%lld d%lldx%lld pads %lld,%lld,%lld,%lld ceil %lld: "
                             "plane %lld (%lld, %lld): got %g, want %g",
                             (long long)c->H, (long long)c->W, (long long)c->kh, (long long)c->kw, (long long)c->sh,
                             (long long)c->sw, (long long)c->dh, (long long)c->dw, (long long)c->pt, (long long)c->pl,
                             (long long)c->pb, (long long)c->pr, (long long)c->ceil, (long long)p, (long long)oh,
                             (long long)ow, got, want);
            }
    rt_value_release(&x);
    rt_value_release(&y);
}

static const mp_case mp_cases[] = {
    /* ResNet's stem pool, smaller plane */
    {56, 56, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0},
    {112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0}, /* the stem pool's plane: 56 outputs, 3 vectors of 16 + a shifted one */
    {9, 77, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0},    /* stride 1, a shifted last vector */
    {57, 61, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0},
    {57, 61, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, /* ceil_mode, odd sizes */
    {33, 47, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0},
    {33, 47, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0}, /* stride 1 */
    {40, 45, 5, 3, 1, 2, 2, 1, 2, 0, 3, 1, 0}, /* dilated rows, asymmetric pads */
    {40, 45, 3, 4, 2, 2, 2, 3, 1, 2, 1, 2, 1}, /* dilated columns, ceil */
    {31, 50, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1}, /* stride 3 (scalar interior) */
    {9, 9, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 0},   /* window wider than most rows */
    {5, 70, 1, 1, 1, 2, 1, 1, 0, 0, 0, 0, 0},  /* 1x1 window */
    {3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0},   /* tiny plane: no interior */
    {20, 35, 2, 3, 2, 2, 1, 1, 1, 2, 1, 2, 0}, /* pads as large as allowed */
};

static void test_maxpool_fast_path(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof mp_cases / sizeof mp_cases[0]; i++) check_maxpool(&mp_cases[i], 2, 3, false);
}

static void test_maxpool_nan_order(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof mp_cases / sizeof mp_cases[0]; i++) check_maxpool(&mp_cases[i], 1, 2, true);
}

/* the portable row kernels (no AVX2) and the AVX2 ones on an AVX-512 machine must give
 * the same answers */
static void test_maxpool_scalar_isa(void **st) {
    (void)st;
    static const char *const caps[] = {"scalar", "avx2"};
    for (int c = 0; c < 2; c++) {
        setenv("KILN_CPU_ISA", caps[c], 1);
        for (size_t i = 0; i < sizeof mp_cases / sizeof mp_cases[0]; i++) {
            check_maxpool(&mp_cases[i], 1, 3, false);
            check_maxpool(&mp_cases[i], 1, 1, true);
        }
    }
    unsetenv("KILN_CPU_ISA");
}

/* ---- Gemm / MatMul with few rows ---------------------------------------------------- */

static void ref_dense(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B, bool tb,
                      const float *bias, const float *res, bool relu, float *C) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += (double)A[i * K + k] * (tb ? B[j * K + k] : B[k * N + j]);
            double v = alpha * s + (bias ? bias[j] : 0.) + (res ? res[i * N + j] : 0.);
            C[i * N + j] = (float)(relu && v < 0 ? 0. : v);
        }
}

static const int64_t gemv_M[] = {1, 2, 3, 4, 5, 8};
static const int64_t gemv_NK[][2] = {{1, 1}, {7, 9}, {13, 8}, {17, 300}, {45, 64}, {100, 257}};

/* Gemm(A, B, C) with C a 1-D bias, optionally a fused residual (input 3) and Relu */
static void test_gemm_few_rows(void **st) {
    (void)st;
    for (size_t mi = 0; mi < sizeof gemv_M / sizeof gemv_M[0]; mi++)
        for (size_t si = 0; si < sizeof gemv_NK / sizeof gemv_NK[0]; si++)
            for (int v = 0; v < 8; v++) {
                bool tb = v & 1, marks = v & 2, scaled = v & 4;
                int64_t M = gemv_M[mi], N = gemv_NK[si][0], K = gemv_NK[si][1];
                int64_t ad[2] = {M, K}, bd[2] = {tb ? N : K, tb ? K : N}, cd[1] = {N}, rd[2] = {M, N};
                rt_value in[4], y;
                mk(&in[0], 2, ad);
                mk(&in[1], 2, bd);
                mk(&in[2], 1, cd);
                mk(&in[3], 2, rd);
                float alpha = scaled ? 0.5f : 1.f;
                ir_attr at[5] = {a_int("transB", tb), a_float("alpha", alpha), a_int("kiln_residual", 3),
                                 a_str("kiln_activation", "Relu")};
                /* B constant: the packed path for M > 4 (alpha 1) */
                run_node("Gemm", at, marks ? 4 : 2, in, marks ? 4 : 3, 0x2, &y);
                float *want = malloc(sizeof(float) * (size_t)(M * N));
                ref_dense(M, N, K, alpha, in[0].t.data, in[1].t.data, tb, in[2].t.data,
                          marks ? in[3].t.data : NULL, marks, want);
                assert_int_equal(y.t.dims[0], M);
                assert_int_equal(y.t.dims[1], N);
                expect_close(y.t.data, want, (uint64_t)(M * N), 1e-4f);
                free(want);
                rt_value_release(&y);
                for (int i = 0; i < 4; i++) rt_value_release(&in[i]);
            }
}

/* Gemm with a non-constant B and with beta / 2-D C: paths around the fast ones */
static void test_gemm_few_rows_other_c(void **st) {
    (void)st;
    int64_t M = 2, N = 19, K = 33;
    for (int tb = 0; tb < 2; tb++) {
        int64_t ad[2] = {M, K}, bd[2] = {tb ? N : K, tb ? K : N}, cd[2] = {M, N};
        rt_value in[3], y;
        mk(&in[0], 2, ad);
        mk(&in[1], 2, bd);
        mk(&in[2], 2, cd);
        ir_attr at[2] = {a_int("transB", tb), a_float("beta", 0.25f)};
        run_node("Gemm", at, 2, in, 3, 0, &y);
        float want[2 * 19];
        ref_dense(M, N, K, 1.f, in[0].t.data, in[1].t.data, tb, NULL, NULL, false, want);
        const float *Cm = in[2].t.data;
        for (int64_t i = 0; i < M * N; i++) want[i] += 0.25f * Cm[i];
        expect_close(y.t.data, want, (uint64_t)(M * N), 1e-4f);
        rt_value_release(&y);
        for (int i = 0; i < 3; i++) rt_value_release(&in[i]);
    }
}

/* MatMul [b, m, K] x [K, N] with b*m <= 4 (the GEMV path) and above, kiln_bias + Relu */
static void test_matmul_few_rows(void **st) {
    (void)st;
    static const int64_t bm[][2] = {{1, 1}, {2, 1}, {1, 3}, {2, 2}, {1, 5}, {3, 2}};
    for (size_t bi = 0; bi < sizeof bm / sizeof bm[0]; bi++)
        for (size_t si = 0; si < sizeof gemv_NK / sizeof gemv_NK[0]; si++)
            for (int marks = 0; marks < 2; marks++)
                for (int is_const = 0; is_const < 2; is_const++) {
                    int64_t Bt = bm[bi][0], M = bm[bi][1], N = gemv_NK[si][0], K = gemv_NK[si][1];
                    int64_t ad[3] = {Bt, M, K}, bd[2] = {K, N}, cd[1] = {N};
                    rt_value in[3], y;
                    mk(&in[0], 3, ad);
                    mk(&in[1], 2, bd);
                    mk(&in[2], 1, cd);
                    ir_attr at[2] = {a_int("kiln_bias", 2), a_str("kiln_activation", "Relu")};
                    run_node("MatMul", at, marks ? 2 : 0, in, marks ? 3 : 2, is_const ? 0x2 : 0, &y);
                    float *want = malloc(sizeof(float) * (size_t)(Bt * M * N));
                    ref_dense(Bt * M, N, K, 1.f, in[0].t.data, in[1].t.data, false, marks ? in[2].t.data : NULL,
                              NULL, marks, want);
                    assert_int_equal(y.t.rank, 3);
                    assert_int_equal(y.t.dims[2], N);
                    expect_close(y.t.data, want, (uint64_t)(Bt * M * N), 1e-4f);
                    free(want);
                    rt_value_release(&y);
                    for (int i = 0; i < 3; i++) rt_value_release(&in[i]);
                }
}

/* ---- groups -------------------------------------------------------------------------- */

static int use_pool(void **st) {
    (void)st;
    kiln_error err = {0};
    return cpu_threadpool_create(2, &test_pool, &err) == KILN_OK ? 0 : -1;
}
static int drop_pool(void **st) {
    (void)st;
    cpu_threadpool_free(test_pool);
    test_pool = NULL;
    return 0;
}

#define GLUE_TESTS                                                                                            \
    cmocka_unit_test(test_maxpool_fast_path), cmocka_unit_test(test_maxpool_nan_order),                      \
        cmocka_unit_test(test_maxpool_scalar_isa), cmocka_unit_test(test_gemm_few_rows),                      \
        cmocka_unit_test(test_gemm_few_rows_other_c), cmocka_unit_test(test_matmul_few_rows)

int main(void) {
    const struct CMUnitTest inline_tests[] = {GLUE_TESTS};
    const struct CMUnitTest pooled_tests[] = {GLUE_TESTS};
    int fails = cmocka_run_group_tests_name("pool/gemv kernels, inline", inline_tests, NULL, NULL);
    fails += cmocka_run_group_tests_name("pool/gemv kernels, 2-thread pool", pooled_tests, use_pool, drop_pool);
    return fails;
}
