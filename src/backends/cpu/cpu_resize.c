/* cpu_resize.c - Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 7 and 9).
 *
 * Resize is separable: the tensor is resized one axis at a time (in double, like the
 * ONNX reference), each output index along the axis reading a small window of input
 * taps with weights. The window and weights follow the spec's definitions:
 *   - the source coordinate x of output index o comes from coordinate_transformation_mode
 *     (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric,
 *     tf_crop_and_resize with roi; the latter marks out-of-range positions, which take
 *     extrapolation_value);
 *   - nearest picks floor/ceil per nearest_mode, linear uses (1-r, r), cubic the Keys
 *     kernel with cubic_coeff_a; antialias (linear/cubic, downsampling) widens the kernel
 *     by 1/scale and renormalises;
 *   - taps outside the input are clamped to the edge, or dropped and the weights
 *     renormalised with exclude_outside.
 * Output sizes come from `sizes` (with keep_aspect_ratio_policy) or floor(scale * in);
 * `axes` (opset 18) restricts both to some axes. Before opset 11 there is only `scales`
 * and the behaviour is Upsample's: asymmetric coordinates, nearest rounds down.
 * Integer outputs round half to even and saturate, as the reference's saturate_cast.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

typedef enum rs_mode { RS_NEAREST, RS_LINEAR, RS_CUBIC } rs_mode;
typedef enum rs_coord {
    RC_HALF_PIXEL,
    RC_HALF_PIXEL_SYM,
    RC_PYTORCH_HALF_PIXEL,
    RC_ALIGN_CORNERS,
    RC_ASYMMETRIC,
    RC_TF_CROP
} rs_coord;
typedef enum rs_nearest { RN_PREFER_FLOOR, RN_PREFER_CEIL, RN_FLOOR, RN_CEIL } rs_nearest;

typedef struct rs_opts {
    rs_mode mode;
    rs_coord coord;
    rs_nearest nearest;
    double cubic_a, extrapolation;
    bool exclude_outside, antialias;
} rs_opts;

static bool rs_str_is(const ir_attr *a, const char *s) {
    size_t n = strlen(s);
    return a && a->type == IR_ATTR_STRING && a->s.len == n && !memcmp(a->s.data, s, n);
}

/* Picks the attribute's value among names[0..n) (default dflt when absent); -1 if unknown. */
static int rs_enum_attr(const ir_node *node, const char *name, const char *const *names, int n, int dflt) {
    const ir_attr *a = ir_node_attr(node, name);
    if (!a) return dflt;
    for (int i = 0; i < n; i++)
        if (rs_str_is(a, names[i])) return i;
    return -1;
}

/* Kernel weights for fractional offset `ratio` (1 for an integer coordinate): n taps
 * starting at tap offset `first` relative to floor(x) (or x - 1 when integral). */
