/* cuda_gemm.c - MatMul and Gemm through cuBLASLt (see cuda_internal.h).
 *
 * kiln's tensors are row-major and cuBLASLt is column-major, so Y[M,N] = A[M,K] B[K,N]
 * is computed as Y^T = B^T A^T: the row-major buffers read as column-major are already
 * the transposes, so B goes in as cuBLASLt's first operand and A as its second, with no
 * copies. Gemm's bias C of shape [N] (or [1, N]) becomes the BIAS epilogue, and a fused
 * Relu (the kiln_activation mark of build/passes/fuse_activation.c) the RELU epilogue;
 * other marked activations run as one in-place kernel after the GEMM.
 *
 * Tactics: on a node's first run (and whenever its shapes change) the heuristic's
 * candidates under the workspace limit are each timed on the real buffers and the
 * fastest is kept in the node's state. FP32 GEMMs use TF32 tensor cores unless the
 * backend was created with no_tf32 (CUBLAS_COMPUTE_32F_FAST_TF32 vs CUBLAS_COMPUTE_32F).
 *
 * Residuals (the kiln_residual mark): the residual tensor is cuBLASLt's C and the output
 * its D (beta = 1), so the epilogue reads it in place: no device copy into Y first, and
 * the candidates can still be timed (C is not overwritten). Gemm's general C is copied
 * into Y first (it may broadcast) and then is both C and D; such GEMMs keep the
 * heuristic's first choice.
 *
 * FP16, two forms. With FP16 activations (build/passes/precision_fp16.c made the node's
 * tensors float16) A, B, C, D and the bias are all CUDA_R_16F with CUBLAS_COMPUTE_32F: the
 * products accumulate in float32 and D is rounded once. Without that pass (a float32 graph
 * run with backend option fp16) A and B are converted to half here (cuda_fp16.c: weights
 * once, activations per run) and C/D stay float32.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

#define GEMM_CANDIDATES 8
#define GEMM_TIMING_REPS 3

typedef struct gemm_key {
    int64_t m, n, k, batch, sa, sb;
    int ta, tb, epi, has_c, tf32, fp16, half_io; /* half_io: C/D (and bias) are float16 too */
} gemm_key;

typedef struct gemm_plan {
    gemm_key key;
    bool valid;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    cuda_half_cache hc; /* FP16: half copies of constant A/B, kept across shape changes */
} gemm_plan;

static void plan_clear(gemm_plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    cuda_half_cache hc = p->hc;
    memset(p, 0, sizeof *p);
    p->hc = hc;
}

static void plan_free(void *s) {
    gemm_plan *p = s;
    plan_clear(p);
    cuda_half_cache_free(&p->hc);
    free(p);
}

static gemm_plan *plan_of(rt_node_call *call) {
    gemm_plan *p = *call->state;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p) return NULL;
        *call->state = p;
        *call->state_free = plan_free;
    }
    return p;
}

static kiln_status lt_fail(rt_node_call *call, cublasStatus_t s, const char *what) {
    return cuda_node_fail(call, KILN_ERR_RUNTIME, "cuBLASLt %s failed: status %d", what, (int)s);
}

static kiln_status layout(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                          int64_t batch, int64_t stride) {
    if (cublasLtMatrixLayoutCreate(l, type, rows, cols, ld) != CUBLAS_STATUS_SUCCESS) return KILN_ERR_RUNTIME;
    if (batch > 1) {
        int32_t b = (int32_t)batch;
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    }
    return KILN_OK;
}

/* Y (row-major [batch, M, N]) = alpha * opA(A) opB(B) (+ beta * C) (+ bias[N]) with
 * epilogue; C NULL means Y itself (read before written). */
