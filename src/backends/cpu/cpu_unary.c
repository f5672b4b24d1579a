/* cpu_unary.c - elementwise unary ops: math (Exp, Sin, Erf, ...), activations (Relu,
 * Sigmoid, Elu, Mish, ...), Clip, Shrink, IsNaN/IsInf, Not and BitwiseNot.
 *
 * Float ops are written once as an expression over `x` using <tgmath.h>, so the same
 * text instantiates a float32 and a float64 loop; float16/bfloat16 run the float32 loop
 * on converted blocks. Integer variants (Abs, Neg, Sign, Relu, Clip, Shrink, BitwiseNot)
 * come from a second generator. The hot float32 ops (Exp, Sigmoid, Tanh) use
 * vectorisable polynomial versions (cpu_fast_expf and friends) accurate to a few ulp
 * instead of libm calls the compiler cannot vectorise.
 */
#include <string.h>
#include <tgmath.h>

#include "backends/cpu/cpu_elem_util.h"

typedef struct un_params {
    float alpha, beta, gamma;
    double lo, hi; /* Clip bounds (as double so int64 bounds survive) */
    int detect_neg, detect_pos;
} un_params;

typedef void (*un_fn)(const void *x, void *y, int64_t n, const un_params *p);

/* ---- vectorisable float32 exp ------------------------------------------------------- */

typedef union fbits {
    float f;
    uint32_t u;
} fbits;

/* e^x to ~2 ulp: x = n*ln2 + r, e^r by a degree-6 polynomial, 2^n through the exponent
 * bits. Rounding uses the 1.5*2^23 trick so there is no float->int conversion. */
static inline float cpu_fast_expf(float x) {
    float xc = x > 88.72283f ? 88.72283f : x;
    xc = xc < -87.33654f ? -87.33654f : xc;
    const float magic = 12582912.0f;
    float t = xc * 1.44269504088896341f + magic;
    fbits tb = {.f = t};
    float nf = t - magic;
    float r = xc - nf * 0.693145751953125f;
    r = r - nf * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n as 2^(n/2) * 2^(n - n/2): n reaches 128 and -126, beyond one exponent field */
    int32_t n = (int32_t)(tb.u - 0x4B400000u);
    int32_t n1 = n / 2, n2 = n - n1;
    fbits s1 = {.u = (uint32_t)(n1 + 127) << 23}, s2 = {.u = (uint32_t)(n2 + 127) << 23};
    float y = p * s1.f * s2.f;
    y = x > 88.72283f ? __builtin_inff() : y;
    y = x < -87.33654f ? 0.0f : y;
    return y;
}

static inline float fast_sigmoidf(float x) { return 1.0f / (1.0f + cpu_fast_expf(-x)); }

static inline float fast_tanhf(float x) {
    float ax = x < 0 ? -x : x;
    float x2 = x * x;
    float small = x * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
    float e = cpu_fast_expf(2.0f * ax);
    float big = 1.0f - 2.0f / (e + 1.0f);
    big = x < 0 ? -big : big;
    return ax < 0.125f ? small : big;
}

