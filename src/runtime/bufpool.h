/* bufpool.h - a per-executor pool that recycles intermediate tensors' buffers across runs.
 *
 * Without it every intermediate tensor of every run is a fresh malloc, and glibc serves
 * large blocks with mmap, so each run page-faults its activations in again (~11k minor
 * faults per ResNet-50 run). The executor hands the pool to rt_tensor_alloc through the
 * allocation hook (tensor.h) while a main-graph node runs; the node's output tensors then
 * take a free buffer of exactly their size when one exists, and go back to the pool (not
 * to free()) when the executor releases them. Since a run allocates the same sizes in the
 * same order every time, steady-state runs allocate nothing from the system.
 * Graph outputs never come from the pool (they outlive the run, owned by the caller).
 */
#ifndef KILN_RUNTIME_BUFPOOL_H
#define KILN_RUNTIME_BUFPOOL_H

#include <stdint.h>

typedef struct rt_bufpool rt_bufpool;

rt_bufpool *rt_bufpool_create(void);
/* Frees the pooled (free) buffers and the pool. Every buffer handed out must have been
 * returned first (the executor releases all intermediates at the end of each run). */
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
