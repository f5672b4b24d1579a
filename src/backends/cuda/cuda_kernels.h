/* cuda_kernels.h - launchers of kiln's own CUDA kernels (cuda_kernels.cu), callable from C.
 *
 * Every launcher enqueues on `stream` and returns the launch error (cudaGetLastError) as
 * an int (cudaError_t); shapes are checked by the callers (cuda_ops_*.c). Index math is
 * 64-bit throughout: tensors over 2^31 elements are legal.
 */
#ifndef KILN_BACKENDS_CUDA_CUDA_KERNELS_H
#define KILN_BACKENDS_CUDA_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_K_MAX_RANK 8

/* Strided element mapping over an N-d index space: element i of the output (dims, row
 * major) reads in[in_off + sum(idx_d * in_str_d)] and writes out[out_off + sum(idx_d *
 * out_str_d)]. Transpose, Slice, Expand (stride 0), Concat pieces are all this. */
typedef struct cuda_nd {
    int32_t rank;
    int64_t dims[CUDA_K_MAX_RANK];
    int64_t in_str[CUDA_K_MAX_RANK];
    int64_t out_str[CUDA_K_MAX_RANK];
    int64_t in_off, out_off;
} cuda_nd;

/* Broadcast binary/ternary: output dims and each operand's strides (0 on broadcast axes). */
typedef struct cuda_bcast {
    int32_t rank;
    int64_t dims[CUDA_K_MAX_RANK];
    int64_t str[3][CUDA_K_MAX_RANK];
} cuda_bcast;

enum cuda_unary_op {
    CU_RELU, CU_SIGMOID, CU_TANH, CU_ERF, CU_SQRT, CU_EXP, CU_LOG, CU_NEG, CU_ABS, CU_RECIP, CU_GELU_ERF,
    CU_GELU_TANH, CU_CLIP, CU_LEAKY, CU_HSIGMOID, CU_HSWISH, CU_COPY, CU_SOFTPLUS, CU_ELU, CU_FLOOR, CU_CEIL
};
enum cuda_binary_op { CB_ADD, CB_SUB, CB_MUL, CB_DIV, CB_POW, CB_MAX, CB_MIN };
enum cuda_dtype_code { CD_F32, CD_F16, CD_I64, CD_I32, CD_BOOL, CD_F64 };

/* `half`: the float operands are __half (float16 storage, float32 math) instead of float. */
int cuda_k_unary(int half, int op, const void *x, void *y, int64_t n, float alpha, float beta, void *stream);
/* contiguous: all three operands have the output's shape (no index math) */
int cuda_k_binary(int half, int op, const void *a, const void *b, void *y, int64_t n, const cuda_bcast *bc,
                  int contiguous, void *stream);
int cuda_k_binary_i64(int op, const int64_t *a, const int64_t *b, int64_t *y, int64_t n, const cuda_bcast *bc,
                      void *stream);
int cuda_k_where(const uint8_t *c, const void *x, const void *y, void *out, int elem_size, int64_t n,
                 const cuda_bcast *bc, void *stream);
int cuda_k_copy_nd(const void *in, void *out, int elem_size, int64_t n, const cuda_nd *nd, void *stream);
int cuda_k_softmax(int half, const void *x, void *y, int64_t rows, int64_t cols, int log_softmax, void *stream);
int cuda_k_layernorm(int half, const void *x, const void *scale, const void *bias, void *y, int64_t rows,
                     int64_t cols, float eps, void *stream);
int cuda_k_batchnorm(int half, const void *x, const void *scale, const void *bias, const void *mean, const void *var,
                     void *y, int64_t n, int64_t c, int64_t hw, float eps, void *stream);
/* 2-D pooling over [nc, h, w]; max when is_max, else average (count_include_pad). */
int cuda_k_pool2d(int half, const void *x, void *y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow, int kh,
                  int kw, int sh, int sw, int ph, int pw, int dh, int dw, int is_max, int count_include_pad,
                  void *stream);
/* Channels-last pooling: cuda_layout.h. */
/* Global pooling: [rows, cols] -> [rows] mean (is_max 0) or max. */
int cuda_k_reduce_rows(int half, const void *x, void *y, int64_t rows, int64_t cols, int op, void *stream);
/* Reduction over the middle axis of [outer, r, inner]; op 0 mean, 1 sum, 2 max, 3 min. */
int cuda_k_reduce_mid(int half, const void *x, void *y, int64_t outer, int64_t r, int64_t inner, int op,
                      void *stream);
int cuda_k_gather(const void *data, const void *idx, int idx_is_i64, void *out, int elem_size, int64_t outer,
                  int64_t axis_len, int64_t n_idx, int64_t inner, void *stream);
int cuda_k_cast(const void *x, int src, void *y, int dst, int64_t n, void *stream);
/* y[n, c, hw] = act(y + bias[c] + res) in place; bias/res may be NULL; act is a
 * cuda_unary_op or -1 for none. */
int cuda_k_bias_act(int half, void *y, const void *bias, const void *res, int64_t n, int64_t c, int64_t hw, int act,
                    float alpha, float beta, void *stream);
/* FP16 convolution results to float32 with the fused epilogue, one pass:
 * y[n, c, hw] = act(yh + bias[c] + res) (yh is __half; bias/res may be NULL, act -1). */
int cuda_k_half_epilogue(const void *yh, float *y, const float *res, const float *bias, int64_t n, int64_t c,
                         int64_t hw, int act, float alpha, float beta, void *stream);

/* Fused attention (ONNX Attention without past/present): per (batch, head, query row)
 * y = softmax(scale * q k^T + mask [+ causal]) v, one pass over the keys with an online
 * softmax (cuda_attention.cu). Strides are in elements (the head dim is contiguous);
 * the mask strides are 0 on broadcast axes. Query head h reads kv head h / (Hq / Hkv).
 * The mask may be float32 with float16 q/k/v: the FP16 pass keeps additive masks in float32
 * (values such as (1 - m) * -10000 overflow float16). */
typedef struct cuda_att_args {
    int64_t B, Hq, Hkv, S, L, D, Dv;
    int64_t q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, v_sb, v_sh, v_ss, y_sb, y_sh, y_ss;
    int64_t m_sb, m_sh, m_si, m_sj;
    float scale;
    int causal;
    int mask_half; /* the mask's storage: 1 float16, 0 float32 (either, whatever q/k/v are) */
} cuda_att_args;
#define CUDA_ATT_MAX_D 128
int cuda_k_attention(int half, const void *q, const void *k, const void *v, const void *mask, void *y,
                     const cuda_att_args *a, void *stream);
/* The tensor-core form for float16 Q/K/V (cuda_attention_mma.cu): head dims equal and 32,
 * 64 or 128, 16-byte aligned rows. Returns cudaErrorNotSupported (without launching) for
 * anything else; the caller then uses cuda_k_attention. n_sm picks the block size. */
/* Vectorised float16 LayerNorm (one warp per row of 256..2048 halves, a multiple of 256)
 * and in-place GELU (n a multiple of 8; tanh_form 0 = erf) for transformer layers
 * (cuda_bert_kernels.cu); cudaErrorNotSupported without launching for other cases. */
int cuda_k_layernorm_half_rows(const void *x, const void *scale, const void *bias, void *y, int64_t rows,
                               int64_t cols, float eps, void *stream);
int cuda_k_gelu_half(void *y, int64_t n, int tanh_form, void *stream);
int cuda_k_attention_mma(const void *q, const void *k, const void *v, const void *mask, void *y,
                         const cuda_att_args *a, int n_sm, void *stream);

#ifdef __cplusplus
}
#endif

#endif
