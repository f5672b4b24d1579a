/* infer_ctx.c - the helpers op inference functions use (declared in ops/ops.h):
 * reading inputs and attributes, setting outputs and known values, and reporting
 * diagnostics that name the node, the shapes and where each input came from. Every
 * accessor is bounds-checked so op code can stay short without trusting the model. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/strbuf.h"
#include "diag/provenance.h"
#include "ir/infer_internal.h"
#include "ir/ops/ops.h"
#include "ir/symdim.h"

/* ---- inputs ------------------------------------------------------------------------- */

int32_t ir_nin(const ir_ictx *c) { return c->n->n_inputs; }

static int32_t in_vid(const ir_ictx *c, int32_t i) {
    if (i < 0 || i >= c->n->n_inputs) return IR_NONE;
    int32_t v = c->n->inputs[i];
    return (v >= 0 && v < c->g->n_values) ? v : IR_NONE;
}

bool ir_has(const ir_ictx *c, int32_t i) { return in_vid(c, i) != IR_NONE; }

const ir_type *ir_in(const ir_ictx *c, int32_t i) {
    int32_t v = in_vid(c, i);
    return v == IR_NONE ? NULL : &c->g->values[v].type;
}

int32_t ir_in_rank(const ir_ictx *c, int32_t i) {
    const ir_type *t = ir_in(c, i);
    if (!t || t->kind != IR_TYPE_TENSOR || t->rank < 0 || t->rank > IR_MAX_RANK) return -1;
    if (t->rank > 0 && !t->dims) return -1;
    return t->rank;
}

kiln_dtype ir_in_dt(const ir_ictx *c, int32_t i) {
    const ir_type *t = ir_in(c, i);
    if (!t || (t->kind != IR_TYPE_TENSOR && t->kind != IR_TYPE_SPARSE_TENSOR)) return KILN_DTYPE_UNDEFINED;
    return kiln_dtype_valid(t->dtype) ? t->dtype : KILN_DTYPE_UNDEFINED;
}

ir_dim ir_in_dim(const ir_ictx *c, int32_t i, int32_t axis) {
    int32_t r = ir_in_rank(c, i);
    if (axis < 0 || axis >= r) return ir_dim_unknown();
    return ir_in(c, i)->dims[axis];
}

const ir_known *ir_in_kv(const ir_ictx *c, int32_t i) {
    int32_t v = in_vid(c, i);
    if (v == IR_NONE) return NULL;
    vstate *s = infer_vstate(c->p, c->g, v);
    return s ? s->kv : NULL;
}

const char *ir_in_name(const ir_ictx *c, int32_t i) {
    int32_t v = in_vid(c, i);
    return v == IR_NONE ? "" : c->g->values[v].name;
}

bool ir_in_ints(const ir_ictx *c, int32_t i, int64_t *out, int32_t cap, int32_t *n) {
    const ir_known *kv = ir_in_kv(c, i);
    if (!kv || !kv->e || kv->n > cap) return false;
    for (int32_t k = 0; k < kv->n; k++) {
        if (kv->e[k].kind != IR_DIM_CONST) return false;
        out[k] = kv->e[k].value;
    }
    *n = kv->n;
    return true;
}

/* ---- attributes --------------------------------------------------------------------- */

const ir_attr *ir_attr_get(const ir_ictx *c, const char *name) { return ir_node_attr(c->n, name); }

int64_t ir_ai(const ir_ictx *c, const char *name, int64_t dflt) { return ir_node_attr_int(c->n, name, dflt); }

float ir_af(const ir_ictx *c, const char *name, float dflt) { return ir_node_attr_float(c->n, name, dflt); }

bool ir_aints(const ir_ictx *c, const char *name, const int64_t **v, int32_t *n) {
    const ir_attr *a = ir_node_attr(c->n, name);
    *v = NULL;
    *n = 0;
    if (!a || a->type != IR_ATTR_INTS || a->n < 0 || (a->n > 0 && !a->ints)) return false;
    *v = a->ints;
    *n = a->n;
    return true;
}

bool ir_astr_is(const ir_ictx *c, const char *name, const char *dflt, const char *s) {
    const ir_attr *a = ir_node_attr(c->n, name);
    if (!a || a->type != IR_ATTR_STRING) return strcmp(dflt, s) == 0;
    size_t len = strlen(s);
    return a->s.len == len && (len == 0 || memcmp(a->s.data, s, len) == 0);
}

