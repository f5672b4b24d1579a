/* cpu_image_ops.c - sampling and patch ops on images: GridSample (opsets 16/20, 2-D and
 * 3-D, nearest/linear/cubic, zeros/border/reflection padding, align_corners), AffineGrid,
 * RoiAlign (opsets 10/16), Col2Im and DeformConv.
 *
 * All compute in float32 through cpu_fbuf.h (float16/float64 convert at the edges).
 * GridSample follows the ONNX reference exactly: grid coordinates are un-normalised in
 * float32, nearest rounds half to even, out-of-range coordinates are clamped (border) or
 * reflected (reflection) first, then every interpolation tap is fetched through the same
 * padding rule (zeros: 0 outside). RoiAlign averages (or takes the max of the weighted
 * corners, as the reference does) over a sampling grid per output bin. DeformConv builds
 * an im2col matrix of bilinear samples at offset positions (times the optional mask) and
 * multiplies it with sgemm per group. (CenterCropPad landed on main in cpu_tensor_extra.c.)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_elem_util.h"
#include "backends/cpu/cpu_fbuf.h"
#include "backends/cpu/cpu_gemm.h"

static bool im_str_is(const ir_attr *a, const char *s) {
    size_t n = strlen(s);
    return a && a->type == IR_ATTR_STRING && a->s.len == n && !memcmp(a->s.data, s, n);
}

/* ---- GridSample ---------------------------------------------------------------------- */

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };
#define GS_MAX_SP 3

static float gs_reflect(float x, float lo, float hi) {
    float rng = hi - lo;
    if (rng <= 0) return lo;
    if (x < lo) {
        float dx = lo - x;
        int n = (int)(dx / rng);
        float r = dx - (float)n * rng;
        return n % 2 == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        float dx = x - hi;
        int n = (int)(dx / rng);
        float r = dx - (float)n * rng;
        return n % 2 == 0 ? hi - r : lo + r;
    }
    return x;
}

/* Index for a tap along one dim after padding; -1 means "reads zero". */
static int64_t gs_tap(int64_t i, int64_t d, int pad, float lo, float hi) {
    if (pad == GS_ZEROS) return (i >= 0 && i < d) ? i : -1;
    if (pad == GS_BORDER) return i < 0 ? 0 : i >= d ? d - 1 : i;
    int64_t r = (int64_t)gs_reflect((float)i, lo, hi);
    return r < 0 ? 0 : r >= d ? d - 1 : r;
}

static void gs_cubic(float t, float *c) {
    const float A = -0.75f;
    float x = fabsf(t);
    c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
    c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
    c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
    c[3] = ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A;
}

