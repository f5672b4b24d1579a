/* cpu_matmul.c - MatMul (numpy semantics, batch broadcasting), Gemm (every attribute) and
 * MatMulInteger.
 *
 * float32 goes through cpu_sgemm (BLAS + fused epilogue), the packed GEMM when B is a
 * constant weight (packed once per node; with the bf16x3 tactic, the AMX GEMM of
 * cpu_gemm_bf16x3.h instead), or the few-row kernels of cpu_gemv.h when the
 * product has at most CPU_GEMV_MAX_M rows (batch-1 classifier heads). When B has no batch dimensions
 * (a weight, the common case in transformers) A's batch dimensions are folded into M so
 * the whole MatMul is one big GEMM instead of many small ones. Other dtypes (float64,
 * integers, float16/bfloat16) use straightforward loops or convert through float32:
 * they are correct but not tuned, since real models rarely run them.
 */
#include <string.h>

#include <stdlib.h>

#include "backends/cpu/cpu_fbuf.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_gemm_bf16x3.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_gemv.h"
#include "backends/cpu/cpu_matmul.h"
#include "backends/cpu/cpu_scratch.h"
#include "core/alloc.h"

/* ---- packed constant B (per-node state) ---------------------------------------------- */

/* A constant 2-D B (BERT's projection and FFN weights) is packed once per node for
 * cpu_sgemm_packed, keyed by its data pointer and shape. */
typedef struct mm_state {
    cpu_gemm_packed pb;
    const float *src;
    cpu_bf16x3_b xb; /* the bf16x3 tactic's hi/lo copy of B (cpu_gemm_bf16x3.h) */
    const float *xb_src;
    cpu_gemm_scratch scratch;
} mm_state;

static void mm_state_free(void *p) {
    mm_state *s = p;
    if (s) {
        cpu_gemm_packed_free(&s->pb);
        cpu_bf16x3_b_free(&s->xb);
        cpu_gemm_scratch_free(&s->scratch);
    }
    free(s);
}

/* The node's state, created on first use (NULL with *st set when out of memory). */
static mm_state *mm_state_get(cpu_kernel_ctx *ctx, kiln_status *st) {
    *st = KILN_OK;
    mm_state *s = *ctx->state;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) {
            *st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the MatMul state");
            return NULL;
        }
        *ctx->state = s;
        if (ctx->state_free) *ctx->state_free = mm_state_free;
    }
    return s;
}

/* The node's state with B packed, or NULL when the packed path does not apply. B is
 * [K, N] row-major, or [N, K] with trans_b (Gemm transB=1: transposed once into a
 * temporary before packing). Sets *st on failure (then returns NULL). */
static mm_state *mm_packed_b(cpu_kernel_ctx *ctx, const float *B, int64_t K, int64_t N, bool trans_b,
                             kiln_status *st) {
    *st = KILN_OK;
    if (!ctx->state || !cpu_gemm_packed_supported() || !cpu_input_is_const(ctx, 1)) return NULL;
    mm_state *s = mm_state_get(ctx, st);
    if (!s) return NULL;
    if (s->src != B || s->pb.K != K || s->pb.rows != N || !s->pb.data) {
        cpu_gemm_packed_free(&s->pb);
        s->src = NULL;
        if (trans_b) {
            float *t = kiln_realloc_array(NULL, (size_t)K * (size_t)N, sizeof(float));
            if (!t) {
                *st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory transposing the Gemm weight");
                return NULL;
            }
            /* 32x32 tiles: a plain column walk wrote 8 MB with a 4 KB stride (ResNet's fc
             * at batch 8: tens of ms on the first run) */
            for (int64_t n0 = 0; n0 < N; n0 += 32)
                for (int64_t k0 = 0; k0 < K; k0 += 32) {
                    int64_t n1 = n0 + 32 < N ? n0 + 32 : N, k1 = k0 + 32 < K ? k0 + 32 : K;
                    for (int64_t k = k0; k < k1; k++)
                        for (int64_t n = n0; n < n1; n++) t[k * N + n] = B[n * K + k];
                }
            *st = cpu_gemm_pack_b(t, N, K, N, &s->pb, ctx->err);
            free(t);
        } else
            *st = cpu_gemm_pack_b(B, N, K, N, &s->pb, ctx->err);
        if (*st != KILN_OK) return NULL;
        s->src = B;
    }
    return s;
}

