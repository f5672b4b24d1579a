/* infer.c - the type and shape inference pass (see infer.h).
 *
 * Walks each graph's nodes in (topological) order. For every node: if an input is
 * poisoned (an earlier error made its type unknowable) the outputs are poisoned too and
 * nothing is reported, so one root cause gives one diagnostic. Otherwise the op's
 * inference function from the registry (src/ir/ops) sets the output types, and the
 * result is checked against the types the file declares (value_info, graph outputs).
 *
 * Types live in the IR (value->type, dims in the model arena); per-run state (poison
 * flags, known small int values) lives in this pass's scratch arena and dies with it.
 * The file's declared types are saved in value->declared on the first run so that each
 * run (one per profile point) starts again from the declarations.
 *
 * The helpers that op files call (ops.h: ir_in, ir_out, ir_err, ...) live in
 * infer_ctx.c; this file is the driver.
 */
#include "ir/infer.h"

#include <string.h>

#include "core/alloc.h"
#include "core/strbuf.h"
#include "diag/provenance.h"
#include "ir/infer_internal.h"
#include "ir/ops/ops.h"
#include "ir/symdim.h"

static gstate *gstate_of(infer_pass *p, const ir_graph *g) {
    for (int32_t i = 0; i < p->n_gs; i++)
        if (p->gs[i].g == g) return &p->gs[i];
    return NULL;
}

vstate *infer_vstate(infer_pass *p, const ir_graph *g, int32_t v) {
    gstate *gs = gstate_of(p, g);
    if (!gs || !gs->v || v < 0 || v >= gs->n) return NULL;
    return &gs->v[v];
}

static void save_declared(ir_value *v) {
    if (v->flags & IR_VALUE_DECLARED_SAVED) return;
    v->declared = v->type; /* shallow: inference never writes into existing dims arrays */
    v->flags |= IR_VALUE_DECLARED_SAVED;
}

static void type_unknown(ir_type *t) {
    memset(t, 0, sizeof *t);
    t->rank = -1;
}

static void type_from_tensor(ir_model *m, ir_type *t, const ir_tensor *tensor) {
    type_unknown(t);
    t->kind = IR_TYPE_TENSOR;
    t->dtype = tensor->dtype;
    t->rank = tensor->rank;
    if (tensor->rank > 0) {
        t->dims = arena_calloc(&m->arena, (size_t)tensor->rank, sizeof *t->dims);
        if (!t->dims) {
            t->rank = -1;
            return;
        }
        for (int32_t i = 0; i < tensor->rank; i++)
            t->dims[i] = tensor->dims[i] >= 0 ? ir_dim_const(tensor->dims[i]) : ir_dim_unknown();
    }
}

/* Applies an --shapes / profile override to a main-graph input. */
static void apply_override(infer_pass *p, ir_graph *g, ir_value *v) {
    if (!p->opts || !p->opts->inputs || g->parent) return;
    for (int32_t i = 0; i < p->opts->n_inputs; i++) {
        const ir_input_shape *s = &p->opts->inputs[i];
        if (!s->name || strcmp(s->name, v->name) != 0) continue;
        if (s->rank < 0 || s->rank > IR_MAX_RANK || (s->rank > 0 && !s->dims)) continue;
        if (v->type.kind == IR_TYPE_TENSOR && v->type.rank >= 0 && v->type.rank != s->rank) {
            diag *d = diag_add(p->diags, DIAG_ERROR, "shape-input-rank", NULL, NULL,
                               "input '%s' has rank %d but the given shape has %d dimensions",
                               v->name, v->type.rank, s->rank);
            diag_fact(p->diags, d, "input '%s' is declared %s", v->name, ir_type_str(p->m, &v->type));
            diag_hint(p->diags, d, "give '%s' exactly %d dimensions", v->name, v->type.rank);
            return;
        }
        ir_dim *dims = s->rank ? arena_calloc(&p->m->arena, (size_t)s->rank, sizeof *dims) : NULL;
        if (s->rank && !dims) return;
        for (int32_t k = 0; k < s->rank; k++)
            dims[k] = s->dims[k] >= 0 ? ir_dim_const(s->dims[k]) : ir_dim_unknown();
        if (v->type.kind != IR_TYPE_TENSOR) v->type.kind = IR_TYPE_TENSOR;
        v->type.rank = s->rank;
        v->type.dims = dims;
        return;
    }
}

