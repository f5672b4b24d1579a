/* cpu_conv_dw_avx2.c - depthwise 2-D convolution, 8 channels at a time, AVX2 + FMA
 * (cpu_conv.h: cpu_conv_dw8_avx2; cpu_conv.c runs it per group of 8 channels).
 *
 * MobileNetV2's depthwise 3x3 convs (stride 1 and 2) ran through a scalar loop at 16-36%
 * of ONNX Runtime's speed (3x3/1 over 384 channels at 14x14: 1.96 ms against 0.37). A
 * plane-at-a-time vector kernel (each input row split into its stride phases, taps as
 * broadcast-FMAs over a row) came first; the 8-channel kernel below replaced it on small
 * planes in session 6 and, once it worked in strips of rows, on every size in session 8
 * (cpu_conv.c, dw_blocked, has the measurements). Since session 9 either side may be in
 * the P16 layout (rows a multiple of 8 positions): the same transposes, each 8-position
 * piece of a row loaded from or stored to its 16-position block.
 */
#include <immintrin.h>

#include "backends/cpu/cpu_avx2_util.h"
#include "backends/cpu/cpu_conv.h"

/* lane_mask + 8 - n: n leading -1s, then 0s (a maskstore of the first n lanes) */
static const int32_t lane_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

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

/* v + bias, then ReLU (max with 0: NaN -> 0, as the ReLU op) or the clamp to [lo, hi]
 * (operands ordered so a NaN v stays NaN, as the Clip op) */
static inline __m256 dw_out(__m256 v, __m256 vb, bool relu, __m256 vlo, __m256 vhi) {
    v = _mm256_add_ps(v, vb);
    return relu ? _mm256_max_ps(v, _mm256_setzero_ps()) : _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));
}

/* A plane at a time, a kernel pays its row setup per channel, and a 7x7 or 14x14 plane
 * has too few outputs to hide it: MobileNetV2's 3x3/2 over 576 channels at 14x14 took
 * 0.65 ms that way (about 1.1 us per 49-output plane; ONNX Runtime's channel-blocked
 * kernel 0.05 ms). Here 8 channels are transposed into a padded [rows][PW][8] buffer (8x8 register
 * transposes), a strip of input rows at a time, and every output position is KH*KW FMAs
 * of 8-channel vectors, 8 positions of a row at a time, transposed back in registers into
 * the 8 output planes. */

/* Output rows per strip: the input rows a strip reads are transposed into the buffer just
 * before it runs, so the buffer (at most (8 - 1) * stride + reach rows) stays in L1/L2.
 * Transposing whole planes first, a 112x112 input (96 channels, stride 2: 416 KiB per
 * 8 channels) went out to L3 and came back (docs/BENCHMARKS.md, "Session 8"). */
#define DW8_STRIP CPU_CONV_DW8_STRIP

/* Padded width: every tap of every output column in range, and the whole input row
 * inside; -1 when too large (dw_size). */
static int64_t dw8_width(const cpu_conv_geom *g) {
    int64_t reach = dw_size(g->k[1] - 1, g->dil[1], 1), last = dw_size(g->out[1] - 1, g->stride[1], 0);
    int64_t need = reach < 0 || last < 0 ? -1 : dw_size(1, last, reach), have = dw_size(1, g->in[1], g->pad0[1]);
    return need < 0 || have < 0 ? -1 : need > have ? need : have;
}

/* Padded input rows one strip reads: (DW8_STRIP - 1) strides plus the kernel's reach. */
static int64_t dw8_strip_rows(const cpu_conv_geom *g) {
    int64_t reach = dw_size(g->k[0] - 1, g->dil[0], 1);
    return reach < 0 ? -1 : dw_size(DW8_STRIP - 1, g->stride[0], reach);
}

int64_t cpu_conv_dw8_scratch(const cpu_conv_geom *g) {
    int64_t PW = dw8_width(g), R = dw8_strip_rows(g);
    return PW < 0 || R < 0 ? -1 : dw_size(dw_size(R, PW, 0), 8, 0);
}

/* Padded rows [r0, r1) (padded row r is input row r - pad_top) of 8 channels, transposed
 * into buf as [r - r0][PW][8] with the padding zeroed. A planar side reads each row's
 * 8-position pieces from the nc planes; a P16 side (row width a multiple of 8) reads
 * each piece from its 16-position block, one load per channel. */
