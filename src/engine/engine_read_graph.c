/* engine_read_graph.c - decodes the GRAPH section of an engine file into an ir_model.
 *
 * The file is untrusted: every count is checked against the bytes left before anything
 * is allocated, every index is range-checked, every tensor's byte size is recomputed
 * from its dtype and dims, and the graph must be wired the way the executor assumes
 * (one producer per value, producers before consumers, subgraphs nested as a tree).
 * Large tensors are not copied: their data points into the WEIGHTS section of the
 * mapped file; small inline constants are copied into the model arena so they are
 * aligned for any element type.
 */
#include <inttypes.h>
#include <string.h>

#include "core/alloc.h"
#include "engine/codec.h"
#include "engine/read_internal.h"

typedef struct greader {
    rbuf *r;
    ir_model *m;
    const uint8_t *weights;
    uint64_t weights_size;
    int32_t n_graphs_total;
    int32_t cur_graph; /* index of the graph whose body is being read */
} greader;

static bool g_dim(greader *gr, ir_dim *d, const char *what) {
    rbuf *r = gr->r;
    uint8_t kind = rb_u8(r);
    int32_t sym = rb_i32(r);
    int64_t value = rb_i64(r);
    if (r->failed) return false;
    if (kind > IR_DIM_SYM) return rb_fail(r, "%s: dimension kind %u is not 0..2", what, kind);
    d->kind = (ir_dim_kind)kind;
    d->sym = kind == IR_DIM_SYM ? sym : 0;
    d->value = kind == IR_DIM_CONST ? value : 0;
    if (kind == IR_DIM_SYM && (sym < 0 || sym >= gr->m->n_syms))
        return rb_fail(r, "%s: symbol index %d out of range (the engine has %d symbols)", what, sym, gr->m->n_syms);
    if (kind == IR_DIM_CONST && value < 0) return rb_fail(r, "%s: negative dimension %" PRId64, what, value);
    return true;
}

static bool g_type(greader *gr, ir_type *t, int depth) {
    rbuf *r = gr->r;
    if (depth > IR_MAX_GRAPH_DEPTH) return rb_fail(r, "type nesting deeper than %d", IR_MAX_GRAPH_DEPTH);
    uint8_t kind = rb_u8(r);
    uint32_t dtype = rb_u32(r);
    int32_t rank = rb_i32(r);
    if (r->failed) return false;
    if (kind > IR_TYPE_SPARSE_TENSOR) return rb_fail(r, "type kind %u is not 0..5", kind);
    if (dtype != 0 && !kiln_dtype_valid((int)dtype)) return rb_fail(r, "element type %u is not a known dtype", dtype);
    if (rank < -1 || rank > IR_MAX_RANK) return rb_fail(r, "rank %d is not -1..%d", rank, IR_MAX_RANK);
    memset(t, 0, sizeof *t);
    t->kind = (ir_type_kind)kind;
    t->dtype = (kiln_dtype)dtype;
    t->rank = rank;
    if (rank > 0) {
        if ((uint64_t)rank * 13 > rb_left(r)) return rb_fail(r, "rank %d cannot fit in the bytes left", rank);
        t->dims = ARENA_ARRAY(&gr->m->arena, ir_dim, rank);
        if (!t->dims) return rb_fail(r, "out of memory");
        for (int32_t i = 0; i < rank; i++)
            if (!g_dim(gr, &t->dims[i], "type dimension")) return false;
    }
    uint8_t has_elem = rb_u8(r);
    if (has_elem > 1) return rb_fail(r, "bad element-type flag %u", has_elem);
    if (has_elem) {
        t->elem = ARENA_NEW(&gr->m->arena, ir_type);
        if (!t->elem) return rb_fail(r, "out of memory");
        if (!g_type(gr, t->elem, depth + 1)) return false;
    }
    t->denotation = rb_str(r, "type denotation");
    return !r->failed;
}

