/* test_infer_errors.c - the shape diagnostics users rely on: each canonical export bug
 * (MatMul/Gemm inner width, Conv channels, Reshape volume, broadcast, Concat, norm
 * params, dtype mismatch, Split sizes, Expand) must produce one error that names the node,
 * both shapes in the model's dim names, the producer chain and a concrete fix, and
 * nothing downstream of it may be reported again. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "infer_test_util.h"

#define HAS(text, needle)                                                   \
    do {                                                                    \
        if (!strstr((text), (needle))) {                                    \
            print_error("missing: %s\nin:\n%s\n", (needle), (text));       \
            fail();                                                         \
        }                                                                   \
        if (getenv("KILN_TEST_VERBOSE")) print_message("%s", (text));       \
    } while (0)

static void test_matmul_inner_canonical(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "input_ids", KILN_DTYPE_INT64, "batch,seq_len");
    int64_t ew[2] = {10000, 64}, pw[2] = {128, 256};
    tg_weight(&t, "embedding.weight", 2, ew);
    tg_weight(&t, "onnx::MatMul_8", 2, pw);
    tg_node(&t, "Gather", "/embedding/Gather", "embedding.weight,input_ids", "/embedding/Gather_output_0");
    tg_node(&t, "MatMul", "/fc/MatMul", "/embedding/Gather_output_0,onnx::MatMul_8", "/fc/MatMul_output_0");
    tg_node(&t, "Relu", "/act/Relu", "/fc/MatMul_output_0", "/act/Relu_output_0");
    tg_node(&t, "Add", "/res/Add", "/act/Relu_output_0,/fc/MatMul_output_0", "logits");
    tg_output(&t, "logits", KILN_DTYPE_FLOAT, "batch,seq_len,256");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-matmul-inner]: node '/fc/MatMul' (MatMul): inner dimensions differ, 64 vs 128");
    HAS(txt, "input 0 '/embedding/Gather_output_0' is [batch, seq_len, 64]");
    HAS(txt, "from Gather '/embedding/Gather' of initializer 'embedding.weight' [10000, 64]");
    HAS(txt, "input 1 'onnx::MatMul_8' is [128, 256] (initializer)");
    HAS(txt, "the embedding width (64) no longer matches the projection's input width (128)");
    HAS(txt, "re-export with a Linear(64, 256), or insert a 64->128 projection after the embedding.");
    /* exactly one diagnostic: Relu, Add and the declared output stay silent */
    assert_int_equal(t.diags.n, 1);
    assert_int_equal(t.diags.n_errors, 1);
    /* the embedding itself was inferred with the model's names */
    assert_string_equal(tg_type(&t, "/embedding/Gather_output_0"), "float32[batch, seq_len, 64]");
    tg_free(&t);
}

static void test_matmul_inner_through_layers(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "batch,32");
    int64_t w1[2] = {32, 48}, w2[2] = {64, 10};
    tg_weight(&t, "fc1.w", 2, w1);
    tg_weight(&t, "fc2.w", 2, w2);
    tg_node(&t, "MatMul", "/fc1/MatMul", "x,fc1.w", "h");
    tg_node(&t, "Relu", "/relu", "h", "hr");
    tg_node(&t, "MatMul", "/fc2/MatMul", "hr,fc2.w", "y");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "inner dimensions differ, 48 vs 64");
    HAS(txt, "from Relu '/relu' <- MatMul '/fc1/MatMul' of graph input 'x' [batch, 32]");
    HAS(txt, "output width of MatMul '/fc1/MatMul' (48)");
    HAS(txt, "Linear(48, 10)");
    tg_free(&t);
}

static void test_gemm_inner_trans(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,512");
    int64_t w[2] = {10, 256}, b[1] = {10};
    tg_weight(&t, "fc.weight", 2, w);
    tg_weight(&t, "fc.bias", 1, b);
    int32_t n = tg_node(&t, "Gemm", "/fc/Gemm", "x,fc.weight,fc.bias", "y");
    tg_attr_i(&t, n, "transB", 1);
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-gemm-inner]: node '/fc/Gemm' (Gemm): inner dimensions differ: A gives K=512 (transA=0), B gives K=256 (transB=1)");
    HAS(txt, "input 0 'x' is [N, 512] (graph input)");
    HAS(txt, "input 1 'fc.weight' is [10, 256] (initializer)");
    HAS(txt, "effective K");
    tg_free(&t);
}

