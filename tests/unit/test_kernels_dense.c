/* test_kernels_dense.c - the dense CPU kernels (GEMM, MatMul, Gemm, Conv, ConvTranspose,
 * pools, norms, softmax, vector math) against straightforward reference loops written
 * here, called directly through the kernel signature (no executor), with and without a
 * thread pool so both the inline and the parallel paths run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_kernel.h"

#include "kernel_harness.h"

static float *F(rt_value *v) { return (float *)v->t.data; }

/* ---- GEMM ---------------------------------------------------------------------------- */

static void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (float)(alpha * s);
        }
}

static void test_sgemm_shapes_and_epilogue(void **st) {
    (void)st;
    int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 80, 33}, {130, 17, 70}, {3, 200, 0}};
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int e = 0; e < 4; e++) {
                bool ta = t & 1, tb = t & 2;
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                float *A = malloc(sizeof(float) * (size_t)(M * K + 1)), *B = malloc(sizeof(float) * (size_t)(K * N + 1));
                float *C = malloc(sizeof(float) * (size_t)(M * N)), *R = malloc(sizeof(float) * (size_t)(M * N));
                float *res = malloc(sizeof(float) * (size_t)(M * N)), *bias = malloc(sizeof(float) * (size_t)(M + N));
                for (int64_t i = 0; i < M * K; i++) A[i] = frand();
                for (int64_t i = 0; i < K * N; i++) B[i] = frand();
                for (int64_t i = 0; i < M * N; i++) res[i] = frand();
                for (int64_t i = 0; i < M + N; i++) bias[i] = frand();
                for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* beta = 0 must ignore garbage */
                cpu_epilogue ep;
                memset(&ep, 0, sizeof ep);
                if (e == 1) {
                    ep.bias_mode = CPU_BIAS_ROW;
                    ep.bias = bias;
                    ep.act.kind = CPU_ACT_RELU;
                } else if (e == 2) {
                    ep.bias_mode = CPU_BIAS_COL;
                    ep.bias = bias;
                    ep.residual = res;
                    ep.ld_res = N;
                    ep.act.kind = CPU_ACT_CLIP;
                    ep.act.a = -0.5f;
                    ep.act.b = 0.25f;
                } else if (e == 3) {
                    ep.act.kind = CPU_ACT_SIGMOID;
                }
                cpu_sgemm(test_pool, ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, 0.f, C, N, &ep);
                ref_gemm(ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, R, N);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        float v = R[i * N + j];
                        if (e == 1) v = fmaxf(v + bias[i], 0.f);
                        if (e == 2) v = fminf(fmaxf(v + bias[j] + res[i * N + j], -0.5f), 0.25f);
                        if (e == 3) v = 1.f / (1.f + expf(-v));
                        R[i * N + j] = v;
                    }
                expect_close(C, R, (uint64_t)(M * N), 1e-4f);
                free(A);
                free(B);
                free(C);
                free(R);
                free(res);
                free(bias);
            }
}

/* ---- MatMul / Gemm ------------------------------------------------------------------- */

static void check_matmul(int32_t ra, const int64_t *da, int32_t rb, const int64_t *db, int32_t ry, const int64_t *dy) {
    rt_value in[2], out[1];
    mk(&in[0], ra, da);
    mk(&in[1], rb, db);
    rt_value_init(&out[0]);
    kiln_error err = {0};
    assert_int_equal(run_op("MatMul", 13, NULL, 0, in, 2, out, 1, &err), KILN_OK);
    assert_int_equal(out[0].t.rank, ry);
    for (int32_t i = 0; i < ry; i++) assert_int_equal(out[0].t.dims[i], dy[i]);
    /* reference: numpy semantics on padded shapes */
    int64_t M = ra == 1 ? 1 : da[ra - 2], K = da[ra - 1], N = rb == 1 ? 1 : db[rb - 1];
    int32_t br = (ra > 2 ? ra - 2 : 0) > (rb > 2 ? rb - 2 : 0) ? ra - 2 : (rb > 2 ? rb - 2 : 0);
    int64_t nb = 1, bd[8];
    for (int32_t i = 0; i < br; i++) {
        bd[i] = dy[i];
        nb *= dy[i];
    }
    float *want = malloc(sizeof(float) * (size_t)(nb * M * N + 1));
    for (int64_t t = 0; t < nb; t++) {
        int64_t oa = 0, ob = 0, rem = t, sa = 1, sb = 1;
        for (int32_t i = br - 1; i >= 0; i--) {
            int64_t idx = rem % bd[i];
            rem /= bd[i];
            int32_t ia = i - (br - (ra - 2)), ib = i - (br - (rb - 2));
            int64_t dA = ia >= 0 && ra > 2 ? da[ia] : 1, dB = ib >= 0 && rb > 2 ? db[ib] : 1;
            oa += (dA == 1 ? 0 : idx) * sa;
            ob += (dB == 1 ? 0 : idx) * sb;
            sa *= dA;
            sb *= dB;
        }
        ref_gemm(false, false, M, N, K, 1.f, F(&in[0]) + oa * M * K, K, F(&in[1]) + ob * K * N, N, want + t * M * N, N);
    }
    expect_close(F(&out[0]), want, out[0].t.count, 1e-4f);
    free(want);
    rt_value_release(&in[0]);
    rt_value_release(&in[1]);
    rt_value_release(&out[0]);
}

