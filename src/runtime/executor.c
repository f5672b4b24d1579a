/* executor.c - node-by-node execution of ir_model graphs on a backend (see executor.h).
 *
 * Data layout: one rt_graph_plan per graph of the model (parallel to model->graphs),
 * computed once: prepared kernels, per-node state slots, borrowed initializer values,
 * and a "free after node i" list from lifetime analysis. Each run of a graph gets a
 * frame: owned value slots plus a ref[] array pointing at the live value of every id
 * (a slot, a caller's input, an initializer, or an enclosing frame's value).
 */
#include "runtime/executor.h"
#include "build/memplan.h"
#include "core/bigalloc.h"
#include "runtime/bufpool.h"
#include "runtime/executor_internal.h"
#include "runtime/weight_share.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "onnx/onnx_load.h"

uint64_t rt_value_bytes(const rt_value *v) {
    uint64_t b = v->t.data && !(v->t.flags & RT_TENSOR_BORROWED) ? v->t.nbytes : 0;
    for (int32_t i = 0; i < v->n_items; i++) b += rt_value_bytes(&v->items[i]);
    return b;
}

static bool graph_attr_iter(const ir_node *n, int32_t *ai, int32_t *gi, const ir_graph **out) {
    for (; *ai < n->n_attrs; (*ai)++, *gi = 0) {
        const ir_attr *a = &n->attrs[*ai];
        if (a->type == IR_ATTR_GRAPH && a->g && *gi == 0) {
            *out = a->g;
            (*gi)++;
            return true;
        }
        if (a->type == IR_ATTR_GRAPHS && *gi < a->n) {
            *out = a->graphs[(*gi)++];
            if (*out) return true;
        }
    }
    return false;
}

/* ---- lifetime analysis ------------------------------------------------------------- */

typedef struct name_list {
    const char **v;
    int32_t n, cap;
    bool oom;
} name_list;

static void names_push(name_list *l, const char *s) {
    if (l->n == l->cap) {
        int32_t nc = l->cap ? l->cap * 2 : 16;
        const char **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            l->oom = true;
            return;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = s;
}

static void mark_inputs_consts(const ir_graph *g, bool *is_input, bool *is_const) {
    for (int32_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] >= 0 && g->inputs[i] < g->n_values) is_input[g->inputs[i]] = true;
    for (int32_t i = 0; i < g->n_initializers; i++)
        if (g->initializers[i] >= 0 && g->initializers[i] < g->n_values) is_const[g->initializers[i]] = true;
}

/* Names a graph takes from enclosing scopes (recursively through nested bodies). */
static void collect_outer_names(const ir_graph *g, name_list *out, int depth) {
    if (depth > IR_MAX_GRAPH_DEPTH) return;
    bool *produced = calloc((size_t)g->n_values + 1, sizeof *produced);
    bool *is_in = calloc((size_t)g->n_values + 1, sizeof *is_in);
    bool *is_c = calloc((size_t)g->n_values + 1, sizeof *is_c);
    if (!produced || !is_in || !is_c) {
        out->oom = true;
        goto done;
    }
    mark_inputs_consts(g, is_in, is_c);
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++)
            if (g->nodes[i].outputs[k] >= 0) produced[g->nodes[i].outputs[k]] = true;
    for (int32_t v = 0; v < g->n_values; v++)
        if (!produced[v] && !is_in[v] && !is_c[v]) names_push(out, g->values[v].name);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        int32_t ai = 0, gi = 0;
        const ir_graph *body;
        while (graph_attr_iter(n, &ai, &gi, &body)) {
            name_list inner = {0};
            collect_outer_names(body, &inner, depth + 1);
            if (inner.oom) out->oom = true;
            for (int32_t j = 0; j < inner.n; j++) {
                int32_t id = ir_graph_find(g, inner.v[j]);
                if (id == IR_NONE || (!produced[id] && !is_in[id] && !is_c[id])) names_push(out, inner.v[j]);
            }
            free(inner.v);
        }
    }
done:
    free(produced);
    free(is_in);
    free(is_c);
}

static bool is_graph_output(const ir_graph *g, int32_t id);

/* Zero-copy reshapes. Reshape, Flatten, Squeeze and Unsqueeze only relabel the dims of
 * a contiguous tensor, so on host executors their output is a read-only view of input
 * 0's data (RT_TENSOR_BORROWED) instead of a copy. The view owns nothing, so the value
 * it looks into (its root: input 0, or input 0's own root for chained reshapes) must
 * live until the view's last reader: lifetime analysis, and the arena plan through
 * p->view_root, extend the root's last use. Kernels never write their inputs, so no
 * consumer can write through a view. A view that is a graph output would hand the
 * caller memory it does not own: such nodes copy as before. KILN_NO_VIEWS=1 turns views
 * off (A/B measurements). */
static bool is_view_op(const ir_node *n) {
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) return false;
    if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs != 1 || n->outputs[0] < 0) return false;
    return !strcmp(n->op_type, "Reshape") || !strcmp(n->op_type, "Flatten") || !strcmp(n->op_type, "Squeeze") ||
           !strcmp(n->op_type, "Unsqueeze");
}

static kiln_status plan_views(rt_graph_plan *p, int32_t *last, kiln_error *err) {
    const ir_graph *g = p->g;
    p->view_root = malloc(((size_t)g->n_values + 1) * sizeof *p->view_root);
    p->view_node = calloc((size_t)g->n_nodes + 1, sizeof *p->view_node);
    if (!p->view_root || !p->view_node) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory planning views");
    for (int32_t v = 0; v < g->n_values; v++) p->view_root[v] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (!is_view_op(n) || is_graph_output(g, n->outputs[0]) || n->outputs[0] == n->inputs[0]) continue;
        int32_t in = n->inputs[0];
        p->view_root[n->outputs[0]] = p->view_root[in] >= 0 ? p->view_root[in] : in;
        p->view_node[i] = 1;
    }
    /* every root directly (no chains), so one pass extends each root to its views' ends */
    for (int32_t v = 0; v < g->n_values; v++) {
        int32_t r = p->view_root[v];
        if (r >= 0 && last[v] > last[r]) last[r] = last[v];
    }
    return KILN_OK;
}