static kiln_status lt_gemm(cuda_ctx *c, rt_node_call *call, const gemm_key *key, const void *A, const void *B,
                           void *Y, const void *C, const void *bias, float alpha, float beta) {
    if (!C) C = Y;
    gemm_plan *p = plan_of(call);
    if (!p) return cuda_node_fail(call, KILN_ERR_NOMEM, "out of memory");
    cublasStatus_t s;
    if (!p->valid || memcmp(&p->key, key, sizeof *key) != 0) {
        plan_clear(p);
        p->key = *key;
        cublasComputeType_t ct = key->tf32 && !key->fp16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        cudaDataType_t ab = key->fp16 ? CUDA_R_16F : CUDA_R_32F;
        if ((s = cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS)
            return lt_fail(call, s, "matmul descriptor");
        cublasOperation_t opa = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
        cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epi;
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        int64_t M = key->m, N = key->n, K = key->k;
        /* cuBLASLt's A = our B, its B = our A (see the file comment) */
        if (layout(&p->la, ab, key->tb ? (uint64_t)K : (uint64_t)N, key->tb ? (uint64_t)N : (uint64_t)K, key->tb ? K : N,
                   key->batch, key->sb) != KILN_OK ||
            layout(&p->lb, ab, key->ta ? (uint64_t)M : (uint64_t)K, key->ta ? (uint64_t)K : (uint64_t)M, key->ta ? M : K,
                   key->batch, key->sa) != KILN_OK ||
            layout(&p->lc, key->half_io ? CUDA_R_16F : CUDA_R_32F, (uint64_t)N, (uint64_t)M, N, key->batch, M * N) != KILN_OK)
            return cuda_node_fail(call, KILN_ERR_RUNTIME, "cuBLASLt layout creation failed");
        if (bias) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        cublasLtMatmulPreference_t pref;
        if ((s = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) return lt_fail(call, s, "preference");
        uint64_t ws = c->workspace_bytes;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        cublasLtMatmulHeuristicResult_t res[GEMM_CANDIDATES];
        int nres = 0;
        s = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref,
                                           GEMM_CANDIDATES, res, &nres);
        cublasLtMatmulPreferenceDestroy(pref);
        if (s != CUBLAS_STATUS_SUCCESS || nres == 0) return lt_fail(call, s, "algorithm heuristic (no algorithm)");
        int best = 0;
        /* tactic cache (cuda_tactics.c): every candidate timed before for this signature */
        char sig[CUDA_TACTIC_SIG];
        cuda_tactic_sig(c, sig, sizeof sig, "gemm m%lld n%lld k%lld b%lld sa%lld sb%lld t%d%d e%d c%d h%d n%d",
                        (long long)key->m, (long long)key->n, (long long)key->k, (long long)key->batch,
                        (long long)key->sa, (long long)key->sb, key->ta, key->tb, key->epi, key->has_c,
                        key->fp16 + key->half_io /* 0 float, 1 half operands, 2 half I/O */, nres);
        bool cached = nres > 1 && cuda_tactic_best(c, call->node, sig, "lt", nres, true, &best);
        /* time the candidates on the real buffers; with beta != 0 and C = Y the output is
         * also an input, so timing would corrupt it: keep the heuristic's first choice then */
        if (nres > 1 && (beta == 0.f || C != Y) && !cached) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            float best_ms = 1e30f;
            for (int i = 0; i < nres; i++) {
                float ms = 0;
                cudaEventRecord(e0, c->stream);
                bool ok = true;
                for (int r = 0; r < GEMM_TIMING_REPS && ok; r++)
                    ok = cublasLtMatmul((cublasLtHandle_t)c->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, Y,
                                        p->lc, &res[i].algo, c->workspace, c->workspace_bytes,
                                        c->stream) == CUBLAS_STATUS_SUCCESS;
                cudaEventRecord(e1, c->stream);
                if (!ok || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
                    (void)cudaGetLastError();
                    cuda_tactic_put(c, call->node, sig, "lt", i, 1e30); /* cannot run: never chosen */
                    continue;
                }
                cuda_tactic_put(c, call->node, sig, "lt", i, (double)ms / GEMM_TIMING_REPS);
                if (ms < best_ms) best_ms = ms, best = i;
            }
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
        }
        p->algo = res[best].algo;
        p->valid = true;
    }
    if (bias) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    s = cublasLtMatmul((cublasLtHandle_t)c->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, Y, p->lc, &p->algo,
                       c->workspace, c->workspace_bytes, c->stream);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(call, s, "matmul");
    return KILN_OK;
}

