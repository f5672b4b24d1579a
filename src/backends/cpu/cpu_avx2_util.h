/* cpu_avx2_util.h - small AVX2 building blocks shared by the *_avx2.c kernels: the 8x8
 * register transpose (GEMM and Winograd packing) and even-lane extraction for stride-2
 * reads (strided conv phases, depthwise phase rows, MaxPool). Include only from files
 * compiled with -mavx2 (the *_avx2.c sources). */
#ifndef KILN_BACKENDS_CPU_CPU_AVX2_UTIL_H
#define KILN_BACKENDS_CPU_CPU_AVX2_UTIL_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

/* In-register 8x8 transpose: r[i] holds row i on entry, column i on exit. */
static inline void cpu_transpose8_ps(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* The even elements of the 16 floats at p: p[0], p[2], ..., p[14]. */
static inline __m256 cpu_even16_ps(const float *p) {
    __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* dst[t] = src[2t] for t < n, 8 at a time. A vector step reads src[2t .. 2t+15], so it
 * runs only while that ends before src_lim; when dst_slack it may also write up to 7
 * floats past dst[n-1] (the caller overwrites them later), which turns the rows of 7-28
 * outputs of ResNet's 14x14-56x56 inputs from mostly scalar tails into whole vectors. */
static inline void cpu_extract_even(const float *src, int64_t n, float *dst, const float *src_lim, bool dst_slack) {
    int64_t t = 0;
    for (; t < n && (t + 8 <= n || dst_slack) && src + 2 * t + 16 <= src_lim; t += 8)
        _mm256_storeu_ps(dst + t, cpu_even16_ps(src + 2 * t));
    for (; t < n; t++) dst[t] = src[2 * t];
}

#endif