/* ---- known values from tensors ------------------------------------------------------ */

static bool read_le(const unsigned char *b, int bytes, bool is_signed, int64_t *out) {
    uint64_t u = 0;
    for (int i = bytes - 1; i >= 0; i--) u = (u << 8) | b[i];
    if (is_signed && bytes < 8 && (u >> (bytes * 8 - 1)) & 1) u |= ~(uint64_t)0 << (bytes * 8);
    memcpy(out, &u, sizeof u);
    return true;
}

ir_known *infer_kv_from_tensor(infer_pass *p, const ir_tensor *t) {
    if (!t || !t->data || t->count > IR_KV_MAX) return NULL;
    int bytes;
    bool is_float = false, is_signed = true;
    switch (t->dtype) {
    case KILN_DTYPE_INT64: bytes = 8; break;
    case KILN_DTYPE_INT32: bytes = 4; break;
    case KILN_DTYPE_INT16: bytes = 2; break;
    case KILN_DTYPE_INT8: bytes = 1; break;
    case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL: bytes = 1; is_signed = false; break;
    case KILN_DTYPE_UINT16: bytes = 2; is_signed = false; break;
    case KILN_DTYPE_UINT32: bytes = 4; is_signed = false; break;
    case KILN_DTYPE_FLOAT: bytes = 4; is_float = true; break;
    case KILN_DTYPE_DOUBLE: bytes = 8; is_float = true; break;
    case KILN_DTYPE_FLOAT16: bytes = 2; is_float = true; break;
    default: return NULL;
    }
    if (t->nbytes < t->count * (uint64_t)bytes) return NULL;
    ir_known *kv = arena_calloc(&p->a, 1, sizeof *kv);
    if (!kv) return NULL;
    kv->dtype = t->dtype;
    kv->n = (int32_t)t->count;
    const unsigned char *b = t->data;
    if (is_float) {
        kv->f = arena_calloc(&p->a, t->count ? t->count : 1, sizeof *kv->f);
        if (!kv->f) return NULL;
        for (uint64_t i = 0; i < t->count; i++) {
            if (t->dtype == KILN_DTYPE_FLOAT) {
                float f;
                memcpy(&f, b + i * 4, 4);
                kv->f[i] = f;
            } else if (t->dtype == KILN_DTYPE_DOUBLE) {
                memcpy(&kv->f[i], b + i * 8, 8);
            } else {
                uint16_t h = (uint16_t)(b[i * 2] | (b[i * 2 + 1] << 8));
                kv->f[i] = kiln_fp16_to_fp32(h);
            }
        }
        return kv;
    }
    kv->e = arena_calloc(&p->a, t->count ? t->count : 1, sizeof *kv->e);
    if (!kv->e) return NULL;
    for (uint64_t i = 0; i < t->count; i++) {
        int64_t v;
        read_le(b + i * (uint64_t)bytes, bytes, is_signed, &v);
        kv->e[i] = ir_dim_const(v);
    }
    return kv;
}

/* ---- declared types ----------------------------------------------------------------- */

static bool type_is_tensor(const ir_type *t) { return t->kind == IR_TYPE_TENSOR; }

/* Compares an output's inferred type with the file's declaration: contradictions become
 * diagnostics (errors for graph outputs), unknown inferred dims take the declared ones
 * (the model's own names win over "?"). */