static bool g_tensor(greader *gr, ir_tensor **out) {
    rbuf *r = gr->r;
    arena *a = &gr->m->arena;
    ir_tensor *t = ARENA_NEW(a, ir_tensor);
    if (!t) return rb_fail(r, "out of memory");
    *out = t;
    t->name = rb_str(r, "tensor name");
    uint32_t dtype = rb_u32(r);
    int32_t rank = rb_i32(r);
    if (r->failed) return false;
    if (!kiln_dtype_valid((int)dtype)) return rb_fail(r, "tensor '%s': dtype %u is not a known dtype", t->name, dtype);
    if (rank < 0 || rank > IR_MAX_RANK) return rb_fail(r, "tensor '%s': rank %d is not 0..%d", t->name, rank, IR_MAX_RANK);
    t->dtype = (kiln_dtype)dtype;
    t->rank = rank;
    t->doc = "";
    if ((uint64_t)rank * 8 > rb_left(r)) return rb_fail(r, "tensor '%s': rank %d cannot fit", t->name, rank);
    t->dims = ARENA_ARRAY(a, int64_t, rank > 0 ? rank : 1);
    if (!t->dims) return rb_fail(r, "out of memory");
    uint64_t count = 1;
    for (int32_t i = 0; i < rank; i++) {
        t->dims[i] = rb_i64(r);
        if (r->failed) return false;
        if (t->dims[i] < 0) return rb_fail(r, "tensor '%s': negative dimension %" PRId64, t->name, t->dims[i]);
        if (kiln_mul_overflow_u64(count, (uint64_t)t->dims[i], &count))
            return rb_fail(r, "tensor '%s': element count overflows", t->name);
    }
    t->count = count;
    uint8_t storage = rb_u8(r);
    if (r->failed) return false;
    if (dtype == KILN_DTYPE_STRING) {
        if (storage != ENGINE_TSTORE_STRINGS)
            return rb_fail(r, "tensor '%s': string tensor with storage kind %u", t->name, storage);
        if (count > rb_left(r) / 4) return rb_fail(r, "tensor '%s': %" PRIu64 " strings cannot fit", t->name, count);
        t->strings = ARENA_ARRAY(a, ir_bytes, count ? count : 1);
        if (!t->strings) return rb_fail(r, "out of memory");
        for (uint64_t i = 0; i < count; i++) {
            uint32_t n = rb_u32(r);
            const uint8_t *p = rb_bytes(r, n, "string element");
            if (!p) return false;
            t->strings[i].data = arena_strndup(a, (const char *)p, n); /* NUL-terminated for convenience */
            t->strings[i].len = n;
            if (!t->strings[i].data) return rb_fail(r, "out of memory");
        }
        t->where = IR_DATA_OWNED;
        return true;
    }
    uint64_t want;
    if (!kiln_dtype_nbytes(t->dtype, count, &want)) return rb_fail(r, "tensor '%s': byte size overflows", t->name);
    switch (storage) {
    case ENGINE_TSTORE_NONE:
        t->nbytes = want;
        t->where = IR_DATA_NONE;
        return true;
    case ENGINE_TSTORE_INLINE: {
        uint64_t n = rb_u64(r);
        if (r->failed) return false;
        if (n != want)
            return rb_fail(r, "tensor '%s': %" PRIu64 " bytes stored but %s%s needs %" PRIu64, t->name, n,
                           kiln_dtype_name(t->dtype), rank ? " of that shape" : "", want);
        const uint8_t *p = rb_bytes(r, n, "inline tensor data");
        if (!p) return false;
        t->nbytes = n;
        if (n) {
            t->data = arena_memdup(a, p, (size_t)n);
            if (!t->data) return rb_fail(r, "out of memory");
        }
        t->where = n ? IR_DATA_OWNED : IR_DATA_NONE;
        return true;
    }
    case ENGINE_TSTORE_WEIGHTS: {
        uint64_t off = rb_u64(r), n = rb_u64(r);
        if (r->failed) return false;
        if (n != want)
            return rb_fail(r, "tensor '%s': %" PRIu64 " bytes stored but %s of that shape needs %" PRIu64, t->name,
                           n, kiln_dtype_name(t->dtype), want);
        if (off % ENGINE_TENSOR_ALIGN)
            return rb_fail(r, "tensor '%s': weights offset %" PRIu64 " is not %u-byte aligned", t->name, off,
                           ENGINE_TENSOR_ALIGN);
        if (off > gr->weights_size || n > gr->weights_size - off)
            return rb_fail(r, "tensor '%s': bytes [%" PRIu64 ", +%" PRIu64 ") lie outside the %" PRIu64 "-byte WEIGHTS section",
                           t->name, off, n, gr->weights_size);
        t->nbytes = n;
        t->data = gr->weights + off;
        t->where = IR_DATA_MAPPED;
        return true;
    }
    default: return rb_fail(r, "tensor '%s': unknown storage kind %u", t->name, storage);
    }
}

