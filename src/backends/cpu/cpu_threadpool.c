/* cpu_threadpool.c - a persistent pool of worker threads for CPU kernels.
 *
 * Kernels split their work with cpu_parallel_for(); the calling thread takes chunks too,
 * so a pool of N threads has N-1 workers. Chunks are handed out with an atomic counter,
 * so uneven chunks balance themselves.
 *
 * Hand-off: spin, then sleep. A model runs hundreds of parallel loops per inference
 * (BERT ~240, ResNet-50 ~60 per run), often only tens of microseconds apart. Waking a
 * worker blocked on a condition variable cost ~15-20 us per loop on our VMs, so after a
 * job a worker first polls the job counter for a bounded time (KILN_SPIN_US, default
 * 100 us, measured on the monotonic clock, with a pause instruction between polls and a
 * sched_yield every 64 polls) and only then blocks. The yields matter on a shared machine:
 * a pure spinner used up its scheduler share and was descheduled exactly when the next
 * job came (a microbenchmark at load 6 on 2 cores: 640-item jobs took a median 190 us
 * with pure spinning, 90-140 us with yields, 130 us sleeping, 120 us on 1 thread). The caller skips the mutex/broadcast entirely when no worker is
 * blocked. The spin is bounded so an idle process stops using CPU within ~0.1 ms of its
 * last loop; KILN_SPIN_US=0 restores pure sleeping. When OpenBLAS runs with more than one
 * thread of its own (no AVX2 GEMM on this CPU, see cpu_threadpool_create), the default
 * is 0: spinning workers would take cores from OpenBLAS's threads.
 *
 * Completion: the caller waits until every chunk is done (not until every worker has
 * woken), spinning for the same bounded time and then sleeping. A worker that wakes
 * after a job has been closed must not run stale chunks: it registers in `active` and
 * re-checks that its job is still open; the caller closes the job and waits for `active`
 * to drain before the next job overwrites the job fields (a Dekker-style handshake on
 * sequentially consistent atomics). Sleepers use the same handshake (`sleepers` count
 * vs. the job generation) so no wake-up is lost.
 *
 * Statistics (cpu_threadpool_stats, `kiln exec`'s "Threads" line): loops shared and run
 * inline, the time the caller spends running chunks and waiting for the workers' last
 * ones, the workers' time in chunks, and how often the caller and the workers gave up
 * spinning and blocked. Three clock reads per shared loop on the caller and two per
 * worker that joins it (~0.1 us; ResNet-50 runs ~60 shared loops, BERT ~240). Session 12
 * measured the blocks: ResNet-50 at batch 8 on 2 threads blocked the caller ~17 times and
 * the workers 9-29 times per query, at the ends of loops whose last chunk ran over 100 us
 * longer on one thread. Spinning on while the job was still running elsewhere took both
 * to 0 and changed nothing measurable end to end on the dev VM or the GPU host's Xeon, so
 * the spin stays bounded (docs/BENCHMARKS.md, "Session 12").
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
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define POOL_PAUSE() __asm__ __volatile__("yield")
#else
#define POOL_PAUSE() ((void)0)
#endif

#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_kernel.h"
#include "core/cpu_count.h"

#if KILN_HAVE_OPENBLAS
/* Declared here rather than through cblas.h: Debian's cblas.h may belong to another BLAS. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
#endif

#define POOL_MAX_THREADS 1024
/* Chunks per thread: more than one so threads that finish early take over others' work. */
#define CHUNKS_PER_THREAD 4
/* Default bounded spin before blocking, and the cap on KILN_SPIN_US. */
#define POOL_DEFAULT_SPIN_US 100
#define POOL_MAX_SPIN_US 10000

struct cpu_threadpool {
    int n_threads; /* including the caller */
    pthread_t *workers;
    int n_workers;
    int64_t spin_ns; /* bounded spin before blocking (0 = block at once) */

    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;
    atomic_ullong generation; /* bumped for each job; workers start when it changes */
    atomic_int sleepers;      /* workers blocked (or about to block) on work_cv */
    atomic_bool caller_waiting; /* the caller blocks (or is about to) on done_cv */
    atomic_bool stop;

    atomic_int busy; /* 1 while a job is in flight (submission guard) */

    /* the current job: written by the caller only while no worker is inside it */
    cpu_range_fn fn;
    void *user;
    int64_t n, chunk, n_chunks;
    atomic_llong next_chunk;
    atomic_llong done_chunks;
    atomic_bool open;  /* workers may still join the current job */
    atomic_int active; /* workers inside the current job */

