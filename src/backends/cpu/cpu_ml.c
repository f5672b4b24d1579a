/* cpu_ml.c - ai.onnx.ml ops: LabelEncoder, TreeEnsemble, Binarizer, ArrayFeatureExtractor.
 *
 * Attribute lists here come in several spellings (keys_strings / keys_int64s /
 * keys_floats / keys_tensor, ...). attr_list wraps whichever one a node has behind one
 * accessor so the kernels read "element k as int64 / double / bytes" without caring.
 * Tensor attributes go through rt_tensor_from_ir, so unaligned mapped data is safe.
 *
 * LabelEncoder sorts its keys once per node (kept in the node state) and looks each
 * input up by binary search. TreeEnsemble walks every tree for every row; node modes
 * follow the ml opset 5 numbering (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 MEMBER)
 * and membership sets are the NaN-separated runs of membership_values, one per MEMBER
 * node in node order.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

#define KERNEL(Op)                                                                                              \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out)

/* ---- attribute lists ------------------------------------------------------------------- */

typedef enum { AL_NONE, AL_STR, AL_INT, AL_FLOAT } al_kind;

typedef struct attr_list {
    al_kind kind;
    kiln_dtype dtype; /* the element type a tensor output of these values gets */
    int64_t n;
    const ir_bytes *s;
    const int64_t *i;
    const float *f;
    rt_tensor t; /* a tensor attribute, when that is the source */
    bool from_tensor;
} attr_list;

static void al_free(attr_list *l) {
    if (l->from_tensor) rt_tensor_release(&l->t);
}

static bool dtype_is_float(kiln_dtype d) {
    return d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_DOUBLE || cpu_dtype_is_half(d);
}

/* Reads attribute <prefix>_strings / _int64s / _floats / _tensor, or with exact = true
 * the tensor attribute named prefix. */
static kiln_status al_read2(cpu_kernel_ctx *ctx, const char *prefix, attr_list *l, bool exact) {
    memset(l, 0, sizeof *l);
    char name[64];
    const ir_attr *a;
    snprintf(name, sizeof name, exact ? "%s" : "%s_tensor", prefix);
    if ((a = ir_node_attr(ctx->node, name)) && a->type == IR_ATTR_TENSOR && a->t) {
        kiln_status st = rt_tensor_from_ir(&l->t, a->t, ctx->err);
        if (st != KILN_OK) return st;
        l->from_tensor = true;
        l->n = (int64_t)l->t.count;
        l->dtype = l->t.dtype;
        if (l->t.dtype == KILN_DTYPE_STRING) l->kind = AL_STR, l->s = l->t.data;
        else if (dtype_is_float(l->t.dtype)) l->kind = AL_FLOAT;
        else if (cpu_elem_size(l->t.dtype)) l->kind = AL_INT;
        else return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: dtype %s is not supported", name,
                                    kiln_dtype_name(l->t.dtype));
        return KILN_OK;
    }
    if (exact) return KILN_OK;
    snprintf(name, sizeof name, "%s_strings", prefix);
    if ((a = ir_node_attr(ctx->node, name)) && a->type == IR_ATTR_STRINGS) {
        l->kind = AL_STR, l->dtype = KILN_DTYPE_STRING, l->n = a->n, l->s = a->strings;
        return KILN_OK;
    }
    snprintf(name, sizeof name, "%s_int64s", prefix);
    if ((a = ir_node_attr(ctx->node, name)) && a->type == IR_ATTR_INTS) {
        l->kind = AL_INT, l->dtype = KILN_DTYPE_INT64, l->n = a->n, l->i = a->ints;
        return KILN_OK;
    }
    snprintf(name, sizeof name, "%s_floats", prefix);
    if ((a = ir_node_attr(ctx->node, name)) && a->type == IR_ATTR_FLOATS) {
        l->kind = AL_FLOAT, l->dtype = KILN_DTYPE_FLOAT, l->n = a->n, l->f = a->floats;
        return KILN_OK;
    }
    return KILN_OK;
}

static kiln_status al_read(cpu_kernel_ctx *ctx, const char *prefix, attr_list *l) {
    return al_read2(ctx, prefix, l, false);
}

