/* backend.h - the interface between the executor and a device backend (CPU now, CUDA later).
 *
 * A backend is a table of function pointers plus an opaque context it creates (SQLite's
 * VFS, ggml's backend). The executor never knows what a backend runs on: it asks
 * supports() for every node up front (so callers can report or fall back), prepares each
 * node once (prepare_node: find a kernel, pack weights), then calls run_node in
 * topological order. Memory, copies, streams and timers are here so a device backend
 * can keep tensors resident and run asynchronously; the CPU backend implements them
 * trivially (host memory, no streams, a monotonic clock).
 *
 * Versioning: api_version is RT_BACKEND_API_VERSION at the time the backend was written;
 * the executor refuses a table with another version (fields are only appended, so a
 * newer executor may accept older tables in future).
 */
#ifndef KILN_RUNTIME_BACKEND_H
#define KILN_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"
#include "runtime/tensor.h"

#define RT_BACKEND_API_VERSION 1

typedef struct rt_backend_options {
    int threads; /* CPU: worker threads incl. the caller (0 = every online CPU) */
    int device;  /* device backends: which device */
    /* Device backends (appended; zero = defaults): */
    bool fp16;                /* run GEMMs/convolutions in FP16 where the backend can */
    bool no_tf32;             /* FP32 GEMMs/convolutions without TF32 tensor cores */
    uint64_t workspace_bytes; /* scratch limit for tactics (0 = the backend's default) */
} rt_backend_options;

/* Runs one subgraph (If/Loop/Scan body) in the scope of the node being run, so the body
 * sees the enclosing graphs' values. Outputs are owned values the caller must release. */
typedef kiln_status (*rt_subgraph_fn)(void *scope, const ir_graph *body, const rt_value *inputs, int32_t n_in,
                                      rt_value *outputs, int32_t n_out, kiln_error *err);

/* Everything a backend needs to run one node. */
typedef struct rt_node_call {
    const ir_model *model;
    const ir_graph *graph;
    const ir_node *node;
    void *kernel;                   /* what prepare_node returned for this node */
    const rt_value *const *inputs;  /* NULL entries for omitted optional inputs */
    int32_t n_in;
    rt_value *outputs;              /* n_out released values to fill */
    int32_t n_out;
    void **state;                   /* per-node persistent state slot (see cpu_kernel.h) */
    void (**state_free)(void *state);
    rt_subgraph_fn run_subgraph;
    void *scope;                    /* pass to run_subgraph */
    void *stream;                   /* device backends: the stream to enqueue on; CPU: NULL */
    kiln_error *err;
} rt_node_call;

struct rt_device_mem;
struct rt_tactic_cache;
struct rt_threads_report;

typedef enum rt_copy_kind { RT_COPY_HOST_TO_DEVICE, RT_COPY_DEVICE_TO_HOST, RT_COPY_DEVICE_TO_DEVICE } rt_copy_kind;

