/* cpu_tensor_extra.c - newer tensor ops that fit no other family: CenterCropPad,
 * TensorScatter (KV-cache writes), Det (batched determinants), Swish and
 * NonMaxSuppression.
 *
 * CenterCropPad and TensorScatter are data movement (any dtype, via cpu_strided_copy on
 * opaque bytes). Det uses LU decomposition with partial pivoting in double precision.
 * NonMaxSuppression follows ONNX Runtime's greedy algorithm: per batch and class, boxes
 * above score_threshold in descending score order (ties keep the lower index), each kept
 * unless its IoU with an already kept box exceeds iou_threshold.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

#define KERNEL(Op)                                                                                              \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out)

/* ---- CenterCropPad --------------------------------------------------------------------- */

KERNEL(CenterCropPad) {
    const rt_tensor *x, *shape;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &shape);
    if (st != KILN_OK) return st;
    size_t es = cpu_elem_size(x->dtype);
    if (!es) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t target[RT_MAX_RANK];
    int32_t nt;
    st = cpu_read_ints(ctx, shape, "shape", target, RT_MAX_RANK, &nt);
    if (st != KILN_OK) return st;
    int32_t axes[RT_MAX_RANK], na;
    const int64_t *aa = cpu_attr_ints(ctx->node, "axes", &na);
    if (!aa) {
        na = x->rank;
        for (int32_t i = 0; i < na; i++) axes[i] = i;
    } else {
        if (na > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "too many axes");
        for (int32_t i = 0; i < na; i++) {
            st = cpu_check_axis(ctx, aa[i], x->rank, "axes", &axes[i]);
            if (st != KILN_OK) return st;
        }
    }
    if (nt != na)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "shape has %d entries but %d axes are cropped/padded", (int)nt,
                               (int)na);
    int64_t yd[RT_MAX_RANK];
    /* per axis: where the copied window starts in x and in y, and its length */
    int64_t xoff[RT_MAX_RANK] = {0}, yoff[RT_MAX_RANK] = {0}, len[RT_MAX_RANK];
    for (int32_t i = 0; i < x->rank; i++) yd[i] = len[i] = x->dims[i];
    for (int32_t k = 0; k < na; k++) {
        int32_t a = axes[k];
        int64_t t = target[k], n = x->dims[a];
        if (t < 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "negative target size %" PRId64, t);
        yd[a] = t;
        if (t <= n) xoff[a] = (n - t) / 2, len[a] = t; /* crop */
        else yoff[a] = (t - n) / 2, len[a] = n;        /* pad: extra goes to the end */
    }
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, yd, &y);
    if (st != KILN_OK || !y->count) return st;
    memset(y->data, 0, (size_t)y->nbytes);
    int64_t xs[RT_MAX_RANK], ys[RT_MAX_RANK];
    cpu_contiguous_strides(x->rank, x->dims, xs);
    cpu_contiguous_strides(x->rank, yd, ys);
    int64_t xo = 0, yo = 0;
    for (int32_t i = 0; i < x->rank; i++) xo += xoff[i] * xs[i], yo += yoff[i] * ys[i];
    bool any = true;
    for (int32_t i = 0; i < x->rank; i++) any = any && len[i] > 0;
    if (any)
        cpu_strided_copy(ctx->pool, es, x->rank, len, (char *)y->data + (size_t)yo * es, ys,
                         (const char *)x->data + (size_t)xo * es, xs);
    if (x->dtype == KILN_DTYPE_STRING) {
        /* the zeroed padding entries are valid empty strings; copied ones need owning */
        return cpu_strings_own(ctx, y);
    }
    return KILN_OK;
}

/* ---- TensorScatter --------------------------------------------------------------------- */

