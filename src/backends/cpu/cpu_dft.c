/* cpu_dft.c - DFT (opset 17: axis attribute; opset 20: axis input), STFT (opset 17) and
 * MelWeightMatrix (opset 17).
 *
 * Signals are real ([..., 1]) or complex ([..., 2]) along the last dim. DFT transforms
 * one axis with length dft_length (the input is truncated or zero-padded to it):
 * forward gives the full spectrum or, with onesided, its first n/2+1 bins; inverse is
 * the normalised (1/n) transform, and inverse+onesided is the real inverse of a half
 * spectrum (bins past n/2 are the conjugates of the mirrored ones; output [..., 1]).
 * The transform is a direct O(n^2) sum in double over a twiddle table of n entries
 * (index k*j mod n), exact enough for any length, not just powers of two.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* out[k] = sum_j in[j] * exp(sign * 2 pi i k j / n), k < n_out, j < n_in (<= n). */
static void dft_1d(const double *re, const double *im, int64_t n_in, int64_t n, int64_t n_out, int sign,
                   const double *cs, const double *sn, double *ore, double *oim) {
    for (int64_t k = 0; k < n_out; k++) {
        double ar = 0, ai = 0;
        int64_t idx = 0;
        for (int64_t j = 0; j < n_in; j++) {
            double c = cs[idx], s = sign * sn[idx];
            ar += re[j] * c - im[j] * s;
            ai += re[j] * s + im[j] * c;
            idx += k;
            if (idx >= n) idx %= n;
        }
        ore[k] = ar;
        oim[k] = ai;
    }
}

static kiln_status dft_tables(cpu_kernel_ctx *ctx, int64_t n, double **cs, double **sn) {
    *cs = malloc(sizeof(double) * (size_t)(n + 1));
    *sn = malloc(sizeof(double) * (size_t)(n + 1));
    if (!*cs || !*sn) {
        free(*cs), free(*sn);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for DFT tables");
    }
    for (int64_t i = 0; i < n; i++) {
        double a = 2.0 * M_PI * (double)i / (double)n;
        (*cs)[i] = cos(a);
        (*sn)[i] = sin(a);
    }
    return KILN_OK;
}

kiln_status cpu_dft(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *tlen = cpu_in(inputs, n_in, 1), *tax = cpu_in(inputs, n_in, 2);
    if (!x) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing input");
    if (!kiln_dtype_is_float(x->dtype) || cpu_elem_size(x->dtype) == 0)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "input must be float (got %s)", kiln_dtype_name(x->dtype));
    if (x->rank < 2 || (x->dims[x->rank - 1] != 1 && x->dims[x->rank - 1] != 2))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must end in a dim of 1 (real) or 2 (complex)");
    bool v20 = ctx->node && ctx->node->opset >= 20;
    int64_t axis = v20 ? -2 : 1;
    kiln_status st;
    if (!v20) axis = ir_node_attr_int(ctx->node, "axis", 1);
    else if (tax && tax->count && (st = cpu_read_scalar_i64(ctx, tax, "axis", &axis)) != KILN_OK) return st;
    int32_t r = x->rank;
    /* the signal axis never is the last (complex) dim */
    if (axis < -r || axis >= r - 1 || (axis < 0 && axis + r == r - 1))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "axis %lld is out of range", (long long)axis);
    if (axis < 0) axis += r;
    bool inverse = ir_node_attr_int(ctx->node, "inverse", 0) != 0;
    bool onesided = ir_node_attr_int(ctx->node, "onesided", 0) != 0;
    int64_t m = x->dims[axis], n;
    if (tlen && tlen->count) {
        if ((st = cpu_read_scalar_i64(ctx, tlen, "dft_length", &n)) != KILN_OK) return st;
    } else {
        n = inverse && onesided ? 2 * (m - 1) : m;
    }
    if (n <= 0 || n > ((int64_t)1 << 24)) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad dft_length %lld", (long long)n);
    bool cplx = x->dims[r - 1] == 2;
    int64_t n_bins = inverse ? n : (onesided ? n / 2 + 1 : n);
    int64_t od[RT_MAX_RANK];
    memcpy(od, x->dims, sizeof(int64_t) * (size_t)r);
    od[axis] = n_bins;
    od[r - 1] = inverse && onesided ? 1 : 2;
    rt_tensor *y;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, od, &y)) != KILN_OK || y->count == 0) return st;
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= x->dims[i];
    for (int32_t i = axis + 1; i < r - 1; i++) inner *= x->dims[i];
    double *cs, *sn;
    if ((st = dft_tables(ctx, n, &cs, &sn)) != KILN_OK) return st;
    double *buf = malloc(sizeof(double) * (size_t)(4 * n + 4));
    if (!buf) {
        free(cs), free(sn);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    double *re = buf, *im = buf + n, *ore = buf + 2 * n, *oim = buf + 3 * n;
    int64_t xc = x->dims[r - 1], yc = od[r - 1];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            int64_t take = m < n ? m : n;
            for (int64_t j = 0; j < n; j++) re[j] = im[j] = 0;
            for (int64_t j = 0; j < take; j++) {
                uint64_t xi = (uint64_t)(((o * m + j) * inner + in) * xc);
                re[j] = cpu_load_f64(x->data, x->dtype, xi);
                im[j] = cplx ? cpu_load_f64(x->data, x->dtype, xi + 1) : 0;
            }
            int64_t n_src = take;
            if (inverse && onesided) { /* rebuild the Hermitian spectrum from bins 0..n/2 */
                int64_t half = n / 2 + 1;
                for (int64_t j = take; j < half && j < n; j++) re[j] = im[j] = 0;
                for (int64_t j = half; j < n; j++) {
                    re[j] = re[n - j];
                    im[j] = -im[n - j];
                }
                im[0] = 0;
                if (n % 2 == 0) im[n / 2] = 0;
                n_src = n;
            }
            dft_1d(re, im, n_src, n, n_bins, inverse ? 1 : -1, cs, sn, ore, oim);
            for (int64_t k = 0; k < n_bins; k++) {
                uint64_t yi = (uint64_t)(((o * n_bins + k) * inner + in) * yc);
                double s = inverse ? 1.0 / (double)n : 1.0;
                cpu_store_f64(y->data, y->dtype, yi, ore[k] * s);
                if (yc == 2) cpu_store_f64(y->data, y->dtype, yi + 1, oim[k] * s);
            }
        }
    free(buf), free(cs), free(sn);
    return KILN_OK;
}

