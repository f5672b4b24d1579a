/* cuda_ops_run.c - running elementwise, data-movement, normalisation, pooling and
 * reduction nodes on the GPU through cuda_kernels.cu (see cuda_internal.h).
 *
 * Each run function computes the output shape on the host from the input tensors'
 * metadata (shape-like arguments are host tensors, see cuda_ops.c), allocates the
 * output on the device and enqueues one kernel on the backend's stream. Shapes are
 * validated here with messages naming the node, as the CPU kernels do.
 */
#include <cuda_runtime.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_layout.h"
#include "core/dtype.h"

static const rt_tensor *in_t(const rt_node_call *call, int32_t k) {
    return call->n_in > k && call->inputs[k] ? &call->inputs[k]->t : NULL;
}
#define IN(k) in_t(call, (k))

static int elem_size(kiln_dtype t) { return kiln_dtype_bits(t) / 8; }

/* float16 storage (FP16 activations, build/passes/precision_fp16.c): the kernels take a
 * `half` flag; math stays float32 inside them */
static int is_half(const rt_tensor *t) { return t->dtype == KILN_DTYPE_FLOAT16; }

/* A host scalar bound (Clip's min/max) in float32 or float16. */
static bool host_scalar(const rt_tensor *t, float *out) {
    if (!t || t->count != 1) return false;
    if (t->dtype == KILN_DTYPE_FLOAT) {
        memcpy(out, t->data, 4);
        return true;
    }
    if (t->dtype == KILN_DTYPE_FLOAT16) {
        uint16_t h;
        memcpy(&h, t->data, 2);
        *out = kiln_fp16_to_fp32(h);
        return true;
    }
    return false;
}

static kiln_status check_rank(rt_node_call *call, int32_t rank) {
    if (rank > CUDA_K_MAX_RANK)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "rank %d is over the GPU kernels' %d", (int)rank,
                              CUDA_K_MAX_RANK);
    return KILN_OK;
}

/* ---- elementwise ---- */

kiln_status cuda_run_unary(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *x = IN(0);
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, x->dims, &y, call->err);
    if (st != KILN_OK) return st;
    int op;
    float a = 0, b = 0;
    if (!strcmp(n->op_type, "Gelu")) {
        const ir_attr *ap = ir_node_attr(n, "approximate");
        op = ap && ap->s.len == 4 && !memcmp(ap->s.data, "tanh", 4) ? CU_GELU_TANH : CU_GELU_ERF;
    } else {
        op = cuda_act_code(n->op_type);
    }
    if (op == CU_CLIP) {
        a = -INFINITY;
        b = INFINITY;
        if (n->opset > 0 && n->opset < 11) {
            a = ir_node_attr_float(n, "min", -INFINITY);
            b = ir_node_attr_float(n, "max", INFINITY);
        } else {
            const rt_tensor *lo = IN(1), *hi = IN(2);
            (void)host_scalar(lo, &a);
            (void)host_scalar(hi, &b);
        }
    } else if (op == CU_LEAKY) {
        a = ir_node_attr_float(n, "alpha", 0.01f);
    } else if (op == CU_HSIGMOID) {
        a = ir_node_attr_float(n, "alpha", 0.2f);
        b = ir_node_attr_float(n, "beta", 0.5f);
    } else if (op == CU_ELU) {
        a = ir_node_attr_float(n, "alpha", 1.0f);
    }
    if (op == CU_COPY) {
        if (x->nbytes)
            return cuda_fail(call, cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, c->stream),
                             "copy");
        return KILN_OK;
    }
    return cuda_fail(call, cuda_k_unary(is_half(x), op, x->data, y->data, (int64_t)x->count, a, b, c->stream), "unary kernel");
}

