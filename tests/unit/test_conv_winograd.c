/* test_conv_winograd.c - Winograd F(4x4, 3x3) and F(2x2, 3x3) Conv (cpu_winograd_avx2.c, through the Conv
 * kernel's forced-Winograd entry point) against a direct double-precision reference, over
 * shapes that hit the edges: channel counts that are not multiples of 8/16, H/W that are
 * not multiples of the 4x4 tile, asymmetric and zero pads, batch > 1, more than one tile
 * block and k-block, output-channel groups, fused bias / residual / ReLU / Clip, on 1 and
 * 2 pool threads; the implicit-GEMM variant is checked on the same cases, and the kernel's
 * tactic attribute is honoured. Skips (with a printed reason) without AVX2+FMA.
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

#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_winograd.h"
#include "backends/cpu/cpu_gemm_avx512.h"
#include "runtime/tensor.h"
#include "conv_node_fixture.h"

static uint32_t rng = 777;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.f - 1.f;
}

typedef struct conv_case {
    int64_t N, C, H, W, M;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, residual;
    const char *act; /* NULL, "Relu" or "Clip" */
    int64_t k, stride; /* 0: 3 and 1 */
} conv_case;

static int64_t ck(const conv_case *c) { return c->k ? c->k : 3; }
static int64_t cs(const conv_case *c) { return c->stride ? c->stride : 1; }

/* Runs the case through `fn` (or the registered kernel with a kiln_tactic attribute when
 * tactic != NULL) and compares with the reference. Returns the largest error relative
 * to the per-output scale. */
static double run_case(const conv_case *c, cpu_threadpool *pool, cpu_kernel_fn fn, const char *tactic) {
    rng = 777; /* same data for the same shape, whichever variant runs */
    conv_fixture_case f = {c->N,  c->C,  c->H,  c->W,  c->M, ck(c), ck(c), cs(c), cs(c), 1, 1, 1,
                           {c->pads[0], c->pads[1], c->pads[2], c->pads[3]}, c->bias, c->residual, c->act, tactic};
    return conv_fixture_run(&f, pool, fn, frand);
}

static const conv_case cases[] = {
    {1, 16, 8, 8, 16, {1, 1, 1, 1}, false, false, NULL, 0, 0},
    {1, 19, 9, 13, 21, {1, 0, 2, 1}, true, false, NULL, 0, 0},       /* odd channels, H/W, asymmetric pads */
    {3, 24, 7, 7, 40, {1, 1, 1, 1}, true, true, "Relu", 0, 0},       /* batch, residual, relu, 7x7 (2x2 tiles) */
    {1, 300, 6, 6, 33, {1, 1, 1, 1}, true, false, "Relu", 0, 0},     /* two k-blocks */
    {1, 16, 64, 61, 17, {1, 1, 1, 1}, true, true, NULL, 0, 0},       /* several tile blocks */
    {2, 32, 5, 5, 64, {0, 0, 0, 0}, false, true, "Clip", 0, 0},      /* no padding, other activation */
    {1, 64, 3, 3, 130, {1, 1, 1, 1}, true, false, NULL, 0, 0},       /* one tile, many output groups */
    {2, 17, 12, 4, 16, {2, 2, 0, 0}, true, true, "Relu", 0, 0},      /* pads larger than needed on one side */
    /* batch 1 with one tile block on 2-3 threads: shared input transform, output-channel
     * groups as tasks (cpu_winograd_plan's shared_v); odd channel counts give a short last
     * group and padded input channel blocks */
    {1, 40, 14, 14, 200, {1, 1, 1, 1}, true, true, "Relu", 0, 0},    /* 13 panels: groups of 4 + a short one */
    {1, 19, 28, 28, 48, {1, 1, 1, 1}, true, false, NULL, 0, 0},      /* 49 tiles, 3 panels, C padded to 24 */
    {1, 72, 7, 7, 37, {1, 1, 1, 1}, false, true, "Clip", 0, 0},      /* 7x7: 4 / 16 tiles, 3 panels */
};