static void test_gemm_ok(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,256");
    int64_t w[2] = {10, 256}, b[1] = {10};
    tg_weight(&t, "fc.weight", 2, w);
    tg_weight(&t, "fc.bias", 1, b);
    int32_t n = tg_node(&t, "Gemm", "/fc/Gemm", "x,fc.weight,fc.bias", "y");
    tg_attr_i(&t, n, "transB", 1);
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_string_equal(tg_type(&t, "y"), "float32[N, 10]");
    tg_free(&t);
}

static void test_conv_channels(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "image", KILN_DTYPE_FLOAT, "N,3,H,W");
    int64_t w1[4] = {32, 3, 3, 3}, w2[4] = {64, 16, 3, 3};
    tg_weight(&t, "conv1.weight", 4, w1);
    tg_weight(&t, "conv2.weight", 4, w2);
    int32_t c1 = tg_node(&t, "Conv", "/conv1/Conv", "image,conv1.weight", "a");
    int64_t pads[4] = {1, 1, 1, 1}, st[2] = {2, 2};
    tg_attr_ints(&t, c1, "pads", 4, pads);
    tg_attr_ints(&t, c1, "strides", 2, st);
    tg_node(&t, "Conv", "/conv2/Conv", "a,conv2.weight", "b");
    tg_node(&t, "Relu", "/relu", "b", "c");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-conv-channels]: node '/conv2/Conv' (Conv): input has 32 channels but the weight expects 16");
    HAS(txt, "input 0 'a' is [N, 32, (H+1)/2, (W+1)/2]");
    HAS(txt, "from Conv '/conv1/Conv' of graph input 'image' [N, 3, H, W]");
    HAS(txt, "in_channels=32");
    assert_int_equal(t.diags.n, 1);
    tg_free(&t);
}

static void test_conv_rank_and_attrs(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,3,32");
    tg_input(&t, "y", KILN_DTYPE_FLOAT, "N,3,32,32");
    int64_t w[4] = {8, 3, 3, 3};
    tg_weight(&t, "w", 4, w);
    tg_node(&t, "Conv", "/c1", "x,w", "a");
    int32_t n2 = tg_node(&t, "Conv", "/c2", "y,w", "b");
    int64_t st[3] = {1, 1, 1};
    tg_attr_ints(&t, n2, "strides", 3, st);
    int32_t n3 = tg_node(&t, "Conv", "/c3", "y,w", "c");
    tg_attr_i(&t, n3, "group", 0);
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-conv-rank]: node '/c1' (Conv): input X has rank 3 but the weight has rank 4");
    HAS(txt, "error[shape-attr-invalid]: node '/c2' (Conv): 'strides' has 3 values but the input has 2 spatial axes");
    HAS(txt, "error[shape-attr-invalid]: node '/c3' (Conv): group 0 must be >= 1");
    assert_int_equal(t.diags.n_errors, 3);
    tg_free(&t);
}

static void test_reshape_volume(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "batch,seq_len,64");
    int64_t shp[4] = {0, 0, 12, 64};
    tg_ints(&t, "target", 4, shp);
    tg_node(&t, "Reshape", "/attn/Reshape", "x,target", "y");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-reshape-volume]: node '/attn/Reshape' (Reshape): cannot reshape [batch, seq_len, 64] "
             "(64*batch*seq_len elements) into [batch, seq_len, 12, 64] (768*batch*seq_len elements)");
    HAS(txt, "input 1 'target' is [4] (initializer)");
    tg_free(&t);
}

static void test_broadcast_bias(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "batch,64");
    int64_t b[1] = {128};
    tg_weight(&t, "fc.bias", 1, b);
    tg_node(&t, "Add", "/fc/Add", "x,fc.bias", "y");
    tg_input(&t, "p", KILN_DTYPE_FLOAT, "4,5");
    tg_input(&t, "q", KILN_DTYPE_FLOAT, "3,5");
    tg_node(&t, "Mul", "/mul", "p,q", "z");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-broadcast]: node '/fc/Add' (Add): inputs 0 and 1 cannot be broadcast: axis 1 is 64 in one and 128 in the other");
    HAS(txt, "the parameter 'fc.bias' has 128 entries but the data's last axis has 64");
    HAS(txt, "error[shape-broadcast]: node '/mul' (Mul): inputs 0 and 1 cannot be broadcast: axis 0 is 4 in one and 3 in the other");
    tg_free(&t);
}

