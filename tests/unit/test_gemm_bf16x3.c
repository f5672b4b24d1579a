/* test_gemm_bf16x3.c - the AMX bf16x3 GEMM (cpu_gemm_bf16x3.h) against a double-precision
 * reference: shapes whose M, N and K are not multiples of the 32x32 block or the 32-deep
 * chunk, every epilogue kind the MatMul kernel fuses, 1 and 2 pool threads; the error
 * must stay inside the bound the header promises (far below one bfloat16 product's), so a
 * dropped lo term fails. Also the bfloat16 rounding and split of special values, and the
 * conv form (1x1 and padded, strided, dilated 3x3) over NCHW and C16 inputs, outputs and
 * residuals, including a conv split block by block as its tasks run. The GEMM cases skip,
 * with a printed reason, where AMX cannot run.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "backends/cpu/cpu_c16.h"
#include "backends/cpu/cpu_gemm_bf16x3.h"
#include "backends/cpu/cpu_kernel.h"

#include "kernel_harness.h"

static void test_bf16_round(void **state) {
    (void)state;
    assert_int_equal(cpu_bf16_round(1.0f), 0x3f80);
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1) */
    assert_int_equal(cpu_bf16_round(1.00390625f), 0x3f80);
    /* just above the tie rounds up */
    assert_int_equal(cpu_bf16_round(nextafterf(1.00390625f, 2.0f)), 0x3f81);
    /* 1 + 3 * 2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6: to even (up) */
    assert_int_equal(cpu_bf16_round(1.01171875f), 0x3f82);
    assert_int_equal(cpu_bf16_round(-2.0f), 0xc000);
    assert_int_equal(cpu_bf16_round(INFINITY), 0x7f80);
    assert_int_equal(cpu_bf16_round(-INFINITY), 0xff80);
    uint16_t n = cpu_bf16_round(NAN);
    assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0); /* still a NaN */
    assert_int_equal(cpu_bf16_round(3.4e38f), 0x7f80);   /* rounds past the largest bfloat16 */
    assert_true(cpu_bf16_to_float(0x3f80) == 1.0f);
}

/* A constant B whose elements are special: a packed element must be hi + lo of it. */
static void test_pack_splits_values(void **state) {
    (void)state;
    const float vals[] = {1.0f, 0.1f, -3.14159265f, 1e-30f, 3.4e38f, INFINITY, -INFINITY, 0.0f};
    const int64_t K = 2, N = 4;
    cpu_bf16x3_b b;
    kiln_error err = {0};
    assert_int_equal(cpu_bf16x3_pack_b(vals, N, K, N, false, &b, &err), KILN_OK);
    assert_int_equal(b.n_chunks, 1);
    assert_int_equal(b.n_strips, 2); /* one strip of 16 columns, padded to a pair */
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
            float x = vals[k * N + n];
            const uint16_t *t = b.data + (k / 2) * 32 + n * 2 + k % 2;
            float hi = cpu_bf16_to_float(t[0]), lo = cpu_bf16_to_float(t[512]);
            if (isinf(x)) {
                assert_true(hi == x && lo == 0.f);
                continue;
            }
            assert_true(isfinite(hi)); /* 3.4e38 is truncated, not rounded to infinity */
            double err_rel = fabs(((double)hi + lo) - x) / (fabs(x) > 0 ? fabs(x) : 1);
            if (!(err_rel <= 1.0 / (1 << 16)))
                fail_msg("B[%lld][%lld] = %g split into %g + %g", (long long)k, (long long)n, (double)x, (double)hi,
                         (double)lo);
        }
    /* padding columns and the second strip are zero */
    for (int i = 0; i < 1024; i++) assert_int_equal(b.data[1024 + i], 0);
    cpu_bf16x3_b_free(&b);
}

