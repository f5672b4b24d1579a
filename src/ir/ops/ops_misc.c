/* ops_misc.c - inference for type conversion, constants and shape queries: Cast,
 * CastLike, Constant (every value_* form), ConstantOfShape, Shape (start/end), Size,
 * Dropout, EyeLike, Random*, Range. Shape, Size, Constant, ConstantOfShape, Range and
 * Cast produce known values: these are the sources of shape subgraphs. */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "ir/infer_internal.h"
#include "ir/ops/ops.h"

static bool valid_dtype(int64_t v) { return v > 0 && v < KILN_DTYPE_COUNT; }

void ir_infer_cast(ir_ictx *c) {
    int64_t to = ir_ai(c, "to", 0);
    if (!valid_dtype(to)) {
        const ir_attr *a = ir_attr_get(c, "to");
        if (a && a->type == IR_ATTR_STRING) { /* opset 1 spelled the type as a string */
            const char *s = ir_astr(c, "to", "");
            for (int i = 1; i < KILN_DTYPE_COUNT; i++)
                if (!strcasecmp(s, kiln_dtype_name((kiln_dtype)i)) || (!strcasecmp(s, "FLOAT") && i == KILN_DTYPE_FLOAT)) to = i;
        }
        if (!valid_dtype(to)) {
            ir_err(c, "type-unsupported", "Cast's 'to' (%" PRId64 ") is not a known element type", to);
            return;
        }
    }
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_out(c, 0, (kiln_dtype)to, r, r > 0 ? t->dims : NULL);
    const ir_known *kv = ir_in_kv(c, 0);
    if (!kv) return;
    bool to_int = kiln_dtype_is_integer((kiln_dtype)to) || to == KILN_DTYPE_BOOL;
    if (kv->e && to_int) {
        ir_known *o = ir_kv_new(c, (kiln_dtype)to, kv->n, false);
        if (!o) return;
        for (int32_t i = 0; i < kv->n; i++) {
            o->e[i] = kv->e[i];
            if (to == KILN_DTYPE_BOOL && kv->e[i].kind == IR_DIM_CONST) o->e[i] = ir_dim_const(kv->e[i].value != 0);
        }
        ir_out_kv(c, 0, o);
    } else if (kv->e && kiln_dtype_is_float((kiln_dtype)to)) {
        ir_known *o = ir_kv_new(c, (kiln_dtype)to, kv->n, true);
        if (!o) return;
        for (int32_t i = 0; i < kv->n; i++) {
            if (kv->e[i].kind != IR_DIM_CONST) return;
            o->f[i] = (double)kv->e[i].value;
        }
        ir_out_kv(c, 0, o);
    } else if (kv->f && kiln_dtype_is_float((kiln_dtype)to)) {
        ir_known *o = ir_kv_new(c, (kiln_dtype)to, kv->n, true);
        if (!o) return;
        memcpy(o->f, kv->f, sizeof *o->f * (size_t)kv->n);
        ir_out_kv(c, 0, o);
    } else if (kv->f && to_int) {
        ir_known *o = ir_kv_new(c, (kiln_dtype)to, kv->n, false);
        if (!o) return;
        for (int32_t i = 0; i < kv->n; i++) {
            double f = kv->f[i];
            if (!(f > -9e18 && f < 9e18)) return;
            o->e[i] = ir_dim_const(to == KILN_DTYPE_BOOL ? f != 0 : (int64_t)f);
        }
        ir_out_kv(c, 0, o);
    }
}

void ir_infer_castlike(ir_ictx *c) {
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_out(c, 0, ir_in_dt(c, 1), r, r > 0 ? t->dims : NULL);
}

static void out_from_tensor(ir_ictx *c, const ir_tensor *t) {
    if (!t || t->rank < 0 || t->rank > IR_MAX_RANK) {
        ir_err(c, "shape-attr-invalid", "Constant's tensor is malformed");
        return;
    }
    ir_dim *d = t->rank ? ir_dims_new(c, t->rank) : NULL;
    if (t->rank && !d) return;
    for (int32_t i = 0; i < t->rank; i++) d[i] = ir_dim_const(t->dims[i]);
    ir_out(c, 0, t->dtype, t->rank, d);
    ir_out_kv(c, 0, infer_kv_from_tensor(c->p, t));
}

