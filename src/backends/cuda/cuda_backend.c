/* cuda_backend.c - the CUDA implementation of the backend interface (runtime/backend.h).
 *
 * One context per session: a non-blocking stream on which every node and copy is
 * enqueued in order, a cuBLASLt handle, a cuDNN handle (when built with cuDNN), one
 * workspace buffer for library tactics, and a ring of CUDA events for per-node timing.
 * Device memory comes from the stream-ordered allocator (cudaMallocAsync) with the pool's
 * release threshold raised, so steady-state runs reuse memory without driver calls and a
 * tensor freed after its last reader can be reused by the next node without a sync.
 * Nodes are dispatched through the op table in cuda_ops.c; what it refuses runs on the
 * CPU backend (the executor's per-node fallback).
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if KILN_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_lazy.h"
#include "core/strbuf.h"

#define CUDA_DEFAULT_WORKSPACE (256ull << 20)
#define CUDA_EVENT_RING 4096u

static cudaStream_t stream_of(const cuda_ctx *c) { return (cudaStream_t)c->stream; }

static kiln_status cuda_err(kiln_error *err, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return KILN_OK;
    return kiln_err_set(err, e == cudaErrorMemoryAllocation ? KILN_ERR_NOMEM : KILN_ERR_RUNTIME, "CUDA: %s: %s (%s)",
                        what, cudaGetErrorString(e), cudaGetErrorName(e));
}

kiln_status cuda_fail(rt_node_call *call, int e, const char *what) {
    if (e == 0) return KILN_OK;
    return kiln_err_set(call->err, KILN_ERR_RUNTIME, "node '%s' (%s): CUDA %s failed: %s", call->node->name,
                        call->node->op_type, what, cudaGetErrorString((cudaError_t)e));
}

kiln_status cuda_node_fail(rt_node_call *call, kiln_status st, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_err_set(call->err, st, "node '%s' (%s): %s", call->node->name, call->node->op_type, msg);
}

const rt_tensor *cuda_fused_input(rt_node_call *call, const char *attr, uint64_t count, int32_t *index,
                                  kiln_status *st) {
    *st = KILN_OK;
    *index = -1;
    const ir_attr *a = ir_node_attr(call->node, attr);
    if (!a || a->type != IR_ATTR_INT) return NULL;
    const rt_value *v = a->i >= 0 && a->i < call->n_in ? call->inputs[a->i] : NULL;
    if (!v || v->kind != IR_TYPE_TENSOR || v->t.dtype != KILN_DTYPE_FLOAT || v->t.device == RT_MEM_HOST ||
        v->t.count != count) {
        *st = cuda_node_fail(call, KILN_ERR_SHAPE, "fused input %lld (%s) is missing or is not %llu float32 elements "
                             "on the GPU", (long long)a->i, attr, (unsigned long long)count);
        return NULL;
    }
    *index = (int32_t)a->i;
    return &v->t;
}

bool cuda_host_i64s(const rt_value *v, int64_t *out, int32_t max, int32_t *n) {
    if (!v || v->kind != IR_TYPE_TENSOR || v->t.device != RT_MEM_HOST || v->t.count > (uint64_t)max) return false;
    if (v->t.dtype == KILN_DTYPE_INT64) memcpy(out, v->t.data, (size_t)v->t.count * sizeof *out);
    else if (v->t.dtype == KILN_DTYPE_INT32)
        for (uint64_t i = 0; i < v->t.count; i++) {
            int32_t x;
            memcpy(&x, (const char *)v->t.data + i * 4, 4);
            out[i] = x;
        }
    else return false;
    *n = (int32_t)v->t.count;
    return true;
}

/* ---- memory ---- */

static void cuda_free_cb(void *ctx, void *ptr) {
    cuda_ctx *c = ctx;
    if (ptr) (void)cudaFreeAsync(ptr, stream_of(c));
}

static kiln_status be_alloc(void *ctx, uint64_t bytes, void **ptr, kiln_error *err) {
    cuda_ctx *c = ctx;
    *ptr = NULL;
    uint64_t lim = rt_tensor_alloc_limit();
    if (lim && bytes > lim)
        return kiln_err_set(err, KILN_ERR_LIMIT, "a %" PRIu64 "-byte GPU tensor is over the per-tensor limit of %" PRIu64
                            " bytes", bytes, lim);
    cudaError_t e = cudaMallocAsync(ptr, bytes ? (size_t)bytes : 1, stream_of(c));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of GPU memory allocating %" PRIu64 " bytes (%s)", bytes,
                            cudaGetErrorString(e));
    }
    return KILN_OK;
}

