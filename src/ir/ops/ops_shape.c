/* ops_shape.c - inference for ops that rearrange tensors: Reshape, Flatten, Squeeze,
 * Unsqueeze, Concat, Split, Slice, Transpose, Expand, Tile, Pad, DepthToSpace,
 * SpaceToDepth, and same-shape data ops (Trilu, Scatter*, CumSum, ReverseSequence).
 *
 * Several of these moved attributes to inputs over the opset history (Reshape at 5,
 * Slice at 10, Pad at 11, Squeeze/Unsqueeze/Split at 13, ...): both forms are accepted,
 * whichever the node carries. Targets given as inputs are read from known values, whose
 * elements may be symbolic (Shape -> Gather -> Concat), so Reshape(x, [b, s, 12, 64])
 * resolves to [batch, seq_len, 12, 64]. Reshape, Concat, Slice, Squeeze, Unsqueeze and
 * Split also carry known values through, since shape subgraphs use them. */
#include <inttypes.h>
#include <string.h>

#include "ir/ops/ops.h"

#define BIG_END ((int64_t)2147483647) /* exporters' "to the end": INT32_MAX or INT64_MAX */

/* Ints from attribute `attr` if present, else from known input `in`.
 * Returns 1 when known, 0 when neither is given, -1 when the input exists but is not a
 * known constant. */
static int ints_arg(ir_ictx *c, const char *attr, int32_t in, int64_t *out, int32_t cap, int32_t *n) {
    const int64_t *v;
    int32_t an;
    *n = 0;
    if (attr && ir_aints(c, attr, &v, &an)) {
        if (an > cap) return -1;
        memcpy(out, v, sizeof *out * (size_t)an);
        *n = an;
        return 1;
    }
    if (in >= 0 && ir_has(c, in)) return ir_in_ints(c, in, out, cap, n) ? 1 : -1;
    return 0;
}

static ir_known *kv_copy(ir_ictx *c, const ir_known *kv) {
    if (!kv) return NULL;
    ir_known *o = ir_kv_new(c, kv->dtype, kv->n, kv->f != NULL);
    if (!o) return NULL;
    if (kv->e) memcpy(o->e, kv->e, sizeof *o->e * (size_t)kv->n);
    if (kv->f) memcpy(o->f, kv->f, sizeof *o->f * (size_t)kv->n);
    return o;
}

/* ---- Reshape ------------------------------------------------------------------------ */

/* Whether two element counts provably differ for non-empty tensors: provably unequal,
 * or one is a constant multiple (!= 1) of the other (64*b*s vs 768*b*s). */
static bool volumes_differ(ir_ictx *c, ir_dim a, ir_dim b) {
    if (ir_dim_eq(c->m, a, b) == IR_DIM_NE) return true;
    /* a - b a single product term (256*batch from 768*batch - 512*batch) can only be zero
     * when a symbol is 0; a batch or sequence length of 0 is no real use of a model, so
     * such volumes are taken to differ. A difference of several terms (batch*seq -
     * 128*batch) stays "maybe": it is zero for one particular size (seq = 128), which a
     * profile may be meant to use. */
    ir_dim diff = ir_dim_sub(c->m, a, b);
    if (diff.kind == IR_DIM_SYM && diff.sym >= 0 && diff.sym < c->m->n_syms) {
        ir_sym_op op = c->m->syms[diff.sym].op;
        if (op == IR_SYM_LEAF || op == IR_SYM_MUL) return true;
    }
    ir_dim q;
    if (ir_dim_div_exact(c->m, a, b, &q) && q.kind == IR_DIM_CONST && q.value != 1) return true;
    if (ir_dim_div_exact(c->m, b, a, &q) && q.kind == IR_DIM_CONST && q.value != 1) return true;
    return false;
}

