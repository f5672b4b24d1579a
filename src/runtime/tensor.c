/* tensor.c - runtime tensors and values (see tensor.h). */
#include "runtime/tensor.h"
#include "core/bigalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_ALIGN 64

static void *aligned_alloc_bytes(uint64_t n) {
    if (n == 0) n = 1;
    uint64_t rounded = (n + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN;
    if (rounded < n || rounded > SIZE_MAX) return NULL;
    return kiln_alloc_aligned((size_t)rounded);
}

void rt_tensor_release(rt_tensor *t) {
    if (!(t->flags & RT_TENSOR_BORROWED) && t->data && t->free_fn) {
        t->free_fn(t->free_ctx, t->data); /* device memory: its backend frees it */
    } else if (!(t->flags & RT_TENSOR_BORROWED) && t->data) {
        if (t->dtype == KILN_DTYPE_STRING) {
            ir_bytes *s = t->data;
            for (uint64_t i = 0; i < t->count; i++) free((void *)s[i].data);
        }
        free(t->data);
    }
    memset(t, 0, sizeof *t);
}

static kiln_status shape_size(kiln_dtype dtype, int32_t rank, const int64_t *dims, uint64_t *count,
                              uint64_t *nbytes, kiln_error *err) {
    if (rank < 0 || rank > RT_MAX_RANK)
        return kiln_err_set(err, KILN_ERR_LIMIT, "tensor rank %d is outside what kiln supports (0..%d)",
                            (int)rank, RT_MAX_RANK);
    uint64_t c = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return kiln_err_set(err, KILN_ERR_SHAPE, "dimension %d is negative (%" PRId64 ")", (int)i, dims[i]);
        if (__builtin_mul_overflow(c, (uint64_t)dims[i], &c))
            return kiln_err_set(err, KILN_ERR_LIMIT, "tensor element count overflows 64 bits");
    }
    uint64_t b;
    if (dtype == KILN_DTYPE_STRING) {
        if (__builtin_mul_overflow(c, (uint64_t)sizeof(ir_bytes), &b))
            return kiln_err_set(err, KILN_ERR_LIMIT, "string tensor too large");
    } else if (!kiln_dtype_nbytes(dtype, c, &b)) {
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "cannot size a tensor of dtype %s", kiln_dtype_name(dtype));
    }
    *count = c;
    *nbytes = b;
    return KILN_OK;
}

static _Thread_local uint64_t tls_alloc_limit;

void rt_tensor_set_alloc_limit(uint64_t max_bytes) { tls_alloc_limit = max_bytes; }

static _Thread_local const rt_alloc_hook *tls_hook;
void rt_tensor_set_alloc_hook(const rt_alloc_hook *hook) { tls_hook = hook; }
const rt_alloc_hook *rt_tensor_alloc_hook(void) { return tls_hook; }

static const rt_alloc_hook *hook_for(const rt_tensor *t, int32_t *index) {
    const rt_alloc_hook *h = tls_hook;
    if (!h) return NULL;
    for (int32_t i = 0; i < h->n_targets; i++)
        if (h->targets[i] == t) return *index = i, h;
    return NULL;
}
uint64_t rt_tensor_alloc_limit(void) { return tls_alloc_limit; }

