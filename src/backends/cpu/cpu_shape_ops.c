/* cpu_shape_ops.c - shape and data-movement ops: Reshape, Flatten, Squeeze, Unsqueeze,
 * Shape, Size, Transpose, Concat, Split, Expand, Tile, DepthToSpace, SpaceToDepth.
 *
 * All of them work on any dtype of whole bytes (strings included: the ir_bytes entries
 * are moved and then copied into owned storage). Pure reshapes copy the buffer, unless
 * the executor gave the output the input's own storage (a zero-copy view, executor.c
 * plan_views: then there is nothing to copy); the
 * others describe the move as one strided copy (cpu_strided_copy), so Transpose, Expand,
 * Tile and DepthToSpace share a single parallel, dim-collapsing loop.
 */
#include <inttypes.h>
#include <string.h>

#include "backends/cpu/cpu_broadcast.h"
#include "backends/cpu/cpu_elem_util.h"

#define KERNEL(Op)                                                                                              \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out)

static kiln_status movable(cpu_kernel_ctx *ctx, const rt_tensor *x) {
    if (!cpu_elem_size(x->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported by this op",
                               kiln_dtype_name(x->dtype));
    return KILN_OK;
}

/* ---- Reshape / Flatten / Squeeze / Unsqueeze ---------------------------------------- */

KERNEL(Reshape) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    int64_t shape[RT_MAX_RANK];
    int32_t r = 0;
    bool present;
    st = cpu_ints_input_or_attr(ctx, inputs, n_in, 1, "shape", shape, RT_MAX_RANK, &r, &present);
    if (st != KILN_OK) return st;
    if (!present) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "the target shape is missing");
    bool allowzero = ir_node_attr_int(ctx->node, "allowzero", 0) != 0;
    int32_t infer = -1;
    uint64_t known = 1;
    for (int32_t i = 0; i < r; i++) {
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->rank)
                return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "shape[%d] is 0 (copy) but the input has rank %d", (int)i,
                                       (int)x->rank);
            shape[i] = x->dims[i];
        }
        if (shape[i] == -1) {
            if (infer >= 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "shape has more than one -1");
            infer = i;
            continue;
        }
        if (shape[i] < 0)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "shape[%d] = %" PRId64 " is invalid", (int)i, shape[i]);
        if (__builtin_mul_overflow(known, (uint64_t)shape[i], &known))
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "shape overflows");
    }
    if (infer >= 0) {
        if (known == 0 || x->count % known)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                                   "cannot infer the -1 dimension: %" PRIu64 " elements are not a multiple of %" PRIu64,
                                   x->count, known);
        shape[infer] = (int64_t)(x->count / known);
    }
    return cpu_copy_reshaped(ctx, x, outputs, n_out, r, shape);
}

KERNEL(Flatten) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    int64_t axis = ir_node_attr_int(ctx->node, "axis", 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis > x->rank)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "axis %" PRId64 " is out of range for rank %d",
                               ir_node_attr_int(ctx->node, "axis", 1), (int)x->rank);
    int64_t d[2] = {1, 1};
    for (int32_t i = 0; i < x->rank; i++) d[i >= axis] *= x->dims[i];
    return cpu_copy_reshaped(ctx, x, outputs, n_out, 2, d);
}

KERNEL(Squeeze) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    int64_t axes[RT_MAX_RANK];
    int32_t na;
    bool present;
    st = cpu_ints_input_or_attr(ctx, inputs, n_in, 1, "axes", axes, RT_MAX_RANK, &na, &present);
    if (st != KILN_OK) return st;
    bool drop[RT_MAX_RANK] = {false};
    if (!present || na == 0) {
        for (int32_t i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
    } else {
        for (int32_t k = 0; k < na; k++) {
            int32_t a;
            st = cpu_check_axis(ctx, axes[k], x->rank, "axis", &a);
            if (st != KILN_OK) return st;
            if (x->dims[a] != 1)
                return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "cannot squeeze axis %d of size %" PRId64, (int)a,
                                       x->dims[a]);
            drop[a] = true;
        }
    }
    int64_t d[RT_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < x->rank; i++)
        if (!drop[i]) d[r++] = x->dims[i];
    return cpu_copy_reshaped(ctx, x, outputs, n_out, r, d);
}

