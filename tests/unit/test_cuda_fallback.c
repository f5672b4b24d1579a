/* test_cuda_fallback.c - the executor's device support (runtime/executor.c) without a GPU.
 *
 * A fake device backend ("fakedev": location RT_MEM_CUDA, memory from malloc, counted)
 * runs only Identity; the CPU backend is the fallback. The tests check what a CUDA
 * session relies on: nodes the device does not support are assigned to the CPU with a
 * report naming them, values cross between memories once per run (H2D/D2H copies
 * counted), weights are uploaded once at creation, outputs come back in host memory, and
 * every device allocation is freed. Runs on every build (also -DKILN_CUDA=OFF).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/executor.h"
#include "runtime/weight_share.h"

/* Capture (the capturing backend): work enqueued between capture_begin and capture_end
 * is recorded as ops instead of run, as CUDA stream capture does; copies from or to host
 * memory break the recording (as pageable copies break a CUDA capture); memory freed while
 * recording stays with the graph (a CUDA graph's memory nodes) until graph_destroy. */
typedef struct fake_op {
    int kind; /* 0 copy y <- a, 1 y = a + b (float) */
    void *y;
    const void *a, *b;
    uint64_t bytes;
} fake_op;
typedef struct fake_graph {
    fake_op ops[64];
    int n_ops;
    void *owned[64];
    int n_owned;
} fake_graph;

typedef struct fake_ctx {
    int allocs, frees, h2d, d2h, runs;
    bool capturing, broken;
    fake_graph *rec;
    int launches;
    char captured[256]; /* names of the nodes recorded by the last capture */
} fake_ctx;

static kiln_status f_create(const rt_backend_options *o, void **ctx, kiln_error *err) {
    (void)o;
    (void)err;
    *ctx = calloc(1, sizeof(fake_ctx));
    return KILN_OK;
}
static void f_destroy(void *ctx) { free(ctx); }
/* Runs Identity and Add; nodes named host_* it can run but prefers to leave to the host
 * (as the CUDA backend does with int64 results). */
static bool f_can_run(const ir_node *n) { return !strcmp(n->op_type, "Identity") || !strcmp(n->op_type, "Add"); }
static bool f_supports(void *ctx, const ir_model *m, const ir_node *n, kiln_dtype p) {
    (void)ctx, (void)m, (void)p;
    return f_can_run(n) && strncmp(n->name, "host_", 5) != 0;
}
static kiln_status f_prepare(void *ctx, const ir_model *m, const ir_node *n, void **k, kiln_error *err) {
    (void)ctx, (void)m;
    if (!f_can_run(n))
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "fakedev: no %s", n->op_type);
    *k = (void *)1;
    return KILN_OK;
}
static void f_free_cb(void *ctx, void *p) {
    fake_ctx *c = ctx;
    if (c->capturing && c->rec && c->rec->n_owned < 64) {
        c->rec->owned[c->rec->n_owned++] = p; /* the graph keeps it */
        return;
    }
    c->frees++;
    free(p);
}
static void f_record(fake_ctx *c, int kind, void *y, const void *a, const void *b, uint64_t bytes) {
    if (!c->rec || c->rec->n_ops == 64) {
        c->broken = true;
        return;
    }
    fake_op *o = &c->rec->ops[c->rec->n_ops++];
    o->kind = kind, o->y = y, o->a = a, o->b = b, o->bytes = bytes;
}
static void f_exec(int kind, void *y, const void *a, const void *b, uint64_t bytes) {
    memcpy(y, a, bytes);
    if (kind == 1)
        for (uint64_t i = 0; i < bytes / 4; i++) ((float *)y)[i] += ((const float *)b)[i];
}
static kiln_status f_alloc(void *ctx, uint64_t bytes, void **p, kiln_error *err) {
    (void)err;
    ((fake_ctx *)ctx)->allocs++;
    *p = malloc(bytes ? bytes : 1);
    return KILN_OK;
}
static void f_free(void *ctx, void *p) { f_free_cb(ctx, p); }
static kiln_status f_copy(void *ctx, void *dst, const void *src, uint64_t n, rt_copy_kind kind, void *s,
                          kiln_error *err) {
    (void)s, (void)err;
    fake_ctx *c = ctx;
    if (c->capturing && kind != RT_COPY_DEVICE_TO_DEVICE) {
        c->broken = true;
        return kiln_err_set(err, KILN_ERR_RUNTIME, "fakedev: host copy while capturing");
    }
    if (kind == RT_COPY_HOST_TO_DEVICE) c->h2d++;
    if (kind == RT_COPY_DEVICE_TO_HOST) c->d2h++;
    if (c->capturing) f_record(c, 0, dst, src, NULL, n);
    else memcpy(dst, src, n);
    return KILN_OK;
}
/* Identity: copy (any dtype); Add(x, w): x + w elementwise (float32, same shapes) -- both
 * on "device" memory */
