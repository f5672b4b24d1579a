/* ops_conv.c - inference for convolution and pooling: Conv (and ConvInteger,
 * QLinearConv), ConvTranspose (output_padding, output_shape), MaxPool/AveragePool/LpPool
 * (pads, dilations, ceil_mode, auto_pad), global pooling, MaxUnpool, RoiAlign,
 * GridSample.
 *
 * The spatial formula is out = (D + pad_begin + pad_end - ((k-1)*d + 1)) / s + 1, built
 * with symdim so dynamic sizes give "(H-1)/2+1" rather than "?". Attribute arrays are
 * checked against the spatial rank before any is indexed. */
#include <inttypes.h>
#include <string.h>

#include "ir/ops/ops.h"

typedef struct spatial {
    int32_t n; /* spatial rank */
    int64_t k[IR_MAX_RANK], s[IR_MAX_RANK], d[IR_MAX_RANK], pads[2 * IR_MAX_RANK], opad[IR_MAX_RANK];
    bool have_k;
    int auto_pad; /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID */
} spatial;

/* Reads an ints attribute of exactly `want` entries (all > min) into out, or fills dflt. */
static bool ints_attr(ir_ictx *c, const char *name, int32_t want, int64_t min, int64_t dflt, int64_t *out) {
    const int64_t *v;
    int32_t n;
    if (!ir_aints(c, name, &v, &n)) {
        for (int32_t i = 0; i < want; i++) out[i] = dflt;
        return true;
    }
    if (n != want) {
        diag *d = ir_err(c, "shape-attr-invalid", "'%s' has %d values but the input has %d spatial axes%s", name, n,
                         name[0] == 'p' && name[1] == 'a' ? want / 2 : want, name[0] == 'p' && name[1] == 'a' ? " (pads need 2 per axis)" : "");
        ir_fact(c, d, "%s = %s", name, ir_intsstr(c, v, n));
        if (ir_has(c, 0)) ir_fact_input(c, d, 0);
        ir_hint(c, d, "the input rank and the layer's dimensionality disagree (e.g. a Conv2d fed a 3-D or 5-D "
                      "tensor): check the input's shape, or re-export the layer for %d spatial axes",
                name[0] == 'p' && name[1] == 'a' ? want / 2 : want);
        return false;
    }
    for (int32_t i = 0; i < n; i++) {
        if (v[i] < min || v[i] > ((int64_t)1 << 40)) {
            diag *d = ir_err(c, "shape-attr-invalid", "'%s' value %" PRId64 " at index %d is out of range (must be >= %" PRId64 ")",
                             name, v[i], i, min);
            ir_fact(c, d, "%s = %s", name, ir_intsstr(c, v, n));
            return false;
        }
        out[i] = v[i];
    }
    return true;
}

