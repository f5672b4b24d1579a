/* cpu_seqmap.c - SequenceMap: runs the `body` graph once per element of the input
 * sequence(s) and collects each body output into an output sequence.
 *
 * Input 0 is a sequence; further inputs are sequences of the same length (element i is
 * passed) or tensors (passed unchanged to every iteration). The body runs through
 * ctx->run_subgraph like Loop/Scan in cpu_control.c, so it sees outer-scope values.
 * Body inputs are shallow copies of the caller's values: the executor only reads
 * subgraph inputs, so nothing is copied or freed here.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"

kiln_status cpu_SequenceMap(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out) {
    const ir_attr *ba = ir_node_attr(ctx->node, "body");
    const ir_graph *body = ba && ba->type == IR_ATTR_GRAPH ? ba->g : NULL;
    if (!body) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'body' (a graph) is missing");
    if (body->n_inputs != n_in || body->n_outputs != n_out)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "body takes %d inputs and gives %d outputs; the node "
                               "has %d and %d", (int)body->n_inputs, (int)body->n_outputs, (int)n_in, (int)n_out);
    if (n_in < 1 || !inputs[0] || inputs[0]->kind != IR_TYPE_SEQUENCE)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input 0 must be a sequence");
    int32_t n = inputs[0]->n_items;
    for (int32_t k = 1; k < n_in; k++) {
        if (!inputs[k]) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input %d is missing", (int)k);
        if (inputs[k]->kind == IR_TYPE_SEQUENCE && inputs[k]->n_items != n)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input sequence %d has %d elements, input 0 has %d", (int)k,
                                   (int)inputs[k]->n_items, (int)n);
    }
    rt_value *bin = calloc((size_t)n_in + 1, sizeof *bin);
    rt_value *bout = calloc((size_t)n_out + 1, sizeof *bout);
    kiln_status st = bin && bout ? KILN_OK : cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int32_t j = 0; j < n_out && st == KILN_OK; j++) {
        rt_value_release(&outputs[j]);
        outputs[j].kind = IR_TYPE_SEQUENCE;
        outputs[j].has_value = true;
        outputs[j].elem_kind = IR_TYPE_TENSOR;
        /* an empty result keeps the body's declared element type */
        if (body->outputs[j] >= 0) outputs[j].elem_dtype = body->values[body->outputs[j]].type.dtype;
        outputs[j].items = calloc((size_t)n + 1, sizeof *outputs[j].items);
        if (!outputs[j].items) st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < n && st == KILN_OK; i++) {
        for (int32_t k = 0; k < n_in; k++)
            bin[k] = inputs[k]->kind == IR_TYPE_SEQUENCE ? inputs[k]->items[i] : *inputs[k];
        for (int32_t j = 0; j < n_out; j++) rt_value_init(&bout[j]);
        st = ctx->run_subgraph(ctx, body, bin, n_in, bout, n_out);
        for (int32_t j = 0; j < n_out; j++) {
            if (st == KILN_OK) {
                outputs[j].items[i] = bout[j]; /* moved */
                outputs[j].n_items = i + 1;
                if (bout[j].kind == IR_TYPE_TENSOR) outputs[j].elem_dtype = bout[j].t.dtype;
            } else {
                rt_value_release(&bout[j]);
            }
        }
    }
    free(bin);
    free(bout);
    return st;
}
