/* cpu_gather_scatter.c - Gather, GatherElements, GatherND, Scatter, ScatterElements,
 * ScatterND.
 *
 * Index tensors come from the model's data, so every index is checked (negative ones
 * count from the end) before anything is read or written: an out-of-range index fails
 * with the node name, the index position and the valid range. Elements are moved as
 * bytes (any dtype, strings too); the scatter reductions (add/mul/max/min) compute
 * through double, or int64 for integer types so large int64 values stay exact.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

#define KERNEL(Op)                                                                                              \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out)

static kiln_status index_tensor(cpu_kernel_ctx *ctx, const rt_tensor *t) {
    if (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices must be int32 or int64, got %s", kiln_dtype_name(t->dtype));
    return KILN_OK;
}

static inline int64_t idx_at(const rt_tensor *t, uint64_t i) {
    return t->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Normalised index i of `t` against a dim of size n, or a failure naming it. */
static kiln_status checked_index(cpu_kernel_ctx *ctx, const rt_tensor *t, uint64_t i, int64_t n, int64_t *out) {
    int64_t v = idx_at(t, i);
    int64_t w = v < 0 ? v + n : v;
    if (w < 0 || w >= n)
        return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME,
                               "index %" PRId64 " (at position %" PRIu64 " of the indices) is out of range for a "
                               "dimension of size %" PRId64 " (valid: %" PRId64 "..%" PRId64 ")",
                               v, i, n, -n, n - 1);
    *out = w;
    return KILN_OK;
}

/* The data (input 0) and indices (input 1) every gather/scatter op starts from: both
 * present, data of a dtype kiln can move, indices int32/int64. */
static kiln_status data_and_indices(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                    const rt_tensor **x, const rt_tensor **ind) {
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, ind);
    if (st == KILN_OK && !cpu_elem_size((*x)->dtype))
        st = cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name((*x)->dtype));
    if (st == KILN_OK) st = index_tensor(ctx, *ind);
    return st;
}

/* ---- Gather ------------------------------------------------------------------------- */

KERNEL(Gather) {
    const rt_tensor *x, *ind;
    kiln_status st = data_and_indices(ctx, inputs, n_in, &x, &ind);
    if (st != KILN_OK) return st;
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", 0), x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    int32_t r = x->rank - 1 + ind->rank;
    if (r > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "output rank %d is too large", (int)r);
    int64_t d[RT_MAX_RANK];
    int32_t k = 0;
    for (int32_t i = 0; i < axis; i++) d[k++] = x->dims[i];
    for (int32_t i = 0; i < ind->rank; i++) d[k++] = ind->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++) d[k++] = x->dims[i];
    int64_t n = x->dims[axis], outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= x->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
    int64_t tmp;
    for (uint64_t i = 0; i < ind->count; i++) {
        st = checked_index(ctx, ind, i, n, &tmp);
        if (st != KILN_OK) return st;
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st != KILN_OK || !y->count) return st;
    size_t es = cpu_elem_size(x->dtype);
    size_t blk = (size_t)inner * es;
    char *o = y->data;
    const char *src = x->data;
    int64_t m = (int64_t)ind->count;
    for (int64_t a = 0; a < outer; a++) {
        for (int64_t j = 0; j < m; j++) {
            int64_t v = idx_at(ind, (uint64_t)j);
            if (v < 0) v += n;
            memcpy(o, src + (a * n + v) * (int64_t)blk, blk);
            o += blk;
        }
    }
    return cpu_strings_own(ctx, y);
}

/* ---- GatherElements ----------------------------------------------------------------- */

KERNEL(GatherElements) {
    const rt_tensor *x, *ind;
    kiln_status st = data_and_indices(ctx, inputs, n_in, &x, &ind);
    if (st != KILN_OK) return st;
    if (ind->rank != x->rank)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices rank %d differs from data rank %d", (int)ind->rank,
                               (int)x->rank);
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", 0), x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    for (int32_t i = 0; i < x->rank; i++)
        if (i != axis && ind->dims[i] > x->dims[i])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices dimension %d (%" PRId64 ") exceeds data's (%" PRId64 ")",
                                   (int)i, ind->dims[i], x->dims[i]);
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, ind->rank, ind->dims, &y);
    if (st != KILN_OK || !y->count) return st;
    size_t es = cpu_elem_size(x->dtype);
    int64_t xs[RT_MAX_RANK], idx[RT_MAX_RANK] = {0};
    cpu_contiguous_strides(x->rank, x->dims, xs);
    for (uint64_t i = 0; i < ind->count; i++) {
        int64_t v = 0;
        st = checked_index(ctx, ind, i, x->dims[axis], &v);
        if (st != KILN_OK) return st;
        int64_t off = 0;
        for (int32_t k = 0; k < x->rank; k++) off += (k == axis ? v : idx[k]) * xs[k];
        memcpy((char *)y->data + i * es, (const char *)x->data + (uint64_t)off * es, es);
        for (int32_t k = x->rank - 1; k >= 0; k--) {
            if (++idx[k] < ind->dims[k]) break;
            idx[k] = 0;
        }
    }
    return cpu_strings_own(ctx, y);
}

