/* test_gemm_packed.c - kiln's packed AVX2 SGEMM (cpu_gemm_avx2.c) against a reference
 * triple loop: random shapes including edge sizes that are not multiples of the 6x16 tile
 * or the 256-deep k-block, M/N/K = 1, packed A or packed B, every fused epilogue kind,
 * on 1 and 2 pool threads (GELU epilogues against a double-precision GELU). Skips (with
 * a printed reason) on CPUs without AVX2+FMA.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "backends/cpu/cpu_gemm_avx512.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_kernel.h"
#include "core/bigalloc.h"
#include "runtime/tensor.h"
#include <string.h>

#include "kernel_harness.h"

static float *rand_buf(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* reference: act(A*B + bias + residual) */
static void ref_gemm(int64_t M, int64_t N, int64_t K, const float *A, const float *B, const cpu_epilogue *ep,
                     float *C) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)A[i * K + k] * B[k * N + j];
            float v = (float)acc;
            if (ep->bias_mode == CPU_BIAS_ROW) v += ep->bias[i];
            if (ep->bias_mode == CPU_BIAS_COL) v += ep->bias[j];
            if (ep->residual) v += ep->residual[i * ep->ld_res + j];
            C[i * N + j] = v;
        }
    if (ep->act.kind == CPU_ACT_GELU || ep->act.kind == CPU_ACT_GELU_TANH) {
        /* GELU in double, independent of the kernels' float approximations */
        for (int64_t i = 0; i < M * N; i++) {
            double x = C[i];
            C[i] = ep->act.kind == CPU_ACT_GELU
                       ? (float)(0.5 * x * erfc(-x / sqrt(2.0)))
                       : (float)(0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979324) * (x + 0.044715 * x * x * x))));
        }
        return;
    }
    for (int64_t i = 0; i < M; i++) cpu_act_apply(&ep->act, C + i * N, N);
}

static void check_one(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, int pack_b, int ep_kind) {
    float *A = rand_buf(M * K), *B = rand_buf(K * N), *bias = rand_buf(M > N ? M : N), *res = rand_buf(M * N);
    /* C 64-byte aligned, as kiln's activations are: row starts then line up with cache lines
     * whenever N is a multiple of 16 (the streaming-store path, cpu_gemm_avx2.c) */
    size_t c_bytes = ((size_t)(M * N) * sizeof(float) + 63) / 64 * 64;
    float *C = aligned_alloc(64, c_bytes), *R = malloc((size_t)(M * N) * sizeof(float));
    assert_non_null(C);
    assert_non_null(R);
    for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* C is write-only: garbage must not leak */
    cpu_epilogue ep = {0};
    if (ep_kind == 1) { /* bias per row + relu (Conv) */
        ep.bias_mode = CPU_BIAS_ROW;
        ep.bias = bias;
        ep.act.kind = CPU_ACT_RELU;
    } else if (ep_kind == 2) { /* bias per column + residual (BERT projection) */
        ep.bias_mode = CPU_BIAS_COL;
        ep.bias = bias;
        ep.residual = res;
        ep.ld_res = N;
    } else if (ep_kind == 3) { /* residual + sigmoid (activation outside the fused store) */
        ep.residual = res;
        ep.ld_res = N;
        ep.act.kind = CPU_ACT_SIGMOID;
    } else if (ep_kind == 4) { /* bias per column + GELU (BERT FFN after fuse_gelu) */
        ep.bias_mode = CPU_BIAS_COL;
        ep.bias = bias;
        ep.act.kind = CPU_ACT_GELU;
    } else if (ep_kind == 5) { /* residual + tanh-form GELU */
        ep.residual = res;
        ep.ld_res = N;
        ep.act.kind = CPU_ACT_GELU_TANH;
    } else if (ep_kind == 6) { /* bias per row + Clip to a range inside the data (ReLU6-like) */
        ep.bias_mode = CPU_BIAS_ROW;
        ep.bias = bias;
        ep.act.kind = CPU_ACT_CLIP;
        ep.act.a = -0.2f;
        ep.act.b = 0.3f;
    }
    cpu_gemm_packed p;
    cpu_gemm_scratch scratch = {0};
    kiln_error err = {0};
    kiln_status st;
    if (pack_b == 2) { /* packed A, row-major B packed per task by rows (1x1 convs) */
        assert_int_equal(cpu_gemm_pack_a(A, K, M, K, &p, &err), KILN_OK);
        st = cpu_sgemm_packed_a_rows_local(pool, M, N, K, &p, B, N, C, N, ep_kind ? &ep : NULL, &scratch, &err);
    } else if (pack_b) {
        assert_int_equal(cpu_gemm_pack_b(B, N, K, N, &p, &err), KILN_OK);
        st = cpu_sgemm_packed(pool, M, N, K, NULL, A, K, &p, NULL, 0, C, N, ep_kind ? &ep : NULL, &scratch, &err);
    } else {
        assert_int_equal(cpu_gemm_pack_a(A, K, M, K, &p, &err), KILN_OK);
        st = cpu_sgemm_packed(pool, M, N, K, &p, NULL, 0, NULL, B, N, C, N, ep_kind ? &ep : NULL, &scratch, &err);
    }
    assert_int_equal(st, KILN_OK);
    ref_gemm(M, N, K, A, B, &ep, R);
    for (int64_t i = 0; i < M * N; i++) {
        float tol = 1e-4f * (float)K + 1e-4f;
        if (!(fabsf(C[i] - R[i]) <= tol))
            fail_msg("M=%lld N=%lld K=%lld pack_b=%d ep=%d: C[%lld]=%g, reference %g", (long long)M, (long long)N,
                     (long long)K, (int)pack_b, ep_kind, (long long)i, (double)C[i], (double)R[i]);
    }
    cpu_gemm_packed_free(&p);
    cpu_gemm_scratch_free(&scratch);
    free(A);
    free(B);
    free(bias);
    free(res);
    free(C);
    free(R);
}