static void test_matmul_broadcast(void **st) {
    (void)st;
    check_matmul(3, (int64_t[]){2, 5, 7}, 2, (int64_t[]){7, 3}, 3, (int64_t[]){2, 5, 3});
    check_matmul(4, (int64_t[]){2, 1, 4, 6}, 3, (int64_t[]){3, 6, 5}, 4, (int64_t[]){2, 3, 4, 5});
    check_matmul(2, (int64_t[]){4, 6}, 3, (int64_t[]){3, 6, 5}, 3, (int64_t[]){3, 4, 5});
    check_matmul(1, (int64_t[]){6}, 2, (int64_t[]){6, 5}, 1, (int64_t[]){5});
    check_matmul(2, (int64_t[]){4, 6}, 1, (int64_t[]){6}, 1, (int64_t[]){4});
    check_matmul(1, (int64_t[]){6}, 1, (int64_t[]){6}, 0, NULL);
    check_matmul(3, (int64_t[]){1, 128, 96}, 2, (int64_t[]){96, 160}, 3, (int64_t[]){1, 128, 160});
}

static void test_matmul_errors(void **st) {
    (void)st;
    rt_value in[2], out[1];
    mk(&in[0], 2, (int64_t[]){3, 64});
    mk(&in[1], 2, (int64_t[]){128, 4});
    rt_value_init(&out[0]);
    kiln_error err = {0};
    assert_int_equal(run_op("MatMul", 13, NULL, 0, in, 2, out, 1, &err), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_err_msg(&err), "64"));
    assert_non_null(strstr(kiln_err_msg(&err), "128"));
    assert_non_null(strstr(kiln_err_msg(&err), "test_node"));
    kiln_err_clear(&err);
    for (int i = 0; i < 2; i++) rt_value_release(&in[i]);
    rt_value_release(&out[0]);
}

/* A float16 MatMul that carries fused marks (the FP16 pass retypes fused GEMMs to half)
 * must apply them: bias + Relu through the float32 detour, equal to doing it by hand. */
static void half_tensor(rt_value *v, int32_t rank, const int64_t *dims, float *vals) {
    rt_value_init(v);
    rt_tensor *t = rt_value_as_tensor(v);
    kiln_error err = {0};
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT16, rank, dims, &err), KILN_OK);
    for (uint64_t i = 0; i < t->count; i++) {
        uint16_t h = kiln_fp32_to_fp16(frand());
        ((uint16_t *)t->data)[i] = h;
        vals[i] = kiln_fp16_to_fp32(h);
    }
}

static void test_matmul_half_fused_marks(void **st) {
    (void)st;
    enum { M = 3, K = 5, N = 4 };
    float a[M * K], b[K * N], bias[N];
    rt_value in[3], out[1];
    half_tensor(&in[0], 2, (int64_t[]){M, K}, a);
    half_tensor(&in[1], 2, (int64_t[]){K, N}, b);
    half_tensor(&in[2], 1, (int64_t[]){N}, bias);
    rt_value_init(&out[0]);
    ir_attr attrs[2] = {a_int("kiln_bias", 2), a_str("kiln_activation", "Relu")};
    kiln_error err = {0};
    assert_int_equal(run_op("MatMul", 13, attrs, 2, in, 3, out, 1, &err), KILN_OK);
    const rt_tensor *y = &out[0].t;
    assert_int_equal(y->dtype, KILN_DTYPE_FLOAT16);
    int negatives = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = bias[j];
            for (int k = 0; k < K; k++) acc += a[i * K + k] * b[k * N + j];
            if (acc < 0) negatives++;
            float want = acc > 0 ? acc : 0, got = kiln_fp16_to_fp32(((const uint16_t *)y->data)[i * N + j]);
            if (fabsf(got - want) > 2e-3f * (1.f + fabsf(want))) fail_msg("y[%d,%d] = %g, want %g", i, j, got, want);
        }
    assert_true(negatives > 0); /* the Relu was exercised */
    for (int i = 0; i < 3; i++) rt_value_release(&in[i]);
    rt_value_release(&out[0]);
}

