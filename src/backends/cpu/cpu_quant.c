/* cpu_quant.c - quantization kernels: QuantizeLinear, DequantizeLinear (per-tensor,
 * per-axis and blocked scales; 8/16-bit and packed 4/2-bit integers, float8 and float4
 * through cpu_lowp.h), DynamicQuantizeLinear, QLinearMatMul, QLinearConv and ConvInteger.
 *
 * Scales and zero points are indexed per element by q_param_index(): a scalar applies
 * everywhere, a 1-D tensor along `axis`, and (opset 21 block_size) a tensor of the input's
 * rank whose `axis` dim is ceil(d / block_size) covers blocks of block_size elements.
 * Quantization divides in float32, rounds half to even and saturates (integer types) or
 * converts with optional saturation (float8), as the ONNX reference does.
 * The integer convolutions run a direct loop with int32 products summed in int64 over a
 * precomputed tap table; the matmul accumulates in int64 too, so no intermediate can
 * overflow whatever K is.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_elem_util.h"
#include "backends/cpu/cpu_lowp.h"

static double q_load(const rt_tensor *t, uint64_t i) {
    return cpu_lowp_dtype(t->dtype) ? cpu_lowp_load(t->data, t->dtype, i) : cpu_load_f64(t->data, t->dtype, i);
}

static bool q_int_range(kiln_dtype d, double *lo, double *hi) {
    switch (d) {
    case KILN_DTYPE_UINT8: *lo = 0, *hi = 255; return true;
    case KILN_DTYPE_INT8: *lo = -128, *hi = 127; return true;
    case KILN_DTYPE_UINT16: *lo = 0, *hi = 65535; return true;
    case KILN_DTYPE_INT16: *lo = -32768, *hi = 32767; return true;
    case KILN_DTYPE_UINT4: *lo = 0, *hi = 15; return true;
    case KILN_DTYPE_INT4: *lo = -8, *hi = 7; return true;
    case KILN_DTYPE_UINT2: *lo = 0, *hi = 3; return true;
    case KILN_DTYPE_INT2: *lo = -2, *hi = 1; return true;
    case KILN_DTYPE_INT32: *lo = -2147483648.0, *hi = 2147483647.0; return true;
    default: return false;
    }
}

static bool q_float_target(kiln_dtype d) {
    return d == KILN_DTYPE_FLOAT8E4M3FN || d == KILN_DTYPE_FLOAT8E4M3FNUZ || d == KILN_DTYPE_FLOAT8E5M2 ||
           d == KILN_DTYPE_FLOAT8E5M2FNUZ || d == KILN_DTYPE_FLOAT4E2M1;
}

static void q_store(rt_tensor *t, uint64_t i, double v, bool saturate) {
    if (cpu_lowp_dtype(t->dtype)) cpu_lowp_store(t->data, t->dtype, i, v, saturate, CPU_ROUND_NEAREST);
    else cpu_store_f64(t->data, t->dtype, i, v);
}

/* How a scale / zero point maps onto the input's elements. */
typedef struct q_layout {
    int kind; /* 0 scalar, 1 per-axis, 2 blocked */
    int64_t inner, axis_len, block, nblk;
} q_layout;

static kiln_status q_layout_init(cpu_kernel_ctx *ctx, const rt_tensor *x, const rt_tensor *s, int64_t axis_attr,
                                 int64_t block, q_layout *l) {
    memset(l, 0, sizeof *l);
    if (s->count == 1 && s->rank <= 1) return KILN_OK;
    int32_t axis;
    kiln_status st = cpu_check_axis(ctx, axis_attr, x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    l->inner = 1;
    for (int32_t i = axis + 1; i < x->rank; i++) l->inner *= x->dims[i];
    l->axis_len = x->dims[axis];
    if (block <= 0) {
        if (s->rank != 1 || s->dims[0] != x->dims[axis])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a per-axis scale must be 1-D with %lld entries (axis %d)",
                                   (long long)x->dims[axis], (int)axis);
        l->kind = 1;
        return KILN_OK;
    }
    l->kind = 2;
    l->block = block;
    l->nblk = (x->dims[axis] + block - 1) / block;
    if (s->rank != x->rank) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a blocked scale must have the input's rank");
    for (int32_t i = 0; i < x->rank; i++)
        if (s->dims[i] != (i == axis ? l->nblk : x->dims[i]))
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                                   "blocked scale dim %d is %lld, expected %lld (block_size %lld)", (int)i,
                                   (long long)s->dims[i], (long long)(i == axis ? l->nblk : x->dims[i]),
                                   (long long)block);
    return KILN_OK;
}