/* ---- GatherND ----------------------------------------------------------------------- */

/* Offsets (in elements of data) of every index tuple, checked; shared with ScatterND.
 * Returns slab = elements per gathered slice. */
static kiln_status nd_offsets(cpu_kernel_ctx *ctx, const rt_tensor *x, const rt_tensor *ind, int64_t b,
                              int64_t **offs_out, int64_t *n_tuples, int64_t *slab) {
    if (ind->rank < 1) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices must have rank >= 1");
    int64_t m = ind->dims[ind->rank - 1];
    if (b < 0 || b >= ind->rank || b > x->rank || m > x->rank - b || m < 0)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices last dimension %" PRId64 " (batch_dims %" PRId64
                               ") does not fit data rank %d", m, b, (int)x->rank);
    for (int64_t i = 0; i < b; i++)
        if (ind->dims[i] != x->dims[i])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "batch dimension %d differs between data and indices", (int)i);
    int64_t xs[RT_MAX_RANK];
    cpu_contiguous_strides(x->rank, x->dims, xs);
    int64_t nt = m ? (int64_t)(ind->count / (uint64_t)m) : 1;
    if (m == 0) {
        nt = 1;
        for (int32_t i = 0; i < ind->rank - 1; i++) nt *= ind->dims[i];
    }
    int64_t per_batch = 1;
    for (int32_t i = (int32_t)b; i < ind->rank - 1; i++) per_batch *= ind->dims[i];
    *slab = 1;
    for (int32_t i = (int32_t)(b + m); i < x->rank; i++) *slab *= x->dims[i];
    int64_t *offs = malloc(sizeof(int64_t) * (size_t)(nt ? nt : 1));
    if (!offs) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int64_t t = 0; t < nt; t++) {
        int64_t batch = per_batch ? t / per_batch : 0;
        int64_t off = b > 0 ? batch * xs[b - 1] : 0;
        for (int64_t k = 0; k < m; k++) {
            int64_t v = 0;
            kiln_status st = checked_index(ctx, ind, (uint64_t)(t * m + k), x->dims[b + k], &v);
            if (st != KILN_OK) {
                free(offs);
                return st;
            }
            off += v * xs[b + k];
        }
        offs[t] = off;
    }
    *offs_out = offs;
    *n_tuples = nt;
    return KILN_OK;
}

KERNEL(GatherND) {
    const rt_tensor *x, *ind;
    kiln_status st = data_and_indices(ctx, inputs, n_in, &x, &ind);
    if (st != KILN_OK) return st;
    int64_t b = ir_node_attr_int(ctx->node, "batch_dims", 0);
    int64_t *offs = NULL, nt = 0, slab = 0;
    st = nd_offsets(ctx, x, ind, b, &offs, &nt, &slab);
    if (st != KILN_OK) return st;
    int64_t m = ind->dims[ind->rank - 1];
    int64_t d[RT_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < ind->rank - 1; i++) d[r++] = ind->dims[i];
    for (int32_t i = (int32_t)(b + m); i < x->rank && r < RT_MAX_RANK; i++) d[r++] = x->dims[i];
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st == KILN_OK && y->count) {
        size_t es = cpu_elem_size(x->dtype);
        for (int64_t t = 0; t < nt; t++)
            memcpy((char *)y->data + t * slab * (int64_t)es, (const char *)x->data + offs[t] * (int64_t)es,
                   (size_t)slab * es);
        st = cpu_strings_own(ctx, y);
    }
    free(offs);
    return st;
}

/* ---- scatter ------------------------------------------------------------------------ */

typedef enum red_kind { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } red_kind;

static kiln_status reduction_attr(cpu_kernel_ctx *ctx, red_kind *out) {
    const ir_attr *a = ir_node_attr(ctx->node, "reduction");
    *out = RED_NONE;
    if (!a || a->type != IR_ATTR_STRING) return KILN_OK;
    static const char *names[] = {"none", "add", "mul", "max", "min"};
    for (int i = 0; i < 5; i++)
        if (a->s.len == strlen(names[i]) && !memcmp(a->s.data, names[i], a->s.len)) {
            *out = (red_kind)i;
            return KILN_OK;
        }
    return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "reduction must be none, add, mul, max or min");
}

