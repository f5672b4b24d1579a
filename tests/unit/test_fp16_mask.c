/* test_fp16_mask.c - regression test for BERT's NaN under --fp16 (docs/CUDA.md "FP16"):
 * an attention block in the exported BERT form whose additive mask is computed from an
 * int64 input as (1 - Cast(Unsqueeze(mask))) * -10000, run through the attention fusion
 * and the FP16 pass with GPU-like rules, then on the CPU backend (which runs the rewritten
 * graph). With mask values outside 0/1 (kiln run feeds random integers 0..99, its CUDA
 * graph check halves them) the mask reaches +980000: in float16 that is +inf and the
 * softmax gave NaN everywhere. The pass must keep the mask arithmetic in float32 (no
 * Casts, Attention reading a float32 mask next to float16 Q/K/V) and the result must
 * match the float32 graph. No GPU needed. */
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
#include "diag/diag.h"
#include "ir/infer.h"
#include "runtime/session.h"

#include "graph_builder.h"


enum { B = 2, SEQ = 6, H = 2, D = 4, HID = H * D };




/* q, k, v [B, SEQ, HID] float, am [B, SEQ] int64 -> y [B, SEQ, HID]; the mask as
 * tools/make_zoo.py's BERT builds it, the block as torch exports it. */
static ir_model *bert_block(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("q", "k", "v", "am"), 4, S("y"), 1);
    for (int i = 0; i < 3; i++) set_type(g, S("q", "k", "v")[i], KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, HID}, NULL);
    set_type(g, "am", KILN_DTYPE_INT64, 2, (int64_t[]){B, SEQ}, NULL);
    gb_typed_initializer(g, "split", KILN_DTYPE_INT64, 1, (int64_t[]){4}, (int64_t[]){0, 0, H, D}, 8);
    gb_typed_initializer(g, "merge", KILN_DTYPE_INT64, 1, (int64_t[]){3}, (int64_t[]){0, 0, HID}, 8);
    gb_typed_initializer(g, "axes12", KILN_DTYPE_INT64, 1, (int64_t[]){2}, (int64_t[]){1, 2}, 8);
    float c = sqrtf((float)D), one = 1.f, neg = -10000.f;
    gb_typed_initializer(g, "c", KILN_DTYPE_FLOAT, 0, NULL, &c, 4);
    gb_typed_initializer(g, "one", KILN_DTYPE_FLOAT, 0, NULL, &one, 4);
    gb_typed_initializer(g, "neg", KILN_DTYPE_FLOAT, 0, NULL, &neg, 4);
    add_node(g, "Unsqueeze", "mask_unsq", S("am", "axes12"), 2, S("m4"), 1);
    gb_attr_int(g, add_node(g, "Cast", "mask_cast", S("m4"), 1, S("mf"), 1), "to", KILN_DTYPE_FLOAT);
    add_node(g, "Sub", "mask_sub", S("one", "mf"), 2, S("inv"), 1);
    add_node(g, "Mul", "mask_mul", S("inv", "neg"), 2, S("mask"), 1);
    add_node(g, "Reshape", "rq", S("q", "split"), 2, S("q4r"), 1);
    add_node(g, "Reshape", "rk", S("k", "split"), 2, S("k4r"), 1);
    add_node(g, "Reshape", "rv", S("v", "split"), 2, S("v4r"), 1);
    gb_attr_ints(g, add_node(g, "Transpose", "tq", S("q4r"), 1, S("q4"), 1), "perm", (int64_t[]){0, 2, 1, 3}, 4);
    gb_attr_ints(g, add_node(g, "Transpose", "tk", S("k4r"), 1, S("kt"), 1), "perm", (int64_t[]){0, 2, 3, 1}, 4);
    gb_attr_ints(g, add_node(g, "Transpose", "tv", S("v4r"), 1, S("v4"), 1), "perm", (int64_t[]){0, 2, 1, 3}, 4);
    add_node(g, "MatMul", "qk", S("q4", "kt"), 2, S("scores"), 1);
    add_node(g, "Div", "scale", S("scores", "c"), 2, S("scaled"), 1);
    add_node(g, "Add", "addmask", S("scaled", "mask"), 2, S("masked"), 1);
    gb_attr_int(g, add_node(g, "Softmax", "softmax", S("masked"), 1, S("p"), 1), "axis", -1);
    add_node(g, "MatMul", "pv", S("p", "v4"), 2, S("ctx"), 1);
    gb_attr_ints(g, add_node(g, "Transpose", "tctx", S("ctx"), 1, S("ctxt"), 1), "perm", (int64_t[]){0, 2, 1, 3}, 4);
    add_node(g, "Reshape", "merge_r", S("ctxt", "merge"), 2, S("y"), 1);
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    assert_int_equal(ir_infer(m, NULL, &dl, &e), KILN_OK);
    diag_list_free(&dl);
    return m;
}

