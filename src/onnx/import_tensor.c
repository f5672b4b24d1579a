/* import_tensor.c - decodes TensorProto and SparseTensorProto into ir_tensor.
 *
 * raw_data is never copied: the tensor points into the mapped file (IR_DATA_MAPPED) and is
 * not read at load time, so a 2 GB model costs no 2 GB of reads. The typed fields
 * (float_data, int32_data, ...) are decoded into the arena (IR_DATA_OWNED) as packed
 * little-endian data, following ONNX's rules for which field carries which data type
 * (int32_data carries every type of 16 bits or fewer, sub-byte types as packed bytes).
 * Every size from the file is checked: dims must be non-negative and their product and
 * byte size must fit 64 bits, and each data field must hold exactly what dims say.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/strbuf.h"
#include "onnx/onnx_internal.h"

enum {
    T_DIMS = 1,
    T_DATA_TYPE = 2,
    T_SEGMENT = 3,
    T_FLOAT = 4,
    T_INT32 = 5,
    T_STRING = 6,
    T_INT64 = 7,
    T_NAME = 8,
    T_RAW = 9,
    T_DOUBLE = 10,
    T_UINT64 = 11,
    T_DOC = 12,
    T_EXTERNAL = 13,
    T_LOCATION = 14
};

static const char *data_field_name(int num) {
    switch (num) {
    case T_FLOAT: return "float_data";
    case T_INT32: return "int32_data";
    case T_STRING: return "string_data";
    case T_INT64: return "int64_data";
    case T_RAW: return "raw_data";
    case T_DOUBLE: return "double_data";
    case T_UINT64: return "uint64_data";
    case T_EXTERNAL: return "external data";
    }
    return "?";
}

/* "[3, 224, 224]" (shortened for huge ranks) into buf. */
static const char *dims_text(const ir_tensor *t, char *buf, size_t size) {
    strbuf sb;
    sb_init(&sb);
    sb_putc(&sb, '[');
    for (int32_t i = 0; i < t->rank; i++) {
        if (i) sb_append(&sb, ", ");
        if (i == 16 && t->rank > 17) {
            sb_printf(&sb, "... (%d dims)", (int)t->rank);
            break;
        }
        sb_printf(&sb, "%" PRId64, t->dims[i]);
    }
    sb_putc(&sb, ']');
    snprintf(buf, size, "%s", sb.failed ? "[?]" : sb_cstr(&sb));
    sb_free(&sb);
    return buf;
}

/* Which typed field ONNX uses for a data type. */
static int typed_field_for(kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT:
    case KILN_DTYPE_COMPLEX64: return T_FLOAT;
    case KILN_DTYPE_DOUBLE:
    case KILN_DTYPE_COMPLEX128: return T_DOUBLE;
    case KILN_DTYPE_INT64: return T_INT64;
    case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64: return T_UINT64;
    case KILN_DTYPE_STRING: return T_STRING;
    case KILN_DTYPE_UNDEFINED: return 0;
    default: return T_INT32; /* every type of 16 bits or fewer, and int32 */
    }
}

