/* ops_control.c - inference for control flow (If, Loop, Scan) and sequence ops.
 *
 * Subgraphs are inferred in place with their formal inputs typed from the node (Loop's
 * iteration count and condition, carried values; Scan's per-iteration slices) and with
 * the enclosing graphs' values visible. Node outputs merge what the branches/iterations
 * can produce: equal dims stay, differing ones become unknown. */
#include <string.h>

#include "ir/ops/ops.h"

static ir_graph *graph_attr(ir_ictx *c, const char *name) {
    const ir_attr *a = ir_attr_get(c, name);
    return (a && a->type == IR_ATTR_GRAPH) ? a->g : NULL;
}

static const ir_type *sub_out(const ir_graph *g, int32_t i) {
    if (!g || i < 0 || i >= g->n_outputs) return NULL;
    int32_t v = g->outputs[i];
    return (v >= 0 && v < g->n_values) ? &g->values[v].type : NULL;
}

/* Merges two possible types of one value (branches of an If, a loop's first and later
 * iterations). */
static ir_type merge(ir_ictx *c, const ir_type *a, const ir_type *b) {
    ir_type t;
    memset(&t, 0, sizeof t);
    t.rank = -1;
    if (!a && !b) return t;
    if (!a || a->kind == IR_TYPE_UNKNOWN) return b ? *b : t;
    if (!b || b->kind == IR_TYPE_UNKNOWN) return *a;
    if (a->kind != b->kind) return *b; /* e.g. an optional initial value, a plain body result */
    if (a->kind != IR_TYPE_TENSOR) return *a;
    t.kind = IR_TYPE_TENSOR;
    t.dtype = a->dtype ? a->dtype : b->dtype;
    if (a->rank < 0 || b->rank < 0 || a->rank != b->rank) return t;
    t.rank = a->rank;
    t.dims = a->rank ? ir_dims_new(c, a->rank) : NULL;
    if (a->rank && !t.dims) {
        t.rank = -1;
        return t;
    }
    for (int32_t i = 0; i < a->rank; i++)
        t.dims[i] = ir_dim_eq(c->m, a->dims[i], b->dims[i]) == IR_DIM_EQ ? a->dims[i] : ir_dim_unknown();
    return t;
}

void ir_infer_if(ir_ictx *c) {
    ir_graph *tg = graph_attr(c, "then_branch"), *eg = graph_attr(c, "else_branch");
    if (!tg || !eg) {
        ir_err(c, "shape-attr-invalid", "If needs then_branch and else_branch graphs");
        return;
    }
    /* a condition known at build time (shape tests in exported code) picks one branch; the
     * other may be invalid for these shapes by design, so it is not inferred at all */
    const ir_known *cond = ir_in_kv(c, 0);
    int taken = (cond && cond->e && cond->n == 1 && cond->e[0].kind == IR_DIM_CONST) ? (cond->e[0].value != 0) : -1;
    if (taken != 0 && !ir_infer_subgraph(c, tg, NULL, 0)) return;
    if (taken != 1 && !ir_infer_subgraph(c, eg, NULL, 0)) return;
    if (tg->n_outputs != eg->n_outputs || tg->n_outputs != ir_nout(c)) {
        diag *d = ir_err(c, "shape-if-outputs", "then_branch has %d outputs, else_branch %d, the node %d", tg->n_outputs,
                         eg->n_outputs, ir_nout(c));
        ir_hint(c, d, "both branches must produce one value per If output");
        return;
    }
    for (int32_t o = 0; o < ir_nout(c); o++) {
        const ir_type *a = sub_out(tg, o), *b = sub_out(eg, o);
        if (taken >= 0) {
            const ir_type *pick = taken ? a : b;
            if (pick) ir_out_type(c, o, pick);
            continue;
        }
        ir_type t = merge(c, a, b);
        ir_out_type(c, o, &t);
    }
}

