/* cpu_norm.c - normalisation ops on float32: BatchNormalization (inference mode),
 * LayerNormalization (with Mean / InvStdDev outputs), InstanceNormalization,
 * GroupNormalization (opset 18 per-group and opset 21 per-channel scale), RMSNormalization,
 * LpNormalization, MeanVarianceNormalization and LRN.
 *
 * Statistics are accumulated in double: a 768-wide LayerNorm in float loses ~1e-6 relative
 * in the variance, which is visible against ONNX Runtime at 1e-5 tolerances, and the cost
 * is irrelevant next to the GEMMs around these ops. LayerNorm/RMSNorm rows whose scale
 * and bias span the whole row run through cpu_rows.h (AVX2, two-pass statistics).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"
#include "backends/cpu/cpu_rows.h"

static kiln_status need_float(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what) {
    if (!t) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing input %s", what);
    if (t->dtype != KILN_DTYPE_FLOAT)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "input %s must be float32 (got %s)", what,
                               kiln_dtype_name(t->dtype));
    return KILN_OK;
}

/* ---- BatchNormalization -------------------------------------------------------------- */

typedef struct bn_job {
    const float *x, *scale, *bias, *mean, *var;
    float *y;
    float eps;
    int64_t C, size;
} bn_job;

static void bn_run(void *user, int64_t begin, int64_t end) {
    const bn_job *j = user;
    for (int64_t p = begin; p < end; p++) {
        int64_t c = p % j->C;
        float a = j->scale[c] / sqrtf(j->var[c] + j->eps);
        float b = j->bias[c] - a * j->mean[c];
        const float *x = j->x + p * j->size;
        float *y = j->y + p * j->size;
        for (int64_t i = 0; i < j->size; i++) y[i] = a * x[i] + b;
    }
}

kiln_status cpu_batchnorm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out) {
    const char *names[5] = {"X", "scale", "B", "input_mean", "input_var"};
    const rt_tensor *t[5];
    for (int i = 0; i < 5; i++) {
        t[i] = cpu_in(inputs, n_in, i);
        kiln_status st = need_float(ctx, t[i], names[i]);
        if (st != KILN_OK) return st;
    }
    bool training = ir_node_attr_int(ctx->node, "training_mode", 0) != 0;
    const rt_tensor *x = t[0];
    if (x->rank < 2) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must have rank >= 2");
    int64_t C = x->dims[1];
    for (int i = 1; i < 5; i++)
        if (t[i]->count != (uint64_t)C)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input %s must have C=%lld elements (got %llu)", names[i],
                                   (long long)C, (unsigned long long)t[i]->count);
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    kiln_status st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;
    int64_t size = 1;
    for (int32_t i = 2; i < x->rank; i++) size *= x->dims[i];
    bn_job j = {x->data, t[1]->data, t[2]->data, t[3]->data, t[4]->data, y->data,
                ir_node_attr_float(ctx->node, "epsilon", 1e-5f), C, size};
    if (training) {
        /* training_mode=1 (deterministic): normalise with this batch's per-channel mean
         * and population variance; outputs 1 and 2 are the updated running statistics
         * running = input * momentum + batch * (1 - momentum). */
        rt_tensor *rm = NULL, *rv = NULL;
        int64_t cd[1] = {C};
        if (n_out > 1) st = rt_tensor_alloc(rt_value_as_tensor(&outputs[1]), KILN_DTYPE_FLOAT, 1, cd, ctx->err);
        if (st == KILN_OK && n_out > 2) st = rt_tensor_alloc(rt_value_as_tensor(&outputs[2]), KILN_DTYPE_FLOAT, 1, cd, ctx->err);
        float *stats = st == KILN_OK ? malloc(sizeof(float) * (size_t)(2 * C)) : NULL;
        if (st == KILN_OK && !stats) st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        if (st != KILN_OK) return st;
        if (n_out > 1) rm = &outputs[1].t;
        if (n_out > 2) rv = &outputs[2].t;
        double mom = ir_node_attr_float(ctx->node, "momentum", 0.9f);
        const float *X = x->data, *im = t[3]->data, *iv = t[4]->data;
        double cnt = (double)(x->dims[0] * size);
        for (int64_t c = 0; c < C; c++) {
            double s1 = 0, s2 = 0;
            for (int64_t b = 0; b < x->dims[0]; b++)
                for (int64_t i = 0; i < size; i++) s1 += X[(b * C + c) * size + i];
            double mean = cnt > 0 ? s1 / cnt : 0;
            for (int64_t b = 0; b < x->dims[0]; b++)
                for (int64_t i = 0; i < size; i++) {
                    double d = X[(b * C + c) * size + i] - mean;
                    s2 += d * d;
                }
            double var = cnt > 0 ? s2 / cnt : 0;
            stats[c] = (float)mean;
            stats[C + c] = (float)var;
            if (rm) ((float *)rm->data)[c] = (float)(im[c] * mom + mean * (1.0 - mom));
            if (rv) ((float *)rv->data)[c] = (float)(iv[c] * mom + var * (1.0 - mom));
        }
        j.mean = stats;
        j.var = stats + C;
        cpu_parallel_for(ctx->pool, x->dims[0] * C, 1 + 4096 / (size + 1), bn_run, &j);
        free(stats);
        return KILN_OK;
    }
    cpu_parallel_for(ctx->pool, x->dims[0] * C, 1 + 4096 / (size + 1), bn_run, &j);
    return KILN_OK;
}