static kiln_status f_run(void *ctx, rt_node_call *call) {
    fake_ctx *c = ctx;
    c->runs++;
    for (int32_t k = 0; k < call->n_in; k++)
        if (call->inputs[k]->t.device != RT_MEM_CUDA)
            return kiln_err_set(call->err, KILN_ERR_INTERNAL, "fakedev got a host input");
    const rt_tensor *x = &call->inputs[0]->t;
    rt_tensor *y = rt_value_as_tensor(&call->outputs[0]);
    *y = *x;
    y->flags = 0;
    f_alloc(ctx, x->nbytes, &y->data, NULL);
    y->free_fn = f_free_cb;
    y->free_ctx = ctx;
    int kind = !strcmp(call->node->op_type, "Add");
    const void *b = kind ? call->inputs[1]->t.data : NULL;
    if (c->capturing) {
        f_record(c, kind, y->data, x->data, b, x->nbytes);
        size_t len = strlen(c->captured);
        snprintf(c->captured + len, sizeof c->captured - len, "%s%s", len ? "," : "", call->node->name);
    } else {
        f_exec(kind, y->data, x->data, b, x->nbytes);
    }
    return KILN_OK;
}
static void f_graph_destroy(void *ctx, void *graph) {
    fake_ctx *c = ctx;
    fake_graph *gr = graph;
    for (int i = 0; i < gr->n_owned; i++) {
        c->frees++;
        free(gr->owned[i]);
    }
    free(gr);
}
static kiln_status f_capture_begin(void *ctx, kiln_error *err) {
    fake_ctx *c = ctx;
    c->rec = calloc(1, sizeof *c->rec);
    if (!c->rec) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    c->capturing = true;
    c->broken = false;
    c->captured[0] = 0;
    return KILN_OK;
}
static kiln_status f_capture_end(void *ctx, void **graph, kiln_error *err) {
    fake_ctx *c = ctx;
    c->capturing = false;
    fake_graph *gr = c->rec;
    c->rec = NULL;
    if (c->broken) {
        f_graph_destroy(ctx, gr);
        return kiln_err_set(err, KILN_ERR_RUNTIME, "fakedev: the capture was broken");
    }
    *graph = gr;
    return KILN_OK;
}
static kiln_status f_graph_launch(void *ctx, void *graph, kiln_error *err) {
    (void)err;
    fake_graph *gr = graph;
    ((fake_ctx *)ctx)->launches++;
    for (int i = 0; i < gr->n_ops; i++)
        f_exec(gr->ops[i].kind, gr->ops[i].y, gr->ops[i].a, gr->ops[i].b, gr->ops[i].bytes);
    return KILN_OK;
}
static kiln_status f_mark(void *ctx, void *s, uint64_t *m, kiln_error *e) {
    (void)ctx, (void)s, (void)e;
    *m = 0;
    return KILN_OK;
}
static uint64_t f_elapsed(void *ctx, uint64_t a, uint64_t b) {
    (void)ctx, (void)a, (void)b;
    return 0;
}

static const rt_backend fake_backend = {
    .api_version = RT_BACKEND_API_VERSION, .name = "fakedev", .create = f_create, .destroy = f_destroy,
    .supports = f_supports, .prepare_node = f_prepare, .run_node = f_run, .alloc = f_alloc, .free = f_free,
    .copy = f_copy, .timer_mark = f_mark, .timer_elapsed_ns = f_elapsed, .location = RT_MEM_CUDA,
};

/* The same device with capture hooks (a CUDA backend with graphs). */
static const rt_backend capture_backend = {
    .api_version = RT_BACKEND_API_VERSION, .name = "fakedev", .create = f_create, .destroy = f_destroy,
    .supports = f_supports, .prepare_node = f_prepare, .run_node = f_run, .alloc = f_alloc, .free = f_free,
    .copy = f_copy, .timer_mark = f_mark, .timer_elapsed_ns = f_elapsed, .location = RT_MEM_CUDA,
    .capture_begin = f_capture_begin, .capture_end = f_capture_end, .graph_launch = f_graph_launch,
    .graph_destroy = f_graph_destroy,
};

