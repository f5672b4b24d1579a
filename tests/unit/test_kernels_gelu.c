/* test_kernels_gelu.c - the erf-form GELU kernels (cpu_gelu_avx2.h: the Gelu operator's
 * vector table and the packed GEMM's fused epilogue) against a double-precision reference:
 *   - a dense sweep over [-14, 14] (every 1024th float by bit pattern on each side, about
 *     2.1 million values, plus an even grid and the neighbourhoods of the clamp at +-12 and
 *     of 0): relative error below 1e-6 wherever |gelu(x)| > 1e-30, absolute error at most
 *     1e-30 elsewhere;
 *   - special values: NaN stays NaN, +inf gives +inf, -inf gives NaN (the unfused graph's
 *     -inf * 0), large positive x gives x exactly, large negative x gives 0;
 *   - the MatMul epilogue (bias + Gelu fused into the packed GEMM, through full tiles,
 *     partial-row tiles and partial-width columns) is bit-identical to the Gelu operator
 *     applied to the same pre-activations, so fusing the activation changes no result.
 * test_fuse_gelu.c covers the pattern pass and coarser checks of the same kernels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "gelu_ref.h"

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static uint32_t to_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* The sweep's inputs: see the file comment. */
static float *sweep_values(int64_t *count) {
    const uint32_t top = to_bits(14.f), stride = 1024;
    enum { GRID = 280001, NEAR = 64 };
    const float centres[] = {12.f, -12.f, 0.f, 1.f, -1.f, 11.5f, -11.5f};
    int64_t n_bits = (int64_t)(top / stride + 1) * 2;
    int64_t cap = n_bits + GRID + (int64_t)(sizeof centres / sizeof centres[0]) * 2 * NEAR;
    float *x = malloc((size_t)cap * sizeof(float));
    assert_non_null(x);
    int64_t n = 0;
    for (uint32_t b = 0; b <= top; b += stride) {
        x[n++] = from_bits(b);
        x[n++] = from_bits(b | 0x80000000u);
    }
    for (int i = 0; i < GRID; i++) x[n++] = -14.f + 28.f * (float)i / (float)(GRID - 1);
    for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++) {
        float up = centres[c], down = centres[c];
        for (int i = 0; i < NEAR; i++) {
            x[n++] = up = nextafterf(up, INFINITY);
            x[n++] = down = nextafterf(down, -INFINITY);
        }
    }
    assert_true(n <= cap);
    *count = n;
    return x;
}

static void check_accuracy(const cpu_vmath *vm) {
    int64_t n;
    float *x = sweep_values(&n);
    double worst_x, worst = check_gelu_values(vm, x, n, &worst_x);
    printf("%s gelu: worst relative error %.3g (at x = %.9g) over %lld values in [-14, 14]\n", vm->isa, worst, worst_x,
           (long long)n);
    free(x);
}

/* masked: the table documents gelu(x) = 0 exactly for x < -12 (the AVX2 one); the
 * portable one returns the tiny true value there. */
static void check_special(const cpu_vmath *vm, bool masked) {
    const float big[] = {12.f, 12.5f, 13.f, 14.f, 20.f, 100.f, 1e10f, 1e30f, 3.4e38f};
    enum { NB = sizeof big / sizeof big[0] };
    float x[NB * 2 + 5], y[NB * 2 + 5];
    for (int i = 0; i < NB; i++) {
        x[2 * i] = big[i];
        x[2 * i + 1] = -big[i];
    }
    x[2 * NB] = NAN;
    x[2 * NB + 1] = -NAN;
    x[2 * NB + 2] = INFINITY;
    x[2 * NB + 3] = -INFINITY;
    x[2 * NB + 4] = 1e-40f; /* subnormal input */
    vm->gelu(x, y, NB * 2 + 5);
    for (int i = 0; i < NB; i++) {
        if (y[2 * i] != big[i])
            fail_msg("%s gelu(%.9g) = %.9g, expected x itself", vm->isa, (double)big[i], (double)y[2 * i]);
        if (!(fabsf(y[2 * i + 1]) <= 1e-30f) || (masked && big[i] > 12.f && y[2 * i + 1] != 0.f))
            fail_msg("%s gelu(%.9g) = %.9g, expected 0", vm->isa, (double)-big[i], (double)y[2 * i + 1]);
    }
    assert_true(isnan(y[2 * NB]));
    assert_true(isnan(y[2 * NB + 1]));
    assert_true(isinf(y[2 * NB + 2]) && y[2 * NB + 2] > 0);
    assert_true(isnan(y[2 * NB + 3])); /* -inf * Phi(-inf) = -inf * 0, as the unfused graph */
    assert_true(fabsf(y[2 * NB + 4]) <= 1e-30f);
    /* every tail length of the operator's 8-lane loop gives the same bits as a full vector */
    float grid[23], full[23], part[23];
    for (int i = 0; i < 23; i++) grid[i] = -3.f + 0.37f * (float)i;
    vm->gelu(grid, full, 23);
    for (int len = 1; len <= 23; len++) {
        vm->gelu(grid, part, len);
        assert_memory_equal(part, full, (size_t)len * sizeof(float));
    }
}

