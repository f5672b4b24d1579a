/* test_kernels_elem.c - unit tests for the elementwise CPU kernels, called directly.
 *
 * Builds a one-node IR graph for the attributes and calls the kernel function with
 * hand-made rt_values and a NULL thread pool (runs inline). Checks results against
 * values computed here from the formulas, broadcasting, and that bad input fails with a
 * message naming the node instead of crashing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_broadcast.h"
#include "backends/cpu/cpu_elem_util.h"

typedef struct harness {
    ir_model *model;
    ir_graph *g;
    ir_node *node;
    kiln_error err;
    cpu_kernel_ctx ctx;
} harness;

static void h_init(harness *h, const char *op, int64_t opset) {
    memset(h, 0, sizeof *h);
    h->model = ir_model_new();
    h->g = ir_graph_new(h->model, NULL, "g");
    int32_t id = ir_graph_add_node(h->g);
    h->node = ir_graph_node(h->g, id);
    h->node->name = "n0";
    h->node->op_type = op;
    h->node->domain = "";
    h->node->opset = opset;
    h->ctx.model = h->model;
    h->ctx.graph = h->g;
    h->ctx.node = h->node;
    h->ctx.err = &h->err;
}

static void h_attr_int(harness *h, const char *name, int64_t v) {
    ir_attr *a = arena_calloc(&h->model->arena, (size_t)h->node->n_attrs + 1, sizeof *a);
    if (h->node->n_attrs) memcpy(a, h->node->attrs, sizeof *a * (size_t)h->node->n_attrs);
    a[h->node->n_attrs] = (ir_attr){.name = name, .type = IR_ATTR_INT, .i = v};
    h->node->attrs = a;
    h->node->n_attrs++;
}

static void h_free(harness *h) {
    kiln_err_clear(&h->err);
    ir_model_free(h->model);
}

static rt_value tensor_f32(int32_t rank, const int64_t *dims, const float *vals) {
    rt_value v;
    rt_value_init(&v);
    rt_tensor *t = rt_value_as_tensor(&v);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, NULL), KILN_OK);
    if (t->count) memcpy(t->data, vals, t->count * sizeof(float));
    return v;
}

static rt_value tensor_i32(int32_t rank, const int64_t *dims, const int32_t *vals) {
    rt_value v;
    rt_value_init(&v);
    rt_tensor *t = rt_value_as_tensor(&v);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_INT32, rank, dims, NULL), KILN_OK);
    if (t->count) memcpy(t->data, vals, t->count * sizeof(int32_t));
    return v;
}

/* [2,3] + [3] and [2,1] * [1,3]: broadcasting, results from the formula. */
static void test_add_mul_broadcast(void **state) {
    (void)state;
    harness h;
    h_init(&h, "Add", 14);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
    rt_value va = tensor_f32(2, (int64_t[]){2, 3}, a), vb = tensor_f32(1, (int64_t[]){3}, b), out;
    rt_value_init(&out);
    const rt_value *ins[2] = {&va, &vb};
    assert_int_equal(cpu_Add(&h.ctx, ins, 2, &out, 1), KILN_OK);
    assert_int_equal(out.t.rank, 2);
    for (int i = 0; i < 6; i++) assert_float_equal(((float *)out.t.data)[i], a[i] + b[i % 3], 0);
    rt_value_release(&out);
    rt_value_release(&va);
    rt_value_release(&vb);

    float c[2] = {2, 3}, d[3] = {1, 10, 100};
    rt_value vc = tensor_f32(2, (int64_t[]){2, 1}, c), vd = tensor_f32(2, (int64_t[]){1, 3}, d);
    const rt_value *ins2[2] = {&vc, &vd};
    assert_int_equal(cpu_Mul(&h.ctx, ins2, 2, &out, 1), KILN_OK);
    assert_int_equal(out.t.dims[0], 2);
    assert_int_equal(out.t.dims[1], 3);
    for (int i = 0; i < 6; i++) assert_float_equal(((float *)out.t.data)[i], c[i / 3] * d[i % 3], 0);
    rt_value_release(&out);
    rt_value_release(&vc);
    rt_value_release(&vd);
    h_free(&h);
}

/* Broadcasting a middle dim over a large tensor exercises the odometer carry. */
static void test_broadcast_middle(void **state) {
    (void)state;
    harness h;
    h_init(&h, "Sub", 14);
    enum { N = 3, C = 5, W = 7 };
    float a[N * C * W], b[C];
    for (int i = 0; i < N * C * W; i++) a[i] = (float)i;
    for (int i = 0; i < C; i++) b[i] = (float)(i * 1000);
    rt_value va = tensor_f32(3, (int64_t[]){N, C, W}, a), vb = tensor_f32(2, (int64_t[]){C, 1}, b), out;
    rt_value_init(&out);
    const rt_value *ins[2] = {&va, &vb};
    assert_int_equal(cpu_Sub(&h.ctx, ins, 2, &out, 1), KILN_OK);
    for (int i = 0; i < N * C * W; i++) assert_float_equal(((float *)out.t.data)[i], a[i] - b[(i / W) % C], 0);
    rt_value_release(&out);
    rt_value_release(&va);
    rt_value_release(&vb);
    h_free(&h);
}

