/* onnx_value_file.c - standalone TensorProto / SequenceProto / OptionalProto / MapProto
 * files (see onnx_value_file.h). Uses the model decoder's tensor code and error paths. */
#include "onnx/onnx_value_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx/onnx_internal.h"

static const char *kind_msg(ir_type_kind k) {
    switch (k) {
    case IR_TYPE_TENSOR: return "TensorProto";
    case IR_TYPE_SEQUENCE: return "SequenceProto";
    case IR_TYPE_OPTIONAL: return "OptionalProto";
    case IR_TYPE_MAP: return "MapProto";
    case IR_TYPE_SPARSE_TENSOR: return "SparseTensorProto";
    default: return "value";
    }
}

/* SequenceProto/OptionalProto elem_type numbering -> kind. */
static ir_type_kind elem_kind(int num) {
    switch (num) {
    case 3: return IR_TYPE_TENSOR;
    case 4: return IR_TYPE_SPARSE_TENSOR;
    case 5: return IR_TYPE_SEQUENCE;
    case 6: return IR_TYPE_MAP;
    case 7: return IR_TYPE_OPTIONAL;
    default: return IR_TYPE_UNKNOWN;
    }
}

static const char *elem_field(bool seq, int num) {
    static const char *sf[] = {"tensor_values", "sparse_tensor_values", "sequence_values", "map_values",
                               "optional_values"};
    static const char *of[] = {"tensor_value", "sparse_tensor_value", "sequence_value", "map_value",
                               "optional_value"};
    return seq ? sf[num - 3] : of[num - 3];
}

static kiln_status decode_value(onnx_rd *rd, pb_cursor *c, ir_type_kind kind, onnx_value *v);

