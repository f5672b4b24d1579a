/* pass_util.h - helpers shared by the graph passes: use counts, rewiring, removing
 * nodes, and turning computed tensors into initializers. All work on one graph (the main
 * graph); a value whose name a subgraph reads is "pinned": passes never remove or rename
 * it, since subgraphs refer to outer values by name. */
#ifndef KILN_BUILD_PASSES_PASS_UTIL_H
#define KILN_BUILD_PASSES_PASS_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "build/passes/passes.h"
#include "core/status.h"
#include "ir/graph.h"
#include "runtime/tensor.h"

typedef struct pass_uses {
    int32_t *count;  /* per value: node inputs reading it */
    int32_t *reader; /* per value: the last node reading it */
    bool *pinned;    /* graph output, or read by name from a subgraph */
} pass_uses;

kiln_status pass_uses_compute(const ir_graph *g, pass_uses *u, kiln_error *err);
void pass_uses_free(pass_uses *u);
/* The common start of a rewriting pass: use counts of g's values (pass_uses_compute) and
 * a zeroed dead-node mask of g->n_nodes + 1 entries (free both when done). */
kiln_status pass_begin(const ir_graph *g, pass_uses *u, bool **dead, kiln_error *err);

/* Every node input reading `from` reads `to` instead. */
void pass_replace_uses(ir_graph *g, int32_t from, int32_t to);

/* Removes the nodes with dead[i] set, keeping order; fixes producer indices. */
void pass_remove_nodes(ir_graph *g, const bool *dead);

/* Drops the initializers no node reads any more (e.g. the weights a fold or a merge
 * replaced), so engines do not carry them: each leaves g->initializers and loses its data;
 * graph inputs, graph outputs and values a subgraph reads by name stay. Counts them in
 * *dropped (may be NULL). */
kiln_status pass_drop_unread_initializers(ir_graph *g, int32_t *dropped, kiln_error *err);

/* Makes value v an initializer holding a copy of t (data in the model arena). */
kiln_status pass_set_initializer(ir_graph *g, int32_t v, const rt_tensor *t, kiln_error *err);

/* A new value (no type, no producer) named "<base><suffix>", or "<base><suffix><k>" for
 * the first k = 1..999 that is free; IR_NONE when none is or out of memory. */
int32_t pass_add_named_value(ir_graph *g, const char *base, const char *suffix);

/* A new initializer value named after `base` (made unique) holding a copy of t. */
int32_t pass_new_initializer(ir_graph *g, const char *base, const rt_tensor *t, kiln_error *err);

/* The constant tensor behind a value (initializer), or NULL. */
static inline const ir_tensor *pass_const(const ir_graph *g, int32_t v) {
    return (v >= 0 && v < g->n_values && g->values[v].init && (g->values[v].init->data || g->values[v].init->count == 0 ||
                                                                 g->values[v].init->strings))
               ? g->values[v].init
               : NULL;
}

/* Whether the node has any graph attribute. */
bool pass_has_subgraph(const ir_node *n);
/* ORs bits into node n's int attribute `name` (the layout passes' kiln_p16 / kiln_c16);
 * false when out of memory. */
bool pass_or_int_attr(ir_model *model, ir_node *n, const char *name, int64_t bits);

/* Nodes a pass inserts: appended to the node list as they are made, each with the
 * original node it must follow (after[j], -1 = before every node); placed at the end of
 * the pass by pass_place_appended_nodes. Free `after` when done. */
typedef struct pass_inserted {
    int32_t *after;
    int32_t n, cap;
} pass_inserted;

/* Appends a one-input, one-output node `op` (domain "", the model's opset) reading `from`
 * and producing `to`, with one attribute (copied; its name must outlive the model), named
 * "<to>_kiln_<suffix>" and recorded in ins to follow original node `after`. */
kiln_status pass_append_unary(ir_model *m, ir_graph *g, pass_inserted *ins, const char *op, const char *suffix,
                              int32_t from, int32_t to, const ir_attr *attr, int32_t after, kiln_error *err);

/* Passes that insert nodes append them to the node list (indices n0 .. n0+n_new-1) and say
 * which original node each must follow (after[j], -1 = before every node). This moves
 * them there, keeping the list topologically sorted, and recomputes every producer. */
kiln_status pass_place_appended_nodes(ir_graph *g, int32_t n0, int32_t n_new, const int32_t *after, kiln_error *err);

/* The passes' entry points, one per file; build_run_passes_stats (passes.c) runs them. */
kiln_status build_pass_fold_constants(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err);
kiln_status build_pass_remove_identity(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                       kiln_error *err);
kiln_status build_pass_fold_batchnorm(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err);
kiln_status build_pass_fuse_activation(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                       kiln_error *err);
kiln_status build_pass_fuse_residual(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                     kiln_error *err);
kiln_status build_pass_fuse_gelu(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                 kiln_error *err);

#endif