static bool read_spatial(ir_ictx *c, int32_t n, const ir_dim *wk /* kernel dims from W or NULL */, bool need_k,
                         spatial *sp) {
    memset(sp, 0, sizeof *sp);
    sp->n = n;
    const int64_t *kv;
    int32_t kn;
    sp->have_k = ir_aints(c, "kernel_shape", &kv, &kn);
    if (sp->have_k) {
        if (!ints_attr(c, "kernel_shape", n, 1, 1, sp->k)) return false;
        if (wk)
            for (int32_t i = 0; i < n; i++)
                if (wk[i].kind == IR_DIM_CONST && wk[i].value != sp->k[i]) {
                    diag *d = ir_err(c, "shape-attr-invalid",
                                     "kernel_shape %s disagrees with the weight's spatial size (axis %d is %" PRId64 ")",
                                     ir_intsstr(c, kv, kn), i, wk[i].value);
                    ir_fact_input(c, d, 1);
                    ir_hint(c, d, "drop kernel_shape (it is optional) or make it match the weight");
                    return false;
                }
    } else if (wk) {
        for (int32_t i = 0; i < n; i++) sp->k[i] = wk[i].kind == IR_DIM_CONST ? wk[i].value : -1;
        sp->have_k = true;
    } else if (need_k) {
        ir_err(c, "shape-attr-invalid", "required attribute 'kernel_shape' is missing");
        return false;
    }
    if (!ints_attr(c, "strides", n, 1, 1, sp->s)) return false;
    if (!ints_attr(c, "dilations", n, 1, 1, sp->d)) return false;
    if (!ints_attr(c, "pads", 2 * n, 0, 0, sp->pads)) return false;
    if (!ints_attr(c, "output_padding", n, 0, 0, sp->opad)) return false;
    const char *ap = ir_astr(c, "auto_pad", "NOTSET");
    if (!strcmp(ap, "NOTSET") || !ap[0]) sp->auto_pad = 0;
    else if (!strcmp(ap, "SAME_UPPER")) sp->auto_pad = 1;
    else if (!strcmp(ap, "SAME_LOWER")) sp->auto_pad = 2;
    else if (!strcmp(ap, "VALID")) sp->auto_pad = 3;
    else {
        diag *d = ir_err(c, "shape-attr-invalid", "auto_pad '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
        (void)d;
        return false;
    }
    return true;
}

/* Output size of one spatial axis of a sliding window. */
static ir_dim window_out(ir_ictx *c, ir_dim D, const spatial *sp, int32_t i, bool ceil_mode) {
    ir_model *m = c->m;
    if (sp->k[i] < 0) return ir_dim_unknown();
    int64_t eff = (sp->k[i] - 1) * sp->d[i] + 1;
    ir_dim s = ir_dim_const(sp->s[i]);
    if (sp->auto_pad == 1 || sp->auto_pad == 2) return ir_dim_ceildiv(m, D, s);
    if (sp->auto_pad == 3) return ir_dim_ceildiv(m, ir_dim_sub(m, D, ir_dim_const(eff - 1)), s);
    int64_t pb = sp->pads[i], pe = sp->pads[i + sp->n];
    ir_dim num = ir_dim_sub(m, ir_dim_add(m, D, ir_dim_const(pb + pe)), ir_dim_const(eff));
    ir_dim out = ir_dim_add(m, ceil_mode ? ir_dim_ceildiv(m, num, s) : ir_dim_floordiv(m, num, s), ir_dim_const(1));
    if (ceil_mode && out.kind == IR_DIM_CONST && D.kind == IR_DIM_CONST && out.value > 0 &&
        (out.value - 1) * sp->s[i] >= D.value + pb)
        out.value -= 1; /* the last window would start in the padding: PyTorch/ONNX drop it */
    return out;
}

static bool check_window_fits(ir_ictx *c, ir_dim D, const spatial *sp, int32_t i, int32_t axis) {
    if (D.kind != IR_DIM_CONST || sp->k[i] < 0 || sp->auto_pad == 1 || sp->auto_pad == 2) return true;
    int64_t eff = (sp->k[i] - 1) * sp->d[i] + 1;
    int64_t padded = D.value + (sp->auto_pad == 3 ? 0 : sp->pads[i] + sp->pads[i + sp->n]);
    if (padded >= eff) return true;
    diag *d = ir_err(c, "shape-window-too-large",
                     "spatial axis %d is %" PRId64 " (%" PRId64 " with padding) but the window needs %" PRId64
                     " (kernel %" PRId64 ", dilation %" PRId64 ")",
                     axis, D.value, padded, eff, sp->k[i], sp->d[i]);
    ir_fact_input(c, d, 0);
    ir_hint(c, d, "the input is too small for this layer: feed a larger input (the model may expect e.g. "
                  "224x224), or reduce the number of downsampling layers before it");
    return false;
}

static void conv_io(ir_ictx *c, int32_t *ix, int32_t *iw, int32_t *ib, kiln_dtype *dt) {
    const char *op = c->n->op_type;
    if (!strcmp(op, "QLinearConv")) {
        *ix = 0; *iw = 3; *ib = 8;
        *dt = ir_in_dt(c, 7);
    } else if (!strcmp(op, "ConvInteger")) {
        *ix = 0; *iw = 1; *ib = -1;
        *dt = KILN_DTYPE_INT32;
    } else {
        *ix = 0; *iw = 1; *ib = 2;
        *dt = ir_in_dt(c, 0);
    }
}

void ir_infer_conv(ir_ictx *c) {
    int32_t ix, iw, ib;
    kiln_dtype dt;
    conv_io(c, &ix, &iw, &ib, &dt);
    if (!ir_has(c, ix) || !ir_has(c, iw)) {
        ir_err(c, "shape-missing-input", "%s needs X and W", c->n->op_type);
        return;
    }
    if (!strcmp(c->n->op_type, "Conv")) {
        int32_t ins[3] = {0, 1, 2};
        if (!ir_same_dtype(c, ins, ir_has(c, 2) ? 3 : 2, &dt)) return;
    }
    int32_t rx = ir_in_rank(c, ix), rw = ir_in_rank(c, iw);
    if (rx >= 0 && rx < 3) {
        diag *d = ir_err(c, "shape-conv-rank", "input X has rank %d; %s needs [N, C, spatial...] (rank >= 3)", rx, c->n->op_type);
        ir_fact_input(c, d, ix);
        ir_hint(c, d, "add the batch axis (Unsqueeze axis 0) or the missing spatial axes before this layer");
        return;
    }
    if (rx >= 0 && rw >= 0 && rx != rw) {
        diag *d = ir_err(c, "shape-conv-rank", "input X has rank %d but the weight has rank %d (a %dD conv)", rx, rw, rw - 2);
        ir_fact_input(c, d, ix);
        ir_fact_input(c, d, iw);
        ir_hint(c, d, "a Conv%dd needs %d-D input [N, C, %d spatial axes]: reshape the input, or use a Conv with "
                      "matching dimensionality",
                rw - 2, rw, rw - 2);
        return;
    }
    int32_t r = rx >= 0 ? rx : rw;
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    int32_t n = r - 2;
    const ir_dim *wd = rw >= 0 ? ir_in(c, iw)->dims : NULL;
    spatial sp;
    if (!read_spatial(c, n, wd ? wd + 2 : NULL, false, &sp)) return;
    int64_t group = ir_ai(c, "group", 1);
    if (group < 1) {
        ir_err(c, "shape-attr-invalid", "group %" PRId64 " must be >= 1", group);
        return;
    }
    ir_dim C = ir_in_dim(c, ix, 1);
    if (wd) {
        ir_dim want = ir_dim_mul(c->m, wd[1], ir_dim_const(group));
        if (ir_dim_eq(c->m, C, want) == IR_DIM_NE) {
            diag *d = ir_err(c, "shape-conv-channels",
                             "input has %s channels but the weight expects %s (C/group %s x group %" PRId64 ")",
                             ir_dimstr(c, C), ir_dimstr(c, want), ir_dimstr(c, wd[1]), group);
            ir_fact_input(c, d, ix);
            ir_fact_input(c, d, iw);
            ir_hint(c, d,
                    "the layer producing the input now has %s output channels but this conv was built for %s:\n"
                    "re-export with in_channels=%s for this conv, or change the previous layer back to %s channels.",
                    ir_dimstr(c, C), ir_dimstr(c, want), ir_dimstr(c, C), ir_dimstr(c, want));
            return;
        }
        if (ir_dim_mod(c->m, wd[0], ir_dim_const(group)).kind == IR_DIM_CONST &&
            ir_dim_mod(c->m, wd[0], ir_dim_const(group)).value != 0) {
            diag *d = ir_err(c, "shape-conv-channels", "group %" PRId64 " does not divide the %s output channels", group,
                             ir_dimstr(c, wd[0]));
            ir_fact_input(c, d, iw);
            return;
        }
    }
    /* a graph pass may have fused a residual Add into the slot of an absent bias
     * (kiln_residual = its index, build/passes/fuse_residual.c): not a bias */
    const ir_attr *res = ir_attr_get(c, "kiln_residual");
    if (res && res->type == IR_ATTR_INT && res->i == ib) ib = -1;
    if (ib >= 0 && ir_has(c, ib) && wd) {
        int32_t rb = ir_in_rank(c, ib);
        if (rb >= 0 && (rb != 1 || ir_dim_eq(c->m, ir_in_dim(c, ib, 0), wd[0]) == IR_DIM_NE)) {
            diag *d = ir_err(c, "shape-conv-bias", "bias %s does not match the %s output channels",
                             ir_shapestr(c, ir_in(c, ib)), ir_dimstr(c, wd[0]));
            ir_fact_input(c, d, ib);
            ir_fact_input(c, d, iw);
            ir_hint(c, d, "the bias must be 1-D with one entry per output channel");
            return;
        }
    }
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    out[0] = ir_in_dim(c, ix, 0);
    out[1] = wd ? wd[0] : ir_dim_unknown();
    for (int32_t i = 0; i < n; i++) {
        ir_dim D = ir_in_dim(c, ix, 2 + i);
        if (!check_window_fits(c, D, &sp, i, 2 + i)) return;
        out[2 + i] = window_out(c, D, &sp, i, false);
    }
    ir_out(c, 0, dt, r, out);
}

void ir_infer_conv_transpose(ir_ictx *c) {
    if (!ir_has(c, 0) || !ir_has(c, 1)) {
        ir_err(c, "shape-missing-input", "ConvTranspose needs X and W");
        return;
    }
    int32_t ins[3] = {0, 1, 2};
    kiln_dtype dt;
    if (!ir_same_dtype(c, ins, ir_has(c, 2) ? 3 : 2, &dt)) return;
    int32_t rx = ir_in_rank(c, 0), rw = ir_in_rank(c, 1);
    if ((rx >= 0 && rx < 3) || (rx >= 0 && rw >= 0 && rx != rw)) {
        diag *d = ir_err(c, "shape-conv-rank", "input X has rank %d and the weight rank %d; both must be equal and >= 3", rx, rw);
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        return;
    }
    int32_t r = rx >= 0 ? rx : rw;
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    int32_t n = r - 2;
    const ir_dim *wd = rw >= 0 ? ir_in(c, 1)->dims : NULL;
    spatial sp;
    if (!read_spatial(c, n, wd ? wd + 2 : NULL, false, &sp)) return;
    int64_t group = ir_ai(c, "group", 1);
    if (group < 1) {
        ir_err(c, "shape-attr-invalid", "group %" PRId64 " must be >= 1", group);
        return;
    }
    ir_dim C = ir_in_dim(c, 0, 1);
    if (wd && ir_dim_eq(c->m, C, wd[0]) == IR_DIM_NE) {
        diag *d = ir_err(c, "shape-conv-channels", "input has %s channels but the weight expects %s", ir_dimstr(c, C),
                         ir_dimstr(c, wd[0]));
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        ir_hint(c, d, "ConvTranspose weights are [C_in, C_out/group, k...]: the previous layer's channel count "
                      "changed; re-export with in_channels=%s or restore the previous layer",
                ir_dimstr(c, C));
        return;
    }
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    out[0] = ir_in_dim(c, 0, 0);
    out[1] = wd ? ir_dim_mul(c->m, wd[1], ir_dim_const(group)) : ir_dim_unknown();
    const int64_t *os;
    int32_t on;
    if (ir_aints(c, "output_shape", &os, &on)) {
        if (on != n && on != r) {
            diag *d = ir_err(c, "shape-attr-invalid", "output_shape has %d values for %d spatial axes", on, n);
            ir_fact(c, d, "output_shape = %s", ir_intsstr(c, os, on));
            return;
        }
        for (int32_t i = 0; i < n; i++) {
            int64_t v = os[on - n + i];
            if (v < 0) {
                ir_err(c, "shape-attr-invalid", "output_shape value %" PRId64 " is negative", v);
                return;
            }
            out[2 + i] = ir_dim_const(v);
        }
        ir_out(c, 0, dt, r, out);
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        ir_dim D = ir_in_dim(c, 0, 2 + i);
        if (sp.k[i] < 0) {
            out[2 + i] = ir_dim_unknown();
            continue;
        }
        ir_dim base = ir_dim_mul(c->m, ir_dim_sub(c->m, D, ir_dim_const(1)), ir_dim_const(sp.s[i]));
        int64_t eff = (sp.k[i] - 1) * sp.d[i] + 1;
        if (sp.auto_pad == 1 || sp.auto_pad == 2) {
            out[2 + i] = ir_dim_mul(c->m, D, ir_dim_const(sp.s[i]));
            continue;
        }
        int64_t pads = sp.auto_pad == 3 ? 0 : sp.pads[i] + sp.pads[i + n];
        out[2 + i] = ir_dim_add(c->m, base, ir_dim_const(sp.opad[i] + eff - pads));
    }
    ir_out(c, 0, dt, r, out);
}

void ir_infer_pool(ir_ictx *c) {
    if (!ir_has(c, 0)) {
        ir_err(c, "shape-missing-input", "required input X is missing");
        return;
    }
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    if (r >= 0 && r < 3) {
        diag *d = ir_err(c, "shape-rank", "input X has rank %d; %s needs [N, C, spatial...] (rank >= 3)", r, c->n->op_type);
        ir_fact_input(c, d, 0);
        return;
    }
    bool is_max = !strcmp(c->n->op_type, "MaxPool");
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        if (is_max) ir_out(c, 1, KILN_DTYPE_INT64, -1, NULL);
        return;
    }
    int32_t n = r - 2;
    spatial sp;
    if (!read_spatial(c, n, NULL, true, &sp)) return;
    bool ceil_mode = ir_ai(c, "ceil_mode", 0) != 0;
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    out[0] = ir_in_dim(c, 0, 0);
    out[1] = ir_in_dim(c, 0, 1);
    for (int32_t i = 0; i < n; i++) {
        ir_dim D = ir_in_dim(c, 0, 2 + i);
        if (!check_window_fits(c, D, &sp, i, 2 + i)) return;
        out[2 + i] = window_out(c, D, &sp, i, ceil_mode);
    }
    ir_out(c, 0, dt, r, out);
    if (is_max) ir_out(c, 1, KILN_DTYPE_INT64, r, out);
}