static bool same_shape(const rt_tensor *a, const rt_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

static kiln_status bcast_setup(rt_node_call *call, const rt_tensor *const *ops, int n_ops, int64_t *out, int32_t *rank,
                               cuda_bcast *bc) {
    int32_t r = ops[0]->rank;
    memcpy(out, ops[0]->dims, sizeof(int64_t) * (size_t)r);
    for (int k = 1; k < n_ops; k++) {
        int64_t tmp[RT_MAX_RANK];
        int32_t tr;
        if (!cuda_bcast_shape(out, r, ops[k]->dims, ops[k]->rank, tmp, &tr))
            return cuda_node_fail(call, KILN_ERR_SHAPE, "operand shapes do not broadcast");
        memcpy(out, tmp, sizeof(int64_t) * (size_t)tr);
        r = tr;
    }
    kiln_status st = check_rank(call, r);
    if (st != KILN_OK) return st;
    *rank = r;
    memset(bc, 0, sizeof *bc);
    bc->rank = r;
    for (int32_t i = 0; i < r; i++) bc->dims[i] = out[i];
    for (int k = 0; k < n_ops; k++) cuda_bcast_strides(ops[k]->dims, ops[k]->rank, out, r, bc->str[k]);
    cuda_bcast_simplify(bc, n_ops);
    return KILN_OK;
}

kiln_status cuda_run_binary(cuda_ctx *c, rt_node_call *call) {
    static const struct { const char *n; int op; } map[] = {{"Add", CB_ADD}, {"Sub", CB_SUB}, {"Mul", CB_MUL},
                                                           {"Div", CB_DIV}, {"Pow", CB_POW}, {"Max", CB_MAX},
                                                           {"Min", CB_MIN}};
    int op = CB_ADD;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i].n, call->node->op_type)) op = map[i].op;
    const rt_tensor *ops[2] = {IN(0), IN(1)};
    if (ops[0]->dtype != ops[1]->dtype)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "operands differ in dtype (%s vs %s)", kiln_dtype_name(ops[0]->dtype),
                              kiln_dtype_name(ops[1]->dtype));
    int64_t out[RT_MAX_RANK];
    int32_t r = 0;
    cuda_bcast bc;
    kiln_status st = bcast_setup(call, ops, 2, out, &r, &bc);
    if (st != KILN_OK) return st;
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], ops[0]->dtype, r, out, &y, call->err);
    if (st != KILN_OK) return st;
    int contiguous = same_shape(ops[0], ops[1]);
    return cuda_fail(call, cuda_k_binary(is_half(ops[0]), op, ops[0]->data, ops[1]->data, y->data, (int64_t)y->count, &bc, contiguous,
                                         c->stream),
                     "binary kernel");
}

kiln_status cuda_run_where(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *ops[3] = {IN(0), IN(1), IN(2)};
    int64_t out[RT_MAX_RANK];
    int32_t r = 0;
    cuda_bcast bc;
    kiln_status st = bcast_setup(call, ops, 3, out, &r, &bc);
    if (st != KILN_OK) return st;
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], ops[1]->dtype, r, out, &y, call->err);
    if (st != KILN_OK) return st;
    if (ops[1]->dtype != ops[2]->dtype)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "X and Y differ in dtype");
    return cuda_fail(call, cuda_k_where(ops[0]->data, ops[1]->data, ops[2]->data, y->data, elem_size(ops[1]->dtype),
                                        (int64_t)y->count, &bc, c->stream),
                     "where kernel");
}

/* ---- data movement ---- */

static kiln_status copy_to_shape(cuda_ctx *c, rt_node_call *call, const rt_tensor *x, int32_t rank,
                                 const int64_t *dims) {
    uint64_t cnt = 1;
    for (int32_t i = 0; i < rank; i++) cnt *= (uint64_t)dims[i];
    if (cnt != x->count)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "cannot reshape %" PRIu64 " elements to %" PRIu64, x->count, cnt);
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, rank, dims, &y, call->err);
    if (st != KILN_OK || !x->nbytes) return st;
    return cuda_fail(call, cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, c->stream), "copy");
}

