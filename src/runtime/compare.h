/* compare.h - checking runtime outputs against expected values, as ONNX's backend tests do.
 *
 * A float element passes when |got - expected| <= atol + rtol * |expected|; NaN matches
 * NaN, an infinity must match exactly. Integers, bools and strings must be equal. Shapes,
 * dtypes, sequence lengths and optional presence must match. The first mismatch is
 * described in one line naming the element by its multi-index, e.g.
 *   element [2, 3] (flat 11): got 1.5, expected 1.25 (|diff| 0.25 > tolerance 0.00125)
 * Used by `kiln verify`, and later by accuracy comparisons between backends.
 */
#ifndef KILN_RUNTIME_COMPARE_H
#define KILN_RUNTIME_COMPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/strbuf.h"
#include "runtime/tensor.h"

typedef struct rt_compare_stats {
    uint64_t elements;      /* float elements compared */
    double max_abs_diff;    /* over finite pairs */
    double max_rel_diff;
} rt_compare_stats;

/* true when they match; otherwise appends the first difference to `why` (no prefix). */
bool rt_compare_tensor(const rt_tensor *got, const rt_tensor *expected, double rtol, double atol, strbuf *why,
                       rt_compare_stats *stats);
bool rt_compare_value(const rt_value *got, const rt_value *expected, double rtol, double atol, strbuf *why,
                      rt_compare_stats *stats);

/* Reads element i of a numeric tensor as double (false for strings / unsupported dtypes). */
bool rt_tensor_get_f64(const rt_tensor *t, uint64_t i, double *out);

#endif
