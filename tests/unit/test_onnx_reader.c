/* test_onnx_reader.c - the ONNX reader on hand-built models (tests/unit/pbenc.h):
 * a valid model with every kind of field round-trips into the IR with the right values,
 * and each kind of broken file gets a message naming the file, the byte offset, the field
 * path and the fix. External data is tested in a temporary folder. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/magic.h"
#include "onnx/onnx_load.h"
#include "onnx/onnx_value_file.h"
#include "pbenc.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static kiln_model_options opts_default(void) { return kiln_model_options_default(); }

/* Loads bytes expecting failure; returns the message (static buffer). */
static const char *load_fail(const pbw *w, size_t size) {
    static char msg[4096];
    ir_model *m = (ir_model *)1;
    kiln_error e = {0};
    kiln_model_options o = opts_default();
    kiln_status st = onnx_load_bytes(w->d, size, "m.onnx", NULL, &o, &m, &e);
    assert_int_not_equal(st, KILN_OK);
    assert_null(m);
    snprintf(msg, sizeof msg, "%s", kiln_err_msg(&e));
    kiln_err_clear(&e);
    return msg;
}

static ir_model *load_ok(const pbw *w) {
    ir_model *m = NULL;
    kiln_error e = {0};
    kiln_model_options o = opts_default();
    kiln_status st = onnx_load_bytes(w->d, w->n, "m.onnx", NULL, &o, &m, &e);
    if (st != KILN_OK) print_error("unexpected failure: %s\n", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    assert_non_null(m);
    kiln_err_clear(&e);
    return m;
}

#define assert_has(msg, needle)                                                                   \
    do {                                                                                          \
        if (!strstr((msg), (needle))) print_error("message lacks \"%s\":\n  %s\n", (needle), (msg)); \
        assert_non_null(strstr((msg), (needle)));                                                 \
    } while (0)

/* A one-node graph Relu(X) -> Y with an initializer tensor given as a raw TensorProto. */
static pbw graph_with_tensor(pbw *tensor) {
    pbw g = {0};
    const char *in[] = {"X"}, *out[] = {"Y"};
    pbw n = onnx_node("Relu", "relu1", in, 1, out, 1);
    pbw_msg(&g, 1, &n);
    pbw_str(&g, 2, "g");
    if (tensor) pbw_msg(&g, 5, tensor);
    const char *d[] = {"2"};
    pbw x = onnx_value_info("X", 1, d, 1), y = onnx_value_info("Y", 1, d, 1);
    pbw_msg(&g, 11, &x);
    pbw_msg(&g, 12, &y);
    return g;
}

static pbw model_with_tensor(pbw *tensor) {
    pbw g = graph_with_tensor(tensor);
    return onnx_model(&g, 17);
}

/* ---- the valid model --------------------------------------------------------------------- */

static pbw attr_of(const char *name, int type) {
    pbw a = {0};
    pbw_str(&a, 1, name);
    pbw_int(&a, 20, type);
    return a;
}

static pbw full_model(void) {
    pbw g = {0};
    /* node 0: Conv 'conv1' with attributes of every type */
    const char *cin[] = {"X", "W", ""}, *cout[] = {"C"};
    pbw conv = onnx_node("Conv", "conv1", cin, 3, cout, 1);
    pbw a;
    a = attr_of("alpha", 1);
    pbw_f32(&a, 2, 0.25f);
    pbw_msg(&conv, 5, &a);
    a = onnx_attr_int("group", 1);
    pbw_msg(&conv, 5, &a);
    a = attr_of("auto_pad", 3);
    pbw_str(&a, 4, "NOTSET");
    pbw_msg(&conv, 5, &a);
    a = attr_of("value", 4);
    {
        float v[2] = {1.5f, -2.0f};
        int64_t d[] = {2};
        pbw t = onnx_tensor_raw("val", 1, d, 1, v, sizeof v);
        pbw_msg(&a, 5, &t);
    }
    pbw_msg(&conv, 5, &a);
    a = attr_of("scales", 6);
    {
        float fs[3] = {1.0f, 2.0f, 0.5f};
        pbw_packed_f32(&a, 7, fs, 3);
    }
    pbw_msg(&conv, 5, &a);
    a = attr_of("kernel_shape", 7);
    {
        int64_t ks[] = {3, 3};
        pbw_packed_i64(&a, 8, ks, 2);
        pbw_int(&a, 8, -1); /* an unpacked element after the packed ones */
    }
    pbw_msg(&conv, 5, &a);
    a = attr_of("names", 8);
    pbw_str(&a, 9, "a");
    pbw_str(&a, 9, "bc");
    pbw_msg(&conv, 5, &a);
    a = attr_of("ts", 9);
    for (int i = 0; i < 2; i++) {
        int32_t v = i + 7;
        int64_t d[] = {1};
        pbw t = onnx_tensor_raw("", 6, d, 1, &v, 4);
        pbw_msg(&a, 10, &t);
    }
    pbw_msg(&conv, 5, &a);
    a = attr_of("gs", 10);
    for (int i = 0; i < 2; i++) {
        pbw sg = {0};
        pbw_str(&sg, 2, i ? "g1" : "g0");
        pbw_msg(&a, 11, &sg);
    }
    pbw_msg(&conv, 5, &a);
    a = attr_of("sp", 11);
    {
        float v = 3.0f;
        int64_t one[] = {1}, idx = 2, dims[] = {4};
        pbw sv = onnx_tensor_raw("spv", 1, one, 1, &v, 4);
        pbw si = onnx_tensor_raw("", 7, one, 1, &idx, 8);
        pbw s = {0};
        pbw_msg(&s, 1, &sv);
        pbw_msg(&s, 2, &si);
        pbw_packed_i64(&s, 3, dims, 1);
        pbw s2 = {0};
        pbw_raw(&s2, s.d, s.n);
        pbw_msg(&a, 22, &s);
        pbw_msg(&conv, 5, &a);
        a = attr_of("sps", 12);
        pbw_msg(&a, 23, &s2);
    }
    pbw_msg(&conv, 5, &a);
    a = attr_of("tp", 13);
    {
        const char *d[] = {"N", "4"};
        pbw tt = onnx_tensor_type(10, d, 2);
        pbw seq = {0}, tp = {0};
        pbw_msg(&seq, 1, &tt);
        pbw_msg(&tp, 4, &seq);
        pbw_msg(&a, 14, &tp);
    }
    pbw_msg(&conv, 5, &a);
    a = attr_of("tps", 14);
    {
        pbw t1 = onnx_tensor_type(7, NULL, -1);
        pbw map = {0}, tp = {0};
        pbw t2 = onnx_tensor_type(1, NULL, 0);
        pbw_int(&map, 1, 8);
        pbw_msg(&map, 2, &t2);
        pbw_msg(&tp, 5, &map);
        pbw_msg(&a, 15, &t1);
        pbw_msg(&a, 15, &tp);
    }
    pbw_msg(&conv, 5, &a);
    pbw_msg(&g, 1, &conv);

    /* node 1: unnamed, domain "ai.onnx" */
    const char *rin[] = {"C"}, *rout[] = {"R"};
    pbw relu = onnx_node("Relu", NULL, rin, 1, rout, 1);
    pbw_str(&relu, 7, "ai.onnx");
    pbw_msg(&g, 1, &relu);

    /* node 2: If with a then_branch that uses the outer value R */
    const char *iin[] = {"cond"}, *iout[] = {"Z"};
    pbw ifn = onnx_node("If", "if1", iin, 1, iout, 1);
    {
        pbw then = {0};
        const char *tin[] = {"R"}, *tout[] = {"T"};
        pbw id = onnx_node("Identity", "inner", tin, 1, tout, 1);
        pbw_msg(&then, 1, &id);
        pbw_str(&then, 2, "then_g");
        const char *d[] = {"batch"};
        pbw to = onnx_value_info("T", 1, d, 1);
        pbw_msg(&then, 12, &to);
        a = attr_of("then_branch", 5);
        pbw_msg(&a, 6, &then);
        pbw_msg(&ifn, 5, &a);
    }
    pbw_msg(&g, 1, &ifn);

    /* node 3: a call of the local function */
    const char *fin[] = {"R"}, *fout[] = {"F"};
    pbw call = onnx_node("MyFn", "call", fin, 1, fout, 1);
    pbw_str(&call, 7, "local");
    pbw_msg(&g, 1, &call);

    pbw_str(&g, 2, "main");
    /* initializers: raw and every typed field */
    {
        float w[4] = {1, 2, 3, 4};
        int64_t d[] = {2, 2};
        pbw t = onnx_tensor_raw("W", 1, d, 2, w, sizeof w);
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t d = 2;
        pbw_packed_i64(&t, 1, &d, 1);
        pbw_int(&t, 2, 1);
        pbw_f32(&t, 4, 0.5f); /* unpacked float_data */
        pbw_f32(&t, 4, -1.0f);
        pbw_str(&t, 8, "B");
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t d = 3, v[] = {1, -2, 3};
        pbw_int(&t, 1, d); /* unpacked dims */
        pbw_int(&t, 2, 7);
        pbw_packed_i64(&t, 7, v, 3);
        pbw_str(&t, 8, "I64");
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t d = 3, v[] = {-1, 2, 127};
        pbw_packed_i64(&t, 1, &d, 1);
        pbw_int(&t, 2, 3); /* int8 in int32_data */
        pbw_packed_i64(&t, 5, v, 3);
        pbw_str(&t, 8, "I8");
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t v[] = {0x3C00};
        pbw_int(&t, 2, 10); /* float16 scalar in int32_data */
        pbw_packed_i64(&t, 5, v, 1);
        pbw_str(&t, 8, "H");
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t d = 3, v[] = {0x21, 0x03}; /* int4 [1, 2, 3] packed low nibble first */
        pbw_packed_i64(&t, 1, &d, 1);
        pbw_int(&t, 2, 22);
        pbw_packed_i64(&t, 5, v, 2);
        pbw_str(&t, 8, "Q4");
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t d = 2;
        pbw_packed_i64(&t, 1, &d, 1);
        pbw_int(&t, 2, 8);
        pbw_str(&t, 6, "hello");
        pbw_str(&t, 6, "");
        pbw_str(&t, 8, "S");
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t d = 1;
        double dv = 2.5;
        pbw_packed_i64(&t, 1, &d, 1);
        pbw_int(&t, 2, 11);
        pbw_bytes(&t, 10, &dv, 8);
        pbw_str(&t, 8, "D");
        pbw_msg(&g, 5, &t);
    }
    {
        pbw t = {0};
        int64_t d = 2, v[] = {7, 4000000000LL};
        pbw_packed_i64(&t, 1, &d, 1);
        pbw_int(&t, 2, 12); /* uint32 in uint64_data */
        pbw_packed_i64(&t, 11, v, 2);
        pbw_str(&t, 8, "U32");
        pbw_msg(&g, 5, &t);
    }
    /* inputs and outputs */
    const char *xd[] = {"batch", "3", "?", "4"};
    pbw x = onnx_value_info("X", 1, xd, 4);
    pbw_msg(&g, 11, &x);
    pbw cond = onnx_value_info("cond", 9, NULL, 0);
    pbw_msg(&g, 11, &cond);
    const char *zd[] = {"batch"};
    pbw z = onnx_value_info("Z", 1, zd, 1);
    pbw_msg(&g, 12, &z);
    pbw vi = onnx_value_info("C", 1, NULL, -1);
    pbw_msg(&g, 13, &vi);

    pbw m = {0};
    pbw_int(&m, 1, 9);
    pbw_str(&m, 2, "kiln-test");
    pbw_str(&m, 3, "1.0");
    pbw_str(&m, 4, "org.test");
    pbw_int(&m, 5, 42);
    pbw_str(&m, 6, "a doc");
    pbw_msg(&m, 7, &g);
    pbw o = onnx_opset("ai.onnx", 17);
    pbw_msg(&m, 8, &o);
    o = onnx_opset("local", 1);
    pbw_msg(&m, 8, &o);
    pbw kv = {0};
    pbw_str(&kv, 1, "author");
    pbw_str(&kv, 2, "me");
    pbw_msg(&m, 14, &kv);
    pbw ti = {0}; /* training_info: skipped, must not break parsing */
    pbw tg = {0};
    pbw_str(&tg, 2, "train");
    pbw_msg(&ti, 1, &tg);
    pbw_msg(&m, 20, &ti);
    /* the function */
    pbw fn = {0};
    pbw_str(&fn, 1, "MyFn");
    pbw_str(&fn, 4, "a");
    pbw_str(&fn, 5, "b");
    pbw_str(&fn, 6, "alpha");
    a = onnx_attr_int("beta", 2);
    pbw_msg(&fn, 11, &a);
    const char *fi[] = {"a"}, *fo[] = {"b"};
    pbw fnode = onnx_node("Elu", "fe", fi, 1, fo, 1);
    a = attr_of("alpha", 1);
    pbw_str(&a, 21, "alpha");
    pbw_msg(&fnode, 5, &a);
    pbw_msg(&fn, 7, &fnode);
    o = onnx_opset("", 18);
    pbw_msg(&fn, 9, &o);
    pbw_str(&fn, 10, "local");
    pbw_msg(&m, 25, &fn);
    /* unknown top-level fields of every wire type are skipped */
    pbw_int(&m, 1000, 5);
    pbw_str(&m, 1001, "future");
    pbw_f32(&m, 1002, 1.0f);
    pbw_tag(&m, 1003, 1);
    pbw_raw(&m, "\0\0\0\0\0\0\0\0", 8);
    pbw_tag(&m, 1004, 3);
    pbw_int(&m, 1, 1);
    pbw_tag(&m, 1004, 4);
    return m;
}

static const ir_tensor *init_of(const ir_graph *g, const char *name) {
    int32_t v = ir_graph_find(g, name);
    assert_int_not_equal(v, IR_NONE);
    assert_true(ir_val(g, v)->flags & IR_VALUE_INITIALIZER);
    assert_non_null(ir_val(g, v)->init);
    return ir_val(g, v)->init;
}

static void test_valid_model(void **state) {
    (void)state;
    pbw w = full_model();
    ir_model *m = load_ok(&w);
    assert_int_equal(m->ir_version, 9);
    assert_string_equal(m->producer_name, "kiln-test");
    assert_string_equal(m->producer_version, "1.0");
    assert_string_equal(m->domain, "org.test");
    assert_int_equal(m->model_version, 42);
    assert_string_equal(m->doc, "a doc");
    assert_int_equal(m->n_opsets, 2);
    assert_int_equal(ir_model_opset(m, ""), 17); /* "ai.onnx" normalised */
    assert_int_equal(ir_model_opset(m, "local"), 1);
    assert_int_equal(m->n_metadata, 1);
    assert_string_equal(m->metadata[0].key, "author");
    assert_string_equal(m->metadata[0].value, "me");
    assert_ptr_equal(m->file_data, w.d);

    ir_graph *g = m->graph;
    assert_string_equal(g->name, "main");
    assert_int_equal(g->n_nodes, 4);
    assert_int_equal(g->n_inputs, 2);
    assert_int_equal(g->n_outputs, 1);
    assert_int_equal(g->n_initializers, 9);

    /* input X: float32[batch, 3, ?, 4] */
    ir_value *x = ir_val(g, g->inputs[0]);
    assert_string_equal(x->name, "X");
    assert_true(x->flags & IR_VALUE_GRAPH_INPUT);
    assert_true(x->flags & IR_VALUE_HAS_VALUE_INFO);
    assert_int_equal(x->type.kind, IR_TYPE_TENSOR);
    assert_int_equal(x->type.dtype, KILN_DTYPE_FLOAT);
    assert_int_equal(x->type.rank, 4);
    assert_int_equal(x->type.dims[0].kind, IR_DIM_SYM);
    assert_string_equal(m->syms[x->type.dims[0].sym].name, "batch");
    assert_int_equal(x->type.dims[1].kind, IR_DIM_CONST);
    assert_int_equal(x->type.dims[1].value, 3);
    assert_int_equal(x->type.dims[2].kind, IR_DIM_UNKNOWN);
    assert_string_equal(ir_type_str(m, &x->type), "float32[batch, 3, ?, 4]");
    /* Z shares the symbol */
    ir_value *z = ir_val(g, g->outputs[0]);
    assert_int_equal(z->type.dims[0].sym, x->type.dims[0].sym);
    assert_string_equal(ir_type_str(m, &ir_val(g, g->inputs[1])->type), "bool[]");
    /* value_info without a shape: unknown rank */
    int32_t c = ir_graph_find(g, "C");
    assert_int_equal(ir_val(g, c)->type.rank, -1);
    assert_true(ir_val(g, c)->flags & IR_VALUE_HAS_VALUE_INFO);
    assert_int_equal(ir_val(g, c)->producer, 0);

    /* node 0 and its attributes */
    ir_node *n = ir_graph_node(g, 0);
    assert_string_equal(n->name, "conv1");
    assert_false(n->name_generated);
    assert_string_equal(n->op_type, "Conv");
    assert_int_equal(n->opset, 17);
    assert_int_equal(n->n_inputs, 3);
    assert_int_equal(n->inputs[2], IR_NONE);
    assert_string_equal(ir_val(g, n->inputs[1])->name, "W");
    assert_int_equal(n->source_index, 0);
    assert_true(n->file_offset > 0 && n->file_offset < w.n);
    assert_int_equal(n->n_attrs, 13);
    const ir_attr *at = ir_node_attr(n, "alpha");
    assert_int_equal(at->type, IR_ATTR_FLOAT);
    assert_true(at->f == 0.25f);
    assert_int_equal(ir_node_attr_int(n, "group", 0), 1);
    at = ir_node_attr(n, "auto_pad");
    assert_int_equal(at->type, IR_ATTR_STRING);
    assert_int_equal(at->s.len, 6);
    assert_memory_equal(at->s.data, "NOTSET", 6);
    at = ir_node_attr(n, "value");
    assert_int_equal(at->type, IR_ATTR_TENSOR);
    assert_int_equal(at->t->where, IR_DATA_MAPPED);
    float fv[2];
    memcpy(fv, at->t->data, 8); /* mapped data is not aligned in general */
    assert_true(fv[1] == -2.0f);
    /* onnx_tensor_align gives aligned data with the same bytes */
    {
        ir_tensor *vt = at->t;
        kiln_error ae = {0};
        assert_int_equal(onnx_tensor_align(m, vt, &ae), KILN_OK);
        assert_int_equal((uintptr_t)vt->data % 4, 0);
        assert_true(((const float *)vt->data)[1] == -2.0f);
        assert_true(vt->where == IR_DATA_OWNED || vt->where == IR_DATA_MAPPED);
    }
    at = ir_node_attr(n, "scales");
    assert_int_equal(at->n, 3);
    assert_true(at->floats[2] == 0.5f);
    at = ir_node_attr(n, "kernel_shape");
    assert_int_equal(at->type, IR_ATTR_INTS);
    assert_int_equal(at->n, 3);
    assert_int_equal(at->ints[0], 3);
    assert_int_equal(at->ints[2], -1);
    at = ir_node_attr(n, "names");
    assert_int_equal(at->n, 2);
    assert_memory_equal(at->strings[1].data, "bc", 2);
    at = ir_node_attr(n, "ts");
    assert_int_equal(at->n, 2);
    int32_t iv;
    memcpy(&iv, at->tensors[1]->data, 4);
    assert_int_equal(iv, 8);
    at = ir_node_attr(n, "gs");
    assert_int_equal(at->type, IR_ATTR_GRAPHS);
    assert_int_equal(at->n, 2);
    assert_string_equal(at->graphs[1]->name, "g1");
    assert_ptr_equal(at->graphs[1]->parent, g);
    assert_string_equal(at->graphs[0]->location, "node 'conv1' (Conv) attribute 'gs'[0]");
    at = ir_node_attr(n, "sp");
    assert_int_equal(at->type, IR_ATTR_SPARSE_TENSOR);
    assert_int_equal(at->sparse->rank, 1);
    assert_int_equal(at->sparse->dims[0], 4);
    assert_string_equal(at->sparse->values->name, "spv");
    at = ir_node_attr(n, "sps");
    assert_int_equal(at->n, 1);
    assert_int_equal(at->sparses[0]->indices->dtype, KILN_DTYPE_INT64);
    at = ir_node_attr(n, "tp");
    assert_int_equal(at->type, IR_ATTR_TYPE_PROTO);
    assert_string_equal(ir_type_str(m, at->tp), "seq(float16[N, 4])");
    at = ir_node_attr(n, "tps");
    assert_int_equal(at->n, 2);
    assert_string_equal(ir_type_str(m, at->tps[0]), "int64[?]");
    assert_string_equal(ir_type_str(m, at->tps[1]), "map(string, float32[])");

    /* node 1: generated name, normalised domain */
    n = ir_graph_node(g, 1);
    assert_true(n->name_generated);
    assert_string_equal(n->name, "Relu_1");
    assert_string_equal(n->domain, "");
    assert_int_equal(n->opset, 17);

    /* node 2: the If's subgraph */
    n = ir_graph_node(g, 2);
    at = ir_node_attr(n, "then_branch");
    assert_int_equal(at->type, IR_ATTR_GRAPH);
    ir_graph *sg = at->g;
    assert_ptr_equal(sg->parent, g);
    assert_string_equal(sg->name, "then_g");
    assert_string_equal(sg->location, "node 'if1' (If) attribute 'then_branch'");
    assert_int_equal(sg->n_nodes, 1);
    assert_int_equal(sg->nodes[0].opset, 17);
    int32_t r_in_sub = ir_graph_find(sg, "R");
    assert_int_not_equal(r_in_sub, IR_NONE); /* outer-scope name created in the subgraph */
    assert_int_equal(ir_val(sg, r_in_sub)->producer, IR_NONE);

    /* node 3 and the function */
    n = ir_graph_node(g, 3);
    assert_string_equal(n->domain, "local");
    assert_int_equal(n->opset, 1);
    assert_int_equal(m->n_functions, 1);
    ir_function *fn = &m->functions[0];
    assert_string_equal(fn->name, "MyFn");
    assert_string_equal(fn->domain, "local");
    assert_int_equal(fn->n_attr_names, 1);
    assert_string_equal(fn->attr_names[0], "alpha");
    assert_int_equal(fn->n_attr_defaults, 1);
    assert_string_equal(fn->attr_defaults[0].name, "beta");
    assert_int_equal(fn->attr_defaults[0].i, 2);
    assert_null(fn->body->parent);
    assert_int_equal(fn->body->n_inputs, 1);
    assert_int_equal(fn->body->n_outputs, 1);
    assert_int_equal(fn->body->n_nodes, 1);
    assert_int_equal(fn->body->nodes[0].opset, 18); /* the function's own import */
    assert_string_equal(fn->body->nodes[0].attrs[0].ref_attr_name, "alpha");
    assert_string_equal(fn->body->location, "function 'MyFn'");

    /* initializers */
    const ir_tensor *t = init_of(g, "W");
    assert_int_equal(t->where, IR_DATA_MAPPED);
    assert_true((const uint8_t *)t->data > w.d && (const uint8_t *)t->data < w.d + w.n);
    assert_int_equal(t->rank, 2);
    assert_int_equal(t->count, 4);
    assert_int_equal(t->nbytes, 16);
    float wf[4];
    memcpy(wf, t->data, 16);
    assert_true(wf[3] == 4.0f);
    assert_true(t->file_offset > 0);
    assert_string_equal(ir_type_str(m, &ir_val(g, ir_graph_find(g, "W"))->type), "float32[2, 2]");
    t = init_of(g, "B");
    assert_int_equal(t->where, IR_DATA_OWNED);
    assert_true(((const float *)t->data)[1] == -1.0f);
    t = init_of(g, "I64");
    assert_int_equal(((const int64_t *)t->data)[1], -2);
    t = init_of(g, "I8");
    assert_int_equal(t->nbytes, 3);
    assert_int_equal(((const int8_t *)t->data)[0], -1);
    assert_int_equal(((const int8_t *)t->data)[2], 127);
    t = init_of(g, "H");
    assert_int_equal(t->rank, 0);
    assert_int_equal(t->count, 1);
    uint16_t h16;
    memcpy(&h16, t->data, sizeof h16);
    assert_true(kiln_fp16_to_fp32(h16) == 1.0f);
    t = init_of(g, "Q4");
    assert_int_equal(t->nbytes, 2);
    assert_int_equal(((const uint8_t *)t->data)[0], 0x21);
    assert_int_equal(((const uint8_t *)t->data)[1], 0x03);
    t = init_of(g, "S");
    assert_int_equal(t->count, 2);
    assert_int_equal(t->strings[0].len, 5);
    assert_memory_equal(t->strings[0].data, "hello", 5);
    assert_int_equal(t->strings[1].len, 0);
    t = init_of(g, "D");
    assert_true(*(const double *)t->data == 2.5);
    t = init_of(g, "U32");
    assert_int_equal(t->nbytes, 8);
    assert_int_equal(((const uint32_t *)t->data)[1], 4000000000u);

    assert_true(m->n_graphs >= 5); /* main, gs[0], gs[1], then_branch, function body */
    ir_model_free(m);
    pbw_free(&w);
}

/* A graph input and a value_info both declare a value: the first declaration wins; an
 * initializer without a declaration gets its own shape; file order does not matter. */
static void test_declaration_merging(void **state) {
    (void)state;
    pbw g = {0};
    const char *d2[] = {"2"}, *d5[] = {"5"};
    pbw vi = onnx_value_info("Y", 1, d5, 1); /* value_info before the node that makes Y */
    pbw_msg(&g, 13, &vi);
    const char *in[] = {"X"}, *out[] = {"Y"};
    pbw n1 = onnx_node("Relu", "first", in, 1, out, 1);
    pbw n2 = onnx_node("Relu", "second", in, 1, out, 1);
    pbw_msg(&g, 1, &n1);
    pbw_msg(&g, 1, &n2);
    pbw x = onnx_value_info("X", 1, d2, 1);
    pbw y = onnx_value_info("Y", 1, d2, 1);
    pbw_msg(&g, 11, &x);
    pbw_msg(&g, 12, &y);
    pbw m = onnx_model(&g, 13);
    ir_model *im = load_ok(&m);
    ir_graph *ig = im->graph;
    int32_t yv = ir_graph_find(ig, "Y");
    assert_int_equal(ir_val(ig, yv)->type.dims[0].value, 5);
    assert_int_equal(ir_val(ig, yv)->producer, 0); /* first producer kept */
    assert_true(ir_val(ig, yv)->flags & IR_VALUE_GRAPH_OUTPUT);
    ir_model_free(im);
    pbw_free(&m);
}

/* ---- errors ------------------------------------------------------------------------------ */

static void test_empty_and_junk(void **state) {
    (void)state;
    pbw w = {0};
    pbw_raw(&w, "x", 1);
    const char *msg = load_fail(&w, 0);
    assert_has(msg, "m.onnx");
    assert_has(msg, "empty");
    pbw_free(&w);

    pbw_raw(&w, "hello, this is plainly not protobuf at all", 42);
    msg = load_fail(&w, w.n);
    assert_has(msg, "m.onnx");
    assert_has(msg, "not an ONNX model (no ModelProto found)");
    assert_has(msg, "first bytes are 68 65 6c 6c 6f");
    pbw_free(&w);

    /* starts like a ModelProto (ir_version) but breaks right after */
    const uint8_t b[] = {0x08, 0x07, 0xFF, 0xFF, 0xFF};
    pbw_raw(&w, b, sizeof b);
    msg = load_fail(&w, w.n);
    assert_has(msg, "not an ONNX model");
    assert_has(msg, "byte 2");
    pbw_free(&w);
}

static void test_truncated(void **state) {
    (void)state;
    static uint8_t data[4096];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)i;
    int64_t d[] = {1024};
    pbw t = onnx_tensor_raw("fc.weight", 1, d, 1, data, sizeof data);
    pbw w = model_with_tensor(&t);
    size_t cut = w.n - 3000; /* inside raw_data */
    const char *msg = load_fail(&w, cut);
    assert_has(msg, "m.onnx");
    assert_has(msg, "graph.initializer[0] 'fc.weight' .raw_data");
    assert_has(msg, "needs 4096 bytes");
    assert_has(msg, "truncated");
    assert_has(msg, "re-download");
    assert_has(msg, "at byte ");
    /* cut between fields of the graph: the graph itself is reported */
    pbw g = graph_with_tensor(NULL);
    size_t gl = g.n;
    pbw w2 = onnx_model(&g, 17);
    /* model: [08 08] [12 09 kiln-test] [3a len graph] ... keep the graph's first node only */
    size_t graph_payload = 2 + 11 + 1 + (gl >= 128 ? 2 : 1);
    (void)graph_payload;
    msg = load_fail(&w2, w2.n - 8); /* drops the opset and part of the graph's last field */
    assert_has(msg, "truncated");
    assert_has(msg, "graph");
    pbw_free(&w);
    pbw_free(&w2);
}

