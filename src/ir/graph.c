/* graph.c - construction, lookup and printing helpers for the IR (see graph.h). */
#include "ir/graph.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/strbuf.h"

ir_model *ir_model_new(void) {
    ir_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    arena_init(&m->arena);
    hashmap_init(&m->sym_index);
    m->producer_name = m->producer_version = m->domain = m->doc = "";
    return m;
}

static void graph_free(ir_graph *g) {
    if (!g) return;
    free(g->values);
    free(g->nodes);
    hashmap_free(&g->value_index);
    free(g);
}

void ir_model_free(ir_model *m) {
    if (!m) return;
    if (m->release_mapping) m->release_mapping(m);
    for (int32_t i = 0; i < m->n_graphs; i++) graph_free(m->graphs[i]);
    free(m->graphs);
    free(m->syms);
    hashmap_free(&m->sym_index);
    arena_free(&m->arena);
    free(m);
}

ir_graph *ir_graph_new(ir_model *m, ir_graph *parent, const char *name) {
    if (m->n_graphs == m->cap_graphs) {
        int32_t ncap = m->cap_graphs ? m->cap_graphs * 2 : 8;
        ir_graph **ng = kiln_realloc_array(m->graphs, (size_t)ncap, sizeof *ng);
        if (!ng) return NULL;
        m->graphs = ng;
        m->cap_graphs = ncap;
    }
    ir_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->model = m;
    g->parent = parent;
    g->name = name ? name : "";
    g->doc = "";
    g->location = "";
    hashmap_init(&g->value_index);
    m->graphs[m->n_graphs++] = g;
    return g;
}

int32_t ir_graph_find(const ir_graph *g, const char *name) {
    int32_t id;
    if (name && hashmap_get(&g->value_index, name, &id)) return id;
    return IR_NONE;
}

int32_t ir_graph_add_value(ir_graph *g, const char *name) {
    if (ir_graph_find(g, name) != IR_NONE) return IR_NONE;
    if (g->n_values == INT32_MAX) return IR_NONE;
    if (g->n_values == g->cap_values) {
        int32_t ncap = g->cap_values ? (g->cap_values > INT32_MAX / 2 ? INT32_MAX : g->cap_values * 2) : 16;
        ir_value *nv = kiln_realloc_array(g->values, (size_t)ncap, sizeof *nv);
        if (!nv) return IR_NONE;
        g->values = nv;
        g->cap_values = ncap;
    }
    const char *key = arena_strdup(&g->model->arena, name);
    if (!key) return IR_NONE;
    int32_t id = g->n_values;
    ir_value *v = &g->values[id];
    memset(v, 0, sizeof *v);
    v->name = key;
    v->producer = IR_NONE;
    v->type.rank = -1;
    v->doc = "";
    if (!hashmap_put(&g->value_index, key, id)) return IR_NONE;
    g->n_values++;
    return id;
}

int32_t ir_graph_value(ir_graph *g, const char *name) {
    int32_t id = ir_graph_find(g, name);
    return id != IR_NONE ? id : ir_graph_add_value(g, name);
}

int32_t ir_graph_add_node(ir_graph *g) {
    if (g->n_nodes == INT32_MAX) return IR_NONE;
    if (g->n_nodes == g->cap_nodes) {
        int32_t ncap = g->cap_nodes ? (g->cap_nodes > INT32_MAX / 2 ? INT32_MAX : g->cap_nodes * 2) : 16;
        ir_node *nn = kiln_realloc_array(g->nodes, (size_t)ncap, sizeof *nn);
        if (!nn) return IR_NONE;
        g->nodes = nn;
        g->cap_nodes = ncap;
    }
    int32_t id = g->n_nodes++;
    ir_node *n = &g->nodes[id];
    memset(n, 0, sizeof *n);
    n->name = n->op_type = n->domain = n->overload = n->doc = "";
    n->op = -1;
    n->source_index = id;
    return id;
}

int32_t ir_sym_leaf(ir_model *m, const char *name) {
    int32_t id;
    if (hashmap_get(&m->sym_index, name, &id)) return id;
    if (m->n_syms == m->cap_syms) {
        int32_t ncap = m->cap_syms ? m->cap_syms * 2 : 16;
        ir_sym *ns = kiln_realloc_array(m->syms, (size_t)ncap, sizeof *ns);
        if (!ns) return IR_NONE;
        m->syms = ns;
        m->cap_syms = ncap;
    }
    const char *key = arena_strdup(&m->arena, name);
    if (!key) return IR_NONE;
    id = m->n_syms;
    memset(&m->syms[id], 0, sizeof m->syms[id]);
    m->syms[id].op = IR_SYM_LEAF;
    m->syms[id].name = key;
    if (!hashmap_put(&m->sym_index, key, id)) return IR_NONE;
    m->n_syms++;
    return id;
}

const char *ir_dim_str(const ir_model *m, ir_dim d, char *buf, size_t bufsize) {
    switch (d.kind) {
    case IR_DIM_CONST: snprintf(buf, bufsize, "%" PRId64, d.value); break;
    case IR_DIM_SYM:
        snprintf(buf, bufsize, "%s",
                 (m && d.sym >= 0 && d.sym < m->n_syms && m->syms[d.sym].name) ? m->syms[d.sym].name : "?");
        break;
    default: snprintf(buf, bufsize, "?"); break;
    }
    return buf;
}