static void test_gemm_attrs(void **st) {
    (void)st;
    /* every combination of transA/transB and C shapes */
    int64_t M = 5, N = 7, K = 4;
    int64_t cshapes[][2] = {{0, 0}, {1, 1}, {1, 7}, {5, 1}, {5, 7}};
    int cranks[] = {-1, 0, 1, 2, 2};
    for (int t = 0; t < 4; t++)
        for (int c = 0; c < 5; c++) {
            bool ta = t & 1, tb = t & 2;
            rt_value in[3], out[1];
            mk(&in[0], 2, ta ? (int64_t[]){K, M} : (int64_t[]){M, K});
            mk(&in[1], 2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N});
            int32_t crank = cranks[c];
            if (crank < 0) rt_value_init(&in[2]);
            else if (crank == 0) mk(&in[2], 0, NULL);
            else if (crank == 1) mk(&in[2], 1, &cshapes[c][1]);
            else mk(&in[2], 2, cshapes[c]);
            rt_value_init(&out[0]);
            ir_attr at[4] = {a_int("transA", ta), a_int("transB", tb), a_float("alpha", 0.75f), a_float("beta", 1.5f)};
            kiln_error err = {0};
            assert_int_equal(run_op("Gemm", 13, at, 4, in, 3, out, 1, &err), KILN_OK);
            float want[35];
            ref_gemm(ta, tb, M, N, K, 0.75f, F(&in[0]), ta ? M : K, F(&in[1]), tb ? K : N, want, N);
            if (crank >= 0) {
                int64_t cm = crank == 2 ? cshapes[c][0] : 1, cn = crank >= 1 ? cshapes[c][1] : 1;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++)
                        want[i * N + j] += 1.5f * F(&in[2])[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
            }
            expect_close(F(&out[0]), want, (uint64_t)(M * N), 1e-5f);
            for (int i = 0; i < 3; i++) rt_value_release(&in[i]);
            rt_value_release(&out[0]);
        }
}

/* ---- Conv ---------------------------------------------------------------------------- */

typedef struct conv_case {
    int32_t nsp;
    int64_t N, C, M, group;
    int64_t in[3], k[3], s[3], d[3], p[6];
    const char *auto_pad;
} conv_case;

/* Direct N-D convolution with explicit pads. */
static void ref_conv(const conv_case *c, const int64_t *out, const float *X, const float *W, const float *B,
                     float *Y) {
    int64_t Cg = c->C / c->group, Mg = c->M / c->group, os = 1, is = 1, ks = 1;
    for (int32_t i = 0; i < c->nsp; i++) {
        os *= out[i];
        is *= c->in[i];
        ks *= c->k[i];
    }
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t o = 0; o < os; o++) {
                int64_t oc[3], rem = o;
                for (int32_t i = c->nsp - 1; i >= 0; i--) {
                    oc[i] = rem % out[i];
                    rem /= out[i];
                }
                double acc = B ? B[m] : 0;
                int64_t g = m / Mg;
                for (int64_t ci = 0; ci < Cg; ci++)
                    for (int64_t kp = 0; kp < ks; kp++) {
                        int64_t kc[3], r2 = kp, off = 0;
                        bool ok = true;
                        for (int32_t i = c->nsp - 1; i >= 0; i--) {
                            kc[i] = r2 % c->k[i];
                            r2 /= c->k[i];
                        }
                        for (int32_t i = 0; i < c->nsp; i++) {
                            int64_t ii = oc[i] * c->s[i] - c->p[i] + kc[i] * c->d[i];
                            if (ii < 0 || ii >= c->in[i]) ok = false;
                            off = off * c->in[i] + ii;
                        }
                        if (!ok) continue;
                        acc += (double)X[((n * c->C) + g * Cg + ci) * is + off] * W[(m * Cg + ci) * ks + kp];
                    }
                Y[(n * c->M + m) * os + o] = (float)acc;
            }
}