static ir_model *new_model(void) {
    ir_model *m = ir_model_new();
    m->opsets = ARENA_ARRAY(&m->arena, ir_opset, 1);
    m->opsets[0].domain = "";
    m->opsets[0].version = 17;
    m->n_opsets = 1;
    m->graph = ir_graph_new(m, NULL, "main");
    return m;
}

static ir_node *node(ir_graph *g, const char *op, const char *name, const char *in0, const char *in1,
                     const char *out) {
    int32_t id = ir_graph_add_node(g);
    ir_node *n = ir_graph_node(g, id);
    n->op_type = op;
    n->name = name;
    n->domain = "";
    n->opset = 17;
    n->n_inputs = in1 ? 2 : 1;
    n->inputs = ARENA_ARRAY(&g->model->arena, int32_t, 2);
    n->inputs[0] = ir_graph_value(g, in0);
    if (in1) n->inputs[1] = ir_graph_value(g, in1);
    n->n_outputs = 1;
    n->outputs = ARENA_ARRAY(&g->model->arena, int32_t, 1);
    n->outputs[0] = ir_graph_value(g, out);
    g->values[n->outputs[0]].producer = id;
    return n;
}

/* x -> Softmax(s1) -> a -> Identity(dev) -> b -> Add(b, w)(dev) -> c -> Softmax(s2) -> y
 * with w an initializer: s1/s2 fall back to the CPU, the middle runs on fakedev. */
static ir_model *build(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    g->inputs = ARENA_ARRAY(&m->arena, int32_t, 1);
    g->inputs[0] = ir_graph_value(g, "x");
    g->n_inputs = 1;
    g->values[g->inputs[0]].flags |= IR_VALUE_GRAPH_INPUT;
    g->outputs = ARENA_ARRAY(&m->arena, int32_t, 2);
    g->outputs[0] = ir_graph_value(g, "y");
    g->outputs[1] = ir_graph_value(g, "c");
    g->n_outputs = 2;
    int32_t w = ir_graph_value(g, "w");
    ir_tensor *t = ARENA_NEW(&m->arena, ir_tensor);
    t->name = "w";
    t->dtype = KILN_DTYPE_FLOAT;
    t->rank = 1;
    t->dims = ARENA_ARRAY(&m->arena, int64_t, 1);
    t->dims[0] = 4;
    t->count = 4;
    float *wd = ARENA_ARRAY(&m->arena, float, 4);
    for (int i = 0; i < 4; i++) wd[i] = (float)i;
    t->data = wd;
    g->values[w].init = t;
    g->values[w].flags |= IR_VALUE_INITIALIZER;
    g->initializers = ARENA_ARRAY(&m->arena, int32_t, 1);
    g->initializers[0] = w;
    g->n_initializers = 1;
    node(g, "Softmax", "s1", "x", NULL, "a");
    node(g, "Identity", "id", "a", NULL, "b");
    node(g, "Add", "add", "b", "w", "c");
    node(g, "Softmax", "s2", "c", NULL, "y");
    return m;
}

static void softmax_ref(const float *x, float *y, int n) {
    float mx = x[0], s = 0;
    for (int i = 1; i < n; i++) mx = fmaxf(mx, x[i]);
    for (int i = 0; i < n; i++) s += (y[i] = expf(x[i] - mx));
    for (int i = 0; i < n; i++) y[i] /= s;
}