kiln_status cuda_run_reshape(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *x = IN(0);
    int64_t dims[RT_MAX_RANK];
    int32_t r = 0;
    if (!strcmp(n->op_type, "Flatten")) {
        int64_t axis = ir_node_attr_int(n, "axis", 1);
        if (axis < 0) axis += x->rank;
        if (axis < 0 || axis > x->rank) return cuda_node_fail(call, KILN_ERR_SHAPE, "axis out of range");
        int64_t a = 1, b = 1;
        for (int32_t i = 0; i < x->rank; i++) *(i < axis ? &a : &b) *= x->dims[i];
        dims[0] = a, dims[1] = b;
        return copy_to_shape(c, call, x, 2, dims);
    }
    if (!strcmp(n->op_type, "Reshape")) {
        int64_t sh[RT_MAX_RANK];
        int32_t ns = 0;
        if (!cuda_host_i64s(call->inputs[1], sh, RT_MAX_RANK, &ns))
            return cuda_node_fail(call, KILN_ERR_SHAPE, "shape input must be a host int64 vector of rank <= %d",
                                  RT_MAX_RANK);
        bool allowzero = ir_node_attr_int(n, "allowzero", 0) != 0;
        int32_t infer = -1;
        uint64_t known = 1;
        for (int32_t i = 0; i < ns; i++) {
            int64_t d = sh[i];
            if (d == 0 && !allowzero) {
                if (i >= x->rank) return cuda_node_fail(call, KILN_ERR_SHAPE, "0 copies a missing input axis");
                d = x->dims[i];
            }
            if (d == -1) {
                if (infer >= 0) return cuda_node_fail(call, KILN_ERR_SHAPE, "more than one -1 in the shape");
                infer = i;
                d = 1;
            } else if (d < 0) {
                return cuda_node_fail(call, KILN_ERR_SHAPE, "negative dimension in the shape");
            }
            dims[i] = d;
            known *= (uint64_t)d;
        }
        if (infer >= 0) dims[infer] = known ? (int64_t)(x->count / known) : 0;
        return copy_to_shape(c, call, x, ns, dims);
    }
    /* Squeeze / Unsqueeze: axes from the attribute (opset < 13) or input 1 */
    int64_t axes[RT_MAX_RANK];
    int32_t na = 0;
    const ir_attr *aa = ir_node_attr(n, "axes");
    if (aa) {
        if (aa->n > RT_MAX_RANK) return cuda_node_fail(call, KILN_ERR_SHAPE, "too many axes");
        for (int32_t i = 0; i < aa->n; i++) axes[i] = aa->ints[i];
        na = aa->n;
    } else if (call->n_in > 1 && call->inputs[1]) {
        if (!cuda_host_i64s(call->inputs[1], axes, RT_MAX_RANK, &na))
            return cuda_node_fail(call, KILN_ERR_SHAPE, "axes must be a host int64 vector");
    }
    if (!strcmp(n->op_type, "Squeeze")) {
        bool drop[RT_MAX_RANK] = {0};
        for (int32_t i = 0; i < na; i++) {
            int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
            if (a < 0 || a >= x->rank || x->dims[a] != 1)
                return cuda_node_fail(call, KILN_ERR_SHAPE, "axis %" PRId64 " cannot be squeezed", axes[i]);
            drop[a] = true;
        }
        for (int32_t i = 0; i < x->rank; i++)
            if (!(na ? drop[i] : x->dims[i] == 1)) dims[r++] = x->dims[i];
        return copy_to_shape(c, call, x, r, dims);
    }
    int32_t orank = x->rank + na;
    if (orank > RT_MAX_RANK) return cuda_node_fail(call, KILN_ERR_LIMIT, "rank too large");
    bool ins[RT_MAX_RANK] = {0};
    for (int32_t i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + orank : axes[i];
        if (a < 0 || a >= orank || ins[a]) return cuda_node_fail(call, KILN_ERR_SHAPE, "bad unsqueeze axes");
        ins[a] = true;
    }
    for (int32_t i = 0, j = 0; i < orank; i++) dims[i] = ins[i] ? 1 : x->dims[j++];
    return copy_to_shape(c, call, x, orank, dims);
}

static void row_major_strides(const int64_t *dims, int32_t r, int64_t *str) {
    int64_t s = 1;
    for (int32_t i = r - 1; i >= 0; i--) {
        str[i] = s;
        s *= dims[i];
    }
}

kiln_status cuda_run_transpose(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    kiln_status st = check_rank(call, x->rank);
    if (st != KILN_OK) return st;
    int64_t perm[RT_MAX_RANK];
    const ir_attr *pa = ir_node_attr(call->node, "perm");
    for (int32_t i = 0; i < x->rank; i++) perm[i] = pa && pa->n == x->rank ? pa->ints[i] : x->rank - 1 - i;
    int64_t in_str[RT_MAX_RANK], dims[RT_MAX_RANK];
    row_major_strides(x->dims, x->rank, in_str);
    cuda_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = x->rank;
    for (int32_t i = 0; i < x->rank; i++) {
        if (perm[i] < 0 || perm[i] >= x->rank) return cuda_node_fail(call, KILN_ERR_SHAPE, "bad perm");
        dims[i] = nd.dims[i] = x->dims[perm[i]];
        nd.in_str[i] = in_str[perm[i]];
    }
    row_major_strides(dims, x->rank, nd.out_str);
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, dims, &y, call->err);
    if (st != KILN_OK || y->count == 0) return st;
    /* layout conversions (NCHW <-> NHWC) are batched 2-D transposes: the tiled kernel
     * (cuda_layout.cu); moving only size-1 axes is a copy */
    int64_t nb = 0, rows = 0, cols = 0;
    int kind = cuda_perm_classify(x->rank, x->dims, perm, &nb, &rows, &cols);
    if (kind == CUDA_PERM_COPY)
        return cuda_fail(call, (int)cudaMemcpyAsync(y->data, x->data, (size_t)x->nbytes, cudaMemcpyDeviceToDevice,
                                                    (cudaStream_t)c->stream),
                         "transpose copy");
    if (kind == CUDA_PERM_BATCHED && (rows + 31) / 32 <= 65535)
        return cuda_fail(call, cuda_k_transpose_batched(x->data, y->data, elem_size(x->dtype), nb, rows, cols, c->stream),
                         "transpose kernel");
    return cuda_fail(call, cuda_k_copy_nd(x->data, y->data, elem_size(x->dtype), (int64_t)y->count, &nd, c->stream),
                     "transpose kernel");
}

