/* cuda_attention.c - the Attention node on the GPU (ONNX opset 23, without past/present
 * key-value caches): shape checks, strides and the launch of the fused kernel
 * (cuda_attention.cu). The graph pass build/passes/fuse_attention.c produces this node
 * from the exported MatMul/Softmax form of a transformer's attention block.
 *
 * Layouts: 3-D Q [B, S, Hq*D], K [B, L, Hkv*D], V [B, L, Hkv*Dv], Y [B, S, Hq*Dv] with the
 * q_num_heads/kv_num_heads attributes, or 4-D [B, H, S, D]. attn_mask (input 3): a float32
 * or float16 mask (independently of Q/K/V: with --fp16 the mask stays float32, see
 * precision_fp16.c) broadcastable to [B, Hq, S, L] (its last dim must be L), added to the
 * scaled scores. is_causal is supported; softcap, bool masks, past key/values and
 * the extra outputs are not (cuda_ops.c keeps such nodes on the CPU).
 *
 * Also kiln's QkvAttention (domain "kiln", build/passes/merge_qkv.c): the same attention
 * reading Q, K and V as the three thirds of one packed [B, S, 3*H*D] projection (one
 * merged GEMM instead of three), through the same strides, no copies.
 *
 * Kernels: float16 Q/K/V with head sizes 32/64/128 run the tensor-core kernel
 * (cuda_attention_mma.cu); everything else (float32, other head sizes, misaligned rows)
 * the CUDA-core kernel (cuda_attention.cu).
 */
#include <cuda_runtime.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

static const rt_tensor *in_t(const rt_node_call *call, int32_t k) {
    return call->n_in > k && call->inputs[k] ? &call->inputs[k]->t : NULL;
}

/* Strides (batch, head, seq) of a 3-D [B, S, H*D] or 4-D [B, H, S, D] tensor. */
static void strides(const rt_tensor *t, int64_t H, int64_t D, int64_t *sb, int64_t *sh, int64_t *ss) {
    if (t->rank == 3) {
        *sb = t->dims[1] * H * D, *sh = D, *ss = H * D;
    } else {
        *sb = H * t->dims[2] * D, *sh = t->dims[2] * D, *ss = D;
    }
}

/* Mask strides for the right-aligned broadcast to [B, Hq, S, L]. */
static kiln_status mask_strides(rt_node_call *call, const rt_tensor *mask, cuda_att_args *a) {
    if (!mask) return KILN_OK;
    if (mask->rank < 1 || mask->rank > 4 || mask->dims[mask->rank - 1] != a->L)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "the mask's last dim must be the key length %" PRId64, a->L);
    int64_t full[4] = {a->B, a->Hq, a->S, a->L}, str[4] = {0, 0, 0, 0}, s = 1;
    for (int32_t i = mask->rank - 1, j = 3; i >= 0; i--, j--) {
        int64_t d = mask->dims[i];
        if (d != 1 && d != full[j]) return cuda_node_fail(call, KILN_ERR_SHAPE, "the mask does not broadcast");
        str[j] = d == 1 ? 0 : s;
        s *= d;
    }
    a->m_sb = str[0], a->m_sh = str[1], a->m_si = str[2], a->m_sj = str[3];
    a->mask_half = mask->dtype == KILN_DTYPE_FLOAT16;
    return KILN_OK;
}

/* The tensor-core kernel when it takes the case, else the CUDA-core one. */
static kiln_status launch(cuda_ctx *c, rt_node_call *call, bool half, const void *q, const void *k, const void *v,
                          const void *mask, void *y, const cuda_att_args *a) {
    if (half && !getenv("KILN_CUDA_ATT_SIMT")) {
        int e = cuda_k_attention_mma(q, k, v, mask, y, a, c->info.sm_count, c->stream);
        if (e != (int)cudaErrorNotSupported) return cuda_fail(call, e, "attention kernel (tensor cores)");
    }
    return cuda_fail(call, cuda_k_attention(half, q, k, v, mask, y, a, c->stream), "attention kernel");
}

