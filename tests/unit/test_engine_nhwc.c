/* test_engine_nhwc.c - GPU engines holding channels-last nodes, without a GPU (every
 * build, ASan included). The layout pass (build/passes/layout_nhwc.c) moves Conv /
 * MaxPool / AveragePool / GlobalAveragePool into the internal domain "kiln.nhwc"; an
 * engine built from such a graph must load back with the same node list and, since the
 * session re-runs type inference on a loaded graph (the GPU decides per node from value
 * types), inference must know those ops (ir/ops/ops_nhwc.c) and give every value the
 * type the pass gave it. Also: inference of the NHWC forms on their own (shapes, the
 * fused residual, refusals), and the CPU backend refusing kiln.nhwc nodes by name. Also
 * what `kiln inspect` shows per node of such an engine (engine_nodes.c): precision,
 * layout and the chosen GPU tactic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_info.h"
#include "build/builder.h"
#include "build/passes/passes.h"
#include "diag/diag.h"
#include "engine/engine.h"
#include "engine/engine_nodes.h"
#include "ir/infer.h"
#include "ir/symdim.h"
#include "runtime/session.h"

#include "graph_builder.h"

#define S(...) ((const char *const[]){__VA_ARGS__})

static void const_f16(ir_graph *g, const char *name, int rank, const int64_t *dims) {
    int32_t v = ir_graph_value(g, name);
    ir_tensor *t = ARENA_NEW(&g->model->arena, ir_tensor);
    t->name = g->values[v].name;
    t->dtype = KILN_DTYPE_FLOAT16;
    t->rank = rank;
    t->dims = ARENA_ARRAY(&g->model->arena, int64_t, rank);
    t->count = 1;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i], t->count *= (uint64_t)dims[i];
    t->nbytes = t->count * 2;
    uint16_t *d = ARENA_ARRAY(&g->model->arena, uint16_t, t->count);
    for (uint64_t i = 0; i < t->count; i++) d[i] = (uint16_t)(0x3c00 + (i % 64)); /* 1.0 .. */
    t->data = d;
    t->where = IR_DATA_OWNED;
    g->values[v].init = t;
    g->values[v].flags |= IR_VALUE_INITIALIZER;
    g->values[v].type.kind = IR_TYPE_TENSOR;
    g->values[v].type.dtype = KILN_DTYPE_FLOAT16;
    g->values[v].type.rank = rank;
    g->values[v].type.dims = ARENA_ARRAY(&g->model->arena, ir_dim, rank);
    for (int i = 0; i < rank; i++) g->values[v].type.dims[i] = ir_dim_const(dims[i]);
    int32_t *ni = ARENA_ARRAY(&g->model->arena, int32_t, g->n_initializers + 1);
    if (g->n_initializers) memcpy(ni, g->initializers, (size_t)g->n_initializers * sizeof *ni);
    ni[g->n_initializers++] = v;
    g->initializers = ni;
}

static void ints_attr(ir_graph *g, ir_attr *a, const char *name, int n, const int64_t *v) {
    a->name = name;
    a->type = IR_ATTR_INTS;
    a->n = n;
    a->ints = ARENA_ARRAY(&g->model->arena, int64_t, n);
    memcpy(a->ints, v, (size_t)n * sizeof *v);
    a->doc = "";
}

/* x [1, 8, 8, 8] half -> Conv(W1 [16, 8, 3, 3], B1, pads 1, stride 2) -> c1 [1, 16, 4, 4]
 * -> Conv(W2 [16, 16, 1, 1], no bias, residual c1 fused in slot 2) -> c2 -> MaxPool 2x2
 * (stride 1) -> p [1, 16, 3, 3] -> AveragePool 2x2 -> a [1, 16, 2, 2] -> GlobalAveragePool
 * -> ga [1, 16, 1, 1] -> Flatten -> y [1, 16] */
