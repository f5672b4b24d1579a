/* cpu_gemm_avx512.c - the AVX-512 6x32 microkernels and the packed GEMM's edge kernels
 * (cpu_gemm_avx512.h says where they are used and why). Compiled with -mavx512f; never
 * called unless cpu_gemm_avx512_usable().
 *
 * Why: on an AVX-512 server core (the Xeon of the GPU host: 2 x 512-bit FMA units) the
 * 6x16 AVX2 kernel reaches at most half of the core's FLOP rate, and ONNX Runtime's
 * MLAS, which dispatches to AVX-512 there, ran ResNet-50 and BERT 1.6-2x faster than
 * kiln (docs/BENCHMARKS.md "Session 4: AVX-512"). The register budget: 12 accumulators
 * (6 rows x 2 zmm) and 2 B vectors; per k step 12 FMAs, 6 of them each with its A value
 * broadcast from memory (since session 13 the main loop is assembly, below).
 * Measured on that Xeon with both operands in L1 (1 thread, thread CPU time, min of 7):
 * 168.5-173.2 GFLOP/s for kc 64-320, 96-98% of a register-only FMA loop's 176.1. A 12x32
 * form (two A panels, 24 accumulators) ran at 95-96% there and made ResNet-50 and BERT
 * slower in the network (61.6 -> 65.2 ms and 166.7 -> 174.0 ms, 1 thread), so the 6x32
 * tile stays (docs/BENCHMARKS.md "Session 9").
 */
#include <immintrin.h>
#include <stdint.h>

#include "backends/cpu/cpu_gemm_avx512.h"

/* One 16-column half of an output row: add C (later k-blocks), then the fusable
 * epilogue, then store (non-temporally with nt when it is one whole aligned line). With
 * `masked` (a compile-time constant after inlining) only the lanes in k are read from C,
 * a column bias and the residual, and written: the first nr < 16 columns of a partial
 * panel, nothing past them touched. */
static inline __attribute__((always_inline)) void half_out16_impl(float *c, __m512 v, bool masked, __mmask16 k,
                                                                  bool accumulate, bool fuse, const cpu_epilogue *ep,
                                                                  int64_t m, int64_t n0, bool nt) {
#define LOAD16(P) (masked ? _mm512_maskz_loadu_ps(k, (P)) : _mm512_loadu_ps(P))
    if (accumulate) v = _mm512_add_ps(v, LOAD16(c));
    if (fuse) {
        if (ep->bias_mode == CPU_BIAS_ROW) v = _mm512_add_ps(v, _mm512_set1_ps(ep->bias[m]));
        else if (ep->bias_mode == CPU_BIAS_COL) v = _mm512_add_ps(v, LOAD16(ep->bias + n0));
        if (ep->residual) v = _mm512_add_ps(v, LOAD16(ep->residual + m * ep->ld_res + n0));
        if (ep->act.kind == CPU_ACT_RELU) v = _mm512_max_ps(v, _mm512_setzero_ps());
        else if (ep->act.kind == CPU_ACT_CLIP) /* operands ordered so a NaN stays NaN, as Clip */
            v = _mm512_min_ps(_mm512_set1_ps(ep->act.b), _mm512_max_ps(_mm512_set1_ps(ep->act.a), v));
    }
#undef LOAD16
    if (masked) _mm512_mask_storeu_ps(c, k, v);
    else if (nt && ((uintptr_t)c & 63) == 0) _mm512_stream_ps(c, v);
    else _mm512_storeu_ps(c, v);
}

static inline void half_out16(float *c, __m512 v, bool accumulate, bool fuse, const cpu_epilogue *ep, int64_t m,
                              int64_t n0, bool nt) {
    half_out16_impl(c, v, false, 0xFFFF, accumulate, fuse, ep, m, n0, nt);
}

/* Row m of a 6x32 tile: its two halves through their views (h0 for columns n0.., h1 for
 * n0+16..). */
static inline void row_out32(const cpu_half_out *h0, const cpu_half_out *h1, __m512 v0, __m512 v1, bool accumulate,
                             bool fuse, int64_t m, int64_t n0, bool nt) {
    half_out16(h0->c + m * h0->ldc + n0, v0, accumulate, fuse, h0->ep, m, n0, nt);
    half_out16(h1->c + m * h1->ldc + n0 + 16, v1, accumulate, fuse, h1->ep, m, n0 + 16, nt);
}

