/* test_infer_ops.c - per-family inference on hand-built graphs: shape subgraphs of
 * exported transformers resolving symbolically, conv/pool formulas, reductions, RNNs,
 * control flow and data-dependent dims, and re-running with other input shapes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "infer_test_util.h"

/* torch.onnx's multi-head split: Shape -> Gather -> Unsqueeze -> Concat -> Reshape. */
static void test_shape_subgraph_reshape(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "hidden", KILN_DTYPE_FLOAT, "batch,seq_len,768");
    tg_node(&t, "Shape", "/attn/Shape", "hidden", "shp");
    tg_scalar_i64(&t, "c0", 0);
    tg_scalar_i64(&t, "c1", 1);
    tg_node(&t, "Gather", "/attn/Gather", "shp,c0", "b");
    tg_node(&t, "Gather", "/attn/Gather_1", "shp,c1", "s");
    int64_t ax0[1] = {0};
    tg_ints(&t, "axes0", 1, ax0);
    tg_node(&t, "Unsqueeze", "/attn/Unsqueeze", "b,axes0", "bu");
    tg_node(&t, "Unsqueeze", "/attn/Unsqueeze_1", "s,axes0", "su");
    int64_t heads[2] = {12, 64};
    tg_ints(&t, "hd", 2, heads);
    int32_t n = tg_node(&t, "Concat", "/attn/Concat", "bu,su,hd", "target");
    tg_attr_i(&t, n, "axis", 0);
    tg_node(&t, "Reshape", "/attn/Reshape", "hidden,target", "heads");
    n = tg_node(&t, "Transpose", "/attn/Transpose", "heads", "ht");
    int64_t perm[4] = {0, 2, 1, 3};
    tg_attr_ints(&t, n, "perm", 4, perm);
    /* and back: Reshape with -1 merges heads: batch*seq_len*768 / (batch*seq_len) */
    int64_t back[3] = {0, 0, -1};
    tg_ints(&t, "back", 3, back);
    tg_node(&t, "Reshape", "/attn/Reshape_back", "heads,back", "merged");
    /* flatten tokens: [-1, 768] gives batch*seq_len */
    int64_t flat[2] = {-1, 768};
    tg_ints(&t, "flat", 2, flat);
    tg_node(&t, "Reshape", "/attn/Reshape_flat", "hidden,flat", "tokens");
    /* element count via Size and ReduceProd stay symbolic */
    tg_node(&t, "ReduceProd", "/rp", "shp", "count");
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_int_equal(t.diags.n, 0);
    assert_string_equal(tg_type(&t, "heads"), "float32[batch, seq_len, 12, 64]");
    assert_string_equal(tg_type(&t, "ht"), "float32[batch, 12, seq_len, 64]");
    assert_string_equal(tg_type(&t, "merged"), "float32[batch, seq_len, 768]");
    assert_string_equal(tg_type(&t, "tokens"), "float32[batch*seq_len, 768]");
    assert_string_equal(tg_type(&t, "target"), "int64[4]");
    tg_free(&t);
}

/* GPT-2 style position ids and causal mask: Range(0, seq_len) and Slice by Shape values. */
static void test_range_slice_expand_where(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "ids", KILN_DTYPE_INT64, "batch,seq_len");
    tg_node(&t, "Shape", "/Shape", "ids", "shp");
    tg_scalar_i64(&t, "one", 1);
    tg_scalar_i64(&t, "zero", 0);
    tg_node(&t, "Gather", "/Gather", "shp,one", "sl");
    tg_node(&t, "Range", "/Range", "zero,sl,one", "pos");
    int64_t mask_dims[4] = {1, 1, 1024, 1024};
    tg_init_t(&t, "bias", KILN_DTYPE_BOOL, 4, mask_dims, NULL, 0);
    int64_t st[1] = {0}, ax[1] = {2};
    tg_ints(&t, "st", 1, st);
    tg_ints(&t, "ax", 1, ax);
    int64_t zax[1] = {0};
    tg_ints(&t, "zax", 1, zax);
    tg_node(&t, "Unsqueeze", "/Unsq", "sl,zax", "slu");
    tg_node(&t, "Slice", "/Slice", "bias,st,slu,ax", "mask");
    /* Expand position ids to [batch, seq_len] with the Shape value */
    tg_node(&t, "Expand", "/Expand", "pos,shp", "pos2");
    /* negative-index slicing of a shape: shp[-1:] */
    int64_t m1[1] = {-1}, big[1] = {INT64_MAX};
    tg_ints(&t, "m1", 1, m1);
    tg_ints(&t, "big", 1, big);
    tg_node(&t, "Slice", "/SliceShape", "shp,m1,big", "last");
    tg_node(&t, "ConstantOfShape", "/Zeros", "shp", "zeros");
    tg_node(&t, "Equal", "/Eq", "shp,shp", "same");
    tg_input(&t, "scores", KILN_DTYPE_FLOAT, "batch,12,seq_len,seq_len");
    tg_input(&t, "neg", KILN_DTYPE_FLOAT, "");
    tg_node(&t, "Where", "/Where", "mask,scores,neg", "masked");
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_string_equal(tg_type(&t, "pos"), "int64[seq_len]");
    assert_string_equal(tg_type(&t, "mask"), "bool[1, 1, seq_len, 1024]");
    assert_string_equal(tg_type(&t, "pos2"), "int64[batch, seq_len]");
    assert_string_equal(tg_type(&t, "last"), "int64[1]");
    assert_string_equal(tg_type(&t, "zeros"), "float32[batch, seq_len]");
    assert_string_equal(tg_type(&t, "same"), "bool[2]");
    assert_string_equal(tg_type(&t, "masked"), "float32[batch, 12, seq_len, 1024]");
    tg_free(&t);
}