void ir_infer_reshape(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_dim tgt[IR_MAX_RANK];
    int32_t nt = -1;
    const int64_t *av;
    int32_t an;
    if (ir_aints(c, "shape", &av, &an) && !ir_has(c, 1)) {
        if (an > IR_MAX_RANK) {
            ir_err(c, "shape-rank", "target shape has %d dims, above kiln's limit of %d", an, IR_MAX_RANK);
            return;
        }
        for (int32_t i = 0; i < an; i++) tgt[i] = ir_dim_const(av[i]);
        nt = an;
    } else {
        const ir_known *kv = ir_in_kv(c, 1);
        int32_t rs = ir_in_rank(c, 1);
        if (rs > 1) {
            diag *d = ir_err(c, "shape-rank", "the shape input must be 1-D, got %s", ir_shapestr(c, ir_in(c, 1)));
            ir_fact_input(c, d, 1);
            return;
        }
        if (kv && kv->e) {
            if (kv->n > IR_MAX_RANK) return;
            for (int32_t i = 0; i < kv->n; i++) tgt[i] = kv->e[i];
            nt = kv->n;
        } else if (rs == 1 && ir_in_dim(c, 1, 0).kind == IR_DIM_CONST && ir_in_dim(c, 1, 0).value <= IR_MAX_RANK) {
            int32_t k = (int32_t)ir_in_dim(c, 1, 0).value;
            ir_dim *out = ir_dims_new(c, k);
            if (k && !out) return;
            ir_out(c, 0, dt, k, out); /* rank known, dims unknown */
            return;
        } else {
            ir_out(c, 0, dt, -1, NULL);
            return;
        }
    }
    bool allowzero = ir_ai(c, "allowzero", 0) != 0;
    ir_dim *out = nt ? ir_dims_new(c, nt) : NULL;
    if (nt && !out) return;
    int32_t neg = -1;
    for (int32_t i = 0; i < nt; i++) {
        ir_dim d = tgt[i];
        if (d.kind == IR_DIM_CONST && d.value == 0 && !allowzero) {
            if (r >= 0 && i >= r) {
                diag *dg = ir_err(c, "shape-reshape-volume", "target dim %d is 0 (copy the input's dim) but the input has only %d dims", i, r);
                ir_fact_input(c, dg, 0);
                return;
            }
            out[i] = r >= 0 ? ir_in_dim(c, 0, i) : ir_dim_unknown();
        } else if (d.kind == IR_DIM_CONST && d.value == -1) {
            if (neg >= 0) {
                diag *dg = ir_err(c, "shape-attr-invalid", "target shape has more than one -1 (axes %d and %d)", neg, i);
                ir_fact_input(c, dg, 1);
                ir_hint(c, dg, "at most one dimension can be inferred; give the others explicitly");
                return;
            }
            neg = i;
            out[i] = ir_dim_unknown();
        } else if (d.kind == IR_DIM_CONST && d.value < -1) {
            diag *dg = ir_err(c, "shape-attr-invalid", "target dim %d is %" PRId64 "; only -1 (infer) and 0 (copy) are special", i, d.value);
            ir_fact_input(c, dg, 1);
            return;
        } else {
            out[i] = d;
        }
    }
    ir_dim total = r >= 0 ? ir_dims_product(c->m, ir_in(c, 0)->dims, r) : ir_dim_unknown();
    if (neg >= 0) {
        ir_dim known = ir_dim_const(1);
        for (int32_t i = 0; i < nt; i++)
            if (i != neg) known = ir_dim_mul(c->m, known, out[i]);
        ir_dim q;
        if (total.kind != IR_DIM_UNKNOWN && known.kind != IR_DIM_UNKNOWN && !ir_dim_is(known, 0)) {
            if (ir_dim_div_exact(c->m, total, known, &q)) {
                out[neg] = q;
            } else if (total.kind == IR_DIM_CONST && known.kind == IR_DIM_CONST) {
                diag *dg = ir_err(c, "shape-reshape-volume",
                                  "cannot reshape %s (%s elements) into %s: %s is not a multiple of the %s known elements",
                                  ir_shapestr(c, ir_in(c, 0)), ir_dimstr(c, total), ir_shapestr(c, &(ir_type){.kind = IR_TYPE_TENSOR, .rank = nt, .dims = out}),
                                  ir_dimstr(c, total), ir_dimstr(c, known));
                ir_fact_input(c, dg, 0);
                if (ir_has(c, 1)) ir_fact_input(c, dg, 1);
                ir_hint(c, dg, "the target shape was computed for a different input size: check the layer producing "
                               "the input (did its width change?) and the constants in the target shape");
                return;
            }
        }
    } else if (total.kind != IR_DIM_UNKNOWN) {
        ir_dim prod = ir_dims_product(c->m, out, nt);
        if (volumes_differ(c, total, prod)) {
            ir_type tt = {.kind = IR_TYPE_TENSOR, .rank = nt, .dims = out};
            diag *dg = ir_err(c, "shape-reshape-volume", "cannot reshape %s (%s elements) into %s (%s elements)",
                              ir_shapestr(c, ir_in(c, 0)), ir_dimstr(c, total), ir_shapestr(c, &tt), ir_dimstr(c, prod));
            ir_fact_input(c, dg, 0);
            if (ir_has(c, 1)) ir_fact_input(c, dg, 1);
            ir_hint(c, dg, "Reshape keeps the element count: the target was computed for a different input "
                           "(did the producing layer change width?); use -1 for the axis that should absorb the "
                           "difference, or fix the constants in the target shape");
            return;
        }
    }
    ir_out(c, 0, dt, nt, out);
    ir_out_kv(c, 0, kv_copy(c, ir_in_kv(c, 0)));
}

void ir_infer_flatten(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_dim *out = ir_dims_new(c, 2);
    if (!out) return;
    if (r < 0) {
        ir_out(c, 0, dt, 2, out);
        return;
    }
    int64_t axis = ir_ai(c, "axis", 1);
    if (axis < -(int64_t)r || axis > r) {
        diag *d = ir_err(c, "shape-attr-invalid", "axis %" PRId64 " is out of range for rank %d (valid: %d..%d)", axis, r, -r, r);
        ir_fact_input(c, d, 0);
        return;
    }
    if (axis < 0) axis += r;
    const ir_dim *d = ir_in(c, 0)->dims;
    out[0] = ir_dims_product(c->m, d, (int32_t)axis);
    out[1] = ir_dims_product(c->m, d + axis, r - (int32_t)axis);
    ir_out(c, 0, dt, 2, out);
}

