/* pass_util.c - shared helpers for graph passes (see pass_util.h). */
#include "build/passes/pass_util.h"

#include <stdlib.h>
#include <string.h>

#include "ir/ops/ops.h"

bool pass_has_subgraph(const ir_node *n) {
    for (int32_t a = 0; a < n->n_attrs; a++)
        if (n->attrs[a].type == IR_ATTR_GRAPH || n->attrs[a].type == IR_ATTR_GRAPHS) return true;
    return false;
}

static void pin_names(const ir_graph *g, const ir_graph *body, bool *pinned, int depth) {
    if (depth > IR_MAX_GRAPH_DEPTH) return;
    for (int32_t v = 0; v < body->n_values; v++) {
        int32_t id = ir_graph_find(g, body->values[v].name);
        if (id != IR_NONE) pinned[id] = true;
    }
    for (int32_t i = 0; i < body->n_nodes; i++) {
        const ir_node *n = &body->nodes[i];
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            if (at->type == IR_ATTR_GRAPH && at->g) pin_names(g, at->g, pinned, depth + 1);
            if (at->type == IR_ATTR_GRAPHS)
                for (int32_t j = 0; j < at->n; j++)
                    if (at->graphs[j]) pin_names(g, at->graphs[j], pinned, depth + 1);
        }
    }
}

kiln_status pass_uses_compute(const ir_graph *g, pass_uses *u, kiln_error *err) {
    size_t nv = (size_t)g->n_values + 1;
    u->count = calloc(nv, sizeof *u->count);
    u->reader = malloc(nv * sizeof *u->reader);
    u->pinned = calloc(nv, sizeof *u->pinned);
    if (!u->count || !u->reader || !u->pinned) {
        pass_uses_free(u);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
    }
    for (int32_t v = 0; v < g->n_values; v++) u->reader[v] = IR_NONE;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) {
                u->count[n->inputs[k]]++;
                u->reader[n->inputs[k]] = i;
            }
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            if (at->type == IR_ATTR_GRAPH && at->g) pin_names(g, at->g, u->pinned, 1);
            if (at->type == IR_ATTR_GRAPHS)
                for (int32_t j = 0; j < at->n; j++)
                    if (at->graphs[j]) pin_names(g, at->graphs[j], u->pinned, 1);
        }
    }
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] >= 0) u->pinned[g->outputs[k]] = true;
    return KILN_OK;
}

void pass_uses_free(pass_uses *u) {
    free(u->count);
    free(u->reader);
    free(u->pinned);
    memset(u, 0, sizeof *u);
}

void pass_replace_uses(ir_graph *g, int32_t from, int32_t to) {
    for (int32_t i = 0; i < g->n_nodes; i++) {
        ir_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == from) n->inputs[k] = to;
    }
}

void pass_remove_nodes(ir_graph *g, const bool *dead) {
    int32_t w = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (dead[i]) {
            for (int32_t k = 0; k < g->nodes[i].n_outputs; k++) {
                int32_t v = g->nodes[i].outputs[k];
                if (v >= 0 && g->values[v].producer == i) g->values[v].producer = IR_NONE;
            }
            continue;
        }
        if (w != i) g->nodes[w] = g->nodes[i];
        for (int32_t k = 0; k < g->nodes[w].n_outputs; k++) {
            int32_t v = g->nodes[w].outputs[k];
            if (v >= 0) g->values[v].producer = w;
        }
        w++;
    }
    g->n_nodes = w;
}