void ir_infer_constant(ir_ictx *c) {
    const ir_attr *a;
    if ((a = ir_attr_get(c, "value")) && a->type == IR_ATTR_TENSOR) {
        out_from_tensor(c, a->t);
        return;
    }
    if ((a = ir_attr_get(c, "sparse_value")) && a->type == IR_ATTR_SPARSE_TENSOR && a->sparse) {
        const ir_sparse_tensor *s = a->sparse;
        if (s->rank < 0 || s->rank > IR_MAX_RANK) return;
        ir_dim *d = s->rank ? ir_dims_new(c, s->rank) : NULL;
        for (int32_t i = 0; i < s->rank && d; i++) d[i] = ir_dim_const(s->dims[i]);
        ir_out(c, 0, s->values ? s->values->dtype : KILN_DTYPE_UNDEFINED, s->rank, d);
        return;
    }
    if ((a = ir_attr_get(c, "value_int")) && a->type == IR_ATTR_INT) {
        ir_out(c, 0, KILN_DTYPE_INT64, 0, NULL);
        ir_known *kv = ir_kv_new(c, KILN_DTYPE_INT64, 1, false);
        if (kv) kv->e[0] = ir_dim_const(a->i);
        ir_out_kv(c, 0, kv);
        return;
    }
    if ((a = ir_attr_get(c, "value_ints")) && a->type == IR_ATTR_INTS) {
        ir_dim *d = ir_dims_new(c, 1);
        if (!d) return;
        d[0] = ir_dim_const(a->n);
        ir_out(c, 0, KILN_DTYPE_INT64, 1, d);
        ir_known *kv = ir_kv_new(c, KILN_DTYPE_INT64, a->n, false);
        if (kv)
            for (int32_t i = 0; i < a->n; i++) kv->e[i] = ir_dim_const(a->ints[i]);
        ir_out_kv(c, 0, kv);
        return;
    }
    if ((a = ir_attr_get(c, "value_float")) && a->type == IR_ATTR_FLOAT) {
        ir_out(c, 0, KILN_DTYPE_FLOAT, 0, NULL);
        ir_known *kv = ir_kv_new(c, KILN_DTYPE_FLOAT, 1, true);
        if (kv) kv->f[0] = a->f;
        ir_out_kv(c, 0, kv);
        return;
    }
    if ((a = ir_attr_get(c, "value_floats")) && a->type == IR_ATTR_FLOATS) {
        ir_dim *d = ir_dims_new(c, 1);
        if (!d) return;
        d[0] = ir_dim_const(a->n);
        ir_out(c, 0, KILN_DTYPE_FLOAT, 1, d);
        ir_known *kv = ir_kv_new(c, KILN_DTYPE_FLOAT, a->n, true);
        if (kv)
            for (int32_t i = 0; i < a->n; i++) kv->f[i] = a->floats[i];
        ir_out_kv(c, 0, kv);
        return;
    }
    if ((a = ir_attr_get(c, "value_string")) && a->type == IR_ATTR_STRING) {
        ir_out(c, 0, KILN_DTYPE_STRING, 0, NULL);
        return;
    }
    if ((a = ir_attr_get(c, "value_strings")) && a->type == IR_ATTR_STRINGS) {
        ir_dim *d = ir_dims_new(c, 1);
        if (!d) return;
        d[0] = ir_dim_const(a->n);
        ir_out(c, 0, KILN_DTYPE_STRING, 1, d);
        return;
    }
    diag *d = ir_err(c, "shape-attr-invalid", "Constant has no value attribute (value, value_int(s), value_float(s), ...)");
    ir_hint(c, d, "a Constant needs exactly one value_* attribute");
}

