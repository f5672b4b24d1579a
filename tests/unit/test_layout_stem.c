/* test_layout_stem.c - padded image stems in the channels-last pass (layout_nhwc.c) and
 * their kiln.nhwc NchwToNhwc node (ir/ops/ops_nhwc_pack.c), on hand-built graphs without
 * a GPU: a 3-channel Conv after the FP16 pass's input Cast runs channels-last with its
 * input padded to 8 (or 4) channels through the Cast rewritten into one NchwToNhwc
 * (float32 NCHW in, float16 NHWC out), its weight stored OHWI with zero channels; a Cast
 * with another reader stays and a separate NchwToNhwc follows it; convolutions that are
 * not stems, rules that refuse the pack or pad 0 leave the stem NCHW; the rewritten graph
 * re-infers to the pass's own types; NchwToNhwc's inference refuses bad attributes. In
 * CUDA builds also the transpose classification that picks the tiled kernel
 * (cuda_perm_classify, cuda_layout_host.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/passes.h"
#include "core/dtype.h"
#include "diag/diag.h"
#include "ir/infer.h"

#if KILN_HAVE_CUDA
#include "backends/cuda/cuda_layout.h"
#endif

#include "graph_builder.h"

static bool all_half(void *user, const ir_model *m, const ir_node *n) {
    (void)user, (void)m, (void)n;
    return true;
}
static bool any_input_half(void *user, const ir_node *n, int32_t k) {
    (void)user, (void)n, (void)k;
    return true;
}

/* layout rules: everything runs channels-last, except the ops named in `user` */
static bool nhwc_ok(void *user, const ir_model *m, const ir_node *n) {
    (void)m;
    assert_string_equal(n->domain, "kiln.nhwc");
    for (const char *const *p = user; p && *p; p++)
        if (!strcmp(*p, n->op_type)) return false;
    return true;
}

static int infer_errors(ir_model *m) {
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    kiln_status st = ir_infer(m, NULL, &dl, &e); /* KILN_ERR_SHAPE when it reported errors */
    int n = (int)dl.n_errors;
    assert_true(st == KILN_OK ? n == 0 : n > 0);
    kiln_err_clear(&e);
    diag_list_free(&dl);
    return n;
}

static const ir_node *find_node(const ir_graph *g, const char *name) {
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
    return NULL;
}
static int count_op(const ir_graph *g, const char *op) {
    int n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op_type, op);
    return n;
}

static float wv[8 * 3 * 7 * 7];

/* x float32 [2, 3, 16, 16] -> Conv 7x7 s2 (W [O, 3, 7, 7], bias) -> MaxPool 3x3 s2 -> y;
 * with `extra`, a Relu also reads x (after the FP16 pass: the Cast's output). */
static ir_model *stem_model(int64_t o, bool extra) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    if (extra) set_io(g, S("x"), 1, S("y", "r"), 2);
    else set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 3, 16, 16}, NULL);
    for (int i = 0; i < 8 * 3 * 49; i++) wv[i] = (float)(i + 1);
    static float b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    gb_typed_initializer(g, "W", KILN_DTYPE_FLOAT, 4, (int64_t[]){o, 3, 7, 7}, wv, 4);
    gb_typed_initializer(g, "B", KILN_DTYPE_FLOAT, 1, (int64_t[]){o}, b, 4);
    ir_node *conv = add_node(g, "Conv", "stem", S("x", "W", "B"), 3, S("c"), 1);
    ir_attr *a = add_attrs(g, conv, 3);
    static int64_t k7[2] = {7, 7}, s2[2] = {2, 2}, p3[4] = {3, 3, 3, 3}, k3[2] = {3, 3}, p1[4] = {1, 1, 1, 1};
    a[0] = (ir_attr){.name = "kernel_shape", .type = IR_ATTR_INTS, .n = 2, .ints = k7, .doc = ""};
    a[1] = (ir_attr){.name = "strides", .type = IR_ATTR_INTS, .n = 2, .ints = s2, .doc = ""};
    a[2] = (ir_attr){.name = "pads", .type = IR_ATTR_INTS, .n = 4, .ints = p3, .doc = ""};
    ir_node *mp = add_node(g, "MaxPool", "pool", S("c"), 1, S("y"), 1);
    a = add_attrs(g, mp, 3);
    a[0] = (ir_attr){.name = "kernel_shape", .type = IR_ATTR_INTS, .n = 2, .ints = k3, .doc = ""};
    a[1] = (ir_attr){.name = "strides", .type = IR_ATTR_INTS, .n = 2, .ints = s2, .doc = ""};
    a[2] = (ir_attr){.name = "pads", .type = IR_ATTR_INTS, .n = 4, .ints = p1, .doc = ""};
    if (extra) add_node(g, "Relu", "relu", S("x"), 1, S("r"), 1);
    assert_int_equal(infer_errors(m), 0);
    /* the FP16 pass first, as the session runs them: x enters through a Cast to float16 */
    build_fp16_rules r = {all_half, any_input_half, NULL};
    build_fp16_stats st;
    kiln_error e = {0};
    assert_int_equal(build_pass_precision_fp16(m, &r, &st, &e), KILN_OK);
    return m;
}