/* F(4x4, 3x3) in fp32: the error against direct convolution, relative to the sum of the
 * absolute terms, stays near 1e-6 (measured worst ~1.5e-6 on these cases); 2e-5 leaves
 * room for other compilers while still catching any wrong coefficient (errors ~1e-1). */
#define WINOGRAD_TOL 2e-5
#define GEMM_TOL 2e-6

static void test_winograd_matches_reference(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: this CPU has no AVX2+FMA (or KILN_CPU_ISA caps it), Winograd does not run\n");
        return;
    }
    printf("AVX-512 6x32 Winograd kernel: %s\n", cpu_gemm_avx512_usable() ? "exercised (output channels >= 32)"
                                                                            : "not exercised, this CPU has no AVX-512F");
    /* 1 thread: private V per task; 2 and 3: shared V wherever the tile blocks cannot
     * fill the threads (the multi-block case at 2 threads runs 3 blocks one after another) */
    for (int threads = 1; threads <= 3; threads++) {
        cpu_threadpool *pool = NULL;
        kiln_error e = {0};
        assert_int_equal(cpu_threadpool_create(threads, &pool, &e), KILN_OK);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            double wg = run_case(&cases[i], pool, cpu_conv_run_winograd, NULL);
            double w2 = run_case(&cases[i], pool, cpu_conv_run_winograd_f23, NULL);
            double gm = run_case(&cases[i], pool, cpu_conv_run_gemm, NULL);
            if (!(wg <= WINOGRAD_TOL) || !(w2 <= WINOGRAD_TOL) || !(gm <= GEMM_TOL))
                fail_msg("case %zu (%d threads): winograd F(4,3) error %.3g, F(2,3) %.3g, gemm %.3g", i, threads, wg,
                         w2, gm);
        }
        cpu_threadpool_free(pool);
    }
}

/* The registered kernel runs what kiln_tactic names, and its default picks Winograd
 * (F(4x4, 3x3), or F(2x2, 3x3) for few tiles). The algorithms round differently, so which
 * one ran is visible in the results. */
static void test_kernel_honours_tactic(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    const conv_case c = {1, 32, 18, 18, 32, {1, 1, 1, 1}, true, false, NULL, 0, 0}; /* 25 4x4 tiles */
    cpu_kernel_fn conv = cpu_kernel_find("", "Conv", 17);
    assert_non_null(conv);
    double by_attr_wg = run_case(&c, NULL, conv, CPU_CONV_TACTIC_WINOGRAD);
    double by_attr_w2 = run_case(&c, NULL, conv, CPU_CONV_TACTIC_WINOGRAD_F23);
    double by_attr_gm = run_case(&c, NULL, conv, CPU_CONV_TACTIC_GEMM);
    double dflt = run_case(&c, NULL, conv, NULL);
    double forced_wg = run_case(&c, NULL, cpu_conv_run_winograd, NULL);
    double forced_gm = run_case(&c, NULL, cpu_conv_run_gemm, NULL);
    double forced_w2 = run_case(&c, NULL, cpu_conv_run_winograd_f23, NULL);
    /* same data each time (the generator is reset per call below), so errors match exactly */
    assert_true(by_attr_wg == forced_wg);
    assert_true(by_attr_gm == forced_gm);
    assert_true(by_attr_w2 == forced_w2);
    assert_true(forced_w2 != forced_wg && forced_w2 != forced_gm);
    assert_true(dflt == forced_wg);
    assert_true(forced_wg != forced_gm);
    assert_true(forced_wg <= WINOGRAD_TOL && forced_gm <= GEMM_TOL);
    /* fewer than 16 output tiles (10x10: 9): the default is F(2x2, 3x3) */
    const conv_case few = {1, 32, 10, 10, 32, {1, 1, 1, 1}, true, false, NULL, 0, 0};
    double few_dflt = run_case(&few, NULL, conv, NULL);
    assert_true(few_dflt == run_case(&few, NULL, cpu_conv_run_winograd_f23, NULL));
    assert_true(few_dflt != run_case(&few, NULL, cpu_conv_run_winograd, NULL));
}

