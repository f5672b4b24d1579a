/* validate.c - structural validation and stable topological sorting (see validate.h).
 *
 * Runs right after import, before shape inference: everything later assumes that every
 * consumed name has exactly one producer and that nodes are in dependency order.
 *
 * Per graph (main graph, every subgraph, every function body) it
 *   - recomputes producers from node outputs (the importer keeps only the first producer
 *     of a name, so duplicates are only visible here) and reports duplicates;
 *   - resolves names a subgraph takes from enclosing graphs (marks them
 *     IR_VALUE_OUTER_SCOPE) and reports names nothing defines, with the closest existing
 *     name as a suggestion;
 *   - checks graph outputs are produced;
 *   - sorts unsorted graphs with Kahn's algorithm using a min-heap on the file position, so
 *     nodes without an ordering constraint keep their file order (as ONNX Runtime does),
 *     and names the nodes of a cycle when there is one.
 * A node that owns subgraphs implicitly depends on the producers of every outer-scope
 * value its subgraphs (at any depth) use; the sort honours those edges too.
 *
 * model->graphs lists parents before children (ir_graph_new needs the parent first), so
 * one pass in that order sees a parent's producers before resolving a child's names.
 * Everything is linear in graph size apart from the heap (n log n, only when unsorted) and
 * the bounded did-you-mean search.
 */
#include "ir/validate.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/strbuf.h"

/* At most this many missing names get an edit-distance suggestion (each costs a scan over
 * all names in scope); more missing names than that means the graph is broken wholesale. */
#define VAL_MAX_SUGGESTIONS 16
/* How many names a summary diagnostic lists before "and N more". */
#define VAL_LIST_NAMES 5

typedef struct val_ctx {
    ir_model *model;
    diag_list *diags;
    kiln_status status; /* KILN_ERR_NOMEM when an allocation failed */
    int32_t n_suggestions;
} val_ctx;

/* ---- small helpers -------------------------------------------------------------------- */

static bool graph_is_function_body(const ir_model *m, const ir_graph *g, const ir_function **fn) {
    for (int32_t i = 0; i < m->n_functions; i++)
        if (m->functions[i].body == g) {
            if (fn) *fn = &m->functions[i];
            return true;
        }
    return false;
}

/* The function whose body contains g (directly or through subgraphs), or NULL. */
static const ir_function *enclosing_function(const ir_model *m, const ir_graph *g) {
    const ir_graph *top = g;
    while (top->parent) top = top->parent;
    const ir_function *fn = NULL;
    return graph_is_function_body(m, top, &fn) ? fn : NULL;
}

/* Where a graph sits, for diag->graph: NULL for the main graph. */
static const char *graph_where(val_ctx *c, const ir_graph *g) {
    if (g == c->model->graph) return NULL;
    if (g->location && g->location[0]) return g->location;
    const ir_function *fn = NULL;
    if (graph_is_function_body(c->model, g, &fn))
        return arena_printf(&c->diags->arena, "function '%s%s%s'", fn->domain ? fn->domain : "",
                            fn->domain && fn->domain[0] ? "." : "", fn->name ? fn->name : "?");
    if (g->name && g->name[0]) return arena_printf(&c->diags->arena, "subgraph '%s'", g->name);
    return "a subgraph";
}

static diag *add_graph_diag(val_ctx *c, const ir_graph *g, diag_severity sev, const char *code,
                            const ir_node *n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

static diag *add_graph_diag(val_ctx *c, const ir_graph *g, diag_severity sev, const char *code,
                            const ir_node *n, const char *fmt, ...) {
    strbuf sb;
    sb_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    diag *d = diag_add(c->diags, sev, code, n ? n->name : NULL, n ? n->op_type : NULL, "%s",
                       sb_cstr(&sb));
    sb_free(&sb);
    if (d) d->graph = graph_where(c, g);
    return d;
}

static const char *op_label(const ir_node *n) {
    return n->op_type && n->op_type[0] ? n->op_type : "?";
}

/* Levenshtein distance with an early exit once every cell of a row exceeds `limit`
 * (returns limit + 1 then). Names longer than 128 bytes are not compared. */
static int bounded_distance(const char *a, const char *b, int limit) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 128 || lb > 128) return limit + 1;
    size_t diff = la > lb ? la - lb : lb - la;
    if ((int)diff > limit) return limit + 1;
    int prev[129], cur[129];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        int rowmin = cur[0];
        for (size_t j = 1; j <= lb; j++) {
            int v = prev[j] + 1;
            if (cur[j - 1] + 1 < v) v = cur[j - 1] + 1;
            int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            if (sub < v) v = sub;
            cur[j] = v;
            if (v < rowmin) rowmin = v;
        }
        if (rowmin > limit) return limit + 1;
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

