/* format.h - the kiln engine file format (version 1), its constants and fixed enums.
 *
 * An engine file is what `kiln exec --saveEngine` writes and `--loadEngine` reads: the
 * optimized graph, the builder's decisions (kernel per layer, precision, memory sizes),
 * the optimization profiles, and the weights laid out so that loading is one mmap.
 * Nothing in it is ever treated as code or as a pointer; every offset, count and length
 * is checked against the bytes that hold it before it is used (engine_read.c).
 *
 * Encoding: little-endian fixed-width integers, IEEE-754 floats. A "str" is a u32 byte
 * length followed by that many bytes (no NUL; NUL bytes inside are rejected). A "dim" is
 * u8 kind (ir_dim_kind) + i32 sym + i64 value. Lists are a u32 count and the items.
 *
 * Layout
 *   [0, 128)          header (below)
 *   [128, ...)        section table: n_sections entries of 32 bytes
 *   ...               sections, each 64-byte aligned; the WEIGHTS section is
 *                     page-aligned (4096) and each tensor in it 64-byte aligned
 *
 * Header (128 bytes)
 *   off  size  field
 *     0     8  magic "KILNENG1" (magic.h)
 *     8     4  format version (ENGINE_FORMAT_VERSION)
 *    12     4  header size (128)
 *    16     2  kiln version major, 2 minor, 2 patch, 2 reserved (0)
 *    24     4  byte-order mark 0x01020304 (reads back as 0x04030201 on a big-endian host)
 *    28     1  sizeof(void*) of the builder, 1 sizeof(size_t), 1 sizeof(float), 1 sizeof(double)
 *    32     4  backend (engine_backend)
 *    36     4  flags (ENGINE_FLAG_*)
 *    40     8  CPU features the engine requires (cpu_feature_bits of cpu_kernel.h)
 *    48     8  CPU features of the machine that built it (informational)
 *    56     8  total file size in bytes
 *    64     8  section table offset (always 128 in version 1)
 *    72     4  number of sections
 *    76     4  crc32 of the section table
 *    80    44  reserved, zero
 *   124     4  crc32 of header bytes [0, 124)
 *
 * Section table entry (32 bytes): u32 id (engine_section), u32 flags (0), u64 offset,
 * u64 size, u32 crc32 of the section's bytes, u32 reserved (0). Sections do not overlap;
 * each id appears at most once; META, GRAPH, LAYERS, MEMPLAN and WEIGHTS are required.
 * Checksums are zlib's crc32. The WEIGHTS checksum is computed in parallel chunks at load
 * (crc32_combine) and can be skipped by callers who trust their storage.
 *
 * META section (readable without touching weights; `kiln inspect` reads only this,
 * LAYERS and MEMPLAN):
 *   str kiln_version; str source_model (path given at build); u64 source_size;
 *   u64 build_unix_time; f64 build_seconds;
 *   str backend_name; str gpu_arch; str cuda_version; str cublas_version; str cudnn_version
 *     (the last four empty for the CPU backend);
 *   u32 precision_flags (ENGINE_PREC_FLAG_*) ; u64 workspace_limit (bytes, 0 = unlimited);
 *   i32 build_threads; u32 build_flags (ENGINE_BUILD_*);
 *   list of profiles: each a list of { str input; u32 rank; rank x (i64 min, i64 opt, i64 max) }
 *   list of inputs, list of outputs: each { str name; u32 dtype; i32 rank (-1 unknown);
 *     rank x { u8 kind; str symbol (empty unless kind is SYM); i64 value } }
 *
 * GRAPH section (kiln's IR after the builder's passes):
 *   i64 ir_version; str producer_name; str producer_version; str domain; i64 model_version;
 *   list of opsets { str domain; i64 version }; list of metadata { str key; str value };
 *   list of syms { u8 op (ir_sym_op); str name; dim lhs; dim rhs } - an expression may
 *     only refer to symbols listed before it (no cycles);
 *   u32 main graph index; list of graph headers { i32 parent (index of an earlier graph,
 *     -1 for none); str name; str location }; then each graph's body:
 *     list of values { str name; type; u8 has_declared; [type declared in the ONNX file];
 *       i32 producer; u32 flags; u8 has_init; [tensor] }
 *     list of nodes { str name; u8 name_generated; str op_type; str domain; str overload;
 *       i64 opset; i32 source_index; list of i32 inputs; list of i32 outputs;
 *       list of attributes }
 *     list of i32 inputs; list of i32 outputs; list of i32 initializers
 *   list of functions { str name; str domain; str overload; u32 body graph index;
 *     list of str attr_names; list of attribute defaults; list of opsets }
 *   type   = u8 kind (ir_type_kind); u32 dtype; i32 rank; rank x dim; u8 has_elem; [type];
 *            str denotation   (nesting at most IR_MAX_GRAPH_DEPTH)
 *   tensor = str name; u32 dtype; i32 rank; rank x i64 dims; u8 storage (ENGINE_TSTORE_*);
 *            NONE: nothing; WEIGHTS: u64 offset, u64 nbytes (into the WEIGHTS section,
 *            64-byte aligned); INLINE: u64 nbytes + bytes; STRINGS: count x (u32 len + bytes)
 *   attribute = str name; u8 type (ir_attr_type); str ref_attr_name; then by type:
 *            FLOAT f32 | INT i64 | STRING str | TENSOR tensor | GRAPH u32 graph index |
 *            SPARSE_TENSOR sparse | TYPE_PROTO type | FLOATS/INTS/STRINGS/TENSORS/GRAPHS/
 *            SPARSE_TENSORS/TYPE_PROTOS: u32 n + n items as above
 *   sparse = tensor values; tensor indices; i32 rank; rank x i64 dims
 *   Value ids, node producers and graph indices are range-checked; every value has at
 *   most one producer, produced before it is used (nodes stay topologically sorted); a
 *   graph attribute names a graph whose parent is the graph holding the node (so nesting
 *   is a tree); tensor byte sizes must match dtype x dims.
 *
 * LAYERS section: list of layers, one per node of the main graph, in node order:
 *   i32 node index; str node name; str op_type; str tactic (kernel chosen);
 *   u32 precision (engine_precision); u32 flags (ENGINE_LAYER_*); u64 scratch bytes;
 *   f64 measured time in ms at the opt shape (0 when not timed);
 *   list of f32 quantization scales (reserved for INT8: written empty in version 1)
 *
 * MEMPLAN section: u64 weights bytes; u64 workspace limit; u64 largest scratch of any
 *   chosen tactic; list per profile { u64 activation bytes at max shape; u64 at opt }
 *
 * Compatibility: a reader accepts exactly its own format version and engines built by the
 * same kiln major.minor for the same backend, and for the CPU backend only when this CPU
 * has every required feature. Anything else is refused with what differs and the command
 * that rebuilds the engine.
 */
