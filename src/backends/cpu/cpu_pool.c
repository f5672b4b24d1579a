/* cpu_pool.c - MaxPool (with Indices, ceil_mode, dilations, storage_order), AveragePool
 * (count_include_pad), LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool and
 * MaxUnpool, on float32 NCHW-style tensors of any spatial rank.
 *
 * One task per (image, channel) plane; inside a plane an odometer walks output positions
 * and a second one the kernel window. 2-D MaxPool without Indices (the CNN case) has a
 * separable row-wise fast path, vectorised with AVX2 or AVX-512 (cpu_pool.h,
 * cpu_pool_avx2.c, cpu_pool_avx512.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_pool.h"
#include "backends/cpu/cpu_via_f32.h"

static bool cpu_dtype_int_like(kiln_dtype d) { return d != KILN_DTYPE_FLOAT16 && d != KILN_DTYPE_BFLOAT16 && d != KILN_DTYPE_DOUBLE; }

enum pool_kind { POOL_MAX, POOL_AVG, POOL_LP };

typedef struct pool_job {
    const cpu_conv_geom *g;
    int kind;
    bool include_pad;
    bool col_major; /* storage_order = 1 for Indices */
    float p;
    const float *x;
    float *y;
    int64_t *idx;
    bool avx2;   /* the 2-D MaxPool fast path may use cpu_pool_avx2.c */
    bool avx512; /* ... or cpu_pool_avx512.c */
} pool_job;

/* 2-D MaxPool without the Indices output (ResNet's 3x3/2 after the stem), computed
 * separably per output row (cpu_pool.h): the vertical fold over the window's valid input
 * rows into a row buffer, then the horizontal fold with the stride; outputs whose window
 * crosses the left/right border take the clipped scalar loop. Same results as the
 * generic loop, NaN (propagated) and empty windows (-inf) included. The portable row
 * kernels (cpu_pool.h) are also the vector kernels' tails. */
#define POOL_MAX_VROWS 64 /* larger kernels take the generic loop */

/* one output of a border column: clipped window over the row maxima r[0, W) */
static float hmax_clipped(const float *r, int64_t W, int64_t w0, int64_t k, int64_t d) {
    float acc = -INFINITY;
    bool any = false;
    for (int64_t kw = 0; kw < k; kw++) {
        int64_t iw = w0 + kw * d;
        if (iw < 0 || iw >= W) continue;
        acc = any ? cpu_pool_smaxn(r[iw], acc) : r[iw];
        any = true;
    }
    return acc;
}

static void maxpool2d_plane(const cpu_conv_geom *g, const float *xp, float *yp, float *rbuf, bool avx2,
                            bool avx512) {
    int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
    int64_t s = g->stride[1], p0 = g->pad0[1], k = g->k[1], d = g->dil[1];
    /* interior columns: ow*s - p0 >= 0 and ow*s - p0 + (k-1)*d <= W-1 */
    int64_t lo = (p0 + s - 1) / s, hi_num = W - 1 - (k - 1) * d + p0;
    int64_t hi = hi_num < 0 ? 0 : hi_num / s + 1; /* exclusive */
    if (hi > OW) hi = OW;
    if (lo > hi) lo = hi;
    const float *rows[POOL_MAX_VROWS];
    for (int64_t oh = 0; oh < OH; oh++) {
        int64_t h0 = oh * g->stride[0] - g->pad0[0];
        int32_t n = 0;
        for (int64_t kh = 0; kh < g->k[0]; kh++) {
            int64_t ih = h0 + kh * g->dil[0];
            if (ih >= 0 && ih < H) rows[n++] = xp + ih * W;
        }
        float *yr = yp + oh * OW;
        if (n == 0) { /* window entirely in the padding */
            for (int64_t ow = 0; ow < OW; ow++) yr[ow] = -INFINITY;
            continue;
        }
        if (avx512) cpu_pool_vmax_avx512(rows, n, W, rbuf);
        else if (avx2) cpu_pool_vmax_avx2(rows, n, W, rbuf);
        else cpu_pool_vmax_scalar(rows, n, 0, W, rbuf);
        for (int64_t ow = 0; ow < lo; ow++) yr[ow] = hmax_clipped(rbuf, W, ow * s - p0, k, d);
        if (avx512) cpu_pool_hmax_avx512(rbuf, lo, hi, s, p0, k, d, yr);
        else if (avx2) cpu_pool_hmax_avx2(rbuf, lo, hi, s, p0, k, d, yr);
        else cpu_pool_hmax_scalar(rbuf, lo, hi, s, p0, k, d, yr);
        for (int64_t ow = hi; ow < OW; ow++) yr[ow] = hmax_clipped(rbuf, W, ow * s - p0, k, d);
    }
}