kiln_status cuda_run_concat(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x0 = IN(0);
    int64_t axis = ir_node_attr_int(call->node, "axis", 0);
    if (axis < 0) axis += x0->rank;
    if (axis < 0 || axis >= x0->rank) return cuda_node_fail(call, KILN_ERR_SHAPE, "axis out of range");
    kiln_status st = check_rank(call, x0->rank);
    if (st != KILN_OK) return st;
    int64_t dims[RT_MAX_RANK];
    memcpy(dims, x0->dims, sizeof dims);
    dims[axis] = 0;
    for (int32_t k = 0; k < call->n_in; k++) {
        const rt_tensor *x = IN(k);
        if (!x || x->rank != x0->rank || x->dtype != x0->dtype)
            return cuda_node_fail(call, KILN_ERR_SHAPE, "inputs differ in rank or dtype");
        for (int32_t i = 0; i < x->rank; i++)
            if (i != axis && x->dims[i] != x0->dims[i])
                return cuda_node_fail(call, KILN_ERR_SHAPE, "inputs differ outside the concat axis");
        dims[axis] += x->dims[axis];
    }
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], x0->dtype, x0->rank, dims, &y, call->err);
    if (st != KILN_OK) return st;
    int64_t out_str[RT_MAX_RANK];
    row_major_strides(dims, x0->rank, out_str);
    int64_t off = 0;
    for (int32_t k = 0; k < call->n_in; k++) {
        const rt_tensor *x = IN(k);
        cuda_nd nd;
        memset(&nd, 0, sizeof nd);
        nd.rank = x->rank;
        memcpy(nd.dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        row_major_strides(x->dims, x->rank, nd.in_str);
        memcpy(nd.out_str, out_str, sizeof(int64_t) * (size_t)x->rank);
        nd.out_off = off * out_str[axis];
        off += x->dims[axis];
        st = cuda_fail(call, cuda_k_copy_nd(x->data, y->data, elem_size(x->dtype), (int64_t)x->count, &nd, c->stream),
                       "concat kernel");
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status cuda_run_slice(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    kiln_status st = check_rank(call, x->rank);
    if (st != KILN_OK) return st;
    int64_t starts[RT_MAX_RANK], ends[RT_MAX_RANK], axes[RT_MAX_RANK], steps[RT_MAX_RANK];
    int32_t ns = 0, ne = 0, na = 0, nst = 0;
    if (call->node->opset > 0 && call->node->opset < 10) {
        const ir_attr *s = ir_node_attr(call->node, "starts"), *e = ir_node_attr(call->node, "ends"),
                      *a = ir_node_attr(call->node, "axes");
        if (!s || !e || s->n > RT_MAX_RANK || e->n != s->n) return cuda_node_fail(call, KILN_ERR_SHAPE, "bad starts/ends");
        ns = ne = s->n;
        memcpy(starts, s->ints, sizeof(int64_t) * (size_t)ns);
        memcpy(ends, e->ints, sizeof(int64_t) * (size_t)ne);
        if (a) {
            if (a->n != ns) return cuda_node_fail(call, KILN_ERR_SHAPE, "bad axes");
            na = a->n;
            memcpy(axes, a->ints, sizeof(int64_t) * (size_t)na);
        }
    } else {
        if (!cuda_host_i64s(call->inputs[1], starts, RT_MAX_RANK, &ns) ||
            !cuda_host_i64s(call->inputs[2], ends, RT_MAX_RANK, &ne) || ns != ne)
            return cuda_node_fail(call, KILN_ERR_SHAPE, "starts/ends must be host integer vectors of one length");
        if (call->n_in > 3 && call->inputs[3] && (!cuda_host_i64s(call->inputs[3], axes, RT_MAX_RANK, &na) || na != ns))
            return cuda_node_fail(call, KILN_ERR_SHAPE, "bad axes");
        if (call->n_in > 4 && call->inputs[4] &&
            (!cuda_host_i64s(call->inputs[4], steps, RT_MAX_RANK, &nst) || nst != ns))
            return cuda_node_fail(call, KILN_ERR_SHAPE, "bad steps");
    }
    int64_t st_ax[RT_MAX_RANK], step_ax[RT_MAX_RANK], dims[RT_MAX_RANK];
    for (int32_t i = 0; i < x->rank; i++) st_ax[i] = 0, step_ax[i] = 1, dims[i] = x->dims[i];
    bool seen[RT_MAX_RANK] = {0};
    for (int32_t i = 0; i < ns; i++) {
        int64_t a = na ? axes[i] : i;
        if (a < 0) a += x->rank;
        if (a < 0 || a >= x->rank || seen[a]) return cuda_node_fail(call, KILN_ERR_SHAPE, "bad axes");
        seen[a] = true;
        int64_t step = nst ? steps[i] : 1, d = x->dims[a];
        if (step == 0) return cuda_node_fail(call, KILN_ERR_SHAPE, "step 0");
        int64_t s = starts[i], e = ends[i];
        if (s < 0) s += d;
        if (e < 0) e += d;
        if (step > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            dims[a] = e > s ? (e - s + step - 1) / step : 0;
        } else {
            s = s < 0 ? -1 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            dims[a] = s > e ? (s - e + (-step) - 1) / (-step) : 0;
        }
        st_ax[a] = s;
        step_ax[a] = step;
    }
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, dims, &y, call->err);
    if (st != KILN_OK || !y->count) return st;
    int64_t in_str[RT_MAX_RANK];
    row_major_strides(x->dims, x->rank, in_str);
    cuda_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = x->rank;
    for (int32_t i = 0; i < x->rank; i++) {
        nd.dims[i] = dims[i];
        nd.in_str[i] = in_str[i] * step_ax[i];
        nd.in_off += st_ax[i] * in_str[i];
    }
    row_major_strides(dims, x->rank, nd.out_str);
    return cuda_fail(call, cuda_k_copy_nd(x->data, y->data, elem_size(x->dtype), (int64_t)y->count, &nd, c->stream),
                     "slice kernel");
}

kiln_status cuda_run_expand(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    int64_t sh[RT_MAX_RANK];
    int32_t ns = 0;
    if (!cuda_host_i64s(call->inputs[1], sh, RT_MAX_RANK, &ns))
        return cuda_node_fail(call, KILN_ERR_SHAPE, "shape must be a host int64 vector");
    int64_t out[RT_MAX_RANK];
    int32_t r = 0;
    if (!cuda_bcast_shape(x->dims, x->rank, sh, ns, out, &r))
        return cuda_node_fail(call, KILN_ERR_SHAPE, "shape does not broadcast");
    kiln_status st = check_rank(call, r);
    if (st != KILN_OK) return st;
    rt_tensor *y;
    st = cuda_out(c, &call->outputs[0], x->dtype, r, out, &y, call->err);
    if (st != KILN_OK) return st;
    cuda_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = r;
    memcpy(nd.dims, out, sizeof(int64_t) * (size_t)r);
    cuda_bcast_strides(x->dims, x->rank, out, r, nd.in_str);
    row_major_strides(out, r, nd.out_str);
    return cuda_fail(call, cuda_k_copy_nd(x->data, y->data, elem_size(x->dtype), (int64_t)y->count, &nd, c->stream),
                     "expand kernel");
}

kiln_status cuda_run_gather(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0), *idx = IN(1);
    int64_t axis = ir_node_attr_int(call->node, "axis", 0);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return cuda_node_fail(call, KILN_ERR_SHAPE, "axis out of range");
    int32_t r = x->rank - 1 + idx->rank;
    if (r > RT_MAX_RANK) return cuda_node_fail(call, KILN_ERR_LIMIT, "rank too large");
    int64_t dims[RT_MAX_RANK], outer = 1, inner = 1;
    int32_t j = 0;
    for (int32_t i = 0; i < axis; i++) dims[j++] = x->dims[i], outer *= x->dims[i];
    for (int32_t i = 0; i < idx->rank; i++) dims[j++] = idx->dims[i];
    for (int32_t i = (int32_t)axis + 1; i < x->rank; i++) dims[j++] = x->dims[i], inner *= x->dims[i];
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, r, dims, &y, call->err);
    if (st != KILN_OK) return st;
    return cuda_fail(call, cuda_k_gather(x->data, idx->data, idx->dtype == KILN_DTYPE_INT64, y->data,
                                         elem_size(x->dtype), outer, x->dims[axis], (int64_t)idx->count, inner,
                                         c->stream),
                     "gather kernel");
}