kiln_status cuda_run_attention(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *q = in_t(call, 0), *k = in_t(call, 1), *v = in_t(call, 2), *mask = in_t(call, 3);
    if (!q || !k || !v) return cuda_node_fail(call, KILN_ERR_SHAPE, "Q, K and V are required");
    int32_t r = q->rank;
    if ((r != 3 && r != 4) || k->rank != r || v->rank != r)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "Q, K and V must all be 3-D or all 4-D");
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "Q, K and V differ in dtype");
    if (mask && mask->dtype != KILN_DTYPE_FLOAT && mask->dtype != KILN_DTYPE_FLOAT16)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "the mask must be float32 or float16 on the GPU");
    for (int32_t i = 4; i < call->n_in; i++)
        if (call->inputs[i]) return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "past key/value inputs on the GPU");
    cuda_att_args a;
    memset(&a, 0, sizeof a);
    a.B = q->dims[0];
    if (k->dims[0] != a.B || v->dims[0] != a.B) return cuda_node_fail(call, KILN_ERR_SHAPE, "batch sizes differ");
    int64_t ydims[4];
    if (r == 3) {
        a.Hq = ir_node_attr_int(n, "q_num_heads", 0);
        a.Hkv = ir_node_attr_int(n, "kv_num_heads", 0);
        if (a.Hq < 1 || a.Hkv < 1 || q->dims[2] % a.Hq || k->dims[2] % a.Hkv || v->dims[2] % a.Hkv)
            return cuda_node_fail(call, KILN_ERR_SHAPE, "3-D inputs need q_num_heads/kv_num_heads dividing the hidden "
                                  "sizes");
        a.S = q->dims[1], a.L = k->dims[1], a.D = q->dims[2] / a.Hq, a.Dv = v->dims[2] / a.Hkv;
        if (k->dims[2] / a.Hkv != a.D || v->dims[1] != a.L)
            return cuda_node_fail(call, KILN_ERR_SHAPE, "K does not match Q's head size, or K and V lengths differ");
        ydims[0] = a.B, ydims[1] = a.S, ydims[2] = a.Hq * a.Dv;
    } else {
        a.Hq = q->dims[1], a.Hkv = k->dims[1], a.S = q->dims[2], a.L = k->dims[2], a.D = q->dims[3], a.Dv = v->dims[3];
        if (k->dims[3] != a.D || v->dims[1] != a.Hkv || v->dims[2] != a.L)
            return cuda_node_fail(call, KILN_ERR_SHAPE, "K/V shapes do not match Q");
        ydims[0] = a.B, ydims[1] = a.Hq, ydims[2] = a.S, ydims[3] = a.Dv;
    }
    if (a.Hq % a.Hkv) return cuda_node_fail(call, KILN_ERR_SHAPE, "q heads not a multiple of kv heads");
    if (a.D > CUDA_ATT_MAX_D || a.Dv > CUDA_ATT_MAX_D)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "head size over %d on the GPU", CUDA_ATT_MAX_D);
    if (a.B * a.Hq > 65535) return cuda_node_fail(call, KILN_ERR_LIMIT, "batch x heads over 65535");
    strides(q, a.Hq, a.D, &a.q_sb, &a.q_sh, &a.q_ss);
    strides(k, a.Hkv, a.D, &a.k_sb, &a.k_sh, &a.k_ss);
    strides(v, a.Hkv, a.Dv, &a.v_sb, &a.v_sh, &a.v_ss);
    a.scale = ir_node_attr_float(n, "scale", 1.f / sqrtf((float)a.D));
    a.causal = ir_node_attr_int(n, "is_causal", 0) != 0;
    if (ir_node_attr_float(n, "softcap", 0.f) != 0.f)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "softcap on the GPU");
    kiln_status st = mask_strides(call, mask, &a);
    if (st != KILN_OK) return st;
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], q->dtype, r, ydims, &y, call->err);
    if (st != KILN_OK || !y->count) return st;
    strides(y, a.Hq, a.Dv, &a.y_sb, &a.y_sh, &a.y_ss);
    return launch(c, call, q->dtype == KILN_DTYPE_FLOAT16, q->data, k->data, v->data, mask ? mask->data : NULL,
                  y->data, &a);
}

kiln_status cuda_run_qkv_attention(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *qkv = in_t(call, 0), *mask = in_t(call, 1);
    if (!qkv || qkv->rank != 3) return cuda_node_fail(call, KILN_ERR_SHAPE, "QkvAttention needs a 3-D packed input");
    if (mask && mask->dtype != KILN_DTYPE_FLOAT && mask->dtype != KILN_DTYPE_FLOAT16)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "the mask must be float32 or float16 on the GPU");
    cuda_att_args a;
    memset(&a, 0, sizeof a);
    a.B = qkv->dims[0], a.S = a.L = qkv->dims[1];
    a.Hq = a.Hkv = ir_node_attr_int(n, "q_num_heads", 0);
    if (a.Hq < 1 || ir_node_attr_int(n, "kv_num_heads", a.Hq) != a.Hq || qkv->dims[2] % (3 * a.Hq))
        return cuda_node_fail(call, KILN_ERR_SHAPE, "the packed width must be 3 x heads x head size");
    a.D = a.Dv = qkv->dims[2] / (3 * a.Hq);
    if (a.D > CUDA_ATT_MAX_D) return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "head size over %d on the GPU", CUDA_ATT_MAX_D);
    if (a.B * a.Hq > 65535) return cuda_node_fail(call, KILN_ERR_LIMIT, "batch x heads over 65535");
    int64_t hd = a.Hq * a.D;
    a.q_sb = a.k_sb = a.v_sb = a.S * 3 * hd;
    a.q_sh = a.k_sh = a.v_sh = a.D;
    a.q_ss = a.k_ss = a.v_ss = 3 * hd;
    a.scale = ir_node_attr_float(n, "scale", 1.f / sqrtf((float)a.D));
    a.causal = ir_node_attr_int(n, "is_causal", 0) != 0;
    kiln_status st = mask_strides(call, mask, &a);
    if (st != KILN_OK) return st;
    int64_t ydims[3] = {a.B, a.S, hd};
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], qkv->dtype, 3, ydims, &y, call->err);
    if (st != KILN_OK || !y->count) return st;
    a.y_sb = a.S * hd, a.y_sh = a.D, a.y_ss = hd;
    size_t es = qkv->dtype == KILN_DTYPE_FLOAT16 ? 2 : 4;
    const char *base = qkv->data;
    return launch(c, call, qkv->dtype == KILN_DTYPE_FLOAT16, base, base + (size_t)hd * es, base + (size_t)(2 * hd) * es,
                  mask ? mask->data : NULL, y->data, &a);
}
