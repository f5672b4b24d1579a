/* cpu_c16.h - the C16 layout (channels in lanes) and the AVX-512 convolutions that use it.
 *
 * C16: per image, blocks of 16 channels, each block all positions x 16 channels:
 * element (c, h, w) of an image [C, H, W] at ((c / 16) * H * W + h * W + w) * 16 + c % 16.
 * C must be a multiple of 16. The tensor keeps its [N, C, H, W] shape and byte size; only
 * the order of the floats changes (the CPU layout pass, build/passes/layout_c16.c, marks
 * which values use it).
 *
 * Why. kiln's packed GEMM puts output positions in the vector lanes (a 6x32 tile is 6
 * output channels x 32 positions). That fits large images, but ResNet-50's later stages
 * have 196 and 49 positions per image: 196 = 12 x 16 + 4 and 49 = 3 x 16 + 1 leave lanes
 * idle, and every conv packs its input into panels first. With channels in the lanes
 * (ResNet's channel counts are all multiples of 64) a tile is a few output positions x
 * 64 output channels, each position's input value broadcast from where it lies: no
 * packing, no idle lanes, and 10 loads per 24 FMAs where the 6x32 kernel needs 14 per 12
 * (cpu_c16_tile_avx512.c). This is the layout ONNX Runtime's MLAS uses on AVX-512
 * ("NCHWc"); measured against both: docs/BENCHMARKS.md, "Session 13".
 *
 * A tile (cpu_c16_tile_avx512): np (1..6) output positions x nv (1..4) vectors of 16
 * output channels, summed over k steps. The k steps come in n_blocks blocks of ku (16, 7,
 * 3 or 1) steps; block b's input value for position i and step j lies at
 *     pos[i] + koff[b] / 4 + j
 * (ku 16: 16 consecutive channels of C16 data; 7 or 3: a kernel row's taps over the
 * neighbouring pixels of NCHW data; 1: one step per block)
 * (koff in bytes), and its weights at w[(b * ku + j) * nv * 16 + v * 16 + lane]. The sums
 * go to acc[i * 64 + v * 16 + lane] (acc 64-byte aligned, 6 x 64 floats), added to what
 * acc holds when accumulate is set.
 */
#ifndef KILN_BACKENDS_CPU_CPU_C16_H
#define KILN_BACKENDS_CPU_CPU_C16_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_gemm.h"

typedef struct cpu_c16_tile_args {
    const float *pos[6];
    const int64_t *koff;
    int64_t n_blocks;
    const float *w;
    int np, nv, ku;
    bool accumulate;
} cpu_c16_tile_args;

/* AVX-512F only (cpu_gemm_avx512_usable()). */
void cpu_c16_tile_avx512(const cpu_c16_tile_args *t, float *acc);

/* ---- direct 2-D convolution over NCHW tensors (cpu_conv_c16_avx512.c) ------------------
 * Y = conv(X, W) + epilogue for one image: X [C, H, W] and Y [M, OH, OW] row-major, the
 * input copied into a zero-padded buffer (C16 when C is a multiple of 16, else padded
 * NCHW) and every 6-position x 64-channel tile summed from it by the tile kernel. */

/* Weights packed for it (per node, once): per block of 64 output channels, k steps x
 * (up to) 64 floats, k steps in the order of the offset table koff. */
typedef struct cpu_conv_c16_weights {
    float *w;
    int64_t *koff;              /* byte offset of each k block from a position's base */
    int64_t M, C, taps, ku, kh, kw, pack_dw; /* pack_dw: the column dilation ku was chosen for */
    int64_t hp, wp, dh, dw;     /* the padded input koff was computed for */
    const float *src;           /* the weights packed (a changed binding repacks) */
} cpu_conv_c16_weights;

/* 2-D, group 1, output channels a multiple of 16, kernels up to 16x16. */
bool cpu_conv_c16_applies(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M);
kiln_status cpu_conv_c16_pack(const float *W, int64_t M, int64_t C, const cpu_conv_geom *g, cpu_conv_c16_weights *out,
                              kiln_error *err);
void cpu_conv_c16_weights_free(cpu_conv_c16_weights *w);
/* Floats of scratch cpu_conv_c16_run needs per image (the padded copy), 64-byte aligned. */
int64_t cpu_conv_c16_scratch_floats(const cpu_conv_geom *g, int64_t C);
/* Layout bits of cpu_conv_c16_run (the kiln_c16 attribute's, build/passes/layout_c16.c):
 * x is C16 (C a multiple of 16), y is C16, ep's residual is C16 (each independently). */
#define CPU_C16_X 1u
#define CPU_C16_Y 2u
#define CPU_C16_RES 4u
/* Whether cpu_conv_c16_run reads x in place (C16 by `layout`, C in 16s, no padding): no
 * copy, no scratch. */
bool cpu_conv_c16_reads_in_place(const cpu_conv_geom *g, int64_t C, unsigned layout);
/* N images: x [N, C, H, W], y [N, M, OH, OW], each NCHW or C16 as `layout` says; ep's bias
 * is per output channel (CPU_BIAS_ROW) and its residual [N, M, OH*OW] (ld_res = OH*OW);
 * scratch holds N times cpu_conv_c16_scratch_floats (unused, may be NULL, when x is read
 * in place). AVX-512F only. */
kiln_status cpu_conv_c16_run(cpu_threadpool *pool, const cpu_conv_geom *g, cpu_conv_c16_weights *w, int64_t N,
                             const float *x, float *y, const cpu_epilogue *ep, float *scratch, unsigned layout,
                             kiln_error *err);

#endif