static bool g_sparse(greader *gr, ir_sparse_tensor **out) {
    rbuf *r = gr->r;
    ir_sparse_tensor *s = ARENA_NEW(&gr->m->arena, ir_sparse_tensor);
    if (!s) return rb_fail(r, "out of memory");
    *out = s;
    if (!g_tensor(gr, &s->values) || !g_tensor(gr, &s->indices)) return false;
    s->rank = rb_i32(r);
    if (r->failed) return false;
    if (s->rank < 0 || s->rank > IR_MAX_RANK) return rb_fail(r, "sparse tensor rank %d out of range", s->rank);
    s->dims = ARENA_ARRAY(&gr->m->arena, int64_t, s->rank ? s->rank : 1);
    if (!s->dims) return rb_fail(r, "out of memory");
    for (int32_t i = 0; i < s->rank; i++) {
        s->dims[i] = rb_i64(r);
        if (s->dims[i] < 0) return rb_fail(r, "sparse tensor: negative dimension");
    }
    return !r->failed;
}

/* A graph attribute must name a subgraph of the graph holding the node. */
static bool g_subgraph(greader *gr, struct ir_graph **out) {
    rbuf *r = gr->r;
    int32_t idx = rb_i32(r);
    if (r->failed) return false;
    if (idx < 0 || idx >= gr->m->n_graphs)
        return rb_fail(r, "graph attribute refers to graph %d; the engine has %d", idx, gr->m->n_graphs);
    ir_graph *g = gr->m->graphs[idx];
    if (!g->parent || g->parent != gr->m->graphs[gr->cur_graph])
        return rb_fail(r, "graph attribute refers to graph %d, which is not a subgraph of graph %d", idx, gr->cur_graph);
    *out = g;
    return true;
}

