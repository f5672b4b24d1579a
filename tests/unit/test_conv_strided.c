/* test_conv_strided.c - strided 2-D Conv through the phase-split input (cpu_conv_strided.h,
 * cpu_conv_strided_avx2.c) against a direct double-precision reference: 7x7/2 stems,
 * 3x3/2 and 1x1/2 layers at the sizes where 16-position B panels cross output rows (28,
 * 14, 7 wide) and narrower (the packer's scalar loop), odd input sizes, asymmetric and
 * zero pads, stride 3, unequal strides, dilation with stride, groups, a 1x1 stride-1 conv
 * with pads (a single-phase copy too), stride-1 KxK convs (a padded copy), a kernel too
 * long for the phase path (the older per-segment packer, conv_pack_b), batch > 1, several k-blocks, bias / residual / ReLU
 * / Clip epilogues, on 1 and 2 pool threads and with B packed both whole and per task, and
 * batches of 3 and 5 images (an odd count over 2 threads).
 * Also the plan's phase bookkeeping. Skips (with a printed reason) without AVX2+FMA.
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
#include "backends/cpu/cpu_conv_strided.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "runtime/tensor.h"
#include "conv_node_fixture.h"

static uint32_t rng = 4242;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.f - 1.f;
}

typedef struct sconv {
    int64_t N, C, H, W, M, KH, KW, sh, sw, dh, dw, group;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, residual;
    const char *act; /* NULL, "Relu" or "Clip" */
} sconv;

/* Runs the case through the Conv kernel's GEMM entry point (W an initializer, so the
 * packed-weight path is taken) twice (the second run reuses the node's state) and returns
 * the largest error relative to the per-output scale. */
static double run_case(const sconv *c, cpu_threadpool *pool) {
    rng = 4242;
    conv_fixture_case f = {c->N,  c->C,  c->H,     c->W,  c->M,    c->KH,  c->KW,
                           c->sh, c->sw, c->dh,    c->dw, c->group, {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
                           c->bias, c->residual, c->act, NULL};
    return conv_fixture_run(&f, pool, cpu_conv_run_gemm, frand);
}

#define TOL 2e-6

/*  N   C   H   W   M KH KW sh sw dh dw g  pads           bias  res    act */
static const sconv cases[] = {
    {1, 3, 45, 47, 20, 7, 7, 2, 2, 1, 1, 1, {3, 3, 3, 3}, true, false, "Relu"},   /* stem, odd sizes */
    {1, 3, 95, 97, 24, 7, 7, 2, 2, 1, 1, 1, {3, 3, 3, 3}, true, true, "Relu"},    /* stem, B per task */
    {2, 24, 56, 56, 32, 3, 3, 2, 2, 1, 1, 1, {1, 1, 1, 1}, true, false, "Relu"},  /* 28 wide: crossing panels */
    {1, 40, 28, 28, 48, 3, 3, 2, 2, 1, 1, 1, {1, 1, 1, 1}, true, true, "Relu"},   /* 14 wide */
    {2, 70, 14, 14, 20, 3, 3, 2, 2, 1, 1, 1, {1, 1, 1, 1}, false, true, "Clip"},  /* 7 wide, 2 k-blocks */
    {1, 16, 11, 9, 12, 3, 3, 2, 2, 1, 1, 1, {1, 1, 1, 1}, true, false, NULL},     /* 6x5: scalar packer */
    {1, 16, 13, 15, 8, 3, 3, 2, 2, 1, 1, 1, {0, 2, 1, 0}, true, false, "Relu"},   /* asymmetric pads */
    {1, 8, 23, 31, 12, 4, 4, 3, 3, 1, 1, 1, {2, 1, 0, 2}, true, false, NULL},     /* stride 3, even kernel */
    {1, 8, 20, 41, 10, 3, 5, 1, 2, 1, 1, 1, {1, 2, 1, 2}, false, false, NULL},    /* stride 1 x 2 */
    {1, 8, 33, 35, 10, 3, 3, 2, 2, 2, 3, 1, {2, 3, 2, 3}, true, false, NULL},     /* dilation + stride */
    {2, 12, 29, 30, 18, 3, 3, 2, 2, 1, 1, 3, {1, 1, 1, 1}, true, true, "Relu"},   /* groups */
    {2, 64, 56, 56, 48, 1, 1, 2, 2, 1, 1, 1, {0, 0, 0, 0}, true, true, "Relu"},   /* 1x1/2 downsample */
    {1, 300, 15, 13, 40, 1, 1, 2, 2, 1, 1, 1, {0, 0, 0, 0}, false, true, NULL},   /* 1x1/2, odd, 2 k-blocks */
    {1, 16, 9, 10, 24, 1, 1, 3, 2, 1, 1, 2, {1, 0, 2, 1}, true, false, "Clip"},   /* 1x1 strided, pads, groups */
    {1, 16, 9, 10, 24, 1, 1, 1, 1, 1, 1, 1, {1, 1, 0, 2}, true, false, NULL},     /* 1x1 stride 1 with pads */
    {2, 20, 17, 19, 24, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, true, true, "Relu"},   /* stride 1: padded copy */
    {1, 6, 12, 23, 10, 5, 5, 1, 1, 1, 2, 2, {2, 4, 1, 3}, true, false, NULL},     /* stride 1, dilation, groups */
    {1, 4, 9, 80, 8, 1, 33, 1, 2, 1, 1, 1, {0, 5, 0, 5}, true, false, "Relu"},    /* too long: conv_pack_b */
    {3, 32, 14, 14, 40, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, true, "Relu"},   /* pointwise, 3 images */
    {5, 40, 13, 11, 24, 3, 3, 2, 2, 1, 1, 1, {1, 1, 1, 1}, true, true, NULL},     /* 5 images */
};

static void test_strided_matches_reference(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA (the phase path runs on the packed GEMM only)\n");
        return;
    }
    for (int threads = 1; threads <= 2; threads++) {
        cpu_threadpool *pool = NULL;
        kiln_error e = {0};
        assert_int_equal(cpu_threadpool_create(threads, &pool, &e), KILN_OK);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            double err = run_case(&cases[i], pool);
            if (!(err <= TOL)) fail_msg("case %zu (%d threads): error %.3g", i, threads, err);
        }
        cpu_threadpool_free(pool);
    }
}

