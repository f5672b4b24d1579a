/* cpu_index_ops.c - ops that select or rearrange elements by position or value: Slice,
 * TopK, NonZero, Unique, Compress, OneHot, Trilu, CumSum, CumProd, ReverseSequence.
 *
 * Slice is one strided copy (offset start, stride step). The value-ordering ops (TopK,
 * Unique) compare through double (strings bytewise) and sort (value, position) pairs,
 * which gives ONNX's tie rule (the lower index first). Data-dependent output sizes
 * (NonZero, Unique, Compress) are computed first, then allocated once.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

#define KERNEL(Op)                                                                                              \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out)

static kiln_status data_ok(cpu_kernel_ctx *ctx, const rt_tensor *x) {
    if (!cpu_elem_size(x->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    return KILN_OK;
}

static bool is_numeric(kiln_dtype d) {
    return d == KILN_DTYPE_BOOL || ((kiln_dtype_is_float(d) || kiln_dtype_is_integer(d)) && cpu_elem_size(d) &&
                                    (!kiln_dtype_is_float(d) || d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_DOUBLE ||
                                     cpu_dtype_is_half(d)));
}

/* ---- Slice -------------------------------------------------------------------------- */

KERNEL(Slice) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = data_ok(ctx, x);
    if (st != KILN_OK) return st;
    int64_t starts[RT_MAX_RANK], ends[RT_MAX_RANK], axes[RT_MAX_RANK], steps[RT_MAX_RANK];
    int32_t ns, ne, na = 0, nst = 0;
    bool p1, p2, p3 = false, p4 = false;
    bool attr_form = !cpu_in(inputs, n_in, 1);
    st = cpu_ints_input_or_attr(ctx, inputs, n_in, attr_form ? -1 : 1, "starts", starts, RT_MAX_RANK, &ns, &p1);
    if (st == KILN_OK)
        st = cpu_ints_input_or_attr(ctx, inputs, n_in, attr_form ? -1 : 2, "ends", ends, RT_MAX_RANK, &ne, &p2);
    if (st == KILN_OK)
        st = cpu_ints_input_or_attr(ctx, inputs, n_in, attr_form ? -1 : 3, "axes", axes, RT_MAX_RANK, &na, &p3);
    if (st == KILN_OK && !attr_form) st = cpu_ints_input_or_attr(ctx, inputs, n_in, 4, NULL, steps, RT_MAX_RANK, &nst, &p4);
    if (st != KILN_OK) return st;
    if (!p1 || !p2 || ns != ne)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "starts and ends must be given with the same length");
    if ((p3 && na != ns) || (p4 && nst != ns))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "axes and steps must have as many entries as starts");
    int64_t d[RT_MAX_RANK], off = 0, xs[RT_MAX_RANK], ss[RT_MAX_RANK], ds[RT_MAX_RANK];
    cpu_contiguous_strides(x->rank, x->dims, xs);
    bool done[RT_MAX_RANK] = {false};
    for (int32_t i = 0; i < x->rank; i++) {
        d[i] = x->dims[i];
        ss[i] = xs[i];
    }
    for (int32_t k = 0; k < ns; k++) {
        int32_t a;
        st = cpu_check_axis(ctx, p3 ? axes[k] : k, x->rank, "axis", &a);
        if (st != KILN_OK) return st;
        if (done[a]) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "axis %d is repeated", (int)a);
        done[a] = true;
        int64_t step = p4 ? steps[k] : 1, n = x->dims[a];
        if (step == 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "step for axis %d is 0", (int)a);
        int64_t s = starts[k], e = ends[k];
        if (s < 0) s = s < -n ? 0 : s + n; /* saturating: starts may be INT64_MIN */
        if (e < 0) e = e < -n ? -1 : e + n;
        int64_t cnt;
        if (step > 0) {
            s = s < 0 ? 0 : s > n ? n : s;
            e = e < 0 ? 0 : e > n ? n : e;
            cnt = e > s ? (e - s + step - 1) / step : 0;
        } else {
            s = s < 0 ? -1 : s > n - 1 ? n - 1 : s;
            e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
            cnt = s > e ? (s - e + (-step) - 1) / (-step) : 0;
        }
        d[a] = cnt;
        if (cnt) off += s * xs[a];
        ss[a] = xs[a] * step;
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, d, &y);
    if (st != KILN_OK || !y->count) return st;
    cpu_contiguous_strides(x->rank, d, ds);
    size_t es = cpu_elem_size(x->dtype);
    cpu_strided_copy(ctx->pool, es, x->rank, d, y->data, ds, (const char *)x->data + off * (int64_t)es, ss);
    return cpu_strings_own(ctx, y);
}

