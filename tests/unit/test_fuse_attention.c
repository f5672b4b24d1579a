/* test_fuse_attention.c - the attention fusion pass (build/passes/fuse_attention.c) on
 * hand-built attention blocks in the exported BERT form: the full match becomes one ONNX
 * Attention node with the right heads and scale, the CPU backend computes the same
 * result from the fused graph as from the unfused one, and near misses (another perm, a
 * second reader of an intermediate, another softmax axis, a non-constant scale, head
 * counts that differ, a non-copying reshape) are left alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/passes.h"
#include "runtime/session.h"

#include "graph_builder.h"


enum { B = 2, SEQ = 5, H = 2, D = 3, HID = H * D };



/* What to break in the block (0 = the exact exported form). */
enum variant {
    V_EXACT, V_MUL_SCALE, V_NO_MASK, V_BAD_K_PERM, V_SCORES_READ_TWICE, V_SOFTMAX_AXIS2, V_SCALE_INPUT,
    V_HEADS_DIFFER, V_RESHAPE_NOT_COPY
};

/* q, k, v [B, SEQ, HID], mask [B, 1, 1, SEQ] -> y [B, SEQ, HID] */
static ir_model *block(enum variant var) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    bool mask = var != V_NO_MASK;
    const char *ins[5] = {"q", "k", "v", mask ? "mask" : "c_in", "c_in"};
    int n_in = var == V_SCALE_INPUT ? (mask ? 5 : 4) : (mask ? 4 : 3);
    if (var == V_SCALE_INPUT && !mask) ins[3] = "c_in";
    set_io(g, ins, n_in, var == V_SCORES_READ_TWICE ? S("y", "scores") : S("y"), var == V_SCORES_READ_TWICE ? 2 : 1);
    for (int i = 0; i < 3; i++) set_type(g, ins[i], KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, HID}, NULL);
    if (mask) set_type(g, "mask", KILN_DTYPE_FLOAT, 4, (int64_t[]){B, 1, 1, SEQ}, NULL);
    if (var == V_SCALE_INPUT) set_type(g, "c_in", KILN_DTYPE_FLOAT, 0, NULL, NULL);
    int64_t split[4] = {0, 0, H, D}, split_k[4] = {0, 0, var == V_HEADS_DIFFER ? D : H, var == V_HEADS_DIFFER ? H : D};
    int64_t merge[3] = {0, 0, HID};
    if (var == V_RESHAPE_NOT_COPY) split[0] = 7; /* neither 0 nor the batch */
    gb_typed_initializer(g, "split", KILN_DTYPE_INT64, 1, (int64_t[]){4}, split, 8);
    gb_typed_initializer(g, "split_k", KILN_DTYPE_INT64, 1, (int64_t[]){4}, split_k, 8);
    gb_typed_initializer(g, "merge", KILN_DTYPE_INT64, 1, (int64_t[]){3}, merge, 8);
    float c = sqrtf((float)D), cm = 1.f / sqrtf((float)D);
    gb_typed_initializer(g, "c", KILN_DTYPE_FLOAT, 0, NULL, var == V_MUL_SCALE ? &cm : &c, 4);
    add_node(g, "Reshape", "rq", S("q", "split"), 2, S("q4r"), 1);
    add_node(g, "Reshape", "rk", S("k", "split_k"), 2, S("k4r"), 1);
    add_node(g, "Reshape", "rv", S("v", "split"), 2, S("v4r"), 1);
    gb_attr_ints(g, add_node(g, "Transpose", "tq", S("q4r"), 1, S("q4"), 1), "perm", (int64_t[]){0, 2, 1, 3}, 4);
    gb_attr_ints(g, add_node(g, "Transpose", "tk", S("k4r"), 1, S("kt"), 1), "perm",
             var == V_BAD_K_PERM ? (int64_t[]){0, 2, 1, 3} : (int64_t[]){0, 2, 3, 1}, 4);
    gb_attr_ints(g, add_node(g, "Transpose", "tv", S("v4r"), 1, S("v4"), 1), "perm", (int64_t[]){0, 2, 1, 3}, 4);
    if (var == V_BAD_K_PERM) /* K^T as [B, H, S, D] x a second transpose would be needed: MatMul fails shape-wise */
        gb_attr_ints(g, add_node(g, "Transpose", "tk2", S("kt"), 1, S("kt2"), 1), "perm", (int64_t[]){0, 1, 3, 2}, 4);
    add_node(g, "MatMul", "qk", S("q4", var == V_BAD_K_PERM ? "kt2" : "kt"), 2, S("scores"), 1);
    add_node(g, var == V_MUL_SCALE ? "Mul" : "Div", "scale", S("scores", var == V_SCALE_INPUT ? "c_in" : "c"), 2,
             S("scaled"), 1);
    if (mask) add_node(g, "Add", "addmask", S("scaled", "mask"), 2, S("masked"), 1);
    ir_node *sm = add_node(g, "Softmax", "softmax", S(mask ? "masked" : "scaled"), 1, S("p"), 1);
    ir_attr *ax = add_attrs(g, sm, 1);
    ax->name = "axis";
    ax->type = IR_ATTR_INT;
    ax->i = var == V_SOFTMAX_AXIS2 ? 2 : -1;
    add_node(g, "MatMul", "pv", S("p", "v4"), 2, S("ctx"), 1);
    gb_attr_ints(g, add_node(g, "Transpose", "tctx", S("ctx"), 1, S("ctxt"), 1), "perm", (int64_t[]){0, 2, 1, 3}, 4);
    add_node(g, "Reshape", "merge_r", S("ctxt", "merge"), 2, S("y"), 1);
    build_infer_types_quiet(m);
    return m;
}