/* ---- Squeeze / Unsqueeze ------------------------------------------------------------ */

void ir_infer_squeeze(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    int64_t axes[IR_MAX_RANK];
    int32_t na;
    int st = ints_arg(c, "axes", 1, axes, IR_MAX_RANK, &na);
    if (st < 0 || r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        ir_out_kv(c, 0, kv_copy(c, ir_in_kv(c, 0)));
        return;
    }
    bool drop[IR_MAX_RANK] = {false};
    const ir_dim *d = ir_in(c, 0)->dims;
    if (st == 0) {
        for (int32_t i = 0; i < r; i++) {
            if (d[i].kind != IR_DIM_CONST) {
                ir_out(c, 0, dt, -1, NULL); /* which axes are 1 is only known at run time */
                return;
            }
            drop[i] = d[i].value == 1;
        }
    } else {
        for (int32_t k = 0; k < na; k++) {
            int32_t ax;
            if (!ir_axis(c, axes[k], r, "axes entry", &ax)) return;
            if (d[ax].kind == IR_DIM_CONST && d[ax].value != 1) {
                diag *dg = ir_err(c, "shape-squeeze", "cannot squeeze axis %d: its size is %" PRId64 ", not 1", ax, d[ax].value);
                ir_fact_input(c, dg, 0);
                ir_hint(c, dg, "only size-1 axes can be squeezed: check the axes, or the producer's shape");
                return;
            }
            drop[ax] = true;
        }
    }
    int32_t nr = 0;
    for (int32_t i = 0; i < r; i++) nr += !drop[i];
    ir_dim *out = nr ? ir_dims_new(c, nr) : NULL;
    if (nr && !out) return;
    for (int32_t i = 0, k = 0; i < r; i++)
        if (!drop[i]) out[k++] = d[i];
    ir_out(c, 0, dt, nr, out);
    ir_out_kv(c, 0, kv_copy(c, ir_in_kv(c, 0)));
}

void ir_infer_unsqueeze(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    int64_t axes[IR_MAX_RANK];
    int32_t na;
    int st = ints_arg(c, "axes", 1, axes, IR_MAX_RANK, &na);
    if (st == 0) {
        ir_err(c, "shape-attr-invalid", "Unsqueeze needs axes (attribute before opset 13, input 1 after)");
        return;
    }
    ir_out_kv(c, 0, kv_copy(c, ir_in_kv(c, 0)));
    if (st < 0 || r < 0) {
        ir_out(c, 0, dt, (st > 0 && r >= 0) ? r + na : -1, NULL);
        if (st < 0 && r >= 0 && ir_in_rank(c, 1) == 1 && ir_in_dim(c, 1, 0).kind == IR_DIM_CONST) {
            int64_t k = ir_in_dim(c, 1, 0).value;
            if (k >= 0 && r + k <= IR_MAX_RANK) {
                ir_dim *o = ir_dims_new(c, r + (int32_t)k);
                if (o || r + k == 0) ir_out(c, 0, dt, r + (int32_t)k, o);
            }
        }
        ir_out_kv(c, 0, kv_copy(c, ir_in_kv(c, 0)));
        return;
    }
    int32_t nr = r + na;
    if (nr > IR_MAX_RANK) {
        ir_err(c, "shape-rank", "output rank %d is above kiln's limit of %d", nr, IR_MAX_RANK);
        return;
    }
    bool ins[IR_MAX_RANK] = {false};
    for (int32_t k = 0; k < na; k++) {
        int32_t ax;
        if (!ir_axis(c, axes[k], nr, "axes entry", &ax)) return;
        if (ins[ax]) {
            ir_err(c, "shape-attr-invalid", "axis %d appears twice in axes %s", ax, ir_intsstr(c, axes, na));
            return;
        }
        ins[ax] = true;
    }
    ir_dim *out = nr ? ir_dims_new(c, nr) : NULL;
    if (nr && !out) return;
    const ir_dim *d = ir_in(c, 0)->dims;
    for (int32_t i = 0, k = 0; i < nr; i++) out[i] = ins[i] ? ir_dim_const(1) : d[k++];
    ir_out(c, 0, dt, nr, out);
}

/* ---- Concat / Split ----------------------------------------------------------------- */