static void test_dtype_mismatch(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "batch,8");
    tg_input(&t, "ids", KILN_DTYPE_INT64, "batch,8");
    tg_node(&t, "Add", "/add", "x,ids", "y");
    tg_node(&t, "Sigmoid", "/sig", "y", "z");
    tg_input(&t, "table", KILN_DTYPE_FLOAT, "100,4");
    tg_input(&t, "fidx", KILN_DTYPE_FLOAT, "batch");
    tg_node(&t, "Gather", "/g", "table,fidx", "e");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[type-mismatch]: node '/add' (Add): inputs 0 and 1 have different element types: float32 vs int64");
    HAS(txt, "insert a Cast to float32 on input 1 ('ids')");
    HAS(txt, "error[type-mismatch]: node '/g' (Gather): Gather's indices must be int32 or int64, got float32");
    HAS(txt, ".long()");
    assert_int_equal(t.diags.n_errors, 2);
    tg_free(&t);
}

static void test_concat_split_expand(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "a", KILN_DTYPE_FLOAT, "N,16,H,W");
    tg_input(&t, "b", KILN_DTYPE_FLOAT, "N,16,32,W");
    tg_input(&t, "c", KILN_DTYPE_FLOAT, "N,8,24,W");
    int32_t n = tg_node(&t, "Concat", "/cat", "b,c", "d");
    tg_attr_i(&t, n, "axis", 1);
    tg_input(&t, "qkv", KILN_DTYPE_FLOAT, "B,S,2304");
    int64_t sp[3] = {768, 768, 700};
    tg_ints(&t, "split", 3, sp);
    n = tg_node(&t, "Split", "/split", "qkv,split", "q,k,v");
    tg_attr_i(&t, n, "axis", 2);
    int64_t tgt[2] = {4, 3};
    tg_ints(&t, "eshape", 2, tgt);
    tg_input(&t, "e", KILN_DTYPE_FLOAT, "2,3");
    tg_node(&t, "Expand", "/expand", "e,eshape", "f");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-concat]: node '/cat' (Concat): inputs 0 and 1 differ on axis 2 (32 vs 24), which is not the concat axis 1");
    HAS(txt, "error[shape-split]: node '/split' (Split): split sizes [768, 768, 700] sum to 2236 but axis 2 has size 2304");
    HAS(txt, "error[shape-expand]: node '/expand' (Expand): cannot expand axis 0 of size 2 to 4");
    (void)tg_count;
    tg_free(&t);
}

static void test_norm_params(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,64,H,W");
    int64_t p[1] = {32};
    tg_weight(&t, "bn.scale", 1, p);
    tg_weight(&t, "bn.bias", 1, p);
    tg_weight(&t, "bn.mean", 1, p);
    tg_weight(&t, "bn.var", 1, p);
    tg_node(&t, "BatchNormalization", "/bn", "x,bn.scale,bn.bias,bn.mean,bn.var", "y");
    tg_input(&t, "h", KILN_DTYPE_FLOAT, "batch,seq,768");
    int64_t lp[1] = {512};
    tg_weight(&t, "ln.w", 1, lp);
    tg_weight(&t, "ln.b", 1, lp);
    tg_node(&t, "LayerNormalization", "/ln", "h,ln.w,ln.b", "hn");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-norm-param]: node '/bn' (BatchNormalization): scale (input 1) has shape [32] but the channel axis (1) of X is 64");
    HAS(txt, "error[shape-norm-param]: node '/ln' (LayerNormalization): Scale (input 1) [512] does not match");
    HAS(txt, "LayerNorm(768)");
    tg_free(&t);
}

