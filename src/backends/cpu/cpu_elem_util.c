/* cpu_elem_util.c - shared helpers for the elementwise/shape/index kernels (see cpu_elem_util.h). */
#include "backends/cpu/cpu_elem_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t cpu_elem_size(kiln_dtype dtype) {
    if (dtype == KILN_DTYPE_STRING) return sizeof(ir_bytes);
    int bits = kiln_dtype_bits(dtype);
    if (bits < 8 || bits % 8) return 0;
    return (size_t)bits / 8;
}

void cpu_half_to_f32(kiln_dtype dtype, const uint16_t *src, float *dst, int64_t n) {
    if (dtype == KILN_DTYPE_BFLOAT16) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)src[i] << 16;
            memcpy(&dst[i], &u, 4);
        }
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = kiln_fp16_to_fp32(src[i]);
    }
}

void cpu_f32_to_half(kiln_dtype dtype, const float *src, uint16_t *dst, int64_t n) {
    if (dtype == KILN_DTYPE_BFLOAT16)
        for (int64_t i = 0; i < n; i++) dst[i] = kiln_fp32_to_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = kiln_fp32_to_fp16(src[i]);
}

int64_t cpu_f64_to_i64(double v) {
    if (v != v) return INT64_MIN;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

double cpu_load_f64(const void *data, kiln_dtype dtype, uint64_t i) {
    switch (dtype) {
#define LOAD_CASE(S, T) \
    case KILN_DTYPE_##S: return (double)((const T *)data)[i];
        CPU_NATIVE_TYPES(LOAD_CASE)
#undef LOAD_CASE
    case KILN_DTYPE_BOOL: return ((const uint8_t *)data)[i] ? 1.0 : 0.0;
    case KILN_DTYPE_FLOAT16: return kiln_fp16_to_fp32(((const uint16_t *)data)[i]);
    case KILN_DTYPE_BFLOAT16: return kiln_bf16_to_fp32(((const uint16_t *)data)[i]);
    default: return 0.0;
    }
}

int64_t cpu_load_i64(const void *data, kiln_dtype dtype, uint64_t i) {
    switch (dtype) {
#define LOAD_CASE(S, T) \
    case KILN_DTYPE_##S: return (int64_t)((const T *)data)[i];
        CPU_INT_TYPES(LOAD_CASE)
#undef LOAD_CASE
    case KILN_DTYPE_BOOL: return ((const uint8_t *)data)[i] ? 1 : 0;
    default: return cpu_f64_to_i64(cpu_load_f64(data, dtype, i));
    }
}

void cpu_store_f64(void *data, kiln_dtype dtype, uint64_t i, double v) {
    switch (dtype) {
    case KILN_DTYPE_FLOAT: ((float *)data)[i] = (float)v; break;
    case KILN_DTYPE_DOUBLE: ((double *)data)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((uint16_t *)data)[i] = kiln_fp32_to_fp16((float)v); break;
    case KILN_DTYPE_BFLOAT16: ((uint16_t *)data)[i] = kiln_fp32_to_bf16((float)v); break;
    case KILN_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0.0; break;
    case KILN_DTYPE_UINT64:
        ((uint64_t *)data)[i] = v >= 18446744073709551615.0 ? UINT64_MAX
                                : v >= 0                    ? (uint64_t)v
                                                            : (uint64_t)cpu_f64_to_i64(v);
        break;
#define STORE_CASE(S, T) \
    case KILN_DTYPE_##S: ((T *)data)[i] = (T)cpu_f64_to_i64(v); break;
        CPU_SINT_TYPES(STORE_CASE) STORE_CASE(UINT8, uint8_t) STORE_CASE(UINT16, uint16_t) STORE_CASE(UINT32, uint32_t)
#undef STORE_CASE
    default: break;
    }
}

kiln_status cpu_read_ints(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, int64_t *out, int32_t max,
                          int32_t *n_out) {
    if (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input '%s' must be int64 or int32, got %s", what,
                               kiln_dtype_name(t->dtype));
    if (t->rank > 1)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input '%s' must be 1-D, got rank %d", what, (int)t->rank);
    if (t->count > (uint64_t)max)
        return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "input '%s' has %" PRIu64 " entries; at most %d are supported",
                               what, t->count, (int)max);
    for (uint64_t i = 0; i < t->count; i++)
        out[i] = t->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
    *n_out = (int32_t)t->count;
    return KILN_OK;
}

