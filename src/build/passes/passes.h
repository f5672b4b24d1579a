/* passes.h - graph rewrites run before execution (and, later, by the engine builder).
 *
 * Each pass is one file in this folder with one entry point
 *     kiln_status build_pass_<name>(ir_model *model, const build_pass_options *opts,
 *                                   build_pass_stats *stats, kiln_error *err);
 * that rewrites the main graph in place and keeps it topologically sorted. Passes only
 * make changes that keep the model's outputs the same (up to floating-point rounding
 * for folding). build_run_passes runs them in a fixed order.
 */
#ifndef KILN_BUILD_PASSES_PASSES_H
#define KILN_BUILD_PASSES_PASSES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"

typedef struct build_pass_options {
    uint64_t fold_max_bytes; /* constant folding: largest tensor a folded node may produce */
    bool fold;
    bool remove_identity;
    bool fold_batchnorm;
    bool fuse_activation;
    bool fuse_residual; /* Conv/MatMul -> Add folded into the GEMM epilogue (fuse_residual.c) */
    bool fuse_gelu;     /* Erf/Tanh-form GELU subgraphs become one Gelu node (fuse_gelu.c) */
} build_pass_options;

typedef struct build_pass_stats {
    int32_t folded;            /* nodes replaced by constants */
    int32_t fold_refused;      /* nodes left alone because the output would be too large */
    int32_t identity_removed;
    int32_t batchnorm_folded;
    int32_t activation_fused;
    int32_t residual_fused; /* Adds folded into a producer as kiln_bias / kiln_residual */
    int32_t gelu_fused;     /* GELU subgraphs replaced by one Gelu node */
} build_pass_stats;

build_pass_options build_pass_options_default(void);

/* Runs every enabled pass on the model's main graph. opts NULL = defaults. stats may be NULL. */
kiln_status build_run_passes(ir_model *model, const build_pass_options *opts, kiln_error *err);
kiln_status build_run_passes_stats(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                   kiln_error *err);

#endif