/* The implicit GEMM's stride-2 packer (AVX2 gather of 16 every-other floats, used when 16
 * outputs share a row): 7x7/2 stem, 1x1/2 downsample and 3x3/2 shapes with rows of >= 16
 * outputs, plus edges (partial panels, padding). */
static void test_gemm_stride2(void **state) {
    (void)state;
    const conv_case sc[] = {
        {1, 3, 40, 45, 20, {3, 3, 3, 3}, true, false, "Relu", 7, 2},
        {2, 16, 40, 37, 24, {0, 0, 0, 0}, true, true, "Relu", 1, 2},
        {1, 8, 38, 41, 16, {1, 1, 1, 1}, false, false, NULL, 3, 2},
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        double e = run_case(&sc[i], NULL, cpu_conv_run_gemm, NULL);
        double e2 = run_case(&sc[i], NULL, cpu_conv_run_winograd, NULL); /* falls back to the GEMM */
        if (!(e <= GEMM_TOL) || !(e2 <= GEMM_TOL)) fail_msg("stride-2 case %zu: error %.3g / %.3g", i, e, e2);
    }
}

/* B larger than L2: packed inside the GEMM's tasks (cpu_sgemm_packed_a_fn_local) for the
 * implicit GEMM (stem-like 7x7/2) and 1x1 convs, with partial last panels, residual and
 * activation, on 1 and 2 threads. */
static void test_gemm_local_packing(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    const conv_case lc[] = {
        {1, 3, 95, 97, 20, {3, 3, 3, 3}, true, true, "Relu", 7, 2}, /* N = 48 x 49, K = 147 */
        {1, 64, 47, 50, 32, {0, 0, 0, 0}, true, true, "Relu", 1, 1}, /* 1x1, N = 2350 */
        {2, 96, 40, 41, 24, {0, 0, 0, 0}, false, false, "Clip", 1, 1},
        /* N = 600: 5 column blocks, the last of 6 panels with 8 valid columns: per-task B
         * on 2 threads too (2 blocks per thread suffice), fewer tasks than 4 per thread */
        {1, 256, 20, 30, 32, {0, 0, 0, 0}, true, true, "Relu", 1, 1},
    };
    for (int threads = 1; threads <= 2; threads++) {
        cpu_threadpool *pool = NULL;
        kiln_error e = {0};
        assert_int_equal(cpu_threadpool_create(threads, &pool, &e), KILN_OK);
        for (size_t i = 0; i < sizeof lc / sizeof lc[0]; i++) {
            int64_t OS = ((lc[i].H + lc[i].pads[0] + lc[i].pads[2] - ck(&lc[i])) / cs(&lc[i]) + 1) *
                         ((lc[i].W + lc[i].pads[1] + lc[i].pads[3] - ck(&lc[i])) / cs(&lc[i]) + 1);
            assert_true(cpu_sgemm_local_b_preferred(pool, lc[i].M, OS, lc[i].C * ck(&lc[i]) * ck(&lc[i])));
            double err = run_case(&lc[i], pool, cpu_conv_run_gemm, NULL);
            if (!(err <= GEMM_TOL)) fail_msg("local-packing case %zu (%d threads): error %.3g", i, threads, err);
        }
        cpu_threadpool_free(pool);
    }
}

/* Geometries outside Winograd's domain: the forced variant falls back (still correct). */
static void test_applies(void **state) {
    (void)state;
    int64_t k3[2] = {3, 3}, k5[2] = {5, 5}, s1[2] = {1, 1}, s2[2] = {2, 2}, d1[2] = {1, 1}, d2[2] = {2, 2};
    assert_true(cpu_winograd_applies_dims(2, k3, s1, d1, 1, 16, 16));
    assert_false(cpu_winograd_applies_dims(2, k5, s1, d1, 1, 16, 16));
    assert_false(cpu_winograd_applies_dims(2, k3, s2, d1, 1, 16, 16));
    assert_false(cpu_winograd_applies_dims(2, k3, s1, d2, 1, 16, 16));
    assert_false(cpu_winograd_applies_dims(2, k3, s1, d1, 2, 32, 32));
    assert_false(cpu_winograd_applies_dims(2, k3, s1, d1, 1, 8, 16));
    assert_false(cpu_winograd_applies_dims(1, k3, s1, d1, 1, 16, 16));
    const conv_case small = {1, 3, 7, 7, 5, {1, 1, 1, 1}, true, false, "Relu", 0, 0};
    assert_true(run_case(&small, NULL, cpu_conv_run_winograd, NULL) <= GEMM_TOL);
    assert_true(run_case(&small, NULL, cpu_conv_run_winograd_f23, NULL) <= GEMM_TOL);
}

