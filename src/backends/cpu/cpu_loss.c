/* cpu_loss.c - NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
 *
 * Both share nll(): input [N, C, d1..dk] of log-probabilities, integer targets
 * [N, d1..dk], optional class weights [C], ignore_index, and reduction none/sum/mean
 * (mean divides by the summed weights of the counted targets, as the spec says).
 * SoftmaxCrossEntropyLoss first takes a numerically stable log-softmax over axis 1 and
 * can return it as its second output. Values compute in double; targets are checked
 * against [0, C) so hostile labels fail with the node name instead of reading past the
 * buffer.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

typedef enum loss_red { LR_NONE, LR_SUM, LR_MEAN } loss_red;

static kiln_status loss_attrs(cpu_kernel_ctx *ctx, loss_red *red, bool *has_ignore, int64_t *ignore) {
    const ir_attr *a = ir_node_attr(ctx->node, "reduction");
    *red = LR_MEAN;
    if (a && a->type == IR_ATTR_STRING) {
        if (a->s.len == 4 && !memcmp(a->s.data, "none", 4)) *red = LR_NONE;
        else if (a->s.len == 3 && !memcmp(a->s.data, "sum", 3)) *red = LR_SUM;
        else if (!(a->s.len == 4 && !memcmp(a->s.data, "mean", 4)))
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "reduction must be none, sum or mean");
    }
    const ir_attr *ig = ir_node_attr(ctx->node, "ignore_index");
    *has_ignore = ig && ig->type == IR_ATTR_INT;
    *ignore = *has_ignore ? ig->i : 0;
    return KILN_OK;
}

static bool float_dtype(kiln_dtype d) {
    return d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_DOUBLE || d == KILN_DTYPE_FLOAT16 || d == KILN_DTYPE_BFLOAT16;
}

/* logp: N*C*D doubles (layout [N, C, D]); writes output 0 in dtype `dt`. */
static kiln_status nll(cpu_kernel_ctx *ctx, const double *logp, int64_t N, int64_t C, int64_t D, const rt_tensor *x,
                       const rt_tensor *target, const rt_tensor *weight, rt_value *outputs, int32_t n_out) {
    loss_red red = LR_MEAN;
    bool has_ignore = false;
    int64_t ignore = 0;
    kiln_status st = loss_attrs(ctx, &red, &has_ignore, &ignore);
    if (st != KILN_OK) return st;
    if (target->dtype != KILN_DTYPE_INT64 && target->dtype != KILN_DTYPE_INT32)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "target must be int32 or int64");
    if ((int64_t)target->count != N * D || target->rank != x->rank - 1)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "target shape does not match the input's [N, d1, ...]");
    if (weight && ((int64_t)weight->count != C || !float_dtype(weight->dtype)))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "weight must be a float tensor of %" PRId64 " classes", C);
    double *loss = malloc(sizeof(double) * (size_t)(N * D + 1));
    if (!loss) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    double wsum = 0, lsum = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t t = cpu_load_i64(target->data, target->dtype, (uint64_t)(n * D + d));
            double l = 0;
            if (!(has_ignore && t == ignore)) {
                if (t < 0 || t >= C) {
                    free(loss);
                    return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "target %" PRId64 " is outside the %" PRId64 " classes",
                                           t, C);
                }
                double w = weight ? cpu_load_f64(weight->data, weight->dtype, (uint64_t)t) : 1.0;
                l = -logp[(n * C + t) * D + d] * w;
                wsum += w;
            }
            loss[n * D + d] = l;
            lsum += l;
        }
    rt_tensor *y = NULL;
    if (red == LR_NONE) {
        st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, target->rank, target->dims, &y);
        if (st == KILN_OK)
            for (int64_t i = 0; i < N * D; i++) cpu_store_f64(y->data, x->dtype, (uint64_t)i, loss[i]);
    } else {
        st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, 0, NULL, &y);
        if (st == KILN_OK) cpu_store_f64(y->data, x->dtype, 0, red == LR_SUM ? lsum : lsum / wsum);
    }
    free(loss);
    return st;
}

static kiln_status loss_inputs(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, const rt_tensor **x,
                               const rt_tensor **t, int64_t *N, int64_t *C, int64_t *D) {
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, t);
    if (st != KILN_OK) return st;
    if (!float_dtype((*x)->dtype) || (*x)->rank < 2)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must be a float tensor [N, C, ...]");
    *N = (*x)->dims[0];
    *C = (*x)->dims[1];
    *D = 1;
    for (int32_t i = 2; i < (*x)->rank; i++) *D *= (*x)->dims[i];
    return KILN_OK;
}

kiln_status cpu_NegativeLogLikelihoodLoss(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                          rt_value *outputs, int32_t n_out) {
    const rt_tensor *x, *t;
    int64_t N, C, D;
    kiln_status st = loss_inputs(ctx, inputs, n_in, &x, &t, &N, &C, &D);
    if (st != KILN_OK) return st;
    double *lp = malloc(sizeof(double) * (x->count + 1));
    if (!lp) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < x->count; i++) lp[i] = cpu_load_f64(x->data, x->dtype, i);
    st = nll(ctx, lp, N, C, D, x, t, cpu_in(inputs, n_in, 2), outputs, n_out);
    free(lp);
    return st;
}

kiln_status cpu_SoftmaxCrossEntropyLoss(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                        rt_value *outputs, int32_t n_out) {
    const rt_tensor *x, *t;
    int64_t N, C, D;
    kiln_status st = loss_inputs(ctx, inputs, n_in, &x, &t, &N, &C, &D);
    if (st != KILN_OK) return st;
    double *lp = malloc(sizeof(double) * (x->count + 1));
    if (!lp) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            double mx = -__builtin_inf(), s = 0;
            for (int64_t c = 0; c < C; c++) {
                double v = cpu_load_f64(x->data, x->dtype, (uint64_t)((n * C + c) * D + d));
                lp[(n * C + c) * D + d] = v;
                if (v > mx) mx = v;
            }
            for (int64_t c = 0; c < C; c++) s += exp(lp[(n * C + c) * D + d] - mx);
            double lse = mx + log(s);
            for (int64_t c = 0; c < C; c++) lp[(n * C + c) * D + d] -= lse;
        }
    st = nll(ctx, lp, N, C, D, x, t, cpu_in(inputs, n_in, 2), outputs, n_out);
    if (st == KILN_OK && n_out > 1) {
        rt_tensor *y = NULL;
        st = cpu_alloc_out(ctx, outputs, n_out, 1, x->dtype, x->rank, x->dims, &y);
        if (st == KILN_OK)
            for (uint64_t i = 0; i < x->count; i++) cpu_store_f64(y->data, x->dtype, i, lp[i]);
    }
    free(lp);
    return st;
}
