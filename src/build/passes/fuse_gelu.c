/* fuse_gelu.c - recognises GELU written out as elementwise nodes and replaces it with
 * one ONNX Gelu node (opset 20), which fuse_activation.c can then move into the producing
 * MatMul's epilogue (kiln_activation = "Gelu" / "GeluTanh").
 *
 * Exporters (PyTorch before opset 20, TensorFlow, HuggingFace BERT) write
 *     erf form:   y = x * 0.5 * (1 + Erf(x / sqrt 2))            -> Gelu approximate="none"
 *     tanh form:  y = 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
 *                                                             -> Gelu approximate="tanh"
 * as 5 to 9 nodes, each a full pass over memory; BERT-base runs 12 of them over a
 * 128x3072 tensor per sequence. The matcher starts at each Erf / Tanh node and walks:
 *   head (erf):  Div(x, sqrt 2) | Mul(x, 1/sqrt 2) (either operand order)
 *   head (tanh): Mul(Add(x, Mul(x^3, 0.044715)), sqrt(2/pi)) with x^3 = Pow(x, 3) or
 *                Mul(Mul(x, x), x) (any operand orders)
 *   then Add(_, 1) and one of the three tails
 *     Mul(Mul(x, a), 0.5)     Mul(Mul(x, 0.5), a)     Mul(x, Mul(a, 0.5))
 * Constants are checked by value (float32 scalars, relative tolerance 1e-5: exporters
 * print sqrt 2 with 7-8 digits), and a constant of rank 1 is accepted only when x's rank
 * is known and >= 1 (otherwise its broadcast could change the output's shape). Every
 * intermediate value must have exactly one reader and not be a graph output or read by a
 * subgraph, so nothing another node needs is fused away; x itself may have other readers.
 * x must be known to be float32 (the CPU Gelu kernel's type), so types are inferred first.
 * The node producing y is rewritten in place into the Gelu (keeping its name, so profiles
 * and messages point at the last node of the pattern); the others are removed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"
#include "diag/diag.h"
#include "ir/infer.h"
#include "ir/ops/ops.h"

typedef struct gelu_match {
    const ir_graph *g;
    const pass_uses *u;
    const bool *dead;
    int32_t x;         /* the GELU's input value */
    int32_t nodes[16]; /* pattern nodes to remove (all but the last); at most 9 are taken */
    int32_t n_nodes;
    bool overflow; /* more nodes than fit: never for the patterns above, checked anyway */
} gelu_match;

static bool is_op(const ir_node *n, const char *op) { return !n->domain[0] && !strcmp(n->op_type, op); }

/* The live node producing value v with op type `op`, two inputs and one output; -1 if none. */
static int32_t producer_op(const gelu_match *m, int32_t v, const char *op, int32_t n_in) {
    if (v < 0) return -1;
    int32_t p = m->g->values[v].producer;
    if (p < 0 || p >= m->g->n_nodes || m->dead[p]) return -1;
    const ir_node *n = &m->g->nodes[p];
    if (!is_op(n, op) || n->n_inputs != n_in || n->n_outputs != 1 || n->outputs[0] != v) return -1;
    for (int32_t k = 0; k < n_in; k++)
        if (n->inputs[k] < 0) return -1;
    return p;
}

/* An intermediate value: exactly one reader, not a graph output, not read by name from
 * a subgraph (those must keep existing). */
static bool private_value(const gelu_match *m, int32_t v) { return v >= 0 && m->u->count[v] == 1 && !m->u->pinned[v]; }

/* The single reader of v when v is private and that reader is a live op_type node. */
static int32_t sole_reader_op(const gelu_match *m, int32_t v, const char *op) {
    if (!private_value(m, v)) return -1;
    int32_t r = m->u->reader[v];
    if (r < 0 || m->dead[r]) return -1;
    const ir_node *n = &m->g->nodes[r];
    if (!is_op(n, op) || n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0) return -1;
    return r;
}

static int32_t known_rank(const ir_graph *g, int32_t v) {
    const ir_value *iv = &g->values[v];
    return iv->type.kind == IR_TYPE_TENSOR ? iv->type.rank : -1;
}

/* Whether value v is a float32 scalar constant within rel. 1e-5 of `want`, and harmless
 * to broadcast against x (rank 0, or rank <= x's known rank). */
static bool const_is(const gelu_match *m, int32_t v, double want) {
    const ir_tensor *t = pass_const(m->g, v);
    if (!t || t->dtype != KILN_DTYPE_FLOAT || t->count != 1 || !t->data) return false;
    if (t->rank > 0) {
        int32_t xr = m->x >= 0 ? known_rank(m->g, m->x) : -1;
        if (xr < t->rank) return false;
    }
    float f;
    memcpy(&f, t->data, sizeof f); /* data of mapped tensors may be unaligned */
    return isfinite(f) && fabs((double)f - want) <= 1e-5 * fabs(want);
}

/* For a two-input node: the index (0/1) of the input equal to value v, or -1. */
static int32_t operand_index(const ir_node *n, int32_t v) {
    if (n->inputs[0] == v) return 0;
    if (n->inputs[1] == v) return 1;
    return -1;
}

