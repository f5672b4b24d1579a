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
    int32_t attention_fused; /* attention blocks replaced by one Attention node (fuse_attention.c) */
    int32_t scale_folded;    /* power-of-two scales after a MatMul folded into weights (fold_scale.c) */
    int32_t qkv_merged;      /* Q/K/V projections merged into one GEMM + QkvAttention (merge_qkv.c) */
} build_pass_stats;

build_pass_options build_pass_options_default(void);

/* ---- FP16 activations (precision_fp16.c), run separately: only for a device backend
 * asked for --fp16, after type inference (rt_session_create does this). ---- */
typedef struct build_fp16_rules {
    /* whether the node can run with its float32 tensors stored as float16 */
    bool (*node_half)(void *user, const ir_model *model, const ir_node *node);
    /* whether input k of a half node is read in half (NULL: all); false for arguments read
     * on the host (Clip's bounds...), which stay float32 */
    bool (*input_half)(void *user, const ir_node *node, int32_t k);
    void *user;
} build_fp16_rules;

typedef struct build_fp16_stats {
    int32_t half_nodes;             /* nodes now computing on float16 tensors */
    int32_t float_nodes;            /* nodes with float32 tensors left in float32 (fallback) */
    int32_t casts;                  /* Cast nodes inserted at the boundaries */
    int32_t initializers_converted; /* float32 initializers stored as float16 */
    int32_t casts_cancelled;        /* float16 -> float32 Casts whose half readers now read the source */
} build_fp16_stats;

/* Attention blocks (MatMul -> scale -> [mask] -> Softmax -> MatMul with the head-split
 * Transposes) -> one ONNX Attention node (fuse_attention.c). Not in build_run_passes: the
 * session runs it for device backends, which have a fused kernel. opts/stats may be NULL. */
/* Folds Div/Mul by a power-of-two constant after a MatMul (BERT's attention scale) into
 * the constant weights producing one of its operands, exactly (fold_scale.c). Not in the
 * default set: the session runs it for host backends. opts/stats may be NULL. */
kiln_status build_pass_fold_scale(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                  kiln_error *err);
kiln_status build_pass_fuse_attention(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err);

/* Q/K/V projections of an Attention node -> one MatMul with concatenated weights and a
 * kiln.QkvAttention reading the packed result (merge_qkv.c). Device backends only (on
 * the CPU it measured no faster). */
kiln_status build_pass_merge_qkv(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                 kiln_error *err);
/* The structural passes for a device backend with fused attention kernels, in order:
 * fuse_attention, then merge_qkv (skipped when env KILN_NO_MERGE_QKV is set, for A/B
 * measurements). Types must be inferred first. Run by the session (kiln run) and by the
 * builder for cuda engines, so both execute the same graph. stats may be NULL. */
kiln_status build_run_device_passes(ir_model *model, build_pass_stats *stats, kiln_error *err);

/* The host (CPU) backend's structural passes, after build_run_passes: attention blocks ->
 * one Attention node (the CPU runs it fused, cpu_attention_fast.h; KILN_NO_FUSE_ATTENTION=1
 * keeps the MatMul/Softmax graph), then the power-of-two scale of any attention left
 * unfused into its Q weights (fold_scale.c; KILN_NO_FOLD_SCALE=1 skips it). Infers types
 * first (the attention match needs them). Run by the session for host backends and by
 * the builder for cpu engines, so both execute the same graph. stats may be NULL. */
kiln_status build_run_host_passes(ir_model *model, build_pass_stats *stats, kiln_error *err);
/* The same with the P16 pass depthwise-only when c16_target: the builder's for AVX-512F
 * engines, where the C16 layout (chosen after the tactics) serves the dense convs. */
kiln_status build_run_host_passes_p16(ir_model *model, bool c16_target, build_pass_stats *stats, kiln_error *err);

/* The CPU's P16 activation layout between 1x1 convs (layout_p16.c): marks producer and
 * readers with kiln_p16 bits; *marked (may be NULL) counts the values. Reads value types
 * (run type inference first). KILN_NO_P16 in the environment skips it. */
kiln_status build_pass_layout_p16(ir_model *model, int32_t *marked, kiln_error *err);
/* The same, marking only values a depthwise conv reads or writes when depthwise_only. */
kiln_status build_pass_layout_p16_mode(ir_model *model, bool depthwise_only, int32_t *marked, kiln_error *err);
/* The CPU's C16 activation layout between channels-in-lanes convs (layout_c16.c), run by
 * the builder after the tactics: c16_conv[node] says which nodes run the C16 conv kernel.
 * Marks producer and readers with kiln_c16 bits; *marked (may be NULL) counts the values. */
kiln_status build_pass_layout_c16(ir_model *model, const bool *c16_conv, int32_t *marked, kiln_error *err);

/* Infers value types for passes that match on them (and device backends that place nodes
 * by them); the problems it finds are not the caller's to report (kiln check does), so
 * they are dropped. */
void build_infer_types_quiet(ir_model *model);

/* Channels-last regions (layout_nhwc.c): nodes the rules accept in the internal domain
 * "kiln.nhwc" (Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool with [N, H, W,
 * C] data tensors), Transposes at the region boundaries. Device backends only (the CPU has
 * no kiln.nhwc kernels); the session runs it after the FP16 pass. */
typedef struct build_layout_rules {
    /* whether the node, with its domain set to "kiln.nhwc", can run */
    bool (*node_ok)(void *user, const ir_model *model, const ir_node *node);
    void *user;
    /* padded stems (layout_nhwc.c): pad a dense Conv's < 8 input channels to a multiple of
     * this and run it channels-last, when node_ok accepts a kiln.nhwc NchwToNhwc; 0: never */
    int32_t pad_channels;
} build_layout_rules;
/* The channels a padded stem pads Conv n's input to under pad_to, 0 when n is not one. */
int64_t build_layout_stem_channels(const ir_graph *g, const ir_node *n, int32_t pad_to);
kiln_status build_pass_layout_nhwc(ir_model *model, const build_layout_rules *rules, int32_t *moved, kiln_error *err);

struct rt_backend;
kiln_status build_pass_layout_nhwc_backend(ir_model *model, const struct rt_backend *be, void *ctx, int32_t *moved,
                                           kiln_error *err);
/* Whether a device session with --fp16 runs the channels-last pass: env is KILN_NHWC's
 * value (NULL when unset): "0" never, any other value always; unset: on for sessions that
 * run the graph passes (kiln run / verify), off for engine builds and loads, whose saved
 * graphs keep the standard layout. */
bool build_layout_nhwc_wanted(const char *env, bool run_passes);

/* FP16 activations (precision_fp16.c) with explicit rules. */
kiln_status build_pass_precision_fp16(ir_model *model, const build_fp16_rules *rules, build_fp16_stats *stats,
                                      kiln_error *err);
/* The same with a backend's rules: supports(ctx, model, node, KILN_DTYPE_FLOAT16) decides
 * per node, input_on_host() keeps host-read arguments float32. */
kiln_status build_pass_precision_fp16_backend(ir_model *model, const struct rt_backend *be, void *ctx,
                                              build_fp16_stats *stats, kiln_error *err);

/* Runs every enabled pass on the model's main graph. opts NULL = defaults. stats may be NULL. */
kiln_status build_run_passes(ir_model *model, const build_pass_options *opts, kiln_error *err);
kiln_status build_run_passes_stats(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                   kiln_error *err);

#endif