static kiln_status plan_lifetimes(rt_graph_plan *p, bool views, kiln_error *err) {
    const ir_graph *g = p->g;
    int32_t nv = g->n_values, nn = g->n_nodes;
    int32_t *last = malloc(((size_t)nv + 1) * sizeof *last);
    bool *keep = calloc((size_t)nv + 1, sizeof *keep);
    bool *produced = calloc((size_t)nv + 1, sizeof *produced);
    p->free_start = calloc((size_t)nn + 1, sizeof *p->free_start);
    if (!last || !keep || !produced || !p->free_start) {
        free(last), free(keep), free(produced);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory planning value lifetimes");
    }
    for (int32_t v = 0; v < nv; v++) last[v] = -1;
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] >= 0) keep[g->outputs[i]] = true;
    for (int32_t i = 0; i < nn; i++) {
        const ir_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) {
                produced[n->outputs[k]] = true;
                if (last[n->outputs[k]] < i) last[n->outputs[k]] = i; /* unused: free right away */
            }
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) last[n->inputs[k]] = i;
        int32_t ai = 0, gi = 0;
        const ir_graph *body;
        while (graph_attr_iter(n, &ai, &gi, &body)) {
            name_list outer = {0};
            collect_outer_names(body, &outer, 1);
            bool oom = outer.oom;
            for (int32_t j = 0; j < outer.n; j++) {
                int32_t id = ir_graph_find(g, outer.v[j]);
                if (id != IR_NONE) last[id] = i;
            }
            free(outer.v);
            if (oom) {
                free(last), free(keep), free(produced);
                return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory planning value lifetimes");
            }
        }
    }
    if (views) {
        kiln_status vs = plan_views(p, last, err);
        if (vs != KILN_OK) {
            free(last), free(keep), free(produced);
            return vs;
        }
    }
    int32_t total = 0;
    for (int32_t v = 0; v < nv; v++)
        if (produced[v] && !keep[v] && last[v] >= 0) p->free_start[last[v] + 1]++, total++;
    for (int32_t i = 0; i < nn; i++) p->free_start[i + 1] += p->free_start[i];
    p->free_ids = malloc(((size_t)total + 1) * sizeof *p->free_ids);
    int32_t *fill = calloc((size_t)nn + 1, sizeof *fill);
    if (!p->free_ids || !fill) {
        free(last), free(keep), free(produced), free(fill);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory planning value lifetimes");
    }
    for (int32_t v = 0; v < nv; v++)
        if (produced[v] && !keep[v] && last[v] >= 0) p->free_ids[p->free_start[last[v]] + fill[last[v]]++] = v;
    free(last), free(keep), free(produced), free(fill);
    return KILN_OK;
}

/* ---- constants ----------------------------------------------------------------------- */

static kiln_status densify_sparse(rt_value *out, const ir_sparse_tensor *sp, const char *name, kiln_error *err) {
    const ir_tensor *vals = sp->values, *idx = sp->indices;
    if (!vals || !idx || sp->rank < 0 || sp->rank > RT_MAX_RANK || vals->dtype == KILN_DTYPE_STRING ||
        (idx->dtype != KILN_DTYPE_INT64) || (vals->count && !vals->data) || (idx->count && !idx->data))
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "sparse initializer '%s': only int64 indices and numeric "
                            "values are supported", name);
    rt_tensor *t = rt_value_as_tensor(out);
    kiln_status st = rt_tensor_alloc_zero(t, vals->dtype, sp->rank, sp->dims, err);
    if (st != KILN_OK) return st;
    uint64_t esz = (uint64_t)kiln_dtype_bits(vals->dtype) / 8;
    if (esz == 0) return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "sparse initializer '%s': sub-byte dtype", name);
    const int64_t *ix = idx->data;
    bool coords = idx->rank == 2;
    for (uint64_t i = 0; i < vals->count; i++) {
        int64_t flat = 0;
        if (coords) {
            if (idx->dims[1] != sp->rank)
                return kiln_err_set(err, KILN_ERR_INVALID_MODEL, "sparse initializer '%s': indices are not [NNZ, %d]",
                                    name, (int)sp->rank);
            for (int32_t d = 0; d < sp->rank; d++) {
                int64_t c = ix[i * (uint64_t)sp->rank + (uint64_t)d];
                if (c < 0 || c >= sp->dims[d])
                    return kiln_err_set(err, KILN_ERR_INVALID_MODEL, "sparse initializer '%s': index out of range",
                                        name);
                flat = flat * sp->dims[d] + c;
            }
        } else {
            if (i >= idx->count) break;
            flat = ix[i];
        }
        if (flat < 0 || (uint64_t)flat >= t->count)
            return kiln_err_set(err, KILN_ERR_INVALID_MODEL, "sparse initializer '%s': index %" PRId64
                                " out of range", name, flat);
        memcpy((char *)t->data + (uint64_t)flat * esz, (const char *)vals->data + i * esz, (size_t)esz);
    }
    return KILN_OK;
}

static kiln_status plan_consts(rt_executor *ex, rt_graph_plan *p, kiln_error *err) {
    const ir_graph *g = p->g;
    for (int32_t i = 0; i < g->n_initializers; i++) {
        int32_t id = g->initializers[i];
        if (id < 0 || id >= g->n_values) continue;
        ir_tensor *t = g->values[id].init;
        if (!t) continue;
        if (t->where == IR_DATA_EXTERNAL && !t->data && t->count > 0) {
            kiln_status st = onnx_tensor_load_external(ex->model, t, err);
            if (st != KILN_OK) return st;
        }
        rt_value *v = &p->consts[id];
        rt_value_init(v);
        kiln_status st = rt_tensor_from_ir(rt_value_as_tensor(v), t, err);
        if (st != KILN_OK) return st;
        p->is_const[id] = true;
    }
    for (int32_t i = 0; i < g->n_sparse_initializers; i++) {
        const char *name = g->sparse_initializer_names ? g->sparse_initializer_names[i] : NULL;
        int32_t id = name ? ir_graph_find(g, name) : IR_NONE;
        if (id == IR_NONE || p->is_const[id]) continue;
        kiln_status st = densify_sparse(&p->consts[id], g->sparse_initializers[i], name, err);
        if (st != KILN_OK) return st;
        p->is_const[id] = true;
    }
    return KILN_OK;
}

/* ---- creation ------------------------------------------------------------------------ */

typedef struct missing_op {
    const char *domain, *op_type, *first_node;
    int count;
} missing_op;

static kiln_status note_op(missing_op **list, int *n, const ir_node *node, kiln_error *err) {
    int j = 0;
    for (; j < *n; j++)
        if (!strcmp((*list)[j].op_type, node->op_type) && !strcmp((*list)[j].domain, node->domain)) break;
    if (j == *n) {
        missing_op *nm = realloc(*list, (size_t)(*n + 1) * sizeof *nm);
        if (!nm) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        *list = nm;
        nm[j].domain = node->domain;
        nm[j].op_type = node->op_type;
        nm[j].first_node = node->name;
        nm[j].count = 0;
        (*n)++;
    }
    (*list)[j].count++;
    return KILN_OK;
}


/* Device executors: gives every const input of a device node its device copy once, at
 * creation, so runs never upload weights. */
static kiln_status upload_consts(rt_executor *ex, rt_graph_plan *p, kiln_error *err) {
    const ir_graph *g = p->g;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (p->on_fb[i]) continue;
        const ir_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t id = n->inputs[k];
            if (id < 0 || !p->is_const[id] || p->dconsts[id].kind != IR_TYPE_UNKNOWN) continue;
            if (ex->be->input_on_host && ex->be->input_on_host(ex->bctx, n, k)) continue;
            if (p->consts[id].kind != IR_TYPE_TENSOR || p->consts[id].t.dtype == KILN_DTYPE_STRING) continue;
            bool shared = false;
            kiln_status st = KILN_OK;
            if (ex->opts.weights) { /* one device copy for every executor of the model */
                rt_value_init(&p->dconsts[id]);
                st = rt_weight_share_get(ex->opts.weights, ex->be, ex->bctx, g, id, &p->consts[id].t,
                                         rt_value_as_tensor(&p->dconsts[id]), &shared, err);
                if (st != KILN_OK || !shared) rt_value_init(&p->dconsts[id]);
            }
            if (st == KILN_OK && !shared)
                st = rt_exec_dev_from_host(ex, &p->consts[id].t, rt_value_as_tensor(&p->dconsts[id]), err);
            if (st != KILN_OK) return st;
        }
    }
    return KILN_OK;
}

