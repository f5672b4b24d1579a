/* layout_p16.c - picks the activations between 1x1 (and depthwise) convolutions that the
 * CPU stores in its P16 layout instead of NCHW.
 *
 * Why. A 1x1 conv over NCHW data is a GEMM Y[Cout, H*W] = W[Cout, Cin] * X[Cin, H*W] per
 * image. The CPU's packed GEMM must first copy X into 16-column panels (positions in
 * blocks of 16, all channels of a block contiguous), and its 6x16 output tiles land in
 * NCHW as 64-byte pieces a whole image row apart, which the hardware prefetchers do not
 * follow. In the P16 layout (cpu_gemm_packed.h: per image, blocks of 16 positions x all
 * channels) a consumer conv reads its input panels in place, with no packing, and a
 * producer conv writes each tile as one contiguous run, the residual read the same way.
 * ResNet-50's bottleneck blocks chain exactly such convs: conv3 (1x1) writes the block
 * output, which the next block's conv1 (1x1) reads and its conv3 adds as the residual.
 *
 * Depthwise convs (session 9). In MobileNet-style blocks a 1x1 expand conv feeds a 3x3
 * depthwise conv, which feeds a 1x1 project conv, so no value there could be P16: the
 * project conv packed its input, and the expand conv wrote its tiles a whole image row
 * apart. The CPU's depthwise kernel transposes 8 channels into a row buffer and back
 * anyway, so it reads and writes P16 too (cpu_conv_dw_avx2.c), where a row is a multiple
 * of 8 positions (each 8-position piece then lies in one block). MobileNetV2 at batch 1
 * spent 2-3.5% less of its time in the layers this changes (1-2 threads; batch 8 even);
 * stride-2 depthwise convs ran 20-33% slower with P16 sides, so they keep NCHW
 * (docs/BENCHMARKS.md, "Session 9").
 *
 * What. A float32 value gets P16 when
 *  - a Conv that the P16 path runs produces it as its output: 2-D, 1x1 kernel, stride 1,
 *    no padding, group 1, constant weights; or depthwise with stride 1 (group = channels,
 *    constant [C, 1, kh, kw] weights) with no fused residual and no fused activation
 *    other than Relu or Clip (what the depthwise kernel applies in registers),
 *  - its shape is [N, C, H, W] with H*W a multiple of 16 (the panel width), and W a
 *    multiple of 8 where a depthwise conv writes or reads it, and
 *  - every reader is such a Conv reading it as its input X, or a 1x1 one as its fused
 *    residual (kiln_residual, fuse_residual.c), and it is not a graph output or read by a
 *    subgraph.
 * Its producer gets bit CPU_CONV_P16_Y (2) in the int attribute kiln_p16, each reader bit
 * X (1) or RES (4) (the CPU Conv kernel, cpu_conv.c, reads them). Shapes and the memory
 * plan do not change: P16 holds the same floats in another order. A Conv the fast path
 * cannot run (no AVX2, say) converts at run time (cpu_conv_p16.c), so marks stay correct
 * on any machine. KILN_NO_P16=1 in the environment skips the pass (A/B measurements).
 *
 * For AVX-512F engines the builder runs it depthwise-only: a value gets P16 only where a
 * depthwise conv writes or reads it, since the C16 layout (layout_c16.c), chosen after the
 * tactics, serves chains of dense convs there (ResNet-50 +4.7% over P16 at stages 1-2),
 * while the depthwise kernel reads and writes P16 but not C16 (MobileNetV2 lost 4.8%
 * without P16 there).
 */
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"

#define P16_X 1
#define P16_Y 2
#define P16_RES 4

static int64_t ints_at(const ir_attr *a, int32_t i, int64_t dflt) {
    return a && a->type == IR_ATTR_INTS && i < a->n ? a->ints[i] : dflt;
}