void ir_infer_constant_of_shape(ir_ictx *c) {
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    const ir_attr *a = ir_attr_get(c, "value");
    ir_known *val = NULL;
    if (a && a->type == IR_ATTR_TENSOR && a->t) {
        dt = a->t->dtype;
        val = infer_kv_from_tensor(c->p, a->t);
    }
    const ir_known *kv = ir_in_kv(c, 0);
    if (!kv || !kv->e || kv->n > IR_MAX_RANK) {
        int32_t rs = ir_in_rank(c, 0);
        ir_dim k = ir_in_dim(c, 0, 0);
        if (rs == 1 && k.kind == IR_DIM_CONST && k.value <= IR_MAX_RANK) {
            ir_out(c, 0, dt, (int32_t)k.value, k.value ? ir_dims_new(c, (int32_t)k.value) : NULL);
        } else {
            ir_out(c, 0, dt, -1, NULL);
        }
        return;
    }
    ir_dim *out = kv->n ? ir_dims_new(c, kv->n) : NULL;
    if (kv->n && !out) return;
    for (int32_t i = 0; i < kv->n; i++) {
        if (kv->e[i].kind == IR_DIM_CONST && kv->e[i].value < 0) {
            diag *d = ir_err(c, "shape-negative-dim", "the requested shape has a negative size %" PRId64 " at axis %d",
                             kv->e[i].value, i);
            ir_fact_input(c, d, 0);
            return;
        }
        out[i] = kv->e[i];
    }
    ir_out(c, 0, dt, kv->n, out);
    ir_dim cnt = ir_dims_product(c->m, out, kv->n);
    if (cnt.kind == IR_DIM_CONST && cnt.value <= IR_KV_MAX && val && val->n == 1) {
        ir_known *o = ir_kv_new(c, dt, (int32_t)cnt.value, val->f != NULL);
        if (!o) return;
        for (int32_t i = 0; i < o->n; i++) {
            if (val->e) o->e[i] = val->e[0];
            else o->f[i] = val->f[0];
        }
        ir_out_kv(c, 0, o);
    }
}

