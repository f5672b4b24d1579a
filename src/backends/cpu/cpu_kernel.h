/* cpu_kernel.h - how CPU kernels are written and found.
 *
 * A kernel runs one ONNX node on concrete runtime values. It computes its outputs'
 * shapes from its inputs (so data-dependent shapes like NonZero work), allocates them
 * with rt_tensor_alloc, and fills them. Kernels never abort: bad shapes or attributes
 * return a status with a message naming the node (cpu_kernel_fail).
 *
 * Kernels are listed in kernels.def (one K(...) line per op) and found by
 * cpu_kernel_find(domain, op_type, opset). Files: one per op family (cpu_elementwise.c,
 * cpu_conv.c, ...); SIMD variants live in *_avx2.c / *_avx512.c files compiled with
 * those flags and are chosen at run time from cpu_features().
 */
#ifndef KILN_BACKENDS_CPU_CPU_KERNEL_H
#define KILN_BACKENDS_CPU_CPU_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"
#include "runtime/tensor.h"

typedef struct cpu_threadpool cpu_threadpool;
typedef struct cpu_kernel_ctx cpu_kernel_ctx;
typedef struct cpu_scratch cpu_scratch; /* cpu_scratch.h */

/* Runs a subgraph (If/Loop/Scan bodies) with the given inputs; outer-scope values are
 * resolved by the executor. Outputs are written to `outputs` (n_out values). */
typedef kiln_status (*cpu_run_subgraph_fn)(cpu_kernel_ctx *ctx, const ir_graph *body,
                                           const rt_value *inputs, int32_t n_in,
                                           rt_value *outputs, int32_t n_out);

struct cpu_kernel_ctx {
    const ir_model *model;
    const ir_graph *graph;
    const ir_node *node;
    cpu_threadpool *pool; /* never NULL; may have 1 thread */
    kiln_error *err;
    /* Per-node persistent state (packed weights, chosen algorithm, ...). A kernel may set
     * *state on first run and a destructor in *state_free; the executor frees it. */
    void **state;
    void (**state_free)(void *state);
    cpu_run_subgraph_fn run_subgraph;
    void *executor; /* opaque, for run_subgraph */
    /* Scratch shared by all nodes of the execution context (cpu_scratch.h); NULL outside
     * one (tactic timing, tests): kernels then keep scratch in their node state. */
    cpu_scratch *scratch;
};

/* inputs[i] is NULL for an omitted optional input. outputs[i] are released values on
 * entry (kind UNKNOWN); outputs the node doesn't declare are not passed (n_out counts
 * the node's outputs; an output with IR_NONE id is still passed and may be ignored). */
typedef kiln_status (*cpu_kernel_fn)(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                     rt_value *outputs, int32_t n_out);

/* Declarations of every kernel function in kernels.def. */
#define K(domain, op_type, since_opset, fn) \
    kiln_status fn(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, int32_t n_out);
#include "backends/cpu/kernels.def"
#undef K

/* The kernel for (domain, op_type) valid at `opset` (the entry with the largest
 * since_opset <= opset), or NULL. domain "" is ai.onnx. */
cpu_kernel_fn cpu_kernel_find(const char *domain, const char *op_type, int64_t opset);
/* Whether any kernel exists for the op at any opset. */
bool cpu_kernel_exists(const char *domain, const char *op_type);
/* Calls fn for every (domain, op_type) that has a kernel (each once). */
void cpu_kernel_foreach(void (*fn)(const char *domain, const char *op_type, void *user), void *user);

/* Sets ctx->err to "node 'NAME' (Op): <message>" and returns code. */
kiln_status cpu_kernel_fail(cpu_kernel_ctx *ctx, kiln_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Input i as a tensor, or NULL when absent / not a tensor. */
static inline const rt_tensor *cpu_in(const rt_value *const *inputs, int32_t n_in, int32_t i) {
    return (i < n_in && inputs[i] && inputs[i]->kind == IR_TYPE_TENSOR) ? &inputs[i]->t : NULL;
}

/* ---- thread pool (cpu_threadpool.c) ----------------------------------------------- */

/* Runs fn(user, begin, end) over [0, n) split into chunks of at least `grain` items
 * across the pool's threads (the caller participates); returns when all are done.
 * pool may be NULL: then it runs inline on the calling thread (unit tests, tiny work). */
typedef void (*cpu_range_fn)(void *user, int64_t begin, int64_t end);
void cpu_parallel_for(cpu_threadpool *pool, int64_t n, int64_t grain, cpu_range_fn fn, void *user);
/* As cpu_parallel_for, but every item is its own chunk, handed out one at a time: for a
 * few heavy items (GEMM tasks, attention heads), where cpu_parallel_for's ~4 chunks per
 * thread would leave one thread running a whole chunk while the others wait. */
void cpu_parallel_for_each(cpu_threadpool *pool, int64_t n, cpu_range_fn fn, void *user);
int cpu_threadpool_size(const cpu_threadpool *pool);
/* Microseconds idle workers spin before blocking (KILN_SPIN_US; see cpu_threadpool.c). */
int64_t cpu_threadpool_spin_us(const cpu_threadpool *pool);
kiln_status cpu_threadpool_create(int n_threads, cpu_threadpool **out, kiln_error *err);
void cpu_threadpool_free(cpu_threadpool *pool);
/* What the pool's parallel loops cost since it was created: how many were shared with
 * the workers and how many ran on the calling thread alone (too little work, nested), and
 * how long the calling thread ran chunks, waited for the workers' last chunks, and the
 * workers ran chunks (summed over workers). Nanoseconds; all zero for a NULL pool. */
typedef struct cpu_pool_stats {
    int threads;
    uint64_t loops, inline_loops;
    uint64_t caller_run_ns, caller_wait_ns, worker_run_ns;
    uint64_t caller_sleeps, worker_sleeps;
} cpu_pool_stats;
void cpu_threadpool_stats(const cpu_threadpool *pool, cpu_pool_stats *out);

/* ---- CPU features (cpu_features.c) ------------------------------------------------ */
enum cpu_feature_bits {
    CPU_FEATURE_AVX2 = 1u << 0,
    CPU_FEATURE_FMA = 1u << 1,
    CPU_FEATURE_AVX512F = 1u << 2,
    CPU_FEATURE_AVX512BW = 1u << 3,
    CPU_FEATURE_AVX512VL = 1u << 4,
    CPU_FEATURE_AVX512DQ = 1u << 5,
    CPU_FEATURE_F16C = 1u << 6,
    CPU_FEATURE_AVX512_VNNI = 1u << 7,
    CPU_FEATURE_AVX512_BF16 = 1u << 8,
    CPU_FEATURE_AMX = 1u << 9
};
/* Detected once per call (cpuid is cheap); the environment variable KILN_CPU_ISA=
 * scalar|avx2|avx512 caps what is used (for testing every code path). */
uint32_t cpu_features(void);
/* "avx512f avx512bw ... fma avx2" into buf. */
const char *cpu_features_str(uint32_t features, char *buf, size_t size);
/* The per-core L2 cache in bytes (sysconf, else sysfs), 0 when the OS does not say;
 * decided once. */
int64_t cpu_l2_bytes(void);
/* An A/B switch in the environment: false when `name` is set to a value starting with '0',
 * else true; read once into *cached (start it at -1: getenv stays off the hot path). */
bool cpu_env_switch(const char *name, _Atomic int *cached);

#endif