kiln_status cpu_grid_sample(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out) {
    const rt_tensor *tx = cpu_in(inputs, n_in, 0), *tg = cpu_in(inputs, n_in, 1);
    if (!tx || !tg) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "X and grid are required");
    int32_t nsp = tx->rank - 2;
    if (nsp < 1 || nsp > GS_MAX_SP || tg->rank != tx->rank || tg->dims[0] != tx->dims[0] || tg->dims[tg->rank - 1] != nsp)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must be [N, C, D1..Dk] (k <= 3) and grid [N, ..., k]");
    const ir_attr *ma = ir_node_attr(ctx->node, "mode"), *pa = ir_node_attr(ctx->node, "padding_mode");
    int mode = GS_LINEAR, pad = GS_ZEROS;
    if (ma) {
        if (im_str_is(ma, "nearest")) mode = GS_NEAREST;
        else if (im_str_is(ma, "linear") || im_str_is(ma, "bilinear")) mode = GS_LINEAR;
        else if (im_str_is(ma, "cubic") || im_str_is(ma, "bicubic")) mode = GS_CUBIC;
        else return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "unknown mode");
    }
    if (pa) {
        if (im_str_is(pa, "border")) pad = GS_BORDER;
        else if (im_str_is(pa, "reflection")) pad = GS_REFLECTION;
        else if (!im_str_is(pa, "zeros")) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "unknown padding_mode");
    }
    bool ac = ir_node_attr_int(ctx->node, "align_corners", 0) != 0;
    int64_t N = tx->dims[0], C = tx->dims[1];
    int64_t od[RT_MAX_RANK] = {N, C};
    int64_t opos = 1, ipos = 1;
    for (int32_t i = 0; i < nsp; i++) {
        od[2 + i] = tg->dims[1 + i];
        opos *= od[2 + i];
        ipos *= tx->dims[2 + i];
    }
    const float *x, *g;
    float *oxb = NULL, *ogb = NULL, *ys = NULL, *y;
    rt_tensor *ty = NULL;
    kiln_status st;
    if ((st = cpu_fbuf_get(ctx, tx, "X", &x, &oxb)) || (st = cpu_fbuf_get(ctx, tg, "grid", &g, &ogb))) goto done;
    if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tx->dtype, tx->rank, od, &ty, &y, &ys)) || ty->count == 0) goto done;
    int ntap = mode == GS_NEAREST ? 1 : mode == GS_LINEAR ? 2 : 4;
    float lo[GS_MAX_SP], hi[GS_MAX_SP];
    int64_t dim[GS_MAX_SP];
    for (int32_t i = 0; i < nsp; i++) {
        dim[i] = tx->dims[2 + i];
        lo[i] = ac ? 0.f : -0.5f;
        hi[i] = ac ? (float)dim[i] - 1.f : (float)dim[i] - 0.5f;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t p = 0; p < opos; p++) {
            const float *gp = g + (n * opos + p) * nsp;
            int64_t idx[GS_MAX_SP][4];
            float w[GS_MAX_SP][4];
            for (int32_t i = 0; i < nsp; i++) {
                float v = gp[nsp - 1 - i]; /* grid's last entry is the first spatial dim */
                float d = (float)dim[i];
                float c = ac ? (v + 1) / 2.f * (d - 1) : ((v + 1) * d - 1) / 2.f;
                if (mode == GS_NEAREST) c = nearbyintf(c);
                if (c < lo[i] || c > hi[i]) {
                    if (pad == GS_BORDER) c = c < 0 ? 0 : c > d - 1 ? d - 1 : c;
                    else if (pad == GS_REFLECTION) c = gs_reflect(c, lo[i], hi[i]);
                }
                if (mode == GS_NEAREST) {
                    idx[i][0] = gs_tap((int64_t)c, dim[i], pad, lo[i], hi[i]);
                    w[i][0] = 1.f;
                } else {
                    float f0 = floorf(c);
                    int64_t x0 = (int64_t)f0;
                    float t = c - f0;
                    if (mode == GS_LINEAR) {
                        w[i][0] = 1 - t, w[i][1] = t;
                        for (int k = 0; k < 2; k++) idx[i][k] = gs_tap(x0 + k, dim[i], pad, lo[i], hi[i]);
                    } else {
                        gs_cubic(t, w[i]);
                        for (int k = 0; k < 4; k++) idx[i][k] = gs_tap(x0 - 1 + k, dim[i], pad, lo[i], hi[i]);
                    }
                }
            }
            int combos = 1;
            for (int32_t i = 0; i < nsp; i++) combos *= ntap;
            for (int64_t c = 0; c < C; c++) {
                const float *xc = x + (n * C + c) * ipos;
                float acc = 0.f;
                for (int cb = 0; cb < combos; cb++) {
                    int rem = cb;
                    float wt = 1.f;
                    int64_t off = 0;
                    bool zero = false;
                    for (int32_t i = nsp - 1; i >= 0; i--) {
                        int k = rem % ntap;
                        rem /= ntap;
                        int64_t ii = idx[i][k];
                        if (ii < 0) zero = true;
                        wt *= w[i][k];
                        int64_t stride = 1;
                        for (int32_t j = i + 1; j < nsp; j++) stride *= dim[j];
                        off += ii * stride;
                    }
                    if (!zero) acc += wt * xc[off];
                }
                y[(n * C + c) * opos + p] = acc;
            }
        }
    cpu_fbuf_finish(ty, ys);
    ys = NULL;
