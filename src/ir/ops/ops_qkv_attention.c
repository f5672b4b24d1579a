/* ops_qkv_attention.c - type and shape inference for kiln's internal QkvAttention op
 * (domain "kiln", made by build/passes/merge_qkv.c from an ONNX Attention node whose Q, K
 * and V projections were merged into one GEMM).
 *
 * QkvAttention(qkv [B, S, 3*H*D] float, attn_mask? float) -> Y [B, S, H*D], attributes
 * q_num_heads = kv_num_heads = H, scale, is_causal: exactly ONNX Attention (3-D form) with
 * Q = qkv[..., 0:H*D], K = qkv[..., H*D:2*H*D], V = qkv[..., 2*H*D:3*H*D]. Backends: the CPU
 * (cpu_qkv_attention.c, through the Attention kernel) and CUDA (cuda_attention.c).
 */
#include "ir/ops/ops.h"

void ir_infer_qkv_attention(ir_ictx *c) {
    kiln_dtype dt = ir_in_dt(c, 0);
    if (dt != KILN_DTYPE_UNDEFINED && dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16) {
        ir_fact_input(c, ir_err(c, "type-mismatch", "QkvAttention takes a float32 or float16 packed input"), 0);
        return;
    }
    int64_t h = ir_ai(c, "q_num_heads", 0);
    if (h < 1 || ir_ai(c, "kv_num_heads", h) != h) {
        ir_err(c, "shape-attr-invalid", "QkvAttention needs q_num_heads >= 1 and kv_num_heads equal to it");
        return;
    }
    int32_t r = ir_in_rank(c, 0);
    if (r < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    if (r != 3) {
        ir_fact_input(c, ir_err(c, "shape-rank", "QkvAttention's packed input must be 3-D [B, S, 3*H*D]"), 0);
        return;
    }
    ir_dim w = ir_in_dim(c, 0, 2), hd;
    if (w.kind == IR_DIM_CONST && w.value % (3 * h)) {
        ir_fact_input(c,
                      ir_err(c, "shape-attr-invalid", "QkvAttention's packed width %lld is not a multiple of 3 x %lld heads",
                             (long long)w.value, (long long)h),
                      0);
        return;
    }
    if (!ir_dim_div_exact(c->m, w, ir_dim_const(3), &hd)) hd = ir_dim_unknown();
    ir_dim *y = ir_dims_new(c, 3);
    if (!y) return;
    y[0] = ir_in_dim(c, 0, 0);
    y[1] = ir_in_dim(c, 0, 1);
    y[2] = hd;
    ir_out(c, 0, dt, 3, y);
}