/* ---- float expressions (x: value, T: its type, p: params) --------------------------- */
#define E_ABS(x, T, p) fabs(x)
#define E_NEG(x, T, p) (-(x))
#define E_FLOOR(x, T, p) floor(x)
#define E_CEIL(x, T, p) ceil(x)
#define E_ROUND(x, T, p) nearbyint(x)
#define E_SQRT(x, T, p) sqrt(x)
#define E_RECIP(x, T, p) ((T)1 / (x))
#define E_EXP(x, T, p) exp(x)
#define E_LOG(x, T, p) log(x)
#define E_SIN(x, T, p) sin(x)
#define E_COS(x, T, p) cos(x)
#define E_TAN(x, T, p) tan(x)
#define E_ASIN(x, T, p) asin(x)
#define E_ACOS(x, T, p) acos(x)
#define E_ATAN(x, T, p) atan(x)
#define E_SINH(x, T, p) sinh(x)
#define E_COSH(x, T, p) cosh(x)
#define E_ASINH(x, T, p) asinh(x)
#define E_ACOSH(x, T, p) acosh(x)
#define E_ATANH(x, T, p) atanh(x)
#define E_ERF(x, T, p) erf(x)
#define E_TANH(x, T, p) tanh(x)
#define E_SIGN(x, T, p) ((x) > 0 ? (T)1 : (x) < 0 ? (T)-1 : (x) == 0 ? (T)0 : (x))
#define E_RELU(x, T, p) ((x) > 0 ? (x) : (x) != (x) ? (x) : (T)0)
#define E_SIGMOID(x, T, p) ((x) >= 0 ? (T)1 / ((T)1 + exp(-(x))) : exp(x) / ((T)1 + exp(x)))
#define E_HSIGMOID(x, T, p) fmax((T)0, fmin((T)1, (T)(p)->alpha * (x) + (T)(p)->beta))
#define E_HSWISH(x, T, p) ((x) * fmax((T)0, fmin((T)1, (x) / (T)6 + (T)0.5)))
#define E_LRELU(x, T, p) ((x) < 0 ? (T)(p)->alpha * (x) : (x))
#define E_ELU(x, T, p) ((x) < 0 ? (T)(p)->alpha * (exp(x) - (T)1) : (x))
#define E_SELU(x, T, p) ((T)(p)->gamma * ((x) <= 0 ? (T)(p)->alpha * exp(x) - (T)(p)->alpha : (x)))
#define E_CELU(x, T, p) (fmax((T)0, x) + fmin((T)0, (T)(p)->alpha * (exp((x) / (T)(p)->alpha) - (T)1)))
#define E_SOFTPLUS(x, T, p) ((x) > 0 ? (x) + log1p(exp(-(x))) : log1p(exp(x)))
#define E_SOFTSIGN(x, T, p) ((x) / ((T)1 + fabs(x)))
#define E_TRELU(x, T, p) ((x) > (T)(p)->alpha ? (x) : (T)0)
#define E_MISH(x, T, p) ((x) * tanh(E_SOFTPLUS(x, T, p)))
#define E_SHRINK(x, T, p) \
    ((x) < -(T)(p)->alpha ? (x) + (T)(p)->beta : (x) > (T)(p)->alpha ? (x) - (T)(p)->beta : (T)0)
/* max first, then min: when min > max every value becomes max (the spec's rule) */
#define E_CLIP(x, T, p) ((x) != (x) ? (x) : fmin(fmax(x, (T)(p)->lo), (T)(p)->hi))

#define UN_LOOP(NAME, T, EXPR)                                                           \
    static void NAME(const void *xv, void *yv, int64_t n, const un_params *p) {          \
        (void)p;                                                                         \
        const T *restrict X = xv;                                                        \
        T *restrict Y = yv;                                                              \
        for (int64_t i = 0; i < n; i++) {                                                \
            T x = X[i];                                                                  \
            Y[i] = (T)(EXPR(x, T, p));                                                   \
        }                                                                                \
    }
#define UN_FLOAT(name, EXPR) UN_LOOP(name##_f32, float, EXPR) UN_LOOP(name##_f64, double, EXPR)

/* X(loop name, expression) */
#define FLOAT_OPS(X)                                                                                 \
    X(abs, E_ABS) X(neg, E_NEG) X(floor, E_FLOOR) X(ceil, E_CEIL) X(round, E_ROUND) X(sqrt, E_SQRT) \
    X(recip, E_RECIP) X(log, E_LOG) X(sin, E_SIN) X(cos, E_COS) X(tan, E_TAN) X(asin, E_ASIN)      \
    X(acos, E_ACOS) X(atan, E_ATAN) X(sinh, E_SINH) X(cosh, E_COSH) X(asinh, E_ASINH)               \
    X(acosh, E_ACOSH) X(atanh, E_ATANH) X(erf, E_ERF) X(sign, E_SIGN) X(relu, E_RELU)               \
    X(hsigmoid, E_HSIGMOID) X(hswish, E_HSWISH) X(lrelu, E_LRELU) X(elu, E_ELU) X(selu, E_SELU)     \
    X(celu, E_CELU) X(softplus, E_SOFTPLUS) X(softsign, E_SOFTSIGN) X(trelu, E_TRELU)               \
    X(mish, E_MISH) X(shrink, E_SHRINK) X(clip, E_CLIP)
FLOAT_OPS(UN_FLOAT)