static void test_foreign_formats(void **state) {
    (void)state;
    pbw w = {0};
    /* PyTorch zip checkpoint */
    pbw_raw(&w, "PK\x03\x04\x14\x00\x00\x00\x00\x00archive/data.pkl", 26);
    const char *msg = load_fail(&w, w.n);
    assert_has(msg, "PyTorch checkpoint");
    assert_has(msg, "torch.onnx.export(model, example_inputs, 'model.onnx')");
    pbw_free(&w);
    /* legacy pickle */
    pbw_raw(&w, "\x80\x02\x8a\x0a" "lz\xfc\x9c" "F\xf9 j\xa8P\x19.", 16);
    msg = load_fail(&w, w.n);
    assert_has(msg, "pickle");
    assert_has(msg, "torch.onnx.export");
    pbw_free(&w);
    /* Git LFS pointer */
    const char *lfs = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 102400000\n";
    pbw_raw(&w, lfs, strlen(lfs));
    msg = load_fail(&w, w.n);
    assert_has(msg, "Git LFS pointer");
    assert_has(msg, "git lfs pull");
    assert_has(msg, "102400000");
    pbw_free(&w);
    /* kiln engine */
    pbw_raw(&w, KILN_ENGINE_MAGIC "\x01\x00\x00\x00", KILN_ENGINE_MAGIC_LEN + 4);
    msg = load_fail(&w, w.n);
    assert_has(msg, "kiln engine");
    assert_has(msg, "--loadEngine");
    pbw_free(&w);
    /* TensorFlow SavedModel: 1 = schema version, 2 = MetaGraphDef */
    {
        pbw mg = {0}, info = {0};
        pbw_str(&info, 1, "serve");
        pbw_msg(&mg, 1, &info);
        pbw gd = {0};
        pbw_msg(&mg, 2, &gd);
        pbw_int(&w, 1, 1);
        pbw_msg(&w, 2, &mg);
        msg = load_fail(&w, w.n);
        assert_has(msg, "SavedModel");
        assert_has(msg, "tf2onnx");
        pbw_free(&w);
    }
    /* TensorFlow GraphDef: 1 = NodeDef {name, op}, 4 = versions */
    {
        pbw nd = {0}, ver = {0};
        pbw_str(&nd, 1, "input");
        pbw_str(&nd, 2, "Placeholder");
        pbw_msg(&w, 1, &nd);
        pbw_int(&ver, 1, 27);
        pbw_msg(&w, 4, &ver);
        msg = load_fail(&w, w.n);
        assert_has(msg, "GraphDef");
        assert_has(msg, "tf2onnx");
        pbw_free(&w);
    }
    /* an HTML page saved instead of the model */
    pbw_raw(&w, "<!DOCTYPE html><html>", 21);
    msg = load_fail(&w, w.n);
    assert_has(msg, "HTML");
    pbw_free(&w);
}

