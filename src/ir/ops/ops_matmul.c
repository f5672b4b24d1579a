/* ops_matmul.c - inference for matrix products: MatMul (numpy semantics: 1-D promotion,
 * batch broadcasting), MatMulInteger / QLinearMatMul, Gemm (transA/transB, C
 * broadcasting), Einsum (explicit and implicit output, ellipsis).
 *
 * Inner-dimension mismatches are the most common export bug (a layer changed width, the
 * next did not), so their diagnostics name both producers and say which layer to fix. */
#include <ctype.h>
#include <string.h>

#include "diag/provenance.h"
#include "ir/ops/ops.h"

/* Broadcasts two batch-dim lists (right-aligned) into out (rank max(ra, rb)); returns
 * the first conflicting output axis or -1. */
static int32_t bcast_dims(ir_ictx *c, const ir_dim *a, int32_t ra, const ir_dim *b, int32_t rb, ir_dim *out) {
    int32_t r = ra > rb ? ra : rb;
    for (int32_t k = 0; k < r; k++) {
        int32_t ia = ra - 1 - k, ib = rb - 1 - k;
        ir_dim x = ia >= 0 ? a[ia] : ir_dim_const(1), y = ib >= 0 ? b[ib] : ir_dim_const(1);
        ir_dim res;
        if (ir_dim_is(x, 1)) res = y;
        else if (ir_dim_is(y, 1)) res = x;
        else {
            ir_dim_eq_result e = ir_dim_eq(c->m, x, y);
            if (e == IR_DIM_EQ) res = x.kind == IR_DIM_UNKNOWN ? y : x;
            else if (e == IR_DIM_NE && x.kind == IR_DIM_CONST && y.kind == IR_DIM_CONST) return r - 1 - k;
            else if (x.kind == IR_DIM_CONST) res = x;
            else if (y.kind == IR_DIM_CONST) res = y;
            else res = ir_dim_unknown();
        }
        out[r - 1 - k] = res;
    }
    return -1;
}

static bool is_init(ir_ictx *c, int32_t i) {
    if (!ir_has(c, i)) return false;
    return (c->g->values[c->n->inputs[i]].flags & IR_VALUE_INITIALIZER) != 0;
}

/* "Gather '/embedding/Gather'" for the node that set input i's shape, or NULL. */
static const ir_node *origin_node(ir_ictx *c, int32_t i) {
    if (!ir_has(c, i)) return NULL;
    int32_t n = diag_shape_origin(c->g, c->n->inputs[i]);
    return n == IR_NONE ? NULL : &c->g->nodes[n];
}

static bool origin_is_embedding(ir_ictx *c, const ir_node *o) {
    if (!o || strcmp(o->op_type, "Gather") != 0 || o->n_inputs < 1) return false;
    int32_t d = o->inputs[0];
    return d >= 0 && d < c->g->n_values && (c->g->values[d].flags & IR_VALUE_INITIALIZER);
}

/* The hint for a K mismatch where input `w` holds weights [K_w, N] (or [N, K_w]). */
static void inner_hint(ir_ictx *c, diag *d, int32_t data_in, ir_dim k_data, ir_dim k_w, ir_dim n_out, bool weight_known) {
    const char *kd = ir_dimstr(c, k_data), *kw = ir_dimstr(c, k_w), *no = ir_dimstr(c, n_out);
    const ir_node *o = origin_node(c, data_in);
    if (weight_known) {
        if (origin_is_embedding(c, o)) {
            ir_hint(c, d,
                    "the embedding width (%s) no longer matches the projection's input width (%s):\n"
                    "re-export with a Linear(%s, %s), or insert a %s->%s projection after the embedding.",
                    kd, kw, kd, no, kd, kw);
        } else if (o) {
            ir_hint(c, d,
                    "the output width of %s '%s' (%s) no longer matches this layer's input width (%s):\n"
                    "re-export this layer as Linear(%s, %s), or insert a %s->%s projection after '%s'.",
                    o->op_type, o->name, kd, kw, kd, no, kd, kw, o->name);
        } else {
            ir_hint(c, d,
                    "input '%s' has width %s but the weights expect %s:\n"
                    "re-export this layer as Linear(%s, %s), or feed it a tensor of width %s.",
                    ir_in_name(c, data_in), kd, kw, kd, no, kw);
        }
        return;
    }
    ir_hint(c, d,
            "a matrix product needs the reduced axis to agree (%s vs %s): check which producer changed "
            "size, transpose an operand if it is stored the other way round, or insert a projection.",
            kd, kw);
}