kiln_status cpu_stft(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *tstep = cpu_in(inputs, n_in, 1);
    const rt_tensor *win = cpu_in(inputs, n_in, 2), *tflen = cpu_in(inputs, n_in, 3);
    if (!x || !tstep) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "signal and frame_step are required");
    if (!kiln_dtype_is_float(x->dtype) || cpu_elem_size(x->dtype) == 0)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "signal must be float");
    if (x->rank != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "signal must be [batch, length, 1 or 2]");
    int64_t step, flen = -1;
    kiln_status st = cpu_read_scalar_i64(ctx, tstep, "frame_step", &step);
    if (st != KILN_OK) return st;
    if (tflen && tflen->count && (st = cpu_read_scalar_i64(ctx, tflen, "frame_length", &flen)) != KILN_OK) return st;
    if (win && win->count) {
        if (win->rank != 1) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "window must be 1-D");
        if (flen >= 0 && flen != win->dims[0])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "frame_length differs from the window's length");
        flen = win->dims[0];
    }
    int64_t B = x->dims[0], L = x->dims[1];
    if (flen <= 0 || step <= 0 || flen > L || flen > ((int64_t)1 << 20))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "frame_length (%lld) and frame_step (%lld) must be positive and fit the signal (%lld)",
                               (long long)flen, (long long)step, (long long)L);
    bool onesided = ir_node_attr_int(ctx->node, "onesided", 1) != 0;
    bool cplx = x->dims[2] == 2;
    int64_t frames = (L - flen) / step + 1, bins = onesided ? flen / 2 + 1 : flen;
    int64_t od[4] = {B, frames, bins, 2};
    rt_tensor *y;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, 4, od, &y)) != KILN_OK || y->count == 0) return st;
    double *cs, *sn;
    if ((st = dft_tables(ctx, flen, &cs, &sn)) != KILN_OK) return st;
    double *buf = malloc(sizeof(double) * (size_t)(2 * flen + 2 * bins + 4));
    if (!buf) {
        free(cs), free(sn);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    double *re = buf, *im = buf + flen, *ore = buf + 2 * flen, *oim = ore + bins;
    for (int64_t b = 0; b < B; b++)
        for (int64_t f = 0; f < frames; f++) {
            for (int64_t j = 0; j < flen; j++) {
                uint64_t xi = (uint64_t)((b * L + f * step + j) * x->dims[2]);
                double w = win && win->count ? cpu_load_f64(win->data, win->dtype, (uint64_t)j) : 1.0;
                re[j] = w * cpu_load_f64(x->data, x->dtype, xi);
                im[j] = cplx ? w * cpu_load_f64(x->data, x->dtype, xi + 1) : 0;
            }
            dft_1d(re, im, flen, flen, bins, -1, cs, sn, ore, oim);
            for (int64_t k = 0; k < bins; k++) {
                uint64_t yi = (uint64_t)(((b * frames + f) * bins + k) * 2);
                cpu_store_f64(y->data, y->dtype, yi, ore[k]);
                cpu_store_f64(y->data, y->dtype, yi + 1, oim[k]);
            }
        }
    free(buf), free(cs), free(sn);
    return KILN_OK;
}