static void test_fallback_and_copies(void **state) {
    (void)state;
    ir_model *m = build();
    void *fctx = NULL, *cctx = NULL;
    kiln_error e = {0};
    rt_backend_options bo = {1, 0, false, false, 0};
    assert_int_equal(fake_backend.create(&bo, &fctx, &e), KILN_OK);
    assert_int_equal(rt_backend_cpu()->create(&bo, &cctx, &e), KILN_OK);
    rt_exec_options eo = {0};
    eo.fallback = rt_backend_cpu();
    eo.fallback_ctx = cctx;
    rt_executor *ex = NULL;
    kiln_status st = rt_executor_create(m, &fake_backend, fctx, &eo, &ex, &e);
    if (st != KILN_OK) fprintf(stderr, "%s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    fake_ctx *fc = fctx;
    /* the two Softmax nodes fall back, named in the report */
    assert_int_equal(rt_executor_n_fallback(ex), 2);
    const char *rep = rt_executor_fallback_report(ex);
    assert_non_null(rep);
    assert_non_null(strstr(rep, "Softmax x2"));
    assert_non_null(strstr(rep, "'s1'"));
    assert_true(rt_executor_node_on_fallback(ex, m->graph, 0));
    assert_false(rt_executor_node_on_fallback(ex, m->graph, 1));
    /* the weight was uploaded once at creation */
    assert_int_equal(fc->h2d, 1);

    float xd[4] = {0.5f, -1.f, 2.f, 0.f};
    rt_value x, outs[2];
    rt_value_init(&x);
    int64_t dims[1] = {4};
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 1, dims, &e), KILN_OK);
    memcpy(x.t.data, xd, sizeof xd);
    const rt_value *ins[1] = {&x};
    for (int run = 0; run < 2; run++) {
        int h2d0 = fc->h2d, d2h0 = fc->d2h;
        st = rt_executor_run(ex, ins, outs, &e);
        if (st != KILN_OK) fprintf(stderr, "%s\n", kiln_err_msg(&e));
        assert_int_equal(st, KILN_OK);
        /* a crosses to the device once; c comes back once for s2 and once more as the
         * graph output c (a device value copied to the host for the caller) */
        assert_int_equal(fc->h2d - h2d0, 1);
        assert_int_equal(fc->d2h - d2h0, 2);
        float a[4], c[4], y[4];
        softmax_ref(xd, a, 4);
        for (int i = 0; i < 4; i++) c[i] = a[i] + (float)i;
        softmax_ref(c, y, 4);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(outs[k].t.device, RT_MEM_HOST);
            assert_null(outs[k].t.free_fn);
        }
        for (int i = 0; i < 4; i++) {
            assert_true(fabsf(((float *)outs[0].t.data)[i] - y[i]) < 1e-6f);
            assert_true(fabsf(((float *)outs[1].t.data)[i] - c[i]) < 1e-6f);
        }
        rt_value_release(&outs[0]);
        rt_value_release(&outs[1]);
    }
    assert_int_equal(fc->runs, 4);
    rt_executor_free(ex);
    /* every device allocation was freed (values after their last use, weights at free) */
    assert_int_equal(fc->allocs, fc->frees);
    rt_value_release(&x);
    fake_backend.destroy(fctx);
    rt_backend_cpu()->destroy(cctx);
    ir_model_free(m);
}

/* Without a fallback backend, a node the device cannot run is an error naming it. */
static void test_no_fallback_reports_missing(void **state) {
    (void)state;
    ir_model *m = build();
    void *fctx = NULL;
    kiln_error e = {0};
    rt_backend_options bo = {1, 0, false, false, 0};
    assert_int_equal(fake_backend.create(&bo, &fctx, &e), KILN_OK);
    rt_exec_options eo = {0};
    rt_executor *ex = NULL;
    assert_int_equal(rt_executor_create(m, &fake_backend, fctx, &eo, &ex, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "Softmax"));
    assert_null(ex);
    kiln_err_clear(&e);
    fake_ctx *fc = fctx;
    assert_int_equal(fc->allocs, fc->frees);
    fake_backend.destroy(fctx);
    ir_model_free(m);
}

/* Device tensors are released through their free_fn, and host copies of them refuse. */
static void test_device_tensor_release(void **state) {
    (void)state;
    fake_ctx fc = {0};
    rt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = KILN_DTYPE_FLOAT;
    t.rank = 1;
    t.dims[0] = 2;
    t.count = 2;
    t.nbytes = 8;
    f_alloc(&fc, 8, &t.data, NULL);
    t.device = RT_MEM_CUDA;
    t.free_fn = f_free_cb;
    t.free_ctx = &fc;
    rt_tensor copy;
    memset(&copy, 0, sizeof copy);
    kiln_error e = {0};
    assert_int_equal(rt_tensor_copy(&copy, &t, &e), KILN_ERR_INTERNAL);
    kiln_err_clear(&e);
    rt_tensor_release(&t);
    assert_int_equal(fc.frees, 1);
    assert_null(t.data);
}

/* x -> Identity 'host_idx' (dev, which prefers the host for it) -> a;  y = Add 'add'(a, a) (dev);
 * Shape 'shp'(a) (cpu) -> s;  Mul 'mul'(s, s) (cpu) -> s2;  out2 = Identity 'ids'(s2) (dev).
 * Shape and Mul run on the CPU but depend only on x's shape: the run is still recorded,
 * with s2 uploaded once per input shape, and replays read new x values. host_idx reads x's
 * values: with graphs on it moves to the device, with graphs off it stays on the CPU. */
