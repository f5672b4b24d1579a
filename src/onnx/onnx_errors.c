/* onnx_errors.c - error messages of the ONNX reader: field paths, byte offsets, fixes.
 *
 * Every decoding error says which file, which byte, which field (as a path through the
 * message tree with the names of named messages) and what to do about it. Names are found
 * lazily: a frame only remembers its message's byte range, and the name field is looked
 * up when a message is built, so decoding never pays for it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/strbuf.h"
#include "onnx/onnx_internal.h"

/* Copies the last occurrence of string field `num` in [start, end) as printable text. */
static bool frame_name(const onnx_rd *rd, const onnx_frame *fr, char *out, size_t size) {
    if (!fr->name_field) return false;
    pb_cursor c = pb_cursor_make(rd->buf, fr->start, fr->end);
    pb_field f;
    bool found = false;
    while (pb_next(&c, &f) == PB_OK) {
        if (f.num != fr->name_field || f.wire != PB_LEN || f.short_len) continue;
        size_t n = 0;
        const uint8_t *p = rd->buf + f.pos;
        uint64_t len = f.avail;
        for (uint64_t i = 0; i < len && n + 4 < size; i++) {
            uint8_t ch = p[i];
            out[n++] = (ch >= 0x20 && ch != 0x7F && ch != '\'') ? (char)ch : (ch == '\'' ? '"' : '?');
            if (n >= 64 && i + 1 < len) {
                memcpy(out + n, "...", 3);
                n += 3;
                break;
            }
        }
        out[n] = 0;
        found = true;
    }
    return found && out[0];
}

/* Paths deeper than this print their first and last frames only. */
#define PATH_HEAD 4
#define PATH_TAIL 6

static void path_upto(const onnx_rd *rd, int depth, const char *leaf, strbuf *sb) {
    bool prev_named = false;
    for (int i = 0; i < depth; i++) {
        const onnx_frame *fr = &rd->frames[i];
        if (depth > PATH_HEAD + PATH_TAIL + 2 && i == PATH_HEAD) {
            int skip = depth - PATH_HEAD - PATH_TAIL;
            sb_printf(sb, " ... (%d levels) ...", skip);
            i += skip - 1;
            prev_named = true;
            continue;
        }
        if (i > 0) sb_append(sb, prev_named ? " ." : ".");
        sb_append(sb, fr->field);
        if (fr->index >= 0) sb_printf(sb, "[%" PRId64 "]", fr->index);
        char name[96];
        prev_named = frame_name(rd, fr, name, sizeof name);
        if (prev_named) sb_printf(sb, " '%s'", name);
    }
    if (leaf) {
        if (depth > 0) sb_append(sb, prev_named ? " ." : ".");
        sb_append(sb, leaf);
    }
}

void onnx_path(onnx_rd *rd, const char *leaf, char *buf, size_t size) {
    strbuf sb;
    sb_init(&sb);
    path_upto(rd, rd->depth, leaf, &sb);
    snprintf(buf, size, "%s", sb.len ? sb_cstr(&sb) : "ModelProto");
    sb_free(&sb);
}

/* The message for "the file ends inside this field". */
static kiln_status fail_truncated(onnx_rd *rd, int depth, const char *leaf, uint64_t field_pos,
                                  uint64_t need) {
    strbuf sb;
    sb_init(&sb);
    path_upto(rd, depth, leaf, &sb);
    uint64_t have = field_pos <= rd->size ? rd->size - field_pos : 0;
    kiln_err_set(rd->err, KILN_ERR_FORMAT,
                 "%s: field %s at byte %" PRIu64 " needs %" PRIu64 " bytes but the file ends after %" PRIu64
                 " (file size %" PRIu64 " bytes): the file is truncated (incomplete download or copy?): "
                 "re-download or re-export it",
                 rd->display, sb.len ? sb_cstr(&sb) : "ModelProto", field_pos, need, have, rd->size);
    sb_free(&sb);
    return KILN_ERR_FORMAT;
}