void ir_infer_concat(ir_ictx *c) {
    int32_t n = ir_nin(c);
    if (n < 1 || n > 4096) {
        ir_err(c, "shape-missing-input", "Concat needs at least one input");
        return;
    }
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    int32_t r = -1, ref = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!ir_has(c, i)) continue;
        kiln_dtype d = ir_in_dt(c, i);
        if (d != KILN_DTYPE_UNDEFINED) {
            if (dt == KILN_DTYPE_UNDEFINED) dt = d;
            else if (d != dt) {
                int32_t first = 0;
                while (first < n && ir_in_dt(c, first) != dt) first++;
                diag *dg = ir_err(c, "type-mismatch", "inputs %d and %d have different element types: %s vs %s", first, i,
                                  kiln_dtype_name(dt), kiln_dtype_name(d));
                ir_fact_input(c, dg, first);
                ir_fact_input(c, dg, i);
                ir_hint(c, dg, "insert a Cast to %s on input %d ('%s')", kiln_dtype_name(dt), i, ir_in_name(c, i));
                return;
            }
        }
        int32_t ri = ir_in_rank(c, i);
        if (ri < 0) continue;
        if (r < 0) {
            r = ri;
            ref = i;
        } else if (ri != r) {
            diag *dg = ir_err(c, "shape-rank", "inputs %d and %d have different ranks (%d vs %d)", ref, i, r, ri);
            ir_fact_input(c, dg, ref);
            ir_fact_input(c, dg, i);
            ir_hint(c, dg, "Concat needs inputs of equal rank: Unsqueeze or Reshape the lower-rank input");
            return;
        }
    }
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    if (r == 0) {
        diag *dg = ir_err(c, "shape-rank", "Concat inputs are scalars; they need rank >= 1");
        ir_fact_input(c, dg, ref);
        ir_hint(c, dg, "Unsqueeze the scalars to 1-D first");
        return;
    }
    int32_t ax;
    if (!ir_attr_get(c, "axis")) {
        ir_err(c, "shape-attr-invalid", "required attribute 'axis' is missing");
        return;
    }
    if (!ir_axis(c, ir_ai(c, "axis", 0), r, "axis", &ax)) return;
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    const ir_dim *rd = ir_in(c, ref)->dims;
    memcpy(out, rd, sizeof *out * (size_t)r);
    out[ax] = ir_dim_const(0);
    bool all_ranked = true;
    for (int32_t i = 0; i < n; i++) {
        if (!ir_has(c, i)) continue;
        if (ir_in_rank(c, i) < 0) {
            all_ranked = false;
            continue;
        }
        const ir_dim *d = ir_in(c, i)->dims;
        for (int32_t k = 0; k < r; k++) {
            if (k == ax) continue;
            ir_dim_eq_result e = ir_dim_eq(c->m, out[k], d[k]);
            if (e == IR_DIM_NE) {
                diag *dg = ir_err(c, "shape-concat",
                                  "inputs %d and %d differ on axis %d (%s vs %s), which is not the concat axis %d", ref, i, k,
                                  ir_dimstr(c, out[k]), ir_dimstr(c, d[k]), ax);
                ir_fact_input(c, dg, ref);
                ir_fact_input(c, dg, i);
                ir_hint(c, dg, "all axes except the concat axis must match: one branch changed size (resize/crop it, "
                               "or fix the layer widths) or the concat axis is wrong");
                return;
            }
            if (out[k].kind == IR_DIM_UNKNOWN) out[k] = d[k];
        }
        out[ax] = ir_dim_add(c->m, out[ax], d[ax]);
    }
    if (!all_ranked) out[ax] = ir_dim_unknown();
    ir_out(c, 0, dt, r, out);
    /* known values: concatenation of 1-D known inputs (shape building) */
    if (r == 1) {
        int32_t total = 0;
        for (int32_t i = 0; i < n; i++) {
            const ir_known *kv = ir_in_kv(c, i);
            if (!ir_has(c, i)) continue;
            if (!kv || !kv->e) return;
            total += kv->n;
            if (total > IR_KV_MAX) return;
        }
        ir_known *o = ir_kv_new(c, dt, total, false);
        if (!o) return;
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            if (!ir_has(c, i)) continue;
            const ir_known *kv = ir_in_kv(c, i);
            memcpy(o->e + k, kv->e, sizeof *o->e * (size_t)kv->n);
            k += kv->n;
        }
        ir_out_kv(c, 0, o);
    }
}

