/* ops_norm.c - inference for normalisation layers: BatchNormalization (inference and
 * training outputs across opsets), InstanceNormalization, LayerNormalization (Mean and
 * InvStdDev outputs), GroupNormalization. The usual export bug here is a parameter
 * vector sized for another layer width, reported as shape-norm-param naming the
 * channel axis and both sizes. */
#include <inttypes.h>
#include <string.h>

#include "ir/ops/ops.h"

static const char *const bn_param_names[] = {"X", "scale", "B", "mean", "var"};

static bool check_param(ir_ictx *c, int32_t i, const char *what, ir_dim want, const char *axis_desc) {
    if (!ir_has(c, i)) return true;
    int32_t r = ir_in_rank(c, i);
    if (r < 0) return true;
    ir_dim got = r == 1 ? ir_in_dim(c, i, 0) : ir_dim_unknown();
    if (r != 1 || ir_dim_eq(c->m, got, want) == IR_DIM_NE) {
        diag *d = ir_err(c, "shape-norm-param", "%s (input %d) has shape %s but %s is %s", what, i,
                         ir_shapestr(c, ir_in(c, i)), axis_desc, ir_dimstr(c, want));
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, i);
        ir_hint(c, d, "the normalisation was built for %s features but its input now has %s: the previous layer "
                      "changed width; re-export with num_features=%s, or restore the previous layer",
                r == 1 ? ir_dimstr(c, got) : "a different number of", ir_dimstr(c, want), ir_dimstr(c, want));
        return false;
    }
    return true;
}

void ir_infer_batchnorm(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    if (r >= 0 && r < 2 && c->opset >= 9) {
        diag *d = ir_err(c, "shape-rank", "BatchNormalization needs [N, C, ...] (rank >= 2), got rank %d", r);
        ir_fact_input(c, d, 0);
        return;
    }
    ir_dim C = r >= 2 ? ir_in_dim(c, 0, 1) : ir_dim_unknown();
    for (int32_t i = 1; i < 5 && i < ir_nin(c); i++)
        if (!check_param(c, i, bn_param_names[i], C, "the channel axis (1) of X")) return;
    ir_out_like(c, 0, 0);
    kiln_dtype pdt = ir_in_dt(c, 3) ? ir_in_dt(c, 3) : ir_in_dt(c, 0);
    ir_dim *cd = ir_dims_new(c, 1);
    if (!cd) return;
    cd[0] = C;
    for (int32_t o = 1; o < ir_nout(c); o++) ir_out(c, o, o <= 2 ? pdt : ir_in_dt(c, 0), 1, cd);
}

void ir_infer_instancenorm(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    if (r >= 0 && r < 3) {
        diag *d = ir_err(c, "shape-rank", "InstanceNormalization needs [N, C, spatial...] (rank >= 3), got rank %d", r);
        ir_fact_input(c, d, 0);
        return;
    }
    ir_dim C = r >= 2 ? ir_in_dim(c, 0, 1) : ir_dim_unknown();
    if (!check_param(c, 1, "scale", C, "the channel axis (1) of the input")) return;
    if (!check_param(c, 2, "B", C, "the channel axis (1) of the input")) return;
    ir_out_like(c, 0, 0);
}

void ir_infer_layernorm(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    kiln_dtype dt = ir_in_dt(c, 0);
    ir_out_like(c, 0, 0);
    if (r < 0) {
        ir_out(c, 1, KILN_DTYPE_FLOAT, -1, NULL);
        ir_out(c, 2, KILN_DTYPE_FLOAT, -1, NULL);
        return;
    }
    int32_t ax;
    if (!ir_axis(c, ir_ai(c, "axis", -1), r, "axis", &ax)) return;
    const ir_dim *d = ir_in(c, 0)->dims;
    for (int32_t p = 1; p <= 2; p++) {
        int32_t pr = ir_in_rank(c, p);
        if (!ir_has(c, p) || pr < 0) continue;
        const ir_dim *pd = ir_in(c, p)->dims;
        bool bad = pr > r - ax;
        int32_t bad_ax = -1;
        for (int32_t k = 0; !bad && k < pr; k++) {
            ir_dim x = d[r - 1 - k], y = pd[pr - 1 - k];
            if (!ir_dim_is(y, 1) && ir_dim_eq(c->m, x, y) == IR_DIM_NE) {
                bad = true;
                bad_ax = r - 1 - k;
            }
        }
        if (bad) {
            diag *dg = ir_err(c, "shape-norm-param", "%s (input %d) %s does not match the normalized axes %d.. of the input%s%s%s",
                              p == 1 ? "Scale" : "B", p, ir_shapestr(c, ir_in(c, p)), ax, bad_ax >= 0 ? " (axis " : "",
                              bad_ax >= 0 ? ir_dimstr(c, d[bad_ax]) : "", bad_ax >= 0 ? ")" : "");
            ir_fact_input(c, dg, 0);
            ir_fact_input(c, dg, p);
            ir_hint(c, dg, "LayerNorm's weight must have the normalized shape %s: the hidden size changed; "
                           "re-export with LayerNorm(%s) or restore the previous layer's width",
                    ir_dimstr(c, d[r - 1]), ir_dimstr(c, d[r - 1]));
            return;
        }
    }
    (void)dt;
    ir_dim *md = r ? ir_dims_new(c, r) : NULL;
    if (r && !md) return;
    for (int32_t i = 0; i < r; i++) md[i] = i < ax ? d[i] : ir_dim_const(1);
    int64_t stash = ir_ai(c, "stash_type", KILN_DTYPE_FLOAT);
    kiln_dtype sd = stash > 0 && stash < KILN_DTYPE_COUNT ? (kiln_dtype)stash : KILN_DTYPE_FLOAT;
    ir_out(c, 1, sd, r, md);
    ir_out(c, 2, sd, r, md);
}

void ir_infer_groupnorm(ir_ictx *c) {
    int32_t r = ir_in_rank(c, 0);
    int64_t g = ir_ai(c, "num_groups", 0);
    if (g < 1) {
        ir_err(c, "shape-attr-invalid", "num_groups %" PRId64 " must be >= 1", g);
        return;
    }
    ir_dim C = r >= 2 ? ir_in_dim(c, 0, 1) : ir_dim_unknown();
    if (C.kind == IR_DIM_CONST && C.value % g != 0) {
        diag *d = ir_err(c, "shape-attr-invalid", "num_groups %" PRId64 " does not divide the %" PRId64 " channels", g, C.value);
        ir_fact_input(c, d, 0);
        ir_hint(c, d, "choose a group count that divides the channel count");
        return;
    }
    /* opset 18 sized scale/bias per group; opset 21 per channel */
    ir_dim want = c->opset >= 21 ? C : ir_dim_const(g);
    ir_dim got = ir_in_rank(c, 1) == 1 ? ir_in_dim(c, 1, 0) : ir_dim_unknown();
    if (c->opset < 21 && ir_dim_eq(c->m, got, want) == IR_DIM_NE && ir_dim_eq(c->m, got, C) != IR_DIM_NE) want = C;
    if (!check_param(c, 1, "scale", want, c->opset >= 21 ? "the channel count" : "num_groups")) return;
    if (!check_param(c, 2, "bias", want, c->opset >= 21 ? "the channel count" : "num_groups")) return;
    ir_out_like(c, 0, 0);
}