static void check_conv(const conv_case *c, bool fuse) {
    rt_value in[4], out[1];
    int64_t xd[5] = {c->N, c->C}, wd[5] = {c->M, c->C / c->group};
    for (int32_t i = 0; i < c->nsp; i++) {
        xd[2 + i] = c->in[i];
        wd[2 + i] = c->k[i];
    }
    mk(&in[0], 2 + c->nsp, xd);
    mk(&in[1], 2 + c->nsp, wd);
    mk(&in[2], 1, &c->M);
    int64_t out_sp[3], yd[5] = {c->N, c->M};
    for (int32_t i = 0; i < c->nsp; i++) {
        int64_t ek = (c->k[i] - 1) * c->d[i] + 1;
        out_sp[i] = (c->in[i] + c->p[i] + c->p[i + c->nsp] - ek) / c->s[i] + 1;
        yd[2 + i] = out_sp[i];
    }
    mk(&in[3], 2 + c->nsp, yd); /* residual for the fused case */
    rt_value_init(&out[0]);
    int64_t ks[3], ss[3], ds[3], ps[6];
    memcpy(ks, c->k, sizeof ks);
    memcpy(ss, c->s, sizeof ss);
    memcpy(ds, c->d, sizeof ds);
    memcpy(ps, c->p, sizeof ps);
    ir_attr at[8];
    int32_t na = 0;
    at[na++] = a_ints("kernel_shape", c->nsp, ks);
    at[na++] = a_ints("strides", c->nsp, ss);
    at[na++] = a_ints("dilations", c->nsp, ds);
    at[na++] = a_int("group", c->group);
    if (c->auto_pad) at[na++] = a_str("auto_pad", c->auto_pad);
    else at[na++] = a_ints("pads", 2 * c->nsp, ps);
    if (fuse) {
        at[na++] = a_str("kiln_activation", "Relu");
        at[na++] = a_int("kiln_residual", 3);
    }
    kiln_error err = {0};
    kiln_status s = run_op("Conv", 17, at, na, in, fuse ? 4 : 3, out, 1, &err);
    if (s != KILN_OK) fail_msg("Conv failed: %s", kiln_err_msg(&err));
    for (int32_t i = 0; i < 2 + c->nsp; i++) assert_int_equal(out[0].t.dims[i], yd[i]);
    float *want = malloc(out[0].t.nbytes);
    ref_conv(c, out_sp, F(&in[0]), F(&in[1]), F(&in[2]), want);
    if (fuse)
        for (uint64_t i = 0; i < out[0].t.count; i++) want[i] = fmaxf(want[i] + F(&in[3])[i], 0.f);
    expect_close(F(&out[0]), want, out[0].t.count, 1e-4f);
    free(want);
    for (int i = 0; i < 4; i++) rt_value_release(&in[i]);
    rt_value_release(&out[0]);
}

