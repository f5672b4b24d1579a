/* test_gemm_packed.c - kiln's packed AVX2 SGEMM (cpu_gemm_avx2.c) against a reference
 * triple loop: random shapes including edge sizes that are not multiples of the 6x16 tile
 * or the 256-deep k-block, M/N/K = 1, packed A or packed B, every fused epilogue kind,
 * on 1 and 2 pool threads. Skips (with a printed reason) on CPUs without AVX2+FMA.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "backends/cpu/cpu_gemm_packed.h"

static uint32_t rng = 12345;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.f - 1.f;
}

static float *rand_buf(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* reference: act(A*B + bias + residual) */
static void ref_gemm(int64_t M, int64_t N, int64_t K, const float *A, const float *B, const cpu_epilogue *ep,
                     float *C) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)A[i * K + k] * B[k * N + j];
            float v = (float)acc;
            if (ep->bias_mode == CPU_BIAS_ROW) v += ep->bias[i];
            if (ep->bias_mode == CPU_BIAS_COL) v += ep->bias[j];
            if (ep->residual) v += ep->residual[i * ep->ld_res + j];
            C[i * N + j] = v;
        }
    for (int64_t i = 0; i < M; i++) cpu_act_apply(&ep->act, C + i * N, N);
}

static void check_one(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, bool pack_b, int ep_kind) {
    float *A = rand_buf(M * K), *B = rand_buf(K * N), *bias = rand_buf(M > N ? M : N), *res = rand_buf(M * N);
    float *C = malloc((size_t)(M * N) * sizeof(float)), *R = malloc((size_t)(M * N) * sizeof(float));
    assert_non_null(C);
    assert_non_null(R);
    for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* C is write-only: garbage must not leak */
    cpu_epilogue ep = {0};
    if (ep_kind == 1) { /* bias per row + relu (Conv) */
        ep.bias_mode = CPU_BIAS_ROW;
        ep.bias = bias;
        ep.act.kind = CPU_ACT_RELU;
    } else if (ep_kind == 2) { /* bias per column + residual (BERT projection) */
        ep.bias_mode = CPU_BIAS_COL;
        ep.bias = bias;
        ep.residual = res;
        ep.ld_res = N;
    } else if (ep_kind == 3) { /* residual + sigmoid (activation outside the fused store) */
        ep.residual = res;
        ep.ld_res = N;
        ep.act.kind = CPU_ACT_SIGMOID;
    }
    cpu_gemm_packed p;
    cpu_gemm_scratch scratch = {0};
    kiln_error err = {0};
    kiln_status st;
    if (pack_b) {
        assert_int_equal(cpu_gemm_pack_b(B, N, K, N, &p, &err), KILN_OK);
        st = cpu_sgemm_packed(pool, M, N, K, NULL, A, K, &p, NULL, 0, C, N, ep_kind ? &ep : NULL, &scratch, &err);
    } else {
        assert_int_equal(cpu_gemm_pack_a(A, K, M, K, &p, &err), KILN_OK);
        st = cpu_sgemm_packed(pool, M, N, K, &p, NULL, 0, NULL, B, N, C, N, ep_kind ? &ep : NULL, &scratch, &err);
    }
    assert_int_equal(st, KILN_OK);
    ref_gemm(M, N, K, A, B, &ep, R);
    for (int64_t i = 0; i < M * N; i++) {
        float tol = 1e-4f * (float)K + 1e-4f;
        if (!(fabsf(C[i] - R[i]) <= tol))
            fail_msg("M=%lld N=%lld K=%lld pack_b=%d ep=%d: C[%lld]=%g, reference %g", (long long)M, (long long)N,
                     (long long)K, (int)pack_b, ep_kind, (long long)i, (double)C[i], (double)R[i]);
    }
    cpu_gemm_packed_free(&p);
    cpu_gemm_scratch_free(&scratch);
    free(A);
    free(B);
    free(bias);
    free(res);
    free(C);
    free(R);
}

static void run_shapes(cpu_threadpool *pool) {
    static const int64_t shapes[][3] = {{1, 1, 1},    {1, 17, 3},   {7, 1, 5},    {6, 16, 256}, {5, 15, 257},
                                        {13, 33, 1},  {64, 49, 513}, {73, 129, 64}, {128, 48, 300}, {2, 200, 9},
                                        {37, 21, 600}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int pb = 0; pb < 2; pb++)
            for (int e = 0; e < 4; e++) check_one(pool, shapes[s][0], shapes[s][1], shapes[s][2], pb, e);
}

static void test_packed_vs_reference(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: this CPU (or KILN_CPU_ISA) has no AVX2+FMA, the packed GEMM is not used\n");
        return;
    }
    run_shapes(NULL);
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    run_shapes(pool);
    cpu_threadpool_free(pool);
}

static void test_mismatched_pack_is_an_error(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("skipped: no AVX2+FMA\n");
        return;
    }
    float *A = rand_buf(6 * 8), *B = rand_buf(8 * 4), C[24];
    cpu_gemm_packed p;
    cpu_gemm_scratch scratch = {0};
    kiln_error err = {0};
    assert_int_equal(cpu_gemm_pack_a(A, 8, 6, 8, &p, &err), KILN_OK);
    /* K differs from the packed operand's */
    assert_int_equal(cpu_sgemm_packed(NULL, 6, 4, 7, &p, NULL, 0, NULL, B, 4, C, 4, NULL, &scratch, &err),
                     KILN_ERR_INTERNAL);
    kiln_err_clear(&err);
    cpu_gemm_packed_free(&p);
    cpu_gemm_scratch_free(&scratch);
    free(A);
    free(B);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_vs_reference),
        cmocka_unit_test(test_mismatched_pack_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