static float *rand_buf(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* One GEMM against act(A*B + bias + residual) in double. The bound: each of the K
 * products is off by at most ~3 * 2^-17 of |a||b| (cpu_gemm_bf16x3.h), so the sum by at
 * most 2.5e-5 * sum |a||b|, plus float32 rounding of the sums. */
static void check_one(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, int ep_kind) {
    float *A = rand_buf(M * K), *B = rand_buf(K * N), *bias = rand_buf(M > N ? M : N), *res = rand_buf(M * N);
    float *C = malloc((size_t)(M * N) * sizeof(float));
    assert_non_null(C);
    for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* write-only: garbage must not leak */
    cpu_epilogue ep = {0};
    if (ep_kind == 1) { /* bias per column + residual (BERT's projections) */
        ep.bias_mode = CPU_BIAS_COL;
        ep.bias = bias;
        ep.residual = res;
        ep.ld_res = N;
    } else if (ep_kind == 2) { /* bias + ReLU */
        ep.bias_mode = CPU_BIAS_COL;
        ep.bias = bias;
        ep.act.kind = CPU_ACT_RELU;
    } else if (ep_kind == 3) { /* residual + tanh */
        ep.residual = res;
        ep.ld_res = N;
        ep.act.kind = CPU_ACT_TANH;
    } else if (ep_kind == 4) { /* bias per row */
        ep.bias_mode = CPU_BIAS_ROW;
        ep.bias = bias;
    }
    cpu_bf16x3_b b;
    cpu_gemm_scratch scratch = {0};
    kiln_error err = {0};
    assert_int_equal(cpu_bf16x3_pack_b(B, N, K, N, false, &b, &err), KILN_OK);
    assert_int_equal(cpu_sgemm_bf16x3(pool, M, N, K, A, K, &b, C, N, ep_kind ? &ep : NULL, &scratch, &err), KILN_OK);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                acc += (double)A[i * K + k] * B[k * N + j];
                mag += fabs((double)A[i * K + k] * B[k * N + j]);
            }
            if (ep.bias_mode == CPU_BIAS_COL) acc += bias[j];
            if (ep.bias_mode == CPU_BIAS_ROW) acc += bias[i];
            if (ep.residual) acc += res[i * N + j];
            if (ep.act.kind == CPU_ACT_RELU) acc = acc > 0 ? acc : 0;
            if (ep.act.kind == CPU_ACT_TANH) acc = tanh(acc);
            double got = C[i * N + j], tol = 2.5e-5 * mag + 1e-6 * fabs(acc) + 1e-6;
            double e = fabs(got - acc);
            if (ep_kind == 0 && mag > 0.1 && e / mag > worst) worst = e / mag;
            if (!(e <= tol))
                fail_msg("M=%lld N=%lld K=%lld ep=%d: C[%lld][%lld] = %.9g, reference %.9g (bound %.3g)", (long long)M,
                         (long long)N, (long long)K, ep_kind, (long long)i, (long long)j, got, acc, tol);
        }
    /* one-pass bfloat16 is off by up to ~2^-8 of the magnitude (typically a tenth of
     * that): the lo terms are there */
    if (!(worst < 2e-5)) fail_msg("M=%lld N=%lld K=%lld: worst error %.3g of sum |a||b|", (long long)M, (long long)N,
                                  (long long)K, worst);
    cpu_bf16x3_b_free(&b);
    cpu_gemm_scratch_free(&scratch);
    free(A);
    free(B);
    free(bias);
    free(res);
    free(C);
}

static void run_shapes(cpu_threadpool *pool) {
    /* 1-row and 1-column products, K below one chunk, edges of every kind, several m-blocks
     * (K = 8192: 32 rows a block, so M = 70 makes three) and many strip pairs (N = 700) */
    static const int64_t shapes[][3] = {{1, 1, 1},   {5, 3, 7},    {32, 32, 32}, {33, 31, 33}, {64, 96, 64},
                                        {37, 70, 100}, {128, 48, 768}, {70, 17, 8192}, {40, 700, 65}, {96, 64, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int e = 0; e < 5; e++) check_one(pool, shapes[s][0], shapes[s][1], shapes[s][2], e);
}

static void test_gemm_vs_reference(void **state) {
    (void)state;
    if (!cpu_bf16x3_usable()) {
        printf("skipped: AMX-BF16 cannot run here (no AMX in this CPU or its OS, KILN_NO_AMX=1, or a compiler "
               "without AMX support); engines then keep their MatMuls on FP32\n");
        return;
    }
    run_shapes(NULL);
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    run_shapes(pool);
    cpu_threadpool_free(pool);
}

/* NaN in A reaches exactly its row of C, as in FP32 */
static void test_nan_propagates(void **state) {
    (void)state;
    if (!cpu_bf16x3_usable()) {
        printf("skipped: AMX-BF16 cannot run here\n");
        return;
    }
    const int64_t M = 40, N = 40, K = 40;
    float *A = rand_buf(M * K), *B = rand_buf(K * N), *C = malloc(M * N * sizeof(float));
    A[7 * K + 3] = NAN;
    cpu_bf16x3_b b;
    cpu_gemm_scratch scratch = {0};
    kiln_error err = {0};
    assert_int_equal(cpu_bf16x3_pack_b(B, N, K, N, false, &b, &err), KILN_OK);
    assert_int_equal(cpu_sgemm_bf16x3(NULL, M, N, K, A, K, &b, C, N, NULL, &scratch, &err), KILN_OK);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) assert_true(i == 7 ? isnan(C[i * N + j]) : isfinite(C[i * N + j]));
    cpu_bf16x3_b_free(&b);
    cpu_gemm_scratch_free(&scratch);
    free(A);
    free(B);
    free(C);
}

/* Convs over an HxW image, batch 2 (so rows span images and the last block is partial):
 * 1x1 stride 2, 3x3 stride 1 pad 1, 3x3 stride 2 pad 1 dilation 2 on 9x7; every
 * combination of NCHW / C16 for x, y and the residual, against a double reference with
 * bias and ReLU. A 3x3 on 40x36 has 2880 rows of K = 432 (5 MB split, more than an L2),
 * five m-blocks of 576 rows: on one thread each is split by the task that runs it (the
 * split-as-you-go path), one spanning both images, one starting inside the second. */
