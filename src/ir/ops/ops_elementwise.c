/* ops_elementwise.c - inference for elementwise ops: unary math/activations (output =
 * input type), binary and variadic ops with multidirectional broadcasting, comparisons
 * (bool out), Where, Softmax-family axis checks. Binary integer ops on known small values
 * (shape arithmetic such as Shape[0] * Shape[1], Equal(shape, -1)) compute known values
 * symbolically so later Reshapes resolve. */
#include <math.h>
#include <string.h>

#include "ir/ops/ops.h"

void ir_infer_unary(ir_ictx *c) {
    if (!ir_has(c, 0)) {
        ir_err(c, "shape-missing-input", "required input 0 is missing");
        return;
    }
    ir_out_like(c, 0, 0);
    if (strcmp(c->n->op_type, "Neg") == 0 || strcmp(c->n->op_type, "Abs") == 0) {
        const ir_known *kv = ir_in_kv(c, 0);
        if (kv && kv->e) {
            ir_known *o = ir_kv_new(c, kv->dtype, kv->n, false);
            if (!o) return;
            bool neg = c->n->op_type[0] == 'N';
            for (int32_t i = 0; i < kv->n; i++) {
                ir_dim d = kv->e[i];
                if (d.kind == IR_DIM_CONST && d.value != INT64_MIN)
                    o->e[i] = ir_dim_const(neg ? -d.value : (d.value < 0 ? -d.value : d.value));
                else if (d.kind == IR_DIM_SYM && !neg) o->e[i] = d; /* dims are non-negative */
                else o->e[i] = neg ? ir_dim_sub(c->m, ir_dim_const(0), d) : ir_dim_unknown();
            }
            ir_out_kv(c, 0, o);
        }
    }
}

void ir_infer_identity(ir_ictx *c) {
    if (!ir_has(c, 0)) {
        ir_err(c, "shape-missing-input", "required input 0 is missing");
        return;
    }
    ir_out_like(c, 0, 0);
    ir_out_kv(c, 0, (ir_known *)ir_in_kv(c, 0));
}

void ir_infer_unary_bool(ir_ictx *c) {
    const ir_type *t = ir_in(c, 0);
    if (!t) {
        ir_err(c, "shape-missing-input", "required input 0 is missing");
        return;
    }
    ir_out(c, 0, KILN_DTYPE_BOOL, ir_in_rank(c, 0), ir_in_rank(c, 0) > 0 ? t->dims : NULL);
}

void ir_infer_clip(ir_ictx *c) {
    int32_t ins[3] = {0, 1, 2};
    kiln_dtype dt;
    if (!ir_same_dtype(c, ins, ir_nin(c) < 3 ? ir_nin(c) : 3, &dt)) return;
    for (int32_t i = 1; i < 3; i++) {
        int32_t r = ir_in_rank(c, i);
        if (ir_has(c, i) && r > 0 && !(r == 1 && ir_dim_is(ir_in_dim(c, i, 0), 1))) {
            diag *d = ir_err(c, "shape-rank", "Clip's %s (input %d) must be a scalar but has shape %s",
                             i == 1 ? "min" : "max", i, ir_shapestr(c, ir_in(c, i)));
            ir_fact_input(c, d, i);
            ir_hint(c, d, "pass a 0-d tensor (torch.clamp with Python numbers exports one)");
            return;
        }
    }
    ir_out_like(c, 0, 0);
}

void ir_infer_softmax(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    int64_t dflt = c->opset >= 13 ? -1 : 1;
    int32_t ax;
    if (r >= 0 && !(r == 0 && c->opset < 13)) {
        if (r == 0) {
            ir_err(c, "shape-rank", "%s needs an input of rank >= 1, got a scalar", c->n->op_type);
            return;
        }
        if (!ir_axis(c, ir_ai(c, "axis", dflt), r, "axis", &ax)) return;
    }
    ir_out_like(c, 0, 0);
}

/* ---- known-value arithmetic --------------------------------------------------------- */