static kiln_status scalar_check(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what) {
    if (t->count != 1)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input '%s' must hold exactly one value, it has %" PRIu64, what,
                               t->count);
    if (t->dtype == KILN_DTYPE_STRING || !cpu_elem_size(t->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "input '%s' has unsupported dtype %s", what,
                               kiln_dtype_name(t->dtype));
    return KILN_OK;
}

kiln_status cpu_read_scalar_i64(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, int64_t *out) {
    kiln_status st = scalar_check(ctx, t, what);
    if (st == KILN_OK) *out = cpu_load_i64(t->data, t->dtype, 0);
    return st;
}

kiln_status cpu_read_scalar_f64(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, double *out) {
    kiln_status st = scalar_check(ctx, t, what);
    if (st == KILN_OK) *out = cpu_load_f64(t->data, t->dtype, 0);
    return st;
}

kiln_status cpu_check_axis(cpu_kernel_ctx *ctx, int64_t axis, int32_t rank, const char *what, int32_t *out) {
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s %" PRId64 " is out of range for rank %d (valid: %d..%d)",
                               what, axis, (int)rank, -(int)rank, (int)rank - 1);
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

kiln_status cpu_need_input(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, int32_t i,
                           const rt_tensor **out) {
    *out = cpu_in(inputs, n_in, i);
    if (!*out) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input %d is missing or not a tensor", (int)i);
    return KILN_OK;
}

kiln_status cpu_alloc_out(cpu_kernel_ctx *ctx, rt_value *outputs, int32_t n_out, int32_t i, kiln_dtype dtype,
                          int32_t rank, const int64_t *dims, rt_tensor **out) {
    if (i >= n_out) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "output %d is not declared", (int)i);
    rt_tensor *t = rt_value_as_tensor(&outputs[i]);
    kiln_status st = rt_tensor_alloc(t, dtype, rank, dims, ctx->err);
    if (st != KILN_OK) {
        kiln_err_prefix(ctx->err, "node '%s' (%s): ", ctx->node ? ctx->node->name : "?",
                        ctx->node ? ctx->node->op_type : "?");
        return st;
    }
    *out = t;
    return KILN_OK;
}

kiln_status cpu_strings_own(cpu_kernel_ctx *ctx, rt_tensor *t) {
    if (t->dtype != KILN_DTYPE_STRING) return KILN_OK;
    ir_bytes *s = t->data;
    for (uint64_t i = 0; i < t->count; i++) {
        char *copy = malloc((size_t)s[i].len + 1);
        if (!copy) {
            for (uint64_t j = i; j < t->count; j++) s[j] = (ir_bytes){NULL, 0};
            return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory copying strings");
        }
        if (s[i].len) memcpy(copy, s[i].data, (size_t)s[i].len);
        copy[s[i].len] = 0;
        s[i].data = copy;
    }
    return KILN_OK;
}

kiln_status cpu_copy_reshaped(cpu_kernel_ctx *ctx, const rt_tensor *in, rt_value *outputs, int32_t n_out,
                              int32_t rank, const int64_t *dims) {
    rt_tensor *out = NULL;
    kiln_status st = cpu_alloc_out(ctx, outputs, n_out, 0, in->dtype, rank, dims, &out);
    if (st != KILN_OK) return st;
    if (out->count != in->count)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "cannot reshape %" PRIu64 " elements into %" PRIu64, in->count,
                               out->count);
    /* the executor may hand a reshape its input's own storage (a zero-copy view) */
    if (in->nbytes && out->data != in->data) memcpy(out->data, in->data, (size_t)in->nbytes);
    return cpu_strings_own(ctx, out);
}

