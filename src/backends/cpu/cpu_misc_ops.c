/* cpu_misc_ops.c - tensor generators, padding and small ops: Pad, ConstantOfShape, Range,
 * EyeLike, Hann/Hamming/BlackmanWindow, BitCast, Dropout (inference).
 *
 * Pad maps every output coordinate back to an input coordinate per axis (constant:
 * outside -> the pad value; edge: clamp; reflect: mirror without repeating the edge;
 * wrap: modulo), one output row at a time; negative pads crop through the same mapping.
 * Generators check sizes before allocating so a hostile shape or range cannot request
 * absurd memory.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

#define KERNEL(Op)                                                                                              \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out)

/* Generated tensors larger than this many elements are refused. */
#define GEN_MAX_ELEMS ((uint64_t)1 << 32)

/* ---- Pad ---------------------------------------------------------------------------- */

typedef enum pad_mode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP } pad_mode;

/* Input coordinate for output coordinate o, or -1 for "outside" (constant mode). */
static int64_t pad_map(pad_mode m, int64_t o, int64_t before, int64_t n) {
    int64_t i = o - before;
    if (i >= 0 && i < n) return i;
    switch (m) {
    case PAD_EDGE: return i < 0 ? 0 : n - 1;
    case PAD_WRAP: return ((i % n) + n) % n;
    case PAD_REFLECT: {
        if (n == 1) return 0;
        int64_t period = 2 * (n - 1);
        int64_t k = ((i % period) + period) % period;
        return k < n ? k : period - k;
    }
    default: return -1;
    }
}