static void run_layout(ir_model *m, int32_t pad, const char *const *refuse, int32_t want_moved) {
    build_layout_rules r = {nhwc_ok, (void *)refuse, pad};
    int32_t moved = -1;
    kiln_error e = {0};
    assert_int_equal(build_pass_layout_nhwc(m, &r, &moved, &e), KILN_OK);
    assert_int_equal(moved, want_moved);
}

static int64_t attr_i(const ir_node *n, const char *name) {
    const ir_attr *a = ir_node_attr(n, name);
    assert_non_null(a);
    assert_int_equal(a->type, IR_ATTR_INT);
    return a->i;
}

static void check_weight(const ir_tensor *w, int64_t o, int64_t cp) {
    assert_int_equal(w->rank, 4);
    assert_int_equal(w->dims[0], o);
    assert_int_equal(w->dims[1], 7);
    assert_int_equal(w->dims[2], 7);
    assert_int_equal(w->dims[3], cp);
    assert_int_equal(w->count, (uint64_t)(o * 49 * cp));
    assert_int_equal(w->dtype, KILN_DTYPE_FLOAT16);
    assert_int_equal(w->nbytes, w->count * 2);
    for (int64_t oo = 0; oo < o; oo++)
        for (int64_t y = 0; y < 7; y++)
            for (int64_t x = 0; x < 7; x++)
                for (int64_t c = 0; c < cp; c++) {
                    uint16_t h;
                    memcpy(&h, (const uint8_t *)w->data + 2 * (((oo * 7 + y) * 7 + x) * cp + c), 2);
                    float want = c < 3 ? kiln_fp16_to_fp32(kiln_fp32_to_fp16(wv[((oo * 3 + c) * 7 + y) * 7 + x])) : 0.f;
                    assert_true(kiln_fp16_to_fp32(h) == want);
                }
}

static void test_stem_fuses_cast(void **state) {
    (void)state;
    for (int32_t pad = 4; pad <= 8; pad += 4) {
        ir_model *m = stem_model(8, false);
        ir_graph *g = m->graph;
        assert_int_equal(count_op(g, "Cast"), 2); /* x in, y out */
        run_layout(m, pad, NULL, 2);
        const ir_node *cv = find_node(g, "stem");
        assert_string_equal(cv->domain, "kiln.nhwc");
        assert_string_equal(find_node(g, "pool")->domain, "kiln.nhwc");
        /* the input Cast became the NchwToNhwc: float32 x in, float16 [2, 16, 16, pad] out */
        assert_int_equal(count_op(g, "Cast"), 1);
        assert_int_equal(count_op(g, "NchwToNhwc"), 1);
        const ir_node *pk = &g->nodes[g->values[cv->inputs[0]].producer];
        assert_string_equal(pk->op_type, "NchwToNhwc");
        assert_string_equal(pk->domain, "kiln.nhwc");
        assert_int_equal(pk->inputs[0], ir_graph_find(g, "x"));
        char want_name[128];
        snprintf(want_name, sizeof want_name, "%s_kiln_to_nhwc", g->values[cv->inputs[0]].name);
        assert_string_equal(pk->name, want_name);
        assert_int_equal(attr_i(pk, "channels"), pad);
        assert_int_equal(attr_i(pk, "to"), KILN_DTYPE_FLOAT16);
        const ir_type *t = &g->values[cv->inputs[0]].type;
        assert_int_equal(t->dtype, KILN_DTYPE_FLOAT16);
        int64_t want[4] = {2, 16, 16, pad};
        for (int i = 0; i < 4; i++) assert_int_equal(t->dims[i].value, want[i]);
        check_weight(g->values[cv->inputs[1]].init, 8, pad);
        /* no transpose into the region; one back out for the graph output y */
        assert_int_equal(count_op(g, "Transpose"), 1);
        /* the saved graph infers again to the same types (as loading an engine does) */
        int32_t c_out = cv->outputs[0];
        assert_int_equal(infer_errors(m), 0);
        assert_int_equal(g->values[cv->inputs[0]].type.dims[3].value, pad);
        assert_int_equal(g->values[c_out].type.dims[3].value, 8); /* [2, 8, 8, 8] NHWC */
        assert_int_equal(g->values[c_out].type.dims[1].value, 8);
        ir_model_free(m);
    }
}