/* The node's state with B split for the bf16x3 tactic, or NULL when that tactic cannot
 * run here (no AMX, no state, B not constant): the caller then takes the FP32 path. */
static mm_state *mm_bf16x3_b(cpu_kernel_ctx *ctx, const float *B, int64_t K, int64_t N, kiln_status *st) {
    *st = KILN_OK;
    if (!ctx->state || !cpu_bf16x3_usable() || !cpu_input_is_const(ctx, 1)) return NULL;
    mm_state *s = mm_state_get(ctx, st);
    if (!s) return NULL;
    if (s->xb_src != B || s->xb.K != K || s->xb.N != N || !s->xb.data) {
        cpu_bf16x3_b_free(&s->xb);
        s->xb_src = NULL;
        *st = cpu_bf16x3_pack_b(B, N, K, N, false, &s->xb, ctx->err);
        if (*st != KILN_OK) return NULL;
        s->xb_src = B;
    }
    return s;
}

/* ---- shapes -------------------------------------------------------------------------- */

typedef struct mm_shape {
    int64_t M, N, K;
    int32_t batch_rank;
    int64_t batch[RT_MAX_RANK];   /* broadcast batch dims */
    int64_t a_stride[RT_MAX_RANK]; /* per batch dim, in matrices (0 when broadcast) */
    int64_t b_stride[RT_MAX_RANK];
    int64_t n_batch;
    bool b_shared; /* B is the same matrix for every batch entry */
    int32_t out_rank;
    int64_t out_dims[RT_MAX_RANK];
} mm_shape;

static kiln_status mm_infer(cpu_kernel_ctx *ctx, const rt_tensor *a, const rt_tensor *b, mm_shape *s) {
    memset(s, 0, sizeof *s);
    if (a->rank < 1 || b->rank < 1)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "MatMul inputs must have rank >= 1 (got %d and %d)", a->rank,
                               b->rank);
    int64_t ad[RT_MAX_RANK + 1], bd[RT_MAX_RANK + 1];
    int32_t ar = a->rank, br = b->rank;
    memcpy(ad, a->dims, sizeof(int64_t) * (size_t)ar);
    memcpy(bd, b->dims, sizeof(int64_t) * (size_t)br);
    if (ar == 1) { /* [K] -> [1, K] */
        ad[1] = ad[0];
        ad[0] = 1;
        ar = 2;
    }
    if (br == 1) { /* [K] -> [K, 1] */
        bd[1] = 1;
        br = 2;
    }
    s->M = ad[ar - 2];
    s->K = ad[ar - 1];
    s->N = bd[br - 1];
    if (bd[br - 2] != s->K)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "inner dimensions differ: A has K=%lld, B has K=%lld",
                               (long long)s->K, (long long)bd[br - 2]);
    int32_t abr = ar - 2, bbr = br - 2;
    s->batch_rank = abr > bbr ? abr : bbr;
    int64_t sa = 1, sb = 1;
    for (int32_t i = s->batch_rank - 1; i >= 0; i--) {
        int32_t ia = i - (s->batch_rank - abr), ib = i - (s->batch_rank - bbr);
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "batch dimensions %lld and %lld do not broadcast",
                                   (long long)da, (long long)db);
        s->batch[i] = da > db ? da : db;
        if (da == 0 || db == 0) s->batch[i] = 0;
        s->a_stride[i] = da == 1 ? 0 : sa;
        s->b_stride[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    s->n_batch = 1;
    for (int32_t i = 0; i < s->batch_rank; i++) s->n_batch *= s->batch[i];
    s->b_shared = sb == 1;
    int32_t r = 0;
    for (int32_t i = 0; i < s->batch_rank; i++) s->out_dims[r++] = s->batch[i];
    if (a->rank != 1) s->out_dims[r++] = s->M;
    if (b->rank != 1) s->out_dims[r++] = s->N;
    s->out_rank = r;
    return KILN_OK;
}

/* Offsets (in matrices) of A and B for flat batch index t. */
static void mm_offsets(const mm_shape *s, int64_t t, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (int32_t i = s->batch_rank - 1; i >= 0; i--) {
        int64_t idx = t % s->batch[i];
        t /= s->batch[i];
        a += idx * s->a_stride[i];
        b += idx * s->b_stride[i];
    }
    *oa = a;
    *ob = b;
}

