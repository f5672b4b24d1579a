/* ops_nhwc_pack.c - inference for kiln.nhwc NchwToNhwc, the channels-last entry of a
 * padded image stem.
 *
 * build/passes/layout_nhwc.c runs a dense convolution whose input has few channels (the
 * 3-channel RGB stem of an image model) channels-last with its input channels padded to
 * a multiple the tensor cores want (a padded OHWI weight with zeros in the new channels).
 * Its input then enters through one NchwToNhwc node instead of a Transpose:
 *     X [N, C, H, W] -> Y [N, H, W, channels], Y[n, h, w, c] = X[n, c, h, w] for c < C, 0 above;
 * with an optional `to` attribute (as Cast's) that converts the element type in the same
 * pass (the graph's float32 input straight to float16 channels-last). Attributes:
 * `channels` (int, >= C, default C) and `to` (int dtype, default X's). Like the other
 * kiln.nhwc ops it is written into saved GPU engines, so loading one infers it again.
 */
#include <inttypes.h>

#include "ir/ops/ops.h"

void ir_infer_nhwc_pack(ir_ictx *c) {
    int32_t rank = ir_in_rank(c, 0);
    if (rank >= 0 && rank != 4) {
        diag *d = ir_err(c, "shape-rank", "input X of kiln.nhwc NchwToNhwc has rank %d; it takes [N, C, H, W]", rank);
        ir_fact_input(c, d, 0);
        return;
    }
    kiln_dtype dt = ir_in_dt(c, 0);
    const ir_attr *to = ir_attr_get(c, "to");
    if (to) {
        if (to->type != IR_ATTR_INT || !kiln_dtype_valid((kiln_dtype)to->i) ||
            !kiln_dtype_is_float((kiln_dtype)to->i)) {
            diag *d = ir_err(c, "type-unsupported", "kiln.nhwc NchwToNhwc's 'to' is not a floating-point element type");
            ir_hint(c, d, "this node is made by kiln's layout pass: rebuild the engine");
            return;
        }
        dt = (kiln_dtype)to->i;
    }
    if (rank < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    ir_dim ch = ir_in_dim(c, 0, 1);
    const ir_attr *ca = ir_attr_get(c, "channels");
    if (ca) {
        bool bad = ca->type != IR_ATTR_INT || ca->i < 1 || ca->i > (int64_t)1 << 24 ||
                   (ch.kind == IR_DIM_CONST && ca->i < ch.value);
        if (bad) {
            diag *d = ir_err(c, "shape-attr-invalid",
                             "kiln.nhwc NchwToNhwc's 'channels' (%" PRId64 ") must be at least the input's channels (%s)",
                             ca->type == IR_ATTR_INT ? ca->i : (int64_t)-1, ir_dimstr(c, ch));
            ir_fact_input(c, d, 0);
            ir_hint(c, d, "this node is made by kiln's layout pass: rebuild the engine");
            return;
        }
        if (ch.kind != IR_DIM_CONST && ch.kind != IR_DIM_UNKNOWN) {
            /* a symbolic channel count cannot be padded to a fixed width */
            diag *d = ir_err(c, "shape-attr-invalid", "kiln.nhwc NchwToNhwc pads a symbolic channel count %s",
                             ir_dimstr(c, ch));
            ir_fact_input(c, d, 0);
            return;
        }
        ch = ir_dim_const(ca->i);
    }
    ir_dim *d = ir_dims_new(c, 4);
    if (!d) return;
    d[0] = ir_in_dim(c, 0, 0);
    d[1] = ir_in_dim(c, 0, 2);
    d[2] = ir_in_dim(c, 0, 3);
    d[3] = ch;
    ir_out(c, 0, dt, 4, d);
}