static bool g_attr(greader *gr, ir_attr *a) {
    rbuf *r = gr->r;
    arena *ar = &gr->m->arena;
    memset(a, 0, sizeof *a);
    a->name = rb_str(r, "attribute name");
    uint8_t type = rb_u8(r);
    const char *ref = rb_str(r, "attribute reference");
    if (r->failed) return false;
    a->ref_attr_name = *ref ? ref : NULL;
    a->doc = "";
    if (type > IR_ATTR_TYPE_PROTOS || type == IR_ATTR_UNDEFINED)
        return rb_fail(r, "attribute '%s': type %u is not 1..14", a->name, type);
    a->type = (ir_attr_type)type;
    switch (a->type) {
    case IR_ATTR_FLOAT: a->f = rb_f32(r); return !r->failed;
    case IR_ATTR_INT: a->i = rb_i64(r); return !r->failed;
    case IR_ATTR_STRING: {
        uint32_t n = rb_u32(r);
        const uint8_t *p = rb_bytes(r, n, "string attribute");
        if (!p) return false;
        a->s.data = arena_strndup(ar, (const char *)p, n); /* NUL-terminated for convenience */
        a->s.len = n;
        return a->s.data ? true : rb_fail(r, "out of memory");
    }
    case IR_ATTR_TENSOR: return g_tensor(gr, &a->t);
    case IR_ATTR_GRAPH: return g_subgraph(gr, &a->g);
    case IR_ATTR_SPARSE_TENSOR: return g_sparse(gr, &a->sparse);
    case IR_ATTR_TYPE_PROTO:
        a->tp = ARENA_NEW(ar, ir_type);
        return a->tp ? g_type(gr, a->tp, 0) : rb_fail(r, "out of memory");
    default: break;
    }
    /* lists */
    static const uint32_t min_item[] = {[IR_ATTR_FLOATS] = 4, [IR_ATTR_INTS] = 8, [IR_ATTR_STRINGS] = 4,
                                        [IR_ATTR_TENSORS] = 13, [IR_ATTR_GRAPHS] = 4,
                                        [IR_ATTR_SPARSE_TENSORS] = 30, [IR_ATTR_TYPE_PROTOS] = 14};
    uint32_t n = rb_count(r, min_item[a->type], "attribute list");
    if (r->failed) return false;
    if (n > INT32_MAX) return rb_fail(r, "attribute list too long");
    a->n = (int32_t)n;
    size_t cnt = n ? n : 1;
    switch (a->type) {
    case IR_ATTR_FLOATS:
        if (!(a->floats = ARENA_ARRAY(ar, float, cnt))) return rb_fail(r, "out of memory");
        for (uint32_t i = 0; i < n; i++) a->floats[i] = rb_f32(r);
        break;
    case IR_ATTR_INTS:
        if (!(a->ints = ARENA_ARRAY(ar, int64_t, cnt))) return rb_fail(r, "out of memory");
        for (uint32_t i = 0; i < n; i++) a->ints[i] = rb_i64(r);
        break;
    case IR_ATTR_STRINGS:
        if (!(a->strings = ARENA_ARRAY(ar, ir_bytes, cnt))) return rb_fail(r, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len = rb_u32(r);
            const uint8_t *p = rb_bytes(r, len, "string list item");
            if (!p) return false;
            a->strings[i].data = arena_strndup(ar, (const char *)p, len);
            a->strings[i].len = len;
            if (!a->strings[i].data) return rb_fail(r, "out of memory");
        }
        break;
    case IR_ATTR_TENSORS:
        if (!(a->tensors = ARENA_ARRAY(ar, ir_tensor *, cnt))) return rb_fail(r, "out of memory");
        for (uint32_t i = 0; i < n; i++)
            if (!g_tensor(gr, &a->tensors[i])) return false;
        break;
    case IR_ATTR_GRAPHS:
        if (!(a->graphs = ARENA_ARRAY(ar, struct ir_graph *, cnt))) return rb_fail(r, "out of memory");
        for (uint32_t i = 0; i < n; i++)
            if (!g_subgraph(gr, &a->graphs[i])) return false;
        break;
    case IR_ATTR_SPARSE_TENSORS:
        if (!(a->sparses = ARENA_ARRAY(ar, ir_sparse_tensor *, cnt))) return rb_fail(r, "out of memory");
        for (uint32_t i = 0; i < n; i++)
            if (!g_sparse(gr, &a->sparses[i])) return false;
        break;
    case IR_ATTR_TYPE_PROTOS:
        if (!(a->tps = ARENA_ARRAY(ar, ir_type *, cnt))) return rb_fail(r, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
            if (!(a->tps[i] = ARENA_NEW(ar, ir_type))) return rb_fail(r, "out of memory");
            if (!g_type(gr, a->tps[i], 0)) return false;
        }
        break;
    default: break;
    }
    return !r->failed;
}

/* A list of value ids; allow_none permits IR_NONE (omitted optional inputs/outputs). */
static bool g_ids(greader *gr, int32_t **out, int32_t *n_out, int32_t n_values, bool allow_none, const char *what) {
    rbuf *r = gr->r;
    uint32_t n = rb_count(r, 4, what);
    if (r->failed) return false;
    *n_out = (int32_t)n;
    *out = ARENA_ARRAY(&gr->m->arena, int32_t, n ? n : 1);
    if (!*out) return rb_fail(r, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = rb_i32(r);
        if (r->failed) return false;
        if (!(id >= 0 && id < n_values) && !(allow_none && id == IR_NONE))
            return rb_fail(r, "%s[%u]: value id %d out of range (the graph has %d values)", what, i, id, n_values);
        (*out)[i] = id;
    }
    return true;
}