void ir_infer_matmul(ir_ictx *c) {
    bool qlinear = !strcmp(c->n->op_type, "QLinearMatMul");
    bool integer = !strcmp(c->n->op_type, "MatMulInteger");
    int32_t ia = 0, ib = qlinear ? 3 : 1;
    if (!ir_has(c, ia) || !ir_has(c, ib)) {
        ir_err(c, "shape-missing-input", "%s needs inputs A and B", c->n->op_type);
        return;
    }
    kiln_dtype dt = ir_in_dt(c, ia);
    if (qlinear) dt = ir_in_dt(c, 7);
    else if (integer) dt = KILN_DTYPE_INT32;
    else {
        int32_t ins[2] = {ia, ib};
        if (!ir_same_dtype(c, ins, 2, &dt)) return;
    }
    int32_t ra = ir_in_rank(c, ia), rb = ir_in_rank(c, ib);
    if (ra == 0 || rb == 0) {
        diag *d = ir_err(c, "shape-rank", "%s does not accept scalars (input %d is 0-d)", c->n->op_type, ra == 0 ? ia : ib);
        ir_fact_input(c, d, ra == 0 ? ia : ib);
        ir_hint(c, d, "use Mul for scalar scaling, or Unsqueeze the operand to a vector");
        return;
    }
    if (ra < 0 || rb < 0) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    const ir_dim *a = ir_in(c, ia)->dims, *b = ir_in(c, ib)->dims;
    ir_dim ka = a[ra - 1];
    ir_dim kb = rb == 1 ? b[0] : b[rb - 2];
    if (ir_dim_eq(c->m, ka, kb) == IR_DIM_NE) {
        diag *d = ir_err(c, "shape-matmul-inner", "inner dimensions differ, %s vs %s", ir_dimstr(c, ka), ir_dimstr(c, kb));
        ir_fact_input(c, d, ia);
        ir_fact_input(c, d, ib);
        ir_dim n = rb == 1 ? ir_dim_const(1) : b[rb - 1];
        inner_hint(c, d, ia, ka, kb, n, is_init(c, ib) && rb == 2);
        return;
    }
    int32_t ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
    int32_t br = ba > bb ? ba : bb;
    int32_t r = br + (ra > 1 ? 1 : 0) + (rb > 1 ? 1 : 0);
    ir_dim *out = r ? ir_dims_new(c, r) : NULL;
    if (r && !out) return;
    int32_t bad = bcast_dims(c, a, ba, b, bb, out);
    if (bad >= 0) {
        diag *d = ir_err(c, "shape-broadcast", "batch dimensions cannot be broadcast (batch axis %d)", bad);
        ir_fact_input(c, d, ia);
        ir_fact_input(c, d, ib);
        ir_hint(c, d, "the leading (batch) axes must be equal or 1: check the Reshape/Transpose that "
                      "produces each operand (e.g. the number of attention heads)");
        return;
    }
    int32_t k = br;
    if (ra > 1) out[k++] = a[ra - 2];
    if (rb > 1) out[k++] = b[rb - 1];
    ir_out(c, 0, dt, r, out);
}