/* A node whose attribute holds a broken varint: the path names node and attribute. */
static void test_bad_varint_path(void **state) {
    (void)state;
    pbw g = {0};
    const char *in[] = {"X"}, *out[] = {"Y"};
    pbw n = onnx_node("Conv", "conv1", in, 1, out, 1);
    pbw a = {0};
    pbw_str(&a, 1, "kernel_shape");
    pbw_int(&a, 20, 7);
    pbw_tag(&a, 8, 0);
    pbw_raw(&a, "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 11); /* 11-byte varint */
    pbw_msg(&n, 5, &a);
    pbw_msg(&g, 1, &n);
    pbw m = onnx_model(&g, 17);
    const char *msg = load_fail(&m, m.n);
    assert_has(msg, "m.onnx: field graph.node[0] 'conv1' .attribute[0] 'kernel_shape'");
    assert_has(msg, "longer than 10 bytes");
    assert_has(msg, "at byte ");
    assert_has(msg, "re-export");
    pbw_free(&m);
}

/* A message-valued attribute without its message is refused (consumers rely on it). */
static void test_attribute_without_value(void **state) {
    (void)state;
    pbw g = {0};
    const char *in[] = {"c"}, *out[] = {"y"};
    pbw n = onnx_node("If", "if_7", in, 1, out, 1);
    pbw a = attr_of("then_branch", 5);
    pbw_msg(&n, 5, &a);
    pbw_msg(&g, 1, &n);
    pbw m = onnx_model(&g, 17);
    const char *msg = load_fail(&m, m.n);
    assert_has(msg, "graph.node[0] 'if_7' .attribute[0] 'then_branch'");
    assert_has(msg, "has type graph but no value");
    pbw_free(&m);
}

static void test_length_past_enclosing(void **state) {
    (void)state;
    pbw g = {0};
    const char *in[] = {"X"}, *out[] = {"Y"};
    pbw n = onnx_node("Relu", "r", in, 1, out, 1);
    pbw_tag(&n, 6, 2); /* doc_string claims 50 bytes inside a node that has 3 left */
    pbw_varint(&n, 50);
    pbw_raw(&n, "abc", 3);
    pbw_msg(&g, 1, &n);
    pbw_str(&g, 2, "graph-name-after-the-node");
    pbw m = onnx_model(&g, 17);
    const char *msg = load_fail(&m, m.n);
    assert_has(msg, "graph.node[0] 'r' .doc_string");
    assert_has(msg, "declares 50 bytes but its enclosing message has only 3 left");
    pbw_free(&m);
}

static void test_deep_nesting(void **state) {
    (void)state;
    /* value_info with seq(seq(...)) 150 deep */
    pbw tp = onnx_tensor_type(1, NULL, -1);
    for (int i = 0; i < 150; i++) {
        pbw seq = {0}, outer = {0};
        pbw_msg(&seq, 1, &tp);
        pbw_msg(&outer, 4, &seq);
        tp = outer;
    }
    pbw vi = {0};
    pbw_str(&vi, 1, "X");
    pbw_msg(&vi, 2, &tp);
    pbw g = {0};
    pbw_msg(&g, 11, &vi);
    pbw m = onnx_model(&g, 17);
    const char *msg = load_fail(&m, m.n);
    assert_has(msg, "graph.input[0] 'X' .type.sequence_type ... (");
    assert_has(msg, "levels) ... .sequence_type.elem_type");
    assert_has(msg, "nested more than 100 deep");
    pbw_free(&m);

    /* If inside If ... 70 deep */
    pbw inner = {0};
    pbw_str(&inner, 2, "leaf");
    for (int i = 0; i < 70; i++) {
        const char *in[] = {"c"}, *out[] = {"o"};
        pbw n = onnx_node("If", NULL, in, 1, out, 1);
        pbw a = attr_of("then_branch", 5);
        pbw_msg(&a, 6, &inner);
        pbw_msg(&n, 5, &a);
        pbw gg = {0};
        pbw_msg(&gg, 1, &n);
        inner = gg;
    }
    m = onnx_model(&inner, 17);
    msg = load_fail(&m, m.n);
    assert_has(msg, "subgraphs are nested more than 64 deep");
    assert_has(msg, "graph.node[0].attribute[0] 'then_branch' .g ... (");
    assert_has(msg, "levels) ...");
    assert_true(strlen(msg) < 1200); /* long paths are shortened */
    pbw_free(&m);
}

static void test_tensor_errors(void **state) {
    (void)state;
    float v[4] = {1, 2, 3, 4};
    /* raw data too short / too long */
    int64_t d3[] = {3};
    pbw t = onnx_tensor_raw("w.short", 1, d3, 1, v, 8);
    pbw m = model_with_tensor(&t);
    const char *msg = load_fail(&m, m.n);
    assert_has(msg, "graph.initializer[0] 'w.short' .raw_data");
    assert_has(msg, "has 8 bytes but dims [3] of float32 need 12 bytes (too short)");
    pbw_free(&m);
    t = onnx_tensor_raw("w.long", 1, d3, 1, v, 16);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "(too long)");
    pbw_free(&m);
    /* two data fields */
    int64_t d1[] = {1};
    t = onnx_tensor_raw("two", 1, d1, 1, v, 4);
    pbw_f32(&t, 4, 1.0f);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "initializer[0] 'two'");
    assert_has(msg, "has both float_data and raw_data set");
    pbw_free(&m);
    /* unknown data type */
    t = onnx_tensor_raw("odd", 99, d1, 1, v, 4);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "initializer[0] 'odd' .data_type");
    assert_has(msg, "is 99");
    assert_has(msg, "1 float32");
    assert_has(msg, "26 int2");
    pbw_free(&m);
    /* dims whose product overflows */
    int64_t huge[] = {1LL << 40, 1LL << 40};
    t = onnx_tensor_raw("big", 1, huge, 2, v, 4);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "initializer[0] 'big' .dims");
    assert_has(msg, "overflow");
    pbw_free(&m);
    /* product fits but the byte size does not */
    int64_t big2[] = {1LL << 31, 1LL << 31};
    t = onnx_tensor_raw("big2", 7, big2, 2, v, 4);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "2^64 bytes");
    pbw_free(&m);
    /* negative dim */
    int64_t neg[] = {-3};
    t = onnx_tensor_raw("neg", 1, neg, 1, v, 4);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "dims[0] is -3");
    pbw_free(&m);
    /* typed field of the wrong kind for the dtype */
    t = onnx_tensor_raw("mismatch", 7, d1, 1, NULL, 0);
    pbw_f32(&t, 4, 1.0f);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "float_data");
    assert_has(msg, "int64_data");
    pbw_free(&m);
    /* typed field with the wrong count */
    t = onnx_tensor_raw("count", 1, d3, 1, NULL, 0);
    pbw_packed_f32(&t, 4, v, 2);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "initializer[0] 'count' .float_data");
    assert_has(msg, "has 2 values but dims [3] of float32 need 3");
    pbw_free(&m);
    /* a huge packed count claim cannot allocate: dims say 2^40 elements of int64 */
    int64_t many[] = {1LL << 40};
    t = onnx_tensor_raw("many", 7, many, 1, NULL, 0);
    int64_t one = 1;
    pbw_packed_i64(&t, 7, &one, 1);
    m = model_with_tensor(&t);
    msg = load_fail(&m, m.n);
    assert_has(msg, "has 1 values but dims [1099511627776]");
    pbw_free(&m);
    /* a field with the wrong wire type */
    pbw g = {0}, n = {0};
    pbw_str(&n, 3, "node_x");
    pbw_int(&n, 4, 5); /* op_type as a varint */
    pbw_msg(&g, 1, &n);
    m = onnx_model(&g, 17);
    msg = load_fail(&m, m.n);
    assert_has(msg, "graph.node[0] 'node_x' .op_type");
    assert_has(msg, "has wire type varint but ONNX declares it length-delimited");
    pbw_free(&m);
    /* a model-level field with the wrong wire type is not taken for ONNX */
    pbw w = {0};
    pbw_int(&w, 1, 8);
    pbw_int(&w, 7, 5);
    msg = load_fail(&w, w.n);
    assert_has(msg, "not an ONNX model");
    pbw_free(&w);
}