done:
    free(oxb), free(ogb), free(ys);
    return st;
}

/* ---- AffineGrid ---------------------------------------------------------------------- */

kiln_status cpu_affine_grid(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out) {
    const rt_tensor *tt = cpu_in(inputs, n_in, 0), *ts = cpu_in(inputs, n_in, 1);
    if (!tt || !ts) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "theta and size are required");
    int64_t sz[5];
    int32_t ns;
    kiln_status st = cpu_read_ints(ctx, ts, "size", sz, 5, &ns);
    if (st != KILN_OK) return st;
    if (ns != 4 && ns != 5) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "size must be [N, C, H, W] or [N, C, D, H, W]");
    int nsp = ns - 2;
    if (tt->rank != 3 || tt->dims[0] != sz[0] || tt->dims[1] != nsp || tt->dims[2] != nsp + 1)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "theta must be [N, %d, %d]", nsp, nsp + 1);
    for (int i = 0; i < ns; i++)
        if (sz[i] < 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "size must be >= 0");
    bool ac = ir_node_attr_int(ctx->node, "align_corners", 0) != 0;
    int64_t od[5] = {sz[0]};
    int64_t pts = 1;
    for (int i = 0; i < nsp; i++) od[1 + i] = sz[2 + i], pts *= sz[2 + i];
    od[1 + nsp] = nsp;
    const float *th;
    float *oth = NULL, *ys = NULL, *y;
    rt_tensor *ty;
    if ((st = cpu_fbuf_get(ctx, tt, "theta", &th, &oth))) return st;
    if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tt->dtype, nsp + 2, od, &ty, &y, &ys))) {
        free(oth);
        return st;
    }
    for (int64_t n = 0; n < sz[0]; n++)
        for (int64_t p = 0; p < pts; p++) {
            float base[4];
            int64_t rem = p;
            for (int i = nsp - 1; i >= 0; i--) { /* spatial dims D,H,W; base holds x (W) first */
                int64_t d = sz[2 + i], k = rem % d;
                rem /= d;
                float v = ac ? (d > 1 ? -1.f + 2.f * (float)k / (float)(d - 1) : 0.f) : ((2.f * (float)k + 1.f) / (float)d - 1.f);
                base[nsp - 1 - i] = v;
            }
            base[nsp] = 1.f;
            const float *T = th + n * nsp * (nsp + 1);
            for (int r = 0; r < nsp; r++) {
                float acc = 0.f;
                for (int c = 0; c <= nsp; c++) acc += T[r * (nsp + 1) + c] * base[c];
                y[(n * pts + p) * nsp + r] = acc;
            }
        }
    cpu_fbuf_finish(ty, ys);
    free(oth);
    return KILN_OK;
}

/* ---- RoiAlign ------------------------------------------------------------------------ */