const char *ir_astr(const ir_ictx *c, const char *name, const char *dflt) {
    const ir_attr *a = ir_node_attr(c->n, name);
    if (!a || a->type != IR_ATTR_STRING || a->s.len > 4096) return dflt;
    char *r = arena_strndup(&c->m->arena, a->s.data ? a->s.data : "", a->s.data ? (size_t)a->s.len : 0);
    return r ? r : dflt;
}

/* ---- outputs ------------------------------------------------------------------------ */

int32_t ir_nout(const ir_ictx *c) { return c->n->n_outputs; }

static int32_t out_vid(const ir_ictx *c, int32_t i) {
    if (i < 0 || i >= c->n->n_outputs) return IR_NONE;
    int32_t v = c->n->outputs[i];
    return (v >= 0 && v < c->g->n_values) ? v : IR_NONE;
}

ir_dim *ir_dims_new(ir_ictx *c, int32_t rank) {
    if (rank <= 0 || rank > IR_MAX_RANK) return NULL;
    ir_dim *d = arena_calloc(&c->m->arena, (size_t)rank, sizeof *d);
    if (!d) c->p->oom = true;
    return d;
}

ir_type *ir_out_ptr(ir_ictx *c, int32_t i) {
    int32_t v = out_vid(c, i);
    return v == IR_NONE ? NULL : &c->g->values[v].type;
}

void ir_out(ir_ictx *c, int32_t i, kiln_dtype dt, int32_t rank, ir_dim *dims) {
    if (c->failed) return;
    ir_type *t = ir_out_ptr(c, i);
    if (!t) return;
    if (rank > IR_MAX_RANK) {
        diag *d = ir_err(c, "shape-rank", "output %d would have rank %d, above kiln's limit of %d", i, rank,
                         IR_MAX_RANK);
        (void)d;
        return;
    }
    if (rank > 0 && !dims) rank = -1;
    for (int32_t k = 0; k < rank; k++) {
        if (dims[k].kind == IR_DIM_CONST && dims[k].value < 0) {
            diag *d = ir_err(c, "shape-negative-dim",
                             "output %d would have a negative size %" PRId64 " at axis %d", i, dims[k].value, k);
            for (int32_t in = 0; in < ir_nin(c) && in < 3; in++)
                if (ir_has(c, in)) ir_fact_input(c, d, in);
            ir_hint(c, d, "the input is smaller than this op needs (kernel, pads, slice bounds): "
                          "check the input size the model was exported for");
            return;
        }
    }
    memset(t, 0, sizeof *t);
    t->kind = IR_TYPE_TENSOR;
    t->dtype = dt;
    t->rank = rank < 0 ? -1 : rank;
    t->dims = rank > 0 ? dims : NULL;
}

void ir_out_type(ir_ictx *c, int32_t i, const ir_type *src) {
    if (c->failed || !src) return;
    ir_type *t = ir_out_ptr(c, i);
    if (t) *t = *src; /* dims arrays are never written in place, so sharing is safe */
}

void ir_out_like(ir_ictx *c, int32_t out, int32_t in) {
    const ir_type *t = ir_in(c, in);
    if (t && t->kind != IR_TYPE_UNKNOWN) ir_out_type(c, out, t);
    else ir_out(c, out, KILN_DTYPE_UNDEFINED, -1, NULL);
}

ir_known *ir_kv_new(ir_ictx *c, kiln_dtype dt, int32_t n, bool floats) {
    if (n < 0 || n > IR_KV_MAX) return NULL;
    ir_known *kv = arena_calloc(&c->p->a, 1, sizeof *kv);
    if (!kv) return NULL;
    kv->dtype = dt;
    kv->n = n;
    if (floats) kv->f = arena_calloc(&c->p->a, n ? (size_t)n : 1, sizeof *kv->f);
    else kv->e = arena_calloc(&c->p->a, n ? (size_t)n : 1, sizeof *kv->e);
    if (!kv->f && !kv->e) return NULL;
    return kv;
}

void ir_out_kv(ir_ictx *c, int32_t i, ir_known *kv) {
    int32_t v = out_vid(c, i);
    if (v == IR_NONE || c->failed) return;
    vstate *s = infer_vstate(c->p, c->g, v);
    if (s) s->kv = kv;
}

ir_dim ir_dim_fresh(ir_ictx *c, const char *what) {
    char *name = arena_printf(&c->m->arena, "%s.%s", c->n->name, what);
    if (!name) return ir_dim_unknown();
    return ir_dim_leaf(c->m, name);
}