static void test_conv_variants(void **st) {
    (void)st;
    conv_case cases[] = {
        /* nsp N  C  M  g  in          k          s          d          pads */
        {2, 1, 8, 16, 1, {9, 9}, {1, 1}, {1, 1}, {1, 1}, {0}, NULL},               /* pointwise */
        {2, 2, 3, 4, 1, {11, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},     /* 3x3 pad 1 */
        {2, 1, 4, 6, 1, {12, 12}, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}, NULL},     /* stem-like */
        {2, 1, 6, 6, 2, {8, 9}, {3, 2}, {2, 1}, {2, 1}, {2, 0, 1, 1}, NULL},       /* groups + dilation */
        {2, 2, 8, 8, 8, {10, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},     /* depthwise */
        {2, 1, 8, 8, 8, {11, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL},     /* depthwise s2 */
        {2, 1, 8, 8, 8, {9, 9}, {5, 5}, {1, 2}, {2, 1}, {2, 1, 3, 0}, NULL},       /* depthwise odd */
        {2, 2, 4, 4, 4, {37, 40}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL},     /* depthwise s2, vector rows */
        /* large planes: many 8-row strips (cpu_conv_dw8_avx2), the last one partial */
        {2, 1, 3, 3, 3, {60, 61}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},     /* depthwise, 60 rows */
        {2, 1, 2, 2, 2, {121, 122}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL},   /* depthwise s2, 61 rows */
        {2, 1, 4, 4, 4, {33, 35}, {3, 3}, {2, 2}, {2, 2}, {2, 2, 2, 2}, NULL},     /* depthwise s2, dilated */
        /* a partial last group of 8 channels */
        {2, 2, 12, 12, 12, {14, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL},  /* depthwise 8 + 4 ch, s2 */
        {2, 1, 20, 20, 20, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},    /* depthwise 8 + 8 + 4 ch */
        {2, 1, 4, 8, 1, {10, 10}, {1, 1}, {2, 2}, {1, 1}, {0}, NULL},              /* 1x1 stride 2 */
        {1, 2, 3, 5, 1, {17}, {4}, {2}, {2}, {1, 2}, NULL},                       /* 1-D */
        {3, 1, 2, 3, 1, {5, 6, 4}, {3, 2, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 1, 1, 0}, NULL}, /* 3-D */
        {2, 1, 3, 4, 1, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 0, 1, 1}, "SAME_UPPER"}, /* extra pad at the end */
        {2, 1, 3, 4, 1, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 0}, "SAME_LOWER"},
        {2, 1, 3, 4, 1, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {0, 0, 0, 0}, "VALID"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_conv(&cases[i], false);
        check_conv(&cases[i], true);
    }
}

static void test_conv_errors(void **st) {
    (void)st;
    rt_value in[2], out[1];
    mk(&in[0], 4, (int64_t[]){1, 6, 5, 5});
    mk(&in[1], 4, (int64_t[]){4, 4, 3, 3}); /* needs 6/group channels */
    rt_value_init(&out[0]);
    kiln_error err = {0};
    assert_int_equal(run_op("Conv", 17, NULL, 0, in, 2, out, 1, &err), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_err_msg(&err), "group"));
    kiln_err_clear(&err);
    rt_value_release(&in[1]);
    mk(&in[1], 4, (int64_t[]){4, 6, 7, 7}); /* kernel larger than the input */
    assert_int_equal(run_op("Conv", 17, NULL, 0, in, 2, out, 1, &err), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_err_msg(&err), "kernel"));
    kiln_err_clear(&err);
    for (int i = 0; i < 2; i++) rt_value_release(&in[i]);
    rt_value_release(&out[0]);
    /* hostile strides and pads (a depthwise conv: its scratch sizes come from them) are
     * refused, not turned into overflowing extents */
    mk(&in[0], 4, (int64_t[]){1, 8, 4, 4});
    mk(&in[1], 4, (int64_t[]){8, 1, 3, 3});
    int64_t big_s[2] = {(int64_t)1 << 40, 1}, big_p[4] = {(int64_t)1 << 50, 0, (int64_t)1 << 50, 0};
    ir_attr at[3] = {a_ints("strides", 2, big_s), a_ints("pads", 4, big_p), a_int("group", 8)};
    rt_value_init(&out[0]);
    assert_int_equal(run_op("Conv", 17, at, 3, in, 2, out, 1, &err), KILN_ERR_INVALID_MODEL);
    assert_non_null(strstr(kiln_err_msg(&err), "below 2^31"));
    kiln_err_clear(&err);
    for (int i = 0; i < 2; i++) rt_value_release(&in[i]);
    rt_value_release(&out[0]);
}

/* ConvTranspose against its definition: every input element scatters W into Y. */
static void test_conv_transpose(void **st) {
    (void)st;
    int64_t N = 1, C = 4, M = 3, g = 1, H = 4, W = 5, k = 3, s = 2, p0 = 1, p1 = 0, op = 1;
    for (int gg = 1; gg <= 2; gg++) {
        g = gg;
        C = 4;
        M = 3 * g;
        rt_value in[3], out[1];
        mk(&in[0], 4, (int64_t[]){N, C, H, W});
        mk(&in[1], 4, (int64_t[]){C, M / g, k, k});
        mk(&in[2], 1, &M);
        rt_value_init(&out[0]);
        int64_t strides[2] = {s, s}, pads[4] = {p0, p0, p1, p1}, opad[2] = {op, op};
        ir_attr at[4] = {a_ints("strides", 2, strides), a_ints("pads", 4, pads), a_ints("output_padding", 2, opad),
                         a_int("group", g)};
        kiln_error err = {0};
        kiln_status r = run_op("ConvTranspose", 11, at, 4, in, 3, out, 1, &err);
        if (r != KILN_OK) fail_msg("%s", kiln_err_msg(&err));
        int64_t OH = s * (H - 1) + op + k - p0 - p1, OW = s * (W - 1) + op + k - p0 - p1;
        assert_int_equal(out[0].t.dims[2], OH);
        assert_int_equal(out[0].t.dims[3], OW);
        float *want = calloc((size_t)(N * M * OH * OW), sizeof(float));
        int64_t Cg = C / g, Mg = M / g;
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    for (int64_t mm = 0; mm < Mg; mm++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                int64_t oh = h * s + kh - p0, ow = w * s + kw - p0;
                                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                                int64_t m = (c / Cg) * Mg + mm;
                                want[(m * OH + oh) * OW + ow] +=
                                    F(&in[0])[(c * H + h) * W + w] * F(&in[1])[((c * Mg + mm) * k + kh) * k + kw];
                            }
        for (int64_t m = 0; m < M; m++)
            for (int64_t i = 0; i < OH * OW; i++) want[m * OH * OW + i] += F(&in[2])[m];
        expect_close(F(&out[0]), want, out[0].t.count, 1e-4f);
        free(want);
        for (int i = 0; i < 3; i++) rt_value_release(&in[i]);
        rt_value_release(&out[0]);
    }
}

