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

typedef struct fake_ctx {
    int allocs, frees, h2d, d2h, runs;
} fake_ctx;

static kiln_status f_create(const rt_backend_options *o, void **ctx, kiln_error *err) {
    (void)o;
    (void)err;
    *ctx = calloc(1, sizeof(fake_ctx));
    return KILN_OK;
}
static void f_destroy(void *ctx) { free(ctx); }
static bool f_supports(void *ctx, const ir_model *m, const ir_node *n, kiln_dtype p) {
    (void)ctx, (void)m, (void)p;
    return !strcmp(n->op_type, "Identity") || !strcmp(n->op_type, "Add");
}
static kiln_status f_prepare(void *ctx, const ir_model *m, const ir_node *n, void **k, kiln_error *err) {
    (void)ctx, (void)m;
    if (!f_supports(ctx, m, n, KILN_DTYPE_UNDEFINED))
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "fakedev: no %s", n->op_type);
    *k = (void *)1;
    return KILN_OK;
}
static void f_free_cb(void *ctx, void *p) {
    ((fake_ctx *)ctx)->frees++;
    free(p);
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
    if (kind == RT_COPY_HOST_TO_DEVICE) c->h2d++;
    if (kind == RT_COPY_DEVICE_TO_HOST) c->d2h++;
    memcpy(dst, src, n);
    return KILN_OK;
}
/* Identity: copy; Add(x, w): x + w elementwise (same shapes) -- both on "device" memory */
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
    memcpy(y->data, x->data, x->nbytes);
    if (!strcmp(call->node->op_type, "Add")) {
        float *yd = y->data;
        const float *wd = call->inputs[1]->t.data;
        for (uint64_t i = 0; i < y->count; i++) yd[i] += wd[i];
    }
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback_and_copies),
        cmocka_unit_test(test_no_fallback_reports_missing),
        cmocka_unit_test(test_device_tensor_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
