/* import_model.c - decodes ModelProto (and its FunctionProtos, opsets, metadata) into
 * an ir_model. The graph itself is import_graph.c's job.
 *
 * Node opset versions are filled in after the whole model is read, because opset_import
 * (field 8) comes after the graph (field 7) in a normally serialised file.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "onnx/onnx_internal.h"

enum {
    M_IR_VERSION = 1, M_PRODUCER = 2, M_PRODUCER_VERSION = 3, M_DOMAIN = 4, M_MODEL_VERSION = 5, M_DOC = 6,
    M_GRAPH = 7, M_OPSET = 8, M_METADATA = 14, M_TRAINING = 20, M_FUNCTIONS = 25
};

static const char *norm_domain(const char *d) { return strcmp(d, "ai.onnx") == 0 ? "" : d; }

static kiln_status decode_opset(onnx_rd *rd, pb_cursor *c, ir_opset *o) {
    o->domain = "";
    o->version = 0;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st;
        if (f.num == 1) st = onnx_string(rd, &f, "domain", &o->domain);
        else if (f.num == 2) st = onnx_varint(rd, &f, "version", &o->version);
        else st = onnx_skip(rd, &f);
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    o->domain = norm_domain(o->domain);
    return KILN_OK;
}

static kiln_status decode_kv(onnx_rd *rd, pb_cursor *c, ir_kv *kv) {
    kv->key = kv->value = "";
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st;
        if (f.num == 1) st = onnx_string(rd, &f, "key", &kv->key);
        else if (f.num == 2) st = onnx_string(rd, &f, "value", &kv->value);
        else st = onnx_skip(rd, &f);
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    return KILN_OK;
}

enum {
    F_NAME = 1, F_INPUT = 4, F_OUTPUT = 5, F_ATTRIBUTE = 6, F_NODE = 7, F_DOC = 8, F_OPSET = 9, F_DOMAIN = 10,
    F_ATTR_PROTO = 11, F_VALUE_INFO = 12, F_OVERLOAD = 13
};

/* FunctionProto: a model-local function. Its body is a graph without a parent whose inputs
 * and outputs are the formal parameters. */
