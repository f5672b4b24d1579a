/* cpu_rows_avx2.c - AVX2+FMA row kernels (cpu_rows.h): LayerNorm/RMSNorm rows with
 * double-precision statistics (floats widened 4 at a time), and a NaN-ignoring row max.
 * Compiled with -mavx2 -mfma; only reached through cpu_rows_get() on CPUs that have them. */
#include <immintrin.h>
#include <math.h>

#include "backends/cpu/cpu_rows.h"

static double hsum_pd(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

static void a_norm_row(const float *x, const float *scale, const float *bias, float *y, int64_t n, float eps,
                       bool rms, float *mean_out, float *inv_out) {
    int64_t i;
    double mean = 0;
    if (!rms) {
        __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
        double t = 0;
        for (i = 0; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
            a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
        }
        for (; i < n; i++) t += x[i];
        mean = (hsum_pd(_mm256_add_pd(a0, a1)) + t) / (double)n;
    }
    /* (x - mean) in double: exact for the widened floats, so the variance is two-pass exact
     * up to the double sums */
    __m256d m4 = _mm256_set1_pd(mean), q0 = _mm256_setzero_pd(), q1 = _mm256_setzero_pd();
    double t2 = 0;
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m4);
        __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m4);
        q0 = _mm256_fmadd_pd(d0, d0, q0);
        q1 = _mm256_fmadd_pd(d1, d1, q1);
    }
    for (; i < n; i++) {
        double d = (double)x[i] - mean;
        t2 += d * d;
    }
    double var = (hsum_pd(_mm256_add_pd(q0, q1)) + t2) / (double)n;
    float inv = (float)(1.0 / sqrt(var + eps)), m = (float)mean;
    __m256 mv = _mm256_set1_ps(m), iv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), iv), _mm256_loadu_ps(scale + i));
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        float v = (x[i] - m) * inv * scale[i];
        y[i] = bias ? v + bias[i] : v;
    }
    *mean_out = m;
    *inv_out = inv;
}

static float a_max(const float *x, int64_t n) {
    /* max_ps(v, acc) returns acc when v is NaN: NaN is skipped like in `if (v > max)` */
    __m256 a0 = _mm256_set1_ps(-INFINITY), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_max_ps(_mm256_loadu_ps(x + i), a0);
        a1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), a1);
    }
    a0 = _mm256_max_ps(a0, a1);
    float buf[8];
    _mm256_storeu_ps(buf, a0);
    float mx = -INFINITY;
    for (int k = 0; k < 8; k++)
        if (buf[k] > mx) mx = buf[k];
    for (; i < n; i++)
        if (x[i] > mx) mx = x[i];
    return mx;
}

static const cpu_rows avx2_rows = {a_norm_row, a_max};

const cpu_rows *cpu_rows_avx2(void) { return &avx2_rows; }