KERNEL(Pad) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    size_t es = cpu_elem_size(x->dtype);
    if (!es) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    int32_t r = x->rank;
    int64_t pads_in[2 * RT_MAX_RANK], axes[RT_MAX_RANK];
    int32_t np, na;
    bool present, has_axes;
    const char *pad_attr = cpu_in(inputs, n_in, 1) ? NULL : ir_node_attr(ctx->node, "pads") ? "pads" : "paddings";
    st = cpu_ints_input_or_attr(ctx, inputs, n_in, 1, pad_attr, pads_in, 2 * RT_MAX_RANK, &np, &present);
    if (st == KILN_OK) st = cpu_ints_input_or_attr(ctx, inputs, n_in, 3, NULL, axes, RT_MAX_RANK, &na, &has_axes);
    if (st != KILN_OK) return st;
    if (!has_axes) {
        na = r;
        for (int32_t i = 0; i < r; i++) axes[i] = i;
    }
    if (np != 2 * na)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "pads has %d entries; expected %d (2 per padded axis)", (int)np,
                               (int)(2 * na));
    int64_t before[RT_MAX_RANK] = {0}, after[RT_MAX_RANK] = {0};
    for (int32_t k = 0; k < na; k++) {
        int32_t a;
        st = cpu_check_axis(ctx, axes[k], r, "axis", &a);
        if (st != KILN_OK) return st;
        before[a] = pads_in[k];
        after[a] = pads_in[k + na];
    }
    const ir_attr *ma = ir_node_attr(ctx->node, "mode");
    pad_mode mode = PAD_CONSTANT;
    if (ma && ma->type == IR_ATTR_STRING) {
        if (ma->s.len == 7 && !memcmp(ma->s.data, "reflect", 7)) mode = PAD_REFLECT;
        else if (ma->s.len == 4 && !memcmp(ma->s.data, "edge", 4)) mode = PAD_EDGE;
        else if (ma->s.len == 4 && !memcmp(ma->s.data, "wrap", 4)) mode = PAD_WRAP;
        else if (!(ma->s.len == 8 && !memcmp(ma->s.data, "constant", 8)))
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "mode must be constant, reflect, edge or wrap");
    }
    int64_t d[RT_MAX_RANK];
    for (int32_t i = 0; i < r; i++) {
        d[i] = x->dims[i] + before[i] + after[i];
        if (d[i] < 0 || before[i] > (int64_t)1 << 40 || after[i] > (int64_t)1 << 40)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "pads for axis %d give a bad size %" PRId64, (int)i, d[i]);
        if (mode != PAD_CONSTANT && x->dims[i] == 0 && d[i] > 0)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "cannot %s-pad an empty axis %d",
                                   mode == PAD_EDGE ? "edge" : mode == PAD_WRAP ? "wrap" : "reflect", (int)i);
    }
    /* pad value: input 2 (opset 11+) or attribute "value" */
    uint8_t value[16] = {0};
    const rt_tensor *cv = cpu_in(inputs, n_in, 2);
    if (cv && cv->count) {
        if (cv->dtype != x->dtype)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "constant_value dtype %s differs from the input's %s",
                                   kiln_dtype_name(cv->dtype), kiln_dtype_name(x->dtype));
        memcpy(value, cv->data, es);
    } else if (x->dtype != KILN_DTYPE_STRING) {
        cpu_store_f64(value, x->dtype, 0, ir_node_attr_float(ctx->node, "value", 0.0f));
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st != KILN_OK || !y->count) return st;
    if (r == 0) {
        memcpy(y->data, x->data, es);
        return cpu_strings_own(ctx, y);
    }
    int64_t xs[RT_MAX_RANK], idx[RT_MAX_RANK] = {0};
    cpu_contiguous_strides(r, x->dims, xs);
    int64_t W = d[r - 1], rows = (int64_t)(y->count / (uint64_t)W);
    char *o = y->data;
    for (int64_t row = 0; row < rows; row++) {
        int64_t base = 0;
        bool outside = false;
        for (int32_t k = 0; k < r - 1 && !outside; k++) {
            int64_t i = pad_map(mode, idx[k], before[k], x->dims[k]);
            if (i < 0) outside = true;
            else base += i * xs[k];
        }
        for (int64_t c = 0; c < W; c++) {
            int64_t i = outside ? -1 : pad_map(mode, c, before[r - 1], x->dims[r - 1]);
            memcpy(o, i < 0 ? (const char *)value : (const char *)x->data + (base + i) * (int64_t)es, es);
            o += es;
        }
        for (int32_t k = r - 2; k >= 0; k--) {
            if (++idx[k] < d[k]) break;
            idx[k] = 0;
        }
    }
    return cpu_strings_own(ctx, y);
}

/* ---- ConstantOfShape ---------------------------------------------------------------- */

KERNEL(ConstantOfShape) {
    const rt_tensor *s;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &s);
    if (st != KILN_OK) return st;
    int64_t d[RT_MAX_RANK];
    int32_t r;
    st = cpu_read_ints(ctx, s, "input", d, RT_MAX_RANK, &r);
    if (st != KILN_OK) return st;
    uint64_t total = 1;
    for (int32_t i = 0; i < r; i++) {
        if (d[i] < 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "shape[%d] is negative", (int)i);
        if (__builtin_mul_overflow(total, (uint64_t)d[i], &total) || total > GEN_MAX_ELEMS)
            return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "the requested shape is too large");
    }
    const ir_attr *va = ir_node_attr(ctx->node, "value");
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    uint8_t value[16] = {0};
    if (va && va->type == IR_ATTR_TENSOR && va->t) {
        dt = va->t->dtype;
        size_t es = cpu_elem_size(dt);
        if (!es || dt == KILN_DTYPE_STRING || va->t->count != 1 || !va->t->data || va->t->nbytes < es)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'value' must be a one-element numeric tensor");
        memcpy(value, va->t->data, es);
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, dt, r, d, &y);
    if (st != KILN_OK) return st;
    size_t es = cpu_elem_size(dt);
    for (uint64_t i = 0; i < y->count; i++) memcpy((char *)y->data + i * es, value, es);
    return KILN_OK;
}

/* ---- Range -------------------------------------------------------------------------- */

