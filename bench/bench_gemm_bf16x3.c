/* bench_gemm_bf16x3.c - the AMX bf16x3 GEMM (cpu_gemm_bf16x3.h) against kiln's FP32 packed
 * GEMM (cpu_gemm_packed.h) on BERT-base's weight GEMMs, interleaved call by call so a
 * drift of the machine's speed lands on both, with the weights in a rotation of 12 packed
 * copies (cold, as in a network, where every weight is read once per inference; each
 * copy is 2.4-9.4 MB). Wall clock, mean of 4 x 12 calls after one warm-up rotation.
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude bench/bench_gemm_bf16x3.c \
 *          build/libkiln.a -lopenblas -lpthread -lm -lz -lcjson -o build/bench_gemm_bf16x3
 * Usage: bench_gemm_bf16x3 [THREADS] [BATCH]   (M = 128 x BATCH rows)
 * Output per shape: ms and GFLOP/s of each, the speed-up, and the largest difference.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backends/cpu/cpu_gemm_bf16x3.h"
#include "backends/cpu/cpu_gemm_packed.h"

#define COPIES 12

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float *random_floats(int64_t n, float scale) {
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; p && i < n; i++) p[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * scale;
    return p;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    int64_t batch = argc > 2 ? atoll(argv[2]) : 1;
    kiln_error err = {0};
    cpu_threadpool *pool = NULL;
    if (threads < 1 || batch < 1 || cpu_threadpool_create(threads, &pool, &err) != KILN_OK) {
        fprintf(stderr, "usage: bench_gemm_bf16x3 [THREADS >= 1] [BATCH >= 1]\n");
        return 2;
    }
    if (!cpu_bf16x3_usable() || !cpu_gemm_packed_supported()) {
        printf("skipped: AMX-BF16 or AVX2 cannot run here (cpu_gemm_bf16x3.h)\n");
        return 0;
    }
    /* query/key/value/output projections, FFN up, FFN down */
    const int64_t shapes[][2] = {{768, 768}, {3072, 768}, {768, 3072}};
    printf("threads %d, M = %lld\n", threads, (long long)(128 * batch));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = 128 * batch, N = shapes[s][0], K = shapes[s][1];
        float *A = random_floats(M * K, 1.f), *B = random_floats(K * N, 0.1f);
        float *C32 = malloc((size_t)(M * N) * sizeof(float)), *C3 = malloc((size_t)(M * N) * sizeof(float));
        if (!A || !B || !C32 || !C3) return 1;
        cpu_gemm_packed p32[COPIES];
        cpu_bf16x3_b p3[COPIES];
        for (int i = 0; i < COPIES; i++)
            if (cpu_gemm_pack_b(B, N, K, N, &p32[i], &err) != KILN_OK ||
                cpu_bf16x3_pack_b(B, N, K, N, false, &p3[i], &err) != KILN_OK)
                return 1;
        cpu_gemm_scratch s32 = {0}, s3 = {0};
        double t32 = 0, t3 = 0;
        for (int r = 0; r < 5 * COPIES; r++) {
            int i = r % COPIES;
            double t0 = now_s();
            cpu_sgemm_packed(pool, M, N, K, NULL, A, K, &p32[i], NULL, 0, C32, N, NULL, &s32, &err);
            double t1 = now_s();
            /* the other half of the rotation: neither call finds its weights in cache */
            cpu_sgemm_bf16x3(pool, M, N, K, A, K, &p3[(i + COPIES / 2) % COPIES], C3, N, NULL, &s3, &err);
            double t2 = now_s();
            if (r >= COPIES) t32 += t1 - t0, t3 += t2 - t1;
        }
        double worst = 0;
        for (int64_t i = 0; i < M * N; i++) worst = fmax(worst, fabs((double)C32[i] - C3[i]));
        int n = 4 * COPIES;
        double gflop = 2.0 * (double)M * (double)N * (double)K * 1e-9;
        printf("%5lldx%5lldx%5lld  fp32 %7.3f ms %5.0f GFLOP/s   bf16x3 %7.3f ms %5.0f GFLOP/s   x%.2f   max diff %.2e\n",
               (long long)M, (long long)N, (long long)K, t32 / n * 1e3, gflop / (t32 / n), t3 / n * 1e3,
               gflop / (t3 / n), t32 / t3, worst);
        for (int i = 0; i < COPIES; i++) {
            cpu_gemm_packed_free(&p32[i]);
            cpu_bf16x3_b_free(&p3[i]);
        }
        cpu_gemm_scratch_free(&s32);
        cpu_gemm_scratch_free(&s3);
        free(A);
        free(B);
        free(C32);
        free(C3);
    }
    cpu_threadpool_free(pool);
    return 0;
}
