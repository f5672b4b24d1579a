/* test_conv_c16.c - the channels-in-lanes direct Conv (cpu_conv_c16_avx512.c, cpu_c16.h)
 * against a direct double-precision reference, through the Conv kernel's forced entry
 * point and its kiln_tactic attribute: strided, padded and dilated kernels, the 3-channel
 * stem (a kernel row of 7 taps per k block; 3 for 3x3, 1 when dilated), strided 1x1 kernels (subsampled copy, odd widths for the
 * scalar tail), output channels that leave a partial 64-channel block (16, 32, 48), more
 * k steps than one k block, more position chunks than one task holds, batch > 1, fused
 * bias / residual / ReLU / Clip and an activation applied after the store (Sigmoid), on
 * 1-3 pool threads; 1x1 stride-1 convs (the default over at most 256 positions, the GEMM
 * when the tactic says conv_pointwise_gemm); geometries it does not take fall back to the
 * implicit GEMM. Skips
 * (with a printed reason) without AVX-512F, where the kernel never runs.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/cpu/cpu_c16.h"
#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_gemm_avx512.h"
#include "runtime/tensor.h"
#include "conv_node_fixture.h"

static uint32_t rng = 4242;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.f - 1.f;
}

typedef struct c16_case {
    int64_t N, C, H, W, M, k, stride, dil;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, residual;
    const char *act; /* NULL, "Relu", "Clip" or "Sigmoid" */
} c16_case;

/* Runs the case through fn (with a kiln_tactic attribute when tactic != NULL) and returns
 * the worst error relative to each output's sum of absolute terms. */
static double run_case(const c16_case *c, cpu_threadpool *pool, cpu_kernel_fn fn, const char *tactic) {
    rng = 4242;
    conv_fixture_case f = {c->N,      c->C,      c->H,        c->W,   c->M,
                           c->k,      c->k,      c->stride,   c->stride, c->dil,
                           c->dil,    1,         {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
                           c->bias,   c->residual, c->act,   tactic};
    return conv_fixture_run(&f, pool, fn, frand);
}

static const c16_case cases[] = {
    /* N, C, H, W, M, k, stride, dil, pads, bias, residual, act */
    {1, 32, 56, 56, 64, 3, 2, 1, {1, 1, 1, 1}, true, false, "Relu"},   /* ResNet's 3x3/2, smaller */
    {2, 32, 15, 17, 48, 3, 2, 1, {1, 1, 1, 1}, true, true, "Relu"},    /* batch, odd sizes, 48 channels */
    {1, 16, 14, 14, 16, 3, 1, 1, {1, 1, 1, 1}, false, true, "Clip"},   /* one vector of channels */
    {1, 64, 12, 11, 96, 3, 1, 1, {1, 2, 1, 0}, true, false, NULL},     /* 576 k steps: 5 k blocks; 64 + 32 */
    {1, 16, 20, 19, 80, 5, 1, 2, {4, 4, 4, 4}, true, true, "Relu"},    /* dilated 5x5 */
    {1, 3, 45, 47, 64, 7, 2, 1, {3, 3, 3, 3}, true, false, "Relu"},    /* the stem: NCHW copy, k step = 1 */
    {1, 5, 9, 9, 32, 3, 1, 1, {0, 0, 0, 0}, true, false, "Sigmoid"},   /* activation after the store */
    {2, 64, 28, 41, 32, 1, 2, 1, {0, 0, 0, 0}, true, true, "Relu"},    /* strided 1x1: subsampled, odd W */
    {1, 16, 60, 60, 16, 3, 1, 1, {1, 1, 1, 1}, false, false, NULL},    /* 600 chunks: many tasks */
    {1, 16, 6, 4, 16, 3, 1, 1, {2, 2, 2, 2}, true, false, "Relu"},     /* pads larger than the kernel needs */
    {1, 5, 12, 12, 32, 3, 1, 2, {2, 2, 2, 2}, true, false, "Relu"},    /* dilated over NCHW: one k step per block */
    {1, 1024, 14, 14, 256, 1, 1, 1, {0, 0, 0, 0}, true, true, "Relu"}, /* ResNet's stage-3 1x1: 64 k blocks */
    {2, 64, 7, 7, 208, 1, 1, 1, {0, 0, 0, 0}, true, true, NULL},       /* 49 positions, 3 x 64 + 16 channels */
};

/* fp32 sums in another order than the reference: errors ~1e-7 of the sum of |terms| */
#define C16_TOL 2e-6

static void test_c16_matches_reference(void **state) {
    (void)state;
    if (!cpu_gemm_avx512_usable()) {
        printf("skipped: this CPU has no AVX-512F (or KILN_CPU_ISA caps it), the C16 conv does not run\n");
        return;
    }
    for (int threads = 1; threads <= 3; threads++) {
        cpu_threadpool *pool = NULL;
        kiln_error e = {0};
        assert_int_equal(cpu_threadpool_create(threads, &pool, &e), KILN_OK);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            double err = run_case(&cases[i], pool, cpu_conv_run_c16, NULL);
            if (!(err <= C16_TOL)) fail_msg("case %zu (%d threads): error %.3g", i, threads, err);
        }
        cpu_threadpool_free(pool);
    }
}