/* ---- ordering helpers --------------------------------------------------------------- */

typedef struct keyed {
    double v;
    int64_t i;
} keyed;

static int cmp_desc(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->v != y->v) {
        if (x->v != x->v) return -1; /* NaN counts as the largest */
        if (y->v != y->v) return 1;
        return x->v > y->v ? -1 : 1;
    }
    return x->i < y->i ? -1 : x->i > y->i;
}

static int cmp_asc(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->v != y->v) {
        if (x->v != x->v) return 1;
        if (y->v != y->v) return -1;
        return x->v < y->v ? -1 : 1;
    }
    return x->i < y->i ? -1 : x->i > y->i;
}

/* ---- TopK --------------------------------------------------------------------------- */

KERNEL(TopK) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (!is_numeric(x->dtype) || x->dtype == KILN_DTYPE_BOOL)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t k;
    const rt_tensor *kt = cpu_in(inputs, n_in, 1);
    if (kt) st = cpu_read_scalar_i64(ctx, kt, "K", &k);
    else k = ir_node_attr_int(ctx->node, "k", -1);
    if (st != KILN_OK) return st;
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", -1), x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    int64_t n = x->dims[axis];
    if (k < 0 || k > n)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "K = %" PRId64 " is out of range for axis size %" PRId64, k, n);
    bool largest = ir_node_attr_int(ctx->node, "largest", 1) != 0;
    int64_t d[RT_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[axis] = k;
    rt_tensor *vals = NULL, *idx = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, d, &vals);
    if (st == KILN_OK) st = cpu_alloc_out(ctx, outputs, n_out, 1, KILN_DTYPE_INT64, x->rank, d, &idx);
    if (st != KILN_OK || !vals->count) return st;
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= x->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
    keyed *buf = malloc(sizeof(keyed) * (size_t)n);
    if (!buf) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    size_t es = cpu_elem_size(x->dtype);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            for (int64_t j = 0; j < n; j++) {
                buf[j].v = cpu_load_f64(x->data, x->dtype, (uint64_t)((a * n + j) * inner + c));
                buf[j].i = j;
            }
            qsort(buf, (size_t)n, sizeof(keyed), largest ? cmp_desc : cmp_asc);
            for (int64_t j = 0; j < k; j++) {
                int64_t o = (a * k + j) * inner + c;
                ((int64_t *)idx->data)[o] = buf[j].i;
                memcpy((char *)vals->data + o * (int64_t)es,
                       (const char *)x->data + ((a * n + buf[j].i) * inner + c) * (int64_t)es, es);
            }
        }
    free(buf);
    return KILN_OK;
}

/* ---- NonZero ------------------------------------------------------------------------ */

KERNEL(NonZero) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (!is_numeric(x->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t nnz = 0;
    for (uint64_t i = 0; i < x->count; i++) nnz += cpu_load_f64(x->data, x->dtype, i) != 0;
    int64_t d[2] = {x->rank, nnz};
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_INT64, 2, d, &y);
    if (st != KILN_OK) return st;
    int64_t idx[RT_MAX_RANK] = {0}, col = 0;
    for (uint64_t i = 0; i < x->count; i++) {
        if (cpu_load_f64(x->data, x->dtype, i) != 0) {
            for (int32_t k = 0; k < x->rank; k++) ((int64_t *)y->data)[k * nnz + col] = idx[k];
            col++;
        }
        for (int32_t k = x->rank - 1; k >= 0; k--) {
            if (++idx[k] < x->dims[k]) break;
            idx[k] = 0;
        }
    }
    return KILN_OK;
}

/* ---- Unique ------------------------------------------------------------------------- */

typedef struct unique_ctx {
    const rt_tensor *x;
    int64_t n, inner, slab; /* units along the axis: n units of slab = (outer rows) x inner */
    int64_t outer;
} unique_ctx;

static _Thread_local const unique_ctx *g_unique; /* qsort has no user pointer */

static int unit_cmp(int64_t a, int64_t b) {
    const unique_ctx *u = g_unique;
    const rt_tensor *x = u->x;
    for (int64_t o = 0; o < u->outer; o++)
        for (int64_t c = 0; c < u->inner; c++) {
            uint64_t ia = (uint64_t)((o * u->n + a) * u->inner + c), ib = (uint64_t)((o * u->n + b) * u->inner + c);
            if (x->dtype == KILN_DTYPE_STRING) {
                const ir_bytes *sa = &((const ir_bytes *)x->data)[ia], *sb = &((const ir_bytes *)x->data)[ib];
                uint64_t m = sa->len < sb->len ? sa->len : sb->len;
                int r = m ? memcmp(sa->data, sb->data, (size_t)m) : 0;
                if (r) return r;
                if (sa->len != sb->len) return sa->len < sb->len ? -1 : 1;
            } else {
                double va = cpu_load_f64(x->data, x->dtype, ia), vb = cpu_load_f64(x->data, x->dtype, ib);
                if (va != vb) return va < vb ? -1 : 1;
            }
        }
    return 0;
}

