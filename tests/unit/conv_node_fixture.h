/* conv_node_fixture.h - one Conv node and the kernel context around it, for the unit tests
 * that call the CPU Conv kernels directly (test_conv_winograd.c, test_conv_strided.c,
 * test_conv_c16.c).
 *
 * Inputs are value ids 0-3 (X, W, B, residual; W is marked an initializer so the kernel
 * keeps packed or transformed weights in its per-node state), output id 4. The kernel is
 * run twice, so the second run exercises that state, and each output is compared with a
 * double-precision reference (conv_reference), the error taken relative to the sum of
 * absolute terms. */
#ifndef KILN_TESTS_UNIT_CONV_NODE_FIXTURE_H
#define KILN_TESTS_UNIT_CONV_NODE_FIXTURE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"

typedef struct conv_node_fixture {
    int32_t in_ids[4], out_ids[1];
    ir_tensor w_init;
    ir_value vals[5];
    ir_graph graph;
    ir_node node;
    kiln_error err;
    void *state;
    void (*state_free)(void *);
    cpu_kernel_ctx ctx;
} conv_node_fixture;

/* f must stay where it is while in use: the context points into it. */
static inline void conv_fixture_init(conv_node_fixture *f, ir_attr *attrs, int32_t n_attrs, bool residual,
                                     cpu_threadpool *pool) {
    memset(f, 0, sizeof *f);
    for (int32_t i = 0; i < 4; i++) f->in_ids[i] = i;
    f->out_ids[0] = 4;
    f->vals[1].init = &f->w_init;
    f->graph.values = f->vals;
    f->graph.n_values = 5;
    f->node.name = "conv";
    f->node.op_type = "Conv";
    f->node.domain = "";
    f->node.opset = 17;
    f->node.attrs = attrs;
    f->node.n_attrs = n_attrs;
    f->node.inputs = f->in_ids;
    f->node.n_inputs = residual ? 4 : 3;
    f->node.outputs = f->out_ids;
    f->node.n_outputs = 1;
    f->ctx.node = &f->node;
    f->ctx.graph = &f->graph;
    f->ctx.pool = pool;
    f->ctx.err = &f->err;
    f->ctx.state = &f->state;
    f->ctx.state_free = &f->state_free;
}

/* Runs fn twice on ins and returns the worst |y - ref| / (scale + 1e-6) over the ny
 * outputs (infinity for a NaN); fails the test when the kernel fails. */
static inline double conv_fixture_worst(conv_node_fixture *f, cpu_kernel_fn fn, const rt_value *const *ins,
                                        const double *ref, const double *scale, size_t ny) {
    double worst = 0;
    for (int rep = 0; rep < 2; rep++) {
        rt_value out;
        rt_value_init(&out);
        kiln_status st = fn(&f->ctx, ins, f->node.n_inputs, &out, 1);
        if (st != KILN_OK) fail_msg("conv failed: %s", kiln_err_msg(&f->err));
        assert_int_equal(out.t.count, ny);
        const float *yd = out.t.data;
        for (size_t i = 0; i < ny; i++) {
            double e = fabs(yd[i] - ref[i]) / (scale[i] + 1e-6);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
        rt_value_release(&out);
    }
    return worst;
}

static inline void conv_fixture_free(conv_node_fixture *f) {
    if (f->state && f->state_free) f->state_free(f->state);
    f->state = NULL;
}

/* Geometry of a reference convolution (2-D, NCHW, OIHW weights). */
typedef struct conv_ref_shape {
    int64_t N, C, H, W, M, KH, KW, sh, sw, dh, dw, group;
    int64_t pads[4]; /* top, left, bottom, right */
    const char *act; /* NULL, "Relu" or "Clip" (min -0.5, max 0.75) */
} conv_ref_shape;

/* Direct convolution in double with bias, residual and activation; also gives per output
 * the sum of the absolute terms, the scale fp32 rounding error is relative to. */
static inline void conv_reference(const conv_ref_shape *c, const float *x, const float *w, const float *b,
                                  const float *res, int64_t OH, int64_t OW, double *y, double *scale) {
    int64_t Cg = c->C / c->group, Mg = c->M / c->group;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = b ? b[m] : 0, sc = b ? fabs(b[m]) : 0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t kh = 0; kh < c->KH; kh++)
                            for (int64_t kw = 0; kw < c->KW; kw++) {
                                int64_t ih = oh * c->sh + kh * c->dh - c->pads[0];
                                int64_t iw = ow * c->sw + kw * c->dw - c->pads[1];
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t xc = (m / Mg) * Cg + ci;
                                double p = (double)w[((m * Cg + ci) * c->KH + kh) * c->KW + kw] *
                                           x[((n * c->C + xc) * c->H + ih) * c->W + iw];
                                acc += p;
                                sc += fabs(p);
                            }
                    int64_t o = ((n * c->M + m) * OH + oh) * OW + ow;
                    if (res) {
                        acc += res[o];
                        sc += fabs(res[o]);
                    }
                    if (c->act && !strcmp(c->act, "Relu")) acc = acc > 0 ? acc : 0;
                    if (c->act && !strcmp(c->act, "Clip")) acc = acc < -0.5 ? -0.5 : acc > 0.75 ? 0.75 : acc;
                    y[o] = acc;
                    scale[o] = sc;
                }
}

/* A 2-D Conv case for conv_fixture_run: NCHW shapes, OIHW weights, attributes and epilogue
 * (the residual is input 3; Clip clamps to [-0.5, 0.75]; Sigmoid is applied after the
 * store by the kernels, and to the reference here). */
