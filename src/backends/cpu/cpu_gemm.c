/* cpu_gemm.c - cpu_sgemm: one BLAS call per GEMM, then the fused epilogue (bias,
 * residual, activation) over row blocks on kiln's thread pool.
 *
 * Threading policy, measured on the 2-core AMD EPYC (Zen 3) dev machine with OpenBLAS
 * 0.3.21 (GFLOP/s, 1 thread / OpenBLAS's own 2 threads / kiln splitting N in two and
 * calling single-threaded OpenBLAS per half):
 *   64x3136x576 (3x3 conv)   81.6 / 148.6 / 130.6      128x768x768 (BERT)  67.7 / 132.2 / 130.9
 *   256x196x2304             80.1 / 108.6 / 104.8      1024x3072x768       69.4 / 138.4 / 138.2
 *   2048x49x512              51.6 /  73.9 /  75.2      2048^3              91.9 / 159.5 / 152.9
 * OpenBLAS's own threading was as fast or faster in every shape, so kiln used to call BLAS
 * once per GEMM with OpenBLAS's thread count equal to the pool's size. Since kiln's own
 * packed AVX2 GEMM (cpu_gemm_avx2.c) runs the constant-weight GEMMs on kiln's pool, that
 * mix made OpenBLAS's idle workers busy-wait on the core the pool needed (BERT at 2
 * threads ran slower than at 1). So when the packed GEMM is available, OpenBLAS gets one
 * thread (cpu_threadpool.c) and cpu_sgemm splits each BLAS GEMM over the pool itself
 * (the "split 2T" column: within ~10% of OpenBLAS's own threading), and MatMul runs
 * batched GEMMs (attention heads) one batch entry per task. Kernels still never call
 * cpu_sgemm from inside a pool worker except through that batch loop, where nested
 * parallel loops run inline. The epilogue then runs as one parallel pass over C.
 *
 * Without OpenBLAS (KILN_HAVE_OPENBLAS=0) a portable loop is used, row blocks spread over
 * the pool: correct, vectorised by the compiler, but several times slower.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_gemm_packed.h"

#if KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* ---- helpers for the packed path (cpu_gemm_packed.h) ------------------------------- */

bool cpu_gemm_packed_supported(void) {
    /* cpuid + getenv cost ~1% of a ResNet-50 run when asked per GEMM: decide once (atomic:
     * sessions may run on several threads; they all compute the same answer). */
    static _Atomic int cached = -1;
    int c = cached;
    if (c < 0) {
        /* KILN_GEMM=blas forces OpenBLAS everywhere (A/B measurements, bisecting). */
        const char *force = getenv("KILN_GEMM");
        uint32_t f = cpu_features();
        c = !(force && !strcmp(force, "blas")) && (f & CPU_FEATURE_AVX2) && (f & CPU_FEATURE_FMA);
        cached = c;
    }
    return c == 1;
}

bool cpu_input_is_const(const cpu_kernel_ctx *ctx, int32_t i) {
    const ir_node *n = ctx->node;
    const ir_graph *g = ctx->graph;
    if (!n || !g || i < 0 || i >= n->n_inputs) return false;
    int32_t id = n->inputs[i];
    if (id < 0 || id >= g->n_values) return false;
    const ir_value *v = &g->values[id];
    return v->init != NULL && !(v->flags & IR_VALUE_GRAPH_INPUT);
}

/* ---- epilogue ------------------------------------------------------------------------ */