static int unit_qsort_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    int r = unit_cmp(x, y);
    return r ? r : (x < y ? -1 : x > y);
}

KERNEL(Unique) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = data_ok(ctx, x);
    if (st != KILN_OK) return st;
    const ir_attr *axis_attr = ir_node_attr(ctx->node, "axis");
    bool sorted = ir_node_attr_int(ctx->node, "sorted", 1) != 0;
    unique_ctx u = {.x = x};
    int32_t axis = -1;
    if (axis_attr) {
        st = cpu_check_axis(ctx, axis_attr->i, x->rank, "axis", &axis);
        if (st != KILN_OK) return st;
        u.n = x->dims[axis];
        u.outer = u.inner = 1;
        for (int32_t i = 0; i < axis; i++) u.outer *= x->dims[i];
        for (int32_t i = axis + 1; i < x->rank; i++) u.inner *= x->dims[i];
    } else {
        u.n = (int64_t)x->count;
        u.outer = u.inner = 1;
    }
    int64_t *order = malloc(sizeof(int64_t) * (size_t)(u.n + 1) * 4);
    if (!order) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    int64_t *first = order + u.n, *inverse = first + u.n, *counts = inverse + u.n;
    for (int64_t i = 0; i < u.n; i++) order[i] = i;
    g_unique = &u;
    qsort(order, (size_t)u.n, sizeof(int64_t), unit_qsort_cmp);
    /* groups in sorted order: group g starts at its smallest unit index (stable sort) */
    int64_t ng = 0;
    int64_t *group_of = malloc(sizeof(int64_t) * (size_t)(u.n + 1));
    if (!group_of) {
        free(order);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < u.n; i++) {
        if (i == 0 || unit_cmp(order[i - 1], order[i]) != 0) {
            first[ng] = order[i];
            counts[ng] = 0;
            ng++;
        }
        counts[ng - 1]++;
        group_of[order[i]] = ng - 1;
    }
    /* output rank of each group: sorted keeps this order; otherwise by first occurrence */
    int64_t *rank_of = inverse; /* reuse: group -> output position */
    if (sorted) {
        for (int64_t g = 0; g < ng; g++) rank_of[g] = g;
    } else {
        /* groups ordered by first occurrence: walk units in index order */
        int64_t pos = 0;
        for (int64_t g = 0; g < ng; g++) rank_of[g] = -1;
        for (int64_t i = 0; i < u.n; i++)
            if (rank_of[group_of[i]] < 0) rank_of[group_of[i]] = pos++;
    }
    int64_t d[RT_MAX_RANK];
    int32_t r;
    if (axis >= 0) {
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
        d[axis] = ng;
        r = x->rank;
    } else {
        d[0] = ng;
        r = 1;
    }
    rt_tensor *y = NULL, *yi = NULL, *yinv = NULL, *yc = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st == KILN_OK && n_out > 1) st = cpu_alloc_out(ctx, outputs, n_out, 1, KILN_DTYPE_INT64, 1, &ng, &yi);
    if (st == KILN_OK && n_out > 2) st = cpu_alloc_out(ctx, outputs, n_out, 2, KILN_DTYPE_INT64, 1, &u.n, &yinv);
    if (st == KILN_OK && n_out > 3) st = cpu_alloc_out(ctx, outputs, n_out, 3, KILN_DTYPE_INT64, 1, &ng, &yc);
    if (st == KILN_OK) {
        size_t es = cpu_elem_size(x->dtype);
        for (int64_t g = 0; g < ng; g++) {
            int64_t p = rank_of[g];
            for (int64_t o = 0; o < u.outer; o++)
                memcpy((char *)y->data + ((o * ng + p) * u.inner) * (int64_t)es,
                       (const char *)x->data + ((o * u.n + first[g]) * u.inner) * (int64_t)es, (size_t)u.inner * es);
            if (yi) ((int64_t *)yi->data)[p] = first[g];
            if (yc) ((int64_t *)yc->data)[p] = counts[g];
        }
        if (yinv)
            for (int64_t i = 0; i < u.n; i++) ((int64_t *)yinv->data)[i] = rank_of[group_of[i]];
        st = cpu_strings_own(ctx, y);
    }
    free(group_of);
    free(order);
    return st;
}

