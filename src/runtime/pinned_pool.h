/* pinned_pool.h - page-locked host buffers for a device graph's outputs, handed to the
 * caller as the output tensors themselves.
 *
 * Why: a replay used to copy each output from the device into one page-locked staging
 * buffer and then memcpy it into a fresh heap tensor. For BERT-base at batch 8 (3 MB of
 * float32 output) that host memcpy cost more than the DMA and the whole GPU compute's
 * third. Now the DMA writes straight into a page-locked buffer that becomes the output
 * tensor; its free_fn gives the buffer back here when the caller releases the tensor, so
 * steady-state runs allocate nothing. A caller that keeps more than `cap` outputs alive
 * makes take() return NULL and the executor falls back to staging + memcpy.
 *
 * Lifetime: the pool is shared by its executor and every tensor handed out, and freed by
 * whichever lets go last (rt_pinned_pool_close by the executor, rt_pinned_pool_give by a
 * tensor). Buffers go back through the backend's host_free, which needs no context, so a
 * tensor may outlive the executor and the backend context that made it. Thread-safe.
 */
#ifndef KILN_RUNTIME_PINNED_POOL_H
#define KILN_RUNTIME_PINNED_POOL_H

#include <stdint.h>

#include "runtime/backend.h"

typedef struct rt_pinned_pool rt_pinned_pool;

/* A pool of buffers of `bytes` each from be->host_alloc (bctx), at most `cap` at a time.
 * NULL when the backend has no page-locked memory or out of memory. */
rt_pinned_pool *rt_pinned_pool_new(const rt_backend *be, void *bctx, uint64_t bytes, int32_t cap);

/* A buffer (recycled or newly allocated), or NULL when `cap` are out or allocation fails. */
void *rt_pinned_pool_take(rt_pinned_pool *p);

/* Gives a buffer back (rt_tensor free_fn signature: pool as ctx). */
void rt_pinned_pool_give(void *pool, void *data);

/* The executor is done with the pool: idle buffers are freed now, the rest when given back. */
void rt_pinned_pool_close(rt_pinned_pool *p);

#endif