static ir_model *build_shape_chain(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    g->inputs = ARENA_ARRAY(&m->arena, int32_t, 1);
    g->inputs[0] = ir_graph_value(g, "x");
    g->n_inputs = 1;
    g->values[g->inputs[0]].flags |= IR_VALUE_GRAPH_INPUT;
    g->outputs = ARENA_ARRAY(&m->arena, int32_t, 2);
    g->outputs[0] = ir_graph_value(g, "y");
    g->outputs[1] = ir_graph_value(g, "out2");
    g->n_outputs = 2;
    node(g, "Identity", "host_idx", "x", NULL, "a");
    node(g, "Add", "add", "a", "a", "y");
    node(g, "Shape", "shp", "a", NULL, "s");
    node(g, "Mul", "mul", "s", "s", "s2");
    node(g, "Identity", "ids", "s2", NULL, "out2");
    return m;
}

static void run_chain(rt_executor *ex, int64_t r, int64_t c, float base) {
    kiln_error e = {0};
    rt_value x, outs[2];
    rt_value_init(&x);
    int64_t dims[2] = {r, c};
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 2, dims, &e), KILN_OK);
    for (uint64_t i = 0; i < x.t.count; i++) ((float *)x.t.data)[i] = base + (float)i;
    const rt_value *ins[1] = {&x};
    kiln_status st = rt_executor_run(ex, ins, outs, &e);
    if (st != KILN_OK) fprintf(stderr, "%s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    assert_int_equal(outs[0].t.count, (uint64_t)(r * c));
    for (uint64_t i = 0; i < x.t.count; i++) assert_true(((float *)outs[0].t.data)[i] == 2 * (base + (float)i));
    assert_int_equal(outs[1].t.dtype, KILN_DTYPE_INT64);
    assert_int_equal(outs[1].t.count, 2);
    assert_int_equal(((int64_t *)outs[1].t.data)[0], r * r);
    assert_int_equal(((int64_t *)outs[1].t.data)[1], c * c);
    rt_value_release(&outs[0]);
    rt_value_release(&outs[1]);
    rt_value_release(&x);
}

/* The capturing fake device with the CPU as fallback, and an executor of m over them. */
typedef struct capture_fixture {
    void *fctx, *cctx;
    rt_executor *ex;
} capture_fixture;