static void test_conv_pool_resnet_stem(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,3,224,224");
    int64_t w[4] = {64, 3, 7, 7};
    tg_weight(&t, "w", 4, w);
    int32_t n = tg_node(&t, "Conv", "/conv1", "x,w", "c");
    int64_t p3[4] = {3, 3, 3, 3}, s2[2] = {2, 2}, k3[2] = {3, 3}, p1[4] = {1, 1, 1, 1};
    tg_attr_ints(&t, n, "pads", 4, p3);
    tg_attr_ints(&t, n, "strides", 2, s2);
    n = tg_node(&t, "MaxPool", "/pool", "c", "p");
    tg_attr_ints(&t, n, "kernel_shape", 2, k3);
    tg_attr_ints(&t, n, "strides", 2, s2);
    tg_attr_ints(&t, n, "pads", 4, p1);
    n = tg_node(&t, "AveragePool", "/avg", "p", "a");
    tg_attr_ints(&t, n, "kernel_shape", 2, k3);
    tg_attr_ints(&t, n, "strides", 2, s2);
    tg_attr_i(&t, n, "ceil_mode", 1);
    tg_node(&t, "GlobalAveragePool", "/gap", "a", "g");
    n = tg_node(&t, "Flatten", "/flat", "g", "f");
    /* depthwise conv: group = channels */
    int64_t dw[4] = {64, 1, 3, 3};
    tg_weight(&t, "dw", 4, dw);
    n = tg_node(&t, "Conv", "/dw", "p,dw", "d");
    tg_attr_i(&t, n, "group", 64);
    tg_attr_s(&t, n, "auto_pad", "SAME_UPPER");
    /* transposed conv doubles */
    int64_t tw[4] = {64, 32, 4, 4};
    tg_weight(&t, "tw", 4, tw);
    n = tg_node(&t, "ConvTranspose", "/up", "p,tw", "u");
    tg_attr_ints(&t, n, "strides", 2, s2);
    tg_attr_ints(&t, n, "pads", 4, p1);
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_string_equal(tg_type(&t, "c"), "float32[N, 64, 112, 112]");
    assert_string_equal(tg_type(&t, "p"), "float32[N, 64, 56, 56]");
    assert_string_equal(tg_type(&t, "a"), "float32[N, 64, 28, 28]");
    assert_string_equal(tg_type(&t, "f"), "float32[N, 64]");
    assert_string_equal(tg_type(&t, "d"), "float32[N, 64, 56, 56]");
    assert_string_equal(tg_type(&t, "u"), "float32[N, 32, 112, 112]");
    tg_free(&t);
}

static void test_reinfer_with_input_shapes(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "N,3,H,W");
    int64_t w[4] = {8, 3, 3, 3};
    tg_weight(&t, "w", 4, w);
    int32_t n = tg_node(&t, "Conv", "/c", "x,w", "y");
    int64_t s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
    tg_attr_ints(&t, n, "strides", 2, s2);
    tg_attr_ints(&t, n, "pads", 4, p1);
    tg_output(&t, "y", KILN_DTYPE_FLOAT, "N,8,?,?");
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_string_equal(tg_type(&t, "y"), "float32[N, 8, (H+1)/2, (W+1)/2]");
    int64_t dims[4] = {2, 3, 65, 64};
    ir_input_shape is = {"x", 4, dims};
    ir_infer_options o = {&is, 1, false};
    kiln_error err = {0};
    assert_int_equal(ir_infer(t.m, &o, &t.diags, &err), KILN_OK);
    assert_string_equal(tg_type(&t, "y"), "float32[2, 8, 33, 32]");
    /* and back to the declared symbols */
    assert_int_equal(ir_infer(t.m, NULL, &t.diags, &err), KILN_OK);
    assert_string_equal(tg_type(&t, "x"), "float32[N, 3, H, W]");
    assert_string_equal(tg_type(&t, "y"), "float32[N, 8, (H+1)/2, (W+1)/2]");
    /* a too-small input is an error naming the window */
    int64_t tiny[4] = {1, 3, 1, 0};
    is.dims = tiny;
    assert_int_equal(ir_infer(t.m, &o, &t.diags, &err), KILN_ERR_SHAPE);
    kiln_err_clear(&err);
    tg_free(&t);
}