static kiln_status plan_graph(rt_executor *ex, rt_graph_plan *p, missing_op **missing, int *n_missing,
                              missing_op **fallen, int *n_fallen, kiln_error *err) {
    const ir_graph *g = p->g;
    size_t nn = (size_t)g->n_nodes + 1, nv = (size_t)g->n_values + 1;
    p->kernels = calloc(nn, sizeof *p->kernels);
    p->state = calloc(nn, sizeof *p->state);
    p->state_free = calloc(nn, sizeof *p->state_free);
    p->calls = calloc(nn, sizeof *p->calls);
    p->time_ns = calloc(nn, sizeof *p->time_ns);
    p->consts = calloc(nv, sizeof *p->consts);
    p->is_const = calloc(nv, sizeof *p->is_const);
    p->is_outer = calloc(nv, sizeof *p->is_outer);
    p->is_input = calloc(nv, sizeof *p->is_input);
    p->on_fb = calloc(nn, sizeof *p->on_fb);
    p->dconsts = calloc(nv, sizeof *p->dconsts);
    if (!p->on_fb || !p->dconsts) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory preparing graph '%s'", g->name);
    if (!p->kernels || !p->state || !p->state_free || !p->calls || !p->time_ns || !p->consts || !p->is_const ||
        !p->is_outer || !p->is_input)
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory preparing graph '%s'", g->name);
    p->prepared = true;
    bool *dummy_c = calloc(nv, sizeof *dummy_c), *produced = calloc(nv, sizeof *produced);
    if (!dummy_c || !produced) {
        free(dummy_c), free(produced);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory preparing graph '%s'", g->name);
    }
    mark_inputs_consts(g, p->is_input, dummy_c);
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++)
            if (g->nodes[i].outputs[k] >= 0) produced[g->nodes[i].outputs[k]] = true;
    kiln_status st = plan_consts(ex, p, err);
    for (int32_t v = 0; v < g->n_values; v++)
        p->is_outer[v] = g->parent && !produced[v] && !p->is_input[v] && !p->is_const[v];
    free(dummy_c), free(produced);
    if (st != KILN_OK) return st;
    const char *nv_env = getenv("KILN_NO_VIEWS");
    st = plan_lifetimes(p, !ex->device && !(nv_env && nv_env[0] == '1'), err);
    if (st != KILN_OK) return st;

    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        kiln_error e = {0};
        /* Device executors: a node the device backend does not support, and every node of
         * a subgraph (If/Loop/Scan bodies are driven by host kernels), runs on the host
         * fallback backend. */
        bool use_fb = ex->device && ex->fb &&
                      (g->parent || !ex->be->supports(ex->bctx, ex->model, n, KILN_DTYPE_UNDEFINED));
        const rt_backend *nb = use_fb ? ex->fb : ex->be;
        void *nctx = use_fb ? ex->fbctx : ex->bctx;
        kiln_status ps = nb->prepare_node(nctx, ex->model, n, &p->kernels[i], &e);
        if (ps == KILN_ERR_UNSUPPORTED && ex->device && ex->fb) {
            /* the other backend may still run it: the device backend's supports() can
             * prefer the host for a node it is able to run (shape arithmetic) */
            kiln_err_clear(&e);
            use_fb = !use_fb;
            nb = use_fb ? ex->fb : ex->be;
            nctx = use_fb ? ex->fbctx : ex->bctx;
            ps = nb->prepare_node(nctx, ex->model, n, &p->kernels[i], &e);
        }
        if (ps == KILN_OK && use_fb) {
            p->on_fb[i] = 1;
            ex->n_fallback++;
        }
        if (ps == KILN_ERR_UNSUPPORTED) {
            kiln_err_clear(&e);
            if (note_op(missing, n_missing, n, err) != KILN_OK) return KILN_ERR_NOMEM;
        } else if (ps != KILN_OK) {
            kiln_err_move(err, &e);
            return ps;
        }
    }
    if (!g->parent && ex->device && ex->fb && ex->opts.device_graph && !rt_exec_dg_impossible(ex)) {
        st = rt_exec_plan_shape_nodes(ex, p, &ex->dg.first_other, err);
        if (st != KILN_OK) return st;
    }
    for (int32_t i = 0; !g->parent && i < g->n_nodes; i++)
        if (p->on_fb[i] && note_op(fallen, n_fallen, &g->nodes[i], err) != KILN_OK) return KILN_ERR_NOMEM;
    if (ex->device) return upload_consts(ex, p, err);
    return KILN_OK;
}

typedef struct op_lister {
    strbuf *sb;
    int n;
} op_lister;

static void list_op(const char *domain, const char *op_type, void *user) {
    op_lister *l = user;
    sb_printf(l->sb, "%s%s%s%s", l->n++ ? ", " : "", domain[0] ? domain : "", domain[0] ? ":" : "", op_type);
}

static kiln_status report_missing(const rt_executor *ex, const missing_op *m, int n, kiln_error *err) {
    strbuf sb;
    sb_init(&sb);
    /* "unsupported op: A (why)" when the backend says why it has no kernel on purpose */
    sb_printf(&sb, n == 1 ? "unsupported op:" : "unsupported ops:");
    for (int i = 0; i < n; i++) {
        const char *why = ex->be->unsupported_reason ? ex->be->unsupported_reason(m[i].domain, m[i].op_type) : NULL;
        sb_printf(&sb, "%s %s", i ? "," : "", m[i].op_type);
        if (why) sb_printf(&sb, " (%s)", why);
    }
    sb_printf(&sb, "\n");
    for (int i = 0; i < n; i++)
        sb_printf(&sb, "  %s%s%s: %d node%s, first '%s'\n", m[i].domain[0] ? m[i].domain : "",
                  m[i].domain[0] ? ":" : "", m[i].op_type, m[i].count, m[i].count == 1 ? "" : "s", m[i].first_node);
    if (ex->be->foreach_op) {
        op_lister l = {&sb, 0};
        sb_printf(&sb, "kiln's %s backend has kernels for: ", ex->be->name);
        ex->be->foreach_op(list_op, &l);
        if (!l.n) sb_printf(&sb, "(none yet)");
    }
    kiln_status st = kiln_err_set(err, KILN_ERR_UNSUPPORTED, "%s", sb_cstr(&sb));
    sb_free(&sb);
    return st;
}


