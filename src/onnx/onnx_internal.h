/* onnx_internal.h - shared state of the ONNX decoder/importer (src/onnx only).
 *
 * The importer decodes protobuf messages straight into the IR in one pass (no
 * intermediate message objects). An onnx_rd carries what every decode function needs:
 * the bytes, the arena things are allocated in, the error slot, and a stack of frames
 * describing where in the message tree we are. The frames make error messages exact
 * ("graph.node[3] 'conv1' .attribute[0] 'kernel_shape'") at zero cost on the happy path:
 * names are only looked up (by rescanning the frame's message) when an error is reported.
 */
#ifndef KILN_ONNX_INTERNAL_H
#define KILN_ONNX_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/hashmap.h"
#include "core/status.h"
#include "ir/graph.h"
#include "onnx/wire.h"

/* Packed float/int data in ONNX files is little-endian and is copied as is. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kiln's ONNX reader assumes a little-endian host");

/* Total message nesting (model > graph > node > attribute > graph > ...). Each subgraph
 * level costs 3-4 frames, so this sits above 4 * IR_MAX_GRAPH_DEPTH. */
#define ONNX_MAX_MSG_DEPTH 320
/* Nesting of types inside types (seq(seq(map(...)))) and of values in value files. */
#define ONNX_MAX_TYPE_DEPTH 100

typedef struct onnx_frame {
    const char *field;   /* "graph", "node", "attribute", ... */
    int64_t index;       /* position in a repeated field, -1 for singular fields */
    uint64_t start, end; /* the message's payload as decoded (clamped when truncated) */
    uint64_t tag_pos;    /* where the field's tag is */
    uint64_t declared;   /* declared payload length */
    uint32_t name_field; /* field number holding the message's name, 0 if none */
    bool clamped;        /* declared length runs past the end of the file */
} onnx_frame;

/* One mapped file (the model or an external data file). */
typedef struct onnx_map {
    void *addr;
    uint64_t size;
} onnx_map;

/* Everything the reader owns on a model: mappings (unmapped by release_mapping) and the
 * external file table (model->ext_files points at `ext`). Hung on model->file_mapping. */
typedef struct onnx_owner {
    onnx_map main;
    onnx_map *ext_maps; /* parallel to ext */
    ir_external_file *ext;
    int32_t n_ext, cap_ext;
    hashmap ext_index;  /* location -> index */
    char *base_real;    /* realpath of the model's folder, resolved on first use */
} onnx_owner;

typedef struct onnx_rd {
    const uint8_t *buf;
    uint64_t size;
    const char *display; /* file name for messages */
    arena *a;
    ir_model *model;    /* NULL when reading value files */
    onnx_owner *owner;  /* NULL when reading value files */
    bool check_external;
    kiln_error *err;
    onnx_frame frames[ONNX_MAX_MSG_DEPTH];
    int depth;
    int graph_depth;
    int type_depth;
    int n_clamped;      /* frames currently clamped at the end of the file */
    char *scratch;      /* reusable NUL-terminated copy of a name, for lookups */
    size_t scratch_cap;
} onnx_rd;

/* ---- errors (onnx_errors.c) ---------------------------------------------------------- */

/* Reports an error at byte `off` inside the current frame path, with `leaf` (a field name
 * such as "raw_data", or NULL) appended. The message reads
 *   "<file>: field <path> at byte <off>: <text>"
 * While a frame is clamped (the file ends inside it), the report becomes the truncation
 * message for that frame, since that is the root cause. Returns `code`. */
