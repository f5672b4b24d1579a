/* infer.h - type and shape inference over the IR, with symbolic dimensions.
 *
 * Walks every graph in topological order and fills each value's ir_type (dtype + dims,
 * symbolic where the model uses dim_param names, expressions like batch*seq_len where
 * shape arithmetic produces them). Small integer tensors computed from shapes
 * (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) are tracked as known values so
 * Reshape targets of exported transformers resolve at build time.
 *
 * Problems become diagnostics (diag.h) that name the node, the op, the shapes in the
 * model's own dimension names, the producer chain of each offending value, and a fix.
 * Errors that only follow from an earlier one are suppressed: a value whose type could
 * not be inferred is "poisoned" and its consumers stay silent.
 */
#ifndef KILN_IR_INFER_H
#define KILN_IR_INFER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "diag/diag.h"
#include "ir/graph.h"

/* Replaces a graph input's dims for one inference run (a profile point, --shapes). */
typedef struct ir_input_shape {
    const char *name;
    int32_t rank;
    const int64_t *dims;
} ir_input_shape;

typedef struct ir_infer_options {
    const ir_input_shape *inputs; /* may be NULL */
    int32_t n_inputs;
    /* Report ops without inference as one warning listing each op once with counts. */
    bool report_unknown_ops;
} ir_infer_options;

/* Runs inference on every graph of the model. Types of intermediate values are
 * recomputed from scratch on each call (declared value_info types are checked against
 * the inferred ones, not trusted), so it can be called once per profile point.
 * Returns KILN_OK when no error diagnostic was added, KILN_ERR_SHAPE otherwise;
 * other statuses only for out-of-memory or internal errors (with err set). */
kiln_status ir_infer(ir_model *model, const ir_infer_options *opts, diag_list *diags,
                     kiln_error *err);

/* Whether kiln knows this op (has inference for it) at the given opset. */
bool ir_op_known(const char *domain, const char *op_type, int64_t opset);

/* Every op kiln knows, for "supported ops" listings: calls fn for each (domain, op_type). */
void ir_op_foreach(void (*fn)(const char *domain, const char *op_type, void *user), void *user);

#endif
