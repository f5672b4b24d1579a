/* symdim.c - symbolic dimension algebra (see symdim.h).
 *
 * Every operation converts its operands to a small polynomial (sum of coefficient *
 * product-of-atoms), combines them, and rebuilds a canonical expression tree from the
 * result. Atoms are leaf symbols or opaque FLOORDIV/CEILDIV/MOD/MIN/MAX nodes whose
 * operands are themselves canonical. Terms are kept sorted (more factors first, then by
 * atom ids), so the tree built from equal polynomials is identical and interning gives
 * it one id. Sizes are bounded so hostile shape graphs cannot blow up memory or time.
 */
#include "ir/symdim.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/strbuf.h"

#define SD_MAX_TERMS 16
#define SD_MAX_ATOMS 8
#define SD_MAX_DEPTH 64
#define SD_MAX_NAME 200

typedef struct sd_term {
    int64_t coef;
    int32_t n;
    int32_t atoms[SD_MAX_ATOMS]; /* sorted ascending */
} sd_term;

typedef struct sd_poly {
    int32_t n;
    sd_term t[SD_MAX_TERMS]; /* canonical order; the constant term (n == 0) last */
} sd_poly;

/* ---- interning --------------------------------------------------------------------- */

static void enc_dim(strbuf *sb, ir_dim d) {
    if (d.kind == IR_DIM_CONST) sb_printf(sb, "c%" PRId64, d.value);
    else sb_printf(sb, "s%" PRId32, d.sym);
}

static int op_prec(const ir_model *m, ir_dim d) {
    if (d.kind != IR_DIM_SYM) return d.value < 0 ? 1 : 3;
    switch (m->syms[d.sym].op) {
    case IR_SYM_ADD: case IR_SYM_SUB: return 1;
    case IR_SYM_MUL: case IR_SYM_FLOORDIV: case IR_SYM_MOD: return 2;
    default: return 3;
    }
}

static void put_operand(strbuf *sb, const ir_model *m, ir_dim d, bool paren) {
    char buf[SD_MAX_NAME + 8];
    if (paren) sb_putc(sb, '(');
    sb_append(sb, ir_dim_str(m, d, buf, sizeof buf));
    if (paren) sb_putc(sb, ')');
}

static char *render(ir_model *m, ir_sym_op op, ir_dim a, ir_dim b) {
    strbuf sb;
    sb_init(&sb);
    int pa = op_prec(m, a), pb = op_prec(m, b);
    switch (op) {
    case IR_SYM_ADD: put_operand(&sb, m, a, pa < 1); sb_putc(&sb, '+'); put_operand(&sb, m, b, pb < 1); break;
    case IR_SYM_SUB: put_operand(&sb, m, a, pa < 1); sb_putc(&sb, '-'); put_operand(&sb, m, b, pb <= 1); break;
    case IR_SYM_MUL: put_operand(&sb, m, a, pa < 2); sb_putc(&sb, '*'); put_operand(&sb, m, b, pb < 2); break;
    case IR_SYM_FLOORDIV: put_operand(&sb, m, a, pa < 2); sb_putc(&sb, '/'); put_operand(&sb, m, b, pb <= 2); break;
    case IR_SYM_MOD: put_operand(&sb, m, a, pa < 2); sb_putc(&sb, '%'); put_operand(&sb, m, b, pb <= 2); break;
    case IR_SYM_CEILDIV:
        sb_append(&sb, "ceil(");
        put_operand(&sb, m, a, false); sb_putc(&sb, '/'); put_operand(&sb, m, b, pb <= 2);
        sb_putc(&sb, ')');
        break;
    case IR_SYM_MIN: case IR_SYM_MAX:
        sb_append(&sb, op == IR_SYM_MIN ? "min(" : "max(");
        put_operand(&sb, m, a, false); sb_append(&sb, ", "); put_operand(&sb, m, b, false);
        sb_putc(&sb, ')');
        break;
    default: break;
    }
    char *r = NULL;
    if (!sb.failed) {
        const char *s = sb_cstr(&sb);
        if (strlen(s) > SD_MAX_NAME) r = arena_printf(&m->arena, "%.*s...", SD_MAX_NAME - 3, s);
        else r = arena_strdup(&m->arena, s);
    }
    sb_free(&sb);
    return r;
}