ir_dim ir_dims_product(ir_model *m, const ir_dim *d, int32_t n) {
    ir_dim acc = ir_dim_const(1);
    for (int32_t i = 0; i < n; i++) {
        acc = ir_dim_mul(m, acc, d[i]);
        if (acc.kind == IR_DIM_UNKNOWN && !ir_dim_is(d[i], 0)) {
            /* a zero later still makes the product zero */
            for (int32_t k = i + 1; k < n; k++)
                if (ir_dim_is(d[k], 0)) return ir_dim_const(0);
            return acc;
        }
    }
    return acc;
}

/* ---- diagnostics -------------------------------------------------------------------- */

static diag *add_diag(ir_ictx *c, diag_severity sev, const char *code, const char *fmt, va_list ap) {
    strbuf sb;
    sb_init(&sb);
    sb_vprintf(&sb, fmt, ap);
    diag *d = diag_add(c->p->diags, sev, code, c->n->name, c->n->op_type, "%s", sb_cstr(&sb));
    sb_free(&sb);
    if (d && c->g->parent && c->g->location && c->g->location[0])
        d->graph = arena_strdup(&c->p->diags->arena, c->g->location);
    return d;
}

diag *ir_err(ir_ictx *c, const char *code, const char *fmt, ...) {
    if (c->failed) return NULL; /* one error per node: the rest follow from it */
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    diag *d = add_diag(c, DIAG_ERROR, code, fmt, ap);
    va_end(ap);
    return d;
}

diag *ir_warn(ir_ictx *c, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    diag *d = add_diag(c, DIAG_WARNING, code, fmt, ap);
    va_end(ap);
    return d;
}

void ir_fact(ir_ictx *c, diag *d, const char *fmt, ...) {
    if (!d) return;
    strbuf sb;
    sb_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    diag_fact(c->p->diags, d, "%s", sb_cstr(&sb));
    sb_free(&sb);
}

void ir_hint(ir_ictx *c, diag *d, const char *fmt, ...) {
    if (!d) return;
    strbuf sb;
    sb_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    diag_hint(c->p->diags, d, "%s", sb_cstr(&sb));
    sb_free(&sb);
}

void ir_fact_input(ir_ictx *c, diag *d, int32_t i) {
    if (!d) return;
    int32_t v = in_vid(c, i);
    if (v == IR_NONE) {
        ir_fact(c, d, "input %d is absent", i);
        return;
    }
    const ir_value *val = &c->g->values[v];
    const char *origin = diag_value_origin(c->g, v);
    ir_fact(c, d, "input %d '%s' is %s%s%s", i, val->name, ir_type_shape_str(c->m, &val->type),
            origin[0] ? " " : "", origin);
    const char *prov = diag_provenance(c->m, c->g, v);
    if (prov) ir_fact(c, d, "    %s", prov);
}

const char *ir_dimstr(ir_ictx *c, ir_dim d) {
    char buf[256];
    const char *r = arena_strdup(&c->m->arena, ir_dim_str(c->m, d, buf, sizeof buf));
    return r ? r : "?";
}

const char *ir_shapestr(ir_ictx *c, const ir_type *t) { return ir_type_shape_str(c->m, t); }

