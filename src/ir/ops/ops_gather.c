/* ops_gather.c - inference for indexing ops: Gather (with known-value propagation, the
 * core of Shape -> Gather shape subgraphs), GatherElements, GatherND, OneHot, TopK,
 * ArgMax/ArgMin, and the data-dependent ones (NonZero, NonMaxSuppression, Compress,
 * Unique), whose unknowable sizes become fresh symbols named after the node rather
 * than "?", so later ops can still relate them. */
#include <inttypes.h>
#include <string.h>

#include "ir/ops/ops.h"

static bool index_dtype_ok(ir_ictx *c, int32_t i, const char *what) {
    kiln_dtype dt = ir_in_dt(c, i);
    if (dt == KILN_DTYPE_UNDEFINED || dt == KILN_DTYPE_INT64 || dt == KILN_DTYPE_INT32) return true;
    diag *d = ir_err(c, "type-mismatch", "%s must be int32 or int64, got %s", what, kiln_dtype_name(dt));
    ir_fact_input(c, d, i);
    ir_hint(c, d, "insert a Cast to int64 on input %d ('%s') (in PyTorch: .long() on the index tensor)", i, ir_in_name(c, i));
    return false;
}

void ir_infer_gather(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    if (!index_dtype_ok(c, 1, "Gather's indices")) return;
    int32_t r = ir_in_rank(c, 0), q = ir_in_rank(c, 1);
    if (r == 0) {
        diag *d = ir_err(c, "shape-rank", "Gather's data is a scalar; it needs rank >= 1");
        ir_fact_input(c, d, 0);
        return;
    }
    if (r < 0 || q < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    int32_t ax;
    if (!ir_axis(c, ir_ai(c, "axis", 0), r, "axis", &ax)) return;
    int32_t nr = r - 1 + q;
    if (nr > IR_MAX_RANK) {
        ir_err(c, "shape-rank", "output rank %d is above kiln's limit", nr);
        return;
    }
    const ir_dim *d = ir_in(c, 0)->dims;
    ir_dim D = d[ax];
    const ir_known *ik = ir_in_kv(c, 1);
    if (ik && ik->e && D.kind == IR_DIM_CONST) {
        for (int32_t i = 0; i < ik->n; i++) {
            ir_dim v = ik->e[i];
            if (v.kind == IR_DIM_CONST && (v.value >= D.value || v.value < -D.value)) {
                diag *dg = ir_err(c, "shape-index-range", "index %" PRId64 " is out of range for axis %d of size %" PRId64,
                                  v.value, ax, D.value);
                ir_fact_input(c, dg, 0);
                ir_fact_input(c, dg, 1);
                ir_hint(c, dg, "indices must lie in [-%" PRId64 ", %" PRId64 "): the indexed tensor is smaller than the "
                               "exporter assumed (e.g. a shorter vocabulary or fewer dims)",
                        D.value, D.value - 1);
                return;
            }
        }
    }
    ir_dim *out = nr ? ir_dims_new(c, nr) : NULL;
    if (nr && !out) return;
    int32_t k = 0;
    for (int32_t i = 0; i < ax; i++) out[k++] = d[i];
    for (int32_t i = 0; i < q; i++) out[k++] = ir_in_dim(c, 1, i);
    for (int32_t i = ax + 1; i < r; i++) out[k++] = d[i];
    ir_out(c, 0, dt, nr, out);
    const ir_known *dk = ir_in_kv(c, 0);
    if (dk && dk->e && ik && ik->e && r == 1) {
        ir_known *o = ir_kv_new(c, dt, ik->n, false);
        if (!o) return;
        for (int32_t i = 0; i < ik->n; i++) {
            ir_dim v = ik->e[i];
            if (v.kind != IR_DIM_CONST) return;
            int64_t idx = v.value < 0 ? v.value + dk->n : v.value;
            if (idx < 0 || idx >= dk->n) return;
            o->e[i] = dk->e[idx];
        }
        ir_out_kv(c, 0, o);
    }
}

void ir_infer_gather_elements(ir_ictx *c) {
    if (!index_dtype_ok(c, 1, "GatherElements' indices")) return;
    int32_t r = ir_in_rank(c, 0), q = ir_in_rank(c, 1);
    if (r >= 0 && q >= 0 && r != q) {
        diag *d = ir_err(c, "shape-rank", "data has rank %d but indices rank %d; they must be equal", r, q);
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        return;
    }
    int32_t ax;
    if (r > 0 && !ir_axis(c, ir_ai(c, "axis", 0), r, "axis", &ax)) return;
    const ir_type *t = ir_in(c, 1);
    ir_out(c, 0, ir_in_dt(c, 0), q, q > 0 ? t->dims : NULL);
}

void ir_infer_gather_nd(ir_ictx *c) {
    if (!index_dtype_ok(c, 1, "GatherND's indices")) return;
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0), q = ir_in_rank(c, 1);
    int64_t b = ir_ai(c, "batch_dims", 0);
    if (r < 0 || q < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    ir_dim last = q > 0 ? ir_in_dim(c, 1, q - 1) : ir_dim_unknown();
    if (q < 1 || b < 0 || b >= q || b >= r) {
        ir_err(c, "shape-attr-invalid", "batch_dims %" PRId64 " must be smaller than both ranks (%d, %d)", b, r, q);
        return;
    }
    if (last.kind != IR_DIM_CONST) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    if (last.value < 1 || b + last.value > r) {
        diag *d = ir_err(c, "shape-rank", "indices address %" PRId64 " axes but data has only %" PRId64 " after the batch axes",
                         last.value, r - b);
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        return;
    }
    int32_t nr = q - 1 + r - (int32_t)b - (int32_t)last.value;
    ir_dim *out = nr > 0 ? ir_dims_new(c, nr) : NULL;
    if (nr > 0 && !out) return;
    int32_t k = 0;
    for (int32_t i = 0; i < q - 1; i++) out[k++] = ir_in_dim(c, 1, i);
    for (int32_t i = (int32_t)(b + last.value); i < r; i++) out[k++] = ir_in_dim(c, 0, i);
    ir_out(c, 0, dt, nr, out);
}

void ir_infer_onehot(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    kiln_dtype dt = ir_in_dt(c, 2);
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    int32_t nr = r + 1, ax;
    if (nr > IR_MAX_RANK) return;
    if (!ir_axis(c, ir_ai(c, "axis", -1), nr, "axis", &ax)) return;
    ir_dim depth = ir_dim_unknown();
    const ir_known *dk = ir_in_kv(c, 1);
    if (dk && dk->n == 1) {
        if (dk->e) depth = dk->e[0];
        else if (dk->f && dk->f[0] >= 0 && dk->f[0] < 9e15) depth = ir_dim_const((int64_t)dk->f[0]);
    }
    ir_dim *out = ir_dims_new(c, nr);
    if (!out) return;
    for (int32_t i = 0, k = 0; i < nr; i++) out[i] = i == ax ? depth : ir_in_dim(c, 0, k++);
    ir_out(c, 0, dt, nr, out);
}

void ir_infer_nonzero(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    ir_dim *out = ir_dims_new(c, 2);
    if (!out) return;
    out[0] = r >= 0 ? ir_dim_const(r) : ir_dim_unknown();
    out[1] = ir_dim_fresh(c, "count");
    ir_out(c, 0, KILN_DTYPE_INT64, 2, out);
}

void ir_infer_topk(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        ir_out(c, 1, KILN_DTYPE_INT64, -1, NULL);
        return;
    }
    int32_t ax;
    if (!ir_axis(c, ir_ai(c, "axis", -1), r, "axis", &ax)) return;
    ir_dim k = ir_dim_unknown();
    if (c->opset < 10 || (!ir_has(c, 1) && ir_attr_get(c, "k"))) {
        k = ir_dim_const(ir_ai(c, "k", -1));
    } else {
        const ir_known *kk = ir_in_kv(c, 1);
        if (kk && kk->e && kk->n == 1) k = kk->e[0];
    }
    const ir_dim *d = ir_in(c, 0)->dims;
    if (k.kind == IR_DIM_CONST && (k.value < 0 || (d[ax].kind == IR_DIM_CONST && k.value > d[ax].value))) {
        diag *dg = ir_err(c, "shape-attr-invalid", "K = %" PRId64 " is out of range for axis %d of size %s", k.value, ax,
                          ir_dimstr(c, d[ax]));
        ir_fact_input(c, dg, 0);
        ir_hint(c, dg, "K must be between 0 and the axis size: the model may expect more candidates than this input has");
        return;
    }
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    memcpy(out, d, sizeof *out * (size_t)r);
    out[ax] = k;
    ir_out(c, 0, dt, r, out);
    ir_out(c, 1, KILN_DTYPE_INT64, r, out);
}