static ir_model *small_cnn(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT16, 4, (int64_t[]){1, 8, 8, 8}, NULL);
    g->values[ir_graph_find(g, "x")].declared = g->values[ir_graph_find(g, "x")].type;
    g->values[ir_graph_find(g, "x")].flags |= IR_VALUE_DECLARED_SAVED;
    const_f16(g, "W1", 4, (int64_t[]){16, 8, 3, 3});
    const_f16(g, "B1", 1, (int64_t[]){16});
    const_f16(g, "W2", 4, (int64_t[]){16, 16, 1, 1});
    ir_node *n = add_node(g, "Conv", "conv1", S("x", "W1", "B1"), 3, S("c1"), 1);
    ir_attr *a = add_attrs(g, n, 2);
    ints_attr(g, &a[0], "pads", 4, (int64_t[]){1, 1, 1, 1});
    ints_attr(g, &a[1], "strides", 2, (int64_t[]){2, 2});
    n = add_node(g, "Conv", "conv2", S("c1", "W2", "c1"), 3, S("c2"), 1);
    a = add_attrs(g, n, 1);
    a->name = "kiln_residual";
    a->type = IR_ATTR_INT;
    a->i = 2;
    a->doc = "";
    n = add_node(g, "MaxPool", "pool", S("c2"), 1, S("p"), 1);
    ints_attr(g, add_attrs(g, n, 1), "kernel_shape", 2, (int64_t[]){2, 2});
    n = add_node(g, "AveragePool", "avg", S("p"), 1, S("a"), 1);
    ints_attr(g, add_attrs(g, n, 1), "kernel_shape", 2, (int64_t[]){2, 2});
    add_node(g, "GlobalAveragePool", "gap", S("a"), 1, S("ga"), 1);
    add_node(g, "Flatten", "flat", S("ga"), 1, S("y"), 1);
    return m;
}

static int infer(ir_model *m) {
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    ir_infer(m, NULL, &dl, &e);
    int errors = 0;
    for (int32_t i = 0; i < dl.n; i++)
        if (dl.items[i].severity == DIAG_ERROR) {
            fprintf(stderr, "inference: %s\n", dl.items[i].message);
            errors++;
        }
    kiln_err_clear(&e);
    diag_list_free(&dl);
    return errors;
}

static bool all_ok(void *user, const ir_model *m, const ir_node *n) {
    (void)user, (void)m, (void)n;
    return true;
}

static const ir_node *find_node(const ir_graph *g, const char *name) {
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
    return NULL;
}

static void assert_dims(const ir_graph *g, int32_t v, int rank, const int64_t *d) {
    const ir_type *t = &g->values[v].type;
    if (t->kind != IR_TYPE_TENSOR || t->rank != rank)
        fail_msg("value '%s': kind %d rank %d, expected rank %d", g->values[v].name, (int)t->kind, t->rank, rank);
    for (int i = 0; i < rank; i++)
        if (t->dims[i].kind != IR_DIM_CONST || t->dims[i].value != d[i])
            fail_msg("value '%s': dim %d is not %lld", g->values[v].name, i, (long long)d[i]);
}

static ir_model *laid_out(void) {
    ir_model *m = small_cnn();
    assert_int_equal(infer(m), 0);
    build_layout_rules r = {all_ok, NULL, 0};
    int32_t moved = 0;
    kiln_error e = {0};
    assert_int_equal(build_pass_layout_nhwc(m, &r, &moved, &e), KILN_OK);
    assert_int_equal(moved, 5);
    return m;
}