static void pool_run(void *user, int64_t begin, int64_t end) {
    const pool_job *j = user;
    const cpu_conv_geom *g = j->g;
    int32_t n = g->nsp;
    if (j->kind == POOL_MAX && !j->idx && n == 2 && g->k[0] <= POOL_MAX_VROWS) {
        /* row buffer: W maxima + 32 floats of slack for the stride-2 vector loads */
        float *rbuf = malloc(sizeof(float) * (size_t)(g->in[1] + 32));
        if (rbuf) {
            memset(rbuf + g->in[1], 0, sizeof(float) * 32);
            for (int64_t plane = begin; plane < end; plane++)
                maxpool2d_plane(g, j->x + plane * g->in_size, j->y + plane * g->out_size, rbuf, j->avx2, j->avx512);
            free(rbuf);
            return;
        } /* out of memory for W floats: the generic loop below needs none */
    }
    for (int64_t plane = begin; plane < end; plane++) {
        const float *xp = j->x + plane * g->in_size;
        float *yp = j->y + plane * g->out_size;
        int64_t o[CPU_CONV_MAX_SPATIAL] = {0};
        for (int64_t op = 0; op < g->out_size; op++) {
            float acc = j->kind == POOL_MAX ? -INFINITY : 0.f;
            int64_t best = -1, count = 0, padded_count = 1;
            /* count of window positions inside the padded input (count_include_pad) */
            for (int32_t i = 0; i < n; i++) {
                int64_t start = o[i] * g->stride[i] - g->pad0[i], c = 0;
                for (int64_t k = 0; k < g->k[i]; k++) {
                    int64_t ii = start + k * g->dil[i];
                    if (ii < g->in[i] + g->pad1[i]) c++;
                }
                padded_count *= c;
            }
            int64_t kk[CPU_CONV_MAX_SPATIAL] = {0};
            for (int64_t kp = 0; kp < g->k_size; kp++) {
                int64_t off = 0;
                bool ok = true;
                for (int32_t i = 0; i < n; i++) {
                    int64_t ii = o[i] * g->stride[i] - g->pad0[i] + kk[i] * g->dil[i];
                    if (ii < 0 || ii >= g->in[i]) {
                        ok = false;
                        break;
                    }
                    off = off * g->in[i] + ii;
                }
                if (ok) {
                    float v = xp[off];
                    if (j->kind == POOL_MAX) {
                        /* NaN propagates (cpu_pool.h); Indices point at the first NaN */
                        if (best < 0 || v > acc || (isnan(v) && !isnan(acc))) {
                            acc = v;
                            best = off;
                        }
                    } else if (j->kind == POOL_AVG) acc += v;
                    else acc += powf(fabsf(v), j->p);
                    count++;
                }
                for (int32_t i = n - 1; i >= 0; i--) {
                    if (++kk[i] < g->k[i]) break;
                    kk[i] = 0;
                }
            }
            if (j->kind == POOL_AVG) acc = acc / (float)(j->include_pad ? padded_count : (count ? count : 1));
            else if (j->kind == POOL_LP) acc = powf(acc, 1.f / j->p);
            yp[op] = acc;
            if (j->idx) {
                int64_t flat = best < 0 ? 0 : best;
                if (j->col_major && best >= 0) { /* re-linearise with the first spatial axis fastest */
                    int64_t rem = best, cm = 0, mul = 1, coords[CPU_CONV_MAX_SPATIAL];
                    for (int32_t i = n - 1; i >= 0; i--) {
                        coords[i] = rem % g->in[i];
                        rem /= g->in[i];
                    }
                    for (int32_t i = 0; i < n; i++) {
                        cm += coords[i] * mul;
                        mul *= g->in[i];
                    }
                    flat = cm;
                }
                j->idx[plane * g->out_size + op] = plane * g->in_size + flat;
            }
            for (int32_t i = n - 1; i >= 0; i--) {
                if (++o[i] < g->out[i]) break;
                o[i] = 0;
            }
        }
    }
}