void ir_infer_shape(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    ir_dim *od = ir_dims_new(c, 1);
    if (!od) return;
    if (r < 0) {
        ir_out(c, 0, KILN_DTYPE_INT64, 1, od);
        return;
    }
    int64_t s = ir_ai(c, "start", 0), e = ir_ai(c, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    if (s < 0) s = 0;
    if (s > r) s = r;
    if (e < 0) e = 0;
    if (e > r) e = r;
    int32_t n = e > s ? (int32_t)(e - s) : 0;
    od[0] = ir_dim_const(n);
    ir_out(c, 0, KILN_DTYPE_INT64, 1, od);
    ir_known *kv = ir_kv_new(c, KILN_DTYPE_INT64, n, false);
    if (!kv) return;
    for (int32_t i = 0; i < n; i++) kv->e[i] = ir_in_dim(c, 0, (int32_t)s + i);
    ir_out_kv(c, 0, kv);
}

void ir_infer_size(ir_ictx *c) {
    ir_out(c, 0, KILN_DTYPE_INT64, 0, NULL);
    int32_t r = ir_in_rank(c, 0);
    if (r < 0) return;
    ir_known *kv = ir_kv_new(c, KILN_DTYPE_INT64, 1, false);
    if (!kv) return;
    kv->e[0] = ir_dims_product(c->m, ir_in(c, 0)->dims, r);
    ir_out_kv(c, 0, kv);
}

void ir_infer_dropout(ir_ictx *c) {
    ir_out_like(c, 0, 0);
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    /* mask: bool from opset 10, the data type before */
    ir_out(c, 1, c->opset >= 10 ? KILN_DTYPE_BOOL : ir_in_dt(c, 0), r, r > 0 ? t->dims : NULL);
}

void ir_infer_eyelike(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    if (r >= 0 && r != 2) {
        diag *d = ir_err(c, "shape-rank", "EyeLike needs a 2-D input, got rank %d", r);
        ir_fact_input(c, d, 0);
        return;
    }
    int64_t dt = ir_ai(c, "dtype", ir_in_dt(c, 0));
    const ir_type *t = ir_in(c, 0);
    ir_out(c, 0, valid_dtype(dt) ? (kiln_dtype)dt : ir_in_dt(c, 0), r, r > 0 ? t->dims : NULL);
}

void ir_infer_random(ir_ictx *c) {
    const int64_t *s;
    int32_t n;
    int64_t dt = ir_ai(c, "dtype", KILN_DTYPE_FLOAT);
    if (!ir_aints(c, "shape", &s, &n) || n > IR_MAX_RANK) {
        ir_err(c, "shape-attr-invalid", "required attribute 'shape' is missing");
        return;
    }
    ir_dim *d = n ? ir_dims_new(c, n) : NULL;
    if (n && !d) return;
    for (int32_t i = 0; i < n; i++) d[i] = ir_dim_const(s[i]);
    ir_out(c, 0, valid_dtype(dt) ? (kiln_dtype)dt : KILN_DTYPE_FLOAT, n, d);
}

void ir_infer_random_like(ir_ictx *c) {
    int64_t dt = ir_ai(c, "dtype", ir_in_dt(c, 0));
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_out(c, 0, valid_dtype(dt) ? (kiln_dtype)dt : ir_in_dt(c, 0), r, r > 0 ? t->dims : NULL);
}

void ir_infer_range(ir_ictx *c) {
    int32_t ins[3] = {0, 1, 2};
    kiln_dtype dt;
    if (!ir_same_dtype(c, ins, 3, &dt)) return;
    for (int32_t i = 0; i < 3; i++) {
        int32_t r = ir_in_rank(c, i);
        if (r > 0 && !(r == 1 && ir_dim_is(ir_in_dim(c, i, 0), 1))) {
            diag *d = ir_err(c, "shape-rank", "Range's %s must be a scalar, got %s", i == 0 ? "start" : i == 1 ? "limit" : "delta",
                             ir_shapestr(c, ir_in(c, i)));
            ir_fact_input(c, d, i);
            return;
        }
    }
    ir_dim *out = ir_dims_new(c, 1);
    if (!out) return;
    const ir_known *s = ir_in_kv(c, 0), *l = ir_in_kv(c, 1), *d = ir_in_kv(c, 2);
    out[0] = ir_dim_unknown();
    if (s && l && d && s->n == 1 && l->n == 1 && d->n == 1) {
        if (s->e && l->e && d->e && d->e[0].kind == IR_DIM_CONST) {
            int64_t delta = d->e[0].value;
            if (delta == 0) {
                diag *dg = ir_err(c, "shape-attr-invalid", "Range's delta is 0");
                ir_fact_input(c, dg, 2);
                return;
            }
            ir_dim span = ir_dim_sub(c->m, l->e[0], s->e[0]);
            ir_dim n = delta > 0 ? ir_dim_ceildiv(c->m, span, ir_dim_const(delta))
                                 : ir_dim_ceildiv(c->m, ir_dim_sub(c->m, ir_dim_const(0), span), ir_dim_const(-delta));
            if (n.kind == IR_DIM_CONST && n.value < 0) n = ir_dim_const(0);
            out[0] = n;
            if (n.kind == IR_DIM_CONST && n.value <= IR_KV_MAX && s->e[0].kind == IR_DIM_CONST) {
                ir_known *o = ir_kv_new(c, dt, (int32_t)n.value, false);
                if (o) {
                    for (int32_t i = 0; i < o->n; i++) o->e[i] = ir_dim_const(s->e[0].value + i * delta);
                    ir_out(c, 0, dt, 1, out);
                    ir_out_kv(c, 0, o);
                    return;
                }
            }
        } else if (s->f && l->f && d->f && d->f[0] != 0) {
            double n = ceil((l->f[0] - s->f[0]) / d->f[0]);
            if (n < 0) n = 0;
            if (n < 9e15) out[0] = ir_dim_const((int64_t)n);
        }
    }
    ir_out(c, 0, dt, 1, out);
}