KERNEL(TensorScatter) {
    const rt_tensor *past, *upd, *wi = cpu_in(inputs, n_in, 2);
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &past);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &upd);
    if (st != KILN_OK) return st;
    size_t es = cpu_elem_size(past->dtype);
    if (!es || past->dtype == KILN_DTYPE_STRING)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(past->dtype));
    if (upd->dtype != past->dtype || upd->rank != past->rank || past->rank < 2)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "update must have past_cache's dtype and rank (>= 2)");
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", -2), past->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    if (axis == 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "axis cannot be the batch axis 0");
    for (int32_t i = 0; i < past->rank; i++)
        if (i != axis && upd->dims[i] != past->dims[i])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "update dim %d is %" PRId64 ", past_cache's is %" PRId64,
                                   (int)i, upd->dims[i], past->dims[i]);
    const ir_attr *ma = ir_node_attr(ctx->node, "mode");
    bool circular = ma && ma->type == IR_ATTR_STRING && ma->s.len == 8 && !memcmp(ma->s.data, "circular", 8);
    if (ma && ma->type == IR_ATTR_STRING && !circular && !(ma->s.len == 6 && !memcmp(ma->s.data, "linear", 6)))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "mode must be linear or circular");
    int64_t B = past->dims[0], S = past->dims[axis], s = upd->dims[axis];
    if (wi && (wi->count != (uint64_t)B || (wi->dtype != KILN_DTYPE_INT64 && wi->dtype != KILN_DTYPE_INT32)))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "write_indices must be int64 [batch=%" PRId64 "]", B);
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, past->dtype, past->rank, past->dims, &y);
    if (st != KILN_OK) return st;
    if (past->nbytes) memcpy(y->data, past->data, (size_t)past->nbytes);
    /* view as [B, outer, S, inner] */
    int64_t outer = 1, inner = 1;
    for (int32_t i = 1; i < axis; i++) outer *= past->dims[i];
    for (int32_t i = axis + 1; i < past->rank; i++) inner *= past->dims[i];
    size_t row = (size_t)inner * es;
    for (int64_t b = 0; b < B; b++) {
        int64_t w = wi ? cpu_load_i64(wi->data, wi->dtype, (uint64_t)b) : 0;
        for (int64_t j = 0; j < s; j++) {
            int64_t pos = w + j;
            if (circular && S > 0) pos = ((pos % S) + S) % S;
            if (pos < 0 || pos >= S)
                return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "write position %" PRId64 " (batch %" PRId64
                                       ") is outside the cache length %" PRId64, pos, b, S);
            for (int64_t o = 0; o < outer; o++)
                memcpy((char *)y->data + (size_t)(((b * outer + o) * S + pos) * inner) * es,
                       (const char *)upd->data + (size_t)(((b * outer + o) * s + j) * inner) * es, row);
        }
    }
    return KILN_OK;
}

/* ---- Det ------------------------------------------------------------------------------- */

KERNEL(Det) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (x->dtype != KILN_DTYPE_FLOAT && x->dtype != KILN_DTYPE_DOUBLE && !cpu_dtype_is_half(x->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "Det supports float types only (got %s)",
                               kiln_dtype_name(x->dtype));
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must be [..., M, M]");
    int64_t m = x->dims[x->rank - 1];
    if (m > 4096) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "matrices larger than 4096x4096 are refused");
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank - 2, x->dims, &y);
    if (st != KILN_OK) return st;
    double *a = malloc(sizeof(double) * (size_t)(m * m + 1));
    if (!a) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (uint64_t b = 0; b < y->count; b++) {
        for (int64_t i = 0; i < m * m; i++) a[i] = cpu_load_f64(x->data, x->dtype, b * (uint64_t)(m * m) + (uint64_t)i);
        double det = 1.0;
        for (int64_t c = 0; c < m && det != 0.0; c++) {
            int64_t p = c;
            for (int64_t r = c + 1; r < m; r++)
                if (fabs(a[r * m + c]) > fabs(a[p * m + c])) p = r;
            if (a[p * m + c] == 0.0) {
                det = 0.0;
                break;
            }
            if (p != c) {
                for (int64_t k = 0; k < m; k++) {
                    double t = a[c * m + k];
                    a[c * m + k] = a[p * m + k];
                    a[p * m + k] = t;
                }
                det = -det;
            }
            double piv = a[c * m + c];
            det *= piv;
            for (int64_t r = c + 1; r < m; r++) {
                double f = a[r * m + c] / piv;
                if (f == 0.0) continue;
                for (int64_t k = c; k < m; k++) a[r * m + k] -= f * a[c * m + k];
            }
        }
        cpu_store_f64(y->data, y->dtype, b, det);
    }
    free(a);
    return KILN_OK;
}

/* ---- Swish ----------------------------------------------------------------------------- */

KERNEL(Swish) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (x->dtype != KILN_DTYPE_FLOAT && x->dtype != KILN_DTYPE_DOUBLE && !cpu_dtype_is_half(x->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "Swish supports float types only (got %s)",
                               kiln_dtype_name(x->dtype));
    double alpha = ir_node_attr_float(ctx->node, "alpha", 1.0f);
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    if (x->dtype == KILN_DTYPE_FLOAT) {
        const float *p = x->data;
        float *q = y->data, al = (float)alpha;
        for (uint64_t i = 0; i < x->count; i++) q[i] = p[i] / (1.0f + expf(-al * p[i]));
    } else {
        for (uint64_t i = 0; i < x->count; i++) {
            double v = cpu_load_f64(x->data, x->dtype, i);
            cpu_store_f64(y->data, y->dtype, i, v / (1.0 + exp(-alpha * v)));
        }
    }
    return KILN_OK;
}

/* ---- NonMaxSuppression ----------------------------------------------------------------- */

typedef struct nms_box {
    float y1, x1, y2, x2, area;
} nms_box;

typedef struct nms_cand {
    float score;
    int64_t index;
} nms_cand;

static int cand_cmp(const void *a, const void *b) {
    const nms_cand *p = a, *q = b;
    if (p->score != q->score) return p->score > q->score ? -1 : 1;
    return p->index < q->index ? -1 : p->index > q->index;
}

