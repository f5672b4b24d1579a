/* cpu_axis_copy.h - dtype-agnostic copies along one axis: take a slice, stack slices,
 * concatenate, split. Used by the control-flow kernels (Scan/Loop stacking) and the
 * sequence kernels (SplitToSequence, ConcatFromSequence). Work in bytes, so every
 * whole-byte dtype is handled; strings are deep-copied element by element; sub-byte
 * dtypes (int4, ...) are refused with a clear error.
 */
#ifndef KILN_BACKENDS_CPU_CPU_AXIS_COPY_H
#define KILN_BACKENDS_CPU_CPU_AXIS_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/tensor.h"

/* Copies `count` elements from src[src_off..] to dst[dst_off..] (same dtype). */
kiln_status cpu_copy_elems(rt_tensor *dst, uint64_t dst_off, const rt_tensor *src, uint64_t src_off, uint64_t count,
                           kiln_error *err);

/* dst = src[..., begin:begin+len, ...] along axis; keep_axis false drops the axis (len must be 1). */
kiln_status cpu_slice_axis(rt_tensor *dst, const rt_tensor *src, int32_t axis, int64_t begin, int64_t len,
                           bool keep_axis, kiln_error *err);

/* Concatenates n tensors along axis (new_axis: stack, inserting the axis). All parts must
 * have the same dtype and the same dims except along axis. reverse takes parts in
 * reverse order. */
kiln_status cpu_concat_axis(rt_tensor *dst, const rt_tensor *const *parts, int32_t n, int32_t axis, bool new_axis,
                            bool reverse, kiln_error *err);

/* Normalises a possibly negative axis against rank; false when out of range. */
bool cpu_norm_axis(int64_t axis, int32_t rank, int32_t *out);

#endif