/* The interned expression node (op a b); UNKNOWN on out-of-memory. Operands must be
 * canonical already; this never simplifies. */
static ir_dim intern(ir_model *m, ir_sym_op op, ir_dim a, ir_dim b) {
    if (a.kind == IR_DIM_UNKNOWN || b.kind == IR_DIM_UNKNOWN) return ir_dim_unknown();
    strbuf key;
    sb_init(&key);
    sb_printf(&key, "\x1f%d:", (int)op);
    enc_dim(&key, a);
    sb_putc(&key, ',');
    enc_dim(&key, b);
    if (key.failed) {
        sb_free(&key);
        return ir_dim_unknown();
    }
    int32_t id;
    if (hashmap_get(&m->sym_index, sb_cstr(&key), &id) && id >= 0 && id < m->n_syms) {
        const ir_sym *s = &m->syms[id];
        /* a leaf that happens to be named like our key is not our node */
        if (s->op == op && s->lhs.kind == a.kind && s->lhs.value == a.value && s->lhs.sym == a.sym &&
            s->rhs.kind == b.kind && s->rhs.value == b.value && s->rhs.sym == b.sym) {
            sb_free(&key);
            return ir_dim_sym(id);
        }
    }
    bool index_it = !hashmap_get(&m->sym_index, sb_cstr(&key), &id);
    if (m->n_syms == m->cap_syms) {
        if (m->cap_syms > INT32_MAX / 2) {
            sb_free(&key);
            return ir_dim_unknown();
        }
        int32_t ncap = m->cap_syms ? m->cap_syms * 2 : 16;
        ir_sym *ns = kiln_realloc_array(m->syms, (size_t)ncap, sizeof *ns);
        if (!ns) {
            sb_free(&key);
            return ir_dim_unknown();
        }
        m->syms = ns;
        m->cap_syms = ncap;
    }
    char *name = render(m, op, a, b);
    char *k = arena_strdup(&m->arena, sb_cstr(&key));
    sb_free(&key);
    if (!name || !k) return ir_dim_unknown();
    id = m->n_syms;
    ir_sym *s = &m->syms[id];
    memset(s, 0, sizeof *s);
    s->op = op;
    s->name = name;
    s->lhs = a;
    s->rhs = b;
    m->n_syms++;
    if (index_it && !hashmap_put(&m->sym_index, k, id)) return ir_dim_sym(id);
    return ir_dim_sym(id);
}

ir_dim ir_dim_leaf(ir_model *m, const char *name) {
    int32_t id = ir_sym_leaf(m, name);
    return id == IR_NONE ? ir_dim_unknown() : ir_dim_sym(id);
}

bool ir_dim_is_leaf(const ir_model *m, ir_dim d) {
    return d.kind == IR_DIM_SYM && d.sym >= 0 && d.sym < m->n_syms && m->syms[d.sym].op == IR_SYM_LEAF;
}

/* ---- polynomials ------------------------------------------------------------------- */

static int term_cmp(const sd_term *a, const sd_term *b) {
    if (a->n != b->n) return a->n > b->n ? -1 : 1; /* more factors first, constant last */
    for (int32_t i = 0; i < a->n; i++)
        if (a->atoms[i] != b->atoms[i]) return a->atoms[i] < b->atoms[i] ? -1 : 1;
    return 0;
}

/* Adds coef*atoms to p, merging with an equal monomial. false when too large/overflow. */
static bool poly_add_term(sd_poly *p, const sd_term *t) {
    if (t->coef == 0) return true;
    int32_t i = 0;
    while (i < p->n && term_cmp(&p->t[i], t) < 0) i++;
    if (i < p->n && term_cmp(&p->t[i], t) == 0) {
        int64_t c;
        if (__builtin_add_overflow(p->t[i].coef, t->coef, &c)) return false;
        if (c == 0) {
            memmove(&p->t[i], &p->t[i + 1], sizeof p->t[0] * (size_t)(p->n - i - 1));
            p->n--;
        } else {
            p->t[i].coef = c;
        }
        return true;
    }
    if (p->n == SD_MAX_TERMS) return false;
    memmove(&p->t[i + 1], &p->t[i], sizeof p->t[0] * (size_t)(p->n - i));
    p->t[i] = *t;
    p->n++;
    return true;
}