    /* statistics: loops and caller times written by the submitting thread only (one job
     * at a time, under `busy`), worker time by the workers */
    atomic_ullong st_loops, st_inline, st_caller_run, st_caller_wait, st_worker_run;
    atomic_ullong st_caller_sleeps, st_worker_sleeps; /* times each blocked on its condition variable */
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

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Runs chunks of the current job until none is left, then counts them as done (waking a
 * sleeping caller when they were the last). */
static void run_chunks(cpu_threadpool *p) {
    tls_in_pool++;
    int64_t ran = 0;
    for (;;) {
        int64_t c = atomic_fetch_add(&p->next_chunk, 1);
        if (c >= p->n_chunks) break;
        int64_t b = c * p->chunk;
        int64_t e = b + p->chunk;
        if (e > p->n) e = p->n;
        p->fn(p->user, b, e);
        ran++;
    }
    tls_in_pool--;
    if (ran && atomic_fetch_add(&p->done_chunks, ran) + ran == p->n_chunks && atomic_load(&p->caller_waiting)) {
        /* the caller went to sleep: wake it under the mutex so the signal cannot fall
         * between its check of done_chunks and its wait */
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Waits for a generation other than `seen` (or stop): spins for spin_ns, then blocks. */
static uint64_t wait_for_job(cpu_threadpool *p, uint64_t seen) {
    uint64_t g;
    if (p->spin_ns > 0) {
        int64_t deadline = now_ns() + p->spin_ns;
        for (unsigned k = 1;; k++) {
            g = atomic_load_explicit(&p->generation, memory_order_acquire);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return g;
            POOL_PAUSE();
            if ((k & 63) == 0) {
                if (now_ns() > deadline) break;
                /* let a preempted thread of ours (or anyone) have the core: on a busy
                 * machine a pure spinner starves the very thread it waits for */
                sched_yield();
            }
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->st_worker_sleeps, 1, memory_order_relaxed);
    atomic_fetch_add(&p->sleepers, 1);
    /* seq_cst: the caller bumps generation, then reads sleepers; we bump sleepers, then
     * read generation. At least one of us sees the other's write. */
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->work_cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    cpu_threadpool *p = arg;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) break;
        seen = g;
        atomic_fetch_add(&p->active, 1);
        /* only join a job that is still open and still the one we saw: the caller closes
         * a job before it waits for `active` to drain and rewrites the fields */
        if (atomic_load(&p->open) && atomic_load(&p->generation) == g) {
            int64_t t0 = now_ns();
            run_chunks(p);
            atomic_fetch_add_explicit(&p->st_worker_run, (unsigned long long)(now_ns() - t0), memory_order_relaxed);
        }
        atomic_fetch_sub(&p->active, 1);
    }
    return NULL;
}

/* KILN_SPIN_US: microseconds a worker (and a waiting caller) spins before blocking;
 * unset: the default; 0: never spin; capped at POOL_MAX_SPIN_US. */
static int64_t spin_ns_from_env(int64_t dflt_us) {
    const char *s = getenv("KILN_SPIN_US");
    int64_t us = dflt_us;
    if (s && *s) {
        char *end = NULL;
        long long v = strtoll(s, &end, 10);
        if (end != s && *end == '\0' && v >= 0) us = v > POOL_MAX_SPIN_US ? POOL_MAX_SPIN_US : v;
    }
    return us * 1000;
}

kiln_status cpu_threadpool_create(int n_threads, cpu_threadpool **out, kiln_error *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = kiln_usable_cpus();
    if (n_threads > POOL_MAX_THREADS)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "%d threads requested; at most %d are supported",
                            n_threads, POOL_MAX_THREADS);
    cpu_threadpool *p = calloc(1, sizeof *p);
    if (!p) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory creating a thread pool");
    p->n_threads = n_threads;
    /* GEMMs run on the caller's thread between our parallel loops: give BLAS the same
     * budget so the two never add up to more threads than requested. With kiln's own
     * AVX2 GEMM running on this pool, OpenBLAS gets one thread and cpu_sgemm splits its
     * GEMMs over the pool instead: OpenBLAS's idle workers busy-wait after each call and
     * took a core from the pool's workers (BERT at 2 threads ran slower than at 1). For
     * the same reason our workers only spin when OpenBLAS has no threads of its own. */
    bool blas_single = cpu_gemm_packed_supported() || n_threads == 1;
    p->spin_ns = spin_ns_from_env(blas_single ? POOL_DEFAULT_SPIN_US : 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, false);
    atomic_init(&p->stop, false);
    atomic_init(&p->busy, 0);
    atomic_init(&p->next_chunk, 0);
    atomic_init(&p->done_chunks, 0);
    atomic_init(&p->open, false);
    atomic_init(&p->active, 0);
    atomic_init(&p->st_loops, 0);
    atomic_init(&p->st_inline, 0);
    atomic_init(&p->st_caller_run, 0);
    atomic_init(&p->st_caller_wait, 0);
    atomic_init(&p->st_worker_run, 0);
    atomic_init(&p->st_caller_sleeps, 0);
    atomic_init(&p->st_worker_sleeps, 0);
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
    cpu_blas_set_threads(blas_single ? 1 : n_threads);
    *out = p;
    return KILN_OK;
}

void cpu_threadpool_free(cpu_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
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

void cpu_threadpool_stats(const cpu_threadpool *p, cpu_pool_stats *out) {
    memset(out, 0, sizeof *out);
    out->threads = cpu_threadpool_size(p);
    if (!p) return;
    cpu_threadpool *q = (cpu_threadpool *)p; /* atomics are read, not written */
    out->loops = atomic_load_explicit(&q->st_loops, memory_order_relaxed);
    out->inline_loops = atomic_load_explicit(&q->st_inline, memory_order_relaxed);
    out->caller_run_ns = atomic_load_explicit(&q->st_caller_run, memory_order_relaxed);
    out->caller_wait_ns = atomic_load_explicit(&q->st_caller_wait, memory_order_relaxed);
    out->worker_run_ns = atomic_load_explicit(&q->st_worker_run, memory_order_relaxed);
    out->caller_sleeps = atomic_load_explicit(&q->st_caller_sleeps, memory_order_relaxed);
    out->worker_sleeps = atomic_load_explicit(&q->st_worker_sleeps, memory_order_relaxed);
}

int64_t cpu_threadpool_spin_us(const cpu_threadpool *p) { return p ? p->spin_ns / 1000 : 0; }

/* The caller's wait for the last chunk: bounded spin, then block on done_cv. */
static void wait_done(cpu_threadpool *p) {
    if (atomic_load(&p->done_chunks) == p->n_chunks) return;
    if (p->spin_ns > 0) {
        int64_t deadline = now_ns() + p->spin_ns;
        for (unsigned k = 1;; k++) {
            if (atomic_load_explicit(&p->done_chunks, memory_order_acquire) == p->n_chunks) return;
            POOL_PAUSE();
            if ((k & 63) == 0) {
                if (now_ns() > deadline) break;
                /* let a preempted thread of ours (or anyone) have the core: on a busy
                 * machine a pure spinner starves the very thread it waits for */
                sched_yield();
            }
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->st_caller_sleeps, 1, memory_order_relaxed);
    atomic_store(&p->caller_waiting, true);
    while (atomic_load(&p->done_chunks) != p->n_chunks) pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->caller_waiting, false);
    pthread_mutex_unlock(&p->mu);
}

/* Runs fn over [0, n) in chunks of `chunk` items (the last may be shorter) on the pool. */
static void parallel_chunks(cpu_threadpool *p, int64_t n, int64_t chunk, cpu_range_fn fn, void *user) {
    int expected = 0;
    /* Inline when there is no pool, nothing to share, too little work, a nested call, or
     * another thread's job in flight. */
    if (!p || p->n_workers == 0 || n <= chunk || tls_in_pool ||
        !atomic_compare_exchange_strong(&p->busy, &expected, 1)) {
        if (p) atomic_fetch_add_explicit(&p->st_inline, 1, memory_order_relaxed);
        fn(user, 0, n);
        return;
    }
    int64_t n_chunks = (n + chunk - 1) / chunk;
    /* No worker is inside a job here (the previous call drained `active`), so the fields
     * can be written; they are published by the seq_cst generation bump. */
    p->fn = fn;
    p->user = user;
    p->n = n;
    p->chunk = chunk;
    p->n_chunks = n_chunks;
    atomic_store(&p->next_chunk, 0);
    atomic_store(&p->done_chunks, 0);
    atomic_store(&p->open, true);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
    }

    int64_t t0 = now_ns();
    run_chunks(p);
    int64_t t1 = now_ns();
    wait_done(p);
    atomic_fetch_add_explicit(&p->st_loops, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->st_caller_run, (unsigned long long)(t1 - t0), memory_order_relaxed);
    atomic_fetch_add_explicit(&p->st_caller_wait, (unsigned long long)(now_ns() - t1), memory_order_relaxed);

    /* Close the job, then let workers that joined it (and found nothing left, since every
     * chunk is done) leave before the fields are rewritten by the next call. */
    atomic_store(&p->open, false);
    for (unsigned k = 1; atomic_load(&p->active) > 0; k++) {
        POOL_PAUSE();
        if ((k & 255) == 0) sched_yield(); /* a worker preempted between its two checks */
    }
    atomic_store(&p->busy, 0);
}

void cpu_parallel_for(cpu_threadpool *p, int64_t n, int64_t grain, cpu_range_fn fn, void *user) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t threads = p ? p->n_threads : 1;
    int64_t max_chunks = threads * CHUNKS_PER_THREAD;
    int64_t chunk = (n + max_chunks - 1) / max_chunks;
    if (chunk < grain) chunk = grain;
    /* n <= grain runs inline (too little work to share) */
    parallel_chunks(p, n, n <= grain ? n : chunk, fn, user);
}

void cpu_parallel_for_each(cpu_threadpool *p, int64_t n, cpu_range_fn fn, void *user) {
    if (n <= 0) return;
    parallel_chunks(p, n, 1, fn, user);
}
