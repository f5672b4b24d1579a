/* cpu_fbuf.c - float32 working copies for the float-generic kernels (see cpu_fbuf.h). */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"
#include "backends/cpu/cpu_fbuf.h"

bool cpu_fbuf_dtype_ok(kiln_dtype d) {
    return d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_FLOAT16 || d == KILN_DTYPE_BFLOAT16 || d == KILN_DTYPE_DOUBLE;
}

static kiln_status fb_alloc(cpu_kernel_ctx *ctx, uint64_t n, float **out) {
    if (n > (uint64_t)(SIZE_MAX / sizeof(float)) / 2)
        return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "working buffer of %llu floats is too large", (unsigned long long)n);
    *out = malloc(n ? (size_t)n * sizeof(float) : sizeof(float));
    if (!*out) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for a %llu-float buffer", (unsigned long long)n);
    return KILN_OK;
}

kiln_status cpu_fbuf_get(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, const float **data,
                         float **owned) {
    *owned = NULL;
    *data = NULL;
    if (!cpu_fbuf_dtype_ok(t->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "%s must be float16, bfloat16, float32 or float64 (got %s)",
                               what, kiln_dtype_name(t->dtype));
    if (t->dtype == KILN_DTYPE_FLOAT) {
        *data = t->data;
        return KILN_OK;
    }
    float *buf;
    kiln_status st = fb_alloc(ctx, t->count, &buf);
    if (st != KILN_OK) return st;
    if (t->dtype == KILN_DTYPE_DOUBLE) {
        const double *s = t->data;
        for (uint64_t i = 0; i < t->count; i++) buf[i] = (float)s[i];
    } else {
        cpu_half_to_f32(t->dtype, t->data, buf, (int64_t)t->count);
    }
    *data = buf;
    *owned = buf;
    return KILN_OK;
}

kiln_status cpu_fbuf_any(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, float **out) {
    if (t->dtype == KILN_DTYPE_STRING || t->dtype == KILN_DTYPE_COMPLEX64 || t->dtype == KILN_DTYPE_COMPLEX128 ||
        cpu_elem_size(t->dtype) == 0)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "%s has unsupported type %s", what,
                               kiln_dtype_name(t->dtype));
    kiln_status st = fb_alloc(ctx, t->count, out);
    if (st != KILN_OK) return st;
    if (t->dtype == KILN_DTYPE_FLOAT) {
        if (t->count) memcpy(*out, t->data, (size_t)t->count * sizeof(float));
    } else {
        for (uint64_t i = 0; i < t->count; i++) (*out)[i] = (float)cpu_load_f64(t->data, t->dtype, i);
    }
    return KILN_OK;
}

void cpu_fbuf_put(rt_tensor *dst, const float *src, int64_t n) {
    switch (dst->dtype) {
    case KILN_DTYPE_FLOAT:
        if (dst->data != src && n) memcpy(dst->data, src, (size_t)n * sizeof(float));
        break;
    case KILN_DTYPE_DOUBLE: {
        double *d = dst->data;
        for (int64_t i = 0; i < n; i++) d[i] = src[i];
        break;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: cpu_f32_to_half(dst->dtype, src, dst->data, n); break;
    default:
        for (int64_t i = 0; i < n; i++) cpu_store_f64(dst->data, dst->dtype, (uint64_t)i, src[i]);
        break;
    }
}

kiln_status cpu_fbuf_out(cpu_kernel_ctx *ctx, rt_value *outputs, int32_t n_out, int32_t i, kiln_dtype dtype,
                         int32_t rank, const int64_t *dims, rt_tensor **t, float **data, float **scratch) {
    *scratch = NULL;
    *data = NULL;
    kiln_status st = cpu_alloc_out(ctx, outputs, n_out, i, dtype, rank, dims, t);
    if (st != KILN_OK) return st;
    if (dtype == KILN_DTYPE_FLOAT) {
        *data = (*t)->data;
        return KILN_OK;
    }
    st = fb_alloc(ctx, (*t)->count, scratch);
    if (st != KILN_OK) return st;
    *data = *scratch;
    return KILN_OK;
}

void cpu_fbuf_finish(rt_tensor *t, float *scratch) {
    if (!scratch) return;
    if (t) cpu_fbuf_put(t, scratch, (int64_t)t->count);
    free(scratch);
}

bool cpu_out_wanted(const cpu_kernel_ctx *ctx, int32_t n_out, int32_t i) {
    if (i >= n_out) return false;
    if (ctx->node && i < ctx->node->n_outputs && ctx->node->outputs[i] == IR_NONE) return false;
    return true;
}

#define FB_MAX_IN 32

kiln_status cpu_fbuf_call_f32(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out, cpu_kernel_fn fn) {
    if (n_in > FB_MAX_IN) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "too many inputs");
    rt_value conv[FB_MAX_IN];
    const rt_value *args[FB_MAX_IN] = {0};
    kiln_dtype orig = KILN_DTYPE_UNDEFINED;
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < n_in; i++) {
        rt_value_init(&conv[i]);
        args[i] = inputs[i];
        const rt_tensor *t = cpu_in(inputs, n_in, i);
        if (st != KILN_OK || !t || t->dtype == KILN_DTYPE_FLOAT || !cpu_fbuf_dtype_ok(t->dtype)) continue;
        if (orig == KILN_DTYPE_UNDEFINED) orig = t->dtype;
        rt_tensor *c = rt_value_as_tensor(&conv[i]);
        st = rt_tensor_alloc(c, KILN_DTYPE_FLOAT, t->rank, t->dims, ctx->err);
        if (st != KILN_OK) continue;
        if (t->dtype == KILN_DTYPE_DOUBLE) {
            const double *s = t->data;
            float *d = c->data;
            for (uint64_t k = 0; k < t->count; k++) d[k] = (float)s[k];
        } else {
            cpu_half_to_f32(t->dtype, t->data, c->data, (int64_t)t->count);
        }
        args[i] = &conv[i];
    }
    if (st == KILN_OK) st = fn(ctx, args, n_in, outputs, n_out);
    for (int32_t i = 0; i < n_in; i++) rt_value_release(&conv[i]);
    if (st != KILN_OK || orig == KILN_DTYPE_UNDEFINED) return st;
    for (int32_t o = 0; o < n_out; o++) {
        if (outputs[o].kind != IR_TYPE_TENSOR || outputs[o].t.dtype != KILN_DTYPE_FLOAT) continue;
        rt_tensor tmp;
        memset(&tmp, 0, sizeof tmp);
        st = rt_tensor_alloc(&tmp, orig, outputs[o].t.rank, outputs[o].t.dims, ctx->err);
        if (st != KILN_OK) return st;
        cpu_fbuf_put(&tmp, outputs[o].t.data, (int64_t)outputs[o].t.count);
        rt_tensor_release(&outputs[o].t);
        outputs[o].t = tmp;
    }
    return KILN_OK;
}
