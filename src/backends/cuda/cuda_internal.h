/* cuda_internal.h - what the CUDA backend's files share: the context (stream, library
 * handles, workspace, precision flags), the op table and helpers for outputs and errors.
 *
 * Files: cuda_backend.c (the rt_backend table: memory, copies, timers, dispatch),
 * cuda_ops.c (which nodes run here: host-only logic, unit-tested without a GPU),
 * cuda_ops_run.c (elementwise, norm, pooling, data movement through cuda_kernels.cu),
 * cuda_gemm.c (MatMul/Gemm through cuBLASLt), cuda_conv.c (Conv through cuDNN),
 * cuda_layout.cu / cuda_layout_host.c (tiled transposes, the padded stem's NCHW -> NHWC,
 * channels-last pooling; see cuda_layout.h).
 */
#ifndef KILN_BACKENDS_CUDA_CUDA_INTERNAL_H
#define KILN_BACKENDS_CUDA_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cuda/cuda_info.h"
#include "backends/cuda/cuda_kernels.h"
#include "core/status.h"
#include "ir/graph.h"
#include "runtime/backend.h"
#include "runtime/tensor.h"

typedef struct cuda_ctx {
    int device;
    void *stream;        /* cudaStream_t: every node and copy of the backend is ordered on it */
    void *lt;            /* cublasLtHandle_t */
    void *dnn;           /* cudnnHandle_t, NULL without cuDNN */
    void *workspace;     /* shared tactic scratch (one stream, so one user at a time) */
    uint64_t workspace_bytes;
    bool fp16, tf32;
    void **events;       /* timer marks: cudaEvent_t, recycled in a ring */
    uint32_t n_events, next_event;
    cuda_device_info info;
    const rt_tactic_cache *tactics; /* appended: timing lookups (cuda_tactics.c), or NULL */
} cuda_ctx;

typedef kiln_status (*cuda_run_fn)(cuda_ctx *c, rt_node_call *call);

typedef struct cuda_op_desc {
    const char *op_type;
    cuda_run_fn run;
    uint32_t host_inputs; /* bit k: input k is read on the host (shape-like arguments) */
} cuda_op_desc;

/* ---- cuda_ops.c (host logic) ---- */
const cuda_op_desc *cuda_op_find(const char *domain, const char *op_type);
/* Whether the node is a channels-last form (domain "kiln.nhwc", build/passes/layout_nhwc.c). */
bool cuda_node_nhwc(const ir_node *node);
/* Whether the node runs on the GPU; when not, why (for messages and tests). Decided from
 * the op, its attributes and the inferred value types (unknown types stay on the CPU). */
bool cuda_op_supported(const ir_model *model, const ir_node *node, char *why, size_t why_size);
/* Whether the GPU kernels can run the node at all (cuda_op_supported also prefers the
 * host for int64 shape arithmetic; the executor still runs such nodes here when the CPU
 * backend has no kernel for them). */
bool cuda_op_can_run(const ir_model *model, const ir_node *node, char *why, size_t why_size);
/* Whether the node could run here with its float32 tensors stored as float16 (the FP16
 * pass, build/passes/precision_fp16.c, asks through supports(..., KILN_DTYPE_FLOAT16)).
 * Cast and Shape say no: they keep their declared types. */
bool cuda_op_half_ok(const ir_model *model, const ir_node *node, char *why, size_t why_size);
bool cuda_op_input_on_host(const ir_node *node, int32_t index);
void cuda_op_foreach(void (*fn)(const char *domain, const char *op_type, void *user), void *user);
/* Broadcast strides of operand dims `d` (rank r) against output dims (rank out_rank). */
void cuda_bcast_strides(const int64_t *d, int32_t r, const int64_t *out, int32_t out_rank, int64_t *str);
/* Multidirectional broadcast of two shapes; false when they do not broadcast. */
bool cuda_bcast_shape(const int64_t *a, int32_t ra, const int64_t *b, int32_t rb, int64_t *out, int32_t *rank);
/* Collapses adjacent output axes where every operand is contiguous or broadcast alike,
 * so most broadcasts run with rank <= 3 index math. Operates in place on bc. */
void cuda_bcast_simplify(cuda_bcast *bc, int n_operands);

