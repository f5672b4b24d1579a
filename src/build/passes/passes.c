/* passes.c - runs the graph passes in order (see passes.h). */
#include "build/passes/passes.h"

#include <string.h>

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
    (void)model, (void)err;
    return KILN_OK;
}

kiln_status build_run_passes(ir_model *model, const build_pass_options *opts, kiln_error *err) {
    return build_run_passes_stats(model, opts, NULL, err);
}
