/* test_threadpool.c - the CPU thread pool covers every index exactly once, runs inline
 * without a pool, survives nesting and concurrent submitters; the spin-then-sleep hand-off
 * (many short jobs, jobs after the workers slept, freeing while they spin, KILN_SPIN_US,
 * identical results at 1 and 2 threads); cpu_parallel_for_each hands out single items;
 * cpu_threadpool_stats counts loops and the time spent in their chunks;
 * cpu_features honours
 * KILN_CPU_ISA. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_kernel.h"

typedef struct nested_each {
    cpu_threadpool *pool;
    atomic_int total;
} nested_each;

typedef struct cover {
    atomic_int *hits;
    atomic_int calls;
    atomic_llong min_len;
    int64_t n;
    pthread_t seen[64];
    atomic_int n_seen;
} cover;

static void mark(void *user, int64_t b, int64_t e) {
    cover *c = user;
    atomic_fetch_add(&c->calls, 1);
    if (e < c->n) { /* only the last chunk may be shorter than the grain */
        long long cur = atomic_load(&c->min_len);
        while (e - b < cur && !atomic_compare_exchange_weak(&c->min_len, &cur, e - b)) {
        }
    }
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
    int k = atomic_fetch_add(&c->n_seen, 1);
    if (k < 64) c->seen[k] = pthread_self();
}

static void check_cover(cpu_threadpool *pool, int64_t n, int64_t grain) {
    cover c;
    memset(&c, 0, sizeof c);
    c.hits = calloc((size_t)n + 1, sizeof *c.hits);
    c.n = n;
    c.min_len = INT64_MAX;
    cpu_parallel_for(pool, n, grain, mark, &c);
    for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
    if (n > 0 && atomic_load(&c.min_len) != INT64_MAX) assert_true(atomic_load(&c.min_len) >= grain);
    free(c.hits);
}

static void test_inline_without_pool(void **state) {
    (void)state;
    cover c;
    memset(&c, 0, sizeof c);
    c.hits = calloc(100, sizeof *c.hits);
    c.n = 100;
    c.min_len = INT64_MAX;
    cpu_parallel_for(NULL, 100, 1, mark, &c);
    assert_int_equal(atomic_load(&c.calls), 1); /* one call covering everything */
    assert_true(pthread_equal(c.seen[0], pthread_self()));
    for (int i = 0; i < 100; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
    free(c.hits);
    assert_int_equal(cpu_threadpool_size(NULL), 1);
}

static void test_covers_every_index_once(void **state) {
    (void)state;
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(4, &pool, &err), KILN_OK);
    assert_int_equal(cpu_threadpool_size(pool), 4);
    int64_t sizes[] = {0, 1, 2, 3, 7, 16, 17, 100, 1000, 12345};
    int64_t grains[] = {1, 3, 64};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t g = 0; g < 3; g++) check_cover(pool, sizes[i], grains[g]);
    /* many small jobs back to back: workers must not miss a generation or hang */
    for (int r = 0; r < 2000; r++) check_cover(pool, 64, 1);
    cpu_threadpool_free(pool);
}

/* cpu_parallel_for_each: every index exactly once, one index per call (so a thread that
 * finishes early takes the next single item), for sizes around the thread count, with
 * and without a pool, and nested inside another job. */
static void check_each(cpu_threadpool *pool, int64_t n, bool nested_call) {
    cover c;
    memset(&c, 0, sizeof c);
    c.hits = calloc((size_t)n + 1, sizeof *c.hits);
    c.n = n;
    c.min_len = INT64_MAX;
    cpu_parallel_for_each(pool, n, mark, &c);
    for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
    if (pool && cpu_threadpool_size(pool) > 1 && n > 1 && !nested_call)
        assert_int_equal(atomic_load(&c.calls), (int)n);
    if (nested_call && n > 0) assert_int_equal(atomic_load(&c.calls), 1); /* inline, in one call */
    if (n == 0) assert_int_equal(atomic_load(&c.calls), 0);
    free(c.hits);
}