static void be_free(void *ctx, void *ptr) { cuda_free_cb(ctx, ptr); }

kiln_status cuda_scratch_alloc(cuda_ctx *c, uint64_t bytes, void **p, kiln_error *err) {
    return be_alloc(c, bytes, p, err);
}

void cuda_scratch_free(cuda_ctx *c, void *p) { cuda_free_cb(c, p); }

kiln_status cuda_out(cuda_ctx *c, rt_value *out, kiln_dtype dt, int32_t rank, const int64_t *dims, rt_tensor **tp,
                     kiln_error *err) {
    rt_tensor *t = rt_value_as_tensor(out);
    if (rank < 0 || rank > RT_MAX_RANK) return kiln_err_set(err, KILN_ERR_LIMIT, "rank %d out of range", (int)rank);
    uint64_t count = 1, nbytes = 0;
    for (int32_t i = 0; i < rank; i++) {
        if (dims[i] < 0) return kiln_err_set(err, KILN_ERR_SHAPE, "negative dimension %" PRId64, dims[i]);
        if (__builtin_mul_overflow(count, (uint64_t)dims[i], &count))
            return kiln_err_set(err, KILN_ERR_LIMIT, "tensor element count overflows 64 bits");
    }
    if (dt == KILN_DTYPE_STRING || !kiln_dtype_nbytes(dt, count, &nbytes))
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "cannot size a %s tensor on the GPU", kiln_dtype_name(dt));
    void *p = NULL;
    if (count) {
        kiln_status st = be_alloc(c, nbytes, &p, err);
        if (st != KILN_OK) return st;
    }
    t->dtype = dt;
    t->rank = rank;
    for (int32_t i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->count = count;
    t->nbytes = nbytes;
    t->data = p;
    t->device = RT_MEM_CUDA;
    t->free_fn = p ? cuda_free_cb : NULL;
    t->free_ctx = c;
    if (tp) *tp = t;
    return KILN_OK;
}

static kiln_status be_copy(void *ctx, void *dst, const void *src, uint64_t bytes, rt_copy_kind kind, void *stream,
                           kiln_error *err) {
    cuda_ctx *c = ctx;
    cudaStream_t s = stream ? (cudaStream_t)stream : stream_of(c);
    enum cudaMemcpyKind k = kind == RT_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                            : kind == RT_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
    kiln_status st = cuda_err(err, cudaMemcpyAsync(dst, src, (size_t)bytes, k, s), "copy");
    /* the host side of a copy may be reused as soon as this returns (backend.h), and a
     * pageable H2D source is staged before cudaMemcpyAsync returns; D2H needs the data */
    if (st == KILN_OK && kind == RT_COPY_DEVICE_TO_HOST) st = cuda_err(err, cudaStreamSynchronize(s), "copy sync");
    return st;
}

/* ---- streams and timers ---- */