kiln_status cpu_roi_align(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out) {
    const rt_tensor *tx = cpu_in(inputs, n_in, 0), *tr = cpu_in(inputs, n_in, 1), *tb = cpu_in(inputs, n_in, 2);
    if (!tx || !tr || !tb) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "X, rois and batch_indices are required");
    if (tx->rank != 4 || tr->rank != 2 || tr->dims[1] != 4 || tb->count != (uint64_t)tr->dims[0])
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must be [N, C, H, W], rois [R, 4], batch_indices [R]");
    bool half_pixel = ctx->node && ctx->node->opset >= 16;
    const ir_attr *cm = ir_node_attr(ctx->node, "coordinate_transformation_mode");
    if (cm) half_pixel = im_str_is(cm, "half_pixel");
    bool is_max = im_str_is(ir_node_attr(ctx->node, "mode"), "max");
    int64_t oh = ir_node_attr_int(ctx->node, "output_height", 1), ow = ir_node_attr_int(ctx->node, "output_width", 1);
    int64_t sr = ir_node_attr_int(ctx->node, "sampling_ratio", 0);
    float scale = ir_node_attr_float(ctx->node, "spatial_scale", 1.f);
    if (oh <= 0 || ow <= 0 || sr < 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad output size or sampling_ratio");
    int64_t N = tx->dims[0], C = tx->dims[1], H = tx->dims[2], W = tx->dims[3], R = tr->dims[0];
    int64_t od[4] = {R, C, oh, ow};
    const float *x, *rois;
    float *oxb = NULL, *orb = NULL, *ys = NULL, *y;
    rt_tensor *ty = NULL;
    kiln_status st;
    if ((st = cpu_fbuf_get(ctx, tx, "X", &x, &oxb)) || (st = cpu_fbuf_get(ctx, tr, "rois", &rois, &orb))) goto done;
    if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tx->dtype, 4, od, &ty, &y, &ys))) goto done;
    for (int64_t r = 0; r < R; r++) {
        int64_t bi = cpu_load_i64(tb->data, tb->dtype, (uint64_t)r);
        if (bi < 0 || bi >= N) {
            st = cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "batch index %lld is outside [0, %lld)", (long long)bi, (long long)N);
            goto done;
        }
        float off = half_pixel ? 0.5f : 0.f;
        float x1 = rois[r * 4] * scale - off, y1 = rois[r * 4 + 1] * scale - off;
        float x2 = rois[r * 4 + 2] * scale - off, y2 = rois[r * 4 + 3] * scale - off;
        float rw = x2 - x1, rh = y2 - y1;
        if (!half_pixel) rw = fmaxf(rw, 1.f), rh = fmaxf(rh, 1.f);
        float bh = rh / (float)oh, bw = rw / (float)ow;
        int64_t gh = sr > 0 ? sr : (int64_t)ceilf(rh / (float)oh), gw = sr > 0 ? sr : (int64_t)ceilf(rw / (float)ow);
        if (gh < 0) gh = 0;
        if (gw < 0) gw = 0;
        if (gh > 4096 || gw > 4096) {
            st = cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "RoiAlign sampling grid is too large");
            goto done;
        }
        float count = (float)(gh * gw > 1 ? gh * gw : 1);
        for (int64_t c = 0; c < C; c++) {
            const float *xc = x + (bi * C + c) * H * W;
            for (int64_t ph = 0; ph < oh; ph++)
                for (int64_t pw = 0; pw < ow; pw++) {
                    float acc = 0.f;
                    bool first = true;
                    for (int64_t iy = 0; iy < gh; iy++)
                        for (int64_t ix = 0; ix < gw; ix++) {
                            float yy = y1 + (float)ph * bh + ((float)iy + .5f) * bh / (float)gh;
                            float xx = x1 + (float)pw * bw + ((float)ix + .5f) * bw / (float)gw;
                            float v1 = 0, v2 = 0, v3 = 0, v4 = 0;
                            if (!(yy < -1.f || yy > (float)H || xx < -1.f || xx > (float)W)) {
                                yy = fmaxf(yy, 0.f), xx = fmaxf(xx, 0.f);
                                int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh2, xh2;
                                if (yl >= H - 1) yh2 = yl = H - 1, yy = (float)yl;
                                else yh2 = yl + 1;
                                if (xl >= W - 1) xh2 = xl = W - 1, xx = (float)xl;
                                else xh2 = xl + 1;
                                float ly = yy - (float)yl, lx = xx - (float)xl, hy = 1 - ly, hx = 1 - lx;
                                v1 = hy * hx * xc[yl * W + xl], v2 = hy * lx * xc[yl * W + xh2];
                                v3 = ly * hx * xc[yh2 * W + xl], v4 = ly * lx * xc[yh2 * W + xh2];
                            }
                            if (is_max) {
                                float m = fmaxf(fmaxf(v1, v2), fmaxf(v3, v4));
                                acc = first ? m : fmaxf(acc, m);
                                first = false;
                            } else {
                                acc += v1 + v2 + v3 + v4;
                            }
                        }
                    y[((r * C + c) * oh + ph) * ow + pw] = is_max ? acc : acc / count;
                }
        }
    }
    cpu_fbuf_finish(ty, ys);
    ys = NULL;
done:
    free(oxb), free(orb), free(ys);
    return st;
}

