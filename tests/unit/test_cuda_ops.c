/* test_cuda_ops.c - the CUDA backend's host-side logic, on machines with or without a GPU.
 *
 * Without a GPU (CI): which nodes the GPU runs (op table, attribute and dtype rules,
 * int64 shape arithmetic preferring the host), broadcasting math, version/architecture
 * mismatch messages, and a clear error when a cuda session is asked for. With a GPU the
 * session test also runs a node and compares it with the CPU. Built without CUDA
 * (-DKILN_CUDA=OFF) the tests print why they skip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/session.h"

#if KILN_HAVE_CUDA
#include "api/model_internal.h"
#include "backends/cuda/cuda_info.h"
#include "backends/cuda/cuda_internal.h"
#include "build/passes/passes.h"

#include <stdlib.h>

static void test_bcast_math(void **state) {
    (void)state;
    int64_t out[8];
    int32_t r = 0;
    assert_true(cuda_bcast_shape((int64_t[]){2, 3, 4}, 3, (int64_t[]){4}, 1, out, &r));
    assert_int_equal(r, 3);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[2], 4);
    assert_true(cuda_bcast_shape((int64_t[]){2, 1}, 2, (int64_t[]){1, 3}, 2, out, &r));
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 3);
    assert_false(cuda_bcast_shape((int64_t[]){2, 3}, 2, (int64_t[]){3, 2}, 2, out, &r));
    int64_t str[8];
    cuda_bcast_strides((int64_t[]){4}, 1, (int64_t[]){2, 3, 4}, 3, str);
    assert_int_equal(str[0], 0);
    assert_int_equal(str[1], 0);
    assert_int_equal(str[2], 1);
    cuda_bcast_strides((int64_t[]){3, 1}, 2, (int64_t[]){2, 3, 4}, 3, str);
    assert_int_equal(str[0], 0);
    assert_int_equal(str[1], 1);
    assert_int_equal(str[2], 0);
    /* [2,3,4] + [4]: the two outer axes merge (both operands chain), the inner stays */
    cuda_bcast bc;
    memset(&bc, 0, sizeof bc);
    bc.rank = 3;
    bc.dims[0] = 2, bc.dims[1] = 3, bc.dims[2] = 4;
    cuda_bcast_strides((int64_t[]){2, 3, 4}, 3, bc.dims, 3, bc.str[0]);
    cuda_bcast_strides((int64_t[]){4}, 1, bc.dims, 3, bc.str[1]);
    cuda_bcast_simplify(&bc, 2);
    assert_int_equal(bc.rank, 2);
    assert_int_equal(bc.dims[0], 6);
    assert_int_equal(bc.dims[1], 4);
    assert_int_equal(bc.str[0][0], 4);
    assert_int_equal(bc.str[1][0], 0);
    assert_int_equal(bc.str[1][1], 1);
    /* same shapes collapse to one axis */
    memset(&bc, 0, sizeof bc);
    bc.rank = 2;
    bc.dims[0] = 5, bc.dims[1] = 7;
    cuda_bcast_strides((int64_t[]){5, 7}, 2, bc.dims, 2, bc.str[0]);
    cuda_bcast_strides((int64_t[]){5, 7}, 2, bc.dims, 2, bc.str[1]);
    cuda_bcast_simplify(&bc, 2);
    assert_int_equal(bc.rank, 1);
    assert_int_equal(bc.dims[0], 35);
}