/* One k step: row i's A value (at A + i * ASTRIDE) times both B vectors. */
#define STEP6(A, ASTRIDE, B0, B1)                                                                                      \
    do {                                                                                                               \
        __m512 x0 = _mm512_loadu_ps(B0), x1 = _mm512_loadu_ps(B1), y;                                                  \
        y = _mm512_set1_ps((A)[0 * (ASTRIDE)]);                                                                        \
        c00 = _mm512_fmadd_ps(y, x0, c00);                                                                             \
        c01 = _mm512_fmadd_ps(y, x1, c01);                                                                             \
        y = _mm512_set1_ps((A)[1 * (ASTRIDE)]);                                                                        \
        c10 = _mm512_fmadd_ps(y, x0, c10);                                                                             \
        c11 = _mm512_fmadd_ps(y, x1, c11);                                                                             \
        y = _mm512_set1_ps((A)[2 * (ASTRIDE)]);                                                                        \
        c20 = _mm512_fmadd_ps(y, x0, c20);                                                                             \
        c21 = _mm512_fmadd_ps(y, x1, c21);                                                                             \
        y = _mm512_set1_ps((A)[3 * (ASTRIDE)]);                                                                        \
        c30 = _mm512_fmadd_ps(y, x0, c30);                                                                             \
        c31 = _mm512_fmadd_ps(y, x1, c31);                                                                             \
        y = _mm512_set1_ps((A)[4 * (ASTRIDE)]);                                                                        \
        c40 = _mm512_fmadd_ps(y, x0, c40);                                                                             \
        c41 = _mm512_fmadd_ps(y, x1, c41);                                                                             \
        y = _mm512_set1_ps((A)[5 * (ASTRIDE)]);                                                                        \
        c50 = _mm512_fmadd_ps(y, x0, c50);                                                                             \
        c51 = _mm512_fmadd_ps(y, x1, c51);                                                                             \
    } while (0)

#define ZERO12                                                                                                         \
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps(), c10 = _mm512_setzero_ps(),                         \
           c11 = _mm512_setzero_ps(), c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps(),                         \
           c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps(), c40 = _mm512_setzero_ps(),                         \
           c41 = _mm512_setzero_ps(), c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps()

/* The 6x32 main loops are written in assembly because of how compilers emit STEP6: gcc 12
 * broadcasts each A value into a register with its own vbroadcastss, then shuffles
 * accumulators between registers (about ten vmovaps per two k steps). On the 2-core
 * Sapphire Rapids-class dev VM that loop ran at 83-86% of a register-only FMA loop with
 * both panels in L1 (median of 15 calibrated rounds, kc 64-320), while the same loop with
 * the broadcast folded into each FMA (vfmadd231ps m32{1to16}: one fused load+FMA uop, the
 * A value loaded twice from L1) ran at 96-99% (docs/BENCHMARKS.md, "Session 13"). STEP6
 * stays for the odd last k step. GCC allows 30 asm operands and each in-out accumulator
 * counts twice, so the B vectors live in fixed registers (zmm30, zmm31, clobbered), the
 * second B panel is addressed as b0 + bdiff, and the loop runs until A reaches a_end. */
#define ASM_FMA2(AOFF, ACC0, ACC1)                                                                                     \
    "vfmadd231ps " #AOFF "(%[a])%{1to16%}, %%zmm30, %[" #ACC0 "]\n\t"                                                 \
    "vfmadd231ps " #AOFF "(%[a])%{1to16%}, %%zmm31, %[" #ACC1 "]\n\t"
/* One k step: B vectors at byte offset BOFF of both panels, A values at byte offsets
 * A0 + i * AS (i = 0..5). */
#define ASM_STEP6(BOFF, A0, AS)                                                                                        \
    "vmovups " #BOFF "(%[b0]), %%zmm30\n\t"                                                                           \
    "vmovups " #BOFF "(%[b0], %[bdiff]), %%zmm31\n\t"                                                                 \
    ASM_FMA2(A0, c00, c01) ASM_FMA2(A0 + AS, c10, c11) ASM_FMA2(A0 + 2 * AS, c20, c21)                            \
    ASM_FMA2(A0 + 3 * AS, c30, c31) ASM_FMA2(A0 + 4 * AS, c40, c41) ASM_FMA2(A0 + 5 * AS, c50, c51)