void ir_infer_loop(ir_ictx *c) {
    ir_graph *body = graph_attr(c, "body");
    if (!body) {
        ir_err(c, "shape-attr-invalid", "Loop needs a body graph");
        return;
    }
    int32_t n_carried = ir_nin(c) - 2;
    if (n_carried < 0 || body->n_inputs != n_carried + 2 || body->n_outputs < n_carried + 1) {
        diag *d = ir_err(c, "shape-loop-signature", "the body has %d inputs and %d outputs for %d loop-carried values",
                         body->n_inputs, body->n_outputs, n_carried < 0 ? 0 : n_carried);
        ir_hint(c, d, "the body takes (iteration, condition, carried...) and returns (condition, carried..., scan outputs...)");
        return;
    }
    int32_t n_scan = body->n_outputs - 1 - n_carried;
    ir_type scalar_i64 = {.kind = IR_TYPE_TENSOR, .dtype = KILN_DTYPE_INT64, .rank = 0};
    ir_type scalar_b = {.kind = IR_TYPE_TENSOR, .dtype = KILN_DTYPE_BOOL, .rank = 0};
    const ir_type *in_types[4096];
    if (n_carried + 2 > 4096) return;
    in_types[0] = &scalar_i64;
    in_types[1] = &scalar_b;
    for (int32_t i = 0; i < n_carried; i++) in_types[2 + i] = ir_in(c, 2 + i);
    if (!ir_infer_subgraph(c, body, in_types, n_carried + 2)) return;
    for (int32_t i = 0; i < n_carried; i++) {
        ir_type t = merge(c, ir_in(c, 2 + i), sub_out(body, 1 + i));
        ir_out_type(c, i, &t);
    }
    ir_dim trip = ir_dim_unknown();
    const ir_known *m = ir_in_kv(c, 0);
    if (m && m->e && m->n == 1 && !ir_has(c, 1)) trip = m->e[0];
    for (int32_t k = 0; k < n_scan; k++) {
        const ir_type *s = sub_out(body, 1 + n_carried + k);
        if (!s || s->kind != IR_TYPE_TENSOR || s->rank < 0 || s->rank + 1 > IR_MAX_RANK) {
            ir_out(c, n_carried + k, s ? s->dtype : KILN_DTYPE_UNDEFINED, -1, NULL);
            continue;
        }
        ir_dim *d = ir_dims_new(c, s->rank + 1);
        if (!d) return;
        d[0] = trip;
        for (int32_t i = 0; i < s->rank; i++) d[i + 1] = s->dims[i];
        ir_out(c, n_carried + k, s->dtype, s->rank + 1, d);
    }
}

/* A tensor type with one axis removed (a scan slice). */
static ir_type drop_axis(ir_ictx *c, const ir_type *t, int32_t ax) {
    ir_type o;
    memset(&o, 0, sizeof o);
    o.rank = -1;
    if (!t || t->kind != IR_TYPE_TENSOR) return o;
    o.kind = IR_TYPE_TENSOR;
    o.dtype = t->dtype;
    if (t->rank < 1 || ax < 0 || ax >= t->rank) return o;
    o.rank = t->rank - 1;
    o.dims = o.rank ? ir_dims_new(c, o.rank) : NULL;
    if (o.rank && !o.dims) {
        o.rank = -1;
        return o;
    }
    for (int32_t i = 0, k = 0; i < t->rank; i++)
        if (i != ax) o.dims[k++] = t->dims[i];
    return o;
}