/* exp/sigmoid/tanh: fast float32, libm float64 */
#define E_FEXP(x, T, p) cpu_fast_expf(x)
#define E_FSIGMOID(x, T, p) fast_sigmoidf(x)
#define E_FTANH(x, T, p) fast_tanhf(x)
UN_LOOP(exp_f32, float, E_FEXP)
UN_LOOP(exp_f64, double, E_EXP)
UN_LOOP(sigmoid_f32, float, E_FSIGMOID)
UN_LOOP(sigmoid_f64, double, E_SIGMOID)
UN_LOOP(tanh_f32, float, E_FTANH)
UN_LOOP(tanh_f64, double, E_TANH)

/* ---- integer expressions ------------------------------------------------------------ */
#define I_ABS(x, T, p) ((x) < 0 ? (T)(0 - (uint64_t)(x)) : (x))
#define I_NEG(x, T, p) ((T)(0 - (uint64_t)(x)))
#define I_SIGN(x, T, p) ((T)((x) > 0 ? 1 : (x) < 0 ? -1 : 0))
#define I_RELU(x, T, p) ((x) > 0 ? (x) : (T)0)
#define I_BNOT(x, T, p) ((T) ~(x))
#define I_CLIP(x, T, p) \
    ((double)(x) > (p)->hi || (p)->lo > (p)->hi ? (T)(p)->hi : (double)(x) < (p)->lo ? (T)(p)->lo : (x))
#define I_SHRINK(x, T, p)                                                                              \
    ((double)(x) < -(double)(p)->alpha    ? (T)cpu_f64_to_i64((double)(x) + (p)->beta)                \
     : (double)(x) > (double)(p)->alpha ? (T)cpu_f64_to_i64((double)(x) - (p)->beta)                \
                                        : (T)0)
#define U_ABS(x, T, p) (x)
#define U_SIGN(x, T, p) ((T)((x) > 0))

#define GEN_INT(S, T, name, EXPR) UN_LOOP(name##_##S, T, EXPR)
#define TAB_INT(S, T, name, EXPR) [KILN_DTYPE_##S] = name##_##S,
#define SINT_X(X, name, EXPR) \
    X(INT8, int8_t, name, EXPR) X(INT16, int16_t, name, EXPR) X(INT32, int32_t, name, EXPR) X(INT64, int64_t, name, EXPR)
#define UINT_X(X, name, EXPR)                                                                   \
    X(UINT8, uint8_t, name, EXPR) X(UINT16, uint16_t, name, EXPR) X(UINT32, uint32_t, name, EXPR) \
    X(UINT64, uint64_t, name, EXPR)
/* Defines name_<DTYPE> loops for signed (SEXPR) and unsigned (UEXPR) types and name_itab. */
#define DEF_INT(name, SEXPR, UEXPR)                                               \
    SINT_X(GEN_INT, name, SEXPR) UINT_X(GEN_INT, name, UEXPR)                   \
    static const un_fn name##_itab[KILN_DTYPE_COUNT] = {SINT_X(TAB_INT, name, SEXPR) \
                                                            UINT_X(TAB_INT, name, UEXPR)};
DEF_INT(abs, I_ABS, U_ABS)
DEF_INT(neg, I_NEG, I_NEG)
DEF_INT(sign, I_SIGN, U_SIGN)
DEF_INT(relu, I_RELU, I_RELU)
DEF_INT(bnot, I_BNOT, I_BNOT)
DEF_INT(clip, I_CLIP, I_CLIP)
DEF_INT(shrink, I_SHRINK, I_SHRINK)

static void not_bool(const void *xv, void *yv, int64_t n, const un_params *p) {
    (void)p;
    const uint8_t *restrict x = xv;
    uint8_t *restrict y = yv;
    for (int64_t i = 0; i < n; i++) y[i] = !x[i];
}

/* ---- runner ------------------------------------------------------------------------- */

typedef struct un_op {
    un_fn f32, f64;
    const un_fn *itab; /* integer loops by dtype, or NULL */
    un_fn boolfn;
} un_op;

typedef struct un_job {
    un_fn fn;
    const char *x;
    char *y;
    size_t es;
    kiln_dtype half; /* FLOAT16/BFLOAT16 when converting, else UNDEFINED */
    const un_params *p;
} un_job;

