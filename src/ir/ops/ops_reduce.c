/* ops_reduce.c - inference for ReduceX ops (Sum, Mean, Max, Min, Prod, L1, L2, LogSum,
 * LogSumExp, SumSquare): axes as an attribute (before opset 13 for ReduceSum, 18 for
 * the others) or as input 1, keepdims, noop_with_empty_axes. ReduceProd/ReduceSum of a
 * known 1-D value (a shape) stay known: exporters compute element counts that way. */
#include <string.h>

#include "ir/ops/ops.h"

void ir_infer_reduce(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    bool keep = ir_ai(c, "keepdims", 1) != 0;
    bool noop = ir_ai(c, "noop_with_empty_axes", 0) != 0;
    int64_t axes[IR_MAX_RANK];
    int32_t na = 0;
    int st = 0;
    const int64_t *av;
    int32_t an;
    if (ir_aints(c, "axes", &av, &an)) {
        if (an > IR_MAX_RANK) {
            ir_err(c, "shape-attr-invalid", "axes has %d entries, more than the input's rank", an);
            return;
        }
        memcpy(axes, av, sizeof *axes * (size_t)an);
        na = an;
        st = 1;
    } else if (ir_has(c, 1)) {
        st = ir_in_ints(c, 1, axes, IR_MAX_RANK, &na) ? 1 : -1;
    }
    if (r < 0 || st < 0) {
        if (r >= 0 && keep) {
            ir_dim *o = r ? ir_dims_new(c, r) : NULL;
            if (r && !o) return;
            ir_out(c, 0, dt, r, o);
        } else {
            ir_out(c, 0, dt, -1, NULL);
        }
        return;
    }
    bool red[IR_MAX_RANK] = {false};
    if (st == 0 || na == 0) {
        if (noop) { /* empty axes with noop_with_empty_axes: identity */
            ir_out_like(c, 0, 0);
            return;
        }
        for (int32_t i = 0; i < r; i++) red[i] = true;
    } else {
        for (int32_t k = 0; k < na; k++) {
            int32_t ax;
            if (!ir_axis(c, axes[k], r, "axes entry", &ax)) return;
            red[ax] = true;
        }
    }
    int32_t nr = 0;
    for (int32_t i = 0; i < r; i++) nr += keep || !red[i];
    ir_dim *out = nr ? ir_dims_new(c, nr) : NULL;
    if (nr && !out) return;
    for (int32_t i = 0, k = 0; i < r; i++) {
        if (!red[i]) out[k++] = ir_in_dim(c, 0, i);
        else if (keep) out[k++] = ir_dim_const(1);
    }
    ir_out(c, 0, dt, nr, out);
    const ir_known *kv = ir_in_kv(c, 0);
    bool prod = !strcmp(c->n->op_type, "ReduceProd"), sum = !strcmp(c->n->op_type, "ReduceSum");
    if (kv && kv->e && r == 1 && red[0] && (prod || sum)) {
        ir_known *o = ir_kv_new(c, dt, 1, false);
        if (!o) return;
        ir_dim acc = ir_dim_const(prod ? 1 : 0);
        for (int32_t i = 0; i < kv->n; i++)
            acc = prod ? ir_dim_mul(c->m, acc, kv->e[i]) : ir_dim_add(c->m, acc, kv->e[i]);
        o->e[0] = acc;
        ir_out_kv(c, 0, o);
    }
}