/* ---- Col2Im -------------------------------------------------------------------------- */

kiln_status cpu_col2im_op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out) {
    const rt_tensor *tx = cpu_in(inputs, n_in, 0), *ti = cpu_in(inputs, n_in, 1), *tb = cpu_in(inputs, n_in, 2);
    if (!tx || !ti || !tb) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input, image_shape and block_shape are required");
    int64_t img[CPU_CONV_MAX_SPATIAL], blk[CPU_CONV_MAX_SPATIAL];
    int32_t ni, nb;
    kiln_status st;
    if ((st = cpu_read_ints(ctx, ti, "image_shape", img, CPU_CONV_MAX_SPATIAL, &ni)) ||
        (st = cpu_read_ints(ctx, tb, "block_shape", blk, CPU_CONV_MAX_SPATIAL, &nb)))
        return st;
    if (ni != nb || ni < 1 || tx->rank != 3) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must be [N, C*prod(block), L] and shapes equal length");
    cpu_conv_geom g;
    if ((st = cpu_conv_geom_init(ctx, CPU_GEOM_CONV, ni, img, blk, &g))) return st;
    if (g.k_size == 0 || tx->dims[1] % g.k_size || tx->dims[2] != g.out_size)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input [%lld, %lld, %lld] does not fit %lld blocks of %lld",
                               (long long)tx->dims[0], (long long)tx->dims[1], (long long)tx->dims[2], (long long)g.out_size,
                               (long long)g.k_size);
    int64_t N = tx->dims[0], C = tx->dims[1] / g.k_size;
    int64_t od[2 + CPU_CONV_MAX_SPATIAL] = {N, C};
    for (int i = 0; i < ni; i++) od[2 + i] = img[i];
    const float *x;
    float *oxb = NULL, *ys = NULL, *y;
    rt_tensor *ty;
    if ((st = cpu_fbuf_get(ctx, tx, "input", &x, &oxb))) return st;
    if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tx->dtype, 2 + ni, od, &ty, &y, &ys))) {
        free(oxb);
        return st;
    }
    memset(y, 0, sizeof(float) * (size_t)ty->count);
    for (int64_t n = 0; n < N; n++) cpu_col2im(&g, x + n * C * g.k_size * g.out_size, C, y + n * C * g.in_size);
    cpu_fbuf_finish(ty, ys);
    free(oxb);
    return KILN_OK;
}

/* ---- DeformConv ---------------------------------------------------------------------- */

static float dc_sample(const float *xc, int64_t H, int64_t W, float h, float w) {
    if (h <= -1.f || h >= (float)H || w <= -1.f || w >= (float)W) return 0.f;
    float hf = floorf(h), wf = floorf(w);
    int64_t h0 = (int64_t)hf, w0 = (int64_t)wf;
    float lh = h - hf, lw = w - wf;
    float v = 0.f;
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            int64_t yy = h0 + dy, xx = w0 + dx;
            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
            v += (dy ? lh : 1 - lh) * (dx ? lw : 1 - lw) * xc[yy * W + xx];
        }
    return v;
}

