/* cpu_threadpool.c - a persistent pool of worker threads for CPU kernels.
 *
 * Kernels split their work with cpu_parallel_for(); the calling thread takes chunks too,
 * so a pool of N threads has N-1 workers. Workers sleep on a condition variable between
 * jobs (no busy spinning that would steal cores from OpenBLAS or from other processes on
 * small machines). Chunks are handed out with an atomic counter, so uneven chunks
 * balance themselves.
 *
 * Re-entrancy: a range function that itself calls cpu_parallel_for (a kernel inside a
 * Loop body run from a worker, say) runs the inner loop inline rather than deadlock; a
 * second thread submitting while a job is running also runs inline. Both are detected
 * without blocking.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_kernel.h"

#if KILN_HAVE_OPENBLAS
/* Declared here rather than through cblas.h: Debian's cblas.h may belong to another BLAS. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
#endif

#define POOL_MAX_THREADS 1024
/* Chunks per thread: more than one so threads that finish early take over others' work. */
#define CHUNKS_PER_THREAD 4

struct cpu_threadpool {
    int n_threads; /* including the caller */
    pthread_t *workers;
    int n_workers;

    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;
    uint64_t generation; /* bumped for each job; workers wake when it changes */
    int pending;         /* workers that have not finished the current job */
    bool stop;

    atomic_int busy; /* 1 while a job is in flight (submission guard) */

    /* the current job */
    cpu_range_fn fn;
    void *user;
    int64_t n, chunk, n_chunks;
    atomic_llong next_chunk;
};

/* Set while a thread is executing range functions for some pool (nested calls run inline). */
static _Thread_local int tls_in_pool;

void cpu_blas_set_threads(int n_threads) {
#if KILN_HAVE_OPENBLAS
    if (n_threads < 1) n_threads = 1;
    openblas_set_num_threads(n_threads);
#else
    (void)n_threads;
#endif
}

int cpu_blas_get_threads(void) {
#if KILN_HAVE_OPENBLAS
    return openblas_get_num_threads();
#else
    return 1;
#endif
}

static void run_chunks(cpu_threadpool *p) {
    tls_in_pool++;
    for (;;) {
        int64_t c = atomic_fetch_add(&p->next_chunk, 1);
        if (c >= p->n_chunks) break;
        int64_t b = c * p->chunk;
        int64_t e = b + p->chunk;
        if (e > p->n) e = p->n;
        p->fn(p->user, b, e);
    }
    tls_in_pool--;
}

static void *worker_main(void *arg) {
    cpu_threadpool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int online_cpus(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

kiln_status cpu_threadpool_create(int n_threads, cpu_threadpool **out, kiln_error *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = online_cpus();
    if (n_threads > POOL_MAX_THREADS)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "%d threads requested; at most %d are supported",
                            n_threads, POOL_MAX_THREADS);
    cpu_threadpool *p = calloc(1, sizeof *p);
    if (!p) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory creating a thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->busy, 0);
    atomic_init(&p->next_chunk, 0);
    if (n_threads > 1) {
        p->workers = calloc((size_t)(n_threads - 1), sizeof *p->workers);
        if (!p->workers) {
            cpu_threadpool_free(p);
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory creating a thread pool");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            int rc = pthread_create(&p->workers[i], NULL, worker_main, p);
            if (rc != 0) {
                cpu_threadpool_free(p);
                return kiln_err_set(err, KILN_ERR_RUNTIME, "could not start worker thread %d of %d: %s", i + 1,
                                    n_threads - 1, strerror(rc));
            }
            p->n_workers++;
        }
    }
    /* GEMMs run on the caller's thread between our parallel loops: give BLAS the same
     * budget so the two never add up to more threads than requested. With kiln's own
     * AVX2 GEMM running on this pool, OpenBLAS gets one thread and cpu_sgemm splits its
     * GEMMs over the pool instead: OpenBLAS's idle workers busy-wait after each call and
     * took a core from the pool's workers (BERT at 2 threads ran slower than at 1). */
    cpu_blas_set_threads(cpu_gemm_packed_supported() ? 1 : n_threads);
    *out = p;
    return KILN_OK;
}

void cpu_threadpool_free(cpu_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int cpu_threadpool_size(const cpu_threadpool *p) { return p ? p->n_threads : 1; }

void cpu_parallel_for(cpu_threadpool *p, int64_t n, int64_t grain, cpu_range_fn fn, void *user) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int expected = 0;
    /* Inline when there is no pool, nothing to share, too little work, a nested call, or
     * another thread's job in flight. */
    if (!p || p->n_workers == 0 || n <= grain || tls_in_pool ||
        !atomic_compare_exchange_strong(&p->busy, &expected, 1)) {
        fn(user, 0, n);
        return;
    }
    int64_t max_chunks = (int64_t)p->n_threads * CHUNKS_PER_THREAD;
    int64_t chunk = (n + max_chunks - 1) / max_chunks;
    if (chunk < grain) chunk = grain;
    int64_t n_chunks = (n + chunk - 1) / chunk;
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->user = user;
    p->n = n;
    p->chunk = chunk;
    p->n_chunks = n_chunks;
    atomic_store(&p->next_chunk, 0);
    /* Every worker wakes on a new generation, so all of them count as pending; the ones
     * that find no chunk left return at once. */
    p->pending = p->n_workers;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);

    run_chunks(p);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    atomic_store(&p->busy, 0);
}