/* ---- files ------------------------------------------------------------------------------- */

static char tmpdir[256];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_reader_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
}

static void write_file(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(d, 1, n, f), n);
    fclose(f);
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static const char *file_fail(const char *path, int check_external) {
    static char msg[4096];
    ir_model *m = NULL;
    kiln_error e = {0};
    kiln_model_options o = opts_default();
    o.check_external_data = check_external;
    assert_int_not_equal(onnx_load_file(path, &o, &m, &e), KILN_OK);
    assert_null(m);
    snprintf(msg, sizeof msg, "%s", kiln_err_msg(&e));
    kiln_err_clear(&e);
    return msg;
}

static void test_file_errors(void **state) {
    (void)state;
    make_tmpdir();
    char p[512];
    snprintf(p, sizeof p, "%s/missing.onnx", tmpdir);
    const char *msg = file_fail(p, 1);
    assert_has(msg, "missing.onnx");
    assert_has(msg, "no such file");
    /* a directory with a model inside */
    snprintf(p, sizeof p, "%s/dir", tmpdir);
    assert_int_equal(mkdir(p, 0755), 0);
    char q[600];
    snprintf(q, sizeof q, "%s/model.onnx", p);
    write_file(q, "x", 1);
    msg = file_fail(p, 1);
    assert_has(msg, "is a directory");
    assert_has(msg, "dir/model.onnx");
    /* a SavedModel directory */
    snprintf(q, sizeof q, "%s/saved_model.pb", p);
    write_file(q, "x", 1);
    msg = file_fail(p, 1);
    assert_has(msg, "SavedModel");
    assert_has(msg, "tf2onnx");
    /* a FIFO: refused without blocking */
    snprintf(p, sizeof p, "%s/fifo", tmpdir);
    assert_int_equal(mkfifo(p, 0600), 0);
    msg = file_fail(p, 1);
    assert_has(msg, "not a regular file");
    /* an empty file */
    snprintf(p, sizeof p, "%s/empty.onnx", tmpdir);
    write_file(p, "", 0);
    msg = file_fail(p, 1);
    assert_has(msg, "empty.onnx: the file is empty");
    /* permission denied (root reads everything: then there is nothing to test) */
    snprintf(p, sizeof p, "%s/secret.onnx", tmpdir);
    write_file(p, "\x08\x08", 2);
    assert_int_equal(chmod(p, 0), 0);
    if (geteuid() != 0) {
        msg = file_fail(p, 1);
        assert_has(msg, "permission denied");
    } else {
        print_message("note: running as root, permission-denied case not checkable\n");
    }
    rm_rf(tmpdir);
}