/* lt_gemm with FP16 operands when the backend runs FP16: A and B (inputs ia, ib of the
 * node) converted to half (cuda_fp16.c), the result still float32. */
static kiln_status run_gemm(cuda_ctx *c, rt_node_call *call, gemm_key *key, const rt_tensor *a, int32_t ia,
                            const rt_tensor *b, int32_t ib, void *Y, const void *C, const void *bias, float alpha,
                            float beta) {
    if (a->dtype == KILN_DTYPE_FLOAT16) { /* FP16 activations: everything is half already */
        key->fp16 = key->half_io = 1;
        return lt_gemm(c, call, key, a->data, b->data, Y, C, bias, alpha, beta);
    }
    key->fp16 = c->fp16;
    if (!c->fp16) return lt_gemm(c, call, key, a->data, b->data, Y, C, bias, alpha, beta);
    gemm_plan *p = plan_of(call);
    if (!p) return cuda_node_fail(call, KILN_ERR_NOMEM, "out of memory");
    const void *ha, *hb;
    void *sa = NULL, *sb = NULL;
    kiln_status st = cuda_half_operand(c, call, &p->hc, ia, a, &ha, &sa);
    if (st == KILN_OK) st = cuda_half_operand(c, call, &p->hc, ib, b, &hb, &sb);
    if (st == KILN_OK) st = lt_gemm(c, call, key, ha, hb, Y, C, bias, alpha, beta);
    cuda_scratch_free(c, sa);
    cuda_scratch_free(c, sb);
    return st;
}

/* Fused activation from the kiln_activation mark: -1 none; sets *relu when the GEMM
 * epilogue can do it. */
static int fused_act(const ir_node *n, bool *relu, float *a, float *b) {
    const ir_attr *act = ir_node_attr(n, "kiln_activation");
    *relu = false;
    if (!act) return -1;
    char name[32];
    size_t len = act->s.len < sizeof name - 1 ? (size_t)act->s.len : sizeof name - 1;
    memcpy(name, act->s.data, len);
    name[len] = 0;
    int code = cuda_act_code(name);
    *a = ir_node_attr_float(n, code == CU_CLIP ? "kiln_activation_min" : "kiln_activation_alpha",
                            code == CU_HSIGMOID ? 0.2f : 0.01f);
    *b = ir_node_attr_float(n, code == CU_CLIP ? "kiln_activation_max" : "kiln_activation_beta", 0.5f);
    if (code == CU_RELU) *relu = true;
    return code;
}

