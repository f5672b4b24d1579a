/* graph.h - kiln's own graph representation (the IR), owned by kiln, free of protobuf.
 *
 * The ONNX importer (src/onnx/) is the only producer of this from files; every later stage
 * (validation, shape inference, diagnostics, builder, runtimes) reads and rewrites it.
 *
 * Ownership: an ir_model owns everything. Strings, dims and attribute arrays live in the
 * model's arena; the growable node/value arrays of each graph are heap arrays freed by
 * ir_model_free(). Tensor data is never copied on import when it can be avoided: `data`
 * points into the memory-mapped model (or external data) file.
 *
 * Indices, not pointers, connect things (values by int32 id inside their graph), so arrays
 * can grow and passes can renumber. IR_NONE marks "absent" (an empty optional input, a
 * graph input's producer).
 */
#ifndef KILN_IR_GRAPH_H
#define KILN_IR_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/hashmap.h"
#include "core/status.h"

#define IR_NONE (-1)

/* Hard limits that keep hostile files from causing giant allocations. */
#define IR_MAX_RANK 64
#define IR_MAX_GRAPH_DEPTH 64 /* subgraph nesting (If inside Loop inside ...) */

/* ---- Dimensions ---------------------------------------------------------------------- */

typedef enum ir_dim_kind {
    IR_DIM_UNKNOWN = 0, /* neither a value nor a name: anything */
    IR_DIM_CONST = 1,   /* a known non-negative integer in `value` */
    IR_DIM_SYM = 2      /* a symbol (dim_param name or expression) in model->syms[sym] */
} ir_dim_kind;

typedef struct ir_dim {
    ir_dim_kind kind;
    int32_t sym;   /* IR_DIM_SYM: index into ir_model.syms */
    int64_t value; /* IR_DIM_CONST */
} ir_dim;

/* Symbols are either leaves (a dim_param such as "batch") or expressions over other
 * dims, so shape subgraphs resolve to e.g. batch*seq_len. Expressions are built and
 * simplified by src/ir/symdim.c; the importer only creates leaves. */
typedef enum ir_sym_op {
    IR_SYM_LEAF = 0,
    IR_SYM_ADD,
    IR_SYM_SUB,
    IR_SYM_MUL,
    IR_SYM_FLOORDIV,
    IR_SYM_CEILDIV,
    IR_SYM_MOD,
    IR_SYM_MIN,
    IR_SYM_MAX
} ir_sym_op;

typedef struct ir_sym {
    ir_sym_op op;
    const char *name; /* leaf: the model's dim_param; expression: its rendered text */
    ir_dim lhs, rhs;  /* expression operands */
} ir_sym;

/* ---- Types --------------------------------------------------------------------------- */

typedef enum ir_type_kind {
    IR_TYPE_UNKNOWN = 0, /* no type information in the model */
    IR_TYPE_TENSOR = 1,
    IR_TYPE_SEQUENCE = 2,
    IR_TYPE_OPTIONAL = 3,
    IR_TYPE_MAP = 4,
    IR_TYPE_SPARSE_TENSOR = 5
} ir_type_kind;

typedef struct ir_type {
    ir_type_kind kind;
    kiln_dtype dtype;      /* tensor/sparse: element type; map: key type */
    int32_t rank;          /* tensor/sparse: -1 when the shape is unknown */
    ir_dim *dims;          /* rank entries */
    struct ir_type *elem;  /* sequence/optional: element type; map: value type */
    const char *denotation;
} ir_type;

/* ---- Tensors (initializers, attribute tensors, constants) ---------------------------- */

typedef enum ir_data_where {
    IR_DATA_NONE = 0,     /* no data (a type-only tensor or empty) */
    IR_DATA_MAPPED = 1,   /* `data` points into the mapped model file */
    IR_DATA_OWNED = 2,    /* `data` lives in the model arena (decoded typed fields) */
    IR_DATA_EXTERNAL = 3, /* stored in an external file, `data` set once mapped */
    IR_DATA_HEAP = 4      /* produced later (folding); freed with the model */
} ir_data_where;

typedef struct ir_bytes {
    const char *data; /* not NUL-terminated in general */
    uint64_t len;
} ir_bytes;

typedef struct ir_tensor {
    const char *name;
    kiln_dtype dtype;
    int32_t rank;
    int64_t *dims;
    uint64_t count;  /* product of dims (checked for overflow on import) */
    uint64_t nbytes; /* bytes of packed little-endian data (0 for strings) */
    const void *data; /* may be unaligned when mapped: read with memcpy or via rt_tensor_from_ir */
    ir_bytes *strings; /* dtype STRING: `count` entries */
    ir_data_where where;
    /* External data (where == IR_DATA_EXTERNAL). Paths are relative to the model's folder
     * and were checked not to escape it. */
    const char *ext_location;
    uint64_t ext_offset;
    uint64_t ext_length;
    /* Byte offset of the TensorProto in the model file, for messages. */
    uint64_t file_offset;
    const char *doc;
} ir_tensor;