static bool poly_from(const ir_model *m, ir_dim d, sd_poly *p, int depth);

static bool poly_addp(sd_poly *r, const sd_poly *a, int64_t sign) {
    for (int32_t i = 0; i < a->n; i++) {
        sd_term t = a->t[i];
        if (sign < 0) {
            if (t.coef == INT64_MIN) return false;
            t.coef = -t.coef;
        }
        if (!poly_add_term(r, &t)) return false;
    }
    return true;
}

static bool term_mul(const sd_term *a, const sd_term *b, sd_term *out) {
    if (a->n + b->n > SD_MAX_ATOMS) return false;
    if (__builtin_mul_overflow(a->coef, b->coef, &out->coef)) return false;
    int32_t i = 0, j = 0, k = 0;
    while (i < a->n || j < b->n) {
        if (j >= b->n || (i < a->n && a->atoms[i] <= b->atoms[j])) out->atoms[k++] = a->atoms[i++];
        else out->atoms[k++] = b->atoms[j++];
    }
    out->n = k;
    return true;
}

static bool poly_mul(sd_poly *r, const sd_poly *a, const sd_poly *b) {
    r->n = 0;
    for (int32_t i = 0; i < a->n; i++)
        for (int32_t j = 0; j < b->n; j++) {
            sd_term t;
            if (!term_mul(&a->t[i], &b->t[j], &t)) return false;
            if (!poly_add_term(r, &t)) return false;
        }
    return true;
}

static void poly_const(sd_poly *p, int64_t c) {
    p->n = 0;
    if (c != 0) {
        p->t[0].coef = c;
        p->t[0].n = 0;
        p->n = 1;
    }
}

static bool poly_from(const ir_model *m, ir_dim d, sd_poly *p, int depth) {
    if (depth > SD_MAX_DEPTH) return false;
    if (d.kind == IR_DIM_CONST) {
        poly_const(p, d.value);
        return true;
    }
    if (d.kind != IR_DIM_SYM || d.sym < 0 || d.sym >= m->n_syms) return false;
    const ir_sym *s = &m->syms[d.sym];
    sd_poly a, b;
    switch (s->op) {
    case IR_SYM_ADD:
    case IR_SYM_SUB:
        if (!poly_from(m, s->lhs, &a, depth + 1) || !poly_from(m, s->rhs, &b, depth + 1)) return false;
        p->n = 0;
        return poly_addp(p, &a, 1) && poly_addp(p, &b, s->op == IR_SYM_ADD ? 1 : -1);
    case IR_SYM_MUL:
        if (!poly_from(m, s->lhs, &a, depth + 1) || !poly_from(m, s->rhs, &b, depth + 1)) return false;
        return poly_mul(p, &a, &b);
    default: /* leaf or opaque atom */
        p->n = 1;
        p->t[0].coef = 1;
        p->t[0].n = 1;
        p->t[0].atoms[0] = d.sym;
        return true;
    }
}

static ir_dim mono_dim(ir_model *m, const sd_term *t, int64_t coef) {
    ir_dim acc = ir_dim_unknown();
    for (int32_t i = 0; i < t->n; i++) {
        ir_dim a = ir_dim_sym(t->atoms[i]);
        acc = i == 0 ? a : intern(m, IR_SYM_MUL, acc, a);
    }
    if (t->n == 0) return ir_dim_const(coef);
    if (coef != 1) acc = intern(m, IR_SYM_MUL, ir_dim_const(coef), acc);
    return acc;
}

/* Builds the canonical tree: positive terms in order, positive constant, then negative
 * terms subtracted, then a negative constant. */