/* ---- cuda_tactics.c: library tactic choices through the tactic cache ---- */
#define CUDA_TACTIC_SIG 384
/* "sm_90 lt130100 dnn91400 tf32|<what>": the signature of one tactic search. */
void cuda_tactic_sig(const cuda_ctx *c, char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The fastest known tactic "<prefix>#i" (0 <= i < n) for sig: with need_all, only when
 * every i has a timing (cuBLASLt: all heuristic candidates); else among those that have
 * one (cuDNN: the algorithms the search could run). false: search and time as usual. */
bool cuda_tactic_best(const cuda_ctx *c, const ir_node *node, const char *sig, const char *prefix, int n,
                      bool need_all, int *best);
void cuda_tactic_put(const cuda_ctx *c, const ir_node *node, const char *sig, const char *prefix, int i, double ms);

/* ---- cuda_backend.c helpers ---- */
kiln_status cuda_fail(rt_node_call *call, int cuda_error, const char *what);
/* Allocates a device output tensor in out (released first). */
kiln_status cuda_out(cuda_ctx *c, rt_value *out, kiln_dtype dt, int32_t rank, const int64_t *dims, rt_tensor **t,
                     kiln_error *err);
kiln_status cuda_node_fail(rt_node_call *call, kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Host-side scalar/vector reads of host inputs (shape-like arguments). */
bool cuda_host_i64s(const rt_value *v, int64_t *out, int32_t max, int32_t *n);

/* Input of a fused Add marked by the graph passes (build/passes/fuse_residual.c): the
 * int attribute `attr` ("kiln_bias", "kiln_residual") names the input index. NULL with
 * *st == KILN_OK when the node has no such mark; an error (naming the node) when the
 * input is missing, not a float32 device tensor or not `count` elements. */
const rt_tensor *cuda_fused_input(rt_node_call *call, const char *attr, uint64_t count, int32_t *index,
                                  kiln_status *st);

/* Stream-ordered device scratch (cudaMallocAsync/cudaFreeAsync on the backend stream). */
kiln_status cuda_scratch_alloc(cuda_ctx *c, uint64_t bytes, void **p, kiln_error *err);
void cuda_scratch_free(cuda_ctx *c, void *p);

/* ---- cuda_fp16.c: half operands of FP16 GEMMs/convolutions ---- */
#define CUDA_HALF_SLOTS 3
/* Half copies of a node's constant inputs (weights), made once; kept in the node state. */
typedef struct cuda_half_cache {
    const void *src[CUDA_HALF_SLOTS];
    void *half[CUDA_HALF_SLOTS];
    uint64_t count[CUDA_HALF_SLOTS];
} cuda_half_cache;
void cuda_half_cache_free(cuda_half_cache *hc);
/* Half view of float32 input k: the cached copy for a constant input, else a per-run
 * conversion into *scratch (free it with cuda_scratch_free after the node's work). */
kiln_status cuda_half_operand(cuda_ctx *c, rt_node_call *call, cuda_half_cache *hc, int32_t k, const rt_tensor *t,
                              const void **out, void **scratch);

/* cuda_fused_input for a node whose tensors are `dt` (float32, or float16 with FP16
 * activations): the fused input must have that dtype. */
const rt_tensor *cuda_fused_input_dt(rt_node_call *call, const char *attr, uint64_t count, kiln_dtype dt,
                                     int32_t *index, kiln_status *st);

/* ---- run functions ---- */
kiln_status cuda_run_unary(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_binary(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_where(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_reshape(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_transpose(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_concat(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_slice(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_gather(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_cast(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_expand(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_shape(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_softmax(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_layernorm(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_batchnorm(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_pool(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_global_pool(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_nchw_to_nhwc(cuda_ctx *c, rt_node_call *call); /* kiln.nhwc NchwToNhwc */
kiln_status cuda_run_reduce(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_matmul(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_gemm(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_conv(cuda_ctx *c, rt_node_call *call);
kiln_status cuda_run_attention(cuda_ctx *c, rt_node_call *call); /* cuda_attention.c */
kiln_status cuda_run_qkv_attention(cuda_ctx *c, rt_node_call *call); /* cuda_attention.c (domain kiln) */
/* cuda_gemm.c: half Y[M, N] = act(X[M, K] W[N, K]^T + bias[N] + res[M, N]) through cuBLASLt,
 * its plan kept in *plan (freed with *plan_free); channels-last 1x1 convolutions. bias/res
 * may be NULL; act a cuda_unary_op or -1. */
kiln_status cuda_gemm_rows_half(cuda_ctx *c, rt_node_call *call, void **plan, void (**plan_free)(void *),
                                const void *x, const void *w, void *y, const void *bias, const void *res, int64_t M,
                                int64_t N, int64_t K, int act, float fa, float fb);

/* Maps an activation name (kiln_activation attribute or an op type) to a cuda_unary_op;
 * -1 when unknown. */
int cuda_act_code(const char *name);

#endif