static void dw8_fill_rows(cpu_dw8_side x, int nc, int64_t H, int64_t W, int64_t pt, int64_t pl, int64_t PW,
                          int64_t r0, int64_t r1, float *buf) {
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t r = r0; r < r1; r++) {
        float *prow = buf + (r - r0) * PW * 8;
        int64_t ih = r - pt;
        if (ih < 0 || ih >= H) { /* a padding row */
            for (int64_t c = 0; c < PW; c++) _mm256_storeu_ps(prow + c * 8, zero);
            continue;
        }
        for (int64_t c = 0; c < pl; c++) _mm256_storeu_ps(prow + c * 8, zero);
        for (int64_t c = pl + W; c < PW; c++) _mm256_storeu_ps(prow + c * 8, zero);
        prow += pl * 8;
        if (x.bs) {
            for (int64_t iw = 0; iw < W; iw += 8) {
                int64_t p = ih * W + iw;
                const float *src = x.data + (p >> 4) * x.bs + (p & 15);
                __m256 v[8];
                for (int c = 0; c < 8; c++) v[c] = c < nc ? _mm256_loadu_ps(src + c * 16) : zero;
                cpu_transpose8_ps(v);
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(prow + (iw + i) * 8, v[i]);
            }
            continue;
        }
        const float *xr = x.data + ih * W;
        int64_t iw = 0;
        for (; iw + 8 <= W; iw += 8) {
            __m256 v[8];
            for (int c = 0; c < 8; c++) v[c] = c < nc ? _mm256_loadu_ps(xr + c * x.cs + iw) : zero;
            cpu_transpose8_ps(v);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(prow + (iw + i) * 8, v[i]);
        }
        /* the last 1-7 columns: masked loads, one transpose. Kept apart from the loop above:
         * one loop choosing the load per block (a maskload only for the tail) measured 1.5x
         * slower on the 28x28-112x112 planes (bench_layers, minima of 21, 7 rounds) */
        if (iw < W) {
            int64_t m = W - iw;
            __m256i mask = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - m));
            __m256 v[8];
            for (int c = 0; c < 8; c++) v[c] = c < nc ? _mm256_maskload_ps(xr + c * x.cs + iw, mask) : zero;
            cpu_transpose8_ps(v);
            for (int64_t i = 0; i < m; i++) _mm256_storeu_ps(prow + (iw + i) * 8, v[i]);
        }
    }
}

void cpu_conv_dw8_avx2(const cpu_conv_geom *g, cpu_dw8_side x, const float *w, int nc, cpu_dw8_side y,
                       const float *bias, bool relu, float lo, float hi, int64_t oh0, int64_t oh1, float *buf) {
    int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1], KH = g->k[0], KW = g->k[1];
    int64_t sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1], pt = g->pad0[0], pl = g->pad0[1];
    int64_t PW = dw8_width(g), R = dw8_strip_rows(g); /* the caller checked the scratch size */
    const __m256 zero = _mm256_setzero_ps(), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
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
     * 1-7 positions of a row as one more such step, then the same transpose with a masked
     * store */
    for (int64_t oh = oh0; oh < oh1 && oh < OH; oh++) {
        if (oh % DW8_STRIP == 0) {
            /* the strip's input rows, from padded row oh * sh on */
            int64_t r0 = oh * sh, r1 = r0 + R;
            dw8_fill_rows(x, nc, H, W, pt, pl, PW, r0, r1, buf);
        }
        const float *prow = buf + (oh % DW8_STRIP) * sh * PW * 8;
        float *yrow = y.data + oh * OW;
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
                 * (docs/BENCHMARKS.md, "Session 8", MobileNetV2) */
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
            if (y.bs) { /* P16: OW is a multiple of 8, so m == 8 and the piece is in one block */
                int64_t p = oh * OW + ow;
                float *dst = y.data + (p >> 4) * y.bs + (p & 15);
                for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst + c * 16, a[c]);
            } else if (m == 8)
                for (int c = 0; c < nc; c++) _mm256_storeu_ps(yrow + c * y.cs + ow, a[c]);
            else {
                __m256i mask = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - m));
                for (int c = 0; c < nc; c++) _mm256_maskstore_ps(yrow + c * y.cs + ow, mask, a[c]);
            }
        }
    }
}