static capture_fixture capture_open(ir_model *m, bool device_graph) {
    capture_fixture fx = {0};
    kiln_error e = {0};
    rt_backend_options bo = {1, 0, false, false, 0};
    assert_int_equal(capture_backend.create(&bo, &fx.fctx, &e), KILN_OK);
    assert_int_equal(rt_backend_cpu()->create(&bo, &fx.cctx, &e), KILN_OK);
    rt_exec_options eo = {0};
    eo.fallback = rt_backend_cpu();
    eo.fallback_ctx = fx.cctx;
    eo.device_graph = device_graph;
    kiln_status st = rt_executor_create(m, &capture_backend, fx.fctx, &eo, &fx.ex, &e);
    if (st != KILN_OK) fprintf(stderr, "%s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    return fx;
}

/* Frees the executor (if still open), checks every device allocation was freed, and
 * destroys both backends and the model. */
static void capture_close(capture_fixture *fx, ir_model *m) {
    if (fx->ex) rt_executor_free(fx->ex);
    fake_ctx *fc = fx->fctx;
    assert_int_equal(fc->allocs, fc->frees);
    capture_backend.destroy(fx->fctx);
    rt_backend_cpu()->destroy(fx->cctx);
    ir_model_free(m);
}

static void test_graph_with_shape_nodes(void **state) {
    (void)state;
    ir_model *m = build_shape_chain();
    capture_fixture fx = capture_open(m, true);
    kiln_error e = {0};
    rt_executor *ex = fx.ex;
    fake_ctx *fc = fx.fctx;
    assert_int_equal(rt_executor_n_fallback(ex), 2); /* host_idx moved to the device */
    assert_false(rt_executor_node_on_fallback(ex, m->graph, 0));
    assert_int_equal(rt_executor_device_graph_host_nodes(ex), 2);
    assert_false(rt_executor_node_per_signature(ex, 0));
    assert_true(rt_executor_node_per_signature(ex, 2));
    assert_true(rt_executor_node_per_signature(ex, 3));
    assert_int_equal(rt_executor_device_graph_state(ex), 0);

    /* first run learns the shapes (node by node); Shape read a device tensor's header,
     * not its data: the only D2H copies are the two graph outputs */
    int d2h0 = fc->d2h;
    run_chain(ex, 2, 3, 1.f);
    assert_int_equal(fc->d2h - d2h0, 2);
    assert_int_equal(rt_executor_device_graph_state(ex), 0);
    assert_int_equal(fc->launches, 0);
    /* second run with the same shapes: recorded (without the CPU nodes) and replayed */
    run_chain(ex, 2, 3, 5.f);
    assert_int_equal(rt_executor_device_graph_state(ex), 1);
    assert_int_equal(fc->launches, 1);
    assert_string_equal(fc->captured, "host_idx,add,ids");
    /* later runs: one H2D (x), two D2H (outputs), no allocation, no node run */
    int h2d = fc->h2d, d2h = fc->d2h, allocs = fc->allocs, runs = fc->runs;
    run_chain(ex, 2, 3, -7.f);
    assert_int_equal(fc->launches, 2);
    assert_int_equal(fc->h2d - h2d, 1);
    assert_int_equal(fc->d2h - d2h, 2);
    assert_int_equal(fc->allocs - allocs, 0);
    assert_int_equal(fc->runs, runs);
    /* without transfers (--noDataTransfers): the graph runs on what the input buffers
     * hold, nothing is copied and no output comes back */
    rt_executor_set_transfers(ex, false);
    {
        rt_value x, outs[2];
        rt_value_init(&x);
        int64_t dims[2] = {2, 3};
        assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 2, dims, &e), KILN_OK);
        memset(x.t.data, 0, x.t.nbytes);
        const rt_value *ins[1] = {&x};
        h2d = fc->h2d, d2h = fc->d2h;
        assert_int_equal(rt_executor_run(ex, ins, outs, &e), KILN_OK);
        assert_int_equal(fc->launches, 3);
        assert_int_equal(fc->h2d, h2d);
        assert_int_equal(fc->d2h, d2h);
        assert_int_equal(outs[0].kind, IR_TYPE_UNKNOWN);
        assert_int_equal(outs[1].kind, IR_TYPE_UNKNOWN);
        rt_value_release(&x);
    }
    rt_executor_set_transfers(ex, true);
    run_chain(ex, 2, 3, 4.f);
    assert_int_equal(fc->launches, 4);
    /* new shapes: the graph is dropped, the shapes learned again, then replayed */
    run_chain(ex, 3, 2, 0.5f);
    assert_int_equal(rt_executor_device_graph_state(ex), 0);
    assert_int_equal(fc->launches, 4);
    run_chain(ex, 3, 2, 2.5f);
    assert_int_equal(rt_executor_device_graph_state(ex), 1);
    assert_int_equal(fc->launches, 5);
    run_chain(ex, 3, 2, 9.f);
    assert_int_equal(fc->launches, 6);
    capture_close(&fx, m);
}

/* Without device graphs, host_idx stays on the host (the device's preference). */
static void test_no_graph_keeps_preference(void **state) {
    (void)state;
    ir_model *m = build_shape_chain();
    capture_fixture fx = capture_open(m, false);
    rt_executor *ex = fx.ex;
    assert_int_equal(rt_executor_n_fallback(ex), 3);
    assert_true(rt_executor_node_on_fallback(ex, m->graph, 0));
    assert_int_equal(rt_executor_device_graph_host_nodes(ex), 0);
    run_chain(ex, 2, 3, 1.f);
    run_chain(ex, 2, 3, 2.f);
    assert_int_equal(((fake_ctx *)fx.fctx)->launches, 0);
    capture_close(&fx, m);
}

/* A host node that reads values and that the device cannot run (Softmax) keeps graphs
 * off; then host_idx is not moved either (moving it would only add copies). */
static void test_no_move_when_graph_impossible(void **state) {
    (void)state;
    ir_model *m = build_shape_chain();
    node(m->graph, "Softmax", "sm", "x", NULL, "z");
    capture_fixture fx = capture_open(m, true);
    rt_executor *ex = fx.ex;
    assert_int_equal(rt_executor_device_graph_state(ex), -1);
    assert_non_null(strstr(rt_executor_device_graph_why(ex), "'sm' (Softmax)"));
    assert_true(rt_executor_node_on_fallback(ex, m->graph, 0)); /* host_idx stayed */
    assert_int_equal(rt_executor_n_fallback(ex), 4);
    run_chain(ex, 2, 3, 1.f);
    run_chain(ex, 2, 3, 2.f);
    assert_int_equal(((fake_ctx *)fx.fctx)->launches, 0);
    capture_close(&fx, m);
}

