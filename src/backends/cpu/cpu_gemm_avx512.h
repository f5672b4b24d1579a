/* cpu_gemm_avx512.h - AVX-512 microkernels for kiln's packed GEMM (cpu_gemm_avx2.c) and
 * the Winograd batched GEMMs (cpu_winograd_avx2.c).
 *
 * Both callers keep their packed layouts (6-row A panels, 16-column B panels) and, on a
 * CPU with AVX-512F, hand two neighbouring 16-column B panels to one 6x32 kernel: 12 zmm
 * accumulators, 2 B vectors and one broadcast per row and k step, twice the FLOPs per
 * instruction of the 6x16 AVX2 kernel. The packed GEMM's edges run here too: a partial
 * last A panel against a pair (rx32), a lone or partial last B panel of 3-16 columns (x16,
 * masked to its columns; 1-2 columns go to the AVX2 kernel_6xn, one FMA per column). The
 * Winograd GEMMs' edges stay on the AVX2 kernels. The functions here are
 * compiled with -mavx512f (CMake: *_avx512.c) and must only be called when
 * cpu_gemm_avx512_usable() says so.
 */
#ifndef KILN_BACKENDS_CPU_CPU_GEMM_AVX512_H
#define KILN_BACKENDS_CPU_CPU_GEMM_AVX512_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_gemm.h"

/* True when this CPU and OS run AVX-512F and KILN_CPU_ISA does not cap it (decided once;
 * implemented in cpu_gemm_avx2.c so that asking never executes an AVX-512 instruction). */
bool cpu_gemm_avx512_usable(void);

/* Where one 16-column half of a 6x32 tile goes: element (m, n) of C at c + m * ldc + n,
 * and the epilogue's residual likewise through its own pointer and ld_res. In the
 * row-major layout both halves share one view; in P16 (cpu_gemm_packed.h) the two
 * 16-column panels lie in different blocks, so each half has its own. */
typedef struct cpu_half_out {
    float *c;
    int64_t ldc;
    const cpu_epilogue *ep;
} cpu_half_out;

/* C[m0 .. m0+6)[n0 .. n0+32) = (accumulate ? C : 0) + A * [B0 | B1] over kc, A packed
 * [kc][6], B0 and B1 packed [kc][16]; columns [n0, n0+16) go to half0's view, [n0+16,
 * n0+32) to half1's. With fuse, the epilogue's bias, residual and ReLU/Clip are applied
 * before the store (GELU and the other activations are the caller's). With nt, a row
 * half that is one whole 64-byte line is stored non-temporally (cpu_gemm_avx2.c's
 * local_task says when and why). */
void cpu_gemm_kernel_6x32_avx512(int64_t kc, const float *a, const float *b0, const float *b1,
                                 const cpu_half_out *half0, const cpu_half_out *half1, int64_t m0, int64_t n0,
                                 bool accumulate, bool fuse, bool nt);

/* The first mr rows (1..5) of the 6x32 tile, the A panel still packed [kc][6] (rows past
 * mr unused): the last, partial A panel of a pair of B panels. */
void cpu_gemm_kernel_rx32_avx512(int64_t kc, const float *a, const float *b0, const float *b1, int mr,
                                 const cpu_half_out *half0, const cpu_half_out *half1, int64_t m0, int64_t n0,
                                 bool accumulate, bool fuse, bool nt);

/* mr (1..6) rows x nr (1..16) columns against one B panel ([kc][16], zero past nr), as
 * the 6x32 kernel otherwise: a lone last panel, full or partial. Only columns below nr
 * of C, the bias and the residual are read or written. */
void cpu_gemm_kernel_x16_avx512(int64_t kc, const float *a, const float *b, int mr, int nr, const cpu_half_out *h,
                                int64_t m0, int64_t n0, bool accumulate, bool fuse, bool nt);

/* Winograd layout: c[6][32] (row stride ldc) = (accumulate ? c : 0) + a * [b0 | b1] over
 * kc (a multiple of 8), a in [kc/8][6][8], b0 and b1 in [kc][16]. */
void cpu_winograd_kernel_6x32_avx512(int64_t kc, const float *a, const float *b0, const float *b1, float *c,
                                     int64_t ldc, bool accumulate);

#endif