KERNEL(Range) {
    const rt_tensor *s, *l, *dl;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &s);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &l);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 2, &dl);
    if (st != KILN_OK) return st;
    kiln_dtype dt = s->dtype;
    bool ok = dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_DOUBLE || cpu_dtype_is_half(dt) || dt == KILN_DTYPE_INT16 || dt == KILN_DTYPE_INT32 ||
              dt == KILN_DTYPE_INT64;
    if (!ok || l->dtype != dt || dl->dtype != dt)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "start, limit and delta must share a supported dtype");
    double start, limit, delta;
    st = cpu_read_scalar_f64(ctx, s, "start", &start);
    if (st == KILN_OK) st = cpu_read_scalar_f64(ctx, l, "limit", &limit);
    if (st == KILN_OK) st = cpu_read_scalar_f64(ctx, dl, "delta", &delta);
    if (st != KILN_OK) return st;
    if (delta == 0) return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "delta is 0");
    double nf = ceil((limit - start) / delta);
    if (nf != nf) return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "range size is not a number");
    if (nf < 0) nf = 0;
    if (nf > (double)GEN_MAX_ELEMS) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "range of %.0f elements is too large", nf);
    int64_t n = (int64_t)nf;
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, dt, 1, &n, &y);
    if (st != KILN_OK) return st;
    if (kiln_dtype_is_integer(dt)) {
        int64_t a = cpu_load_i64(s->data, dt, 0), b = cpu_load_i64(dl->data, dt, 0);
        for (int64_t i = 0; i < n; i++) cpu_store_f64(y->data, dt, (uint64_t)i, (double)(a + i * b));
        if (dt == KILN_DTYPE_INT64)
            for (int64_t i = 0; i < n; i++) ((int64_t *)y->data)[i] = (int64_t)((uint64_t)a + (uint64_t)i * (uint64_t)b);
    } else if (dt == KILN_DTYPE_FLOAT) {
        /* accumulate like the reference (start + i*delta in float) */
        float a = (float)start, b = (float)delta;
        for (int64_t i = 0; i < n; i++) ((float *)y->data)[i] = a + (float)i * b;
    } else {
        for (int64_t i = 0; i < n; i++) cpu_store_f64(y->data, dt, (uint64_t)i, start + (double)i * delta);
    }
    return KILN_OK;
}

/* ---- EyeLike ------------------------------------------------------------------------ */

KERNEL(EyeLike) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (x->rank != 2) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must be 2-D, got rank %d", (int)x->rank);
    const ir_attr *da = ir_node_attr(ctx->node, "dtype");
    kiln_dtype dt = x->dtype;
    if (da && da->type == IR_ATTR_INT) {
        if (da->i <= 0 || da->i >= KILN_DTYPE_COUNT)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "dtype %" PRId64 " is not valid", da->i);
        dt = (kiln_dtype)da->i;
    }
    if (!cpu_elem_size(dt) || dt == KILN_DTYPE_STRING)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(dt));
    int64_t k = ir_node_attr_int(ctx->node, "k", 0);
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, dt, 2, x->dims, &y);
    if (st != KILN_OK) return st;
    if (y->nbytes) memset(y->data, 0, (size_t)y->nbytes);
    for (int64_t i = 0; i < x->dims[0]; i++) {
        int64_t j = i + k;
        if (j >= 0 && j < x->dims[1]) cpu_store_f64(y->data, dt, (uint64_t)(i * x->dims[1] + j), 1.0);
    }
    return KILN_OK;
}

/* ---- Hann / Hamming / Blackman windows ---------------------------------------------- */