typedef struct ir_sparse_tensor {
    ir_tensor *values;  /* 1-D [NNZ] */
    ir_tensor *indices; /* [NNZ] linearised or [NNZ, rank] */
    int32_t rank;
    int64_t *dims;
} ir_sparse_tensor;

/* ---- Attributes ---------------------------------------------------------------------- */

/* Numbered as ONNX's AttributeProto.AttributeType. */
typedef enum ir_attr_type {
    IR_ATTR_UNDEFINED = 0,
    IR_ATTR_FLOAT = 1,
    IR_ATTR_INT = 2,
    IR_ATTR_STRING = 3,
    IR_ATTR_TENSOR = 4,
    IR_ATTR_GRAPH = 5,
    IR_ATTR_FLOATS = 6,
    IR_ATTR_INTS = 7,
    IR_ATTR_STRINGS = 8,
    IR_ATTR_TENSORS = 9,
    IR_ATTR_GRAPHS = 10,
    IR_ATTR_SPARSE_TENSOR = 11,
    IR_ATTR_SPARSE_TENSORS = 12,
    IR_ATTR_TYPE_PROTO = 13,
    IR_ATTR_TYPE_PROTOS = 14
} ir_attr_type;

struct ir_graph;

typedef struct ir_attr {
    const char *name;
    ir_attr_type type;
    /* singular values */
    float f;
    int64_t i;
    ir_bytes s;
    ir_tensor *t;
    struct ir_graph *g;
    ir_sparse_tensor *sparse;
    ir_type *tp;
    /* lists: `n` entries in the array matching `type` */
    int32_t n;
    float *floats;
    int64_t *ints;
    ir_bytes *strings;
    ir_tensor **tensors;
    struct ir_graph **graphs;
    ir_sparse_tensor **sparses;
    ir_type **tps;
    /* inside a function body: this attribute takes the caller's attribute of this name */
    const char *ref_attr_name;
    const char *doc;
} ir_attr;

/* ---- Nodes and values ---------------------------------------------------------------- */

typedef struct ir_node {
    const char *name;    /* never NULL: models without names get "<op_type>_<index>" */
    bool name_generated; /* true when the model gave no name */
    const char *op_type;
    const char *domain;  /* "" for the default ai.onnx domain ("ai.onnx" is normalised) */
    const char *overload;
    int32_t n_inputs;
    int32_t *inputs; /* value ids; IR_NONE for an empty (omitted optional) input */
    int32_t n_outputs;
    int32_t *outputs; /* value ids; IR_NONE for an empty output name */
    int32_t n_attrs;
    ir_attr *attrs;
    int64_t opset;  /* opset version of the node's domain in the model, 0 if not imported */
    int32_t op;     /* op registry id (src/ir/ops), -1 while unknown */
    int32_t source_index; /* position in the file's node list, kept across sorting */
    uint64_t file_offset; /* byte offset of the NodeProto in the file */
    const char *doc;
} ir_node;

enum ir_value_flags {
    IR_VALUE_GRAPH_INPUT = 1u << 0,
    IR_VALUE_GRAPH_OUTPUT = 1u << 1,
    IR_VALUE_INITIALIZER = 1u << 2,
    IR_VALUE_OUTER_SCOPE = 1u << 3, /* a subgraph's reference to an enclosing graph's value */
    IR_VALUE_HAS_VALUE_INFO = 1u << 4, /* type came from value_info/input/output declarations */
    IR_VALUE_DECLARED_SAVED = 1u << 5  /* `declared` holds the file's type (set by ir_infer) */
};

typedef struct ir_value {
    const char *name;
    ir_type type;
    int32_t producer; /* node index, IR_NONE for inputs, initializers and outer-scope refs */
    uint32_t flags;
    ir_tensor *init; /* constant data: initializers (and folded constants later) */
    const char *doc;
    /* The type as declared in the file, saved by the first ir_infer() before it overwrites
     * `type` with inferred types, so later runs (other profile points) start from the
     * declarations again. Valid when flags has IR_VALUE_DECLARED_SAVED. */
    ir_type declared;
} ir_value;

/* ---- Graphs, functions, models ------------------------------------------------------- */

typedef struct ir_model ir_model;

typedef struct ir_graph {
    ir_model *model;
    struct ir_graph *parent; /* enclosing graph for subgraphs, NULL for the main graph */
    const char *name;
    const char *doc;
    /* Where a subgraph sits, for messages: "node 'If_3' (If) attribute 'then_branch'". */
    const char *location;

    ir_value *values;
    int32_t n_values, cap_values;
    ir_node *nodes; /* topologically sorted after import */
    int32_t n_nodes, cap_nodes;

    int32_t *inputs; /* graph inputs in declaration order (value ids) */
    int32_t n_inputs;
    int32_t *outputs;
    int32_t n_outputs;
    int32_t *initializers; /* value ids with IR_VALUE_INITIALIZER, in file order */
    int32_t n_initializers;
    ir_sparse_tensor **sparse_initializers;
    const char **sparse_initializer_names;
    int32_t n_sparse_initializers;

    hashmap value_index; /* name -> value id */
} ir_graph;