/* ---- non-float32 paths --------------------------------------------------------------- */

static double load_d(const void *p, kiln_dtype dt, int64_t i) {
    switch (dt) {
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return kiln_fp16_to_fp32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return kiln_bf16_to_fp32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void mm_generic(const mm_shape *s, const rt_tensor *a, const rt_tensor *b, rt_tensor *y) {
    kiln_dtype dt = a->dtype;
    int64_t M = s->M, N = s->N, K = s->K;
    for (int64_t t = 0; t < s->n_batch; t++) {
        int64_t oa, ob;
        mm_offsets(s, t, &oa, &ob);
        int64_t abase = oa * M * K, bbase = ob * K * N, ybase = t * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t yi = ybase + i * N + j;
                if (dt == KILN_DTYPE_INT32 || dt == KILN_DTYPE_INT64 || dt == KILN_DTYPE_UINT32 ||
                    dt == KILN_DTYPE_UINT64) {
                    uint64_t acc = 0; /* wrap-around like the reference implementations */
                    for (int64_t k = 0; k < K; k++) {
                        int64_t ia = abase + i * K + k, ib = bbase + k * N + j;
                        uint64_t x, w;
                        switch (dt) {
                        case KILN_DTYPE_INT32:
                            x = (uint64_t)(int64_t)((const int32_t *)a->data)[ia];
                            w = (uint64_t)(int64_t)((const int32_t *)b->data)[ib];
                            break;
                        case KILN_DTYPE_UINT32:
                            x = ((const uint32_t *)a->data)[ia];
                            w = ((const uint32_t *)b->data)[ib];
                            break;
                        case KILN_DTYPE_INT64:
                            x = (uint64_t)((const int64_t *)a->data)[ia];
                            w = (uint64_t)((const int64_t *)b->data)[ib];
                            break;
                        default:
                            x = ((const uint64_t *)a->data)[ia];
                            w = ((const uint64_t *)b->data)[ib];
                            break;
                        }
                        acc += x * w;
                    }
                    switch (dt) {
                    case KILN_DTYPE_INT32: ((int32_t *)y->data)[yi] = (int32_t)(uint32_t)acc; break;
                    case KILN_DTYPE_UINT32: ((uint32_t *)y->data)[yi] = (uint32_t)acc; break;
                    case KILN_DTYPE_INT64: ((int64_t *)y->data)[yi] = (int64_t)acc; break;
                    default: ((uint64_t *)y->data)[yi] = acc; break;
                    }
                } else {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++)
                        acc += load_d(a->data, dt, abase + i * K + k) * load_d(b->data, dt, bbase + k * N + j);
                    if (dt == KILN_DTYPE_DOUBLE) ((double *)y->data)[yi] = acc;
                    else if (dt == KILN_DTYPE_FLOAT16) ((uint16_t *)y->data)[yi] = kiln_fp32_to_fp16((float)acc);
                    else ((uint16_t *)y->data)[yi] = kiln_fp32_to_bf16((float)acc);
                }
            }
    }
}

static bool mm_dtype_ok(kiln_dtype dt) {
    return dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_DOUBLE || dt == KILN_DTYPE_FLOAT16 ||
           dt == KILN_DTYPE_BFLOAT16 || dt == KILN_DTYPE_INT32 || dt == KILN_DTYPE_INT64 ||
           dt == KILN_DTYPE_UINT32 || dt == KILN_DTYPE_UINT64;
}

/* ---- MatMul -------------------------------------------------------------------------- */

typedef struct mm_batch_job {
    const mm_shape *s;
    const cpu_epilogue *ep;
    const float *A, *B;
    float *Y;
    cpu_threadpool *pool;
    bool inline_ok; /* entries may run single-threaded (several in parallel, or a 1-thread pool) */
} mm_batch_job;