/* A CPU node that reads activation values (Softmax of x) keeps graphs off, and says which. */
static void test_graph_off_for_value_nodes(void **state) {
    (void)state;
    ir_model *m = build();
    capture_fixture fx = capture_open(m, true);
    rt_executor *ex = fx.ex;
    assert_int_equal(rt_executor_device_graph_state(ex), -1);
    assert_non_null(strstr(rt_executor_device_graph_why(ex), "'s1' (Softmax)"));
    assert_int_equal(rt_executor_device_graph_host_nodes(ex), 0);
    assert_false(rt_executor_node_per_signature(ex, 0));
    assert_int_equal(((fake_ctx *)fx.fctx)->launches, 0);
    capture_close(&fx, m);
}

/* ---- weights shared between executors of one model (runtime/weight_share.h) ---- */

/* One executor on its own fake device context with the CPU fallback, weights from ws. */
typedef struct shared_exec {
    void *fctx, *cctx;
    rt_executor *ex;
} shared_exec;

static void shared_exec_create(shared_exec *se, ir_model *m, rt_weight_share *ws) {
    kiln_error e = {0};
    rt_backend_options bo = {1, 0, false, false, 0};
    assert_int_equal(fake_backend.create(&bo, &se->fctx, &e), KILN_OK);
    assert_int_equal(rt_backend_cpu()->create(&bo, &se->cctx, &e), KILN_OK);
    rt_exec_options eo = {0};
    eo.fallback = rt_backend_cpu();
    eo.fallback_ctx = se->cctx;
    eo.weights = ws;
    kiln_status st = rt_executor_create(m, &fake_backend, se->fctx, &eo, &se->ex, &e);
    if (st != KILN_OK) fprintf(stderr, "%s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
}

/* Runs build()'s graph once and checks output c = softmax(x) + w. */
static void shared_exec_check(shared_exec *se) {
    float xd[4] = {0.5f, -1.f, 2.f, 0.f}, a[4];
    rt_value x, outs[2];
    rt_value_init(&x);
    kiln_error e = {0};
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, &e), KILN_OK);
    memcpy(x.t.data, xd, sizeof xd);
    const rt_value *ins[1] = {&x};
    kiln_status st = rt_executor_run(se->ex, ins, outs, &e);
    if (st != KILN_OK) fprintf(stderr, "%s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    softmax_ref(xd, a, 4);
    for (int i = 0; i < 4; i++) assert_true(fabsf(((float *)outs[1].t.data)[i] - (a[i] + (float)i)) < 1e-6f);
    rt_value_release(&outs[0]);
    rt_value_release(&outs[1]);
    rt_value_release(&x);
}

static void shared_exec_free(shared_exec *se) {
    rt_executor_free(se->ex);
    fake_backend.destroy(se->fctx);
    rt_backend_cpu()->destroy(se->cctx);
}

/* Two executors of one model (two engine contexts): the weight is uploaded once, by the
 * first; the second reads the same device memory; it outlives the first executor and is
 * freed once, through the context of the last one to let go. */
static void test_weights_shared_between_executors(void **state) {
    (void)state;
    ir_model *m = build();
    kiln_error e = {0};
    rt_weight_share *ws = NULL;
    assert_int_equal(rt_weight_share_create(&ws, &e), KILN_OK);
    shared_exec a, b;
    shared_exec_create(&a, m, ws);
    rt_weight_share_retain(ws);
    shared_exec_create(&b, m, ws);
    fake_ctx *fa = a.fctx, *fb = b.fctx;
    assert_int_equal(fa->h2d, 1); /* the weight */
    assert_int_equal(fb->h2d, 0); /* nothing: it reads a's copy */
    /* the device weight bytes count the copy once, for the executor that uploaded it */
    assert_int_equal((int)rt_executor_device_weight_bytes(a.ex), 16);
    assert_int_equal((int)rt_executor_device_weight_bytes(b.ex), 0);
    uint64_t bytes = 0;
    assert_int_equal(rt_weight_share_count(ws, &bytes), 1);
    assert_int_equal((int)bytes, 16);
    shared_exec_check(&a);
    shared_exec_check(&b);
    assert_int_equal(fb->h2d, 1); /* the run's input only */
    /* a goes first: the weight stays (b still reads it; ASan would see a use after free) */
    rt_executor_free(a.ex);
    assert_false(rt_weight_share_release(ws, &fake_backend, a.fctx));
    assert_int_equal(fa->allocs - fa->frees, 1); /* a's upload, now owned by the share */
    fake_backend.destroy(a.fctx);
    rt_backend_cpu()->destroy(a.cctx);
    shared_exec_check(&b);
    /* b lets go last: the share frees the weight through b's context */
    rt_executor_free(b.ex);
    assert_int_equal(fb->allocs, fb->frees);
    int fb_frees = fb->frees;
    assert_true(rt_weight_share_release(ws, &fake_backend, b.fctx));
    assert_int_equal(fb->frees - fb_frees, 1);
    fake_backend.destroy(b.fctx);
    rt_backend_cpu()->destroy(b.cctx);
    ir_model_free(m);
}

