/* test_kernels_dense2.c - the kern-dense2 CPU kernels (Einsum, Attention,
 * RotaryEmbedding, Resize, Quantize/DequantizeLinear, RNN, DFT, GridSample) called
 * directly through the kernel signature against reference loops written here, plus the
 * clean failures on bad shapes and attributes; with and without a thread pool. The
 * harness (run_op runs each kernel twice to exercise per-node state) mirrors
 * test_kernels_dense.c. Broad numeric coverage against ONNX Runtime lives in
 * tests/ops/test_ops_dense2.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"

#include "kernel_harness.h"

static void mk_data(rt_value *v, kiln_dtype dt, int32_t rank, const int64_t *dims, const void *data) {
    rt_value_init(v);
    rt_tensor *t = rt_value_as_tensor(v);
    kiln_error err = {0};
    assert_int_equal(rt_tensor_alloc(t, dt, rank, dims, &err), KILN_OK);
    if (t->nbytes) memcpy(t->data, data, (size_t)t->nbytes);
}

static void release_all(rt_value *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) rt_value_release(&v[i]);
}

/* ---- Einsum ------------------------------------------------------------------------- */

static void test_einsum_matmul_and_diagonal(void **s) {
    (void)s;
    int64_t da[2] = {3, 4}, db[2] = {4, 5};
    rt_value in[2], out[1];
    mk(&in[0], 2, da);
    mk(&in[1], 2, db);
    rt_value_init(&out[0]);
    kiln_error err = {0};
    ir_attr eq = a_str("equation", "ij,jk->ik");
    assert_int_equal(run_op("Einsum", 12, &eq, 1, in, 2, out, 1, &err), KILN_OK);
    const float *A = in[0].t.data, *B = in[1].t.data;
    float want[15];
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++) {
            float acc = 0;
            for (int j = 0; j < 4; j++) acc += A[i * 4 + j] * B[j * 5 + k];
            want[i * 5 + k] = acc;
        }
    assert_int_equal(out[0].t.rank, 2);
    expect_close(out[0].t.data, want, 15, 1e-5f);
    rt_value_release(&out[0]);
    /* implicit output of a square matrix's diagonal sum-free form: "ii->i" */
    int64_t dd[2] = {4, 4};
    rt_value sq[1];
    mk(&sq[0], 2, dd);
    ir_attr eq2 = a_str("equation", "ii->i");
    assert_int_equal(run_op("Einsum", 12, &eq2, 1, sq, 1, out, 1, &err), KILN_OK);
    const float *S = sq[0].t.data;
    float diag[4] = {S[0], S[5], S[10], S[15]};
    expect_close(out[0].t.data, diag, 4, 1e-6f);
    rt_value_release(&out[0]);
    /* a label with two sizes and a bad character are clean errors */
    ir_attr eq3 = a_str("equation", "ij,ij->i");
    assert_int_equal(run_op("Einsum", 12, &eq3, 1, in, 2, out, 1, &err), KILN_ERR_SHAPE);
    ir_attr eq4 = a_str("equation", "i$,jk->ik");
    assert_int_equal(run_op("Einsum", 12, &eq4, 1, in, 2, out, 1, &err), KILN_ERR_INVALID_MODEL);
    release_all(in, 2);
    release_all(sq, 1);
    release_all(out, 1);
    kiln_err_clear(&err);
}

/* ---- Attention ---------------------------------------------------------------------- */

static void test_attention_causal_matches_reference(void **s) {
    (void)s;
    enum { B = 1, H = 2, S = 3, D = 4 };
    int64_t d[4] = {B, H, S, D};
    rt_value in[3], out[1];
    for (int i = 0; i < 3; i++) mk(&in[i], 4, d);
    rt_value_init(&out[0]);
    kiln_error err = {0};
    ir_attr at = a_int("is_causal", 1);
    assert_int_equal(run_op("Attention", 23, &at, 1, in, 3, out, 1, &err), KILN_OK);
    const float *q = in[0].t.data, *k = in[1].t.data, *v = in[2].t.data;
    float want[B * H * S * D];
    for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++) {
            float sc[S], mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                float acc = 0;
                for (int e = 0; e < D; e++) acc += q[(h * S + i) * D + e] * k[(h * S + j) * D + e];
                sc[j] = acc / 2.f; /* 1/sqrt(4) */
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j <= i; j++) sum += sc[j] = expf(sc[j] - mx);
            for (int e = 0; e < D; e++) {
                float acc = 0;
                for (int j = 0; j <= i; j++) acc += sc[j] / sum * v[(h * S + j) * D + e];
                want[(h * S + i) * D + e] = acc;
            }
        }
    expect_close(out[0].t.data, want, B * H * S * D, 1e-5f);
    release_all(out, 1);
    /* 3 query heads over 2 kv heads is not a GQA grouping */
    int64_t dq[4] = {B, 3, S, D};
    rt_value_release(&in[0]);
    mk(&in[0], 4, dq);
    assert_int_equal(run_op("Attention", 23, NULL, 0, in, 3, out, 1, &err), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_err_msg(&err), "multiple of kv heads"));
    release_all(in, 3);
    release_all(out, 1);
    kiln_err_clear(&err);
}

