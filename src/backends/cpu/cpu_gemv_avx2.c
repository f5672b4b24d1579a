/* cpu_gemv_avx2.c - AVX2 + FMA kernels for GEMMs with M <= CPU_GEMV_MAX_M rows (cpu_gemv.h
 * says when and why). Both kernels read each element of B exactly once per call and keep
 * A (at most 4 rows) in L1.
 *
 * Row counts are compile-time constants inside the kernels (the always-inline bodies are
 * instantiated per M through a switch), so the accumulators stay in registers.
 */
#include <immintrin.h>

#include "backends/cpu/cpu_gemv.h"

#define GEMV_INLINE static inline __attribute__((always_inline))

/* lanes [0, r) set, r in [0, 8] */
static inline __m256i tail_mask(int64_t r) {
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(m + 8 - r));
}

/* horizontal sums of four vectors: {sum a, sum b, sum c, sum d} */
static inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

static inline float hsum1(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- B is [N, K]: dot products ------------------------------------------------------ */

/* MR rows of A (1 or 2) against NR rows of B (MR*NR <= 8 accumulators) over k in
 * [k0, k1): the running sums come from and go back to acc[m * NR + n] */
GEMV_INLINE void nk_part(int MR, int NR, int64_t k0, int64_t k1, const float *A, int64_t lda, const float *B,
                         int64_t ldb, __m256 *accp) {
    __m256 acc[2][8];
    for (int m = 0; m < MR; m++)
        for (int n = 0; n < NR; n++) acc[m][n] = accp[m * NR + n];
    int64_t k = k0;
    for (; k + 8 <= k1; k += 8) {
        __m256 a[2];
        for (int m = 0; m < MR; m++) a[m] = _mm256_loadu_ps(A + m * lda + k);
        for (int n = 0; n < NR; n++) {
            __m256 b = _mm256_loadu_ps(B + n * ldb + k);
            for (int m = 0; m < MR; m++) acc[m][n] = _mm256_fmadd_ps(a[m], b, acc[m][n]);
        }
    }
    if (k < k1) {
        __m256i mask = tail_mask(k1 - k);
        __m256 a[2];
        for (int m = 0; m < MR; m++) a[m] = _mm256_maskload_ps(A + m * lda + k, mask);
        for (int n = 0; n < NR; n++) {
            __m256 b = _mm256_maskload_ps(B + n * ldb + k, mask);
            for (int m = 0; m < MR; m++) acc[m][n] = _mm256_fmadd_ps(a[m], b, acc[m][n]);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int n = 0; n < NR; n++) accp[m * NR + n] = acc[m][n];
}

GEMV_INLINE void nk_store(int NR, const __m256 *acc, float alpha, float *c) {
    __m128 va = _mm_set1_ps(alpha);
    if (NR == 8) {
        _mm_storeu_ps(c, _mm_mul_ps(va, hsum4(acc[0], acc[1], acc[2], acc[3])));
        _mm_storeu_ps(c + 4, _mm_mul_ps(va, hsum4(acc[4], acc[5], acc[6], acc[7])));
    } else if (NR == 4) {
        _mm_storeu_ps(c, _mm_mul_ps(va, hsum4(acc[0], acc[1], acc[2], acc[3])));
    } else {
        for (int n = 0; n < NR; n++) c[n] = alpha * hsum1(acc[n]);
    }
}

#define GEMV_NK_KC 512 /* k-chunk: 4 rows of B and 8 rows of A = 24 KiB, inside L1 */

/* NR rows of B (4 or 1) against all M rows of A in pairs; for M > 2 the k-chunks keep
 * the B rows in L1 while every pair of A rows passes over them (one pass per pair over
 * the whole K would re-read them from L2, which capped M = 8 at ~50 GFLOP/s) */
GEMV_INLINE void nk_rows(int NR, int64_t M, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                         int64_t ldb, float *C, int64_t ldc) {
    __m256 acc[CPU_GEMV_MAX_M / 2 + 1][8];
    int64_t pairs = M / 2;
    for (int64_t p = 0; p <= pairs; p++)
        for (int n = 0; n < 8; n++) acc[p][n] = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < K; k0 += GEMV_NK_KC) {
        int64_t k1 = K - k0 < GEMV_NK_KC ? K : k0 + GEMV_NK_KC;
        for (int64_t p = 0; p < pairs; p++) nk_part(2, NR, k0, k1, A + 2 * p * lda, lda, B, ldb, acc[p]);
        if (M & 1) nk_part(1, NR, k0, k1, A + 2 * pairs * lda, lda, B, ldb, acc[pairs]);
    }
    for (int64_t p = 0; p < pairs; p++) {
        nk_store(NR, acc[p], alpha, C + 2 * p * ldc);
        nk_store(NR, acc[p] + NR, alpha, C + (2 * p + 1) * ldc);
    }
    if (M & 1) nk_store(NR, acc[pairs], alpha, C + 2 * pairs * ldc);
}

void cpu_sgemv_nk_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float *C, int64_t ldc) {
    int64_t n = n0;
    if (M == 1) { /* a single row: 8 rows of B per step, streamed once */
        __m256 acc[8];
        for (; n + 8 <= n1; n += 8) {
            for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
            nk_part(1, 8, 0, K, A, lda, B + n * ldb, ldb, acc);
            nk_store(8, acc, alpha, C + n);
        }
    }
    for (; n + 4 <= n1; n += 4) nk_rows(4, M, K, alpha, A, lda, B + n * ldb, ldb, C + n, ldc);
    for (; n < n1; n++) nk_rows(1, M, K, alpha, A, lda, B + n * ldb, ldb, C + n, ldc);
}

