/* ops_extra.c - inference for newer or less common ops: RMSNormalization, Det,
 * Optional*, the loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss),
 * CenterCropPad and Attention (opset 23: 3-D or 4-D Q/K/V, past key/value caches). */
#include <string.h>

#include "ir/ops/ops.h"

void ir_infer_rmsnorm(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    if (r > 0) {
        int32_t ax;
        if (!ir_axis(c, ir_ai(c, "axis", -1), r, "axis", &ax)) return;
        int32_t pr = ir_in_rank(c, 1);
        if (pr > r - ax) {
            diag *d = ir_err(c, "shape-norm-param", "scale %s has more axes than the normalized part of the input",
                             ir_shapestr(c, ir_in(c, 1)));
            ir_fact_input(c, d, 0);
            ir_fact_input(c, d, 1);
            return;
        }
        for (int32_t k = 0; k < pr; k++) {
            ir_dim x = ir_in_dim(c, 0, r - 1 - k), y = ir_in_dim(c, 1, pr - 1 - k);
            if (!ir_dim_is(y, 1) && ir_dim_eq(c->m, x, y) == IR_DIM_NE) {
                diag *d = ir_err(c, "shape-norm-param", "scale %s does not match the normalized axes of the input %s",
                                 ir_shapestr(c, ir_in(c, 1)), ir_shapestr(c, ir_in(c, 0)));
                ir_fact_input(c, d, 0);
                ir_fact_input(c, d, 1);
                ir_hint(c, d, "the hidden size changed: re-export the norm with the new width");
                return;
            }
        }
    }
    ir_out_like(c, 0, 0);
}

void ir_infer_det(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    if (r >= 0 && r < 2) {
        diag *d = ir_err(c, "shape-rank", "Det needs [..., M, M], got rank %d", r);
        ir_fact_input(c, d, 0);
        return;
    }
    if (r < 0) {
        ir_out(c, 0, ir_in_dt(c, 0), -1, NULL);
        return;
    }
    ir_dim *out = r > 2 ? ir_dims_new(c, r - 2) : NULL;
    for (int32_t i = 0; i < r - 2 && out; i++) out[i] = ir_in_dim(c, 0, i);
    ir_out(c, 0, ir_in_dt(c, 0), r - 2, out);
}

void ir_infer_optional(ir_ictx *c) {
    ir_type *e = ARENA_NEW(&c->m->arena, ir_type);
    if (!e) return;
    e->rank = -1;
    const ir_attr *a = ir_attr_get(c, "type");
    if (ir_has(c, 0)) *e = *ir_in(c, 0);
    else if (a && a->type == IR_ATTR_TYPE_PROTO && a->tp) *e = *a->tp;
    ir_type t;
    memset(&t, 0, sizeof t);
    t.kind = IR_TYPE_OPTIONAL;
    t.rank = -1;
    t.elem = e;
    ir_out_type(c, 0, &t);
}

void ir_infer_optional_has(ir_ictx *c) { ir_out(c, 0, KILN_DTYPE_BOOL, 0, NULL); }

void ir_infer_optional_get(ir_ictx *c) {
    const ir_type *t = ir_in(c, 0);
    if (t && t->kind == IR_TYPE_OPTIONAL && t->elem) ir_out_type(c, 0, t->elem);
    else if (t) ir_out_type(c, 0, t);
}

void ir_infer_loss(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    bool none = ir_astr_is(c, "reduction", "mean", "none");
    const ir_type *tgt = ir_in(c, 1);
    int32_t rt = ir_in_rank(c, 1);
    if (none) ir_out(c, 0, dt, rt, rt > 0 ? tgt->dims : NULL);
    else ir_out(c, 0, dt, 0, NULL);
    if (ir_nout(c) > 1) ir_out_like(c, 1, 0); /* SoftmaxCrossEntropyLoss's log_prob */
}