#define ASM_ACC_OPERANDS                                                                                               \
    [c00] "+v"(c00), [c01] "+v"(c01), [c10] "+v"(c10), [c11] "+v"(c11), [c20] "+v"(c20), [c21] "+v"(c21),           \
    [c30] "+v"(c30), [c31] "+v"(c31), [c40] "+v"(c40), [c41] "+v"(c41), [c50] "+v"(c50), [c51] "+v"(c51)

void cpu_gemm_kernel_6x32_avx512(int64_t kc, const float *a, const float *b0, const float *b1,
                                 const cpu_half_out *half0, const cpu_half_out *half1, int64_t m0, int64_t n0,
                                 bool accumulate, bool fuse, bool nt) {
    ZERO12;
    if (kc >= 2) {
        const float *a_end = a + (kc / 2) * 12;
        intptr_t bdiff = (const char *)b1 - (const char *)b0;
        /* per two k steps: A from memory (conv weights in a network) prefetched 64 k steps
         * (1536 bytes) ahead, as the AVX2 kernel; A advances 12 floats, each B panel 32 */
        __asm__ volatile("1:\n\t"
                         "prefetcht0 1536(%[a])\n\t" ASM_STEP6(0, 0, 4) ASM_STEP6(64, 24, 4)
                         "addq $48, %[a]\n\t"
                         "subq $-128, %[b0]\n\t"
                         "cmpq %[a_end], %[a]\n\t"
                         "jb 1b\n\t"
                         : ASM_ACC_OPERANDS, [a] "+r"(a), [b0] "+r"(b0)
                         : [bdiff] "r"(bdiff), [a_end] "r"(a_end)
                         : "memory", "cc", "xmm30", "xmm31");
        b1 = (const float *)((const char *)b0 + bdiff);
    }
    if (kc & 1) STEP6(a, 1, b0, b1);
    row_out32(half0, half1, c00, c01, accumulate, fuse, m0 + 0, n0, nt);
    row_out32(half0, half1, c10, c11, accumulate, fuse, m0 + 1, n0, nt);
    row_out32(half0, half1, c20, c21, accumulate, fuse, m0 + 2, n0, nt);
    row_out32(half0, half1, c30, c31, accumulate, fuse, m0 + 3, n0, nt);
    row_out32(half0, half1, c40, c41, accumulate, fuse, m0 + 4, n0, nt);
    row_out32(half0, half1, c50, c51, accumulate, fuse, m0 + 5, n0, nt);
}

/* The first mr (1..5) rows of a 6x32 tile, mr a compile-time constant after inlining
 * (cpu_gemm_kernel_rx32_avx512), so the accumulator array stays in registers. */
