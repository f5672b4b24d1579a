/* test_merge_qkv.c - the Q/K/V merge pass (build/passes/merge_qkv.c) and kiln's
 * QkvAttention op on the CPU (cpu_qkv_attention.c, ops_qkv_attention.c).
 *
 * A hand-built projection block x -> MatMul(W*) + Add(b*) for q, k, v -> Attention (the
 * form fuse_attention.c leaves) must become one MatMul with the weights side by side
 * ([IN, 3*HID], bias [3*HID]) feeding one QkvAttention; the CPU must compute the same Y
 * from the merged graph as from the original (with and without a mask, with a causal
 * flag); near misses (projections of different inputs, a non-constant weight, a
 * projection read twice, biases on only some projections, softcap) stay as they are.
 * The builder runs the device passes for cuda engines (engine contexts run no passes):
 * a cuda engine built from the exported BERT form (projections + the 13-node attention
 * block) stores one MatMul + QkvAttention, which the CPU runs to the original's result;
 * a CPU engine keeps the block. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/builder.h"
#include "build/passes/passes.h"
#include "engine/engine.h"
#include "diag/diag.h"
#include "runtime/session.h"

#include "graph_builder.h"

enum { B = 2, SEQ = 5, IN = 4, H = 2, D = 3, HID = H * D };

enum variant { V_EXACT, V_NO_MASK, V_CAUSAL, V_OTHER_INPUT, V_WEIGHT_INPUT, V_READ_TWICE, V_BIAS_SOME, V_SOFTCAP };

static float wval(int which, int r, int c) { return 0.1f * (float)((which * 7 + r * 3 + c * 5) % 11) - 0.5f; }

static ir_model *block(enum variant var) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    bool mask = var != V_NO_MASK && var != V_CAUSAL;
    const char *ins[4] = {"x", "mask", "x2", "wv_in"};
    int n_in = 1;
    if (mask) ins[n_in++] = "mask";
    if (var == V_OTHER_INPUT) ins[n_in++] = "x2";
    if (var == V_WEIGHT_INPUT) ins[n_in++] = "wv_in";
    set_io(g, ins, n_in, var == V_READ_TWICE ? S("y", "q") : S("y"), var == V_READ_TWICE ? 2 : 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, IN}, NULL);
    if (var == V_OTHER_INPUT) set_type(g, "x2", KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, IN}, NULL);
    if (var == V_WEIGHT_INPUT) set_type(g, "wv_in", KILN_DTYPE_FLOAT, 2, (int64_t[]){IN, HID}, NULL);
    if (mask) set_type(g, "mask", KILN_DTYPE_FLOAT, 4, (int64_t[]){B, 1, 1, SEQ}, NULL);
    static const char *const wn[3] = {"wq", "wk", "wv"}, *const bn[3] = {"bq", "bk", "bv"};
    static const char *const mmo[3] = {"q0", "k0", "v0"}, *const outs[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        float w[IN * HID], b[HID];
        for (int r = 0; r < IN; r++)
            for (int c = 0; c < HID; c++) w[r * HID + c] = wval(i, r, c);
        for (int c = 0; c < HID; c++) b[c] = 0.05f * (float)(c + i);
        gb_typed_initializer(g, wn[i], KILN_DTYPE_FLOAT, 2, (int64_t[]){IN, HID}, w, 4);
        gb_typed_initializer(g, bn[i], KILN_DTYPE_FLOAT, 1, (int64_t[]){HID}, b, 4);
        const char *x = var == V_OTHER_INPUT && i == 1 ? "x2" : "x";
        const char *wsrc = var == V_WEIGHT_INPUT && i == 2 ? "wv_in" : wn[i];
        if (var == V_BIAS_SOME && i == 0) {
            add_node(g, "MatMul", mmo[i], S(x, wsrc), 2, S(outs[i]), 1);
        } else {
            add_node(g, "MatMul", mmo[i], S(x, wsrc), 2, S(mmo[i]), 1);
            add_node(g, "Add", outs[i], S(mmo[i], bn[i]), 2, S(outs[i]), 1);
        }
    }
    ir_node *a = add_node(g, "Attention", "att", mask ? S("q", "k", "v", "mask") : S("q", "k", "v"), mask ? 4 : 3,
                          S("y"), 1);
    a->opset = 23;
    int na = 2 + (var == V_CAUSAL) + (var == V_SOFTCAP);
    ir_attr *at = add_attrs(g, a, na);
    at[0].name = "q_num_heads", at[0].type = IR_ATTR_INT, at[0].i = H;
    at[1].name = "kv_num_heads", at[1].type = IR_ATTR_INT, at[1].i = H;
    if (var == V_CAUSAL) at[2].name = "is_causal", at[2].type = IR_ATTR_INT, at[2].i = 1;
    if (var == V_SOFTCAP) at[2].name = "softcap", at[2].type = IR_ATTR_FLOAT, at[2].f = 5.f;
    build_infer_types_quiet(m);
    return m;
}

/* The default passes (fuse_residual folds the bias Adds as kiln_bias), then the merge. */
static int merge(ir_model *m) {
    kiln_error e = {0};
    assert_int_equal(build_run_passes(m, NULL, &e), KILN_OK);
    build_infer_types_quiet(m);
    build_pass_stats st;
    memset(&st, 0, sizeof st);
    assert_int_equal(build_pass_merge_qkv(m, NULL, &st, &e), KILN_OK);
    return st.qkv_merged;
}

