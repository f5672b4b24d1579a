/* bench_gelu.c - times kiln's vectorised GELU (the Gelu operator's inner loop: the same
 * inline cpu_gelu_erf8 / cpu_gelu_tanh8 the packed GEMM's epilogue applies per tile) over
 * one BERT-base FFN activation, 128 x 3072 = 393216 floats, with the calling thread's CPU
 * clock (not the wall clock: on a shared machine it leaves out time spent waiting for a
 * core), reporting the minimum of REPEATS runs. The input is L2/L3-resident (1.5 MiB);
 * the GELU is compute-bound, so this is its arithmetic cost.
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude bench/bench_gelu.c build/libkiln.a \
 *          -lopenblas -lpthread -lm -lcjson -o build/bench_gelu
 * Usage: bench_gelu [REPEATS] [N]     Output: "gelu_erf MIN_MS NS_PER_VECTOR" and gelu_tanh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backends/cpu/cpu_activation_fast.h"

static double thread_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static double best_of(cpu_vfn fn, const float *x, float *y, long n, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = thread_ms();
        fn(x, y, n);
        double t = thread_ms() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    long n = argc > 2 ? atol(argv[2]) : 128L * 3072;
    if (reps < 1 || n < 1) {
        fprintf(stderr, "usage: bench_gelu [REPEATS] [N]\n");
        return 2;
    }
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    if (!x || !y) return 1;
    /* spread over [-6, 6] in a scrambled order (the kernels have no data-dependent branches;
     * below -12 the result is masked, never slower) */
    for (long i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 100000) / 100000.f * 12.f - 6.f;
    const cpu_vmath *vm = cpu_vmath_get();
    double te = best_of(vm->gelu, x, y, n, reps), tt = best_of(vm->gelu_tanh, x, y, n, reps);
    printf("isa %s, %ld floats, min of %d runs (thread CPU time)\n", vm->isa, n, reps);
    printf("gelu_erf %.4f ms %.2f ns/vector\n", te, te * 1e6 / ((double)n / 8));
    printf("gelu_tanh %.4f ms %.2f ns/vector\n", tt, tt * 1e6 / ((double)n / 8));
    free(x);
    free(y);
    return 0;
}