static kiln_status be_stream_create(void *ctx, void **stream, kiln_error *err) {
    (void)ctx;
    cudaStream_t s;
    kiln_status st = cuda_err(err, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream create");
    *stream = st == KILN_OK ? (void *)s : NULL;
    return st;
}

static void be_stream_destroy(void *ctx, void *stream) {
    (void)ctx;
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

static kiln_status be_stream_sync(void *ctx, void *stream, kiln_error *err) {
    cuda_ctx *c = ctx;
    return cuda_err(err, cudaStreamSynchronize(stream ? (cudaStream_t)stream : stream_of(c)), "stream sync");
}

/* A mark is an index into the event ring; elapsed() waits for the later event. */
static kiln_status be_timer_mark(void *ctx, void *stream, uint64_t *mark, kiln_error *err) {
    cuda_ctx *c = ctx;
    uint32_t i = c->next_event++ % c->n_events;
    *mark = i;
    return cuda_err(err, cudaEventRecord((cudaEvent_t)c->events[i], stream ? (cudaStream_t)stream : stream_of(c)),
                    "event record");
}

static uint64_t be_timer_elapsed_ns(void *ctx, uint64_t start, uint64_t end) {
    cuda_ctx *c = ctx;
    if (!c || start >= c->n_events || end >= c->n_events) return 0;
    float ms = 0;
    if (cudaEventSynchronize((cudaEvent_t)c->events[end]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, (cudaEvent_t)c->events[start], (cudaEvent_t)c->events[end]) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (uint64_t)((double)ms * 1e6);
}

/* ---- CUDA graphs (whole-run capture; the executor decides when) ---- */

static kiln_status be_capture_begin(void *ctx, kiln_error *err) {
    cuda_ctx *c = ctx;
    /* relaxed: allocation APIs stay callable while recording (the stream-ordered
     * allocator's calls become graph memory nodes) */
    return cuda_err(err, cudaStreamBeginCapture(stream_of(c), cudaStreamCaptureModeRelaxed), "begin capture");
}

static kiln_status be_capture_end(void *ctx, void **graph, kiln_error *err) {
    cuda_ctx *c = ctx;
    *graph = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(stream_of(c), &g);
    if (e != cudaSuccess || !g) {
        (void)cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "CUDA graph capture failed: %s (a node synchronized or "
                            "copied to the host while recording)", cudaGetErrorString(e));
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_err(err, e, "graph instantiate");
    }
    *graph = x;
    return KILN_OK;
}

static kiln_status be_graph_launch(void *ctx, void *graph, kiln_error *err) {
    cuda_ctx *c = ctx;
    return cuda_err(err, cudaGraphLaunch((cudaGraphExec_t)graph, stream_of(c)), "graph launch");
}

static void be_graph_destroy(void *ctx, void *graph) {
    cuda_ctx *c = ctx;
    if (!graph) return;
    cudaStreamSynchronize(stream_of(c));
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

/* ---- page-locked host memory and the memory report (appended to the table) ---- */

static kiln_status be_host_alloc(void *ctx, uint64_t bytes, void **ptr, kiln_error *err) {
    (void)ctx;
    *ptr = NULL;
    cudaError_t e = cudaHostAlloc(ptr, bytes ? (size_t)bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *ptr = NULL;
        return kiln_err_set(err, KILN_ERR_NOMEM, "cannot allocate %" PRIu64 " bytes of page-locked host memory (%s)",
                            bytes, cudaGetErrorString(e));
    }
    return KILN_OK;
}

static void be_host_free(void *ctx, void *ptr) {
    (void)ctx; /* may be NULL (backend.h) */
    if (ptr) (void)cudaFreeHost(ptr);
}

static void be_mem_report(void *ctx, rt_device_mem *out) {
    cuda_ctx *c = ctx;
    memset(out, 0, sizeof *out);
    out->workspace = c->workspace_bytes;
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, c->device) == cudaSuccess) {
        uint64_t v = 0;
        if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v) == cudaSuccess) out->pool_used_peak = v;
        if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v) == cudaSuccess) out->pool_reserved = v;
    }
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
        out->device_free = fr;
        out->device_total = tot;
    }
    (void)cudaGetLastError();
}

static void be_set_tactic_cache(void *ctx, const rt_tactic_cache *cache) { ((cuda_ctx *)ctx)->tactics = cache; }

/* ---- lifecycle ---- */

static void be_destroy(void *ctx) {
    cuda_ctx *c = ctx;
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(stream_of(c));
    if (c->workspace) cudaFree(c->workspace);
    for (uint32_t i = 0; i < c->n_events; i++)
        if (c->events[i]) cudaEventDestroy((cudaEvent_t)c->events[i]);
    free(c->events);
    if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
#if KILN_HAVE_CUDNN
    if (c->dnn) cudnnDestroy((cudnnHandle_t)c->dnn);
#endif
    if (c->stream) cudaStreamDestroy(stream_of(c));
    free(c);
}

static kiln_status be_create(const rt_backend_options *opts, void **out, kiln_error *err) {
    *out = NULL;
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    c->device = opts ? opts->device : 0;
    kiln_status st = cuda_info_query(c->device, &c->info, err);
    if (st != KILN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", kiln_err_msg(err));
        kiln_err_clear(err);
        free(c);
        return kiln_err_set(err, st, "the cuda backend needs an NVIDIA GPU: %s\nhint: run on a machine with an "
                            "NVIDIA GPU and driver, or use --backend cpu", why);
    }
    c->fp16 = opts && opts->fp16;
    c->tf32 = !(opts && opts->no_tf32);
    c->workspace_bytes = opts && opts->workspace_bytes ? opts->workspace_bytes : CUDA_DEFAULT_WORKSPACE;
    st = cuda_err(err, cudaSetDevice(c->device), "set device");
    cudaStream_t s = NULL;
    if (st == KILN_OK) st = cuda_err(err, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream create");
    c->stream = s;
    if (st == KILN_OK) {
        /* keep freed blocks in the pool: steady-state runs then allocate without the driver */
        cudaMemPool_t pool;
        if (cudaDeviceGetDefaultMemPool(&pool, c->device) == cudaSuccess) {
            uint64_t thr = UINT64_MAX;
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr);
        }
        st = cuda_err(err, cudaMalloc(&c->workspace, (size_t)c->workspace_bytes), "workspace allocation");
    }
    const char *lt_missing = st == KILN_OK ? cuda_cublaslt_load() : NULL;
    if (lt_missing) st = kiln_err_set(err, KILN_ERR_RUNTIME, "%s", lt_missing);
    if (st == KILN_OK) {
        cublasLtHandle_t lt;
        if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) st = kiln_err_set(err, KILN_ERR_RUNTIME, "cublasLtCreate failed");
        else c->lt = lt;
    }