/* The kernel runs what kiln_tactic names, by default the C16 conv where it is a candidate
 * (kernels > 1x1 over a multiple of 16 channels), else the GEMM; the two round
 * differently, so which one ran shows in the results. */
static void test_tactic_and_default(void **state) {
    (void)state;
    if (!cpu_gemm_avx512_usable()) {
        printf("skipped: no AVX-512F\n");
        return;
    }
    cpu_kernel_fn conv = cpu_kernel_find("", "Conv", 17);
    assert_non_null(conv);
    const c16_case strided = {1, 32, 30, 30, 64, 3, 2, 1, {1, 1, 1, 1}, true, false, "Relu"};
    double c16 = run_case(&strided, NULL, cpu_conv_run_c16, NULL);
    double gemm = run_case(&strided, NULL, cpu_conv_run_gemm, NULL);
    assert_true(c16 != gemm);
    assert_true(run_case(&strided, NULL, conv, CPU_CONV_TACTIC_C16) == c16);
    assert_true(run_case(&strided, NULL, conv, CPU_CONV_TACTIC_GEMM) == gemm);
    assert_true(run_case(&strided, NULL, conv, NULL) == c16); /* a candidate */
    /* a 3x3 stride-1 conv: Winograd by default, the C16 conv when its tactic says so */
    const c16_case s1 = {1, 32, 20, 20, 64, 3, 1, 1, {1, 1, 1, 1}, true, false, "Relu"};
    double s1_c16 = run_case(&s1, NULL, cpu_conv_run_c16, NULL);
    assert_true(run_case(&s1, NULL, conv, CPU_CONV_TACTIC_C16) == s1_c16);
    assert_true(run_case(&s1, NULL, conv, NULL) == run_case(&s1, NULL, cpu_conv_run_winograd, NULL));
    assert_true(s1_c16 != run_case(&s1, NULL, cpu_conv_run_winograd, NULL));
    assert_true(s1_c16 <= C16_TOL);
    /* the RGB 7x7 stem is a candidate; a 3-channel 3x3 and strided 1x1 kernels are not */
    const c16_case stem = {1, 3, 45, 47, 64, 7, 2, 1, {3, 3, 3, 3}, true, false, "Relu"};
    /* (the stem's two algorithms sum its 147 k steps in the same order: equal results, so
     * only the candidate test below tells them apart) */
    assert_true(run_case(&stem, NULL, conv, NULL) == run_case(&stem, NULL, cpu_conv_run_c16, NULL));
    const c16_case rgb3 = {1, 3, 33, 33, 32, 3, 2, 1, {1, 1, 1, 1}, true, false, "Relu"};
    assert_true(run_case(&rgb3, NULL, conv, NULL) == run_case(&rgb3, NULL, cpu_conv_run_gemm, NULL));
    const c16_case ds = {1, 64, 28, 28, 64, 1, 2, 1, {0, 0, 0, 0}, true, true, "Relu"};
    assert_true(run_case(&ds, NULL, conv, NULL) == run_case(&ds, NULL, cpu_conv_run_gemm, NULL));
    /* 1x1 stride-1 convs: the C16 conv over small images by default, the GEMM when the
     * tactic conv_pointwise_gemm says so (or over larger images) */
    const c16_case pw = {1, 1024, 14, 14, 64, 1, 1, 1, {0, 0, 0, 0}, true, true, "Relu"}; /* 4 GEMM k-blocks */
    double pw_c16 = run_case(&pw, NULL, cpu_conv_run_c16, NULL), pw_gemm = run_case(&pw, NULL, cpu_conv_run_gemm, NULL);
    assert_true(pw_c16 != pw_gemm);
    assert_true(run_case(&pw, NULL, conv, NULL) == pw_c16);
    assert_true(run_case(&pw, NULL, conv, CPU_CONV_TACTIC_POINTWISE) == pw_gemm);
    const c16_case pw_big = {1, 64, 20, 20, 64, 1, 1, 1, {0, 0, 0, 0}, true, true, "Relu"}; /* 400 positions */
    assert_true(run_case(&pw_big, NULL, conv, NULL) == run_case(&pw_big, NULL, cpu_conv_run_gemm, NULL));
}