/* A Conv the P16 path runs: 2-D, 1x1, stride 1, unpadded, group 1, constant float32 weights. */
static bool pointwise_conv(const ir_graph *g, const ir_node *n) {
    if (n->domain[0] || strcmp(n->op_type, "Conv") || n->n_inputs < 2 || n->n_outputs < 1) return false;
    const ir_tensor *w = pass_const(g, n->inputs[1]);
    if (!w || w->dtype != KILN_DTYPE_FLOAT || w->rank != 4 || w->dims[2] != 1 || w->dims[3] != 1) return false;
    if (ir_node_attr_int(n, "group", 1) != 1) return false;
    /* any auto_pad gives a 1x1 stride-1 kernel no padding; the kernel checks the geometry again */
    const ir_attr *s = ir_node_attr(n, "strides"), *p = ir_node_attr(n, "pads");
    for (int32_t i = 0; i < 2; i++)
        if (ints_at(s, i, 1) != 1) return false;
    for (int32_t i = 0; i < 4; i++)
        if (ints_at(p, i, 0) != 0) return false;
    return true;
}

/* A 2-D stride-1 depthwise Conv whose epilogue the depthwise kernel keeps in registers:
 * constant float32 weights [C, 1, kh, kw], group = C = the input's (known) channel count,
 * no fused residual, no fused activation other than Relu or Clip. */
static bool depthwise_conv(const ir_graph *g, const ir_node *n) {
    if (n->domain[0] || strcmp(n->op_type, "Conv") || n->n_inputs < 2 || n->n_outputs < 1) return false;
    const ir_tensor *w = pass_const(g, n->inputs[1]);
    if (!w || w->dtype != KILN_DTYPE_FLOAT || w->rank != 4 || w->dims[1] != 1) return false;
    int64_t group = ir_node_attr_int(n, "group", 1);
    if (group < 2 || group != w->dims[0] || n->inputs[0] < 0 || n->inputs[0] >= g->n_values) return false;
    const ir_type *xt = &g->values[n->inputs[0]].type;
    if (xt->rank != 4 || xt->dims[1].kind != IR_DIM_CONST || xt->dims[1].value != group) return false;
    if (ir_node_attr_int(n, "kiln_residual", -1) >= 0) return false;
    const ir_attr *s = ir_node_attr(n, "strides");
    for (int32_t i = 0; i < 2; i++)
        if (ints_at(s, i, 1) != 1) return false;
    const ir_attr *act = ir_node_attr(n, "kiln_activation");
    if (!act) return true;
    return act->type == IR_ATTR_STRING && act->s.len == 4 &&
           (!memcmp(act->s.data, "Relu", 4) || !memcmp(act->s.data, "Clip", 4));
}

/* Value v's rows (W, its last dim) are a known multiple of 8 positions. */
static bool rows_of_8(const ir_graph *g, int32_t v) {
    const ir_type *t = &g->values[v].type;
    return t->rank == 4 && t->dims[3].kind == IR_DIM_CONST && t->dims[3].value % 8 == 0;
}

/* float32 [N, C, H, W] with H and W known and H*W a multiple of 16. */
static bool p16_shape(const ir_value *v) {
    const ir_type *t = &v->type;
    if (t->kind != IR_TYPE_TENSOR || t->dtype != KILN_DTYPE_FLOAT || t->rank != 4) return false;
    if (t->dims[2].kind != IR_DIM_CONST || t->dims[3].kind != IR_DIM_CONST) return false;
    int64_t hw = t->dims[2].value * t->dims[3].value;
    return hw > 0 && hw % 16 == 0;
}

/* The bits reader r needs for value v, or 0 when it cannot read v in P16. */
static int64_t reader_bits(const ir_graph *g, const ir_node *r, int32_t v) {
    if (depthwise_conv(g, r)) {
        for (int32_t k = 1; k < r->n_inputs; k++)
            if (r->inputs[k] == v) return 0; /* the weight or the bias */
        return r->inputs[0] == v && rows_of_8(g, v) ? P16_X : 0;
    }
    if (!pointwise_conv(g, r)) return 0;
    int64_t res = ir_node_attr_int(r, "kiln_residual", -1), bits = 0;
    for (int32_t k = 0; k < r->n_inputs; k++) {
        if (r->inputs[k] != v) continue;
        if (k == 0) bits |= P16_X;
        else if (k == res) bits |= P16_RES;
        else return 0; /* the weight or the bias */
    }
    return bits;
}