static void check_declared(infer_pass *p, ir_graph *g, int32_t vid, const ir_node *n) {
    ir_value *v = &g->values[vid];
    if (!(v->flags & IR_VALUE_HAS_VALUE_INFO) || !(v->flags & IR_VALUE_DECLARED_SAVED)) return;
    const ir_type *d = &v->declared;
    ir_type *t = &v->type;
    if (d->kind == IR_TYPE_UNKNOWN) return;
    if (t->kind == IR_TYPE_UNKNOWN) {
        *t = *d;
        return;
    }
    if (!type_is_tensor(t) || !type_is_tensor(d)) return;
    bool out = (v->flags & IR_VALUE_GRAPH_OUTPUT) != 0;
    bool conflict = false;
    int32_t bad_axis = -1;
    if (d->dtype != KILN_DTYPE_UNDEFINED && t->dtype != KILN_DTYPE_UNDEFINED && d->dtype != t->dtype)
        conflict = true;
    if (d->rank >= 0 && t->rank >= 0 && d->rank != t->rank) conflict = true;
    if (!conflict && d->rank >= 0 && t->rank == d->rank) {
        for (int32_t i = 0; i < t->rank; i++)
            if (ir_dim_eq(p->m, t->dims[i], d->dims[i]) == IR_DIM_NE) {
                conflict = true;
                bad_axis = i;
                break;
            }
    }
    if (conflict) {
        const char *what = out ? "graph output" : "value";
        diag *dg = diag_add(p->diags, out ? DIAG_ERROR : DIAG_WARNING, "shape-declared-conflict",
                            n ? n->name : NULL, n ? n->op_type : NULL,
                            "%s '%s' is declared %s but is computed as %s", what, v->name,
                            ir_type_str(p->m, d), ir_type_str(p->m, t));
        if (dg && g->parent && g->location) dg->graph = arena_strdup(&p->diags->arena, g->location);
        if (bad_axis >= 0) {
            char b1[256], b2[256];
            diag_fact(p->diags, dg, "axis %d: declared %s, computed %s", bad_axis,
                      ir_dim_str(p->m, d->dims[bad_axis], b1, sizeof b1),
                      ir_dim_str(p->m, t->dims[bad_axis], b2, sizeof b2));
        }
        const char *prov = diag_provenance(p->m, g, vid);
        if (prov) diag_fact(p->diags, dg, "%s", prov);
        if (out)
            diag_hint(p->diags, dg,
                      "either the layer producing '%s' changed and the consumers of this output "
                      "expect the declared shape, or the declaration is stale: fix the layer, or "
                      "re-export so the declared output matches",
                      v->name);
        else
            diag_hint(p->diags, dg,
                      "the model's value_info for '%s' is stale (kiln uses the computed type); "
                      "re-export or strip value_info",
                      v->name);
        return;
    }
    /* merge: declared names/values fill what inference could not know */
    if (t->dtype == KILN_DTYPE_UNDEFINED) t->dtype = d->dtype;
    if (t->rank < 0 && d->rank >= 0) {
        t->rank = d->rank;
        t->dims = d->dims;
        return;
    }
    if (t->rank >= 0 && t->rank == d->rank) {
        bool need = false;
        for (int32_t i = 0; i < t->rank; i++)
            if (t->dims[i].kind == IR_DIM_UNKNOWN && d->dims[i].kind != IR_DIM_UNKNOWN) need = true;
        if (!need) return;
        ir_dim *nd = arena_calloc(&p->m->arena, (size_t)t->rank, sizeof *nd);
        if (!nd) return;
        for (int32_t i = 0; i < t->rank; i++)
            nd[i] = t->dims[i].kind == IR_DIM_UNKNOWN ? d->dims[i] : t->dims[i];
        t->dims = nd;
    }
}

/* ---- unknown ops -------------------------------------------------------------------- */