void ir_infer_split(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    int32_t nout = ir_nout(c);
    if (nout < 1 || nout > 4096) {
        ir_err(c, "shape-attr-invalid", "Split has %d outputs", nout);
        return;
    }
    if (r < 0) {
        for (int32_t o = 0; o < nout; o++) ir_out(c, o, dt, -1, NULL);
        return;
    }
    int32_t ax;
    if (!ir_axis(c, ir_ai(c, "axis", 0), r, "axis", &ax)) return;
    int64_t sizes[4096];
    int32_t ns;
    int st = ints_arg(c, "split", 1, sizes, 4096, &ns);
    const ir_dim *d = ir_in(c, 0)->dims;
    ir_dim D = d[ax];
    ir_dim part[4096];
    if (st > 0) {
        if (ns != nout) {
            diag *dg = ir_err(c, "shape-split", "split has %d sizes but the node has %d outputs", ns, nout);
            ir_fact(c, dg, "split = %s", ir_intsstr(c, sizes, ns));
            return;
        }
        int64_t sum = 0;
        for (int32_t i = 0; i < ns; i++) {
            if (sizes[i] < 0 || sizes[i] > ((int64_t)1 << 50)) {
                ir_err(c, "shape-split", "split size %" PRId64 " at index %d is invalid", sizes[i], i);
                return;
            }
            sum += sizes[i];
            part[i] = ir_dim_const(sizes[i]);
        }
        if (ir_dim_eq(c->m, D, ir_dim_const(sum)) == IR_DIM_NE) {
            diag *dg = ir_err(c, "shape-split", "split sizes %s sum to %" PRId64 " but axis %d has size %s",
                              ir_intsstr(c, sizes, ns), sum, ax, ir_dimstr(c, D));
            ir_fact_input(c, dg, 0);
            ir_hint(c, dg, "the sizes must add up to the axis length: the producer changed width (e.g. a fused QKV "
                           "projection of 3*hidden); update the split sizes or the producing layer");
            return;
        }
    } else if (st < 0) {
        for (int32_t i = 0; i < nout; i++) part[i] = ir_dim_unknown();
    } else {
        int64_t num = ir_ai(c, "num_outputs", nout);
        if (num != nout) {
            ir_err(c, "shape-split", "num_outputs is %" PRId64 " but the node has %d outputs", num, nout);
            return;
        }
        if (c->opset >= 18 && ir_attr_get(c, "num_outputs")) {
            ir_dim chunk = ir_dim_ceildiv(c->m, D, ir_dim_const(nout));
            for (int32_t i = 0; i < nout - 1; i++) part[i] = chunk;
            part[nout - 1] = ir_dim_sub(c->m, D, ir_dim_mul(c->m, chunk, ir_dim_const(nout - 1)));
        } else {
            if (D.kind == IR_DIM_CONST && D.value % nout != 0) {
                diag *dg = ir_err(c, "shape-split", "axis %d of size %" PRId64 " cannot be split evenly into %d outputs", ax,
                                  D.value, nout);
                ir_fact_input(c, dg, 0);
                return;
            }
            ir_dim q = ir_dim_unknown();
            if (!ir_dim_div_exact(c->m, D, ir_dim_const(nout), &q)) q = ir_dim_floordiv(c->m, D, ir_dim_const(nout));
            for (int32_t i = 0; i < nout; i++) part[i] = q;
        }
    }
    const ir_known *kv = ir_in_kv(c, 0);
    int32_t off = 0;
    for (int32_t o = 0; o < nout; o++) {
        ir_dim *out = ir_dims_new(c, r);
        if (!out) return;
        memcpy(out, d, sizeof *out * (size_t)r);
        out[ax] = part[o];
        ir_out(c, o, dt, r, out);
        if (kv && kv->e && r == 1 && part[o].kind == IR_DIM_CONST && off + part[o].value <= kv->n) {
            ir_known *ok = ir_kv_new(c, dt, (int32_t)part[o].value, false);
            if (ok) {
                memcpy(ok->e, kv->e + off, sizeof *ok->e * (size_t)part[o].value);
                ir_out_kv(c, o, ok);
            }
            off += (int32_t)part[o].value;
        }
    }
}

/* ---- Slice -------------------------------------------------------------------------- */

/* Length of a slice of an axis of size D. Constant D uses ONNX's exact clamping; a
 * symbolic D assumes in-range bounds (what exporters emit) with negative indices
 * counted from the end and huge ends meaning "to the end". */
static ir_dim slice_len(ir_ictx *c, ir_dim D, ir_dim start, ir_dim end, int64_t step) {
    ir_model *m = c->m;
    if (D.kind == IR_DIM_CONST && start.kind == IR_DIM_CONST && end.kind == IR_DIM_CONST) {
        int64_t n = D.value, s = start.value, e = end.value;
        if (s < 0) s = s < -n ? 0 : s + n;
        if (e < 0) e = e < -n ? (step > 0 ? 0 : -1) : e + n;
        if (step > 0) {
            if (s > n) s = n;
            if (e > n) e = n;
            if (e <= s) return ir_dim_const(0);
            return ir_dim_const((e - s + step - 1) / step);
        }
        if (s > n - 1) s = n - 1;
        if (e > n - 1) e = n - 1;
        if (e < -1) e = -1;
        if (s <= e) return ir_dim_const(0);
        return ir_dim_const((s - e + (-step) - 1) / (-step));
    }
    if (start.kind == IR_DIM_UNKNOWN || end.kind == IR_DIM_UNKNOWN) return ir_dim_unknown();
    if (start.kind == IR_DIM_CONST) {
        if (start.value >= BIG_END) start = step > 0 ? D : ir_dim_sub(m, D, ir_dim_const(1));
        else if (start.value < 0) start = ir_dim_add(m, D, start);
    }
    if (end.kind == IR_DIM_CONST) {
        if (end.value >= BIG_END) end = step > 0 ? D : ir_dim_sub(m, D, ir_dim_const(1));
        else if (end.value <= -BIG_END) end = step > 0 ? ir_dim_const(0) : ir_dim_const(-1);
        else if (end.value < 0) end = ir_dim_add(m, D, end);
    }
    ir_dim len = step > 0 ? ir_dim_ceildiv(m, ir_dim_sub(m, end, start), ir_dim_const(step))
                          : ir_dim_ceildiv(m, ir_dim_sub(m, start, end), ir_dim_const(-step));
    if (len.kind == IR_DIM_CONST && len.value < 0) len = ir_dim_const(0);
    return len;
}

