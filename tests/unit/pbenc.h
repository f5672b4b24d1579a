/* pbenc.h - a tiny protobuf *encoder* for tests: builds ONNX messages byte by byte so
 * tests can make exactly the valid and broken models they need without Python.
 * Header-only (static functions), included by the ONNX reader tests. Not a test itself
 * (ctest only picks up tests/unit/test_*.c). */
#ifndef KILN_TESTS_PBENC_H
#define KILN_TESTS_PBENC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pbw {
    uint8_t *d;
    size_t n, cap;
} pbw;

static void pbw_raw(pbw *w, const void *p, size_t n) {
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 64;
        while (cap < w->n + n) cap *= 2;
        w->d = realloc(w->d, cap);
        if (!w->d) abort();
        w->cap = cap;
    }
    if (n) memcpy(w->d + w->n, p, n);
    w->n += n;
}
static void pbw_free(pbw *w) {
    free(w->d);
    memset(w, 0, sizeof *w);
}
static void pbw_varint(pbw *w, uint64_t v) {
    uint8_t b[10];
    size_t k = 0;
    do {
        b[k] = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v) b[k] |= 0x80;
        k++;
    } while (v);
    pbw_raw(w, b, k);
}
static void pbw_tag(pbw *w, uint32_t num, unsigned wire) { pbw_varint(w, ((uint64_t)num << 3) | wire); }
static void pbw_int(pbw *w, uint32_t num, int64_t v) {
    pbw_tag(w, num, 0);
    pbw_varint(w, (uint64_t)v);
}
static void pbw_bytes(pbw *w, uint32_t num, const void *p, size_t n) {
    pbw_tag(w, num, 2);
    pbw_varint(w, n);
    pbw_raw(w, p, n);
}
static void pbw_str(pbw *w, uint32_t num, const char *s) { pbw_bytes(w, num, s, strlen(s)); }
/* Appends sub as a message field and frees sub. */
static void pbw_msg(pbw *w, uint32_t num, pbw *sub) {
    pbw_bytes(w, num, sub->d, sub->n);
    pbw_free(sub);
}
static void pbw_f32(pbw *w, uint32_t num, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    pbw_tag(w, num, 5);
    pbw_raw(w, b, 4);
}
static void pbw_packed_i64(pbw *w, uint32_t num, const int64_t *v, size_t n) {
    pbw p = {0};
    for (size_t i = 0; i < n; i++) pbw_varint(&p, (uint64_t)v[i]);
    pbw_msg(w, num, &p);
}
static void pbw_packed_f32(pbw *w, uint32_t num, const float *v, size_t n) {
    pbw_bytes(w, num, v, n * 4); /* little-endian host */
}

/* ---- ONNX message builders ---- */

/* TensorProto with raw_data (data may be NULL for none). */
static pbw onnx_tensor_raw(const char *name, int dtype, const int64_t *dims, size_t rank, const void *data,
                           size_t nbytes) {
    pbw t = {0};
    pbw_packed_i64(&t, 1, dims, rank);
    pbw_int(&t, 2, dtype);
    if (name) pbw_str(&t, 8, name);
    if (data) pbw_bytes(&t, 9, data, nbytes);
    return t;
}

/* TypeProto.tensor_type with dims given as strings: "3" (value), "batch" (param), "?" (neither). */
static pbw onnx_tensor_type(int elem, const char *const *dims, int rank) {
    pbw shape = {0};
    for (int i = 0; i < rank; i++) {
        pbw d = {0};
        if (dims[i][0] >= '0' && dims[i][0] <= '9') pbw_int(&d, 1, strtoll(dims[i], NULL, 10));
        else if (strcmp(dims[i], "?") != 0) pbw_str(&d, 2, dims[i]);
        pbw_msg(&shape, 1, &d);
    }
    pbw tt = {0};
    pbw_int(&tt, 1, elem);
    if (rank >= 0) pbw_msg(&tt, 2, &shape);
    else pbw_free(&shape);
    pbw tp = {0};
    pbw_msg(&tp, 1, &tt);
    return tp;
}

static pbw onnx_value_info(const char *name, int elem, const char *const *dims, int rank) {
    pbw vi = {0};
    pbw_str(&vi, 1, name);
    pbw tp = onnx_tensor_type(elem, dims, rank);
    pbw_msg(&vi, 2, &tp);
    return vi;
}

/* NodeProto without attributes; add them with pbw_msg(&node, 5, &attr). */
static pbw onnx_node(const char *op, const char *name, const char *const *in, int n_in, const char *const *out,
                     int n_out) {
    pbw n = {0};
    for (int i = 0; i < n_in; i++) pbw_str(&n, 1, in[i]);
    for (int i = 0; i < n_out; i++) pbw_str(&n, 2, out[i]);
    if (name) pbw_str(&n, 3, name);
    pbw_str(&n, 4, op);
    return n;
}

static pbw onnx_attr_int(const char *name, int64_t v) {
    pbw a = {0};
    pbw_str(&a, 1, name);
    pbw_int(&a, 20, 2);
    pbw_int(&a, 3, v);
    return a;
}

static pbw onnx_opset(const char *domain, int64_t version) {
    pbw o = {0};
    pbw_str(&o, 1, domain);
    pbw_int(&o, 2, version);
    return o;
}

/* ModelProto around a finished graph (graph is consumed). */
static pbw onnx_model(pbw *graph, int64_t opset) {
    pbw m = {0};
    pbw_int(&m, 1, 8);
    pbw_str(&m, 2, "kiln-test");
    pbw_msg(&m, 7, graph);
    pbw o = onnx_opset("", opset);
    pbw_msg(&m, 8, &o);
    return m;
}

#endif