static ir_dim poly_to_dim(ir_model *m, const sd_poly *p) {
    if (p->n == 0) return ir_dim_const(0);
    if (p->n == 1 && p->t[0].n == 0) return ir_dim_const(p->t[0].coef);
    if (p->n == 1 && p->t[0].n == 1 && p->t[0].coef == 1) return ir_dim_sym(p->t[0].atoms[0]);
    int64_t c = (p->t[p->n - 1].n == 0) ? p->t[p->n - 1].coef : 0;
    int32_t nt = c ? p->n - 1 : p->n;
    ir_dim acc = ir_dim_unknown();
    bool have = false;
    for (int32_t i = 0; i < nt; i++) {
        if (p->t[i].coef <= 0) continue;
        ir_dim t = mono_dim(m, &p->t[i], p->t[i].coef);
        acc = have ? intern(m, IR_SYM_ADD, acc, t) : t;
        have = true;
    }
    if (c > 0) {
        acc = have ? intern(m, IR_SYM_ADD, acc, ir_dim_const(c)) : ir_dim_const(c);
        have = true;
    }
    for (int32_t i = 0; i < nt; i++) {
        if (p->t[i].coef >= 0) continue;
        if (p->t[i].coef == INT64_MIN) return ir_dim_unknown();
        ir_dim t = mono_dim(m, &p->t[i], -p->t[i].coef);
        acc = intern(m, IR_SYM_SUB, have ? acc : ir_dim_const(0), t);
        have = true;
    }
    if (c < 0) {
        if (c == INT64_MIN) return ir_dim_unknown();
        acc = intern(m, IR_SYM_SUB, have ? acc : ir_dim_const(0), ir_dim_const(-c));
    }
    return acc;
}

static bool is_const_poly(const sd_poly *p, int64_t *c) {
    if (p->n == 0) {
        *c = 0;
        return true;
    }
    if (p->n == 1 && p->t[0].n == 0) {
        *c = p->t[0].coef;
        return true;
    }
    return false;
}

/* ---- public operations ------------------------------------------------------------- */

static ir_dim addsub(ir_model *m, ir_dim a, ir_dim b, int64_t sign) {
    if (a.kind == IR_DIM_UNKNOWN || b.kind == IR_DIM_UNKNOWN) return ir_dim_unknown();
    if (a.kind == IR_DIM_CONST && b.kind == IR_DIM_CONST) {
        int64_t r;
        bool ovf = sign > 0 ? __builtin_add_overflow(a.value, b.value, &r)
                            : __builtin_sub_overflow(a.value, b.value, &r);
        return ovf ? ir_dim_unknown() : ir_dim_const(r);
    }
    sd_poly pa, pb, r;
    if (!poly_from(m, a, &pa, 0) || !poly_from(m, b, &pb, 0)) return ir_dim_unknown();
    r.n = 0;
    if (!poly_addp(&r, &pa, 1) || !poly_addp(&r, &pb, sign)) return ir_dim_unknown();
    return poly_to_dim(m, &r);
}

ir_dim ir_dim_add(ir_model *m, ir_dim a, ir_dim b) { return addsub(m, a, b, 1); }
ir_dim ir_dim_sub(ir_model *m, ir_dim a, ir_dim b) { return addsub(m, a, b, -1); }

ir_dim ir_dim_mul(ir_model *m, ir_dim a, ir_dim b) {
    if (ir_dim_is(a, 0) || ir_dim_is(b, 0)) return ir_dim_const(0);
    if (a.kind == IR_DIM_UNKNOWN || b.kind == IR_DIM_UNKNOWN) return ir_dim_unknown();
    if (a.kind == IR_DIM_CONST && b.kind == IR_DIM_CONST) {
        int64_t r;
        return __builtin_mul_overflow(a.value, b.value, &r) ? ir_dim_unknown() : ir_dim_const(r);
    }
    sd_poly pa, pb, r;
    if (!poly_from(m, a, &pa, 0) || !poly_from(m, b, &pb, 0)) return ir_dim_unknown();
    if (!poly_mul(&r, &pa, &pb)) return ir_dim_unknown();
    return poly_to_dim(m, &r);
}

static bool floor_divmod(int64_t a, int64_t b, int64_t *q, int64_t *r) {
    if (b == 0 || (a == INT64_MIN && b == -1)) return false;
    int64_t qq = a / b, rr = a % b;
    if (rr != 0 && ((rr < 0) != (b < 0))) {
        qq -= 1;
        rr += b;
    }
    *q = qq;
    *r = rr;
    return true;
}