/* Is value `id` of graph g defined there (input, initializer, node output, or a resolved
 * outer-scope reference)? Valid once g itself was validated (producers recomputed). */
static bool value_defined_in(const ir_graph *g, int32_t id) {
    const ir_value *v = &g->values[id];
    if (v->flags & (IR_VALUE_GRAPH_INPUT | IR_VALUE_INITIALIZER | IR_VALUE_OUTER_SCOPE)) return true;
    if (v->producer != IR_NONE) return true;
    for (int32_t i = 0; i < g->n_sparse_initializers; i++)
        if (g->sparse_initializer_names && g->sparse_initializer_names[i] &&
            strcmp(g->sparse_initializer_names[i], v->name) == 0)
            return true;
    return false;
}

/* The closest defined name to `name` in g and its enclosing graphs, or NULL. */
static const char *closest_name(val_ctx *c, const ir_graph *g, const char *name) {
    if (c->n_suggestions >= VAL_MAX_SUGGESTIONS) return NULL;
    c->n_suggestions++;
    size_t len = strlen(name);
    int limit = len <= 4 ? 1 : (len <= 10 ? 2 : (len <= 24 ? 3 : 4));
    const char *best = NULL;
    int bestd = limit + 1;
    for (const ir_graph *s = g; s; s = s->parent) {
        for (int32_t i = 0; i < s->n_values; i++) {
            const ir_value *v = &s->values[i];
            if (strcmp(v->name, name) == 0 || !value_defined_in(s, i)) continue;
            int d = bounded_distance(name, v->name, bestd - 1);
            if (d < bestd) {
                bestd = d;
                best = v->name;
            }
        }
    }
    return best;
}

/* ---- the sort ------------------------------------------------------------------------- */

typedef struct edge {
    int32_t from, to; /* node `to` must come after node `from` */
} edge;

typedef struct edge_list {
    edge *items;
    size_t n, cap;
} edge_list;

static bool edges_push(edge_list *l, int32_t from, int32_t to) {
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        edge *ni = kiln_realloc_array(l->items, ncap, sizeof *ni);
        if (!ni) return false;
        l->items = ni;
        l->cap = ncap;
    }
    l->items[l->n].from = from;
    l->items[l->n].to = to;
    l->n++;
    return true;
}

/* Does graph `s` (a descendant of `top`) take `name` from `top`? True when no graph between
 * them defines it itself. */
static bool resolves_in(const ir_graph *s, const ir_graph *top, const char *name, int32_t *id_out) {
    for (const ir_graph *p = s->parent; p; p = p->parent) {
        int32_t id = ir_graph_find(p, name);
        if (id == IR_NONE) {
            if (p == top) return false;
            continue;
        }
        const ir_value *v = &p->values[id];
        bool own = (v->flags & IR_VALUE_OUTER_SCOPE) == 0 && value_defined_in(p, id);
        if (p == top) {
            if (!own) return false;
            *id_out = id;
            return true;
        }
        if (own) return false; /* defined by an intermediate graph */
    }
    return false;
}

/* Adds edges producer -> owner for every outer-scope value that subgraph s (and its own
 * subgraphs) takes from `top`, where `owner` is the node of `top` that holds the chain. */
static bool collect_implicit(const ir_graph *s, const ir_graph *top, int32_t owner, edge_list *el,
                             int depth) {
    if (depth > IR_MAX_GRAPH_DEPTH) return true;
    for (int32_t i = 0; i < s->n_values; i++) {
        const ir_value *v = &s->values[i];
        if (!(v->flags & IR_VALUE_OUTER_SCOPE)) continue;
        int32_t id;
        if (resolves_in(s, top, v->name, &id) && top->values[id].producer != IR_NONE)
            if (!edges_push(el, top->values[id].producer, owner)) return false;
    }
    for (int32_t ni = 0; ni < s->n_nodes; ni++) {
        const ir_node *n = &s->nodes[ni];
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            if (at->type == IR_ATTR_GRAPH && at->g) {
                if (!collect_implicit(at->g, top, owner, el, depth + 1)) return false;
            } else if (at->type == IR_ATTR_GRAPHS) {
                for (int32_t k = 0; k < at->n; k++)
                    if (at->graphs && at->graphs[k] && !collect_implicit(at->graphs[k], top, owner, el, depth + 1))
                        return false;
            }
        }
    }
    return true;
}