/* dst[di] = dst[di] (op) src[si] for a numeric dtype. */
static void combine(kiln_dtype dt, void *dst, uint64_t di, const void *src, uint64_t si, red_kind r) {
    if (kiln_dtype_is_integer(dt) || dt == KILN_DTYPE_BOOL) {
        int64_t a = cpu_load_i64(dst, dt, di), b = cpu_load_i64(src, dt, si), v;
        switch (r) {
        case RED_ADD: v = (int64_t)((uint64_t)a + (uint64_t)b); break;
        case RED_MUL: v = (int64_t)((uint64_t)a * (uint64_t)b); break;
        case RED_MAX: v = a > b ? a : b; break;
        default: v = a < b ? a : b; break;
        }
        if (dt == KILN_DTYPE_BOOL) ((uint8_t *)dst)[di] = v != 0;
        else cpu_store_f64(dst, dt, di, (double)v); /* exact for the small types */
        if (dt == KILN_DTYPE_INT64 || dt == KILN_DTYPE_UINT64) ((int64_t *)dst)[di] = v;
        return;
    }
    double a = cpu_load_f64(dst, dt, di), b = cpu_load_f64(src, dt, si), v;
    switch (r) {
    case RED_ADD: v = a + b; break;
    case RED_MUL: v = a * b; break;
    case RED_MAX: v = a > b ? a : b; break;
    default: v = a < b ? a : b; break;
    }
    cpu_store_f64(dst, dt, di, v);
}

static kiln_status scatter_elements(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                    rt_value *outputs, int32_t n_out, bool allow_reduction) {
    const rt_tensor *x, *ind, *upd;
    kiln_status st = data_and_indices(ctx, inputs, n_in, &x, &ind);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 2, &upd);
    red_kind red = RED_NONE;
    if (st == KILN_OK && allow_reduction) st = reduction_attr(ctx, &red);
    if (st != KILN_OK) return st;
    if (ind->rank != x->rank || upd->rank != x->rank || upd->dtype != x->dtype)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "data, indices and updates must have the same rank and dtype");
    for (int32_t i = 0; i < x->rank; i++)
        if (ind->dims[i] != upd->dims[i])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices and updates shapes differ");
    if (red != RED_NONE && x->dtype == KILN_DTYPE_STRING)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "reductions on strings are not supported");
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", 0), x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    for (int32_t i = 0; i < x->rank; i++)
        if (i != axis && ind->dims[i] > x->dims[i])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices dimension %d exceeds data's", (int)i);
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    size_t es = cpu_elem_size(x->dtype);
    if (x->nbytes) memcpy(y->data, x->data, (size_t)x->nbytes);
    int64_t xs[RT_MAX_RANK], idx[RT_MAX_RANK] = {0};
    cpu_contiguous_strides(x->rank, x->dims, xs);
    for (uint64_t i = 0; i < ind->count && st == KILN_OK; i++) {
        int64_t v = 0;
        st = checked_index(ctx, ind, i, x->dims[axis], &v);
        if (st != KILN_OK) break;
        int64_t off = 0;
        for (int32_t k = 0; k < x->rank; k++) off += (k == axis ? v : idx[k]) * xs[k];
        if (red == RED_NONE) memcpy((char *)y->data + (uint64_t)off * es, (const char *)upd->data + i * es, es);
        else combine(x->dtype, y->data, (uint64_t)off, upd->data, i, red);
        for (int32_t k = x->rank - 1; k >= 0; k--) {
            if (++idx[k] < ind->dims[k]) break;
            idx[k] = 0;
        }
    }
    if (st != KILN_OK && x->dtype == KILN_DTYPE_STRING) memset(y->data, 0, (size_t)y->nbytes);
    if (st != KILN_OK) return st;
    return cpu_strings_own(ctx, y);
}

KERNEL(ScatterElements) { return scatter_elements(ctx, inputs, n_in, outputs, n_out, true); }
KERNEL(Scatter) { return scatter_elements(ctx, inputs, n_in, outputs, n_out, false); }

KERNEL(ScatterND) {
    const rt_tensor *x, *ind, *upd;
    kiln_status st = data_and_indices(ctx, inputs, n_in, &x, &ind);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 2, &upd);
    red_kind red = RED_NONE;
    if (st == KILN_OK) st = reduction_attr(ctx, &red);
    if (st != KILN_OK) return st;
    if (upd->dtype != x->dtype) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "updates dtype differs from data's");
    if (red != RED_NONE && x->dtype == KILN_DTYPE_STRING)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "reductions on strings are not supported");
    int64_t *offs = NULL, nt = 0, slab = 0;
    st = nd_offsets(ctx, x, ind, 0, &offs, &nt, &slab);
    if (st != KILN_OK) return st;
    if ((uint64_t)(nt * slab) != upd->count) {
        free(offs);
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "updates has %" PRIu64 " elements, expected %" PRId64, upd->count,
                               nt * slab);
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st == KILN_OK) {
        size_t es = cpu_elem_size(x->dtype);
        if (x->nbytes) memcpy(y->data, x->data, (size_t)x->nbytes);
        for (int64_t t = 0; t < nt; t++) {
            if (red == RED_NONE) {
                memcpy((char *)y->data + offs[t] * (int64_t)es, (const char *)upd->data + t * slab * (int64_t)es,
                       (size_t)slab * es);
            } else {
                for (int64_t k = 0; k < slab; k++)
                    combine(x->dtype, y->data, (uint64_t)(offs[t] + k), upd->data, (uint64_t)(t * slab + k), red);
            }
        }
        st = cpu_strings_own(ctx, y);
    }
    free(offs);
    return st;
}
