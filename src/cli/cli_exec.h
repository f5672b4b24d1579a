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

/* The parsers behind exec_load_input, exposed for the fuzz target fuzz_exec_inputs.c:
 * a .npy file's header (versions 1-3, little-endian numbers and bool, C order); on
 * success data and nbytes give the payload inside d, and dims has *rank entries
 * (RT_MAX_RANK room). path is only used in messages. */
kiln_status exec_parse_npy(const uint8_t *d, size_t n, const char *path, kiln_dtype *dt, int32_t *rank, int64_t *dims,
                           const uint8_t **data, uint64_t *nbytes, kiln_error *err);
/* A raw file of `size` bytes must hold exactly the tensor want_dt x want_dims. */
kiln_status exec_check_raw(size_t size, const char *path, const char *name, kiln_dtype want_dt, int32_t want_rank,
                           const int64_t *want_dims, kiln_error *err);

/* A sequence or optional input (decl is its declared type): only from an ONNX
 * SequenceProto/OptionalProto .pb file; path NULL (nothing given) is an error that says
 * which flag to use. */
kiln_status exec_load_value(const char *path, const char *name, const ir_type *decl, rt_value *out, kiln_error *err);

/* Deterministic pseudo-random floats in [-1, 1); integer and bool inputs are zero. */
void exec_fill_random(rt_tensor *t, uint32_t seed);

#endif
