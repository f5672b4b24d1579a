/* cpu_pool.h - row kernels of the 2-D MaxPool fast path (cpu_pool.c), in a portable and
 * an AVX2 version (cpu_pool_avx2.c) with identical results.
 *
 * The 2-D MaxPool is computed separably per output row: first the maximum over the
 * window's valid input rows (a contiguous vertical pass over W columns), then over the
 * window's columns of that row-maximum (a horizontal pass with the pool's stride).
 * NaN propagates: a window holding a NaN gives NaN (as in NumPy and PyTorch), whatever
 * its position, so the separable order gives the same result as a row-major window loop
 * (the generic loop in cpu_pool.c follows the same rule). Otherwise the maximum; a window
 * entirely in the padding gives -inf.
 */
#ifndef KILN_BACKENDS_CPU_CPU_POOL_H
#define KILN_BACKENDS_CPU_CPU_POOL_H

#include <stdint.h>

/* max(v, acc) that propagates NaN from either side (the rule above), for the scalar
 * loops of every variant */
static inline float cpu_pool_smaxn(float v, float acc) { return (v > acc || v != v) ? v : acc; }

/* The vertical pass one column at a time (the portable kernel, and the AVX2 kernel's
 * tail): out[i] = fold of rows[0][i] .. rows[n-1][i], i in [i0, W). */
static inline void cpu_pool_vmax_scalar(const float *const *rows, int32_t n, int64_t i0, int64_t W, float *out) {
    for (int64_t i = i0; i < W; i++) {
        float a = rows[0][i];
        for (int32_t r = 1; r < n; r++) a = cpu_pool_smaxn(rows[r][i], a);
        out[i] = a;
    }
}

/* The horizontal pass one output at a time (the portable kernel, and the vector kernels'
 * tails): y[ow] = fold over kw of r[ow*s - p0 + kw*d], ow in [ow0, ow1). */
static inline void cpu_pool_hmax_scalar(const float *r, int64_t ow0, int64_t ow1, int64_t s, int64_t p0, int64_t k,
                                        int64_t d, float *y) {
    for (int64_t ow = ow0; ow < ow1; ow++) {
        const float *b = r + ow * s - p0;
        float a = b[0];
        for (int64_t kw = 1; kw < k; kw++) a = cpu_pool_smaxn(b[kw * d], a);
        y[ow] = a;
    }
}

/* out[i] = fold of rows[0][i], rows[1][i], ... rows[n-1][i] for i in [0, W); n >= 1. */
void cpu_pool_vmax_avx2(const float *const *rows, int32_t n, int64_t W, float *out);

/* Horizontal pass for the "interior" outputs ow in [ow0, ow1), whose whole window
 * r[ow*s - p0 + kw*d], kw in [0, k), lies inside r: y[ow] = fold over kw. r must be
 * readable 16 floats past its last valid element (vector loads of the stride-2 path).
 * Any stride; strides 1 and 2 are vectorised. */
void cpu_pool_hmax_avx2(const float *r, int64_t ow0, int64_t ow1, int64_t s, int64_t p0, int64_t k, int64_t d,
                        float *y);

/* The same with AVX-512F (cpu_pool_avx512.c; only when cpu_gemm_avx512_usable()). The
 * horizontal pass reads up to 32 floats from a window column's first input, so r must be
 * readable 32 floats past its last valid element. */
void cpu_pool_vmax_avx512(const float *const *rows, int32_t n, int64_t W, float *out);
void cpu_pool_hmax_avx512(const float *r, int64_t ow0, int64_t ow1, int64_t s, int64_t p0, int64_t k, int64_t d,
                          float *y);

/* A 2-D MaxPool over C16 data (cpu_c16.h; the CPU layout pass marks it, layout_c16.c):
 * output row oh of one channel block, x its input block [H][W][16] and y its output
 * block [OH][OW][16], 16 channels per vector; the same results as above. win: kernel
 * (kh, kw), strides (sh, sw), leading pads (pt, pl), dilations (dh, dw). AVX-512F only. */
typedef struct cpu_pool_win {
    int64_t H, W, OH, OW, kh, kw, sh, sw, pt, pl, dh, dw;
} cpu_pool_win;
void cpu_pool_max_c16_avx512(const cpu_pool_win *w, const float *x, float *y, int64_t oh);

#endif