static int64_t trunc_div(int64_t a, int64_t b) { return a / b; }

/* Computes op(a, b) elementwise on known values when both are small and known. */
static void kv_binary(ir_ictx *c, const char *op, kiln_dtype out_dt) {
    const ir_known *a = ir_in_kv(c, 0), *b = ir_in_kv(c, 1);
    if (!a || !b || !a->e || !b->e) return;
    if (a->n != b->n && a->n != 1 && b->n != 1) return;
    const ir_type *t = ir_out_ptr(c, 0);
    if (!t || t->rank > 1) return;
    int32_t n = a->n > b->n ? a->n : b->n;
    ir_known *o = ir_kv_new(c, out_dt, n, false);
    if (!o) return;
    for (int32_t i = 0; i < n; i++) {
        ir_dim x = a->e[a->n == 1 ? 0 : i], y = b->e[b->n == 1 ? 0 : i];
        ir_dim r = ir_dim_unknown();
        if (!strcmp(op, "Add")) r = ir_dim_add(c->m, x, y);
        else if (!strcmp(op, "Sub")) r = ir_dim_sub(c->m, x, y);
        else if (!strcmp(op, "Mul")) r = ir_dim_mul(c->m, x, y);
        else if (!strcmp(op, "Div")) {
            if (x.kind == IR_DIM_CONST && y.kind == IR_DIM_CONST) {
                if (y.value != 0 && !(x.value == INT64_MIN && y.value == -1))
                    r = ir_dim_const(trunc_div(x.value, y.value));
            } else if (!(y.kind == IR_DIM_CONST && y.value < 0)) {
                r = ir_dim_floordiv(c->m, x, y); /* dims are non-negative: floor = trunc */
            }
        } else if (!strcmp(op, "Mod")) {
            if (ir_ai(c, "fmod", 0) == 0) r = ir_dim_mod(c->m, x, y);
        } else if (!strcmp(op, "Min")) r = ir_dim_min(c->m, x, y);
        else if (!strcmp(op, "Max")) r = ir_dim_max(c->m, x, y);
        else if (!strcmp(op, "Equal")) {
            ir_dim_eq_result e = ir_dim_eq(c->m, x, y);
            r = e == IR_DIM_MAYBE ? ir_dim_unknown() : ir_dim_const(e == IR_DIM_EQ);
        } else if (!strcmp(op, "Less") || !strcmp(op, "Greater")) {
            ir_dim d = !strcmp(op, "Less") ? ir_dim_sub(c->m, y, x) : ir_dim_sub(c->m, x, y);
            if (d.kind == IR_DIM_CONST) r = ir_dim_const(d.value > 0);
        } else if (!strcmp(op, "And")) {
            if (x.kind == IR_DIM_CONST && y.kind == IR_DIM_CONST) r = ir_dim_const(x.value && y.value);
        } else if (!strcmp(op, "Or")) {
            if (x.kind == IR_DIM_CONST && y.kind == IR_DIM_CONST) r = ir_dim_const(x.value || y.value);
        }
        o->e[i] = r;
    }
    ir_out_kv(c, 0, o);
}

static void binary_common(ir_ictx *c, bool same_type, bool bool_out) {
    if (!ir_has(c, 0) || !ir_has(c, 1)) {
        ir_err(c, "shape-missing-input", "%s needs two inputs", c->n->op_type);
        return;
    }
    int32_t ins[2] = {0, 1};
    kiln_dtype dt = ir_in_dt(c, 0);
    if (same_type && !ir_same_dtype(c, ins, 2, &dt)) return;
    /* opset < 7 Add/Mul/... had explicit broadcast=1 with axis: right-aligned is the
     * common case and what exporters produced; treat it as numpy broadcasting */
    int32_t r;
    ir_dim *dims;
    if (!ir_broadcast(c, ins, 2, &r, &dims)) return;
    ir_out(c, 0, bool_out ? KILN_DTYPE_BOOL : dt, r, dims);
    kv_binary(c, c->n->op_type, bool_out ? KILN_DTYPE_BOOL : dt);
}