static int rs_coeffs(const rs_opts *o, double ratio, double scale, double *w, int max) {
    if (o->mode == RS_NEAREST) {
        bool second;
        if (ratio == 1.0) second = true;
        else if (o->nearest == RN_PREFER_FLOOR) second = ratio > 0.5;
        else if (o->nearest == RN_PREFER_CEIL) second = ratio >= 0.5;
        else if (o->nearest == RN_FLOOR) second = false;
        else second = true;
        w[0] = second ? 0.0 : 1.0;
        w[1] = second ? 1.0 : 0.0;
        return 2;
    }
    if (!o->antialias || scale >= 1.0) {
        if (o->mode == RS_LINEAR) {
            w[0] = 1.0 - ratio;
            w[1] = ratio;
            return 2;
        }
        double A = o->cubic_a, r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
        w[0] = ((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A;
        w[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
        w[2] = ((A + 2) * q - (A + 3)) * q * q + 1;
        w[3] = ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A;
        return 4;
    }
    /* antialias: the kernel stretched by 1/scale */
    double support = o->mode == RS_LINEAR ? 1.0 : 2.0;
    int start = (int)floor(-support / scale) + 1;
    int n = 2 - 2 * start;
    if (n > max) n = max;
    double sum = 0;
    for (int k = 0; k < n; k++) {
        double x = fabs(scale * ((double)(start + k) - ratio)), v;
        if (o->mode == RS_LINEAR) v = x < 1 ? 1 - x : 0;
        else {
            double A = o->cubic_a;
            if (x <= 1) v = (A + 2) * x * x * x - (A + 3) * x * x + 1;
            else if (x < 2) v = A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
            else v = 0;
        }
        w[k] = v;
        sum += v;
    }
    if (sum != 0)
        for (int k = 0; k < n; k++) w[k] /= sum;
    return n;
}

#define RS_MAX_TAPS 4096

typedef struct rs_axis {
    int64_t out_w, in_w;
    int n;          /* taps per output index */
    int64_t *taps;  /* [out_w * n] clamped input indices */
    double *w;      /* [out_w * n] */
    uint8_t *extra; /* [out_w] 1 = extrapolated */
} rs_axis;

static kiln_status rs_plan_axis(cpu_kernel_ctx *ctx, const rs_opts *o, int64_t in_w, int64_t out_w, double scale,
                                double roi0, double roi1, rs_axis *ax) {
    memset(ax, 0, sizeof *ax);
    ax->in_w = in_w;
    ax->out_w = out_w;
    int maxn = 4;
    if (o->antialias && o->mode != RS_NEAREST && scale < 1.0) {
        double support = o->mode == RS_LINEAR ? 1.0 : 2.0;
        double n = 2 - 2 * (floor(-support / scale) + 1);
        if (!(n <= RS_MAX_TAPS))
            return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "antialias scale %g needs too many taps", scale);
        maxn = (int)n;
    }
    ax->taps = malloc(sizeof(int64_t) * (size_t)(out_w * maxn + 1));
    ax->w = malloc(sizeof(double) * (size_t)(out_w * maxn + 1));
    ax->extra = calloc((size_t)out_w + 1, 1);
    double *wk = malloc(sizeof(double) * (size_t)maxn);
    if (!ax->taps || !ax->w || !ax->extra || !wk) {
        free(wk);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory planning Resize");
    }
    double out_f = scale * (double)in_w;
    for (int64_t y = 0; y < out_w; y++) {
        double x, yd = (double)y;
        switch (o->coord) {
        case RC_ALIGN_CORNERS: x = out_f == 1 ? 0 : yd * (double)(in_w - 1) / (out_f - 1); break;
        case RC_ASYMMETRIC: x = yd / scale; break;
        case RC_TF_CROP:
            x = out_f == 1 ? (roi1 - roi0) * (double)(in_w - 1) / 2
                           : yd * (roi1 - roi0) * (double)(in_w - 1) / (out_f - 1);
            x += roi0 * (double)(in_w - 1);
            if (x < 0 || x > (double)(in_w - 1)) ax->extra[y] = 1;
            break;
        case RC_PYTORCH_HALF_PIXEL: x = out_f == 1 ? -0.5 : (yd + 0.5) / scale - 0.5; break;
        case RC_HALF_PIXEL_SYM: {
            double adj = (double)out_w / out_f, center = (double)in_w / 2;
            x = center * (1 - adj) + (yd + 0.5) / scale - 0.5;
            break;
        }
        default: x = (yd + 0.5) / scale - 0.5; break;
        }
        double fl = floor(x);
        bool integral = x == fl;
        double ratio = integral ? 1.0 : x - fl;
        int n = rs_coeffs(o, ratio, scale, wk, maxn);
        ax->n = n;
        int64_t base = (int64_t)fl + (integral ? -(n / 2) : -(n / 2) + 1);
        double sum = 0;
        for (int k = 0; k < n; k++) {
            int64_t t = base + k;
            double wt = wk[k];
            if (o->exclude_outside && (t < 0 || t >= in_w)) wt = 0;
            sum += wt;
            ax->taps[y * n + k] = t < 0 ? 0 : t >= in_w ? in_w - 1 : t;
            ax->w[y * n + k] = wt;
        }
        if (o->exclude_outside && sum != 0)
            for (int k = 0; k < n; k++) ax->w[y * n + k] /= sum;
    }
    free(wk);
    return KILN_OK;
}

static void rs_axis_free(rs_axis *ax) {
    free(ax->taps);
    free(ax->w);
    free(ax->extra);
}

typedef struct rs_job {
    const rs_axis *ax;
    const double *src;
    double *dst;
    int64_t inner;
    double extrapolation;
} rs_job;

/* One outer slice: dst[o][out_w][inner] from src[o][in_w][inner]. */
static void rs_run(void *user, int64_t begin, int64_t end) {
    const rs_job *j = user;
    const rs_axis *ax = j->ax;
    for (int64_t ob = begin; ob < end; ob++) {
        const double *s = j->src + ob * ax->in_w * j->inner;
        double *d = j->dst + ob * ax->out_w * j->inner;
        for (int64_t y = 0; y < ax->out_w; y++) {
            double *dr = d + y * j->inner;
            if (ax->extra[y]) {
                for (int64_t i = 0; i < j->inner; i++) dr[i] = j->extrapolation;
                continue;
            }
            for (int64_t i = 0; i < j->inner; i++) dr[i] = 0;
            for (int k = 0; k < ax->n; k++) {
                double w = ax->w[y * ax->n + k];
                if (w == 0) continue;
                const double *sr = s + ax->taps[y * ax->n + k] * j->inner;
                for (int64_t i = 0; i < j->inner; i++) dr[i] += w * sr[i];
            }
        }
    }
}

static void rs_store(rt_tensor *t, const double *v) {
    kiln_dtype d = t->dtype;
    for (uint64_t i = 0; i < t->count; i++) {
        double x = v[i];
        if (kiln_dtype_is_integer(d)) {
            x = nearbyint(x);
            double lo, hi;
            switch (d) {
            case KILN_DTYPE_INT8: lo = -128, hi = 127; break;
            case KILN_DTYPE_UINT8: lo = 0, hi = 255; break;
            case KILN_DTYPE_INT16: lo = -32768, hi = 32767; break;
            case KILN_DTYPE_UINT16: lo = 0, hi = 65535; break;
            case KILN_DTYPE_INT32: lo = -2147483648.0, hi = 2147483647.0; break;
            case KILN_DTYPE_UINT32: lo = 0, hi = 4294967295.0; break;
            case KILN_DTYPE_UINT64: lo = 0, hi = 1.8446744073709552e19; break;
            default: lo = -9.2233720368547758e18, hi = 9.2233720368547758e18; break;
            }
            x = x < lo ? lo : x > hi ? hi : x;
        }
        cpu_store_f64(t->data, d, i, x);
    }
}

/* Reads a float list input (scales, roi) into out; *n = 0 when absent or empty. */
static kiln_status rs_read_floats(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, double *out, int max,
                                  int *n) {
    *n = 0;
    if (!t || t->count == 0) return KILN_OK;
    if (t->count > (uint64_t)max) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s has too many entries", what);
    if (!kiln_dtype_is_float(t->dtype) && !kiln_dtype_is_integer(t->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s must be numeric", what);
    for (uint64_t i = 0; i < t->count; i++) out[i] = cpu_load_f64(t->data, t->dtype, i);
    *n = (int)t->count;
    return KILN_OK;
}

typedef struct rs_request {
    const rt_tensor *x;
    double scales[RT_MAX_RANK];  /* per axis, or 0 when sizes decide */
    int64_t sizes[RT_MAX_RANK];  /* per axis, or -1 */
    double roi[2 * RT_MAX_RANK]; /* start[r], end[r] */
    bool has_roi;
} rs_request;

static kiln_status rs_execute(cpu_kernel_ctx *ctx, const rs_opts *o, const rs_request *rq, bool use_sizes,
                              const int64_t *axes, int n_axes, int keep_policy, rt_value *outputs, int32_t n_out) {
    const rt_tensor *x = rq->x;
    int32_t r = x->rank;
    double scale[RT_MAX_RANK];
    int64_t out_dims[RT_MAX_RANK];
    bool in_axes[RT_MAX_RANK] = {0};
    for (int i = 0; i < n_axes; i++) in_axes[axes[i]] = true;
    for (int32_t a = 0; a < r; a++) {
        if (!in_axes[a]) {
            scale[a] = 1.0;
            out_dims[a] = x->dims[a];
        } else if (use_sizes) {
            out_dims[a] = rq->sizes[a];
            scale[a] = x->dims[a] ? (double)rq->sizes[a] / (double)x->dims[a] : 1.0;
        } else {
            scale[a] = rq->scales[a];
            double f = floor(rq->scales[a] * (double)x->dims[a]);
            if (!(rq->scales[a] > 0) || !(f < 1e15))
                return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "scale %g for axis %d is not a positive size",
                                       rq->scales[a], (int)a);
            out_dims[a] = (int64_t)f;
        }
    }
    if (use_sizes && keep_policy != 0) {
        double s = keep_policy == 1 ? INFINITY : -INFINITY;
        for (int i = 0; i < n_axes; i++) {
            double v = scale[axes[i]];
            s = keep_policy == 1 ? fmin(s, v) : fmax(s, v);
        }
        for (int i = 0; i < n_axes; i++) {
            scale[axes[i]] = s;
            out_dims[axes[i]] = (int64_t)((double)x->dims[axes[i]] * s + 0.5);
        }
    }
    rt_tensor *y;
    kiln_status st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, out_dims, &y);
    if (st != KILN_OK || y->count == 0) return st;
    if (x->count == 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "cannot resize an empty input to a non-empty output");
    /* working buffers in double: the largest intermediate shape */
    int64_t cur[RT_MAX_RANK];
    memcpy(cur, x->dims, sizeof(int64_t) * (size_t)r);
    uint64_t maxc = x->count;
    {
        int64_t tmp[RT_MAX_RANK];
        memcpy(tmp, x->dims, sizeof tmp);
        for (int32_t a = 0; a < r; a++) {
            tmp[a] = out_dims[a];
            uint64_t c = 1;
            for (int32_t b = 0; b < r; b++) c *= (uint64_t)tmp[b];
            if (c > maxc) maxc = c;
        }
    }
    if (maxc > ((uint64_t)1 << 31)) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "Resize intermediate is too large");
    double *a = malloc(sizeof(double) * (size_t)maxc), *b = malloc(sizeof(double) * (size_t)maxc);
    if (!a || !b) {
        free(a), free(b);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for Resize buffers");
    }
    for (uint64_t i = 0; i < x->count; i++) a[i] = cpu_load_f64(x->data, x->dtype, i);
    for (int32_t ax = 0; ax < r && st == KILN_OK; ax++) {
        double r0 = rq->has_roi ? rq->roi[ax] : 0.0, r1 = rq->has_roi ? rq->roi[r + ax] : 1.0;
        if (fabs(scale[ax] - 1.0) < 1e-9 && out_dims[ax] == cur[ax] && fabs(r0) < 1e-9 && fabs(r1 - 1.0) < 1e-9)
            continue;
        rs_axis plan;
        st = rs_plan_axis(ctx, o, cur[ax], out_dims[ax], scale[ax], r0, r1, &plan);
        if (st == KILN_OK) {
            int64_t outer = 1, inner = 1;
            for (int32_t k = 0; k < ax; k++) outer *= cur[k];
            for (int32_t k = ax + 1; k < r; k++) inner *= cur[k];
            rs_job j = {&plan, a, b, inner, o->extrapolation};
            cpu_parallel_for(ctx->pool, outer, 1, rs_run, &j);
            cur[ax] = out_dims[ax];
            double *t = a;
            a = b;
            b = t;
        }
        rs_axis_free(&plan);
    }
    if (st == KILN_OK) rs_store(y, a);
    free(a), free(b);
    return st;
}

static kiln_status rs_parse_opts(cpu_kernel_ctx *ctx, bool legacy, rs_opts *o) {
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel",   "half_pixel_symmetric", "pytorch_half_pixel",
                                         "align_corners", "asymmetric",           "tf_crop_and_resize"};
    static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    memset(o, 0, sizeof *o);
    int m = rs_enum_attr(ctx->node, "mode", modes, 3, 0);
    if (m < 0 && legacy) { /* Upsample's "bilinear" alias */
        const ir_attr *a = ir_node_attr(ctx->node, "mode");
        if (rs_str_is(a, "bilinear")) m = RS_LINEAR;
    }
    if (m < 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "mode must be nearest, linear or cubic");
    o->mode = (rs_mode)m;
    if (legacy) {
        o->coord = RC_ASYMMETRIC;
        o->nearest = RN_FLOOR;
        if (o->mode == RS_CUBIC) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "cubic needs opset 11");
    } else {
        int c = rs_enum_attr(ctx->node, "coordinate_transformation_mode", coords, 6, 0);
        if (c < 0) {
            const ir_attr *a = ir_node_attr(ctx->node, "coordinate_transformation_mode");
            if (rs_str_is(a, "tf_half_pixel_for_nn")) c = RC_HALF_PIXEL; /* opset 11 only */
            else return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "unknown coordinate_transformation_mode");
        }
        o->coord = (rs_coord)c;
        int n = rs_enum_attr(ctx->node, "nearest_mode", nearest, 4, 0);
        if (n < 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "unknown nearest_mode");
        o->nearest = (rs_nearest)n;
    }
    o->cubic_a = ir_node_attr_float(ctx->node, "cubic_coeff_a", -0.75f);
    o->exclude_outside = ir_node_attr_int(ctx->node, "exclude_outside", 0) != 0;
    o->extrapolation = ir_node_attr_float(ctx->node, "extrapolation_value", 0.f);
    o->antialias = ir_node_attr_int(ctx->node, "antialias", 0) != 0 && o->mode != RS_NEAREST;
    return KILN_OK;
}

