/* test_conv_p16.c - 1x1 convolutions with P16 inputs, outputs and residuals (the layout
 * the CPU layout pass picks between 1x1 convs; cpu_gemm_packed.h defines it).
 *
 * Every combination of P16 X / Y / residual must give the NCHW result, on the direct path
 * (packed weights, cpu_sgemm_conv1x1: B read in place, tiles written as P16 blocks) and on
 * the fallback that converts (no node state, or weights that are not constant), with
 * M tails, several k-blocks, the per-task B packing of large images, batch 2 and 1-3
 * threads. A shape that cannot be P16 is refused with an error, never read out of bounds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_kernel.h"
#include "kernel_harness.h"

/* Runs a 1x1 Conv (bias, residual input 3, Relu) with kiln_p16 = p16 (0: attribute absent).
 * direct: node state and constant weights (the P16 fast path); otherwise neither, which
 * sends a marked node through the converting fallback. Runs it twice (kernel_harness.h:
 * the second run reuses the packed weights and must agree). Returns the status. */
static kiln_status run_conv(cpu_threadpool *pool, int64_t p16, bool direct, const rt_value *x, const rt_value *w,
                            const rt_value *b, const rt_value *res, rt_value *y, kiln_error *err) {
    ir_attr attrs[3] = {a_int("kiln_residual", 3), a_str("kiln_activation", "Relu"), a_int("kiln_p16", p16)};
    rt_value in[4] = {*x, *w, *b, *res}; /* shallow copies: run_op_with only reads them */
    test_pool = pool;
    rt_value_init(y);
    return run_op_with("Conv", 17, attrs, p16 ? 3 : 2, in, 4, y, 1, direct, direct, err);
}

/* dst = P16 copy of the row-major tensor src ([N, C, H, W] per image). */
static void to_p16(const rt_value *src, rt_value *dst) {
    mk(dst, src->t.rank, src->t.dims);
    int64_t n = src->t.dims[2] * src->t.dims[3], rows = src->t.dims[1];
    for (int64_t i = 0; i < src->t.dims[0]; i++)
        cpu_p16_from_rows((const float *)src->t.data + i * rows * n, rows, n, (float *)dst->t.data + i * rows * n);
}

static float max_rel_diff(const float *a, const float *b, uint64_t count) {
    float worst = 0;
    for (uint64_t i = 0; i < count; i++) {
        float d = fabsf(a[i] - b[i]) / (1.f + fabsf(b[i]));
        if (!(d <= worst)) worst = d; /* NaN counts as worst */
    }
    return worst;
}

static void test_p16_layout_helpers(void **state) {
    (void)state;
    enum { ROWS = 3, N = 32 };
    float src[ROWS * N], p16[ROWS * N], back[ROWS * N];
    for (int i = 0; i < ROWS * N; i++) src[i] = (float)i;
    cpu_p16_from_rows(src, ROWS, N, p16);
    /* element (r, n) at (n / 16) * 16 * rows + r * 16 + n % 16 */
    for (int r = 0; r < ROWS; r++)
        for (int n = 0; n < N; n++) assert_true(p16[(n / 16) * 16 * ROWS + r * 16 + n % 16] == src[r * N + n]);
    cpu_p16_to_rows(p16, ROWS, N, back);
    assert_memory_equal(back, src, sizeof src);
}

