/* cpu_pool_avx512.c - AVX-512 row kernels of the 2-D MaxPool fast path (cpu_pool.h says
 * what they compute; results identical to cpu_pool_avx2.c and the portable loops,
 * NaN propagation included).
 *
 * Why: ResNet-50's MaxPool (3x3, stride 2, pad 1 over 64x112x112) took 0.56-0.64 ms per
 * run on the 2-core Sapphire Rapids-class dev VM with the 8-lane AVX2 rows, against ONNX
 * Runtime's 0.22-0.27 ms (docs/BENCHMARKS.md, "Session 13"). Here both passes are 16
 * lanes wide and the stride-2 horizontal pass takes a window column's 16 inputs with one
 * two-source permute of 32 consecutive floats. Compiled with -mavx512f; only called when
 * cpu_gemm_avx512_usable().
 */
#include <immintrin.h>
#include <stdbool.h>

#include "backends/cpu/cpu_pool.h"

/* max(v, acc) that propagates NaN from either side: _mm512_max_ps(v, acc) returns acc
 * (keeping a NaN acc) unless v > acc, and a NaN v is put back through the mask */
static inline __m512 vmaxn(__m512 v, __m512 acc) {
    return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

void cpu_pool_vmax_avx512(const float *const *rows, int32_t n, int64_t W, float *out) {
    int64_t i = 0;
    for (; i + 32 <= W; i += 32) {
        __m512 a0 = _mm512_loadu_ps(rows[0] + i), a1 = _mm512_loadu_ps(rows[0] + i + 16);
        for (int32_t r = 1; r < n; r++) {
            a0 = vmaxn(_mm512_loadu_ps(rows[r] + i), a0);
            a1 = vmaxn(_mm512_loadu_ps(rows[r] + i + 16), a1);
        }
        _mm512_storeu_ps(out + i, a0);
        _mm512_storeu_ps(out + i + 16, a1);
    }
    for (; i < W; i += 16) { /* the last 1-31 columns, 16 at a time, masked */
        __mmask16 m = W - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (W - i)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(m, rows[0] + i);
        for (int32_t r = 1; r < n; r++) a = vmaxn(_mm512_maskz_loadu_ps(m, rows[r] + i), a);
        _mm512_mask_storeu_ps(out + i, m, a);
    }
}

void cpu_pool_hmax_avx512(const float *r, int64_t ow0, int64_t ow1, int64_t s, int64_t p0, int64_t k, int64_t d,
                          float *y) {
    int64_t ow = ow0;
    if ((s == 1 || s == 2) && ow1 - ow0 >= 16) {
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        /* whole vectors, the last one shifted back to end at ow1 (recomputing a few) */
        for (;;) {
            if (ow + 16 > ow1) ow = ow1 - 16;
            const float *b = r + s * ow - p0;
            __m512 a;
            if (s == 1) {
                a = _mm512_loadu_ps(b);
                for (int64_t kw = 1; kw < k; kw++) a = vmaxn(_mm512_loadu_ps(b + kw * d), a);
            } else {
                a = _mm512_permutex2var_ps(_mm512_loadu_ps(b), even, _mm512_loadu_ps(b + 16));
                for (int64_t kw = 1; kw < k; kw++) {
                    const float *c = b + kw * d;
                    a = vmaxn(_mm512_permutex2var_ps(_mm512_loadu_ps(c), even, _mm512_loadu_ps(c + 16)), a);
                }
            }
            _mm512_storeu_ps(y + ow, a);
            ow += 16;
            if (ow >= ow1) break;
        }
    }
    cpu_pool_hmax_scalar(r, ow, ow1, s, p0, k, d, y);
}

/* Separably, as the NCHW rows above: the maximum over the window's valid input rows for
 * every input column (one vector per column, into a stack row of up to C16_ROW_MAX
 * columns), then over each output's valid columns of that row. */
#define C16_ROW_MAX 512
void cpu_pool_max_c16_avx512(const cpu_pool_win *w, const float *x, float *y, int64_t oh) {
    int64_t h0 = oh * w->sh - w->pt;
    const float *rows[64];
    int n = 0;
    for (int64_t a = 0; a < w->kh && n < 64; a++) {
        int64_t ih = h0 + a * w->dh;
        if (ih >= 0 && ih < w->H) rows[n++] = x + ih * w->W * 16;
    }
    float *yr = y + oh * w->OW * 16;
    if (n == 0 || w->W > C16_ROW_MAX || w->kh > 64) { /* all padding (-inf), or the window loop */
        for (int64_t ow = 0; ow < w->OW; ow++) {
            int64_t w0 = ow * w->sw - w->pl;
            __m512 acc = _mm512_set1_ps(-__builtin_inff());
            bool any = false;
            for (int64_t a = 0; a < w->kh; a++) {
                int64_t ih = h0 + a * w->dh;
                if (ih < 0 || ih >= w->H) continue;
                for (int64_t b = 0; b < w->kw; b++) {
                    int64_t iw = w0 + b * w->dw;
                    if (iw < 0 || iw >= w->W) continue;
                    __m512 v = _mm512_loadu_ps(x + (ih * w->W + iw) * 16);
                    acc = any ? vmaxn(v, acc) : v;
                    any = true;
                }
            }
            _mm512_storeu_ps(yr + ow * 16, acc);
        }
        return;
    }
    _Alignas(64) float r[C16_ROW_MAX * 16];
    for (int64_t iw = 0; iw < w->W; iw++) {
        __m512 acc = _mm512_loadu_ps(rows[0] + iw * 16);
        for (int k = 1; k < n; k++) acc = vmaxn(_mm512_loadu_ps(rows[k] + iw * 16), acc);
        _mm512_store_ps(r + iw * 16, acc);
    }
    for (int64_t ow = 0; ow < w->OW; ow++) {
        int64_t w0 = ow * w->sw - w->pl;
        __m512 acc = _mm512_set1_ps(-__builtin_inff());
        bool any = false;
        for (int64_t b = 0; b < w->kw; b++) {
            int64_t iw = w0 + b * w->dw;
            if (iw < 0 || iw >= w->W) continue;
            __m512 v = _mm512_load_ps(r + iw * 16);
            acc = any ? vmaxn(v, acc) : v;
            any = true;
        }
        _mm512_storeu_ps(yr + ow * 16, acc);
    }
}
