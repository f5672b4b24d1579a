/* onnx_value_file.h - reads standalone ONNX value files (.pb): a TensorProto, or a
 * SequenceProto / OptionalProto / MapProto (onnx-data.proto).
 *
 * These are the backend tests' input_K.pb / output_K.pb files and what `--loadInputs`
 * takes. The same hardened decoder as for models is used: errors name the file, the byte
 * offset and the field path, and nothing in the file can cause an allocation larger than
 * the file could encode.
 */
#ifndef KILN_ONNX_VALUE_FILE_H
#define KILN_ONNX_VALUE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/status.h"
#include "ir/graph.h"

/* One value. TENSOR: `tensor`. SPARSE_TENSOR: `sparse`. SEQUENCE: `elems`/`n_elems`.
 * OPTIONAL: has_value, and when set elems[0] is the contained value. MAP: `tensor` holds
 * the keys as a 1-D tensor (string keys as STRING, integer keys widened to INT64) and
 * elems[i] is the value of key i. */
typedef struct onnx_value {
    ir_type_kind kind;
    const char *name; /* "" when the file gives none */
    ir_tensor *tensor;
    ir_sparse_tensor *sparse;
    struct onnx_value *elems;
    int32_t n_elems;
    bool has_value;
} onnx_value;

/* kind_hint: IR_TYPE_UNKNOWN to guess (a TensorProto first, then by field shape a
 * SequenceProto or MapProto; an OptionalProto is indistinguishable from a one-element
 * sequence and is only read as such with the hint), or the kind the model declares for
 * the input/output. Everything is allocated in `a`: the file is read into the arena, so
 * tensors point into it. */
kiln_status onnx_read_value_file(const char *path, ir_type_kind kind_hint, arena *a, onnx_value *out,
                                 kiln_error *err);
/* The same from memory; the bytes must outlive the arena's use of them. */
kiln_status onnx_read_value_bytes(const void *data, size_t size, const char *display_name, ir_type_kind kind_hint,
                                  arena *a, onnx_value *out, kiln_error *err);

/* Decodes one TensorProto from bytes (raw_data stays pointing into `data`). */
kiln_status onnx_tensor_from_bytes(const void *data, size_t size, const char *display_name, arena *a,
                                   ir_tensor *out, kiln_error *err);

#endif