/* Every dependency edge of g: data edges from value->producer (which must be current)
 * plus the implicit edges of nodes that own subgraphs. */
static bool graph_edges(const ir_graph *g, edge_list *el) {
    for (int32_t ni = 0; ni < g->n_nodes; ni++) {
        const ir_node *n = &g->nodes[ni];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t v = n->inputs[k];
            if (v < 0 || v >= g->n_values) continue;
            int32_t p = g->values[v].producer;
            if (p != IR_NONE && !edges_push(el, p, ni)) return false;
        }
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            if (at->type == IR_ATTR_GRAPH && at->g) {
                if (!collect_implicit(at->g, g, ni, el, 1)) return false;
            } else if (at->type == IR_ATTR_GRAPHS) {
                for (int32_t k = 0; k < at->n; k++)
                    if (at->graphs && at->graphs[k] && !collect_implicit(at->graphs[k], g, ni, el, 1))
                        return false;
            }
        }
    }
    return true;
}

/* The common case, a graph already in order, checked without building the edge list
 * (most models are exported sorted; this keeps validation of big graphs cheap). */
static bool already_sorted(const ir_graph *g, bool *sorted) {
    *sorted = true;
    edge_list el = {0};
    for (int32_t ni = 0; ni < g->n_nodes && *sorted; ni++) {
        const ir_node *n = &g->nodes[ni];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t v = n->inputs[k];
            if (v >= 0 && v < g->n_values && g->values[v].producer >= ni) *sorted = false;
        }
        for (int32_t a = 0; a < n->n_attrs && *sorted; a++) {
            const ir_attr *at = &n->attrs[a];
            el.n = 0;
            bool ok = true;
            if (at->type == IR_ATTR_GRAPH && at->g) ok = collect_implicit(at->g, g, ni, &el, 1);
            else if (at->type == IR_ATTR_GRAPHS)
                for (int32_t k = 0; k < at->n && ok; k++)
                    if (at->graphs && at->graphs[k]) ok = collect_implicit(at->graphs[k], g, ni, &el, 1);
            if (!ok) {
                free(el.items);
                return false;
            }
            for (size_t e = 0; e < el.n; e++)
                if (el.items[e].from >= ni) *sorted = false;
        }
    }
    free(el.items);
    return true;
}

/* Min-heap of node indices: popping the smallest ready index keeps file order wherever the
 * dependencies allow it. */