void ir_infer_gemm(ir_ictx *c) {
    if (!ir_has(c, 0) || !ir_has(c, 1)) {
        ir_err(c, "shape-missing-input", "Gemm needs inputs A and B");
        return;
    }
    int32_t ins[3] = {0, 1, 2};
    kiln_dtype dt;
    if (!ir_same_dtype(c, ins, ir_has(c, 2) ? 3 : 2, &dt)) return;
    int32_t ra = ir_in_rank(c, 0), rb = ir_in_rank(c, 1);
    for (int32_t i = 0; i < 2; i++) {
        int32_t r = i ? rb : ra;
        if (r >= 0 && r != 2) {
            diag *d = ir_err(c, "shape-rank", "Gemm input %c must be 2-D, got rank %d", i ? 'B' : 'A', r);
            ir_fact_input(c, d, i);
            ir_hint(c, d, i == 0 ? "insert a Flatten (axis=1) before this Gemm, or export with MatMul for N-D inputs"
                                 : "Gemm weights are [K, N] (or [N, K] with transB=1)");
            return;
        }
    }
    if (ra < 0 || rb < 0) {
        ir_dim *o = ir_dims_new(c, 2); /* zeroed: both UNKNOWN */
        if (o) ir_out(c, 0, dt, 2, o);
        return;
    }
    int64_t ta = ir_ai(c, "transA", 0), tb = ir_ai(c, "transB", 0);
    const ir_dim *a = ir_in(c, 0)->dims, *b = ir_in(c, 1)->dims;
    ir_dim m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
    ir_dim kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
    if (ir_dim_eq(c->m, ka, kb) == IR_DIM_NE) {
        diag *d = ir_err(c, "shape-gemm-inner", "inner dimensions differ: A gives K=%s (transA=%d), B gives K=%s (transB=%d)",
                         ir_dimstr(c, ka), (int)ta, ir_dimstr(c, kb), (int)tb);
        ir_fact_input(c, d, 0);
        ir_fact_input(c, d, 1);
        ir_fact(c, d, "effective K: A's axis %d is %s, B's axis %d is %s", ta ? 0 : 1, ir_dimstr(c, ka), tb ? 1 : 0,
                ir_dimstr(c, kb));
        inner_hint(c, d, 0, ka, kb, n, is_init(c, 1));
        return;
    }
    ir_dim *out = ir_dims_new(c, 2);
    if (!out) return;
    out[0] = m;
    out[1] = n;
    int32_t rc = ir_in_rank(c, 2);
    if (ir_has(c, 2) && rc >= 0) {
        if (rc > 2) {
            diag *d = ir_err(c, "shape-rank", "Gemm bias C has rank %d, more than the 2-D result", rc);
            ir_fact_input(c, d, 2);
            return;
        }
        const ir_dim *cd = ir_in(c, 2)->dims;
        for (int32_t k = 0; k < rc; k++) {
            ir_dim x = cd[rc - 1 - k], y = out[1 - k];
            if (!ir_dim_is(x, 1) && ir_dim_eq(c->m, x, y) == IR_DIM_NE) {
                diag *d = ir_err(c, "shape-broadcast", "bias C %s does not broadcast to the result [%s, %s]",
                                 ir_shapestr(c, ir_in(c, 2)), ir_dimstr(c, m), ir_dimstr(c, n));
                ir_fact_input(c, d, 2);
                ir_fact_input(c, d, 1);
                ir_hint(c, d, "the bias has %s entries but the layer has %s outputs: the weight and bias "
                              "come from different layer sizes; re-export the layer",
                        ir_dimstr(c, x), ir_dimstr(c, y));
                return;
            }
        }
    }
    ir_out(c, 0, dt, 2, out);
}

/* ---- Einsum ------------------------------------------------------------------------- */

typedef struct ein_term {
    char letters[IR_MAX_RANK + 1];
    int32_t n;        /* letters, excluding the ellipsis */
    int32_t ell_pos;  /* index in letters where "..." sits, -1 if none */
} ein_term;

static bool parse_term(const char *s, size_t len, ein_term *t) {
    t->n = 0;
    t->ell_pos = -1;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == ' ') continue;
        if (ch == '.') {
            if (i + 2 >= len) return false;
            if (s[i + 1] != '.' || s[i + 2] != '.' || t->ell_pos >= 0) return false;
            t->ell_pos = t->n;
            i += 2;
            continue;
        }
        if (!isalpha((unsigned char)ch) || t->n >= IR_MAX_RANK) return false;
        t->letters[t->n++] = ch;
    }
    return true;
}