typedef struct ir_opset {
    const char *domain; /* "" for ai.onnx */
    int64_t version;
} ir_opset;

typedef struct ir_kv {
    const char *key;
    const char *value;
} ir_kv;

/* A model-local function (FunctionProto). Its body is a graph whose inputs and outputs
 * are the formal parameters; nodes in it may use ref_attr_name attributes. */
typedef struct ir_function {
    const char *name;
    const char *domain;
    const char *overload;
    ir_graph *body;
    const char **attr_names; /* attributes without defaults */
    int32_t n_attr_names;
    ir_attr *attr_defaults; /* attribute_proto: attributes with default values */
    int32_t n_attr_defaults;
    ir_opset *opsets;
    int32_t n_opsets;
    const char *doc;
} ir_function;

/* An external data file referenced by tensors, for `kiln inspect`. */
typedef struct ir_external_file {
    const char *location;
    uint64_t file_size; /* 0 if missing */
    int32_t n_tensors;
    uint64_t bytes_referenced;
    const uint8_t *map; /* mapped contents, NULL until mapped */
} ir_external_file;

struct ir_model {
    arena arena;
    int64_t ir_version;
    const char *producer_name;
    const char *producer_version;
    const char *domain;
    int64_t model_version;
    const char *doc;
    ir_opset *opsets;
    int32_t n_opsets;
    ir_kv *metadata;
    int32_t n_metadata;
    ir_function *functions;
    int32_t n_functions;
    ir_graph *graph;

    /* every graph (main, subgraphs, function bodies), for freeing and whole-model passes */
    ir_graph **graphs;
    int32_t n_graphs, cap_graphs;

    ir_sym *syms;
    int32_t n_syms, cap_syms;
    hashmap sym_index; /* leaf name -> sym id */

    const char *path;     /* as given by the user */
    const char *base_dir; /* folder external data is resolved against; NULL = none allowed */
    const uint8_t *file_data;
    uint64_t file_size;
    void *file_mapping; /* owned by src/onnx (unmapped in ir_model_free through the hook) */
    void (*release_mapping)(ir_model *model); /* set by the reader */

    ir_external_file *ext_files;
    int32_t n_ext_files;
};

/* ---- Construction and lookup (src/ir/graph.c) ---------------------------------------- */

ir_model *ir_model_new(void);
void ir_model_free(ir_model *model);

/* A new empty graph owned by the model (registered in model->graphs). */
ir_graph *ir_graph_new(ir_model *model, ir_graph *parent, const char *name);

/* Finds a value by name in this graph only; IR_NONE if absent. */
int32_t ir_graph_find(const ir_graph *g, const char *name);
/* Finds or creates a value by name in this graph. Returns IR_NONE on out-of-memory. */
int32_t ir_graph_value(ir_graph *g, const char *name);
/* Appends a value that must not exist yet; IR_NONE if it does or on out-of-memory. */
int32_t ir_graph_add_value(ir_graph *g, const char *name);
/* Appends a zeroed node; returns its index or IR_NONE on out-of-memory. The pointer
 * returned by ir_graph_node() is invalidated by the next append. */
int32_t ir_graph_add_node(ir_graph *g);

static inline ir_value *ir_val(const ir_graph *g, int32_t id) { return &g->values[id]; }
static inline ir_node *ir_graph_node(const ir_graph *g, int32_t id) { return &g->nodes[id]; }

/* Interns a leaf symbol (a dim_param). Returns its id or IR_NONE on out-of-memory. */
int32_t ir_sym_leaf(ir_model *model, const char *name);
/* Text of a dim: "64", "batch", "batch*seq_len", "?". Writes into buf, returns buf. */
const char *ir_dim_str(const ir_model *model, ir_dim d, char *buf, size_t bufsize);
/* "[batch, seq_len, 64]" or "[?]" for unknown rank; uses the model arena. */
const char *ir_type_shape_str(ir_model *model, const ir_type *t);
/* "float32[batch, 3, 224, 224]", "seq(float32[?])", ... ; uses the model arena. */
const char *ir_type_str(ir_model *model, const ir_type *t);

/* Attribute lookup by name; NULL if absent. */
const ir_attr *ir_node_attr(const ir_node *n, const char *name);
/* Sets *attr on node n (passes and the builder marking nodes): replaces the attributes of
 * the same name, else appends. The node gets a new attribute array in the model arena;
 * attr's name and payload must live as long as the model. false when out of memory. */
bool ir_node_set_attr(ir_model *model, ir_node *n, const ir_attr *attr);
int64_t ir_node_attr_int(const ir_node *n, const char *name, int64_t dflt);
float ir_node_attr_float(const ir_node *n, const char *name, float dflt);
/* Whether n has a string attribute `name` equal to `value` (kernels reading kiln_tactic). */
bool ir_node_attr_str_is(const ir_node *n, const char *name, const char *value);

/* Opset version of a domain in the model ("" = ai.onnx); 0 if not imported. */
int64_t ir_model_opset(const ir_model *model, const char *domain);

/* Name of an attribute type ("ints", "graph", ...). */
const char *ir_attr_type_name(ir_attr_type t);

#endif