static void test_info_compat(void **state) {
    (void)state;
    cuda_device_info a, b;
    memset(&a, 0, sizeof a);
    snprintf(a.name, sizeof a.name, "NVIDIA H200");
    a.cc_major = 9, a.runtime_version = 13000, a.cublas_version = 130001, a.cudnn_version = 91300;
    b = a;
    kiln_error e = {0};
    assert_int_equal(cuda_info_compat(&a, &b, &e), KILN_OK);
    snprintf(b.name, sizeof b.name, "NVIDIA A100");
    b.cc_major = 8;
    assert_int_equal(cuda_info_compat(&a, &b, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "sm_90"));
    assert_non_null(strstr(kiln_err_msg(&e), "sm_80"));
    assert_non_null(strstr(kiln_err_msg(&e), "rebuild"));
    kiln_err_clear(&e);
    b = a;
    b.cudnn_version = 80900;
    assert_int_equal(cuda_info_compat(&a, &b, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "cuDNN 9.13.0"));
    assert_non_null(strstr(kiln_err_msg(&e), "8.9.0"));
    kiln_err_clear(&e);
    char buf[512];
    cuda_info_describe(&a, buf, sizeof buf);
    assert_non_null(strstr(buf, "sm_90"));
    assert_non_null(strstr(buf, "CUDA runtime 13.0"));
}

/* Loads an ONNX backend-test model, infers types and asks whether node 0 runs on the GPU. */
static int node0_supported(const char *test, bool *can_run, char *why, size_t why_size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/onnx-backend-tests/node/%s/model.onnx", KILN_SHARED_DIR, test);
    kiln_model *km = NULL;
    if (kiln_model_load_file(path, NULL, &km) != KILN_OK) {
        kiln_model_free(km);
        return -1;
    }
    ir_model *m = kiln_model_ir(km);
    build_infer_types_quiet(m);
    bool s = cuda_op_supported(m, &m->graph->nodes[0], why, why_size);
    *can_run = cuda_op_can_run(m, &m->graph->nodes[0], NULL, 0);
    kiln_model_free(km);
    return s;
}

#if defined(KILN_HAVE_CUDNN) && KILN_HAVE_CUDNN
#define HAVE_DNN 1 /* Conv runs through cuDNN */
#else
#define HAVE_DNN 0 /* built without cuDNN: Conv is not in the GPU op table */
#endif

static void test_support_rules(void **state) {
    (void)state;
    static const struct { const char *test; int gpu; int can; const char *why; } cases[] = {
        {"test_relu", 1, 1, NULL},
        {"test_softmax_axis_2", 1, 1, NULL},
        {"test_softmax_axis_0", 0, 0, "last axis"},          /* opset 13: non-last axis */
        {"test_conv_with_autopad_same", 0, 0, HAVE_DNN ? "auto_pad" : "no CUDA kernel"},
        {"test_conv_with_strides_padding", HAVE_DNN, HAVE_DNN, NULL},
        {"test_shape", 0, 1, "int64"},                      /* shape arithmetic prefers the host */
        {"test_gemm_default_single_elem_vector_bias", 1, 1, NULL},
        {"test_maxpool_2d_default", 1, 1, NULL},
        {"test_maxpool_1d_default", 0, 0, "2-D"},
        {"test_batchnorm_example_training_mode", 0, 0, NULL},
        {"test_add_uint8", 0, 0, "float32"},
        {"test_layer_normalization_2d_axis0", 0, 0, "only the first output"}, /* Mean/InvStdDev outputs */
        {"test_top_k", 0, 0, "no CUDA kernel"},
    };
    int checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[256] = "";
        bool can = false;
        int r = node0_supported(cases[i].test, &can, why, sizeof why);
        if (r < 0) {
            printf("  (%s not found under %s: skipped)\n", cases[i].test, KILN_SHARED_DIR);
            continue;
        }
        checked++;
        if (r != cases[i].gpu || (int)can != cases[i].can) fprintf(stderr, "%s: supported %d can_run %d (%s)\n",
                                                                   cases[i].test, r, (int)can, why);
        assert_int_equal(r, cases[i].gpu);
        assert_int_equal((int)can, cases[i].can);
        if (cases[i].why && !strstr(why, cases[i].why)) fprintf(stderr, "%s: why = %s\n", cases[i].test, why);
        if (cases[i].why) assert_non_null(strstr(why, cases[i].why));
    }
    if (!checked) skip();
}

