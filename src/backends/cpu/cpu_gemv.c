/* cpu_gemv.c - dispatch and threading of the few-row GEMM kernels (cpu_gemv.h): columns of
 * C split over kiln's pool in multiples of 16, each task running the AVX2 kernel on its
 * columns and then the fused epilogue on the same columns while they are in cache.
 */
#include "backends/cpu/cpu_gemv.h"

#include "backends/cpu/cpu_gemm_packed.h"

bool cpu_gemv_supported(void) { return cpu_gemm_packed_supported(); }

typedef struct gemv_job {
    bool trans_b;
    int64_t M, N, K, lda, ldb, ldc, n_chunks;
    float alpha;
    const float *A, *B;
    float *C;
    const cpu_epilogue *ep;
} gemv_job;

static void gemv_run(void *user, int64_t c0, int64_t c1) {
    const gemv_job *j = user;
    int64_t groups = (j->N + 15) / 16;
    for (int64_t c = c0; c < c1; c++) {
        int64_t g0 = c * groups / j->n_chunks, g1 = (c + 1) * groups / j->n_chunks;
        int64_t n0 = g0 * 16, n1 = g1 * 16 < j->N ? g1 * 16 : j->N;
        if (n1 <= n0) continue;
        if (j->trans_b) cpu_sgemv_nk_avx2(j->M, n0, n1, j->K, j->alpha, j->A, j->lda, j->B, j->ldb, j->C, j->ldc);
        else cpu_sgemv_kn_avx2(j->M, n0, n1, j->K, j->alpha, j->A, j->lda, j->B, j->ldb, j->C, j->ldc);
        cpu_epilogue_apply(j->ep, j->C, j->ldc, 0, j->M, n0, n1);
    }
}

void cpu_sgemv_small(cpu_threadpool *pool, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                     const cpu_epilogue *ep) {
    /* ~4 chunks per thread for balance on a shared machine; one chunk when the whole
     * product is too small to pay for waking the pool (< ~64K multiply-adds) */
    int nt = cpu_threadpool_size(pool);
    double work = (double)M * (double)N * (double)K;
    int64_t groups = (N + 15) / 16, chunks = work < 65536.0 || nt <= 1 ? 1 : 4 * (int64_t)nt;
    if (chunks > groups) chunks = groups;
    gemv_job j = {trans_b, M, N, K, lda, ldb, ldc, chunks, alpha, A, B, C, ep};
    if (chunks == 1) gemv_run(&j, 0, 1);
    else cpu_parallel_for(pool, chunks, 1, gemv_run, &j);
}
