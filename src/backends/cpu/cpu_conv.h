/* cpu_conv.h - the Conv algorithms the builder can choose between per node (tactics).
 *
 * cpu_conv (the registered Conv kernel, kernels.def) reads the builder's choice from the
 * node's `kiln_tactic` attribute; the names below are the ones build/tactics.c writes.
 * Without the attribute (an untimed build, or a kernel run outside the builder) it picks
 * by geometry: Winograd where it applies (F(4x4, 3x3), or F(2x2, 3x3) when the batch has
 * fewer than 16 4x4 output tiles), else the implicit GEMM.
 * The two forced variants run one algorithm regardless of the attribute: the builder
 * times them against each other on the node's shape.
 */
#ifndef KILN_BACKENDS_CPU_CPU_CONV_H
#define KILN_BACKENDS_CPU_CPU_CONV_H

#include "backends/cpu/cpu_kernel.h"

#define CPU_CONV_TACTIC_GEMM "conv_im2col_gemm"
#define CPU_CONV_TACTIC_WINOGRAD "conv_winograd_f43"
#define CPU_CONV_TACTIC_WINOGRAD_F23 "conv_winograd_f23"

/* Conv through implicit GEMM / im2col (or the pointwise and depthwise paths by geometry). */
kiln_status cpu_conv_run_gemm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out);
/* Conv through Winograd F(4x4, 3x3) / F(2x2, 3x3) where it applies (cpu_winograd.h),
 * else as above. */
kiln_status cpu_conv_run_winograd(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out);
kiln_status cpu_conv_run_winograd_f23(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                      rt_value *outputs, int32_t n_out);

#endif
