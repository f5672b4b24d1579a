/* pinned_pool.c - recycled page-locked output buffers (see pinned_pool.h). */
#include "runtime/pinned_pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct rt_pinned_pool {
    pthread_mutex_t mu;
    void (*host_free)(void *ctx, void *ptr);
    kiln_status (*host_alloc)(void *ctx, uint64_t bytes, void **ptr, kiln_error *err);
    void *bctx;    /* for host_alloc only, while the executor holds the pool */
    uint64_t bytes;
    int32_t cap;
    int32_t out;   /* buffers held by tensors */
    int32_t n_idle;
    void **idle;   /* [cap] */
    bool closed;   /* the executor let go */
};

rt_pinned_pool *rt_pinned_pool_new(const rt_backend *be, void *bctx, uint64_t bytes, int32_t cap) {
    if (!be || !be->host_alloc || !be->host_free || !bytes || cap < 1) return NULL;
    rt_pinned_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->idle = calloc((size_t)cap, sizeof *p->idle);
    if (!p->idle || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->idle);
        free(p);
        return NULL;
    }
    p->host_free = be->host_free;
    p->host_alloc = be->host_alloc;
    p->bctx = bctx;
    p->bytes = bytes;
    p->cap = cap;
    return p;
}

static void destroy(rt_pinned_pool *p) {
    pthread_mutex_destroy(&p->mu);
    free(p->idle);
    free(p);
}

void *rt_pinned_pool_take(rt_pinned_pool *p) {
    if (!p) return NULL;
    pthread_mutex_lock(&p->mu);
    void *b = NULL;
    if (p->n_idle > 0) {
        b = p->idle[--p->n_idle];
    } else if (p->out < p->cap && !p->closed) {
        kiln_error e = {0};
        if (p->host_alloc(p->bctx, p->bytes, &b, &e) != KILN_OK) b = NULL;
        kiln_err_clear(&e);
    }
    if (b) p->out++;
    pthread_mutex_unlock(&p->mu);
    return b;
}

void rt_pinned_pool_give(void *pool, void *data) {
    rt_pinned_pool *p = pool;
    if (!p || !data) return;
    pthread_mutex_lock(&p->mu);
    p->out--;
    bool keep = !p->closed && p->n_idle < p->cap;
    if (keep) p->idle[p->n_idle++] = data;
    bool last = p->closed && p->out == 0;
    pthread_mutex_unlock(&p->mu);
    if (!keep) p->host_free(NULL, data);
    if (last) destroy(p);
}

void rt_pinned_pool_close(rt_pinned_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->closed = true;
    int32_t n = p->n_idle;
    p->n_idle = 0;
    bool last = p->out == 0;
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 0; i < n; i++) p->host_free(NULL, p->idle[i]);
    if (last) destroy(p);
}
