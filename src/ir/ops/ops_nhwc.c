/* ops_nhwc.c - inference for the internal channels-last ops (domain "kiln.nhwc").
 *
 * build/passes/layout_nhwc.c moves a device's half Conv / MaxPool / AveragePool /
 * GlobalAveragePool / GlobalMaxPool nodes into the domain "kiln.nhwc": same op_type and
 * attributes, but data tensors (X, Y, a fused kiln_residual) are [N, H, W, C] and a Conv
 * weight is [O, KH, KW, C/group] (OHWI); the bias stays [O]. Nothing else changes, so
 * the ONNX formulas apply to the permuted shapes. These ops exist in saved GPU engines:
 * loading one re-runs type inference (the session decides per node from value types),
 * which must know them or every value after the first NHWC node loses its type.
 *
 * How: the rank-4 input types are presented in NCHW/OIHW order for the duration of the
 * ordinary ONNX inference function (ops_conv.c), and its rank-4 result is permuted back
 * to NHWC. Diagnostics from that function therefore print NCHW shapes; the hint added
 * here says so. A fused residual is hidden from the ONNX function (it would be read as
 * a bias when the Conv has none) and checked here against the result instead. The CPU
 * backend has no kernels for this domain: a kiln.nhwc node only runs on a device that
 * accepted it when the pass ran.
 */
#include <string.h>

#include "ir/ops/ops.h"

static const int32_t nhwc_to_nchw[4] = {0, 3, 1, 2}; /* NHWC -> NCHW and OHWI -> OIHW */
static const int32_t nchw_to_nhwc[4] = {0, 2, 3, 1};

typedef struct saved_in {
    int32_t v;    /* value whose type was swapped, IR_NONE when none */
    ir_dim *dims; /* its own dims */
} saved_in;

/* Presents input k's rank-4 type in NCHW order (a new dims array; restored later). */
static bool present_nchw(ir_ictx *c, int32_t k, saved_in *s) {
    s->v = IR_NONE;
    if (k >= c->n->n_inputs) return true;
    int32_t v = c->n->inputs[k];
    if (v < 0 || v >= c->g->n_values) return true;
    ir_type *t = &c->g->values[v].type;
    if (t->kind != IR_TYPE_TENSOR || t->rank != 4 || !t->dims) return true;
    ir_dim *d = ir_dims_new(c, 4);
    if (!d) return false;
    for (int i = 0; i < 4; i++) d[i] = t->dims[nhwc_to_nchw[i]];
    s->v = v;
    s->dims = t->dims;
    t->dims = d;
    return true;
}

static void restore(ir_ictx *c, saved_in *s, int32_t n) {
    for (int32_t i = n - 1; i >= 0; i--)
        if (s[i].v != IR_NONE) c->g->values[s[i].v].type.dims = s[i].dims;
}

void ir_infer_nhwc(ir_ictx *c) {
    ir_node *n = c->n;
    bool conv = !strcmp(n->op_type, "Conv");
    bool global = !strncmp(n->op_type, "Global", 6);
    if (n->n_outputs != 1) {
        diag *d = ir_err(c, "shape-attr-invalid", "kiln.nhwc %s has %d outputs; the channels-last form has exactly one",
                         n->op_type, n->n_outputs);
        ir_hint(c, d, "this node was not made by kiln's layout pass: rebuild the engine");
        return;
    }
    int32_t rank = ir_in_rank(c, 0);
    if (rank >= 0 && rank != 4) {
        diag *d = ir_err(c, "shape-rank", "input X of kiln.nhwc %s has rank %d; the channels-last form is [N, H, W, C]",
                         n->op_type, rank);
        ir_fact_input(c, d, 0);
        return;
    }
    /* a fused residual (kiln_residual = its input index) is a data tensor like X */
    int32_t res = -1;
    const ir_attr *ra = conv ? ir_attr_get(c, "kiln_residual") : NULL;
    if (ra && ra->type == IR_ATTR_INT && ra->i >= 2 && ra->i < n->n_inputs) res = (int32_t)ra->i;
    saved_in s[2] = {{IR_NONE, NULL}, {IR_NONE, NULL}};
    int32_t n_in = n->n_inputs;
    bool ok = present_nchw(c, 0, &s[0]) && (!conv || present_nchw(c, 1, &s[1]));
    if (ok) {
        if (res >= 0) n->n_inputs = res; /* the ONNX function sees X, W and a bias only */
        if (conv) ir_infer_conv(c);
        else if (global) ir_infer_global_pool(c);
        else ir_infer_pool(c);
        n->n_inputs = n_in;
    }
    restore(c, s, 2);
    if (!ok || c->failed) return;
    ir_type *t = ir_out_ptr(c, 0);
    if (t && t->kind == IR_TYPE_TENSOR && t->rank == 4 && t->dims) {
        ir_dim *d = ir_dims_new(c, 4);
        if (!d) return;
        for (int i = 0; i < 4; i++) d[i] = t->dims[nchw_to_nhwc[i]];
        t->dims = d;
    }
    if (res >= 0 && t && t->kind == IR_TYPE_TENSOR) {
        const ir_type *r = ir_in(c, res);
        if (!r || r->kind != IR_TYPE_TENSOR) return;
        bool bad = kiln_dtype_valid(r->dtype) && kiln_dtype_valid(t->dtype) && r->dtype != t->dtype;
        if (r->rank >= 0 && t->rank >= 0 && r->dims && t->dims) {
            bad = bad || r->rank != t->rank;
            for (int32_t i = 0; !bad && i < r->rank; i++)
                bad = ir_dim_eq(c->m, r->dims[i], t->dims[i]) == IR_DIM_NE;
        }
        if (bad) {
            diag *d = ir_err(c, "shape-broadcast", "the fused residual (input %d) %s does not match the result %s", res,
                             ir_shapestr(c, r), ir_shapestr(c, t));
            ir_fact_input(c, d, res);
            ir_hint(c, d, "the residual is added to the convolution's output element by element: rebuild the engine");
        }
    }
}
