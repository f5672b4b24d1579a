/* ops.h - the op registry and the context each op's inference function works in.
 *
 * Each ONNX op kiln knows has one line in ops.def (X-macro) naming its inference
 * function, which lives in the op family's file (ops_elementwise.c, ops_conv.c, ...).
 * An inference function reads its inputs' types and known values through an ir_ictx,
 * validates attributes against input ranks (bounds-checking everything: models may be
 * hostile), and either sets its outputs' types or reports an error diagnostic, which
 * poisons the node's outputs so consumers stay silent.
 *
 * Known values ("kv"): small int tensors computed from shapes (Shape -> Gather ->
 * Concat) are tracked element-wise as ir_dims so Reshape/Expand/Slice targets resolve
 * symbolically. They live in the pass, not in the IR.
 */
#ifndef KILN_IR_OPS_OPS_H
#define KILN_IR_OPS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "diag/diag.h"
#include "ir/graph.h"
#include "ir/symdim.h"

/* Known values are kept for tensors of at most this many elements. */
#define IR_KV_MAX 64

typedef struct ir_known {
    kiln_dtype dtype;
    int32_t n;  /* element count */
    ir_dim *e;  /* integer/bool elements (may be UNKNOWN individually); NULL for floats */
    double *f;  /* floating elements, NULL for ints */
} ir_known;

typedef struct infer_pass infer_pass;

typedef struct ir_ictx {
    infer_pass *p;
    ir_model *m;
    ir_graph *g;
    ir_node *n;
    int32_t node;  /* index in g->nodes */
    int64_t opset; /* the node's domain opset (defaulted when the model says nothing) */
    bool failed;   /* an error was reported: outputs are poisoned */
} ir_ictx;

typedef void (*ir_op_infer_fn)(ir_ictx *c);

#define X(id, domain, name, since, fn) void fn(ir_ictx *c);
#include "ir/ops/ops.def"
#undef X

typedef enum ir_op_id {
#define X(id, domain, name, since, fn) IR_OP_##id,
#include "ir/ops/ops.def"
#undef X
    IR_OP_COUNT
} ir_op_id;

typedef struct ir_op_info {
    const char *domain;
    const char *name;
    int since;
    ir_op_infer_fn fn;
} ir_op_info;

extern const ir_op_info ir_op_table[IR_OP_COUNT];

/* Registry id of (domain, op_type), -1 when unknown. */
int32_t ir_op_lookup(const char *domain, const char *op_type);

/* ---- inputs ----------------------------------------------------------------------- */
int32_t ir_nin(const ir_ictx *c);
bool ir_has(const ir_ictx *c, int32_t i);               /* present (not omitted) */
const ir_type *ir_in(const ir_ictx *c, int32_t i);      /* NULL when absent */
int32_t ir_in_rank(const ir_ictx *c, int32_t i);        /* -1 when unknown/absent/not a tensor */
kiln_dtype ir_in_dt(const ir_ictx *c, int32_t i);       /* UNDEFINED when unknown */
ir_dim ir_in_dim(const ir_ictx *c, int32_t i, int32_t axis); /* axis must be < rank */
const ir_known *ir_in_kv(const ir_ictx *c, int32_t i);     /* NULL when not known */
const char *ir_in_name(const ir_ictx *c, int32_t i);
/* Known int elements of input i as plain int64s (all elements must be constant). */
bool ir_in_ints(const ir_ictx *c, int32_t i, int64_t *out, int32_t cap, int32_t *n);

/* ---- attributes ------------------------------------------------------------------- */
const ir_attr *ir_attr_get(const ir_ictx *c, const char *name);
int64_t ir_ai(const ir_ictx *c, const char *name, int64_t dflt);
float ir_af(const ir_ictx *c, const char *name, float dflt);
/* Ints attribute; false when absent (n = 0). */
bool ir_aints(const ir_ictx *c, const char *name, const int64_t **v, int32_t *n);
/* String attribute compared to s (absent: compares dflt). */
bool ir_astr_is(const ir_ictx *c, const char *name, const char *dflt, const char *s);
/* String attribute as a NUL-terminated copy in the model arena (dflt when absent). */
const char *ir_astr(const ir_ictx *c, const char *name, const char *dflt);

/* ---- outputs ---------------------------------------------------------------------- */
int32_t ir_nout(const ir_ictx *c);
ir_dim *ir_dims_new(ir_ictx *c, int32_t rank);
/* Sets output i (ignored when absent) to a tensor; rank -1 = unknown shape. dims is
 * taken as-is (allocate with ir_dims_new or pass NULL with rank <= 0). Negative
 * constant dims are reported as shape errors. */
void ir_out(ir_ictx *c, int32_t i, kiln_dtype dt, int32_t rank, ir_dim *dims);
void ir_out_type(ir_ictx *c, int32_t i, const ir_type *t); /* copies */
void ir_out_like(ir_ictx *c, int32_t out, int32_t in);     /* same type as input */
ir_type *ir_out_ptr(ir_ictx *c, int32_t i);                /* NULL when absent */
ir_known *ir_kv_new(ir_ictx *c, kiln_dtype dt, int32_t n, bool floats);
void ir_out_kv(ir_ictx *c, int32_t i, ir_known *kv);
/* A fresh symbol for a data-dependent dim (NonZero's count, ...), named after the node. */
ir_dim ir_dim_fresh(ir_ictx *c, const char *what);

/* ---- diagnostics ------------------------------------------------------------------ */
/* An error on this node: poisons its outputs. Returns the diagnostic to add facts to. */
diag *ir_err(ir_ictx *c, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
diag *ir_warn(ir_ictx *c, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void ir_fact(ir_ictx *c, diag *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void ir_hint(ir_ictx *c, diag *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* "input 1 'w' is float32[128, 256] (initializer)" + its producer chain line. */
void ir_fact_input(ir_ictx *c, diag *d, int32_t i);
/* Text helpers (model arena). */
const char *ir_dimstr(ir_ictx *c, ir_dim d);
const char *ir_shapestr(ir_ictx *c, const ir_type *t);
const char *ir_intsstr(ir_ictx *c, const int64_t *v, int32_t n);

/* Normalises an axis in [-rank, rank) (or [-rank-1, rank] when `extra`), reporting
 * shape-attr-invalid when out of range. */
bool ir_axis(ir_ictx *c, int64_t axis, int32_t rank, const char *what, int32_t *out);

/* Multidirectional (numpy) broadcasting of the given present inputs into out dims;
 * reports shape-broadcast naming the axis and both dims. Unknown rank: *rank = -1. */
bool ir_broadcast(ir_ictx *c, const int32_t *inputs, int32_t n_in, int32_t *rank, ir_dim **dims);
/* Same dtype for the listed inputs (type-mismatch with a Cast hint otherwise). */
bool ir_same_dtype(ir_ictx *c, const int32_t *inputs, int32_t n_in, kiln_dtype *dt);

/* Runs inference on a subgraph whose formal inputs get the given types (NULL = keep
 * declared). Returns false on out-of-memory/depth limit (already reported). */
bool ir_infer_subgraph(ir_ictx *c, ir_graph *sub, const ir_type *const *in_types, int32_t n);

/* Product of dims (symbolic); UNKNOWN if any is unknown. */
ir_dim ir_dims_product(ir_model *m, const ir_dim *d, int32_t n);

#endif