void ir_infer_argminmax(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    if (r < 0) {
        ir_out(c, 0, KILN_DTYPE_INT64, -1, NULL);
        return;
    }
    int32_t ax;
    if (!ir_axis(c, ir_ai(c, "axis", 0), r, "axis", &ax)) return;
    bool keep = ir_ai(c, "keepdims", 1) != 0;
    int32_t nr = keep ? r : r - 1;
    ir_dim *out = nr ? ir_dims_new(c, nr) : NULL;
    if (nr && !out) return;
    for (int32_t i = 0, k = 0; i < r; i++) {
        if (i == ax) {
            if (keep) out[k++] = ir_dim_const(1);
        } else {
            out[k++] = ir_in_dim(c, 0, i);
        }
    }
    ir_out(c, 0, KILN_DTYPE_INT64, nr, out);
}

void ir_infer_nms(ir_ictx *c) {
    ir_dim *out = ir_dims_new(c, 2);
    if (!out) return;
    out[0] = ir_dim_fresh(c, "selected");
    out[1] = ir_dim_const(3);
    ir_out(c, 0, KILN_DTYPE_INT64, 2, out);
}

void ir_infer_compress(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    const ir_attr *a = ir_attr_get(c, "axis");
    if (!a) {
        ir_dim *out = ir_dims_new(c, 1);
        if (!out) return;
        out[0] = ir_dim_fresh(c, "count");
        ir_out(c, 0, dt, 1, out);
        return;
    }
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    int32_t ax;
    if (!ir_axis(c, a->i, r, "axis", &ax)) return;
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    memcpy(out, ir_in(c, 0)->dims, sizeof *out * (size_t)r);
    out[ax] = ir_dim_fresh(c, "count");
    ir_out(c, 0, dt, r, out);
}

