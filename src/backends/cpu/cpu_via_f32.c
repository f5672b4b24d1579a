/* cpu_via_f32.c - see cpu_via_f32.h. */
#include "backends/cpu/cpu_via_f32.h"

#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

bool cpu_via_f32_ok(kiln_dtype d) {
    switch (d) {
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_DOUBLE:
    case KILN_DTYPE_INT8:
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_INT16:
    case KILN_DTYPE_UINT16: return true;
    default: return false;
    }
}

static kiln_status to_f32(cpu_kernel_ctx *ctx, const rt_tensor *src, rt_tensor *dst) {
    kiln_status st = rt_tensor_alloc(dst, KILN_DTYPE_FLOAT, src->rank, src->dims, ctx->err);
    if (st != KILN_OK) return st;
    float *d = dst->data;
    if (cpu_dtype_is_half(src->dtype)) cpu_half_to_f32(src->dtype, src->data, d, (int64_t)src->count);
    else
        for (uint64_t i = 0; i < src->count; i++) d[i] = (float)cpu_load_f64(src->data, src->dtype, i);
    return KILN_OK;
}

kiln_status cpu_run_via_f32(cpu_kernel_ctx *ctx, cpu_kernel_fn fn, const rt_value *const *inputs, int32_t n_in,
                            rt_value *outputs, int32_t n_out) {
    const rt_tensor *x0 = cpu_in(inputs, n_in, 0);
    if (!x0 || !cpu_via_f32_ok(x0->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_INTERNAL, "cpu_run_via_f32 called for an unsupported dtype");
    kiln_dtype back = x0->dtype;
    rt_value *conv = calloc((size_t)n_in + 1, sizeof *conv);
    const rt_value **ins = calloc((size_t)n_in + 1, sizeof *ins);
    kiln_status st = conv && ins ? KILN_OK : cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n_in && st == KILN_OK; i++) {
        const rt_tensor *t = cpu_in(inputs, n_in, i);
        rt_value_init(&conv[i]);
        if (t && cpu_via_f32_ok(t->dtype)) {
            st = to_f32(ctx, t, rt_value_as_tensor(&conv[i]));
            ins[i] = &conv[i];
        } else {
            ins[i] = inputs[i];
        }
    }
    if (st == KILN_OK) st = fn(ctx, ins, n_in, outputs, n_out);
    for (int32_t k = 0; k < n_out && st == KILN_OK; k++) {
        if (outputs[k].kind != IR_TYPE_TENSOR || outputs[k].t.dtype != KILN_DTYPE_FLOAT) continue;
        rt_tensor out;
        memset(&out, 0, sizeof out);
        const rt_tensor *f = &outputs[k].t;
        st = rt_tensor_alloc(&out, back, f->rank, f->dims, ctx->err);
        if (st != KILN_OK) break;
        if (cpu_dtype_is_half(back)) cpu_f32_to_half(back, f->data, out.data, (int64_t)f->count);
        else
            for (uint64_t i = 0; i < f->count; i++) cpu_store_f64(out.data, back, i, ((const float *)f->data)[i]);
        rt_tensor_release(&outputs[k].t);
        outputs[k].t = out;
    }
    if (conv)
        for (int32_t i = 0; i < n_in; i++) rt_value_release(&conv[i]);
    free(conv);
    free(ins);
    return st;
}