static void heap_push(int32_t *h, int32_t *n, int32_t x) {
    int32_t i = (*n)++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (h[p] <= x) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static int32_t heap_pop(int32_t *h, int32_t *n) {
    int32_t top = h[0], x = h[--(*n)], i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        int32_t mv = x;
        if (l < *n && h[l] < mv) { m = l; mv = h[l]; }
        if (r < *n && h[r] < mv) { m = r; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n > 0) h[i] = x;
    return top;
}

/* Renders one cycle among the nodes Kahn's algorithm could not place (done[i] == 0): walk
 * backwards through unplaced predecessors until a node repeats. Every unplaced node has
 * one, since its in-degree never reached zero. */
static void describe_cycle(const ir_graph *g, const int32_t *pred_start, const int32_t *preds,
                           const uint8_t *done, strbuf *out) {
    int32_t nn = g->n_nodes;
    int32_t *seen_at = malloc(sizeof(int32_t) * (size_t)nn);
    int32_t *path = malloc(sizeof(int32_t) * (size_t)nn);
    if (!seen_at || !path) {
        free(seen_at);
        free(path);
        sb_append(out, "(out of memory while describing the cycle)");
        return;
    }
    for (int32_t i = 0; i < nn; i++) seen_at[i] = -1;
    int32_t cur = 0;
    while (cur < nn && done[cur]) cur++;
    int32_t len = 0;
    while (cur < nn && seen_at[cur] < 0) {
        seen_at[cur] = len;
        path[len++] = cur;
        int32_t next = nn;
        for (int32_t e = pred_start[cur]; e < pred_start[cur + 1]; e++)
            if (!done[preds[e]]) {
                next = preds[e];
                break;
            }
        cur = next;
    }
    if (cur < nn) {
        /* path[seen_at[cur]..len-1] is the cycle, each entry a consumer of the next; print
         * it in data-flow order: producer -> consumer. */
        int32_t first = seen_at[cur], clen = len - first;
        /* start at the node that comes first in the file, so the text is deterministic */
        int32_t start = len - 1;
        for (int32_t i = first; i < len; i++)
            if (path[i] < path[start]) start = i;
        for (int32_t k = 0; k <= clen; k++) {
            /* walking path backwards is walking the data flow forwards */
            int32_t i = first + ((start - first - k) % clen + clen) % clen;
            const ir_node *n = &g->nodes[path[i]];
            sb_printf(out, "%s'%s' (%s)", k ? " -> " : "", n->name, op_label(n));
        }
    }
    free(seen_at);
    free(path);
}

/* The sort proper. value->producer must be current. On a cycle, *cycle gets its text and
 * the graph is left unchanged. */
static kiln_status toposort(ir_graph *g, strbuf *cycle, kiln_error *err) {
    int32_t nn = g->n_nodes;
    if (nn <= 1) {
        /* a single node consuming its own output is still a cycle */
        if (nn == 1) {
            const ir_node *n = &g->nodes[0];
            for (int32_t k = 0; k < n->n_inputs; k++)
                if (n->inputs[k] >= 0 && n->inputs[k] < g->n_values && g->values[n->inputs[k]].producer == 0) {
                    sb_printf(cycle, "'%s' (%s) -> '%s' (%s)", n->name, op_label(n), n->name, op_label(n));
                    return KILN_ERR_INVALID_MODEL;
                }
        }
        return KILN_OK;
    }
    bool sorted = true;
    if (!already_sorted(g, &sorted))
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory while sorting graph nodes");
    if (sorted) return KILN_OK;
    edge_list el = {0};
    if (!graph_edges(g, &el)) {
        free(el.items);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory while sorting graph nodes");
    }

    kiln_status st = KILN_OK;
    size_t nslots = (size_t)nn + 1;
    int32_t *succ_start = calloc(nslots, sizeof(int32_t));
    int32_t *pred_start = calloc(nslots, sizeof(int32_t));
    int32_t *succs = malloc(sizeof(int32_t) * (el.n ? el.n : 1));
    int32_t *preds = malloc(sizeof(int32_t) * (el.n ? el.n : 1));
    int32_t *fill = calloc(nslots, sizeof(int32_t));
    int32_t *indeg = calloc(nslots, sizeof(int32_t));
    int32_t *heap = malloc(sizeof(int32_t) * nslots);
    int32_t *order = malloc(sizeof(int32_t) * nslots);
    uint8_t *done = calloc(nslots, 1);
    if (el.n > INT32_MAX || !succ_start || !pred_start || !succs || !preds || !fill || !indeg ||
        !heap || !order || !done) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory while sorting graph nodes");
        goto out;
    }
    /* CSR adjacency in both directions (successors to release nodes, predecessors to
     * describe a cycle). */
    for (size_t e = 0; e < el.n; e++) {
        succ_start[el.items[e].from + 1]++;
        pred_start[el.items[e].to + 1]++;
        indeg[el.items[e].to]++;
    }
    for (int32_t i = 0; i < nn; i++) {
        succ_start[i + 1] += succ_start[i];
        pred_start[i + 1] += pred_start[i];
    }
    for (size_t e = 0; e < el.n; e++) {
        int32_t f = el.items[e].from;
        succs[succ_start[f] + fill[f]++] = el.items[e].to;
    }
    memset(fill, 0, sizeof(int32_t) * nslots);
    for (size_t e = 0; e < el.n; e++) {
        int32_t t = el.items[e].to;
        preds[pred_start[t] + fill[t]++] = el.items[e].from;
    }

    int32_t hn = 0, placed = 0;
    for (int32_t i = 0; i < nn; i++)
        if (indeg[i] == 0) heap_push(heap, &hn, i);
    while (hn > 0) {
        int32_t x = heap_pop(heap, &hn);
        order[placed++] = x;
        done[x] = 1;
        for (int32_t e = succ_start[x]; e < succ_start[x + 1]; e++)
            if (--indeg[succs[e]] == 0) heap_push(heap, &hn, succs[e]);
    }
    if (placed < nn) {
        describe_cycle(g, pred_start, preds, done, cycle);
        st = KILN_ERR_INVALID_MODEL;
        goto out;
    }

    /* Apply the permutation: nodes move, value->producer follows (fill[] becomes the map
     * old index -> new index). source_index stays with each node. */
    ir_node *nodes = kiln_realloc_array(NULL, (size_t)nn, sizeof *nodes);
    if (!nodes) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory while sorting graph nodes");
        goto out;
    }
    for (int32_t i = 0; i < nn; i++) {
        nodes[i] = g->nodes[order[i]];
        fill[order[i]] = i;
    }
    free(g->nodes);
    g->nodes = nodes;
    g->cap_nodes = nn;
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].producer >= 0 && g->values[v].producer < nn)
            g->values[v].producer = fill[g->values[v].producer];
