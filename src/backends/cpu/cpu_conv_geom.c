/* cpu_conv_geom.c - conv/pool geometry from attributes (auto_pad, ceil_mode, ...) and the
 * im2col / col2im transforms. See cpu_conv_geom.h. */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_conv_geom.h"

static bool attr_str_is(const ir_attr *a, const char *s) {
    return a && a->type == IR_ATTR_STRING && a->s.len == strlen(s) && !memcmp(a->s.data, s, a->s.len);
}

static kiln_status ints_attr(cpu_kernel_ctx *ctx, const char *name, int32_t n, int64_t dflt, int64_t *out,
                             bool *present) {
    const ir_attr *a = ir_node_attr(ctx->node, name);
    if (present) *present = a != NULL;
    for (int32_t i = 0; i < n; i++) out[i] = dflt;
    if (!a) return KILN_OK;
    if (a->type != IR_ATTR_INTS || a->n != n)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute %s must list %d integers (got %d)", name, n,
                               a->type == IR_ATTR_INTS ? a->n : -1);
    for (int32_t i = 0; i < n; i++) out[i] = a->ints[i];
    return KILN_OK;
}

kiln_status cpu_conv_geom_init(cpu_kernel_ctx *ctx, int kind, int32_t nsp, const int64_t *x_dims,
                               const int64_t *kernel, cpu_conv_geom *g) {
    memset(g, 0, sizeof *g);
    if (nsp < 1 || nsp > CPU_CONV_MAX_SPATIAL)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "%d spatial dimensions are not supported (1..%d)", nsp,
                               CPU_CONV_MAX_SPATIAL);
    g->nsp = nsp;
    kiln_status st;
    bool has_k;
    if ((st = ints_attr(ctx, "kernel_shape", nsp, 1, g->k, &has_k)) != KILN_OK) return st;
    if (!has_k) {
        if (!kernel)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute kernel_shape is required");
        memcpy(g->k, kernel, sizeof(int64_t) * (size_t)nsp);
    }
    if ((st = ints_attr(ctx, "strides", nsp, 1, g->stride, NULL)) != KILN_OK) return st;
    if ((st = ints_attr(ctx, "dilations", nsp, 1, g->dil, NULL)) != KILN_OK) return st;
    int64_t pads[2 * CPU_CONV_MAX_SPATIAL];
    if ((st = ints_attr(ctx, "pads", 2 * nsp, 0, pads, NULL)) != KILN_OK) return st;
    const ir_attr *ap = ir_node_attr(ctx->node, "auto_pad");
    bool same_upper = attr_str_is(ap, "SAME_UPPER"), same_lower = attr_str_is(ap, "SAME_LOWER");
    bool valid = attr_str_is(ap, "VALID");
    if (ap && !same_upper && !same_lower && !valid && !attr_str_is(ap, "NOTSET"))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");
    bool ceil_mode = kind == CPU_GEOM_POOL && ir_node_attr_int(ctx->node, "ceil_mode", 0) != 0;
    g->in_size = g->out_size = g->k_size = 1;
    for (int32_t i = 0; i < nsp; i++) {
        int64_t in = x_dims[i], k = g->k[i], s = g->stride[i], d = g->dil[i];
        if (k < 1 || s < 1 || d < 1 || in < 0)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                                   "spatial axis %d: kernel %lld, stride %lld and dilation %lld must be >= 1", i,
                                   (long long)k, (long long)s, (long long)d);
        /* bounds that keep every extent below in int64 (a model's attributes are untrusted) */
        if (k > INT32_MAX || s > INT32_MAX || d > INT32_MAX || pads[i] > INT32_MAX || pads[i + nsp] > INT32_MAX)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                                   "spatial axis %d: kernel %lld, stride %lld, dilation %lld and pads %lld, %lld "
                                   "must be below 2^31",
                                   i, (long long)k, (long long)s, (long long)d, (long long)pads[i],
                                   (long long)pads[i + nsp]);
        int64_t ek = (k - 1) * d + 1; /* effective kernel extent */
        g->in[i] = in;
        if (same_upper || same_lower) {
            int64_t out = (in + s - 1) / s;
            int64_t total = (out - 1) * s + ek - in;
            if (total < 0) total = 0;
            g->pad0[i] = same_upper ? total / 2 : total - total / 2;
            g->pad1[i] = total - g->pad0[i];
        } else if (valid) {
            g->pad0[i] = g->pad1[i] = 0;
        } else {
            g->pad0[i] = pads[i];
            g->pad1[i] = pads[i + nsp];
            if (g->pad0[i] < 0 || g->pad1[i] < 0)
                return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "pads must be >= 0");
        }
        int64_t span = in + g->pad0[i] + g->pad1[i] - ek;
        if (span < 0)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                                   "spatial axis %d: input size %lld (padded %lld) is smaller than the kernel "
                                   "extent %lld",
                                   i, (long long)in, (long long)(in + g->pad0[i] + g->pad1[i]), (long long)ek);
        int64_t out = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
        /* ceil_mode: the last window must start inside the input or the begin padding */
        if (ceil_mode && (out - 1) * s >= in + g->pad0[i]) out--;
        g->out[i] = out;
        g->in_size *= in;
        g->out_size *= out;
        g->k_size *= k;
    }
    return KILN_OK;
}

