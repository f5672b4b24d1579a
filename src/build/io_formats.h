/* io_formats.h - trtexec's --inputIOFormats / --outputIOFormats: the data type a caller
 * hands an engine's inputs in and gets its outputs back in.
 *
 * A spec is a comma-separated list of `type:format` entries, one per graph input (or
 * output) in declaration order, or a single entry for all of them:
 *     --inputIOFormats=fp16:chw          every input in float16
 *     --inputIOFormats=int32:chw,int32:chw
 * Types: fp32, fp16, bf16, int32, int64, int8, uint8, bool. Format: chw (the linear,
 * row-major layout of the tensor's own dims, whatever its rank); `+`-joined alternatives
 * are accepted when one of them is chw. Vectorised formats (hwc8, chw32, ...) are refused:
 * kiln picks the internal layout itself (the channels-last pass) and converts at the
 * boundary inside the engine.
 *
 * Applying a spec changes the graph's interface, not its arithmetic: an input given in
 * another type is declared in that type and read through one Cast to the type the model
 * computes in; an output is produced in the model's type and cast last. The FP16 pass
 * then removes a float16 -> float32 -> float16 round trip (exact), so a half input feeds
 * half kernels directly and the host-to-device copy moves half the bytes.
 */
#ifndef KILN_BUILD_IO_FORMATS_H
#define KILN_BUILD_IO_FORMATS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "ir/graph.h"

#define BUILD_IO_MAX_SPECS 256

typedef struct build_io_spec {
    int32_t n;                            /* entries given (1 = broadcast to every tensor) */
    kiln_dtype types[BUILD_IO_MAX_SPECS]; /* requested dtype per entry */
} build_io_spec;

/* Parses `spec` (the flag's value) for `flag` ("--inputIOFormats"). false with a message
 * naming the bad entry and the accepted types/formats. */
bool build_io_spec_parse(const char *flag, const char *spec, build_io_spec *out, kiln_error *err);

/* Retypes the main graph's inputs (in_spec) and outputs (out_spec; either may be NULL)
 * with Casts at the boundary, as described above. Checks the entry count against the
 * tensors and that each conversion is a sensible one (float <-> float, integer <->
 * integer, bool only to bool); counts the retyped tensors in *changed (may be NULL). */
kiln_status build_apply_io_formats(ir_model *model, const build_io_spec *in_spec, const build_io_spec *out_spec,
                                   int32_t *changed, kiln_error *err);

#endif
