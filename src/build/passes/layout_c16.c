/* layout_c16.c - picks the activations between channels-in-lanes convolutions that the
 * CPU stores in its C16 layout (backends/cpu/cpu_c16.h) instead of NCHW.
 *
 * Why. The C16 direct conv (tactic conv_c16_direct, AVX-512) computes with 16 channels in
 * each vector, so over NCHW data it first copies its input into C16 (a transpose of 8x8
 * blocks) and transposes every output tile back. Between two such convs both are wasted
 * work: the producer could store its tiles as they are and the reader read them in
 * place. In ResNet-50 the 14x14 and 7x7 stages run every 1x1 conv and every strided 3x3
 * this way, so a block's output (written by conv3, read by the next block's conv1 and
 * added by its conv3) and the strided first block's inner values need no conversion at
 * all. ONNX Runtime keeps the same layout ("NCHWc") across the whole network.
 *
 * What. Run by the builder after the tactics are chosen, for CPU engines on AVX-512F (the
 * only machines the C16 kernels run on), since whether a conv runs the C16 kernel is the
 * builder's timed choice. A float32 value [N, C, H, W] with C a known multiple of 16 gets
 * C16 when
 *  - its producer works on C16 data (c16_conv[node], from the builder: a Conv on the C16
 *    kernel or on Winograd, or a 2-D MaxPool without Indices),
 *  - every reader is such a node reading it as its input X or as a conv's fused residual
 *    (kiln_residual), and it is not a graph output or read by a subgraph.
 * A conv's input, output and residual take their layouts independently (where a region
 * starts or ends at a residual block, the kernel adds an NCHW residual to a C16 output,
 * or a C16 one to an NCHW output).
 * Producers get bit 2 in the int attribute kiln_c16, readers bit 1 (input) or 4
 * (residual), as kiln_p16 does. Shapes and the memory plan do not change. A marked node
 * that cannot run on C16 data (KILN_CONV_C16=0; an engine built for AVX-512 does not load
 * where it is missing) converts at run time (cpu_conv_p16.c), slower but never wrong.
 * KILN_NO_C16_LAYOUT=1 skips the pass (A/B measurements).
 */
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"

#define C16_X 1
#define C16_Y 2
#define C16_RES 4

/* float32 [N, C, H, W] with C a known multiple of 16 */
static bool c16_shape(const ir_value *v) {
    const ir_type *t = &v->type;
    return t->kind == IR_TYPE_TENSOR && t->dtype == KILN_DTYPE_FLOAT && t->rank == 4 &&
           t->dims[1].kind == IR_DIM_CONST && t->dims[1].value > 0 && t->dims[1].value % 16 == 0;
}

static bool valid_value(const ir_graph *g, int32_t v) { return v >= 0 && v < g->n_values; }

/* The bits C16 node r needs to read value v in C16, or 0 when it reads v otherwise (as
 * a conv's weight or bias). */
static int64_t reader_bits(const ir_node *r, int32_t v) {
    int64_t res = ir_node_attr_int(r, "kiln_residual", -1), bits = 0;
    for (int32_t k = 0; k < r->n_inputs; k++) {
        if (r->inputs[k] != v) continue;
        if (k == 0) bits |= C16_X;
        else if (k == res) bits |= C16_RES;
        else return 0;
    }
    return bits;
}

/* Clears c16[] where a reader cannot take the value. */
static void settle(const ir_graph *g, const bool *c16_conv, bool *c16) {
    for (int32_t j = 0; j < g->n_nodes; j++) {
        const ir_node *n = &g->nodes[j];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t v = n->inputs[k];
            if (valid_value(g, v) && c16[v] && (!c16_conv[j] || !reader_bits(n, v))) c16[v] = false;
        }
    }
}

kiln_status build_pass_layout_c16(ir_model *model, const bool *c16_conv, int32_t *marked, kiln_error *err) {
    if (marked) *marked = 0;
    if (!model || !model->graph || !c16_conv || getenv("KILN_NO_C16_LAYOUT")) return KILN_OK;
    ir_graph *g = model->graph;
    pass_uses u;
    kiln_status st = pass_uses_compute(g, &u, err);
    if (st != KILN_OK) return st;
    bool *c16 = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *c16);
    if (!c16) {
        pass_uses_free(&u);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory choosing C16 layouts");
    }
    for (int32_t j = 0; j < g->n_nodes; j++) {
        const ir_node *n = &g->nodes[j];
        int32_t v = n->n_outputs > 0 ? n->outputs[0] : -1;
        if (c16_conv[j] && valid_value(g, v) && !u.pinned[v] && u.count[v] > 0 && c16_shape(&g->values[v]))
            c16[v] = true;
    }
    settle(g, c16_conv, c16);
    int32_t count = 0;
    for (int32_t j = 0; j < g->n_nodes && st == KILN_OK; j++) {
        ir_node *n = &g->nodes[j];
        int64_t bits = 0;
        if (n->n_outputs > 0 && valid_value(g, n->outputs[0]) && c16[n->outputs[0]]) {
            bits |= C16_Y;
            count++;
        }
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (valid_value(g, n->inputs[k]) && c16[n->inputs[k]]) bits |= reader_bits(n, n->inputs[k]);
        if (bits && !pass_or_int_attr(model, n, "kiln_c16", bits))
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory marking C16 layouts");
    }
    free(c16);
    pass_uses_free(&u);
    if (marked) *marked = st == KILN_OK ? count : 0;
    return st;
}
