/* cpu_conv_strided.h - the phase-split input of strided 2-D convolutions (cpu_conv.c's
 * implicit-GEMM path for stride >= 2, and every 1x1 conv that is not a plain pointwise one).
 *
 * A stride-s conv reads every s-th input column and row, so a 16-position B panel of the
 * implicit GEMM was packed with stride-s gathers, with bounds checks at the padding, and
 * with a per-segment scalar loop where the panel crosses output rows (14x14 and 7x7
 * outputs: most panels). Instead the image (one image, all channels) is first copied once
 * into its stride phases with the padding written in as zeros:
 *
 *   P[c][py][px][i][j] = Xpad[c][i*sh + py][j*sw + px]     i < H2, j < W2
 *
 * where Xpad is the zero-padded input. The input row of kernel tap (kh, kw) at output
 * (oh, ow) is padded row oh*sh + kh*dh: phase py = (kh*dh) % sh, phase row oh + (kh*dh)/sh
 * (columns likewise), so every tap reads phase plane (py, px) at the fixed offset
 * ((kh*dh)/sh, (kw*dw)/sw) with stride 1 and no bounds checks: a B panel row is one or two
 * contiguous runs of the plane (two where the 16 positions cross an output row). Only the
 * phases some tap uses are built (a 1x1 conv needs one), so the planes hold about as
 * many floats as the input itself (H2 = OH + ((KH-1)*dh)/sh, W2 likewise).
 * For a 1x1 kernel W2 = OW and H2 = OH: the planes are exactly the subsampled image
 * [C, OH*OW], and the conv is run as a pointwise one on it (the same GEMM calls).
 *
 * Measurements that justify it are in cpu_conv_strided_avx2.c.
 */
#ifndef KILN_BACKENDS_CPU_CPU_CONV_STRIDED_H
#define KILN_BACKENDS_CPU_CPU_CONV_STRIDED_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_kernel.h"

#define CPU_CONV_PHASE_MAX_K 32 /* kernel extent per axis the phase path takes */

typedef struct cpu_conv_phase {
    const cpu_conv_geom *g;
    int64_t H2, W2;        /* phase plane size */
    int64_t ny, nx;        /* phases built per axis */
    int64_t py[CPU_CONV_PHASE_MAX_K], px[CPU_CONV_PHASE_MAX_K]; /* their row / column phase */
    int64_t plane;         /* H2 * W2 */
    int64_t cstride;       /* floats per channel: ny * nx * plane */
    /* tap (kh, kw) of a channel starts at yoff[kh] + xoff[kw] (phase plane and offset) */
    int64_t yoff[CPU_CONV_PHASE_MAX_K], xoff[CPU_CONV_PHASE_MAX_K];
} cpu_conv_phase;

/* Fills *ph for a 2-D geometry; false when the phase path does not apply (not 2-D, or a
 * kernel longer than CPU_CONV_PHASE_MAX_K, or sizes that overflow). */
bool cpu_conv_phase_plan(const cpu_conv_geom *g, cpu_conv_phase *ph);

/* Writes the phase planes of `channels` channels of one image x [channels, H, W] into
 * dst [channels * ph->cstride], channels spread over the pool. */
void cpu_conv_phase_build(cpu_threadpool *pool, const cpu_conv_phase *ph, const float *x, int64_t channels,
                          float *dst);

/* The implicit-GEMM B packer over phase planes (cpu_gemm_pack_b_fn): user points at a
 * cpu_conv_phase_pack. AVX2 (cpu_conv_strided_avx2.c): only on the packed-GEMM path. */
typedef struct cpu_conv_phase_pack {
    const cpu_conv_phase *ph;
    const float *p; /* this group's first channel's planes */
} cpu_conv_phase_pack;
void cpu_conv_phase_pack_b(void *user, int64_t panel, int64_t k0, int64_t kc, float *dst);

#endif
