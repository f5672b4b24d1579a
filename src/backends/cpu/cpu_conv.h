/* cpu_conv.h - the Conv algorithms the builder can choose between per node (tactics).
 *
 * cpu_conv (the registered Conv kernel, kernels.def) reads the builder's choice from the
 * node's `kiln_tactic` attribute; the names below are the ones build/tactics.c writes.
 * Without the attribute (an untimed build, or a kernel run outside the builder) it picks
 * by geometry: Winograd where it applies (F(4x4, 3x3), or F(2x2, 3x3) when the batch has
 * fewer than 16 4x4 output tiles), else on AVX-512 the channels-in-lanes direct conv where
 * cpu_conv_c16_candidate says so, else the implicit GEMM.
 * The two forced variants run one algorithm regardless of the attribute: the builder
 * times them against each other on the node's shape.
 */
#ifndef KILN_BACKENDS_CPU_CPU_CONV_H
#define KILN_BACKENDS_CPU_CPU_CONV_H

#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_kernel.h"

#define CPU_CONV_TACTIC_GEMM "conv_im2col_gemm"
#define CPU_CONV_TACTIC_POINTWISE "conv_pointwise_gemm" /* 1x1 stride-1 convs on the GEMM */
#define CPU_CONV_TACTIC_WINOGRAD "conv_winograd_f43"
#define CPU_CONV_TACTIC_WINOGRAD_F23 "conv_winograd_f23"
#define CPU_CONV_TACTIC_C16 "conv_c16_direct" /* output channels in lanes, AVX-512 (cpu_c16.h) */
/* convs on AMX tiles as three bfloat16 products (cpu_gemm_bf16x3.h; TF32-class) */
#define CPU_CONV_TACTIC_AMX "conv_amx_bf16x3"

/* Conv through implicit GEMM / im2col (or the pointwise and depthwise paths by geometry). */
kiln_status cpu_conv_run_gemm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out);
/* Conv through Winograd F(4x4, 3x3) / F(2x2, 3x3) where it applies (cpu_winograd.h),
 * else as above. */
kiln_status cpu_conv_run_winograd(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out);
kiln_status cpu_conv_run_winograd_f23(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                      rt_value *outputs, int32_t n_out);
/* Conv through the channels-in-lanes direct kernel (cpu_c16.h) where it applies and the CPU
 * has AVX-512, else as cpu_conv_run_gemm. */
kiln_status cpu_conv_run_c16(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out);
/* Conv through the AMX bf16x3 kernel where it applies and AMX runs, else as cpu_conv. */
kiln_status cpu_conv_run_amx(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out);
/* The geometry the AMX tactic takes: 2-D, group 1, input and output channels multiples
 * of 16 (so it can sit in a C16 region), at least 128 products per output, kernels up to
 * 16x16, any pads, strides and dilations. Where it does not apply at run time the conv
 * runs the C16 kernel or the GEMM instead. */
bool cpu_conv_amx_applies(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M);
/* Whether the builder offers conv_c16_direct for a conv of this geometry (and cpu_conv runs
 * it without a tactic): 2-D, group 1, M a multiple of 16, and kernels larger than 1x1 over
 * a multiple of 16 input channels, or a 7-wide undilated kernel over fewer than 16 (RGB
 * stems). */
bool cpu_conv_c16_candidate(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M);
/* Where the builder offers tactic conv_c16_direct: the candidates and, timed only, any
 * other conv over a multiple of 16 channels it takes. */
bool cpu_conv_c16_offered(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M);

/* Depthwise 2-D conv of nc <= 8 channels at once (cpu_conv_dw_avx2.c): output rows
 * [oh0, oh1) (oh0 a multiple of CPU_CONV_DW8_STRIP) of y [OH, OW] from x [H, W] and
 * weights [nc][KH*KW], plus bias[nc] (or NULL), then ReLU (relu) or the clamp to [lo, hi]
 * (Clip; none: -inf, +inf), in registers, with the NaN behaviour of the ReLU and Clip
 * ops; other epilogues are the caller's. Each side is planar or P16 (cpu_dw8_side):
 * position p of channel c at data + c * cs + p (planar: bs = 0), or at data + c * cs +
 * (p / 16) * bs + p % 16 (P16: cs = 16, bs = 16 * channels, data at the group's first
 * channel; its row width must be a multiple of 8). buf: cpu_conv_dw8_scratch(g) floats
 * (-1: over 2^28, do not run it). AVX2 + FMA only, at most CPU_CONV_DW_MAX_TAPS taps. */
#define CPU_CONV_DW_MAX_TAPS 64
#define CPU_CONV_DW8_STRIP 8
typedef struct cpu_dw8_side {
    float *data;
    int64_t cs, bs;
} cpu_dw8_side;
int64_t cpu_conv_dw8_scratch(const cpu_conv_geom *g);
void cpu_conv_dw8_avx2(const cpu_conv_geom *g, cpu_dw8_side x, const float *w, int nc, cpu_dw8_side y,
                       const float *bias, bool relu, float lo, float hi, int64_t oh0, int64_t oh1, float *buf);

/* P16 layouts of a Conv's data (the kiln_p16 attribute's bits, written by the CPU layout
 * pass build/passes/layout_p16.c; cpu_gemm_packed.h defines the layout). */
#define CPU_CONV_P16_X 1   /* input X */
#define CPU_CONV_P16_Y 2   /* output Y */
#define CPU_CONV_P16_RES 4 /* the fused residual (kiln_residual) */
#define CPU_CONV_P16_MAX_INPUTS 8

/* Per image [rows, n] (n a multiple of 16): row-major -> P16 and back (cpu_conv_p16.c). */
void cpu_p16_from_rows(const float *src, int64_t rows, int64_t n, float *dst);
void cpu_p16_to_rows(const float *src, int64_t rows, int64_t n, float *dst);

/* A Conv over row-major data only (cpu_conv.c's body with kiln_p16 ignored). */
typedef kiln_status (*cpu_conv_nchw_fn)(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                        rt_value *outputs, int32_t n_out, int algo);
/* Per image [rows, n] (rows a multiple of 16): row-major -> C16 (cpu_c16.h) and back. */
void cpu_c16_from_rows(const float *src, int64_t rows, int64_t n, float *dst);
void cpu_c16_to_rows(const float *src, int64_t rows, int64_t n, float *dst);

/* A Conv marked with layout bits `bits` (the P16 bits above; kiln_c16's are the same:
 * input 1, output 2, residual 4) of P16, or of C16 when c16, that the fast path cannot
 * take: converts the blocked inputs to row-major copies, runs `run`, and rewrites a
 * blocked output in place. */
kiln_status cpu_conv_layout_fallback(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                     rt_value *outputs, int32_t n_out, int64_t bits, bool c16, cpu_conv_nchw_fn run,
                                     int algo);

#endif