static inline uint64_t q_param_index(const q_layout *l, uint64_t i) {
    if (l->kind == 0) return 0;
    uint64_t in = i % (uint64_t)l->inner, a = (i / (uint64_t)l->inner) % (uint64_t)l->axis_len;
    if (l->kind == 1) return a;
    uint64_t o = i / ((uint64_t)l->inner * (uint64_t)l->axis_len);
    return (o * (uint64_t)l->nblk + a / (uint64_t)l->block) * (uint64_t)l->inner + in;
}

kiln_status cpu_quantize_linear(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *s = cpu_in(inputs, n_in, 1), *zp = cpu_in(inputs, n_in, 2);
    if (!x || !s) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "x and y_scale are required");
    if (!kiln_dtype_is_float(x->dtype) && x->dtype != KILN_DTYPE_INT32)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "x must be a float type (got %s)", kiln_dtype_name(x->dtype));
    kiln_dtype out = (kiln_dtype)ir_node_attr_int(ctx->node, "output_dtype", 0);
    if (zp) {
        if (out != KILN_DTYPE_UNDEFINED && out != zp->dtype)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "output_dtype %s differs from y_zero_point's %s",
                                   kiln_dtype_name(out), kiln_dtype_name(zp->dtype));
        out = zp->dtype;
    }
    if (out == KILN_DTYPE_UNDEFINED) out = KILN_DTYPE_UINT8;
    double lo = 0, hi = 0;
    bool is_int = q_int_range(out, &lo, &hi) && out != KILN_DTYPE_INT32;
    if (!is_int && !q_float_target(out))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "cannot quantize to %s", kiln_dtype_name(out));
    int64_t block = ir_node_attr_int(ctx->node, "block_size", 0);
    q_layout ls, lz;
    kiln_status st = q_layout_init(ctx, x, s, ir_node_attr_int(ctx->node, "axis", 1), block, &ls);
    if (st != KILN_OK) return st;
    if (zp) {
        if (zp->count != s->count) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "y_zero_point and y_scale differ in shape");
        if ((st = q_layout_init(ctx, x, zp, ir_node_attr_int(ctx->node, "axis", 1), block, &lz)) != KILN_OK) return st;
    }
    bool saturate = ir_node_attr_int(ctx->node, "saturate", 1) != 0;
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc_zero(y, out, x->rank, x->dims, ctx->err)) != KILN_OK) return st;
    for (uint64_t i = 0; i < x->count; i++) {
        float xv = (float)q_load(x, i), sv = (float)q_load(s, q_param_index(&ls, i));
        double v = (double)(xv / sv);
        if (is_int) {
            v = nearbyint(v);
            if (zp) v += q_load(zp, q_param_index(&lz, i));
            v = v < lo ? lo : v > hi ? hi : v;
            if (v != v) v = 0;
            q_store(y, i, v, true);
        } else {
            if (out == KILN_DTYPE_FLOAT4E2M1 && zp) v += q_load(zp, q_param_index(&lz, i));
            q_store(y, i, v, saturate);
        }
    }
    return KILN_OK;
}

