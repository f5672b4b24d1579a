/* cpu_backend.c - the CPU implementation of the backend interface (runtime/backend.h).
 *
 * The context owns the thread pool. prepare_node finds the kernel in kernels.def;
 * run_node builds the cpu_kernel_ctx kernels see and forwards subgraph calls back to the
 * executor. Memory is plain aligned host memory, streams do not exist (CPU work is
 * synchronous), and timer marks are CLOCK_MONOTONIC nanoseconds.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_kernel.h"
#include "backends/cpu/cpu_scratch.h"
#include "core/bigalloc.h"
#include "runtime/backend.h"

typedef struct cpu_backend_ctx {
    cpu_threadpool *pool;
    cpu_scratch scratch; /* the nodes run one at a time: one set of kernel scratch */
} cpu_backend_ctx;

static kiln_status cpu_create(const rt_backend_options *opts, void **out, kiln_error *err) {
    cpu_backend_ctx *c = calloc(1, sizeof *c);
    if (!c) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory creating the CPU backend");
    kiln_status st = cpu_threadpool_create(opts ? opts->threads : 0, &c->pool, err);
    if (st != KILN_OK) {
        free(c);
        return st;
    }
    *out = c;
    return KILN_OK;
}

static void cpu_destroy(void *ctx) {
    cpu_backend_ctx *c = ctx;
    if (!c) return;
    cpu_threadpool_free(c->pool);
    cpu_scratch_release(&c->scratch);
    free(c);
}

static int64_t node_opset(const ir_model *model, const ir_node *node) {
    if (node->opset > 0) return node->opset;
    return model ? ir_model_opset(model, node->domain) : 0;
}

/* Ops kiln has no kernel for on purpose, and why (reported with "unsupported op"). */
static const char *cpu_unsupported_reason(const char *domain, const char *op_type) {
    static const struct {
        const char *domain, *op, *why;
    } table[] = {
        {"", "Bernoulli", "random output can't match the reference"},
        {"", "Multinomial", "random output can't match the reference"},
        {"", "RandomUniform", "random output can't match the reference"},
        {"", "RandomUniformLike", "random output can't match the reference"},
        {"", "RandomNormal", "random output can't match the reference"},
        {"", "RandomNormalLike", "random output can't match the reference"},
        {"", "ImageDecoder", "needs an image codec (JPEG/PNG/WebP/...) that kiln does not link"},
        {"ai.onnx.preview.training", "Gradient", "graph-level autodiff: a model transformation and not a kernel"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i].op, op_type) && !strcmp(table[i].domain, domain)) return table[i].why;
    return NULL;
}

static bool cpu_supports(void *ctx, const ir_model *model, const ir_node *node, kiln_dtype precision) {
    (void)ctx;
    /* Kernels run every dtype the op allows at its declared precision; reduced precision
     * builds (fp16/int8 engines) are not a CPU feature. */
    if (precision != KILN_DTYPE_UNDEFINED && precision != KILN_DTYPE_FLOAT) return false;
    return cpu_kernel_find(node->domain, node->op_type, node_opset(model, node)) != NULL;
}

static kiln_status cpu_prepare_node(void *ctx, const ir_model *model, const ir_node *node, void **kernel,
                                    kiln_error *err) {
    (void)ctx;
    int64_t opset = node_opset(model, node);
    cpu_kernel_fn fn = cpu_kernel_find(node->domain, node->op_type, opset);
    if (!fn) {
        const char *dom = node->domain[0] ? node->domain : "ai.onnx";
        if (cpu_kernel_exists(node->domain, node->op_type))
            return kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                                "node '%s' (%s): kiln's CPU backend has %s kernels only for newer opsets than "
                                "%s opset %lld",
                                node->name, node->op_type, node->op_type, dom, (long long)opset);
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "node '%s' (%s): kiln's CPU backend has no kernel for %s:%s",
                            node->name, node->op_type, dom, node->op_type);
    }
    /* ISO C does not convert function pointers to void*: box the pointer. */
    cpu_kernel_fn *box = malloc(sizeof *box);
    if (!box) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    *box = fn;
    *kernel = box;
    return KILN_OK;
}

static void cpu_release_node(void *ctx, void *kernel) {
    (void)ctx;
    free(kernel);
}