/* ---- Compress ----------------------------------------------------------------------- */

KERNEL(Compress) {
    const rt_tensor *x, *c;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &c);
    if (st == KILN_OK) st = data_ok(ctx, x);
    if (st != KILN_OK) return st;
    if (c->dtype != KILN_DTYPE_BOOL || c->rank != 1)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "condition must be a 1-D bool tensor");
    const ir_attr *aa = ir_node_attr(ctx->node, "axis");
    int64_t outer = 1, inner = 1, n = (int64_t)x->count;
    int32_t axis = -1;
    if (aa) {
        st = cpu_check_axis(ctx, aa->i, x->rank, "axis", &axis);
        if (st != KILN_OK) return st;
        n = x->dims[axis];
        for (int32_t i = 0; i < axis; i++) outer *= x->dims[i];
        for (int32_t i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
    }
    if (c->dims[0] > n)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "condition has %" PRId64 " entries but the axis has %" PRId64,
                               c->dims[0], n);
    const uint8_t *cd = c->data;
    int64_t kept = 0;
    for (int64_t i = 0; i < c->dims[0]; i++) kept += cd[i] != 0;
    int64_t d[RT_MAX_RANK];
    int32_t r = 1;
    if (axis >= 0) {
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
        d[axis] = kept;
        r = x->rank;
    } else {
        d[0] = kept;
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st != KILN_OK) return st;
    size_t es = cpu_elem_size(x->dtype), blk = (size_t)inner * es;
    char *o = y->data;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t i = 0; i < c->dims[0]; i++)
            if (cd[i]) {
                memcpy(o, (const char *)x->data + (a * n + i) * (int64_t)blk, blk);
                o += blk;
            }
    return cpu_strings_own(ctx, y);
}

/* ---- OneHot ------------------------------------------------------------------------- */

KERNEL(OneHot) {
    const rt_tensor *ind, *dep, *vals;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &ind);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &dep);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 2, &vals);
    if (st == KILN_OK) st = data_ok(ctx, vals);
    if (st != KILN_OK) return st;
    if (!is_numeric(ind->dtype) || vals->count != 2)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "indices must be numeric and values must hold [off, on]");
    double depth_f;
    st = cpu_read_scalar_f64(ctx, dep, "depth", &depth_f);
    if (st != KILN_OK) return st;
    if (!(depth_f >= 1 && depth_f <= 1e9)) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "depth must be >= 1");
    int64_t depth = (int64_t)depth_f;
    int32_t r = ind->rank + 1, axis;
    if (r > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "output rank too large");
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", -1), r, "axis", &axis);
    if (st != KILN_OK) return st;
    int64_t d[RT_MAX_RANK];
    for (int32_t i = 0, j = 0; i < r; i++) d[i] = i == axis ? depth : ind->dims[j++];
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, vals->dtype, r, d, &y);
    if (st != KILN_OK || !y->count) return st;
    size_t es = cpu_elem_size(vals->dtype);
    const char *off = vals->data, *on = (const char *)vals->data + es;
    for (uint64_t i = 0; i < y->count; i++) memcpy((char *)y->data + i * es, off, es);
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= d[i];
    for (int32_t i = axis + 1; i < r; i++) inner *= d[i];
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            double v = cpu_load_f64(ind->data, ind->dtype, (uint64_t)(a * inner + c));
            int64_t k = cpu_f64_to_i64(v);
            if (k < 0) k += depth;
            if (k < 0 || k >= depth) continue;
            memcpy((char *)y->data + ((a * depth + k) * inner + c) * (int64_t)es, on, es);
        }
    return cpu_strings_own(ctx, y);
}

/* ---- Trilu -------------------------------------------------------------------------- */

KERNEL(Trilu) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = data_ok(ctx, x);
    if (st != KILN_OK) return st;
    if (x->rank < 2) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must have rank >= 2");
    int64_t k = 0;
    const rt_tensor *kt = cpu_in(inputs, n_in, 1);
    if (kt) st = cpu_read_scalar_i64(ctx, kt, "k", &k);
    if (st != KILN_OK) return st;
    bool upper = ir_node_attr_int(ctx->node, "upper", 1) != 0;
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st != KILN_OK || !y->count) return st;
    int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
    size_t es = cpu_elem_size(x->dtype);
    memcpy(y->data, x->data, (size_t)x->nbytes);
    uint64_t mats = x->count / (uint64_t)(R * C);
    for (uint64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                bool keep = upper ? (j - i >= k) : (j - i <= k);
                if (!keep) memset((char *)y->data + ((int64_t)m * R * C + i * C + j) * (int64_t)es, 0, es);
            }
    return cpu_strings_own(ctx, y);
}