kiln_status onnx_fail(onnx_rd *rd, kiln_status code, uint64_t off, const char *leaf, const char *fmt,
                      ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Reports a wire-level result r for field f (leaf may be NULL). */
kiln_status onnx_fail_wire(onnx_rd *rd, pb_result r, const pb_cursor *c, const pb_field *f,
                           const char *leaf);

/* Reports a length-delimited field whose payload runs past the end of its enclosing range
 * (truncated file or corrupt length). */
kiln_status onnx_fail_short(onnx_rd *rd, const pb_field *f, const char *leaf);

/* Renders the current path (plus leaf) into buf. */
void onnx_path(onnx_rd *rd, const char *leaf, char *buf, size_t size);

/* ---- frames and field helpers (onnx_decode.c) ---------------------------------------- */

/* Enters the message in field f: pushes a frame, checks nesting, and prepares a cursor over
 * its payload. A payload cut by the end of the file is entered clamped, so the innermost
 * cut field gets reported. Returns KILN_OK or an error already reported. */
kiln_status onnx_enter(onnx_rd *rd, const pb_field *f, const pb_cursor *parent, const char *field,
                       int64_t index, uint32_t name_field, pb_cursor *sub);
/* Leaves the frame entered last; reports truncation when it was clamped. */
kiln_status onnx_leave(onnx_rd *rd);

/* Checks f has wire type w (reports with leaf otherwise). */
kiln_status onnx_expect(onnx_rd *rd, const pb_field *f, pb_wire w, const char *leaf);
/* A length-delimited field as bytes pointing into the buffer (not copied). */
kiln_status onnx_bytes(onnx_rd *rd, const pb_field *f, const char *leaf, ir_bytes *out);
/* A string field copied into the arena with a NUL appended. */
kiln_status onnx_string(onnx_rd *rd, const pb_field *f, const char *leaf, const char **out);
/* A varint field (int32/int64/enum). */
kiln_status onnx_varint(onnx_rd *rd, const pb_field *f, const char *leaf, int64_t *out);
/* Skips a field that kiln does not use (after checking it is whole). */
kiln_status onnx_skip(onnx_rd *rd, const pb_field *f);
/* Allocation failure report. */
kiln_status onnx_nomem(onnx_rd *rd);

/* Decodes the repeated int64 field f (packed or single) appending into arr[*n] (capacity
 * cap, from pb_count). */
kiln_status onnx_ints(onnx_rd *rd, const pb_field *f, const char *leaf, int64_t *arr, uint64_t *n,
                      uint64_t cap);
/* Same for repeated float (fixed32). */
kiln_status onnx_floats(onnx_rd *rd, const pb_field *f, const char *leaf, float *arr, uint64_t *n,
                        uint64_t cap);

/* A NUL-terminated temporary copy of bytes (valid until the next call). */
const char *onnx_scratch(onnx_rd *rd, const char *data, uint64_t len);

/* "1 (float32), 2 (uint8), ..." list of valid data types, for messages. */
const char *onnx_dtype_list(void);

/* ---- messages (import_*.c) ----------------------------------------------------------- */

kiln_status onnx_decode_tensor(onnx_rd *rd, pb_cursor *c, ir_tensor *t);
kiln_status onnx_decode_sparse(onnx_rd *rd, pb_cursor *c, ir_sparse_tensor *s);
kiln_status onnx_decode_type(onnx_rd *rd, pb_cursor *c, ir_type *t);
kiln_status onnx_decode_graph(onnx_rd *rd, pb_cursor *c, ir_graph *g);
/* NodeProto into a new node of g (values are created in g). */
kiln_status onnx_decode_node(onnx_rd *rd, pb_cursor *c, ir_graph *g, int32_t source_index);
/* ValueInfoProto: declares the type of a value of g, adds `flag`, returns its id. */
kiln_status onnx_decode_value_info(onnx_rd *rd, pb_cursor *c, ir_graph *g, uint32_t flag, int32_t *id);
kiln_status onnx_decode_attr(onnx_rd *rd, pb_cursor *c, ir_graph *g, ir_attr *a);
kiln_status onnx_decode_model(onnx_rd *rd);
/* Resolves an external tensor: checks its path and (with check_external) maps its file. */
kiln_status onnx_external_resolve(onnx_rd *rd, ir_tensor *t, uint64_t tensor_pos);

/* ---- sniffing (onnx_sniff.c) --------------------------------------------------------- */

/* Recognises files that are not ONNX models (empty, PyTorch, Git LFS pointer, TensorFlow,
 * kiln engine, HTML, ...) and reports them with what to do. KILN_OK if the bytes look like
 * they could be a ModelProto. */
kiln_status onnx_sniff(const uint8_t *data, uint64_t size, const char *display, kiln_error *err);

/* ---- files (onnx_load.c) --------------------------------------------------------------- */

/* Explains a failed open/stat of `path` (errno e), or a directory given as a file. */
kiln_status onnx_open_error(const char *path, int e, kiln_error *err);
kiln_status onnx_directory_error(const char *path, kiln_error *err);

/* ---- external data (onnx_external.c) ------------------------------------------------- */

void onnx_owner_free(onnx_owner *o);
/* The model's release_mapping hook: frees the onnx_owner in model->file_mapping. */
void onnx_release_mapping(ir_model *m);

#endif