static void test_declared_output_conflict(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "batch,64");
    int64_t w[2] = {64, 12};
    tg_weight(&t, "w", 2, w);
    tg_node(&t, "MatMul", "/head/MatMul", "x,w", "logits");
    tg_output(&t, "logits", KILN_DTYPE_FLOAT, "batch,10");
    /* a value_info that is merely stale is a warning */
    tg_node(&t, "Relu", "/r", "x", "xr");
    tg_set_type(&t, ir_val(t.g, ir_graph_find(t.g, "xr")), KILN_DTYPE_FLOAT, "batch,65");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "error[shape-declared-conflict]: node '/head/MatMul' (MatMul): graph output 'logits' is declared float32[batch, 10] but is computed as float32[batch, 12]");
    HAS(txt, "axis 1: declared 10, computed 12");
    HAS(txt, "warning[shape-declared-conflict]: node '/r' (Relu): value 'xr' is declared float32[batch, 65]");
    assert_int_equal(t.diags.n_errors, 1);
    /* inferred types are kept */
    assert_string_equal(tg_type(&t, "logits"), "float32[batch, 12]");
    tg_free(&t);
}

static void test_unknown_ops_reported_once(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,4");
    tg_node(&t, "FancyOp", "f1", "x", "a");
    tg_node(&t, "FancyOp", "f2", "a", "b");
    tg_node(&t, "FancyOp", "f3", "b", "c");
    tg_node(&t, "OtherOp", "o1", "c", "d");
    tg_node(&t, "Relu", "r", "d", "e");
    /* a declared type after an unknown op is used */
    tg_set_type(&t, ir_val(t.g, ir_graph_find(t.g, "d")), KILN_DTYPE_FLOAT, "N,7");
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_int_equal(tg_count(&t, "infer-unknown-op"), 1);
    HAS(tg_diags(&t), "ops without shape inference: FancyOp x3, OtherOp x1");
    assert_string_equal(tg_type(&t, "e"), "float32[N, 7]");
    assert_string_equal(tg_type(&t, "a"), "?");
    tg_free(&t);
}

static void test_axis_out_of_range_and_hostile(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,4");
    int32_t n = tg_node(&t, "Softmax", "/sm", "x", "a");
    tg_attr_i(&t, n, "axis", 5);
    n = tg_node(&t, "Transpose", "/tr", "x", "b");
    int64_t perm[2] = {0, 7};
    tg_attr_ints(&t, n, "perm", 2, perm);
    n = tg_node(&t, "Concat", "/cat", "x,x", "c");
    tg_attr_i(&t, n, "axis", INT64_MIN);
    tg_input(&t, "img", KILN_DTYPE_FLOAT, "N,4,8");
    n = tg_node(&t, "MaxPool", "/pool", "img", "d");
    int64_t huge[1] = {INT64_MAX};
    tg_attr_ints(&t, n, "kernel_shape", 1, huge);
    int64_t shp[2] = {-5, 4};
    tg_ints(&t, "badshape", 2, shp);
    tg_node(&t, "Reshape", "/rs", "x,badshape", "e");
    tg_node(&t, "Gemm", "/gemm", "x", "f");
    assert_int_equal(tg_run(&t), KILN_ERR_SHAPE);
    const char *txt = tg_diags(&t);
    HAS(txt, "node '/sm' (Softmax): axis 5 is out of range for rank 2");
    HAS(txt, "node '/tr' (Transpose): perm [0, 7] is not a permutation of 0..1");
    HAS(txt, "node '/cat' (Concat): axis -9223372036854775808 is out of range");
    HAS(txt, "node '/pool' (MaxPool): 'kernel_shape' value 9223372036854775807 at index 0 is out of range");
    HAS(txt, "node '/rs' (Reshape): target dim 0 is -5");
    HAS(txt, "node '/gemm' (Gemm): Gemm needs inputs A and B");
    tg_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_inner_canonical),
        cmocka_unit_test(test_matmul_inner_through_layers),
        cmocka_unit_test(test_gemm_inner_trans),
        cmocka_unit_test(test_gemm_ok),
        cmocka_unit_test(test_conv_channels),
        cmocka_unit_test(test_conv_rank_and_attrs),
        cmocka_unit_test(test_reshape_volume),
        cmocka_unit_test(test_broadcast_bias),
        cmocka_unit_test(test_dtype_mismatch),
        cmocka_unit_test(test_concat_split_expand),
        cmocka_unit_test(test_norm_params),
        cmocka_unit_test(test_declared_output_conflict),
        cmocka_unit_test(test_unknown_ops_reported_once),
        cmocka_unit_test(test_axis_out_of_range_and_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
