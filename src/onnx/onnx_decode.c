/* onnx_decode.c - field-level helpers shared by the ONNX message decoders: entering and
 * leaving sub-messages (nesting limits, truncation handling), typed scalar fields, and
 * packed/unpacked repeated scalars. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

kiln_status onnx_expect(onnx_rd *rd, const pb_field *f, pb_wire w, const char *leaf) {
    if (f->wire == w) return KILN_OK;
    return onnx_fail(rd, KILN_ERR_FORMAT, f->tag_pos, leaf,
                     "has wire type %s but ONNX declares it %s: the file is corrupt or not an ONNX "
                     "model; re-export it",
                     pb_wire_name(f->wire), pb_wire_name(w));
}

kiln_status onnx_enter(onnx_rd *rd, const pb_field *f, const pb_cursor *parent, const char *field,
                       int64_t index, uint32_t name_field, pb_cursor *sub) {
    (void)parent;
    if (f->wire != PB_LEN) {
        char leaf[96];
        if (index >= 0) snprintf(leaf, sizeof leaf, "%s[%" PRId64 "]", field, index);
        else snprintf(leaf, sizeof leaf, "%s", field);
        return onnx_expect(rd, f, PB_LEN, leaf);
    }
    if (rd->depth >= ONNX_MAX_MSG_DEPTH)
        return onnx_fail(rd, KILN_ERR_LIMIT, f->tag_pos, field,
                         "messages are nested more than %d deep (kiln's limit): the file is corrupt or "
                         "hostile; re-export the model",
                         ONNX_MAX_MSG_DEPTH);
    bool clamped = false;
    if (f->short_len) {
        if (f->pos + f->avail < rd->size) {
            char leaf[96];
            if (index >= 0) snprintf(leaf, sizeof leaf, "%s[%" PRId64 "]", field, index);
            else snprintf(leaf, sizeof leaf, "%s", field);
            return onnx_fail_short(rd, f, leaf);
        }
        clamped = true; /* the file ends inside: look inside to say which field is cut */
    }
    onnx_frame *fr = &rd->frames[rd->depth++];
    fr->field = field;
    fr->index = index;
    fr->start = f->pos;
    fr->end = f->pos + f->avail;
    fr->tag_pos = f->tag_pos;
    fr->declared = f->len;
    fr->name_field = name_field;
    fr->clamped = clamped;
    if (clamped) rd->n_clamped++;
    *sub = pb_cursor_make(rd->buf, fr->start, fr->end);
    return KILN_OK;
}

kiln_status onnx_leave(onnx_rd *rd) {
    onnx_frame *fr = &rd->frames[rd->depth - 1];
    if (fr->clamped) {
        /* Every field inside was whole, but the message itself is cut. onnx_fail turns
         * this into the truncation report of this frame. */
        return onnx_fail(rd, KILN_ERR_FORMAT, fr->start, NULL, "truncated");
    }
    rd->depth--;
    return KILN_OK;
}

kiln_status onnx_bytes(onnx_rd *rd, const pb_field *f, const char *leaf, ir_bytes *out) {
    kiln_status st = onnx_expect(rd, f, PB_LEN, leaf);
    if (st) return st;
    if (f->short_len) return onnx_fail_short(rd, f, leaf);
    out->data = (const char *)rd->buf + f->pos;
    out->len = f->len;
    return KILN_OK;
}

kiln_status onnx_string(onnx_rd *rd, const pb_field *f, const char *leaf, const char **out) {
    ir_bytes b = {"", 0};
    kiln_status st = onnx_bytes(rd, f, leaf, &b);
    if (st) return st;
    char *s = arena_strndup(rd->a, b.data, (size_t)b.len);
    if (!s) return onnx_nomem(rd);
    *out = s;
    return KILN_OK;
}

kiln_status onnx_varint(onnx_rd *rd, const pb_field *f, const char *leaf, int64_t *out) {
    kiln_status st = onnx_expect(rd, f, PB_VARINT, leaf);
    if (st) return st;
    *out = (int64_t)f->value;
    return KILN_OK;
}

kiln_status onnx_skip(onnx_rd *rd, const pb_field *f) {
    if (f->wire == PB_LEN && f->short_len) return onnx_fail_short(rd, f, NULL);
    return KILN_OK;
}

const char *onnx_scratch(onnx_rd *rd, const char *data, uint64_t len) {
    if (len >= SIZE_MAX - 1) return NULL;
    if (len + 1 > rd->scratch_cap) {
        size_t cap = rd->scratch_cap ? rd->scratch_cap : 256;
        while (cap < len + 1) cap *= 2;
        char *p = realloc(rd->scratch, cap);
        if (!p) return NULL;
        rd->scratch = p;
        rd->scratch_cap = cap;
    }
    memcpy(rd->scratch, data, (size_t)len);
    rd->scratch[len] = 0;
    return rd->scratch;
}

static kiln_status too_many(onnx_rd *rd, const pb_field *f, const char *leaf) {
    return onnx_fail(rd, KILN_ERR_INTERNAL, f->tag_pos, leaf,
                     "more elements than counted (a kiln bug: please report it with this file)");
}

kiln_status onnx_ints(onnx_rd *rd, const pb_field *f, const char *leaf, int64_t *arr, uint64_t *n,
                      uint64_t cap) {
    if (f->wire == PB_VARINT) {
        if (*n >= cap) return too_many(rd, f, leaf);
        arr[(*n)++] = (int64_t)f->value;
        return KILN_OK;
    }
    kiln_status st = onnx_expect(rd, f, PB_LEN, leaf);
    if (st) return st;
    if (f->short_len) return onnx_fail_short(rd, f, leaf);
    uint64_t pos = f->pos, end = f->pos + f->len;
    while (pos < end) {
        uint64_t v, at = pos;
        pb_result r = pb_read_varint(rd->buf, &pos, end, &v);
        if (r != PB_OK)
            return onnx_fail(rd, KILN_ERR_FORMAT, at, leaf,
                             "packed integer list is corrupt (%s): the file is damaged; re-export the model",
                             pb_result_str(r));
        if (*n >= cap) return too_many(rd, f, leaf);
        arr[(*n)++] = (int64_t)v;
    }
    return KILN_OK;
}

kiln_status onnx_floats(onnx_rd *rd, const pb_field *f, const char *leaf, float *arr, uint64_t *n,
                        uint64_t cap) {
    if (f->wire == PB_FIXED32) {
        if (*n >= cap) return too_many(rd, f, leaf);
        uint32_t u = (uint32_t)f->value;
        memcpy(&arr[(*n)++], &u, 4);
        return KILN_OK;
    }
    kiln_status st = onnx_expect(rd, f, PB_LEN, leaf);
    if (st) return st;
    if (f->short_len) return onnx_fail_short(rd, f, leaf);
    if (f->len % 4)
        return onnx_fail(rd, KILN_ERR_FORMAT, f->tag_pos, leaf,
                         "packed float list has %" PRIu64 " bytes, not a multiple of 4: the file is damaged; "
                         "re-export the model",
                         f->len);
    uint64_t k = f->len / 4;
    if (k > cap - *n) return too_many(rd, f, leaf);
    memcpy(arr + *n, rd->buf + f->pos, (size_t)k * 4); /* little-endian host: see onnx_internal.h */
    *n += k;
    return KILN_OK;
}