static void run_shapes(cpu_threadpool *pool) {
    static const int64_t shapes[][3] = {{1, 1, 1},    {1, 17, 3},   {7, 1, 5},    {6, 16, 256}, {5, 15, 257},
                                        {13, 33, 1},  {64, 49, 513}, {73, 129, 64}, {128, 48, 300}, {2, 200, 9},
                                        {37, 21, 600},
                                        /* 3 x 3 tasks with a 1-panel last m-block and a 3-panel last
                                         * n-block: more tasks than a 2- or 3-thread pool hands out
                                         * at once, one task per hand-out (cpu_parallel_for_each) */
                                        {150, 300, 70},
                                        /* right edges of 1-4 columns (1-2: kernel_6xn, 4 accumulator
                                         * chains over k; 3-4: kernel_6x8) with k tails of 1-3 */
                                        {7, 2, 7},    {13, 18, 3},  {32, 196, 130}, {11, 35, 259}, {6, 4, 2},
                                        {19, 50, 5},
                                        /* bottom edges of 1-5 rows with full 16-column panels
                                         * (kernel_rx16): 3 and 4 rows, odd and even k */
                                        {9, 40, 77},  {64, 64, 96}, {27, 32, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int pb = 0; pb < 3; pb++)
            for (int e = 0; e < 7; e++) check_one(pool, shapes[s][0], shapes[s][1], shapes[s][2], pb, e);
    /* B packed by rows and C of at least 512 KiB (cpu_gemm_avx2.c, local_task): non-temporal
     * stores of C with K = 64 in the small-K tile order and with K = 150 in the usual one,
     * ordinary stores in the small-K order with K = 7; a partial last A panel, right-edge
     * tiles, rows that all start a cache line (N = 2736) and rows that mostly do not. */
    static const int64_t small_k[][3] = {{46, 2853, 64}, {48, 2736, 64}, {13, 10007, 7}, {40, 3300, 150}};
    for (size_t s = 0; s < sizeof small_k / sizeof small_k[0]; s++)
        for (int e = 0; e < 7; e++) check_one(pool, small_k[s][0], small_k[s][1], small_k[s][2], 2, e);
}

static void test_packed_vs_reference(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: this CPU (or KILN_CPU_ISA) has no AVX2+FMA, the packed GEMM is not used\n");
        return;
    }
    printf("AVX-512 kernels: %s\n", cpu_gemm_avx512_usable()
                                          ? "exercised (6x32 pairs, rx32 partial A panels, x16 lone and partial B panels of 3-15 "
                                            "columns; 1-2 column tails on kernel_6xn)"
                                          : "not exercised, this CPU has no AVX-512F (AVX2 kernels ran)");
    run_shapes(NULL);
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    run_shapes(pool);
    cpu_threadpool_free(pool);
    assert_int_equal(cpu_threadpool_create(3, &pool, &err), KILN_OK);
    run_shapes(pool);
    cpu_threadpool_free(pool);
}