static int64_t al_i64(const attr_list *l, int64_t k) {
    if (l->from_tensor) return cpu_load_i64(l->t.data, l->t.dtype, (uint64_t)k);
    return l->i ? l->i[k] : (int64_t)l->f[k];
}
static double al_f64(const attr_list *l, int64_t k) {
    if (l->from_tensor) return cpu_load_f64(l->t.data, l->t.dtype, (uint64_t)k);
    return l->f ? (double)l->f[k] : (double)l->i[k];
}

/* Stores an integer into any integer dtype without going through double. */
static void store_i64(void *data, kiln_dtype d, uint64_t i, int64_t v) {
    switch (cpu_elem_size(d)) {
    case 1: ((int8_t *)data)[i] = (int8_t)v; break;
    case 2: ((int16_t *)data)[i] = (int16_t)v; break;
    case 4: ((int32_t *)data)[i] = (int32_t)v; break;
    default: ((int64_t *)data)[i] = v; break;
    }
}

/* ---- LabelEncoder ---------------------------------------------------------------------- */

typedef struct le_key {
    const char *s;
    uint64_t len;
    int64_t i;
    double f;
    int64_t value; /* index into the values list */
} le_key;

typedef struct le_state {
    attr_list keys, values, dflt;
    le_key *sorted;
    int64_t n;
} le_state;

static void le_state_free(void *p) {
    le_state *s = p;
    al_free(&s->keys), al_free(&s->values), al_free(&s->dflt);
    free(s->sorted);
    free(s);
}

static int cmp_str(const char *a, uint64_t al, const char *b, uint64_t bl) {
    uint64_t m = al < bl ? al : bl;
    int c = m ? memcmp(a, b, (size_t)m) : 0;
    return c ? c : (al < bl ? -1 : al > bl);
}
static int le_cmp_s(const void *a, const void *b) {
    const le_key *p = a, *q = b;
    return cmp_str(p->s, p->len, q->s, q->len);
}
static int le_cmp_i(const void *a, const void *b) {
    const le_key *p = a, *q = b;
    return p->i < q->i ? -1 : p->i > q->i;
}
/* NaN sorts last and equals NaN, so a NaN key matches NaN inputs */
static int le_cmp_f(const void *a, const void *b) {
    const le_key *p = a, *q = b;
    bool pn = isnan(p->f), qn = isnan(q->f);
    if (pn || qn) return pn - qn;
    return p->f < q->f ? -1 : p->f > q->f;
}

