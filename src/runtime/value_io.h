/* value_io.h - runtime values from ONNX value files (input_K.pb / output_K.pb).
 *
 * onnx_read_value_file (src/onnx) decodes the protobuf; this turns its onnx_value into
 * an rt_value that borrows the decoded tensor data (no copy), so it must not outlive the
 * arena the file was read into. Release with rt_value_release (frees only the item
 * arrays). `decl` (the model's declared type, may be NULL) gives the element kind of an
 * empty optional.
 */
#ifndef KILN_RUNTIME_VALUE_IO_H
#define KILN_RUNTIME_VALUE_IO_H

#include "core/status.h"
#include "ir/graph.h"
#include "onnx/onnx_value_file.h"
#include "runtime/tensor.h"

kiln_status rt_value_from_onnx(const onnx_value *src, const ir_type *decl, rt_value *out, kiln_error *err);

#endif