static void test_stem_cast_with_other_reader(void **state) {
    (void)state;
    ir_model *m = stem_model(8, true);
    ir_graph *g = m->graph;
    run_layout(m, 8, NULL, 2);
    const ir_node *cv = find_node(g, "stem");
    const ir_node *pk = &g->nodes[g->values[cv->inputs[0]].producer];
    assert_string_equal(pk->op_type, "NchwToNhwc");
    assert_null(ir_node_attr(pk, "to")); /* reads the Cast's float16 output */
    const ir_node *cast = &g->nodes[g->values[pk->inputs[0]].producer];
    assert_string_equal(cast->op_type, "Cast");
    assert_int_equal(attr_i(pk, "channels"), 8);
    /* topological: the pack follows the Cast, the stem follows the pack */
    assert_true(g->values[pk->inputs[0]].producer < g->values[cv->inputs[0]].producer);
    assert_true(g->values[cv->inputs[0]].producer < (int32_t)(cv - g->nodes));
    assert_int_equal(infer_errors(m), 0);
    assert_int_equal(g->values[cv->inputs[0]].type.dtype, KILN_DTYPE_FLOAT16);
    ir_model_free(m);
}

static void test_stem_left_nchw(void **state) {
    (void)state;
    /* pad 0 (rules that do not pad): the stem stays NCHW, the pool goes NHWC */
    ir_model *m = stem_model(8, false);
    run_layout(m, 0, NULL, 1);
    assert_string_equal(find_node(m->graph, "stem")->domain, "");
    assert_int_equal(count_op(m->graph, "NchwToNhwc"), 0);
    ir_model_free(m);
    /* rules that cannot run the pack */
    m = stem_model(8, false);
    run_layout(m, 8, S("NchwToNhwc", NULL), 1);
    assert_string_equal(find_node(m->graph, "stem")->domain, "");
    assert_int_equal(count_op(m->graph, "Cast"), 2);
    ir_model_free(m);
    /* output channels not a multiple of 8: not a stem for tensor cores */
    m = stem_model(6, false);
    run_layout(m, 8, NULL, 1);
    assert_string_equal(find_node(m->graph, "stem")->domain, "");
    ir_model_free(m);
    /* the classification itself */
    m = stem_model(8, false);
    const ir_node *cv = find_node(m->graph, "stem");
    assert_int_equal(build_layout_stem_channels(m->graph, cv, 8), 8);
    assert_int_equal(build_layout_stem_channels(m->graph, cv, 4), 4);
    assert_int_equal(build_layout_stem_channels(m->graph, cv, 3), 0); /* 3 already a multiple */
    assert_int_equal(build_layout_stem_channels(m->graph, cv, 0), 0);
    assert_int_equal(build_layout_stem_channels(m->graph, find_node(m->graph, "pool"), 8), 0);
    ir_model_free(m);
}

/* x [1, 8, 4, 4] -> Conv 1x1 (8 -> 8) -> [GlobalAveragePool] -> Flatten(axis) -> y: the
 * Flatten reads the NHWC value as it is only when it is [N, 1, 1, C] and axis is 1. */