static void take(gelu_match *m, int32_t node) {
    if (m->n_nodes < (int32_t)(sizeof m->nodes / sizeof m->nodes[0])) m->nodes[m->n_nodes++] = node;
    else m->overflow = true;
}

/* Mul with one operand == v and the other the constant c: the index of the v operand. */
static bool mul_by_const(const gelu_match *m, const ir_node *n, int32_t v, double c) {
    int32_t k = operand_index(n, v);
    return k >= 0 && n->inputs[0] != n->inputs[1] && const_is(m, n->inputs[1 - k], c);
}

/* Erf head: erf input e = Div(x, sqrt 2) or Mul(x, 1/sqrt 2); sets m->x. */
static bool match_erf_head(gelu_match *m, const ir_node *erf) {
    int32_t e = erf->inputs[0];
    if (!private_value(m, e)) return false;
    int32_t p = producer_op(m, e, "Div", 2);
    if (p >= 0) {
        const ir_node *d = &m->g->nodes[p];
        m->x = d->inputs[0];
        if (!const_is(m, d->inputs[1], 1.41421356237309505)) return false;
        take(m, p);
        return true;
    }
    p = producer_op(m, e, "Mul", 2);
    if (p < 0) return false;
    const ir_node *mu = &m->g->nodes[p];
    for (int32_t k = 0; k < 2; k++) {
        m->x = mu->inputs[k];
        if (mu->inputs[0] != mu->inputs[1] && const_is(m, mu->inputs[1 - k], 0.70710678118654752)) {
            take(m, p);
            return true;
        }
    }
    return false;
}

/* x^3 = Pow(x, 3) or Mul(Mul(x, x), x): whether value c is that cube of m->x. */
static bool match_cube(gelu_match *m, int32_t c) {
    if (!private_value(m, c)) return false;
    int32_t p = producer_op(m, c, "Pow", 2);
    if (p >= 0) {
        const ir_node *pw = &m->g->nodes[p];
        if (pw->inputs[0] != m->x || !const_is(m, pw->inputs[1], 3.0)) return false;
        take(m, p);
        return true;
    }
    p = producer_op(m, c, "Mul", 2);
    if (p < 0) return false;
    const ir_node *outer = &m->g->nodes[p];
    int32_t k = operand_index(outer, m->x);
    if (k < 0) return false;
    int32_t sq = outer->inputs[1 - k];
    if (!private_value(m, sq)) return false;
    int32_t q = producer_op(m, sq, "Mul", 2);
    if (q < 0) return false;
    const ir_node *inner = &m->g->nodes[q];
    if (inner->inputs[0] != m->x || inner->inputs[1] != m->x) return false;
    take(m, p);
    take(m, q);
    return true;
}

/* Tanh head: tanh input s = Mul(r, sqrt(2/pi)), r = Add(x, Mul(x^3, 0.044715)). */
static bool match_tanh_head(gelu_match *m, const ir_node *th) {
    int32_t s = th->inputs[0];
    if (!private_value(m, s)) return false;
    int32_t p = producer_op(m, s, "Mul", 2);
    if (p < 0) return false;
    const ir_node *ms = &m->g->nodes[p];
    for (int32_t k = 0; k < 2; k++) {
        int32_t r = ms->inputs[k];
        int32_t base = m->n_nodes;
        m->x = IR_NONE; /* rank checks of the constant wait until x is known */
        int32_t ra = private_value(m, r) ? producer_op(m, r, "Add", 2) : -1;
        if (ra < 0) continue;
        const ir_node *add = &m->g->nodes[ra];
        for (int32_t j = 0; j < 2; j++) {
            m->n_nodes = base;
            m->x = add->inputs[j];
            int32_t q = add->inputs[1 - j];
            if (q == m->x || !private_value(m, q) || !const_is(m, ms->inputs[1 - k], 0.79788456080286536)) continue;
            int32_t qm = producer_op(m, q, "Mul", 2);
            if (qm < 0) continue;
            const ir_node *mq = &m->g->nodes[qm];
            bool ok = false;
            for (int32_t i = 0; i < 2 && !ok; i++) {
                int32_t save = m->n_nodes;
                if (const_is(m, mq->inputs[1 - i], 0.044715) && match_cube(m, mq->inputs[i])) ok = true;
                else m->n_nodes = save;
            }
            if (!ok) continue;
            take(m, p);
            take(m, ra);
            take(m, qm);
            return true;
        }
        m->n_nodes = base;
    }
    return false;
}

/* From the Erf/Tanh output: Add(_, 1) then one of the three tails. Returns the node
 * producing y (the one rewritten into the Gelu), or -1. */