/* Output channels that are not a multiple of 16, or groups: the forced entry falls back
 * to the GEMM (same result as it), still correct. */
static void test_fallback(void **state) {
    (void)state;
    const c16_case odd = {1, 16, 10, 10, 20, 3, 2, 1, {1, 1, 1, 1}, true, true, "Relu"};
    double forced = run_case(&odd, NULL, cpu_conv_run_c16, NULL);
    assert_true(forced == run_case(&odd, NULL, cpu_conv_run_gemm, NULL));
    assert_true(forced <= C16_TOL);
    int64_t k3[2] = {3, 3};
    cpu_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nsp = 2;
    for (int i = 0; i < 2; i++) g.k[i] = k3[i], g.in[i] = g.out[i] = 8, g.stride[i] = g.dil[i] = 1;
    assert_true(cpu_conv_c16_applies(&g, 1, 16, 32));
    assert_false(cpu_conv_c16_applies(&g, 2, 16, 32));
    assert_false(cpu_conv_c16_applies(&g, 1, 16, 24));
    assert_true(cpu_conv_c16_candidate(&g, 1, 16, 32));
    assert_false(cpu_conv_c16_candidate(&g, 1, 24, 32)); /* channels not a multiple of 16 */
    assert_false(cpu_conv_c16_candidate(&g, 1, 3, 32));  /* a 3x3 RGB kernel */
    g.k[0] = g.k[1] = 7;
    assert_true(cpu_conv_c16_candidate(&g, 1, 3, 64)); /* the 7x7 RGB stem */
    g.dil[1] = 2;
    assert_false(cpu_conv_c16_candidate(&g, 1, 3, 64));
    g.dil[1] = 1;
    g.k[0] = g.k[1] = 1;
    assert_true(cpu_conv_c16_candidate(&g, 1, 16, 32)); /* 1x1 over 8x8 = 64 positions */
    g.in[0] = g.in[1] = g.out[0] = g.out[1] = 28;
    assert_false(cpu_conv_c16_candidate(&g, 1, 16, 32)); /* 1x1 over 784 positions */
    g.in[0] = g.in[1] = 14;
    g.out[0] = g.out[1] = 7;
    g.stride[0] = g.stride[1] = 2;
    assert_false(cpu_conv_c16_candidate(&g, 1, 16, 32)); /* strided 1x1 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c16_matches_reference),
        cmocka_unit_test(test_tactic_and_default),
        cmocka_unit_test(test_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