/* ---- im2col -------------------------------------------------------------------------- */

typedef struct im2col_job {
    const cpu_conv_geom *g;
    const float *x;
    float *col;
} im2col_job;

/* 2-D: one row of col per (channel, kh, kw). */
static void im2col_2d_rows(void *user, int64_t begin, int64_t end) {
    const im2col_job *j = user;
    const cpu_conv_geom *g = j->g;
    int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
    int64_t KH = g->k[0], KW = g->k[1], sh = g->stride[0], sw = g->stride[1];
    for (int64_t r = begin; r < end; r++) {
        int64_t c = r / (KH * KW), kh = (r / KW) % KH, kw = r % KW;
        const float *xc = j->x + c * H * W;
        float *dst = j->col + r * OH * OW;
        int64_t hoff = kh * g->dil[0] - g->pad0[0], woff = kw * g->dil[1] - g->pad0[1];
        /* valid output columns: 0 <= ow*sw + woff < W */
        int64_t ow_lo = woff >= 0 ? 0 : (-woff + sw - 1) / sw;
        int64_t ow_hi = W - woff <= 0 ? 0 : (W - woff + sw - 1) / sw;
        if (ow_hi > OW) ow_hi = OW;
        if (ow_lo > ow_hi) ow_lo = ow_hi;
        for (int64_t oh = 0; oh < OH; oh++, dst += OW) {
            int64_t ih = oh * sh + hoff;
            if (ih < 0 || ih >= H) {
                memset(dst, 0, sizeof(float) * (size_t)OW);
                continue;
            }
            const float *src = xc + ih * W + woff;
            for (int64_t ow = 0; ow < ow_lo; ow++) dst[ow] = 0.f;
            if (sw == 1) memcpy(dst + ow_lo, src + ow_lo, sizeof(float) * (size_t)(ow_hi - ow_lo));
            else
                for (int64_t ow = ow_lo; ow < ow_hi; ow++) dst[ow] = src[ow * sw];
            for (int64_t ow = ow_hi; ow < OW; ow++) dst[ow] = 0.f;
        }
    }
}

/* Any rank: an odometer over output positions per row. */
static void im2col_nd_rows(void *user, int64_t begin, int64_t end) {
    const im2col_job *j = user;
    const cpu_conv_geom *g = j->g;
    int32_t n = g->nsp;
    for (int64_t r = begin; r < end; r++) {
        int64_t c = r / g->k_size, kp = r % g->k_size;
        int64_t kidx[CPU_CONV_MAX_SPATIAL];
        for (int32_t i = n - 1; i >= 0; i--) {
            kidx[i] = kp % g->k[i];
            kp /= g->k[i];
        }
        const float *xc = j->x + c * g->in_size;
        float *dst = j->col + r * g->out_size;
        int64_t o[CPU_CONV_MAX_SPATIAL] = {0};
        for (int64_t p = 0; p < g->out_size; p++) {
            int64_t off = 0;
            bool ok = true;
            for (int32_t i = 0; i < n; i++) {
                int64_t ii = o[i] * g->stride[i] + kidx[i] * g->dil[i] - g->pad0[i];
                if (ii < 0 || ii >= g->in[i]) {
                    ok = false;
                    break;
                }
                off = off * g->in[i] + ii;
            }
            dst[p] = ok ? xc[off] : 0.f;
            for (int32_t i = n - 1; i >= 0; i--) {
                if (++o[i] < g->out[i]) break;
                o[i] = 0;
            }
        }
    }
}

void cpu_im2col(cpu_threadpool *pool, const cpu_conv_geom *g, const float *x, int64_t channels, float *col) {
    im2col_job j = {g, x, col};
    int64_t rows = channels * g->k_size;
    int64_t grain = 1 + 4096 / (g->out_size + 1);
    cpu_parallel_for(pool, rows, grain, g->nsp == 2 ? im2col_2d_rows : im2col_nd_rows, &j);
}

void cpu_col2im(const cpu_conv_geom *g, const float *col, int64_t channels, float *y) {
    int32_t n = g->nsp;
    for (int64_t r = 0; r < channels * g->k_size; r++) {
        int64_t c = r / g->k_size, kp = r % g->k_size;
        int64_t kidx[CPU_CONV_MAX_SPATIAL];
        for (int32_t i = n - 1; i >= 0; i--) {
            kidx[i] = kp % g->k[i];
            kp /= g->k[i];
        }
        float *yc = y + c * g->in_size;
        const float *src = col + r * g->out_size;
        int64_t o[CPU_CONV_MAX_SPATIAL] = {0};
        for (int64_t p = 0; p < g->out_size; p++) {
            int64_t off = 0;
            bool ok = true;
            for (int32_t i = 0; i < n; i++) {
                int64_t ii = o[i] * g->stride[i] + kidx[i] * g->dil[i] - g->pad0[i];
                if (ii < 0 || ii >= g->in[i]) {
                    ok = false;
                    break;
                }
                off = off * g->in[i] + ii;
            }
            if (ok) yc[off] += src[p];
            for (int32_t i = n - 1; i >= 0; i--) {
                if (++o[i] < g->out[i]) break;
                o[i] = 0;
            }
        }
    }
}