static kiln_status to_ir_tensor(ir_model *m, const char *name, const rt_tensor *t, ir_tensor **out, kiln_error *err) {
    ir_tensor *it = ARENA_NEW(&m->arena, ir_tensor);
    if (!it) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory folding a constant");
    it->name = name;
    it->dtype = t->dtype;
    it->rank = t->rank;
    it->dims = ARENA_ARRAY(&m->arena, int64_t, t->rank > 0 ? t->rank : 1);
    if (!it->dims) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory folding a constant");
    for (int32_t i = 0; i < t->rank; i++) it->dims[i] = t->dims[i];
    it->count = t->count;
    it->where = IR_DATA_OWNED;
    it->doc = "";
    if (t->dtype == KILN_DTYPE_STRING) {
        it->strings = ARENA_ARRAY(&m->arena, ir_bytes, t->count ? t->count : 1);
        if (!it->strings) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory folding a constant");
        const ir_bytes *s = t->data;
        for (uint64_t i = 0; i < t->count; i++) {
            it->strings[i].len = s[i].len;
            it->strings[i].data = s[i].len ? arena_memdup(&m->arena, s[i].data, (size_t)s[i].len) : "";
            if (!it->strings[i].data) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory folding a constant");
        }
    } else {
        it->nbytes = t->nbytes;
        if (t->nbytes) {
            /* arena_alloc aligns to 16 only; copy into a 64-aligned spot for SIMD loads */
            uint8_t *raw = arena_alloc(&m->arena, (size_t)t->nbytes + 64);
            if (!raw) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory folding a constant");
            uint8_t *p = (uint8_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
            memcpy(p, t->data, (size_t)t->nbytes);
            it->data = p;
        }
    }
    *out = it;
    return KILN_OK;
}

kiln_status pass_drop_unread_initializers(ir_graph *g, int32_t *dropped, kiln_error *err) {
    if (dropped) *dropped = 0;
    if (!g || !g->n_initializers) return KILN_OK;
    pass_uses u;
    kiln_status st = pass_uses_compute(g, &u, err);
    if (st != KILN_OK) return st;
    int32_t kept = 0, n = 0;
    for (int32_t i = 0; i < g->n_initializers; i++) {
        int32_t v = g->initializers[i];
        bool keep = v < 0 || v >= g->n_values || u.count[v] || u.pinned[v] ||
                    (g->values[v].flags & (IR_VALUE_GRAPH_INPUT | IR_VALUE_GRAPH_OUTPUT));
        if (keep) {
            g->initializers[kept++] = v;
            continue;
        }
        g->values[v].init = NULL;
        g->values[v].flags &= ~(uint32_t)IR_VALUE_INITIALIZER;
        n++;
    }
    g->n_initializers = kept;
    pass_uses_free(&u);
    if (dropped) *dropped = n;
    return KILN_OK;
}

static kiln_status append_initializer(ir_graph *g, int32_t v, kiln_error *err) {
    int32_t *ni = ARENA_ARRAY(&g->model->arena, int32_t, g->n_initializers + 1);
    if (!ni) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory folding a constant");
    if (g->n_initializers) memcpy(ni, g->initializers, (size_t)g->n_initializers * sizeof *ni);
    ni[g->n_initializers++] = v;
    g->initializers = ni;
    return KILN_OK;
}

kiln_status pass_set_initializer(ir_graph *g, int32_t v, const rt_tensor *t, kiln_error *err) {
    ir_tensor *it = NULL;
    kiln_status st = to_ir_tensor(g->model, g->values[v].name, t, &it, err);
    if (st != KILN_OK) return st;
    g->values[v].init = it;
    g->values[v].flags |= IR_VALUE_INITIALIZER;
    g->values[v].producer = IR_NONE;
    return append_initializer(g, v, err);
}

int32_t pass_add_named_value(ir_graph *g, const char *base, const char *suffix) {
    char *name = NULL;
    for (int k = 0; k < 1000 && !name; k++) {
        char *cand = k ? arena_printf(&g->model->arena, "%s%s%d", base, suffix, k)
                       : arena_printf(&g->model->arena, "%s%s", base, suffix);
        if (!cand) break;
        if (ir_graph_find(g, cand) == IR_NONE) name = cand;
    }
    return name ? ir_graph_add_value(g, name) : IR_NONE;
}

int32_t pass_new_initializer(ir_graph *g, const char *base, const rt_tensor *t, kiln_error *err) {
    char *name = NULL;
    for (int k = 0; k < 1000 && !name; k++) {
        char *cand = arena_printf(&g->model->arena, "%s__kiln%d", base, k);
        if (!cand) break;
        if (ir_graph_find(g, cand) == IR_NONE) name = cand;
    }
    int32_t v = name ? ir_graph_add_value(g, name) : IR_NONE;
    if (v == IR_NONE) {
        kiln_err_set(err, KILN_ERR_NOMEM, "out of memory adding an initializer");
        return IR_NONE;
    }
    g->values[v].type.kind = IR_TYPE_TENSOR;
    g->values[v].type.dtype = t->dtype;
    if (pass_set_initializer(g, v, t, err) != KILN_OK) return IR_NONE;
    return v;
}

kiln_status pass_begin(const ir_graph *g, pass_uses *u, bool **dead, kiln_error *err) {
    kiln_status st = pass_uses_compute(g, u, err);
    if (st != KILN_OK) return st;
    *dead = calloc((size_t)g->n_nodes + 1, sizeof **dead);
    if (!*dead) {
        pass_uses_free(u);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
    }
    return KILN_OK;
}

kiln_status pass_place_appended_nodes(ir_graph *g, int32_t n0, int32_t n_new, const int32_t *after, kiln_error *err) {
    if (n_new <= 0) return KILN_OK;
    ir_node *nn = malloc((size_t)g->n_nodes * sizeof *nn);
    if (!nn) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory while placing inserted nodes");
    int32_t w = 0;
    for (int32_t j = 0; j < n_new; j++)
        if (after[j] < 0) nn[w++] = g->nodes[n0 + j];
    for (int32_t i = 0; i < n0; i++) {
        nn[w++] = g->nodes[i];
        for (int32_t j = 0; j < n_new; j++)
            if (after[j] == i) nn[w++] = g->nodes[n0 + j];
    }
    memcpy(g->nodes, nn, (size_t)w * sizeof *nn);
    free(nn);
    for (int32_t v = 0; v < g->n_values; v++) g->values[v].producer = IR_NONE;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++) {
            int32_t o = g->nodes[i].outputs[k];
            if (o >= 0 && o < g->n_values) g->values[o].producer = i;
        }
    return KILN_OK;
}