static int dtype_code(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return CD_F32;
    case KILN_DTYPE_FLOAT16: return CD_F16;
    case KILN_DTYPE_INT64: return CD_I64;
    case KILN_DTYPE_INT32: return CD_I32;
    case KILN_DTYPE_BOOL: return CD_BOOL;
    case KILN_DTYPE_DOUBLE: return CD_F64;
    default: return -1;
    }
}

kiln_status cuda_run_cast(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    kiln_dtype to = (kiln_dtype)ir_node_attr_int(call->node, "to", 0);
    int s = dtype_code(x->dtype), d = dtype_code(to);
    if (s < 0 || d < 0) return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "cast pair not on the GPU");
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], to, x->rank, x->dims, &y, call->err);
    if (st != KILN_OK) return st;
    return cuda_fail(call, cuda_k_cast(x->data, s, y->data, d, (int64_t)x->count, c->stream), "cast kernel");
}

/* ---- normalisation, pooling, reductions ---- */

kiln_status cuda_run_softmax(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    int64_t axis = ir_node_attr_int(call->node, "axis", call->node->opset >= 13 ? -1 : 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || (x->rank > 0 && axis >= x->rank)) return cuda_node_fail(call, KILN_ERR_SHAPE, "axis out of range");
    if (call->node->opset >= 13 && axis != x->rank - 1)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "only the last axis on the GPU");
    int64_t rows = 1, cols = 1;
    for (int32_t i = 0; i < x->rank; i++) *(i < axis ? &rows : &cols) *= x->dims[i];
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, x->dims, &y, call->err);
    if (st != KILN_OK) return st;
    return cuda_fail(call, cuda_k_softmax(is_half(x), x->data, y->data, rows, cols, !strcmp(call->node->op_type, "LogSoftmax"),
                                          c->stream),
                     "softmax kernel");
}

