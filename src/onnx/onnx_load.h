/* onnx_load.h - the only door from ONNX protobuf bytes into kiln's IR.
 *
 * Reads a model file (memory-mapped, weights not copied), decodes the protobuf wire
 * format with hard limits, and imports it into an ir_model (src/ir/graph.h). Nothing
 * past this module sees protobuf. Errors name the file, the byte offset and the field
 * path (graph.initializer[12] 'fc.weight') and say what to do.
 */
#ifndef KILN_ONNX_LOAD_H
#define KILN_ONNX_LOAD_H

#include <stddef.h>

#include "core/status.h"
#include "ir/graph.h"
#include "kiln/kiln.h"

/* On success *out owns the mapping of the file. On failure *out is NULL and err says why.
 * Does not run structural validation (see ir/validate.h); does sort nothing. */
kiln_status onnx_load_file(const char *path, const kiln_model_options *opts, ir_model **out,
                           kiln_error *err);

/* Same from memory; the bytes must outlive the model. base_dir may be NULL (external
 * data then is an error). display_name is used in messages. */
kiln_status onnx_load_bytes(const void *data, size_t size, const char *display_name,
                            const char *base_dir, const kiln_model_options *opts, ir_model **out,
                            kiln_error *err);

/* Tensor data from raw_data or external files points into the mapped file and is NOT
 * aligned in general (protobuf does not align fields): read it with memcpy, or call
 * onnx_tensor_align() first. Typed-field (OWNED) data is 16-byte aligned. */

/* Makes t->data aligned for its element type (up to 8 bytes), copying the bytes into the
 * model's arena (where becomes IR_DATA_OWNED) only when they are misaligned. Loads
 * external data first if needed. Not thread-safe (allocates from the model arena). */
kiln_status onnx_tensor_align(ir_model *model, ir_tensor *t, kiln_error *err);

/* Maps an external-data tensor's bytes (checked against the file's size) if not yet
 * mapped. Safe to call on any tensor; a no-op for tensors with data. */
kiln_status onnx_tensor_load_external(ir_model *model, ir_tensor *t, kiln_error *err);

#endif