kiln_status cpu_dequantize_linear(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *s = cpu_in(inputs, n_in, 1), *zp = cpu_in(inputs, n_in, 2);
    if (!x || !s) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "x and x_scale are required");
    double lo, hi;
    bool is_int = q_int_range(x->dtype, &lo, &hi);
    if (!is_int && !q_float_target(x->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "cannot dequantize %s", kiln_dtype_name(x->dtype));
    if (!kiln_dtype_is_float(s->dtype) || cpu_lowp_dtype(s->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "x_scale must be float32, float16 or bfloat16");
    kiln_dtype out = (kiln_dtype)ir_node_attr_int(ctx->node, "output_dtype", 0);
    if (out == KILN_DTYPE_UNDEFINED) out = s->dtype;
    int64_t block = ir_node_attr_int(ctx->node, "block_size", 0);
    q_layout ls, lz;
    kiln_status st = q_layout_init(ctx, x, s, ir_node_attr_int(ctx->node, "axis", 1), block, &ls);
    if (st != KILN_OK) return st;
    bool use_zp = zp && is_int; /* float8/float4 zero points must be 0 and are ignored */
    if (use_zp) {
        if (zp->dtype != x->dtype)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "x_zero_point (%s) must have x's type (%s)",
                                   kiln_dtype_name(zp->dtype), kiln_dtype_name(x->dtype));
        if (zp->count != s->count) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "x_zero_point and x_scale differ in shape");
        if ((st = q_layout_init(ctx, x, zp, ir_node_attr_int(ctx->node, "axis", 1), block, &lz)) != KILN_OK) return st;
    }
    rt_tensor *y;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, out, x->rank, x->dims, &y)) != KILN_OK) return st;
    for (uint64_t i = 0; i < x->count; i++) {
        float dx = (float)q_load(x, i);
        if (use_zp) dx -= (float)q_load(zp, q_param_index(&lz, i));
        float v = dx * (float)q_load(s, q_param_index(&ls, i));
        cpu_store_f64(y->data, out, i, v);
    }
    return KILN_OK;
}

kiln_status cpu_dynamic_quantize_linear(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                        rt_value *outputs, int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (!x || x->dtype != KILN_DTYPE_FLOAT)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "x must be float32");
    const float *xv = x->data;
    float mx = 0.f, mn = 0.f;
    for (uint64_t i = 0; i < x->count; i++) {
        if (xv[i] > mx) mx = xv[i];
        if (xv[i] < mn) mn = xv[i];
    }
    float scale = (mx == mn ? 1.f : (mx - mn)) / 255.f;
    float zpf = 0.f - mn / scale;
    zpf = zpf < 0.f ? 0.f : zpf > 255.f ? 255.f : zpf;
    float zp = nearbyintf(zpf);
    rt_tensor *y, *ys, *yz;
    kiln_status st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_UINT8, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    uint8_t *yv = y->data;
    for (uint64_t i = 0; i < x->count; i++) {
        float v = nearbyintf(xv[i] / scale) + zp;
        v = v < 0.f ? 0.f : v > 255.f ? 255.f : v;
        yv[i] = (uint8_t)(v == v ? v : 0.f);
    }
    if (n_out > 1 && (st = cpu_alloc_out(ctx, outputs, n_out, 1, KILN_DTYPE_FLOAT, 0, NULL, &ys)) == KILN_OK)
        *(float *)ys->data = scale;
    if (st == KILN_OK && n_out > 2 && (st = cpu_alloc_out(ctx, outputs, n_out, 2, KILN_DTYPE_UINT8, 0, NULL, &yz)) == KILN_OK)
        *(uint8_t *)yz->data = (uint8_t)zp;
    return st;
}

/* ---- integer matmul / conv ----------------------------------------------------------- */

static kiln_status q_check_8bit(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what) {
    if (t && t->dtype != KILN_DTYPE_INT8 && t->dtype != KILN_DTYPE_UINT8)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "%s must be int8 or uint8 (got %s)", what,
                               kiln_dtype_name(t->dtype));
    return KILN_OK;
}

static inline int32_t q_i8(const rt_tensor *t, uint64_t i) {
    return t->dtype == KILN_DTYPE_INT8 ? (int32_t)((const int8_t *)t->data)[i] : (int32_t)((const uint8_t *)t->data)[i];
}