void ir_infer_scan(ir_ictx *c) {
    ir_graph *body = graph_attr(c, "body");
    int64_t n_scan_in = ir_ai(c, "num_scan_inputs", -1);
    bool v8 = c->opset < 9;
    int32_t first = v8 ? 1 : 0; /* opset 8: optional sequence_lens first, batch axis on everything */
    int32_t n_in = ir_nin(c) - first;
    if (!body || n_scan_in < 1 || n_scan_in > n_in) {
        ir_err(c, "shape-attr-invalid", "Scan needs a body and 1 <= num_scan_inputs <= %d", n_in);
        return;
    }
    int32_t n_state = n_in - (int32_t)n_scan_in;
    if (body->n_inputs != n_in || body->n_outputs < n_state || n_in > 1024) {
        diag *d = ir_err(c, "shape-loop-signature", "the body has %d inputs and %d outputs for %d states and %d scan inputs",
                         body->n_inputs, body->n_outputs, n_state, (int)n_scan_in);
        (void)d;
        return;
    }
    ir_type slices[1024];
    const ir_type *in_types[1024];
    const int64_t *axes;
    int32_t n_axes;
    ir_aints(c, "scan_input_axes", &axes, &n_axes);
    ir_dim seq = ir_dim_unknown();
    for (int32_t i = 0; i < n_in; i++) {
        const ir_type *t = ir_in(c, first + i);
        if (i < n_state) {
            slices[i] = v8 ? drop_axis(c, t, 0) : (t ? *t : (ir_type){.rank = -1});
        } else {
            int32_t k = i - n_state;
            int64_t ax = (k < n_axes && axes) ? axes[k] : 0;
            int32_t r = ir_in_rank(c, first + i);
            if (r >= 0 && ax < 0) ax += r;
            if (v8) {
                ir_type tmp = drop_axis(c, t, 0);
                slices[i] = drop_axis(c, &tmp, 0);
                if (r >= 2) seq = ir_in_dim(c, first + i, 1);
            } else {
                slices[i] = drop_axis(c, t, (int32_t)ax);
                if (r > ax && ax >= 0) seq = ir_in_dim(c, first + i, (int32_t)ax);
            }
        }
        in_types[i] = &slices[i];
    }
    if (!ir_infer_subgraph(c, body, in_types, n_in)) return;
    ir_dim batch = v8 && ir_in_rank(c, first) > 0 ? ir_in_dim(c, first, 0) : ir_dim_unknown();
    for (int32_t i = 0; i < n_state; i++) {
        const ir_type *s = sub_out(body, i);
        if (v8 && s && s->kind == IR_TYPE_TENSOR && s->rank >= 0 && s->rank < IR_MAX_RANK) {
            ir_dim *d = ir_dims_new(c, s->rank + 1);
            if (!d) return;
            d[0] = batch;
            for (int32_t k = 0; k < s->rank; k++) d[k + 1] = s->dims[k];
            ir_out(c, i, s->dtype, s->rank + 1, d);
        } else if (s) {
            ir_out_type(c, i, s);
        }
    }
    const int64_t *oaxes;
    int32_t n_oaxes;
    ir_aints(c, "scan_output_axes", &oaxes, &n_oaxes);
    for (int32_t k = 0; n_state + k < body->n_outputs; k++) {
        const ir_type *s = sub_out(body, n_state + k);
        if (!s || s->kind != IR_TYPE_TENSOR || s->rank < 0 || s->rank + 2 > IR_MAX_RANK) {
            ir_out(c, n_state + k, s ? s->dtype : KILN_DTYPE_UNDEFINED, -1, NULL);
            continue;
        }
        int32_t extra = v8 ? 2 : 1;
        int32_t r = s->rank + extra;
        int64_t ax = (!v8 && k < n_oaxes && oaxes) ? oaxes[k] : 0;
        if (ax < 0) ax += r;
        if (ax < 0 || ax >= r) {
            ir_err(c, "shape-attr-invalid", "scan_output_axes entry %d is out of range for rank %d", k, r);
            return;
        }
        ir_dim *d = ir_dims_new(c, r);
        if (!d) return;
        if (v8) {
            d[0] = batch;
            d[1] = seq;
            for (int32_t i = 0; i < s->rank; i++) d[i + 2] = s->dims[i];
        } else {
            for (int32_t i = 0, q = 0; i < r; i++) d[i] = i == ax ? seq : s->dims[q++];
        }
        ir_out(c, n_state + k, s->dtype, r, d);
    }
}