static void each_outer(void *user, int64_t b, int64_t e) {
    nested_each *n = user;
    for (int64_t i = b; i < e; i++) check_each(n->pool, 5, true); /* runs inline: a nested call */
    atomic_fetch_add(&n->total, (int)(e - b));
}

static void test_for_each_items(void **state) {
    (void)state;
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    int64_t sizes[] = {0, 1, 2, 3, 5, 8, 90, 361};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_each(NULL, sizes[i], false);
    for (int t = 1; t <= 3; t++) {
        assert_int_equal(cpu_threadpool_create(t, &pool, &err), KILN_OK);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_each(pool, sizes[i], false);
        for (int r = 0; r < 500; r++) check_each(pool, 7, false); /* back to back, short */
        nested_each ne = {pool, 0};
        cpu_parallel_for_each(pool, 9, each_outer, &ne);
        assert_int_equal(atomic_load(&ne.total), 9);
        cpu_threadpool_free(pool);
    }
}

static void test_uses_several_threads(void **state) {
    (void)state;
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(3, &pool, &err), KILN_OK);
    cover c;
    memset(&c, 0, sizeof c);
    c.hits = calloc(4096, sizeof *c.hits);
    c.n = 4096;
    c.min_len = INT64_MAX;
    cpu_parallel_for(pool, 4096, 1, mark, &c);
    /* more than one chunk was handed out, so the work was split */
    assert_true(atomic_load(&c.calls) > 1);
    free(c.hits);
    cpu_threadpool_free(pool);
}

/* Each item sleeps 200 us, so a loop's time is known from below. */
static void slow_items(void *user, int64_t b, int64_t e) {
    (void)user;
    for (int64_t i = b; i < e; i++) nanosleep(&(struct timespec){0, 200000}, NULL);
}

/* cpu_threadpool_stats: shared loops and inline ones counted; the caller's and the
 * workers' time in chunks at least the sleeps each ran (16 items x 200 us over both
 * threads: 3.2 ms a loop, summed over the two), the caller ran some of them; a NULL pool
 * reports one thread and nothing else. */
static void test_stats_count_loops_and_time(void **state) {
    (void)state;
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    cpu_pool_stats s0, s1;
    cpu_threadpool_stats(pool, &s0);
    assert_int_equal(s0.threads, 2);
    for (int r = 0; r < 5; r++) cpu_parallel_for_each(pool, 16, slow_items, NULL);
    cpu_parallel_for(pool, 1, 1, slow_items, NULL); /* one item: runs inline */
    cpu_threadpool_stats(pool, &s1);
    assert_int_equal(s1.loops - s0.loops, 5);
    assert_int_equal(s1.inline_loops - s0.inline_loops, 1);
    uint64_t chunks_ns = (s1.caller_run_ns - s0.caller_run_ns) + (s1.worker_run_ns - s0.worker_run_ns);
    assert_true(chunks_ns >= 5ull * 16 * 200000);
    assert_true(s1.caller_run_ns > s0.caller_run_ns);
    cpu_threadpool_free(pool);
    cpu_threadpool_stats(NULL, &s1);
    assert_int_equal(s1.threads, 1);
    assert_int_equal(s1.loops, 0);
}

typedef struct nested {
    cpu_threadpool *pool;
    atomic_int total;
} nested;

static void inner(void *user, int64_t b, int64_t e) {
    nested *n = user;
    atomic_fetch_add(&n->total, (int)(e - b));
}

static void outer(void *user, int64_t b, int64_t e) {
    nested *n = user;
    for (int64_t i = b; i < e; i++) cpu_parallel_for(n->pool, 10, 1, inner, n);
}

static void test_nested_runs_inline(void **state) {
    (void)state;
    nested n;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(4, &n.pool, &err), KILN_OK);
    atomic_init(&n.total, 0);
    cpu_parallel_for(n.pool, 50, 1, outer, &n);
    assert_int_equal(atomic_load(&n.total), 500);
    cpu_threadpool_free(n.pool);
}

static void *submitter(void *arg) {
    cpu_threadpool *pool = arg;
    for (int r = 0; r < 300; r++) check_cover(pool, 257, 2);
    return NULL;
}

