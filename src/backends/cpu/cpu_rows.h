/* cpu_rows.h - per-row kernels of the normalisation and softmax ops (LayerNorm /
 * RMSNorm statistics and scaling of one row, the max of a row), with AVX2+FMA versions
 * (cpu_rows_avx2.c) picked at run time and portable ones (cpu_rows.c).
 *
 * Why: BERT-base at sequence 128 runs 25 LayerNorms over 128x768 and 12 Softmaxes over
 * 12x128x128 per sequence; the scalar loops (double accumulation with an index modulo per
 * element, a branchy argmax) took ~2.4 ns per element, ~11 ms of a ~300 ms run at one
 * thread, against ~0.3 ns for these vector versions.
 *
 * Numerics of cpu_norm_row: statistics in double as cpu_norm.c explains, two passes (mean,
 * then the mean of (x - mean)^2: no E[x^2] - mean^2 cancellation); y = (x - mean) * inv *
 * scale + bias with scale and bias of the row's full length.
 */
#ifndef KILN_BACKENDS_CPU_CPU_ROWS_H
#define KILN_BACKENDS_CPU_CPU_ROWS_H

#include <stdbool.h>
#include <stdint.h>

/* One LayerNorm (rms = false) or RMSNorm (rms = true: mean taken as 0) row of n >= 1
 * elements; bias may be NULL. Writes the mean and 1/sqrt(var + eps) used. */
typedef void (*cpu_norm_row_fn)(const float *x, const float *scale, const float *bias, float *y, int64_t n,
                                float eps, bool rms, float *mean, float *inv);
/* The largest of n >= 1 floats, ignoring NaN (as `if (x > max)` loops do); -inf when all
 * are -inf or NaN. */
typedef float (*cpu_row_max_fn)(const float *x, int64_t n);

typedef struct cpu_rows {
    cpu_norm_row_fn norm_row;
    cpu_row_max_fn max;
} cpu_rows;

/* The best table for this CPU (one cpuid; call once per kernel call). */
const cpu_rows *cpu_rows_get(void);
const cpu_rows *cpu_rows_scalar(void);
const cpu_rows *cpu_rows_avx2(void); /* only when the CPU has AVX2+FMA */

#endif
