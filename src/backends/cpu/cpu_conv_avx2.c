/* cpu_conv_avx2.c - AVX2 helpers of the implicit-GEMM Conv packer (cpu_conv.c), called
 * only on the packed-GEMM path (cpu_gemm_packed_supported(), which implies AVX2).
 *
 * Stride-2 convs (the 7x7/2 stem, the 1x1/2 downsample convs, 3x3/2) pack each B panel
 * row as 16 every-other floats of one image row; as a scalar loop that was about a third
 * of the stem's time (perf: conv_pack_b 16% vs the GEMM microkernel 41%).
 *
 * cpu_conv_gather16_s2_taps packs the rows of all kernel columns of one (channel, kernel
 * row) from one read of the image row: the even and odd floats are split once, and the
 * row of kernel column t is the even (t even) or odd (t odd) sequence shifted by t/2. For
 * the 7x7/2 stem that replaces 7 gathers (and 7 trips through the packer's per-row
 * bookkeeping) by one de-interleave and 7 plain copies. */
#include <immintrin.h>

#include "backends/cpu/cpu_conv.h"

void cpu_conv_gather16_s2(const float *src, float *dst) {
    /* reads src[0..30] only: the caller checked that src[30] is inside the row */
    __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8), v2 = _mm256_loadu_ps(src + 16),
           v3 = _mm256_loadu_ps(src + 23);
    /* lanes: [0 2 8 10 | 4 6 12 14] and [16 18 24 26 | 20 22 28 30], then 64-bit reorder */
    __m256 e0 = _mm256_shuffle_ps(v0, v1, 0x88), e1 = _mm256_shuffle_ps(v2, v3, 0xD8);
    _mm256_storeu_ps(dst, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e0), 0xD8)));
    _mm256_storeu_ps(dst + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e1), 0xD8)));
}

void cpu_conv_gather16_s2_taps(const float *src, int64_t taps, float *dst) {
    _Alignas(32) float ev[24], od[24];
    int64_t need = 31 + taps - 1, i = 0; /* floats src[0 .. need) */
    for (; i + 16 <= need; i += 16) {
        __m256 v0 = _mm256_loadu_ps(src + i), v1 = _mm256_loadu_ps(src + i + 8);
        __m256 e = _mm256_shuffle_ps(v0, v1, 0x88), o = _mm256_shuffle_ps(v0, v1, 0xDD);
        _mm256_storeu_ps(ev + i / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
        _mm256_storeu_ps(od + i / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8)));
    }
    for (; i < need; i++) (i & 1 ? od : ev)[i >> 1] = src[i];
    for (int64_t t = 0; t < taps; t++) {
        const float *s = (t & 1 ? od : ev) + t / 2;
        _mm256_storeu_ps(dst + t * 16, _mm256_loadu_ps(s));
        _mm256_storeu_ps(dst + t * 16 + 8, _mm256_loadu_ps(s + 8));
    }
}