kiln_status cpu_mel_weight_matrix(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out) {
    int64_t bins, dftlen, rate;
    double lo, hi;
    kiln_status st;
    for (int i = 0; i < 5; i++)
        if (!cpu_in(inputs, n_in, i)) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "all five inputs are required");
    if ((st = cpu_read_scalar_i64(ctx, cpu_in(inputs, n_in, 0), "num_mel_bins", &bins)) != KILN_OK ||
        (st = cpu_read_scalar_i64(ctx, cpu_in(inputs, n_in, 1), "dft_length", &dftlen)) != KILN_OK ||
        (st = cpu_read_scalar_i64(ctx, cpu_in(inputs, n_in, 2), "sample_rate", &rate)) != KILN_OK ||
        (st = cpu_read_scalar_f64(ctx, cpu_in(inputs, n_in, 3), "lower_edge_hertz", &lo)) != KILN_OK ||
        (st = cpu_read_scalar_f64(ctx, cpu_in(inputs, n_in, 4), "upper_edge_hertz", &hi)) != KILN_OK)
        return st;
    if (bins <= 0 || dftlen <= 0 || rate <= 0 || bins > 65536 || dftlen > ((int64_t)1 << 24) || !(lo >= 0) || !(hi >= lo))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "MelWeightMatrix inputs out of range");
    kiln_dtype dt = (kiln_dtype)ir_node_attr_int(ctx->node, "output_datatype", KILN_DTYPE_FLOAT);
    if (!kiln_dtype_valid(dt) || cpu_elem_size(dt) == 0 || dt == KILN_DTYPE_STRING)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "unsupported output_datatype");
    int64_t spec = dftlen / 2 + 1;
    int64_t od[2] = {spec, bins};
    rt_tensor *y;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, dt, 2, od, &y)) != KILN_OK) return st;
    double *w = calloc((size_t)(spec * bins) + 1, sizeof(double));
    int64_t *fb = malloc(sizeof(int64_t) * (size_t)(bins + 2));
    if (!w || !fb) {
        free(w), free(fb);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    double lmel = 2595 * log1p(lo / 700) / log(10), hmel = 2595 * log1p(hi / 700) / log(10);
    double step = (hmel - lmel) / (double)(bins + 2);
    for (int64_t i = 0; i < bins + 2; i++) {
        double hz = 700 * expm1(((double)i * step + lmel) / 2595 * log(10));
        fb[i] = (int64_t)floor((double)(dftlen + 1) * hz / (double)rate);
    }
    bool bad = false;
    for (int64_t i = 0; i < bins; i++) {
        int64_t l = fb[i], c = fb[i + 1], h = fb[i + 2];
        if (l < 0 || h >= spec || c < l || h < c) {
            bad = true;
            break;
        }
        if (c == l) w[c * bins + i] = 1;
        else
            for (int64_t j = l; j <= c; j++) w[j * bins + i] = (double)(j - l) / (double)(c - l);
        if (h > c)
            for (int64_t j = c; j < h; j++) w[j * bins + i] = (double)(h - j) / (double)(h - c);
    }
    if (!bad)
        for (int64_t i = 0; i < spec * bins; i++) cpu_store_f64(y->data, dt, (uint64_t)i, w[i]);
    free(w), free(fb);
    if (bad) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "mel bins fall outside the spectrum (check the edges and sample_rate)");
    return KILN_OK;
}