/* Inference of the NHWC forms reproduces the shapes the pass wrote. */
static void test_infer_nhwc_ops(void **state) {
    (void)state;
    ir_model *m = laid_out();
    ir_graph *g = m->graph;
    /* the pass's own types, by value */
    int32_t nv = g->n_values;
    ir_type *before = calloc((size_t)nv, sizeof *before);
    for (int32_t v = 0; v < nv; v++) before[v] = g->values[v].type;
    assert_int_equal(infer(m), 0);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        assert_true(n->op >= 0); /* known to the registry, kiln.nhwc included */
        for (int32_t k = 0; k < n->n_outputs; k++) {
            int32_t v = n->outputs[k];
            const ir_type *t = &g->values[v].type, *b = &before[v];
            assert_int_equal(t->kind, IR_TYPE_TENSOR);
            assert_int_equal(t->dtype, KILN_DTYPE_FLOAT16);
            assert_int_equal(t->rank, b->rank);
            for (int32_t d = 0; d < t->rank; d++) {
                assert_int_equal(t->dims[d].kind, IR_DIM_CONST);
                assert_int_equal(t->dims[d].value, b->dims[d].value);
            }
        }
    }
    free(before);
    const ir_node *c1 = find_node(g, "conv1");
    assert_string_equal(c1->domain, "kiln.nhwc");
    assert_dims(g, c1->outputs[0], 4, (int64_t[]){1, 4, 4, 16});
    assert_dims(g, c1->inputs[1], 4, (int64_t[]){16, 3, 3, 8}); /* OHWI */
    /* each weight has one reader: stored OHWI in place, no unread OIHW copy left over
     * (an engine would carry it in WEIGHTS) */
    assert_int_equal(c1->inputs[1], ir_graph_find(g, "W1"));
    assert_int_equal(g->values[c1->inputs[1]].init->dims[1], 3);
    assert_int_equal(g->n_initializers, 3);
    assert_dims(g, find_node(g, "pool")->outputs[0], 4, (int64_t[]){1, 3, 3, 16}); /* stride 1 */
    assert_dims(g, find_node(g, "avg")->outputs[0], 4, (int64_t[]){1, 2, 2, 16});
    assert_dims(g, find_node(g, "gap")->outputs[0], 4, (int64_t[]){1, 1, 1, 16});
    assert_dims(g, ir_graph_find(g, "y"), 2, (int64_t[]){1, 16});

    /* a residual that does not match the result is an error naming it */
    ir_node *c2 = (ir_node *)find_node(g, "conv2");
    c2->inputs[2] = c1->inputs[0]; /* x through its Transpose: [1, 8, 8, 8] */
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    ir_infer(m, NULL, &dl, &e);
    kiln_err_clear(&e);
    bool found = false;
    for (int32_t i = 0; i < dl.n; i++)
        found |= dl.items[i].severity == DIAG_ERROR && strstr(dl.items[i].message, "fused residual (input 2)") != NULL;
    diag_list_free(&dl);
    assert_true(found);
    ir_model_free(m);
}

/* A second output (MaxPool's Indices) or a rank other than 4 is refused. */
static void test_infer_nhwc_refusals(void **state) {
    (void)state;
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y", "i"), 2);
    set_type(g, "x", KILN_DTYPE_FLOAT16, 3, (int64_t[]){1, 8, 8}, NULL);
    ir_node *n = add_node(g, "MaxPool", "pool", S("x"), 1, S("y", "i"), 2);
    n->domain = "kiln.nhwc";
    ints_attr(g, add_attrs(g, n, 1), "kernel_shape", 2, (int64_t[]){2, 2});
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    ir_infer(m, NULL, &dl, &e);
    kiln_err_clear(&e);
    assert_true(dl.n >= 1);
    assert_non_null(strstr(dl.items[0].message, "has 2 outputs"));
    diag_list_free(&dl);
    n = &g->nodes[0];
    n->n_outputs = 1;
    diag_list_init(&dl);
    ir_infer(m, NULL, &dl, &e);
    kiln_err_clear(&e);
    assert_true(dl.n >= 1);
    assert_non_null(strstr(dl.items[0].message, "rank 3"));
    diag_list_free(&dl);
    ir_model_free(m);
}