/* ---- LayerNormalization / RMSNormalization ------------------------------------------- */

typedef struct ln_job {
    const float *x, *scale, *bias;
    float *y, *mean, *inv;
    int64_t len;
    uint64_t scale_n, bias_n; /* elements; broadcast as the trailing part of the row */
    float eps;
    bool rms;
    const cpu_rows *rows;
} ln_job;

static void ln_run(void *user, int64_t begin, int64_t end) {
    const ln_job *j = user;
    int64_t n = j->len;
    if (j->scale_n == (uint64_t)n && (!j->bias || j->bias_n == (uint64_t)n)) {
        /* the usual case (scale and bias over the whole row): the vector row kernel */
        for (int64_t r = begin; r < end; r++) {
            float m, inv;
            j->rows->norm_row(j->x + r * n, j->scale, j->bias, j->y + r * n, n, j->eps, j->rms, &m, &inv);
            if (j->mean) j->mean[r] = m;
            if (j->inv) j->inv[r] = inv;
        }
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * n;
        float *y = j->y + r * n;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < n; i++) {
            s += x[i];
            s2 += (double)x[i] * x[i];
        }
        double mean = j->rms ? 0.0 : s / (double)n;
        double var = s2 / (double)n - mean * mean;
        if (var < 0) var = 0;
        float inv = (float)(1.0 / sqrt(var + j->eps)), m = (float)mean;
        for (int64_t i = 0; i < n; i++) {
            float sc = j->scale[j->scale_n == (uint64_t)n ? (uint64_t)i : (uint64_t)i % j->scale_n];
            float v = (x[i] - m) * inv * sc;
            if (j->bias) v += j->bias[j->bias_n == (uint64_t)n ? (uint64_t)i : (uint64_t)i % j->bias_n];
            y[i] = v;
        }
        if (j->mean) j->mean[r] = m;
        if (j->inv) j->inv[r] = inv;
    }
}

static kiln_status ln_common(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out, bool rms) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *sc = cpu_in(inputs, n_in, 1), *b = cpu_in(inputs, n_in, 2);
    kiln_status st;
    if ((st = need_float(ctx, x, "X")) != KILN_OK || (st = need_float(ctx, sc, "Scale")) != KILN_OK) return st;
    if (b && (st = need_float(ctx, b, "B")) != KILN_OK) return st;
    int64_t axis = ir_node_attr_int(ctx->node, "axis", -1);
    int32_t r = x->rank;
    if (axis < -r || axis >= r)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d", (long long)axis, r);
    if (axis < 0) axis += r;
    int64_t outer = 1, len = 1;
    for (int32_t i = 0; i < r; i++) *(i < axis ? &outer : &len) *= x->dims[i];
    if (sc->count == 0 || (uint64_t)len % sc->count != 0 || (b && (b->count == 0 || (uint64_t)len % b->count != 0)))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "Scale/B do not broadcast to the normalised shape (%lld elements)",
                               (long long)len);
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, r, x->dims, ctx->err)) != KILN_OK) return st;
    float *stats[2] = {NULL, NULL};
    int64_t sdims[RT_MAX_RANK];
    for (int32_t i = 0; i < r; i++) sdims[i] = i < axis ? x->dims[i] : 1;
    for (int k = 1; k <= 2 && !rms; k++)
        if (n_out > k && ctx->node && ctx->node->n_outputs > k && ctx->node->outputs[k] != IR_NONE) {
            rt_tensor *o = rt_value_as_tensor(&outputs[k]);
            if ((st = rt_tensor_alloc(o, KILN_DTYPE_FLOAT, r, sdims, ctx->err)) != KILN_OK) return st;
            stats[k - 1] = o->data;
        }
    if (y->count == 0) return KILN_OK;
    ln_job j = {x->data, sc->data, b ? b->data : NULL, y->data, stats[0], stats[1], len, sc->count,
                b ? b->count : 0, ir_node_attr_float(ctx->node, "epsilon", 1e-5f), rms, cpu_rows_get()};
    /* rows of >= 4096 elements per task: BERT's 128x768 LayerNorm splits into 2 x 64 rows */
    cpu_parallel_for(ctx->pool, outer, 1 + 4096 / (len + 1), ln_run, &j);
    return KILN_OK;
}

