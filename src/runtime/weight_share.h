/* weight_share.h - device copies of a model's weights shared by several executors (one
 * per engine context / --infStreams stream) on the same device backend, so N contexts
 * hold one copy of the weights in device memory instead of N (TensorRT shares an
 * engine's weights between its execution contexts the same way).
 *
 * Safe because device kernels only read initializers (the executor hands a const to a
 * device node only when the input is the const itself, never an overriding graph input)
 * and because an entry is keyed by the initializer it was made from (graph, value id and
 * the ir_tensor itself: a pass that replaces an initializer, e.g. FP16's conversion, makes
 * a new entry rather than reusing a stale one). Memory comes from the backend context of
 * the executor that first asks for a weight (uploaded, then that context's stream is
 * synchronized so other streams may read it) and is freed through the context of the last
 * user to let go, which must still be alive then. Thread-safe.
 *
 * Sessions (session.c) find their share through rt_weight_share_acquire, keyed by model,
 * backend and device; executors get it in rt_exec_options.weights. */
#ifndef KILN_RUNTIME_WEIGHT_SHARE_H
#define KILN_RUNTIME_WEIGHT_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "ir/graph.h"
#include "runtime/backend.h"
#include "runtime/tensor.h"

typedef struct rt_weight_share rt_weight_share;

/* A new share with one reference. */
kiln_status rt_weight_share_create(rt_weight_share **out, kiln_error *err);
void rt_weight_share_retain(rt_weight_share *ws);
/* Drops one reference; the last one frees every device copy through (be, bctx), which must
 * be a live context of the backend that allocated them. Returns true when it was the last. */
bool rt_weight_share_release(rt_weight_share *ws, const rt_backend *be, void *bctx);

/* The device copy of constant `id` of graph g (host: its host tensor): uploaded through
 * (be, bctx) the first time, the same device memory afterwards. *dst borrows it (its
 * free_fn does nothing; the share frees it). Constants that are not initializers (sparse,
 * densified per executor) are not shared: the caller uploads them itself (*shared false). */
kiln_status rt_weight_share_get(rt_weight_share *ws, const rt_backend *be, void *bctx, const ir_graph *g, int32_t id,
                                const rt_tensor *host, rt_tensor *dst, bool *shared, kiln_error *err);

/* Whether t is a device copy this executor found already uploaded by another (so device
 * weight bytes summed over executors count each copy once). */
bool rt_weight_share_borrowed(const rt_tensor *t);

/* Device copies held and their bytes (for tests and reports). */
int32_t rt_weight_share_count(const rt_weight_share *ws, uint64_t *bytes);

/* The share of (model, backend, device, flags): an existing one gets another reference,
 * else a new one is made. rt_weight_share_drop releases a reference taken this way. */
kiln_status rt_weight_share_acquire(const void *model, const rt_backend *be, int device, uint32_t flags,
                                    rt_weight_share **out, kiln_error *err);
void rt_weight_share_drop(rt_weight_share *ws, const rt_backend *be, void *bctx);

#endif
