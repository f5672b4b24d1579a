/* cpu_qkv_attention.c - kiln's QkvAttention (domain "kiln") on the CPU.
 *
 * build/passes/merge_qkv.c makes it for device backends: one GEMM computes Q, K and V
 * side by side into qkv [B, S, 3*H*D], and the attention reads the three thirds. The CPU
 * runs it so that such graphs still work everywhere (a node the device refuses falls back
 * per node; engines and tests run on machines without a GPU): the thirds are copied into
 * three contiguous [B, S, H*D] tensors and the ONNX Attention kernel (cpu_attention.c)
 * does the rest, with the node's own q_num_heads/kv_num_heads/scale/is_causal attributes
 * (the same names and meaning). For float32 the fused kernel (cpu_attention_fast.h)
 * reads the thirds in place instead (cpu_attention_rows): no copies.
 */
#include <string.h>

#include "backends/cpu/cpu_attention_fast.h"
#include "backends/cpu/cpu_kernel.h"

kiln_status cpu_qkv_attention(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (!x) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "QkvAttention needs its packed input");
    if (x->rank != 3) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "QkvAttention's packed input must be 3-D");
    if (n_in > 2) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "QkvAttention takes at most 2 inputs");
    if (x->dtype != KILN_DTYPE_FLOAT && x->dtype != KILN_DTYPE_FLOAT16)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "QkvAttention takes float32 or float16");
    if (x->dims[2] % 3) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "the packed width %lld is not a multiple of 3",
                                               (long long)x->dims[2]);
    int64_t hd = x->dims[2] / 3, rows = x->dims[0] * x->dims[1];
    size_t es = x->dtype == KILN_DTYPE_FLOAT ? 4 : 2, row_bytes = (size_t)hd * es;
    int64_t dims[3] = {x->dims[0], x->dims[1], hd};
    if (x->dtype == KILN_DTYPE_FLOAT && x->count) {
        /* float32: the fused kernel reads the thirds in place (views, rows 3*H*D apart) */
        rt_value view[3];
        for (int i = 0; i < 3; i++) {
            rt_value_init(&view[i]);
            rt_tensor_borrow(rt_value_as_tensor(&view[i]), KILN_DTYPE_FLOAT, 3, dims, (const float *)x->data + i * hd);
        }
        const rt_value *ins[4] = {&view[0], &view[1], &view[2], n_in > 1 ? inputs[1] : NULL};
        kiln_status st = cpu_attention_rows(ctx, ins, 4, outputs, n_out, 3 * hd);
        if (st != KILN_ERR_UNSUPPORTED) return st;
    }
    rt_value part[3];
    for (int i = 0; i < 3; i++) rt_value_init(&part[i]);
    kiln_status st = KILN_OK;
    for (int i = 0; i < 3 && st == KILN_OK; i++) {
        rt_tensor *t = rt_value_as_tensor(&part[i]);
        st = rt_tensor_alloc(t, x->dtype, 3, dims, ctx->err);
        if (st != KILN_OK || !t->count) continue;
        const char *src = (const char *)x->data + (size_t)i * row_bytes;
        char *dst = t->data;
        for (int64_t r = 0; r < rows; r++) memcpy(dst + (size_t)r * row_bytes, src + (size_t)r * 3 * row_bytes, row_bytes);
    }
    if (st == KILN_OK) {
        const rt_value *ins[4] = {&part[0], &part[1], &part[2], n_in > 1 ? inputs[1] : NULL};
        st = cpu_attention(ctx, ins, 4, outputs, n_out);
    }
    for (int i = 0; i < 3; i++) rt_value_release(&part[i]);
    return st;
}