out:
    free(el.items);
    free(succ_start);
    free(pred_start);
    free(succs);
    free(preds);
    free(fill);
    free(indeg);
    free(heap);
    free(order);
    free(done);
    return st;
}

/* Recomputes value->producer from node outputs (first producer wins). */
static void recompute_producers(ir_graph *g) {
    for (int32_t v = 0; v < g->n_values; v++) g->values[v].producer = IR_NONE;
    for (int32_t ni = 0; ni < g->n_nodes; ni++) {
        const ir_node *n = &g->nodes[ni];
        for (int32_t k = 0; k < n->n_outputs; k++) {
            int32_t v = n->outputs[k];
            if (v >= 0 && v < g->n_values && g->values[v].producer == IR_NONE) g->values[v].producer = ni;
        }
    }
}

kiln_status ir_graph_toposort(ir_graph *g, kiln_error *err) {
    recompute_producers(g);
    strbuf cycle;
    sb_init(&cycle);
    kiln_status st = toposort(g, &cycle, err);
    if (st == KILN_ERR_INVALID_MODEL)
        kiln_err_set(err, st, "the graph has a cycle: %s; ONNX graphs must be acyclic (loops are "
                              "expressed with the Loop operator)", sb_cstr(&cycle));
    sb_free(&cycle);
    return st;
}

/* ---- per-graph checks ----------------------------------------------------------------- */

/* Duplicate producers: two nodes writing one name, a node writing a graph input or an
 * initializer, and names declared twice as inputs or initializers. */
static void check_producers(val_ctx *c, ir_graph *g) {
    for (int32_t ni = 0; ni < g->n_nodes; ni++) {
        const ir_node *n = &g->nodes[ni];
        for (int32_t k = 0; k < n->n_outputs; k++) {
            int32_t v = n->outputs[k];
            if (v < 0 || v >= g->n_values) continue;
            ir_value *val = &g->values[v];
            int32_t first = val->producer;
            if (first != ni) {
                const ir_node *f = &g->nodes[first];
                diag *d = add_graph_diag(c, g, DIAG_ERROR, "structure-duplicate-producer", n,
                                         "output %d '%s' is also produced by node '%s' (%s)", (int)k,
                                         val->name, f->name, op_label(f));
                diag_fact(c->diags, d, "ONNX graphs are in SSA form: every name has exactly one producer");
                diag_hint(c->diags, d, "rename one of the two outputs (and its consumers)");
            } else {
                for (int32_t k2 = 0; k2 < k; k2++)
                    if (n->outputs[k2] == v) {
                        add_graph_diag(c, g, DIAG_ERROR, "structure-duplicate-producer", n,
                                       "output '%s' is listed twice (outputs %d and %d)", val->name,
                                       (int)k2, (int)k);
                        break;
                    }
            }
            if (first == ni && (val->flags & (IR_VALUE_GRAPH_INPUT | IR_VALUE_INITIALIZER))) {
                bool is_input = val->flags & IR_VALUE_GRAPH_INPUT;
                diag *d = add_graph_diag(c, g, DIAG_ERROR, "structure-duplicate-producer", n,
                                         "output %d '%s' is also a graph %s", (int)k, val->name,
                                         is_input ? "input" : "initializer");
                diag_hint(c->diags, d, "rename the node output or the %s: one name, one producer",
                          is_input ? "graph input" : "initializer");
            }
        }
    }

    /* Names listed twice among inputs or initializers. A small per-value counter does it. */
    uint8_t *seen = calloc((size_t)g->n_values + 1, 1);
    if (!seen) {
        c->status = KILN_ERR_NOMEM;
        return;
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t v = g->inputs[i];
        if (v < 0 || v >= g->n_values) continue;
        if (seen[v] & 1)
            add_graph_diag(c, g, DIAG_ERROR, "structure-duplicate-producer", NULL,
                           "graph input '%s' is declared more than once", g->values[v].name);
        seen[v] |= 1;
    }
    for (int32_t i = 0; i < g->n_initializers; i++) {
        int32_t v = g->initializers[i];
        if (v < 0 || v >= g->n_values) continue;
        if (seen[v] & 2)
            add_graph_diag(c, g, DIAG_ERROR, "structure-duplicate-producer", NULL,
                           "initializer '%s' is stored more than once", g->values[v].name);
        seen[v] |= 2;
    }
    free(seen);

    /* An initializer that is also a graph input is legal: for IR < 4 ONNX requires every
     * initializer to be listed as an input, and from IR 4 on such an input is an
     * overridable default (the caller may feed it, otherwise the initializer is used).
     * Builders usually want constants, so say so once per graph rather than erroring. */
    if (c->model->ir_version >= 4) {
        int32_t count = 0;
        strbuf names;
        sb_init(&names);
        for (int32_t i = 0; i < g->n_inputs; i++) {
            int32_t v = g->inputs[i];
            if (v < 0 || v >= g->n_values || !(g->values[v].flags & IR_VALUE_INITIALIZER)) continue;
            if (count < VAL_LIST_NAMES) sb_printf(&names, "%s'%s'", count ? ", " : "", g->values[v].name);
            count++;
        }
        if (count > 0) {
            if (count > VAL_LIST_NAMES) sb_printf(&names, " and %d more", (int)(count - VAL_LIST_NAMES));
            diag *d = add_graph_diag(c, g, DIAG_WARNING, "structure-initializer-is-input", NULL,
                                     "%d initializer%s also listed as graph input%s: %s", (int)count,
                                     count == 1 ? " is" : "s are", count == 1 ? "" : "s", sb_cstr(&names));
            diag_fact(c->diags, d, "from IR version 4 on such an input is an overridable default: callers may "
                                   "feed it, so kiln treats it as a runtime input unless told otherwise");
            diag_hint(c->diags, d, "if these are weights, re-export with keep_initializers_as_inputs=False "
                                   "(torch.onnx.export) so they are constants");
        }
        sb_free(&names);
    }
}