static bool dims_arg(ir_ictx *c, const char *attr, int32_t in, ir_dim *out, int32_t *n) {
    const int64_t *v;
    int32_t an;
    if (ir_aints(c, attr, &v, &an)) {
        if (an > IR_MAX_RANK) return false;
        for (int32_t i = 0; i < an; i++) out[i] = ir_dim_const(v[i]);
        *n = an;
        return true;
    }
    const ir_known *kv = ir_in_kv(c, in);
    if (!kv || !kv->e || kv->n > IR_MAX_RANK) return false;
    memcpy(out, kv->e, sizeof *out * (size_t)kv->n);
    *n = kv->n;
    return true;
}

void ir_infer_slice(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    bool attrs = c->opset < 10 || (!ir_has(c, 1) && ir_attr_get(c, "starts"));
    ir_dim starts[IR_MAX_RANK], ends[IR_MAX_RANK];
    int32_t ns = 0, ne = 0;
    int64_t axes[IR_MAX_RANK], steps[IR_MAX_RANK];
    int32_t na = 0, nst = 0;
    bool known = dims_arg(c, attrs ? "starts" : "", attrs ? -1 : 1, starts, &ns) &&
                 dims_arg(c, attrs ? "ends" : "", attrs ? -1 : 2, ends, &ne);
    int sa = ints_arg(c, attrs ? "axes" : NULL, attrs ? -1 : 3, axes, IR_MAX_RANK, &na);
    int ss = attrs ? 0 : ints_arg(c, NULL, 4, steps, IR_MAX_RANK, &nst);
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return;
    const ir_dim *d = ir_in(c, 0)->dims;
    if (!known || sa < 0 || ss < 0) {
        /* bounds not known: the sliced axes are unknown; without axes, all of them */
        for (int32_t i = 0; i < r; i++) out[i] = sa > 0 ? d[i] : ir_dim_unknown();
        if (sa > 0)
            for (int32_t k = 0; k < na; k++) {
                int32_t ax;
                if (!ir_axis(c, axes[k], r, "axes entry", &ax)) return;
                out[ax] = ir_dim_unknown();
            }
        ir_out(c, 0, dt, r, out);
        return;
    }
    if (ns != ne) {
        diag *dg = ir_err(c, "shape-attr-invalid", "starts has %d entries but ends has %d", ns, ne);
        (void)dg;
        return;
    }
    if (sa == 0) {
        na = ns;
        for (int32_t i = 0; i < na; i++) axes[i] = i;
    }
    if (ss == 0) {
        nst = ns;
        for (int32_t i = 0; i < nst; i++) steps[i] = 1;
    }
    if (na != ns || nst != ns) {
        diag *dg = ir_err(c, "shape-attr-invalid", "starts, ends, axes and steps must have the same length (%d, %d, %d, %d)",
                          ns, ne, na, nst);
        (void)dg;
        return;
    }
    memcpy(out, d, sizeof *out * (size_t)r);
    bool seen[IR_MAX_RANK] = {false};
    for (int32_t k = 0; k < ns; k++) {
        int32_t ax;
        if (!ir_axis(c, axes[k], r, "axes entry", &ax)) return;
        if (seen[ax]) {
            ir_err(c, "shape-attr-invalid", "axis %d is sliced twice", ax);
            return;
        }
        seen[ax] = true;
        if (steps[k] == 0) {
            ir_err(c, "shape-attr-invalid", "step 0 on axis %d", ax);
            return;
        }
        out[ax] = slice_len(c, d[ax], starts[k], ends[k], steps[k]);
    }
    ir_out(c, 0, dt, r, out);
    /* known values: slicing a 1-D known value (Shape -> Slice) */
    const ir_known *kv = ir_in_kv(c, 0);
    if (kv && kv->e && r == 1 && out[0].kind == IR_DIM_CONST && starts[0].kind == IR_DIM_CONST) {
        int64_t n = kv->n, s = starts[0].value, step = steps[0];
        if (s < 0) s = s < -n ? 0 : s + n;
        if (step > 0 && s > n) s = n;
        if (step < 0 && s > n - 1) s = n - 1;
        ir_known *o = ir_kv_new(c, kv->dtype, (int32_t)out[0].value, false);
        if (!o) return;
        for (int64_t i = 0; i < out[0].value; i++) {
            int64_t src = s + i * step;
            if (src < 0 || src >= n) return;
            o->e[i] = kv->e[src];
        }
        ir_out_kv(c, 0, o);
    }
}

/* ---- Transpose / Expand / Tile / Pad ------------------------------------------------ */