static inline __attribute__((always_inline)) void kernel_rx32_impl(int64_t kc, const float *a, const float *b0,
                                                                   const float *b1, const cpu_half_out *half0,
                                                                   const cpu_half_out *half1, int64_t m0, int64_t n0,
                                                                   bool accumulate, bool fuse, bool nt, int mr) {
    __m512 c[5][2];
    for (int i = 0; i < mr; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 x0 = _mm512_loadu_ps(b0 + k * 16), x1 = _mm512_loadu_ps(b1 + k * 16);
        for (int i = 0; i < mr; i++) {
            __m512 y = _mm512_set1_ps(a[k * 6 + i]);
            c[i][0] = _mm512_fmadd_ps(y, x0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(y, x1, c[i][1]);
        }
    }
    for (int i = 0; i < mr; i++) row_out32(half0, half1, c[i][0], c[i][1], accumulate, fuse, m0 + i, n0, nt);
}

void cpu_gemm_kernel_rx32_avx512(int64_t kc, const float *a, const float *b0, const float *b1, int mr,
                                 const cpu_half_out *half0, const cpu_half_out *half1, int64_t m0, int64_t n0,
                                 bool accumulate, bool fuse, bool nt) {
    switch (mr) {
    case 1: kernel_rx32_impl(kc, a, b0, b1, half0, half1, m0, n0, accumulate, fuse, nt, 1); break;
    case 2: kernel_rx32_impl(kc, a, b0, b1, half0, half1, m0, n0, accumulate, fuse, nt, 2); break;
    case 3: kernel_rx32_impl(kc, a, b0, b1, half0, half1, m0, n0, accumulate, fuse, nt, 3); break;
    case 4: kernel_rx32_impl(kc, a, b0, b1, half0, half1, m0, n0, accumulate, fuse, nt, 4); break;
    default: kernel_rx32_impl(kc, a, b0, b1, half0, half1, m0, n0, accumulate, fuse, nt, 5); break;
    }
}

/* mr x nr (mr <= 6 a compile-time constant after inlining, nr <= 16) against one B panel.
 * Even and odd k steps accumulate apart: with 6 or fewer rows one chain per row would
 * leave the FMA units waiting on their own latency. */
static inline __attribute__((always_inline)) void kernel_x16_impl(int64_t kc, const float *a, const float *b,
                                                                  int nr, const cpu_half_out *h, int64_t m0,
                                                                  int64_t n0, bool accumulate, bool fuse, bool nt,
                                                                  int mr) {
    __m512 c[6], d[6];
    for (int i = 0; i < mr; i++) c[i] = d[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {
        __m512 x = _mm512_loadu_ps(b + k * 16), y = _mm512_loadu_ps(b + k * 16 + 16);
        for (int i = 0; i < mr; i++) {
            c[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[k * 6 + i]), x, c[i]);
            d[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[k * 6 + 6 + i]), y, d[i]);
        }
    }
    if (k < kc) {
        __m512 x = _mm512_loadu_ps(b + k * 16);
        for (int i = 0; i < mr; i++) c[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[k * 6 + i]), x, c[i]);
    }
    __mmask16 mask = (__mmask16)((1u << nr) - 1);
    for (int i = 0; i < mr; i++) {
        __m512 v = _mm512_add_ps(c[i], d[i]);
        float *row = h->c + (m0 + i) * h->ldc + n0;
        if (nr == 16) half_out16(row, v, accumulate, fuse, h->ep, m0 + i, n0, nt);
        else half_out16_impl(row, v, true, mask, accumulate, fuse, h->ep, m0 + i, n0, false);
    }
}

void cpu_gemm_kernel_x16_avx512(int64_t kc, const float *a, const float *b, int mr, int nr, const cpu_half_out *h,
                                int64_t m0, int64_t n0, bool accumulate, bool fuse, bool nt) {
    switch (mr) {
    case 1: kernel_x16_impl(kc, a, b, nr, h, m0, n0, accumulate, fuse, nt, 1); break;
    case 2: kernel_x16_impl(kc, a, b, nr, h, m0, n0, accumulate, fuse, nt, 2); break;
    case 3: kernel_x16_impl(kc, a, b, nr, h, m0, n0, accumulate, fuse, nt, 3); break;
    case 4: kernel_x16_impl(kc, a, b, nr, h, m0, n0, accumulate, fuse, nt, 4); break;
    case 5: kernel_x16_impl(kc, a, b, nr, h, m0, n0, accumulate, fuse, nt, 5); break;
    default: kernel_x16_impl(kc, a, b, nr, h, m0, n0, accumulate, fuse, nt, 6); break;
    }
}

void cpu_winograd_kernel_6x32_avx512(int64_t kc, const float *a, const float *b0, const float *b1, float *c,
                                     int64_t ldc, bool accumulate) {
    ZERO12;
    for (int64_t k = 0; k < kc; k += 8) {
        /* the U panels stream from memory on the first A panel: 4 steps ahead */
        for (int l = 0; l < 128; l += 16) {
            _mm_prefetch((const char *)(b0 + 512 + l), _MM_HINT_T0);
            _mm_prefetch((const char *)(b1 + 512 + l), _MM_HINT_T0);
        }
        for (int u = 0; u < 8; u++) STEP6(a + u, 8, b0 + u * 16, b1 + u * 16);
        a += 48;
        b0 += 128;
        b1 += 128;
    }
    /* row i of c at c + i * ldc: both halves through one view */
    const cpu_half_out h = {c, ldc, NULL};
    row_out32(&h, &h, c00, c01, accumulate, false, 0, 0, false);
    row_out32(&h, &h, c10, c11, accumulate, false, 1, 0, false);
    row_out32(&h, &h, c20, c21, accumulate, false, 2, 0, false);
    row_out32(&h, &h, c30, c31, accumulate, false, 3, 0, false);
    row_out32(&h, &h, c40, c41, accumulate, false, 4, 0, false);
    row_out32(&h, &h, c50, c51, accumulate, false, 5, 0, false);
}