void ir_infer_unique(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_dim u = ir_dim_fresh(c, "unique");
    const ir_attr *a = ir_attr_get(c, "axis");
    ir_dim *one = ir_dims_new(c, 1);
    if (!one) return;
    one[0] = u;
    if (!a) {
        ir_out(c, 0, dt, 1, one);
    } else if (r >= 0) {
        int32_t ax;
        if (!ir_axis(c, a->i, r, "axis", &ax)) return;
        ir_dim *out = ir_dims_new(c, r);
        if (!out) return;
        memcpy(out, ir_in(c, 0)->dims, sizeof *out * (size_t)r);
        out[ax] = u;
        ir_out(c, 0, dt, r, out);
    } else {
        ir_out(c, 0, dt, -1, NULL);
    }
    ir_out(c, 1, KILN_DTYPE_INT64, 1, one);
    ir_dim *inv = ir_dims_new(c, 1);
    if (!inv) return;
    inv[0] = !a && r >= 0 ? ir_dims_product(c->m, ir_in(c, 0)->dims, r)
                          : (a && r >= 0 && a->i >= -r && a->i < r ? ir_in_dim(c, 0, (int32_t)(a->i < 0 ? a->i + r : a->i))
                                                                   : ir_dim_unknown());
    ir_out(c, 2, KILN_DTYPE_INT64, 1, inv);
    ir_out(c, 3, KILN_DTYPE_INT64, 1, one);
}
