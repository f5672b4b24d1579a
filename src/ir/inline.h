/* inline.h - expanding calls of model-local functions (FunctionProto) into their bodies.
 *
 * Exporters (torch.onnx's dynamo exporter among them) may put reusable pieces of a model
 * into model-local functions; a node whose (domain, op_type, overload) names such a
 * function is a call. Shape inference, the builder and the runtimes all work on plain
 * nodes, so calls are replaced by a copy of the body: formal inputs and outputs become the
 * call's values, the body's own values get names prefixed with the call node's name
 * ("/block0/call/Add_output_0"), and attributes that refer to the caller's attributes
 * (ref_attr_name) take the caller's value or the function's default. Calls inside
 * function bodies are expanded too (up to a fixed depth, so a recursive function is an
 * error, not a hang).
 */
#ifndef KILN_IR_INLINE_H
#define KILN_IR_INLINE_H

#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"

/* Maximum nesting of calls inside function bodies. */
#define IR_MAX_INLINE_DEPTH 32

/* Expands every call in the main graph and its subgraphs. *n_inlined (may be NULL)
 * receives the number of calls expanded. Node order afterwards puts each body where the
 * call was, so a sorted graph stays sorted. Fails (KILN_ERR_UNSUPPORTED) for function
 * bodies that contain subgraphs (If/Loop/Scan inside a function), and
 * (KILN_ERR_INVALID_MODEL) for recursion deeper than IR_MAX_INLINE_DEPTH or a call
 * with more inputs/outputs than the function declares. */
kiln_status ir_inline_functions(ir_model *model, int32_t *n_inlined, kiln_error *err);

/* The function a node calls, or NULL when it is a plain op. */
const ir_function *ir_node_function(const ir_model *model, const ir_node *node);

#endif