void ir_infer_binary(ir_ictx *c) { binary_common(c, true, false); }
void ir_infer_compare(ir_ictx *c) { binary_common(c, true, true); }

void ir_infer_pow(ir_ictx *c) {
    /* Pow allows a different exponent type from opset 12 */
    binary_common(c, c->opset < 12, false);
    if (!c->failed) {
        ir_type *t = ir_out_ptr(c, 0);
        if (t) t->dtype = ir_in_dt(c, 0);
    }
}

void ir_infer_prelu(ir_ictx *c) {
    int32_t ins[2] = {0, 1};
    kiln_dtype dt;
    if (!ir_same_dtype(c, ins, 2, &dt)) return;
    int32_t r;
    ir_dim *dims;
    /* slope broadcasts to X (unidirectional); a mismatch is still a broadcast error */
    if (!ir_broadcast(c, ins, 2, &r, &dims)) return;
    ir_out_like(c, 0, 0);
}

void ir_infer_variadic(ir_ictx *c) {
    int32_t n = ir_nin(c);
    if (n < 1 || n > 1024) {
        ir_err(c, "shape-missing-input", "%s needs at least one input", c->n->op_type);
        return;
    }
    int32_t ins[1024];
    for (int32_t i = 0; i < n; i++) ins[i] = i;
    kiln_dtype dt;
    if (!ir_same_dtype(c, ins, n, &dt)) return;
    int32_t r;
    ir_dim *dims;
    if (!ir_broadcast(c, ins, n, &r, &dims)) return;
    ir_out(c, 0, dt, r, dims);
    if (n == 2 && (!strcmp(c->n->op_type, "Min") || !strcmp(c->n->op_type, "Max")))
        kv_binary(c, c->n->op_type, dt);
    if (n == 1) ir_out_kv(c, 0, (ir_known *)ir_in_kv(c, 0));
}

void ir_infer_where(ir_ictx *c) {
    if (ir_nin(c) < 3) {
        ir_err(c, "shape-missing-input", "Where needs condition, X and Y");
        return;
    }
    kiln_dtype cd = ir_in_dt(c, 0);
    if (cd != KILN_DTYPE_UNDEFINED && cd != KILN_DTYPE_BOOL) {
        diag *d = ir_err(c, "type-mismatch", "Where's condition must be bool, got %s", kiln_dtype_name(cd));
        ir_fact_input(c, d, 0);
        ir_hint(c, d, "insert a Cast to bool on the condition");
        return;
    }
    int32_t xy[2] = {1, 2};
    kiln_dtype dt;
    if (!ir_same_dtype(c, xy, 2, &dt)) return;
    int32_t ins[3] = {0, 1, 2};
    int32_t r;
    ir_dim *dims;
    if (!ir_broadcast(c, ins, 3, &r, &dims)) return;
    ir_out(c, 0, dt, r, dims);
    const ir_known *k = ir_in_kv(c, 0), *x = ir_in_kv(c, 1), *y = ir_in_kv(c, 2);
    if (k && x && y && k->e && x->e && y->e && r <= 1) {
        int32_t n = k->n;
        if (x->n > n) n = x->n;
        if (y->n > n) n = y->n;
        if ((k->n != n && k->n != 1) || (x->n != n && x->n != 1) || (y->n != n && y->n != 1)) return;
        ir_known *o = ir_kv_new(c, dt, n, false);
        if (!o) return;
        for (int32_t i = 0; i < n; i++) {
            ir_dim cond = k->e[k->n == 1 ? 0 : i];
            if (cond.kind != IR_DIM_CONST) o->e[i] = ir_dim_unknown();
            else o->e[i] = cond.value ? x->e[x->n == 1 ? 0 : i] : y->e[y->n == 1 ? 0 : i];
        }
        ir_out_kv(c, 0, o);
    }
}
