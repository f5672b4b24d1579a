/* onnx_sniff.c - recognises files that are not ONNX models and says what they are.
 *
 * "Failed to parse the ONNX file" is what users get today for a half-downloaded file, a
 * Git LFS pointer, a PyTorch checkpoint or a TensorFlow graph. Before decoding, kiln looks
 * at the first bytes (magic numbers) and the top-level protobuf field structure, and names
 * the actual kind of file with the command that fixes it. Only the start of the file and
 * its top-level field headers are read, never the weights.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/magic.h"
#include "onnx/onnx_internal.h"

static bool starts_with(const uint8_t *d, uint64_t n, const char *prefix, size_t len) {
    return n >= len && memcmp(d, prefix, len) == 0;
}

static bool contains(const uint8_t *d, uint64_t n, const char *needle) {
    size_t k = strlen(needle);
    if (n < k) return false;
    return memmem(d, (size_t)n, needle, k) != NULL;
}

/* "08 07 12 07 70 79 74 6f ... ("..pyto")" of the first bytes. */
static void first_bytes(const uint8_t *d, uint64_t n, char *out, size_t size) {
    size_t k = n < 16 ? (size_t)n : 16, pos = 0;
    for (size_t i = 0; i < k && pos + 4 < size; i++) pos += (size_t)snprintf(out + pos, size - pos, "%s%02x", i ? " " : "", d[i]);
    if (pos + 8 < size) {
        pos += (size_t)snprintf(out + pos, size - pos, " (\"");
        for (size_t i = 0; i < k && pos + 4 < size; i++) out[pos++] = (d[i] >= 0x20 && d[i] < 0x7F && d[i] != '"') ? (char)d[i] : '.';
        snprintf(out + pos, size - pos, "\")");
    }
}

/* Is [pos, pos+len) printable text (a name)? */
static bool printable(const uint8_t *d, uint64_t pos, uint64_t len) {
    if (len == 0 || len > 4096) return false;
    for (uint64_t i = 0; i < len; i++)
        if (d[pos + i] < 0x20 || d[pos + i] >= 0x7F) return false;
    return true;
}

/* TensorFlow GraphDef: field 1 repeated NodeDef {1: name, 2: op, ...}. ModelProto's field
 * 1 is a varint, so a length-delimited field 1 whose payload has printable strings in
 * fields 1 and 2 is a GraphDef. */
static bool looks_like_graphdef(const uint8_t *d, uint64_t n) {
    pb_cursor c = pb_cursor_make(d, 0, n);
    pb_field f;
    if (pb_next(&c, &f) != PB_OK || f.num != 1 || f.wire != PB_LEN || f.short_len) return false;
    pb_cursor s = pb_cursor_make(d, f.pos, f.pos + f.len);
    bool name = false, op = false;
    pb_field g;
    while (pb_next(&s, &g) == PB_OK) {
        if (g.wire != PB_LEN || g.short_len) continue;
        if (g.num == 1 && printable(d, g.pos, g.len)) name = true;
        if (g.num == 2 && printable(d, g.pos, g.len)) op = true;
    }
    return name && op;
}

static bool modelproto_tag(uint32_t num, pb_wire w) {
    switch (num) {
    case 1:
    case 5: return w == PB_VARINT;
    case 2: case 3: case 4: case 6: case 7: case 8: case 14: case 20: case 25: case 26: return w == PB_LEN;
    default: return false;
    }
}

static kiln_status not_onnx(kiln_error *err, const char *display, const uint8_t *d, uint64_t n, const char *why) {
    char fb[160];
    first_bytes(d, n, fb, sizeof fb);
    return kiln_err_set(err, KILN_ERR_FORMAT,
                        "%s: not an ONNX model (no ModelProto found): first bytes are %s%s%s. Check that this is "
                        "the .onnx file the exporter wrote (torch.onnx.export, tf2onnx, ...) and that it was "
                        "copied or downloaded completely",
                        display, fb, why ? "; " : "", why ? why : "");
}

