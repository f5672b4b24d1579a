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
#include "diag/diag.h"
#include "ir/infer.h"

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
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    (void)ir_infer(m, NULL, &dl, &e);
    kiln_err_clear(&e);
    diag_list_free(&dl);
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

int main(void) {
    const struct CMUnitTest tests[] = {
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