/* Decodes the one typed data field `num` of the tensor in [start, end) into the arena. */
static kiln_status decode_typed(onnx_rd *rd, uint64_t start, uint64_t end, int num, uint64_t elems,
                                ir_tensor *t) {
    const char *leaf = data_field_name(num);
    char dbuf[256];
    kiln_dtype dt = t->dtype;
    int bits = kiln_dtype_bits(dt);
    /* How many entries the field must have for these dims. */
    uint64_t want = t->count;
    if (dt == KILN_DTYPE_COMPLEX64 || dt == KILN_DTYPE_COMPLEX128) want = t->count * 2; /* nbytes fit, so no overflow */
    if (num == T_INT32 && bits < 8) want = t->nbytes; /* sub-byte: one packed byte per entry */
    if (elems != want)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, leaf,
                         "has %" PRIu64 " values but dims %s of %s need %" PRIu64
                         ": the tensor data is corrupt or was cut; re-export the model",
                         elems, dims_text(t, dbuf, sizeof dbuf), kiln_dtype_name(dt), want);
    if (num == T_STRING) {
        ir_bytes *s = ARENA_ARRAY(rd->a, ir_bytes, elems ? elems : 1);
        if (!s) return onnx_nomem(rd);
        uint64_t n = 0;
        pb_cursor c = pb_cursor_make(rd->buf, start, end);
        pb_field f;
        while (pb_next(&c, &f) == PB_OK) {
            if (f.num != T_STRING) continue;
            if (n >= elems) break;
            kiln_status st = onnx_bytes(rd, &f, leaf, &s[n++]);
            if (st) return st;
        }
        t->strings = s;
        t->where = IR_DATA_OWNED;
        return KILN_OK;
    }
    uint8_t *out = arena_alloc(rd->a, t->nbytes ? (size_t)t->nbytes : 1);
    if (!out) return onnx_nomem(rd);
    /* Element width in the output buffer. */
    unsigned w = bits >= 8 ? (unsigned)bits / 8 : 1;
    if (dt == KILN_DTYPE_COMPLEX64) w = 4;
    if (dt == KILN_DTYPE_COMPLEX128) w = 8;
    uint64_t n = 0;
    pb_cursor c = pb_cursor_make(rd->buf, start, end);
    pb_field f;
    while (pb_next(&c, &f) == PB_OK) {
        if ((int)f.num != num) continue;
        if (num == T_FLOAT) {
            kiln_status st = onnx_floats(rd, &f, leaf, (float *)(void *)out, &n, want);
            if (st) return st;
            continue;
        }
        if (num == T_DOUBLE) {
            if (f.wire == PB_FIXED64) {
                if (n >= want) break;
                memcpy(out + n * 8, &f.value, 8);
                n++;
                continue;
            }
            kiln_status st = onnx_expect(rd, &f, PB_LEN, leaf);
            if (st) return st;
            if (f.short_len) return onnx_fail_short(rd, &f, leaf);
            if (f.len % 8 || f.len / 8 > want - n)
                return onnx_fail(rd, KILN_ERR_FORMAT, f.tag_pos, leaf,
                                 "packed double list has %" PRIu64 " bytes, not a multiple of 8: the file is "
                                 "damaged; re-export the model",
                                 f.len);
            memcpy(out + n * 8, rd->buf + f.pos, (size_t)f.len);
            n += f.len / 8;
            continue;
        }
        /* varint-encoded fields: int32_data, int64_data, uint64_data */
        uint64_t pos, fend;
        if (f.wire == PB_VARINT) {
            if (n >= want) break;
            memcpy(out + n * w, &f.value, w); /* low bytes: little-endian truncation */
            n++;
            continue;
        }
        kiln_status st = onnx_expect(rd, &f, PB_LEN, leaf);
        if (st) return st;
        if (f.short_len) return onnx_fail_short(rd, &f, leaf);
        pos = f.pos;
        fend = f.pos + f.len;
        while (pos < fend) {
            uint64_t v, at = pos;
            pb_result r = pb_read_varint(rd->buf, &pos, fend, &v);
            if (r != PB_OK)
                return onnx_fail(rd, KILN_ERR_FORMAT, at, leaf,
                                 "packed integer list is corrupt (%s): the file is damaged; re-export the model",
                                 pb_result_str(r));
            if (n >= want) break;
            memcpy(out + n * w, &v, w);
            n++;
        }
    }
    if (n != want)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, leaf,
                         "decoded %" PRIu64 " values but dims %s need %" PRIu64
                         ": the tensor data is corrupt; re-export the model",
                         n, dims_text(t, dbuf, sizeof dbuf), want);
    t->data = out;
    t->where = IR_DATA_OWNED;
    return KILN_OK;
}