/* ---- MaxPool over C16 data (layout_c16.c marks it between C16 convs) --------------- */

typedef struct c16_pool_job {
    cpu_pool_win w;
    const float *x;
    float *y;
} c16_pool_job;

/* rows: (image and channel block, output row) */
static void c16_pool_run(void *user, int64_t r0, int64_t r1) {
    const c16_pool_job *j = user;
    for (int64_t r = r0; r < r1; r++) {
        int64_t blk = r / j->w.OH;
        cpu_pool_max_c16_avx512(&j->w, j->x + blk * j->w.H * j->w.W * 16, j->y + blk * j->w.OH * j->w.OW * 16,
                                r % j->w.OH);
    }
}

static kiln_status pool_common(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out, int kind);

static kiln_status maxpool_nchw(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                int32_t n_out, int unused) {
    (void)unused;
    return pool_common(ctx, inputs, n_in, outputs, n_out, POOL_MAX);
}

/* A MaxPool marked kiln_c16 (bits: 1 input, 2 output, as a Conv's): C16 in and out with
 * AVX-512F runs the 16-channel kernel; anything else converts (cpu_conv_p16.c). */
static kiln_status maxpool_c16(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out, int64_t c16) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    bool fast = (c16 & 3) == 3 && x && x->dtype == KILN_DTYPE_FLOAT && x->rank == 4 && x->dims[1] % 16 == 0 &&
                (cpu_features() & CPU_FEATURE_AVX512F) && (n_out < 2 || !ctx->node || ctx->node->n_outputs < 2 ||
                                                          ctx->node->outputs[1] == IR_NONE);
    if (!fast) return cpu_conv_layout_fallback(ctx, inputs, n_in, outputs, n_out, c16, true, maxpool_nchw, 0);
    cpu_conv_geom g;
    kiln_status st = cpu_conv_geom_init(ctx, CPU_GEOM_POOL, 2, x->dims + 2, NULL, &g);
    if (st != KILN_OK) return st;
    int64_t ydims[4] = {x->dims[0], x->dims[1], g.out[0], g.out[1]};
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, 4, ydims, ctx->err)) != KILN_OK || y->count == 0) return st;
    c16_pool_job j = {{g.in[0], g.in[1], g.out[0], g.out[1], g.k[0], g.k[1], g.stride[0], g.stride[1], g.pad0[0],
                       g.pad0[1], g.dil[0], g.dil[1]},
                      x->data,
                      y->data};
    cpu_parallel_for(ctx->pool, x->dims[0] * (x->dims[1] / 16) * g.out[0], 4, c16_pool_run, &j);
    return KILN_OK;
}

static kiln_status pool_common(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out, int kind) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (!x) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing input X");
    /* other dtypes run through float32 (exact for 8/16-bit integers) */
    if (cpu_via_f32_ok(x->dtype) && (kind == POOL_MAX || !cpu_dtype_int_like(x->dtype)))
        return cpu_run_via_f32(ctx, kind == POOL_MAX ? cpu_maxpool : kind == POOL_AVG ? cpu_averagepool : cpu_lppool,
                               inputs, n_in, outputs, n_out);
    if (x->dtype != KILN_DTYPE_FLOAT)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "pooling supports float32 only (got %s)",
                               kiln_dtype_name(x->dtype));
    if (x->rank < 3) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must have rank >= 3 (got %d)", x->rank);
    cpu_conv_geom g;
    kiln_status st = cpu_conv_geom_init(ctx, CPU_GEOM_POOL, x->rank - 2, x->dims + 2, NULL, &g);
    if (st != KILN_OK) return st;
    int64_t ydims[RT_MAX_RANK];
    ydims[0] = x->dims[0];
    ydims[1] = x->dims[1];
    for (int32_t i = 0; i < g.nsp; i++) ydims[2 + i] = g.out[i];
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, ydims, ctx->err)) != KILN_OK) return st;
    int64_t *idx = NULL;
    if (kind == POOL_MAX && n_out > 1 && ctx->node && ctx->node->n_outputs > 1 && ctx->node->outputs[1] != IR_NONE) {
        rt_tensor *it = rt_value_as_tensor(&outputs[1]);
        if ((st = rt_tensor_alloc(it, KILN_DTYPE_INT64, x->rank, ydims, ctx->err)) != KILN_OK) return st;
        idx = it->data;
    }
    if (y->count == 0) return KILN_OK;
    uint32_t features = cpu_features(); /* read per call, so tests can cap the ISA */
    pool_job j = {&g, kind, ir_node_attr_int(ctx->node, "count_include_pad", 0) != 0,
                  ir_node_attr_int(ctx->node, "storage_order", 0) != 0, (float)ir_node_attr_int(ctx->node, "p", 2),
                  x->data, y->data, idx, (features & CPU_FEATURE_AVX2) != 0, (features & CPU_FEATURE_AVX512F) != 0};
    cpu_parallel_for(ctx->pool, x->dims[0] * x->dims[1], 1, pool_run, &j);
    return KILN_OK;
}

