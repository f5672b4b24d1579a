/* inline.c - expanding calls of model-local functions (see inline.h).
 *
 * One call is expanded at a time: the body's nodes are appended to the calling graph with
 * inputs and outputs renamed, then the node array is rebuilt with the expansion in the
 * call's place. Expanded nodes may themselves be calls; the outer loop repeats until a
 * pass finds none, counting depth so recursion ends with an error.
 */
#include "ir/inline.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

const ir_function *ir_node_function(const ir_model *m, const ir_node *n) {
    for (int32_t i = 0; i < m->n_functions; i++) {
        const ir_function *f = &m->functions[i];
        if (strcmp(f->name, n->op_type) != 0 || strcmp(f->domain, n->domain) != 0) continue;
        if (strcmp(f->overload ? f->overload : "", n->overload ? n->overload : "") != 0) continue;
        return f;
    }
    return NULL;
}

static bool is_function_body(const ir_model *m, const ir_graph *g) {
    for (int32_t i = 0; i < m->n_functions; i++)
        if (m->functions[i].body == g) return true;
    return false;
}

/* The caller's attribute, else the function's default, for a ref_attr_name; NULL if
 * neither exists (the attribute is then left out, as ONNX specifies). */
static const ir_attr *resolve_ref(const ir_function *f, const ir_node *call, const char *ref) {
    const ir_attr *a = ir_node_attr(call, ref);
    if (a) return a;
    for (int32_t i = 0; i < f->n_attr_defaults; i++)
        if (strcmp(f->attr_defaults[i].name, ref) == 0) return &f->attr_defaults[i];
    return NULL;
}

static int64_t body_opset(const ir_model *m, const ir_function *f, const char *domain) {
    for (int32_t i = 0; i < f->n_opsets; i++)
        if (strcmp(f->opsets[i].domain, domain) == 0) return f->opsets[i].version;
    return ir_model_opset(m, domain);
}

/* A fresh value in g for a body-internal value, named "<call>/<name>" (made unique). */
static int32_t fresh_value(ir_graph *g, const char *call_name, const char *name) {
    arena *a = &g->model->arena;
    const char *want = arena_printf(a, "%s/%s", call_name, name);
    if (!want) return IR_NONE;
    for (int k = 1; ir_graph_find(g, want) != IR_NONE; k++) {
        want = arena_printf(a, "%s/%s_%d", call_name, name, k);
        if (!want || k > 1000000) return IR_NONE;
    }
    return ir_graph_add_value(g, want);
}

/* Appends the body of f, wired to call node `ci` of g. */
static kiln_status expand_call(ir_graph *g, int32_t ci, const ir_function *f, kiln_error *err) {
    ir_model *m = g->model;
    arena *a = &m->arena;
    const ir_graph *body = f->body;
    ir_node call = g->nodes[ci]; /* copy: appending nodes reallocates the array */
    if (call.n_inputs > body->n_inputs || call.n_outputs > body->n_outputs)
        return kiln_err_set(err, KILN_ERR_INVALID_MODEL,
                            "node '%s' calls function '%s' with %d inputs and %d outputs, but the function "
                            "declares %d and %d",
                            call.name, f->name, (int)call.n_inputs, (int)call.n_outputs, (int)body->n_inputs,
                            (int)body->n_outputs);
    int32_t *map = malloc(sizeof *map * (size_t)(body->n_values ? body->n_values : 1));
    if (!map) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inlining function '%s'", f->name);
    for (int32_t i = 0; i < body->n_values; i++) map[i] = -2; /* not yet mapped */
    for (int32_t i = 0; i < body->n_inputs; i++)
        map[body->inputs[i]] = i < call.n_inputs ? call.inputs[i] : IR_NONE;
    for (int32_t i = 0; i < body->n_outputs; i++) {
        int32_t v = body->outputs[i];
        /* an output the call leaves unnamed still needs a value: body nodes may read it */
        map[v] = (i < call.n_outputs && call.outputs[i] != IR_NONE) ? call.outputs[i]
                                                                    : fresh_value(g, call.name, body->values[v].name);
        if (map[v] == IR_NONE) {
            free(map);
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inlining function '%s'", f->name);
        }
    }
    kiln_status st = KILN_OK;
    for (int32_t ni = 0; ni < body->n_nodes && st == KILN_OK; ni++) {
        const ir_node *bn = &body->nodes[ni];
        for (int32_t k = 0; k < bn->n_attrs; k++) {
            if (bn->attrs[k].type == IR_ATTR_GRAPH || bn->attrs[k].type == IR_ATTR_GRAPHS) {
                st = kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                                  "node '%s' calls function '%s', whose node '%s' (%s) has a subgraph; kiln "
                                  "cannot inline functions with control flow yet (hint: export without "
                                  "functions, e.g. inline them with onnx.inliner.inline_local_functions)",
                                  call.name, f->name, bn->name, bn->op_type);
                break;
            }
        }
        if (st != KILN_OK) break;
        int32_t *ins = ARENA_ARRAY(a, int32_t, bn->n_inputs ? bn->n_inputs : 1);
        int32_t *outs = ARENA_ARRAY(a, int32_t, bn->n_outputs ? bn->n_outputs : 1);
        ir_attr *attrs = ARENA_ARRAY(a, ir_attr, bn->n_attrs ? bn->n_attrs : 1);
        const char *name = arena_printf(a, "%s/%s", call.name, bn->name);
        if (!ins || !outs || !attrs || !name) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inlining function '%s'", f->name);
            break;
        }
        for (int32_t k = 0; k < bn->n_inputs + bn->n_outputs && st == KILN_OK; k++) {
            int32_t v = k < bn->n_inputs ? bn->inputs[k] : bn->outputs[k - bn->n_inputs];
            int32_t mv = IR_NONE; /* empty names stay empty */
            if (v >= 0 && v < body->n_values) {
                if (map[v] == -2) {
                    map[v] = fresh_value(g, call.name, body->values[v].name);
                    if (map[v] == IR_NONE)
                        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inlining function '%s'", f->name);
                }
                mv = map[v];
            }
            if (k < bn->n_inputs) ins[k] = mv;
            else outs[k - bn->n_inputs] = mv;
        }
        if (st != KILN_OK) break;
        int32_t na = 0;
        for (int32_t k = 0; k < bn->n_attrs; k++) {
            const ir_attr *src = &bn->attrs[k];
            if (src->ref_attr_name) {
                const ir_attr *r = resolve_ref(f, &call, src->ref_attr_name);
                if (!r) continue;
                attrs[na] = *r;
                attrs[na].name = src->name;
                attrs[na].ref_attr_name = NULL;
            } else {
                attrs[na] = *src;
            }
            na++;
        }
        int32_t id = ir_graph_add_node(g);
        if (id == IR_NONE) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inlining function '%s'", f->name);
            break;
        }
        ir_node *nn = &g->nodes[id];
        nn->name = name;
        nn->op_type = bn->op_type;
        nn->domain = bn->domain;
        nn->overload = bn->overload;
        nn->n_inputs = bn->n_inputs;
        nn->inputs = ins;
        nn->n_outputs = bn->n_outputs;
        nn->outputs = outs;
        nn->n_attrs = na;
        nn->attrs = attrs;
        nn->opset = body_opset(m, f, bn->domain);
        nn->source_index = call.source_index;
        nn->file_offset = bn->file_offset;
        nn->doc = bn->doc;
    }
    free(map);
    return st;
}