/* A deterministic sweep of small geometries: output widths 1-19 (panels whose 8-lane
 * halves end exactly at a row end, cross it, or span 3+ rows), strides 1-3, kernels 1-5,
 * dilations 1-2 and pads 0-2 on each side, against the reference. */
static void test_geometry_sweep(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    uint32_t r = 99;
    int done = 0;
    for (int i = 0; i < 400 && done < 80; i++) {
        r = r * 1103515245u + 12345u;
        uint32_t v = r >> 4;
        sconv c = {1 + (int64_t)(v % 2), 1 + (int64_t)((v >> 1) % 5), 0, 0, 1 + (int64_t)((v >> 4) % 9),
                   1 + (int64_t)((v >> 8) % 5), 1 + (int64_t)((v >> 11) % 5), 1 + (int64_t)((v >> 14) % 3),
                   1 + (int64_t)((v >> 16) % 3), 1 + (int64_t)((v >> 18) % 2), 1 + (int64_t)((v >> 19) % 2), 1,
                   {(int64_t)((v >> 20) % 3), (int64_t)((v >> 22) % 3), (int64_t)((v >> 24) % 3),
                    (int64_t)((v >> 26) % 3)},
                   (v >> 28) & 1, (v >> 29) & 1, (v >> 30) & 1 ? "Relu" : NULL};
        r = r * 1103515245u + 12345u;
        c.H = 1 + (int64_t)((r >> 8) % 24);
        c.W = 1 + (int64_t)((r >> 16) % 40);
        /* the kernel's extent must fit the padded input */
        if (c.H + c.pads[0] + c.pads[2] < (c.KH - 1) * c.dh + 1 || c.W + c.pads[1] + c.pads[3] < (c.KW - 1) * c.dw + 1)
            continue;
        double err = run_case(&c, NULL);
        if (!(err <= TOL))
            fail_msg("sweep case %d (N%lld C%lld %lldx%lld M%lld k%lldx%lld s%lldx%lld d%lldx%lld pads %lld %lld %lld "
                     "%lld): error %.3g",
                     i, (long long)c.N, (long long)c.C, (long long)c.H, (long long)c.W, (long long)c.M,
                     (long long)c.KH, (long long)c.KW, (long long)c.sh, (long long)c.sw, (long long)c.dh,
                     (long long)c.dw, (long long)c.pads[0], (long long)c.pads[1], (long long)c.pads[2],
                     (long long)c.pads[3], err);
        done++;
    }
    assert_true(done >= 40);
}