static bool g_body(greader *gr, ir_graph *g) {
    rbuf *r = gr->r;
    /* values: name (>=4) + type (>=14) + has_declared + producer + flags + has_init */
    uint32_t nv = rb_count(r, 28, "value list");
    if (r->failed) return false;
    for (uint32_t i = 0; i < nv; i++) {
        const char *name = rb_str(r, "value name");
        if (r->failed) return false;
        int32_t id = ir_graph_add_value(g, name);
        if (id == IR_NONE) return rb_fail(r, "value '%s' appears twice in graph '%s' (or out of memory)", name, g->name);
        ir_value *v = ir_val(g, id);
        if (!g_type(gr, &v->type, 0)) return false;
        uint8_t has_decl = rb_u8(r);
        if (has_decl > 1) return rb_fail(r, "value '%s': bad declared-type flag %u", name, has_decl);
        if (has_decl && !g_type(gr, &v->declared, 0)) return false;
        v->producer = rb_i32(r);
        v->flags = rb_u32(r) & ~(uint32_t)IR_VALUE_DECLARED_SAVED;
        if (has_decl) v->flags |= IR_VALUE_DECLARED_SAVED;
        uint8_t has_init = rb_u8(r);
        if (r->failed) return false;
        if (has_init > 1) return rb_fail(r, "value '%s': bad initializer flag %u", name, has_init);
        if (has_init && !g_tensor(gr, &v->init)) return false;
    }
    /* nodes: 5 strings + flag + opset + source index + 3 counts */
    uint32_t nn = rb_count(r, 41, "node list");
    if (r->failed) return false;
    for (uint32_t i = 0; i < nn; i++) {
        int32_t idx = ir_graph_add_node(g);
        if (idx == IR_NONE) return rb_fail(r, "out of memory");
        ir_node *n = ir_graph_node(g, idx);
        n->name = rb_str(r, "node name");
        uint8_t gen = rb_u8(r);
        n->name_generated = gen != 0;
        n->op_type = rb_str(r, "op type");
        n->domain = rb_str(r, "node domain");
        n->overload = rb_str(r, "node overload");
        n->opset = rb_i64(r);
        n->source_index = rb_i32(r);
        n->op = -1;
        if (r->failed) return false;
        if (!*n->op_type) return rb_fail(r, "node %d has an empty op type", idx);
        if (!g_ids(gr, &n->inputs, &n->n_inputs, g->n_values, true, "node inputs")) return false;
        if (!g_ids(gr, &n->outputs, &n->n_outputs, g->n_values, true, "node outputs")) return false;
        uint32_t na = rb_count(r, 9, "attribute list");
        if (r->failed) return false;
        n->n_attrs = (int32_t)na;
        n->attrs = ARENA_ARRAY(&gr->m->arena, ir_attr, na ? na : 1);
        if (!n->attrs) return rb_fail(r, "out of memory");
        for (uint32_t k = 0; k < na; k++)
            if (!g_attr(gr, &n->attrs[k])) return false;
    }
    if (!g_ids(gr, &g->inputs, &g->n_inputs, g->n_values, false, "graph inputs")) return false;
    if (!g_ids(gr, &g->outputs, &g->n_outputs, g->n_values, false, "graph outputs")) return false;
    if (!g_ids(gr, &g->initializers, &g->n_initializers, g->n_values, false, "graph initializers")) return false;

    /* wiring: producers agree both ways and come before their consumers */
    for (int32_t v = 0; v < g->n_values; v++) {
        int32_t p = g->values[v].producer;
        if (p == IR_NONE) continue;
        if (p < 0 || p >= g->n_nodes)
            return rb_fail(r, "graph '%s': value '%s' has producer %d; the graph has %d nodes", g->name,
                           g->values[v].name, p, g->n_nodes);
        const ir_node *n = &g->nodes[p];
        bool found = false;
        for (int32_t k = 0; k < n->n_outputs; k++) found |= n->outputs[k] == v;
        if (!found)
            return rb_fail(r, "graph '%s': value '%s' claims node '%s' as producer, which does not output it",
                           g->name, g->values[v].name, n->name);
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] != IR_NONE && g->values[n->outputs[k]].producer != i)
                return rb_fail(r, "graph '%s': node '%s' outputs '%s', whose producer is recorded as %d", g->name,
                               n->name, g->values[n->outputs[k]].name, g->values[n->outputs[k]].producer);
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t v = n->inputs[k];
            if (v != IR_NONE && g->values[v].producer >= i)
                return rb_fail(r, "graph '%s': node '%s' uses '%s' before it is produced (nodes out of order)",
                               g->name, n->name, g->values[v].name);
        }
    }
    for (int32_t i = 0; i < g->n_initializers; i++)
        if (!g->values[g->initializers[i]].init)
            return rb_fail(r, "graph '%s': initializer '%s' has no data", g->name, g->values[g->initializers[i]].name);
    return true;
}