/* ---- pools --------------------------------------------------------------------------- */

static void test_maxpool_indices_ceil(void **st) {
    (void)st;
    /* 1x1x4x4 ramp, 3x3 windows, stride 2, ceil_mode: output 2x2 (last window clipped) */
    rt_value in[1], out[2];
    mk(&in[0], 4, (int64_t[]){1, 1, 4, 4});
    for (int i = 0; i < 16; i++) F(&in[0])[i] = (float)i;
    F(&in[0])[5] = 100.f;
    rt_value_init(&out[0]);
    rt_value_init(&out[1]);
    int64_t k[2] = {3, 3}, s[2] = {2, 2};
    ir_attr at[3] = {a_ints("kernel_shape", 2, k), a_ints("strides", 2, s), a_int("ceil_mode", 1)};
    kiln_error err = {0};
    assert_int_equal(run_op("MaxPool", 12, at, 3, in, 1, out, 2, &err), KILN_OK);
    assert_int_equal(out[0].t.dims[2], 2);
    assert_int_equal(out[0].t.dims[3], 2);
    float want[4] = {100.f, 11.f, 14.f, 15.f}; /* windows rows/cols {0..2}/{0..2}, {0..2}/{2,3}, ... */
    int64_t want_i[4] = {5, 11, 14, 15};
    expect_close(F(&out[0]), want, 4, 0.f);
    assert_memory_equal(out[1].t.data, want_i, sizeof want_i);
    /* storage_order = 1: column-major index of (h=1, w=1) is 1*4+1 = 5, of (3,3) is 15;
     * use (h=0,w=2) as the max instead to see the difference */
    F(&in[0])[5] = 0.f;
    F(&in[0])[2] = 200.f;
    rt_value_release(&out[0]);
    rt_value_release(&out[1]);
    ir_attr at2[4] = {a_ints("kernel_shape", 2, k), a_ints("strides", 2, s), a_int("ceil_mode", 1),
                      a_int("storage_order", 1)};
    assert_int_equal(run_op("MaxPool", 12, at2, 4, in, 1, out, 2, &err), KILN_OK);
    assert_int_equal(((int64_t *)out[1].t.data)[0], 2 * 4 + 0); /* w*H + h */
    rt_value_release(&in[0]);
    rt_value_release(&out[0]);
    rt_value_release(&out[1]);
}

static void test_avgpool_pad_counting(void **st) {
    (void)st;
    rt_value in[1], out[1];
    mk(&in[0], 4, (int64_t[]){1, 1, 3, 3});
    for (int i = 0; i < 9; i++) F(&in[0])[i] = 1.f;
    int64_t k[2] = {2, 2}, p[4] = {1, 1, 1, 1}, s[2] = {2, 2};
    for (int inc = 0; inc < 2; inc++) {
        rt_value_init(&out[0]);
        ir_attr at[4] = {a_ints("kernel_shape", 2, k), a_ints("pads", 4, p), a_ints("strides", 2, s),
                         a_int("count_include_pad", inc)};
        kiln_error err = {0};
        assert_int_equal(run_op("AveragePool", 19, at, 4, in, 1, out, 1, &err), KILN_OK);
        assert_int_equal(out[0].t.count, 4);
        /* corner window covers 1 real element of 4 positions */
        assert_true(fabsf(F(&out[0])[0] - (inc ? 0.25f : 1.f)) < 1e-6f);
        rt_value_release(&out[0]);
    }
    rt_value_init(&out[0]);
    assert_int_equal(run_op("GlobalAveragePool", 1, NULL, 0, in, 1, out, 1, &(kiln_error){0}), KILN_OK);
    assert_int_equal(out[0].t.rank, 4);
    assert_true(fabsf(F(&out[0])[0] - 1.f) < 1e-6f);
    rt_value_release(&out[0]);
    rt_value_release(&in[0]);
}

