/* cpu_softmax.c - Softmax, LogSoftmax and Hardmax (float32) with both opset semantics:
 * before opset 13 the input is flattened to 2-D at `axis` (default 1) and normalised over
 * the whole trailing block; from 13 on the op works along the single axis (default -1).
 *
 * The inner axis is contiguous for the common last-axis case (attention scores): each row
 * does max, exp-and-sum through the vectorised exp, then one scaling pass. Other axes are
 * handled with a strided loop. float16/bfloat16/float64 run through float32 copies
 * (cpu_fbuf_call_f32).
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_fbuf.h"
#include "backends/cpu/cpu_kernel.h"
#include "backends/cpu/cpu_rows.h"
#include "backends/cpu/cpu_via_f32.h"

enum sm_kind { SM_SOFTMAX, SM_LOG, SM_HARD };

typedef struct sm_job {
    int kind;
    int64_t len, inner; /* reduced length, stride between reduced elements */
    const float *x;
    float *y;
    const cpu_vmath *vm;
    const cpu_rows *rows;
} sm_job;

static void sm_row(const sm_job *j, const float *x, float *y) {
    int64_t n = j->len;
    float mx = -INFINITY;
    if (j->kind == SM_HARD) {
        int64_t arg = 0;
        for (int64_t i = 0; i < n; i++)
            if (x[i] > mx) {
                mx = x[i];
                arg = i;
            }
        memset(y, 0, sizeof(float) * (size_t)n);
        if (n) y[arg] = 1.f;
        return;
    }
    if (n) mx = j->rows->max(x, n); /* vectorised; skips NaN like the loop above */
    if (mx == -INFINITY) mx = 0.f; /* an all -inf row: exp gives 0s, sum 0 -> NaN like the reference */
    float sum = j->vm->exp_shift_sum(x, y, n, mx);
    if (j->kind == SM_SOFTMAX) {
        float inv = 1.f / sum;
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    } else {
        float ls = logf(sum);
        for (int64_t i = 0; i < n; i++) y[i] = x[i] - mx - ls;
    }
}

static void sm_run(void *user, int64_t begin, int64_t end) {
    const sm_job *j = user;
    if (j->inner == 1) {
        for (int64_t r = begin; r < end; r++) sm_row(j, j->x + r * j->len, j->y + r * j->len);
        return;
    }
    /* strided: gather each (outer, inner) column into a small buffer */
    float buf[1024], obuf[1024];
    for (int64_t r = begin; r < end; r++) {
        int64_t outer = r / j->inner, in = r % j->inner;
        const float *x = j->x + outer * j->len * j->inner + in;
        float *y = j->y + outer * j->len * j->inner + in;
        if (j->len <= 1024) {
            for (int64_t i = 0; i < j->len; i++) buf[i] = x[i * j->inner];
            sm_row(j, buf, obuf);
            for (int64_t i = 0; i < j->len; i++) y[i * j->inner] = obuf[i];
        } else { /* long strided axis: plain scalar math */
            float mx = -INFINITY, sum = 0.f;
            int64_t arg = 0;
            for (int64_t i = 0; i < j->len; i++)
                if (x[i * j->inner] > mx) {
                    mx = x[i * j->inner];
                    arg = i;
                }
            if (j->kind == SM_HARD) {
                for (int64_t i = 0; i < j->len; i++) y[i * j->inner] = i == arg ? 1.f : 0.f;
                continue;
            }
            if (mx == -INFINITY) mx = 0.f;
            for (int64_t i = 0; i < j->len; i++) sum += expf(x[i * j->inner] - mx);
            for (int64_t i = 0; i < j->len; i++) {
                float v = x[i * j->inner] - mx;
                y[i * j->inner] = j->kind == SM_SOFTMAX ? expf(v) / sum : v - logf(sum);
            }
        }
    }
}

static kiln_status sm_common(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int kind) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (!x) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing input");
    if (x->dtype == KILN_DTYPE_FLOAT16 || x->dtype == KILN_DTYPE_BFLOAT16 || x->dtype == KILN_DTYPE_DOUBLE)
        return cpu_run_via_f32(ctx, kind == SM_SOFTMAX ? cpu_softmax : kind == SM_LOG ? cpu_logsoftmax : cpu_hardmax,
                               inputs, n_in, outputs, 1);
    if (x->dtype != KILN_DTYPE_FLOAT)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "supports float32 only (got %s)", kiln_dtype_name(x->dtype));
    bool legacy = ctx->node && ctx->node->opset > 0 && ctx->node->opset < 13;
    int64_t axis = ir_node_attr_int(ctx->node, "axis", legacy ? 1 : -1);
    int32_t r = x->rank;
    if (axis < -r || axis >= (r == 0 ? 1 : r))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d", (long long)axis, r);
    if (axis < 0) axis += r;
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    kiln_status st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;
    int64_t outer = 1, len = 1, inner = 1;
    for (int32_t i = 0; i < r; i++) {
        if (i < axis) outer *= x->dims[i];
        else if (i == axis || legacy) len *= x->dims[i];
        else inner *= x->dims[i];
    }
    sm_job j = {kind, len, inner, x->data, y->data, cpu_vmath_get(), cpu_rows_get()};
    cpu_parallel_for(ctx->pool, outer * inner, 1 + 4096 / (len + 1), sm_run, &j);
    return KILN_OK;
}

kiln_status cpu_softmax(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                        int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (x && x->dtype != KILN_DTYPE_FLOAT && cpu_fbuf_dtype_ok(x->dtype))
        return cpu_fbuf_call_f32(ctx, inputs, n_in, outputs, n_out, cpu_softmax);
    return sm_common(ctx, inputs, n_in, outputs, SM_SOFTMAX);
}
kiln_status cpu_logsoftmax(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                           int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (x && x->dtype != KILN_DTYPE_FLOAT && cpu_fbuf_dtype_ok(x->dtype))
        return cpu_fbuf_call_f32(ctx, inputs, n_in, outputs, n_out, cpu_logsoftmax);
    return sm_common(ctx, inputs, n_in, outputs, SM_LOG);
}
kiln_status cpu_hardmax(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                        int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (x && x->dtype != KILN_DTYPE_FLOAT && cpu_fbuf_dtype_ok(x->dtype))
        return cpu_fbuf_call_f32(ctx, inputs, n_in, outputs, n_out, cpu_hardmax);
    return sm_common(ctx, inputs, n_in, outputs, SM_HARD);
}
