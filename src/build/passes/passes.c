/* passes.c - runs the graph passes in order (see passes.h). */
#include "build/passes/passes.h"

#include <string.h>

/* Each pass lives in its own file (see passes.h). */
kiln_status build_pass_fold_constants(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err);
kiln_status build_pass_remove_identity(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                       kiln_error *err);
kiln_status build_pass_fold_batchnorm(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err);
kiln_status build_pass_fuse_activation(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                       kiln_error *err);

build_pass_options build_pass_options_default(void) {
    build_pass_options o;
    memset(&o, 0, sizeof o);
    o.fold_max_bytes = 16u << 20;
    o.fold = o.remove_identity = o.fold_batchnorm = o.fuse_activation = true;
    return o;
}

kiln_status build_run_passes_stats(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                   kiln_error *err) {
    build_pass_options dflt = build_pass_options_default();
    build_pass_stats local;
    if (!opts) opts = &dflt;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!model || !model->graph) return KILN_OK;
    kiln_status st = KILN_OK;
    /* Order: folding first (Constant nodes become initializers, which the BN fold and
     * the activation fusion need), then Identity/Dropout (exposes Conv -> BN pairs). */
    if (st == KILN_OK && opts->fold) st = build_pass_fold_constants(model, opts, stats, err);
    if (st == KILN_OK && opts->remove_identity) st = build_pass_remove_identity(model, opts, stats, err);
    if (st == KILN_OK && opts->fold_batchnorm) st = build_pass_fold_batchnorm(model, opts, stats, err);
    if (st == KILN_OK && opts->fuse_activation) st = build_pass_fuse_activation(model, opts, stats, err);
    return st;
}

kiln_status build_run_passes(ir_model *model, const build_pass_options *opts, kiln_error *err) {
    return build_run_passes_stats(model, opts, NULL, err);
}