/* ---- norms and softmax --------------------------------------------------------------- */

static void test_layernorm_outputs(void **st) {
    (void)st;
    rt_value in[3], out[3];
    mk(&in[0], 3, (int64_t[]){2, 3, 16});
    mk(&in[1], 1, (int64_t[]){16});
    mk(&in[2], 1, (int64_t[]){16});
    for (int i = 0; i < 3; i++) rt_value_init(&out[i]);
    ir_attr at[2] = {a_int("axis", -1), a_float("epsilon", 1e-3f)};
    kiln_error err = {0};
    assert_int_equal(run_op("LayerNormalization", 17, at, 2, in, 3, out, 3, &err), KILN_OK);
    assert_int_equal(out[1].t.rank, 3);
    assert_int_equal(out[1].t.dims[2], 1);
    for (int r = 0; r < 6; r++) {
        const float *x = F(&in[0]) + r * 16;
        double m = 0, v = 0;
        for (int i = 0; i < 16; i++) m += x[i];
        m /= 16;
        for (int i = 0; i < 16; i++) v += (x[i] - m) * (x[i] - m);
        v /= 16;
        float inv = (float)(1 / sqrt(v + 1e-3));
        assert_true(fabsf(F(&out[1])[r] - (float)m) < 1e-5f);
        assert_true(fabsf(F(&out[2])[r] - inv) < 1e-4f * inv);
        for (int i = 0; i < 16; i++) {
            float want = (float)((x[i] - m) * inv) * F(&in[1])[i] + F(&in[2])[i];
            assert_true(fabsf(F(&out[0])[r * 16 + i] - want) < 1e-4f);
        }
    }
    for (int i = 0; i < 3; i++) {
        rt_value_release(&in[i]);
        rt_value_release(&out[i]);
    }
}

static void test_batchnorm(void **st) {
    (void)st;
    rt_value in[5], out[1];
    mk(&in[0], 4, (int64_t[]){2, 3, 2, 2});
    for (int i = 1; i < 5; i++) mk(&in[i], 1, (int64_t[]){3});
    for (int i = 0; i < 3; i++) F(&in[4])[i] = fabsf(F(&in[4])[i]) + 0.1f;
    rt_value_init(&out[0]);
    kiln_error err = {0};
    assert_int_equal(run_op("BatchNormalization", 15, NULL, 0, in, 5, out, 1, &err), KILN_OK);
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 4; i++) {
                int idx = (n * 3 + c) * 4 + i;
                float want = (F(&in[0])[idx] - F(&in[3])[c]) / sqrtf(F(&in[4])[c] + 1e-5f) * F(&in[1])[c] + F(&in[2])[c];
                assert_true(fabsf(F(&out[0])[idx] - want) < 1e-5f);
            }
    for (int i = 0; i < 5; i++) rt_value_release(&in[i]);
    rt_value_release(&out[0]);
}

static void test_softmax_opsets(void **st) {
    (void)st;
    rt_value in[1], out[1];
    mk(&in[0], 3, (int64_t[]){2, 3, 4});
    for (int legacy = 0; legacy < 2; legacy++) {
        rt_value_init(&out[0]);
        ir_attr at[1] = {a_int("axis", 1)};
        kiln_error err = {0};
        assert_int_equal(run_op("Softmax", legacy ? 11 : 13, at, 1, in, 1, out, 1, &err), KILN_OK);
        /* opset 11: sums over the flattened [3*4] block are 1; opset 13: sums over axis 1 */
        for (int n = 0; n < 2; n++) {
            if (legacy) {
                double s = 0;
                for (int i = 0; i < 12; i++) s += F(&out[0])[n * 12 + i];
                assert_true(fabs(s - 1) < 1e-5);
            } else {
                for (int k = 0; k < 4; k++) {
                    double s = 0;
                    for (int c = 0; c < 3; c++) s += F(&out[0])[(n * 3 + c) * 4 + k];
                    assert_true(fabs(s - 1) < 1e-5);
                }
            }
        }
        rt_value_release(&out[0]);
    }
    /* LogSoftmax last axis = log of softmax */
    rt_value_init(&out[0]);
    assert_int_equal(run_op("LogSoftmax", 13, NULL, 0, in, 1, out, 1, &(kiln_error){0}), KILN_OK);
    for (int r = 0; r < 6; r++) {
        double s = 0;
        for (int i = 0; i < 4; i++) s += exp(F(&out[0])[r * 4 + i]);
        assert_true(fabs(s - 1) < 1e-5);
    }
    rt_value_release(&out[0]);
    rt_value_release(&in[0]);
}

