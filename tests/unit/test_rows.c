/* test_rows.c - the row kernels behind LayerNormalization/RMSNormalization and Softmax
 * (backends/cpu/cpu_rows.h): both tables (portable and AVX2 when present) against a
 * double-precision reference, NaN and -inf handling of the row max, and the threaded
 * LayerNormalization / Softmax / Add ops giving bit-identical results at 1 and 2 threads,
 * and the tiled 2-D Transpose path (cpu_elem_util.c) against index arithmetic.
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

#include "backends/cpu/cpu_rows.h"
#include "runtime/session.h"

#include "graph_builder.h"

#define S(...) ((const char *const[]){__VA_ARGS__})

static uint32_t rng = 2024;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.f - 1.f;
}

static void check_norm_table(const cpu_rows *t, const char *name) {
    static const int64_t lens[] = {1, 7, 8, 9, 64, 768, 1001};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int rms = 0; rms < 2; rms++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                int64_t n = lens[li];
                float *x = malloc((size_t)n * 4), *sc = malloc((size_t)n * 4), *b = malloc((size_t)n * 4),
                      *y = malloc((size_t)n * 4);
                assert_true(x && sc && b && y);
                /* an offset mean makes E[x^2] - mean^2 cancel: the two-pass variance must not */
                for (int64_t i = 0; i < n; i++) x[i] = 100.f + frand(), sc[i] = 1.f + frand(), b[i] = frand();
                float m, inv;
                t->norm_row(x, sc, with_bias ? b : NULL, y, n, 1e-5f, rms, &m, &inv);
                double s = 0, s2 = 0;
                for (int64_t i = 0; i < n; i++) s += x[i];
                double mean = rms ? 0 : s / (double)n;
                for (int64_t i = 0; i < n; i++) s2 += ((double)x[i] - mean) * ((double)x[i] - mean);
                double rinv = 1.0 / sqrt(s2 / (double)n + 1e-5);
                assert_true(fabs(m - mean) <= 1e-6 * fabs(mean) + 1e-30);
                if (!(fabs(inv - rinv) <= 1e-5 * rinv))
                    fail_msg("%s n=%lld rms=%d: inv %.9g, reference %.9g", name, (long long)n, rms, (double)inv, rinv);
                for (int64_t i = 0; i < n; i++) {
                    double r = ((double)x[i] - mean) * rinv * sc[i] + (with_bias ? b[i] : 0.0);
                    /* (x - mean) in float loses up to ulp(100) / |x - mean| relative */
                    double tol = 1e-5 * (fabs(r) + fabs(sc[i]) * rinv * (rms ? 100.0 : 1.0)) + 1e-6;
                    if (!(fabs(y[i] - r) <= tol))
                        fail_msg("%s n=%lld rms=%d y[%lld] = %.9g, reference %.9g", name, (long long)n, rms,
                                 (long long)i, (double)y[i], r);
                }
                free(x);
                free(sc);
                free(b);
                free(y);
            }
}

static void check_max_table(const cpu_rows *t, const char *name) {
    float x[40];
    for (int n = 1; n <= 40; n++) {
        for (int i = 0; i < n; i++) x[i] = frand();
        int at = (n * 7) % n;
        x[at] = 5.f;
        if (n > 2) x[(at + 1) % n] = NAN; /* skipped, as the scalar `if (v > max)` loop does */
        if (t->max(x, n) != 5.f) fail_msg("%s max over %d floats: %g", name, n, (double)t->max(x, n));
        for (int i = 0; i < n; i++) x[i] = -INFINITY;
        assert_true(isinf(t->max(x, n)) && t->max(x, n) < 0);
    }
}

static void test_row_kernels(void **state) {
    (void)state;
    check_norm_table(cpu_rows_scalar(), "scalar");
    check_max_table(cpu_rows_scalar(), "scalar");
    const cpu_rows *t = cpu_rows_get();
    if (t == cpu_rows_scalar()) {
        printf("no AVX2+FMA here: only the portable row kernels were checked\n");
        return;
    }
    check_norm_table(t, "avx2");
    check_max_table(t, "avx2");
}

/* ---- ops at 1 and 2 threads ---------------------------------------------------------- */

static float *run_threads(ir_model *m, int threads, const char *const *names, rt_value *const *vals, int n_in) {
    rt_session_options o = rt_session_options_default();
    o.threads = threads;
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    rt_value out;
    st = rt_session_run(s, names, (const rt_value *const *)vals, n_in, &out, &e);
    if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    float *y = malloc(out.t.count * sizeof(float));
    assert_non_null(y);
    memcpy(y, out.t.data, out.t.count * sizeof(float));
    rt_value_release(&out);
    rt_session_free(s);
    return y;
}

