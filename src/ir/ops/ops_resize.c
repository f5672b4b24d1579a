/* ops_resize.c - inference for Resize (opset 10: scales input; 11+: roi, scales, sizes;
 * 18+: axes and keep_aspect_ratio_policy) and Upsample (scales attribute before opset 9,
 * input after). Output sizes come from `sizes` when known, else floor(D * scale);
 * integer scales keep symbolic dims exact (2*H). */
#include <math.h>
#include <string.h>

#include "ir/ops/ops.h"

static ir_dim scaled(ir_ictx *c, ir_dim D, double s) {
    if (!(s > 0) || s > 1e9) return ir_dim_unknown();
    if (D.kind == IR_DIM_CONST) {
        double v = floor((double)D.value * s + 1e-9);
        return v < 9e15 ? ir_dim_const((int64_t)v) : ir_dim_unknown();
    }
    if (s == floor(s)) return ir_dim_mul(c->m, D, ir_dim_const((int64_t)s));
    double inv = 1.0 / s;
    if (inv == floor(inv)) return ir_dim_floordiv(c->m, D, ir_dim_const((int64_t)inv));
    return ir_dim_unknown();
}

static void resize_common(ir_ictx *c, int32_t scales_in, int32_t sizes_in, const float *attr_scales, int32_t n_attr) {
    kiln_dtype dt = ir_in_dt(c, 0);
    int32_t r = ir_in_rank(c, 0);
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return;
    const ir_dim *d = ir_in(c, 0)->dims;
    int64_t axes[IR_MAX_RANK];
    int32_t na = r;
    const int64_t *av;
    int32_t an;
    if (ir_aints(c, "axes", &av, &an)) {
        if (an > r) {
            ir_err(c, "shape-attr-invalid", "axes has %d entries for a rank-%d input", an, r);
            return;
        }
        na = an;
        for (int32_t i = 0; i < an; i++) {
            int32_t ax;
            if (!ir_axis(c, av[i], r, "axes entry", &ax)) return;
            axes[i] = ax;
        }
    } else {
        for (int32_t i = 0; i < r; i++) axes[i] = i;
    }
    memcpy(out, d, sizeof *out * (size_t)r);
    const ir_known *sz = sizes_in >= 0 ? ir_in_kv(c, sizes_in) : NULL;
    const ir_known *sc = scales_in >= 0 ? ir_in_kv(c, scales_in) : NULL;
    bool have_sizes = sizes_in >= 0 && ir_has(c, sizes_in) &&
                      !(ir_in_rank(c, sizes_in) == 1 && ir_dim_is(ir_in_dim(c, sizes_in, 0), 0));
    bool have_scales = scales_in >= 0 && ir_has(c, scales_in) &&
                       !(ir_in_rank(c, scales_in) == 1 && ir_dim_is(ir_in_dim(c, scales_in, 0), 0));
    if (have_sizes) {
        if (!sz || !sz->e) {
            for (int32_t i = 0; i < na; i++) out[axes[i]] = ir_dim_unknown();
        } else if (sz->n != na) {
            diag *dg = ir_err(c, "shape-attr-invalid", "sizes has %d entries but %d axes are resized", sz->n, na);
            ir_fact_input(c, dg, 0);
            ir_fact_input(c, dg, sizes_in);
            return;
        } else {
            bool stretch = ir_astr_is(c, "keep_aspect_ratio_policy", "stretch", "stretch");
            if (stretch) {
                for (int32_t i = 0; i < na; i++) out[axes[i]] = sz->e[i];
            } else {
                bool larger = ir_astr_is(c, "keep_aspect_ratio_policy", "stretch", "not_larger");
                double s = larger ? 1e300 : 0;
                bool ok = true;
                for (int32_t i = 0; i < na; i++) {
                    ir_dim D = d[axes[i]];
                    if (D.kind != IR_DIM_CONST || D.value == 0 || sz->e[i].kind != IR_DIM_CONST) {
                        ok = false;
                        break;
                    }
                    double q = (double)sz->e[i].value / (double)D.value;
                    s = larger ? (q < s ? q : s) : (q > s ? q : s);
                }
                for (int32_t i = 0; i < na; i++)
                    out[axes[i]] = ok ? ir_dim_const((int64_t)floor((double)d[axes[i]].value * s + 0.5)) : ir_dim_unknown();
            }
        }
    } else if (have_scales || attr_scales) {
        int32_t n = attr_scales ? n_attr : (sc ? sc->n : -1);
        if (n >= 0 && n != na) {
            diag *dg = ir_err(c, "shape-attr-invalid", "scales has %d entries but the input has rank %d", n, na);
            ir_fact_input(c, dg, 0);
            ir_hint(c, dg, "give one scale per axis (1.0 for N and C)");
            return;
        }
        for (int32_t i = 0; i < na; i++) {
            double s;
            if (attr_scales) s = attr_scales[i];
            else if (sc && sc->f) s = sc->f[i];
            else {
                out[axes[i]] = ir_dim_unknown();
                continue;
            }
            out[axes[i]] = scaled(c, d[axes[i]], s);
        }
    } else {
        diag *dg = ir_err(c, "shape-attr-invalid", "%s needs either scales or sizes", c->n->op_type);
        ir_fact_input(c, dg, 0);
        return;
    }
    ir_out(c, 0, dt, r, out);
}

void ir_infer_resize(ir_ictx *c) {
    if (c->opset < 11) resize_common(c, 1, -1, NULL, 0);
    else resize_common(c, 2, 3, NULL, 0);
}

void ir_infer_upsample(ir_ictx *c) {
    const ir_attr *a = ir_attr_get(c, "scales");
    if (a && a->type == IR_ATTR_FLOATS && a->n >= 0) {
        resize_common(c, -1, -1, a->floats, a->n);
        return;
    }
    if (ir_has(c, 1)) {
        resize_common(c, 1, -1, NULL, 0);
        return;
    }
    float hw[2] = {ir_af(c, "height_scale", 1.0f), ir_af(c, "width_scale", 1.0f)};
    if (ir_in_rank(c, 0) == 4) {
        float s4[4] = {1.0f, 1.0f, hw[0], hw[1]};
        resize_common(c, -1, -1, s4, 4);
        return;
    }
    ir_out(c, 0, ir_in_dt(c, 0), ir_in_rank(c, 0), NULL);
}