static void test_concurrent_submitters(void **state) {
    (void)state;
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(3, &pool, &err), KILN_OK);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, submitter, pool);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    cpu_threadpool_free(pool);
}


/* ---- spin-then-sleep hand-off (KILN_SPIN_US) ------------------------------------- */

/* Many short jobs back to back, with spinning on, off and long: every index once. Covers
 * the paths where workers are spinning, asleep, or waking late into a closed job. */
static void many_short_jobs(const char *spin_us, int threads, int rounds) {
    setenv("KILN_SPIN_US", spin_us, 1);
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(threads, &pool, &err), KILN_OK);
    assert_int_equal(cpu_threadpool_spin_us(pool), strtoll(spin_us, NULL, 10));
    for (int r = 0; r < rounds; r++) check_cover(pool, 1 + r % 97, 1);
    cpu_threadpool_free(pool);
    unsetenv("KILN_SPIN_US");
}

static void test_many_short_jobs(void **state) {
    (void)state;
    many_short_jobs("0", 2, 2000);
    many_short_jobs("100", 2, 5000);
    many_short_jobs("100", 4, 2000);
    many_short_jobs("1", 3, 3000); /* spin expires between most jobs: sleep/wake races */
}

/* Jobs separated by pauses longer than the spin: every job wakes sleeping workers. No
 * lost wake-up means every call returns with every index covered. */
static void test_jobs_after_sleep(void **state) {
    (void)state;
    setenv("KILN_SPIN_US", "20", 1);
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    for (int r = 0; r < 200; r++) {
        if (r % 4 == 0) {
            struct timespec ts = {0, 60000 + (r % 7) * 10000};
            nanosleep(&ts, NULL);
        }
        check_cover(pool, 64 + r, 3);
    }
    cpu_threadpool_free(pool);
    unsetenv("KILN_SPIN_US");
}

/* Freed right after a job, while its workers are still spinning (default spin), and
 * freed with workers never given a job. */
static void test_free_while_spinning(void **state) {
    (void)state;
    unsetenv("KILN_SPIN_US");
    for (int r = 0; r < 50; r++) {
        cpu_threadpool *pool = NULL;
        kiln_error err = {0};
        setenv("KILN_SPIN_US", "5000", 1);
        assert_int_equal(cpu_threadpool_create(3, &pool, &err), KILN_OK);
        if (r % 2) check_cover(pool, 100, 1);
        cpu_threadpool_free(pool);
    }
    unsetenv("KILN_SPIN_US");
}

/* Bad KILN_SPIN_US values fall back to the default; large ones are capped. */
static void test_spin_env(void **state) {
    (void)state;
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    const char *bad[] = {"abc", "-5", "12x", ""};
    for (int i = 0; i < 4; i++) {
        setenv("KILN_SPIN_US", bad[i], 1);
        assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
        int64_t s = cpu_threadpool_spin_us(pool);
        assert_true(s == 100 || s == 0); /* 0 when OpenBLAS keeps threads of its own */
        cpu_threadpool_free(pool);
    }
    setenv("KILN_SPIN_US", "99999999", 1);
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
    assert_int_equal(cpu_threadpool_spin_us(pool), 10000);
    cpu_threadpool_free(pool);
    unsetenv("KILN_SPIN_US");
}

/* A floating-point reduction split into fixed per-index slots gives the same bits at 1
 * and 2 threads (each index is computed by exactly one chunk, whatever thread runs it). */
typedef struct fsum {
    double *out;
} fsum;

static void fsum_range(void *user, int64_t b, int64_t e) {
    fsum *f = user;
    for (int64_t i = b; i < e; i++) {
        double acc = 0;
        for (int k = 1; k <= 200; k++) acc += 1.0 / (double)(i * 200 + k);
        f->out[i] = acc;
    }
}