/* GPU-like rules: everything with float tensors half except Cast; shape-like arguments
 * (Reshape's shape, Unsqueeze's axes) are read on the host. */
static bool node_half(void *user, const ir_model *m, const ir_node *n) {
    (void)user, (void)m;
    return strcmp(n->op_type, "Cast") != 0;
}
static bool input_half(void *user, const ir_node *n, int32_t k) {
    (void)user;
    return !((!strcmp(n->op_type, "Reshape") || !strcmp(n->op_type, "Unsqueeze")) && k == 1);
}

static kiln_dtype dt_of(const ir_graph *g, int32_t v) {
    return g->values[v].init ? g->values[v].init->dtype : g->values[v].type.dtype;
}
static const ir_node *find_op(const ir_graph *g, const char *op) {
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, op)) return &g->nodes[i];
    return NULL;
}

static ir_model *fused_fp16(build_fp16_stats *st) {
    ir_model *m = bert_block();
    build_pass_stats ps;
    memset(&ps, 0, sizeof ps);
    kiln_error e = {0};
    assert_int_equal(build_pass_fuse_attention(m, NULL, &ps, &e), KILN_OK);
    assert_int_equal(ps.attention_fused, 1);
    build_fp16_rules r = {node_half, input_half, NULL};
    assert_int_equal(build_pass_precision_fp16(m, &r, st, &e), KILN_OK);
    return m;
}

/* The rewritten graph: Q/K/V/Y half, the mask and its whole chain float32, no Cast for it. */
static void test_mask_chain_stays_float32(void **state) {
    (void)state;
    build_fp16_stats st;
    ir_model *m = fused_fp16(&st);
    const ir_graph *g = m->graph;
    const ir_node *a = find_op(g, "Attention");
    assert_non_null(a);
    for (int k = 0; k < 3; k++) assert_int_equal(dt_of(g, a->inputs[k]), KILN_DTYPE_FLOAT16);
    assert_int_equal(dt_of(g, a->outputs[0]), KILN_DTYPE_FLOAT16);
    assert_int_equal(dt_of(g, a->inputs[3]), KILN_DTYPE_FLOAT);
    assert_string_equal(g->values[a->inputs[3]].name, "mask"); /* read directly, no Cast */
    const ir_node *sub = find_op(g, "Sub"), *mul = find_op(g, "Mul");
    assert_non_null(sub);
    assert_non_null(mul);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(dt_of(g, sub->inputs[k]), KILN_DTYPE_FLOAT);
        assert_int_equal(dt_of(g, mul->inputs[k]), KILN_DTYPE_FLOAT);
    }
    assert_int_equal(dt_of(g, ir_graph_find(g, "one")), KILN_DTYPE_FLOAT); /* initializers not converted */
    assert_int_equal(dt_of(g, ir_graph_find(g, "neg")), KILN_DTYPE_FLOAT);
    /* Casts: q, k, v to half and y back; none on the mask path */
    assert_int_equal(st.casts, 4);
    int casts = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) casts += !strcmp(g->nodes[i].op_type, "Cast");
    assert_int_equal(casts, 4 + 1); /* + the model's own Cast of the int64 mask */
    ir_model_free(m);
}