static void test_host_inputs(void **state) {
    (void)state;
    ir_node n;
    memset(&n, 0, sizeof n);
    n.domain = "";
    n.op_type = "Reshape";
    assert_false(cuda_op_input_on_host(&n, 0));
    assert_true(cuda_op_input_on_host(&n, 1));
    n.op_type = "Slice";
    assert_true(cuda_op_input_on_host(&n, 2));
    n.op_type = "Add";
    assert_false(cuda_op_input_on_host(&n, 1));
    n.op_type = "Shape";
    assert_true(cuda_op_input_on_host(&n, 0));
    n.domain = "com.microsoft";
    assert_false(cuda_op_input_on_host(&n, 0));
    assert_null(cuda_op_find("com.microsoft", "Gelu"));
    assert_non_null(cuda_op_find("", "MatMul"));
    assert_int_equal(cuda_act_code("Relu"), CU_RELU);
    assert_int_equal(cuda_act_code("Clip"), CU_CLIP);
    assert_int_equal(cuda_act_code("Nope"), -1);
    /* fused GELU marks from build/passes/fuse_activation.c (after fuse_gelu.c) */
    assert_int_equal(cuda_act_code("Gelu"), CU_GELU_ERF);
    assert_int_equal(cuda_act_code("GeluTanh"), CU_GELU_TANH);
}

/* Session on the GPU when there is one; otherwise a clear error naming the cause. */
static void test_session(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/onnx-backend-tests/node/test_softmax_example/model.onnx", KILN_SHARED_DIR);
    kiln_model *km = NULL;
    if (kiln_model_load_file(path, NULL, &km) != KILN_OK) {
        kiln_model_free(km);
        printf("  (test data not found: skipped)\n");
        skip();
    }
    ir_model *m = kiln_model_ir(km);
    rt_session_options o = rt_session_options_default();
    o.backend = "cuda";
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (cuda_device_count() == 0) {
        printf("  no CUDA GPU here: checking the error only (%s)\n", kiln_err_msg(&e));
        assert_int_equal(st, KILN_ERR_UNSUPPORTED);
        assert_non_null(strstr(kiln_err_msg(&e), "needs an NVIDIA GPU"));
        kiln_err_clear(&e);
        kiln_model_free(km);
        return;
    }
    assert_int_equal(st, KILN_OK);
    rt_value x, y;
    rt_value_init(&x);
    int64_t dims[2] = {1, 3};
    assert_int_equal(rt_tensor_alloc(rt_value_as_tensor(&x), KILN_DTYPE_FLOAT, 2, dims, &e), KILN_OK);
    float xd[3] = {-1.f, 0.f, 1.f};
    memcpy(x.t.data, xd, sizeof xd);
    const rt_value *ins[1] = {&x};
    const char *names[1] = {m->graph->values[m->graph->inputs[0]].name};
    assert_int_equal(rt_session_run(s, names, ins, 1, &y, &e), KILN_OK);
    const float *yd = y.t.data;
    assert_true(yd[0] > 0.08f && yd[0] < 0.1f && yd[2] > 0.66f && yd[2] < 0.67f);
    rt_value_release(&y);
    rt_value_release(&x);
    rt_session_free(s);
    kiln_model_free(km);
}


/* ---- FP16 activations: the pass with the GPU's rules ---- */

static bool gpu_node_half(void *user, const ir_model *m, const ir_node *n) {
    (void)user;
    return cuda_op_half_ok(m, n, NULL, 0);
}
static bool gpu_input_half(void *user, const ir_node *n, int32_t k) {
    (void)user;
    return !cuda_op_input_on_host(n, k);
}

static bool gpu_node_nhwc(void *user, const ir_model *m, const ir_node *n) {
    (void)user;
    return cuda_op_supported(m, n, NULL, 0);
}