static int innermost_clamped(const onnx_rd *rd) {
    for (int i = rd->depth - 1; i >= 0; i--)
        if (rd->frames[i].clamped) return i;
    return -1;
}

kiln_status onnx_fail(onnx_rd *rd, kiln_status code, uint64_t off, const char *leaf, const char *fmt,
                      ...) {
    if (rd->err && rd->err->code != KILN_OK) return rd->err->code;
    int ci = innermost_clamped(rd);
    if (ci >= 0) {
        /* Whatever looks wrong inside a cut-off message follows from the cut. */
        const onnx_frame *fr = &rd->frames[ci];
        return fail_truncated(rd, ci + 1, NULL, fr->start, fr->declared);
    }
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    strbuf sb;
    sb_init(&sb);
    path_upto(rd, rd->depth, leaf, &sb);
    if (sb.len)
        kiln_err_set(rd->err, code, "%s: field %s at byte %" PRIu64 ": %s", rd->display, sb_cstr(&sb), off,
                     text);
    else
        kiln_err_set(rd->err, code, "%s: at byte %" PRIu64 ": %s", rd->display, off, text);
    sb_free(&sb);
    return code;
}

kiln_status onnx_fail_short(onnx_rd *rd, const pb_field *f, const char *leaf) {
    if (rd->err && rd->err->code != KILN_OK) return rd->err->code;
    char fallback[32];
    if (!leaf) {
        snprintf(fallback, sizeof fallback, "<field %u>", f->num);
        leaf = fallback;
    }
    if (f->pos + f->avail >= rd->size) return fail_truncated(rd, rd->depth, leaf, f->pos, f->len);
    return onnx_fail(rd, KILN_ERR_FORMAT, f->tag_pos, leaf,
                     "declares %" PRIu64 " bytes but its enclosing message has only %" PRIu64
                     " left: the length is corrupt (damaged file, or not an ONNX model); re-export the model",
                     f->len, f->avail);
}

kiln_status onnx_fail_wire(onnx_rd *rd, pb_result r, const pb_cursor *c, const pb_field *f,
                           const char *leaf) {
    if (rd->err && rd->err->code != KILN_OK) return rd->err->code;
    if (r == PB_ERR_TRUNCATED && c->end >= rd->size) {
        uint64_t need = f->len ? f->len : 1;
        if (rd->n_clamped == 0 || innermost_clamped(rd) < 0)
            return fail_truncated(rd, rd->depth, leaf, f->pos, need);
        int ci = innermost_clamped(rd);
        const onnx_frame *fr = &rd->frames[ci];
        return fail_truncated(rd, ci + 1, NULL, fr->start, fr->declared);
    }
    if (r == PB_ERR_TRUNCATED)
        return onnx_fail(rd, KILN_ERR_FORMAT, f->tag_pos, leaf,
                         "a value runs past the end of its enclosing message: the file is corrupt "
                         "(damaged, or not an ONNX model); re-export the model");
    return onnx_fail(rd, KILN_ERR_FORMAT, f->tag_pos, leaf,
                     "%s: the file is corrupt (damaged, or not an ONNX model); re-export the model",
                     pb_result_str(r));
}

kiln_status onnx_nomem(onnx_rd *rd) {
    if (rd->err && rd->err->code != KILN_OK) return rd->err->code;
    return kiln_err_set(rd->err, KILN_ERR_NOMEM, "%s: out of memory while reading the model", rd->display);
}

const char *onnx_dtype_list(void) {
    return "1 float32, 2 uint8, 3 int8, 4 uint16, 5 int16, 6 int32, 7 int64, 8 string, 9 bool, "
           "10 float16, 11 float64, 12 uint32, 13 uint64, 14 complex64, 15 complex128, 16 bfloat16, "
           "17 float8e4m3fn, 18 float8e4m3fnuz, 19 float8e5m2, 20 float8e5m2fnuz, 21 uint4, 22 int4, "
           "23 float4e2m1, 24 float8e8m0, 25 uint2, 26 int2";
}