kiln_status cpu_qlinear_matmul(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out) {
    const rt_tensor *a = cpu_in(inputs, n_in, 0), *as = cpu_in(inputs, n_in, 1), *az = cpu_in(inputs, n_in, 2);
    const rt_tensor *b = cpu_in(inputs, n_in, 3), *bs = cpu_in(inputs, n_in, 4), *bz = cpu_in(inputs, n_in, 5);
    const rt_tensor *ys = cpu_in(inputs, n_in, 6), *yz = cpu_in(inputs, n_in, 7);
    if (!a || !as || !b || !bs || !ys) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing inputs");
    kiln_status st;
    if ((st = q_check_8bit(ctx, a, "a")) || (st = q_check_8bit(ctx, b, "b")) || (st = q_check_8bit(ctx, az, "a_zero_point")) ||
        (st = q_check_8bit(ctx, bz, "b_zero_point")) || (st = q_check_8bit(ctx, yz, "y_zero_point")))
        return st;
    if (a->rank < 2 || b->rank < 2) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a and b must be at least 2-D");
    int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = b->dims[b->rank - 1];
    if (b->dims[b->rank - 2] != K) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "inner dims differ");
    /* batch broadcast */
    int32_t r = a->rank > b->rank ? a->rank : b->rank;
    int64_t od[RT_MAX_RANK], ab[RT_MAX_RANK] = {0}, bb[RT_MAX_RANK] = {0};
    int64_t batch = 1;
    for (int32_t i = 0; i < r - 2; i++) {
        int32_t ia = i - (r - a->rank), ib = i - (r - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "batch dims do not broadcast");
        od[i] = da > db ? da : db;
        batch *= od[i];
    }
    od[r - 2] = M;
    od[r - 1] = N;
    if (as->count != 1 && as->count != (uint64_t)M) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a_scale must be scalar or [M]");
    if (bs->count != 1 && bs->count != (uint64_t)N) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "b_scale must be scalar or [N]");
    if (az && az->count != as->count) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a_zero_point must match a_scale");
    if (bz && bz->count != bs->count) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "b_zero_point must match b_scale");
    rt_tensor *y;
    kiln_dtype yt = yz ? yz->dtype : a->dtype;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, yt, r, od, &y)) != KILN_OK) return st;
    float ysv = (float)q_load(ys, 0);
    double yzv = yz ? q_load(yz, 0) : 0, lo = yt == KILN_DTYPE_INT8 ? -128 : 0, hi = yt == KILN_DTYPE_INT8 ? 127 : 255;
    (void)ab, (void)bb;
    for (int64_t bt = 0; bt < batch; bt++) {
        /* offsets of this batch in a and b with broadcasting */
        int64_t rem = bt, aoff = 0, boff = 0, astr = 1, bstr = 1;
        for (int32_t i = r - 3; i >= 0; i--) {
            int64_t idx = rem % od[i];
            rem /= od[i];
            int32_t ia = i - (r - a->rank), ib = i - (r - b->rank);
            if (ia >= 0) {
                if (a->dims[ia] != 1) aoff += idx * astr;
                astr *= a->dims[ia];
            }
            if (ib >= 0) {
                if (b->dims[ib] != 1) boff += idx * bstr;
                bstr *= b->dims[ib];
            }
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                int64_t acc = 0;
                int32_t za = az ? q_i8(az, as->count == 1 ? 0 : (uint64_t)m) : 0;
                int32_t zb = bz ? q_i8(bz, bs->count == 1 ? 0 : (uint64_t)n) : 0;
                for (int64_t k = 0; k < K; k++)
                    acc += (int64_t)(q_i8(a, (uint64_t)((aoff * M + m) * K + k)) - za) *
                           (q_i8(b, (uint64_t)((boff * K + k) * N + n)) - zb);
                float sa = (float)q_load(as, as->count == 1 ? 0 : (uint64_t)m);
                float sb = (float)q_load(bs, bs->count == 1 ? 0 : (uint64_t)n);
                double v = (double)acc * (double)(sa * sb / ysv) + yzv;
                v = nearbyint(v);
                v = v < lo ? lo : v > hi ? hi : v;
                cpu_store_f64(y->data, yt, (uint64_t)((bt * M + m) * N + n), v);
            }
    }
    return KILN_OK;
}

