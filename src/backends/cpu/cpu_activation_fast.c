/* cpu_activation_fast.c - the portable (libm) vector math table, run-time selection of the
 * AVX2 table, and the Gelu operator kernel built on them. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_kernel.h"

static void s_exp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}
static void s_tanh(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}
static void s_erf(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = erff(x[i]);
}
static void s_sigmoid(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        /* split by sign so exp never overflows */
        y[i] = v >= 0.f ? 1.f / (1.f + expf(-v)) : expf(v) / (1.f + expf(v));
    }
}
/* x * Phi(x) with Phi through erfc in double: 1 + erf(x/sqrt 2) would cancel for x < 0 */
static void s_gelu(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)(0.5 * (double)x[i] * erfc(-(double)x[i] * 0.70710678118654752));
}
/* 0.5 x (1 + tanh(z)) written as x * sigmoid(2z): no cancellation for negative x */
static void s_gelu_tanh(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float z = 2.f * 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = z >= 0.f ? v / (1.f + expf(-z)) : v * expf(z) / (1.f + expf(z));
    }
}
static float s_exp_shift_sum(const float *x, float *y, int64_t n, float max) {
    float sum = 0.f;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - max);
        sum += y[i];
    }
    return sum;
}

static const cpu_vmath scalar_table = {s_exp, s_tanh, s_erf, s_sigmoid, s_gelu, s_gelu_tanh, s_exp_shift_sum,
                                       "scalar"};

const cpu_vmath *cpu_vmath_scalar(void) { return &scalar_table; }

const cpu_vmath *cpu_vmath_get(void) {
    uint32_t f = cpu_features();
    if ((f & CPU_FEATURE_AVX2) && (f & CPU_FEATURE_FMA)) return cpu_vmath_avx2();
    return &scalar_table;
}

void cpu_vsigmoid(const float *x, float *y, int64_t n) { cpu_vmath_get()->sigmoid(x, y, n); }
void cpu_vtanh(const float *x, float *y, int64_t n) { cpu_vmath_get()->tanh(x, y, n); }

typedef struct gelu_job {
    cpu_vfn fn;
    const float *x;
    float *y;
    int64_t n;
} gelu_job;

static void gelu_run(void *user, int64_t c0, int64_t c1) {
    const gelu_job *j = user;
    int64_t b = c0 * 4096, e = c1 * 4096 < j->n ? c1 * 4096 : j->n;
    if (e > b) j->fn(j->x + b, j->y + b, e - b);
}

/* Gelu (opset 20): approximate = "none" (erf form) or "tanh". Chunks are whole multiples
 * of 8 elements, so the split never changes which elements take the vector tail path:
 * results are identical at any thread count. */
kiln_status cpu_gelu(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (!x || x->dtype != KILN_DTYPE_FLOAT)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "input X must be a float32 tensor");
    const ir_attr *a = ir_node_attr(ctx->node, "approximate");
    int use_tanh = 0;
    if (a && a->type == IR_ATTR_STRING) {
        if (a->s.len == 4 && !memcmp(a->s.data, "tanh", 4)) use_tanh = 1;
        else if (!(a->s.len == 4 && !memcmp(a->s.data, "none", 4)))
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                                   "attribute approximate must be \"none\" or \"tanh\"");
    }
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    kiln_status st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err);
    if (st != KILN_OK) return st;
    const cpu_vmath *vm = cpu_vmath_get();
    /* chunks of 4096 elements (~20 us each): big enough to hide the pool's hand-off */
    int64_t n = (int64_t)x->count, chunks = (n + 4095) / 4096;
    gelu_job j = {use_tanh ? vm->gelu_tanh : vm->gelu, (const float *)x->data, (float *)y->data, n};
    cpu_parallel_for(ctx->pool, chunks, 1, gelu_run, &j);
    return KILN_OK;
}