void ir_infer_center_crop_pad(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    const ir_known *kv = ir_in_kv(c, 1);
    if (r < 0 || !kv || !kv->e) {
        ir_out(c, 0, dt, r, r > 0 ? ir_dims_new(c, r) : NULL);
        return;
    }
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return;
    memcpy(out, ir_in(c, 0)->dims, sizeof *out * (size_t)r);
    const int64_t *axes;
    int32_t na;
    bool have = ir_aints(c, "axes", &axes, &na);
    if (!have) na = r;
    if (kv->n != na) {
        diag *d = ir_err(c, "shape-attr-invalid", "shape has %d entries for %d axes", kv->n, na);
        ir_fact_input(c, d, 1);
        return;
    }
    for (int32_t i = 0; i < na; i++) {
        int32_t ax = i;
        if (have && !ir_axis(c, axes[i], r, "axes entry", &ax)) return;
        out[ax] = kv->e[i];
    }
    ir_out(c, 0, dt, r, out);
}

void ir_infer_attention(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t rq = ir_in_rank(c, 0), rk = ir_in_rank(c, 1), rv = ir_in_rank(c, 2);
    if (rq < 0 || rk < 0 || rv < 0 || rq != rk || rq != rv || (rq != 3 && rq != 4)) {
        if (rq >= 0 && rk >= 0 && rv >= 0 && (rq != rk || rq != rv || (rq != 3 && rq != 4))) {
            diag *d = ir_err(c, "shape-rank", "Q, K and V must all be 3-D or all 4-D (got ranks %d, %d, %d)", rq, rk, rv);
            ir_fact_input(c, d, 0);
            ir_fact_input(c, d, 1);
            ir_fact_input(c, d, 2);
            return;
        }
        ir_out(c, 0, dt, rq, NULL);
        return;
    }
    ir_model *m = c->m;
    ir_dim B = ir_in_dim(c, 0, 0), qh, qs, kvh, kvs, vhead, khead;
    if (rq == 4) {
        qh = ir_in_dim(c, 0, 1);
        qs = ir_in_dim(c, 0, 2);
        kvh = ir_in_dim(c, 1, 1);
        kvs = ir_in_dim(c, 1, 2);
        khead = ir_in_dim(c, 1, 3);
        vhead = ir_in_dim(c, 2, 3);
    } else {
        int64_t nq = ir_ai(c, "q_num_heads", 0), nkv = ir_ai(c, "kv_num_heads", 0);
        if (nq < 1 || nkv < 1) {
            ir_err(c, "shape-attr-invalid", "3-D Attention needs q_num_heads and kv_num_heads >= 1");
            return;
        }
        qh = ir_dim_const(nq);
        kvh = ir_dim_const(nkv);
        qs = ir_in_dim(c, 0, 1);
        kvs = ir_in_dim(c, 1, 1);
        if (!ir_dim_div_exact(m, ir_in_dim(c, 1, 2), kvh, &khead)) khead = ir_dim_unknown();
        if (!ir_dim_div_exact(m, ir_in_dim(c, 2, 2), kvh, &vhead)) vhead = ir_dim_unknown();
    }
    ir_dim total = kvs;
    if (ir_in_rank(c, 4) == 4) total = ir_dim_add(m, ir_in_dim(c, 4, 2), kvs);
    ir_dim *y = ir_dims_new(c, rq);
    if (!y) return;
    if (rq == 4) {
        y[0] = B; y[1] = qh; y[2] = qs; y[3] = vhead;
    } else {
        y[0] = B; y[1] = qs; y[2] = ir_dim_mul(m, qh, vhead);
    }
    ir_out(c, 0, dt, rq, y);
    ir_dim *pk = ir_dims_new(c, 4), *pv = ir_dims_new(c, 4), *qk = ir_dims_new(c, 4);
    if (!pk || !pv || !qk) return;
    pk[0] = B; pk[1] = kvh; pk[2] = total; pk[3] = khead;
    pv[0] = B; pv[1] = kvh; pv[2] = total; pv[3] = vhead;
    qk[0] = B; qk[1] = qh; qk[2] = qs; qk[3] = total;
    ir_out(c, 1, dt, 4, pk);
    ir_out(c, 2, dt, 4, pv);
    ir_out(c, 3, dt, 4, qk);
}