void cpu_contiguous_strides(int32_t rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int32_t i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

const int64_t *cpu_attr_ints(const ir_node *node, const char *name, int32_t *n) {
    const ir_attr *a = node ? ir_node_attr(node, name) : NULL;
    if (!a || a->type != IR_ATTR_INTS) {
        *n = 0;
        return NULL;
    }
    *n = a->n;
    return a->ints;
}

/* ---- strided copy ------------------------------------------------------------------- */

typedef struct strided_job {
    size_t esize;
    int32_t rank; /* collapsed, >= 1; the last dim is the inner loop */
    int64_t dims[CPU_COPY_MAX_RANK];
    int64_t ds[CPU_COPY_MAX_RANK], ss[CPU_COPY_MAX_RANK];
    char *dst;
    const char *src;
} strided_job;

#define COPY_ROW(T)                                                  \
    do {                                                             \
        T *d_ = (T *)(void *)d;                                      \
        const T *s_ = (const T *)(const void *)s;                    \
        for (int64_t k = 0; k < n; k++) d_[k * dstep] = s_[k * sstep]; \
    } while (0)

static void copy_row(size_t esize, char *d, int64_t dstep, const char *s, int64_t sstep, int64_t n) {
    if (dstep == 1 && sstep == 1) {
        memcpy(d, s, (size_t)n * esize);
        return;
    }
    switch (esize) {
    case 1: COPY_ROW(uint8_t); break;
    case 2: COPY_ROW(uint16_t); break;
    case 4: COPY_ROW(uint32_t); break;
    case 8: COPY_ROW(uint64_t); break;
    case 16: COPY_ROW(ir_bytes); break;
    default:
        for (int64_t k = 0; k < n; k++) memcpy(d + k * dstep * (int64_t)esize, s + k * sstep * (int64_t)esize, esize);
    }
}

static void strided_rows(void *user, int64_t begin, int64_t end) {
    const strided_job *j = user;
    int32_t r = j->rank;
    int64_t idx[CPU_COPY_MAX_RANK];
    int64_t rem = begin;
    int64_t doff = 0, soff = 0;
    for (int32_t k = r - 2; k >= 0; k--) {
        idx[k] = rem % j->dims[k];
        rem /= j->dims[k];
        doff += idx[k] * j->ds[k];
        soff += idx[k] * j->ss[k];
    }
    int64_t es = (int64_t)j->esize;
    for (int64_t row = begin; row < end; row++) {
        copy_row(j->esize, j->dst + doff * es, j->ds[r - 1], j->src + soff * es, j->ss[r - 1], j->dims[r - 1]);
        for (int32_t k = r - 2; k >= 0; k--) {
            doff += j->ds[k];
            soff += j->ss[k];
            if (++idx[k] < j->dims[k]) break;
            doff -= j->ds[k] * j->dims[k];
            soff -= j->ss[k] * j->dims[k];
            idx[k] = 0;
        }
    }
}

/* 4-byte 2-D transposes (the innermost output dim strided in the source, the one before
 * it contiguous): BERT's key Transpose [1,128,12,64] -> [1,12,64,128] copied row by row
 * read each element from a different cache line, 1.5 ns per element. Here each unit is 8
 * output rows of one plane, copied in 8x8 tiles whose 8 source and 8 destination runs
 * stay in L1: 2-3x faster on that Transpose (44-71 us against 123-127 us, thread CPU
 * time, 1 thread). Units = planes x ceil(R/8). */
#define TT 8
static void transpose_tiles(void *user, int64_t begin, int64_t end) {
    const strided_job *j = user;
    int32_t r = j->rank;
    int64_t R = j->dims[r - 2], C = j->dims[r - 1], dsr = j->ds[r - 2], ssc = j->ss[r - 1];
    int64_t row_units = (R + TT - 1) / TT;
    for (int64_t u = begin; u < end; u++) {
        int64_t plane = u / row_units, i0 = (u % row_units) * TT, i1 = i0 + TT < R ? i0 + TT : R;
        int64_t doff = 0, soff = 0, rem = plane;
        for (int32_t k = r - 3; k >= 0; k--) {
            int64_t idx = rem % j->dims[k];
            rem /= j->dims[k];
            doff += idx * j->ds[k];
            soff += idx * j->ss[k];
        }
        uint32_t *d = (uint32_t *)(void *)j->dst + doff;
        const uint32_t *sp = (const uint32_t *)(const void *)j->src + soff;
        for (int64_t c0 = 0; c0 < C; c0 += TT) {
            int64_t c1 = c0 + TT < C ? c0 + TT : C;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t c = c0; c < c1; c++) d[i * dsr + c] = sp[i + c * ssc];
        }
    }
}