/* Whether term t is divisible by monomial d (atoms contained, coef divisible); sets q. */
static bool term_div(const sd_term *t, const sd_term *d, sd_term *q) {
    if (d->coef == 0 || (t->coef == INT64_MIN && d->coef == -1)) return false;
    if (t->coef % d->coef != 0) return false;
    q->coef = t->coef / d->coef;
    int32_t i = 0, j = 0;
    q->n = 0;
    while (i < t->n) {
        if (j < d->n && t->atoms[i] == d->atoms[j]) {
            i++;
            j++;
        } else if (j < d->n && d->atoms[j] < t->atoms[i]) {
            return false;
        } else {
            q->atoms[q->n++] = t->atoms[i++];
        }
    }
    return j == d->n;
}

static bool poly_div_exact(const sd_poly *a, const sd_poly *b, sd_poly *q) {
    if (b->n != 1) return false;
    q->n = 0;
    for (int32_t i = 0; i < a->n; i++) {
        sd_term t;
        if (!term_div(&a->t[i], &b->t[0], &t)) return false;
        if (!poly_add_term(q, &t)) return false;
    }
    return true;
}

bool ir_dim_div_exact(ir_model *m, ir_dim a, ir_dim b, ir_dim *out) {
    if (a.kind == IR_DIM_UNKNOWN || b.kind == IR_DIM_UNKNOWN || ir_dim_is(b, 0)) return false;
    sd_poly pa, pb, q;
    if (!poly_from(m, a, &pa, 0) || !poly_from(m, b, &pb, 0)) return false;
    if (!poly_div_exact(&pa, &pb, &q)) return false;
    ir_dim r = poly_to_dim(m, &q);
    if (r.kind == IR_DIM_UNKNOWN) return false;
    *out = r;
    return true;
}

/* Splits p into d*Q + R where R holds the terms whose coefficient d does not divide
 * and the constant's floor remainder: floor(p/d) = Q + floor(R/d), p mod d = R mod d. */
static bool split_by_const(const sd_poly *p, int64_t d, sd_poly *q, sd_poly *r) {
    q->n = r->n = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const sd_term *t = &p->t[i];
        sd_term x = *t;
        if (t->n == 0) {
            int64_t qq, rr;
            if (!floor_divmod(t->coef, d, &qq, &rr)) return false;
            x.coef = qq;
            if (!poly_add_term(q, &x)) return false;
            x.coef = rr;
            if (!poly_add_term(r, &x)) return false;
        } else if (t->coef % d == 0) {
            x.coef = t->coef / d;
            if (!poly_add_term(q, &x)) return false;
        } else if (!poly_add_term(r, &x)) {
            return false;
        }
    }
    return true;
}

static ir_dim divmod(ir_model *m, ir_dim a, ir_dim b, ir_sym_op op) {
    if (a.kind == IR_DIM_UNKNOWN || b.kind == IR_DIM_UNKNOWN || ir_dim_is(b, 0)) return ir_dim_unknown();
    if (a.kind == IR_DIM_CONST && b.kind == IR_DIM_CONST) {
        int64_t q, r;
        if (!floor_divmod(a.value, b.value, &q, &r)) return ir_dim_unknown();
        if (op == IR_SYM_MOD) return ir_dim_const(r);
        if (op == IR_SYM_CEILDIV && r != 0) {
            if (q == INT64_MAX) return ir_dim_unknown();
            q += 1;
        }
        return ir_dim_const(q);
    }
    if (ir_dim_is(b, 1)) return op == IR_SYM_MOD ? ir_dim_const(0) : a;
    if (ir_dim_is(a, 0)) return ir_dim_const(0);
    sd_poly pa, pb, q, r;
    if (!poly_from(m, a, &pa, 0) || !poly_from(m, b, &pb, 0)) return ir_dim_unknown();
    if (poly_div_exact(&pa, &pb, &q)) return op == IR_SYM_MOD ? ir_dim_const(0) : poly_to_dim(m, &q);
    int64_t d;
    if (is_const_poly(&pb, &d) && d > 0) {
        if (op == IR_SYM_CEILDIV) {
            /* ceil(a/d) = floor((a+d-1)/d): one canonical form for both */
            return divmod(m, ir_dim_add(m, a, ir_dim_const(d - 1)), b, IR_SYM_FLOORDIV);
        }
        if (!split_by_const(&pa, d, &q, &r)) return ir_dim_unknown();
        int64_t rc;
        if (is_const_poly(&r, &rc)) {
            /* 0 <= rc < d here */
            return op == IR_SYM_MOD ? ir_dim_const(rc) : poly_to_dim(m, &q);
        }
        ir_dim atom = intern(m, op, poly_to_dim(m, &r), b);
        if (op == IR_SYM_MOD) return atom;
        return ir_dim_add(m, poly_to_dim(m, &q), atom);
    }
    return intern(m, op, poly_to_dim(m, &pa), poly_to_dim(m, &pb));
}