/* ---- external data ----------------------------------------------------------------------- */

/* A model whose initializer 'w' (float32[4]) lives in external file `loc`. */
static void write_ext_model(const char *path, const char *loc, const char *offset, const char *length) {
    pbw t = {0};
    int64_t d = 4;
    pbw_packed_i64(&t, 1, &d, 1);
    pbw_int(&t, 2, 1);
    pbw_str(&t, 8, "w");
    const char *keys[] = {"location", "offset", "length"};
    const char *vals[] = {loc, offset, length};
    for (int i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        pbw kv = {0};
        pbw_str(&kv, 1, keys[i]);
        pbw_str(&kv, 2, vals[i]);
        pbw_msg(&t, 13, &kv);
    }
    pbw_int(&t, 14, 1);
    pbw m = model_with_tensor(&t);
    write_file(path, m.d, m.n);
    pbw_free(&m);
}

static void test_external_data(void **state) {
    (void)state;
    make_tmpdir();
    char model[512], data[512], p[600];
    snprintf(model, sizeof model, "%s/model.onnx", tmpdir);
    snprintf(data, sizeof data, "%s/weights.bin", tmpdir);
    float vals[6] = {9, 1, 2, 3, 4, 9};
    write_file(data, vals, sizeof vals);

    /* good: offset 4, 16 bytes */
    write_ext_model(model, "weights.bin", "4", "16");
    ir_model *m = NULL;
    kiln_error e = {0};
    kiln_model_options o = opts_default();
    assert_int_equal(onnx_load_file(model, &o, &m, &e), KILN_OK);
    ir_graph *g = m->graph;
    const ir_tensor *t = init_of(g, "w");
    assert_int_equal(t->where, IR_DATA_EXTERNAL);
    assert_non_null(t->data);
    float got[4];
    memcpy(got, t->data, 16);
    assert_true(got[0] == 1 && got[3] == 4);
    assert_int_equal(t->ext_offset, 4);
    assert_int_equal(t->ext_length, 16);
    assert_string_equal(t->ext_location, "weights.bin");
    assert_int_equal(m->n_ext_files, 1);
    assert_int_equal(m->ext_files[0].n_tensors, 1);
    assert_int_equal(m->ext_files[0].bytes_referenced, 16);
    assert_int_equal(m->ext_files[0].file_size, sizeof vals);
    ir_model_free(m);

    /* lazy: locations recorded, file mapped on first use */
    o.check_external_data = 0;
    assert_int_equal(onnx_load_file(model, &o, &m, &e), KILN_OK);
    ir_tensor *lt = ir_val(m->graph, ir_graph_find(m->graph, "w"))->init;
    assert_null(lt->data);
    assert_int_equal(m->n_ext_files, 1);
    assert_null(m->ext_files[0].map);
    assert_int_equal(onnx_tensor_load_external(m, lt, &e), KILN_OK);
    assert_non_null(lt->data);
    memcpy(got, lt->data, 16);
    assert_true(got[1] == 2);
    ir_model_free(m);
    o.check_external_data = 1;

    /* lazy with a missing file: loading works, first use says what is missing */
    write_ext_model(model, "gone.bin", NULL, NULL);
    assert_string_equal(file_fail(model, 1) != NULL ? "x" : "", "x");
    o.check_external_data = 0;
    assert_int_equal(onnx_load_file(model, &o, &m, &e), KILN_OK);
    lt = ir_val(m->graph, ir_graph_find(m->graph, "w"))->init;
    assert_int_not_equal(onnx_tensor_load_external(m, lt, &e), KILN_OK);
    assert_has(kiln_err_msg(&e), "gone.bin");
    assert_has(kiln_err_msg(&e), "missing");
    kiln_err_clear(&e);
    ir_model_free(m);
    o.check_external_data = 1;

    const char *msg = file_fail(model, 1);
    assert_has(msg, "graph.initializer[0] 'w'");
    assert_has(msg, "'gone.bin' is missing");

    write_ext_model(model, "/etc/passwd", NULL, NULL);
    msg = file_fail(model, 1);
    assert_has(msg, "absolute path");
    msg = file_fail(model, 0); /* checked even when files are not opened */
    assert_has(msg, "absolute path");

    write_ext_model(model, "sub/../../weights.bin", NULL, NULL);
    msg = file_fail(model, 1);
    assert_has(msg, "'..'");

    /* a symlink that escapes the model folder */
    char outside[512];
    snprintf(outside, sizeof outside, "%s_outside.bin", tmpdir);
    write_file(outside, vals, sizeof vals);
    snprintf(p, sizeof p, "%s/link.bin", tmpdir);
    assert_int_equal(symlink(outside, p), 0);
    write_ext_model(model, "link.bin", NULL, NULL);
    msg = file_fail(model, 1);
    assert_has(msg, "outside the model's folder");
    unlink(outside);

    /* a symlink that stays inside is fine */
    snprintf(p, sizeof p, "%s/alias.bin", tmpdir);
    assert_int_equal(symlink("weights.bin", p), 0);
    write_ext_model(model, "alias.bin", "0", "16");
    assert_int_equal(onnx_load_file(model, &o, &m, &e), KILN_OK);
    ir_model_free(m);

    write_ext_model(model, "weights.bin", "16", "16");
    msg = file_fail(model, 1);
    assert_has(msg, "bytes 16..32");
    assert_has(msg, "has only 24 bytes");

    write_ext_model(model, "weights.bin", "0", "12");
    msg = file_fail(model, 1);
    assert_has(msg, "length 12 does not match dims [4] of float32 (16 bytes)");

    write_ext_model(model, "weights.bin", "-5", NULL);
    msg = file_fail(model, 1);
    assert_has(msg, "offset '-5' is not a non-negative integer");

    write_ext_model(model, "weights.bin", "18446744073709551615", NULL);
    msg = file_fail(model, 1);
    assert_has(msg, "has only 24 bytes");

    /* from memory without a folder */
    write_ext_model(model, "weights.bin", NULL, NULL);
    FILE *f = fopen(model, "rb");
    static uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    m = (ir_model *)1;
    assert_int_not_equal(onnx_load_bytes(buf, n, "mem.onnx", NULL, &o, &m, &e), KILN_OK);
    assert_has(kiln_err_msg(&e), "base_dir");
    kiln_err_clear(&e);
    assert_int_equal(onnx_load_bytes(buf, n, "mem.onnx", tmpdir, &o, &m, &e), KILN_OK);
    ir_model_free(m);
    rm_rf(tmpdir);
}

