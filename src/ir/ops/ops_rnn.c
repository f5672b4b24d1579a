/* ops_rnn.c - inference for LSTM, GRU and RNN: every direction (forward, reverse,
 * bidirectional), both layouts (0: [seq, batch, feature], 1: [batch, seq, feature]),
 * hidden_size from the attribute or the weights, optional initial states and
 * sequence_lens. The input width vs the weights' input width is checked like a MatMul's
 * inner dimension. */
#include <inttypes.h>
#include <string.h>

#include "ir/ops/ops.h"

void ir_infer_rnn(ir_ictx *c) {
    const char *op = c->n->op_type;
    int64_t gates = !strcmp(op, "LSTM") ? 4 : !strcmp(op, "GRU") ? 3 : 1;
    int32_t ins[3] = {0, 1, 2};
    kiln_dtype dt;
    if (!ir_same_dtype(c, ins, 3, &dt)) return;
    int64_t layout = c->opset >= 14 ? ir_ai(c, "layout", 0) : 0;
    const char *dir = ir_astr(c, "direction", "forward");
    int64_t nd;
    if (!strcmp(dir, "forward") || !strcmp(dir, "reverse")) nd = 1;
    else if (!strcmp(dir, "bidirectional")) nd = 2;
    else {
        ir_err(c, "shape-attr-invalid", "direction '%s' is not forward, reverse or bidirectional", dir);
        return;
    }
    int32_t rx = ir_in_rank(c, 0), rw = ir_in_rank(c, 1);
    if ((rx >= 0 && rx != 3) || (rw >= 0 && rw != 3)) {
        diag *d = ir_err(c, "shape-rank", "%s needs a 3-D X and W (got ranks %d and %d)", op, rx, rw);
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        return;
    }
    ir_dim seq = rx == 3 ? ir_in_dim(c, 0, layout ? 1 : 0) : ir_dim_unknown();
    ir_dim batch = rx == 3 ? ir_in_dim(c, 0, layout ? 0 : 1) : ir_dim_unknown();
    ir_dim feat = rx == 3 ? ir_in_dim(c, 0, 2) : ir_dim_unknown();
    ir_dim hidden = ir_dim_unknown();
    const ir_attr *hs = ir_attr_get(c, "hidden_size");
    if (hs && hs->type == IR_ATTR_INT) {
        if (hs->i < 1) {
            ir_err(c, "shape-attr-invalid", "hidden_size %" PRId64 " must be >= 1", hs->i);
            return;
        }
        hidden = ir_dim_const(hs->i);
    }
    if (rw == 3) {
        const ir_dim *w = ir_in(c, 1)->dims;
        if (ir_dim_eq(c->m, w[0], ir_dim_const(nd)) == IR_DIM_NE) {
            diag *d = ir_err(c, "shape-rnn", "W's first axis is %s but direction '%s' needs %" PRId64, ir_dimstr(c, w[0]), dir, nd);
            ir_fact_input(c, d, 1);
            return;
        }
        ir_dim hw;
        if (ir_dim_div_exact(c->m, w[1], ir_dim_const(gates), &hw)) {
            if (ir_dim_eq(c->m, hidden, hw) == IR_DIM_NE) {
                diag *d = ir_err(c, "shape-rnn", "hidden_size is %s but W holds %s rows (%" PRId64 " gates x %s)",
                                 ir_dimstr(c, hidden), ir_dimstr(c, w[1]), gates, ir_dimstr(c, hw));
                ir_fact_input(c, d, 1);
                return;
            }
            if (hidden.kind == IR_DIM_UNKNOWN) hidden = hw;
        }
        if (ir_dim_eq(c->m, feat, w[2]) == IR_DIM_NE) {
            diag *d = ir_err(c, "shape-rnn", "input feature size %s does not match the weights' input size %s",
                             ir_dimstr(c, feat), ir_dimstr(c, w[2]));
            ir_fact_input(c, d, 0);
            ir_fact_input(c, d, 1);
            ir_hint(c, d, "the layer before the %s changed width: re-export with input_size=%s, or restore the previous "
                          "layer's width",
                    op, ir_dimstr(c, feat));
            return;
        }
    }
    ir_dim *y = ir_dims_new(c, 4), *yh = ir_dims_new(c, 3);
    if (!y || !yh) return;
    if (layout) {
        y[0] = batch; y[1] = seq; y[2] = ir_dim_const(nd); y[3] = hidden;
        yh[0] = batch; yh[1] = ir_dim_const(nd); yh[2] = hidden;
    } else {
        y[0] = seq; y[1] = ir_dim_const(nd); y[2] = batch; y[3] = hidden;
        yh[0] = ir_dim_const(nd); yh[1] = batch; yh[2] = hidden;
    }
    ir_out(c, 0, dt, 4, y);
    ir_out(c, 1, dt, 3, yh);
    if (gates == 4) ir_out(c, 2, dt, 3, yh);
}