/* ---- vector math --------------------------------------------------------------------- */

static void test_vmath_accuracy(void **st) {
    (void)st;
    uint32_t f = cpu_features();
    const cpu_vmath *tables[2] = {cpu_vmath_scalar(), (f & CPU_FEATURE_AVX2) && (f & CPU_FEATURE_FMA) ? cpu_vmath_avx2() : NULL};
    enum { NV = 4001 };
    static float x[NV], y[NV];
    for (int i = 0; i < NV; i++) x[i] = -20.f + 40.f * (float)i / (NV - 1);
    for (int t = 0; t < 2; t++) {
        if (!tables[t]) {
            print_message("AVX2+FMA not available: only the scalar table is checked\n");
            continue;
        }
        const cpu_vmath *vm = tables[t];
        vm->exp(x, y, NV);
        for (int i = 0; i < NV; i++) assert_true(fabsf(y[i] - expf(x[i])) <= 1e-6f * expf(x[i]));
        vm->tanh(x, y, NV);
        for (int i = 0; i < NV; i++) assert_true(fabsf(y[i] - tanhf(x[i])) <= 1e-6f);
        vm->erf(x, y, NV);
        for (int i = 0; i < NV; i++) assert_true(fabsf(y[i] - erff(x[i])) <= 5e-7f);
        vm->sigmoid(x, y, NV);
        for (int i = 0; i < NV; i++) assert_true(fabsf(y[i] - 1.f / (1.f + expf(-x[i]))) <= 1e-6f);
        vm->gelu(x, y, NV);
        for (int i = 0; i < NV; i++)
            assert_true(fabsf(y[i] - 0.5f * x[i] * (1.f + erff(x[i] / sqrtf(2.f)))) <= 1e-5f * (1.f + fabsf(x[i])));
        float big[3] = {-1000.f, -INFINITY, 0.f}, out3[3];
        vm->exp(big, out3, 3);
        assert_true(out3[0] == 0.f && out3[1] == 0.f && out3[2] == 1.f);
    }
}

/* ---- groups: inline, then with a 2-thread pool --------------------------------------- */

static int use_pool(void **st) {
    (void)st;
    kiln_error err = {0};
    return cpu_threadpool_create(2, &test_pool, &err) == KILN_OK ? 0 : -1;
}
static int drop_pool(void **st) {
    (void)st;
    cpu_threadpool_free(test_pool);
    test_pool = NULL;
    return 0;
}

#define DENSE_TESTS                                         \
    cmocka_unit_test(test_sgemm_shapes_and_epilogue),       \
        cmocka_unit_test(test_matmul_broadcast),            \
        cmocka_unit_test(test_matmul_errors),               \
        cmocka_unit_test(test_matmul_half_fused_marks),     \
        cmocka_unit_test(test_gemm_attrs),                  \
        cmocka_unit_test(test_conv_variants),               \
        cmocka_unit_test(test_conv_errors),                 \
        cmocka_unit_test(test_conv_transpose),              \
        cmocka_unit_test(test_maxpool_indices_ceil),        \
        cmocka_unit_test(test_avgpool_pad_counting),        \
        cmocka_unit_test(test_layernorm_outputs),           \
        cmocka_unit_test(test_batchnorm),                   \
        cmocka_unit_test(test_softmax_opsets),              \
        cmocka_unit_test(test_vmath_accuracy)

int main(void) {
    const struct CMUnitTest inline_tests[] = {DENSE_TESTS};
    const struct CMUnitTest pooled_tests[] = {DENSE_TESTS};
    int fails = cmocka_run_group_tests_name("dense kernels, inline", inline_tests, NULL, NULL);
    fails += cmocka_run_group_tests_name("dense kernels, 2-thread pool", pooled_tests, use_pool, drop_pool);
    return fails;
}
