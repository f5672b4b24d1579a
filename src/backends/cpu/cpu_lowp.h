/* cpu_lowp.h - element access for ONNX's low-precision types: float8 (e4m3fn, e4m3fnuz,
 * e5m2, e5m2fnuz, e8m0), float4e2m1 and the packed 4-/2-bit integers (int4, uint4,
 * int2, uint2). Cast uses these to go through double for any pair involving them.
 */
#ifndef KILN_BACKENDS_CPU_CPU_LOWP_H
#define KILN_BACKENDS_CPU_CPU_LOWP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

typedef enum cpu_round_mode { CPU_ROUND_UP = 0, CPU_ROUND_DOWN = 1, CPU_ROUND_NEAREST = 2 } cpu_round_mode;

/* True for the types handled here. */
bool cpu_lowp_dtype(kiln_dtype dtype);
/* Element i decoded to double. */
double cpu_lowp_load(const void *data, kiln_dtype dtype, uint64_t i);
/* Encodes v into element i (round to nearest even; out-of-range values saturate to the
 * largest finite value when `saturate`, else become inf/NaN as the format allows;
 * integers wrap). The buffer must be zeroed first for the packed types. round_mode only
 * matters for float8e8m0. */
void cpu_lowp_store(void *data, kiln_dtype dtype, uint64_t i, double v, bool saturate, cpu_round_mode round_mode);

#endif