static void test_reduce_rnn_topk_nonzero(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "x", KILN_DTYPE_FLOAT, "batch,seq,256");
    int64_t ax[1] = {-1};
    tg_ints(&t, "ax", 1, ax);
    int32_t n = tg_node(&t, "ReduceMean", "/rm", "x,ax", "m");
    tg_attr_i(&t, n, "keepdims", 0);
    n = tg_node(&t, "ReduceSum", "/rs_old", "x", "s");
    tg_attr_ints(&t, n, "axes", 1, ax);
    int64_t w[3] = {2, 512, 256}, r[3] = {2, 512, 128};
    tg_weight(&t, "W", 3, w);
    tg_weight(&t, "R", 3, r);
    n = tg_node(&t, "LSTM", "/lstm", "x,W,R", "Y,Yh,Yc");
    tg_attr_s(&t, n, "direction", "bidirectional");
    tg_attr_i(&t, n, "hidden_size", 128);
    tg_attr_i(&t, n, "layout", 1);
    int64_t k[1] = {5};
    tg_ints(&t, "k", 1, k);
    tg_node(&t, "TopK", "/topk", "x,k", "tv,ti");
    tg_node(&t, "NonZero", "/nz", "x", "nzi");
    tg_node(&t, "ArgMax", "/am", "x", "amx");
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_string_equal(tg_type(&t, "m"), "float32[batch, seq]");
    assert_string_equal(tg_type(&t, "s"), "float32[batch, seq, 1]");
    assert_string_equal(tg_type(&t, "Y"), "float32[batch, seq, 2, 128]");
    assert_string_equal(tg_type(&t, "Yh"), "float32[batch, 2, 128]");
    assert_string_equal(tg_type(&t, "Yc"), "float32[batch, 2, 128]");
    assert_string_equal(tg_type(&t, "tv"), "float32[batch, seq, 5]");
    assert_string_equal(tg_type(&t, "ti"), "int64[batch, seq, 5]");
    assert_string_equal(tg_type(&t, "nzi"), "int64[3, /nz.count]");
    assert_string_equal(tg_type(&t, "amx"), "int64[1, seq, 256]");
    tg_free(&t);
}

static void test_matmul_batched_and_einsum(void **state) {
    (void)state;
    tg t;
    tg_init(&t);
    tg_input(&t, "q", KILN_DTYPE_FLOAT, "batch,12,seq,64");
    tg_input(&t, "k", KILN_DTYPE_FLOAT, "batch,12,64,seq");
    tg_node(&t, "MatMul", "/qk", "q,k", "s");
    tg_input(&t, "v", KILN_DTYPE_FLOAT, "64");
    tg_node(&t, "MatMul", "/qv", "q,v", "qv");
    tg_input(&t, "w", KILN_DTYPE_FLOAT, "1,64,32");
    tg_node(&t, "MatMul", "/qw", "q,w", "qw");
    int32_t n = tg_node(&t, "Einsum", "/ein", "q,k", "e");
    tg_attr_s(&t, n, "equation", "bhid,bhdj->bhij");
    n = tg_node(&t, "Einsum", "/ein2", "q", "e2");
    tg_attr_s(&t, n, "equation", "...ij->...ji");
    assert_int_equal(tg_run(&t), KILN_OK);
    assert_string_equal(tg_type(&t, "s"), "float32[batch, 12, seq, seq]");
    assert_string_equal(tg_type(&t, "qv"), "float32[batch, 12, seq]");
    assert_string_equal(tg_type(&t, "qw"), "float32[batch, 12, seq, 32]");
    assert_string_equal(tg_type(&t, "e"), "float32[batch, 12, seq, seq]");
    assert_string_equal(tg_type(&t, "e2"), "float32[batch, 12, 64, seq]");
    tg_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_subgraph_reshape), cmocka_unit_test(test_range_slice_expand_where),
        cmocka_unit_test(test_conv_pool_resnet_stem),  cmocka_unit_test(test_reinfer_with_input_shapes),
        cmocka_unit_test(test_reduce_rnn_topk_nonzero), cmocka_unit_test(test_matmul_batched_and_einsum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