static kiln_status window(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out, double a0, double a1, double a2) {
    const rt_tensor *st_in;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &st_in);
    int64_t n = 0;
    if (st == KILN_OK) st = cpu_read_scalar_i64(ctx, st_in, "size", &n);
    if (st != KILN_OK) return st;
    if (n < 0 || (uint64_t)n > GEN_MAX_ELEMS) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "size %" PRId64 " is invalid", n);
    int64_t odt = ir_node_attr_int(ctx->node, "output_datatype", KILN_DTYPE_FLOAT);
    if (odt <= 0 || odt >= KILN_DTYPE_COUNT || !cpu_elem_size((kiln_dtype)odt) || odt == KILN_DTYPE_STRING ||
        odt == KILN_DTYPE_BOOL)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "output_datatype %" PRId64 " is not supported", odt);
    bool periodic = ir_node_attr_int(ctx->node, "periodic", 1) != 0;
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, (kiln_dtype)odt, 1, &n, &y);
    if (st != KILN_OK) return st;
    double den = periodic ? (double)n : (double)(n - 1);
    const double pi = 3.14159265358979323846;
    for (int64_t i = 0; i < n; i++) {
        double t = den > 0 ? 2 * pi * (double)i / den : 0;
        cpu_store_f64(y->data, y->dtype, (uint64_t)i, a0 - a1 * cos(t) + a2 * cos(2 * t));
    }
    return KILN_OK;
}

KERNEL(HannWindow) { return window(ctx, inputs, n_in, outputs, n_out, 0.5, 0.5, 0.0); }
KERNEL(HammingWindow) { return window(ctx, inputs, n_in, outputs, n_out, 25.0 / 46.0, 21.0 / 46.0, 0.0); }
KERNEL(BlackmanWindow) { return window(ctx, inputs, n_in, outputs, n_out, 0.42, 0.5, 0.08); }

/* ---- BitCast: same bytes, another dtype of the same width --------------------------- */

KERNEL(BitCast) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    int64_t to = ir_node_attr_int(ctx->node, "to", 0);
    if (to <= 0 || to >= KILN_DTYPE_COUNT)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'to' = %" PRId64 " is not a dtype", to);
    size_t a = cpu_elem_size(x->dtype), b = cpu_elem_size((kiln_dtype)to);
    if (!a || a != b || x->dtype == KILN_DTYPE_STRING || to == KILN_DTYPE_STRING)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "bit-casting %s to %s (different widths) is not supported",
                               kiln_dtype_name(x->dtype), kiln_dtype_name((kiln_dtype)to));
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, (kiln_dtype)to, x->rank, x->dims, &y);
    if (st == KILN_OK && x->nbytes) memcpy(y->data, x->data, (size_t)x->nbytes);
    if (st == KILN_OK && to == KILN_DTYPE_BOOL)
        for (uint64_t i = 0; i < y->count; i++) ((uint8_t *)y->data)[i] = ((uint8_t *)y->data)[i] != 0;
    return st;
}

/* ---- Dropout: identity at inference ------------------------------------------------- */

KERNEL(Dropout) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    double ratio = ir_node_attr_float(ctx->node, "ratio", 0.5f);
    const rt_tensor *rt = cpu_in(inputs, n_in, 1), *tm = cpu_in(inputs, n_in, 2);
    if (rt && rt->count) st = cpu_read_scalar_f64(ctx, rt, "ratio", &ratio);
    int64_t training = 0;
    if (st == KILN_OK && tm && tm->count) st = cpu_read_scalar_i64(ctx, tm, "training_mode", &training);
    if (st != KILN_OK) return st;
    if (training && ratio != 0)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED,
                               "random output can't match the reference (training-mode Dropout with ratio > 0)");
    st = cpu_copy_reshaped(ctx, x, outputs, n_out, x->rank, x->dims);
    if (st == KILN_OK && n_out > 1) {
        rt_tensor *m = NULL;
        st = cpu_alloc_out(ctx, outputs, n_out, 1, KILN_DTYPE_BOOL, x->rank, x->dims, &m);
        if (st == KILN_OK && m->nbytes) memset(m->data, 1, (size_t)m->nbytes);
    }
    return st;
}