KERNEL(Unsqueeze) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    int64_t axes[RT_MAX_RANK];
    int32_t na;
    bool present;
    st = cpu_ints_input_or_attr(ctx, inputs, n_in, 1, "axes", axes, RT_MAX_RANK, &na, &present);
    if (st != KILN_OK) return st;
    int32_t r = x->rank + na;
    if (r > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "output rank %d is too large", (int)r);
    bool ins[RT_MAX_RANK] = {false};
    for (int32_t k = 0; k < na; k++) {
        int32_t a;
        st = cpu_check_axis(ctx, axes[k], r, "axis", &a);
        if (st != KILN_OK) return st;
        if (ins[a]) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "axis %d is repeated", (int)a);
        ins[a] = true;
    }
    int64_t d[RT_MAX_RANK];
    for (int32_t i = 0, j = 0; i < r; i++) d[i] = ins[i] ? 1 : x->dims[j++];
    return cpu_copy_reshaped(ctx, x, outputs, n_out, r, d);
}

/* ---- Shape / Size ------------------------------------------------------------------- */

KERNEL(Shape) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    int64_t r = x->rank;
    int64_t s = ir_node_attr_int(ctx->node, "start", 0), e = ir_node_attr_int(ctx->node, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = s < 0 ? 0 : s > r ? r : s;
    e = e < 0 ? 0 : e > r ? r : e;
    int64_t n = e > s ? e - s : 0;
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_INT64, 1, &n, &y);
    if (st != KILN_OK) return st;
    for (int64_t i = 0; i < n; i++) ((int64_t *)y->data)[i] = x->dims[s + i];
    return KILN_OK;
}

KERNEL(Size) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_INT64, 0, NULL, &y);
    if (st != KILN_OK) return st;
    *(int64_t *)y->data = (int64_t)x->count;
    return KILN_OK;
}

/* ---- Transpose ---------------------------------------------------------------------- */

KERNEL(Transpose) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = movable(ctx, x);
    if (st != KILN_OK) return st;
    int32_t np;
    const int64_t *pa = cpu_attr_ints(ctx->node, "perm", &np);
    int32_t perm[RT_MAX_RANK];
    if (!pa) {
        for (int32_t i = 0; i < x->rank; i++) perm[i] = x->rank - 1 - i;
    } else {
        if (np != x->rank)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "perm has %d entries but the input has rank %d", (int)np,
                                   (int)x->rank);
        bool seen[RT_MAX_RANK] = {false};
        for (int32_t i = 0; i < np; i++) {
            st = cpu_check_axis(ctx, pa[i], x->rank, "perm entry", &perm[i]);
            if (st != KILN_OK) return st;
            if (seen[perm[i]]) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "perm repeats axis %d", (int)perm[i]);
            seen[perm[i]] = true;
        }
    }
    int64_t d[RT_MAX_RANK], xs[RT_MAX_RANK], ss[RT_MAX_RANK], ds[RT_MAX_RANK];
    cpu_contiguous_strides(x->rank, x->dims, xs);
    for (int32_t i = 0; i < x->rank; i++) {
        d[i] = x->dims[perm[i]];
        ss[i] = xs[perm[i]];
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, d, &y);
    if (st != KILN_OK) return st;
    cpu_contiguous_strides(x->rank, d, ds);
    cpu_strided_copy(ctx->pool, cpu_elem_size(x->dtype), x->rank, d, y->data, ds, x->data, ss);
    return cpu_strings_own(ctx, y);
}

/* ---- Concat / Split ----------------------------------------------------------------- */

KERNEL(Concat) {
    if (n_in < 1) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "needs at least one input");
    const rt_tensor *x0;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x0);
    if (st == KILN_OK) st = movable(ctx, x0);
    if (st != KILN_OK) return st;
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", 0), x0->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    int64_t d[RT_MAX_RANK];
    memcpy(d, x0->dims, sizeof(int64_t) * (size_t)x0->rank);
    d[axis] = 0;
    for (int32_t k = 0; k < n_in; k++) {
        const rt_tensor *x;
        st = cpu_need_input(ctx, inputs, n_in, k, &x);
        if (st != KILN_OK) return st;
        if (x->dtype != x0->dtype || x->rank != x0->rank)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input %d (%s rank %d) does not match input 0 (%s rank %d)",
                                   (int)k, kiln_dtype_name(x->dtype), (int)x->rank, kiln_dtype_name(x0->dtype),
                                   (int)x0->rank);
        for (int32_t i = 0; i < x->rank; i++)
            if (i != axis && x->dims[i] != x0->dims[i])
                return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                                       "input %d has size %" PRId64 " in dimension %d where input 0 has %" PRId64,
                                       (int)k, x->dims[i], (int)i, x0->dims[i]);
        d[axis] += x->dims[axis];
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x0->dtype, x0->rank, d, &y);
    if (st != KILN_OK || !y->count) return st;
    size_t es = cpu_elem_size(x0->dtype);
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= d[i];
    for (int32_t i = axis + 1; i < x0->rank; i++) inner *= d[i];
    int64_t row = d[axis] * inner, off = 0;
    for (int32_t k = 0; k < n_in; k++) {
        const rt_tensor *x = cpu_in(inputs, n_in, k);
        int64_t w = x->dims[axis] * inner;
        int64_t dims2[2] = {outer, w}, dst_s[2] = {row, 1}, src_s[2] = {w, 1};
        if (w) cpu_strided_copy(ctx->pool, es, 2, dims2, (char *)y->data + off * (int64_t)es, dst_s, x->data, src_s);
        off += w;
    }
    return cpu_strings_own(ctx, y);
}