static void fill(rt_value *v, int rank, const int64_t *dims, float offset) {
    rt_value_init(v);
    kiln_error e = {0};
    rt_tensor *t = rt_value_as_tensor(v);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &e), KILN_OK);
    for (uint64_t i = 0; i < t->count; i++) ((float *)t->data)[i] = offset + 3.f * frand();
}

typedef ir_model *(*model_fn)(void);

static ir_model *ln_model(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x", "s", "b"), 3, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){128, 768}, NULL);
    set_type(g, "s", KILN_DTYPE_FLOAT, 1, (int64_t[]){768}, NULL);
    set_type(g, "b", KILN_DTYPE_FLOAT, 1, (int64_t[]){768}, NULL);
    add_node(g, "LayerNormalization", "ln", S("x", "s", "b"), 3, S("y"), 1);
    return m;
}

static ir_model *softmax_model(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x", "s", "b"), 3, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){12, 128, 128}, NULL);
    set_type(g, "s", KILN_DTYPE_FLOAT, 1, (int64_t[]){128}, NULL);
    set_type(g, "b", KILN_DTYPE_FLOAT, 1, (int64_t[]){128}, NULL);
    /* scores + mask (broadcast Add), then Softmax: BERT's attention middle */
    add_node(g, "Add", "mask", S("x", "s"), 2, S("xm"), 1);
    add_node(g, "Softmax", "sm", S("xm"), 1, S("y"), 1);
    return m;
}

static void same_at_1_and_2_threads(model_fn make, int rank, const int64_t *dims, int64_t row) {
    rt_value x, s, b;
    fill(&x, rank, dims, 0.5f);
    fill(&s, 1, &row, 1.f);
    fill(&b, 1, &row, 0.f);
    rt_value *vals[] = {&x, &s, &b};
    uint64_t n = x.t.count;
    ir_model *m1 = make(), *m2 = make();
    float *y1 = run_threads(m1, 1, S("x", "s", "b"), vals, 3);
    float *y2 = run_threads(m2, 2, S("x", "s", "b"), vals, 3);
    assert_memory_equal(y1, y2, n * sizeof(float));
    for (uint64_t i = 0; i < n; i++) assert_true(isfinite(y1[i]));
    free(y1);
    free(y2);
    ir_model_free(m1);
    ir_model_free(m2);
    rt_value_release(&x);
    rt_value_release(&s);
    rt_value_release(&b);
}

static void test_threads_identical(void **state) {
    (void)state;
    same_at_1_and_2_threads(ln_model, 2, (int64_t[]){128, 768}, 768);
    same_at_1_and_2_threads(softmax_model, 3, (int64_t[]){12, 128, 128}, 128);
}

/* Transpose through the tiled 2-D path (cpu_elem_util.c): edge tiles (13, 21 are not
 * multiples of 8) and BERT's key transpose, against index arithmetic, at 1 and 2 threads. */
static ir_model *transpose_model(const int64_t *dims) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 4, dims, NULL);
    ir_node *n = add_node(g, "Transpose", "t", S("x"), 1, S("y"), 1);
    ir_attr *a = add_attrs(g, n, 1);
    memset(a, 0, sizeof *a);
    a->name = "perm";
    a->type = IR_ATTR_INTS;
    a->n = 4;
    a->ints = ARENA_ARRAY(&g->model->arena, int64_t, 4);
    a->ints[0] = 0, a->ints[1] = 2, a->ints[2] = 3, a->ints[3] = 1;
    a->doc = "";
    return m;
}

static void check_transpose(const int64_t *d) {
    rt_value x;
    fill(&x, 4, d, 0.f);
    const float *xv = x.t.data;
    rt_value *vals[] = {&x};
    for (int threads = 1; threads <= 2; threads++) {
        ir_model *m = transpose_model(d);
        float *y = run_threads(m, threads, S("x"), vals, 1);
        /* y[a][c][e][b] = x[a][b][c][e] */
        for (int64_t a = 0; a < d[0]; a++)
            for (int64_t b = 0; b < d[1]; b++)
                for (int64_t c = 0; c < d[2]; c++)
                    for (int64_t e = 0; e < d[3]; e++) {
                        float want = xv[((a * d[1] + b) * d[2] + c) * d[3] + e];
                        float got = y[((a * d[2] + c) * d[3] + e) * d[1] + b];
                        if (got != want)
                            fail_msg("transpose %lldx%lldx%lldx%lld, %d threads: wrong element", (long long)d[0],
                                     (long long)d[1], (long long)d[2], (long long)d[3], threads);
                    }
        free(y);
        ir_model_free(m);
    }
    rt_value_release(&x);
}

static void test_transpose_tiles(void **state) {
    (void)state;
    check_transpose((int64_t[]){2, 13, 3, 21});
    check_transpose((int64_t[]){1, 128, 12, 64});
    check_transpose((int64_t[]){3, 9, 1, 8});
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_kernels),
        cmocka_unit_test(test_threads_identical),
        cmocka_unit_test(test_transpose_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