void ir_infer_global_pool(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    kiln_dtype dt = ir_in_dt(c, 0);
    if (r >= 0 && r < 2) {
        diag *d = ir_err(c, "shape-rank", "input has rank %d; %s needs [N, C, spatial...]", r, c->n->op_type);
        ir_fact_input(c, d, 0);
        return;
    }
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    out[0] = ir_in_dim(c, 0, 0);
    out[1] = ir_in_dim(c, 0, 1);
    for (int32_t i = 2; i < r; i++) out[i] = ir_dim_const(1);
    ir_out(c, 0, dt, r, out);
}

void ir_infer_max_unpool(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    kiln_dtype dt = ir_in_dt(c, 0);
    if (ir_has(c, 2)) {
        const ir_known *kv = ir_in_kv(c, 2);
        if (kv && kv->e && kv->n <= IR_MAX_RANK) {
            ir_dim *out = ir_dims_new(c, kv->n);
            if (kv->n && !out) return;
            for (int32_t i = 0; i < kv->n; i++) out[i] = kv->e[i];
            ir_out(c, 0, dt, kv->n, out);
        } else {
            ir_out(c, 0, dt, ir_in_rank(c, 2) == 1 && ir_in_dim(c, 2, 0).kind == IR_DIM_CONST ? (int32_t)ir_in_dim(c, 2, 0).value : -1,
                   NULL);
        }
        return;
    }
    if (r < 3) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    spatial sp;
    if (!read_spatial(c, r - 2, NULL, true, &sp)) return;
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    out[0] = ir_in_dim(c, 0, 0);
    out[1] = ir_in_dim(c, 0, 1);
    for (int32_t i = 0; i < r - 2; i++) {
        ir_dim D = ir_in_dim(c, 0, 2 + i);
        out[2 + i] = ir_dim_add(c->m, ir_dim_mul(c->m, ir_dim_sub(c->m, D, ir_dim_const(1)), ir_dim_const(sp.s[i])),
                                ir_dim_const(sp.k[i] - sp.pads[i] - sp.pads[i + r - 2]));
    }
    ir_out(c, 0, dt, r, out);
}