/* The depthwise-only mode: clears p16[] for every value no depthwise conv reads as its
 * input or writes (one walk over the nodes; keep[] has a slot per value). */
static void keep_depthwise_sides(const ir_graph *g, bool *p16, bool *keep) {
    for (int32_t j = 0; j < g->n_nodes; j++) {
        const ir_node *n = &g->nodes[j];
        if (!depthwise_conv(g, n)) continue;
        int32_t x = n->inputs[0], y = n->n_outputs > 0 ? n->outputs[0] : -1;
        if (x >= 0 && x < g->n_values) keep[x] = true;
        if (y >= 0 && y < g->n_values) keep[y] = true;
    }
    for (int32_t v = 0; v < g->n_values; v++)
        if (!keep[v]) p16[v] = false;
}

kiln_status build_pass_layout_p16(ir_model *model, int32_t *marked, kiln_error *err) {
    return build_pass_layout_p16_mode(model, false, marked, err);
}

kiln_status build_pass_layout_p16_mode(ir_model *model, bool depthwise_only, int32_t *marked, kiln_error *err) {
    if (marked) *marked = 0;
    if (!model || !model->graph || getenv("KILN_NO_P16")) return KILN_OK;
    ir_graph *g = model->graph;
    pass_uses u;
    kiln_status st = pass_uses_compute(g, &u, err);
    if (st != KILN_OK) return st;
    /* per value: whether it gets P16; per node: the bits it gets. Linear in the graph. */
    bool *p16 = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *p16);
    int64_t *bits = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *bits);
    if (!p16 || !bits) {
        free(p16);
        free(bits);
        pass_uses_free(&u);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory choosing P16 layouts");
    }
    for (int32_t j = 0; j < g->n_nodes; j++) {
        const ir_node *n = &g->nodes[j];
        int32_t v = n->n_outputs > 0 ? n->outputs[0] : -1;
        if (v >= 0 && v < g->n_values && !u.pinned[v] && u.count[v] > 0 && p16_shape(&g->values[v]) &&
            (pointwise_conv(g, n) || (depthwise_conv(g, n) && rows_of_8(g, v))))
            p16[v] = true;
    }
    /* every reader must take it */
    for (int32_t j = 0; j < g->n_nodes; j++)
        for (int32_t k = 0; k < g->nodes[j].n_inputs; k++) {
            int32_t v = g->nodes[j].inputs[k];
            if (v >= 0 && v < g->n_values && p16[v] && !reader_bits(g, &g->nodes[j], v)) p16[v] = false;
        }
    /* AVX-512 builds: the C16 layout, chosen after the tactics, serves the dense convs */
    if (depthwise_only) {
        bool *keep = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *keep);
        if (!keep) st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory choosing P16 layouts");
        else keep_depthwise_sides(g, p16, keep);
        free(keep);
    }
    int32_t count = 0;
    for (int32_t j = 0; j < g->n_nodes; j++) {
        const ir_node *n = &g->nodes[j];
        if (n->n_outputs > 0 && n->outputs[0] >= 0 && n->outputs[0] < g->n_values && p16[n->outputs[0]]) {
            bits[j] |= P16_Y;
            count++;
        }
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && n->inputs[k] < g->n_values && p16[n->inputs[k]])
                bits[j] |= reader_bits(g, n, n->inputs[k]);
    }
    for (int32_t j = 0; j < g->n_nodes && st == KILN_OK; j++)
        if (bits[j] && !pass_or_int_attr(model, &g->nodes[j], "kiln_p16", bits[j]))
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory marking P16 layouts");
    free(p16);
    free(bits);
    pass_uses_free(&u);
    if (marked) *marked = st == KILN_OK ? count : 0;
    return st;
}
