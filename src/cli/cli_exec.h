/* cli_exec.h - pieces shared by the files of `kiln exec` (cli_exec*.c). */
#ifndef KILN_CLI_CLI_EXEC_H
#define KILN_CLI_CLI_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/tensor.h"

/* Loads --loadInputs file `path` for input `name`: raw bytes (must match want_* exactly),
 * .npy, or ONNX TensorProto .pb (dtype and rank must match; with dims_fixed the dims too). */
kiln_status exec_load_input(const char *path, const char *name, kiln_dtype want_dt, int32_t want_rank,
                            const int64_t *want_dims, bool dims_fixed, rt_tensor *out, kiln_error *err);

/* Deterministic pseudo-random floats in [-1, 1); integer and bool inputs are zero. */
void exec_fill_random(rt_tensor *t, uint32_t seed);

#endif