/* ---- CumSum / CumProd ------------------------------------------------------------------------- */

static kiln_status cumulate(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                           int32_t n_out, bool prod) {
    const rt_tensor *x, *at;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &at);
    if (st != KILN_OK) return st;
    if (!is_numeric(x->dtype) || x->dtype == KILN_DTYPE_BOOL)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t a64;
    int32_t axis;
    st = cpu_read_scalar_i64(ctx, at, "axis", &a64);
    if (st == KILN_OK) st = cpu_check_axis(ctx, a64, x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    bool excl = ir_node_attr_int(ctx->node, "exclusive", 0) != 0, rev = ir_node_attr_int(ctx->node, "reverse", 0) != 0;
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st != KILN_OK || !y->count) return st;
    int64_t n = x->dims[axis], outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= x->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
    bool ints = kiln_dtype_is_integer(x->dtype);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            double accf = prod ? 1 : 0;
            int64_t acci = prod ? 1 : 0;
            for (int64_t t = 0; t < n; t++) {
                int64_t j = rev ? n - 1 - t : t;
                uint64_t p = (uint64_t)((a * n + j) * inner + c);
                if (ints) {
                    int64_t v = cpu_load_i64(x->data, x->dtype, p);
                    if (!excl) acci = prod ? (int64_t)((uint64_t)acci * (uint64_t)v) : (int64_t)((uint64_t)acci + (uint64_t)v);
                    if (x->dtype == KILN_DTYPE_INT64 || x->dtype == KILN_DTYPE_UINT64) ((int64_t *)y->data)[p] = acci;
                    else cpu_store_f64(y->data, x->dtype, p, (double)acci);
                    if (excl) acci = prod ? (int64_t)((uint64_t)acci * (uint64_t)v) : (int64_t)((uint64_t)acci + (uint64_t)v);
                } else {
                    double v = cpu_load_f64(x->data, x->dtype, p);
                    if (!excl) accf = prod ? accf * v : accf + v;
                    cpu_store_f64(y->data, x->dtype, p, accf);
                    if (excl) accf = prod ? accf * v : accf + v;
                }
            }
        }
    return KILN_OK;
}

KERNEL(CumSum) { return cumulate(ctx, inputs, n_in, outputs, n_out, false); }
KERNEL(CumProd) { return cumulate(ctx, inputs, n_in, outputs, n_out, true); }

/* ---- ReverseSequence ---------------------------------------------------------------- */

KERNEL(ReverseSequence) {
    const rt_tensor *x, *lens;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &lens);
    if (st == KILN_OK) st = data_ok(ctx, x);
    if (st != KILN_OK) return st;
    if (x->rank < 2) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must have rank >= 2");
    int64_t ta = ir_node_attr_int(ctx->node, "time_axis", 0), ba = ir_node_attr_int(ctx->node, "batch_axis", 1);
    if (!((ta == 0 && ba == 1) || (ta == 1 && ba == 0)))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "time_axis and batch_axis must be 0 and 1");
    int64_t T = x->dims[ta], B = x->dims[ba];
    if (lens->rank != 1 || lens->dims[0] != B || (lens->dtype != KILN_DTYPE_INT64 && lens->dtype != KILN_DTYPE_INT32))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "sequence_lens must be int[%" PRId64 "]", B);
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st != KILN_OK || !y->count) return st;
    int64_t xs[RT_MAX_RANK];
    cpu_contiguous_strides(x->rank, x->dims, xs);
    int64_t inner = xs[1];
    size_t es = cpu_elem_size(x->dtype), blk = (size_t)inner * es;
    for (int64_t b = 0; b < B; b++) {
        int64_t L = cpu_load_i64(lens->data, lens->dtype, (uint64_t)b);
        if (L < 0 || L > T) {
            memset(y->data, 0, (size_t)y->nbytes);
            return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "sequence_lens[%" PRId64 "] = %" PRId64 " is outside 0..%" PRId64,
                                   b, L, T);
        }
        for (int64_t t = 0; t < T; t++) {
            int64_t src_t = t < L ? L - 1 - t : t;
            int64_t yo = t * xs[ta] + b * xs[ba], xo = src_t * xs[ta] + b * xs[ba];
            memcpy((char *)y->data + yo * (int64_t)es, (const char *)x->data + xo * (int64_t)es, blk);
        }
    }
    return cpu_strings_own(ctx, y);
}