/* Rebuilds g's node array: node i of the old array, or for the call at `ci` the nodes
 * appended from `first` on. Recomputes producers. */
static kiln_status splice(ir_graph *g, int32_t ci, int32_t first, kiln_error *err) {
    int32_t n_old = first, n_new = g->n_nodes - first;
    int32_t total = n_old - 1 + n_new;
    ir_node *nodes = kiln_realloc_array(NULL, (size_t)(total ? total : 1), sizeof *nodes);
    if (!nodes) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory inlining functions");
    int32_t k = 0;
    for (int32_t i = 0; i < n_old; i++) {
        if (i == ci) {
            memcpy(nodes + k, g->nodes + first, sizeof *nodes * (size_t)n_new);
            k += n_new;
        } else {
            nodes[k++] = g->nodes[i];
        }
    }
    free(g->nodes);
    g->nodes = nodes;
    g->n_nodes = g->cap_nodes = total;
    for (int32_t v = 0; v < g->n_values; v++) g->values[v].producer = IR_NONE;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t o = 0; o < g->nodes[i].n_outputs; o++) {
            int32_t v = g->nodes[i].outputs[o];
            if (v >= 0 && v < g->n_values && g->values[v].producer == IR_NONE) g->values[v].producer = i;
        }
    return KILN_OK;
}

static kiln_status inline_graph(ir_graph *g, int32_t *count, kiln_error *err) {
    ir_model *m = g->model;
    /* Expansions land where the call was, so scanning on from the call's index sees the
     * expanded nodes next; the budget bounds total work so recursion cannot loop. */
    int64_t budget = (int64_t)IR_MAX_INLINE_DEPTH * (g->n_nodes + 1) * (m->n_functions + 1);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_function *f = ir_node_function(m, &g->nodes[i]);
        if (!f) continue;
        if (--budget < 0)
            return kiln_err_set(err, KILN_ERR_INVALID_MODEL,
                                "function '%s' expands without end (it calls itself?); kiln inlines calls up "
                                "to %d levels deep",
                                f->name, IR_MAX_INLINE_DEPTH);
        int32_t first = g->n_nodes;
        kiln_status st = expand_call(g, i, f, err);
        if (st == KILN_OK) st = splice(g, i, first, err);
        if (st != KILN_OK) return st;
        (*count)++;
        i--; /* the first expanded node now sits at i: look at it again */
    }
    return KILN_OK;
}

kiln_status ir_inline_functions(ir_model *m, int32_t *n_inlined, kiln_error *err) {
    int32_t count = 0;
    if (n_inlined) *n_inlined = 0;
    if (m->n_functions == 0) return KILN_OK;
    /* Graphs of the model (main + subgraphs), not function bodies: those are templates. */
    int32_t n_graphs = m->n_graphs;
    for (int32_t gi = 0; gi < n_graphs; gi++) {
        ir_graph *g = m->graphs[gi];
        if (is_function_body(m, g)) continue;
        /* subgraphs of function bodies are templates too */
        const ir_graph *root = g;
        while (root->parent) root = root->parent;
        if (root != m->graph) continue;
        kiln_status st = inline_graph(g, &count, err);
        if (st != KILN_OK) return st;
    }
    if (n_inlined) *n_inlined = count;
    return KILN_OK;
}
