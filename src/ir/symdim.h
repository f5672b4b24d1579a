/* symdim.h - arithmetic on dimensions that may be symbolic (batch, seq_len, batch*seq_len).
 *
 * Shape inference computes output dims from input dims: Conv's (H+2p-k)/s+1, Reshape's
 * -1 as total/known, Concat's sum. With dynamic models those inputs are symbols (the
 * model's dim_param names), so the arithmetic must work on symbols too, and two ways of
 * computing the same quantity must give the same symbol (batch*seq_len == seq_len*batch),
 * otherwise later equality checks would report false mismatches.
 *
 * Representation: each ir_dim is UNKNOWN, CONST or SYM (an entry of model->syms). Leaves
 * are dim_params; expressions are ADD/SUB/MUL over a canonical sum-of-products, and
 * FLOORDIV/CEILDIV/MOD/MIN/MAX are opaque "atoms" over canonical operands. Every result
 * is rebuilt from its normal form and interned in model->syms (keyed in model->sym_index
 * under a "\x1f"-prefixed structural key), so equal expressions share one id.
 *
 * Rules: UNKNOWN in, UNKNOWN out (never invent a value); overflow, division by zero, or
 * an expression too large to keep (more than 16 terms or 8 factors) gives UNKNOWN.
 * Constants may be negative here (intermediate values such as H-k); callers that put a
 * dim into a tensor type check it is non-negative.
 */
#ifndef KILN_IR_SYMDIM_H
#define KILN_IR_SYMDIM_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"

static inline ir_dim ir_dim_const(int64_t v) {
    ir_dim d = {IR_DIM_CONST, IR_NONE, v};
    return d;
}
static inline ir_dim ir_dim_unknown(void) {
    ir_dim d = {IR_DIM_UNKNOWN, IR_NONE, 0};
    return d;
}
static inline ir_dim ir_dim_sym(int32_t sym) {
    ir_dim d = {IR_DIM_SYM, sym, 0};
    return d;
}
static inline bool ir_dim_is(ir_dim d, int64_t v) { return d.kind == IR_DIM_CONST && d.value == v; }
static inline bool ir_dim_known(ir_dim d) { return d.kind != IR_DIM_UNKNOWN; }

/* A leaf symbol by name (interned); UNKNOWN on out-of-memory. */
ir_dim ir_dim_leaf(ir_model *m, const char *name);

ir_dim ir_dim_add(ir_model *m, ir_dim a, ir_dim b);
ir_dim ir_dim_sub(ir_model *m, ir_dim a, ir_dim b);
ir_dim ir_dim_mul(ir_model *m, ir_dim a, ir_dim b);
ir_dim ir_dim_floordiv(ir_model *m, ir_dim a, ir_dim b); /* floor(a/b) */
ir_dim ir_dim_ceildiv(ir_model *m, ir_dim a, ir_dim b);  /* ceil(a/b) */
ir_dim ir_dim_mod(ir_model *m, ir_dim a, ir_dim b);      /* a - b*floor(a/b) */
ir_dim ir_dim_min(ir_model *m, ir_dim a, ir_dim b);
ir_dim ir_dim_max(ir_model *m, ir_dim a, ir_dim b);

/* Exact quotient a/b when b divides a in the polynomial sense (batch*seq*768 / 768 =
 * batch*seq, batch*seq/seq = batch); false when it does not or is not known to. */
bool ir_dim_div_exact(ir_model *m, ir_dim a, ir_dim b, ir_dim *out);

typedef enum ir_dim_eq_result {
    IR_DIM_NE = 0,     /* provably different (64 vs 128, n vs n+1) */
    IR_DIM_EQ = 1,     /* provably equal (same constant or same normal form) */
    IR_DIM_MAYBE = 2   /* depends on symbol values, or something is unknown */
} ir_dim_eq_result;

ir_dim_eq_result ir_dim_eq(ir_model *m, ir_dim a, ir_dim b);

/* True when the dim is a symbol that is a leaf (a dim_param), not an expression. */
bool ir_dim_is_leaf(const ir_model *m, ir_dim d);

#endif
