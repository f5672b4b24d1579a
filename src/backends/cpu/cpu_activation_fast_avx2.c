/* cpu_activation_fast_avx2.c - 8-wide AVX2+FMA exp/tanh/erf/sigmoid/GELU (compiled with
 * -mavx2 -mfma; only called after cpu_vmath_get() saw those features).
 *
 * exp: x = n ln2 + r with |r| <= ln2/2 (ln2 split in a high and a low part so r is exact
 * enough), e^r by a degree-6 Taylor/minimax polynomial, 2^n built in the exponent bits.
 * Inputs are clamped to [-87.3, 88.7] so 2^n stays a normal number; below -87.3 the result
 * is exactly 0 (softmax over -inf masks), above 88.7 it saturates at ~3.4e38.
 * erf: Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7) with the odd symmetry.
 * GELU: cpu_gelu_avx2.h (erfc-based, relative error < 1e-6; the tanh form as x*sigmoid(2u)).
 * tanh: 1 - 2 / (e^{2|x|} + 1) with the sign restored; for |x| < 0.0625 the odd series
 * x - x^3/3 + 2x^5/15 avoids cancellation. Tails use the scalar versions of the same math.
 */
#include <immintrin.h>
#include <math.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_gelu_avx2.h"

static inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7f), lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static inline __m256 sigmoid8(__m256 x) {
    /* 1 / (1 + e^-x); exp8's clamp keeps e^-x finite */
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

static inline __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 e = exp8(_mm256_add_ps(ax, ax));
    __m256 t = _mm256_sub_ps(_mm256_set1_ps(1.f),
                             _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, _mm256_set1_ps(1.f))));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 s = _mm256_fmadd_ps(x2, _mm256_set1_ps(2.f / 15.f), _mm256_set1_ps(-1.f / 3.f));
    s = _mm256_fmadd_ps(_mm256_mul_ps(s, x2), ax, ax);
    __m256 small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.0625f), _CMP_LT_OQ);
    t = _mm256_blendv_ps(t, s, small);
    return _mm256_or_ps(t, _mm256_and_ps(x, sign));
}

static inline __m256 erf8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_fmadd_ps(ax, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
    __m256 r = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.f));
    return _mm256_or_ps(r, _mm256_and_ps(x, sign));
}

static float erf1(float x) {
    float ax = fabsf(x);
    float t = 1.f / (1.f + 0.3275911f * ax);
    float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
    float r = 1.f - p * expf(-ax * ax);
    return x < 0 ? -r : r;
}

#define VLOOP(name, expr8, expr1)                                  \
    static void name(const float *x, float *y, int64_t n) {        \
        int64_t i = 0;                                             \
        for (; i + 8 <= n; i += 8) {                               \
            __m256 v = _mm256_loadu_ps(x + i);                     \
            _mm256_storeu_ps(y + i, expr8);                        \
        }                                                          \
        for (; i < n; i++) {                                       \
            float v = x[i];                                        \
            y[i] = expr1;                                          \
        }                                                          \
    }

VLOOP(a_exp, exp8(v), expf(v))
VLOOP(a_tanh, tanh8(v), tanhf(v))
VLOOP(a_erf, erf8(v), erf1(v))
VLOOP(a_sigmoid, sigmoid8(v), v >= 0.f ? 1.f / (1.f + expf(-v)) : expf(v) / (1.f + expf(v)))
/* GELU: the shared inline versions (cpu_gelu_avx2.h, also the GEMM epilogue's); the tail
 * goes through an 8-lane buffer so every element gets the same math. */
#define GELU_LOOP(name, fn8)                                       \
    static void name(const float *x, float *y, int64_t n) {        \
        int64_t i = 0;                                             \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fn8(_mm256_loadu_ps(x + i))); \
        if (i < n) {                                               \
            float buf[8] = {0};                                    \
            for (int64_t k = i; k < n; k++) buf[k - i] = x[k];     \
            _mm256_storeu_ps(buf, fn8(_mm256_loadu_ps(buf)));      \
            for (int64_t k = i; k < n; k++) y[k] = buf[k - i];     \
        }                                                          \
    }
GELU_LOOP(a_gelu, cpu_gelu_erf8)
GELU_LOOP(a_gelu_tanh, cpu_gelu_tanh8)

static float a_exp_shift_sum(const float *x, float *y, int64_t n, float max) {
    __m256 vmax = _mm256_set1_ps(max), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(y + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float buf[8];
    _mm256_storeu_ps(buf, acc);
    float sum = buf[0] + buf[1] + buf[2] + buf[3] + buf[4] + buf[5] + buf[6] + buf[7];
    for (; i < n; i++) {
        y[i] = expf(x[i] - max);
        sum += y[i];
    }
    return sum;
}

static const cpu_vmath avx2_table = {a_exp, a_tanh, a_erf, a_sigmoid, a_gelu, a_gelu_tanh, a_exp_shift_sum, "avx2"};

const cpu_vmath *cpu_vmath_avx2(void) { return &avx2_table; }
