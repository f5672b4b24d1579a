/* cpu_matmul.h - MatMul's tactics (build/tactics.c offers them, the builder times them).
 *
 * "MatMul" is the FP32 kernel (the packed AVX-512/AVX2 GEMM for a constant B, BLAS
 * otherwise). CPU_MATMUL_TACTIC_BF16X3 multiplies a constant 2-D B on AMX tiles as three
 * bfloat16 products (cpu_gemm_bf16x3.h: relative error near 1e-5, TF32-class precision),
 * so it is only offered to engines that allow TF32 (not --noTF32), and a node marked with
 * it still runs the FP32 kernel where AMX cannot run.
 */
#ifndef KILN_BACKENDS_CPU_CPU_MATMUL_H
#define KILN_BACKENDS_CPU_CPU_MATMUL_H

#include "backends/cpu/cpu_kernel.h"

#define CPU_MATMUL_TACTIC_FP32 "MatMul"
#define CPU_MATMUL_TACTIC_BF16X3 "matmul_amx_bf16x3"

kiln_status cpu_matmul_run_fp32(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                int32_t n_out);
kiln_status cpu_matmul_run_bf16x3(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out);

#endif
