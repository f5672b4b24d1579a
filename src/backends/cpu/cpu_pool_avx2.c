/* cpu_pool_avx2.c - AVX2 row kernels of the 2-D MaxPool fast path (cpu_pool.h explains the
 * separable scheme and the NaN rule).
 *
 * ResNet-50's MaxPool (3x3, stride 2, pad 1 over 64x112x112) took ~2.9 ms per run with
 * the scalar clipped-window loop against ONNX Runtime's ~0.2 ms: each output re-read 9
 * inputs with two bounds checks each. Here the vertical pass is 8 columns per vector and
 * the horizontal stride-2 pass de-interleaves 16 consecutive row maxima into their even
 * elements with one shuffle + one lane permute per kernel column.
 */
#include <immintrin.h>

#include "backends/cpu/cpu_avx2_util.h"
#include "backends/cpu/cpu_pool.h"

/* max(v, acc) that propagates NaN from either side: _mm256_max_ps(v, acc) returns acc
 * (so keeps a NaN acc) unless v > acc, and a NaN v is put back by the blend */
static inline __m256 vmaxn(__m256 v, __m256 acc) {
    return _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

void cpu_pool_vmax_avx2(const float *const *rows, int32_t n, int64_t W, float *out) {
    int64_t i = 0;
    for (; i + 32 <= W; i += 32) {
        __m256 a0 = _mm256_loadu_ps(rows[0] + i), a1 = _mm256_loadu_ps(rows[0] + i + 8);
        __m256 a2 = _mm256_loadu_ps(rows[0] + i + 16), a3 = _mm256_loadu_ps(rows[0] + i + 24);
        for (int32_t r = 1; r < n; r++) {
            const float *p = rows[r] + i;
            a0 = vmaxn(_mm256_loadu_ps(p), a0);
            a1 = vmaxn(_mm256_loadu_ps(p + 8), a1);
            a2 = vmaxn(_mm256_loadu_ps(p + 16), a2);
            a3 = vmaxn(_mm256_loadu_ps(p + 24), a3);
        }
        _mm256_storeu_ps(out + i, a0);
        _mm256_storeu_ps(out + i + 8, a1);
        _mm256_storeu_ps(out + i + 16, a2);
        _mm256_storeu_ps(out + i + 24, a3);
    }
    for (; i + 8 <= W; i += 8) {
        __m256 a = _mm256_loadu_ps(rows[0] + i);
        for (int32_t r = 1; r < n; r++) a = vmaxn(_mm256_loadu_ps(rows[r] + i), a);
        _mm256_storeu_ps(out + i, a);
    }
    cpu_pool_vmax_scalar(rows, n, i, W, out);
}

void cpu_pool_hmax_avx2(const float *r, int64_t ow0, int64_t ow1, int64_t s, int64_t p0, int64_t k, int64_t d,
                        float *y) {
    int64_t ow = ow0;
    /* whole vectors, the last one shifted back to end at ow1 when the count is not a
     * multiple of 8 (it recomputes a few outputs instead of a scalar tail: ResNet-50's 56
     * interior columns left 7 per row to the scalar loop) */
    if ((s == 1 || s == 2) && ow1 - ow0 >= 8) {
        for (;;) {
            if (ow + 8 > ow1) ow = ow1 - 8;
            const float *b = r + s * ow - p0;
            __m256 a = s == 1 ? _mm256_loadu_ps(b) : cpu_even16_ps(b);
            for (int64_t kw = 1; kw < k; kw++) a = vmaxn(s == 1 ? _mm256_loadu_ps(b + kw * d) : cpu_even16_ps(b + kw * d), a);
            _mm256_storeu_ps(y + ow, a);
            ow += 8;
            if (ow >= ow1) break;
        }
    }
    cpu_pool_hmax_scalar(r, ow, ow1, s, p0, k, d, y);
}