static void test_same_results_1_and_2_threads(void **state) {
    (void)state;
    enum { N = 3000 };
    double *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
    cpu_threadpool *p1 = NULL, *p2 = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(1, &p1, &err), KILN_OK);
    assert_int_equal(cpu_threadpool_create(2, &p2, &err), KILN_OK);
    for (int r = 0; r < 20; r++) {
        fsum f1 = {a}, f2 = {b};
        cpu_parallel_for(p1, N, 7, fsum_range, &f1);
        cpu_parallel_for(p2, N, 7, fsum_range, &f2);
        assert_memory_equal(a, b, N * sizeof *a);
    }
    cpu_threadpool_free(p1);
    cpu_threadpool_free(p2);
    free(a), free(b);
}

static void test_create_limits_and_blas(void **state) {
    (void)state;
    cpu_threadpool *pool = NULL;
    kiln_error err = {0};
    assert_int_equal(cpu_threadpool_create(100000, &pool, &err), KILN_ERR_INVALID_ARG);
    assert_null(pool);
    assert_non_null(strstr(kiln_err_msg(&err), "100000 threads"));
    kiln_err_clear(&err);
    assert_int_equal(cpu_threadpool_create(0, &pool, &err), KILN_OK); /* 0 = every online CPU */
    assert_true(cpu_threadpool_size(pool) >= 1);
    cpu_threadpool_free(pool);
    assert_int_equal(cpu_threadpool_create(2, &pool, &err), KILN_OK);
#if KILN_HAVE_OPENBLAS
    /* OpenBLAS told the pool's size, or 1 when kiln's own GEMM runs on the pool and
     * cpu_sgemm splits BLAS calls over it (cpu_threadpool.c) */
    assert_int_equal(cpu_blas_get_threads(), cpu_gemm_packed_supported() ? 1 : 2);
#endif
    cpu_threadpool_free(pool);
    cpu_threadpool_free(NULL);
}

static void test_features_cap(void **state) {
    (void)state;
    unsetenv("KILN_CPU_ISA");
    uint32_t all = cpu_features();
    char buf[256];
    cpu_features_str(all, buf, sizeof buf);
    assert_true(strlen(buf) > 0);
    /* AVX-512 implies AVX2 on every real CPU; the detection must agree */
    if (all & CPU_FEATURE_AVX512F) assert_true(all & CPU_FEATURE_AVX2);
    setenv("KILN_CPU_ISA", "scalar", 1);
    assert_int_equal(cpu_features(), 0);
    assert_string_equal(cpu_features_str(cpu_features(), buf, sizeof buf), "scalar");
    setenv("KILN_CPU_ISA", "avx2", 1);
    uint32_t f = cpu_features();
    assert_int_equal(f & CPU_FEATURE_AVX512F, 0);
    assert_int_equal(f, all & (CPU_FEATURE_AVX2 | CPU_FEATURE_FMA | CPU_FEATURE_F16C));
    setenv("KILN_CPU_ISA", "avx512", 1);
    assert_int_equal(cpu_features(), all & ~(uint32_t)CPU_FEATURE_AMX);
    setenv("KILN_CPU_ISA", "native", 1);
    assert_int_equal(cpu_features(), all);
    unsetenv("KILN_CPU_ISA");
    assert_string_equal(cpu_features_str(CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, buf, sizeof buf), "avx2 fma");
    char tiny[6];
    cpu_features_str(CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, tiny, sizeof tiny);
    assert_true(strlen(tiny) < sizeof tiny);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline_without_pool),   cmocka_unit_test(test_covers_every_index_once),
        cmocka_unit_test(test_uses_several_threads),  cmocka_unit_test(test_nested_runs_inline),
        cmocka_unit_test(test_concurrent_submitters), cmocka_unit_test(test_create_limits_and_blas),
        cmocka_unit_test(test_features_cap),          cmocka_unit_test(test_many_short_jobs),
        cmocka_unit_test(test_jobs_after_sleep),      cmocka_unit_test(test_free_while_spinning),
        cmocka_unit_test(test_spin_env),              cmocka_unit_test(test_same_results_1_and_2_threads),
        cmocka_unit_test(test_for_each_items),        cmocka_unit_test(test_stats_count_loops_and_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
