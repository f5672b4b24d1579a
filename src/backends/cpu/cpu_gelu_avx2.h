/* cpu_gelu_avx2.h - 8-wide GELU (erf and tanh forms) as inline AVX2+FMA functions, shared
 * by the vector math table (cpu_activation_fast_avx2.c: the Gelu operator) and the packed
 * GEMM's epilogue (cpu_gemm_avx2.c: MatMul with kiln_activation = "Gelu"), so both give
 * bit-identical results. Include only from files compiled with -mavx2 -mfma (*_avx2.c).
 *
 * Erf form, gelu(x) = x * Phi(x), Phi(x) = 0.5 erfc(-x / sqrt 2). The naive
 * 0.5 x (1 + erf(x / sqrt 2)) loses all relative accuracy for negative x (1 + erf cancels:
 * at x = -4 an erf with 1.5e-7 absolute error gives 0.5% relative error in the result), so
 * erfc is evaluated directly, in Hastings' form (the one of Abramowitz & Stegun 7.1.26):
 *     erfc(z) = t Q(t) e^(-z^2),   t = 1 / (1 + p z),   z = |x| / sqrt 2,
 * with p = 0.428 and Q a degree-7 polynomial fitted here for minimax *relative* error over
 * z in [0, 12.5 / sqrt 2] (tools/fit_gelu_erfc.py: Lawson's iteratively reweighted least
 * squares against mpmath, coefficients rounded to float one at a time from the highest,
 * refitting the rest; fit error 7.5e-8). A&S's own 5-term fit has 1.5e-7 *absolute* error,
 * useless for relative accuracy in the tail; restricting z to where it matters (below) is
 * what lets 8 terms reach 1e-7. Then with h = 0.5 erfc(z):
 *     gelu(x) = max(x, 0) - |x| h        (x >= 0: x (1 - h); x < 0: x h)
 * as one FMA, with no cancellation on either side.
 * e^(-z^2) = e^(-x^2/2) needs x^2 exactly: near x = -12 the exponent is -72, and rounding
 * it to float would cost up to 4e-6 relative. The range reduction -x^2/2 = n ln2 + r takes
 * n from the rounded x^2 and then r = -(x*x + 2n ln2hi)/2 - n ln2lo with one FMA (x*x +
 * 2n ln2hi is small, so its single rounding is harmless), e^r by a degree-6 polynomial
 * (relative error 1.8e-8 on |r| <= ln2/2, same tool), and 2^(n-1) (the 1/2 of h included)
 * is added to the exponent bits of t Q e^r, an integer add instead of a multiply.
 * Inputs: x is clamped at 12 (above, Phi rounds to 1 in float); below -12, |gelu| < 3e-32
 * and h is masked to 0, so every result that counts stays in the normal range. NaN stays
 * NaN, +inf gives +inf, -inf gives NaN like the unfused graph (-inf * 0).
 * Measured against a double-precision reference over every float in [-14, 14] (2.2e9
 * values, a one-off run; tests/unit/test_kernels_gelu.c checks every 1024th): relative
 * error below 5.1e-7 wherever |gelu(x)| > 1e-30 (the previous form, erfc = t exp(-z^2 +
 * P(t)) with Numerical Recipes' erfcc P: 5.8e-7).
 * Speed (why this form): the epilogue is throughput-bound on the two FMA pipes (Zen 3), so
 * what counts is the number of multiply/FMA operations per vector: 23 here against ~34
 * (plus the exp's clamping and blends) before; ~16 against ~36 cycles per 8 floats
 * (docs/BENCHMARKS.md, "Session 5: GELU epilogue"). Horner beats Estrin's scheme here (fewer
 * operations; the out-of-order core overlaps the independent vectors' chains), and a
 * reciprocal estimate plus a Newton step instead of the division is no faster and less
 * accurate (the divider runs beside the FMA pipes).
 *
 * Tanh form, 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
 * the sigmoid form has no cancellation for negative x.
 */