static kiln_status build_cuda_engine(ir_model *m, uint8_t **bytes, size_t *size, kiln_error *err) {
    cuda_device_info gi;
    memset(&gi, 0, sizeof gi);
    snprintf(gi.name, sizeof gi.name, "NVIDIA H200");
    gi.cc_major = 9, gi.runtime_version = 13000, gi.driver_version = 13000;
    gi.cublas_version = 130001, gi.cudnn_version = 91300;
    cuda_info_meta gm;
    cuda_info_to_meta(&gi, &gm);
    build_options o = build_options_default();
    o.backend = "cuda";
    o.precision_flags = ENGINE_PREC_FLAG_FP16;
    o.source_model = "small_cnn.onnx";
    o.run_passes = false;   /* the graph is already what a GPU session leaves */
    o.time_tactics = false; /* no GPU here */
    o.gpu_arch = gm.gpu_arch;
    o.cuda_version = gm.cuda_version;
    o.cublas_version = gm.cublas_version;
    o.cudnn_version = gm.cudnn_version;
    diag_list dl;
    diag_list_init(&dl);
    engine_plan *plan = NULL;
    kiln_status st = build_engine(m, &o, &dl, &plan, NULL, err);
    diag_list_free(&dl);
    if (st != KILN_OK) return st;
    st = engine_write_mem(plan, bytes, size, err);
    engine_plan_free(plan);
    return st;
}

/* Build -> write -> read: the node list round-trips, and inference on the loaded graph
 * (what rt_session_create does for a device backend) types every value. */
static void test_engine_round_trip(void **state) {
    (void)state;
    ir_model *m = laid_out();
    /* what the engine must hold, by name */
    const ir_graph *g0 = m->graph;
    int32_t n0 = g0->n_nodes;
    char (*names)[3][96] = calloc((size_t)n0, sizeof *names);
    for (int32_t i = 0; i < n0; i++) {
        snprintf(names[i][0], 96, "%s", g0->nodes[i].name);
        snprintf(names[i][1], 96, "%s:%s", g0->nodes[i].domain, g0->nodes[i].op_type);
        snprintf(names[i][2], 96, "%s>%s", g0->values[g0->nodes[i].inputs[0]].name,
                 g0->values[g0->nodes[i].outputs[0]].name);
    }
    /* conv1 carries tactic timings as a GPU build leaves them */
    {
        ir_node *c1 = (ir_node *)find_node(m->graph, "conv1");
        ir_attr *na = ARENA_ARRAY(&m->arena, ir_attr, (size_t)c1->n_attrs + 1);
        memcpy(na, c1->attrs, (size_t)c1->n_attrs * sizeof *na);
        memset(&na[c1->n_attrs], 0, sizeof *na);
        static const char text[] = "sA\tcg#0\t0.020\nsA\tcg0e#11\t0.020\nsA\tcg#2\t0.007\nsA\tcg2e#7\t0.007\n"
                                   "sB\talgo#1\t0.001\n";
        na[c1->n_attrs].name = RT_GPU_TACTICS_ATTR;
        na[c1->n_attrs].type = IR_ATTR_STRING;
        na[c1->n_attrs].s.data = text;
        na[c1->n_attrs].s.len = sizeof text - 1;
        na[c1->n_attrs].doc = "";
        c1->attrs = na;
        c1->n_attrs++;
    }
    uint8_t *bytes = NULL;
    size_t size = 0;
    kiln_error e = {0};
    kiln_status st = build_cuda_engine(m, &bytes, &size, &e); /* takes m */
    if (st != KILN_OK) fail_msg("build: %s", kiln_err_msg(&e));
    /* compatibility with the GPU is test_engine_gpu.c's subject; here the graph */
    engine_read_options ro = {.display_name = "nhwc.engine", .skip_compat = true};
    engine_plan *p = NULL;
    st = engine_read_mem(bytes, size, &ro, &p, &e);
    if (st != KILN_OK) fail_msg("read: %s", kiln_err_msg(&e));
    ir_graph *g = p->model->graph;
    assert_int_equal(g->n_nodes, n0);
    int nhwc = 0;
    for (int32_t i = 0; i < n0; i++) {
        char buf[96];
        assert_string_equal(g->nodes[i].name, names[i][0]);
        snprintf(buf, sizeof buf, "%s:%s", g->nodes[i].domain, g->nodes[i].op_type);
        assert_string_equal(buf, names[i][1]);
        snprintf(buf, sizeof buf, "%s>%s", g->values[g->nodes[i].inputs[0]].name,
                 g->values[g->nodes[i].outputs[0]].name);
        assert_string_equal(buf, names[i][2]);
        nhwc += !strcmp(g->nodes[i].domain, "kiln.nhwc");
    }
    assert_int_equal(nhwc, 5);
    free(names);
    /* the loaded graph's types are inferred again from the inputs */
    assert_int_equal(infer(p->model), 0);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_type *t = &g->values[g->nodes[i].outputs[0]].type;
        if (t->kind != IR_TYPE_TENSOR || t->rank < 0 || t->dtype != KILN_DTYPE_FLOAT16)
            fail_msg("node '%s': output type not inferred after the load", g->nodes[i].name);
    }
    assert_dims(g, find_node(g, "conv2")->outputs[0], 4, (int64_t[]){1, 4, 4, 16});
    assert_dims(g, ir_graph_find(g, "y"), 2, (int64_t[]){1, 16});

    /* kiln inspect's per-node facts */
    engine_node_info ni;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        engine_node_describe(p, i, &ni);
        const ir_node *n = &g->nodes[i];
        if (!strcmp(n->domain, "kiln.nhwc")) assert_string_equal(ni.layout, "nhwc");
        else if (!strcmp(n->op_type, "Transpose") || !strcmp(n->op_type, "Flatten")) assert_string_equal(ni.layout, "-");
        assert_string_equal(ni.precision, "half");
    }
    engine_node_describe(p, (int32_t)(find_node(g, "conv1") - g->nodes), &ni);
    assert_string_equal(ni.tactic, "cg#2 engine 7"); /* the graph-API config runs first */
    assert_true(ni.tactic_ms > 0.0069 && ni.tactic_ms < 0.0071);
    engine_node_describe(p, (int32_t)(find_node(g, "pool") - g->nodes), &ni);
    assert_string_equal(ni.tactic, "-");
    assert_true(ni.tactic_ms < 0);

    /* the CPU has no kiln.nhwc kernels: a session names them instead of running */
    rt_session_options so = rt_session_options_default();
    rt_session *s = NULL;
    st = rt_session_create(p->model, &so, &s, &e);
    assert_int_equal(st, KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "kiln.nhwc:Conv"));
    kiln_err_clear(&e);
    engine_plan_free(p);
    free(bytes);
}