static int64_t c16_index(int64_t c, int64_t p, int64_t n_pos) { return ((c / 16) * n_pos + p) * 16 + c % 16; }

static void check_conv(int64_t H, int64_t W, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
    const int64_t N = 2, C = 48, M = 32, IS = H * W, taps = k * k, K = C * taps;
    const int64_t OH = (H + 2 * pad - dil * (k - 1) - 1) / stride + 1, OW = (W + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    const int64_t OS = OH * OW;
    float *x = rand_buf(N * C * IS), *w = rand_buf(M * C * taps), *bias = rand_buf(M), *res = rand_buf(N * M * OS);
    float *xin = malloc(sizeof(float) * N * C * IS), *rin = malloc(sizeof(float) * N * M * OS);
    float *y = malloc(sizeof(float) * N * M * OS), *wr = malloc(sizeof(float) * M * K);
    cpu_conv_geom g = {0};
    g.nsp = 2;
    g.in[0] = H, g.in[1] = W, g.out[0] = OH, g.out[1] = OW, g.k[0] = g.k[1] = k, g.stride[0] = g.stride[1] = stride;
    g.dil[0] = g.dil[1] = dil, g.pad0[0] = g.pad0[1] = g.pad1[0] = g.pad1[1] = pad;
    g.in_size = IS, g.out_size = OS, g.k_size = taps;
    for (int64_t m = 0; m < M; m++) /* [M][C][taps] -> [M][taps][C], as cpu_conv.c packs */
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < taps; t++) wr[m * K + t * C + c] = w[(m * C + c) * taps + t];
    cpu_bf16x3_b b;
    cpu_gemm_scratch scratch = {0};
    kiln_error err = {0};
    assert_int_equal(cpu_bf16x3_pack_b(wr, K, K, M, true, &b, &err), KILN_OK);
    for (unsigned layout = 0; layout < 8; layout++) {
        for (int64_t n = 0; n < N; n++) {
            for (int64_t c = 0; c < C; c++)
                for (int64_t p = 0; p < IS; p++)
                    xin[n * C * IS + ((layout & CPU_C16_X) ? c16_index(c, p, IS) : c * IS + p)] = x[(n * C + c) * IS + p];
            for (int64_t m = 0; m < M; m++)
                for (int64_t p = 0; p < OS; p++)
                    rin[n * M * OS + ((layout & CPU_C16_RES) ? c16_index(m, p, OS) : m * OS + p)] =
                        res[(n * M + m) * OS + p];
        }
        cpu_epilogue ep = {.bias_mode = CPU_BIAS_COL, .bias = bias, .residual = rin, .act = {.kind = CPU_ACT_RELU}};
        assert_int_equal(cpu_conv_bf16x3(NULL, &g, N, C, M, xin, &b, y, &ep, layout, &scratch, &err), KILN_OK);
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t p = 0; p < OS; p++) {
                    double acc = bias[m] + res[(n * M + m) * OS + p], mag = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t t = 0; t < taps; t++) {
                            int64_t ih = (p / OW) * stride - pad + (t / k) * dil, iw = (p % OW) * stride - pad + (t % k) * dil;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            double v = (double)w[(m * C + c) * taps + t] * x[(n * C + c) * IS + ih * W + iw];
                            acc += v;
                            mag += fabs(v);
                        }
                    acc = acc > 0 ? acc : 0;
                    float got = y[n * M * OS + ((layout & CPU_C16_Y) ? c16_index(m, p, OS) : m * OS + p)];
                    if (!(fabs(got - acc) <= 2.5e-5 * mag + 1e-6))
                        fail_msg("%lldx%lld/%lld pad %lld dil %lld, layout %u: y[%lld][%lld][%lld] = %.9g, reference %.9g",
                                 (long long)k, (long long)k, (long long)stride, (long long)pad, (long long)dil, layout,
                                 (long long)n, (long long)m, (long long)p, (double)got, acc);
                }
    }
    cpu_bf16x3_b_free(&b);
    cpu_gemm_scratch_free(&scratch);
    free(x);
    free(w);
    free(wr);
    free(bias);
    free(res);
    free(xin);
    free(rin);
    free(y);
}

static void test_conv_layouts(void **state) {
    (void)state;
    if (!cpu_bf16x3_usable()) {
        printf("skipped: AMX-BF16 cannot run here\n");
        return;
    }
    check_conv(9, 7, 1, 2, 0, 1);
    check_conv(9, 7, 3, 1, 1, 1);
    check_conv(9, 7, 3, 2, 1, 2);
    check_conv(40, 36, 3, 1, 1, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_round),
        cmocka_unit_test(test_pack_splits_values),
        cmocka_unit_test(test_gemm_vs_reference),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_conv_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
