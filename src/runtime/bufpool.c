/* bufpool.c - the per-executor buffer pool (see bufpool.h).
 *
 * The pool counts the buffers it has handed out and not had back. rt_bufpool_free with
 * some still out (graph outputs the caller has not released yet) only closes the pool:
 * each later put frees its buffer, and the last one frees the pool.
 *
 * Each buffer carries a 64-byte header in front of the data holding its rounded size, so
 * rt_bufpool_put (called through rt_tensor.free_fn, which only gets the data pointer) can
 * file it under its size. The free list is a flat array searched for an exact size: a
 * graph has a few dozen distinct sizes, and exact matches keep the pool's footprint at
 * the run's own peak instead of letting small tensors pin large buffers.
 */
#include "runtime/bufpool.h"

#include "core/bigalloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define HDR 64

typedef struct free_entry {
    uint64_t size;
    void *base;
} free_entry;

struct rt_bufpool {
    pthread_mutex_t mu; /* kernels allocate from the executor's thread; the lock is cheap insurance */
    free_entry *free_list;
    size_t n_free, cap_free;
    uint64_t out;  /* buffers handed out and not returned */
    bool closed;   /* rt_bufpool_free ran while some were out */
    rt_bufpool_stats stats;
};

static void pool_destroy(rt_bufpool *p) {
    free(p->free_list);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

rt_bufpool *rt_bufpool_create(void) {
    rt_bufpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

void rt_bufpool_free(rt_bufpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_free; i++) free(p->free_list[i].base);
    p->n_free = 0;
    bool last = p->out == 0;
    p->closed = true;
    pthread_mutex_unlock(&p->mu);
    if (last) pool_destroy(p);
}

void *rt_bufpool_get(void *pool, uint64_t nbytes) {
    rt_bufpool *p = pool;
    if (nbytes == 0) nbytes = 1;
    uint64_t size = (nbytes + HDR - 1) / HDR * HDR;
    if (size < nbytes || size > SIZE_MAX - HDR) return NULL;
    void *base = NULL;
    pthread_mutex_lock(&p->mu);
    for (size_t i = p->n_free; i-- > 0;)
        if (p->free_list[i].size == size) {
            base = p->free_list[i].base;
            p->free_list[i] = p->free_list[--p->n_free];
            p->stats.hits++;
            p->stats.bytes_free -= size;
            break;
        }
    if (!base) {
        base = kiln_alloc_aligned((size_t)(size + HDR)); /* HDR == 64: kiln_alloc_aligned's alignment */
        if (base) {
            p->stats.misses++;
            p->stats.bytes_owned += size;
        }
    }
    if (base) p->out++;
    pthread_mutex_unlock(&p->mu);
    if (!base) return NULL;
    memcpy(base, &size, sizeof size);
    return (char *)base + HDR;
}

void rt_bufpool_put(void *pool, void *data) {
    rt_bufpool *p = pool;
    if (!data) return;
    void *base = (char *)data - HDR;
    uint64_t size;
    memcpy(&size, base, sizeof size);
    pthread_mutex_lock(&p->mu);
    p->out--;
    if (p->closed) { /* the executor is gone: this buffer goes back to the system */
        bool last = p->out == 0;
        pthread_mutex_unlock(&p->mu);
        free(base);
        if (last) pool_destroy(p);
        return;
    }
    if (p->n_free == p->cap_free) {
        size_t cap = p->cap_free ? p->cap_free * 2 : 64;
        free_entry *nl = realloc(p->free_list, cap * sizeof *nl);
        if (!nl) { /* cannot file it: give it back to the system instead */
            p->stats.bytes_owned -= size;
            pthread_mutex_unlock(&p->mu);
            free(base);
            return;
        }
        p->free_list = nl;
        p->cap_free = cap;
    }
    p->free_list[p->n_free].size = size;
    p->free_list[p->n_free].base = base;
    p->n_free++;
    p->stats.bytes_free += size;
    pthread_mutex_unlock(&p->mu);
}

void rt_bufpool_trim(rt_bufpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_free; i++) {
        free(p->free_list[i].base);
        p->stats.bytes_owned -= p->free_list[i].size;
    }
    p->n_free = 0;
    p->stats.bytes_free = 0;
    pthread_mutex_unlock(&p->mu);
}

rt_bufpool_stats rt_bufpool_get_stats(const rt_bufpool *p) {
    rt_bufpool_stats s = {0};
    if (p) {
        pthread_mutex_lock((pthread_mutex_t *)&p->mu);
        s = p->stats;
        pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    }
    return s;
}