kiln_status rt_executor_create(ir_model *model, const rt_backend *be, void *bctx, const rt_exec_options *opts,
                               rt_executor **out, kiln_error *err) {
    *out = NULL;
    if (!model || !model->graph) return kiln_err_set(err, KILN_ERR_INVALID_ARG, "no model to run");
    if (!be || be->api_version != RT_BACKEND_API_VERSION)
        return kiln_err_set(err, KILN_ERR_INTERNAL, "backend interface version mismatch (expected %d)",
                            RT_BACKEND_API_VERSION);
    rt_executor *ex = calloc(1, sizeof *ex);
    if (!ex) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory creating an executor");
    ex->model = model;
    ex->be = be;
    ex->bctx = bctx;
    if (opts) ex->opts = *opts;
    ex->device = be->location != RT_MEM_HOST;
    if (!ex->device && !getenv("KILN_NO_BUFPOOL")) ex->bufpool = rt_bufpool_create(); /* NULL: plain malloc */
    if (ex->device && ex->opts.fallback && ex->opts.fallback->api_version == RT_BACKEND_API_VERSION &&
        ex->opts.fallback->location == RT_MEM_HOST) {
        ex->fb = ex->opts.fallback;
        ex->fbctx = ex->opts.fallback_ctx;
    }
    ex->n_plans = model->n_graphs;
    ex->plans = calloc((size_t)model->n_graphs + 1, sizeof *ex->plans);
    if (!ex->plans) {
        free(ex);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory creating an executor");
    }
    missing_op *missing = NULL, *fallen = NULL;
    int n_missing = 0, n_fallen = 0;
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < model->n_graphs && st == KILN_OK; i++) {
        ex->plans[i].g = model->graphs[i];
        /* Function bodies are not run by node lookup (yet): only graphs reachable from
         * the main graph are prepared. */
        const ir_graph *root = model->graphs[i];
        while (root->parent) root = root->parent;
        if (root != model->graph) continue;
        st = plan_graph(ex, &ex->plans[i], &missing, &n_missing, &fallen, &n_fallen, err);
    }
    if (st == KILN_OK && n_missing) st = report_missing(ex, missing, n_missing, err);
    if (st == KILN_OK && n_fallen) {
        strbuf sb;
        sb_init(&sb);
        int total = 0;
        for (int i = 0; i < n_fallen; i++) total += fallen[i].count;
        sb_printf(&sb, "%d node%s of the main graph run on the %s backend (no %s kernel, or host-side shape "
                  "arithmetic):", total, total == 1 ? "" : "s", ex->fb->name, be->name);
        for (int i = 0; i < n_fallen; i++)
            sb_printf(&sb, "%s %s%s%s x%d (first '%s')", i ? "," : "", fallen[i].domain[0] ? fallen[i].domain : "",
                      fallen[i].domain[0] ? ":" : "", fallen[i].op_type, fallen[i].count, fallen[i].first_node);
        ex->fallback_report = strdup(sb_cstr(&sb));
        sb_free(&sb);
    }
    free(missing);
    free(fallen);
    if (st == KILN_OK && ex->opts.device_graph) {
        /* replay needs every node on the device and nothing that times or reads nodes */
        const ir_node *other = ex->dg.first_other;
        if (rt_exec_dg_impossible(ex)) {
            rt_exec_dg_off(ex, rt_exec_dg_impossible(ex));
        } else if (other) {
            char why[256];
            snprintf(why, sizeof why, "node '%s' (%s) runs on the CPU and reads more than input shapes and "
                     "constants (see the fallback warning)", other->name, other->op_type);
            rt_exec_dg_off(ex, why);
        } else if (ex->n_fallback > ex->dg.n_host_nodes) {
            rt_exec_dg_off(ex, "some nodes run on the CPU (see the fallback warning)");
        }
    }
    if (ex->bufpool && !getenv("KILN_NO_ARENA")) {
        size_t nv = (size_t)model->graph->n_values + 1;
        ex->arena.offset = calloc(nv, sizeof *ex->arena.offset);
        ex->arena.size = calloc(nv, sizeof *ex->arena.size);
        if (!ex->arena.offset || !ex->arena.size) st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    if (st == KILN_OK && (ex->opts.record_sizes || ex->arena.offset)) {
        ex->main_sizes = calloc((size_t)model->graph->n_values + 1, sizeof *ex->main_sizes);
        if (!ex->main_sizes) st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    if (st != KILN_OK) {
        rt_executor_free(ex);
        return st;
    }
    *out = ex;
    return KILN_OK;
}


void rt_executor_free(rt_executor *ex) {
    if (!ex) return;
    rt_exec_dg_drop(ex);
    free(ex->dg.in_sig), free(ex->dg.out_sig), free(ex->dg.din), free(ex->dg.dout);
    free(ex->dg.shost), free(ex->dg.sdev), free(ex->dg.hout);
    for (int32_t i = 0; i < ex->n_plans; i++) {
        rt_graph_plan *p = &ex->plans[i];
        if (!p->prepared) continue;
        for (int32_t n = 0; n < p->g->n_nodes; n++) {
            if (p->state[n] && p->state_free[n]) p->state_free[n](p->state[n]);
            const rt_backend *nb = p->on_fb && p->on_fb[n] ? ex->fb : ex->be;
            if (p->kernels[n] && nb->release_node) nb->release_node(p->on_fb && p->on_fb[n] ? ex->fbctx : ex->bctx,
                                                                    p->kernels[n]);
        }
        for (int32_t v = 0; v < p->g->n_values; v++) {
            rt_value_release(&p->consts[v]);
            if (p->dconsts) rt_value_release(&p->dconsts[v]);
        }
        free(p->on_fb), free(p->dconsts), free(p->sn), free(p->sv), free(p->sv_dev);
        free(p->kernels), free(p->state), free(p->state_free), free(p->free_start), free(p->free_ids);
        free(p->view_root), free(p->view_node);
        free(p->consts), free(p->is_const), free(p->is_outer), free(p->is_input), free(p->calls), free(p->time_ns);
    }
    free(ex->plans);
    free(ex->main_sizes);
    free(ex->fallback_report);
    free(ex->arena.base);
    free(ex->arena.offset);
    free(ex->arena.size);
    rt_bufpool_free(ex->bufpool);
    free(ex);
}

rt_bufpool_stats rt_executor_bufpool_stats(const rt_executor *ex) { return rt_bufpool_get_stats(ex->bufpool); }

const char *rt_executor_fallback_report(const rt_executor *ex) { return ex->fallback_report; }
int32_t rt_executor_n_fallback(const rt_executor *ex) { return ex->n_fallback; }
bool rt_executor_node_on_fallback(const rt_executor *ex, const ir_graph *g, int32_t i) {
    for (int32_t k = 0; k < ex->n_plans; k++)
        if (ex->plans[k].g == g && ex->plans[k].prepared) return i >= 0 && i < g->n_nodes && ex->plans[k].on_fb[i];
    return false;
}

/* ---- host <-> device copies (device executors) --------------------------------------- */

void rt_exec_dev_free(void *ctx, void *data) {
    rt_executor *ex = ctx;
    ex->be->free(ex->bctx, data);
}

kiln_status rt_exec_dev_from_host(rt_executor *ex, const rt_tensor *src, rt_tensor *dst, kiln_error *err) {
    if (src->dtype == KILN_DTYPE_STRING)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "string tensors cannot be copied to the %s device",
                            ex->be->name);
    rt_tensor_release(dst);
    void *p = NULL;
    if (src->nbytes) {
        kiln_status st = ex->be->alloc(ex->bctx, src->nbytes, &p, err);
        if (st != KILN_OK) return st;
        st = ex->be->copy(ex->bctx, p, src->data, src->nbytes, RT_COPY_HOST_TO_DEVICE, NULL, err);
        if (st != KILN_OK) {
            ex->be->free(ex->bctx, p);
            return st;
        }
    }
    dst->dtype = src->dtype;
    dst->rank = src->rank;
    memcpy(dst->dims, src->dims, sizeof dst->dims);
    dst->count = src->count;
    dst->nbytes = src->nbytes;
    dst->data = p;
    dst->flags = 0;
    dst->device = ex->be->location;
    dst->free_fn = p ? rt_exec_dev_free : NULL;
    dst->free_ctx = ex;
    return KILN_OK;
}