static void test_mismatched_pack_is_an_error(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    float *A = rand_buf(6 * 8), *B = rand_buf(8 * 4), C[24];
    cpu_gemm_packed p;
    cpu_gemm_scratch scratch = {0};
    kiln_error err = {0};
    assert_int_equal(cpu_gemm_pack_a(A, 8, 6, 8, &p, &err), KILN_OK);
    /* K differs from the packed operand's */
    assert_int_equal(cpu_sgemm_packed(NULL, 6, 4, 7, &p, NULL, 0, NULL, B, 4, C, 4, NULL, &scratch, &err),
                     KILN_ERR_INTERNAL);
    kiln_err_clear(&err);
    cpu_gemm_packed_free(&p);
    cpu_gemm_scratch_free(&scratch);
    free(A);
    free(B);
}

/* ---- Conv through the packed path (implicit GEMM packing, cpu_conv.c) ---------------- */

/* Runs Conv on X [1, C, H, W] with weights W [M, C/group, k, k]; with `weights_const` the
 * node's graph marks W as an initializer (packed path), otherwise OpenBLAS + im2col. Runs
 * twice (kernel_harness.h): the second run reuses the packed weights and must agree. */
static void run_conv(cpu_threadpool *pool, bool weights_const, const rt_value *x, const rt_value *w,
                     const rt_value *b, int64_t stride, int64_t pad, int64_t dil, int64_t group, rt_value *y) {
    int64_t strides[2] = {stride, stride}, pads[4] = {pad, pad, pad, pad}, dils[2] = {dil, dil};
    ir_attr attrs[4] = {a_ints("strides", 2, strides), a_ints("pads", 4, pads), a_ints("dilations", 2, dils),
                        a_int("group", group)};
    rt_value in[3] = {*x, *w, *b}; /* shallow copies: run_op_with only reads them */
    kiln_error err = {0};
    test_pool = pool;
    rt_value_init(y);
    if (run_op_with("Conv", 17, attrs, 4, in, 3, y, 1, weights_const, true, &err) != KILN_OK)
        fail_msg("conv failed: %s", kiln_err_msg(&err));
}

static void test_conv_packed_matches_im2col(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    /* C, H, W, M, k, stride, pad, dilation, group: the ResNet stem, 3x3 with padding at
     * several widths (runs of a 16-column panel crossing output rows), stride 2,
     * dilation, groups, a tiny image */
    static const int64_t cases[][9] = {{3, 23, 23, 8, 7, 2, 3, 1, 1},  {5, 9, 14, 7, 3, 1, 1, 1, 1},
                                       {4, 17, 5, 13, 3, 2, 1, 1, 1},  {6, 11, 11, 6, 3, 1, 2, 2, 1},
                                       {8, 10, 9, 12, 3, 1, 1, 1, 4},  {2, 2, 3, 3, 3, 1, 1, 1, 1},
                                       {16, 7, 7, 33, 3, 1, 1, 1, 1},
                                       /* stride 2 with output rows of >= 16 columns (the
                                        * phase-split packer of cpu_conv_strided_avx2.c) next
                                        * to the clipped left/right/top/bottom panels; an
                                        * even kernel; a kernel row split by a k-block edge
                                        * (K = 13*5*5 = 325: blocks of 163) */
                                       {3, 64, 96, 8, 7, 2, 3, 1, 1},  {3, 70, 70, 8, 7, 2, 3, 1, 1},
                                       {4, 40, 70, 5, 3, 2, 1, 1, 1},  {3, 20, 80, 4, 4, 2, 1, 1, 1},
                                       {13, 30, 80, 6, 5, 2, 2, 1, 1}};
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *q = cases[c];
        rt_value x, w, b, y1, y2;
        mk(&x, 4, (int64_t[]){1, q[0], q[1], q[2]});
        mk(&w, 4, (int64_t[]){q[3], q[0] / q[8], q[4], q[4]});
        mk(&b, 1, (int64_t[]){q[3]});
        run_conv(pool, true, &x, &w, &b, q[5], q[6], q[7], q[8], &y1);
        run_conv(pool, false, &x, &w, &b, q[5], q[6], q[7], q[8], &y2);
        assert_int_equal(y1.t.count, y2.t.count);
        const float *a = y1.t.data, *r = y2.t.data;
        for (uint64_t i = 0; i < y1.t.count; i++)
            if (!(fabsf(a[i] - r[i]) <= 1e-4f * (1.f + fabsf(r[i]))))
                fail_msg("conv case %zu: y[%llu] = %g packed, %g im2col", c, (unsigned long long)i, (double)a[i],
                         (double)r[i]);
        rt_value_release(&x);
        rt_value_release(&w);
        rt_value_release(&b);
        rt_value_release(&y1);
        rt_value_release(&y2);
    }
    cpu_threadpool_free(pool);
}