/* SequenceProto and OptionalProto share their layout: 1 name, 2 elem_type, 3..7 values. */
static kiln_status decode_seq_or_opt(onnx_rd *rd, pb_cursor *c, bool seq, onnx_value *v) {
    pb_counts cnt;
    pb_count(rd->buf, c->pos, c->end, 0, 0, 0, &cnt);
    uint64_t total = 0;
    for (int i = 3; i <= 7; i++) total += cnt.n[i];
    if (!seq && total > 1)
        return onnx_fail(rd, KILN_ERR_FORMAT, c->pos, NULL,
                         "an optional holds at most one value but this one has %" PRIu64
                         ": the file is corrupt, or it is a sequence",
                         total);
    v->elems = ARENA_ARRAY(rd->a, onnx_value, total + 1);
    if (!v->elems) return onnx_nomem(rd);
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        if (f.num == 1) {
            st = onnx_string(rd, &f, "name", &v->name);
        } else if (f.num == 2) {
            int64_t et;
            st = onnx_varint(rd, &f, "elem_type", &et);
        } else if (f.num >= 3 && f.num <= 7) {
            if ((uint64_t)v->n_elems >= total) break;
            pb_cursor sub;
            int32_t k = v->n_elems;
            st = onnx_enter(rd, &f, c, elem_field(seq, (int)f.num), seq ? k : -1, f.num == 3 ? 8 : 1, &sub);
            if (!st) st = decode_value(rd, &sub, elem_kind((int)f.num), &v->elems[k]);
            if (!st) st = onnx_leave(rd);
            v->n_elems++;
        } else {
            st = onnx_skip(rd, &f);
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    v->has_value = seq || v->n_elems > 0;
    return KILN_OK;
}

/* MapProto: 1 name, 2 key_type, 3 keys (int64), 4 string_keys, 5 values (SequenceProto). */
static kiln_status decode_map(onnx_rd *rd, pb_cursor *c, onnx_value *v) {
    uint64_t start = c->pos;
    pb_counts cnt;
    pb_count(rd->buf, c->pos, c->end, 1u << 3, 0, 0, &cnt);
    ir_tensor *keys = ARENA_NEW(rd->a, ir_tensor);
    int64_t *ik = ARENA_ARRAY(rd->a, int64_t, cnt.elems[3] + 1);
    ir_bytes *sk = ARENA_ARRAY(rd->a, ir_bytes, cnt.n[4] + 1);
    int64_t *dims = ARENA_ARRAY(rd->a, int64_t, 1);
    if (!keys || !ik || !sk || !dims) return onnx_nomem(rd);
    uint64_t nik = 0, nsk = 0;
    int64_t key_type = 0;
    onnx_value values;
    memset(&values, 0, sizeof values);
    bool has_values = false;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        if (f.num == 1) {
            st = onnx_string(rd, &f, "name", &v->name);
        } else if (f.num == 2) {
            st = onnx_varint(rd, &f, "key_type", &key_type);
        } else if (f.num == 3) {
            st = onnx_ints(rd, &f, "keys", ik, &nik, cnt.elems[3]);
        } else if (f.num == 4) {
            if (nsk < cnt.n[4]) st = onnx_bytes(rd, &f, "string_keys", &sk[nsk++]);
        } else if (f.num == 5) {
            pb_cursor sub;
            st = onnx_enter(rd, &f, c, "values", -1, 1, &sub);
            if (!st) st = decode_value(rd, &sub, IR_TYPE_SEQUENCE, &values);
            if (!st) st = onnx_leave(rd);
            has_values = true;
        } else {
            st = onnx_skip(rd, &f);
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    bool str = key_type == KILN_DTYPE_STRING;
    uint64_t n = str ? nsk : nik;
    if ((str && nik) || (!str && nsk))
        return onnx_fail(rd, KILN_ERR_FORMAT, start, str ? "keys" : "string_keys",
                         "does not match key_type %" PRId64 ": the file is corrupt; re-create it", key_type);
    if ((uint64_t)values.n_elems != n && (has_values || n))
        return onnx_fail(rd, KILN_ERR_FORMAT, start, "values",
                         "has %d values for %" PRIu64 " keys: the file is corrupt; re-create it", (int)values.n_elems,
                         n);
    dims[0] = (int64_t)n;
    keys->name = "";
    keys->doc = "";
    keys->rank = 1;
    keys->dims = dims;
    keys->count = n;
    keys->where = IR_DATA_OWNED;
    if (str) {
        keys->dtype = KILN_DTYPE_STRING;
        keys->strings = sk;
    } else {
        keys->dtype = KILN_DTYPE_INT64;
        keys->data = ik;
        keys->nbytes = n * 8;
    }
    v->tensor = keys;
    v->elems = values.elems;
    v->n_elems = values.n_elems;
    v->has_value = true;
    return KILN_OK;
}

static kiln_status decode_value(onnx_rd *rd, pb_cursor *c, ir_type_kind kind, onnx_value *v) {
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->name = "";
    if (rd->type_depth >= ONNX_MAX_TYPE_DEPTH)
        return onnx_fail(rd, KILN_ERR_LIMIT, c->pos, NULL,
                         "values are nested more than %d deep (kiln's limit): the file is corrupt or hostile",
                         ONNX_MAX_TYPE_DEPTH);
    rd->type_depth++;
    kiln_status st;
    switch (kind) {
    case IR_TYPE_TENSOR:
        v->tensor = ARENA_NEW(rd->a, ir_tensor);
        if (!v->tensor) return onnx_nomem(rd);
        st = onnx_decode_tensor(rd, c, v->tensor);
        if (!st) v->name = v->tensor->name;
        v->has_value = true;
        break;
    case IR_TYPE_SPARSE_TENSOR:
        v->sparse = ARENA_NEW(rd->a, ir_sparse_tensor);
        if (!v->sparse) return onnx_nomem(rd);
        st = onnx_decode_sparse(rd, c, v->sparse);
        if (!st) v->name = v->sparse->values->name;
        v->has_value = true;
        break;
    case IR_TYPE_SEQUENCE:
    case IR_TYPE_OPTIONAL: st = decode_seq_or_opt(rd, c, kind == IR_TYPE_SEQUENCE, v); break;
    case IR_TYPE_MAP: st = decode_map(rd, c, v); break;
    default:
        st = onnx_fail(rd, KILN_ERR_FORMAT, c->pos, NULL,
                       "the element type is undefined: the file is corrupt; re-create it");
        break;
    }
    rd->type_depth--;
    return st;
}

/* Which message the bytes most likely are (see the header). */
static ir_type_kind guess_kind(const uint8_t *d, uint64_t n) {
    pb_cursor c = pb_cursor_make(d, 0, n);
    pb_field f;
    bool f3_len = false, f3_varint = false, f5 = false;
    int64_t f2 = -1;
    while (pb_next(&c, &f) == PB_OK) {
        if (f.num >= 8 || (f.num == 1 && f.wire == PB_VARINT)) return IR_TYPE_TENSOR;
        if (f.num == 2 && f.wire == PB_VARINT) f2 = (int64_t)f.value;
        if (f.num == 3 && f.wire == PB_LEN) f3_len = true;
        if (f.num == 3 && f.wire != PB_LEN) f3_varint = true;
        if (f.num == 5) f5 = true;
    }
    if (f3_varint) return IR_TYPE_MAP;
    if (f5 && (f2 == 6 || f2 == 7 || f2 == 8 || f2 == 12 || f2 == 13)) return IR_TYPE_MAP;
    if (f3_len || (f2 >= 0 && f2 <= 5 && !f5)) return IR_TYPE_SEQUENCE;
    return IR_TYPE_TENSOR;
}

static kiln_status decode_root(const uint8_t *d, uint64_t n, const char *display, ir_type_kind kind, arena *a,
                               onnx_value *out, kiln_error *err) {
    onnx_rd *rd = calloc(1, sizeof *rd);
    if (!rd) return kiln_err_set(err, KILN_ERR_NOMEM, "%s: out of memory", display);
    rd->buf = d;
    rd->size = n;
    rd->display = display;
    rd->a = a;
    rd->err = err;
    onnx_frame *fr = &rd->frames[rd->depth++];
    fr->field = kind_msg(kind);
    fr->index = -1;
    fr->start = 0;
    fr->end = n;
    fr->declared = n;
    fr->name_field = kind == IR_TYPE_TENSOR ? 8 : (kind == IR_TYPE_SPARSE_TENSOR ? 0 : 1);
    pb_cursor c = pb_cursor_make(d, 0, n);
    kiln_status st = decode_value(rd, &c, kind, out);
    free(rd->scratch);
    free(rd);
    return st;
}

kiln_status onnx_read_value_bytes(const void *data, size_t size, const char *display_name, ir_type_kind kind_hint,
                                  arena *a, onnx_value *out, kiln_error *err) {
    const char *display = display_name ? display_name : "<memory>";
    memset(out, 0, sizeof *out);
    const uint8_t *d = data ? data : (const uint8_t *)"";
    if (size == 0 && kind_hint != IR_TYPE_SEQUENCE && kind_hint != IR_TYPE_OPTIONAL && kind_hint != IR_TYPE_MAP)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: the file is empty (0 bytes): a tensor file needs at least a data type; re-create "
                            "it (onnx.numpy_helper.from_array(...).SerializeToString())",
                            display);
    if (kind_hint != IR_TYPE_UNKNOWN) return decode_root(d, size, display, kind_hint, a, out, err);
    ir_type_kind first = guess_kind(d, size);
    kiln_status st = decode_root(d, size, display, first, a, out, err);
    if (st == KILN_OK || st == KILN_ERR_NOMEM) return st;
    /* Try the other layouts before giving up; report the first guess's error if all fail. */
    static const ir_type_kind order[] = {IR_TYPE_TENSOR, IR_TYPE_SEQUENCE, IR_TYPE_MAP};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        if (order[i] == first) continue;
        kiln_error e2 = {0};
        onnx_value v2;
        if (decode_root(d, size, display, order[i], a, &v2, &e2) == KILN_OK) {
            kiln_err_clear(err);
            *out = v2;
            return KILN_OK;
        }
        kiln_err_clear(&e2);
    }
    return st;
}