static bool node_has_dtype(const ir_graph *g, const ir_node *n, kiln_dtype dt) {
    for (int32_t k = 0; k < n->n_inputs + n->n_outputs; k++) {
        int32_t v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
        if (v < 0) continue;
        kiln_dtype t = g->values[v].init ? g->values[v].init->dtype : g->values[v].type.dtype;
        if (t == dt) return true;
    }
    return false;
}

/* Runs the graph passes and the FP16 pass with the CUDA rules on a model file; checks that
 * every node that now has float16 tensors is one the GPU runs as typed (the pass and the
 * support rules agree), that the Casts run there, and that graph outputs stay float32.
 * Returns -1 when the file is missing, else the number of half nodes. */
static int pack_nodes; /* kiln.nhwc NchwToNhwc (padded stems) after the last check_fp16_model */

static int check_fp16_model(const char *path, build_fp16_stats *out, int *attention) {
    kiln_model *km = NULL;
    if (kiln_model_load_file(path, NULL, &km) != KILN_OK) {
        kiln_model_free(km);
        return -1;
    }
    ir_model *m = kiln_model_ir(km);
    kiln_error e = {0};
    assert_int_equal(build_run_passes(m, NULL, &e), KILN_OK);
    build_infer_types_quiet(m);
    /* as the session does for a device backend: attention fusion, then FP16 */
    build_pass_stats ps;
    memset(&ps, 0, sizeof ps);
    assert_int_equal(build_pass_fuse_attention(m, NULL, &ps, &e), KILN_OK);
    for (int32_t i = 0; i < m->graph->n_nodes; i++)
        if (!strcmp(m->graph->nodes[i].op_type, "Attention")) {
            char why[256] = "";
            if (!cuda_op_supported(m, &m->graph->nodes[i], why, sizeof why)) fprintf(stderr, "Attention: %s\n", why);
            assert_true(cuda_op_supported(m, &m->graph->nodes[i], NULL, 0));
        }
    build_fp16_rules r = {gpu_node_half, gpu_input_half, NULL};
    build_fp16_stats st;
    const ir_graph *g = m->graph;
    kiln_dtype out_dt[16];
    for (int32_t i = 0; i < g->n_outputs && i < 16; i++) out_dt[i] = g->values[g->outputs[i]].type.dtype;
    assert_int_equal(build_pass_precision_fp16(m, &r, &st, &e), KILN_OK);
    /* a second run (loading a GPU engine that stores the rewritten graph) changes nothing */
    build_fp16_stats again;
    int32_t n_before = g->n_nodes;
    assert_int_equal(build_pass_precision_fp16(m, &r, &again, &e), KILN_OK);
    assert_int_equal(again.casts, 0);
    assert_int_equal(again.initializers_converted, 0);
    assert_int_equal(g->n_nodes, n_before);
    build_layout_rules lr = {gpu_node_nhwc, NULL, 4}; /* padded stems, as the backend asks */
    int32_t moved = 0;
    assert_int_equal(build_pass_layout_nhwc(m, &lr, &moved, &e), KILN_OK);
    pack_nodes = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) pack_nodes += !strcmp(g->nodes[i].op_type, "NchwToNhwc");
    /* the FP16 pass over the channels-last graph (an engine build's session runs it again on
     * the optimized graph) adds nothing: the padded stem keeps its float32 input */
    n_before = g->n_nodes;
    assert_int_equal(build_pass_precision_fp16(m, &r, &again, &e), KILN_OK);
    assert_int_equal(again.casts, 0);
    assert_int_equal(g->n_nodes, n_before);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (!node_has_dtype(g, n, KILN_DTYPE_FLOAT16)) continue;
        char why[256] = "";
        bool ok = cuda_op_supported(m, n, why, sizeof why);
        if (!ok) fprintf(stderr, "%s: node '%s' (%s) has float16 tensors but the GPU refuses it: %s\n", path, n->name,
                         n->op_type, why);
        assert_true(ok);
    }
    for (int32_t i = 0; i < g->n_outputs && i < 16; i++) /* outputs keep their types */
        assert_int_equal(g->values[g->outputs[i]].type.dtype, out_dt[i]);
    *out = st;
    *attention = ps.attention_fused;
    kiln_model_free(km);
    return st.half_nodes;
}