/* A replaced initializer (as the FP16 pass replaces one) is a new entry, never the stale
 * copy; a session-style registry gives one share per (model, backend, device, flags). */
static void test_weight_share_keys(void **state) {
    (void)state;
    ir_model *m = build();
    kiln_error e = {0};
    rt_weight_share *ws = NULL;
    assert_int_equal(rt_weight_share_create(&ws, &e), KILN_OK);
    shared_exec a, b;
    shared_exec_create(&a, m, ws);
    /* swap w's initializer for another tensor with other values */
    ir_graph *g = m->graph;
    int32_t w = ir_graph_find(g, "w");
    ir_tensor *t2 = ARENA_NEW(&m->arena, ir_tensor);
    *t2 = *g->values[w].init;
    float *wd = ARENA_ARRAY(&m->arena, float, 4);
    for (int i = 0; i < 4; i++) wd[i] = (float)(10 * i);
    t2->data = wd;
    const ir_tensor *old = g->values[w].init;
    g->values[w].init = t2;
    rt_weight_share_retain(ws);
    shared_exec_create(&b, m, ws);
    assert_int_equal(((fake_ctx *)b.fctx)->h2d, 1); /* uploaded its own: the source changed */
    assert_int_equal(rt_weight_share_count(ws, NULL), 2);
    g->values[w].init = (ir_tensor *)old;
    shared_exec_check(&a); /* a still sees 0, 1, 2, 3 */
    shared_exec_free(&a);
    assert_false(rt_weight_share_release(ws, &fake_backend, b.fctx));
    rt_executor_free(b.ex);
    assert_true(rt_weight_share_release(ws, &fake_backend, b.fctx));
    fake_backend.destroy(b.fctx);
    rt_backend_cpu()->destroy(b.cctx);

    /* the registry */
    rt_weight_share *r1 = NULL, *r2 = NULL, *r3 = NULL, *r4 = NULL;
    assert_int_equal(rt_weight_share_acquire(m, &fake_backend, 0, 1, &r1, &e), KILN_OK);
    assert_int_equal(rt_weight_share_acquire(m, &fake_backend, 0, 1, &r2, &e), KILN_OK);
    assert_ptr_equal(r1, r2);
    assert_int_equal(rt_weight_share_acquire(m, &fake_backend, 1, 1, &r3, &e), KILN_OK); /* another device */
    assert_ptr_not_equal(r1, r3);
    assert_int_equal(rt_weight_share_acquire(m, &fake_backend, 0, 0, &r4, &e), KILN_OK); /* other flags */
    assert_ptr_not_equal(r1, r4);
    rt_weight_share_drop(r1, &fake_backend, NULL);
    rt_weight_share_drop(r2, &fake_backend, NULL); /* empty shares free nothing */
    rt_weight_share_drop(r3, &fake_backend, NULL);
    rt_weight_share_drop(r4, &fake_backend, NULL);
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback_and_copies),
        cmocka_unit_test(test_no_fallback_reports_missing),
        cmocka_unit_test(test_device_tensor_release),
        cmocka_unit_test(test_graph_with_shape_nodes),
        cmocka_unit_test(test_graph_off_for_value_nodes),
        cmocka_unit_test(test_no_graph_keeps_preference),
        cmocka_unit_test(test_no_move_when_graph_impossible),
        cmocka_unit_test(test_weights_shared_between_executors),
        cmocka_unit_test(test_weight_share_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
