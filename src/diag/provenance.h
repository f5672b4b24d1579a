/* provenance.h - where a value came from, in one line, for diagnostics.
 *
 * A shape error is only actionable when the user can find the layer that produced the
 * offending tensor. This walks producers back through ops that keep the shape (Relu,
 * Cast, Add of a bias, normalisations, ...) to the op that set it, and names that op and
 * the graph input or initializer it reads: "from Gather '/embedding/Gather' of
 * initializer 'embedding.weight' [10000, 64]".
 */
#ifndef KILN_DIAG_PROVENANCE_H
#define KILN_DIAG_PROVENANCE_H

#include <stdint.h>

#include "ir/graph.h"

/* "(initializer)", "(graph input)", "(from the enclosing graph)" or "" for values made by
 * a node. Static strings. */
const char *diag_value_origin(const ir_graph *g, int32_t value);

/* The producer chain line ("from Relu '/a' <- Gather '/emb' of initializer 'w' [100, 64]"),
 * in the model arena; NULL for graph inputs, initializers and unknown ids. */
const char *diag_provenance(ir_model *m, const ir_graph *g, int32_t value);

/* The node that decided the value's shape: its producer, or further up when the producer
 * only keeps its input's shape (Relu, Add of a bias, ...). IR_NONE for graph inputs,
 * initializers, or when the chain leaves the graph. */
int32_t diag_shape_origin(const ir_graph *g, int32_t value);

#endif