kiln_status onnx_sniff(const uint8_t *d, uint64_t n, const char *display, kiln_error *err) {
    if (n == 0)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: the file is empty (0 bytes): the export or download did not finish; re-export "
                            "or re-download the model",
                            display);
    if (starts_with(d, n, KILN_ENGINE_MAGIC, KILN_ENGINE_MAGIC_LEN))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is a kiln engine file, not an ONNX model: run it with "
                            "`kiln run --loadEngine=%s` and show what it contains with `kiln inspect`; to build "
                            "a new engine, pass the original .onnx model",
                            display, display);
    static const char lfs[] = "version https://git-lfs.github.com/spec/";
    if (starts_with(d, n, lfs, sizeof lfs - 1)) {
        uint64_t real = 0;
        const uint8_t *p = memmem(d, (size_t)(n < 1024 ? n : 1024), "\nsize ", 6);
        if (p) {
            for (p += 6; p < d + n && *p >= '0' && *p <= '9' && real < UINT64_MAX / 10; p++) real = real * 10 + (uint64_t)(*p - '0');
        }
        char sz[64] = "";
        if (real) snprintf(sz, sizeof sz, " (the real file has %" PRIu64 " bytes)", real);
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is a Git LFS pointer file (%" PRIu64 " bytes of text), not the model%s: the "
                            "repository was cloned without fetching LFS objects; run `git lfs install && git lfs "
                            "pull` in the repository (or download the file itself)",
                            display, n, sz);
    }
    if (starts_with(d, n, "PK\x03\x04", 4)) {
        uint64_t head = n < 65536 ? n : 65536;
        bool pkl = contains(d, head, "data.pkl") || contains(d + (n - head), head, "data.pkl");
        if (pkl)
            return kiln_err_set(err, KILN_ERR_FORMAT,
                                "%s: this is a PyTorch checkpoint (a zip archive with data.pkl, written by "
                                "torch.save), not ONNX: export with torch.onnx.export(model, example_inputs, "
                                "'model.onnx') and pass that file",
                                display);
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is a zip archive, not an ONNX model: unpack it (unzip) and pass the .onnx "
                            "file inside",
                            display);
    }
    if (n >= 2 && d[0] == 0x80 && d[1] >= 2 && d[1] <= 5)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is a Python pickle (pickle protocol %d: a PyTorch checkpoint saved by "
                            "torch.save, or another pickled object), not ONNX: export with torch.onnx.export(model, "
                            "example_inputs, 'model.onnx') and pass that file",
                            display, d[1]);
    if (starts_with(d, n, "\x1f\x8b", 2))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this file is gzip-compressed, not an ONNX model: decompress it first (gunzip, or "
                            "tar xzf for a .tar.gz) and pass the .onnx file",
                            display);
    if (starts_with(d, n, "\x89HDF\r\n\x1a\n", 8))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is an HDF5 file (a Keras .h5 model?), not ONNX: convert it with tf2onnx "
                            "(python -m tf2onnx.convert --keras FILE --output model.onnx)",
                            display);
    if (n >= 8 && memcmp(d + 4, "TFL3", 4) == 0)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is a TensorFlow Lite model, not ONNX: convert it with tf2onnx "
                            "(python -m tf2onnx.convert --tflite FILE --output model.onnx)",
                            display);
    {
        uint64_t i = 0;
        while (i < n && i < 64 && isspace(d[i])) i++;
        if (n - i >= 5 && (strncasecmp((const char *)d + i, "<!doc", 5) == 0 ||
                           strncasecmp((const char *)d + i, "<html", 5) == 0))
            return kiln_err_set(err, KILN_ERR_FORMAT,
                                "%s: this is an HTML page, not a model: the download returned a web page (a login, "
                                "error or redirect page); download the raw file (on Hugging Face use the "
                                "'resolve' URL, not 'blob')",
                                display);
    }

    /* The first tag must be a ModelProto field with its wire type. */
    pb_cursor c = pb_cursor_make(d, 0, n);
    pb_field f;
    pb_result r = pb_next(&c, &f);
    if (r != PB_OK || !modelproto_tag(f.num, f.wire)) {
        if (looks_like_graphdef(d, n))
            return kiln_err_set(err, KILN_ERR_FORMAT,
                                "%s: this is a TensorFlow GraphDef (a frozen graph .pb), not ONNX: convert it with "
                                "tf2onnx: python -m tf2onnx.convert --graphdef %s --inputs IN:0 --outputs OUT:0 "
                                "--output model.onnx",
                                display, display);
        return not_onnx(err, display, d, n, NULL);
    }

    /* Top-level field structure, without descending into any field. */
    c = pb_cursor_make(d, 0, n);
    bool graph = false, other = false;
    uint32_t seen1 = 0, seen2 = 0;
    uint64_t fail_at = 0;
    while ((r = pb_next(&c, &f)) == PB_OK) {
        if (!modelproto_tag(f.num, f.wire) && f.num < 27) other = true;
        if (f.num == 7 && f.wire == PB_LEN) graph = true;
        if (f.num == 1 && f.wire == PB_VARINT) seen1++;
        if (f.num == 2 && f.wire == PB_LEN) {
            seen2++;
            /* ModelProto field 2 is producer_name (text); SavedModel's is a MetaGraphDef. */
            if (!printable(d, f.pos, f.avail)) other = true;
        }
    }
    if (r != PB_DONE) fail_at = f.tag_pos;
    if (!graph && r == PB_DONE && seen1 && seen2 && other)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is a TensorFlow SavedModel (saved_model.pb), not ONNX: convert the SavedModel "
                            "directory with tf2onnx: python -m tf2onnx.convert --saved-model DIR --output model.onnx",
                            display);
    if (!graph && r != PB_DONE) {
        char why[160];
        snprintf(why, sizeof why, "protobuf decoding fails at byte %" PRIu64 " (%s)", fail_at, pb_result_str(r));
        return not_onnx(err, display, d, n, why);
    }
    if (!graph && other) return not_onnx(err, display, d, n, "its fields do not match ONNX's ModelProto");
    return KILN_OK;
}