static void count_unknown(infer_pass *p, const ir_node *n) {
    const char *key = n->op_type;
    if (n->domain && n->domain[0]) {
        key = arena_printf(&p->a, "%s.%s", n->domain, n->op_type);
        if (!key) return;
    }
    int32_t idx;
    if (hashmap_get(&p->unk, key, &idx)) {
        p->unk_counts[idx]++;
        return;
    }
    if (p->n_unk == p->cap_unk) {
        int32_t ncap = p->cap_unk ? p->cap_unk * 2 : 8;
        const char **nn = kiln_realloc_array(p->unk_names, (size_t)ncap, sizeof *nn);
        if (!nn) return;
        p->unk_names = nn;
        int32_t *nc = kiln_realloc_array(p->unk_counts, (size_t)ncap, sizeof *nc);
        if (!nc) return;
        p->unk_counts = nc;
        p->cap_unk = ncap;
    }
    p->unk_names[p->n_unk] = key;
    p->unk_counts[p->n_unk] = 1;
    if (hashmap_put(&p->unk, key, p->n_unk)) p->n_unk++;
}

/* ---- the walk ----------------------------------------------------------------------- */

static int64_t node_opset(const ir_model *m, const ir_node *n) {
    if (n->opset > 0) return n->opset;
    int64_t v = ir_model_opset(m, n->domain ? n->domain : "");
    if (v > 0) return v;
    return (n->domain && n->domain[0]) ? 1 : 21;
}

static void poison_outputs(infer_pass *p, ir_graph *g, gstate *gs, const ir_node *n) {
    for (int32_t o = 0; o < n->n_outputs; o++) {
        int32_t vid = n->outputs[o];
        if (vid < 0 || vid >= g->n_values) continue;
        type_unknown(&g->values[vid].type);
        gs->v[vid].poisoned = true;
        gs->v[vid].kv = NULL;
    }
}

/* Sets up a graph's values: initializers from their tensors, inputs from declarations
 * (plus overrides), outer-scope references from the enclosing graphs, and node outputs
 * reset to unknown. */
static bool setup_graph(infer_pass *p, ir_graph *g, gstate *gs, const ir_type *const *in_types,
                        int32_t n_in_types) {
    gs->n = g->n_values;
    gs->v = g->n_values ? arena_calloc(&p->a, (size_t)g->n_values, sizeof *gs->v) : NULL;
    if (g->n_values && !gs->v) return false;
    for (int32_t i = 0; i < g->n_values; i++) {
        ir_value *v = &g->values[i];
        save_declared(v);
        if (v->flags & IR_VALUE_OUTER_SCOPE) {
            type_unknown(&v->type);
            for (ir_graph *pg = g->parent; pg; pg = pg->parent) {
                int32_t pid = ir_graph_find(pg, v->name);
                if (pid == IR_NONE) continue;
                v->type = pg->values[pid].type;
                vstate *ps = infer_vstate(p, pg, pid);
                if (ps) gs->v[i] = *ps;
                break;
            }
            continue;
        }
        if (v->flags & IR_VALUE_GRAPH_INPUT) {
            v->type = v->declared;
            if ((v->flags & IR_VALUE_INITIALIZER) && v->type.kind == IR_TYPE_UNKNOWN && v->init)
                type_from_tensor(p->m, &v->type, v->init);
            apply_override(p, g, v);
            continue;
        }
        if (v->flags & IR_VALUE_INITIALIZER) {
            if (v->init) {
                type_from_tensor(p->m, &v->type, v->init);
                gs->v[i].kv = infer_kv_from_tensor(p, v->init);
            }
            continue;
        }
        if (v->producer != IR_NONE) type_unknown(&v->type);
        else v->type = v->declared;
    }
    for (int32_t i = 0; i < g->n_inputs && i < n_in_types; i++) {
        int32_t vid = g->inputs[i];
        if (vid < 0 || vid >= g->n_values || !in_types || !in_types[i]) continue;
        const ir_type *t = in_types[i];
        ir_value *v = &g->values[vid];
        if (t->kind == IR_TYPE_UNKNOWN) continue;
        /* keep declared dims where the caller knows less (rank or dims unknown) */
        if (t->kind == IR_TYPE_TENSOR && v->type.kind == IR_TYPE_TENSOR && t->rank < 0 && v->type.rank >= 0) {
            if (t->dtype) v->type.dtype = t->dtype;
            continue;
        }
        v->type = *t;
    }
    return true;
}

