/* validate.h - structural validation of an imported graph, and topological sorting.
 *
 * Checks what ONNX requires of a graph's wiring, independent of op semantics: one
 * producer per name (a node output that is also a graph input or initializer is an
 * error; an initializer also listed as a graph input is only a warning, as ONNX allows
 * that for IR >= 4 as an overridable default), every consumed name produced (in this
 * graph or an enclosing one, for subgraphs), every graph output produced, no cycles (the
 * message names the nodes in the cycle), IR and opset versions in range (an IR version
 * newer than kiln knows is a warning). Unsorted graphs are sorted (stable: ties keep file
 * order), as ONNX Runtime does. Every problem is reported, not only the first.
 */
#ifndef KILN_IR_VALIDATE_H
#define KILN_IR_VALIDATE_H

#include "core/status.h"
#include "diag/diag.h"
#include "ir/graph.h"

/* Range of versions kiln reads. */
#define IR_MIN_IR_VERSION 3
#define IR_MAX_IR_VERSION 14
#define IR_MIN_ONNX_OPSET 1
#define IR_MAX_ONNX_OPSET 28

/* Validates and sorts every graph in the model (main graph, subgraphs, function bodies).
 * Problems go to `diags` (may be NULL). Returns KILN_OK when there were no errors,
 * otherwise KILN_ERR_INVALID_MODEL with the first error's text in err. */
kiln_status ir_validate(ir_model *model, diag_list *diags, kiln_error *err);

/* Stable topological sort of one graph; on a cycle returns KILN_ERR_INVALID_MODEL and
 * names the nodes of one cycle. */
kiln_status ir_graph_toposort(ir_graph *g, kiln_error *err);

#endif