#if KILN_HAVE_CUDNN
    if (st == KILN_OK) {
        cudnnHandle_t h;
        if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) st = kiln_err_set(err, KILN_ERR_RUNTIME, "cudnnCreate failed");
        else {
            c->dnn = h;
            cudnnSetStream(h, s);
        }
    }
#endif
    if (st == KILN_OK) {
        c->n_events = CUDA_EVENT_RING;
        c->events = calloc(c->n_events, sizeof *c->events);
        if (!c->events) st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; st == KILN_OK && i < c->n_events; i++) {
            cudaEvent_t ev;
            st = cuda_err(err, cudaEventCreate(&ev), "event create");
            c->events[i] = ev;
        }
    }
    if (st != KILN_OK) {
        be_destroy(c);
        return st;
    }
    *out = c;
    return KILN_OK;
}

/* ---- nodes ---- */

static bool be_supports(void *ctx, const ir_model *model, const ir_node *node, kiln_dtype precision) {
    (void)ctx;
    /* FLOAT16: could it run with float16 tensors (the FP16 pass's question) */
    if (precision == KILN_DTYPE_FLOAT16) return cuda_op_half_ok(model, node, NULL, 0);
    return cuda_op_supported(model, node, NULL, 0);
}

static kiln_status be_prepare(void *ctx, const ir_model *model, const ir_node *node, void **kernel, kiln_error *err) {
    (void)ctx;
    char why[256];
    if (!cuda_op_can_run(model, node, why, sizeof why))
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "node '%s': %s", node->name, why);
    *kernel = (void *)cuda_op_find(node->domain, node->op_type);
    return KILN_OK;
}

static kiln_status be_run(void *ctx, rt_node_call *call) {
    cuda_ctx *c = ctx;
    const cuda_op_desc *d = call->kernel;
    for (int32_t k = 0; k < call->n_in; k++) {
        const rt_value *v = call->inputs[k];
        if (!v) continue;
        bool host = cuda_op_input_on_host(call->node, k);
        if (v->kind != IR_TYPE_TENSOR || (v->t.device == RT_MEM_HOST) != host)
            return cuda_node_fail(call, KILN_ERR_INTERNAL, "input %d is not in %s memory", (int)k,
                                  host ? "host" : "GPU");
    }
    kiln_status st = d->run(c, call);
    if (st == KILN_OK) {
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = cuda_fail(call, (int)e, "kernel launch");
    }
    return st;
}

static void be_foreach_op(void (*fn)(const char *domain, const char *op_type, void *user), void *user) {
    cuda_op_foreach(fn, user);
}

static bool be_input_on_host(void *ctx, const ir_node *node, int32_t index) {
    (void)ctx;
    return cuda_op_input_on_host(node, index);
}

static const rt_backend cuda_backend_table = {
    .api_version = RT_BACKEND_API_VERSION,
    .name = "cuda",
    .create = be_create,
    .destroy = be_destroy,
    .supports = be_supports,
    .prepare_node = be_prepare,
    .release_node = NULL,
    .run_node = be_run,
    .alloc = be_alloc,
    .free = be_free,
    .copy = be_copy,
    .stream_create = be_stream_create,
    .stream_destroy = be_stream_destroy,
    .stream_sync = be_stream_sync,
    .timer_mark = be_timer_mark,
    .timer_elapsed_ns = be_timer_elapsed_ns,
    .foreach_op = be_foreach_op,
    .location = RT_MEM_CUDA,
    .input_on_host = be_input_on_host,
    .capture_begin = be_capture_begin,
    .capture_end = be_capture_end,
    .graph_launch = be_graph_launch,
    .graph_destroy = be_graph_destroy,
    .host_alloc = be_host_alloc,
    .host_free = be_host_free,
    .mem_report = be_mem_report,
    .set_tactic_cache = be_set_tactic_cache,
};

const rt_backend *rt_backend_cuda(void) { return &cuda_backend_table; }
