/* wire.h - kiln's own protobuf wire-format reader (the bytes level under the ONNX importer).
 *
 * Why not libprotobuf or a generated parser: kiln needs three things a generic parser does
 * not give. (1) Zero-copy loading: tensor raw_data must stay in the memory-mapped file,
 * not be copied into message objects, so a 2 GB model costs no extra 2 GB. (2) Byte
 * offsets: every error names where in the file it happened, so a truncated download or a
 * corrupt field is explained instead of "failed to parse". (3) Hard limits: nothing read
 * from the file can make us allocate more than the file could encode, recurse without
 * bound, or loop forever. The reader here is deliberately tiny: a cursor over a byte range
 * and a field iterator. It knows nothing about ONNX; src/onnx/import_*.c gives the fields
 * meaning.
 *
 * All offsets are absolute byte offsets from the start of the buffer (the file), 64-bit, so
 * messages can quote them and files over 4 GB work.
 */
#ifndef KILN_ONNX_WIRE_H
#define KILN_ONNX_WIRE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum pb_wire {
    PB_VARINT = 0,
    PB_FIXED64 = 1,
    PB_LEN = 2,
    PB_SGROUP = 3, /* deprecated groups: skipped as a whole (ONNX never uses them) */
    PB_EGROUP = 4,
    PB_FIXED32 = 5
} pb_wire;

typedef enum pb_result {
    PB_OK = 0,
    PB_DONE,                /* no more fields in the range */
    PB_ERR_TRUNCATED,       /* a tag, varint or fixed value runs past the end of the range */
    PB_ERR_VARINT_LONG,     /* a varint longer than 10 bytes */
    PB_ERR_VARINT_OVERFLOW, /* a 10-byte varint whose value does not fit 64 bits */
    PB_ERR_WIRE_TYPE,       /* wire type 6 or 7 */
    PB_ERR_FIELD_NUMBER,    /* field number 0 or above 2^29-1 */
    PB_ERR_GROUP            /* an end-group without a start, an unterminated or too deep group */
} pb_result;

/* Protobuf's largest field number. */
#define PB_MAX_FIELD_NUMBER 536870911u
/* Groups nested deeper than this are refused (they would only appear in hostile files). */
#define PB_MAX_GROUP_DEPTH 64

/* A position inside [pos, end) of the buffer starting at base. */
typedef struct pb_cursor {
    const uint8_t *base;
    uint64_t pos, end;
} pb_cursor;

typedef struct pb_field {
    uint32_t num;
    pb_wire wire;
    uint64_t tag_pos; /* offset of the field's tag */
    uint64_t pos;     /* offset of the payload (after the length prefix for PB_LEN) */
    uint64_t value;   /* PB_VARINT / PB_FIXED32 / PB_FIXED64 value (fixed ones little-endian) */
    uint64_t len;     /* PB_LEN: the declared payload length (also for groups: body length) */
    uint64_t avail;   /* PB_LEN: bytes actually available, min(len, end - pos) */
    bool short_len;   /* PB_LEN: declared length runs past the cursor's end */
} pb_field;

static inline pb_cursor pb_cursor_make(const uint8_t *base, uint64_t pos, uint64_t end) {
    pb_cursor c = {base, pos, end};
    return c;
}

/* Reads a varint at *pos (advancing it), not reading at or past `end`. */
pb_result pb_read_varint(const uint8_t *base, uint64_t *pos, uint64_t end, uint64_t *out);

/* Reads the next field. On PB_OK the cursor is past the field. A PB_LEN field whose
 * declared length runs past the cursor's end is still returned with PB_OK and
 * short_len set (the cursor then moves to the end): the caller decides whether that is a
 * truncated file (report, or descend into what is there to say which inner field is cut)
 * or a corrupt length. On errors f->tag_pos (and f->pos when known) say where. */
pb_result pb_next(pb_cursor *c, pb_field *f);

/* Human text for a result ("varint longer than 10 bytes"). */
const char *pb_result_str(pb_result r);
/* "varint", "64-bit", "length-delimited", "start-group", "end-group", "32-bit". */
const char *pb_wire_name(pb_wire w);

/* Occurrence and element counts of the fields 1..PB_COUNT_FIELDS-1 of one message, used to
 * size arrays before decoding so that no array is larger than the message could hold.
 * For fields whose bit is set in one of the masks, `elems` counts scalar elements over both
 * encodings (packed chunks and single values): varint elements by their terminating bytes,
 * fixed ones by length / 4 or 8. Counting stops at the first wire error (decoding finds and
 * reports it at the same place). */
#define PB_COUNT_FIELDS 32
typedef struct pb_counts {
    uint32_t n[PB_COUNT_FIELDS];
    uint64_t elems[PB_COUNT_FIELDS];
} pb_counts;

void pb_count(const uint8_t *base, uint64_t start, uint64_t end, uint32_t varint_mask,
              uint32_t fixed32_mask, uint32_t fixed64_mask, pb_counts *out);

#endif