static void flatten_case(bool gap, int64_t axis, int want_transposes) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT16, 4, (int64_t[]){1, 8, 4, 4}, NULL);
    static float w[64];
    gb_typed_initializer(g, "W", KILN_DTYPE_FLOAT16, 4, (int64_t[]){8, 8, 1, 1}, w, 2);
    add_node(g, "Conv", "conv", S("x", "W"), 2, S("c"), 1);
    if (gap) add_node(g, "GlobalAveragePool", "gap", S("c"), 1, S("p"), 1);
    ir_node *fl = add_node(g, "Flatten", "flat", S(gap ? "p" : "c"), 1, S("y"), 1);
    gb_attr_int(g, fl, "axis", axis);
    assert_int_equal(infer_errors(m), 0);
    run_layout(m, 4, NULL, gap ? 2 : 1);
    assert_int_equal(count_op(g, "Transpose"), want_transposes);
    const ir_node *f = find_node(g, "flat");
    int32_t src = g->values[f->inputs[0]].producer;
    assert_string_equal(g->nodes[src].op_type, want_transposes == 1 ? (gap ? "GlobalAveragePool" : "Conv") : "Transpose");
    assert_int_equal(infer_errors(m), 0);
    const ir_type *t = &g->values[ir_graph_find(g, "y")].type; /* the model's own output shape */
    assert_int_equal(t->rank, 2);
    assert_int_equal(t->dims[1].value, gap ? (axis == 1 ? 8 : 1) : (axis == 1 ? 128 : 16));
    ir_model_free(m);
}

static void test_flatten_of_pooled_nhwc(void **state) {
    (void)state;
    flatten_case(true, 1, 1);  /* [1, 1, 1, 8]: only the Transpose into the region */
    flatten_case(true, 2, 2);  /* axis 2 gives [1*8, 1] vs [1*1, 8]: transposed back */
    flatten_case(false, 1, 2); /* [1, 4, 4, 8] is not [1, 8, 4, 4] byte for byte */
}