/* Missing producers (node inputs) and unproduced graph outputs; resolves outer-scope names. */
static void check_missing(val_ctx *c, ir_graph *g) {
    int32_t nv = g->n_values;
    /* state per value: 0 unreferenced, 1 referenced; first consumer and consumer count */
    int32_t *first_node = malloc(sizeof(int32_t) * ((size_t)nv + 1));
    int32_t *first_input = malloc(sizeof(int32_t) * ((size_t)nv + 1));
    int32_t *n_consumers = calloc((size_t)nv + 1, sizeof(int32_t));
    if (!first_node || !first_input || !n_consumers) {
        c->status = KILN_ERR_NOMEM;
        goto out;
    }
    for (int32_t ni = 0; ni < g->n_nodes; ni++) {
        const ir_node *n = &g->nodes[ni];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t v = n->inputs[k];
            if (v < 0 || v >= nv) continue;
            if (n_consumers[v]++ == 0) {
                first_node[v] = ni;
                first_input[v] = k;
            }
        }
    }
    bool *is_output = calloc((size_t)nv + 1, sizeof(bool));
    if (!is_output) {
        c->status = KILN_ERR_NOMEM;
        goto out;
    }
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] >= 0 && g->outputs[i] < nv) is_output[g->outputs[i]] = true;

    for (int32_t v = 0; v < nv; v++) {
        if (!n_consumers[v] && !is_output[v]) continue;
        ir_value *val = &g->values[v];
        val->flags &= ~(uint32_t)IR_VALUE_OUTER_SCOPE;
        if (value_defined_in(g, v)) continue;
        bool found = false;
        for (const ir_graph *p = g->parent; p && !found; p = p->parent) {
            int32_t id = ir_graph_find(p, val->name);
            if (id != IR_NONE && value_defined_in(p, id)) found = true;
        }
        if (found) {
            val->flags |= IR_VALUE_OUTER_SCOPE;
            continue;
        }
        const char *suggestion = closest_name(c, g, val->name);
        const char *where = g->parent ? "nor visible from an enclosing graph"
                                      : "nor a graph input or initializer";
        diag *d;
        if (n_consumers[v]) {
            const ir_node *n = &g->nodes[first_node[v]];
            d = add_graph_diag(c, g, DIAG_ERROR, "structure-missing-producer", n,
                               "input %d '%s' is not produced by any node, %s", (int)first_input[v],
                               val->name, where);
            if (n_consumers[v] > 1)
                diag_fact(c->diags, d, "%d other node input%s also use%s '%s'", (int)(n_consumers[v] - 1),
                          n_consumers[v] > 2 ? "s" : "", n_consumers[v] > 2 ? "" : "s", val->name);
            if (is_output[v]) diag_fact(c->diags, d, "'%s' is also a graph output", val->name);
        } else {
            d = add_graph_diag(c, g, DIAG_ERROR, "structure-output-not-produced", NULL,
                               "graph output '%s' is not produced by any node, %s", val->name, where);
        }
        if (suggestion)
            diag_hint(c->diags, d, "did you mean '%s'? Otherwise add '%s' as a graph input or initializer",
                      suggestion, val->name);
        else
            diag_hint(c->diags, d, "add '%s' as a graph input or initializer, or produce it with a node",
                      val->name);
    }
    free(is_output);
