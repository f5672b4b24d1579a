/* weight_share.c - device weights shared between executors of one model (see
 * weight_share.h): a locked list of device copies keyed by (graph, value id, initializer),
 * a reference count, and a process-wide registry of shares keyed by (model, backend,
 * device, flags) for sessions. */
#include "runtime/weight_share.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct ws_entry {
    const ir_graph *g;
    int32_t id;
    const ir_tensor *init; /* what the copy was made from */
    kiln_dtype dtype;
    uint64_t nbytes;
    void *data; /* device memory (NULL for 0 bytes) */
} ws_entry;

struct rt_weight_share {
    pthread_mutex_t mu;
    int refs;
    ws_entry *e;
    int32_t n, cap;
    /* registry key (rt_weight_share_acquire) */
    const void *model;
    const rt_backend *be;
    int device;
    uint32_t flags;
    rt_weight_share *next;
};

kiln_status rt_weight_share_create(rt_weight_share **out, kiln_error *err) {
    rt_weight_share *ws = calloc(1, sizeof *ws);
    *out = ws;
    if (!ws) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&ws->mu, NULL);
    ws->refs = 1;
    return KILN_OK;
}

void rt_weight_share_retain(rt_weight_share *ws) {
    pthread_mutex_lock(&ws->mu);
    ws->refs++;
    pthread_mutex_unlock(&ws->mu);
}

bool rt_weight_share_release(rt_weight_share *ws, const rt_backend *be, void *bctx) {
    if (!ws) return false;
    pthread_mutex_lock(&ws->mu);
    bool last = --ws->refs == 0;
    pthread_mutex_unlock(&ws->mu);
    if (!last) return false;
    for (int32_t i = 0; i < ws->n; i++)
        if (ws->e[i].data) be->free(bctx, ws->e[i].data);
    free(ws->e);
    pthread_mutex_destroy(&ws->mu);
    free(ws);
    return true;
}

/* Device tensors handed out by the share: the share frees the memory, so their free_fn
 * does nothing. free_ctx tells the executor that uploaded a weight (counted in its device
 * weight bytes) from the ones that found it uploaded already (not counted again). */
static void share_free(void *ctx, void *data) { (void)ctx, (void)data; }
static char uploaded_mark, borrowed_mark;

bool rt_weight_share_borrowed(const rt_tensor *t) {
    return t && t->free_fn == share_free && t->free_ctx == &borrowed_mark;
}

static void fill(rt_tensor *dst, const rt_tensor *host, void *data, uint8_t location, bool uploaded) {
    rt_tensor_adopt(dst, host, data, location, data ? share_free : NULL, uploaded ? &uploaded_mark : &borrowed_mark);
}

kiln_status rt_weight_share_get(rt_weight_share *ws, const rt_backend *be, void *bctx, const ir_graph *g, int32_t id,
                                const rt_tensor *host, rt_tensor *dst, bool *shared, kiln_error *err) {
    *shared = false;
    const ir_tensor *init = id >= 0 && id < g->n_values ? g->values[id].init : NULL;
    if (!init || host->dtype == KILN_DTYPE_STRING) return KILN_OK;
    pthread_mutex_lock(&ws->mu);
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < ws->n; i++) {
        const ws_entry *x = &ws->e[i];
        if (x->g != g || x->id != id || x->init != init || x->dtype != host->dtype || x->nbytes != host->nbytes)
            continue;
        fill(dst, host, x->data, be->location, false);
        *shared = true;
        goto done;
    }
    if (ws->n == ws->cap) {
        int32_t nc = ws->cap ? ws->cap * 2 : 64;
        ws_entry *ne = realloc(ws->e, (size_t)nc * sizeof *ne);
        if (!ne) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        ws->e = ne;
        ws->cap = nc;
    }
    void *p = NULL;
    if (host->nbytes) {
        st = be->alloc(bctx, host->nbytes, &p, err);
        if (st == KILN_OK) st = be->copy(bctx, p, host->data, host->nbytes, RT_COPY_HOST_TO_DEVICE, NULL, err);
        /* other contexts' streams read it next: the upload must be complete first */
        if (st == KILN_OK && be->stream_sync) st = be->stream_sync(bctx, NULL, err);
        if (st != KILN_OK) {
            if (p) be->free(bctx, p);
            goto done;
        }
    }
    ws->e[ws->n++] = (ws_entry){g, id, init, host->dtype, host->nbytes, p};
    fill(dst, host, p, be->location, true);
    *shared = true;
done:
    pthread_mutex_unlock(&ws->mu);
    return st;
}

int32_t rt_weight_share_count(const rt_weight_share *ws, uint64_t *bytes) {
    rt_weight_share *w = (rt_weight_share *)ws; /* the lock only */
    pthread_mutex_lock(&w->mu);
    int32_t n = w->n;
    uint64_t b = 0;
    for (int32_t i = 0; i < n; i++) b += w->e[i].nbytes;
    pthread_mutex_unlock(&w->mu);
    if (bytes) *bytes = b;
    return n;
}

/* ---- the registry sessions use ---- */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static rt_weight_share *registry;

kiln_status rt_weight_share_acquire(const void *model, const rt_backend *be, int device, uint32_t flags,
                                    rt_weight_share **out, kiln_error *err) {
    pthread_mutex_lock(&registry_mu);
    kiln_status st = KILN_OK;
    rt_weight_share *ws = registry;
    while (ws && !(ws->model == model && ws->be == be && ws->device == device && ws->flags == flags)) ws = ws->next;
    if (ws) {
        rt_weight_share_retain(ws);
    } else if ((st = rt_weight_share_create(&ws, err)) == KILN_OK) {
        ws->model = model, ws->be = be, ws->device = device, ws->flags = flags;
        ws->next = registry;
        registry = ws;
    }
    pthread_mutex_unlock(&registry_mu);
    *out = st == KILN_OK ? ws : NULL;
    return st;
}

void rt_weight_share_drop(rt_weight_share *ws, const rt_backend *be, void *bctx) {
    if (!ws) return;
    /* under the registry lock, so nobody finds a share that is being freed */
    pthread_mutex_lock(&registry_mu);
    pthread_mutex_lock(&ws->mu);
    bool last = ws->refs == 1;
    pthread_mutex_unlock(&ws->mu);
    if (last)
        for (rt_weight_share **pp = &registry; *pp; pp = &(*pp)->next)
            if (*pp == ws) {
                *pp = ws->next;
                break;
            }
    (void)rt_weight_share_release(ws, be, bctx);
    pthread_mutex_unlock(&registry_mu);
}