static bool infer_graph(infer_pass *p, ir_graph *g, const ir_type *const *in_types, int32_t n_in_types);

static void infer_node(infer_pass *p, ir_graph *g, gstate *gs, int32_t ni) {
    ir_node *n = &g->nodes[ni];
    for (int32_t i = 0; i < n->n_inputs; i++) {
        int32_t vid = n->inputs[i];
        if (vid >= 0 && vid < gs->n && gs->v[vid].poisoned) {
            poison_outputs(p, g, gs, n);
            return;
        }
    }
    for (int32_t o = 0; o < n->n_outputs; o++) {
        int32_t vid = n->outputs[o];
        if (vid >= 0 && vid < g->n_values) {
            type_unknown(&g->values[vid].type);
            gs->v[vid].kv = NULL;
            gs->v[vid].poisoned = false;
        }
    }
    ir_ictx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.m = p->m;
    c.g = g;
    c.n = n;
    c.node = ni;
    c.opset = node_opset(p->m, n);
    int32_t id = ir_op_lookup(n->domain ? n->domain : "", n->op_type);
    n->op = id;
    if (id < 0 || c.opset < ir_op_table[id].since) {
        n->op = -1;
        count_unknown(p, n);
    } else {
        ir_op_table[id].fn(&c);
        /* ir_err may have moved g->nodes? no: inference never adds nodes */
    }
    n = &g->nodes[ni];
    if (c.failed) {
        poison_outputs(p, g, gs, n);
        return;
    }
    for (int32_t o = 0; o < n->n_outputs; o++) {
        int32_t vid = n->outputs[o];
        if (vid >= 0 && vid < g->n_values) check_declared(p, g, vid, n);
    }
}

static bool infer_graph(infer_pass *p, ir_graph *g, const ir_type *const *in_types, int32_t n_in_types) {
    gstate *gs = gstate_of(p, g);
    if (!gs) return true; /* not registered in model->graphs: nothing to do */
    if (!setup_graph(p, g, gs, in_types, n_in_types)) {
        p->oom = true;
        return false;
    }
    for (int32_t i = 0; i < g->n_nodes && !p->oom; i++) infer_node(p, g, gs, i);
    return !p->oom;
}

bool ir_infer_subgraph(ir_ictx *c, ir_graph *sub, const ir_type *const *in_types, int32_t n) {
    infer_pass *p = c->p;
    if (!sub) return true;
    if (p->depth >= IR_MAX_GRAPH_DEPTH) {
        diag *d = ir_err(c, "shape-limit", "subgraphs nested deeper than %d levels", IR_MAX_GRAPH_DEPTH);
        ir_hint(c, d, "flatten the control flow; kiln stops at this depth to stay safe on hostile models");
        return false;
    }
    p->depth++;
    bool ok = infer_graph(p, sub, in_types, n);
    p->depth--;
    return ok;
}