KERNEL(LabelEncoder) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    le_state *ls = *ctx->state;
    if (!ls) {
        ls = calloc(1, sizeof *ls);
        if (!ls) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        *ctx->state = ls;
        *ctx->state_free = le_state_free;
        if ((st = al_read(ctx, "keys", &ls->keys)) != KILN_OK) return st;
        if ((st = al_read(ctx, "values", &ls->values)) != KILN_OK) return st;
        if ((st = al_read(ctx, "default", &ls->dflt)) != KILN_OK) return st;
        if (ls->keys.kind == AL_NONE || ls->values.kind == AL_NONE || ls->keys.n != ls->values.n)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "keys_* and values_* must be given with equal "
                                                                "lengths");
        /* defaults of the single-value attributes (default_string/int64/float) */
        if (ls->dflt.kind == AL_NONE || ls->dflt.n == 0) {
            const ir_attr *a;
            memset(&ls->dflt, 0, sizeof ls->dflt);
            if (ls->values.kind == AL_STR) {
                static const ir_bytes unused = {"_Unused", 7};
                a = ir_node_attr(ctx->node, "default_string");
                ls->dflt.kind = AL_STR, ls->dflt.n = 1;
                ls->dflt.s = a && a->type == IR_ATTR_STRING ? &a->s : &unused;
            } else if (ls->values.kind == AL_INT) {
                static const int64_t minus1 = -1;
                a = ir_node_attr(ctx->node, "default_int64");
                ls->dflt.kind = AL_INT, ls->dflt.n = 1;
                ls->dflt.i = a && a->type == IR_ATTR_INT ? &a->i : &minus1;
            } else {
                static const float negzero = -0.0f;
                a = ir_node_attr(ctx->node, "default_float");
                ls->dflt.kind = AL_FLOAT, ls->dflt.n = 1;
                ls->dflt.f = a && a->type == IR_ATTR_FLOAT ? &a->f : &negzero;
            }
        }
        ls->n = ls->keys.n;
        ls->sorted = calloc((size_t)ls->n + 1, sizeof *ls->sorted);
        if (!ls->sorted) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        for (int64_t k = 0; k < ls->n; k++) {
            le_key *e = &ls->sorted[k];
            e->value = k;
            if (ls->keys.kind == AL_STR) e->s = ls->keys.s[k].data, e->len = ls->keys.s[k].len;
            else if (ls->keys.kind == AL_INT) e->i = al_i64(&ls->keys, k);
            else e->f = al_f64(&ls->keys, k);
        }
        qsort(ls->sorted, (size_t)ls->n, sizeof *ls->sorted,
              ls->keys.kind == AL_STR ? le_cmp_s : ls->keys.kind == AL_INT ? le_cmp_i : le_cmp_f);
    }
    al_kind in_kind = x->dtype == KILN_DTYPE_STRING ? AL_STR : dtype_is_float(x->dtype) ? AL_FLOAT : AL_INT;
    if (in_kind != ls->keys.kind)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input dtype %s does not match the keys' type",
                               kiln_dtype_name(x->dtype));
    kiln_dtype od = ls->values.dtype;
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, od, x->rank, x->dims, &y);
    for (uint64_t i = 0; i < x->count && st == KILN_OK; i++) {
        le_key probe = {0};
        if (in_kind == AL_STR) {
            const ir_bytes *s = &((const ir_bytes *)x->data)[i];
            probe.s = s->data, probe.len = s->len;
        } else if (in_kind == AL_INT) probe.i = cpu_load_i64(x->data, x->dtype, i);
        else probe.f = cpu_load_f64(x->data, x->dtype, i);
        const le_key *hit = bsearch(&probe, ls->sorted, (size_t)ls->n, sizeof *ls->sorted,
                                    in_kind == AL_STR ? le_cmp_s : in_kind == AL_INT ? le_cmp_i : le_cmp_f);
        const attr_list *src = hit ? &ls->values : &ls->dflt;
        int64_t k = hit ? hit->value : 0;
        if (od == KILN_DTYPE_STRING) {
            const ir_bytes *v = src->kind == AL_STR ? &src->s[k] : NULL;
            st = rt_tensor_set_string(y, i, v ? v->data : "", v ? v->len : 0, ctx->err);
        } else if (dtype_is_float(od)) {
            cpu_store_f64(y->data, od, i, src->kind == AL_STR ? 0.0 : al_f64(src, k));
        } else {
            store_i64(y->data, od, i, src->kind == AL_STR ? 0 : al_i64(src, k));
        }
    }
    return st;
}

/* ---- Binarizer, ArrayFeatureExtractor -------------------------------------------------- */

KERNEL(Binarizer) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (!cpu_elem_size(x->dtype) || x->dtype == KILN_DTYPE_STRING || x->dtype == KILN_DTYPE_BOOL)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    double thr = ir_node_attr_float(ctx->node, "threshold", 0.0f);
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    for (uint64_t i = 0; i < x->count; i++)
        cpu_store_f64(y->data, y->dtype, i, cpu_load_f64(x->data, x->dtype, i) > thr ? 1.0 : 0.0);
    return KILN_OK;
}

KERNEL(ArrayFeatureExtractor) {
    const rt_tensor *x, *ind;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &ind);
    if (st != KILN_OK) return st;
    size_t es = cpu_elem_size(x->dtype);
    if (!es || x->rank < 1) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "X must be a tensor of rank >= 1");
    if (ind->dtype != KILN_DTYPE_INT64 && ind->dtype != KILN_DTYPE_INT32)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "Y must be int64 indices");
    int64_t last = x->dims[x->rank - 1];
    int64_t d[RT_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[x->rank - 1] = (int64_t)ind->count;
    if (x->rank == 1) { /* ONNX Runtime returns [1, k] for 1-D input */
        d[0] = 1, d[1] = (int64_t)ind->count;
    }
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, x->rank == 1 ? 2 : x->rank, d, &y);
    if (st != KILN_OK) return st;
    uint64_t rows = last ? x->count / (uint64_t)last : 0;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t k = 0; k < ind->count; k++) {
            int64_t j = cpu_load_i64(ind->data, ind->dtype, k);
            if (j < 0 || j >= last) {
                if (x->dtype == KILN_DTYPE_STRING)
                    for (uint64_t q = 0; q < y->count; q++) ((ir_bytes *)y->data)[q] = (ir_bytes){NULL, 0};
                return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "index %" PRId64 " is outside [0, %" PRId64 ")", j,
                                       last);
            }
            memcpy((char *)y->data + (r * ind->count + k) * es, (const char *)x->data + (r * (uint64_t)last + (uint64_t)j) * es,
                   es);
        }
    return cpu_strings_own(ctx, y);
}