ir_dim ir_dim_floordiv(ir_model *m, ir_dim a, ir_dim b) { return divmod(m, a, b, IR_SYM_FLOORDIV); }
ir_dim ir_dim_ceildiv(ir_model *m, ir_dim a, ir_dim b) { return divmod(m, a, b, IR_SYM_CEILDIV); }
ir_dim ir_dim_mod(ir_model *m, ir_dim a, ir_dim b) { return divmod(m, a, b, IR_SYM_MOD); }

static int dim_order(ir_dim a, ir_dim b) {
    if (a.kind != b.kind) return a.kind < b.kind ? -1 : 1;
    if (a.kind == IR_DIM_CONST) return a.value < b.value ? -1 : a.value > b.value;
    return a.sym < b.sym ? -1 : a.sym > b.sym;
}

static ir_dim minmax(ir_model *m, ir_dim a, ir_dim b, bool is_min) {
    if (a.kind == IR_DIM_UNKNOWN || b.kind == IR_DIM_UNKNOWN) return ir_dim_unknown();
    if (a.kind == IR_DIM_CONST && b.kind == IR_DIM_CONST)
        return ir_dim_const(is_min ? (a.value < b.value ? a.value : b.value)
                                   : (a.value > b.value ? a.value : b.value));
    ir_dim diff = ir_dim_sub(m, a, b);
    if (diff.kind == IR_DIM_CONST) return (diff.value <= 0) == is_min ? a : b;
    sd_poly pa, pb;
    if (!poly_from(m, a, &pa, 0) || !poly_from(m, b, &pb, 0)) return ir_dim_unknown();
    a = poly_to_dim(m, &pa);
    b = poly_to_dim(m, &pb);
    if (dim_order(a, b) > 0) {
        ir_dim t = a;
        a = b;
        b = t;
    }
    return intern(m, is_min ? IR_SYM_MIN : IR_SYM_MAX, a, b);
}

ir_dim ir_dim_min(ir_model *m, ir_dim a, ir_dim b) { return minmax(m, a, b, true); }
ir_dim ir_dim_max(ir_model *m, ir_dim a, ir_dim b) { return minmax(m, a, b, false); }

ir_dim_eq_result ir_dim_eq(ir_model *m, ir_dim a, ir_dim b) {
    if (a.kind == IR_DIM_UNKNOWN || b.kind == IR_DIM_UNKNOWN) return IR_DIM_MAYBE;
    if (a.kind == IR_DIM_CONST && b.kind == IR_DIM_CONST) return a.value == b.value ? IR_DIM_EQ : IR_DIM_NE;
    if (a.kind == IR_DIM_SYM && b.kind == IR_DIM_SYM && a.sym == b.sym) return IR_DIM_EQ;
    sd_poly pa, pb, r;
    if (!poly_from(m, a, &pa, 0) || !poly_from(m, b, &pb, 0)) return IR_DIM_MAYBE;
    r.n = 0;
    if (!poly_addp(&r, &pa, 1) || !poly_addp(&r, &pb, -1)) return IR_DIM_MAYBE;
    int64_t c;
    if (is_const_poly(&r, &c)) return c == 0 ? IR_DIM_EQ : IR_DIM_NE;
    return IR_DIM_MAYBE;
}
