/* cpu_conv_avx2.c - AVX2 helpers of the implicit-GEMM Conv packer (cpu_conv.c), called
 * only on the packed-GEMM path (cpu_gemm_packed_supported(), which implies AVX2).
 *
 * Stride-2 convs (the 7x7/2 stem, the 1x1/2 downsample convs, 3x3/2) pack each B panel
 * row as 16 every-other floats of one image row; as a scalar loop that was about a third
 * of the stem's time (perf: conv_pack_b 16% vs the GEMM microkernel 41%). */
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