static void test_fp16_pass_with_gpu_rules(void **state) {
    (void)state;
    static const char *const cases[] = {"test_gemm_default_single_elem_vector_bias", "test_conv_with_strides_padding",
                                        "test_maxpool_2d_default", "test_softmax_axis_2", "test_where_example",
                                        "test_gather_0", "test_clip_example", "test_layer_normalization_2d_axis0",
                                        "test_matmul_3d", "test_cast_FLOAT_to_FLOAT16"};
    int checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/onnx-backend-tests/node/%s/model.onnx", KILN_SHARED_DIR, cases[i]);
        build_fp16_stats st;
        int att = 0;
        int r = check_fp16_model(path, &st, &att);
        if (r < 0) {
            printf("  (%s not found: skipped)\n", cases[i]);
            continue;
        }
        checked++;
        /* Cast keeps its types; LayerNormalization with Mean/InvStdDev outputs stays float32 */
        bool expect_half = strcmp(cases[i], "test_cast_FLOAT_to_FLOAT16") != 0 &&
                           strcmp(cases[i], "test_layer_normalization_2d_axis0") != 0 &&
                           (HAVE_DNN || strcmp(cases[i], "test_conv_with_strides_padding") != 0);
        if (expect_half != (r > 0)) fprintf(stderr, "%s: %d half nodes\n", cases[i], r);
        assert_int_equal(expect_half, r > 0);
    }
    /* the zoo models (tools/make_zoo.py), when KILN_ZOO_DIR names their folder */
    const char *zoo = getenv("KILN_ZOO_DIR");
    static const char *const models[] = {"resnet50", "bert", "mobilenetv2", "embedding"};
    for (size_t i = 0; zoo && i < sizeof models / sizeof models[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.onnx", zoo, models[i]);
        build_fp16_stats st;
        int att = 0;
        int r = check_fp16_model(path, &st, &att);
        if (r < 0) continue;
        printf("  %s: %d attention blocks fused; %d half nodes, %d float32 nodes, %d casts, %d initializers "
               "converted\n", models[i], att, st.half_nodes, st.float_nodes, st.casts, st.initializers_converted);
        assert_true(r > 0);
        assert_int_equal(att, strcmp(models[i], "bert") ? 0 : 12);
        /* the RGB stems of the image models run channels-last, padded to 4 channels */
        bool image = !strcmp(models[i], "resnet50") || !strcmp(models[i], "mobilenetv2");
        printf("  %s: %d padded stem inputs\n", models[i], pack_nodes);
        assert_int_equal(pack_nodes, (image && HAVE_DNN) ? 1 : 0);
    }
    if (!zoo) printf("  (KILN_ZOO_DIR not set: zoo models not checked)\n");
    if (!checked) skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_pass_with_gpu_rules),
        cmocka_unit_test(test_bcast_math),   cmocka_unit_test(test_info_compat), cmocka_unit_test(test_support_rules),
        cmocka_unit_test(test_host_inputs),  cmocka_unit_test(test_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
/* Built without CUDA: a cuda session must fail with a message saying so. */
static void test_no_cuda_build(void **state) {
    (void)state;
    printf("  kiln was built without CUDA (-DKILN_CUDA=OFF or no nvcc): only the error path is tested\n");
    assert_null(rt_backend_cuda());
    ir_model *m = ir_model_new();
    m->graph = ir_graph_new(m, NULL, "main");
    rt_session_options o = rt_session_options_default();
    o.backend = "cuda";
    rt_session *s = NULL;
    kiln_error e = {0};
    assert_int_equal(rt_session_create(m, &o, &s, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "not in this build"));
    kiln_err_clear(&e);
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda_build)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
