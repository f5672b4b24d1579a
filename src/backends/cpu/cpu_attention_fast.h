/* cpu_attention_fast.h - fused float32 attention on the CPU: per (batch, head, query
 * block), scores = Q K^T through the packed GEMM, scale + mask + softmax in one pass over
 * the scores while they are in L2, then P V through the packed GEMM straight into the
 * output's head slice. No [B, H, S, L] tensor is ever written to memory, and Q, K, V are
 * read where they lie (any row stride: [B, S, H*D], [B, H, S, D], or the thirds of a
 * merged [B, S, 3*H*D] projection), so the head-split and head-merge transposes of the
 * unfused graph disappear too.
 *
 * cpu_attention.c (ONNX Attention) and cpu_qkv_attention.c (kiln's QkvAttention) call
 * it for the common case: float32, no KV cache, no softcap, no scores output; everything
 * else stays on their reference loop. Requires cpu_gemm_packed_supported() (AVX2 + FMA).
 */
#ifndef KILN_BACKENDS_CPU_CPU_ATTENTION_FAST_H
#define KILN_BACKENDS_CPU_CPU_ATTENTION_FAST_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernel.h"

/* Where the rows of one operand lie: element (b, h, s, d) at p[b*sb + h*sh + s*ss + d]. */
typedef struct cpu_att_operand {
    const float *p;
    int64_t sb, sh, ss;
} cpu_att_operand;

typedef struct cpu_att_problem {
    int64_t B, Hq, Hkv, S, T, Dq, Dv; /* T: key/value length; query head h reads kv head h / (Hq / Hkv) */
    cpu_att_operand q, k, v;
    float *y;                /* output element (b, h, s, d) at y[b*y_sb + h*y_sh + s*y_ss + d] */
    int64_t y_sb, y_sh, y_ss;
    /* additive bias, at most one of the two masks: element (b, h, i, t) at
     * m[b*mstr[0] + h*mstr[1] + i*mstr[2] + t*mstr[3]] for t < mlen, -inf for t >= mlen;
     * bool: false -> -inf, true -> 0 */
    const float *maskf;
    const uint8_t *maskb;
    int64_t mstr[4], mlen;
    bool causal; /* query i sees keys t <= i */
    float scale;
} cpu_att_problem;

/* Runs the attention over the pool. A row whose bias is -inf everywhere gives zeros, as
 * the reference loop does. Fails only when scratch memory cannot be allocated or the
 * sizes overflow (err says which). Call only when cpu_gemm_packed_supported(). */
kiln_status cpu_attention_fast(cpu_threadpool *pool, const cpu_att_problem *p, kiln_error *err);

/* The Attention kernel (cpu_attention.c, its attributes from ctx->node) with inputs 0-2
 * float32 [B, S, H*D] views whose rows lie row_stride floats apart: the thirds of a
 * merged Q/K/V projection (cpu_qkv_attention.c), read in place. Returns
 * KILN_ERR_UNSUPPORTED, with no output touched and no message set, when the fused kernel
 * does not cover the call; the caller then passes contiguous copies to cpu_attention. */
kiln_status cpu_attention_rows(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out, int64_t row_stride);

#endif