/* Strict non-negative decimal ("4096"); false on anything else or overflow. */
static bool parse_u64(const char *s, uint64_t *out) {
    if (!*s) return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

/* One external_data key/value entry. */
static kiln_status decode_ext_entry(onnx_rd *rd, pb_cursor *c, ir_tensor *t, bool *has_len) {
    const char *key = NULL, *value = "";
    pb_field f;
    pb_result r;
    uint64_t at = c->pos;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        if (f.num == 1) st = onnx_string(rd, &f, "key", &key);
        else if (f.num == 2) st = onnx_string(rd, &f, "value", &value);
        else st = onnx_skip(rd, &f);
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    if (!key) return KILN_OK;
    if (strcmp(key, "location") == 0) {
        t->ext_location = value;
    } else if (strcmp(key, "offset") == 0 || strcmp(key, "length") == 0) {
        uint64_t v;
        if (!parse_u64(value, &v))
            return onnx_fail(rd, KILN_ERR_FORMAT, at, NULL,
                             "external data %s '%s' is not a non-negative integer: fix the model's "
                             "external_data entries (re-save it with onnx.save_model(..., save_as_external_data=True))",
                             key, value);
        if (key[0] == 'o') {
            t->ext_offset = v;
        } else {
            t->ext_length = v;
            *has_len = true;
        }
    }
    /* "checksum" is deliberately not verified: that would read every weight at load. */
    return KILN_OK;
}

kiln_status onnx_decode_tensor(onnx_rd *rd, pb_cursor *c, ir_tensor *t) {
    uint64_t start = c->pos, end = c->end;
    memset(t, 0, sizeof *t);
    t->name = "";
    t->doc = "";
    t->file_offset = start;
    pb_counts cnt;
    pb_count(rd->buf, start, end, (1u << T_DIMS) | (1u << T_INT32) | (1u << T_INT64) | (1u << T_UINT64),
             1u << T_FLOAT, 1u << T_DOUBLE, &cnt);
    if (cnt.elems[T_DIMS] > IR_MAX_RANK)
        return onnx_fail(rd, KILN_ERR_LIMIT, start, "dims",
                         "has %" PRIu64 " dimensions; kiln's limit is %d: the file is corrupt; re-export the model",
                         cnt.elems[T_DIMS], IR_MAX_RANK);
    int64_t *dims = ARENA_ARRAY(rd->a, int64_t, cnt.elems[T_DIMS] ? cnt.elems[T_DIMS] : 1);
    if (!dims) return onnx_nomem(rd);
    uint64_t ndims = 0;
    int64_t dtype = 0, location = 0;
    ir_bytes raw = {0};
    bool has_len = false;
    int32_t n_ext = 0;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        switch (f.num) {
        case T_DIMS: st = onnx_ints(rd, &f, "dims", dims, &ndims, cnt.elems[T_DIMS]); break;
        case T_DATA_TYPE: st = onnx_varint(rd, &f, "data_type", &dtype); break;
        case T_SEGMENT:
            return onnx_fail(rd, KILN_ERR_UNSUPPORTED, f.tag_pos, "segment",
                             "tensor segments (a tensor split over several TensorProtos) are not supported: "
                             "re-export the model with whole tensors");
        case T_NAME: st = onnx_string(rd, &f, "name", &t->name); break;
        case T_DOC: st = onnx_string(rd, &f, "doc_string", &t->doc); break;
        case T_RAW:
            st = onnx_bytes(rd, &f, "raw_data", &raw);
            break;
        case T_LOCATION: st = onnx_varint(rd, &f, "data_location", &location); break;
        case T_EXTERNAL: {
            pb_cursor sub;
            st = onnx_enter(rd, &f, c, "external_data", n_ext++, 1, &sub);
            if (!st) st = decode_ext_entry(rd, &sub, t, &has_len);
            if (!st) st = onnx_leave(rd);
            break;
        }
        case T_FLOAT:
        case T_INT32:
        case T_STRING:
        case T_INT64:
        case T_DOUBLE:
        case T_UINT64:
            /* decoded below, once the data type is known */
            st = (f.wire == PB_LEN && f.short_len) ? onnx_fail_short(rd, &f, data_field_name((int)f.num)) : KILN_OK;
            break;
        default: st = onnx_skip(rd, &f); break;
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);

    /* Data type. */
    if (!kiln_dtype_valid((int)dtype)) {
        if (dtype == 0)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, "data_type",
                             "is missing or 0 (UNDEFINED): every tensor needs a data type (%s); re-export the model",
                             onnx_dtype_list());
        return onnx_fail(rd, KILN_ERR_UNSUPPORTED, start, "data_type",
                         "is %" PRId64 ", which kiln does not know; valid data types are %s. The model may "
                         "come from a newer ONNX: re-export with an older opset or convert the tensor",
                         dtype, onnx_dtype_list());
    }
    t->dtype = (kiln_dtype)dtype;
    t->rank = (int32_t)ndims;
    t->dims = dims;

    /* Element count and byte size, overflow-checked. */
    uint64_t count = 1;
    for (uint64_t i = 0; i < ndims; i++) {
        if (dims[i] < 0)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, "dims",
                             "dims[%" PRIu64 "] is %" PRId64 ": tensor dimensions cannot be negative; the file is "
                             "corrupt, re-export the model",
                             i, dims[i]);
        if (kiln_mul_overflow_u64(count, (uint64_t)dims[i], &count)) {
            char dbuf[256];
            return onnx_fail(rd, KILN_ERR_LIMIT, start, "dims",
                             "dims %s overflow: their product does not fit 64 bits; the file is corrupt, "
                             "re-export the model",
                             dims_text(t, dbuf, sizeof dbuf));
        }
    }
    t->count = count;
    if (t->dtype != KILN_DTYPE_STRING && !kiln_dtype_nbytes(t->dtype, count, &t->nbytes)) {
        char dbuf[256];
        return onnx_fail(rd, KILN_ERR_LIMIT, start, "dims",
                         "dims %s of %s need more than 2^64 bytes: the file is corrupt, re-export the model",
                         dims_text(t, dbuf, sizeof dbuf), kiln_dtype_name(t->dtype));
    }

    /* Exactly one place holds the data. */
    if (location != 0 && location != 1)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, "data_location",
                         "is %" PRId64 "; valid values are 0 (DEFAULT) and 1 (EXTERNAL): the file is corrupt; "
                         "re-export the model",
                         location);
    static const int data_fields[] = {T_FLOAT, T_INT32, T_STRING, T_INT64, T_RAW, T_DOUBLE, T_UINT64};
    int present[9], n_present = 0;
    for (size_t i = 0; i < sizeof data_fields / sizeof data_fields[0]; i++)
        if (cnt.n[data_fields[i]]) present[n_present++] = data_fields[i];
    if (location == 1) present[n_present++] = T_EXTERNAL;
    if (n_present > 1)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, NULL,
                         "has both %s and %s set: a tensor stores its data in exactly one field; the file is "
                         "corrupt or was written by a broken exporter, re-export the model",
                         data_field_name(present[0]), data_field_name(present[1]));
    char dbuf[256];
    if (n_present == 0) {
        if (count != 0 && t->dtype != KILN_DTYPE_STRING)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, NULL,
                             "has dims %s (%" PRIu64 " elements of %s) but no data: the tensor is empty or was "
                             "stripped; re-export the model with its weights",
                             dims_text(t, dbuf, sizeof dbuf), count, kiln_dtype_name(t->dtype));
        if (count != 0)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, NULL,
                             "has dims %s (%" PRIu64 " strings) but no string_data: re-export the model",
                             dims_text(t, dbuf, sizeof dbuf), count);
        t->where = IR_DATA_NONE;
        if (t->dtype == KILN_DTYPE_STRING) {
            t->strings = ARENA_ARRAY(rd->a, ir_bytes, 1);
            if (!t->strings) return onnx_nomem(rd);
        }
        return KILN_OK;
    }
    int which = present[0];
    if (which == T_RAW) {
        if (t->dtype == KILN_DTYPE_STRING)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, "raw_data",
                             "is set on a string tensor: ONNX stores strings in string_data only; re-export the model");
        if (raw.len != t->nbytes)
            return onnx_fail(rd, KILN_ERR_FORMAT, (uint64_t)((const uint8_t *)raw.data - rd->buf), "raw_data",
                             "has %" PRIu64 " bytes but dims %s of %s need %" PRIu64
                             " bytes (%s): the tensor data is corrupt or was cut; re-export the model",
                             raw.len, dims_text(t, dbuf, sizeof dbuf), kiln_dtype_name(t->dtype), t->nbytes,
                             raw.len < t->nbytes ? "too short" : "too long");
        t->data = raw.data;
        t->where = IR_DATA_MAPPED;
        return KILN_OK;
    }
    if (which == T_EXTERNAL) {
        if (t->dtype == KILN_DTYPE_STRING)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, "data_location",
                             "string tensors cannot be stored as external data: re-export the model");
        if (!t->ext_location || !t->ext_location[0])
            return onnx_fail(rd, KILN_ERR_FORMAT, start, "external_data",
                             "data_location is EXTERNAL but no 'location' key names the file: re-save the model "
                             "with onnx.save_model(..., save_as_external_data=True)");
        if (has_len && t->ext_length != t->nbytes)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, "external_data",
                             "length %" PRIu64 " does not match dims %s of %s (%" PRIu64
                             " bytes): the external data entry is wrong; re-export the model",
                             t->ext_length, dims_text(t, dbuf, sizeof dbuf), kiln_dtype_name(t->dtype), t->nbytes);
        t->ext_length = t->nbytes;
        t->where = IR_DATA_EXTERNAL;
        return onnx_external_resolve(rd, t, start);
    }
    int expected = typed_field_for(t->dtype);
    if (which != expected)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, data_field_name(which),
                         "is set on a %s tensor, which ONNX stores in %s: the file was written by a broken "
                         "exporter; re-export the model",
                         kiln_dtype_name(t->dtype), expected ? data_field_name(expected) : "no field");
    return decode_typed(rd, start, end, which, which == T_STRING ? cnt.n[T_STRING] : cnt.elems[which], t);
}