kiln_status cpu_deform_conv(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out) {
    const rt_tensor *tx = cpu_in(inputs, n_in, 0), *tw = cpu_in(inputs, n_in, 1), *to = cpu_in(inputs, n_in, 2);
    const rt_tensor *tb = cpu_in(inputs, n_in, 3), *tm = cpu_in(inputs, n_in, 4);
    if (!tx || !tw || !to) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "X, W and offset are required");
    if (tx->rank != 4 || tw->rank != 4 || to->rank != 4)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "DeformConv supports 2-D images (rank-4 X, W, offset)");
    int64_t N = tx->dims[0], C = tx->dims[1], H = tx->dims[2], W = tx->dims[3], OC = tw->dims[0];
    int64_t group = ir_node_attr_int(ctx->node, "group", 1), og = ir_node_attr_int(ctx->node, "offset_group", 1);
    if (group <= 0 || og <= 0 || C % group || OC % group || tw->dims[1] != C / group || C % og)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "channels do not fit group/offset_group");
    cpu_conv_geom g;
    kiln_status st = cpu_conv_geom_init(ctx, CPU_GEOM_CONV, 2, tx->dims + 2, tw->dims + 2, &g);
    if (st != KILN_OK) return st;
    int64_t K = g.k_size, OH = g.out[0], OWd = g.out[1], P = g.out_size;
    if (to->dims[0] != N || to->dims[1] != og * 2 * K || to->dims[2] != OH || to->dims[3] != OWd)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "offset must be [N, %lld, %lld, %lld]", (long long)(og * 2 * K),
                               (long long)OH, (long long)OWd);
    if (tm && tm->count && (tm->rank != 4 || tm->dims[0] != N || tm->dims[1] != og * K || tm->dims[2] != OH || tm->dims[3] != OWd))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "mask must be [N, %lld, %lld, %lld]", (long long)(og * K), (long long)OH, (long long)OWd);
    if (tb && tb->count && tb->count != (uint64_t)OC) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "B must have %lld entries", (long long)OC);
    int64_t od[4] = {N, OC, OH, OWd};
    const float *x, *w, *off, *b = NULL, *m = NULL;
    float *o1 = NULL, *o2 = NULL, *o3 = NULL, *o4 = NULL, *o5 = NULL, *ys = NULL, *y, *col = NULL;
    rt_tensor *ty = NULL;
    if ((st = cpu_fbuf_get(ctx, tx, "X", &x, &o1)) || (st = cpu_fbuf_get(ctx, tw, "W", &w, &o2)) ||
        (st = cpu_fbuf_get(ctx, to, "offset", &off, &o3)))
        goto done;
    if (tb && tb->count && (st = cpu_fbuf_get(ctx, tb, "B", &b, &o4))) goto done;
    if (tm && tm->count && (st = cpu_fbuf_get(ctx, tm, "mask", &m, &o5))) goto done;
    if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tx->dtype, 4, od, &ty, &y, &ys))) goto done;
    if ((uint64_t)C * (uint64_t)K * (uint64_t)P > ((uint64_t)1 << 28)) {
        st = cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "DeformConv column buffer is too large");
        goto done;
    }
    col = malloc(sizeof(float) * (size_t)(C * K * P + 1));
    if (!col) {
        st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    int64_t Cg = C / group, OCg = OC / group, Cog = C / og;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t c = 0; c < C; c++) {
            int64_t gi = c / Cog;
            const float *xc = x + (n * C + c) * H * W;
            for (int64_t k = 0; k < K; k++) {
                int64_t kh = k / g.k[1], kw = k % g.k[1];
                const float *oh_ = off + ((n * og + gi) * 2 * K + 2 * k) * P, *ow_ = oh_ + P;
                const float *mk = m ? m + ((n * og + gi) * K + k) * P : NULL;
                float *cr = col + (c * K + k) * P;
                for (int64_t p = 0; p < P; p++) {
                    int64_t py = p / OWd, px = p % OWd;
                    float hh = (float)(py * g.stride[0] - g.pad0[0] + kh * g.dil[0]) + oh_[p];
                    float ww = (float)(px * g.stride[1] - g.pad0[1] + kw * g.dil[1]) + ow_[p];
                    float v = dc_sample(xc, H, W, hh, ww);
                    cr[p] = mk ? v * mk[p] : v;
                }
            }
        }
        for (int64_t gi = 0; gi < group; gi++)
            cpu_sgemm(ctx->pool, false, false, OCg, P, Cg * K, 1.f, w + gi * OCg * Cg * K, Cg * K, col + gi * Cg * K * P, P,
                      0.f, y + (n * OC + gi * OCg) * P, P, NULL);
        if (b)
            for (int64_t oc = 0; oc < OC; oc++)
                for (int64_t p = 0; p < P; p++) y[(n * OC + oc) * P + p] += b[oc];
    }
    cpu_fbuf_finish(ty, ys);
    ys = NULL;
done:
    free(o1), free(o2), free(o3), free(o4), free(o5), free(ys), free(col);
    return st;
}