static kiln_status host_tensor_from_dev(rt_executor *ex, const rt_tensor *src, rt_tensor *dst, kiln_error *err) {
    kiln_status st = rt_tensor_alloc(dst, src->dtype, src->rank, src->dims, err);
    if (st == KILN_OK && src->nbytes)
        st = ex->be->copy(ex->bctx, dst->data, src->data, src->nbytes, RT_COPY_DEVICE_TO_HOST, NULL, err);
    return st;
}

bool rt_exec_value_on_device(const rt_value *v) {
    return (v->kind == IR_TYPE_TENSOR || (v->kind == IR_TYPE_OPTIONAL && v->has_value)) &&
           v->t.device != RT_MEM_HOST;
}

/* ---- running ------------------------------------------------------------------------- */

rt_graph_plan *rt_exec_plan_for(rt_executor *ex, const ir_graph *g) {
    for (int32_t i = 0; i < ex->n_plans; i++)
        if (ex->plans[i].g == g) return ex->plans[i].prepared ? &ex->plans[i] : NULL;
    return NULL;
}

static bool tensor_has_nonfinite(const rt_tensor *t, uint64_t *at) {
    if (!t->data) return false;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT: {
        const float *p = t->data;
        for (uint64_t i = 0; i < t->count; i++)
            if (!isfinite(p[i])) return *at = i, true;
        return false;
    }
    case KILN_DTYPE_DOUBLE: {
        const double *p = t->data;
        for (uint64_t i = 0; i < t->count; i++)
            if (!isfinite(p[i])) return *at = i, true;
        return false;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        /* exponent all ones = Inf or NaN in both formats */
        const uint16_t *p = t->data;
        uint16_t mask = t->dtype == KILN_DTYPE_FLOAT16 ? 0x7c00 : 0x7f80;
        for (uint64_t i = 0; i < t->count; i++)
            if ((p[i] & mask) == mask) return *at = i, true;
        return false;
    }
    default: return false;
    }
}

static kiln_status check_nan(const ir_graph *g, const ir_node *n, const rt_value *outs, int32_t n_out,
                             kiln_error *err) {
    for (int32_t k = 0; k < n_out; k++) {
        const rt_value *v = &outs[k];
        uint64_t at = 0;
        if (v->kind != IR_TYPE_TENSOR && !(v->kind == IR_TYPE_OPTIONAL && v->has_value)) continue;
        if (!tensor_has_nonfinite(&v->t, &at)) continue;
        char shape[256];
        const char *vname = n->outputs[k] >= 0 ? g->values[n->outputs[k]].name : "";
        double x = 0;
        if (v->t.dtype == KILN_DTYPE_FLOAT) x = ((const float *)v->t.data)[at];
        else if (v->t.dtype == KILN_DTYPE_DOUBLE) x = ((const double *)v->t.data)[at];
        else if (v->t.dtype == KILN_DTYPE_FLOAT16) x = kiln_fp16_to_fp32(((const uint16_t *)v->t.data)[at]);
        else x = kiln_bf16_to_fp32(((const uint16_t *)v->t.data)[at]);
        return kiln_err_set(err, KILN_ERR_RUNTIME,
                            "node '%s' (%s) produced %s in output %d '%s' %s at flat element %" PRIu64
                            "\nhint: this is the first node (in execution order) whose output is not finite; "
                            "check its inputs' ranges",
                            n->name, n->op_type, isnan(x) ? "NaN" : "Inf", (int)k, vname,
                            rt_tensor_desc(&v->t, shape, sizeof shape), at);
    }
    return KILN_OK;
}


static kiln_status subgraph_entry(void *scope, const ir_graph *body, const rt_value *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out, kiln_error *err);

static const rt_value *resolve_outer(const rt_frame *parent, const char *name) {
    for (const rt_frame *f = parent; f; f = f->parent) {
        int32_t id = ir_graph_find(f->plan->g, name);
        if (id != IR_NONE && f->ref[id]) return f->ref[id];
        if (id != IR_NONE && !f->plan->is_outer[id]) return NULL; /* defined here but not computed */
    }
    return NULL;
}

kiln_status rt_exec_frame_bind(rt_frame *f, const rt_value *const *inputs, int32_t n_in, kiln_error *err) {
    const ir_graph *g = f->plan->g;
    size_t nv = (size_t)g->n_values + 1;
    f->vals = calloc(nv, sizeof *f->vals);
    f->ref = calloc(nv, sizeof *f->ref);
    if (f->ex->device) f->xvals = calloc(nv, sizeof *f->xvals);
    if (!f->vals || !f->ref || (f->ex->device && !f->xvals)) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory running graph '%s'", g->name);
    for (int32_t v = 0; v < g->n_values; v++) {
        if (f->plan->is_const[v]) f->ref[v] = &f->plan->consts[v];
        else if (f->plan->is_outer[v]) f->ref[v] = resolve_outer(f->parent, g->values[v].name);
    }
    for (int32_t i = 0; i < g->n_inputs && i < n_in; i++)
        if (inputs[i] && g->inputs[i] >= 0) f->ref[g->inputs[i]] = inputs[i];
    return KILN_OK;
}

void rt_exec_frame_release(rt_frame *f) {
    if (f->vals)
        for (int32_t v = 0; v < f->plan->g->n_values; v++) rt_value_release(&f->vals[v]);
    if (f->xvals)
        for (int32_t v = 0; v < f->plan->g->n_values; v++) rt_value_release(&f->xvals[v]);
    free(f->xvals);
    free(f->vals);
    free(f->ref);
}

/* Moves (or copies, when not owned by this frame) the graph outputs out. */
static kiln_status frame_outputs(rt_frame *f, rt_value *outputs, int32_t n_out, kiln_error *err) {
    const ir_graph *g = f->plan->g;
    for (int32_t i = 0; i < g->n_outputs && i < n_out; i++) {
        int32_t id = g->outputs[i];
        rt_value_init(&outputs[i]);
        if (id < 0 || !f->ref[id])
            return kiln_err_set(err, KILN_ERR_RUNTIME, "%s output %d '%s' was not computed by any node",
                                g->parent ? "subgraph" : "graph", (int)i, id >= 0 ? g->values[id].name : "");
        if (rt_exec_value_on_device(f->ref[id])) {
            /* results go back to the caller in host memory */
            rt_value *o = &outputs[i];
            o->kind = f->ref[id]->kind;
            o->has_value = f->ref[id]->has_value;
            o->elem_kind = f->ref[id]->elem_kind;
            o->elem_dtype = f->ref[id]->elem_dtype;
            kiln_status st = host_tensor_from_dev(f->ex, &f->ref[id]->t, &o->t, err);
            if (st != KILN_OK) return st;
        } else if (f->ref[id] == &f->vals[id]) {
            outputs[i] = f->vals[id];
            rt_value_init(&f->vals[id]);
            f->ref[id] = &outputs[i]; /* a second use of the same value copies from here */
        } else {
            kiln_status st = rt_value_copy(&outputs[i], f->ref[id], err);
            if (st != KILN_OK) return st;
            /* a borrowed tensor copied by rt_value_copy is owned now */
        }
    }
    return KILN_OK;
}