static void append_shape(strbuf *sb, const ir_model *m, const ir_type *t) {
    if (t->rank < 0) {
        sb_append(sb, "[?]");
        return;
    }
    sb_putc(sb, '[');
    for (int32_t i = 0; i < t->rank; i++) {
        char buf[256];
        if (i) sb_append(sb, ", ");
        sb_append(sb, ir_dim_str(m, t->dims[i], buf, sizeof buf));
    }
    sb_putc(sb, ']');
}

static void append_type(strbuf *sb, const ir_model *m, const ir_type *t, int depth) {
    if (depth > 16) {
        sb_append(sb, "...");
        return;
    }
    switch (t->kind) {
    case IR_TYPE_TENSOR:
    case IR_TYPE_SPARSE_TENSOR:
        if (t->kind == IR_TYPE_SPARSE_TENSOR) sb_append(sb, "sparse ");
        sb_append(sb, t->dtype ? kiln_dtype_name(t->dtype) : "?");
        append_shape(sb, m, t);
        break;
    case IR_TYPE_SEQUENCE:
    case IR_TYPE_OPTIONAL:
        sb_append(sb, t->kind == IR_TYPE_SEQUENCE ? "seq(" : "optional(");
        if (t->elem) append_type(sb, m, t->elem, depth + 1);
        else sb_putc(sb, '?');
        sb_putc(sb, ')');
        break;
    case IR_TYPE_MAP:
        sb_printf(sb, "map(%s, ", kiln_dtype_name(t->dtype));
        if (t->elem) append_type(sb, m, t->elem, depth + 1);
        else sb_putc(sb, '?');
        sb_putc(sb, ')');
        break;
    default: sb_append(sb, "?"); break;
    }
}

const char *ir_type_shape_str(ir_model *m, const ir_type *t) {
    strbuf sb;
    sb_init(&sb);
    append_shape(&sb, m, t);
    const char *r = sb.failed ? "[?]" : arena_strdup(&m->arena, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "[?]";
}

const char *ir_type_str(ir_model *m, const ir_type *t) {
    strbuf sb;
    sb_init(&sb);
    append_type(&sb, m, t, 0);
    const char *r = sb.failed ? "?" : arena_strdup(&m->arena, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "?";
}

const ir_attr *ir_node_attr(const ir_node *n, const char *name) {
    for (int32_t i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

bool ir_node_set_attr(ir_model *model, ir_node *n, const ir_attr *attr) {
    ir_attr *na = ARENA_ARRAY(&model->arena, ir_attr, (size_t)n->n_attrs + 1);
    if (!na) return false;
    int32_t k = 0;
    for (int32_t j = 0; j < n->n_attrs; j++)
        if (strcmp(n->attrs[j].name, attr->name)) na[k++] = n->attrs[j];
    na[k] = *attr;
    if (!na[k].doc) na[k].doc = "";
    n->attrs = na;
    n->n_attrs = k + 1;
    return true;
}

int64_t ir_node_attr_int(const ir_node *n, const char *name, int64_t dflt) {
    const ir_attr *a = ir_node_attr(n, name);
    return (a && a->type == IR_ATTR_INT) ? a->i : dflt;
}

float ir_node_attr_float(const ir_node *n, const char *name, float dflt) {
    const ir_attr *a = ir_node_attr(n, name);
    return (a && a->type == IR_ATTR_FLOAT) ? a->f : dflt;
}

bool ir_node_attr_str_is(const ir_node *n, const char *name, const char *value) {
    const ir_attr *a = n ? ir_node_attr(n, name) : NULL;
    size_t len = strlen(value);
    return a && a->type == IR_ATTR_STRING && a->s.len == len && !memcmp(a->s.data, value, len);
}

int64_t ir_model_opset(const ir_model *m, const char *domain) {
    for (int32_t i = 0; i < m->n_opsets; i++)
        if (strcmp(m->opsets[i].domain, domain) == 0) return m->opsets[i].version;
    return 0;
}

const char *ir_attr_type_name(ir_attr_type t) {
    switch (t) {
    case IR_ATTR_FLOAT: return "float";
    case IR_ATTR_INT: return "int";
    case IR_ATTR_STRING: return "string";
    case IR_ATTR_TENSOR: return "tensor";
    case IR_ATTR_GRAPH: return "graph";
    case IR_ATTR_FLOATS: return "floats";
    case IR_ATTR_INTS: return "ints";
    case IR_ATTR_STRINGS: return "strings";
    case IR_ATTR_TENSORS: return "tensors";
    case IR_ATTR_GRAPHS: return "graphs";
    case IR_ATTR_SPARSE_TENSOR: return "sparse_tensor";
    case IR_ATTR_SPARSE_TENSORS: return "sparse_tensors";
    case IR_ATTR_TYPE_PROTO: return "type_proto";
    case IR_ATTR_TYPE_PROTOS: return "type_protos";
    default: return "undefined";
    }
}