static void test_gelu_accuracy_dense(void **state) {
    (void)state;
    check_each_gelu_table(check_accuracy);
}

static void test_gelu_special_values(void **state) {
    (void)state;
    check_special(cpu_vmath_scalar(), false);
    const cpu_vmath *vm = cpu_vmath_get();
    if (vm != cpu_vmath_scalar()) check_special(vm, true);
}

/* C = A * B + bias with A = the inputs as an M x 1 column, B = ones(1 x N): every C entry
 * is fl(x_i + bias_j), computed the same way here, so the fused epilogue must equal the
 * Gelu operator on those pre-activations bit for bit. N = 40: two full 16-column panels
 * (the 6x16 kernel's store + gelu_tile, or the AVX-512 6x32 kernel on such machines) and
 * an 8-column rest (cpu_epilogue_apply); M % 6 = 1: a partial-row tile (store_tile). */
static void test_gelu_epilogue_matches_operator(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA, the packed GEMM (and its GELU epilogue) is not used\n");
        return;
    }
    enum { M = 3061, N = 40 };
    float *x = malloc(M * sizeof(float)), *C = malloc((size_t)M * N * sizeof(float));
    float *pre = malloc((size_t)M * N * sizeof(float)), *want = malloc((size_t)M * N * sizeof(float));
    float ones[N], bias[N];
    assert_non_null(x);
    assert_non_null(C);
    assert_non_null(pre);
    assert_non_null(want);
    const float edge[] = {0.f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 12.f, -12.f, 11.99f, -11.99f, 20.f, -20.f,
                          1e30f, -1e30f, NAN, INFINITY, -INFINITY};
    enum { NE = sizeof edge / sizeof edge[0] };
    for (int i = 0; i < NE; i++) x[i] = edge[i];
    for (int i = NE; i < M; i++) x[i] = -15.f + 30.f * (float)(i - NE) / (float)(M - NE - 1);
    for (int j = 0; j < N; j++) {
        ones[j] = 1.f;
        bias[j] = (float)j * 0.125f - 2.f;
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) pre[(size_t)i * N + j] = (0.f + x[i]) + bias[j];
    cpu_vmath_get()->gelu(pre, want, (int64_t)M * N);

    cpu_gemm_packed pb;
    cpu_gemm_scratch sc = {0};
    kiln_error e = {0};
    assert_int_equal(cpu_gemm_pack_b(ones, N, 1, N, &pb, &e), KILN_OK);
    cpu_epilogue ep;
    memset(&ep, 0, sizeof ep);
    ep.act.kind = CPU_ACT_GELU;
    ep.bias_mode = CPU_BIAS_COL;
    ep.bias = bias;
    assert_int_equal(cpu_sgemm_packed(NULL, M, N, 1, NULL, x, 1, &pb, NULL, 0, C, N, &ep, &sc, &e), KILN_OK);
    for (size_t i = 0; i < (size_t)M * N; i++)
        if (to_bits(C[i]) != to_bits(want[i]) && !(isnan(C[i]) && isnan(want[i])))
            fail_msg("epilogue gelu(%.9g) = %.9g at row %zu column %zu, the Gelu operator gives %.9g", (double)pre[i],
                     (double)C[i], i / N, i % N, (double)want[i]);
    cpu_gemm_packed_free(&pb);
    cpu_gemm_scratch_free(&sc);
    free(x);
    free(C);
    free(pre);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu_accuracy_dense),
        cmocka_unit_test(test_gelu_special_values),
        cmocka_unit_test(test_gelu_epilogue_matches_operator),
    };
    return cmocka_run_group_tests_name("gelu kernels", tests, NULL, NULL);
}