/* Graph outputs outlive the run (the caller owns them): they never take pooled or
 * planned storage. Decided from the graph's output list, not the value flags, which
 * graphs built in code may not set. */
static bool is_graph_output(const ir_graph *g, int32_t id) {
    if (id >= 0 && id < g->n_values && (g->values[id].flags & IR_VALUE_GRAPH_OUTPUT)) return true;
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == id) return true;
    return false;
}

/* ---- the activation arena (see rt_executor.arena) ---------------------------------- */

static void *arena_alloc_at(void *ctx, int32_t target, uint64_t nbytes) {
    rt_executor *ex = ctx;
    const ir_node *n = ex->arena.node;
    if (n && target >= 0 && target < n->n_outputs) {
        int32_t id = n->outputs[target];
        if (id >= 0 && ex->arena.offset[id] != BUILD_MEMPLAN_NONE && ex->arena.size[id] == nbytes) {
            ex->arena.hits++;
            return ex->arena.base + ex->arena.offset[id];
        }
    }
    ex->arena.misses++;
    return rt_bufpool_get(ex->bufpool, nbytes);
}

static void arena_release(void *ctx, void *data) {
    rt_executor *ex = ctx;
    const uint8_t *p = data;
    if (ex->arena.base && p >= ex->arena.base && p < ex->arena.base + ex->arena.bytes) return; /* planned place */
    rt_bufpool_put(ex->bufpool, data);
}

/* After a successful run: plans the arena from this run's sizes unless the current plan
 * already has exactly these sizes. Every intermediate has been released by now, so the
 * old block can go. Graph outputs are left out (the caller owns them after the run). A
 * failure only leaves the arena off: the pool still serves every tensor. */
static void arena_replan(rt_executor *ex) {
    const ir_graph *g = ex->model->graph;
    if (!ex->arena.offset || !ex->main_sizes) return;
    int32_t nv = g->n_values;
    uint64_t *sizes = calloc((size_t)nv + 1, sizeof *sizes);
    if (!sizes) return;
    for (int32_t v = 0; v < nv; v++) sizes[v] = ex->main_sizes[v];
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] >= 0 && g->outputs[i] < nv) sizes[g->outputs[i]] = 0;
    bool same = ex->arena.ready;
    for (int32_t v = 0; same && v < nv; v++)
        same = sizes[v] == (ex->arena.offset[v] == BUILD_MEMPLAN_NONE ? 0 : ex->arena.size[v]);
    if (same) {
        free(sizes);
        return;
    }
    ex->arena.ready = false;
    free(ex->arena.base);
    ex->arena.base = NULL;
    ex->arena.bytes = 0;
    build_memplan plan;
    kiln_error e = {0};
    if (build_memplan_graph_views(g, sizes, rt_exec_plan_for(ex, g) ? rt_exec_plan_for(ex, g)->view_root : NULL, &plan, &e) == KILN_OK) {
        uint64_t bytes = (plan.arena_bytes + 63) / 64 * 64;
        /* The pool's buffers served this run's intermediates, which get places in the
         * arena: kept, they would hold the activations twice (ResNet-50 batch 1: 12.8 MiB
         * next to a 6.9 MiB arena). Freed before the arena is allocated, so the two are
         * never resident together. Sizes the plan does not cover come back from the
         * system once and are pooled again. */
        rt_bufpool_trim(ex->bufpool);
        uint8_t *base = bytes && bytes <= SIZE_MAX ? kiln_alloc_aligned((size_t)bytes) : NULL;
        if (base && plan.n_offsets >= nv) {
            for (int32_t v = 0; v < nv; v++) {
                ex->arena.offset[v] = sizes[v] ? plan.offsets[v] : BUILD_MEMPLAN_NONE;
                ex->arena.size[v] = sizes[v];
            }
            ex->arena.base = base;
            ex->arena.bytes = bytes;
            ex->arena.ready = true;
        } else {
            free(base);
        }
        build_memplan_free(&plan);
    }
    kiln_err_clear(&e);
    free(sizes);
}

uint64_t rt_executor_arena_bytes(const rt_executor *ex) { return ex->arena.ready ? ex->arena.bytes : 0; }
void rt_executor_arena_counts(const rt_executor *ex, uint64_t *hits, uint64_t *misses) {
    *hits = ex->arena.hits;
    *misses = ex->arena.misses;
}


/* The alloc hook of a view node: its one output takes the input's storage when the
 * byte sizes agree (they always do for a valid reshape; otherwise the heap). */
static void *view_alloc_at(void *ctx, int32_t target, uint64_t nbytes) {
    const rt_tensor *src = ctx;
    return target == 0 && nbytes == src->nbytes ? src->data : NULL;
}

static void view_release(void *ctx, void *data) { (void)ctx, (void)data; }