static void un_chunk(void *user, int64_t begin, int64_t end) {
    const un_job *j = user;
    if (j->half == KILN_DTYPE_UNDEFINED) {
        j->fn(j->x + begin * (int64_t)j->es, j->y + begin * (int64_t)j->es, end - begin, j->p);
        return;
    }
    float buf[256];
    const uint16_t *x = (const uint16_t *)(const void *)j->x;
    uint16_t *y = (uint16_t *)(void *)j->y;
    for (int64_t s = begin; s < end; s += 256) {
        int64_t m = end - s < 256 ? end - s : 256;
        cpu_half_to_f32(j->half, x + s, buf, m);
        j->fn(buf, buf, m, j->p);
        cpu_f32_to_half(j->half, buf, y + s, m);
    }
}

static kiln_status un_run(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out, const un_op *op, const un_params *p) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    un_job j = {.p = p, .half = KILN_DTYPE_UNDEFINED, .es = cpu_elem_size(x->dtype)};
    switch (x->dtype) {
    case KILN_DTYPE_FLOAT: j.fn = op->f32; break;
    case KILN_DTYPE_DOUBLE: j.fn = op->f64; break;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
        j.fn = op->f32;
        j.half = x->dtype;
        break;
    case KILN_DTYPE_BOOL: j.fn = op->boolfn; break;
    default: j.fn = op->itab && kiln_dtype_is_integer(x->dtype) ? op->itab[x->dtype] : NULL; break;
    }
    if (!j.fn)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported by this op",
                               kiln_dtype_name(x->dtype));
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    j.x = x->data;
    j.y = y->data;
    if (x->count) cpu_parallel_for(ctx->pool, (int64_t)x->count, CPU_ELEM_GRAIN, un_chunk, &j);
    return KILN_OK;
}

#define FLOAT_ONLY(name) {name##_f32, name##_f64, NULL, NULL}
#define WITH_INT(name) {name##_f32, name##_f64, name##_itab, NULL}

#define UN_KERNEL(Op, ...)                                                                                      \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out) {                                                                       \
        static const un_op op = __VA_ARGS__;                                                                    \
        un_params p = {0};                                                                                      \
        return un_run(ctx, inputs, n_in, outputs, n_out, &op, &p);                                              \
    }
UN_KERNEL(Abs, WITH_INT(abs))
UN_KERNEL(Neg, WITH_INT(neg))
UN_KERNEL(Sign, WITH_INT(sign))
UN_KERNEL(Relu, WITH_INT(relu))
UN_KERNEL(Floor, FLOAT_ONLY(floor))
UN_KERNEL(Ceil, FLOAT_ONLY(ceil))
UN_KERNEL(Round, FLOAT_ONLY(round))
UN_KERNEL(Sqrt, FLOAT_ONLY(sqrt))
UN_KERNEL(Reciprocal, FLOAT_ONLY(recip))
UN_KERNEL(Exp, FLOAT_ONLY(exp))
UN_KERNEL(Log, FLOAT_ONLY(log))
UN_KERNEL(Sin, FLOAT_ONLY(sin))
UN_KERNEL(Cos, FLOAT_ONLY(cos))
UN_KERNEL(Tan, FLOAT_ONLY(tan))
UN_KERNEL(Asin, FLOAT_ONLY(asin))
UN_KERNEL(Acos, FLOAT_ONLY(acos))
UN_KERNEL(Atan, FLOAT_ONLY(atan))
UN_KERNEL(Sinh, FLOAT_ONLY(sinh))
UN_KERNEL(Cosh, FLOAT_ONLY(cosh))
UN_KERNEL(Asinh, FLOAT_ONLY(asinh))
UN_KERNEL(Acosh, FLOAT_ONLY(acosh))
UN_KERNEL(Atanh, FLOAT_ONLY(atanh))
UN_KERNEL(Erf, FLOAT_ONLY(erf))
UN_KERNEL(Tanh, FLOAT_ONLY(tanh))
UN_KERNEL(Sigmoid, FLOAT_ONLY(sigmoid))
UN_KERNEL(HardSwish, FLOAT_ONLY(hswish))
UN_KERNEL(Softplus, FLOAT_ONLY(softplus))
UN_KERNEL(Softsign, FLOAT_ONLY(softsign))
UN_KERNEL(Mish, FLOAT_ONLY(mish))
UN_KERNEL(BitwiseNot, {NULL, NULL, bnot_itab, NULL})
UN_KERNEL(Not, {NULL, NULL, NULL, not_bool})

