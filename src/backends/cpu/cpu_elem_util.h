/* cpu_elem_util.h - helpers shared by the elementwise, shape, index and reduction kernels.
 *
 * Kernels in these files handle many dtypes with one body each. The X-macro type lists
 * below drive the dispatch (one `case` per dtype generated from the list), and the
 * helpers cover what almost every kernel needs: reading a small int tensor (axes, shape,
 * pads), normalising a possibly negative axis, allocating an output, copying strided
 * blocks of any element size, and taking ownership of strings after a data move.
 *
 * Data-moving kernels treat elements as opaque bytes: a STRING element is an ir_bytes
 * (16 bytes) that is moved like any other value, then cpu_strings_own() gives the output
 * its own copies, so moves never care about the dtype beyond its size.
 */
#ifndef KILN_BACKENDS_CPU_CPU_ELEM_UTIL_H
#define KILN_BACKENDS_CPU_CPU_ELEM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernel.h"

/* Most dims cpu_strided_copy takes (Tile views a tensor as [r0, d0, r1, d1, ...]). */
#define CPU_COPY_MAX_RANK (2 * RT_MAX_RANK)

/* Elements per parallel chunk for cheap elementwise work. */
#define CPU_ELEM_GRAIN 32768

/* X(DTYPE suffix, C type) */
#define CPU_SINT_TYPES(X) X(INT8, int8_t) X(INT16, int16_t) X(INT32, int32_t) X(INT64, int64_t)
#define CPU_UINT_TYPES(X) X(UINT8, uint8_t) X(UINT16, uint16_t) X(UINT32, uint32_t) X(UINT64, uint64_t)
#define CPU_INT_TYPES(X) CPU_SINT_TYPES(X) CPU_UINT_TYPES(X)
#define CPU_FLOAT_TYPES(X) X(FLOAT, float) X(DOUBLE, double)
#define CPU_NATIVE_TYPES(X) CPU_FLOAT_TYPES(X) CPU_INT_TYPES(X)
/* Types computed through float32: stored as uint16 bits. */
#define CPU_HALF_TYPES(X) X(FLOAT16, uint16_t) X(BFLOAT16, uint16_t)

static inline bool cpu_dtype_is_half(kiln_dtype d) { return d == KILN_DTYPE_FLOAT16 || d == KILN_DTYPE_BFLOAT16; }

/* Bytes per element for byte-addressable types (STRING: sizeof(ir_bytes)); 0 for
 * sub-byte and undefined types, which data movement kernels reject. */
size_t cpu_elem_size(kiln_dtype dtype);

/* Half <-> float32 blocks (FLOAT16 or BFLOAT16). */
void cpu_half_to_f32(kiln_dtype dtype, const uint16_t *src, float *dst, int64_t n);
void cpu_f32_to_half(kiln_dtype dtype, const float *src, uint16_t *dst, int64_t n);

/* Element i of a numeric tensor (any int/float/bool type incl. half) as double / int64. */
double cpu_load_f64(const void *data, kiln_dtype dtype, uint64_t i);
int64_t cpu_load_i64(const void *data, kiln_dtype dtype, uint64_t i);
/* Stores v as element i, converting like a C cast but never with undefined behaviour:
 * NaN and out-of-range floats going to an integer type wrap through int64. */
void cpu_store_f64(void *data, kiln_dtype dtype, uint64_t i, double v);
/* double -> int64 without undefined behaviour (NaN -> INT64_MIN, saturating, as x86 does). */
int64_t cpu_f64_to_i64(double v);

/* Reads a 1-D (or scalar) int32/int64 tensor into out (at most max entries). `what`
 * names the input for messages ("axes", "shape"). */
kiln_status cpu_read_ints(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, int64_t *out, int32_t max,
                          int32_t *n_out);
/* Reads a scalar or 1-element tensor of any numeric type as int64 / double. */
kiln_status cpu_read_scalar_i64(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, int64_t *out);
kiln_status cpu_read_scalar_f64(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, double *out);

/* Normalises axis into [0, rank) (negative counts from the end); fails with a message. */
kiln_status cpu_check_axis(cpu_kernel_ctx *ctx, int64_t axis, int32_t rank, const char *what, int32_t *out);

/* Checks the input exists as a tensor. */
kiln_status cpu_need_input(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, int32_t i,
                           const rt_tensor **out);

/* Makes outputs[i] a tensor and allocates it. */
kiln_status cpu_alloc_out(cpu_kernel_ctx *ctx, rt_value *outputs, int32_t n_out, int32_t i, kiln_dtype dtype,
                          int32_t rank, const int64_t *dims, rt_tensor **out);

/* After ir_bytes were moved into a STRING output, makes each entry an owned copy.
 * No-op for other dtypes. On failure the entries not yet copied are cleared. */
kiln_status cpu_strings_own(cpu_kernel_ctx *ctx, rt_tensor *t);

/* Output = full copy of input (deep for strings) with a new shape of the same count. */
kiln_status cpu_copy_reshaped(cpu_kernel_ctx *ctx, const rt_tensor *in, rt_value *outputs, int32_t n_out,
                              int32_t rank, const int64_t *dims);

/* Copies a rank-`rank` (<= CPU_COPY_MAX_RANK) block of `dims` elements of `esize` bytes: element (i0..in) is
 * read at src + sum(i_k * src_strides[k]) * esize and written at dst + sum(i_k *
 * dst_strides[k]) * esize. Strides are in elements and may be 0 or negative. Collapses
 * contiguous dims and runs in parallel for large blocks. */
void cpu_strided_copy(cpu_threadpool *pool, size_t esize, int32_t rank, const int64_t *dims, void *dst,
                      const int64_t *dst_strides, const void *src, const int64_t *src_strides);

/* Row-major element strides of a shape. */
void cpu_contiguous_strides(int32_t rank, const int64_t *dims, int64_t *strides);

/* An int list from optional input `idx` when given, else from attribute `attr` (old
 * opsets), else absent (*present = false). */
kiln_status cpu_ints_input_or_attr(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, int32_t idx,
                                   const char *attr, int64_t *out, int32_t max, int32_t *n, bool *present);

/* Attribute list of ints (NULL and *n = 0 when absent). */
const int64_t *cpu_attr_ints(const ir_node *node, const char *name, int32_t *n);

#endif