static void fill(rt_value *v, kiln_dtype dt, int rank, const int64_t *dims, uint32_t seed) {
    rt_value_init(v);
    kiln_error e = {0};
    rt_tensor *t = rt_value_as_tensor(v);
    assert_int_equal(rt_tensor_alloc(t, dt, rank, dims, &e), KILN_OK);
    for (uint64_t i = 0; i < t->count; i++) {
        seed = seed * 1664525u + 1013904223u;
        if (dt == KILN_DTYPE_INT64) ((int64_t *)t->data)[i] = (int64_t)((seed >> 8) % 100); /* as kiln run */
        else ((float *)t->data)[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
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
    rt_value q, k, v, am, out;
    fill(&q, KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, HID}, 1);
    fill(&k, KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, HID}, 2);
    fill(&v, KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, HID}, 3);
    fill(&am, KILN_DTYPE_INT64, 2, (int64_t[]){B, SEQ}, 4);
    const rt_value *ins[] = {&q, &k, &v, &am};
    st = rt_session_run(s, S("q", "k", "v", "am"), ins, 4, &out, &e);
    if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    assert_int_equal(out.t.dtype, KILN_DTYPE_FLOAT);
    assert_int_equal((int)out.t.count, B * SEQ * HID);
    memcpy(y, out.t.data, sizeof(float) * B * SEQ * HID);
    rt_value_release(&out);
    rt_value_release(&q), rt_value_release(&k), rt_value_release(&v), rt_value_release(&am);
    rt_session_free(s);
}

/* Mask values 0..99 (mask up to +980000): the float16 graph on the CPU gives the float32
 * graph's result within half rounding, not NaN. */
static void test_large_mask_values_match_float32(void **state) {
    (void)state;
    float ref[B * SEQ * HID], got[B * SEQ * HID];
    ir_model *m = bert_block();
    run(m, ref);
    ir_model_free(m);
    build_fp16_stats st;
    m = fused_fp16(&st);
    run(m, got);
    ir_model_free(m);
    for (int i = 0; i < B * SEQ * HID; i++) {
        assert_false(isnan(ref[i]));
        if (!(fabsf(got[i] - ref[i]) <= 1e-2f + 1e-2f * fabsf(ref[i])))
            fprintf(stderr, "y[%d]: fp16 %g, fp32 %g\n", i, (double)got[i], (double)ref[i]);
        assert_true(fabsf(got[i] - ref[i]) <= 1e-2f + 1e-2f * fabsf(ref[i]));
    }
}

/* A mask value read by something else as well (here: a graph output) keeps the pass's
 * usual decision: the chain is sent back only when the mask is all it feeds. */
static void test_shared_mask_value_not_sent_back(void **state) {
    (void)state;
    ir_model *m = bert_block();
    ir_graph *g = m->graph;
    add_node(g, "Relu", "other_reader", S("inv"), 1, S("inv_relu"), 1);
    int32_t *outs = ARENA_ARRAY(&m->arena, int32_t, 2);
    outs[0] = g->outputs[0];
    outs[1] = ir_graph_value(g, "inv_relu");
    g->outputs = outs;
    g->n_outputs = 2;
    diag_list dl;
    diag_list_init(&dl);
    kiln_error e = {0};
    assert_int_equal(ir_infer(m, NULL, &dl, &e), KILN_OK);
    diag_list_free(&dl);
    build_pass_stats ps;
    memset(&ps, 0, sizeof ps);
    assert_int_equal(build_pass_fuse_attention(m, NULL, &ps, &e), KILN_OK);
    build_fp16_rules r = {node_half, input_half, NULL};
    build_fp16_stats st;
    assert_int_equal(build_pass_precision_fp16(m, &r, &st, &e), KILN_OK);
    /* Sub feeds a half Relu too: it stays half; Mul (read only by the mask slot) goes back */
    assert_int_equal(dt_of(g, find_op(g, "Sub")->outputs[0]), KILN_DTYPE_FLOAT16);
    const ir_node *mul = find_op(g, "Mul");
    assert_int_equal(dt_of(g, mul->outputs[0]), KILN_DTYPE_FLOAT);
    assert_int_equal(dt_of(g, find_op(g, "Attention")->inputs[3]), KILN_DTYPE_FLOAT);
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_chain_stays_float32),
        cmocka_unit_test(test_large_mask_values_match_float32),
        cmocka_unit_test(test_shared_mask_value_not_sent_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