/* ---- TreeEnsemble ---------------------------------------------------------------------- */

enum { TE_LEQ, TE_LT, TE_GTE, TE_GT, TE_EQ, TE_NEQ, TE_MEMBER };

typedef struct te_state {
    attr_list splits, modes, weights, members, hitrates;
    const int64_t *feat, *tnode, *fnode, *tleaf, *fleaf, *missing, *roots, *ltarget;
    int32_t n_nodes, n_roots, n_leaves, n_missing;
    int64_t *set_start, *set_end; /* per node: range in membership_values */
} te_state;

static void te_state_free(void *p) {
    te_state *s = p;
    al_free(&s->splits), al_free(&s->modes), al_free(&s->weights), al_free(&s->members), al_free(&s->hitrates);
    free(s->set_start), free(s->set_end);
    free(s);
}

static const int64_t *ints_of(cpu_kernel_ctx *ctx, const char *name, int32_t *n) {
    const int64_t *p = cpu_attr_ints(ctx->node, name, n);
    if (!p) *n = 0;
    return p;
}

static kiln_status te_prepare(cpu_kernel_ctx *ctx, te_state *s) {
    kiln_status st;
    if ((st = al_read2(ctx, "nodes_splits", &s->splits, true)) != KILN_OK) return st;
    if ((st = al_read2(ctx, "nodes_modes", &s->modes, true)) != KILN_OK) return st;
    if ((st = al_read2(ctx, "leaf_weights", &s->weights, true)) != KILN_OK) return st;
    if ((st = al_read2(ctx, "membership_values", &s->members, true)) != KILN_OK) return st;
    int32_t n1, n2, n3, n4, n5;
    s->feat = ints_of(ctx, "nodes_featureids", &n1);
    s->tnode = ints_of(ctx, "nodes_truenodeids", &n2);
    s->fnode = ints_of(ctx, "nodes_falsenodeids", &n3);
    s->tleaf = ints_of(ctx, "nodes_trueleafs", &n4);
    s->fleaf = ints_of(ctx, "nodes_falseleafs", &n5);
    s->missing = ints_of(ctx, "nodes_missing_value_tracks_true", &s->n_missing);
    s->roots = ints_of(ctx, "tree_roots", &s->n_roots);
    s->ltarget = ints_of(ctx, "leaf_targetids", &s->n_leaves);
    s->n_nodes = n1;
    if (n2 != n1 || n3 != n1 || n4 != n1 || n5 != n1 || s->splits.n != n1 || s->modes.n != n1 ||
        s->weights.n != s->n_leaves || (s->n_missing && s->n_missing != n1))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "nodes_* attributes must all have one entry per node, "
                                                            "leaf_* one per leaf");
    s->set_start = calloc((size_t)n1 + 1, sizeof *s->set_start);
    s->set_end = calloc((size_t)n1 + 1, sizeof *s->set_end);
    if (!s->set_start || !s->set_end) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    int64_t pos = 0;
    for (int32_t i = 0; i < n1; i++) {
        int64_t m = al_i64(&s->modes, i);
        if (m < TE_LEQ || m > TE_MEMBER) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad node mode %" PRId64, m);
        int64_t tl = s->tleaf[i] ? s->n_leaves : n1, fl = s->fleaf[i] ? s->n_leaves : n1;
        if (s->tnode[i] < 0 || s->tnode[i] >= tl || s->fnode[i] < 0 || s->fnode[i] >= fl || s->feat[i] < 0)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "node %d points outside the tree", (int)i);
        if (m == TE_MEMBER) {
            s->set_start[i] = pos;
            while (pos < s->members.n && !isnan(al_f64(&s->members, pos))) pos++;
            s->set_end[i] = pos;
            pos++; /* skip the NaN separator */
        }
    }
    for (int32_t i = 0; i < s->n_roots; i++)
        if (s->roots[i] < 0 || s->roots[i] >= n1)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "tree root %d is not a node", (int)i);
    return KILN_OK;
}