static kiln_status rs_check_input(cpu_kernel_ctx *ctx, const rt_tensor *x) {
    if (!x) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing input X");
    if (x->dtype == KILN_DTYPE_STRING || x->dtype == KILN_DTYPE_BOOL || cpu_elem_size(x->dtype) == 0 ||
        x->dtype == KILN_DTYPE_COMPLEX64 || x->dtype == KILN_DTYPE_COMPLEX128)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "cannot resize %s tensors", kiln_dtype_name(x->dtype));
    return KILN_OK;
}

kiln_status cpu_resize(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                       int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    kiln_status st = rs_check_input(ctx, x);
    if (st != KILN_OK) return st;
    int64_t opset = ctx->node ? ctx->node->opset : 19;
    bool legacy = opset > 0 && opset < 11;
    rs_opts o;
    if ((st = rs_parse_opts(ctx, legacy, &o)) != KILN_OK) return st;
    int32_t r = x->rank;
    rs_request rq;
    memset(&rq, 0, sizeof rq);
    rq.x = x;
    const rt_tensor *t_roi = legacy ? NULL : cpu_in(inputs, n_in, 1);
    const rt_tensor *t_scales = cpu_in(inputs, n_in, legacy ? 1 : 2);
    const rt_tensor *t_sizes = legacy ? NULL : cpu_in(inputs, n_in, 3);
    int64_t axes[RT_MAX_RANK];
    int n_axes = r;
    int32_t na = 0;
    const int64_t *ax_attr = cpu_attr_ints(ctx->node, "axes", &na);
    if (ax_attr && na > 0) {
        if (na > r) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "more axes than the input's rank");
        n_axes = na;
        for (int i = 0; i < na; i++) {
            int32_t a;
            if ((st = cpu_check_axis(ctx, ax_attr[i], r, "axes", &a)) != KILN_OK) return st;
            axes[i] = a;
            for (int k = 0; k < i; k++)
                if (axes[k] == a) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "axes repeat %d", (int)a);
        }
    } else {
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    double vals[2 * RT_MAX_RANK];
    int n;
    if ((st = rs_read_floats(ctx, t_roi, "roi", vals, 2 * RT_MAX_RANK, &n)) != KILN_OK) return st;
    if (n) {
        if (n != 2 * n_axes)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "roi must have 2 * %d entries (got %d)", n_axes, n);
        for (int32_t a = 0; a < r; a++) rq.roi[a] = 0.0, rq.roi[r + a] = 1.0;
        for (int i = 0; i < n_axes; i++) {
            rq.roi[axes[i]] = vals[i];
            rq.roi[r + axes[i]] = vals[n_axes + i];
        }
        rq.has_roi = o.coord == RC_TF_CROP;
    }
    if (o.coord == RC_TF_CROP && !rq.has_roi)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "tf_crop_and_resize needs the roi input");
    bool use_sizes = false;
    if ((st = rs_read_floats(ctx, t_scales, "scales", vals, RT_MAX_RANK, &n)) != KILN_OK) return st;
    if (n) {
        if (n != n_axes) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "scales must have %d entries (got %d)", n_axes, n);
        for (int i = 0; i < n_axes; i++) rq.scales[axes[i]] = vals[i];
    } else if (t_sizes && t_sizes->count) {
        int64_t sz[RT_MAX_RANK];
        int32_t ns;
        if ((st = cpu_read_ints(ctx, t_sizes, "sizes", sz, RT_MAX_RANK, &ns)) != KILN_OK) return st;
        if (ns != n_axes) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "sizes must have %d entries (got %d)", n_axes, ns);
        for (int i = 0; i < n_axes; i++) {
            if (sz[i] < 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "sizes must be >= 0");
            rq.sizes[axes[i]] = sz[i];
        }
        use_sizes = true;
    } else {
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "one of scales or sizes must be given");
    }
    static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};
    int policy = rs_enum_attr(ctx->node, "keep_aspect_ratio_policy", policies, 3, 0);
    if (policy < 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "unknown keep_aspect_ratio_policy");
    return rs_execute(ctx, &o, &rq, use_sizes, axes, n_axes, policy, outputs, n_out);
}

kiln_status cpu_upsample(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                         int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    kiln_status st = rs_check_input(ctx, x);
    if (st != KILN_OK) return st;
    rs_opts o;
    if ((st = rs_parse_opts(ctx, true, &o)) != KILN_OK) return st;
    rs_request rq;
    memset(&rq, 0, sizeof rq);
    rq.x = x;
    int n = 0;
    double vals[RT_MAX_RANK];
    const ir_attr *sa = ir_node_attr(ctx->node, "scales");
    if (sa && sa->type == IR_ATTR_FLOATS) {
        if (sa->n > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "too many scales");
        for (int i = 0; i < sa->n; i++) vals[i] = sa->floats[i];
        n = sa->n;
    } else if ((st = rs_read_floats(ctx, cpu_in(inputs, n_in, 1), "scales", vals, RT_MAX_RANK, &n)) != KILN_OK) {
        return st;
    }
    if (n != x->rank)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "scales must have one entry per input dim (%d, got %d)",
                               (int)x->rank, n);
    int64_t axes[RT_MAX_RANK];
    for (int i = 0; i < n; i++) {
        rq.scales[i] = vals[i];
        axes[i] = i;
    }
    return rs_execute(ctx, &o, &rq, false, axes, n, 0, outputs, n_out);
}