kiln_status cuda_run_matmul(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *a = &call->inputs[0]->t, *b = &call->inputs[1]->t;
    if (a->rank < 2 || b->rank < 2) return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "1-D operands");
    if (a->dtype != b->dtype) return cuda_node_fail(call, KILN_ERR_SHAPE, "A and B differ in dtype");
    int half = a->dtype == KILN_DTYPE_FLOAT16;
    int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = b->dims[b->rank - 1];
    if (b->dims[b->rank - 2] != K)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "inner dimensions differ (%lld vs %lld)", (long long)K,
                              (long long)b->dims[b->rank - 2]);
    int64_t bd[RT_MAX_RANK];
    int32_t br = 0;
    if (!cuda_bcast_shape(a->dims, a->rank - 2, b->dims, b->rank - 2, bd, &br))
        return cuda_node_fail(call, KILN_ERR_SHAPE, "batch dimensions do not broadcast");
    int64_t ba = 1, bb = 1, batch = 1;
    for (int32_t i = 0; i < a->rank - 2; i++) ba *= a->dims[i];
    for (int32_t i = 0; i < b->rank - 2; i++) bb *= b->dims[i];
    for (int32_t i = 0; i < br; i++) batch *= bd[i];
    int64_t dims[RT_MAX_RANK];
    memcpy(dims, bd, sizeof(int64_t) * (size_t)br);
    dims[br] = M;
    dims[br + 1] = N;
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], a->dtype, br + 2, dims, &y, call->err);
    if (st != KILN_OK || !y->count) return st;
    if (K == 0) return cuda_fail(call, cudaMemsetAsync(y->data, 0, y->nbytes, c->stream), "memset");
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.n = N;
    key.k = K;
    key.tf32 = c->tf32;
    if (bb == 1) { /* shared weights: fold A's batch into M, one GEMM */
        key.m = M * batch;
        key.batch = 1;
    } else if (ba == batch && bb == batch) {
        key.m = M, key.batch = batch, key.sa = M * K, key.sb = K * N;
    } else if (ba == 1 && bb == batch) {
        key.m = M, key.batch = batch, key.sa = 0, key.sb = K * N;
    } else {
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "partially broadcast batch dimensions on the GPU");
    }
    bool relu;
    float fa = 0, fb = 0;
    int act = fused_act(call->node, &relu, &fa, &fb);
    /* Adds fused by the graph passes: a bias [N] into the BIAS epilogue, a residual of the
     * output's shape as C (Y starts as the residual, beta = 1): act(AB + bias + residual) */
    int32_t bi, ri;
    const rt_tensor *bias = cuda_fused_input_dt(call, "kiln_bias", (uint64_t)N, a->dtype, &bi, &st);
    if (st != KILN_OK) return st;
    const rt_tensor *res = cuda_fused_input_dt(call, "kiln_residual", y->count, a->dtype, &ri, &st);
    if (st != KILN_OK) return st;
    float beta = 0.f;
    if (res) { /* C = the residual, read by the epilogue in place (see the file comment) */
        beta = 1.f;
        key.has_c = 1;
    }
    key.epi = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                   : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    /* GELU: cuBLASLt's GELU epilogue is the tanh approximation, so it serves only nodes
     * that ask for that form (GeluTanh, without a residual: the epilogue applies GELU
     * before adding C); the exact erf form runs after the GEMM, vectorised for half */
    bool lt_gelu = act == CU_GELU_TANH && !res;
    if (lt_gelu) key.epi = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    st = run_gemm(c, call, &key, a, 0, b, 1, y->data, res ? res->data : NULL, bias ? bias->data : NULL, 1.f, beta);
    if (st == KILN_OK && act >= 0 && !relu && !lt_gelu) {
        int e = half && (act == CU_GELU_ERF || act == CU_GELU_TANH)
                    ? cuda_k_gelu_half(y->data, (int64_t)y->count, act == CU_GELU_TANH, c->stream)
                    : (int)cudaErrorNotSupported;
        if (e == (int)cudaErrorNotSupported)
            e = cuda_k_bias_act(half, y->data, NULL, NULL, 1, 1, (int64_t)y->count, act, fa, fb, c->stream);
        st = cuda_fail(call, e, "activation kernel");
    }
    return st;
}