/* ---- the P16 layout (cpu_gemm_packed.h) ---------------------------------------------- */

/* Row-major [rows, N] <-> P16 [N/16][rows][16]. */
static void to_p16(const float *src, int64_t rows, int64_t N, float *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t n = 0; n < N; n++) dst[(n / 16) * 16 * rows + r * 16 + n % 16] = src[r * N + n];
}

static void from_p16(const float *src, int64_t rows, int64_t N, float *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t n = 0; n < N; n++) dst[r * N + n] = src[(n / 16) * 16 * rows + r * 16 + n % 16];
}

/* cpu_sgemm_conv1x1 with every combination of P16 input, output and residual against the
 * reference: M = 40 (six full 6-row panels and a 4-row edge), N = 64 (two pairs of
 * 16-column panels for the AVX-512 kernel, whose halves then land in different P16
 * blocks), K = 48 (one k-block) and 700 (three: a P16 input's panels then lie further
 * apart than one k-block), ReLU in the tile and Sigmoid applied after it. */
static void test_conv1x1_p16_layouts(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    printf("P16 halves through the AVX-512 6x32 kernel: %s\n",
           cpu_gemm_avx512_usable() ? "exercised" : "not exercised, this CPU has no AVX-512F (AVX2 kernels ran)");
    const int64_t M = 40, N = 64, Ks[2] = {48, 700};
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    for (int ki = 0; ki < 2; ki++)
        for (int act = 0; act < 2; act++)
            for (int io_bits = 0; io_bits < 8; io_bits++) {
                int64_t K = Ks[ki];
                float *A = rand_buf(M * K), *B = rand_buf(K * N), *bias = rand_buf(M), *res = rand_buf(M * N);
                float *Bp = kiln_alloc_aligned((size_t)(K * N) * sizeof(float));
                float *Rp = kiln_alloc_aligned((size_t)(M * N) * sizeof(float));
                float *C = kiln_alloc_aligned((size_t)(M * N) * sizeof(float));
                float *got = malloc((size_t)(M * N) * sizeof(float)), *want = malloc((size_t)(M * N) * sizeof(float));
                assert_true(Bp && Rp && C && got && want);
                cpu_gemm_io io = {(io_bits & 1) != 0, (io_bits & 2) != 0, (io_bits & 4) != 0};
                to_p16(B, K, N, Bp);
                to_p16(res, M, N, Rp);
                cpu_epilogue ep = {CPU_BIAS_ROW, bias, res, N, {act ? CPU_ACT_SIGMOID : CPU_ACT_RELU, 0.f, 0.f}};
                ref_gemm(M, N, K, A, B, &ep, want);
                if (io.res_p16) ep.residual = Rp;
                cpu_gemm_packed pa;
                cpu_gemm_scratch scratch = {0};
                assert_int_equal(cpu_gemm_pack_a(A, K, M, K, &pa, &err), KILN_OK);
                for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* every element must be written */
                if (cpu_sgemm_conv1x1(pool, M, N, K, &pa, io.b_p16 ? Bp : B, C, &ep, io, &scratch, &err) != KILN_OK)
                    fail_msg("conv1x1 failed: %s", kiln_err_msg(&err));
                if (io.c_p16) from_p16(C, M, N, got);
                else memcpy(got, C, (size_t)(M * N) * sizeof(float));
                for (int64_t i = 0; i < M * N; i++)
                    if (!(fabsf(got[i] - want[i]) <= 1e-4f * (1.f + fabsf(want[i]))))
                        fail_msg("K %lld, %s, P16 in/out/residual %d/%d/%d: C[%lld][%lld] = %g, expected %g",
                                 (long long)K, act ? "Sigmoid" : "ReLU", io.b_p16, io.c_p16, io.res_p16,
                                 (long long)(i / N), (long long)(i % N), (double)got[i], (double)want[i]);
                cpu_gemm_packed_free(&pa);
                cpu_gemm_scratch_free(&scratch);
                free(A), free(B), free(bias), free(res), free(got), free(want);
                free(Bp), free(Rp), free(C); /* kiln_alloc_aligned memory goes back with free() */
            }
    cpu_threadpool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_vs_reference),
        cmocka_unit_test(test_mismatched_pack_is_an_error),
        cmocka_unit_test(test_conv_packed_matches_im2col),
        cmocka_unit_test(test_conv1x1_p16_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