static void test_rotary_rejects_bad_position(void **s) {
    (void)s;
    int64_t dx[4] = {1, 1, 2, 4}, dc[2] = {3, 2}, dp[2] = {1, 2};
    int64_t pos[2] = {0, 7};
    rt_value in[4], out[1];
    mk(&in[0], 4, dx);
    mk(&in[1], 2, dc);
    mk(&in[2], 2, dc);
    mk_data(&in[3], KILN_DTYPE_INT64, 2, dp, pos);
    rt_value_init(&out[0]);
    kiln_error err = {0};
    assert_int_equal(run_op("RotaryEmbedding", 23, NULL, 0, in, 4, out, 1, &err), KILN_ERR_INVALID_MODEL);
    assert_non_null(strstr(kiln_err_msg(&err), "outside the cache"));
    release_all(in, 4);
    release_all(out, 1);
    kiln_err_clear(&err);
}

/* ---- Resize ------------------------------------------------------------------------- */

static void test_resize_nearest_and_errors(void **s) {
    (void)s;
    int64_t dx[4] = {1, 1, 2, 2}, ds[1] = {4};
    float xv[4] = {1, 2, 3, 4}, sc[4] = {1, 1, 2, 2};
    rt_value in[3], out[1];
    mk_data(&in[0], KILN_DTYPE_FLOAT, 4, dx, xv);
    rt_value_init(&in[1]); /* roi absent */
    mk_data(&in[2], KILN_DTYPE_FLOAT, 1, ds, sc);
    rt_value_init(&out[0]);
    kiln_error err = {0};
    ir_attr at[2] = {a_str("mode", "nearest"), a_str("coordinate_transformation_mode", "asymmetric")};
    assert_int_equal(run_op("Resize", 13, at, 2, in, 3, out, 1, &err), KILN_OK);
    float want[16] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
    assert_int_equal(out[0].t.count, 16);
    expect_close(out[0].t.data, want, 16, 0);
    release_all(out, 1);
    /* neither scales nor sizes */
    assert_int_equal(run_op("Resize", 13, at, 2, in, 2, out, 1, &err), KILN_ERR_INVALID_MODEL);
    ir_attr bad = a_str("mode", "quartic");
    assert_int_equal(run_op("Resize", 13, &bad, 1, in, 3, out, 1, &err), KILN_ERR_INVALID_MODEL);
    release_all(in, 3);
    release_all(out, 1);
    kiln_err_clear(&err);
}

/* ---- quantization ------------------------------------------------------------------- */

static void test_quant_roundtrip_and_blocked_shape(void **s) {
    (void)s;
    int64_t dx[2] = {2, 3}, ds[1] = {3};
    float xv[6] = {0.5f, -1.f, 2.f, 100.f, -100.f, 0.25f}, sv[3] = {0.5f, 0.25f, 1.f};
    int8_t zv[3] = {0, 2, -1};
    rt_value in[3], out[1], deq[1];
    mk_data(&in[0], KILN_DTYPE_FLOAT, 2, dx, xv);
    mk_data(&in[1], KILN_DTYPE_FLOAT, 1, ds, sv);
    mk_data(&in[2], KILN_DTYPE_INT8, 1, ds, zv);
    rt_value_init(&out[0]);
    rt_value_init(&deq[0]);
    kiln_error err = {0};
    ir_attr ax = a_int("axis", 1);
    assert_int_equal(run_op("QuantizeLinear", 13, &ax, 1, in, 3, out, 1, &err), KILN_OK);
    /* 0.5/0.5=1; -1/0.25=-4+2=-2; 2/1=2-1=1; 100/0.5=200 -> 127; -100/.25=-400+2 -> -128; 0.25/1 -> 0-1=-1 */
    const int8_t want[6] = {1, -2, 1, 127, -128, -1};
    assert_memory_equal(out[0].t.data, want, 6);
    rt_value dq_in[3];
    dq_in[0] = out[0];
    dq_in[1] = in[1];
    dq_in[2] = in[2];
    assert_int_equal(run_op("DequantizeLinear", 13, &ax, 1, dq_in, 3, deq, 1, &err), KILN_OK);
    const float back[6] = {0.5f, -1.f, 2.f, 63.5f, -32.5f, 0.f};
    expect_close(deq[0].t.data, back, 6, 0);
    /* blocked with a scale of the wrong shape */
    ir_attr blk[2] = {a_int("axis", 1), a_int("block_size", 2)};
    assert_int_equal(run_op("QuantizeLinear", 21, blk, 2, in, 2, deq, 1, &err), KILN_ERR_SHAPE);
    release_all(in, 3);
    release_all(out, 1);
    release_all(deq, 1);
    kiln_err_clear(&err);
}

/* ---- RNN ---------------------------------------------------------------------------- */