static void test_bad_broadcast_fails(void **state) {
    (void)state;
    harness h;
    h_init(&h, "Add", 14);
    float a[6] = {0}, b[4] = {0};
    rt_value va = tensor_f32(2, (int64_t[]){2, 3}, a), vb = tensor_f32(1, (int64_t[]){4}, b), out;
    rt_value_init(&out);
    const rt_value *ins[2] = {&va, &vb};
    assert_int_equal(cpu_Add(&h.ctx, ins, 2, &out, 1), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_err_msg(&h.err), "n0"));
    assert_non_null(strstr(kiln_err_msg(&h.err), "broadcast"));
    rt_value_release(&out);
    rt_value_release(&va);
    rt_value_release(&vb);
    h_free(&h);
}

/* Integer division by zero and INT_MIN / -1 must not trap. */
static void test_int_div_edge(void **state) {
    (void)state;
    harness h;
    h_init(&h, "Div", 14);
    int32_t a[4] = {7, -7, INT32_MIN, 5}, b[4] = {2, 2, -1, 0};
    rt_value va = tensor_i32(1, (int64_t[]){4}, a), vb = tensor_i32(1, (int64_t[]){4}, b), out;
    rt_value_init(&out);
    const rt_value *ins[2] = {&va, &vb};
    assert_int_equal(cpu_Div(&h.ctx, ins, 2, &out, 1), KILN_OK);
    const int32_t *o = out.t.data;
    assert_int_equal(o[0], 3);
    assert_int_equal(o[1], -3);
    assert_int_equal(o[2], INT32_MIN);
    assert_int_equal(o[3], 0);
    rt_value_release(&out);
    /* Mod (fmod=0) follows the divisor's sign */
    h.node->op_type = "Mod";
    assert_int_equal(cpu_Mod(&h.ctx, ins, 2, &out, 1), KILN_OK);
    o = out.t.data;
    assert_int_equal(o[0], 1);
    assert_int_equal(o[1], 1);
    rt_value_release(&out);
    /* fmod=1 follows the dividend's sign */
    h_attr_int(&h, "fmod", 1);
    assert_int_equal(cpu_Mod(&h.ctx, ins, 2, &out, 1), KILN_OK);
    assert_int_equal(((int32_t *)out.t.data)[1], -1);
    rt_value_release(&out);
    rt_value_release(&va);
    rt_value_release(&vb);
    h_free(&h);
}

/* The polynomial exp/tanh/sigmoid agree with libm to a few ulp over a wide range. */
static void test_fast_exp_accuracy(void **state) {
    (void)state;
    harness h;
    h_init(&h, "Exp", 13);
    enum { N = 2001 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = -90.0f + 180.0f * (float)i / (N - 1);
    rt_value vx = tensor_f32(1, (int64_t[]){N}, x), out;
    rt_value_init(&out);
    const rt_value *ins[1] = {&vx};
    assert_int_equal(cpu_Exp(&h.ctx, ins, 1, &out, 1), KILN_OK);
    for (int i = 0; i < N; i++) {
        double ref = exp((double)x[i]), got = ((float *)out.t.data)[i];
        if (ref > 3.4e38) assert_true(isinf(got));
        else if (ref < 1.2e-38) assert_true(got < 1.2e-38);
        else assert_true(fabs(got - ref) <= 4e-7 * ref);
    }
    rt_value_release(&out);
    rt_value_release(&vx);
    float y[7] = {-5.0f, -0.3f, -1e-5f, 0.0f, 1e-6f, 0.05f, 2.5f};
    vx = tensor_f32(1, (int64_t[]){7}, y);
    assert_int_equal(cpu_Tanh(&h.ctx, ins, 1, &out, 1), KILN_OK);
    for (int i = 0; i < 7; i++) {
        double ref = tanh((double)y[i]);
        assert_true(fabs(((float *)out.t.data)[i] - ref) <= 2e-7 * fabs(ref) + 1e-12);
    }
    rt_value_release(&out);
    assert_int_equal(cpu_Sigmoid(&h.ctx, ins, 1, &out, 1), KILN_OK);
    for (int i = 0; i < 7; i++) {
        double ref = 1 / (1 + exp(-(double)y[i]));
        assert_true(fabs(((float *)out.t.data)[i] - ref) <= 3e-7 * ref);
    }
    rt_value_release(&out);
    rt_value_release(&vx);
    h_free(&h);
}

static void test_leaky_relu_attr(void **state) {
    (void)state;
    harness h;
    h_init(&h, "LeakyRelu", 16);
    float x[3] = {-2, 0, 3};
    rt_value vx = tensor_f32(1, (int64_t[]){3}, x), out;
    rt_value_init(&out);
    const rt_value *ins[1] = {&vx};
    assert_int_equal(cpu_LeakyRelu(&h.ctx, ins, 1, &out, 1), KILN_OK);
    assert_float_equal(((float *)out.t.data)[0], -0.02f, 1e-7);
    assert_float_equal(((float *)out.t.data)[2], 3.0f, 0);
    rt_value_release(&out);
    rt_value_release(&vx);
    h_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_mul_broadcast), cmocka_unit_test(test_broadcast_middle),
        cmocka_unit_test(test_bad_broadcast_fails), cmocka_unit_test(test_int_div_edge),
        cmocka_unit_test(test_fast_exp_accuracy), cmocka_unit_test(test_leaky_relu_attr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