const char *ir_intsstr(ir_ictx *c, const int64_t *v, int32_t n) {
    strbuf sb;
    sb_init(&sb);
    sb_putc(&sb, '[');
    for (int32_t i = 0; i < n && i < 16; i++) sb_printf(&sb, "%s%" PRId64, i ? ", " : "", v[i]);
    if (n > 16) sb_append(&sb, ", ...");
    sb_putc(&sb, ']');
    const char *r = sb.failed ? NULL : arena_strdup(&c->m->arena, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "[...]";
}

bool ir_axis(ir_ictx *c, int64_t axis, int32_t rank, const char *what, int32_t *out) {
    if (rank < 0) return false;
    if (axis < -(int64_t)rank || axis >= rank) {
        diag *d = ir_err(c, "shape-attr-invalid", "%s %" PRId64 " is out of range for rank %d (valid: %d..%d)",
                         what, axis, rank, -rank, rank - 1);
        if (ir_has(c, 0)) ir_fact_input(c, d, 0);
        ir_hint(c, d, "use an axis in [%d, %d]; the input's rank may have changed since export", -rank, rank - 1);
        return false;
    }
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return true;
}

bool ir_broadcast(ir_ictx *c, const int32_t *inputs, int32_t n_in, int32_t *rank, ir_dim **dims) {
    int32_t r = 0;
    *rank = -1;
    *dims = NULL;
    for (int32_t k = 0; k < n_in; k++) {
        if (!ir_has(c, inputs[k])) continue;
        int32_t rk = ir_in_rank(c, inputs[k]);
        if (rk < 0) return true; /* unknown rank: unknown result, not an error */
        if (rk > r) r = rk;
    }
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return false;
    for (int32_t ax = 0; ax < r; ax++) { /* ax counts from the right */
        ir_dim res = ir_dim_const(1);
        int32_t res_from = -1;
        for (int32_t k = 0; k < n_in; k++) {
            int32_t in = inputs[k];
            if (!ir_has(c, in)) continue;
            int32_t rk = ir_in_rank(c, in);
            if (ax >= rk) continue;
            ir_dim d = ir_in_dim(c, in, rk - 1 - ax);
            if (ir_dim_is(d, 1)) continue;
            if (res_from < 0) {
                res = d;
                res_from = in;
                continue;
            }
            ir_dim_eq_result eq = ir_dim_eq(c->m, res, d);
            if (eq == IR_DIM_EQ) {
                if (res.kind == IR_DIM_UNKNOWN) res = d;
                continue;
            }
            if (eq == IR_DIM_NE && res.kind == IR_DIM_CONST && d.kind == IR_DIM_CONST) {
                const ir_type *ta = ir_in(c, res_from), *tb = ir_in(c, in);
                int32_t ra = ta->rank, rb = tb->rank;
                diag *dg = ir_err(c, "shape-broadcast",
                                  "inputs %d and %d cannot be broadcast: axis %d is %s in one and %s in the other",
                                  res_from, in, r - 1 - ax, ir_dimstr(c, res), ir_dimstr(c, d));
                ir_fact_input(c, dg, res_from);
                ir_fact_input(c, dg, in);
                bool a_init = ra == 1 && (c->g->values[c->n->inputs[res_from]].flags & IR_VALUE_INITIALIZER);
                bool b_init = rb == 1 && (c->g->values[c->n->inputs[in]].flags & IR_VALUE_INITIALIZER);
                if (a_init || b_init) {
                    int32_t bias = a_init ? res_from : in;
                    ir_hint(c, dg,
                            "the parameter '%s' has %s entries but the data's last axis has %s: the layer "
                            "that produces the data changed width; re-export with matching sizes, or resize "
                            "the parameter",
                            ir_in_name(c, bias), ir_dimstr(c, a_init ? res : d),
                            ir_dimstr(c, a_init ? d : res));
                } else {
                    ir_hint(c, dg,
                            "broadcasting needs equal sizes or 1 on each axis (aligned from the right); "
                            "make axis %d agree (reshape or slice one input), or insert an Unsqueeze "
                            "if the ranks were meant to line up differently",
                            r - 1 - ax);
                }
                return false;
            }
            /* maybe equal: a constant > 1 wins (the symbol must be it or 1); two different
             * symbols give an unknown dim rather than a guess */
            if (d.kind == IR_DIM_CONST) res = d;
            else if (res.kind == IR_DIM_CONST) continue;
            else res = ir_dim_unknown();
        }
        out[r - 1 - ax] = res;
    }
    *rank = r;
    *dims = out;
    return true;
}

bool ir_same_dtype(ir_ictx *c, const int32_t *inputs, int32_t n_in, kiln_dtype *dt) {
    kiln_dtype first = KILN_DTYPE_UNDEFINED;
    int32_t first_in = -1;
    for (int32_t k = 0; k < n_in; k++) {
        if (!ir_has(c, inputs[k])) continue;
        kiln_dtype d = ir_in_dt(c, inputs[k]);
        if (d == KILN_DTYPE_UNDEFINED) continue;
        if (first == KILN_DTYPE_UNDEFINED) {
            first = d;
            first_in = inputs[k];
            continue;
        }
        if (d != first) {
            diag *dg = ir_err(c, "type-mismatch", "inputs %d and %d have different element types: %s vs %s",
                              first_in, inputs[k], kiln_dtype_name(first), kiln_dtype_name(d));
            ir_fact(c, dg, "input %d '%s' is %s", first_in, ir_in_name(c, first_in), ir_type_str(c->m, ir_in(c, first_in)));
            ir_fact(c, dg, "input %d '%s' is %s", inputs[k], ir_in_name(c, inputs[k]), ir_type_str(c->m, ir_in(c, inputs[k])));
            ir_hint(c, dg,
                    "%s needs equal element types: insert a Cast to %s on input %d ('%s') before this "
                    "node (in PyTorch: .to(torch.%s) on that tensor before the operation)",
                    c->n->op_type, kiln_dtype_name(first), inputs[k], ir_in_name(c, inputs[k]),
                    kiln_dtype_name(first));
            return false;
        }
    }
    *dt = first;
    return true;
}
