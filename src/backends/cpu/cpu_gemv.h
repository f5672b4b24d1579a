/* cpu_gemv.h - GEMMs with very few rows (M <= CPU_GEMV_MAX_M): the fully connected layers
 * of CNN classifiers at batch 1 (ResNet-50's fc: 1x2048 times a 1000x2048 weight) and
 * decode-time MatMuls.
 *
 * Such a GEMM is a matrix-vector product bound by reading B once (ResNet's fc weight is
 * 8 MB: ~0.4 ms at ~20 GB/s). The packed 6x16 GEMM wastes 5 of 6 rows on M = 1 and
 * OpenBLAS's sgemm re-packs B on every call (1.2-1.5 ms per ResNet run against ONNX
 * Runtime's 0.5 ms), so these kernels read B in place, once, in either layout:
 *   trans_b: B is [N, K] (Gemm transB=1, the usual Linear weight): dot products, 8 rows of
 *            B per step for M = 1, 4 rows x 2 rows of A in k-chunks kept in L1 otherwise;
 *   else:    B is [K, N] (MatMul, Gemm transB=0): axpy over 16-column blocks of B rows,
 *            k-blocks of 128 rows so the pages of a block are reused across columns.
 * Columns are split over kiln's pool; each task applies the fused epilogue (bias,
 * residual, activation) to its columns. Needs AVX2 + FMA (cpu_gemv_supported).
 *
 * Why 4 rows at most: at M = 8 (ResNet's fc at batch 8, 1000x2048 weight, warm caches,
 * min of 200 runs, load ~4) these kernels took 0.66-0.69 ms at 1 thread against 0.58-0.60
 * for the packed 6x16 GEMM with the weight packed once per node, which Gemm/MatMul use
 * above CPU_GEMV_MAX_M (ONNX Runtime: 0.44 ms).
 */
#ifndef KILN_BACKENDS_CPU_CPU_GEMV_H
#define KILN_BACKENDS_CPU_CPU_GEMV_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_gemm.h"

#define CPU_GEMV_MAX_M 4

/* True when cpu_sgemv_small may run (AVX2 + FMA, same switches as the packed GEMM). */
bool cpu_gemv_supported(void);

/* C[M,N] = alpha * A[M,K] * op(B) then the epilogue (may be NULL); C is write-only.
 * A row-major (lda); op(B) = B [K,N] (ldb) or, with trans_b, B^T for B [N,K] (ldb).
 * 1 <= M <= CPU_GEMV_MAX_M, N, K >= 1. Call from the kernel's thread, not a pool worker. */
void cpu_sgemv_small(cpu_threadpool *pool, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                     const cpu_epilogue *ep);

/* The AVX2 column-range kernels behind it (cpu_gemv_avx2.c): columns [n0, n1) of C. */
void cpu_sgemv_nk_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float *C, int64_t ldc);
void cpu_sgemv_kn_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float *C, int64_t ldc);

#endif
