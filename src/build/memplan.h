/* memplan.h - one activation arena for a graph's intermediate tensors, by lifetime.
 *
 * Given each tensor's byte size and its lifetime [first, last] in node steps (produced
 * at step `first`, last read at step `last`), assigns offsets so that tensors alive at
 * the same step never overlap. Placement is greedy by size (largest first), each tensor
 * going into the best-fitting gap left by already placed tensors that overlap it in time
 * (the approach of TFLite's and ggml's planners). The lower bound is the largest total
 * of simultaneously live tensors: no plan can use less, so arena/lower_bound says how
 * close the greedy plan is.
 *
 * The executor records real sizes after a run (sizes are only known for concrete
 * input shapes), plans them, and places later runs' node outputs in the arena
 * (executor.c, "activation arena"); `kiln verify --memory` and `kiln run` report it.
 */
#ifndef KILN_BUILD_MEMPLAN_H
#define KILN_BUILD_MEMPLAN_H

#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"

#define BUILD_MEMPLAN_ALIGN 64
#define BUILD_MEMPLAN_NONE UINT64_MAX

typedef struct build_memplan {
    uint64_t arena_bytes;  /* size of the planned arena */
    uint64_t lower_bound;  /* largest sum of simultaneously live tensors (aligned sizes) */
    uint64_t total_bytes;  /* sum of all tensors (what no reuse would need) */
    int32_t n_tensors;     /* tensors placed */
    uint64_t *offsets;     /* per value id (graph plans) or per tensor; BUILD_MEMPLAN_NONE = not placed */
    int32_t n_offsets;
} build_memplan;

/* Plans n tensors: sizes[i] bytes, alive over steps [first[i], last[i]]. A size of 0
 * is not placed. offsets must have n entries. */
kiln_status build_memplan_compute(int32_t n, const uint64_t *sizes, const int32_t *first, const int32_t *last,
                                  build_memplan *out, kiln_error *err);

/* Plans the intermediates of a graph in its node order: sizes[v] bytes for value id v
 * (0 = not an activation: inputs, initializers, values not produced). Graph outputs
 * live to the end. A node with subgraphs counts as a reader of every enclosing value
 * its subgraphs name. */
kiln_status build_memplan_graph(const ir_graph *g, const uint64_t *sizes, build_memplan *out, kiln_error *err);

/* Same, where some values are views of others (zero-copy reshapes): view_root[v] >= 0
 * names the value whose storage v shows, so that value lives until v's last reader
 * (a view itself has size 0). view_root NULL = no views. */
kiln_status build_memplan_graph_views(const ir_graph *g, const uint64_t *sizes, const int32_t *view_root,
                                      build_memplan *out, kiln_error *err);

void build_memplan_free(build_memplan *p);

#endif