void ir_infer_einsum(ir_ictx *c) {
    const char *eq = ir_astr(c, "equation", NULL);
    if (!eq) {
        ir_err(c, "shape-attr-invalid", "Einsum has no 'equation' attribute");
        return;
    }
    int32_t nin = ir_nin(c);
    kiln_dtype dt = ir_in_dt(c, 0);
    if (nin < 1 || nin > 16) {
        ir_err(c, "shape-attr-invalid", "Einsum with %d inputs is not supported (1..16)", nin);
        return;
    }
    ein_term terms[17];
    int32_t nt = 0;
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    size_t start = 0;
    for (size_t i = 0; i <= lhs_len; i++) {
        if (i == lhs_len || eq[i] == ',') {
            if (nt >= 16 || !parse_term(eq + start, i - start, &terms[nt])) {
                diag *d = ir_err(c, "shape-attr-invalid", "cannot parse Einsum equation '%s'", eq);
                ir_hint(c, d, "terms are letters with at most one '...', separated by ',' and an optional '->'");
                return;
            }
            nt++;
            start = i + 1;
        }
    }
    if (nt != nin) {
        diag *d = ir_err(c, "shape-attr-invalid", "Einsum equation '%s' has %d operand terms but the node has %d inputs", eq, nt, nin);
        (void)d;
        return;
    }
    ir_dim letter[128];
    bool seen[128];
    int32_t count[128];
    memset(seen, 0, sizeof seen);
    memset(count, 0, sizeof count);
    ir_dim ell[IR_MAX_RANK];
    int32_t ell_rank = 0;
    bool ranks_known = true;
    for (int32_t t = 0; t < nt; t++) {
        int32_t r = ir_in_rank(c, t);
        for (int32_t k = 0; k < terms[t].n; k++) count[(unsigned char)terms[t].letters[k]]++;
        if (r < 0) {
            ranks_known = false;
            continue;
        }
        int32_t er = r - terms[t].n;
        if (er < 0 || (terms[t].ell_pos < 0 && er != 0)) {
            diag *d = ir_err(c, "shape-rank", "Einsum term %d of '%s' has %d subscripts but input %d has rank %d", t, eq,
                             terms[t].n, t, r);
            ir_fact_input(c, d, t);
            return;
        }
        const ir_dim *dims = ir_in(c, t)->dims;
        int32_t pos = 0;
        for (int32_t k = 0; k <= terms[t].n; k++) {
            if (k == terms[t].ell_pos) {
                ir_dim tmp[IR_MAX_RANK];
                int32_t nr = er > ell_rank ? er : ell_rank;
                if (bcast_dims(c, ell, ell_rank, dims + pos, er, tmp) >= 0) {
                    diag *d = ir_err(c, "shape-broadcast", "Einsum '...' dimensions of input %d do not broadcast", t);
                    ir_fact_input(c, d, t);
                    return;
                }
                memcpy(ell, tmp, sizeof(ir_dim) * (size_t)nr);
                ell_rank = nr;
                pos += er;
            }
            if (k == terms[t].n) break;
            unsigned char L = (unsigned char)terms[t].letters[k];
            ir_dim d = dims[pos++];
            if (!seen[L]) {
                seen[L] = true;
                letter[L] = d;
            } else if (ir_dim_is(letter[L], 1)) {
                letter[L] = d;
            } else if (!ir_dim_is(d, 1) && ir_dim_eq(c->m, letter[L], d) == IR_DIM_NE) {
                diag *dg = ir_err(c, "shape-einsum", "subscript '%c' is %s in one operand and %s in input %d",
                                  L, ir_dimstr(c, letter[L]), ir_dimstr(c, d), t);
                for (int32_t q = 0; q <= t; q++) ir_fact_input(c, dg, q);
                ir_hint(c, dg, "every occurrence of a subscript letter must have the same size");
                return;
            }
        }
    }
    ein_term out;
    if (arrow) {
        if (!parse_term(arrow + 2, strlen(arrow + 2), &out)) {
            ir_err(c, "shape-attr-invalid", "cannot parse the output of Einsum equation '%s'", eq);
            return;
        }
    } else {
        out.n = 0;
        out.ell_pos = 0;
        for (int L = 'A'; L <= 'z'; L++)
            if (count[L] == 1 && out.n < IR_MAX_RANK) out.letters[out.n++] = (char)L;
    }
    if (!ranks_known) {
        ir_out(c, 0, dt, -1, NULL);
        return;
    }
    int32_t r = out.n + (out.ell_pos >= 0 ? ell_rank : 0);
    if (r > IR_MAX_RANK) {
        ir_err(c, "shape-rank", "Einsum output rank %d is above kiln's limit", r);
        return;
    }
    ir_dim *od = r ? ir_dims_new(c, r) : NULL;
    if (r && !od) return;
    int32_t pos = 0;
    for (int32_t k = 0; k <= out.n; k++) {
        if (k == out.ell_pos)
            for (int32_t e = 0; e < ell_rank; e++) od[pos++] = ell[e];
        if (k == out.n) break;
        unsigned char L = (unsigned char)out.letters[k];
        if (!seen[L]) {
            ir_err(c, "shape-attr-invalid", "Einsum output subscript '%c' does not appear in any input", L);
            return;
        }
        od[pos++] = letter[L];
    }
    ir_out(c, 0, dt, r, od);
}
