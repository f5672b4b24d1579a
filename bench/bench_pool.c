/* bench_pool.c - the CPU thread pool's hand-off cost: per-call latency of cpu_parallel_for
 * on jobs of a few microseconds, with a little serial work between calls (as between a
 * model's parallel layers). Percentiles, not means: on a shared machine the low
 * percentiles show the hand-off itself, the median how often the other thread was there.
 *
 * Build against a libkiln.a (old and new to compare; not built by CMake):
 *   cc -O2 -D_GNU_SOURCE -Isrc -Iinclude bench/bench_pool.c build/libkiln.a -lopenblas -lm -lpthread \
 *      -o /tmp/bench_pool
 * Usage: bench_pool ITEMS SERIAL THREADS   (one item ~0.25 us of work; KILN_SPIN_US applies)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backends/cpu/cpu_kernel.h"

static volatile double sink;

static void work(void *u, int64_t b, int64_t e) {
    (void)u;
    double a = 0;
    for (int64_t i = b; i < e; i++)
        for (int k = 0; k < 200; k++) a += (double)k * 1e-9; /* a dependent chain: ~0.25 us */
    sink = a;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_pool ITEMS SERIAL THREADS\n");
        return 2;
    }
    int items = atoi(argv[1]), serial = atoi(argv[2]), threads = atoi(argv[3]);
    cpu_threadpool *p = NULL;
    kiln_error e = {0};
    if (cpu_threadpool_create(threads, &p, &e) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_err_msg(&e));
        return 1;
    }
    enum { N = 5000 };
    static double t[N];
    for (int j = 0; j < N; j++) {
        double t0 = now_us();
        cpu_parallel_for(p, items, 1, work, NULL);
        t[j] = now_us() - t0;
        work(NULL, 0, serial);
    }
    qsort(t, N, sizeof *t, cmpd);
    cpu_threadpool_free(p);
    printf("threads=%d items=%d serial=%d: us per call p5 %.2f p25 %.2f median %.2f p90 %.2f\n", threads, items,
           serial, t[N / 20], t[N / 4], t[N / 2], t[N * 9 / 10]);
    return 0;
}