kiln_status cuda_run_layernorm(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0), *g = IN(1), *b = IN(2);
    int64_t axis = ir_node_attr_int(call->node, "axis", -1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return cuda_node_fail(call, KILN_ERR_SHAPE, "axis out of range");
    int64_t rows = 1, cols = 1;
    for (int32_t i = 0; i < x->rank; i++) *(i < axis ? &rows : &cols) *= x->dims[i];
    if (!g || (int64_t)g->count != cols || (b && (int64_t)b->count != cols) || g->dtype != x->dtype ||
        (b && b->dtype != x->dtype))
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED,
                              "scale/bias must cover the normalised axes exactly, in the input's dtype, on the GPU");
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, x->dims, &y, call->err);
    if (st != KILN_OK) return st;
    return cuda_fail(call, cuda_k_layernorm(is_half(x), x->data, g->data, b ? b->data : NULL, y->data, rows, cols,
                                            ir_node_attr_float(call->node, "epsilon", 1e-5f), c->stream),
                     "layernorm kernel");
}

kiln_status cuda_run_batchnorm(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    if (x->rank < 2) return cuda_node_fail(call, KILN_ERR_SHAPE, "input needs N and C axes");
    int64_t C = x->dims[1], hw = 1;
    for (int32_t i = 2; i < x->rank; i++) hw *= x->dims[i];
    for (int k = 1; k <= 4; k++)
        if (!IN(k) || (int64_t)IN(k)->count != C || IN(k)->dtype != x->dtype)
            return cuda_node_fail(call, KILN_ERR_SHAPE, "parameters must be [C] in the input's dtype");
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, x->dims, &y, call->err);
    if (st != KILN_OK) return st;
    return cuda_fail(call, cuda_k_batchnorm(is_half(x), x->data, IN(1)->data, IN(2)->data, IN(3)->data, IN(4)->data, y->data,
                                            x->dims[0], C, hw, ir_node_attr_float(call->node, "epsilon", 1e-5f),
                                            c->stream),
                     "batchnorm kernel");
}

static int64_t attr_at(const ir_attr *a, int32_t i, int64_t dflt) { return a && i < a->n ? a->ints[i] : dflt; }