void ir_infer_roi_align(ir_ictx *c) {
    ir_dim *out = ir_dims_new(c, 4);
    if (!out) return;
    out[0] = ir_in_dim(c, 1, 0);
    out[1] = ir_in_dim(c, 0, 1);
    out[2] = ir_dim_const(ir_ai(c, "output_height", 1));
    out[3] = ir_dim_const(ir_ai(c, "output_width", 1));
    ir_out(c, 0, ir_in_dt(c, 0), 4, out);
}

void ir_infer_grid_sample(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0), rg = ir_in_rank(c, 1);
    if (r < 0 || rg < 0) {
        ir_out(c, 0, ir_in_dt(c, 0), r, NULL);
        return;
    }
    if (rg != r || r < 3) {
        diag *d = ir_err(c, "shape-rank", "grid has rank %d but X has rank %d; grid must be [N, spatial_out..., %d]", rg, r,
                         r - 2);
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        return;
    }
    ir_dim *out = ir_dims_new(c, r);
    if (!out) return;
    out[0] = ir_in_dim(c, 0, 0);
    out[1] = ir_in_dim(c, 0, 1);
    for (int32_t i = 2; i < r; i++) out[i] = ir_in_dim(c, 1, i - 1);
    ir_out(c, 0, ir_in_dt(c, 0), r, out);
}
