/* cpu_conv_dw_avx2.c - depthwise 2-D convolution of one channel plane, AVX2 + FMA
 * (cpu_conv.h: cpu_conv_dw_plane_avx2; cpu_conv.c runs it per (image, channel) task).
 *
 * Each input row is first copied into its stride phases with the horizontal padding
 * written in: phase p of row ih holds xpad(ih, j*s + p), xpad the row with pad_l zeros in
 * front. Kernel tap kw then reads phase (kw*d) % s at offset (kw*d) / s, a contiguous run,
 * so an output row is KH*KW broadcast-FMAs per 8 outputs over unaligned loads: no gathers,
 * no bounds checks. Rows above or below the image contribute nothing and are skipped.
 * MobileNetV2's depthwise 3x3 convs (stride 1 and 2) ran through a scalar loop at 16-36%
 * of ONNX Runtime's speed (3x3/1 over 384 channels at 14x14: 1.96 ms against 0.37).
 */
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_avx2_util.h"
#include "backends/cpu/cpu_conv.h"

/* lane_mask + 8 - n: n leading -1s, then 0s (a maskstore of the first n lanes) */
static const int32_t lane_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* d[j] = xr[j*s + q] for j < L, 0 where that is outside [0, W): one stride phase of a
 * padded row. Stride 1 is a copy, stride 2 takes the even lanes of 16 floats per vector;
 * the edges (and other strides) go one float at a time. */
static void phase_row(const float *xr, int64_t W, int64_t q, int64_t s, float *d, int64_t L) {
    int64_t j0 = q >= 0 ? 0 : (-q + s - 1) / s;       /* first j with j*s + q >= 0 */
    int64_t j1 = W - q <= 0 ? 0 : (W - q + s - 1) / s; /* first j with j*s + q >= W */
    if (j0 > L) j0 = L;
    if (j1 > L) j1 = L;
    if (j1 < j0) j1 = j0;
    /* plain loops, not memset/memcpy calls: rows are 7-112 floats, the padding 1-2 */
    for (int64_t i = 0; i < j0; i++) d[i] = 0.f;
    int64_t j = j0;
    if (s == 1)
        for (; j + 8 <= j1; j += 8) _mm256_storeu_ps(d + j, _mm256_loadu_ps(xr + j + q));
    else if (s == 2) {
        cpu_extract_even(xr + 2 * j0 + q, j1 - j0, d + j0, xr + W, false);
        j = j1;
    }
    for (; j < j1; j++) d[j] = xr[j * s + q];
    for (j = j1; j < L; j++) d[j] = 0.f;
}

/* a * b + c, or -1 when it overflows or exceeds DW_SCRATCH_MAX floats (a hostile model's
 * strides or paddings: the caller then runs without the buffer) */
#define DW_SCRATCH_MAX ((int64_t)1 << 28)
static int64_t dw_size(int64_t a, int64_t b, int64_t c) {
    int64_t r;
    if (a < 0 || b < 0 || c < 0 || __builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r) ||
        r > DW_SCRATCH_MAX)
        return -1;
    return r;
}

int64_t cpu_conv_dw_scratch(const cpu_conv_geom *g) {
    int64_t s = g->stride[1], span = dw_size(g->k[1] - 1, g->dil[1], 0);
    if (span < 0) return -1;
    span /= s;
    /* per input row: s phases of OW + span + 8 floats (the 8: a whole last vector) */
    int64_t per_row = dw_size(1, g->out[1] + span, 8);
    return per_row < 0 ? -1 : dw_size(dw_size(g->in[0], s, 0), per_row, 0);
}

/* v + bias, then ReLU (max with 0: NaN -> 0, as the ReLU op) or the clamp to [lo, hi]
 * (operands ordered so a NaN v stays NaN, as the Clip op) */
static inline __m256 dw_out(__m256 v, __m256 vb, bool relu, __m256 vlo, __m256 vhi) {
    v = _mm256_add_ps(v, vb);
    return relu ? _mm256_max_ps(v, _mm256_setzero_ps()) : _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));
}