kiln_status cuda_run_pool(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *x = IN(0);
    if (x->rank != 4) return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "only 2-D pooling on the GPU");
    bool nhwc = cuda_node_nhwc(n); /* channels-last: x [N, H, W, C] */
    const ir_attr *ks = ir_node_attr(n, "kernel_shape"), *sa = ir_node_attr(n, "strides"),
                  *pa = ir_node_attr(n, "pads"), *da = ir_node_attr(n, "dilations");
    int64_t kh = attr_at(ks, 0, 1), kw = attr_at(ks, 1, 1), sh = attr_at(sa, 0, 1), sw = attr_at(sa, 1, 1);
    int64_t pt = attr_at(pa, 0, 0), pl = attr_at(pa, 1, 0), pb = attr_at(pa, 2, 0), pr = attr_at(pa, 3, 0);
    int64_t dh = attr_at(da, 0, 1), dw = attr_at(da, 1, 1);
    bool ceil_mode = ir_node_attr_int(n, "ceil_mode", 0) != 0;
    int64_t H = nhwc ? x->dims[1] : x->dims[2], W = nhwc ? x->dims[2] : x->dims[3];
    int64_t eh = (kh - 1) * dh + 1, ew = (kw - 1) * dw + 1;
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || H + pt + pb < eh || W + pl + pr < ew)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "kernel larger than the padded input or bad attributes");
    int64_t nh = H + pt + pb - eh, nw = W + pl + pr - ew;
    int64_t oh = (ceil_mode ? (nh + sh - 1) / sh : nh / sh) + 1, ow = (ceil_mode ? (nw + sw - 1) / sw : nw / sw) + 1;
    /* ceil mode: a last window that starts in the right/bottom padding is dropped */
    if (ceil_mode && (oh - 1) * sh >= H + pt) oh--;
    if (ceil_mode && (ow - 1) * sw >= W + pl) ow--;
    int64_t dims[4] = {x->dims[0], x->dims[1], oh, ow};
    if (nhwc) dims[1] = oh, dims[2] = ow, dims[3] = x->dims[3];
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, 4, dims, &y, call->err);
    if (st != KILN_OK) return st;
    bool is_max = !strcmp(n->op_type, "MaxPool");
    if (nhwc)
        return cuda_fail(call, cuda_k_pool2d_nhwc(is_half(x), x->data, y->data, x->dims[0], x->dims[3], H, W, oh, ow,
                                                  (int)kh, (int)kw, (int)sh, (int)sw, (int)pt, (int)pl, (int)dh, (int)dw,
                                                  is_max, (int)ir_node_attr_int(n, "count_include_pad", 0), c->stream),
                         "pool kernel");
    return cuda_fail(call, cuda_k_pool2d(is_half(x), x->data, y->data, x->dims[0] * x->dims[1], H, W, oh, ow, (int)kh, (int)kw,
                                         (int)sh, (int)sw, (int)pt, (int)pl, (int)dh, (int)dw, is_max,
                                         (int)ir_node_attr_int(n, "count_include_pad", 0), c->stream),
                     "pool kernel");
}

/* kiln.nhwc NchwToNhwc (a padded stem's input, build/passes/layout_nhwc.c):
 * x [N, C, H, W] -> y [N, H, W, channels] in `to` (default x's dtype), zeros above C. */
kiln_status cuda_run_nchw_to_nhwc(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    if (x->rank != 4 || (x->dtype != KILN_DTYPE_FLOAT && x->dtype != KILN_DTYPE_FLOAT16))
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "NchwToNhwc takes a 4-D float32/float16 tensor");
    int64_t cp = ir_node_attr_int(call->node, "channels", x->dims[1]);
    kiln_dtype to = (kiln_dtype)ir_node_attr_int(call->node, "to", x->dtype);
    if (cp < x->dims[1] || cp > ((int64_t)1 << 24) || (to != KILN_DTYPE_FLOAT && to != KILN_DTYPE_FLOAT16))
        return cuda_node_fail(call, KILN_ERR_SHAPE, "NchwToNhwc: channels below the input's or a non-float 'to'");
    int64_t dims[4] = {x->dims[0], x->dims[2], x->dims[3], cp};
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], to, 4, dims, &y, call->err);
    if (st != KILN_OK) return st;
    return cuda_fail(call, cuda_k_nchw_to_nhwc(x->data, is_half(x), y->data, to == KILN_DTYPE_FLOAT16, x->dims[0],
                                               x->dims[1], x->dims[2] * x->dims[3], cp, c->stream),
                     "NCHW to NHWC kernel");
}