/* Integer conv shared by ConvInteger and QLinearConv: acc[n, oc, opos] (int64) =
 * sum (x - xz) * (w - wz[oc]) over the group's input channels and kernel taps. */
static kiln_status q_conv_core(cpu_kernel_ctx *ctx, const rt_tensor *x, const rt_tensor *w, const rt_tensor *xz,
                               const rt_tensor *wz, int64_t **acc_out, int32_t *rank_out, int64_t *dims_out) {
    kiln_status st;
    if ((st = q_check_8bit(ctx, x, "x")) || (st = q_check_8bit(ctx, w, "w")) || (st = q_check_8bit(ctx, xz, "x_zero_point")) ||
        (st = q_check_8bit(ctx, wz, "w_zero_point")))
        return st;
    if (x->rank < 3 || w->rank != x->rank || x->rank - 2 > CPU_CONV_MAX_SPATIAL)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "x and w must have the same rank (3 to %d)", CPU_CONV_MAX_SPATIAL + 2);
    int64_t group = ir_node_attr_int(ctx->node, "group", 1);
    int64_t N = x->dims[0], C = x->dims[1], OC = w->dims[0];
    if (group <= 0 || C % group || OC % group || w->dims[1] != C / group)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "channels (%lld in, w %lld x %lld) do not fit group %lld",
                               (long long)C, (long long)OC, (long long)w->dims[1], (long long)group);
    if (xz && xz->count != 1) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "x_zero_point must be a scalar");
    if (wz && wz->count != 1 && wz->count != (uint64_t)OC)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "w_zero_point must be a scalar or one per output channel");
    cpu_conv_geom g;
    int32_t nsp = x->rank - 2;
    if ((st = cpu_conv_geom_init(ctx, CPU_GEOM_CONV, nsp, x->dims + 2, w->dims + 2, &g)) != KILN_OK) return st;
    int64_t Cg = C / group, OCg = OC / group;
    uint64_t tabn = (uint64_t)g.k_size * (uint64_t)g.out_size, accn = (uint64_t)N * (uint64_t)OC * (uint64_t)g.out_size;
    if (tabn > ((uint64_t)1 << 28) || accn > ((uint64_t)1 << 28))
        return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "integer convolution is too large");
    int64_t *tab = malloc(sizeof(int64_t) * (size_t)(tabn + 1));
    int64_t *acc = calloc((size_t)accn + 1, sizeof(int64_t));
    if (!tab || !acc) {
        free(tab), free(acc);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    for (int64_t kp = 0; kp < g.k_size; kp++)
        for (int64_t op = 0; op < g.out_size; op++) {
            int64_t kr = kp, orr = op, off = 0, mul = 1;
            bool inside = true;
            for (int32_t d = nsp - 1; d >= 0; d--) {
                int64_t kd = kr % g.k[d], od = orr % g.out[d];
                kr /= g.k[d];
                orr /= g.out[d];
                int64_t id = od * g.stride[d] - g.pad0[d] + kd * g.dil[d];
                if (id < 0 || id >= g.in[d]) inside = false;
                off += id * mul;
                mul *= g.in[d];
            }
            tab[kp * g.out_size + op] = inside ? off : -1;
        }
    int32_t xzv = xz ? q_i8(xz, 0) : 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oc = 0; oc < OC; oc++) {
            int64_t gi = oc / OCg;
            int32_t wzv = wz ? q_i8(wz, wz->count == 1 ? 0 : (uint64_t)oc) : 0;
            int64_t *ar = acc + (n * OC + oc) * g.out_size;
            for (int64_t c = 0; c < Cg; c++) {
                uint64_t xbase = (uint64_t)((n * C + gi * Cg + c) * g.in_size);
                for (int64_t kp = 0; kp < g.k_size; kp++) {
                    int32_t wv = q_i8(w, (uint64_t)((oc * Cg + c) * g.k_size + kp)) - wzv;
                    const int64_t *tr = tab + kp * g.out_size;
                    for (int64_t op = 0; op < g.out_size; op++)
                        if (tr[op] >= 0) ar[op] += (int64_t)wv * (q_i8(x, xbase + (uint64_t)tr[op]) - xzv);
                }
            }
        }
    free(tab);
    *acc_out = acc;
    *rank_out = x->rank;
    dims_out[0] = N;
    dims_out[1] = OC;
    for (int32_t d = 0; d < nsp; d++) dims_out[2 + d] = g.out[d];
    return KILN_OK;
}