/* ---- B is [K, N]: axpy over column blocks ------------------------------------------- */

#define GEMV_KC 128 /* B rows per k-block: 128 rows of a 1000-wide B span 128 pages */

/* Columns [j, j + 8*NV) of MR rows of C over k in [k0, k0+kc); first: start from 0. */
GEMV_INLINE void kn_block(int MR, int NV, int64_t k0, int64_t kc, bool first, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float *C, int64_t ldc) {
    __m256 acc[4][2];
    for (int m = 0; m < MR; m++)
        for (int v = 0; v < NV; v++) acc[m][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(C + m * ldc + 8 * v);
    for (int64_t k = k0; k < k0 + kc; k++) {
        __m256 b[2];
        for (int v = 0; v < NV; v++) b[v] = _mm256_loadu_ps(B + k * ldb + 8 * v);
        for (int m = 0; m < MR; m++) {
            __m256 a = _mm256_broadcast_ss(A + m * lda + k);
            for (int v = 0; v < NV; v++) acc[m][v] = _mm256_fmadd_ps(a, b[v], acc[m][v]);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(C + m * ldc + 8 * v, acc[m][v]);
}

/* k-block [k0, k0+kc) of MR rows of C over columns [n0, n1) */
GEMV_INLINE void kn_rows(int MR, int64_t n0, int64_t n1, int64_t k0, int64_t kc, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float *C, int64_t ldc) {
    bool first = k0 == 0;
    int64_t j = n0;
    for (; j + 16 <= n1; j += 16) kn_block(MR, 2, k0, kc, first, A, lda, B + j, ldb, C + j, ldc);
    for (; j + 8 <= n1; j += 8) kn_block(MR, 1, k0, kc, first, A, lda, B + j, ldb, C + j, ldc);
    for (; j < n1; j++) /* last < 8 columns */
        for (int m = 0; m < MR; m++) {
            float s = first ? 0.f : C[m * ldc + j];
            for (int64_t k = k0; k < k0 + kc; k++) s += A[m * lda + k] * B[k * ldb + j];
            C[m * ldc + j] = s;
        }
}

void cpu_sgemv_kn_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float *C, int64_t ldc) {
    /* k-blocks outermost: for M > 4 the second group of rows re-reads the k-block's slab
     * of B (GEMV_KC rows x this task's columns) from L2 instead of memory */
    for (int64_t k0 = 0; k0 < K; k0 += GEMV_KC) {
        int64_t kc = K - k0 < GEMV_KC ? K - k0 : GEMV_KC;
        for (int64_t m = 0; m < M; m += 4) {
            int64_t r = M - m < 4 ? M - m : 4;
            const float *a = A + m * lda;
            float *c = C + m * ldc;
            if (r == 4) kn_rows(4, n0, n1, k0, kc, a, lda, B, ldb, c, ldc);
            else if (r == 3) kn_rows(3, n0, n1, k0, kc, a, lda, B, ldb, c, ldc);
            else if (r == 2) kn_rows(2, n0, n1, k0, kc, a, lda, B, ldb, c, ldc);
            else kn_rows(1, n0, n1, k0, kc, a, lda, B, ldb, c, ldc);
        }
    }
    if (alpha != 1.f)
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = n0; j < n1; j++) C[m * ldc + j] *= alpha;
}
