/* cpu_via_f32.h - run a float32-only kernel on float16/bfloat16/float64 (and small
 * integer) tensors by converting through float32.
 *
 * Kernels whose inner loops exist only for float32 (pooling, softmax, ...) call
 * cpu_run_via_f32 when they see another dtype: every input tensor of a type float32
 * represents well (half types, float64, 8/16-bit integers) is converted to a float32
 * copy, the kernel runs on those, and every float32 output is converted back to the
 * dtype of input 0. Other inputs (int64 indices, shapes) and outputs pass unchanged.
 * float64 loses precision this way (about 7 significant digits), which is within the
 * tolerances conformance tests use for these ops; precision-critical float64 paths
 * should get native kernels instead.
 */
#ifndef KILN_BACKENDS_CPU_CPU_VIA_F32_H
#define KILN_BACKENDS_CPU_CPU_VIA_F32_H

#include "backends/cpu/cpu_kernel.h"

/* Whether cpu_run_via_f32 can convert this dtype. */
bool cpu_via_f32_ok(kiln_dtype dtype);

kiln_status cpu_run_via_f32(cpu_kernel_ctx *ctx, cpu_kernel_fn fn, const rt_value *const *inputs, int32_t n_in,
                            rt_value *outputs, int32_t n_out);

#endif