kiln_status ir_infer(ir_model *model, const ir_infer_options *opts, diag_list *diags, kiln_error *err) {
    if (!model || !model->graph || !diags)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "ir_infer: model, graph and diagnostics list are required");
    infer_pass p;
    memset(&p, 0, sizeof p);
    p.m = model;
    p.diags = diags;
    p.opts = opts;
    p.err = err;
    arena_init(&p.a);
    hashmap_init(&p.unk);
    int32_t errors_before = diags->n_errors;
    kiln_status st = KILN_OK;
    p.n_gs = model->n_graphs;
    p.gs = p.n_gs ? arena_calloc(&p.a, (size_t)p.n_gs, sizeof *p.gs) : NULL;
    if (p.n_gs && !p.gs) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory during shape inference");
        goto done;
    }
    for (int32_t i = 0; i < p.n_gs; i++) p.gs[i].g = model->graphs[i];
    if (!gstate_of(&p, model->graph)) {
        st = kiln_err_set(err, KILN_ERR_INTERNAL, "ir_infer: the main graph is not registered in the model");
        goto done;
    }
    if (!infer_graph(&p, model->graph, NULL, 0) || p.oom) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory during shape inference");
        goto done;
    }
    for (int32_t o = 0; o < model->graph->n_outputs; o++) {
        int32_t vid = model->graph->outputs[o];
        if (vid < 0 || vid >= model->graph->n_values) continue;
        ir_value *v = &model->graph->values[vid];
        /* outputs that are graph inputs or initializers were never checked as node outputs */
        if (v->producer == IR_NONE && v->type.kind == IR_TYPE_UNKNOWN && (v->flags & IR_VALUE_DECLARED_SAVED))
            v->type = v->declared;
    }
    if (opts && opts->report_unknown_ops && p.n_unk) {
        strbuf sb;
        sb_init(&sb);
        int32_t total = 0;
        for (int32_t i = 0; i < p.n_unk; i++) {
            sb_printf(&sb, "%s%s x%d", i ? ", " : "", p.unk_names[i], p.unk_counts[i]);
            total += p.unk_counts[i];
        }
        diag *d = diag_add(diags, DIAG_WARNING, "infer-unknown-op", NULL, NULL,
                           "ops without shape inference: %s", sb_cstr(&sb));
        sb_free(&sb);
        diag_fact(diags, d, "%d node%s of %d op type%s: their outputs keep the declared types, or unknown ones",
                  total, total == 1 ? "" : "s", p.n_unk, p.n_unk == 1 ? "" : "s");
        diag_hint(diags, d,
                  "shapes after these nodes are checked only where the model declares them (value_info); "
                  "run onnx.shape_inference on the model, or replace the ops with standard ONNX ops");
    }
    if (diags->n_errors > errors_before) st = KILN_ERR_SHAPE;
done:
    free(p.unk_names);
    free(p.unk_counts);
    hashmap_free(&p.unk);
    arena_free(&p.a);
    return st;
}

/* ---- registry ------------------------------------------------------------------------ */

const ir_op_info ir_op_table[IR_OP_COUNT] = {
#define X(id, domain, name, since, fn) {domain, name, since, fn},
#include "ir/ops/ops.def"
#undef X
};

int32_t ir_op_lookup(const char *domain, const char *op_type) {
    if (!op_type) return -1;
    if (!domain) domain = "";
    if (strcmp(domain, "ai.onnx") == 0) domain = "";
    /* linear over ~200 short names: a few microseconds per node at most; a hash would
     * need state, and the registry is constant */
    for (int32_t i = 0; i < IR_OP_COUNT; i++)
        if (strcmp(ir_op_table[i].name, op_type) == 0 && strcmp(ir_op_table[i].domain, domain) == 0) return i;
    return -1;
}

bool ir_op_known(const char *domain, const char *op_type, int64_t opset) {
    int32_t id = ir_op_lookup(domain, op_type);
    return id >= 0 && (opset <= 0 || opset >= ir_op_table[id].since);
}

void ir_op_foreach(void (*fn)(const char *domain, const char *op_type, void *user), void *user) {
    /* kiln's internal domains (kiln.nhwc: forms made by graph passes) are not ops a model
     * may use, so they are not listed as supported */
    for (int32_t i = 0; i < IR_OP_COUNT; i++)
        if (strncmp(ir_op_table[i].domain, "kiln.", 5)) fn(ir_op_table[i].domain, ir_op_table[i].name, user);
}