void ir_infer_transpose(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    const int64_t *perm;
    int32_t np;
    bool have = ir_aints(c, "perm", &perm, &np);
    if (r < 0) {
        ir_out(c, 0, dt, have ? np : -1, have && np ? ir_dims_new(c, np) : NULL);
        return;
    }
    if (have && np != r) {
        diag *d = ir_err(c, "shape-attr-invalid", "perm %s has %d entries but the input has rank %d", ir_intsstr(c, perm, np), np, r);
        ir_fact_input(c, d, 0);
        ir_hint(c, d, "perm must list every axis once; the input's rank probably changed since export");
        return;
    }
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return;
    bool seen[IR_MAX_RANK] = {false};
    const ir_dim *d = ir_in(c, 0)->dims;
    for (int32_t i = 0; i < r; i++) {
        int64_t p = have ? perm[i] : r - 1 - i;
        if (p < 0) p += r; /* negative perm entries are accepted by some runtimes */
        if (p < 0 || p >= r || seen[p]) {
            diag *dg = ir_err(c, "shape-attr-invalid", "perm %s is not a permutation of 0..%d", ir_intsstr(c, perm, np), r - 1);
            ir_fact_input(c, dg, 0);
            return;
        }
        seen[p] = true;
        out[i] = d[p];
    }
    ir_out(c, 0, dt, r, out);
    if (r <= 1) ir_out_kv(c, 0, kv_copy(c, ir_in_kv(c, 0)));
}

void ir_infer_expand(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    const ir_known *kv = ir_in_kv(c, 1);
    if (!kv || !kv->e || kv->n > IR_MAX_RANK) {
        int32_t rs = ir_in_rank(c, 1);
        ir_dim k = ir_in_dim(c, 1, 0);
        if (rs == 1 && k.kind == IR_DIM_CONST && r >= 0 && k.value <= IR_MAX_RANK) {
            int32_t nr = r > (int32_t)k.value ? r : (int32_t)k.value;
            ir_dim *o = nr ? ir_dims_new(c, nr) : NULL;
            if (nr && !o) return;
            ir_out(c, 0, dt, nr, o);
        } else {
            ir_out(c, 0, dt, -1, NULL);
        }
        return;
    }
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    int32_t nr = r > kv->n ? r : kv->n;
    ir_dim *out = nr ? ir_dims_new(c, nr) : NULL;
    if (nr && !out) return;
    const ir_dim *d = ir_in(c, 0)->dims;
    for (int32_t k = 0; k < nr; k++) {
        int32_t ia = r - 1 - k, ib = kv->n - 1 - k;
        ir_dim x = ia >= 0 ? d[ia] : ir_dim_const(1), y = ib >= 0 ? kv->e[ib] : ir_dim_const(1);
        ir_dim res;
        if (ir_dim_is(y, 1)) res = x; /* shape 1 keeps the input's dim */
        else if (ir_dim_is(x, 1)) res = y;
        else {
            ir_dim_eq_result e = ir_dim_eq(c->m, x, y);
            if (e == IR_DIM_NE && x.kind == IR_DIM_CONST && y.kind == IR_DIM_CONST) {
                diag *dg = ir_err(c, "shape-expand", "cannot expand axis %d of size %s to %s", nr - 1 - k, ir_dimstr(c, x),
                                  ir_dimstr(c, y));
                ir_fact_input(c, dg, 0);
                ir_fact_input(c, dg, 1);
                ir_hint(c, dg, "Expand can only grow size-1 axes (or keep equal ones): check the target shape");
                return;
            }
            res = e == IR_DIM_EQ ? x : (x.kind == IR_DIM_CONST ? x : (y.kind == IR_DIM_CONST ? y : (y.kind == IR_DIM_UNKNOWN ? x : y)));
        }
        out[nr - 1 - k] = res;
    }
    ir_out(c, 0, dt, nr, out);
    const ir_known *xk = ir_in_kv(c, 0);
    if (xk && xk->e && nr == 1 && out[0].kind == IR_DIM_CONST && out[0].value <= IR_KV_MAX && (xk->n == 1 || xk->n == out[0].value)) {
        ir_known *o = ir_kv_new(c, dt, (int32_t)out[0].value, false);
        if (!o) return;
        for (int32_t i = 0; i < o->n; i++) o->e[i] = xk->e[xk->n == 1 ? 0 : i];
        ir_out_kv(c, 0, o);
    }
}

void ir_infer_tile(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    const ir_known *kv = ir_in_kv(c, 1);
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return;
    if (!kv || !kv->e) {
        ir_out(c, 0, dt, r, out);
        return;
    }
    if (kv->n != r) {
        diag *d = ir_err(c, "shape-rank", "repeats has %d entries but the input has rank %d", kv->n, r);
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        return;
    }
    for (int32_t i = 0; i < r; i++) out[i] = ir_dim_mul(c->m, ir_in_dim(c, 0, i), kv->e[i]);
    ir_out(c, 0, dt, r, out);
}