void cpu_strided_copy(cpu_threadpool *pool, size_t esize, int32_t rank, const int64_t *dims, void *dst,
                      const int64_t *dst_strides, const void *src, const int64_t *src_strides) {
    strided_job j;
    j.esize = esize;
    j.dst = dst;
    j.src = src;
    int32_t r = 0;
    int64_t total = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (dims[i] == 0) return;
        total *= dims[i];
        if (dims[i] == 1) continue;
        if (r > 0 && j.ds[r - 1] == dst_strides[i] * dims[i] && j.ss[r - 1] == src_strides[i] * dims[i]) {
            j.dims[r - 1] *= dims[i];
            j.ds[r - 1] = dst_strides[i];
            j.ss[r - 1] = src_strides[i];
            continue;
        }
        j.dims[r] = dims[i];
        j.ds[r] = dst_strides[i];
        j.ss[r] = src_strides[i];
        r++;
    }
    if (r == 0) {
        j.dims[0] = 1;
        j.ds[0] = j.ss[0] = 1;
        r = 1;
    }
    j.rank = r;
    if (esize == 4 && r >= 2 && j.ds[r - 1] == 1 && j.ss[r - 1] != 1 && j.ss[r - 2] == 1 && j.dims[r - 1] >= TT &&
        j.dims[r - 2] >= TT) {
        int64_t units = total / (j.dims[r - 2] * j.dims[r - 1]) * ((j.dims[r - 2] + TT - 1) / TT);
        int64_t grain = 1 + CPU_ELEM_GRAIN / (TT * j.dims[r - 1]);
        if (total < CPU_ELEM_GRAIN) transpose_tiles(&j, 0, units);
        else cpu_parallel_for(pool, units, grain, transpose_tiles, &j);
        return;
    }
    int64_t inner = j.dims[r - 1];
    int64_t rows = total / inner;
    int64_t grain = CPU_ELEM_GRAIN / inner;
    if (grain < 1) grain = 1;
    if (rows == 1 || total < CPU_ELEM_GRAIN) strided_rows(&j, 0, rows);
    else cpu_parallel_for(pool, rows, grain, strided_rows, &j);
}

kiln_status cpu_ints_input_or_attr(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, int32_t idx,
                                   const char *attr, int64_t *out, int32_t max, int32_t *n, bool *present) {
    const rt_tensor *t = idx >= 0 ? cpu_in(inputs, n_in, idx) : NULL;
    *n = 0;
    *present = false;
    if (t) {
        *present = true;
        return cpu_read_ints(ctx, t, attr, out, max, n);
    }
    int32_t na;
    const int64_t *a = attr ? cpu_attr_ints(ctx->node, attr, &na) : NULL;
    if (!a) return KILN_OK;
    if (na > max) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "attribute '%s' has too many entries (%d)", attr, (int)na);
    memcpy(out, a, sizeof(int64_t) * (size_t)na);
    *n = na;
    *present = true;
    return KILN_OK;
}