/* ---- value files ------------------------------------------------------------------------- */

static void test_value_files(void **state) {
    (void)state;
    arena a;
    arena_init(&a);
    onnx_value v;
    kiln_error e = {0};
    float vals[3] = {1, 2, 3};
    int64_t d[] = {3};
    pbw t = onnx_tensor_raw("x", 1, d, 1, vals, sizeof vals);
    assert_int_equal(onnx_read_value_bytes(t.d, t.n, "input_0.pb", IR_TYPE_UNKNOWN, &a, &v, &e), KILN_OK);
    assert_int_equal(v.kind, IR_TYPE_TENSOR);
    assert_string_equal(v.name, "x");
    float f3[3];
    memcpy(f3, v.tensor->data, 12);
    assert_true(f3[2] == 3.0f);
    /* a sequence of two tensors, guessed without a hint */
    pbw seq = {0};
    pbw_str(&seq, 1, "s");
    pbw_int(&seq, 2, 1);
    pbw t2 = {0};
    pbw_raw(&t2, t.d, t.n);
    pbw_msg(&seq, 3, &t);
    pbw_msg(&seq, 3, &t2);
    assert_int_equal(onnx_read_value_bytes(seq.d, seq.n, "s.pb", IR_TYPE_UNKNOWN, &a, &v, &e), KILN_OK);
    assert_int_equal(v.kind, IR_TYPE_SEQUENCE);
    assert_int_equal(v.n_elems, 2);
    assert_int_equal(v.elems[1].tensor->count, 3);
    /* the same bytes read as an optional with one value too many */
    assert_int_not_equal(onnx_read_value_bytes(seq.d, seq.n, "o.pb", IR_TYPE_OPTIONAL, &a, &v, &e), KILN_OK);
    assert_has(kiln_err_msg(&e), "o.pb");
    assert_has(kiln_err_msg(&e), "at most one value");
    kiln_err_clear(&e);
    /* an empty optional */
    pbw opt = {0};
    pbw_str(&opt, 1, "o");
    pbw_int(&opt, 2, 1);
    assert_int_equal(onnx_read_value_bytes(opt.d, opt.n, "o.pb", IR_TYPE_OPTIONAL, &a, &v, &e), KILN_OK);
    assert_false(v.has_value);
    /* a map int64 -> tensor */
    pbw map = {0}, vs = {0};
    int64_t keys[] = {5, 6};
    pbw_int(&map, 2, 7);
    pbw_packed_i64(&map, 3, keys, 2);
    pbw_int(&vs, 2, 1);
    for (int i = 0; i < 2; i++) {
        pbw tt = onnx_tensor_raw("", 1, d, 1, vals, sizeof vals);
        pbw_msg(&vs, 3, &tt);
    }
    pbw_msg(&map, 5, &vs);
    assert_int_equal(onnx_read_value_bytes(map.d, map.n, "m.pb", IR_TYPE_UNKNOWN, &a, &v, &e), KILN_OK);
    assert_int_equal(v.kind, IR_TYPE_MAP);
    assert_int_equal(v.tensor->count, 2);
    int64_t second64;
    memcpy(&second64, (const char *)v.tensor->data + sizeof(int64_t), sizeof second64);
    assert_int_equal(second64, 6);
    assert_int_equal(v.n_elems, 2);
    /* a truncated tensor file */
    pbw big = {0};
    static float many[256];
    int64_t d256[] = {256};
    big = onnx_tensor_raw("x", 1, d256, 1, many, sizeof many);
    assert_int_not_equal(onnx_read_value_bytes(big.d, big.n - 100, "cut.pb", IR_TYPE_TENSOR, &a, &v, &e), KILN_OK);
    assert_has(kiln_err_msg(&e), "cut.pb: field TensorProto 'x' .raw_data at byte");
    assert_has(kiln_err_msg(&e), "needs 1024 bytes");
    kiln_err_clear(&e);
    pbw_free(&seq);
    pbw_free(&opt);
    pbw_free(&map);
    pbw_free(&big);
    arena_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_model),     cmocka_unit_test(test_declaration_merging),
        cmocka_unit_test(test_empty_and_junk),  cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_foreign_formats), cmocka_unit_test(test_bad_varint_path),
        cmocka_unit_test(test_length_past_enclosing), cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_attribute_without_value),
        cmocka_unit_test(test_tensor_errors),   cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_external_data),   cmocka_unit_test(test_value_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