static bool g_opsets(greader *gr, ir_opset **out, int32_t *n_out) {
    rbuf *r = gr->r;
    uint32_t n = rb_count(r, 12, "opset list");
    if (r->failed) return false;
    *n_out = (int32_t)n;
    *out = ARENA_ARRAY(&gr->m->arena, ir_opset, n ? n : 1);
    if (!*out) return rb_fail(r, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        (*out)[i].domain = rb_str(r, "opset domain");
        (*out)[i].version = rb_i64(r);
    }
    return !r->failed;
}

static void release_engine_mapping(ir_model *m) { engine_unmap(m->file_mapping, m->file_size); }

kiln_status engine_read_graph(rbuf *r, const uint8_t *weights, uint64_t weights_size, ir_model **out) {
    *out = NULL;
    ir_model *m = ir_model_new();
    if (!m) return kiln_err_set(r->err, KILN_ERR_NOMEM, "out of memory");
    r->arena = &m->arena;
    greader gr = {.r = r, .m = m, .weights = weights, .weights_size = weights_size};

    m->ir_version = rb_i64(r);
    m->producer_name = rb_str(r, "producer name");
    m->producer_version = rb_str(r, "producer version");
    m->domain = rb_str(r, "model domain");
    m->model_version = rb_i64(r);
    if (!g_opsets(&gr, &m->opsets, &m->n_opsets)) goto fail;
    uint32_t nmeta = rb_count(r, 8, "metadata list");
    m->metadata = ARENA_ARRAY(&m->arena, ir_kv, nmeta ? nmeta : 1);
    if (!m->metadata) goto oom;
    m->n_metadata = (int32_t)nmeta;
    for (uint32_t i = 0; i < nmeta; i++) {
        m->metadata[i].key = rb_str(r, "metadata key");
        m->metadata[i].value = rb_str(r, "metadata value");
    }
    uint32_t nsyms = rb_count(r, 31, "symbol list");
    if (r->failed) goto fail;
    if (nsyms) {
        m->syms = kiln_realloc_array(NULL, nsyms, sizeof *m->syms);
        if (!m->syms) goto oom;
        m->cap_syms = (int32_t)nsyms;
    }
    for (uint32_t i = 0; i < nsyms; i++) {
        ir_sym *s = &m->syms[i];
        memset(s, 0, sizeof *s);
        uint8_t op = rb_u8(r);
        s->name = rb_str(r, "symbol name");
        if (r->failed) goto fail;
        if (op > IR_SYM_MAX) {
            rb_fail(r, "symbol '%s': operation %u is not 0..%d", s->name, op, IR_SYM_MAX);
            goto fail;
        }
        s->op = (ir_sym_op)op;
        m->n_syms = (int32_t)i; /* operands may only refer to earlier symbols */
        if (!g_dim(&gr, &s->lhs, "symbol operand") || !g_dim(&gr, &s->rhs, "symbol operand")) goto fail;
        m->n_syms = (int32_t)i + 1;
        if (s->op == IR_SYM_LEAF) {
            int32_t prev;
            if (hashmap_get(&m->sym_index, s->name, &prev)) {
                rb_fail(r, "symbol '%s' is listed twice", s->name);
                goto fail;
            }
            if (!hashmap_put(&m->sym_index, s->name, (int32_t)i)) goto oom;
        }
    }

    uint32_t main_idx = rb_u32(r);
    uint32_t ng = rb_count(r, 12, "graph list");
    if (r->failed) goto fail;
    if (ng == 0 || main_idx >= ng) {
        rb_fail(r, "main graph index %u with %u graphs", main_idx, ng);
        goto fail;
    }
    gr.n_graphs_total = (int32_t)ng;
    for (uint32_t i = 0; i < ng; i++) {
        int32_t parent = rb_i32(r);
        const char *name = rb_str(r, "graph name");
        const char *loc = rb_str(r, "graph location");
        if (r->failed) goto fail;
        if (parent < -1 || parent >= (int32_t)i) {
            rb_fail(r, "graph %u: parent %d must be an earlier graph or -1", i, parent);
            goto fail;
        }
        ir_graph *g = ir_graph_new(m, parent >= 0 ? m->graphs[parent] : NULL, name);
        if (!g) goto oom;
        g->location = loc;
        int depth = 0;
        for (ir_graph *p = g->parent; p; p = p->parent) depth++;
        if (depth > IR_MAX_GRAPH_DEPTH) {
            rb_fail(r, "graph %u nests deeper than %d", i, IR_MAX_GRAPH_DEPTH);
            goto fail;
        }
    }
    m->graph = m->graphs[main_idx];
    if (m->graph->parent) {
        rb_fail(r, "the main graph has a parent graph");
        goto fail;
    }
    for (uint32_t i = 0; i < ng; i++) {
        gr.cur_graph = (int32_t)i;
        if (!g_body(&gr, m->graphs[i])) goto fail;
    }

    uint32_t nf = rb_count(r, 28, "function list");
    if (r->failed) goto fail;
    m->functions = ARENA_ARRAY(&m->arena, ir_function, nf ? nf : 1);
    if (!m->functions) goto oom;
    m->n_functions = (int32_t)nf;
    for (uint32_t i = 0; i < nf; i++) {
        ir_function *f = &m->functions[i];
        f->name = rb_str(r, "function name");
        f->domain = rb_str(r, "function domain");
        f->overload = rb_str(r, "function overload");
        f->doc = "";
        uint32_t body = rb_u32(r);
        if (r->failed) goto fail;
        if (body >= ng || m->graphs[body]->parent || m->graphs[body] == m->graph) {
            rb_fail(r, "function '%s': body graph %u is not a top-level graph", f->name, body);
            goto fail;
        }
        f->body = m->graphs[body];
        uint32_t na = rb_count(r, 4, "function attribute names");
        if (r->failed) goto fail;
        f->attr_names = ARENA_ARRAY(&m->arena, const char *, na ? na : 1);
        if (!f->attr_names) goto oom;
        f->n_attr_names = (int32_t)na;
        for (uint32_t k = 0; k < na; k++) f->attr_names[k] = rb_str(r, "function attribute name");
        uint32_t nd = rb_count(r, 9, "function attribute defaults");
        if (r->failed) goto fail;
        f->attr_defaults = ARENA_ARRAY(&m->arena, ir_attr, nd ? nd : 1);
        if (!f->attr_defaults) goto oom;
        f->n_attr_defaults = (int32_t)nd;
        gr.cur_graph = (int32_t)body;
        for (uint32_t k = 0; k < nd; k++)
            if (!g_attr(&gr, &f->attr_defaults[k])) goto fail;
        if (!g_opsets(&gr, &f->opsets, &f->n_opsets)) goto fail;
    }
    if (r->failed) goto fail;
    if (rb_left(r)) {
        rb_fail(r, "%zu unexpected bytes after the graph", rb_left(r));
        goto fail;
    }
    *out = m;
    return KILN_OK;
oom:
    kiln_err_set(r->err, KILN_ERR_NOMEM, "out of memory while loading the engine graph");
fail:
    ir_model_free(m);
    return r->err && r->err->code != KILN_OK ? r->err->code : KILN_ERR_FORMAT;
}

void engine_model_adopt_mapping(ir_model *m, void *map, uint64_t size) {
    m->file_data = map;
    m->file_size = size;
    m->file_mapping = map;
    m->release_mapping = release_engine_mapping;
}