kiln_status cuda_run_global_pool(cuda_ctx *c, rt_node_call *call) {
    const rt_tensor *x = IN(0);
    if (cuda_node_nhwc(call->node)) { /* [N, H, W, C] -> [N, 1, 1, C]: a reduction over the middle axis */
        if (x->rank != 4) return cuda_node_fail(call, KILN_ERR_SHAPE, "channels-last input must be 4-D");
        int64_t d[4] = {x->dims[0], 1, 1, x->dims[3]};
        rt_tensor *y;
        kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, 4, d, &y, call->err);
        if (st != KILN_OK) return st;
        return cuda_fail(call, cuda_k_reduce_mid(is_half(x), x->data, y->data, x->dims[0], x->dims[1] * x->dims[2],
                                                 x->dims[3], !strcmp(call->node->op_type, "GlobalMaxPool") ? 2 : 0,
                                                 c->stream),
                         "global pool kernel");
    }
    int64_t dims[RT_MAX_RANK], hw = 1;
    for (int32_t i = 0; i < x->rank; i++) {
        dims[i] = i < 2 ? x->dims[i] : 1;
        if (i >= 2) hw *= x->dims[i];
    }
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, dims, &y, call->err);
    if (st != KILN_OK) return st;
    return cuda_fail(call, cuda_k_reduce_rows(is_half(x), x->data, y->data, x->dims[0] * x->dims[1], hw,
                                              !strcmp(call->node->op_type, "GlobalMaxPool") ? 2 : 0, c->stream),
                     "global pool kernel");
}

kiln_status cuda_run_reduce(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *x = IN(0);
    int op = !strcmp(n->op_type, "ReduceMean") ? 0 : !strcmp(n->op_type, "ReduceSum") ? 1
             : !strcmp(n->op_type, "ReduceMax") ? 2 : 3;
    int64_t axes[RT_MAX_RANK];
    int32_t na = 0;
    const ir_attr *aa = ir_node_attr(n, "axes");
    if (aa) {
        if (aa->n > RT_MAX_RANK) return cuda_node_fail(call, KILN_ERR_SHAPE, "too many axes");
        for (int32_t i = 0; i < aa->n; i++) axes[i] = aa->ints[i];
        na = aa->n;
    } else if (call->n_in > 1 && call->inputs[1]) {
        if (!cuda_host_i64s(call->inputs[1], axes, RT_MAX_RANK, &na))
            return cuda_node_fail(call, KILN_ERR_SHAPE, "axes must be a host int64 vector");
    }
    bool keep = ir_node_attr_int(n, "keepdims", 1) != 0;
    bool red[RT_MAX_RANK] = {0};
    if (na == 0) {
        if (ir_node_attr_int(n, "noop_with_empty_axes", 0)) return copy_to_shape(c, call, x, x->rank, x->dims);
        for (int32_t i = 0; i < x->rank; i++) red[i] = true;
    }
    for (int32_t i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
        if (a < 0 || a >= x->rank) return cuda_node_fail(call, KILN_ERR_SHAPE, "axis out of range");
        red[a] = true;
    }
    /* the reduced axes must be one contiguous run: [outer, r, inner] */
    int32_t first = -1, last = -1;
    for (int32_t i = 0; i < x->rank; i++)
        if (red[i] && x->dims[i] != 1) {
            if (first < 0) first = i;
            last = i;
        }
    int64_t outer = 1, r = 1, inner = 1;
    for (int32_t i = 0; i < x->rank; i++) {
        if (first >= 0 && i >= first && i <= last) {
            if (!red[i] && x->dims[i] != 1)
                return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "non-contiguous reduction axes on the GPU");
            r *= x->dims[i];
        } else if (first < 0 || i < first) {
            outer *= x->dims[i];
        } else {
            inner *= x->dims[i];
        }
    }
    int64_t dims[RT_MAX_RANK];
    int32_t orank = 0;
    for (int32_t i = 0; i < x->rank; i++)
        if (!red[i]) dims[orank++] = x->dims[i];
        else if (keep) dims[orank++] = 1;
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, orank, dims, &y, call->err);
    if (st != KILN_OK) return st;
    if (inner == 1 && op != 3) return cuda_fail(call, cuda_k_reduce_rows(is_half(x), x->data, y->data, outer, r, op, c->stream),
                                     "reduce kernel");
    return cuda_fail(call, cuda_k_reduce_mid(is_half(x), x->data, y->data, outer, r, inner, op, c->stream), "reduce kernel");
}

kiln_status cuda_run_shape(cuda_ctx *c, rt_node_call *call) {
    (void)c;
    const rt_tensor *x = IN(0);
    int64_t r = x->rank, start = ir_node_attr_int(call->node, "start", 0), end = ir_node_attr_int(call->node, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t n = end > start ? end - start : 0;
    rt_tensor *y = rt_value_as_tensor(&call->outputs[0]);
    kiln_status st = rt_tensor_alloc(y, KILN_DTYPE_INT64, 1, &n, call->err);
    if (st == KILN_OK && n) memcpy(y->data, x->dims + start, (size_t)n * sizeof(int64_t));
    return st;
}