kiln_status cuda_run_gemm(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *a = &call->inputs[0]->t, *b = &call->inputs[1]->t;
    const rt_tensor *cc = call->n_in > 2 && call->inputs[2] ? &call->inputs[2]->t : NULL;
    if (a->rank != 2 || b->rank != 2) return cuda_node_fail(call, KILN_ERR_SHAPE, "A and B must be 2-D");
    if (a->dtype != b->dtype || (cc && cc->dtype != a->dtype))
        return cuda_node_fail(call, KILN_ERR_SHAPE, "A, B and C differ in dtype");
    int half = a->dtype == KILN_DTYPE_FLOAT16;
    int ta = (int)ir_node_attr_int(n, "transA", 0), tb = (int)ir_node_attr_int(n, "transB", 0);
    float alpha = ir_node_attr_float(n, "alpha", 1.f), beta = ir_node_attr_float(n, "beta", 1.f);
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t N = tb ? b->dims[0] : b->dims[1], Kb = tb ? b->dims[1] : b->dims[0];
    if (K != Kb) return cuda_node_fail(call, KILN_ERR_SHAPE, "inner dimensions differ");
    int64_t dims[2] = {M, N};
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], a->dtype, 2, dims, &y, call->err);
    if (st != KILN_OK || !y->count) return st;
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.m = M, key.n = N, key.k = K, key.batch = 1, key.ta = ta, key.tb = tb, key.tf32 = c->tf32;
    bool relu;
    float fa = 0, fb = 0;
    int act = fused_act(n, &relu, &fa, &fb);
    const void *bias = NULL;
    float gemm_beta = 0.f;
    bool c_vector = cc && beta == 1.f && (int64_t)cc->count == N &&
                    (cc->rank == 1 || (cc->rank == 2 && cc->dims[0] == 1));
    if (c_vector) {
        bias = cc->data;
    } else if (cc && beta != 0.f && cc->count) {
        /* general C: broadcast it into Y, then Y = alpha AB + beta Y */
        int64_t od[RT_MAX_RANK];
        int32_t orank = 0;
        if (!cuda_bcast_shape(cc->dims, cc->rank, dims, 2, od, &orank) || orank != 2 || od[0] != M || od[1] != N)
            return cuda_node_fail(call, KILN_ERR_SHAPE, "C does not broadcast to [M, N]");
        cuda_nd nd;
        memset(&nd, 0, sizeof nd);
        nd.rank = 2;
        nd.dims[0] = M, nd.dims[1] = N;
        cuda_bcast_strides(cc->dims, cc->rank, dims, 2, nd.in_str);
        nd.out_str[0] = N, nd.out_str[1] = 1;
        st = cuda_fail(call, cuda_k_copy_nd(cc->data, y->data, half ? 2 : 4, M * N, &nd, c->stream), "broadcast C");
        if (st != KILN_OK) return st;
        gemm_beta = beta;
        key.has_c = 1;
    }
    key.epi = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                   : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    st = run_gemm(c, call, &key, a, 0, b, 1, y->data, NULL, bias, alpha, gemm_beta);
    if (st == KILN_OK && act >= 0 && !relu)
        st = cuda_fail(call, cuda_k_bias_act(half, y->data, NULL, NULL, 1, 1, (int64_t)y->count, act, fa, fb, c->stream),
                       "activation kernel");
    return st;
}

kiln_status cuda_gemm_rows_half(cuda_ctx *c, rt_node_call *call, void **plan, void (**plan_free)(void *),
                                const void *x, const void *w, void *y, const void *bias, const void *res, int64_t M,
                                int64_t N, int64_t K, int act, float fa, float fb) {
    /* the GEMM plan lives in the caller's state (the conv plan): point the call's state
     * slot at it for lt_gemm (plan_of), then put the caller's back */
    void **saved_state = call->state;
    void (**saved_free)(void *) = call->state_free;
    call->state = plan;
    call->state_free = plan_free;
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.m = M, key.n = N, key.k = K, key.batch = 1, key.tb = 1, key.fp16 = key.half_io = 1;
    bool relu = act == CU_RELU;
    key.epi = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                   : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    float beta = 0.f;
    kiln_status st = KILN_OK;
    if (res) { /* act(X W^T + bias + res): the residual is C, read in place, beta = 1 */
        beta = 1.f;
        key.has_c = 1;
    }
    if (st == KILN_OK) st = lt_gemm(c, call, &key, x, w, y, res, bias, 1.f, beta);
    if (st == KILN_OK && act >= 0 && !relu)
        st = cuda_fail(call, cuda_k_bias_act(1, y, NULL, NULL, 1, 1, M * N, act, fa, fb, c->stream), "activation kernel");
    call->state = saved_state;
    call->state_free = saved_free;
    return st;
}
