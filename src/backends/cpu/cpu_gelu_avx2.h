/* cpu_gelu_avx2.h - 8-wide GELU (erf and tanh forms) as inline AVX2+FMA functions, shared
 * by the vector math table (cpu_activation_fast_avx2.c: the Gelu operator) and the packed
 * GEMM's epilogue (cpu_gemm_avx2.c: MatMul with kiln_activation = "Gelu"), so both give
 * bit-identical results. Include only from files compiled with -mavx2 -mfma (*_avx2.c).
 *
 * Erf form, gelu(x) = x * Phi(x), Phi(x) = 0.5 erfc(-x / sqrt 2). The naive
 * 0.5 x (1 + erf(x / sqrt 2)) loses all relative accuracy for negative x (1 + erf cancels:
 * at x = -4 an erf with 1.5e-7 absolute error gives 0.5% relative error in the result), so
 * erfc is evaluated directly for z = |x| / sqrt 2:
 *     erfc(z) = t * exp(-z^2 + P(t)),   t = 1 / (1 + z/2),
 * with P the degree-9 polynomial of the Chebyshev-fitted approximation published in
 * Numerical Recipes (2nd ed., section 6.2, "erfcc"), fractional error below 1.2e-7 for all
 * z >= 0. Phi(x) = 1 - erfc(z)/2 for x >= 0, erfc(z)/2 for x < 0.
 * Accuracy of the float version: the exponent -z^2 + P(t) reaches -87 before underflow,
 * and rounding it to float would cost up to 4e-6 relative; so z^2 = x^2/2 is kept as an
 * exact hi + lo pair (FMA) and the exp's range reduction subtracts n ln2 from the exact
 * high part before adding the small rest. Measured against a double-precision reference
 * (tests/unit/test_kernels_gelu.c): relative error below 1e-6 wherever |gelu(x)| > 1e-30.
 * Inputs are clamped to [-14, 14] (Phi is 1 or below 1e-44 beyond) so no step overflows;
 * the result is x * Phi(clamped x): NaN stays NaN, +inf gives +inf, -inf gives NaN like the
 * unfused graph (-inf * 0).
 *
 * Tanh form, 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
 * the sigmoid form has no cancellation for negative x.
 */
#ifndef KILN_BACKENDS_CPU_CPU_GELU_AVX2_H
#define KILN_BACKENDS_CPU_CPU_GELU_AVX2_H

#include <immintrin.h>

/* e^(a + b) for a + b in [-87.3, 88.7] (0 below, saturating above), where a may be large
 * and exact and b is small: the range reduction r = a - n ln2 + b keeps a's exactness. */
static inline __m256 cpu_exp8_2part(__m256 a, __m256 b) {
    const __m256 hi = _mm256_set1_ps(88.7f), lo = _mm256_set1_ps(-87.3f);
    __m256 s = _mm256_add_ps(a, b);
    __m256 under = _mm256_cmp_ps(s, lo, _CMP_LT_OQ);
    s = _mm256_min_ps(_mm256_max_ps(s, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(s, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* clamped lanes: reduce s itself (a, b may be far outside) */
    __m256 clamped = _mm256_or_ps(under, _mm256_cmp_ps(_mm256_add_ps(a, b), hi, _CMP_GT_OQ));
    a = _mm256_blendv_ps(a, s, clamped);
    b = _mm256_blendv_ps(b, _mm256_setzero_ps(), clamped);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), a);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    r = _mm256_add_ps(r, b);
    /* e^r = 1 + r + r^2 (c2 + c3 r + c4 r^2 + ... + c7 r^5), the bracket by Estrin's
     * scheme: a GELU is one long dependency chain, and its latency (not the op count)
     * limits the epilogue; Estrin halves the polynomial's part of it against Horner */
    __m256 r2 = _mm256_mul_ps(r, r), r4 = _mm256_mul_ps(r2, r2);
    __m256 q0 = _mm256_fmadd_ps(_mm256_set1_ps(1.6666665459e-1f), r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 q1 = _mm256_fmadd_ps(_mm256_set1_ps(8.3334519073e-3f), r, _mm256_set1_ps(4.1665795894e-2f));
    __m256 q2 = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    __m256 p = _mm256_fmadd_ps(q2, r4, _mm256_fmadd_ps(q1, r2, q0));
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static inline __m256 cpu_gelu_erf8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    /* max(x, lo) returns lo for a NaN x: the final multiply by x restores the NaN */
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-14.f)), _mm256_set1_ps(14.f));
    __m256 ax = _mm256_andnot_ps(sign, xc);
    __m256 z = _mm256_mul_ps(ax, _mm256_set1_ps(0.70710678118654752f));
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_fmadd_ps(z, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.f)));
    /* P(t) = c0 + c1 t + ... + c9 t^9 by Estrin's scheme (see cpu_exp8_2part) */
    __m256 t2 = _mm256_mul_ps(t, t), t4 = _mm256_mul_ps(t2, t2), t8 = _mm256_mul_ps(t4, t4);
    __m256 c01 = _mm256_fmadd_ps(_mm256_set1_ps(1.00002368f), t, _mm256_set1_ps(-1.26551223f));
    __m256 c23 = _mm256_fmadd_ps(_mm256_set1_ps(0.09678418f), t, _mm256_set1_ps(0.37409196f));
    __m256 c45 = _mm256_fmadd_ps(_mm256_set1_ps(0.27886807f), t, _mm256_set1_ps(-0.18628806f));
    __m256 c67 = _mm256_fmadd_ps(_mm256_set1_ps(1.48851587f), t, _mm256_set1_ps(-1.13520398f));
    __m256 c89 = _mm256_fmadd_ps(_mm256_set1_ps(0.17087277f), t, _mm256_set1_ps(-0.82215223f));
    __m256 c03 = _mm256_fmadd_ps(c23, t2, c01), c47 = _mm256_fmadd_ps(c67, t2, c45);
    __m256 p = _mm256_fmadd_ps(c89, t8, _mm256_fmadd_ps(c47, t4, c03));
    /* -z^2 = -x^2/2 = -(h + l)/2 exactly: h = x*x rounded, l = its rounding error */
    __m256 h = _mm256_mul_ps(ax, ax);
    __m256 l = _mm256_fmsub_ps(ax, ax, h);
    __m256 a = _mm256_mul_ps(h, _mm256_set1_ps(-0.5f));
    __m256 b = _mm256_fnmadd_ps(l, _mm256_set1_ps(0.5f), p);
    __m256 half_erfc = _mm256_mul_ps(_mm256_mul_ps(t, _mm256_set1_ps(0.5f)), cpu_exp8_2part(a, b));
    __m256 upper = _mm256_sub_ps(_mm256_set1_ps(1.f), half_erfc);
    __m256 neg = _mm256_cmp_ps(xc, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_mul_ps(x, _mm256_blendv_ps(upper, half_erfc, neg));
}

static inline __m256 cpu_gelu_tanh8(__m256 x) {
    __m256 x3 = _mm256_mul_ps(x, _mm256_mul_ps(x, x));
    __m256 u2 = _mm256_mul_ps(_mm256_set1_ps(2.f * 0.79788456080286536f),
                              _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x));
    __m256 e = cpu_exp8_2part(_mm256_sub_ps(_mm256_setzero_ps(), u2), _mm256_setzero_ps());
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

#endif
