/* cpu_training.c - ai.onnx.preview.training optimizer steps: Adagrad, Adam, Momentum.
 *
 * Each op updates n tensors at once: inputs are R (learning rate, scalar), T (step count,
 * int64 scalar), then n X's, n G's (gradients) and the per-op state tensors (Adagrad: H;
 * Momentum: V; Adam: V then H); outputs are the new X's then the new states in the same
 * grouping. The formulas are the operator spec's, computed in double and stored back in
 * each tensor's dtype (float32 or float64). Gradient, the fourth op of that domain, is a
 * graph transformation (autodiff), not a kernel, and stays unsupported.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

typedef enum { OPT_ADAGRAD, OPT_ADAM, OPT_MOMENTUM } opt_kind;

static kiln_status optimizer(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out, opt_kind kind) {
    int32_t groups = kind == OPT_ADAM ? 4 : 3; /* X, G, state(s) */
    if (n_in < 2 || (n_in - 2) % groups != 0 || n_in == 2)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "expected R, T and %d groups of n tensors", groups);
    int32_t n = (n_in - 2) / groups;
    if (n_out != (groups - 1) * n)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "expected %d outputs", (groups - 1) * n);
    const rt_tensor *rt, *tt;
    double R;
    int64_t T;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &rt);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &tt);
    if (st == KILN_OK) st = cpu_read_scalar_f64(ctx, rt, "R", &R);
    if (st == KILN_OK) st = cpu_read_scalar_i64(ctx, tt, "T", &T);
    if (st != KILN_OK) return st;
    const ir_node *nd = ctx->node;
    double norm = ir_node_attr_float(nd, "norm_coefficient", 0.0f);
    for (int32_t k = 0; k < n; k++) {
        const rt_tensor *in[4];
        for (int32_t g = 0; g < groups; g++) {
            st = cpu_need_input(ctx, inputs, n_in, 2 + g * n + k, &in[g]);
            if (st != KILN_OK) return st;
            if (in[g]->dtype != KILN_DTYPE_FLOAT && in[g]->dtype != KILN_DTYPE_DOUBLE)
                return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "supports float32/float64 tensors only (got %s)",
                                       kiln_dtype_name(in[g]->dtype));
            if (in[g]->count != in[0]->count)
                return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "tensor group %d of parameter %d has %" PRIu64
                                       " elements, X has %" PRIu64, (int)g, (int)k, in[g]->count, in[0]->count);
        }
        rt_tensor *out[3];
        for (int32_t g = 0; g < groups - 1; g++) {
            const rt_tensor *like = g == 0 ? in[0] : in[2 + g - 1];
            st = cpu_alloc_out(ctx, outputs, n_out, g * n + k, like->dtype, like->rank, like->dims, &out[g]);
            if (st != KILN_OK) return st;
        }
        const rt_tensor *X = in[0], *G = in[1];
        for (uint64_t i = 0; i < X->count; i++) {
            double x = cpu_load_f64(X->data, X->dtype, i), g = cpu_load_f64(G->data, G->dtype, i);
            double gr = norm * x + g;
            if (kind == OPT_ADAGRAD) {
                double decay = ir_node_attr_float(nd, "decay_factor", 0.0f);
                double eps = ir_node_attr_float(nd, "epsilon", 0.0f);
                double h = cpu_load_f64(in[2]->data, in[2]->dtype, i);
                double r = R / (1.0 + (double)T * decay);
                double hn = h + gr * gr;
                cpu_store_f64(out[0]->data, out[0]->dtype, i, x - r * gr / (sqrt(hn) + eps));
                cpu_store_f64(out[1]->data, out[1]->dtype, i, hn);
            } else if (kind == OPT_MOMENTUM) {
                double alpha = ir_node_attr_float(nd, "alpha", 0.0f), beta = ir_node_attr_float(nd, "beta", 0.0f);
                const ir_attr *ma = ir_node_attr(nd, "mode");
                bool nesterov = ma && ma->type == IR_ATTR_STRING && ma->s.len == 8 && !memcmp(ma->s.data, "nesterov", 8);
                double v = cpu_load_f64(in[2]->data, in[2]->dtype, i);
                double b = T > 0 ? beta : 1.0;
                double vn = alpha * v + b * gr;
                double xn = nesterov ? x - R * (gr + alpha * vn) : x - R * vn;
                cpu_store_f64(out[0]->data, out[0]->dtype, i, xn);
                cpu_store_f64(out[1]->data, out[1]->dtype, i, vn);
            } else {
                double alpha = ir_node_attr_float(nd, "alpha", 0.9f), beta = ir_node_attr_float(nd, "beta", 0.999f);
                double eps = ir_node_attr_float(nd, "epsilon", 1e-6f);
                double post = ir_node_attr_float(nd, "norm_coefficient_post", 0.0f);
                double v = cpu_load_f64(in[2]->data, in[2]->dtype, i), h = cpu_load_f64(in[3]->data, in[3]->dtype, i);
                double vn = alpha * v + (1.0 - alpha) * gr;
                double hn = beta * h + (1.0 - beta) * gr * gr;
                double ra = T > 0 ? R * sqrt(1.0 - pow(beta, (double)T)) / (1.0 - pow(alpha, (double)T)) : R;
                double xn = (x - ra * vn / (sqrt(hn) + eps)) * (1.0 - post);
                cpu_store_f64(out[0]->data, out[0]->dtype, i, xn);
                cpu_store_f64(out[1]->data, out[1]->dtype, i, vn);
                cpu_store_f64(out[2]->data, out[2]->dtype, i, hn);
            }
        }
    }
    return KILN_OK;
}

kiln_status cpu_Adagrad(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                        int32_t n_out) {
    return optimizer(ctx, inputs, n_in, outputs, n_out, OPT_ADAGRAD);
}
kiln_status cpu_Adam(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    return optimizer(ctx, inputs, n_in, outputs, n_out, OPT_ADAM);
}
kiln_status cpu_Momentum(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                         int32_t n_out) {
    return optimizer(ctx, inputs, n_in, outputs, n_out, OPT_MOMENTUM);
}