static int32_t match_tail(gelu_match *m, int32_t fn_out) {
    int32_t ai = sole_reader_op(m, fn_out, "Add");
    if (ai < 0) return -1;
    const ir_node *add = &m->g->nodes[ai];
    int32_t k = operand_index(add, fn_out);
    if (k < 0 || add->inputs[0] == add->inputs[1] || !const_is(m, add->inputs[1 - k], 1.0)) return -1;
    int32_t a = add->outputs[0];
    int32_t mi = sole_reader_op(m, a, "Mul");
    if (mi < 0) return -1;
    const ir_node *mu = &m->g->nodes[mi];
    int32_t ka = operand_index(mu, a);
    if (ka < 0 || mu->inputs[0] == mu->inputs[1]) return -1;
    int32_t o = mu->inputs[1 - ka];
    take(m, ai);
    if (o == m->x) {
        /* Mul(Mul(x, a), 0.5) */
        int32_t li = sole_reader_op(m, mu->outputs[0], "Mul");
        if (li < 0 || !mul_by_const(m, &m->g->nodes[li], mu->outputs[0], 0.5)) return -1;
        take(m, mi);
        return li;
    }
    if (const_is(m, o, 0.5)) {
        /* Mul(x, Mul(a, 0.5)) */
        int32_t li = sole_reader_op(m, mu->outputs[0], "Mul");
        if (li < 0) return -1;
        const ir_node *last = &m->g->nodes[li];
        int32_t kk = operand_index(last, mu->outputs[0]);
        if (kk < 0 || last->inputs[1 - kk] != m->x) return -1;
        take(m, mi);
        return li;
    }
    /* Mul(Mul(x, 0.5), a): o = x * 0.5 computed on the side */
    if (!private_value(m, o)) return -1;
    int32_t hi = producer_op(m, o, "Mul", 2);
    if (hi < 0 || !mul_by_const(m, &m->g->nodes[hi], m->x, 0.5)) return -1;
    take(m, hi);
    return mi;
}

static bool known_f32(const ir_graph *g, int32_t v) {
    const ir_value *iv = &g->values[v];
    if (iv->init) return iv->init->dtype == KILN_DTYPE_FLOAT;
    return iv->type.kind == IR_TYPE_TENSOR && iv->type.dtype == KILN_DTYPE_FLOAT;
}

kiln_status build_pass_fuse_gelu(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                 kiln_error *err) {
    (void)opts;
    ir_graph *g = model->graph;
    /* x must be known float32: infer types the importer left unknown (as fuse_residual.c
     * does; inference problems only mean fewer fusions). */
    {
        diag_list dl;
        diag_list_init(&dl);
        kiln_error ierr = {0};
        ir_infer_options io = {NULL, 0, false};
        kiln_status ist = ir_infer(model, &io, &dl, &ierr);
        diag_list_free(&dl);
        if (ist == KILN_ERR_NOMEM) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inferring shapes");
    }
    pass_uses u;
    bool *dead = NULL;
    kiln_status st = pass_begin(g, &u, &dead, err);
    if (st != KILN_OK) return st;
    int32_t fused = 0, gelu_op = ir_op_lookup("", "Gelu");
    for (int32_t i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        ir_node *fn = &g->nodes[i];
        bool erf = is_op(fn, "Erf"), tnh = is_op(fn, "Tanh");
        if (dead[i] || !(erf || tnh) || fn->n_inputs != 1 || fn->n_outputs != 1 || fn->inputs[0] < 0 ||
            fn->outputs[0] < 0)
            continue;
        gelu_match m = {g, &u, dead, IR_NONE, {0}, 0, false};
        if (!(erf ? match_erf_head(&m, fn) : match_tanh_head(&m, fn))) continue;
        if (m.x < 0 || !known_f32(g, m.x) || pass_has_subgraph(fn)) continue;
        take(&m, i);
        int32_t last = match_tail(&m, fn->outputs[0]);
        if (last < 0 || m.overflow) continue;
        /* every removed node lies before `last` (topological order), x before them all */
        bool ok = true;
        for (int32_t k = 0; k < m.n_nodes; k++)
            if (m.nodes[k] >= last || dead[m.nodes[k]]) ok = false;
        int32_t xp = g->values[m.x].producer;
        if (xp >= 0 && xp >= last) ok = false;
        if (!ok) continue;
        ir_node *y = &g->nodes[last];
        int32_t *ins = ARENA_ARRAY(&model->arena, int32_t, 1);
        ir_attr *at = ARENA_ARRAY(&model->arena, ir_attr, 1);
        if (!ins || !at) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
            break;
        }
        ins[0] = m.x;
        memset(at, 0, sizeof *at);
        at->name = "approximate";
        at->type = IR_ATTR_STRING;
        at->s.data = erf ? "none" : "tanh";
        at->s.len = 4;
        at->doc = "";
        y->op_type = "Gelu";
        y->domain = "";
        y->opset = 20; /* Gelu exists from opset 20; kernels are looked up by the node's opset */
        y->op = gelu_op;
        y->inputs = ins;
        y->n_inputs = 1;
        y->attrs = at;
        y->n_attrs = 1;
        for (int32_t k = 0; k < m.n_nodes; k++) dead[m.nodes[k]] = true;
        fused++;
    }
    if (st == KILN_OK && fused) pass_remove_nodes(g, dead);
    stats->gelu_fused += fused;
    free(dead);
    pass_uses_free(&u);
    return st;
}
