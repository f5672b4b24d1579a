/* builder.h - turns a validated ONNX model (IR) into an engine_plan ready to save or run.
 *
 * Steps, in order, each stopping the build with a message that says what to change:
 *   1. profiles: every dynamic input gets min/opt/max shapes from the profile set (trtexec
 *      flags parsed by build/profile.h); inputs with dynamic dims and no shapes default to
 *      1 for each unknown dim, with a warning showing the shape used and the flags to set;
 *      the set is checked (build_profiles_check) and errors stop the build;
 *   2. graph passes (build/passes: constant folding, Identity removal, Conv+BN folding,
 *      activation fusion marks);
 *   3. shape inference at every profile point (min, opt, max of every profile): an error
 *      at any point is printed in `kiln check`'s format and names the point;
 *   4. tactics per node at profile 0's opt shape: candidates whose scratch exceeds the
 *      workspace limit are dropped; several remaining ones are timed (timing cache) and
 *      the fastest is kept; none remaining fails naming the node, the scratch it needs,
 *      the limit and the flag to raise it;
 *   5. memory plan sizes per profile (activation arena at opt and max shapes);
 *   6. the plan: metadata, profiles, I/O, layers, sizes, and the optimized graph.
 */
#ifndef KILN_BUILD_BUILDER_H
#define KILN_BUILD_BUILDER_H

#include <stdbool.h>
#include <stdint.h>

#include "build/profile.h"
#include "build/tactics.h"
#include "core/status.h"
#include "diag/diag.h"
#include "engine/engine.h"

typedef struct build_options {
    build_profile_set *profiles; /* may be NULL or empty; the builder adds defaults to it */
    uint64_t workspace_limit;    /* bytes of scratch a layer may use; 0 = unlimited */
    const char *workspace_flag;  /* how the user sets it, for messages ("--memPoolSize=workspace:N") */
    int threads;                 /* threads used for timing (0 = all CPUs) */
    uint32_t precision_flags;    /* ENGINE_PREC_FLAG_* the user allowed */
    const char *timing_cache;    /* path, or NULL */
    bool time_tactics;           /* time when several tactics apply (default true) */
    uint64_t cpu_features;       /* of this machine */
    const char *source_model;    /* path, recorded in the engine */
    uint64_t source_size;
    const build_tactic_registry *registry; /* extra tactics (tests); may be NULL */
    bool progress;               /* "[3/57] timing tactics for ..." on stderr */
    bool run_passes;             /* default true */
    /* warnings for the user ("input 'x' has dynamic dims ..."), one per line */
    void (*warn)(void *user, const char *msg);
    void *warn_user;
    /* Appended: the backend the engine is for (NULL or "cpu": the CPU backend; "cuda": a
     * GPU engine, which needs gpu_arch etc., the META strings of the GPU it is built on,
     * from cuda_info_to_meta(cuda_info_query())). GPU engines skip CPU tactic timing:
     * the CUDA backend chooses GEMM/convolution tactics on the GPU (at the first run of
     * each shape, or from the timing cache). */
    const char *backend;
    const char *gpu_arch, *cuda_version, *cublas_version, *cudnn_version;
    /* Appended: rounds of tactic timing (build_tactics_time); 0 = BUILD_DEFAULT_TIMING_ROUNDS.
     * trtexec's --avgTiming sets it. */
    int timing_rounds;
} build_options;

#define BUILD_DEFAULT_TIMING_ROUNDS 5

build_options build_options_default(void);

typedef struct build_stats {
    double seconds;
    int32_t nodes, timed, cache_hits;
    uint64_t max_scratch;
} build_stats;

/* Makes plan->layers describe g's nodes again after passes that ran once the layer table
 * existed (a cuda build's device session adds the FP16 Casts and channels-last nodes):
 * one layer per node, in order, FP16 where the node writes float16, the scratch, time and
 * tactic of the layer of the same name kept. Used by build_engine; exposed for tests. */
kiln_status build_plan_relayer(engine_plan *plan, const ir_graph *g, kiln_error *err);

/* Builds a plan from `model`, which the plan takes over (freed with the plan, also on
 * failure). Diagnostics from profile checks and shape inference go to `diags` (printed
 * by the caller in `kiln check`'s format); err holds the summary. */
kiln_status build_engine(ir_model *model, const build_options *opts, diag_list *diags, engine_plan **out,
                         build_stats *stats, kiln_error *err);

#endif