KERNEL(Split) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = movable(ctx, x);
    if (st != KILN_OK) return st;
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", 0), x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    if (n_out < 1 || n_out > 4096) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad output count %d", (int)n_out);
    int64_t sizes[4096];
    int32_t ns;
    bool present;
    st = cpu_ints_input_or_attr(ctx, inputs, n_in, 1, "split", sizes, 4096, &ns, &present);
    if (st != KILN_OK) return st;
    int64_t total = x->dims[axis];
    if (present && ns > 0) {
        if (ns != n_out)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "split has %d entries for %d outputs", (int)ns, (int)n_out);
        int64_t sum = 0;
        for (int32_t k = 0; k < ns; k++) {
            if (sizes[k] < 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "split[%d] is negative", (int)k);
            sum += sizes[k];
        }
        if (sum != total)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "split sizes add up to %" PRId64 " but the axis has %" PRId64,
                                   sum, total);
    } else {
        int64_t nparts = ir_node_attr_int(ctx->node, "num_outputs", n_out);
        if (nparts != n_out)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "num_outputs is %" PRId64 " but the node has %d outputs",
                                   nparts, (int)n_out);
        int64_t chunk = (total + n_out - 1) / n_out;
        bool opset18 = ir_node_attr(ctx->node, "num_outputs") != NULL;
        if (!opset18 && total % n_out)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "axis size %" PRId64 " does not split evenly into %d parts",
                                   total, (int)n_out);
        for (int32_t k = 0; k < n_out; k++) {
            int64_t left = total - chunk * k;
            sizes[k] = left < 0 ? 0 : left < chunk ? left : chunk;
        }
    }
    size_t es = cpu_elem_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= x->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
    int64_t off = 0;
    for (int32_t k = 0; k < n_out; k++) {
        int64_t d[RT_MAX_RANK];
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
        d[axis] = sizes[k];
        rt_tensor *y = NULL;
        st = cpu_alloc_out(ctx, outputs, n_out, k, x->dtype, x->rank, d, &y);
        if (st != KILN_OK) return st;
        int64_t w = sizes[k] * inner;
        int64_t dims2[2] = {outer, w}, dst_s[2] = {w, 1}, src_s[2] = {total * inner, 1};
        if (y->count) cpu_strided_copy(ctx->pool, es, 2, dims2, y->data, dst_s, (const char *)x->data + off * (int64_t)es, src_s);
        off += w;
        st = cpu_strings_own(ctx, y);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

/* ---- Expand / Tile ------------------------------------------------------------------ */

/* y = x broadcast to shape (rank r, dims d): a strided copy with stride 0 on broadcast dims. */
static kiln_status broadcast_to(cpu_kernel_ctx *ctx, const rt_tensor *x, int32_t r, const int64_t *d, rt_value *outputs,
                                int32_t n_out) {
    rt_tensor *y = NULL;
    kiln_status st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st != KILN_OK) return st;
    int64_t xs[RT_MAX_RANK], ss[RT_MAX_RANK], ds[RT_MAX_RANK];
    cpu_contiguous_strides(x->rank, x->dims, xs);
    for (int32_t i = 0; i < r; i++) {
        int32_t j = i - (r - x->rank);
        ss[i] = (j < 0 || x->dims[j] == 1) ? 0 : xs[j];
    }
    cpu_contiguous_strides(r, d, ds);
    cpu_strided_copy(ctx->pool, cpu_elem_size(x->dtype), r, d, y->data, ds, x->data, ss);
    return cpu_strings_own(ctx, y);
}

KERNEL(Expand) {
    const rt_tensor *x, *s;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &s);
    if (st == KILN_OK) st = movable(ctx, x);
    if (st != KILN_OK) return st;
    int64_t shape[RT_MAX_RANK], d[RT_MAX_RANK];
    int32_t ns, r;
    st = cpu_read_ints(ctx, s, "shape", shape, RT_MAX_RANK, &ns);
    if (st == KILN_OK) st = cpu_bcast_shape(ctx, x->rank, x->dims, ns, shape, &r, d);
    if (st != KILN_OK) return st;
    return broadcast_to(ctx, x, r, d, outputs, n_out);
}

