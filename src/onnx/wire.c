/* wire.c - protobuf wire-format primitives (see wire.h for why kiln has its own). */
#include "onnx/wire.h"

#include <string.h>

pb_result pb_read_varint(const uint8_t *base, uint64_t *pos, uint64_t end, uint64_t *out) {
    uint64_t p = *pos, v = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (p >= end) return PB_ERR_TRUNCATED;
        uint8_t b = base[p++];
        if (i == 9) {
            /* The 10th byte carries bit 63 only; more bits or a continuation is invalid. */
            if (b & 0x80) return PB_ERR_VARINT_LONG;
            if (b > 1) return PB_ERR_VARINT_OVERFLOW;
        }
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pos = p;
            *out = v;
            return PB_OK;
        }
    }
    return PB_ERR_VARINT_LONG; /* not reached */
}

static uint64_t load_le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static pb_result read_tag(pb_cursor *c, uint32_t *num, pb_wire *wire) {
    uint64_t tag;
    pb_result r = pb_read_varint(c->base, &c->pos, c->end, &tag);
    if (r != PB_OK) return r;
    if ((tag & 7) == 6 || (tag & 7) == 7) return PB_ERR_WIRE_TYPE;
    uint64_t n = tag >> 3;
    if (n == 0 || n > PB_MAX_FIELD_NUMBER) return PB_ERR_FIELD_NUMBER;
    *num = (uint32_t)n;
    *wire = (pb_wire)(tag & 7);
    return PB_OK;
}

/* Skips the body of a group whose start tag (field `num`) was just read; iterative with a
 * small explicit stack so hostile nesting cannot overflow the C stack. */
static pb_result skip_group(pb_cursor *c, uint32_t num) {
    uint32_t stack[PB_MAX_GROUP_DEPTH];
    int depth = 0;
    stack[depth++] = num;
    while (depth > 0) {
        uint32_t n;
        pb_wire w;
        pb_result r = read_tag(c, &n, &w);
        if (r != PB_OK) return r == PB_ERR_TRUNCATED ? PB_ERR_GROUP : r;
        uint64_t v;
        switch (w) {
        case PB_VARINT:
            r = pb_read_varint(c->base, &c->pos, c->end, &v);
            if (r != PB_OK) return r;
            break;
        case PB_FIXED64:
        case PB_FIXED32: {
            uint64_t sz = w == PB_FIXED64 ? 8 : 4;
            if (c->end - c->pos < sz) return PB_ERR_TRUNCATED;
            c->pos += sz;
            break;
        }
        case PB_LEN:
            r = pb_read_varint(c->base, &c->pos, c->end, &v);
            if (r != PB_OK) return r;
            if (v > c->end - c->pos) return PB_ERR_TRUNCATED;
            c->pos += v;
            break;
        case PB_SGROUP:
            if (depth == PB_MAX_GROUP_DEPTH) return PB_ERR_GROUP;
            stack[depth++] = n;
            break;
        case PB_EGROUP:
            if (stack[depth - 1] != n) return PB_ERR_GROUP;
            depth--;
            break;
        }
    }
    return PB_OK;
}

pb_result pb_next(pb_cursor *c, pb_field *f) {
    memset(f, 0, sizeof *f);
    f->tag_pos = c->pos;
    f->pos = c->pos;
    if (c->pos >= c->end) return PB_DONE;
    pb_result r = read_tag(c, &f->num, &f->wire);
    if (r != PB_OK) return r;
    f->pos = c->pos;
    switch (f->wire) {
    case PB_VARINT: return pb_read_varint(c->base, &c->pos, c->end, &f->value);
    case PB_FIXED64:
    case PB_FIXED32: {
        unsigned sz = f->wire == PB_FIXED64 ? 8 : 4;
        if (c->end - c->pos < sz) {
            f->len = sz;
            f->avail = c->end - c->pos;
            return PB_ERR_TRUNCATED;
        }
        f->value = load_le(c->base + c->pos, sz);
        c->pos += sz;
        return PB_OK;
    }
    case PB_LEN: {
        uint64_t len;
        r = pb_read_varint(c->base, &c->pos, c->end, &len);
        if (r != PB_OK) return r;
        f->pos = c->pos;
        f->len = len;
        uint64_t left = c->end - c->pos;
        if (len > left) {
            f->avail = left;
            f->short_len = true;
            c->pos = c->end;
        } else {
            f->avail = len;
            c->pos += len;
        }
        return PB_OK;
    }
    case PB_SGROUP: {
        uint64_t start = c->pos;
        r = skip_group(c, f->num);
        if (r != PB_OK) return r;
        f->len = f->avail = c->pos - start;
        return PB_OK;
    }
    case PB_EGROUP: return PB_ERR_GROUP;
    }
    return PB_ERR_WIRE_TYPE;
}

const char *pb_result_str(pb_result r) {
    switch (r) {
    case PB_OK: return "ok";
    case PB_DONE: return "end of message";
    case PB_ERR_TRUNCATED: return "a value runs past the end of its data";
    case PB_ERR_VARINT_LONG: return "a varint is longer than 10 bytes";
    case PB_ERR_VARINT_OVERFLOW: return "a 10-byte varint overflows 64 bits";
    case PB_ERR_WIRE_TYPE: return "invalid wire type (6 or 7)";
    case PB_ERR_FIELD_NUMBER: return "invalid field number (0 or above 536870911)";
    case PB_ERR_GROUP: return "a group is unmatched, unterminated or nested too deep";
    }
    return "unknown wire error";
}

const char *pb_wire_name(pb_wire w) {
    switch (w) {
    case PB_VARINT: return "varint";
    case PB_FIXED64: return "64-bit";
    case PB_LEN: return "length-delimited";
    case PB_SGROUP: return "start-group";
    case PB_EGROUP: return "end-group";
    case PB_FIXED32: return "32-bit";
    }
    return "invalid";
}

void pb_count(const uint8_t *base, uint64_t start, uint64_t end, uint32_t varint_mask,
              uint32_t fixed32_mask, uint32_t fixed64_mask, pb_counts *out) {
    memset(out, 0, sizeof *out);
    pb_cursor c = pb_cursor_make(base, start, end);
    pb_field f;
    while (pb_next(&c, &f) == PB_OK) {
        if (f.num >= PB_COUNT_FIELDS) continue;
        uint32_t bit = 1u << f.num;
        out->n[f.num]++;
        if (!((varint_mask | fixed32_mask | fixed64_mask) & bit)) continue;
        if (f.wire != PB_LEN) {
            out->elems[f.num]++;
            continue;
        }
        if (varint_mask & bit) {
            const uint8_t *p = base + f.pos;
            uint64_t terms = 0;
            for (uint64_t i = 0; i < f.avail; i++) terms += !(p[i] & 0x80);
            out->elems[f.num] += terms;
        } else if (fixed32_mask & bit) {
            out->elems[f.num] += f.avail / 4;
        } else {
            out->elems[f.num] += f.avail / 8;
        }
    }
}