kiln_status cpu_maxpool(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                        int32_t n_out) {
    int64_t c16 = ctx->node ? ir_node_attr_int(ctx->node, "kiln_c16", 0) : 0;
    if (c16) return maxpool_c16(ctx, inputs, n_in, outputs, n_out, c16);
    return pool_common(ctx, inputs, n_in, outputs, n_out, POOL_MAX);
}
kiln_status cpu_averagepool(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out) {
    return pool_common(ctx, inputs, n_in, outputs, n_out, POOL_AVG);
}
kiln_status cpu_lppool(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                       int32_t n_out) {
    return pool_common(ctx, inputs, n_in, outputs, n_out, POOL_LP);
}

/* ---- global pools -------------------------------------------------------------------- */

typedef struct gpool_job {
    int kind;
    float p;
    int64_t size;
    const float *x;
    float *y;
} gpool_job;

static void gpool_run(void *user, int64_t begin, int64_t end) {
    const gpool_job *j = user;
    for (int64_t c = begin; c < end; c++) {
        const float *xp = j->x + c * j->size;
        float acc;
        if (j->kind == POOL_MAX) {
            acc = -INFINITY;
            for (int64_t i = 0; i < j->size; i++) acc = xp[i] > acc ? xp[i] : acc;
        } else if (j->kind == POOL_AVG) {
            float s[8] = {0};
            int64_t i = 0;
            for (; i + 8 <= j->size; i += 8)
                for (int k = 0; k < 8; k++) s[k] += xp[i + k];
            acc = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
            for (; i < j->size; i++) acc += xp[i];
            acc /= (float)j->size;
        } else {
            acc = 0.f;
            for (int64_t i = 0; i < j->size; i++) acc += powf(fabsf(xp[i]), j->p);
            acc = powf(acc, 1.f / j->p);
        }
        j->y[c] = acc;
    }
}

static kiln_status gpool_common(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                rt_value *outputs, int kind) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (!x) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing input X");
    if (cpu_via_f32_ok(x->dtype) && !cpu_dtype_int_like(x->dtype))
        return cpu_run_via_f32(ctx, kind == POOL_MAX ? cpu_global_maxpool : kind == POOL_AVG ? cpu_global_averagepool
                                                                                            : cpu_global_lppool,
                               inputs, n_in, outputs, 1);
    if (x->dtype != KILN_DTYPE_FLOAT)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "pooling supports float32 only (got %s)",
                               kiln_dtype_name(x->dtype));
    if (x->rank < 2) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must have rank >= 2 (got %d)", x->rank);
    int64_t ydims[RT_MAX_RANK], size = 1;
    ydims[0] = x->dims[0];
    ydims[1] = x->dims[1];
    for (int32_t i = 2; i < x->rank; i++) {
        ydims[i] = 1;
        size *= x->dims[i];
    }
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    kiln_status st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, ydims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;
    gpool_job j = {kind, (float)ir_node_attr_int(ctx->node, "p", 2), size, x->data, y->data};
    cpu_parallel_for(ctx->pool, x->dims[0] * x->dims[1], 1 + 4096 / (size + 1), gpool_run, &j);
    return KILN_OK;
}

kiln_status cpu_global_averagepool(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                   rt_value *outputs, int32_t n_out) {
    return gpool_common(ctx, inputs, n_in, outputs, POOL_AVG);
}
kiln_status cpu_global_maxpool(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out) {
    return gpool_common(ctx, inputs, n_in, outputs, POOL_MAX);
}
kiln_status cpu_global_lppool(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out) {
    return gpool_common(ctx, inputs, n_in, outputs, POOL_LP);
}

