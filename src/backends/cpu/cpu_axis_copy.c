/* cpu_axis_copy.c - byte-level slicing and concatenation along an axis (see cpu_axis_copy.h). */
#include "backends/cpu/cpu_axis_copy.h"

#include <string.h>

static kiln_status elem_size(kiln_dtype dt, uint64_t *esz, kiln_error *err) {
    if (dt == KILN_DTYPE_STRING) {
        *esz = sizeof(ir_bytes);
        return KILN_OK;
    }
    int bits = kiln_dtype_bits(dt);
    if (bits <= 0 || bits % 8)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "cannot slice or concatenate %s tensors (sub-byte dtype)",
                            kiln_dtype_name(dt));
    *esz = (uint64_t)bits / 8;
    return KILN_OK;
}

bool cpu_norm_axis(int64_t axis, int32_t rank, int32_t *out) {
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    *out = (int32_t)axis;
    return true;
}

kiln_status cpu_copy_elems(rt_tensor *dst, uint64_t dst_off, const rt_tensor *src, uint64_t src_off, uint64_t count,
                           kiln_error *err) {
    if (!count) return KILN_OK;
    if (src->dtype == KILN_DTYPE_STRING) {
        const ir_bytes *s = src->data;
        for (uint64_t i = 0; i < count; i++) {
            kiln_status st = rt_tensor_set_string(dst, dst_off + i, s[src_off + i].data, s[src_off + i].len, err);
            if (st != KILN_OK) return st;
        }
        return KILN_OK;
    }
    uint64_t esz = 0;
    kiln_status st = elem_size(src->dtype, &esz, err);
    if (st != KILN_OK) return st;
    memcpy((char *)dst->data + dst_off * esz, (const char *)src->data + src_off * esz, (size_t)(count * esz));
    return KILN_OK;
}

kiln_status cpu_slice_axis(rt_tensor *dst, const rt_tensor *src, int32_t axis, int64_t begin, int64_t len,
                           bool keep_axis, kiln_error *err) {
    uint64_t esz = 0;
    kiln_status st = elem_size(src->dtype, &esz, err);
    if (st != KILN_OK) return st;
    if (axis < 0 || axis >= src->rank || begin < 0 || len < 0 || begin + len > src->dims[axis])
        return kiln_err_set(err, KILN_ERR_SHAPE, "slice [%lld, %lld) of axis %d is outside the tensor",
                            (long long)begin, (long long)(begin + len), (int)axis);
    int64_t dims[RT_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < src->rank; i++) {
        if (i == axis) {
            if (keep_axis) dims[r++] = len;
        } else {
            dims[r++] = src->dims[i];
        }
    }
    st = rt_tensor_alloc(dst, src->dtype, r, dims, err);
    if (st != KILN_OK) return st;
    uint64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= (uint64_t)src->dims[i];
    for (int32_t i = axis + 1; i < src->rank; i++) inner *= (uint64_t)src->dims[i];
    uint64_t axlen = (uint64_t)src->dims[axis];
    for (uint64_t o = 0; o < outer; o++) {
        st = cpu_copy_elems(dst, o * (uint64_t)len * inner, src, (o * axlen + (uint64_t)begin) * inner,
                            (uint64_t)len * inner, err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status cpu_concat_axis(rt_tensor *dst, const rt_tensor *const *parts, int32_t n, int32_t axis, bool new_axis,
                            bool reverse, kiln_error *err) {
    if (n <= 0) return kiln_err_set(err, KILN_ERR_SHAPE, "nothing to concatenate");
    const rt_tensor *p0 = parts[0];
    uint64_t esz = 0;
    kiln_status st = elem_size(p0->dtype, &esz, err);
    if (st != KILN_OK) return st;
    int32_t out_rank = p0->rank + (new_axis ? 1 : 0);
    if (axis < 0 || axis >= out_rank || out_rank > RT_MAX_RANK)
        return kiln_err_set(err, KILN_ERR_SHAPE, "axis %d is out of range for rank %d", (int)axis, (int)out_rank);
    int64_t total = 0;
    for (int32_t k = 0; k < n; k++) {
        const rt_tensor *p = parts[k];
        if (p->dtype != p0->dtype || p->rank != p0->rank)
            return kiln_err_set(err, KILN_ERR_SHAPE, "part %d is %s rank %d but part 0 is %s rank %d", (int)k,
                                kiln_dtype_name(p->dtype), (int)p->rank, kiln_dtype_name(p0->dtype), (int)p0->rank);
        for (int32_t i = 0; i < p->rank; i++)
            if ((new_axis || i != axis) && p->dims[i] != p0->dims[i]) {
                char a[256], b[256];
                return kiln_err_set(err, KILN_ERR_SHAPE, "part %d has shape %s, which does not fit part 0's %s", (int)k,
                                    rt_tensor_desc(p, a, sizeof a), rt_tensor_desc(p0, b, sizeof b));
            }
        total += new_axis ? 1 : p->dims[axis];
    }
    int64_t dims[RT_MAX_RANK];
    for (int32_t i = 0, j = 0; i < out_rank; i++) {
        if (i == axis) dims[i] = total;
        else dims[i] = p0->dims[j];
        if (i != axis || !new_axis) j++;
    }
    st = rt_tensor_alloc(dst, p0->dtype, out_rank, dims, err);
    if (st != KILN_OK) return st;
    uint64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= (uint64_t)dims[i];
    for (int32_t i = axis + 1; i < out_rank; i++) inner *= (uint64_t)dims[i];
    uint64_t pos = 0; /* position along axis */
    for (int32_t k = 0; k < n; k++) {
        const rt_tensor *p = parts[reverse ? n - 1 - k : k];
        uint64_t len = new_axis ? 1 : (uint64_t)p->dims[axis];
        for (uint64_t o = 0; o < outer; o++) {
            st = cpu_copy_elems(dst, (o * (uint64_t)total + pos) * inner, p, o * len * inner, len * inner, err);
            if (st != KILN_OK) return st;
        }
        pos += len;
    }
    return KILN_OK;
}