void ir_infer_pad(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    ir_dim pads[2 * IR_MAX_RANK];
    int32_t np = 0;
    bool known = c->opset < 11 || (!ir_has(c, 1) && ir_attr_get(c, "pads")) ? dims_arg(c, "pads", -1, pads, &np)
                                                                             : dims_arg(c, "", 1, pads, &np);
    if (!known && c->opset < 11) {
        const int64_t *v;
        int32_t n;
        if (ir_aints(c, "paddings", &v, &n) && n <= 2 * IR_MAX_RANK) { /* opset 1 name */
            for (int32_t i = 0; i < n; i++) pads[i] = ir_dim_const(v[i]);
            np = n;
            known = true;
        }
    }
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return;
    if (!known) {
        ir_out(c, 0, dt, r, out);
        return;
    }
    int64_t axes[IR_MAX_RANK];
    int32_t na = 0;
    int sa = ints_arg(c, NULL, 3, axes, IR_MAX_RANK, &na);
    if (sa < 0) {
        ir_out(c, 0, dt, r, out);
        return;
    }
    if (sa == 0) {
        na = r;
        for (int32_t i = 0; i < r; i++) axes[i] = i;
    }
    if (np != 2 * na) {
        diag *d = ir_err(c, "shape-attr-invalid", "pads has %d values but %d are needed (begin and end for %d axes)", np, 2 * na, na);
        ir_fact_input(c, d, 0);
        ir_hint(c, d, "pads are [x1_begin, x2_begin, ..., x1_end, x2_end, ...]");
        return;
    }
    memcpy(out, ir_in(c, 0)->dims, sizeof *out * (size_t)r);
    for (int32_t k = 0; k < na; k++) {
        int32_t ax;
        if (!ir_axis(c, axes[k], r, "axes entry", &ax)) return;
        out[ax] = ir_dim_add(c->m, ir_dim_add(c->m, out[ax], pads[k]), pads[k + na]);
    }
    ir_out(c, 0, dt, r, out);
}

/* ---- DepthToSpace / SpaceToDepth ---------------------------------------------------- */

static void depth_space(ir_ictx *c, bool to_space) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    int64_t b = ir_ai(c, "blocksize", 0);
    if (b < 1 || b > (1 << 20)) {
        ir_err(c, "shape-attr-invalid", "blocksize %" PRId64 " must be >= 1", b);
        return;
    }
    if (r < 0) {
        ir_out(c, 0, dt, 4, ir_dims_new(c, 4));
        return;
    }
    if (r != 4) {
        diag *d = ir_err(c, "shape-rank", "%s needs a 4-D [N, C, H, W] input, got rank %d", c->n->op_type, r);
        ir_fact_input(c, d, 0);
        return;
    }
    ir_dim *out = ir_dims_new(c, 4);
    if (!out) return;
    ir_dim bb = ir_dim_const(b * b), B = ir_dim_const(b);
    const ir_dim *d = ir_in(c, 0)->dims;
    out[0] = d[0];
    if (to_space) {
        if (!ir_dim_div_exact(c->m, d[1], bb, &out[1])) {
            if (d[1].kind == IR_DIM_CONST) {
                diag *dg = ir_err(c, "shape-attr-invalid", "channels %" PRId64 " are not divisible by blocksize^2 = %" PRId64,
                                  d[1].value, b * b);
                ir_fact_input(c, dg, 0);
                return;
            }
            out[1] = ir_dim_floordiv(c->m, d[1], bb);
        }
        out[2] = ir_dim_mul(c->m, d[2], B);
        out[3] = ir_dim_mul(c->m, d[3], B);
    } else {
        out[1] = ir_dim_mul(c->m, d[1], bb);
        for (int32_t i = 2; i < 4; i++) {
            if (!ir_dim_div_exact(c->m, d[i], B, &out[i])) {
                if (d[i].kind == IR_DIM_CONST) {
                    diag *dg = ir_err(c, "shape-attr-invalid", "spatial axis %d (%" PRId64 ") is not divisible by blocksize %" PRId64,
                                      i, d[i].value, b);
                    ir_fact_input(c, dg, 0);
                    return;
                }
                out[i] = ir_dim_floordiv(c->m, d[i], B);
            }
        }
    }
    ir_out(c, 0, dt, 4, out);
}

void ir_infer_depth_to_space(ir_ictx *c) { depth_space(c, true); }
void ir_infer_space_to_depth(ir_ictx *c) { depth_space(c, false); }

void ir_infer_identity_data(ir_ictx *c) {
    if (!ir_has(c, 0)) {
        ir_err(c, "shape-missing-input", "required input 0 is missing");
        return;
    }
    ir_out_like(c, 0, 0);
}

void ir_infer_cumsum(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    const ir_known *ax = ir_in_kv(c, 1);
    if (r > 0 && ax && ax->e && ax->n == 1 && ax->e[0].kind == IR_DIM_CONST) {
        int32_t a;
        if (!ir_axis(c, ax->e[0].value, r, "axis", &a)) return;
    }
    ir_out_like(c, 0, 0);
}