/* The chosen tactic in kiln_gpu_tactics texts. */
static void test_gpu_tactic_choice(void **state) {
    (void)state;
    char t[96];
    double ms = -1;
    /* cuBLASLt only: the fastest; an entry that could not run (1e30) never wins */
    assert_true(engine_gpu_tactic_choice("s\tlt#0\t0.5\ns\tlt#1\t1e30\ns\tlt#2\t0.25\n", t, sizeof t, &ms));
    assert_string_equal(t, "lt#2");
    assert_true(ms == 0.25);
    /* legacy cuDNN and no trailing newline */
    assert_true(engine_gpu_tactic_choice("s\talgo#3\t0.125", t, sizeof t, &ms));
    assert_string_equal(t, "algo#3");
    /* graph API preferred over a faster legacy timing; engine from the same signature's
     * check entry, not another signature's */
    assert_true(engine_gpu_tactic_choice("x\tcg1e#99\t0.1\ns\talgo#0\t0.01\ns\tcg#1\t0.1\ns\tcg1e#5\t0.1\n", t,
                                         sizeof t, &ms));
    assert_string_equal(t, "cg#1 engine 5");
    /* nothing usable: garbage, check entries alone, unknown prefixes, negative times */
    assert_false(engine_gpu_tactic_choice("", t, sizeof t, &ms));
    assert_false(engine_gpu_tactic_choice("no tabs here\n\t\t\n", t, sizeof t, &ms));
    assert_false(engine_gpu_tactic_choice("s\tcg0e#3\t0.1\ns\tfoo#1\t0.1\ns\tlt#0\t-1\ns\tlt#1\tabc\n", t,
                                          sizeof t, &ms));
    assert_false(engine_gpu_tactic_choice(NULL, t, sizeof t, &ms));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_infer_nhwc_ops),
        cmocka_unit_test(test_infer_nhwc_refusals),
        cmocka_unit_test(test_engine_round_trip),
        cmocka_unit_test(test_gpu_tactic_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
