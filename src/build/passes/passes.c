/* passes.c - runs the graph passes in order (see passes.h). */
#include <stdlib.h>

#include "build/passes/passes.h"

#include <string.h>

#include "build/passes/pass_util.h"
#include "diag/diag.h"
#include "ir/infer.h"
#include "onnx/onnx_load.h"

build_pass_options build_pass_options_default(void) {
    build_pass_options o;
    memset(&o, 0, sizeof o);
    o.fold_max_bytes = 16u << 20;
    o.fold = o.remove_identity = o.fold_batchnorm = o.fuse_activation = o.fuse_residual = o.fuse_gelu = true;
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
    /* Passes read weights with typed loads (BN scales, conv weights, scalars), but mapped
     * raw_data sits at any file offset: align what is misaligned first. The session would
     * make the same aligned copies when binding weights, so this costs nothing extra. */
    ir_graph *g = model->graph;
    for (int32_t i = 0; i < g->n_initializers && st == KILN_OK; i++) {
        int32_t v = g->initializers[i];
        if (v >= 0 && v < g->n_values && g->values[v].init) st = onnx_tensor_align(model, g->values[v].init, err);
    }
    /* Order: folding first (Constant nodes become initializers, which the BN fold and
     * the activation fusion need), then Identity/Dropout (exposes Conv -> BN pairs). */
    if (st == KILN_OK && opts->fold) st = build_pass_fold_constants(model, opts, stats, err);
    if (st == KILN_OK && opts->remove_identity) st = build_pass_remove_identity(model, opts, stats, err);
    if (st == KILN_OK && opts->fold_batchnorm) st = build_pass_fold_batchnorm(model, opts, stats, err);
    /* GELU subgraphs become one Gelu node before the epilogue fusions, so that
     * MatMul -> Add(bias) -> Gelu ends as one MatMul with both marks */
    if (st == KILN_OK && opts->fuse_gelu) st = build_pass_fuse_gelu(model, opts, stats, err);
    /* residual/bias Adds before activations: Conv -> Add -> Relu then fuses completely */
    if (st == KILN_OK && opts->fuse_residual) st = build_pass_fuse_residual(model, opts, stats, err);
    if (st == KILN_OK && opts->fuse_activation) st = build_pass_fuse_activation(model, opts, stats, err);
    /* weights the folds replaced (BN parameters, pre-fold conv weights) leave the model */
    if (st == KILN_OK) st = pass_drop_unread_initializers(g, NULL, err);
    return st;
}

kiln_status build_run_passes(ir_model *model, const build_pass_options *opts, kiln_error *err) {
    return build_run_passes_stats(model, opts, NULL, err);
}

kiln_status build_run_device_passes(ir_model *model, build_pass_stats *stats, kiln_error *err) {
    kiln_status st = build_pass_fuse_attention(model, NULL, stats, err);
    if (st == KILN_OK && !getenv("KILN_NO_MERGE_QKV")) st = build_pass_merge_qkv(model, NULL, stats, err);
    /* the separate Q/K/V weights the merge concatenated (~85 MB in a BERT-base FP32 engine) */
    if (st == KILN_OK && model && model->graph) st = pass_drop_unread_initializers(model->graph, NULL, err);
    return st;
}

void build_infer_types_quiet(ir_model *model) {
    diag_list dl;
    diag_list_init(&dl);
    kiln_error ie = {0};
    (void)ir_infer(model, NULL, &dl, &ie);
    kiln_err_clear(&ie);
    diag_list_free(&dl);
}

kiln_status build_run_host_passes(ir_model *model, build_pass_stats *stats, kiln_error *err) {
    return build_run_host_passes_p16(model, false, stats, err);
}

kiln_status build_run_host_passes_p16(ir_model *model, bool c16_target, build_pass_stats *stats, kiln_error *err) {
    if (!model || !model->graph) return KILN_OK;
    kiln_status st = KILN_OK;
    if (!getenv("KILN_NO_FUSE_ATTENTION")) {
        build_infer_types_quiet(model); /* the attention match reads value types */
        st = build_pass_fuse_attention(model, NULL, stats, err);
        /* no merge_qkv here: one N = 2304 GEMM feeding QkvAttention measured no faster on
         * the CPU than the three projections (BERT-base batch 1: 2 threads 172.7 vs 189.9
         * ms merged, merged faster in 3 of 8 rounds; 1 thread 306.5 vs 311.8, 2 of 6) */
    }
    if (st == KILN_OK && !getenv("KILN_NO_FOLD_SCALE")) st = build_pass_fold_scale(model, NULL, stats, err);
    if (st == KILN_OK) st = pass_drop_unread_initializers(model->graph, NULL, err);
    /* last: it marks nodes as they finally are (fused residuals included) */
    if (st == KILN_OK && !getenv("KILN_NO_P16")) {
        build_infer_types_quiet(model);
        st = build_pass_layout_p16_mode(model, c16_target, NULL, err);
    }
    return st;
}