static int fuse(ir_model *m) {
    build_pass_stats st;
    memset(&st, 0, sizeof st);
    kiln_error e = {0};
    assert_int_equal(build_pass_fuse_attention(m, NULL, &st, &e), KILN_OK);
    return st.attention_fused;
}

static const ir_node *only_attention(const ir_graph *g) {
    const ir_node *a = NULL;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, "Attention")) {
            assert_null(a);
            a = &g->nodes[i];
        }
    return a;
}

static void test_exact_block_fuses(void **state) {
    (void)state;
    ir_model *m = block(V_EXACT);
    ir_graph *g = m->graph;
    assert_int_equal(g->n_nodes, 13);
    assert_int_equal(fuse(m), 1);
    assert_int_equal(g->n_nodes, 1);
    const ir_node *a = only_attention(g);
    assert_non_null(a);
    assert_int_equal(a->opset, 23);
    assert_int_equal(a->n_inputs, 4);
    assert_string_equal(g->values[a->inputs[0]].name, "q");
    assert_string_equal(g->values[a->inputs[1]].name, "k");
    assert_string_equal(g->values[a->inputs[2]].name, "v");
    assert_string_equal(g->values[a->inputs[3]].name, "mask");
    assert_string_equal(g->values[a->outputs[0]].name, "y");
    assert_int_equal(ir_node_attr_int(a, "q_num_heads", 0), H);
    assert_int_equal(ir_node_attr_int(a, "kv_num_heads", 0), H);
    assert_true(fabsf(ir_node_attr_float(a, "scale", 0) - 1.f / sqrtf((float)D)) < 1e-6f);
    assert_int_equal(g->values[a->outputs[0]].producer, 0);
    ir_model_free(m);
}

static void test_mul_scale_and_no_mask_fuse(void **state) {
    (void)state;
    ir_model *m = block(V_MUL_SCALE);
    assert_int_equal(fuse(m), 1);
    assert_true(fabsf(ir_node_attr_float(only_attention(m->graph), "scale", 0) - 1.f / sqrtf((float)D)) < 1e-6f);
    ir_model_free(m);
    m = block(V_NO_MASK);
    assert_int_equal(fuse(m), 1);
    assert_int_equal(only_attention(m->graph)->n_inputs, 3);
    ir_model_free(m);
}

static void test_near_misses_stay(void **state) {
    (void)state;
    static const enum variant misses[] = {V_BAD_K_PERM,   V_SCORES_READ_TWICE, V_SOFTMAX_AXIS2,
                                          V_SCALE_INPUT,  V_HEADS_DIFFER,      V_RESHAPE_NOT_COPY};
    for (size_t i = 0; i < sizeof misses / sizeof misses[0]; i++) {
        ir_model *m = block(misses[i]);
        int32_t n = m->graph->n_nodes;
        int f = fuse(m);
        if (f) fprintf(stderr, "variant %d fused\n", (int)misses[i]);
        assert_int_equal(f, 0);
        assert_int_equal(m->graph->n_nodes, n);
        ir_model_free(m);
    }
}

static void fill(rt_value *v, int rank, const int64_t *dims, uint32_t seed, bool as_mask) {
    rt_value_init(v);
    kiln_error e = {0};
    rt_tensor *t = rt_value_as_tensor(v);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &e), KILN_OK);
    float *p = t->data;
    for (uint64_t i = 0; i < t->count; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = as_mask ? ((i % SEQ) >= SEQ - 2 && (i / SEQ) == 1 ? -10000.f : 0.f)
                       : (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
}

static void run(ir_model *m, float *y) {
    rt_session_options o = rt_session_options_default();
    o.threads = 1;
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    rt_value q, k, v, mask, out;
    fill(&q, 3, (int64_t[]){B, SEQ, HID}, 1, false);
    fill(&k, 3, (int64_t[]){B, SEQ, HID}, 2, false);
    fill(&v, 3, (int64_t[]){B, SEQ, HID}, 3, false);
    fill(&mask, 4, (int64_t[]){B, 1, 1, SEQ}, 4, true);
    const rt_value *ins[] = {&q, &k, &v, &mask};
    st = rt_session_run(s, S("q", "k", "v", "mask"), ins, 4, &out, &e);
    if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    assert_int_equal((int)out.t.count, B * SEQ * HID);
    memcpy(y, out.t.data, sizeof(float) * B * SEQ * HID);
    rt_value_release(&out);
    rt_value_release(&q), rt_value_release(&k), rt_value_release(&v), rt_value_release(&mask);
    rt_session_free(s);
}

/* The CPU's Attention kernel on the fused graph gives the unfused graph's result. */
static void test_cpu_fused_equals_unfused(void **state) {
    (void)state;
    float ref[B * SEQ * HID], got[B * SEQ * HID];
    ir_model *m = block(V_EXACT);
    run(m, ref);
    ir_model_free(m);
    m = block(V_EXACT);
    assert_int_equal(fuse(m), 1);
    run(m, got);
    ir_model_free(m);
    for (int i = 0; i < B * SEQ * HID; i++) assert_true(fabsf(got[i] - ref[i]) <= 1e-5f + 1e-5f * fabsf(ref[i]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_block_fuses),
        cmocka_unit_test(test_mul_scale_and_no_mask_fuse),
        cmocka_unit_test(test_near_misses_stay),
        cmocka_unit_test(test_cpu_fused_equals_unfused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
