/* cpu_winograd.h - Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution for 2-D 3x3 stride-1
 * dilation-1 single-group Conv (about half of ResNet-50's FLOPs), Conv algorithms next to
 * the implicit GEMM of cpu_conv.c.
 *
 * Y = A^T [ (G g G^T) . (B^T d B) ] A per 6x6 input tile d and 4x4 output tile: the 3x3
 * kernel costs 36 multiplies per 16 outputs instead of 144, a 4x cut in GEMM FLOPs, paid
 * for with input/output transforms and 4x larger (transformed) weights. The multiplies
 * of all tiles become 36 independent GEMMs, one per transform point, over the input
 * channels: M[xi][tile][cout] = V[xi][tile][cin] * U[xi][cin][cout].
 * F(2x2, 3x3) (4x4 input tiles, 16 points) saves 2.25x instead of 4x but its transformed
 * weights are only 1.8x the weights: where those weights, streamed from memory once per
 * run, dominate (ResNet stage 4 at batch 1: 7x7 outputs, 512 channels) it is faster.
 *
 * cpu_winograd_avx2.c holds the implementation (AVX2+FMA only: call these only when
 * cpu_gemm_packed_supported()), its data layouts and measurements. The builder chooses
 * between this and the implicit GEMM per node by timing both (tactic "conv_winograd_f43",
 * build/tactics.c); cpu_conv.c honours the choice.
 */
#ifndef KILN_BACKENDS_CPU_CPU_WINOGRAD_H
#define KILN_BACKENDS_CPU_CPU_WINOGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_gemm.h"

/* Below this many input or output channels the transforms cost more than the GEMM saves
 * (and ONNX's single-channel node tests keep their exact implicit-GEMM results). */
#define CPU_WINOGRAD_MIN_CHANNELS 16

/* Output tile edge: F(4x4, 3x3) or F(2x2, 3x3). */
enum cpu_winograd_tile { CPU_WINOGRAD_F23 = 2, CPU_WINOGRAD_F43 = 4 };

/* Weights transformed once per node: U[xi][Mp/16][Cp][16] over the (tile+2)^2 points xi,
 * C padded to a multiple of 8 and M to a multiple of 16 with zeros. */
typedef struct cpu_winograd_weights {
    int tile; /* enum cpu_winograd_tile */
    int64_t C, M, Cp, Mp;
    const float *src; /* the W data it was made from (cache key) */
    float *u;         /* 64-byte aligned, owned */
} cpu_winograd_weights;

/* Per-node scratch (the blocked input and each thread slot's tile buffers), grown once. */
typedef struct cpu_winograd_scratch {
    float *data;
    size_t cap; /* floats */
} cpu_winograd_scratch;

/* Whether the geometry is one this kernel handles: 2-D, 3x3, stride 1, dilation 1, one
 * group, at least CPU_WINOGRAD_MIN_CHANNELS channels in and out. Pads are free. */
bool cpu_winograd_applies(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M);
/* Same test from plain numbers (the builder's tactic table has no cpu_conv_geom). */
bool cpu_winograd_applies_dims(int32_t nsp, const int64_t *k, const int64_t *stride, const int64_t *dil,
                               int64_t group, int64_t C, int64_t M);

/* How a call is cut into tasks (cpu_winograd_avx2.c explains the choice), shared with the
 * builder's scratch estimate. */
typedef struct cpu_winograd_blocking {
    int64_t tiles_h, tiles_w;    /* 4x4 output tiles per image */
    int64_t TB, n_blocks;        /* tiles per block (multiple of 6), blocks over the batch */
    int64_t Mg, n_groups;        /* output channels per task (multiple of 16), groups */
    int64_t n_slots;             /* thread slots, each with its own V and M buffers */
    bool shared_v;               /* too few tile blocks for the threads: each block's input
                                    transform V is made once by all threads into one shared
                                    buffer, then output-channel groups run as tasks */
    uint64_t xb_floats;          /* blocked input, rounded to 16 floats */
    uint64_t v_floats;           /* the shared V (0 unless shared_v), rounded to 16 floats */
    uint64_t slot_floats;        /* one slot's buffers (only M when shared_v), rounded to 16 */
    uint64_t scratch_floats;     /* xb_floats + v_floats + n_slots * slot_floats */
} cpu_winograd_blocking;

/* Fills *b for N images of C -> M channels, output OH x OW, on `threads` threads. False
 * when the sizes overflow or exceed 2^34 floats. */
bool cpu_winograd_plan(int tile, int64_t N, int64_t C, int64_t M, int64_t OH, int64_t OW, int64_t threads,
                       cpu_winograd_blocking *b);

/* Transforms W [M, C, 3, 3] (row-major) for the given tile into *out. Fails on allocation
 * failure. */
kiln_status cpu_winograd_pack(int tile, const float *w, int64_t M, int64_t C, cpu_winograd_weights *out,
                              kiln_error *err);
void cpu_winograd_weights_free(cpu_winograd_weights *w);
void cpu_winograd_scratch_free(cpu_winograd_scratch *s);

/* y[N, M, OH, OW] = conv(x[N, C, H, W]) with the packed weights (their tile size), then the epilogue (bias
 * per output channel, residual, any activation). g must satisfy cpu_winograd_applies.
 * layout: bits CPU_WINOGRAD_C16_X / _Y / _RES say that x, y or the residual is in the C16
 * layout (cpu_c16.h; the kiln_c16 bits of build/passes/layout_c16.c, 0 for NCHW); a C16
 * side needs its channels in 16s. Runs over the pool's threads; call from the kernel's
 * thread. */
#define CPU_WINOGRAD_C16_X 1u
#define CPU_WINOGRAD_C16_Y 2u
#define CPU_WINOGRAD_C16_RES 4u
kiln_status cpu_winograd_conv(cpu_threadpool *pool, const cpu_conv_geom *g, int64_t N, const float *x,
                              const cpu_winograd_weights *w, float *y, const cpu_epilogue *ep,
                              cpu_winograd_scratch *scratch, unsigned layout, kiln_error *err);

#endif