/* ---- sequences ---------------------------------------------------------------------- */

static void out_seq(ir_ictx *c, int32_t o, const ir_type *elem) {
    ir_type *e = ARENA_NEW(&c->m->arena, ir_type);
    if (!e) return;
    if (elem) *e = *elem;
    else e->rank = -1;
    ir_type t;
    memset(&t, 0, sizeof t);
    t.kind = IR_TYPE_SEQUENCE;
    t.rank = -1;
    t.elem = e;
    ir_out_type(c, o, &t);
}

static const ir_type *seq_elem(ir_ictx *c, int32_t i) {
    const ir_type *t = ir_in(c, i);
    return (t && t->kind == IR_TYPE_SEQUENCE) ? t->elem : NULL;
}

void ir_infer_seq_construct(ir_ictx *c) {
    ir_type e = {.rank = -1};
    for (int32_t i = 0; i < ir_nin(c); i++) e = i == 0 ? *ir_in(c, 0) : merge(c, &e, ir_in(c, i));
    out_seq(c, 0, &e);
}

void ir_infer_seq_empty(ir_ictx *c) {
    int64_t dt = ir_ai(c, "dtype", KILN_DTYPE_FLOAT);
    ir_type e = {.kind = IR_TYPE_TENSOR, .dtype = dt > 0 && dt < KILN_DTYPE_COUNT ? (kiln_dtype)dt : KILN_DTYPE_FLOAT, .rank = -1};
    out_seq(c, 0, &e);
}

void ir_infer_seq_at(ir_ictx *c) {
    const ir_type *e = seq_elem(c, 0);
    if (e) ir_out_type(c, 0, e);
}

void ir_infer_seq_length(ir_ictx *c) { ir_out(c, 0, KILN_DTYPE_INT64, 0, NULL); }

void ir_infer_seq_insert(ir_ictx *c) {
    ir_type e = merge(c, seq_elem(c, 0), ir_in(c, 1));
    out_seq(c, 0, &e);
}

void ir_infer_seq_erase(ir_ictx *c) { ir_out_like(c, 0, 0); }

void ir_infer_split_to_seq(ir_ictx *c) {
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_type e = {.kind = IR_TYPE_TENSOR, .dtype = ir_in_dt(c, 0), .rank = -1};
    if (r >= 1) {
        int32_t ax;
        if (!ir_axis(c, ir_ai(c, "axis", 0), r, "axis", &ax)) return;
        bool drop = !ir_has(c, 1) && ir_ai(c, "keepdims", 1) == 0;
        e = drop ? drop_axis(c, t, ax) : *t;
        if (!drop && e.rank > 0) {
            ir_dim *d = ir_dims_new(c, e.rank);
            if (!d) return;
            memcpy(d, t->dims, sizeof *d * (size_t)e.rank);
            d[ax] = ir_dim_unknown();
            e.dims = d;
        }
    }
    out_seq(c, 0, &e);
}

void ir_infer_concat_from_seq(ir_ictx *c) {
    const ir_type *e = seq_elem(c, 0);
    if (!e || e->kind != IR_TYPE_TENSOR || e->rank < 0) {
        ir_out(c, 0, e ? e->dtype : KILN_DTYPE_UNDEFINED, -1, NULL);
        return;
    }
    bool new_axis = ir_ai(c, "new_axis", 0) != 0;
    int32_t r = e->rank + (new_axis ? 1 : 0), ax;
    if (r < 1 || r > IR_MAX_RANK) return;
    if (!ir_axis(c, ir_ai(c, "axis", 0), r, "axis", &ax)) return;
    ir_dim *d = ir_dims_new(c, r);
    if (!d) return;
    for (int32_t i = 0, k = 0; i < r; i++) {
        if (new_axis && i == ax) {
            d[i] = ir_dim_unknown();
            continue;
        }
        d[i] = i == ax ? ir_dim_unknown() : e->dims[k];
        k++;
    }
    ir_out(c, 0, e->dtype, r, d);
}