static kiln_status decode_function(onnx_rd *rd, pb_cursor *c, ir_function *fn) {
    pb_counts cnt;
    pb_count(rd->buf, c->pos, c->end, 0, 0, 0, &cnt);
    memset(fn, 0, sizeof *fn);
    fn->name = fn->domain = fn->overload = fn->doc = "";
    fn->body = ir_graph_new(rd->model, NULL, "");
    if (!fn->body) return onnx_nomem(rd);
    ir_graph *g = fn->body;
    g->inputs = ARENA_ARRAY(rd->a, int32_t, cnt.n[F_INPUT] + 1);
    g->outputs = ARENA_ARRAY(rd->a, int32_t, cnt.n[F_OUTPUT] + 1);
    g->initializers = ARENA_ARRAY(rd->a, int32_t, 1);
    fn->attr_names = ARENA_ARRAY(rd->a, const char *, cnt.n[F_ATTRIBUTE] + 1);
    fn->attr_defaults = ARENA_ARRAY(rd->a, ir_attr, cnt.n[F_ATTR_PROTO] + 1);
    fn->opsets = ARENA_ARRAY(rd->a, ir_opset, cnt.n[F_OPSET] + 1);
    if (!g->inputs || !g->outputs || !g->initializers || !fn->attr_names || !fn->attr_defaults || !fn->opsets)
        return onnx_nomem(rd);
    int32_t n_nodes = 0, n_vi = 0;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        pb_cursor sub;
        ir_bytes b;
        switch (f.num) {
        case F_NAME: st = onnx_string(rd, &f, "name", &fn->name); break;
        case F_DOMAIN: st = onnx_string(rd, &f, "domain", &fn->domain); break;
        case F_OVERLOAD: st = onnx_string(rd, &f, "overload", &fn->overload); break;
        case F_DOC: st = onnx_string(rd, &f, "doc_string", &fn->doc); break;
        case F_INPUT:
        case F_OUTPUT: {
            st = onnx_bytes(rd, &f, f.num == F_INPUT ? "input" : "output", &b);
            if (st) break;
            const char *name = onnx_scratch(rd, b.data, b.len);
            int32_t v = name ? ir_graph_value(g, name) : IR_NONE;
            if (v == IR_NONE) return onnx_nomem(rd);
            if (f.num == F_INPUT && (uint32_t)g->n_inputs < cnt.n[F_INPUT]) {
                ir_val(g, v)->flags |= IR_VALUE_GRAPH_INPUT;
                g->inputs[g->n_inputs++] = v;
            } else if (f.num == F_OUTPUT && (uint32_t)g->n_outputs < cnt.n[F_OUTPUT]) {
                ir_val(g, v)->flags |= IR_VALUE_GRAPH_OUTPUT;
                g->outputs[g->n_outputs++] = v;
            }
            break;
        }
        case F_ATTRIBUTE:
            if ((uint32_t)fn->n_attr_names < cnt.n[F_ATTRIBUTE])
                st = onnx_string(rd, &f, "attribute", &fn->attr_names[fn->n_attr_names++]);
            break;
        case F_ATTR_PROTO:
            if ((uint32_t)fn->n_attr_defaults >= cnt.n[F_ATTR_PROTO]) break;
            st = onnx_enter(rd, &f, c, "attribute_proto", fn->n_attr_defaults, 1, &sub);
            if (!st) st = onnx_decode_attr(rd, &sub, g, &fn->attr_defaults[fn->n_attr_defaults]);
            if (!st) st = onnx_leave(rd);
            fn->n_attr_defaults++;
            break;
        case F_NODE:
            st = onnx_enter(rd, &f, c, "node", n_nodes, 3, &sub);
            if (!st) st = onnx_decode_node(rd, &sub, g, n_nodes);
            if (!st) st = onnx_leave(rd);
            n_nodes++;
            break;
        case F_OPSET:
            if ((uint32_t)fn->n_opsets >= cnt.n[F_OPSET]) break;
            st = onnx_enter(rd, &f, c, "opset_import", fn->n_opsets, 0, &sub);
            if (!st) st = decode_opset(rd, &sub, &fn->opsets[fn->n_opsets]);
            if (!st) st = onnx_leave(rd);
            fn->n_opsets++;
            break;
        case F_VALUE_INFO: {
            int32_t v;
            st = onnx_enter(rd, &f, c, "value_info", n_vi++, 1, &sub);
            if (!st) st = onnx_decode_value_info(rd, &sub, g, 0, &v);
            if (!st) st = onnx_leave(rd);
            break;
        }
        default: st = onnx_skip(rd, &f); break;
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    g->name = fn->name;
    g->location = arena_printf(rd->a, "function '%s'", fn->name);
    if (!g->location) return onnx_nomem(rd);
    return KILN_OK;
}

/* domain -> version map of an opset list (the first import of a domain wins). */
static bool opset_map(hashmap *h, const ir_opset *o, int32_t n) {
    hashmap_init(h);
    for (int32_t i = 0; i < n; i++) {
        int32_t dummy;
        if (o[i].version < INT32_MIN || o[i].version > INT32_MAX) continue; /* absurd: left unimported */
        if (!hashmap_get(h, o[i].domain, &dummy) && !hashmap_put(h, o[i].domain, (int32_t)o[i].version)) return false;
    }
    return true;
}

/* Gives every node the opset version of its domain: the model's, or inside a function
 * body (and its subgraphs) the function's own imports first. Graphs are registered in
 * creation order, and a root graph's subgraphs are created while it is decoded, so each
 * run of graphs after a root belongs to that root. Hash lookups keep this linear even for
 * hostile files with many imports and nodes. */
static kiln_status assign_opsets(onnx_rd *rd) {
    ir_model *m = rd->model;
    hashmap model_map, fn_map;
    if (!opset_map(&model_map, m->opsets, m->n_opsets)) {
        hashmap_free(&model_map);
        return onnx_nomem(rd);
    }
    hashmap_init(&fn_map);
    bool in_fn = false;
    int32_t next_fn = 0;
    kiln_status st = KILN_OK;
    for (int32_t gi = 0; gi < m->n_graphs && !st; gi++) {
        ir_graph *g = m->graphs[gi];
        if (!g->parent) {
            hashmap_free(&fn_map);
            hashmap_init(&fn_map);
            in_fn = next_fn < m->n_functions && m->functions[next_fn].body == g;
            if (in_fn) {
                const ir_function *fn = &m->functions[next_fn++];
                if (!opset_map(&fn_map, fn->opsets, fn->n_opsets)) st = onnx_nomem(rd);
            }
        }
        for (int32_t i = 0; i < g->n_nodes && !st; i++) {
            ir_node *n = &g->nodes[i];
            int32_t v = 0;
            if (!(in_fn && hashmap_get(&fn_map, n->domain, &v)) && !hashmap_get(&model_map, n->domain, &v)) v = 0;
            n->opset = v;
        }
    }
    hashmap_free(&fn_map);
    hashmap_free(&model_map);
    return st;
}

kiln_status onnx_decode_model(onnx_rd *rd) {
    ir_model *m = rd->model;
    pb_cursor c = pb_cursor_make(rd->buf, 0, rd->size);
    pb_counts cnt;
    pb_count(rd->buf, 0, rd->size, 0, 0, 0, &cnt);
    m->opsets = ARENA_ARRAY(rd->a, ir_opset, cnt.n[M_OPSET] + 1);
    m->metadata = ARENA_ARRAY(rd->a, ir_kv, cnt.n[M_METADATA] + 1);
    m->functions = ARENA_ARRAY(rd->a, ir_function, cnt.n[M_FUNCTIONS] + 1);
    if (!m->opsets || !m->metadata || !m->functions) return onnx_nomem(rd);
    bool has_graph = false;
    pb_field f;
    pb_result r;
    while ((r = pb_next(&c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        pb_cursor sub;
        switch (f.num) {
        case M_IR_VERSION: st = onnx_varint(rd, &f, "ir_version", &m->ir_version); break;
        case M_MODEL_VERSION: st = onnx_varint(rd, &f, "model_version", &m->model_version); break;
        case M_PRODUCER: st = onnx_string(rd, &f, "producer_name", &m->producer_name); break;
        case M_PRODUCER_VERSION: st = onnx_string(rd, &f, "producer_version", &m->producer_version); break;
        case M_DOMAIN: st = onnx_string(rd, &f, "domain", &m->domain); break;
        case M_DOC: st = onnx_string(rd, &f, "doc_string", &m->doc); break;
        case M_GRAPH:
            if (has_graph)
                return onnx_fail(rd, KILN_ERR_FORMAT, f.tag_pos, "graph",
                                 "appears twice: a model has one main graph; the file was concatenated or "
                                 "corrupted, re-export it");
            has_graph = true;
            m->graph = ir_graph_new(m, NULL, "");
            if (!m->graph) return onnx_nomem(rd);
            st = onnx_enter(rd, &f, &c, "graph", -1, 0, &sub);
            if (!st) st = onnx_decode_graph(rd, &sub, m->graph);
            if (!st) st = onnx_leave(rd);
            break;
        case M_OPSET:
            if ((uint32_t)m->n_opsets >= cnt.n[M_OPSET]) break;
            st = onnx_enter(rd, &f, &c, "opset_import", m->n_opsets, 0, &sub);
            if (!st) st = decode_opset(rd, &sub, &m->opsets[m->n_opsets]);
            if (!st) st = onnx_leave(rd);
            m->n_opsets++;
            break;
        case M_METADATA:
            if ((uint32_t)m->n_metadata >= cnt.n[M_METADATA]) break;
            st = onnx_enter(rd, &f, &c, "metadata_props", m->n_metadata, 1, &sub);
            if (!st) st = decode_kv(rd, &sub, &m->metadata[m->n_metadata]);
            if (!st) st = onnx_leave(rd);
            m->n_metadata++;
            break;
        case M_FUNCTIONS:
            if ((uint32_t)m->n_functions >= cnt.n[M_FUNCTIONS]) break;
            st = onnx_enter(rd, &f, &c, "functions", m->n_functions, 1, &sub);
            if (!st) st = decode_function(rd, &sub, &m->functions[m->n_functions]);
            if (!st) st = onnx_leave(rd);
            m->n_functions++;
            break;
        case M_TRAINING: /* training_info: not needed for inference; skipped whole */
        default: st = onnx_skip(rd, &f); break;
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, &c, &f, NULL);
    if (!has_graph)
        return kiln_err_set(rd->err, KILN_ERR_FORMAT,
                            "%s: not an ONNX model: the file decodes as protobuf but has no graph (ModelProto "
                            "field 7); check that this is the exported .onnx file and re-export it if needed",
                            rd->display);
    m->graph->location = "";
    return assign_opsets(rd);
}