typedef struct rt_backend {
    int api_version;
    const char *name; /* "cpu", "cuda" */

    kiln_status (*create)(const rt_backend_options *opts, void **ctx, kiln_error *err);
    void (*destroy)(void *ctx);

    /* Whether this backend can run the node at the given precision (KILN_DTYPE_UNDEFINED:
     * the node's own types). Cheap, side-effect free; used for support reports and for
     * falling back to another backend. */
    bool (*supports)(void *ctx, const ir_model *model, const ir_node *node, kiln_dtype precision);
    /* Finds what runs the node (kernel, tactic). Fails with KILN_ERR_UNSUPPORTED and a
     * message naming the node when there is none. */
    kiln_status (*prepare_node)(void *ctx, const ir_model *model, const ir_node *node, void **kernel,
                                kiln_error *err);
    /* Frees what prepare_node returned. */
    void (*release_node)(void *ctx, void *kernel);
    kiln_status (*run_node)(void *ctx, rt_node_call *call);

    /* Device memory. CPU: aligned host memory. */
    kiln_status (*alloc)(void *ctx, uint64_t bytes, void **ptr, kiln_error *err);
    void (*free)(void *ctx, void *ptr);
    /* Copies bytes; on a device backend asynchronous on `stream` (NULL = default). */
    kiln_status (*copy)(void *ctx, void *dst, const void *src, uint64_t bytes, rt_copy_kind kind, void *stream,
                        kiln_error *err);

    /* Streams: CPU work is synchronous and these are no-ops returning a NULL stream. */
    kiln_status (*stream_create)(void *ctx, void **stream, kiln_error *err);
    void (*stream_destroy)(void *ctx, void *stream);
    kiln_status (*stream_sync)(void *ctx, void *stream, kiln_error *err);

    /* Per-step timing for profiles: mark() records a point on the stream, elapsed_ns()
     * the time between two marks (after a sync on device backends). */
    kiln_status (*timer_mark)(void *ctx, void *stream, uint64_t *mark, kiln_error *err);
    uint64_t (*timer_elapsed_ns)(void *ctx, uint64_t start, uint64_t end);

    /* Calls fn for every (domain, op_type) the backend has a kernel for, for "supported
     * ops" listings in error messages. */
    void (*foreach_op)(void (*fn)(const char *domain, const char *op_type, void *user), void *user);

    /* Optional (may be NULL): for an op the backend deliberately has no kernel for, a short
     * reason ("random output can't match the reference"), else NULL. Shown next to the
     * op in "unsupported op" reports. */
    const char *(*unsupported_reason)(const char *domain, const char *op_type);

    /* ---- appended for device backends (NULL/0 on the CPU backend) ---- */
    /* Where tensors this backend produces and consumes live (RT_MEM_HOST, RT_MEM_CUDA). */
    uint8_t location;
    /* Whether the backend reads input `index` of the node on the host (shape-like
     * arguments: Reshape's shape, Slice's starts...). NULL: every input in `location`. */
    bool (*input_on_host)(void *ctx, const ir_node *node, int32_t index);

    /* ---- appended: whole-run capture (CUDA graphs); NULL when the backend has none ----
     * capture_begin starts recording everything later enqueued on the backend's stream
     * (nothing runs); capture_end stops and instantiates the recording into *graph, and
     * fails (leaving the stream usable) when something in between could not be recorded
     * (a sync, a copy to pageable host memory...). graph_launch enqueues a replay. */
    kiln_status (*capture_begin)(void *ctx, kiln_error *err);
    kiln_status (*capture_end)(void *ctx, void **graph, kiln_error *err);
    kiln_status (*graph_launch)(void *ctx, void *graph, kiln_error *err);
    void (*graph_destroy)(void *ctx, void *graph);

    /* ---- appended: page-locked host memory and a memory report (NULL when none) ----
     * host_alloc returns host memory the device copies to and from directly (CUDA:
     * cudaHostAlloc), so copies need no staging and can run asynchronously. host_free
     * must not use ctx (it may be called with NULL: a tensor's free_fn can be host_free
     * with free_ctx NULL and outlive the context that allocated it). */
    kiln_status (*host_alloc)(void *ctx, uint64_t bytes, void **ptr, kiln_error *err);
    void (*host_free)(void *ctx, void *ptr);
    /* Device memory as the backend sees it (bytes; 0 = unknown). */
    void (*mem_report)(void *ctx, struct rt_device_mem *out);

    /* ---- appended: where library tactic timings are looked up and recorded (NULL when
     * the backend has no timed tactics). The cache must outlive the context. */
    void (*set_tactic_cache)(void *ctx, const struct rt_tactic_cache *cache);

    /* ---- appended: the host thread pool's counters since the context was created (NULL
     * when the backend has none): see rt_threads_report */
    void (*threads_report)(void *ctx, struct rt_threads_report *out);
} rt_backend;

/* A context's thread pool: threads (the calling one included), parallel loops shared with
 * the workers and run inline, and nanoseconds the calling thread ran chunks, waited for
 * the workers' last ones, and the workers ran chunks (summed). */
typedef struct rt_threads_report {
    int threads;
    uint64_t loops, inline_loops;
    uint64_t caller_run_ns, caller_wait_ns, worker_run_ns;
    uint64_t caller_sleeps, worker_sleeps; /* times the caller / a worker blocked (stopped spinning) */
} rt_threads_report;

/* Tactic timings of a device backend (cuBLASLt / cuDNN algorithm choices), by node, a
 * signature string (device, library versions, shapes, precision) and a tactic name.
 * get() says whether the timing is known (and its ms); put() records one just measured.
 * The session implements it over the engine's embedded choices (node attribute
 * "kiln_gpu_tactics") and, when building, the --timingCacheFile cache. */
typedef struct rt_tactic_cache {
    bool (*get)(void *user, const ir_node *node, const char *sig, const char *tactic, double *ms);
    void (*put)(void *user, const ir_node *node, const char *sig, const char *tactic, double ms);
    void *user;
} rt_tactic_cache;

typedef struct rt_device_mem {
    uint64_t workspace;      /* scratch for library tactics, allocated at creation */
    uint64_t pool_used_peak; /* stream-ordered pool: most bytes in use at once (process-wide) */
    uint64_t pool_reserved;  /* stream-ordered pool: bytes reserved from the driver now */
    uint64_t device_total, device_free;
} rt_device_mem;

/* The CPU backend (src/backends/cpu/cpu_backend.c). */
const rt_backend *rt_backend_cpu(void);
/* The CUDA backend (src/backends/cuda/cuda_backend.c); NULL when kiln was built without CUDA. */
const rt_backend *rt_backend_cuda(void);
/* A backend by name ("cpu", "cuda"); NULL when kiln was built without it. */
const rt_backend *rt_backend_find(const char *name);

#endif