out:
    free(first_node);
    free(first_input);
    free(n_consumers);
}

/* Is `domain` imported for graph g (the model's opsets, plus a function's own)? */
static bool domain_imported(const ir_model *m, const ir_function *fn, const char *domain) {
    for (int32_t i = 0; i < m->n_opsets; i++)
        if (strcmp(m->opsets[i].domain, domain) == 0) return true;
    if (fn)
        for (int32_t i = 0; i < fn->n_opsets; i++)
            if (fn->opsets[i].domain && strcmp(fn->opsets[i].domain, domain) == 0) return true;
    return false;
}

/* Nodes whose domain has no opset import: one diagnostic per domain and graph. */
static void check_domains(val_ctx *c, ir_graph *g) {
    const ir_function *fn = enclosing_function(c->model, g);
    /* few distinct domains per graph: a small linear table is enough */
    enum { MAX_DOMAINS = 32 };
    const char *reported[MAX_DOMAINS];
    int32_t first[MAX_DOMAINS], count[MAX_DOMAINS];
    int n_rep = 0;
    for (int32_t ni = 0; ni < g->n_nodes; ni++) {
        const char *dom = g->nodes[ni].domain ? g->nodes[ni].domain : "";
        int j;
        for (j = 0; j < n_rep; j++)
            if (strcmp(reported[j], dom) == 0) break;
        if (j < n_rep) {
            count[j]++;
            continue;
        }
        if (domain_imported(c->model, fn, dom)) continue;
        if (n_rep == MAX_DOMAINS) continue;
        reported[n_rep] = dom;
        first[n_rep] = ni;
        count[n_rep] = 1;
        n_rep++;
    }
    for (int j = 0; j < n_rep; j++) {
        const ir_node *n = &g->nodes[first[j]];
        bool onnx = reported[j][0] == '\0';
        diag *d = add_graph_diag(c, g, onnx ? DIAG_ERROR : DIAG_WARNING, "structure-missing-opset-import", n,
                                 "domain '%s' is used by %d node%s but the model has no opset_import for it",
                                 onnx ? "ai.onnx" : reported[j], (int)count[j], count[j] == 1 ? "" : "s");
        if (onnx) {
            diag_fact(c->diags, d, "the opset version decides which definition of each operator applies, "
                                   "so ai.onnx must be imported");
            diag_hint(c->diags, d, "add the opset the model was exported with, e.g. in Python: "
                                   "model.opset_import.append(onnx.helper.make_opsetid('', 17))");
        } else {
            diag_hint(c->diags, d, "add an opset_import entry for domain '%s' "
                                   "(onnx.helper.make_opsetid('%s', 1))", reported[j], reported[j]);
        }
    }
}