#ifndef KILN_BACKENDS_CPU_CPU_GELU_AVX2_H
#define KILN_BACKENDS_CPU_CPU_GELU_AVX2_H

#include <immintrin.h>

/* e^(a + b) for a + b in [-87.3, 88.7] (0 below, saturating above), where a may be large
 * and exact and b is small: the range reduction r = a - n ln2 + b keeps a's exactness.
 * Used by the tanh form (the erf form has its own, narrower exp of -x^2/2). */
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
    const __m256 sign = _mm256_set1_ps(-0.f), one = _mm256_set1_ps(1.f);
    /* min(x, 12) is 12 for a NaN x (vminps returns its second operand): the NaN comes back
     * through rel, max(0, x) (vmaxps returns x) */
    __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(12.f));
    /* |x|, clamped at 12 only above: for x < -12 the steps below may overflow to inf or
     * NaN, and `under` masks the result to 0 */
    __m256 ax = _mm256_andnot_ps(sign, xc);
    __m256 negax = _mm256_or_ps(xc, sign);  /* -|x| */
    __m256 rel = _mm256_max_ps(_mm256_setzero_ps(), x);
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-12.f), _CMP_LT_OQ);
    /* t Q(t), t = 1 / (1 + p z) = 1 / (1 + (p / sqrt 2) |x|) */
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(ax, _mm256_set1_ps(3.026416898e-01f), one));
    __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(7.410071790e-02f), t, _mm256_set1_ps(-3.167732656e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(4.021252394e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-1.006971151e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(2.543164790e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(2.019978166e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(2.435632199e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(2.413669676e-01f));
    __m256 tq = _mm256_mul_ps(t, q);
    /* e^(-x^2/2) = 2^n e^r. k = 1.5 2^23 - 1 + n rounds n to the nearest integer and holds
     * n - 1 in its low mantissa bits (the exponent add below); ln2hi = 355/512 has 9 bits,
     * so 2n ln2hi is exact for |n| < 2^15 */
    const __m256 magic = _mm256_set1_ps(12582911.f);
    __m256 k = _mm256_fmadd_ps(_mm256_mul_ps(ax, ax), _mm256_set1_ps(-0.72134752044448170f), magic);
    __m256 n = _mm256_sub_ps(k, magic);
    __m256 xr = _mm256_fmadd_ps(ax, ax, _mm256_mul_ps(n, _mm256_set1_ps(2.f * 0.693359375f)));
    __m256 r = _mm256_fnmsub_ps(xr, _mm256_set1_ps(0.5f), _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 e = _mm256_fmadd_ps(_mm256_set1_ps(1.383662922e-03f), r, _mm256_set1_ps(8.374987170e-03f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(4.166823998e-02f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.666641831e-01f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(4.999999106e-01f));
    e = _mm256_fmadd_ps(e, r, one);
    e = _mm256_fmadd_ps(e, r, one);
    /* h = 0.5 erfc(z) = t Q e^r 2^(n-1): t Q e^r is in [0.04, 1.5] and n >= -104, so the
     * exponent add stays in the normal range */
    __m256i hb = _mm256_add_epi32(_mm256_castps_si256(_mm256_mul_ps(tq, e)),
                                  _mm256_slli_epi32(_mm256_castps_si256(k), 23));
    __m256 h = _mm256_andnot_ps(under, _mm256_castsi256_ps(hb));
    return _mm256_fmadd_ps(negax, h, rel);
}

static inline __m256 cpu_gelu_tanh8(__m256 x) {
    __m256 x3 = _mm256_mul_ps(x, _mm256_mul_ps(x, x));
    __m256 u2 = _mm256_mul_ps(_mm256_set1_ps(2.f * 0.79788456080286536f),
                              _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x));
    __m256 e = cpu_exp8_2part(_mm256_sub_ps(_mm256_setzero_ps(), u2), _mm256_setzero_ps());
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

#endif
