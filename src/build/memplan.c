/* memplan.c - lifetime-based offset assignment for one activation arena (see memplan.h). */
#include "build/memplan.h"

#include <stdlib.h>
#include <string.h>

typedef struct mp_item {
    int32_t id;
    uint64_t size;
    int32_t first, last;
} mp_item;

static int cmp_size_desc(const void *a, const void *b) {
    const mp_item *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->id - y->id; /* deterministic */
}

typedef struct mp_span {
    uint64_t begin, end;
} mp_span;

static int cmp_span(const void *a, const void *b) {
    const mp_span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static uint64_t align_up(uint64_t x) { return (x + BUILD_MEMPLAN_ALIGN - 1) / BUILD_MEMPLAN_ALIGN * BUILD_MEMPLAN_ALIGN; }

kiln_status build_memplan_compute(int32_t n, const uint64_t *sizes, const int32_t *first, const int32_t *last,
                                  build_memplan *out, kiln_error *err) {
    memset(out, 0, sizeof *out);
    out->offsets = malloc(((size_t)n + 1) * sizeof *out->offsets);
    mp_item *items = malloc(((size_t)n + 1) * sizeof *items);
    mp_span *spans = malloc(((size_t)n + 1) * sizeof *spans);
    if (!out->offsets || !items || !spans) {
        free(items), free(spans);
        build_memplan_free(out);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory planning the activation arena");
    }
    out->n_offsets = n;
    int32_t m = 0, max_step = 0;
    for (int32_t i = 0; i < n; i++) {
        out->offsets[i] = BUILD_MEMPLAN_NONE;
        if (!sizes[i] || sizes[i] > UINT64_MAX / 2) continue;
        items[m].id = i;
        items[m].size = align_up(sizes[i]);
        items[m].first = first[i];
        items[m].last = last[i] < first[i] ? first[i] : last[i];
        if (items[m].last > max_step) max_step = items[m].last;
        out->total_bytes += items[m].size;
        m++;
    }
    out->n_tensors = m;
    qsort(items, (size_t)m, sizeof *items, cmp_size_desc);
    for (int32_t k = 0; k < m; k++) {
        const mp_item *it = &items[k];
        /* placed tensors that are alive at some step of this one's lifetime */
        int32_t ns = 0;
        for (int32_t j = 0; j < k; j++) {
            const mp_item *o = &items[j];
            if (o->first > it->last || o->last < it->first) continue;
            spans[ns].begin = out->offsets[o->id];
            spans[ns].end = spans[ns].begin + o->size;
            ns++;
        }
        qsort(spans, (size_t)ns, sizeof *spans, cmp_span);
        /* best fit: the smallest gap that holds it; otherwise after the last span */
        uint64_t best = BUILD_MEMPLAN_NONE, best_gap = UINT64_MAX, cursor = 0;
        for (int32_t s = 0; s < ns; s++) {
            if (spans[s].begin > cursor) {
                uint64_t gap = spans[s].begin - cursor;
                if (gap >= it->size && gap < best_gap) {
                    best_gap = gap;
                    best = cursor;
                }
            }
            if (spans[s].end > cursor) cursor = spans[s].end;
        }
        if (best == BUILD_MEMPLAN_NONE) best = cursor;
        out->offsets[it->id] = best;
        if (best + it->size > out->arena_bytes) out->arena_bytes = best + it->size;
    }
    /* lower bound: the heaviest step (difference array over steps) */
    int64_t *delta = calloc((size_t)max_step + 2, sizeof *delta);
    if (!delta) {
        free(items), free(spans);
        build_memplan_free(out);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory planning the activation arena");
    }
    for (int32_t k = 0; k < m; k++) {
        delta[items[k].first] += (int64_t)items[k].size;
        delta[items[k].last + 1] -= (int64_t)items[k].size;
    }
    int64_t live = 0;
    for (int32_t s = 0; s <= max_step; s++) {
        live += delta[s];
        if ((uint64_t)live > out->lower_bound) out->lower_bound = (uint64_t)live;
    }
    free(delta), free(items), free(spans);
    return KILN_OK;
}

/* Marks every name a subgraph (recursively) reads as used at `step` in g. */
static void mark_subgraph_reads(const ir_graph *g, const ir_graph *body, int32_t step, int32_t *last, int depth) {
    if (depth > IR_MAX_GRAPH_DEPTH) return;
    for (int32_t i = 0; i < body->n_nodes; i++) {
        const ir_node *n = &body->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            if (n->inputs[k] < 0) continue;
            int32_t id = ir_graph_find(g, body->values[n->inputs[k]].name);
            if (id != IR_NONE && last[id] < step) last[id] = step;
        }
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            if (at->type == IR_ATTR_GRAPH && at->g) mark_subgraph_reads(g, at->g, step, last, depth + 1);
            if (at->type == IR_ATTR_GRAPHS)
                for (int32_t j = 0; j < at->n; j++)
                    if (at->graphs[j]) mark_subgraph_reads(g, at->graphs[j], step, last, depth + 1);
        }
    }
    for (int32_t k = 0; k < body->n_outputs; k++) {
        int32_t id = ir_graph_find(g, body->values[body->outputs[k]].name);
        if (id != IR_NONE && last[id] < step) last[id] = step;
    }
}

kiln_status build_memplan_graph(const ir_graph *g, const uint64_t *sizes, build_memplan *out, kiln_error *err) {
    return build_memplan_graph_views(g, sizes, NULL, out, err);
}

kiln_status build_memplan_graph_views(const ir_graph *g, const uint64_t *sizes, const int32_t *view_root,
                                      build_memplan *out, kiln_error *err) {
    int32_t nv = g->n_values;
    int32_t *first = malloc(((size_t)nv + 1) * sizeof *first);
    int32_t *last = malloc(((size_t)nv + 1) * sizeof *last);
    uint64_t *sz = calloc((size_t)nv + 1, sizeof *sz);
    if (!first || !last || !sz) {
        free(first), free(last), free(sz);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory planning the activation arena");
    }
    for (int32_t v = 0; v < nv; v++) first[v] = last[v] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) last[n->inputs[k]] = i;
        for (int32_t k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && first[n->outputs[k]] < 0) first[n->outputs[k]] = last[n->outputs[k]] = i;
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            if (at->type == IR_ATTR_GRAPH && at->g) mark_subgraph_reads(g, at->g, i, last, 1);
            if (at->type == IR_ATTR_GRAPHS)
                for (int32_t j = 0; j < at->n; j++)
                    if (at->graphs[j]) mark_subgraph_reads(g, at->graphs[j], i, last, 1);
        }
    }
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] >= 0) last[g->outputs[k]] = g->n_nodes > 0 ? g->n_nodes - 1 : 0;
    if (view_root) /* roots are direct (no chains): one pass */
        for (int32_t v = 0; v < nv; v++) {
            int32_t r = view_root[v];
            if (r >= 0 && r < nv && last[v] > last[r]) last[r] = last[v];
        }
    for (int32_t v = 0; v < nv; v++)
        if (first[v] >= 0) sz[v] = sizes[v];
    kiln_status st = build_memplan_compute(nv, sz, first, last, out, err);
    free(first), free(last), free(sz);
    return st;
}

void build_memplan_free(build_memplan *p) {
    if (!p) return;
    free(p->offsets);
    memset(p, 0, sizeof *p);
}