static void check_shape(cpu_threadpool *pool, int64_t batch, int64_t C, int64_t H, int64_t W, int64_t M) {
    rt_value x, w, b, res, ref;
    mk(&x, 4, (int64_t[]){batch, C, H, W});
    mk(&w, 4, (int64_t[]){M, C, 1, 1});
    mk(&b, 1, (int64_t[]){M});
    mk(&res, 4, (int64_t[]){batch, M, H, W});
    kiln_error err = {0};
    assert_int_equal(run_conv(pool, 0, true, &x, &w, &b, &res, &ref, &err), KILN_OK);
    rt_value xp, rp;
    to_p16(&x, &xp);
    to_p16(&res, &rp);
    for (int64_t bits = 1; bits < 8; bits++)
        for (int direct = 0; direct < 2; direct++) {
            rt_value y, yrows;
            kiln_status st = run_conv(pool, bits, direct, (bits & CPU_CONV_P16_X) ? &xp : &x, &w, &b,
                                      (bits & CPU_CONV_P16_RES) ? &rp : &res, &y, &err);
            if (st != KILN_OK) fail_msg("p16=%lld direct=%d failed: %s", (long long)bits, direct, kiln_err_msg(&err));
            const float *got = y.t.data;
            if (bits & CPU_CONV_P16_Y) {
                mk(&yrows, 4, y.t.dims);
                int64_t n = H * W;
                for (int64_t i = 0; i < batch; i++)
                    cpu_p16_to_rows((const float *)y.t.data + i * M * n, M, n, (float *)yrows.t.data + i * M * n);
                got = yrows.t.data;
            }
            float d = max_rel_diff(got, ref.t.data, ref.t.count);
            if (d > 1e-5f)
                fail_msg("N=%lld C=%lld %lldx%lld M=%lld p16=%lld direct=%d: differs from NCHW by %g", (long long)batch,
                         (long long)C, (long long)H, (long long)W, (long long)M, (long long)bits, direct, (double)d);
            if (bits & CPU_CONV_P16_Y) rt_value_release(&yrows);
            rt_value_release(&y);
        }
    rt_value_release(&x);
    rt_value_release(&w);
    rt_value_release(&b);
    rt_value_release(&res);
    rt_value_release(&ref);
    rt_value_release(&xp);
    rt_value_release(&rp);
}

static void run_shapes(cpu_threadpool *pool) {
    check_shape(pool, 2, 64, 8, 8, 70);    /* batch 2, M tail of 4 rows, one k-block */
    check_shape(pool, 1, 96, 28, 28, 128); /* 49 panels: a partial last column block */
    check_shape(pool, 1, 520, 4, 8, 40);   /* K = 520: two k-blocks (accumulating tiles) */
    check_shape(pool, 1, 64, 56, 56, 64);  /* large image: B packed per task, streaming stores */
    check_shape(pool, 1, 13, 4, 4, 7);     /* one panel, one partial A panel, odd K */
}

static void test_conv_p16_matches_nchw(void **state) {
    (void)state;
    if (!cpu_gemm_packed_supported()) {
        printf("note: no AVX2+FMA here; only the converting fallback runs\n");
    }
    run_shapes(NULL);
    for (int threads = 2; threads <= 3; threads++) {
        cpu_threadpool *pool = NULL;
        kiln_error err = {0};
        assert_int_equal(cpu_threadpool_create(threads, &pool, &err), KILN_OK);
        run_shapes(pool);
        cpu_threadpool_free(pool);
    }
}

/* A marked tensor whose positions are not a multiple of 16 cannot be P16: an engine edited
 * by hand must get an error, not a read past the buffer. */
static void test_conv_p16_bad_shape_refused(void **state) {
    (void)state;
    rt_value x, w, b, res, y;
    mk(&x, 4, (int64_t[]){1, 8, 5, 4});
    mk(&w, 4, (int64_t[]){8, 8, 1, 1});
    mk(&b, 1, (int64_t[]){8});
    mk(&res, 4, (int64_t[]){1, 8, 5, 4});
    for (int direct = 0; direct < 2; direct++) {
        kiln_error err = {0};
        kiln_status st = run_conv(NULL, CPU_CONV_P16_X | CPU_CONV_P16_Y, direct, &x, &w, &b, &res, &y, &err);
        assert_int_equal(st, KILN_ERR_INVALID_MODEL);
        assert_non_null(strstr(kiln_err_msg(&err), "P16"));
        kiln_err_clear(&err);
        rt_value_release(&y);
    }
    rt_value_release(&x);
    rt_value_release(&w);
    rt_value_release(&b);
    rt_value_release(&res);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p16_layout_helpers),
        cmocka_unit_test(test_conv_p16_matches_nchw),
        cmocka_unit_test(test_conv_p16_bad_shape_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
