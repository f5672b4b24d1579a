/* cpu_gemm_bf16x3.h - FP32 GEMM on AMX tiles as three bfloat16 products ("bf16x3"), for
 * MatMuls whose B is a constant weight, in engines that permit TF32-class precision.
 *
 * Why: an AVX-512 core multiplies 32 float pairs per cycle; its AMX unit multiplies 512
 * bfloat16 pairs per cycle into float32 sums (TDPBF16PS, 2.18 TFLOP/s against 0.13 for
 * FP32 FMAs on the dev VM, docs/BENCHMARKS.md "Session 15"). BERT-base spends 95% of its
 * time in such GEMMs, at the FMA units' peak, so FP32 arithmetic has no headroom left.
 *
 * How the precision is kept: each float x is split into two bfloat16 parts, hi = x
 * rounded to 8 significant bits and lo = (x - hi) rounded likewise, so x = hi + lo within
 * 2^-17 |x|. Then a*b = ah*bh + ah*bl + al*bh + (al*bl + ...), and the three kept products
 * are exact in float32; the dropped terms are below about 3 * 2^-17 of |a*b|. That is a
 * relative error near 1e-5 per product, 100 times smaller than TF32's 10-bit inputs,
 * 100 times larger than FP32 rounding. Engines built with --noTF32 never take this path.
 *
 * Layout. K is cut into chunks of 32; B is packed once per node into tiles of 16 columns
 * x 32 k, in AMX's pair layout (row r holds k = 2r and 2r + 1 for each of the 16 columns),
 * hi tile then lo tile per chunk, the chunks of one 16-column strip contiguous. A is
 * split per call into row-major hi and lo arrays, rows padded to 32 and K to 32 with
 * zeros: all at once, or block by block as the tasks run (cpu_gemm_bf16x3_amx.c). The kernel keeps a 32x32 block of C in four tiles.
 */
#ifndef KILN_BACKENDS_CPU_CPU_GEMM_BF16X3_H
#define KILN_BACKENDS_CPU_CPU_GEMM_BF16X3_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_gemm_packed.h"

typedef struct cpu_bf16x3_b {
    int64_t K, N;     /* the logical shape of B */
    int64_t n_chunks; /* ceil(K / 32) */
    int64_t n_strips; /* 16-column strips, padded to an even count (the kernel takes pairs) */
    uint16_t *data;   /* n_strips x n_chunks x {hi, lo} x 512 bfloat16, 64-byte aligned, owned */
} cpu_bf16x3_b;

/* True when this CPU has AMX-TILE and AMX-BF16, the OS saves tile state, the process got
 * permission to use it (asked once), and KILN_CPU_ISA / KILN_NO_AMX=1 do not forbid it. */
bool cpu_bf16x3_usable(void);

/* Packs row-major B [K, N] (row stride ldb), or with trans its transpose given as [N, K]
 * (a conv's weights [M, C]: B = W^T). Fails only on allocation failure or sizes that
 * overflow. */
kiln_status cpu_bf16x3_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, bool trans, cpu_bf16x3_b *out,
                              kiln_error *err);
void cpu_bf16x3_b_free(cpu_bf16x3_b *b);

/* C[M,N] = A[M,K] * B, then the epilogue (may be NULL); C is write-only, A row-major with
 * row stride lda. Splits A into *scratch and runs over the pool's threads; call it from
 * the kernel's thread, only when cpu_bf16x3_usable(). M, N, K must be > 0. */
kiln_status cpu_sgemm_bf16x3(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                             const cpu_bf16x3_b *pb, float *C, int64_t ldc, const cpu_epilogue *ep,
                             cpu_gemm_scratch *scratch, kiln_error *err);

/* A 2-D conv, group 1, C a multiple of 16, as the GEMM Y^T = im2col(X)^T * W^T: rows are
 * the N * out_size output positions, K = KH * KW * C (tap-major: k = tap * C + c), columns
 * the M output channels. w is packed with trans from the weights reordered to
 * [M][KH * KW][C] (cpu_conv.c). Pads, strides and dilations as in g. x, y and the
 * epilogue's residual are NCHW or C16 as `layout` says (cpu_c16.h's CPU_C16_X / _Y / _RES);
 * the bias is per output channel, so ep's bias must be CPU_BIAS_COL here. */
kiln_status cpu_conv_bf16x3(cpu_threadpool *pool, const cpu_conv_geom *g, int64_t N, int64_t C, int64_t M,
                            const float *x, const cpu_bf16x3_b *w, float *y, const cpu_epilogue *ep, unsigned layout,
                            cpu_gemm_scratch *scratch, kiln_error *err);

/* Rounds a float to bfloat16 bits, to nearest even; NaN stays a (quiet) NaN, infinities
 * stay infinite. Shared by the packer and the tests. */
static inline uint16_t cpu_bf16_round(float x) {
    union {
        float f;
        uint32_t u;
    } v = {x};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float cpu_bf16_to_float(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

#endif