static void mm_batch_run(void *user, int64_t t0, int64_t t1) {
    const mm_batch_job *j = user;
    const mm_shape *s = j->s;
    /* Per-entry GEMMs up to ~1 MiB of operands through kiln's packed kernel, packing both
     * operands into one buffer per task: OpenBLAS re-packs too, and on attention's
     * 128x128x64 heads reached ~50 GFLOP/s against ~80 here (cpu_gemm_packed.h). */
    int64_t need = j->inline_ok && cpu_gemm_packed_supported() ? cpu_sgemm_inline_scratch(s->M, s->N, s->K) : -1;
    float *scratch = need > 0 && need <= (1 << 18) ? aligned_alloc(64, (size_t)(need * 4 + 63) & ~(size_t)63) : NULL;
    for (int64_t t = t0; t < t1; t++) {
        int64_t oa, ob;
        mm_offsets(s, t, &oa, &ob);
        cpu_epilogue e = *j->ep;
        if (e.residual) e.residual += t * s->M * s->N;
        if (scratch) {
            cpu_sgemm_inline(s->M, s->N, s->K, j->A + oa * s->M * s->K, s->K, j->B + ob * s->K * s->N, s->N,
                             j->Y + t * s->M * s->N, s->N, &e, scratch);
            continue;
        }
        cpu_sgemm(j->pool, false, false, s->M, s->N, s->K, 1.f, j->A + oa * s->M * s->K, s->K,
                  j->B + ob * s->K * s->N, s->N, 0.f, j->Y + t * s->M * s->N, s->N, &e);
    }
    free(scratch);
}

/* Whether graph passes folded a bias, residual or activation into this node (the
 * kiln_* marks of build/passes). Only the float32 path applies them, so nodes of other
 * float types that carry marks (e.g. retyped to float16 by the FP16 pass) run through a
 * float32 copy instead of silently dropping the fused work. */
static bool mm_has_fused_marks(const cpu_kernel_ctx *ctx) {
    const ir_node *n = ctx->node;
    return n && (ir_node_attr(n, "kiln_bias") || ir_node_attr(n, "kiln_residual") || ir_node_attr(n, "kiln_activation"));
}