kiln_status cpu_epilogue_from_node(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                   uint64_t out_count, cpu_epilogue *ep) {
    memset(ep, 0, sizeof *ep);
    const ir_node *n = ctx->node;
    if (!n) return KILN_OK;
    const ir_attr *a = ir_node_attr(n, "kiln_activation");
    if (a && a->type == IR_ATTR_STRING) {
        char name[32] = {0};
        size_t len = a->s.len < sizeof name - 1 ? (size_t)a->s.len : sizeof name - 1;
        memcpy(name, a->s.data, len);
        cpu_act *act = &ep->act;
        if (!strcmp(name, "Relu")) act->kind = CPU_ACT_RELU;
        else if (!strcmp(name, "Clip")) {
            act->kind = CPU_ACT_CLIP;
            act->a = ir_node_attr_float(n, "kiln_activation_min", -INFINITY);
            act->b = ir_node_attr_float(n, "kiln_activation_max", INFINITY);
        } else if (!strcmp(name, "Sigmoid")) act->kind = CPU_ACT_SIGMOID;
        else if (!strcmp(name, "Tanh")) act->kind = CPU_ACT_TANH;
        else if (!strcmp(name, "HardSigmoid")) {
            act->kind = CPU_ACT_HARDSIGMOID;
            act->a = ir_node_attr_float(n, "kiln_activation_alpha", 0.2f);
            act->b = ir_node_attr_float(n, "kiln_activation_beta", 0.5f);
        } else if (!strcmp(name, "HardSwish")) act->kind = CPU_ACT_HARDSWISH;
        else if (!strcmp(name, "LeakyRelu")) {
            act->kind = CPU_ACT_LEAKYRELU;
            act->a = ir_node_attr_float(n, "kiln_activation_alpha", 0.01f);
        } else if (!strcmp(name, "Gelu")) act->kind = CPU_ACT_GELU;
        else if (!strcmp(name, "GeluTanh")) act->kind = CPU_ACT_GELU_TANH;
        else
            return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED,
                                   "fused activation '%s' is not supported by the CPU epilogue", name);
    }
    const ir_attr *r = ir_node_attr(n, "kiln_residual");
    if (r && r->type == IR_ATTR_INT) {
        const rt_tensor *res = cpu_in(inputs, n_in, (int32_t)r->i);
        if (r->i < 0 || r->i >= n_in || !res || res->dtype != KILN_DTYPE_FLOAT || res->count != out_count)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                                   "fused residual input %lld is missing or does not match the output "
                                   "(%llu float32 elements expected)",
                                   (long long)r->i, (unsigned long long)out_count);
        ep->residual = (const float *)res->data;
    }
    return KILN_OK;
}

void cpu_act_apply(const cpu_act *act, float *x, int64_t n) {
    switch (act->kind) {
    case CPU_ACT_NONE: break;
    case CPU_ACT_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0.f ? x[i] : 0.f;
        break;
    case CPU_ACT_CLIP: {
        float lo = act->a, hi = act->b;
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < lo ? lo : x[i];
            x[i] = v > hi ? hi : v;
        }
        break;
    }
    case CPU_ACT_SIGMOID: cpu_vsigmoid(x, x, n); break;
    case CPU_ACT_TANH: cpu_vtanh(x, x, n); break;
    case CPU_ACT_HARDSIGMOID:
        for (int64_t i = 0; i < n; i++) {
            float v = act->a * x[i] + act->b;
            x[i] = v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
        }
        break;
    case CPU_ACT_HARDSWISH:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] * (1.f / 6.f) + 0.5f;
            v = v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
            x[i] *= v;
        }
        break;
    case CPU_ACT_LEAKYRELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] >= 0.f ? x[i] : x[i] * act->a;
        break;
    case CPU_ACT_GELU: cpu_vmath_get()->gelu(x, x, n); break;
    case CPU_ACT_GELU_TANH: cpu_vmath_get()->gelu_tanh(x, x, n); break;
    }
}

void cpu_epilogue_apply(const cpu_epilogue *ep, float *C, int64_t ldc, int64_t m0, int64_t m1, int64_t n0,
                        int64_t n1) {
    if (cpu_epilogue_is_empty(ep)) return;
    int64_t w = n1 - n0;
    for (int64_t m = m0; m < m1; m++) {
        float *row = C + m * ldc + n0;
        if (ep->bias_mode == CPU_BIAS_ROW) {
            float b = ep->bias[m];
            for (int64_t j = 0; j < w; j++) row[j] += b;
        } else if (ep->bias_mode == CPU_BIAS_COL) {
            const float *b = ep->bias + n0;
            for (int64_t j = 0; j < w; j++) row[j] += b[j];
        }
        if (ep->residual) {
            const float *r = ep->residual + m * ep->ld_res + n0;
            for (int64_t j = 0; j < w; j++) row[j] += r[j];
        }
        cpu_act_apply(&ep->act, row, w);
    }
}

/* ---- the multiply -------------------------------------------------------------------- */

#if !KILN_HAVE_OPENBLAS
/* Portable fallback: C = A*B + beta*C with i-k-j loop order so the inner loop is a
 * contiguous axpy the compiler vectorises. */