static const ir_node *find(const ir_graph *g, const char *domain, const char *op) {
    const ir_node *r = NULL;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, op) && !strcmp(g->nodes[i].domain, domain)) {
            assert_null(r);
            r = &g->nodes[i];
        }
    return r;
}

static void test_exact_block_merges(void **state) {
    (void)state;
    ir_model *m = block(V_EXACT);
    ir_graph *g = m->graph;
    assert_int_equal(merge(m), 1);
    assert_int_equal(g->n_nodes, 2);
    const ir_node *mm = find(g, "", "MatMul"), *qa = find(g, "kiln", "QkvAttention");
    assert_non_null(mm);
    assert_non_null(qa);
    assert_true(mm < qa); /* topological */
    assert_null(find(g, "", "Attention"));
    assert_int_equal(mm->n_inputs, 3);
    assert_int_equal(ir_node_attr_int(mm, "kiln_bias", -1), 2);
    const ir_tensor *w = g->values[mm->inputs[1]].init, *b = g->values[mm->inputs[2]].init;
    assert_non_null(w);
    assert_non_null(b);
    assert_int_equal(w->rank, 2);
    assert_int_equal(w->dims[0], IN);
    assert_int_equal(w->dims[1], 3 * HID);
    assert_int_equal(b->dims[0], 3 * HID);
    for (int r = 0; r < IN; r++)
        for (int c = 0; c < 3 * HID; c++) {
            float got;
            memcpy(&got, (const char *)w->data + sizeof(float) * (size_t)(r * 3 * HID + c), 4);
            assert_true(got == wval(c / HID, r, c % HID));
        }
    for (int c = 0; c < 3 * HID; c++) {
        float got;
        memcpy(&got, (const char *)b->data + sizeof(float) * (size_t)c, 4);
        assert_true(fabsf(got - 0.05f * (float)(c % HID + c / HID)) < 1e-7f);
    }
    /* the attention reads the packed projection and the mask, keeps its attributes */
    assert_int_equal(qa->n_inputs, 2);
    assert_int_equal(qa->inputs[0], mm->outputs[0]);
    assert_string_equal(g->values[qa->inputs[1]].name, "mask");
    assert_string_equal(g->values[qa->outputs[0]].name, "y");
    assert_int_equal(ir_node_attr_int(qa, "q_num_heads", 0), H);
    assert_int_equal(qa->opset, 1);
    /* types: qkv [B, SEQ, 3*HID] -> y [B, SEQ, HID] through ops_qkv_attention.c */
    const ir_type *pt = &g->values[qa->inputs[0]].type, *yt = &g->values[qa->outputs[0]].type;
    assert_int_equal(pt->rank, 3);
    assert_int_equal(pt->dims[2].value, 3 * HID);
    assert_int_equal(yt->rank, 3);
    assert_int_equal(yt->dims[0].value, B);
    assert_int_equal(yt->dims[1].value, SEQ);
    assert_int_equal(yt->dims[2].kind, IR_DIM_CONST);
    assert_int_equal(yt->dims[2].value, HID);
    ir_model_free(m);
}