static kiln_status run_node(rt_frame *f, int32_t i, kiln_error *err) {
    rt_executor *ex = f->ex;
    rt_graph_plan *p = f->plan;
    const ir_graph *g = p->g;
    const ir_node *n = &g->nodes[i];
    enum { SMALL = 16 };
    const rt_value *in_small[SMALL];
    rt_value out_small[SMALL];
    const rt_value **ins = n->n_inputs <= SMALL ? in_small : calloc((size_t)n->n_inputs, sizeof *ins);
    rt_value *outs = n->n_outputs <= SMALL ? out_small : calloc((size_t)n->n_outputs, sizeof *outs);
    kiln_status st = KILN_OK;
    if (!ins || !outs) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory running node '%s'", n->name);
        goto done;
    }
    for (int32_t k = 0; k < n->n_outputs; k++) rt_value_init(&outs[k]);
    for (int32_t k = 0; k < n->n_inputs; k++) {
        int32_t id = n->inputs[k];
        ins[k] = id >= 0 ? f->ref[id] : NULL;
        if (id >= 0 && !ins[k]) {
            st = kiln_err_set(err, KILN_ERR_RUNTIME, "node '%s' (%s): input %d '%s' has no value%s", n->name,
                              n->op_type, (int)k, g->values[id].name,
                              p->is_outer[id] ? " (an outer-scope name no enclosing graph defines)"
                                              : " (its producer did not output it)");
            goto done;
        }
    }
    bool fb = p->on_fb[i];
    rt_value shape_view; /* a host Shape/Size node's device input: its header, no data */
    if (ex->device) {
        /* put every input where the node's backend reads it; copies are kept per frame
         * (xvals) so a value crossing to the other memory crosses once */
        for (int32_t k = 0; k < n->n_inputs && st == KILN_OK; k++) {
            int32_t id = n->inputs[k];
            if (id < 0 || !ins[k]) continue;
            const rt_value *v = ins[k];
            bool want_dev = !fb && !(ex->be->input_on_host && ex->be->input_on_host(ex->bctx, n, k));
            if (want_dev == rt_exec_value_on_device(v)) continue;
            if (!want_dev && rt_exec_reads_only_shape(n, k) && v->kind == IR_TYPE_TENSOR) {
                /* Shape/Size read dims only: no copy of the data (and nothing for a
                 * recording to trip over) */
                shape_view = *v;
                shape_view.t.data = NULL;
                shape_view.t.device = RT_MEM_HOST;
                shape_view.t.flags = RT_TENSOR_BORROWED;
                shape_view.t.free_fn = NULL;
                shape_view.t.free_ctx = NULL;
                ins[k] = &shape_view;
                continue;
            }
            if (want_dev && ex->dg.capturing && p->sv_dev && p->sv_dev[id] &&
                ex->dg.sdev[id].kind == IR_TYPE_TENSOR) {
                ins[k] = &ex->dg.sdev[id]; /* uploaded before recording (dg_record) */
                continue;
            }
            if (v->kind != IR_TYPE_TENSOR) {
                if (want_dev)
                    st = kiln_err_set(err, KILN_ERR_UNSUPPORTED, "node '%s' (%s): input %d is not a tensor; the %s "
                                      "backend runs tensors only", n->name, n->op_type, (int)k, ex->be->name);
                continue;
            }
            if (want_dev && p->is_const[id] && p->dconsts[id].kind == IR_TYPE_TENSOR && ins[k] == &p->consts[id]) {
                ins[k] = &p->dconsts[id];
                continue;
            }
            rt_value *x = &f->xvals[id];
            if (x->kind == IR_TYPE_UNKNOWN) {
                rt_tensor *xt = rt_value_as_tensor(x);
                st = want_dev ? rt_exec_dev_from_host(ex, &v->t, xt, err) : host_tensor_from_dev(ex, &v->t, xt, err);
                if (st != KILN_OK) {
                    rt_value_release(x);
                    kiln_err_prefix(err, "node '%s' (%s): copying input %d: ", n->name, n->op_type, (int)k);
                    goto done;
                }
            }
            ins[k] = x;
        }
        if (st != KILN_OK) goto done;
    }
    const rt_backend *nb = fb ? ex->fb : ex->be;
    void *nctx = fb ? ex->fbctx : ex->bctx;
    rt_node_call call;
    memset(&call, 0, sizeof call);
    call.model = ex->model;
    call.graph = g;
    call.node = n;
    call.kernel = p->kernels[i];
    call.inputs = ins;
    call.n_in = n->n_inputs;
    call.outputs = outs;
    call.n_out = n->n_outputs;
    call.state = &p->state[i];
    call.state_free = &p->state_free[i];
    call.run_subgraph = subgraph_entry;
    call.scope = f;
    call.err = err;
    /* Main-graph outputs take pooled buffers (bufpool.h); nested subgraph nodes use the
     * heap, so the hook is always set (possibly to NULL) around the call and restored
     * after. Graph outputs, which the caller releases after the run, perhaps after the
     * executor is gone, come straight from the pool and go straight back to it (the pool
     * outlives the executor until they do); a node writing a graph output and another
     * value uses the heap. */
    rt_tensor *hook_targets[SMALL];
    rt_alloc_hook hook = {rt_bufpool_get, rt_bufpool_put, ex->bufpool, hook_targets, 0, NULL};
    bool pooled = ex->bufpool && !g->parent && !fb && n->n_outputs <= SMALL;
    int32_t n_graph_out = 0;
    for (int32_t k = 0; pooled && k < n->n_outputs; k++) {
        int32_t id = n->outputs[k];
        if (id >= 0 && is_graph_output(g, id)) n_graph_out++;
        hook_targets[k] = &outs[k].t;
    }
    if (n_graph_out > 0 && n_graph_out < n->n_outputs) pooled = false;
    if (ex->arena.ready && n_graph_out == 0) {
        /* planned places first, the pool for the rest (arena_release tells them apart) */
        hook.alloc_at = arena_alloc_at;
        hook.release = arena_release;
        hook.ctx = ex;
        ex->arena.node = n;
    }
    hook.n_targets = pooled ? n->n_outputs : 0;
    /* A planned view (plan_views) takes input 0's bytes as its storage; a string tensor,
     * a device tensor or an empty one is copied as before. */
    const rt_tensor *view_src = NULL;
    if (p->view_node && p->view_node[i] && ins[0] && ins[0]->kind == IR_TYPE_TENSOR &&
        ins[0]->t.device == RT_MEM_HOST && ins[0]->t.dtype != KILN_DTYPE_STRING && ins[0]->t.data) {
        view_src = &ins[0]->t;
        hook = (rt_alloc_hook){NULL, view_release, (void *)view_src, hook_targets, 1, view_alloc_at};
        hook_targets[0] = &outs[0].t;
        pooled = true;
    }
    const rt_alloc_hook *saved_hook = rt_tensor_alloc_hook();
    rt_tensor_set_alloc_hook(pooled ? &hook : NULL);
    uint64_t t0 = 0, t1 = 0;
    if (ex->opts.profile) nb->timer_mark(nctx, NULL, &t0, NULL);
    st = nb->run_node(nctx, &call);
    rt_tensor_set_alloc_hook(saved_hook);
    if (view_src && outs[0].kind == IR_TYPE_TENSOR && outs[0].t.data == view_src->data) {
        outs[0].t.flags |= RT_TENSOR_BORROWED; /* a view: releasing it frees nothing */
        outs[0].t.free_fn = NULL;
        outs[0].t.free_ctx = NULL;
    }
    if (ex->opts.profile) {
        nb->timer_mark(nctx, NULL, &t1, NULL);
        p->calls[i]++;
        p->time_ns[i] += nb->timer_elapsed_ns(nctx, t0, t1);
    }
    if (st != KILN_OK) {
        if (err && !err->msg)
            kiln_err_set(err, st, "node '%s' (%s) failed (%s)", n->name, n->op_type, kiln_status_name(st));
        else if (err && strncmp(err->msg, "node '", 6) != 0)
            /* helpers like rt_tensor_alloc do not know the node: say which one it was */
            kiln_err_prefix(err, "node '%s' (%s): ", n->name, n->op_type);
        goto done;
    }
    if (ex->opts.check_nan) {
        if (ex->device) {
            /* look at device outputs through host copies */
            for (int32_t k = 0; k < n->n_outputs && st == KILN_OK; k++) {
                if (!rt_exec_value_on_device(&outs[k])) {
                    st = check_nan(g, n, &outs[k], 1, err);
                    continue;
                }
                rt_value h;
                rt_value_init(&h);
                st = host_tensor_from_dev(ex, &outs[k].t, rt_value_as_tensor(&h), err);
                if (st == KILN_OK) st = check_nan(g, n, &h, 1, err);
                rt_value_release(&h);
            }
        } else {
            st = check_nan(g, n, outs, n->n_outputs, err);
        }
        if (st != KILN_OK) goto done;
    }
    if (p->sn && p->sn[i] && (ex->dg.collect || ex->dg.capturing)) {
        st = rt_exec_dg_shape_node_done(ex, n, outs, err);
        if (st != KILN_OK) goto done;
    }
    for (int32_t k = 0; k < n->n_outputs; k++) {
        int32_t id = n->outputs[k];
        if (id < 0 || outs[k].kind == IR_TYPE_UNKNOWN) continue;
        uint64_t b = rt_value_bytes(&outs[k]);
        ex->live_bytes += b;
        if (!g->parent && ex->main_sizes) ex->main_sizes[id] = b;
        rt_value_release(&f->vals[id]);
        f->vals[id] = outs[k];
        rt_value_init(&outs[k]);
        f->ref[id] = &f->vals[id];
    }
    if (ex->live_bytes > ex->peak_bytes) ex->peak_bytes = ex->live_bytes;
    if (ex->opts.max_live_bytes && ex->live_bytes > ex->opts.max_live_bytes) {
        st = kiln_err_set(err, KILN_ERR_LIMIT,
                          "node '%s' (%s): intermediate tensors now hold %" PRIu64 " bytes, over the limit of %" PRIu64
                          " bytes\nhint: the input shapes may be much larger than the model expects",
                          n->name, n->op_type, ex->live_bytes, ex->opts.max_live_bytes);
        goto done;
    }
    for (int32_t j = p->free_start[i]; j < p->free_start[i + 1]; j++) {
        int32_t v = p->free_ids[j];
        if (f->xvals) rt_value_release(&f->xvals[v]);
        if (f->ref[v] == &f->vals[v]) {
            uint64_t b = rt_value_bytes(&f->vals[v]);
            ex->live_bytes = ex->live_bytes >= b ? ex->live_bytes - b : 0;
            rt_value_release(&f->vals[v]);
            f->ref[v] = NULL;
        }
    }