/* Adapts the kernel-level subgraph callback to the executor's. */
static kiln_status cpu_subgraph(cpu_kernel_ctx *k, const ir_graph *body, const rt_value *inputs, int32_t n_in,
                                rt_value *outputs, int32_t n_out) {
    rt_node_call *call = k->executor;
    return call->run_subgraph(call->scope, body, inputs, n_in, outputs, n_out, k->err);
}

static kiln_status cpu_run_node(void *ctx, rt_node_call *call) {
    cpu_backend_ctx *c = ctx;
    cpu_kernel_ctx k;
    memset(&k, 0, sizeof k);
    k.model = call->model;
    k.graph = call->graph;
    k.node = call->node;
    k.pool = c->pool;
    k.err = call->err;
    k.state = call->state;
    k.state_free = call->state_free;
    k.run_subgraph = cpu_subgraph;
    k.executor = call;
    k.scratch = &c->scratch;
    cpu_kernel_fn fn = *(cpu_kernel_fn *)call->kernel;
    return fn(&k, call->inputs, call->n_in, call->outputs, call->n_out);
}

static kiln_status cpu_alloc(void *ctx, uint64_t bytes, void **ptr, kiln_error *err) {
    (void)ctx;
    uint64_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes || rounded > SIZE_MAX) return kiln_err_set(err, KILN_ERR_LIMIT, "allocation too large");
    *ptr = kiln_alloc_aligned((size_t)rounded);
    if (!*ptr)
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory allocating %llu bytes", (unsigned long long)bytes);
    return KILN_OK;
}

static void cpu_free(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
}

static kiln_status cpu_copy(void *ctx, void *dst, const void *src, uint64_t bytes, rt_copy_kind kind, void *stream,
                            kiln_error *err) {
    (void)ctx, (void)kind, (void)stream, (void)err;
    if (bytes) memmove(dst, src, (size_t)bytes);
    return KILN_OK;
}

static kiln_status cpu_stream_create(void *ctx, void **stream, kiln_error *err) {
    (void)ctx, (void)err;
    *stream = NULL;
    return KILN_OK;
}
static void cpu_stream_destroy(void *ctx, void *stream) { (void)ctx, (void)stream; }
static kiln_status cpu_stream_sync(void *ctx, void *stream, kiln_error *err) {
    (void)ctx, (void)stream, (void)err;
    return KILN_OK;
}

static kiln_status cpu_timer_mark(void *ctx, void *stream, uint64_t *mark, kiln_error *err) {
    (void)ctx, (void)stream, (void)err;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *mark = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return KILN_OK;
}
static uint64_t cpu_timer_elapsed(void *ctx, uint64_t start, uint64_t end) {
    (void)ctx;
    return end > start ? end - start : 0;
}

/* workspace: the kernel scratch the context holds now (cpu_scratch.h); no device pools */
static void cpu_mem_report(void *ctx, rt_device_mem *out) {
    const cpu_backend_ctx *c = ctx;
    memset(out, 0, sizeof *out);
    if (c) out->workspace = cpu_scratch_bytes(&c->scratch);
}

static void cpu_threads_report(void *ctx, rt_threads_report *out) {
    const cpu_backend_ctx *c = ctx;
    cpu_pool_stats ps;
    cpu_threadpool_stats(c ? c->pool : NULL, &ps);
    *out = (rt_threads_report){ps.threads,       ps.loops,          ps.inline_loops,   ps.caller_run_ns,
                               ps.caller_wait_ns, ps.worker_run_ns, ps.caller_sleeps, ps.worker_sleeps};
}

static const rt_backend cpu_backend_table = {
    .api_version = RT_BACKEND_API_VERSION,
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .supports = cpu_supports,
    .prepare_node = cpu_prepare_node,
    .release_node = cpu_release_node,
    .run_node = cpu_run_node,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .timer_mark = cpu_timer_mark,
    .timer_elapsed_ns = cpu_timer_elapsed,
    .foreach_op = cpu_kernel_foreach,
    .unsupported_reason = cpu_unsupported_reason,
    .mem_report = cpu_mem_report,
    .threads_report = cpu_threads_report,
};

const rt_backend *rt_backend_cpu(void) { return &cpu_backend_table; }