#ifndef KILN_ENGINE_FORMAT_H
#define KILN_ENGINE_FORMAT_H

#include <stdint.h>

#include "engine/magic.h"

#define ENGINE_FORMAT_VERSION 1u
#define ENGINE_HEADER_SIZE 128u
#define ENGINE_SECTION_ENTRY_SIZE 32u
#define ENGINE_BOM 0x01020304u
#define ENGINE_SECTION_ALIGN 64u
#define ENGINE_WEIGHTS_ALIGN 4096u
#define ENGINE_TENSOR_ALIGN 64u
#define ENGINE_MAX_SECTIONS 64u

/* Header field offsets. */
enum {
    ENGINE_OFF_MAGIC = 0,
    ENGINE_OFF_FORMAT = 8,
    ENGINE_OFF_HEADER_SIZE = 12,
    ENGINE_OFF_VERSION = 16,
    ENGINE_OFF_BOM = 24,
    ENGINE_OFF_TYPE_SIZES = 28,
    ENGINE_OFF_BACKEND = 32,
    ENGINE_OFF_FLAGS = 36,
    ENGINE_OFF_REQ_FEATURES = 40,
    ENGINE_OFF_HOST_FEATURES = 48,
    ENGINE_OFF_FILE_SIZE = 56,
    ENGINE_OFF_TABLE = 64,
    ENGINE_OFF_N_SECTIONS = 72,
    ENGINE_OFF_TABLE_CRC = 76,
    ENGINE_OFF_HEADER_CRC = 124
};

/* Fixed numbers: only ever appended to. */
typedef enum engine_section {
    ENGINE_SEC_META = 1,
    ENGINE_SEC_GRAPH = 2,
    ENGINE_SEC_LAYERS = 3,
    ENGINE_SEC_MEMPLAN = 4,
    ENGINE_SEC_WEIGHTS = 5
} engine_section;

typedef enum engine_backend {
    ENGINE_BACKEND_CPU = 0,
    ENGINE_BACKEND_CUDA = 1
} engine_backend;

/* Per-layer precision; the same numbers as kiln_precision in kiln.h. */
typedef enum engine_precision {
    ENGINE_PREC_FP32 = 0,
    ENGINE_PREC_FP16 = 1,
    ENGINE_PREC_BF16 = 2,
    ENGINE_PREC_INT8 = 3,
    ENGINE_PREC_TF32 = 4,
    ENGINE_PREC_FP8 = 5,
    ENGINE_PREC_COUNT
} engine_precision;

/* Builder precision permissions (META precision_flags). */
enum {
    ENGINE_PREC_FLAG_FP16 = 1u << 0,
    ENGINE_PREC_FLAG_INT8 = 1u << 1,
    ENGINE_PREC_FLAG_BF16 = 1u << 2,
    ENGINE_PREC_FLAG_NO_TF32 = 1u << 3,
    ENGINE_PREC_FLAG_BEST = 1u << 4
};

/* META build_flags. */
enum {
    ENGINE_BUILD_TIMING_CACHE = 1u << 0, /* a timing cache file was used */
    ENGINE_BUILD_TACTICS_TIMED = 1u << 1 /* tactics were timed (not just the default picked) */
};

/* LAYERS flags. */
enum {
    ENGINE_LAYER_PLUGIN = 1u << 0,  /* reserved: a plugin op kind (not produced yet) */
    ENGINE_LAYER_FOLDED = 1u << 1   /* reserved: computed at build time */
};

/* Tensor storage kinds inside the GRAPH section. */
typedef enum engine_tensor_storage {
    ENGINE_TSTORE_NONE = 0,
    ENGINE_TSTORE_WEIGHTS = 1,
    ENGINE_TSTORE_INLINE = 2,
    ENGINE_TSTORE_STRINGS = 3
} engine_tensor_storage;

/* Tensors at most this big are stored inline in the GRAPH section (shape constants);
 * bigger ones go to the aligned WEIGHTS section. */
#define ENGINE_INLINE_TENSOR_MAX 256u

const char *engine_section_name(uint32_t id);
const char *engine_precision_name(uint32_t p);
const char *engine_backend_name(uint32_t b);

#endif