KERNEL(TreeEnsemble) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (!dtype_is_float(x->dtype) || x->rank != 2)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must be a 2-D float tensor");
    te_state *s = *ctx->state;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        *ctx->state = s;
        *ctx->state_free = te_state_free;
        if ((st = te_prepare(ctx, s)) != KILN_OK) {
            *ctx->state = NULL, *ctx->state_free = NULL;
            te_state_free(s);
            return st;
        }
    }
    int64_t nt = ir_node_attr_int(ctx->node, "n_targets", 1), agg = ir_node_attr_int(ctx->node, "aggregate_function", 1);
    int64_t post = ir_node_attr_int(ctx->node, "post_transform", 0);
    if (post < 0 || post > 3)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "post_transform %" PRId64 " (PROBIT) is not supported", post);
    if (nt < 1 || nt > (1 << 24)) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad n_targets");
    for (int32_t i = 0; i < s->n_leaves; i++)
        if (s->ltarget[i] < 0 || s->ltarget[i] >= nt)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "leaf %d targets %" PRId64 ", outside n_targets",
                                   (int)i, s->ltarget[i]);
    int64_t rows = x->dims[0], F = x->dims[1];
    int64_t d[2] = {rows, nt};
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, 2, d, &y);
    if (st != KILN_OK) return st;
    double *acc = calloc((size_t)nt, sizeof *acc);
    uint8_t *hit = calloc((size_t)nt, 1);
    if (!acc || !hit) {
        free(acc), free(hit);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    for (int64_t r = 0; r < rows && st == KILN_OK; r++) {
        memset(acc, 0, sizeof *acc * (size_t)nt);
        memset(hit, 0, (size_t)nt);
        for (int32_t t = 0; t < s->n_roots && st == KILN_OK; t++) {
            int64_t node = s->roots[t];
            int64_t steps = 0;
            for (;;) {
                if (++steps > s->n_nodes + 1) {
                    st = cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "tree %d has a cycle", (int)t);
                    break;
                }
                if (s->feat[node] >= F) {
                    st = cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "node %" PRId64 " reads feature %" PRId64
                                         " but X has %" PRId64, node, s->feat[node], F);
                    break;
                }
                double v = cpu_load_f64(x->data, x->dtype, (uint64_t)(r * F + s->feat[node]));
                double sp = al_f64(&s->splits, node);
                bool go;
                if (isnan(v) && s->n_missing && s->missing[node]) go = true;
                else switch (al_i64(&s->modes, node)) {
                    case TE_LEQ: go = v <= sp; break;
                    case TE_LT: go = v < sp; break;
                    case TE_GTE: go = v >= sp; break;
                    case TE_GT: go = v > sp; break;
                    case TE_EQ: go = v == sp; break;
                    case TE_NEQ: go = v != sp; break;
                    default:
                        go = false;
                        for (int64_t k = s->set_start[node]; k < s->set_end[node] && !go; k++)
                            go = al_f64(&s->members, k) == v;
                        break;
                    }
                bool leaf = go ? s->tleaf[node] : s->fleaf[node];
                int64_t next = go ? s->tnode[node] : s->fnode[node];
                if (leaf) {
                    int64_t tg = s->ltarget[next];
                    double w = al_f64(&s->weights, next);
                    if (!hit[tg]) acc[tg] = w;
                    else if (agg == 2) acc[tg] = fmin(acc[tg], w);
                    else if (agg == 3) acc[tg] = fmax(acc[tg], w);
                    else acc[tg] += w;
                    hit[tg] = 1;
                    break;
                }
                node = next;
            }
        }
        if (agg == 0 && s->n_roots)
            for (int64_t k = 0; k < nt; k++) acc[k] /= (double)s->n_roots;
        if (post == 1 || post == 3) { /* SOFTMAX, SOFTMAX_ZERO */
            double m = -INFINITY, sum = 0;
            for (int64_t k = 0; k < nt; k++) m = fmax(m, acc[k]);
            for (int64_t k = 0; k < nt; k++) {
                acc[k] = (post == 3 && acc[k] == 0.0) ? 0.0 : exp(acc[k] - m);
                sum += acc[k];
            }
            for (int64_t k = 0; k < nt && sum > 0; k++) acc[k] /= sum;
        } else if (post == 2) {
            for (int64_t k = 0; k < nt; k++) acc[k] = 1.0 / (1.0 + exp(-acc[k]));
        }
        for (int64_t k = 0; k < nt; k++) cpu_store_f64(y->data, y->dtype, (uint64_t)(r * nt + k), acc[k]);
    }
    free(acc), free(hit);
    return st;
}
