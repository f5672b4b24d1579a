/* conv1x1_stages.c - where a 1x1 convolution's time goes in kiln's packed GEMM, found by
 * leaving stages out (for machines without hardware counters, such as the GPU host).
 *
 * One shape, one thread, five variants of cpu_sgemm_conv1x1 called in turn (so a slow
 * phase of a shared machine hits them all), each after a 64 MiB memset that evicts the
 * operands as the layers before it do inside a network:
 *   full   bias + residual (when asked for) + Relu, the layouts given: the network's case
 *   nores  bias + Relu, no residual read
 *   noep   no epilogue at all
 *   warm   full without the eviction (operands in cache: what memory costs)
 *   nchwC  full with C and the residual row-major instead of P16 (P16 shapes only)
 * Prints the median time and GFLOP/s of each.
 *
 * Build and run (from the repository root, after scripts/build.sh):
 *   cc -O2 -march=native -Isrc -Iinclude bench/conv1x1_stages.c build/libkiln.a \
 *      -lopenblas -lcjson -lm -lpthread -o build/conv1x1_stages
 *   build/conv1x1_stages M N K P16 RES REPS     e.g. 256 3136 64 1 1 21
 * M output channels, N positions, K input channels; P16 1: B, C and residual in the P16
 * layout (N a multiple of 16) as between ResNet's 56x56 and 28x28 1x1 convs, 0: NCHW. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_kernel.h"

enum { FULL, NORES, NOEP, WARM, NCHW_C, N_VARIANTS };
static const char *const variant_names[N_VARIANTS] = {"full", "nores", "noep", "warm", "nchwC"};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float *filled(size_t n, unsigned mul) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (p)
        for (size_t i = 0; i < n; i++) p[i] = (float)((i * mul) % 1000) / 1000.f - .5f;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s M N K P16(0|1) RES(0|1) REPS\n", argv[0]);
        return 2;
    }
    long M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]);
    int p16 = atoi(argv[4]), res = atoi(argv[5]), reps = atoi(argv[6]);
    if (M < 1 || N < 1 || K < 1 || reps < 1 || (p16 && N % 16)) {
        fprintf(stderr, "M, N, K and REPS must be positive, and N a multiple of 16 with P16\n");
        return 2;
    }
    float *W = filled((size_t)M * K, 2654435761u), *X = filled((size_t)K * N, 40503u);
    float *R = filled((size_t)M * N, 7919u), *Y = filled((size_t)M * N, 1u), *bias = filled((size_t)M, 31u);
    size_t flush_bytes = (size_t)64 << 20;
    char *flush = malloc(flush_bytes);
    double *times = malloc(sizeof(double) * N_VARIANTS * (size_t)reps);
    if (!W || !X || !R || !Y || !bias || !flush || !times || !cpu_gemm_packed_supported()) {
        fprintf(stderr, "out of memory, or no AVX2+FMA (the packed GEMM is not used)\n");
        return 1;
    }
    kiln_error err = {0};
    cpu_threadpool *pool = NULL;
    cpu_gemm_packed pa = {0};
    cpu_gemm_scratch scratch = {0};
    if (cpu_threadpool_create(1, &pool, &err) != KILN_OK || cpu_gemm_pack_a(W, K, M, K, &pa, &err) != KILN_OK) {
        fprintf(stderr, "%s\n", err.msg ? err.msg : "setup failed");
        return 1;
    }
    int n_variants = p16 ? N_VARIANTS : NCHW_C;
    for (int r = -2; r < reps; r++) /* two rounds of warm-up */
        for (int v = 0; v < n_variants; v++) {
            cpu_epilogue ep = {0};
            if (v != NOEP) {
                ep.bias_mode = CPU_BIAS_ROW;
                ep.bias = bias;
                ep.act.kind = CPU_ACT_RELU;
            }
            if (res && (v == FULL || v == WARM || v == NCHW_C)) {
                ep.residual = R;
                ep.ld_res = N;
            }
            cpu_gemm_io io = {p16 != 0, p16 && v != NCHW_C, p16 && v != NCHW_C};
            if (v != WARM) memset(flush, r + v, flush_bytes);
            double t0 = now_ms();
            if (cpu_sgemm_conv1x1(pool, M, N, K, &pa, X, Y, &ep, io, &scratch, &err) != KILN_OK) {
                fprintf(stderr, "%s\n", err.msg ? err.msg : "GEMM failed");
                return 1;
            }
            if (r >= 0) times[v * reps + r] = now_ms() - t0;
        }
    printf("%ldx%ldx%ld p16=%d res=%d:", M, N, K, p16, res);
    for (int v = 0; v < n_variants; v++) {
        double *t = times + v * reps;
        qsort(t, (size_t)reps, sizeof(double), cmp_double);
        printf("  %s %.3f ms (%.0f GF/s)", variant_names[v], t[reps / 2], 2.0 * M * N * K / t[reps / 2] / 1e6);
    }
    printf("\n");
    cpu_gemm_scratch_free(&scratch);
    cpu_gemm_packed_free(&pa);
    cpu_threadpool_free(pool);
    return 0;
}