/* ---- MaxUnpool ----------------------------------------------------------------------- */

kiln_status cpu_maxunpool(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *ind = cpu_in(inputs, n_in, 1), *osh = cpu_in(inputs, n_in, 2);
    if (!x || !ind) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "MaxUnpool needs X and I");
    if (x->dtype != KILN_DTYPE_FLOAT || ind->dtype != KILN_DTYPE_INT64 || ind->count != x->count)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "MaxUnpool needs float32 X and int64 I of X's shape");
    if (x->rank < 3) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must have rank >= 3");
    int32_t nsp = x->rank - 2;
    /* idims: the default size, the inverse of the pooling geometry. Indices in I address
     * that shape even when output_shape asks for a larger output (the extra rows and
     * columns are padding at the end of each spatial axis). */
    int64_t ydims[RT_MAX_RANK], idims[RT_MAX_RANK];
    idims[0] = ydims[0] = x->dims[0];
    idims[1] = ydims[1] = x->dims[1];
    {
        int64_t k[CPU_CONV_MAX_SPATIAL], s[CPU_CONV_MAX_SPATIAL], pads[2 * CPU_CONV_MAX_SPATIAL];
        const ir_attr *ka = ir_node_attr(ctx->node, "kernel_shape"), *sa = ir_node_attr(ctx->node, "strides"),
                      *pa = ir_node_attr(ctx->node, "pads");
        if (!ka || ka->type != IR_ATTR_INTS || ka->n != nsp || nsp > CPU_CONV_MAX_SPATIAL)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute kernel_shape must list %d integers", nsp);
        for (int32_t i = 0; i < nsp; i++) {
            k[i] = ka->ints[i];
            s[i] = sa && sa->type == IR_ATTR_INTS && sa->n == nsp ? sa->ints[i] : 1;
            pads[i] = pa && pa->type == IR_ATTR_INTS && pa->n == 2 * nsp ? pa->ints[i] : 0;
            pads[i + nsp] = pa && pa->type == IR_ATTR_INTS && pa->n == 2 * nsp ? pa->ints[i + nsp] : 0;
            if (k[i] < 1 || s[i] < 1 || k[i] > (1 << 20) || s[i] > (1 << 20) || x->dims[2 + i] > ((int64_t)1 << 30))
                return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad kernel_shape or strides");
            idims[2 + i] = ydims[2 + i] = (x->dims[2 + i] - 1) * s[i] + k[i] - pads[i] - pads[i + nsp];
            if (ydims[2 + i] < 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "negative output size");
        }
    }
    bool remap = false;
    if (osh) {
        if (osh->dtype != KILN_DTYPE_INT64 || osh->count != (uint64_t)x->rank)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "output_shape must be int64 with %d entries", x->rank);
        for (int32_t i = 0; i < x->rank; i++) {
            ydims[i] = ((const int64_t *)osh->data)[i];
            if (ydims[i] != idims[i]) remap = true;
        }
    }
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    kiln_status st = rt_tensor_alloc_zero(y, KILN_DTYPE_FLOAT, x->rank, ydims, ctx->err);
    if (st != KILN_OK) return st;
    const int64_t *I = ind->data;
    const float *X = x->data;
    float *Y = y->data;
    uint64_t icount = 1;
    for (int32_t d = 0; d < x->rank; d++) icount *= (uint64_t)idims[d];
    for (uint64_t i = 0; i < x->count; i++) {
        if (I[i] < 0 || (uint64_t)I[i] >= (remap ? icount : y->count))
            return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "index %lld in I is outside the output (%llu elements)",
                                   (long long)I[i], (unsigned long long)(remap ? icount : y->count));
        if (!remap) {
            Y[I[i]] = X[i];
            continue;
        }
        /* unravel in the default shape, ravel in output_shape (dropped when outside) */
        int64_t rem = I[i], flat = 0, mul = 1;
        bool inside = true;
        for (int32_t d = x->rank - 1; d >= 0; d--) {
            int64_t c = rem % idims[d];
            rem /= idims[d];
            if (c >= ydims[d]) inside = false;
            flat += c * mul;
            mul *= ydims[d];
        }
        if (inside) Y[flat] = X[i];
    }
    return KILN_OK;
}