static kiln_status mm_run(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out, bool bf16x3) {
    const rt_tensor *a = cpu_in(inputs, n_in, 0), *b = cpu_in(inputs, n_in, 1);
    if (!a || !b) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "MatMul needs two tensor inputs");
    if (a->dtype != b->dtype || !mm_dtype_ok(a->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "MatMul of %s and %s is not supported",
                               kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if (a->dtype != KILN_DTYPE_FLOAT && cpu_fbuf_dtype_ok(a->dtype) && mm_has_fused_marks(ctx))
        return cpu_fbuf_call_f32(ctx, inputs, n_in, outputs, n_out, cpu_matmul);
    mm_shape s;
    kiln_status st = mm_infer(ctx, a, b, &s);
    if (st != KILN_OK) return st;
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    st = rt_tensor_alloc(y, a->dtype, s.out_rank, s.out_dims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;
    if (a->dtype != KILN_DTYPE_FLOAT) {
        mm_generic(&s, a, b, y);
        return KILN_OK;
    }
    cpu_epilogue ep;
    st = cpu_epilogue_from_node(ctx, inputs, n_in, y->count, &ep);
    if (st != KILN_OK) return st;
    ep.ld_res = s.N;
    const ir_attr *ba = ctx->node ? ir_node_attr(ctx->node, "kiln_bias") : NULL;
    if (ba && ba->type == IR_ATTR_INT) {
        const rt_tensor *bias = cpu_in(inputs, n_in, (int32_t)ba->i);
        if (ba->i < 0 || ba->i >= n_in || !bias || bias->dtype != KILN_DTYPE_FLOAT || bias->count != (uint64_t)s.N)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "fused bias input %lld must be float32 with N=%lld elements",
                                   (long long)ba->i, (long long)s.N);
        ep.bias_mode = CPU_BIAS_COL;
        ep.bias = bias->data;
    }
    const float *A = a->data, *B = b->data;
    float *Y = y->data;
    if (s.K == 0) {
        memset(Y, 0, y->nbytes);
        cpu_epilogue_apply(&ep, Y, s.N, 0, s.n_batch * s.M, 0, s.N);
        return KILN_OK;
    }
    /* Fold A's batch into M when B is shared and A's batch entries are all distinct
     * (A not broadcast), so rows of consecutive batch entries are contiguous. */
    bool a_full = true;
    for (int32_t i = 0; i < s.batch_rank; i++)
        if (s.a_stride[i] == 0 && s.batch[i] != 1) a_full = false;
    if (s.b_shared && a_full && s.n_batch * s.M <= CPU_GEMV_MAX_M && cpu_gemv_supported()) {
        /* a matrix-vector product in disguise: read B once, in place (cpu_gemv.h) */
        cpu_sgemv_small(ctx->pool, false, s.n_batch * s.M, s.N, s.K, 1.f, A, s.K, B, s.N, Y, s.N, &ep);
        return KILN_OK;
    }
    if (s.b_shared && a_full && b->rank == 2 && bf16x3) {
        mm_state *ms = mm_bf16x3_b(ctx, B, s.K, s.N, &st);
        if (st != KILN_OK) return st;
        if (ms)
            return cpu_sgemm_bf16x3(ctx->pool, s.n_batch * s.M, s.N, s.K, A, s.K, &ms->xb, Y, s.N, &ep,
                                    cpu_scratch_gemm(ctx, &ms->scratch), ctx->err);
    }
    if (s.b_shared && a_full && b->rank == 2) {
        mm_state *ms = mm_packed_b(ctx, B, s.K, s.N, false, &st);
        if (st != KILN_OK) return st;
        if (ms)
            return cpu_sgemm_packed(ctx->pool, s.n_batch * s.M, s.N, s.K, NULL, A, s.K, &ms->pb, NULL, 0, Y, s.N, &ep,
                                    cpu_scratch_gemm(ctx, &ms->scratch), ctx->err);
    }
    if (s.b_shared && a_full) {
        cpu_sgemm(ctx->pool, false, false, s.n_batch * s.M, s.N, s.K, 1.f, A, s.K, B, s.N, 0.f, Y, s.N, &ep);
        return KILN_OK;
    }
    mm_batch_job bj = {&s, &ep, A, B, Y, ctx->pool, s.n_batch > 1 || cpu_threadpool_size(ctx->pool) == 1};
    if (s.n_batch > 1 && cpu_threadpool_size(ctx->pool) > 1 && cpu_gemm_packed_supported())
        /* attention's per-head GEMMs: one batch entry per task; OpenBLAS is single-threaded
         * in this mode (cpu_threadpool.c), and cpu_sgemm inside a worker runs inline */
        cpu_parallel_for_each(ctx->pool, s.n_batch, mm_batch_run, &bj);
    else
        mm_batch_run(&bj, 0, s.n_batch);
    return KILN_OK;
}

/* The registered kernel: the tactic the builder chose (kiln_tactic), FP32 without one. */
kiln_status cpu_matmul(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                       int32_t n_out) {
    bool bf16x3 = ir_node_attr_str_is(ctx->node, "kiln_tactic", CPU_MATMUL_TACTIC_BF16X3);
    return mm_run(ctx, inputs, n_in, outputs, n_out, bf16x3);
}

kiln_status cpu_matmul_run_fp32(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                int32_t n_out) {
    return mm_run(ctx, inputs, n_in, outputs, n_out, false);
}

kiln_status cpu_matmul_run_bf16x3(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out) {
    return mm_run(ctx, inputs, n_in, outputs, n_out, true);
}

/* ---- Gemm ---------------------------------------------------------------------------- */

kiln_status cpu_gemm_op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                        int32_t n_out) {
    const rt_tensor *a = cpu_in(inputs, n_in, 0), *b = cpu_in(inputs, n_in, 1), *c = cpu_in(inputs, n_in, 2);
    if (!a || !b) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "Gemm needs inputs A and B");
    if (a->rank != 2 || b->rank != 2)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "Gemm inputs A and B must be 2-D (got rank %d and %d)",
                               a->rank, b->rank);
    if (a->dtype != b->dtype || (c && c->dtype != a->dtype) || !mm_dtype_ok(a->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "Gemm of %s is not supported", kiln_dtype_name(a->dtype));
    if (a->dtype != KILN_DTYPE_FLOAT && cpu_fbuf_dtype_ok(a->dtype) && mm_has_fused_marks(ctx))
        return cpu_fbuf_call_f32(ctx, inputs, n_in, outputs, n_out, cpu_gemm_op);
    bool ta = ir_node_attr_int(ctx->node, "transA", 0) != 0, tb = ir_node_attr_int(ctx->node, "transB", 0) != 0;
    float alpha = ir_node_attr_float(ctx->node, "alpha", 1.f), beta = ir_node_attr_float(ctx->node, "beta", 1.f);
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t Kb = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K != Kb)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "inner dimensions differ: A gives K=%lld, B gives K=%lld",
                               (long long)K, (long long)Kb);
    /* C broadcasts unidirectionally to [M, N] */
    int64_t cm = 1, cn = 1;
    if (c) {
        if (c->rank > 2)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "Gemm input C must have rank <= 2 (got %d)", c->rank);
        if (c->rank == 1) cn = c->dims[0];
        if (c->rank == 2) {
            cm = c->dims[0];
            cn = c->dims[1];
        }
        if ((cm != 1 && cm != M) || (cn != 1 && cn != N))
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "Gemm input C [%lld, %lld] does not broadcast to [%lld, %lld]",
                                   (long long)cm, (long long)cn, (long long)M, (long long)N);
    }
    int64_t dims[2] = {M, N};
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    kiln_status st = rt_tensor_alloc(y, a->dtype, 2, dims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;
    if (a->dtype != KILN_DTYPE_FLOAT) {
        /* generic: materialise op(A), op(B) row-major then reuse the MatMul loop */
        int64_t esz = kiln_dtype_bits(a->dtype) / 8;
        uint8_t *ta_buf = kiln_realloc_array(NULL, (size_t)(M * K + 1), (size_t)esz);
        uint8_t *tb_buf = kiln_realloc_array(NULL, (size_t)(K * N + 1), (size_t)esz);
        if (!ta_buf || !tb_buf) {
            free(ta_buf);
            free(tb_buf);
            return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t k = 0; k < K; k++)
                memcpy(ta_buf + (i * K + k) * esz, (const uint8_t *)a->data + (ta ? k * M + i : i * K + k) * esz,
                       (size_t)esz);
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                memcpy(tb_buf + (k * N + j) * esz, (const uint8_t *)b->data + (tb ? j * K + k : k * N + j) * esz,
                       (size_t)esz);
        rt_tensor at = *a, bt = *b;
        at.data = ta_buf;
        at.dims[0] = M;
        at.dims[1] = K;
        bt.data = tb_buf;
        bt.dims[0] = K;
        bt.dims[1] = N;
        mm_shape s;
        st = mm_infer(ctx, &at, &bt, &s);
        if (st == KILN_OK) mm_generic(&s, &at, &bt, y);
        free(ta_buf);
        free(tb_buf);
        if (st != KILN_OK) return st;
        /* alpha, beta*C in double for float64, float for the rest */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t yi = i * N + j, ci = (cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j);
                if (a->dtype == KILN_DTYPE_DOUBLE) {
                    double v = alpha * ((double *)y->data)[yi];
                    if (c) v += beta * ((const double *)c->data)[ci];
                    ((double *)y->data)[yi] = v;
                } else if (a->dtype == KILN_DTYPE_FLOAT16 || a->dtype == KILN_DTYPE_BFLOAT16) {
                    double v = alpha * load_d(y->data, a->dtype, yi);
                    if (c) v += beta * load_d(c->data, a->dtype, ci);
                    ((uint16_t *)y->data)[yi] = a->dtype == KILN_DTYPE_FLOAT16 ? kiln_fp32_to_fp16((float)v)
                                                                               : kiln_fp32_to_bf16((float)v);
                } else if (a->dtype == KILN_DTYPE_INT32) {
                    int32_t *p = (int32_t *)y->data + yi;
                    int64_t v = (int64_t)(alpha * (float)*p);
                    if (c) v += (int64_t)(beta * (float)((const int32_t *)c->data)[ci]);
                    *p = (int32_t)v;
                } else if (a->dtype == KILN_DTYPE_INT64) {
                    int64_t *p = (int64_t *)y->data + yi;
                    int64_t v = (int64_t)(alpha * (double)*p);
                    if (c) v += (int64_t)(beta * (double)((const int64_t *)c->data)[ci]);
                    *p = v;
                }
            }
        return KILN_OK;
    }
    cpu_epilogue ep;
    st = cpu_epilogue_from_node(ctx, inputs, n_in, y->count, &ep);
    if (st != KILN_OK) return st;
    ep.ld_res = N;
    float *Y = y->data;
    float gemm_beta = 0.f;
    if (c && beta != 0.f) {
        const float *C = c->data;
        if (beta == 1.f && cm == 1 && cn == N) {
            ep.bias_mode = CPU_BIAS_COL; /* the usual Linear bias: fused, no extra pass */
            ep.bias = C;
        } else if (beta == 1.f && cn == 1 && cm == M && M > 1) {
            ep.bias_mode = CPU_BIAS_ROW;
            ep.bias = C;
        } else {
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) Y[i * N + j] = beta * C[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
            gemm_beta = 1.f;
        }
    }
    if (!ta && K > 0 && gemm_beta == 0.f && M <= CPU_GEMV_MAX_M && cpu_gemv_supported()) {
        /* the classifier head at batch 1 (ResNet's fc): read the weight once, in place */
        cpu_sgemv_small(ctx->pool, tb, M, N, K, alpha, a->data, a->dims[1], b->data, b->dims[1], Y, N, &ep);
        return KILN_OK;
    }
    if (!ta && K > 0 && gemm_beta == 0.f && alpha == 1.f) {
        /* constant weight (batched classifier heads): packed once per node like MatMul's */
        mm_state *ms = mm_packed_b(ctx, b->data, K, N, tb, &st);
        if (st != KILN_OK) return st;
        if (ms)
            return cpu_sgemm_packed(ctx->pool, M, N, K, NULL, a->data, K, &ms->pb, NULL, 0, Y, N, &ep,
                                    cpu_scratch_gemm(ctx, &ms->scratch), ctx->err);
    }
    cpu_sgemm(ctx->pool, ta, tb, M, N, K, alpha, a->data, a->dims[1], b->data, b->dims[1], gemm_beta, Y, N, &ep);
    return KILN_OK;
}