kiln_status cpu_layernorm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out) {
    return ln_common(ctx, inputs, n_in, outputs, n_out, false);
}
kiln_status cpu_rmsnorm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                        int32_t n_out) {
    return ln_common(ctx, inputs, n_in, outputs, n_out, true);
}

/* ---- Instance / Group normalisation -------------------------------------------------- */

/* Normalises `groups` contiguous blocks per image of `block` elements each; the affine
 * parameters are per channel (ch_per_group channels of `size` elements in a block) or,
 * for opset-18 GroupNormalization, per group. */
static void group_norm(const float *x, float *y, int64_t N, int64_t groups, int64_t ch_per_group, int64_t size,
                       const float *scale, const float *bias, bool per_group_affine, float eps) {
    int64_t block = ch_per_group * size;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < groups; gi++) {
            const float *xb = x + (n * groups + gi) * block;
            float *yb = y + (n * groups + gi) * block;
            double s = 0, s2 = 0;
            for (int64_t i = 0; i < block; i++) s += xb[i];
            double mean = block ? s / (double)block : 0;
            for (int64_t i = 0; i < block; i++) s2 += (xb[i] - mean) * (xb[i] - mean);
            float inv = (float)(1.0 / sqrt((block ? s2 / (double)block : 0) + eps));
            for (int64_t c = 0; c < ch_per_group; c++) {
                int64_t ci = per_group_affine ? gi : gi * ch_per_group + c;
                float a = scale[ci] * inv, b = bias[ci] - a * (float)mean;
                for (int64_t i = 0; i < size; i++) yb[c * size + i] = a * xb[c * size + i] + b;
            }
        }
}

kiln_status cpu_instancenorm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *sc = cpu_in(inputs, n_in, 1), *b = cpu_in(inputs, n_in, 2);
    kiln_status st;
    if ((st = need_float(ctx, x, "input")) != KILN_OK || (st = need_float(ctx, sc, "scale")) != KILN_OK ||
        (st = need_float(ctx, b, "B")) != KILN_OK)
        return st;
    if (x->rank < 2 || sc->count != (uint64_t)x->dims[1] || b->count != (uint64_t)x->dims[1])
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "scale and B must have one value per channel");
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err)) != KILN_OK || y->count == 0) return st;
    int64_t size = 1;
    for (int32_t i = 2; i < x->rank; i++) size *= x->dims[i];
    group_norm(x->data, y->data, x->dims[0], x->dims[1], 1, size, sc->data, b->data, false,
               ir_node_attr_float(ctx->node, "epsilon", 1e-5f));
    return KILN_OK;
}

kiln_status cpu_groupnorm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *sc = cpu_in(inputs, n_in, 1), *b = cpu_in(inputs, n_in, 2);
    kiln_status st;
    if ((st = need_float(ctx, x, "X")) != KILN_OK || (st = need_float(ctx, sc, "scale")) != KILN_OK ||
        (st = need_float(ctx, b, "bias")) != KILN_OK)
        return st;
    int64_t G = ir_node_attr_int(ctx->node, "num_groups", 0);
    if (x->rank < 2 || G < 1 || x->dims[1] % G != 0)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "num_groups=%lld must divide the channel count", (long long)G);
    int64_t C = x->dims[1];
    bool per_group = ctx->node && ctx->node->opset > 0 && ctx->node->opset < 21;
    uint64_t want = per_group ? (uint64_t)G : (uint64_t)C;
    if (sc->count != want || b->count != want)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "scale and bias must have %llu elements (%s)",
                               (unsigned long long)want, per_group ? "one per group, opset < 21" : "one per channel");
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err)) != KILN_OK || y->count == 0) return st;
    int64_t size = 1;
    for (int32_t i = 2; i < x->rank; i++) size *= x->dims[i];
    group_norm(x->data, y->data, x->dims[0], G, C / G, size, sc->data, b->data, per_group,
               ir_node_attr_float(ctx->node, "epsilon", 1e-5f));
    return KILN_OK;
}

/* ---- LpNormalization, MeanVarianceNormalization, LRN --------------------------------- */