KERNEL(Tile) {
    const rt_tensor *x, *rep;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &rep);
    if (st == KILN_OK) st = movable(ctx, x);
    if (st != KILN_OK) return st;
    int64_t reps[RT_MAX_RANK];
    int32_t nr;
    st = cpu_read_ints(ctx, rep, "repeats", reps, RT_MAX_RANK, &nr);
    if (st != KILN_OK) return st;
    if (nr != x->rank)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "repeats has %d entries but the input has rank %d", (int)nr,
                               (int)x->rank);
    int32_t r = x->rank;
    int64_t d[RT_MAX_RANK];
    for (int32_t i = 0; i < r; i++) {
        if (reps[i] < 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "repeats[%d] is negative", (int)i);
        if (__builtin_mul_overflow(x->dims[i], reps[i], &d[i]))
            return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "output dimension %d overflows", (int)i);
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st != KILN_OK || !y->count) return st;
    /* view the output as [rep0, dim0, rep1, dim1, ...]: the source ignores the rep index */
    int64_t xs[RT_MAX_RANK], ys[RT_MAX_RANK];
    int64_t vd[CPU_COPY_MAX_RANK], vds[CPU_COPY_MAX_RANK], vss[CPU_COPY_MAX_RANK];
    cpu_contiguous_strides(r, x->dims, xs);
    cpu_contiguous_strides(r, d, ys);
    for (int32_t i = 0; i < r; i++) {
        vd[2 * i] = reps[i];
        vds[2 * i] = x->dims[i] * ys[i];
        vss[2 * i] = 0;
        vd[2 * i + 1] = x->dims[i];
        vds[2 * i + 1] = ys[i];
        vss[2 * i + 1] = xs[i];
    }
    cpu_strided_copy(ctx->pool, cpu_elem_size(x->dtype), 2 * r, vd, y->data, vds, x->data, vss);
    return cpu_strings_own(ctx, y);
}

/* ---- DepthToSpace / SpaceToDepth ---------------------------------------------------- */

static kiln_status depth_space(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out, bool to_space) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = movable(ctx, x);
    if (st != KILN_OK) return st;
    if (x->rank != 4) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must be 4-D, got rank %d", (int)x->rank);
    int64_t b = ir_node_attr_int(ctx->node, "blocksize", 0);
    if (b <= 0 || b > (1 << 20)) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "blocksize must be positive");
    const ir_attr *ma = ir_node_attr(ctx->node, "mode");
    bool crd = ma && ma->type == IR_ATTR_STRING && ma->s.len == 3 && !memcmp(ma->s.data, "CRD", 3);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t vd[6], vs[6], ys[6], od[4];
    if (to_space) {
        if (C % (b * b)) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "channels %" PRId64 " are not divisible by blocksize^2", C);
        int64_t c2 = C / (b * b);
        od[0] = N, od[1] = c2, od[2] = H * b, od[3] = W * b;
        /* output walk: [N, c2, H, b1, W, b2]; source channel = DCR: (b1*b + b2)*c2 + c, CRD: c*b*b + b1*b + b2 */
        int64_t HW = H * W;
        vd[0] = N, vd[1] = c2, vd[2] = H, vd[3] = b, vd[4] = W, vd[5] = b;
        vs[0] = C * HW, vs[2] = W, vs[4] = 1;
        if (crd) vs[1] = b * b * HW, vs[3] = b * HW, vs[5] = HW;
        else vs[1] = HW, vs[3] = b * c2 * HW, vs[5] = c2 * HW;
    } else {
        if (H % b || W % b) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "H and W must be divisible by blocksize");
        int64_t h2 = H / b, w2 = W / b;
        od[0] = N, od[1] = C * b * b, od[2] = h2, od[3] = w2;
        /* output walk: [N, b1, b2, C, h2, w2]; source (n, c, h2*b + b1, w2*b + b2) */
        vd[0] = N, vd[1] = b, vd[2] = b, vd[3] = C, vd[4] = h2, vd[5] = w2;
        vs[0] = C * H * W, vs[1] = W, vs[2] = 1, vs[3] = H * W, vs[4] = b * W, vs[5] = b;
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, 4, od, &y);
    if (st != KILN_OK) return st;
    cpu_contiguous_strides(6, vd, ys);
    cpu_strided_copy(ctx->pool, cpu_elem_size(x->dtype), 6, vd, y->data, ys, x->data, vs);
    return cpu_strings_own(ctx, y);
}

KERNEL(DepthToSpace) { return depth_space(ctx, inputs, n_in, outputs, n_out, true); }
KERNEL(SpaceToDepth) { return depth_space(ctx, inputs, n_in, outputs, n_out, false); }