void cpu_conv_dw_plane_avx2(const cpu_conv_geom *g, const float *x, const float *w, float *y, float *buf, float bias,
                            bool relu, float lo, float hi) {
    const __m256 vb = _mm256_set1_ps(bias), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
    int64_t KH = g->k[0], KW = g->k[1], sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1];
    int64_t span = ((KW - 1) * dw) / sw, L = OW + span + 8, row = sw * L;
    /* phase-split, padded copy of every input row */
    for (int64_t ih = 0; ih < H; ih++)
        for (int64_t p = 0; p < sw; p++) phase_row(x + ih * W, W, p - g->pad0[1], sw, buf + ih * row + p * L, L);
    /* where tap kw reads in an input row's phase rows (divisions once, not per row) */
    int64_t kw_off[CPU_CONV_DW_MAX_TAPS];
    for (int64_t kw = 0; kw < KW; kw++) kw_off[kw] = ((kw * dw) % sw) * L + (kw * dw) / sw;
    for (int64_t oh = 0; oh < OH; oh++) {
        float *yr = y + oh * OW;
        /* the taps of this output row: input rows inside the image only */
        const float *src[CPU_CONV_DW_MAX_TAPS];
        float wt[CPU_CONV_DW_MAX_TAPS];
        int nt = 0;
        for (int64_t kh = 0; kh < KH; kh++) {
            int64_t ih = oh * sh - g->pad0[0] + kh * dh;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < KW; kw++) {
                src[nt] = buf + ih * row + kw_off[kw];
                wt[nt] = w[kh * KW + kw];
                nt++;
            }
        }
        int64_t ow = 0;
        /* taps alternate between two accumulators per vector: one chain of KH*KW dependent
         * FMAs per vector made the 14- and 7-wide rows latency-bound */
        for (; ow + 16 <= OW; ow += 16) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), b0 = a0, b1 = a0;
            int i = 0;
            for (; i + 2 <= nt; i += 2) {
                __m256 wv = _mm256_set1_ps(wt[i]), wu = _mm256_set1_ps(wt[i + 1]);
                a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[i] + ow), a0);
                a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[i] + ow + 8), a1);
                b0 = _mm256_fmadd_ps(wu, _mm256_loadu_ps(src[i + 1] + ow), b0);
                b1 = _mm256_fmadd_ps(wu, _mm256_loadu_ps(src[i + 1] + ow + 8), b1);
            }
            if (i < nt) {
                __m256 wv = _mm256_set1_ps(wt[i]);
                a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[i] + ow), a0);
                a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[i] + ow + 8), a1);
            }
            _mm256_storeu_ps(yr + ow, dw_out(_mm256_add_ps(a0, b0), vb, relu, vlo, vhi));
            _mm256_storeu_ps(yr + ow + 8, dw_out(_mm256_add_ps(a1, b1), vb, relu, vlo, vhi));
        }
        for (; ow < OW; ow += 8) { /* the phase rows have 8 floats of slack: read a whole vector */
            __m256 a0 = _mm256_setzero_ps(), b0 = a0, c0 = a0;
            int i = 0;
            for (; i + 3 <= nt; i += 3) {
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(wt[i]), _mm256_loadu_ps(src[i] + ow), a0);
                b0 = _mm256_fmadd_ps(_mm256_set1_ps(wt[i + 1]), _mm256_loadu_ps(src[i + 1] + ow), b0);
                c0 = _mm256_fmadd_ps(_mm256_set1_ps(wt[i + 2]), _mm256_loadu_ps(src[i + 2] + ow), c0);
            }
            for (; i < nt; i++) a0 = _mm256_fmadd_ps(_mm256_set1_ps(wt[i]), _mm256_loadu_ps(src[i] + ow), a0);
            a0 = _mm256_add_ps(a0, _mm256_add_ps(b0, c0));
            /* lanes [0, OW - ow) of the store, masked (lane_mask): small planes, 14 and 7 wide,
             * end every row here */
            int64_t n = OW - ow < 8 ? OW - ow : 8;
            __m256i mask = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - n));
            _mm256_maskstore_ps(yr + ow, mask, dw_out(a0, vb, relu, vlo, vhi));
        }
    }
}

/* ---- eight channels at a time, for small planes ------------------------------------- */

/* The plane kernel above pays its row setup per channel, and a 7x7 or 14x14 plane has too
 * few outputs to hide it: MobileNetV2's 3x3/2 over 576 channels at 14x14 took 0.65 ms in
 * it (about 1.1 us per 49-output plane; ONNX Runtime's channel-blocked kernel 0.05 ms).
 * Here 8 channels are transposed into one padded [PH][PW][8] buffer (8x8 register
 * transposes), and every output position is KH*KW FMAs of 8-channel vectors, 8 positions
 * of a row at a time, transposed back in registers into the 8 output planes. */

/* Padded extent of axis i: every tap of every output in range, and the whole input
 * inside; -1 when too large (dw_size). */
static int64_t dw8_extent(const cpu_conv_geom *g, int i) {
    int64_t reach = dw_size(g->k[i] - 1, g->dil[i], 1), last = dw_size(g->out[i] - 1, g->stride[i], 0);
    int64_t need = reach < 0 || last < 0 ? -1 : dw_size(1, last, reach), have = dw_size(1, g->in[i], g->pad0[i]);
    return need < 0 || have < 0 ? -1 : need > have ? need : have;
}

int64_t cpu_conv_dw8_scratch(const cpu_conv_geom *g) {
    int64_t PH = dw8_extent(g, 0), PW = dw8_extent(g, 1);
    return PH < 0 || PW < 0 ? -1 : dw_size(dw_size(PH, PW, 8), 8, 0);
}