/* The task plan: batch 1 on several threads shares one input transform per tile block and
 * cuts the output channels into groups that cover them exactly; one thread, or enough tile
 * blocks for the threads, keeps a private V per task. */
static void test_plan_shared_v(void **state) {
    (void)state;
    cpu_winograd_blocking b;
    /* ResNet-50 stage 3 (256 -> 256, 14x14, 16 tiles: one block) */
    assert_true(cpu_winograd_plan(CPU_WINOGRAD_F43, 1, 256, 256, 14, 14, 1, &b));
    assert_false(b.shared_v);
    assert_int_equal(b.n_groups, 1);
    assert_int_equal(b.v_floats, 0);
    for (int threads = 2; threads <= 3; threads++) {
        assert_true(cpu_winograd_plan(CPU_WINOGRAD_F43, 1, 256, 256, 14, 14, threads, &b));
        assert_true(b.shared_v);
        assert_int_equal(b.n_blocks, 1);
        assert_true(b.n_groups >= threads);
        assert_int_equal(b.Mg % 16, 0);
        assert_true(b.Mg * b.n_groups >= 256 && b.Mg * (b.n_groups - 1) < 256);
        assert_true(b.n_slots == threads);
        assert_int_equal(b.v_floats, 36 * b.TB * 256);
        assert_int_equal(b.slot_floats, 36 * b.TB * b.Mg); /* only M: V is shared */
        assert_int_equal(b.scratch_floats, b.xb_floats + b.v_floats + b.n_slots * b.slot_floats);
    }
    /* 13 output panels (200 channels) on 2 threads: every group but the last is full */
    assert_true(cpu_winograd_plan(CPU_WINOGRAD_F23, 1, 40, 200, 14, 14, 2, &b));
    assert_true(b.shared_v);
    assert_true(b.Mg * b.n_groups >= 208 && b.Mg * (b.n_groups - 1) < 208);
    /* two images of 56x56 on 2 threads: 2 x 196 tiles fill the threads with blocks alone,
     * at most 60 tiles each (64 channels in and out), in a multiple of the threads */
    assert_true(cpu_winograd_plan(CPU_WINOGRAD_F43, 2, 64, 64, 56, 56, 2, &b));
    assert_false(b.shared_v);
    assert_int_equal(b.n_groups, 1);
    assert_true(b.TB <= 60 && b.n_blocks % 2 == 0 && b.TB * b.n_blocks >= 392);
    /* 64 channels, one image: 4 blocks of 54 on 1, 2 or 4 threads (was 2 of 102), and on
     * 3 threads 6 blocks of 36 */
    for (int threads = 1; threads <= 4; threads++) {
        assert_true(cpu_winograd_plan(CPU_WINOGRAD_F43, 1, 64, 64, 56, 56, threads, &b));
        assert_false(b.shared_v);
        assert_int_equal(b.TB, threads == 3 ? 36 : 54);
        assert_int_equal(b.n_blocks, threads == 3 ? 6 : 4);
    }
    /* 128 channels keep the larger blocks: 8 images of 28x28 in 5 blocks of 84 */
    assert_true(cpu_winograd_plan(CPU_WINOGRAD_F43, 8, 128, 128, 28, 28, 1, &b));
    assert_int_equal(b.TB, 84);
    assert_int_equal(b.n_blocks, 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_shared_v),
        cmocka_unit_test(test_winograd_matches_reference),
        cmocka_unit_test(test_kernel_honours_tactic),
        cmocka_unit_test(test_applies),
        cmocka_unit_test(test_gemm_stride2),
        cmocka_unit_test(test_gemm_local_packing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
