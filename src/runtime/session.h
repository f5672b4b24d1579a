/* session.h - the internal API for running a model: create, run by input name, free.
 *
 * A session owns a backend context (thread pool for the CPU) and an executor for one
 * ir_model. run() checks the given inputs against the model's declarations before any
 * kernel runs (names, kinds, dtypes, ranks, static dims, and that a symbolic dim such as
 * 'batch' gets one value across all inputs), so wrong inputs get a message in the
 * model's own names instead of a kernel failure deep inside the graph.
 *
 * `kiln verify`, `kiln exec` and the engine runtime build on this. The model must be
 * validated (sorted) and must outlive the session; graph passes (passes/) may rewrite
 * it when the session is created with run_passes.
 */
#ifndef KILN_RUNTIME_SESSION_H
#define KILN_RUNTIME_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"
#include "runtime/executor.h"
#include "runtime/tensor.h"

typedef struct rt_session rt_session;

typedef struct rt_session_options {
    const char *backend;      /* "cpu" (default) */
    int threads;              /* 0 = every online CPU */
    bool check_nan;           /* fail at the first node producing NaN/Inf */
    bool profile;             /* per-node timing (rt_session_executor + rt_executor_foreach_profile) */
    bool run_passes;          /* fold constants, remove Identity/Dropout, fold BN, fuse activations (build/passes) */
    bool record_sizes;        /* keep value sizes for the memory plan report */
    uint64_t max_tensor_bytes; /* cap on one tensor allocation (0 = none); enforced by rt_tensor_alloc */
    uint64_t max_live_bytes;  /* cap on intermediates alive at once (0 = none) */
    /* Device backends (appended): */
    bool fp16;                /* FP16 GEMMs/convolutions where the backend can */
    bool no_tf32;             /* no TF32 tensor cores for FP32 GEMMs/convolutions */
    uint64_t workspace_bytes; /* tactic scratch limit (0 = backend default) */
    bool quiet_fallback;      /* do not print the per-node CPU fallback warning to stderr */
    bool no_device_graph;     /* do not record/replay whole runs as CUDA graphs (on by default) */
    /* Appended: device tactic timings beyond the ones a GPU engine carries (node attribute
     * RT_GPU_TACTICS_ATTR): looked up after those, and every new timing is put here
     * (the builder passes its --timingCacheFile cache). NULL: the engine's only. */
    const rt_tactic_cache *tactic_cache;
    /* Appended: device backends share one device copy of the weights between the sessions
     * of one model on the same backend and device (engine contexts, --infStreams;
     * runtime/weight_share.h). true: this session uploads its own copy. */
    bool no_weight_share;
    /* Appended: with fp16, lay half convolutions out channels-last (layout_nhwc.c) as a
     * session that runs the graph passes does, although this one does not (the engine
     * builder's GPU session: its graph passes already ran). KILN_NHWC=0/1 still decides. */
    bool layout_nhwc;
} rt_session_options;

/* Node attribute of a GPU engine's GEMM/Conv nodes: the tactic timings measured when it
 * was built, one "signature\ttactic\tms" line each (cuda_tactics.c makes the names), so
 * a loaded engine runs the built choices without timing them again. */
#define RT_GPU_TACTICS_ATTR "kiln_gpu_tactics"
/* The timing of (sig, tactic) in the node's RT_GPU_TACTICS_ATTR; false when absent. */
bool rt_gpu_tactic_lookup(const ir_node *node, const char *sig, const char *tactic, double *ms);

rt_session_options rt_session_options_default(void);

kiln_status rt_session_create(ir_model *model, const rt_session_options *opts, rt_session **out, kiln_error *err);
void rt_session_free(rt_session *s);

/* Number of graph outputs; outputs[] given to run must have this many entries. */
int32_t rt_session_n_outputs(const rt_session *s);
const char *rt_session_output_name(const rt_session *s, int32_t i);

/* Runs with inputs given by name (n entries). Every model input without an initializer
 * must be given; an input with an initializer may be given to override it. outputs
 * receives owned values; release each with rt_value_release. */
kiln_status rt_session_run(rt_session *s, const char *const *names, const rt_value *const *inputs, int32_t n,
                           rt_value *outputs, kiln_error *err);

rt_executor *rt_session_executor(rt_session *s);
/* The backend running the session and its context (device info, timers). */
const rt_backend *rt_session_backend(const rt_session *s);
void *rt_session_backend_ctx(const rt_session *s);
const ir_model *rt_session_model(const rt_session *s);

#endif