kiln_status rt_tensor_alloc(rt_tensor *t, kiln_dtype dtype, int32_t rank, const int64_t *dims,
                            kiln_error *err) {
    uint64_t count = 0, nbytes = 0;
    kiln_status st = shape_size(dtype, rank, dims, &count, &nbytes, err);
    if (st != KILN_OK) return st;
    if (tls_alloc_limit && nbytes > tls_alloc_limit) {
        char desc[256];
        rt_tensor tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.dtype = dtype;
        tmp.rank = rank;
        for (int32_t i = 0; i < rank; i++) tmp.dims[i] = dims[i];
        return kiln_err_set(err, KILN_ERR_LIMIT,
                            "a %s tensor needs %" PRIu64 " bytes, over the per-tensor limit of %" PRIu64 " bytes",
                            rt_tensor_desc(&tmp, desc, sizeof desc), nbytes, tls_alloc_limit);
    }
    rt_tensor_release(t);
    void *data = NULL;
    int32_t target = 0;
    const rt_alloc_hook *hook = count > 0 && dtype != KILN_DTYPE_STRING ? hook_for(t, &target) : NULL;
    if (hook) {
        data = hook->alloc_at ? hook->alloc_at(hook->ctx, target, nbytes) : hook->alloc(hook->ctx, nbytes);
        if (!data) hook = NULL;
    }
    if (count > 0 && !data) {
        data = aligned_alloc_bytes(nbytes);
        if (!data)
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory allocating a %" PRIu64 "-byte tensor", nbytes);
        if (dtype == KILN_DTYPE_STRING) memset(data, 0, (size_t)nbytes);
    }
    t->dtype = dtype;
    t->rank = rank;
    for (int32_t i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->count = count;
    t->nbytes = nbytes;
    t->data = data;
    t->flags = 0;
    if (hook) {
        t->free_fn = hook->release;
        t->free_ctx = hook->ctx;
    }
    return KILN_OK;
}

kiln_status rt_tensor_alloc_zero(rt_tensor *t, kiln_dtype dtype, int32_t rank, const int64_t *dims,
                                 kiln_error *err) {
    kiln_status st = rt_tensor_alloc(t, dtype, rank, dims, err);
    if (st == KILN_OK && t->data) memset(t->data, 0, (size_t)t->nbytes);
    return st;
}

void rt_tensor_adopt(rt_tensor *dst, const rt_tensor *like, void *data, uint8_t device,
                     void (*free_fn)(void *free_ctx, void *data), void *free_ctx) {
    memset(dst, 0, sizeof *dst);
    dst->dtype = like->dtype;
    dst->rank = like->rank;
    memcpy(dst->dims, like->dims, sizeof dst->dims);
    dst->count = like->count;
    dst->nbytes = like->nbytes;
    dst->data = data;
    dst->device = device;
    dst->free_fn = free_fn;
    dst->free_ctx = free_ctx;
}

void rt_tensor_borrow(rt_tensor *t, kiln_dtype dtype, int32_t rank, const int64_t *dims, const void *data) {
    rt_tensor_release(t);
    t->dtype = dtype;
    t->rank = rank;
    uint64_t c = 1;
    for (int32_t i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        c *= (uint64_t)dims[i];
    }
    t->count = c;
    uint64_t nb = 0;
    if (dtype == KILN_DTYPE_STRING) nb = c * sizeof(ir_bytes);
    else kiln_dtype_nbytes(dtype, c, &nb);
    t->nbytes = nb;
    t->data = (void *)data;
    t->flags = RT_TENSOR_BORROWED;
}

kiln_status rt_tensor_set_string(rt_tensor *t, uint64_t index, const char *s, uint64_t len, kiln_error *err) {
    if (t->dtype != KILN_DTYPE_STRING || index >= t->count || (t->flags & RT_TENSOR_BORROWED))
        return kiln_err_set(err, KILN_ERR_INTERNAL, "rt_tensor_set_string on a non-string or borrowed tensor");
    if (len > SIZE_MAX - 1) return kiln_err_set(err, KILN_ERR_LIMIT, "string too long");
    char *copy = malloc((size_t)len + 1);
    if (!copy) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory copying a string");
    if (len) memcpy(copy, s, (size_t)len);
    copy[len] = 0;
    ir_bytes *e = &((ir_bytes *)t->data)[index];
    free((void *)e->data);
    e->data = copy;
    e->len = len;
    return KILN_OK;
}

kiln_status rt_tensor_copy(rt_tensor *dst, const rt_tensor *src, kiln_error *err) {
    if (dst == src) return KILN_OK;
    if (src->device != RT_MEM_HOST)
        return kiln_err_set(err, KILN_ERR_INTERNAL, "rt_tensor_copy of a device tensor (copy it to the host first)");
    kiln_status st = rt_tensor_alloc(dst, src->dtype, src->rank, src->dims, err);
    if (st != KILN_OK) return st;
    if (src->dtype == KILN_DTYPE_STRING) {
        const ir_bytes *s = src->data;
        for (uint64_t i = 0; i < src->count; i++) {
            st = rt_tensor_set_string(dst, i, s[i].data, s[i].len, err);
            if (st != KILN_OK) return st;
        }
    } else if (src->nbytes) {
        memcpy(dst->data, src->data, (size_t)src->nbytes);
    }
    return KILN_OK;
}

kiln_status rt_tensor_from_ir(rt_tensor *t, const ir_tensor *src, kiln_error *err) {
    if (src->rank > RT_MAX_RANK)
        return kiln_err_set(err, KILN_ERR_LIMIT, "tensor '%s' has rank %d; kiln runs tensors up to rank %d",
                            src->name ? src->name : "", (int)src->rank, RT_MAX_RANK);
    if (src->count > 0 && !src->data && !src->strings)
        return kiln_err_set(err, KILN_ERR_INTERNAL, "tensor '%s' has no data loaded (external data not mapped?)",
                            src->name ? src->name : "");
    const void *data = src->dtype == KILN_DTYPE_STRING ? (const void *)src->strings : src->data;
    int bits = kiln_dtype_bits(src->dtype);
    uintptr_t align = src->dtype == KILN_DTYPE_STRING ? sizeof(void *) : (bits >= 8 ? (uintptr_t)bits / 8 : 1);
    if (align > 8) align = 8;
    if (((uintptr_t)data % align) == 0) {
        rt_tensor_borrow(t, src->dtype, src->rank, src->dims, data);
        return KILN_OK;
    }
    /* protobuf raw_data sits at arbitrary file offsets: kernels may read elements with
     * typed loads, so misaligned weights get one aligned copy here (once per session). */
    rt_tensor view;
    memset(&view, 0, sizeof view);
    rt_tensor_borrow(&view, src->dtype, src->rank, src->dims, NULL);
    kiln_status st = rt_tensor_alloc(t, src->dtype, src->rank, src->dims, err);
    if (st == KILN_OK && view.nbytes) memcpy(t->data, data, (size_t)view.nbytes);
    return st;
}

void rt_value_init(rt_value *v) { memset(v, 0, sizeof *v); }

void rt_value_release(rt_value *v) {
    rt_tensor_release(&v->t);
    for (int32_t i = 0; i < v->n_items; i++) rt_value_release(&v->items[i]);
    free(v->items);
    memset(v, 0, sizeof *v);
}

kiln_status rt_value_copy(rt_value *dst, const rt_value *src, kiln_error *err) {
    if (dst == src) return KILN_OK;
    rt_value_release(dst);
    dst->kind = src->kind;
    dst->has_value = src->has_value;
    dst->elem_kind = src->elem_kind;
    dst->elem_dtype = src->elem_dtype;
    kiln_status st = KILN_OK;
    if (src->t.data || src->t.rank || src->kind == IR_TYPE_TENSOR) st = rt_tensor_copy(&dst->t, &src->t, err);
    if (st != KILN_OK) return st;
    if (src->n_items > 0) {
        dst->items = calloc((size_t)src->n_items, sizeof *dst->items);
        if (!dst->items) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory copying a sequence");
        dst->n_items = src->n_items;
        for (int32_t i = 0; i < src->n_items && st == KILN_OK; i++)
            st = rt_value_copy(&dst->items[i], &src->items[i], err);
    }
    return st;
}

rt_tensor *rt_value_as_tensor(rt_value *v) {
    rt_value_release(v);
    v->kind = IR_TYPE_TENSOR;
    v->has_value = true;
    return &v->t;
}

const char *rt_tensor_desc(const rt_tensor *t, char *buf, size_t size) {
    size_t off = (size_t)snprintf(buf, size, "%s[", kiln_dtype_name(t->dtype));
    for (int32_t i = 0; i < t->rank && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    if (off < size) snprintf(buf + off, size - off, "]");
    return buf;
}
