/* executor.h - runs an ir_model's graphs node by node on a backend.
 *
 * Created once per (model, backend): it prepares every node of every graph (kernel
 * lookup, per-node state slots), wraps initializers as borrowed tensors, and computes
 * value lifetimes so each intermediate is freed right after its last consumer (a
 * subgraph's use of an outer-scope value counts as a use by the node that owns the
 * subgraph). Subgraphs (If/Loop/Scan bodies) run through the same machinery with the
 * enclosing frames' values visible by name.
 *
 * The executor trusts its inputs' shapes and names: session.c checks them against the
 * model's declarations first. It needs validated, topologically sorted graphs.
 */
#ifndef KILN_RUNTIME_EXECUTOR_H
#define KILN_RUNTIME_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"
#include "runtime/backend.h"
#include "runtime/tensor.h"

typedef struct rt_executor rt_executor;

typedef struct rt_exec_options {
    bool check_nan;           /* after each node, fail naming the first node that produced NaN/Inf */
    bool profile;             /* time every node */
    uint64_t max_live_bytes;  /* cap on intermediate tensor bytes alive at once (0 = none) */
    bool record_sizes;        /* keep each main-graph value's byte size from the last run (memory plan) */
    /* Device backends (appended): nodes the main backend does not support run on this
     * host backend instead (per node), with copies between host and device memory at
     * the boundaries. NULL: every node must run on the main backend. */
    const rt_backend *fallback;
    void *fallback_ctx;
    /* Device backends with capture hooks (appended): once a run with unchanged input
     * shapes has warmed up the tactics, record the whole run as one device graph and
     * replay it (only when every node runs on the device, or on the host but depending
     * only on input shapes and constants; any failure to record turns replay off for the
     * executor and runs normally). */
    bool device_graph;
    /* Device backends (appended): weights (initializers device nodes read) come from this
     * share instead of one upload per executor (runtime/weight_share.h); the caller holds
     * a reference for the executor's lifetime. NULL: this executor uploads its own. */
    struct rt_weight_share *weights;
} rt_exec_options;

/* Prepares every node. Fails with KILN_ERR_UNSUPPORTED when some node has no kernel:
 * the message names every missing op once (with its first node and count). */
kiln_status rt_executor_create(ir_model *model, const rt_backend *backend, void *backend_ctx,
                               const rt_exec_options *opts, rt_executor **out, kiln_error *err);
void rt_executor_free(rt_executor *ex);

/* inputs[i] is the value for main-graph input i (NULL = not given: allowed only for
 * inputs that have an initializer). outputs receives the n graph outputs as owned
 * values (release them with rt_value_release). */
kiln_status rt_executor_run(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err);

/* Profile of the main graph (and subgraphs, by graph index). */
typedef struct rt_node_profile {
    const ir_graph *graph;
    const ir_node *node;
    uint64_t calls;
    uint64_t total_ns;
} rt_node_profile;
/* Calls fn for every node that ran at least once since creation. */
void rt_executor_foreach_profile(const rt_executor *ex, void (*fn)(const rt_node_profile *p, void *user),
                                 void *user);

/* Bytes of each main-graph value produced by the last run (0 = not produced / not
 * recorded); indexed by value id. NULL unless record_sizes was set. */
const uint64_t *rt_executor_value_sizes(const rt_executor *ex);
/* Peak bytes of intermediates alive at once during the last run (main graph and
 * subgraphs together). */
uint64_t rt_executor_peak_bytes(const rt_executor *ex);

/* Device-graph replay (rt_exec_options.device_graph): turns it on/off at run time
 * (off destroys a recorded graph); state() says whether runs replay a graph now
 * (1), may record one (0) or will not (-1, with why() saying why). */
void rt_executor_set_device_graph(rt_executor *ex, bool on);
int rt_executor_device_graph_state(const rt_executor *ex);
const char *rt_executor_device_graph_why(const rt_executor *ex);
/* Main-graph nodes that run on the host but depend only on input shapes and constants
 * (Shape -> Gather -> Unsqueeze ... chains): a recorded device graph takes their values as
 * constants of the input-shape signature (computed by the node-by-node run that learned
 * the shapes, checked again while recording, uploaded once). The count is 0 when device
 * graphs are off; node_per_signature says whether main-graph node i is one of them. */
int32_t rt_executor_device_graph_host_nodes(const rt_executor *ex);
bool rt_executor_node_per_signature(const rt_executor *ex, int32_t i);
/* Device-graph replays without data transfers (trtexec --noDataTransfers): off, a replay
 * copies no inputs (the graph reads what the last copying run left in its input buffers)
 * and returns no outputs (every output value is left empty); it still waits for the
 * graph. Runs that do not replay transfer as usual. On by default. */
void rt_executor_set_transfers(rt_executor *ex, bool on);
/* Device executors: bytes of initializers uploaded to the device at creation (weights
 * shared with other executors count for the one that uploaded them: summed over the
 * contexts of an engine, each device copy counts once). */
uint64_t rt_executor_device_weight_bytes(const rt_executor *ex);
/* Device executors: times of the last run's phases in ns, measured with backend timer
 * marks when replaying a graph (h2d: inputs to the device, compute: the graph, d2h:
 * outputs back); all 0 when the last run did not replay. */
void rt_executor_last_phase_ns(const rt_executor *ex, uint64_t *h2d, uint64_t *compute, uint64_t *d2h);

/* When a device backend runs the graph: NULL if every node runs on it, else a message
 * naming the nodes that run on the fallback backend ("3 nodes run on the cpu backend
 * ...: Shape x2 (first 'n1'), ..."). Owned by the executor. */
const char *rt_executor_fallback_report(const rt_executor *ex);
/* Number of main-graph and subgraph nodes assigned to the fallback backend. */
int32_t rt_executor_n_fallback(const rt_executor *ex);
/* Whether node i of graph g runs on the fallback backend (false for unknown graphs). */
bool rt_executor_node_on_fallback(const rt_executor *ex, const ir_graph *g, int32_t i);

/* Bytes held by a value's tensors (sequences summed). */
uint64_t rt_value_bytes(const rt_value *v);

/* Statistics of the executor's intermediate-buffer pool (bufpool.h); zeros when it has
 * none (device executors, KILN_NO_BUFPOOL set). */
#include "runtime/bufpool.h"
rt_bufpool_stats rt_executor_bufpool_stats(const rt_executor *ex);


/* The activation arena planned from the last run's sizes (0 before one exists), and how
 * many node outputs were placed in it / fell back to the buffer pool so far. */
uint64_t rt_executor_arena_bytes(const rt_executor *ex);
void rt_executor_arena_counts(const rt_executor *ex, uint64_t *hits, uint64_t *misses);

#endif