kiln_status cpu_conv_integer(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *w = cpu_in(inputs, n_in, 1);
    if (!x || !w) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "x and w are required");
    int64_t *acc, dims[RT_MAX_RANK];
    int32_t rank;
    kiln_status st = q_conv_core(ctx, x, w, cpu_in(inputs, n_in, 2), cpu_in(inputs, n_in, 3), &acc, &rank, dims);
    if (st != KILN_OK) return st;
    rt_tensor *y;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_INT32, rank, dims, &y)) == KILN_OK) {
        int32_t *yv = y->data;
        for (uint64_t i = 0; i < y->count; i++)
            yv[i] = (int32_t)(acc[i] > INT32_MAX ? INT32_MAX : acc[i] < INT32_MIN ? INT32_MIN : acc[i]);
    }
    free(acc);
    return st;
}

kiln_status cpu_qlinear_conv(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *xs = cpu_in(inputs, n_in, 1), *xz = cpu_in(inputs, n_in, 2);
    const rt_tensor *w = cpu_in(inputs, n_in, 3), *ws = cpu_in(inputs, n_in, 4), *wz = cpu_in(inputs, n_in, 5);
    const rt_tensor *ys = cpu_in(inputs, n_in, 6), *yz = cpu_in(inputs, n_in, 7), *bias = cpu_in(inputs, n_in, 8);
    if (!x || !xs || !w || !ws || !ys) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing inputs");
    kiln_status st = q_check_8bit(ctx, yz, "y_zero_point");
    if (st != KILN_OK) return st;
    if (ws->count != 1 && ws->count != (uint64_t)w->dims[0])
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "w_scale must be a scalar or one per output channel");
    if (bias && (bias->dtype != KILN_DTYPE_INT32 || bias->count != (uint64_t)w->dims[0]))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "B must be int32 with one entry per output channel");
    int64_t *acc, dims[RT_MAX_RANK];
    int32_t rank;
    if ((st = q_conv_core(ctx, x, w, xz, wz, &acc, &rank, dims)) != KILN_OK) return st;
    kiln_dtype yt = yz ? yz->dtype : x->dtype;
    rt_tensor *y;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, yt, rank, dims, &y)) == KILN_OK) {
        int64_t OC = dims[1], sp = 1;
        for (int32_t d = 2; d < rank; d++) sp *= dims[d];
        float xsv = (float)q_load(xs, 0), ysv = (float)q_load(ys, 0);
        double yzv = yz ? q_load(yz, 0) : 0, lo = yt == KILN_DTYPE_INT8 ? -128 : 0, hi = yt == KILN_DTYPE_INT8 ? 127 : 255;
        for (uint64_t i = 0; i < y->count; i++) {
            int64_t oc = (int64_t)(i / (uint64_t)sp) % OC;
            int64_t a = acc[i] + (bias ? ((const int32_t *)bias->data)[oc] : 0);
            float wsv = (float)q_load(ws, ws->count == 1 ? 0 : (uint64_t)oc);
            double v = (double)a * (double)(xsv * wsv / ysv) + yzv;
            v = v < lo ? lo : v > hi ? hi : v;
            cpu_store_f64(y->data, yt, i, nearbyint(v));
        }
    }
    free(acc);
    return st;
}