kiln_status onnx_read_value_file(const char *path, ir_type_kind kind_hint, arena *a, onnx_value *out,
                                 kiln_error *err) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (!path) return kiln_err_set(err, KILN_ERR_INVALID_ARG, "no value file path given");
    if (stat(path, &sb) != 0) return onnx_open_error(path, errno, err);
    if (S_ISDIR(sb.st_mode))
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "%s: is a directory: pass the path of a .pb value file", path);
    if (!S_ISREG(sb.st_mode)) return kiln_err_set(err, KILN_ERR_IO, "%s: is not a regular file", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return onnx_open_error(path, errno, err);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kiln_err_set(err, KILN_ERR_IO, "%s: is not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size > SIZE_MAX / 2) {
        close(fd);
        return kiln_err_set(err, KILN_ERR_LIMIT, "%s: the file is too large to read", path);
    }
    uint8_t *buf = arena_alloc(a, size ? (size_t)size : 1);
    if (!buf) {
        close(fd);
        return kiln_err_set(err, KILN_ERR_NOMEM, "%s: out of memory reading %" PRIu64 " bytes", path, size);
    }
    uint64_t got = 0;
    while (got < size) {
        ssize_t k = read(fd, buf + got, (size_t)(size - got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (uint64_t)k;
    }
    close(fd);
    if (got != size)
        return kiln_err_set(err, KILN_ERR_IO, "%s: could only read %" PRIu64 " of %" PRIu64 " bytes", path, got, size);
    const char *display = arena_strdup(a, path);
    if (!display) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    return onnx_read_value_bytes(buf, (size_t)size, display, kind_hint, a, out, err);
}

kiln_status onnx_tensor_from_bytes(const void *data, size_t size, const char *display_name, arena *a,
                                   ir_tensor *out, kiln_error *err) {
    onnx_value v;
    kiln_status st = onnx_read_value_bytes(data, size, display_name, IR_TYPE_TENSOR, a, &v, err);
    if (st == KILN_OK) *out = *v.tensor;
    return st;
}