typedef struct conv_fixture_case {
    int64_t N, C, H, W, M, KH, KW, sh, sw, dh, dw, group;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, residual;
    const char *act;    /* NULL, "Relu", "Clip" or "Sigmoid" */
    const char *tactic; /* the node's kiln_tactic attribute, or NULL */
} conv_fixture_case;

static inline int64_t conv_fixture_out(int64_t in, int64_t p0, int64_t p1, int64_t k, int64_t s, int64_t d) {
    return (in + p0 + p1 - (k - 1) * d - 1) / s + 1;
}

static inline void conv_fixture_fill(rt_value *v, int32_t rank, const int64_t *dims, float (*rnd)(void)) {
    rt_value_init(v);
    kiln_error e = {0};
    rt_tensor *t = rt_value_as_tensor(v);
    assert_int_equal(rt_tensor_alloc(t, KILN_DTYPE_FLOAT, rank, dims, &e), KILN_OK);
    for (uint64_t i = 0; i < t->count; i++) ((float *)t->data)[i] = rnd();
}

/* Builds the inputs from rnd (X, W, B, residual in that order), runs fn twice on a Conv
 * node with W an initializer (conv_fixture_worst) and returns the worst error relative to
 * each output's sum of absolute terms. */
static inline double conv_fixture_run(const conv_fixture_case *c, cpu_threadpool *pool, cpu_kernel_fn fn,
                                      float (*rnd)(void)) {
    int64_t OH = conv_fixture_out(c->H, c->pads[0], c->pads[2], c->KH, c->sh, c->dh);
    int64_t OW = conv_fixture_out(c->W, c->pads[1], c->pads[3], c->KW, c->sw, c->dw);
    rt_value in[4];
    conv_fixture_fill(&in[0], 4, (int64_t[]){c->N, c->C, c->H, c->W}, rnd);
    conv_fixture_fill(&in[1], 4, (int64_t[]){c->M, c->C / c->group, c->KH, c->KW}, rnd);
    conv_fixture_fill(&in[2], 1, (int64_t[]){c->M}, rnd);
    conv_fixture_fill(&in[3], 4, (int64_t[]){c->N, c->M, OH, OW}, rnd);
    int64_t k[2] = {c->KH, c->KW}, s[2] = {c->sh, c->sw}, d[2] = {c->dh, c->dw};
    int64_t pads[4] = {c->pads[0], c->pads[1], c->pads[2], c->pads[3]};
    ir_attr attrs[10];
    memset(attrs, 0, sizeof attrs);
    int32_t na = 0;
    attrs[na++] = (ir_attr){.name = "kernel_shape", .type = IR_ATTR_INTS, .n = 2, .ints = k};
    attrs[na++] = (ir_attr){.name = "strides", .type = IR_ATTR_INTS, .n = 2, .ints = s};
    attrs[na++] = (ir_attr){.name = "dilations", .type = IR_ATTR_INTS, .n = 2, .ints = d};
    attrs[na++] = (ir_attr){.name = "pads", .type = IR_ATTR_INTS, .n = 4, .ints = pads};
    attrs[na++] = (ir_attr){.name = "group", .type = IR_ATTR_INT, .i = c->group};
    if (c->residual) attrs[na++] = (ir_attr){.name = "kiln_residual", .type = IR_ATTR_INT, .i = 3};
    if (c->act) {
        attrs[na++] = (ir_attr){.name = "kiln_activation", .type = IR_ATTR_STRING,
                                .s = {.data = c->act, .len = strlen(c->act)}};
        if (!strcmp(c->act, "Clip")) {
            attrs[na++] = (ir_attr){.name = "kiln_activation_min", .type = IR_ATTR_FLOAT, .f = -0.5f};
            attrs[na++] = (ir_attr){.name = "kiln_activation_max", .type = IR_ATTR_FLOAT, .f = 0.75f};
        }
    }
    if (c->tactic)
        attrs[na++] = (ir_attr){.name = "kiln_tactic", .type = IR_ATTR_STRING,
                                .s = {.data = c->tactic, .len = strlen(c->tactic)}};
    conv_node_fixture f;
    conv_fixture_init(&f, attrs, na, c->residual, pool);
    const rt_value *ins[4] = {&in[0], &in[1], c->bias ? &in[2] : NULL, &in[3]};
    size_t ny = (size_t)(c->N * c->M * OH * OW);
    double *ref = malloc(ny * sizeof(double)), *scale = malloc(ny * sizeof(double));
    assert_non_null(ref);
    assert_non_null(scale);
    bool sigmoid = c->act && !strcmp(c->act, "Sigmoid");
    conv_ref_shape r = {c->N,  c->C,  c->H,  c->W,     c->M,
                        c->KH, c->KW, c->sh, c->sw,    c->dh,
                        c->dw, c->group, {c->pads[0], c->pads[1], c->pads[2], c->pads[3]}, sigmoid ? NULL : c->act};
    conv_reference(&r, in[0].t.data, in[1].t.data, c->bias ? in[2].t.data : NULL, c->residual ? in[3].t.data : NULL,
                   OH, OW, ref, scale);
    if (sigmoid) /* its slope is at most 1/4: the same relative bound holds */
        for (size_t i = 0; i < ny; i++) ref[i] = 1.0 / (1.0 + exp(-ref[i]));
    double worst = conv_fixture_worst(&f, fn, ins, ref, scale, ny);
    conv_fixture_free(&f);
    for (int i = 0; i < 4; i++) rt_value_release(&in[i]);
    free(ref);
    free(scale);
    return worst;
}

#endif