/* The plan: phase sizes, the phases kept, and tap offsets that point at the right float
 * of the planes built from a known image (x[c][h][w] = c*10000 + h*100 + w + 1, 0 in the
 * padding). */
static void test_phase_plan(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    const sconv geo[] = {
        {1, 2, 13, 11, 1, 3, 3, 2, 2, 1, 1, 1, {1, 1, 1, 1}, false, false, NULL},
        {1, 2, 13, 11, 1, 7, 5, 2, 3, 1, 1, 1, {3, 2, 2, 1}, false, false, NULL},
        {1, 2, 13, 11, 1, 1, 1, 2, 2, 1, 1, 1, {0, 0, 0, 0}, false, false, NULL},
        {1, 2, 13, 11, 1, 3, 2, 2, 2, 2, 2, 1, {2, 1, 2, 1}, false, false, NULL}, /* dilation 2: one phase */
    };
    for (size_t gi = 0; gi < sizeof geo / sizeof geo[0]; gi++) {
        const sconv *c = &geo[gi];
        cpu_conv_geom g;
        memset(&g, 0, sizeof g);
        g.nsp = 2;
        g.in[0] = c->H, g.in[1] = c->W, g.k[0] = c->KH, g.k[1] = c->KW;
        g.stride[0] = c->sh, g.stride[1] = c->sw, g.dil[0] = c->dh, g.dil[1] = c->dw;
        g.pad0[0] = c->pads[0], g.pad0[1] = c->pads[1], g.pad1[0] = c->pads[2], g.pad1[1] = c->pads[3];
        g.out[0] = conv_fixture_out(c->H, c->pads[0], c->pads[2], c->KH, c->sh, c->dh);
        g.out[1] = conv_fixture_out(c->W, c->pads[1], c->pads[3], c->KW, c->sw, c->dw);
        g.in_size = c->H * c->W, g.out_size = g.out[0] * g.out[1], g.k_size = c->KH * c->KW;
        cpu_conv_phase ph;
        assert_true(cpu_conv_phase_plan(&g, &ph));
        assert_int_equal(ph.H2, g.out[0] + ((c->KH - 1) * c->dh) / c->sh);
        assert_int_equal(ph.W2, g.out[1] + ((c->KW - 1) * c->dw) / c->sw);
        if (c->KH == 1 && c->KW == 1) assert_int_equal(ph.cstride, g.out_size); /* the subsampled image */
        if (c->dh == 2 && c->sh == 2) assert_int_equal(ph.ny, 1);
        float *x = malloc((size_t)(c->C * c->H * c->W) * sizeof(float));
        float *p = malloc((size_t)(c->C * ph.cstride) * sizeof(float));
        assert_non_null(x);
        assert_non_null(p);
        for (int64_t ci = 0; ci < c->C; ci++)
            for (int64_t h = 0; h < c->H; h++)
                for (int64_t w = 0; w < c->W; w++) x[(ci * c->H + h) * c->W + w] = (float)(ci * 10000 + h * 100 + w + 1);
        cpu_conv_phase_build(NULL, &ph, x, c->C, p);
        for (int64_t ci = 0; ci < c->C; ci++)
            for (int64_t kh = 0; kh < c->KH; kh++)
                for (int64_t kw = 0; kw < c->KW; kw++)
                    for (int64_t oh = 0; oh < g.out[0]; oh++)
                        for (int64_t ow = 0; ow < g.out[1]; ow++) {
                            int64_t ih = oh * c->sh + kh * c->dh - c->pads[0], iw = ow * c->sw + kw * c->dw - c->pads[1];
                            float want = ih < 0 || ih >= c->H || iw < 0 || iw >= c->W
                                             ? 0.f
                                             : (float)(ci * 10000 + ih * 100 + iw + 1);
                            float got = p[ci * ph.cstride + ph.yoff[kh] + ph.xoff[kw] + oh * ph.W2 + ow];
                            if (got != want)
                                fail_msg("geometry %zu: c %lld tap (%lld,%lld) out (%lld,%lld): %g, want %g", gi,
                                         (long long)ci, (long long)kh, (long long)kw, (long long)oh, (long long)ow,
                                         got, want);
                        }
        free(x);
        free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_phase_plan),
        cmocka_unit_test(test_strided_matches_reference),
        cmocka_unit_test(test_geometry_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