static float nms_iou(const nms_box *a, const nms_box *b) {
    float ix1 = fmaxf(a->x1, b->x1), iy1 = fmaxf(a->y1, b->y1);
    float ix2 = fminf(a->x2, b->x2), iy2 = fminf(a->y2, b->y2);
    if (ix2 <= ix1 || iy2 <= iy1) return 0.0f;
    float inter = (ix2 - ix1) * (iy2 - iy1);
    float uni = a->area + b->area - inter;
    return uni > 0.0f ? inter / uni : 0.0f;
}

KERNEL(NonMaxSuppression) {
    const rt_tensor *boxes, *scores;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &boxes);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &scores);
    if (st != KILN_OK) return st;
    if (boxes->dtype != KILN_DTYPE_FLOAT || scores->dtype != KILN_DTYPE_FLOAT)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "NonMaxSuppression supports float32 boxes and scores");
    if (boxes->rank != 3 || boxes->dims[2] != 4 || scores->rank != 3 || scores->dims[0] != boxes->dims[0] ||
        scores->dims[2] != boxes->dims[1])
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "boxes must be [B, N, 4] and scores [B, C, N]");
    int64_t max_out = 0;
    double iou_thr = 0.0, score_thr = -INFINITY;
    bool has_score_thr = false;
    const rt_tensor *t;
    if ((t = cpu_in(inputs, n_in, 2)) && t->count && (st = cpu_read_scalar_i64(ctx, t, "max_output_boxes_per_class",
                                                                                  &max_out)) != KILN_OK)
        return st;
    if ((t = cpu_in(inputs, n_in, 3)) && t->count &&
        (st = cpu_read_scalar_f64(ctx, t, "iou_threshold", &iou_thr)) != KILN_OK)
        return st;
    if ((t = cpu_in(inputs, n_in, 4)) && t->count) {
        if ((st = cpu_read_scalar_f64(ctx, t, "score_threshold", &score_thr)) != KILN_OK) return st;
        has_score_thr = true;
    }
    bool center = ir_node_attr_int(ctx->node, "center_point_box", 0) != 0;
    int64_t B = boxes->dims[0], N = boxes->dims[1], C = scores->dims[1];
    if (max_out < 0) max_out = 0;
    if (max_out > N) max_out = N;
    const float *bx = boxes->data, *sc = scores->data;
    nms_box *nb = malloc(sizeof *nb * (size_t)(N ? N : 1));
    nms_cand *cand = malloc(sizeof *cand * (size_t)(N ? N : 1));
    int64_t *kept = malloc(sizeof *kept * (size_t)(N ? N : 1));
    /* selected triples, grown as needed */
    int64_t *sel = NULL, n_sel = 0, cap_sel = 0;
    if (!nb || !cand || !kept) {
        st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t b = 0; b < B && max_out > 0; b++) {
        for (int64_t i = 0; i < N; i++) {
            const float *p = bx + (b * N + i) * 4;
            nms_box *q = &nb[i];
            if (center) {
                q->x1 = p[0] - p[2] / 2, q->x2 = p[0] + p[2] / 2;
                q->y1 = p[1] - p[3] / 2, q->y2 = p[1] + p[3] / 2;
            } else {
                q->y1 = fminf(p[0], p[2]), q->y2 = fmaxf(p[0], p[2]);
                q->x1 = fminf(p[1], p[3]), q->x2 = fmaxf(p[1], p[3]);
            }
            q->area = (q->x2 - q->x1) * (q->y2 - q->y1);
        }
        for (int64_t c = 0; c < C; c++) {
            int64_t nc = 0;
            for (int64_t i = 0; i < N; i++) {
                float s = sc[(b * C + c) * N + i];
                if (!has_score_thr || s > score_thr) cand[nc++] = (nms_cand){s, i};
            }
            qsort(cand, (size_t)nc, sizeof *cand, cand_cmp);
            int64_t nk = 0;
            for (int64_t k = 0; k < nc && nk < max_out; k++) {
                bool keep = true;
                for (int64_t j = 0; j < nk && keep; j++)
                    if (nms_iou(&nb[cand[k].index], &nb[kept[j]]) > (float)iou_thr) keep = false;
                if (!keep) continue;
                kept[nk++] = cand[k].index;
                if (n_sel == cap_sel) {
                    int64_t nc2 = cap_sel ? cap_sel * 2 : 64;
                    int64_t *ns = realloc(sel, sizeof *ns * (size_t)nc2 * 3);
                    if (!ns) {
                        st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
                        goto done;
                    }
                    sel = ns, cap_sel = nc2;
                }
                sel[n_sel * 3] = b, sel[n_sel * 3 + 1] = c, sel[n_sel * 3 + 2] = cand[k].index;
                n_sel++;
            }
        }
    }
    {
        int64_t d[2] = {n_sel, 3};
        rt_tensor *y;
        st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_INT64, 2, d, &y);
        if (st == KILN_OK && n_sel) memcpy(y->data, sel, sizeof(int64_t) * (size_t)n_sel * 3);
    }
done:
    free(nb), free(cand), free(kept), free(sel);
    return st;
}
