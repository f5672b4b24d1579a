/* kernel_harness.h - shared harness of the CPU kernel unit tests (test_kernels_dense*.c):
 * deterministic random inputs, attribute builders, and run_op, which calls a kernel
 * directly through the kernel signature (no executor) twice, so per-node state (packed
 * weights, scratch) is exercised and must give identical results. Tests switch test_pool
 * between NULL (inline) and a 2-thread pool to cover both paths. */
#ifndef KILN_TESTS_UNIT_KERNEL_HARNESS_H
#define KILN_TESTS_UNIT_KERNEL_HARNESS_H

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"


static uint32_t rng = 12345;
static inline float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.f - 1.f;
}

static inline void mk(rt_value *v, int32_t rank, const int64_t *dims) {
    rt_value_init(v);
    rt_tensor *t = rt_value_as_tensor(v);
    kiln_error err = {0};
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &err), KILN_OK);
    for (uint64_t i = 0; i < t->count; i++) ((float *)t->data)[i] = frand();
}

static inline ir_attr a_int(const char *name, int64_t v) {
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = IR_ATTR_INT;
    a.i = v;
    return a;
}
static inline ir_attr a_float(const char *name, float v) {
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = IR_ATTR_FLOAT;
    a.f = v;
    return a;
}
static inline ir_attr a_ints(const char *name, int32_t n, int64_t *v) {
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = IR_ATTR_INTS;
    a.n = n;
    a.ints = v;
    return a;
}
static inline ir_attr a_str(const char *name, const char *s) {
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = IR_ATTR_STRING;
    a.s.data = s;
    a.s.len = strlen(s);
    return a;
}

static cpu_threadpool *test_pool; /* NULL or a 2-thread pool, switched per test group */

/* Runs op on inputs; outputs must be n_out initialised values. Returns the status and
 * keeps the error message for asserts. const_w: the node's graph marks input 1 as an
 * initializer (a Conv's or MatMul's constant weights: the packed paths); with_state: the
 * kernel gets per-node state (without it, paths that need state fall back). */
static inline kiln_status run_op_with(const char *op, int64_t opset, ir_attr *attrs, int32_t n_attrs, rt_value *in,
                                      int32_t n_in, rt_value *out, int32_t n_out, bool const_w, bool with_state,
                                      kiln_error *err) {
    int32_t ids[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    assert_true(n_in <= 8 && n_in + n_out <= 12);
    ir_tensor dummy;
    memset(&dummy, 0, sizeof dummy);
    ir_value vals[12];
    memset(vals, 0, sizeof vals);
    vals[1].init = &dummy;
    ir_graph graph;
    memset(&graph, 0, sizeof graph);
    graph.values = vals;
    graph.n_values = n_in + n_out;
    ir_node node;
    memset(&node, 0, sizeof node);
    node.name = "test_node";
    node.op_type = op;
    node.domain = "";
    node.opset = opset;
    node.attrs = attrs;
    node.n_attrs = n_attrs;
    if (const_w) { /* cpu_input_is_const reads the node's input ids (run_op never set them) */
        node.n_inputs = n_in;
        node.inputs = ids;
    }
    node.n_outputs = n_out;
    node.outputs = ids + n_in;
    void *state = NULL;
    void (*state_free)(void *) = NULL;
    cpu_kernel_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.node = &node;
    ctx.graph = const_w ? &graph : NULL;
    ctx.pool = test_pool;
    ctx.err = err;
    ctx.state = with_state ? &state : NULL;
    ctx.state_free = with_state ? &state_free : NULL;
    const rt_value *ins[8];
    for (int32_t i = 0; i < n_in; i++) ins[i] = in[i].kind == IR_TYPE_UNKNOWN ? NULL : &in[i];
    cpu_kernel_fn fn = cpu_kernel_find("", op, opset);
    assert_non_null(fn);
    kiln_status st = fn(&ctx, ins, n_in, out, n_out);
    /* run twice: the second run reuses per-node state (packed weights, scratch) */
    if (st == KILN_OK) {
        rt_value again[4];
        for (int32_t i = 0; i < n_out; i++) rt_value_init(&again[i]);
        kiln_status st2 = fn(&ctx, ins, n_in, again, n_out);
        assert_int_equal(st2, KILN_OK);
        for (int32_t i = 0; i < n_out; i++) {
            if (again[i].kind == IR_TYPE_TENSOR && out[i].kind == IR_TYPE_TENSOR)
                assert_memory_equal(again[i].t.data, out[i].t.data, out[i].t.nbytes);
            rt_value_release(&again[i]);
        }
    }
    if (state && state_free) state_free(state);
    return st;
}

static inline kiln_status run_op(const char *op, int64_t opset, ir_attr *attrs, int32_t n_attrs, rt_value *in,
                                 int32_t n_in, rt_value *out, int32_t n_out, kiln_error *err) {
    return run_op_with(op, opset, attrs, n_attrs, in, n_in, out, n_out, false, true, err);
}

static inline void expect_close(const float *got, const float *want, uint64_t n, float tol) {
    for (uint64_t i = 0; i < n; i++) {
        float d = fabsf(got[i] - want[i]), lim = tol * (1.f + fabsf(want[i]));
        if (!(d <= lim)) fail_msg("element %llu: got %g, want %g", (unsigned long long)i, got[i], want[i]);
    }
}

#endif
