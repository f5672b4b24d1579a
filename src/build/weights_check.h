/* weights_check.h - checks on a model's weights and wiring that shape inference does not
 * cover: NaN/Inf values, values outside the float16 range (when building for fp16),
 * initializers nothing uses, and nodes whose results never reach a graph output.
 *
 * Used by `kiln check` and, later, by the engine builder before it converts precisions.
 * Every finding is a diagnostic (codes weights-*, unused-initializer, dead-node) that
 * names the tensor or node, counts, and says how to fix it.
 */
#ifndef KILN_BUILD_WEIGHTS_CHECK_H
#define KILN_BUILD_WEIGHTS_CHECK_H

#include <stdbool.h>

#include "core/status.h"
#include "diag/diag.h"
#include "ir/graph.h"

typedef struct build_weights_options {
    bool fp16; /* also report values that do not fit float16 */
} build_weights_options;

/* Scans the values of every initializer and Constant tensor of every graph. External
 * data is mapped first; tensors that cannot be loaded get a note (weights-not-loaded)
 * and are skipped. Returns KILN_OK unless memory ran out. */
kiln_status build_check_weight_values(ir_model *model, const build_weights_options *opts, diag_list *diags,
                                      kiln_error *err);

/* Initializers that no node (in any graph, outer-scope uses included) consumes and that
 * are not graph outputs: one warning per graph listing them. */
kiln_status build_check_unused_initializers(ir_model *model, diag_list *diags, kiln_error *err);

/* Nodes whose outputs reach no graph output: one warning per "sink" node (a dead node
 * whose outputs nothing consumes), listing the dead nodes that only feed it. */
kiln_status build_check_dead_nodes(ir_model *model, diag_list *diags, kiln_error *err);

#endif