kiln_status cpu_lpnorm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                       int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    kiln_status st;
    if ((st = need_float(ctx, x, "input")) != KILN_OK) return st;
    int64_t axis = ir_node_attr_int(ctx->node, "axis", -1), p = ir_node_attr_int(ctx->node, "p", 2);
    if (p != 1 && p != 2) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "p must be 1 or 2 (got %lld)", (long long)p);
    if (axis < -x->rank || axis >= x->rank) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "axis out of range");
    if (axis < 0) axis += x->rank;
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err)) != KILN_OK || y->count == 0) return st;
    int64_t outer = 1, len = x->dims[axis], inner = 1;
    for (int32_t i = 0; i < x->rank; i++)
        if (i < axis) outer *= x->dims[i];
        else if (i > axis) inner *= x->dims[i];
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double s = 0;
            for (int64_t i = 0; i < len; i++) {
                float v = X[(o * len + i) * inner + in];
                s += p == 1 ? fabs(v) : (double)v * v;
            }
            double nrm = p == 1 ? s : sqrt(s);
            for (int64_t i = 0; i < len; i++) {
                int64_t k = (o * len + i) * inner + in;
                Y[k] = nrm == 0 ? 0.f : (float)(X[k] / nrm);
            }
        }
    return KILN_OK;
}

kiln_status cpu_mvn(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                    int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    kiln_status st;
    if ((st = need_float(ctx, x, "X")) != KILN_OK) return st;
    bool red[RT_MAX_RANK] = {0};
    const ir_attr *a = ir_node_attr(ctx->node, "axes");
    if (a && a->type == IR_ATTR_INTS) {
        for (int32_t i = 0; i < a->n; i++) {
            int64_t ax = a->ints[i];
            if (ax < -x->rank || ax >= x->rank) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "axis out of range");
            red[ax < 0 ? ax + x->rank : ax] = true;
        }
    } else {
        int64_t dflt[3] = {0, 2, 3};
        for (int i = 0; i < 3; i++)
            if (dflt[i] < x->rank) red[dflt[i]] = true;
    }
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err)) != KILN_OK || y->count == 0) return st;
    /* Map each element to its kept-axes index; accumulate sums per kept index. */
    uint64_t kept = 1;
    for (int32_t i = 0; i < x->rank; i++)
        if (!red[i]) kept *= (uint64_t)x->dims[i];
    double *acc = calloc(2 * kept, sizeof(double));
    if (!acc) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    const float *X = x->data;
    float *Y = y->data;
    uint64_t per = x->count / (kept ? kept : 1);
    for (int pass = 0; pass < 2; pass++) {
        int64_t idx[RT_MAX_RANK] = {0};
        for (uint64_t e = 0; e < x->count; e++) {
            uint64_t k = 0;
            for (int32_t i = 0; i < x->rank; i++)
                if (!red[i]) k = k * (uint64_t)x->dims[i] + (uint64_t)idx[i];
            if (pass == 0) {
                acc[2 * k] += X[e];
                acc[2 * k + 1] += (double)X[e] * X[e];
            } else {
                double mean = acc[2 * k] / (double)per;
                double var = acc[2 * k + 1] / (double)per - mean * mean;
                Y[e] = (float)((X[e] - mean) / (sqrt(var < 0 ? 0 : var) + 1e-9));
            }
            for (int32_t i = x->rank - 1; i >= 0; i--) {
                if (++idx[i] < x->dims[i]) break;
                idx[i] = 0;
            }
        }
    }
    free(acc);
    return KILN_OK;
}

kiln_status cpu_lrn(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                    int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    kiln_status st;
    if ((st = need_float(ctx, x, "X")) != KILN_OK) return st;
    if (x->rank < 3) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must have rank >= 3");
    int64_t size = ir_node_attr_int(ctx->node, "size", 0);
    if (size < 1) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute size must be >= 1");
    float alpha = ir_node_attr_float(ctx->node, "alpha", 1e-4f), beta = ir_node_attr_float(ctx->node, "beta", 0.75f),
          bias = ir_node_attr_float(ctx->node, "bias", 1.f);
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    if ((st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, x->dims, ctx->err)) != KILN_OK || y->count == 0) return st;
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int32_t i = 2; i < x->rank; i++) S *= x->dims[i];
    int64_t lo_off = (size - 1) / 2, hi_off = (size - 1) - lo_off; /* floor / ceil of (size-1)/2 */
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                double sq = 0;
                int64_t lo = c - lo_off < 0 ? 0 : c - lo_off, hi = c + hi_off >= C ? C - 1 : c + hi_off;
                for (int64_t k = lo; k <= hi; k++) {
                    float v = X[(n * C + k) * S + s];
                    sq += (double)v * v;
                }
                int64_t i = (n * C + c) * S + s;
                Y[i] = (float)(X[i] / pow(bias + alpha / (double)size * sq, beta));
            }
    return KILN_OK;
}