done:
    if (outs)
        for (int32_t k = 0; k < n->n_outputs; k++) rt_value_release(&outs[k]);
    if (ins != in_small) free(ins);
    if (outs != out_small) free(outs);
    return st;
}

kiln_status rt_exec_run_frame(rt_frame *f, kiln_error *err) {
    for (int32_t i = 0; i < f->plan->g->n_nodes; i++) {
        kiln_status st = run_node(f, i, err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

void rt_exec_frame_uncount(rt_frame *f) {
    for (int32_t v = 0; v < f->plan->g->n_values; v++) {
        uint64_t b = rt_value_bytes(&f->vals[v]);
        f->ex->live_bytes = f->ex->live_bytes >= b ? f->ex->live_bytes - b : 0;
    }
}

static kiln_status subgraph_entry(void *scope, const ir_graph *body, const rt_value *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out, kiln_error *err) {
    rt_frame *parent = scope;
    rt_executor *ex = parent->ex;
    rt_frame f;
    memset(&f, 0, sizeof f);
    f.ex = ex;
    f.parent = parent;
    f.plan = rt_exec_plan_for(ex, body);
    if (!f.plan) return kiln_err_set(err, KILN_ERR_INTERNAL, "subgraph '%s' was not prepared", body->name);
    if (n_in != body->n_inputs)
        return kiln_err_set(err, KILN_ERR_RUNTIME, "%s: the subgraph takes %d inputs but %d were given",
                            body->location && body->location[0] ? body->location : body->name, (int)body->n_inputs,
                            (int)n_in);
    if (n_out != body->n_outputs)
        return kiln_err_set(err, KILN_ERR_RUNTIME, "%s: the subgraph has %d outputs but %d were expected",
                            body->location && body->location[0] ? body->location : body->name,
                            (int)body->n_outputs, (int)n_out);
    if (++ex->depth > IR_MAX_GRAPH_DEPTH) {
        ex->depth--;
        return kiln_err_set(err, KILN_ERR_LIMIT, "subgraphs nested deeper than %d", IR_MAX_GRAPH_DEPTH);
    }
    enum { SMALL = 32 };
    const rt_value *small[SMALL];
    const rt_value **ins = n_in <= SMALL ? small : calloc((size_t)n_in, sizeof *ins);
    kiln_status st = ins ? KILN_OK : kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; st == KILN_OK && i < n_in; i++) ins[i] = &inputs[i];
    if (st == KILN_OK) st = rt_exec_frame_bind(&f, ins, n_in, err);
    if (st == KILN_OK) st = rt_exec_run_frame(&f, err);
    if (st == KILN_OK) st = frame_outputs(&f, outputs, n_out, err);
    if (f.vals) rt_exec_frame_uncount(&f);
    rt_exec_frame_release(&f);
    if (ins != small) free(ins);
    ex->depth--;
    return st;
}

kiln_status rt_exec_run_plain(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err) {
    const ir_graph *g = ex->model->graph;
    rt_frame f;
    memset(&f, 0, sizeof f);
    f.ex = ex;
    f.plan = rt_exec_plan_for(ex, g);
    if (!f.plan) return kiln_err_set(err, KILN_ERR_INTERNAL, "main graph was not prepared");
    ex->live_bytes = ex->peak_bytes = 0;
    ex->depth = 0;
    if (ex->main_sizes) memset(ex->main_sizes, 0, (size_t)g->n_values * sizeof *ex->main_sizes);
    for (int32_t i = 0; i < g->n_outputs; i++) rt_value_init(&outputs[i]);
    kiln_status st = rt_exec_frame_bind(&f, inputs, g->n_inputs, err);
    for (int32_t i = 0; st == KILN_OK && i < g->n_inputs; i++) {
        int32_t id = g->inputs[i];
        if (id >= 0 && !f.ref[id])
            st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "graph input %d '%s' was not given", (int)i,
                              g->values[id].name);
    }
    if (st == KILN_OK) st = rt_exec_run_frame(&f, err);
    if (st == KILN_OK) st = frame_outputs(&f, outputs, g->n_outputs, err);
    if (st != KILN_OK)
        for (int32_t i = 0; i < g->n_outputs; i++) rt_value_release(&outputs[i]);
    rt_exec_frame_release(&f);
    ex->arena.node = NULL;
    if (st == KILN_OK) arena_replan(ex);
    return st;
}

void rt_executor_foreach_profile(const rt_executor *ex, void (*fn)(const rt_node_profile *p, void *user),
                                 void *user) {
    for (int32_t i = 0; i < ex->n_plans; i++) {
        const rt_graph_plan *p = &ex->plans[i];
        if (!p->prepared) continue;
        for (int32_t n = 0; n < p->g->n_nodes; n++) {
            if (!p->calls[n]) continue;
            rt_node_profile np = {p->g, &p->g->nodes[n], p->calls[n], p->time_ns[n]};
            fn(&np, user);
        }
    }
}

const uint64_t *rt_executor_value_sizes(const rt_executor *ex) { return ex->main_sizes; }
uint64_t rt_executor_peak_bytes(const rt_executor *ex) { return ex->peak_bytes; }
