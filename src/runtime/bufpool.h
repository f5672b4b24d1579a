/* bufpool.h - a per-executor pool that recycles intermediate tensors' buffers across runs.
 *
 * Without it every intermediate tensor of every run is a fresh malloc, and glibc serves
 * large blocks with mmap, so each run page-faults its activations in again (~11k minor
 * faults per ResNet-50 run). The executor hands the pool to rt_tensor_alloc through the
 * allocation hook (tensor.h) while a main-graph node runs; the node's output tensors then
 * take a free buffer of exactly their size when one exists, and go back to the pool (not
 * to free()) when the executor releases them. Since a run allocates the same sizes in the
 * same order every time, steady-state runs allocate nothing from the system.
 * Graph outputs come from the pool too: the caller releases them (kiln_context_run does
 * at the next run) and their buffers serve the next run's outputs, where a fresh
 * allocation per run cost a page fault per page (one 1x1 conv with a 3.2 MB output: 2.30
 * ms a run, 1.38 ms pooled; docs/BENCHMARKS.md, "Session 10"). They may outlive the
 * executor, so the pool does too until the last one is back.
 */
#ifndef KILN_RUNTIME_BUFPOOL_H
#define KILN_RUNTIME_BUFPOOL_H

#include <stdint.h>

typedef struct rt_bufpool rt_bufpool;

rt_bufpool *rt_bufpool_create(void);
/* Frees the pooled (free) buffers and the pool; when buffers are still out (graph outputs
 * the caller holds), the pool stays until the last of them is put back, and each of them
 * is freed then instead of being kept. */
void rt_bufpool_free(rt_bufpool *p);
/* A 64-byte aligned buffer of at least nbytes, or NULL on out-of-memory. */
void *rt_bufpool_get(void *pool, uint64_t nbytes);
/* Returns a buffer from rt_bufpool_get (the signature of rt_tensor.free_fn). */
void rt_bufpool_put(void *pool, void *data);

/* Frees every buffer in the free list (those not handed out now). The executor calls it
 * once the activation arena takes over the tensors the pool served until then. */
void rt_bufpool_trim(rt_bufpool *p);

typedef struct rt_bufpool_stats {
    uint64_t hits, misses;  /* gets served from the free list / from malloc */
    uint64_t bytes_owned;   /* all buffers the pool allocated and still owns */
    uint64_t bytes_free;    /* of those, currently in the free list */
} rt_bufpool_stats;
rt_bufpool_stats rt_bufpool_get_stats(const rt_bufpool *p);

#endif