static void test_near_misses_stay(void **state) {
    (void)state;
    static const enum variant misses[] = {V_OTHER_INPUT, V_WEIGHT_INPUT, V_READ_TWICE, V_BIAS_SOME, V_SOFTCAP};
    for (size_t i = 0; i < sizeof misses / sizeof misses[0]; i++) {
        ir_model *m = block(misses[i]);
        int f = merge(m);
        if (f) fprintf(stderr, "variant %d merged\n", (int)misses[i]);
        assert_int_equal(f, 0);
        assert_non_null(find(m->graph, "", "Attention"));
        assert_null(find(m->graph, "kiln", "QkvAttention"));
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

static void run(ir_model *m, bool mask, float *y) {
    rt_session_options o = rt_session_options_default();
    o.threads = 1;
    rt_session *s = NULL;
    kiln_error e = {0};
    kiln_status st = rt_session_create(m, &o, &s, &e);
    if (st != KILN_OK) fprintf(stderr, "session: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    rt_value x, mk, out;
    fill(&x, 3, (int64_t[]){B, SEQ, IN}, 1, false);
    fill(&mk, 4, (int64_t[]){B, 1, 1, SEQ}, 4, true);
    const rt_value *ins[] = {&x, &mk};
    st = rt_session_run(s, S("x", "mask"), ins, mask ? 2 : 1, &out, &e);
    if (st != KILN_OK) fprintf(stderr, "run: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    assert_int_equal((int)out.t.count, B * SEQ * HID);
    memcpy(y, out.t.data, sizeof(float) * B * SEQ * HID);
    rt_value_release(&out);
    rt_value_release(&x), rt_value_release(&mk);
    rt_session_free(s);
}

/* The CPU gives the original graph's Y from the merged one. */
static void test_cpu_merged_equals_original(void **state) {
    (void)state;
    static const enum variant vs[] = {V_EXACT, V_NO_MASK, V_CAUSAL};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        bool mask = vs[k] == V_EXACT;
        float ref[B * SEQ * HID], got[B * SEQ * HID];
        ir_model *m = block(vs[k]);
        run(m, mask, ref);
        ir_model_free(m);
        m = block(vs[k]);
        assert_int_equal(merge(m), 1);
        run(m, mask, got);
        ir_model_free(m);
        for (int i = 0; i < B * SEQ * HID; i++)
            assert_true(fabs((double)got[i] - (double)ref[i]) <= 1e-5 + 1e-5 * fabs((double)ref[i]));
    }
}

/* The mask matters: the masked keys of batch 1 change Y there (so the test above checks
 * that QkvAttention passes its mask on). */
static void test_mask_is_used(void **state) {
    (void)state;
    float with[B * SEQ * HID], without[B * SEQ * HID];
    ir_model *m = block(V_EXACT);
    assert_int_equal(merge(m), 1);
    run(m, true, with);
    ir_model_free(m);
    m = block(V_NO_MASK);
    assert_int_equal(merge(m), 1);
    run(m, false, without);
    ir_model_free(m);
    double d0 = 0, d1 = 0;
    for (int i = 0; i < SEQ * HID; i++) d0 += fabs((double)with[i] - (double)without[i]);
    for (int i = SEQ * HID; i < B * SEQ * HID; i++) d1 += fabs((double)with[i] - (double)without[i]);
    assert_true(d0 < 1e-6); /* batch 0 is not masked */
    assert_true(d1 > 1e-3);
}

/* The exported form: projections, head split, scores, scale, mask, softmax, merge. */
static ir_model *exported_block(void) {
    ir_model *m = new_model();
    ir_graph *g = m->graph;
    set_io(g, S("x", "mask"), 2, S("y"), 1);
    set_type(g, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){B, SEQ, IN}, NULL);
    set_type(g, "mask", KILN_DTYPE_FLOAT, 4, (int64_t[]){B, 1, 1, SEQ}, NULL);
    static const char *const wn[3] = {"wq", "wk", "wv"}, *const bn[3] = {"bq", "bk", "bv"};
    static const char *const mmo[3] = {"q0", "k0", "v0"}, *const outs[3] = {"q", "k", "v"};
    static const char *const r4[3] = {"q4r", "k4r", "v4r"}, *const t4[3] = {"q4", "kt", "v4"};
    int64_t split[4] = {0, 0, H, D}, merge_sh[3] = {0, 0, HID};
    gb_typed_initializer(g, "split", KILN_DTYPE_INT64, 1, (int64_t[]){4}, split, 8);
    gb_typed_initializer(g, "merge", KILN_DTYPE_INT64, 1, (int64_t[]){3}, merge_sh, 8);
    float c = sqrtf((float)D);
    gb_typed_initializer(g, "c", KILN_DTYPE_FLOAT, 0, NULL, &c, 4);
    for (int i = 0; i < 3; i++) {
        float w[IN * HID], b[HID];
        for (int r = 0; r < IN; r++)
            for (int col = 0; col < HID; col++) w[r * HID + col] = wval(i, r, col);
        for (int col = 0; col < HID; col++) b[col] = 0.05f * (float)(col + i);
        gb_typed_initializer(g, wn[i], KILN_DTYPE_FLOAT, 2, (int64_t[]){IN, HID}, w, 4);
        gb_typed_initializer(g, bn[i], KILN_DTYPE_FLOAT, 1, (int64_t[]){HID}, b, 4);
        add_node(g, "MatMul", mmo[i], S("x", wn[i]), 2, S(mmo[i]), 1);
        add_node(g, "Add", outs[i], S(mmo[i], bn[i]), 2, S(outs[i]), 1);
        add_node(g, "Reshape", r4[i], S(outs[i], "split"), 2, S(r4[i]), 1);
        gb_attr_ints(g, add_node(g, "Transpose", t4[i], S(r4[i]), 1, S(t4[i]), 1), "perm",
                     i == 1 ? (int64_t[]){0, 2, 3, 1} : (int64_t[]){0, 2, 1, 3}, 4);
    }
    add_node(g, "MatMul", "qk", S("q4", "kt"), 2, S("scores"), 1);
    add_node(g, "Div", "scale", S("scores", "c"), 2, S("scaled"), 1);
    add_node(g, "Add", "addmask", S("scaled", "mask"), 2, S("masked"), 1);
    gb_attr_int(g, add_node(g, "Softmax", "softmax", S("masked"), 1, S("p"), 1), "axis", -1);
    add_node(g, "MatMul", "pv", S("p", "v4"), 2, S("ctx"), 1);
    gb_attr_ints(g, add_node(g, "Transpose", "tctx", S("ctx"), 1, S("ctxt"), 1), "perm", (int64_t[]){0, 2, 1, 3}, 4);
    add_node(g, "Reshape", "merge_r", S("ctxt", "merge"), 2, S("y"), 1);
    return m;
}

static int count_op(const ir_graph *g, const char *domain, const char *op) {
    int n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op_type, op) && !strcmp(g->nodes[i].domain, domain);
    return n;
}

static engine_plan *build(const char *backend) {
    build_options o = build_options_default();
    o.time_tactics = false;
    o.backend = backend;
    o.gpu_arch = "sm_90 NVIDIA H200"; /* the GPU a cuda engine is for (none is used) */
    o.cuda_version = "13000 13000";
    o.cublas_version = o.cudnn_version = "1";
    diag_list dl;
    diag_list_init(&dl);
    engine_plan *plan = NULL;
    kiln_error e = {0};
    kiln_status st = build_engine(exported_block(), &o, &dl, &plan, NULL, &e);
    if (st != KILN_OK) fprintf(stderr, "build: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    diag_list_free(&dl);
    return plan;
}

static void test_cuda_engine_stores_fused_graph(void **state) {
    (void)state;
    float ref[B * SEQ * HID], got[B * SEQ * HID];
    ir_model *m = exported_block();
    run(m, true, ref);
    ir_model_free(m);
    engine_plan *p = build("cuda");
    const ir_graph *g = p->model->graph;
    assert_int_equal(count_op(g, "kiln", "QkvAttention"), 1);
    assert_int_equal(count_op(g, "", "Softmax"), 0);
    assert_int_equal(count_op(g, "", "Transpose"), 0);
    assert_int_equal(count_op(g, "", "MatMul"), 1);
    assert_int_equal(g->n_nodes, 2);
    /* the separate projection weights are not carried (only the concatenated ones) */
    for (int i = 0; i < 3; i++) {
        int32_t w = ir_graph_find(g, (const char *[]){"wq", "wk", "wv"}[i]);
        assert_true(w == IR_NONE || !g->values[w].init);
    }
    uint8_t *bytes = NULL;
    size_t size = 0;
    kiln_error we = {0};
    assert_int_equal(engine_write_mem(p, &bytes, &size, &we), KILN_OK);
    engine_read_options ro = {.skip_compat = true};
    engine_plan *back = NULL;
    assert_int_equal(engine_read_mem(bytes, size, &ro, &back, &we), KILN_OK);
    const ir_graph *bg = back->model->graph;
    assert_int_equal(bg->n_nodes, 2);
    uint64_t elems = 0; /* the weights the engine carries: one [IN, 3*HID] weight and its bias */
    for (int32_t i = 0; i < bg->n_initializers; i++) elems += bg->values[bg->initializers[i]].init->count;
    assert_true(elems <= (uint64_t)(IN * 3 * HID + 3 * HID + 8));
    engine_plan_free(back);
    free(bytes);
    /* what a context would run, here on the CPU (no passes: the engine's graph as stored) */
    rt_session_options o = rt_session_options_default();
    o.threads = 1;
    o.run_passes = false;
    rt_session *s = NULL;
    kiln_error e = {0};
    assert_int_equal(rt_session_create(p->model, &o, &s, &e), KILN_OK);
    rt_value x, mk, out;
    fill(&x, 3, (int64_t[]){B, SEQ, IN}, 1, false);
    fill(&mk, 4, (int64_t[]){B, 1, 1, SEQ}, 4, true);
    const rt_value *ins[] = {&x, &mk};
    assert_int_equal(rt_session_run(s, S("x", "mask"), ins, 2, &out, &e), KILN_OK);
    memcpy(got, out.t.data, sizeof got);
    rt_value_release(&out), rt_value_release(&x), rt_value_release(&mk);
    rt_session_free(s);
    engine_plan_free(p);
    for (int i = 0; i < B * SEQ * HID; i++)
        assert_true(fabs((double)got[i] - (double)ref[i]) <= 1e-5 + 1e-5 * fabs((double)ref[i]));
    /* a CPU engine fuses the attention (cpu_attention_fast.h) but keeps the three
     * projections (one merged GEMM measured no faster there, build_run_host_passes) */
    p = build("cpu");
    assert_int_equal(count_op(p->model->graph, "", "Softmax"), 0);
    assert_int_equal(count_op(p->model->graph, "", "Attention"), 1);
    assert_int_equal(count_op(p->model->graph, "kiln", "QkvAttention"), 0);
    engine_plan_free(p);
}

static bool every_node_half(void *user, const ir_model *m, const ir_node *n) {
    (void)user, (void)m, (void)n;
    return true;
}

/* A cuda build's device session rewrites the graph after the layer table was made (FP16
 * Casts here): the table is made again from the final nodes, with their precision. */
static void test_layers_follow_the_device_passes(void **state) {
    (void)state;
    engine_plan *p = build("cuda");
    ir_graph *g = p->model->graph;
    build_fp16_rules r = {every_node_half, NULL, NULL};
    kiln_error e = {0};
    assert_int_equal(build_pass_precision_fp16(p->model, &r, NULL, &e), KILN_OK);
    assert_true(g->n_nodes > p->n_layers); /* Casts at the boundaries */
    assert_int_equal(build_plan_relayer(p, g, &e), KILN_OK);
    assert_int_equal(p->n_layers, g->n_nodes);
    int half = 0, casts = 0;
    for (int32_t i = 0; i < p->n_layers; i++) {
        assert_int_equal(p->layers[i].node, i);
        assert_string_equal(p->layers[i].name, g->nodes[i].name);
        casts += !strcmp(p->layers[i].op_type, "Cast");
        if (!strcmp(p->layers[i].op_type, "QkvAttention")) {
            assert_int_equal(p->layers[i].precision, ENGINE_PREC_FP16);
            half++;
        }
    }
    assert_int_equal(half, 1);
    assert_true(casts >= 1);
    /* and the engine still writes and reads back */
    uint8_t *bytes = NULL;
    size_t size = 0;
    assert_int_equal(engine_write_mem(p, &bytes, &size, &e), KILN_OK);
    engine_read_options ro = {.skip_compat = true};
    engine_plan *back = NULL;
    assert_int_equal(engine_read_mem(bytes, size, &ro, &back, &e), KILN_OK);
    assert_int_equal(back->n_layers, g->n_nodes);
    engine_plan_free(back);
    free(bytes);
    engine_plan_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_block_merges),
        cmocka_unit_test(test_near_misses_stay),
        cmocka_unit_test(test_cpu_merged_equals_original),
        cmocka_unit_test(test_mask_is_used),
        cmocka_unit_test(test_cuda_engine_stores_fused_graph),
        cmocka_unit_test(test_layers_follow_the_device_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