static void check_versions(val_ctx *c) {
    ir_model *m = c->model;
    if (m->ir_version < IR_MIN_IR_VERSION) {
        diag *d = diag_add(c->diags, DIAG_ERROR, "structure-ir-version", NULL, NULL,
                           "IR version %" PRId64 " is outside the range kiln reads (%d to %d)",
                           m->ir_version, IR_MIN_IR_VERSION, IR_MAX_IR_VERSION);
        diag_hint(c->diags, d, "convert the model to a newer opset (this also raises the IR version): "
                               "onnx.version_converter.convert_version(onnx.load('M.onnx'), 17)");
    } else if (m->ir_version > IR_MAX_IR_VERSION) {
        /* Protobuf is forward compatible and new IR versions have only added fields, which
         * the reader skips; refusing the model would block every new exporter release. */
        diag *d = diag_add(c->diags, DIAG_WARNING, "structure-ir-version", NULL, NULL,
                           "IR version %" PRId64 " is newer than kiln knows (%d to %d); fields kiln "
                           "does not know are ignored",
                           m->ir_version, IR_MIN_IR_VERSION, IR_MAX_IR_VERSION);
        diag_hint(c->diags, d, "if something is missing, save the model with an older IR version "
                               "(model.ir_version = %d before onnx.save) or upgrade kiln", IR_MAX_IR_VERSION);
    }
    for (int32_t i = 0; i < m->n_opsets; i++) {
        if (m->opsets[i].domain[0] != '\0') continue;
        int64_t v = m->opsets[i].version;
        if (v >= IR_MIN_ONNX_OPSET && v <= IR_MAX_ONNX_OPSET) continue;
        diag *d = diag_add(c->diags, DIAG_ERROR, "structure-opset-version", NULL, NULL,
                           "ai.onnx opset %" PRId64 " is outside the range kiln reads (%d to %d)", v,
                           IR_MIN_ONNX_OPSET, IR_MAX_ONNX_OPSET);
        diag_hint(c->diags, d, "convert it: python -c \"import onnx; from onnx import version_converter as vc; "
                               "onnx.save(vc.convert_version(onnx.load('M.onnx'), 17), 'M17.onnx')\"");
    }
}

static void check_graph(val_ctx *c, ir_graph *g) {
    recompute_producers(g);
    check_producers(c, g);
    check_missing(c, g);
    check_domains(c, g);
}

kiln_status ir_validate(ir_model *model, diag_list *diags, kiln_error *err) {
    diag_list local;
    bool own = diags == NULL;
    if (own) {
        diag_list_init(&local);
        diags = &local;
    }
    int32_t first_diag = diags->n;
    int32_t errors_before = diags->n_errors;
    val_ctx c = {.model = model, .diags = diags, .status = KILN_OK};

    check_versions(&c);
    /* Parents come before their subgraphs in model->graphs, so each graph's producers are
     * known when a subgraph below it resolves outer-scope names. */
    for (int32_t i = 0; i < model->n_graphs && c.status == KILN_OK; i++) check_graph(&c, model->graphs[i]);
    for (int32_t i = 0; i < model->n_graphs && c.status == KILN_OK; i++) {
        ir_graph *g = model->graphs[i];
        strbuf cycle;
        sb_init(&cycle);
        kiln_error e = {0};
        kiln_status st = toposort(g, &cycle, &e);
        if (st == KILN_ERR_INVALID_MODEL) {
            diag *d = add_graph_diag(&c, g, DIAG_ERROR, "structure-cycle", NULL, "the graph has a cycle: %s",
                                     sb_cstr(&cycle));
            diag_fact(diags, d, "each node consumes an output of the node before it, so none can run first");
            diag_hint(diags, d, "ONNX graphs must be acyclic; express iteration with the Loop operator, or "
                                "fix the input names that close the cycle");
        } else if (st != KILN_OK) {
            c.status = st;
        }
        kiln_err_clear(&e);
        sb_free(&cycle);
    }

    kiln_status st = KILN_OK;
    if (c.status != KILN_OK) {
        st = kiln_err_set(err, c.status, "out of memory while validating the model");
    } else if (diags->n_errors > errors_before) {
        int32_t n_err = diags->n_errors - errors_before;
        for (int32_t i = first_diag; i < diags->n; i++) {
            if (diags->items[i].severity != DIAG_ERROR) continue;
            strbuf sb;
            sb_init(&sb);
            diag_render_text(&diags->items[i], &sb);
            /* the rendered text ends with a newline; keep the message tidy */
            if (sb.len && sb.data[sb.len - 1] == '\n') sb.data[--sb.len] = '\0';
            if (n_err > 1)
                sb_printf(&sb, "\n(and %d more problem%s; run `kiln check MODEL` to see all)", (int)(n_err - 1),
                          n_err > 2 ? "s" : "");
            st = kiln_err_set(err, KILN_ERR_INVALID_MODEL, "%s", sb_cstr(&sb));
            sb_free(&sb);
            break;
        }
    }
    if (own) diag_list_free(&local);
    return st;
}