static void test_pack_inference_errors(void **state) {
    (void)state;
    for (int bad = 0; bad < 3; bad++) {
        ir_model *m = new_model();
        ir_graph *g = m->graph;
        set_io(g, S("x"), 1, S("y"), 1);
        set_type(g, "x", KILN_DTYPE_FLOAT, bad == 2 ? 3 : 4, (int64_t[]){1, 3, 4, 4}, NULL);
        ir_node *n = add_node(g, "NchwToNhwc", "pack", S("x"), 1, S("y"), 1);
        n->domain = "kiln.nhwc";
        ir_attr *a = add_attrs(g, n, 2);
        a[0] = (ir_attr){.name = "channels", .type = IR_ATTR_INT, .i = bad == 0 ? 2 : 8, .doc = ""};
        a[1] = (ir_attr){.name = "to", .type = IR_ATTR_INT, .i = bad == 1 ? KILN_DTYPE_INT64 : KILN_DTYPE_FLOAT16, .doc = ""};
        assert_int_equal(infer_errors(m), 1);
        ir_model_free(m);
    }
    /* and the good one: [1, 3, 4, 4] float32 -> [1, 4, 4, 8] float16 */
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x"), 1, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 3, 4, 5}, NULL);
    ir_node *n = add_node(g, "NchwToNhwc", "pack", S("x"), 1, S("y"), 1);
    n->domain = "kiln.nhwc";
    ir_attr *a = add_attrs(g, n, 2);
    a[0] = (ir_attr){.name = "channels", .type = IR_ATTR_INT, .i = 8, .doc = ""};
    a[1] = (ir_attr){.name = "to", .type = IR_ATTR_INT, .i = KILN_DTYPE_FLOAT16, .doc = ""};
    assert_int_equal(infer_errors(m), 0);
    const ir_type *t = &g->values[ir_graph_find(g, "y")].type;
    assert_int_equal(t->dtype, KILN_DTYPE_FLOAT16);
    int64_t want[4] = {1, 4, 5, 8};
    assert_int_equal(t->rank, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(t->dims[i].value, want[i]);
    ir_model_free(m);
}

static void test_perm_classify(void **state) {
    (void)state;
#if KILN_HAVE_CUDA
    int64_t nb = 0, rows = 0, cols = 0;
    /* NCHW -> NHWC: [N, C, HW] -> [N, HW, C] */
    assert_int_equal(cuda_perm_classify(4, (int64_t[]){2, 64, 7, 9}, (int64_t[]){0, 2, 3, 1}, &nb, &rows, &cols),
                     CUDA_PERM_BATCHED);
    assert_int_equal(nb, 2), assert_int_equal(rows, 64), assert_int_equal(cols, 63);
    /* NHWC -> NCHW: [N, HW, C] -> [N, C, HW] */
    assert_int_equal(cuda_perm_classify(4, (int64_t[]){2, 7, 9, 64}, (int64_t[]){0, 3, 1, 2}, &nb, &rows, &cols),
                     CUDA_PERM_BATCHED);
    assert_int_equal(nb, 2), assert_int_equal(rows, 63), assert_int_equal(cols, 64);
    /* a plain 2-D transpose, and one whose batch axis is size 1 */
    assert_int_equal(cuda_perm_classify(2, (int64_t[]){5, 6}, (int64_t[]){1, 0}, &nb, &rows, &cols), CUDA_PERM_BATCHED);
    assert_int_equal(nb, 1), assert_int_equal(rows, 5), assert_int_equal(cols, 6);
    assert_int_equal(cuda_perm_classify(4, (int64_t[]){1, 64, 7, 9}, (int64_t[]){0, 2, 3, 1}, &nb, &rows, &cols),
                     CUDA_PERM_BATCHED);
    assert_int_equal(nb, 1), assert_int_equal(rows, 64), assert_int_equal(cols, 63);
    /* only size-1 axes move: [N, 1, 1, C] -> [N, C, 1, 1] is a copy */
    assert_int_equal(cuda_perm_classify(4, (int64_t[]){8, 1, 1, 2048}, (int64_t[]){0, 3, 1, 2}, &nb, &rows, &cols),
                     CUDA_PERM_COPY);
    assert_int_equal(cuda_perm_classify(3, (int64_t[]){2, 3, 4}, (int64_t[]){0, 1, 2}, &nb, &rows, &cols),
                     CUDA_PERM_COPY);
    /* a transpose of the two outer axes with an inner block is not batched */
    assert_int_equal(cuda_perm_classify(3, (int64_t[]){2, 3, 4}, (int64_t[]){1, 0, 2}, &nb, &rows, &cols),
                     CUDA_PERM_GENERAL);
    assert_int_equal(cuda_perm_classify(3, (int64_t[]){2, 3, 4}, (int64_t[]){2, 1, 0}, &nb, &rows, &cols),
                     CUDA_PERM_GENERAL);
    /* [A, B, C] -> [C, A, B] is [AB, C] -> [C, AB] */
    assert_int_equal(cuda_perm_classify(3, (int64_t[]){2, 3, 4}, (int64_t[]){2, 0, 1}, &nb, &rows, &cols),
                     CUDA_PERM_BATCHED);
    assert_int_equal(nb, 1), assert_int_equal(rows, 6), assert_int_equal(cols, 4);
    /* bad perms */
    assert_int_equal(cuda_perm_classify(3, (int64_t[]){2, 3, 4}, (int64_t[]){0, 0, 1}, &nb, &rows, &cols),
                     CUDA_PERM_GENERAL);
    assert_int_equal(cuda_perm_classify(2, (int64_t[]){2, 3}, (int64_t[]){0, 5}, &nb, &rows, &cols),
                     CUDA_PERM_GENERAL);
#else
    printf("skipped cuda_perm_classify: this build has no CUDA backend (KILN_HAVE_CUDA 0)\n");
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stem_fuses_cast),
        cmocka_unit_test(test_stem_cast_with_other_reader),
        cmocka_unit_test(test_stem_left_nchw),
        cmocka_unit_test(test_flatten_of_pooled_nhwc),
        cmocka_unit_test(test_pack_inference_errors),
        cmocka_unit_test(test_perm_classify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
