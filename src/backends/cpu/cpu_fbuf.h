/* cpu_fbuf.h - float32 working copies for kernels that compute in float32 whatever the
 * floating input type (float16, bfloat16, float32, float64).
 *
 * The "dense2" kernels (Resize, RNNs, Attention, DFT, GridSample, ...) have one float32
 * body each. A float32 input is used in place; other float types are converted into a
 * temporary buffer and the float32 result is converted back into the output's type.
 * float64 inputs therefore lose precision beyond float32, which stays far inside the
 * backend tests' tolerance (rtol 1e-3) and is documented in docs/OPS.md.
 */
#ifndef KILN_BACKENDS_CPU_CPU_FBUF_H
#define KILN_BACKENDS_CPU_CPU_FBUF_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernel.h"

/* True for float16, bfloat16, float32, float64. */
bool cpu_fbuf_dtype_ok(kiln_dtype dtype);

/* A float32 view of t: *data points at t's own memory for float32 tensors (*owned NULL)
 * or at a new converted buffer (*owned = that buffer, free() it). Fails for other
 * types with a message naming `what`. Empty tensors give a NULL view. */
kiln_status cpu_fbuf_get(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, const float **data,
                         float **owned);

/* Any numeric tensor (ints included) converted to a new float32 buffer (free()). */
kiln_status cpu_fbuf_any(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, float **out);

/* Converts n float32 values into dst (a float type) at element offset 0. */
void cpu_fbuf_put(rt_tensor *dst, const float *src, int64_t n);

/* Allocates output i with the given shape and dtype and returns a float32 buffer to fill:
 * the tensor's memory for float32, else a scratch buffer in *scratch (free() after
 * cpu_fbuf_finish). */
kiln_status cpu_fbuf_out(cpu_kernel_ctx *ctx, rt_value *outputs, int32_t n_out, int32_t i, kiln_dtype dtype,
                         int32_t rank, const int64_t *dims, rt_tensor **t, float **data, float **scratch);
/* Writes the scratch buffer back into t when one was used, and frees it. */
void cpu_fbuf_finish(rt_tensor *t, float *scratch);

/* Whether output i is wanted (present and named). */
bool cpu_out_wanted(const cpu_kernel_ctx *ctx, int32_t n_out, int32_t i);

/* Runs a float32-only kernel on float16/bfloat16/float64 inputs: every input tensor of
 * those types is converted to a float32 copy, fn runs, and every float32 output is
 * converted back to the type of the first converted input. Used by kernels whose fast
 * path is float32 (Softmax, Conv, ...) to accept the other float types. */
kiln_status cpu_fbuf_call_f32(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out, cpu_kernel_fn fn);

#endif
