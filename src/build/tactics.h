/* tactics.h - the builder's choice of implementation ("tactic") for each node.
 *
 * A tactic is one way to run a node on a backend: a name that is written into the engine
 * (LAYERS section and the node's internal attribute `kiln_tactic`), the scratch memory it
 * needs for given shapes, whether it applies to the node's geometry, the CPU features it
 * needs, and a function that runs it (used for timing, and by the kernel at run time).
 *
 * For each node the builder asks for the candidates, drops those whose scratch exceeds
 * the workspace limit (--memPoolSize=workspace:N), times the rest on the opt shape when
 * more than one remains (consulting the timing cache), and keeps the fastest. If none
 * fits the limit the build fails naming the node, the scratch needed, the limit and the
 * flag to raise it.
 *
 * How a kernel registers variants: add a row to the table in tactics.c with the op, a
 * name, applies() (geometry test), scratch() and the kernel function; when an op has
 * several rows that apply to one node, the kernel must honour the chosen name, read from
 * the node's `kiln_tactic` string attribute (as it reads `kiln_activation` for fusion).
 * Ops without rows get one generic tactic "<op>" (the registered kernel, no scratch).
 * Today the CPU Conv kernel picks among pointwise GEMM, depthwise direct and im2col+GEMM
 * by geometry, so the rows mirror that choice: exactly one applies per node, and the
 * scratch check is what matters; timing engages as soon as two rows apply to a node.
 */
#ifndef KILN_BUILD_TACTICS_H
#define KILN_BUILD_TACTICS_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernel.h"
#include "core/status.h"
#include "ir/graph.h"

#define BUILD_MAX_TACTICS 16
#define BUILD_TACTIC_ATTR "kiln_tactic"

/* A node with concrete shapes (at the opt point of the profile being tuned). */
typedef struct build_tactic_query {
    const ir_model *model;
    const ir_graph *graph;
    const ir_node *node;
    int32_t n_in, n_out;
    const ir_type *const *in;  /* n_in entries (NULL for an omitted input); dims are CONST */
    const ir_type *const *out; /* n_out entries */
} build_tactic_query;

typedef struct build_tactic {
    const char *domain;  /* "" = ai.onnx */
    const char *op_type; /* NULL in the generic fallback */
    const char *name;
    uint32_t features;   /* cpu_feature_bits required */
    bool (*applies)(const build_tactic_query *q);
    uint64_t (*scratch)(const build_tactic_query *q);
    cpu_kernel_fn run;   /* NULL: the op's registered kernel (cpu_kernel_find) */
    /* TF32-class arithmetic (FP32 data, products of fewer mantissa bits): offered only
     * to engines that allow TF32, i.e. not built with --noTF32; such layers are recorded
     * with precision tf32 */
    bool tf32_class;
} build_tactic;

/* Extra tactics (tests, future backends) searched before the built-in table. */
typedef struct build_tactic_registry {
    const build_tactic *extra;
    int32_t n_extra;
} build_tactic_registry;

/* Candidates for the node (at most cap), usable on a CPU with `features`. Returns the
 * count; 0 means the backend has no kernel for the op at all. The generic fallback is
 * written into *generic (its name points into `generic_name`, 64 bytes). */
int32_t build_tactics_for_node(const build_tactic_registry *reg, const build_tactic_query *q, uint64_t features,
                               const build_tactic **out, int32_t cap, build_tactic *generic, char *generic_name);

/* Scratch bytes of a tactic (0 when it has no scratch function). */
uint64_t build_tactic_scratch(const build_tactic *t, const build_tactic_query *q);

/* The timing-cache key of a node: op, domain, opset, attributes, input types and the CPU
 * features, e.g. "Conv|17|group=1;kernel_shape=[3,3];...|float32[1,64,56,56],float32[64,64,3,3]|avx2 fma".
 * Returned in a heap string. */
char *build_tactic_key(const build_tactic_query *q, uint64_t features);
/* The key the timing cache uses: build_tactic_key plus "|threads=N", the thread count the
 * tactics are timed with (threads <= 0: all online CPUs, resolved as the pool does), since
 * a tactic's time and the best choice change with it (blocking, task splits). */
char *build_tactic_key_threads(const build_tactic_query *q, uint64_t features, int threads);
/* threads as the CPU pool resolves it: > 0 unchanged, else the online CPU count */
int build_tactic_threads_resolve(int threads);

/* Times a node's candidate tactics against each other (tactic_timing.c): `rounds` rounds
 * after one warm-up round, each round running every tactic once in alternating order
 * (forward, then backward), each run after evicting the caches (as inside a whole
 * network), on inputs of the query's shapes (initializer data where the node reads
 * initializers, deterministic pseudo-random data elsewhere). ms[k] is tactic k's fastest
 * run in ms, or -1 when its kernel failed. Fails (KILN_ERR_UNSUPPORTED) for nodes with
 * subgraphs or non-tensor inputs: those are not timed. */
kiln_status build_tactics_time(const build_tactic *const *ts, int32_t n_t, const build_tactic_query *q,
                               cpu_threadpool *pool, int rounds, double *ms, kiln_error *err);
/* As build_tactics_time, on a copy of the node marked to read and write the C16 layout
 * (kiln_c16 = input | output, | residual where it fuses one; layout_c16.c's bits): how
 * the C16-capable conv tactics run inside a C16 region, where timed over NCHW they pay
 * conversions (the AMX conv's gathers and scatters more than the C16 kernel's copies).
 * The query's channels must be multiples of 16. */
kiln_status build_tactics_time_c16(const build_tactic *const *ts, int32_t n_t, const build_tactic_query *q,
                                   cpu_threadpool *pool, int rounds, double *ms, kiln_error *err);
/* One tactic alone (`reps` rounds); fails when its kernel fails. */
kiln_status build_tactic_time(const build_tactic *t, const build_tactic_query *q, cpu_threadpool *pool, int reps,
                              double *ms, kiln_error *err);

/* "1.5 MiB", "320 KiB", "96 B" */
const char *build_bytes_str(uint64_t bytes, char *buf, size_t size);

#endif