void cpu_conv_dw8_avx2(const cpu_conv_geom *g, const float *x, int64_t x_cs, const float *w, int nc, float *y,
                       int64_t y_cs, const float *bias, bool relu, float lo, float hi, float *buf) {
    int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1], KH = g->k[0], KW = g->k[1];
    int64_t sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1], pt = g->pad0[0], pl = g->pad0[1];
    int64_t PH = dw8_extent(g, 0), PW = dw8_extent(g, 1); /* the caller checked the scratch size */
    float *P = buf;
    const __m256 zero = _mm256_setzero_ps(), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    /* zero padding: rows above and below the image, and the columns beside it */
    for (int64_t r = 0; r < PH; r++) {
        bool inside = r >= pt && r < pt + H;
        for (int64_t c = 0; c < PW; c++)
            if (!inside || c < pl || c >= pl + W) _mm256_storeu_ps(P + (r * PW + c) * 8, zero);
    }
    for (int64_t ih = 0; ih < H; ih++) {
        float *prow = P + ((ih + pt) * PW + pl) * 8;
        int64_t iw = 0;
        for (; iw + 8 <= W; iw += 8) {
            __m256 r[8];
            for (int c = 0; c < 8; c++) r[c] = c < nc ? _mm256_loadu_ps(x + c * x_cs + ih * W + iw) : zero;
            cpu_transpose8_ps(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(prow + (iw + i) * 8, r[i]);
        }
        /* the last 1-7 columns: masked loads, one transpose. Kept apart from the loop above:
         * one loop choosing the load per block (a maskload only for the tail) measured 1.5x
         * slower on the 28x28-112x112 planes (bench_layers, minima of 21, 7 rounds) */
        if (iw < W) {
            int64_t m = W - iw;
            __m256i mask = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - m));
            __m256 r[8];
            for (int c = 0; c < 8; c++) r[c] = c < nc ? _mm256_maskload_ps(x + c * x_cs + ih * W + iw, mask) : zero;
            cpu_transpose8_ps(r);
            for (int64_t i = 0; i < m; i++) _mm256_storeu_ps(prow + (iw + i) * 8, r[i]);
        }
    }
    /* weights as 8-channel vectors per tap, and the bias */
    __m256 wv[CPU_CONV_DW_MAX_TAPS];
    for (int64_t t = 0; t < KH * KW; t++) {
        _Alignas(32) float v[8];
        for (int c = 0; c < 8; c++) v[c] = c < nc ? w[c * KH * KW + t] : 0.f;
        wv[t] = _mm256_load_ps(v);
    }
    _Alignas(32) float bv[8];
    for (int c = 0; c < 8; c++) bv[c] = bias && c < nc ? bias[c] : 0.f;
    const __m256 vb = _mm256_load_ps(bv);
    /* 8 output positions of a row at a time (8 independent FMA chains, what two 4-cycle
     * pipes need), transposed in registers straight into the 8 output planes; the last
     * 1-7 positions of a row one at a time, then the same transpose with a masked store */
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *prow = P + oh * sh * PW * 8;
        float *yrow = y + oh * OW;
        for (int64_t ow = 0; ow < OW; ow += 8) {
            int64_t m = OW - ow < 8 ? OW - ow : 8;
            __m256 a[8];
            for (int i = 0; i < 8; i++) a[i] = zero;
            if (m == 8) {
                for (int64_t kh = 0; kh < KH; kh++)
                    for (int64_t kw = 0; kw < KW; kw++) {
                        const float *p = prow + (kh * dh * PW + ow * sw + kw * dw) * 8;
                        __m256 t = wv[kh * KW + kw];
                        for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(p + i * sw * 8), t, a[i]);
                    }
            } else {
                /* the last 1-7 positions of the row: lane i reads position ow + min(i, m - 1),
                 * so the spare lanes recompute the last position (never stored) and the
                 * taps still feed 8 independent FMA chains. Position by position, each
                 * output was one chain of KH*KW dependent FMAs; on 7x7 and 14x14 planes,
                 * where every row or half of it ends here, that was most of the time
                 * (docs/BENCHMARKS.md, "Session 8: depthwise row ends") */
                int64_t lane[8];
                for (int i = 0; i < 8; i++) lane[i] = (i < m ? i : m - 1) * sw * 8;
                for (int64_t kh = 0; kh < KH; kh++)
                    for (int64_t kw = 0; kw < KW; kw++) {
                        const float *p = prow + (kh * dh * PW + ow * sw + kw * dw) * 8;
                        __m256 t = wv[kh * KW + kw];
                        for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(p + lane[i]), t, a[i]);
                    }
            }
            for (int i = 0; i < 8; i++) a[i] = dw_out(a[i], vb, relu, vlo, vhi);
            cpu_transpose8_ps(a);
            if (m == 8)
                for (int c = 0; c < nc; c++) _mm256_storeu_ps(yrow + c * y_cs + ow, a[c]);
            else {
                __m256i mask = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - m));
                for (int c = 0; c < nc; c++) _mm256_maskstore_ps(yrow + c * y_cs + ow, mask, a[c]);
            }
        }
    }
}