static void test_rnn_forward_matches_loop(void **s) {
    (void)s;
    enum { S = 3, B = 2, I = 2, H = 3 };
    int64_t dx[3] = {S, B, I}, dw[3] = {1, H, I}, dr[3] = {1, H, H};
    rt_value in[3], out[2];
    mk(&in[0], 3, dx);
    mk(&in[1], 3, dw);
    mk(&in[2], 3, dr);
    rt_value_init(&out[0]);
    rt_value_init(&out[1]);
    kiln_error err = {0};
    ir_attr hs = a_int("hidden_size", H);
    assert_int_equal(run_op("RNN", 14, &hs, 1, in, 3, out, 2, &err), KILN_OK);
    const float *X = in[0].t.data, *W = in[1].t.data, *R = in[2].t.data;
    float h[B][H] = {{0}}, want[S * B * H];
    for (int t = 0; t < S; t++) {
        float nh[B][H];
        for (int b = 0; b < B; b++)
            for (int k = 0; k < H; k++) {
                float acc = 0;
                for (int i = 0; i < I; i++) acc += X[(t * B + b) * I + i] * W[k * I + i];
                for (int j = 0; j < H; j++) acc += h[b][j] * R[k * H + j];
                nh[b][k] = tanhf(acc);
                want[(t * B + b) * H + k] = nh[b][k];
            }
        memcpy(h, nh, sizeof h);
    }
    expect_close(out[0].t.data, want, S * B * H, 1e-5f);
    expect_close(out[1].t.data, want + (S - 1) * B * H, B * H, 1e-5f);
    release_all(out, 2);
    /* W of the wrong size */
    ir_attr hs2 = a_int("hidden_size", H + 1);
    assert_int_equal(run_op("RNN", 14, &hs2, 1, in, 3, out, 2, &err), KILN_ERR_SHAPE);
    release_all(in, 3);
    release_all(out, 2);
    kiln_err_clear(&err);
}

/* ---- DFT / GridSample ---------------------------------------------------------------- */

static void test_dft_impulse_is_flat(void **s) {
    (void)s;
    int64_t dx[3] = {1, 5, 1};
    float xv[5] = {1, 0, 0, 0, 0};
    rt_value in[1], out[1];
    mk_data(&in[0], KILN_DTYPE_FLOAT, 3, dx, xv);
    rt_value_init(&out[0]);
    kiln_error err = {0};
    assert_int_equal(run_op("DFT", 17, NULL, 0, in, 1, out, 1, &err), KILN_OK);
    float want[10] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
    expect_close(out[0].t.data, want, 10, 1e-6f);
    release_all(in, 1);
    release_all(out, 1);
    kiln_err_clear(&err);
}

static void test_gridsample_identity_grid(void **s) {
    (void)s;
    int64_t dx[4] = {1, 2, 3, 4}, dg[4] = {1, 3, 4, 2};
    rt_value in[2], out[1];
    mk(&in[0], 4, dx);
    float grid[24];
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) {
            grid[(y * 4 + x) * 2] = -1.f + 2.f * (float)x / 3.f;
            grid[(y * 4 + x) * 2 + 1] = -1.f + 2.f * (float)y / 2.f;
        }
    mk_data(&in[1], KILN_DTYPE_FLOAT, 4, dg, grid);
    rt_value_init(&out[0]);
    kiln_error err = {0};
    const char *modes[3] = {"nearest", "linear", "cubic"};
    for (int m = 0; m < 3; m++) {
        ir_attr at[2] = {a_int("align_corners", 1), a_str("mode", modes[m])};
        assert_int_equal(run_op("GridSample", 20, at, 2, in, 2, out, 1, &err), KILN_OK);
        expect_close(out[0].t.data, in[0].t.data, 24, 1e-5f);
        release_all(out, 1);
    }
    release_all(in, 2);
    kiln_err_clear(&err);
}

#define DENSE2_TESTS                                          \
    cmocka_unit_test(test_einsum_matmul_and_diagonal),        \
        cmocka_unit_test(test_attention_causal_matches_reference), \
        cmocka_unit_test(test_rotary_rejects_bad_position),   \
        cmocka_unit_test(test_resize_nearest_and_errors),     \
        cmocka_unit_test(test_quant_roundtrip_and_blocked_shape), \
        cmocka_unit_test(test_rnn_forward_matches_loop),      \
        cmocka_unit_test(test_dft_impulse_is_flat),           \
        cmocka_unit_test(test_gridsample_identity_grid)

static int use_pool(void **s) {
    (void)s;
    kiln_error err = {0};
    return cpu_threadpool_create(2, &test_pool, &err) == KILN_OK ? 0 : -1;
}
static int drop_pool(void **s) {
    (void)s;
    cpu_threadpool_free(test_pool);
    test_pool = NULL;
    return 0;
}

int main(void) {
    const struct CMUnitTest inline_tests[] = {DENSE2_TESTS};
    const struct CMUnitTest pool_tests[] = {DENSE2_TESTS};
    int rc = cmocka_run_group_tests_name("dense2 kernels, no pool", inline_tests, NULL, NULL);
    rc |= cmocka_run_group_tests_name("dense2 kernels, 2-thread pool", pool_tests, use_pool, drop_pool);
    return rc;
}
