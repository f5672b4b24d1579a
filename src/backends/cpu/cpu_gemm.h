/* cpu_gemm.h - kiln's single-precision GEMM interface and the shared fused epilogue.
 *
 * Every dense kernel (Conv, ConvTranspose, MatMul, Gemm, RNNs, Attention) multiplies
 * through cpu_sgemm(), so the choice of BLAS, the threading policy and the fused
 * bias/residual/activation epilogue live in one place (cpu_gemm.c explains the policy).
 *
 * Fused epilogue. The runtime's fusion pass marks a Conv/Gemm/MatMul node with internal
 * attributes; kernels read them with cpu_epilogue_from_node():
 *   kiln_activation      string: "Relu", "Clip" (kiln_activation_min / _max floats),
 *                        "Sigmoid", "Tanh", "HardSigmoid" (kiln_activation_alpha/_beta),
 *                        "HardSwish", "LeakyRelu" (kiln_activation_alpha), "Gelu" (erf form),
 *                        "GeluTanh" (Gelu with approximate="tanh")
 *   kiln_residual        int: index of the node input holding a tensor of the output's
 *                        shape that is added before the activation (a fused Add)
 *   kiln_bias            int (MatMul only): index of the node input holding a 1-D bias of
 *                        N elements added to every row (a fused MatMul -> Add(bias))
 * The order is fixed: out = act(A*B + bias + residual). A pass may therefore fuse
 * Conv -> Add -> Relu, but not Conv -> Relu -> Add.
 */
#ifndef KILN_BACKENDS_CPU_CPU_GEMM_H
#define KILN_BACKENDS_CPU_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernel.h"

typedef enum cpu_act_kind {
    CPU_ACT_NONE = 0,
    CPU_ACT_RELU,
    CPU_ACT_CLIP,        /* a = min, b = max */
    CPU_ACT_SIGMOID,
    CPU_ACT_TANH,
    CPU_ACT_HARDSIGMOID, /* max(0, min(1, a*x + b)) */
    CPU_ACT_HARDSWISH,   /* x * max(0, min(1, x/6 + 1/2)) */
    CPU_ACT_LEAKYRELU,   /* a = alpha */
    CPU_ACT_GELU,        /* x * Phi(x), the erf form (cpu_gelu_avx2.h) */
    CPU_ACT_GELU_TANH    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
} cpu_act_kind;

typedef struct cpu_act {
    cpu_act_kind kind;
    float a, b;
} cpu_act;

enum cpu_bias_mode {
    CPU_BIAS_NONE = 0,
    CPU_BIAS_ROW = 1, /* bias[m] added to every element of row m (Conv: per channel) */
    CPU_BIAS_COL = 2  /* bias[n] added to every element of column n (Gemm/MatMul) */
};

typedef struct cpu_epilogue {
    int bias_mode;
    const float *bias;     /* indexed by the global row/column of C */
    const float *residual; /* same layout as C (row stride ld_res), or NULL */
    int64_t ld_res;
    cpu_act act;
} cpu_epilogue;

/* Reads kiln_activation / kiln_residual from the node into *ep (bias left NONE; the
 * residual pointer is set from inputs when kiln_residual is present and checked to hold
 * `out_count` floats). Fails on an unknown activation name. */
kiln_status cpu_epilogue_from_node(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                   uint64_t out_count, cpu_epilogue *ep);
/* Applies the activation to n contiguous floats in place. */
void cpu_act_apply(const cpu_act *act, float *x, int64_t n);
/* Applies the epilogue to the tile rows [m0, m1) x columns [n0, n1) of C. */
void cpu_epilogue_apply(const cpu_epilogue *ep, float *C, int64_t ldc, int64_t m0, int64_t m1, int64_t n0,
                        int64_t n1);
static inline bool cpu_epilogue_is_empty(const cpu_epilogue *ep) {
    return !ep || (ep->bias_mode == CPU_BIAS_NONE && !ep->residual && ep->act.kind == CPU_ACT_NONE);
}

/* C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, then the epilogue (may be NULL).
 * Row-major;
 * op(X) is X or its transpose. Call it from the kernel's own thread, never from inside a
 * cpu_parallel_for worker: BLAS runs its own threads (see cpu_gemm.c).
 * beta == 0 means C is write-only (it may hold garbage, even NaN, on entry). */
void cpu_sgemm(cpu_threadpool *pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
               const cpu_epilogue *ep);

/* True when node input i of ctx->node is a constant (an initializer or folded constant
 * that is not also a graph input), so kernels may cache data derived from it. */
bool cpu_input_is_const(const cpu_kernel_ctx *ctx, int32_t i);

#endif