kiln_status pass_append_unary(ir_model *m, ir_graph *g, pass_inserted *ins, const char *op, const char *suffix,
                              int32_t from, int32_t to, const ir_attr *attr, int32_t after, kiln_error *err) {
    if (ins->n == ins->cap) {
        int32_t ncap = ins->cap ? ins->cap * 2 : 16;
        int32_t *na = realloc(ins->after, (size_t)ncap * sizeof *na);
        if (!na) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory adding a %s node", op);
        ins->after = na;
        ins->cap = ncap;
    }
    int32_t id = ir_graph_add_node(g);
    int32_t *in = ARENA_ARRAY(&m->arena, int32_t, 1), *out = ARENA_ARRAY(&m->arena, int32_t, 1);
    ir_attr *a = ARENA_ARRAY(&m->arena, ir_attr, 1);
    char *name = arena_printf(&m->arena, "%s_kiln_%s", g->values[to].name, suffix);
    if (id == IR_NONE || !in || !out || !a || !name)
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory adding a %s node", op);
    ir_node *n = &g->nodes[id];
    n->name = name;
    n->name_generated = true;
    n->op_type = op;
    n->domain = "";
    n->opset = ir_model_opset(m, "");
    n->op = ir_op_lookup("", op);
    in[0] = from;
    out[0] = to;
    n->inputs = in;
    n->n_inputs = 1;
    n->outputs = out;
    n->n_outputs = 1;
    *a = *attr;
    n->attrs = a;
    n->n_attrs = 1;
    n->source_index = -1;
    g->values[to].producer = id;
    ins->after[ins->n++] = after;
    return KILN_OK;
}

bool pass_or_int_attr(ir_model *model, ir_node *n, const char *name, int64_t bits) {
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = IR_ATTR_INT;
    a.i = ir_node_attr_int(n, name, 0) | bits;
    return ir_node_set_attr(model, n, &a);
}