static void naive_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++) {
        float *c = C + i * ldc;
        if (beta == 0.f) memset(c, 0, (size_t)N * sizeof(float));
        else if (beta != 1.f)
            for (int64_t j = 0; j < N; j++) c[j] *= beta;
        for (int64_t k = 0; k < K; k++) {
            float a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
            if (a == 0.f) continue;
            if (!tb) {
                const float *b = B + k * ldb;
                for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
            } else {
                for (int64_t j = 0; j < N; j++) c[j] += a * B[j * ldb + k];
            }
        }
    }
}
#endif

typedef struct gemm_job {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    const float *A, *B;
    float *C;
    float alpha, beta;
    const cpu_epilogue *ep;
} gemm_job;

#if !KILN_HAVE_OPENBLAS
static void gemm_rows_run(void *user, int64_t begin, int64_t end) {
    const gemm_job *j = user;
    const float *a = j->ta ? j->A + begin : j->A + begin * j->lda;
    naive_sgemm(j->ta, j->tb, end - begin, j->N, j->K, j->alpha, a, j->lda, j->B, j->ldb, j->beta, j->C + begin * j->ldc,
                j->ldc);
}
#endif

#if KILN_HAVE_OPENBLAS
/* One chunk of a GEMM split over the pool, single-threaded OpenBLAS per chunk: chunks
 * of 16-column groups (split_n) or of rows. */
typedef struct blas_split_job {
    const gemm_job *g;
    bool split_n;
    int64_t n_chunks;
} blas_split_job;

static void blas_split_run(void *user, int64_t c0, int64_t c1) {
    const blas_split_job *s = user;
    const gemm_job *j = s->g;
    for (int64_t c = c0; c < c1; c++) {
        if (s->split_n) {
            int64_t groups = (j->N + 15) / 16, g0 = c * groups / s->n_chunks, g1 = (c + 1) * groups / s->n_chunks;
            int64_t n0 = g0 * 16, n1 = g1 * 16 < j->N ? g1 * 16 : j->N;
            if (n1 <= n0) continue;
            const float *b = j->tb ? j->B + n0 * j->ldb : j->B + n0;
            cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans,
                        (blasint)j->M, (blasint)(n1 - n0), (blasint)j->K, j->alpha, j->A, (blasint)j->lda, b,
                        (blasint)j->ldb, j->beta, j->C + n0, (blasint)j->ldc);
        } else {
            int64_t m0 = c * j->M / s->n_chunks, m1 = (c + 1) * j->M / s->n_chunks;
            if (m1 <= m0) continue;
            const float *a = j->ta ? j->A + m0 : j->A + m0 * j->lda;
            cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans,
                        (blasint)(m1 - m0), (blasint)j->N, (blasint)j->K, j->alpha, a, (blasint)j->lda, j->B,
                        (blasint)j->ldb, j->beta, j->C + m0 * j->ldc, (blasint)j->ldc);
        }
    }
}
#endif

static void epilogue_rows_run(void *user, int64_t begin, int64_t end) {
    const gemm_job *j = user;
    cpu_epilogue_apply(j->ep, j->C, j->ldc, begin, end, 0, j->N);
}

void cpu_sgemm(cpu_threadpool *pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
               const cpu_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    gemm_job j = {trans_a, trans_b, M, N, K, lda, ldb, ldc, A, B, C, alpha, beta, ep};
    if (K == 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t jj = 0; jj < N; jj++) C[i * ldc + jj] = beta == 0.f ? 0.f : beta * C[i * ldc + jj];
    } else {
#if KILN_HAVE_OPENBLAS
        int nt = cpu_threadpool_size(pool);
        if (pool && nt > 1 && cpu_gemm_packed_supported() && (double)M * (double)N * (double)K >= 262144.0) {
            /* OpenBLAS has one thread here (cpu_threadpool.c says why): split over the pool */
            blas_split_job s = {&j, N >= M, nt};
            cpu_parallel_for(pool, nt, 1, blas_split_run, &s);
        } else
            cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C,
                    (blasint)ldc);
#else
        int64_t grain = (int64_t)(1 + 65536 / (1 + N * K));
        cpu_parallel_for(pool, M, grain, gemm_rows_run, &j);
#endif
    }
    if (!cpu_epilogue_is_empty(ep)) {
        int64_t grain = 1 + 16384 / N;
        cpu_parallel_for(pool, M, grain, epilogue_rows_run, &j);
    }
}