kiln_status onnx_decode_sparse(onnx_rd *rd, pb_cursor *c, ir_sparse_tensor *s) {
    memset(s, 0, sizeof *s);
    uint64_t start = c->pos;
    pb_counts cnt;
    pb_count(rd->buf, start, c->end, 1u << 3, 0, 0, &cnt);
    if (cnt.elems[3] > IR_MAX_RANK)
        return onnx_fail(rd, KILN_ERR_LIMIT, start, "dims", "has %" PRIu64 " dimensions; kiln's limit is %d",
                         cnt.elems[3], IR_MAX_RANK);
    s->dims = ARENA_ARRAY(rd->a, int64_t, cnt.elems[3] ? cnt.elems[3] : 1);
    if (!s->dims) return onnx_nomem(rd);
    uint64_t ndims = 0;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        if (f.num == 1 || f.num == 2) {
            ir_tensor **dst = f.num == 1 ? &s->values : &s->indices;
            pb_cursor sub;
            *dst = ARENA_NEW(rd->a, ir_tensor);
            if (!*dst) return onnx_nomem(rd);
            st = onnx_enter(rd, &f, c, f.num == 1 ? "values" : "indices", -1, 8, &sub);
            if (!st) st = onnx_decode_tensor(rd, &sub, *dst);
            if (!st) st = onnx_leave(rd);
        } else if (f.num == 3) {
            st = onnx_ints(rd, &f, "dims", s->dims, &ndims, cnt.elems[3]);
        } else {
            st = onnx_skip(rd, &f);
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    s->rank = (int32_t)ndims;
    if (!s->values || !s->indices)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, s->values ? "indices" : "values",
                         "is missing: a sparse tensor needs both values and indices; re-export the model");
    for (int32_t i = 0; i < s->rank; i++)
        if (s->dims[i] < 0)
            return onnx_fail(rd, KILN_ERR_FORMAT, start, "dims",
                             "dims[%d] is %" PRId64 ": dimensions cannot be negative; re-export the model", (int)i,
                             s->dims[i]);
    return KILN_OK;
}