/* ---- MatMulInteger ------------------------------------------------------------------- */

static int32_t q_load(const rt_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT8 ? (int32_t)((const int8_t *)t->data)[i] : (int32_t)((const uint8_t *)t->data)[i];
}

kiln_status cpu_matmul_integer(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out) {
    const rt_tensor *a = cpu_in(inputs, n_in, 0), *b = cpu_in(inputs, n_in, 1);
    const rt_tensor *azp = cpu_in(inputs, n_in, 2), *bzp = cpu_in(inputs, n_in, 3);
    if (!a || !b) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "MatMulInteger needs inputs A and B");
    for (int i = 0; i < 4; i++) {
        const rt_tensor *t = cpu_in(inputs, n_in, i);
        if (t && t->dtype != KILN_DTYPE_INT8 && t->dtype != KILN_DTYPE_UINT8)
            return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "input %d must be int8 or uint8 (got %s)", i,
                                   kiln_dtype_name(t->dtype));
    }
    mm_shape s;
    kiln_status st = mm_infer(ctx, a, b, &s);
    if (st != KILN_OK) return st;
    /* zero points: scalar, or per row of A ([M]) / per column of B ([N]) */
    if (azp && azp->count != 1 && azp->count != (uint64_t)s.M)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a_zero_point must be a scalar or have M=%lld elements",
                               (long long)s.M);
    if (bzp && bzp->count != 1 && bzp->count != (uint64_t)s.N)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "b_zero_point must be a scalar or have N=%lld elements",
                               (long long)s.N);
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    st = rt_tensor_alloc(y, KILN_DTYPE_INT32, s.out_rank, s.out_dims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;
    int32_t *Y = y->data;
    for (int64_t t = 0; t < s.n_batch; t++) {
        int64_t oa, ob;
        mm_offsets(&s, t, &oa, &ob);
        int64_t abase = oa * s.M * s.K, bbase = ob * s.K * s.N;
        for (int64_t i = 0; i < s.M; i++) {
            int32_t za = azp ? q_load(azp, azp->count == 1 ? 0 : i) : 0;
            for (int64_t j = 0; j < s.N; j++) {
                int32_t zb = bzp ? q_load(bzp, bzp->count == 1 ? 0 : j) : 0;
                int32_t acc = 0;
                for (int64_t k = 0; k < s.K; k++)
                    acc += (q_load(a, abase + i * s.K + k) - za) * (q_load(b, bbase + k * s.N + j) - zb);
                Y[t * s.M * s.N + i * s.N + j] = acc;
            }
        }
    }
    return KILN_OK;
}