/* Ops with attributes: alpha (and beta/gamma) with ONNX's defaults. */
#define UN_KERNEL_ATTR(Op, name, ITAB, A, AD, B, BD, G, GD)                                                                 \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out) {                                                                       \
        static const un_op op = {name##_f32, name##_f64, ITAB, NULL};                                           \
        un_params p = {0};                                                                                      \
        p.alpha = ir_node_attr_float(ctx->node, A, AD);                                                             \
        p.beta = ir_node_attr_float(ctx->node, B, BD);                                                              \
        p.gamma = ir_node_attr_float(ctx->node, G, GD);                                                             \
        return un_run(ctx, inputs, n_in, outputs, n_out, &op, &p);                                              \
    }
UN_KERNEL_ATTR(HardSigmoid, hsigmoid, NULL, "alpha", 0.2f, "beta", 0.5f, "gamma", 0.0f)
UN_KERNEL_ATTR(LeakyRelu, lrelu, NULL, "alpha", 0.01f, "beta", 0.0f, "gamma", 0.0f)
UN_KERNEL_ATTR(Elu, elu, NULL, "alpha", 1.0f, "beta", 0.0f, "gamma", 0.0f)
UN_KERNEL_ATTR(Selu, selu, NULL, "alpha", 1.67326319217681884765625f, "beta", 0.0f, "gamma",
               1.05070102214813232421875f)
UN_KERNEL_ATTR(Celu, celu, NULL, "alpha", 1.0f, "beta", 0.0f, "gamma", 0.0f)
UN_KERNEL_ATTR(ThresholdedRelu, trelu, NULL, "alpha", 1.0f, "beta", 0.0f, "gamma", 0.0f)
UN_KERNEL_ATTR(Shrink, shrink, shrink_itab, "lambd", 0.5f, "bias", 0.0f, "gamma", 0.0f)

/* Clip: bounds from attributes before opset 11, from optional inputs after. */
kiln_status cpu_Clip(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    static const un_op op = WITH_INT(clip);
    un_params p = {0};
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    bool is_int = x && kiln_dtype_is_integer(x->dtype);
    p.lo = is_int ? -1.8446744073709552e19 : -__builtin_inf();
    p.hi = is_int ? 1.8446744073709552e19 : __builtin_inf();
    if (ctx->node && ctx->node->opset > 0 && ctx->node->opset < 11) {
        p.lo = ir_node_attr_float(ctx->node, "min", -3.402823466e+38f);
        p.hi = ir_node_attr_float(ctx->node, "max", 3.402823466e+38f);
    } else {
        const rt_tensor *lo = cpu_in(inputs, n_in, 1), *hi = cpu_in(inputs, n_in, 2);
        kiln_status st = KILN_OK;
        if (lo && lo->count) st = cpu_read_scalar_f64(ctx, lo, "min", &p.lo);
        if (st == KILN_OK && hi && hi->count) st = cpu_read_scalar_f64(ctx, hi, "max", &p.hi);
        if (st != KILN_OK) return st;
        if (x && lo && lo->count && lo->dtype != x->dtype)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "min has dtype %s but input has %s",
                                   kiln_dtype_name(lo->dtype), kiln_dtype_name(x->dtype));
    }
    return un_run(ctx, inputs, n_in, outputs, n_out, &op, &p);
}

/* ---- IsNaN / IsInf (float -> bool) -------------------------------------------------- */

static kiln_status float_test(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out, bool inf, bool neg, bool pos) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (!kiln_dtype_is_float(x->dtype) || !cpu_elem_size(x->dtype) || kiln_dtype_bits(x->dtype) == 8)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_BOOL, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    uint8_t *o = y->data;
    for (uint64_t i = 0; i < x->count; i++) {
        double v = cpu_load_f64(x->data, x->dtype, i);
        o[i] = inf ? (uint8_t)((isinf(v) && ((v > 0 && pos) || (v < 0 && neg)))) : (uint8_t)(v != v);
    }
    return KILN_OK;
}

kiln_status cpu_IsNaN(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                      int32_t n_out) {
    return float_test(ctx, inputs, n_in, outputs, n_out, false, false, false);
}

kiln_status cpu_IsInf(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                      int32_t n_out) {
    return float_test(ctx, inputs, n_in, outputs, n_out, true, ir_node_attr_int(ctx->node, "detect_negative", 1) != 0,
                      ir_node_attr_int(ctx->node, "detect_positive", 1) != 0);
}
