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
#include "runtime/bufpool.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "onnx/onnx_load.h"

typedef struct rt_graph_plan {
    const ir_graph *g;
    bool prepared;
    void **kernels;          /* per node */
    void **state;            /* per node */
    void (**state_free)(void *);
    int32_t *free_start;     /* CSR over nodes: values released after node i */
    int32_t *free_ids;
    rt_value *consts;        /* per value id: initializers (borrowed) and densified sparse ones */
    bool *is_const;
    bool *is_outer;          /* resolved by name in enclosing frames */
    bool *is_input;
    uint64_t *calls, *time_ns;
    uint8_t *on_fb;          /* per node: runs on the fallback (host) backend */
    rt_value *dconsts;       /* per value id: device copies of consts device nodes read */
    /* Device executors, main graph only (NULL otherwise): per-signature host nodes (see
     * "device graphs"): sn[i] = node i runs on the host and its outputs depend only on
     * input shapes and constants; sv[v] = value v is such an output; sv_dev[v] = some
     * device node reads v in device memory. */
    uint8_t *sn, *sv, *sv_dev;
} rt_graph_plan;

struct rt_executor {
    ir_model *model;
    const rt_backend *be;
    void *bctx;
    rt_exec_options opts;
    rt_graph_plan *plans; /* parallel to model->graphs */
    int32_t n_plans;
    uint64_t live_bytes, peak_bytes;
    uint64_t *main_sizes;
    int depth;
    const rt_backend *fb; /* host fallback backend when be is a device backend */
    void *fbctx;
    bool device;          /* be keeps tensors in device memory */
    char *fallback_report;
    int32_t n_fallback;
    /* Device-graph replay (device backends with capture hooks; see rt_exec_options). */
    struct {
        int state;           /* 0 learning shapes, 1 shapes seen once, 2 graph recorded, -1 off */
        char why[256];       /* why it is off */
        int32_t n_in, n_out; /* main-graph inputs / outputs */
        rt_tensor *in_sig;   /* per input: dtype and dims of the last run (data unused); rank -1 = not given */
        rt_tensor *out_sig;  /* per output: dtype and dims of the last run */
        rt_value *din;       /* per input: the fixed device buffer the graph reads */
        rt_value *dout;      /* per output: the fixed device buffer the graph writes */
        void *graph;
        uint64_t phase_ns[3];
        /* Per-signature host nodes (plan->sn): their outputs from the last node-by-node
         * run (shost, per main-graph value id), and device copies of the ones device
         * nodes read (sdev), uploaded before recording; the recorded graph reads sdev, so
         * they live as long as the graph. */
        rt_value *shost, *sdev;
        int32_t n_vals;
        int32_t n_host_nodes;
        const ir_node *first_other; /* the first host node that is not one of them */
        void **hout;    /* per output: page-locked host staging for the D2H copy (backend host_alloc), or NULL */
        bool no_transfers; /* replays skip the input and output copies (rt_executor_set_transfers) */
        bool collect;   /* this run keeps the sn outputs in shost */
        bool capturing; /* this run is being recorded */
    } dg;
    rt_bufpool *bufpool; /* host executors: recycles main-graph intermediates across runs */
    /* The activation arena (host executors): after a run, the main graph's intermediates
     * are planned by lifetime into one block (build/memplan.c) from that run's sizes; the
     * next runs place every node output whose size matches its plan at its offset. A
     * size that differs (new input shapes) falls back to the buffer pool, and the plan is
     * redone after that run. Offsets never overlap while both tensors are alive, so a
     * tensor at its planned place is safe whatever the other tensors' sizes are. */
    struct {
        uint8_t *base;
        uint64_t bytes;
        uint64_t *offset;  /* per main-graph value id; BUILD_MEMPLAN_NONE = not placed */
        uint64_t *size;    /* per value id: the size the offset was planned for */
        bool ready;
        const ir_node *node; /* the main-graph node running now (its outputs are the targets) */
        uint64_t hits, misses;
    } arena;
};

typedef struct rt_frame {
    rt_executor *ex;
    rt_graph_plan *plan;
    struct rt_frame *parent;
    rt_value *vals;
    const rt_value **ref;
    rt_value *xvals; /* device executors: each value's copy in the other memory (host <-> device) */
} rt_frame;

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

static kiln_status plan_lifetimes(rt_graph_plan *p, kiln_error *err) {
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

static kiln_status dev_tensor_from_host(rt_executor *ex, const rt_tensor *src, rt_tensor *dst, kiln_error *err);

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
            kiln_status st = dev_tensor_from_host(ex, &p->consts[id].t, rt_value_as_tensor(&p->dconsts[id]), err);
            if (st != KILN_OK) return st;
        }
    }
    return KILN_OK;
}

static rt_graph_plan *plan_for(rt_executor *ex, const ir_graph *g);

/* Ops whose outputs are not a function of their inputs: never per-signature constants. */
static bool op_is_random(const ir_node *n) {
    static const char *const ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Multinomial", "Bernoulli"};
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) return true; /* unknown semantics */
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (!strcmp(n->op_type, ops[k])) return true;
    return false;
}

static bool op_reads_only_shape(const ir_node *n, int32_t k) {
    return k == 0 && (!strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size"));
}

/* Device executors that may record graphs: finds the main-graph host nodes whose outputs
 * depend only on input shapes and constants (Shape/Size of anything, then any
 * deterministic node of those and initializers, transitively). A recorded device graph
 * treats their values as constants of the input-shape signature (see "device graphs"),
 * so they do not stop recording. A host node that does not qualify but that the device
 * can run (the device backend prefers the host for int64 results, e.g. BERT's Unsqueeze
 * of the attention mask) moves to the device, since a host node reading device values
 * cannot be recorded -- all such nodes move, or none when some other host node keeps the
 * run from being recorded anyway. Sets *first_other to the first host node that neither
 * qualifies nor can move (NULL if none). */
static kiln_status plan_shape_nodes(rt_executor *ex, rt_graph_plan *p, const ir_node **first_other,
                                    kiln_error *err) {
    const ir_graph *g = p->g;
    *first_other = NULL;
    p->sn = calloc((size_t)g->n_nodes + 1, 1);
    p->sv = calloc((size_t)g->n_values + 1, 1);
    p->sv_dev = calloc((size_t)g->n_values + 1, 1);
    void **dev_k = calloc((size_t)g->n_nodes + 1, sizeof *dev_k); /* device kernels of movable host nodes */
    uint8_t *movable = calloc((size_t)g->n_nodes + 1, 1);
    if (!p->sn || !p->sv || !p->sv_dev || !dev_k || !movable) {
        free(dev_k), free(movable);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (!p->on_fb[i]) continue;
        bool ok = !op_is_random(n) && n->n_outputs > 0;
        for (int32_t a = 0; ok && a < n->n_attrs; a++)
            if (n->attrs[a].type == IR_ATTR_GRAPH || n->attrs[a].type == IR_ATTR_GRAPHS) ok = false;
        for (int32_t k = 0; ok && k < n->n_inputs; k++) {
            int32_t id = n->inputs[k];
            if (id < 0 || op_reads_only_shape(n, k)) continue;
            ok = p->is_const[id] || p->sv[id];
        }
        if (!ok) {
            kiln_error e = {0};
            if (ex->be->prepare_node(ex->bctx, ex->model, n, &dev_k[i], &e) == KILN_OK) movable[i] = 1;
            else if (!*first_other) *first_other = n;
            kiln_err_clear(&e);
            continue;
        }
        p->sn[i] = 1;
        ex->dg.n_host_nodes++;
        for (int32_t k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) p->sv[n->outputs[k]] = 1;
    }
    /* move them only when that lets the run be recorded: if some host node stays (it
     * reads values and the device cannot run it), graphs are off anyway and the device
     * backend's preference stands */
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (!movable[i]) continue;
        if (*first_other) {
            if (dev_k[i] && ex->be->release_node) ex->be->release_node(ex->bctx, dev_k[i]);
            continue;
        }
        if (p->kernels[i] && ex->fb->release_node) ex->fb->release_node(ex->fbctx, p->kernels[i]);
        p->kernels[i] = dev_k[i];
        p->on_fb[i] = 0;
        ex->n_fallback--;
    }
    free(dev_k), free(movable);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (p->on_fb[i]) continue;
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t id = n->inputs[k];
            if (id >= 0 && p->sv[id] && !(ex->be->input_on_host && ex->be->input_on_host(ex->bctx, n, k)))
                p->sv_dev[id] = 1;
        }
    }
    return KILN_OK;
}

/* Whether device graphs could be recorded at all for this executor (before looking at
 * which nodes run where). */
static const char *dg_impossible(const rt_executor *ex) {
    const rt_backend *be = ex->be;
    if (!ex->device || !be->capture_begin || !be->capture_end || !be->graph_launch || !be->graph_destroy)
        return "the backend cannot record graphs";
    if (ex->opts.profile || ex->opts.check_nan || ex->opts.max_live_bytes || ex->opts.record_sizes)
        return "per-node profiling, NaN checks and memory accounting need per-node runs";
    return NULL;
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
    st = plan_lifetimes(p, err);
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
    if (!g->parent && ex->device && ex->fb && ex->opts.device_graph && !dg_impossible(ex)) {
        st = plan_shape_nodes(ex, p, &ex->dg.first_other, err);
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

static void dg_off(rt_executor *ex, const char *why);

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
        if (dg_impossible(ex)) {
            dg_off(ex, dg_impossible(ex));
        } else if (other) {
            char why[256];
            snprintf(why, sizeof why, "node '%s' (%s) runs on the CPU and reads more than input shapes and "
                     "constants (see the fallback warning)", other->name, other->op_type);
            dg_off(ex, why);
        } else if (ex->n_fallback > ex->dg.n_host_nodes) {
            dg_off(ex, "some nodes run on the CPU (see the fallback warning)");
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

static void dg_drop(rt_executor *ex);

void rt_executor_free(rt_executor *ex) {
    if (!ex) return;
    dg_drop(ex);
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

static void exec_dev_free(void *ctx, void *data) {
    rt_executor *ex = ctx;
    ex->be->free(ex->bctx, data);
}

static kiln_status dev_tensor_from_host(rt_executor *ex, const rt_tensor *src, rt_tensor *dst, kiln_error *err) {
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
    dst->free_fn = p ? exec_dev_free : NULL;
    dst->free_ctx = ex;
    return KILN_OK;
}

static kiln_status host_tensor_from_dev(rt_executor *ex, const rt_tensor *src, rt_tensor *dst, kiln_error *err) {
    kiln_status st = rt_tensor_alloc(dst, src->dtype, src->rank, src->dims, err);
    if (st == KILN_OK && src->nbytes)
        st = ex->be->copy(ex->bctx, dst->data, src->data, src->nbytes, RT_COPY_DEVICE_TO_HOST, NULL, err);
    return st;
}

static bool value_on_device(const rt_value *v) {
    return (v->kind == IR_TYPE_TENSOR || (v->kind == IR_TYPE_OPTIONAL && v->has_value)) &&
           v->t.device != RT_MEM_HOST;
}

/* ---- running ------------------------------------------------------------------------- */

static rt_graph_plan *plan_for(rt_executor *ex, const ir_graph *g) {
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

static kiln_status run_frame(rt_frame *f, kiln_error *err);

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

static kiln_status frame_bind(rt_frame *f, const rt_value *const *inputs, int32_t n_in, kiln_error *err) {
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

static void frame_release(rt_frame *f) {
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
        if (value_on_device(f->ref[id])) {
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
    if (build_memplan_graph(g, sizes, &plan, &e) == KILN_OK) {
        uint64_t bytes = (plan.arena_bytes + 63) / 64 * 64;
        uint8_t *base = bytes && bytes <= SIZE_MAX ? aligned_alloc(64, (size_t)bytes) : NULL;
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

static kiln_status dg_shape_node_done(rt_executor *ex, const ir_node *n, const rt_value *outs, kiln_error *err);

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
            if (want_dev == value_on_device(v)) continue;
            if (!want_dev && op_reads_only_shape(n, k) && v->kind == IR_TYPE_TENSOR) {
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
                st = want_dev ? dev_tensor_from_host(ex, &v->t, xt, err) : host_tensor_from_dev(ex, &v->t, xt, err);
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
    /* Main-graph outputs that are not graph outputs take pooled buffers (bufpool.h);
     * nested subgraph nodes and graph outputs use the heap, so the hook is always set
     * (possibly to NULL) around the call and restored after. */
    rt_tensor *hook_targets[SMALL];
    rt_alloc_hook hook = {rt_bufpool_get, rt_bufpool_put, ex->bufpool, hook_targets, 0, NULL};
    if (ex->arena.ready) { /* planned places first, the pool for the rest (arena_release tells them apart) */
        hook.alloc_at = arena_alloc_at;
        hook.release = arena_release;
        hook.ctx = ex;
        ex->arena.node = n;
    }
    bool pooled = ex->bufpool && !g->parent && !fb && n->n_outputs <= SMALL;
    for (int32_t k = 0; pooled && k < n->n_outputs; k++) {
        int32_t id = n->outputs[k];
        if (id >= 0 && is_graph_output(g, id)) pooled = false;
        hook_targets[k] = &outs[k].t;
    }
    hook.n_targets = pooled ? n->n_outputs : 0;
    const rt_alloc_hook *saved_hook = rt_tensor_alloc_hook();
    rt_tensor_set_alloc_hook(pooled ? &hook : NULL);
    uint64_t t0 = 0, t1 = 0;
    if (ex->opts.profile) nb->timer_mark(nctx, NULL, &t0, NULL);
    st = nb->run_node(nctx, &call);
    rt_tensor_set_alloc_hook(saved_hook);
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
                if (!value_on_device(&outs[k])) {
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
        st = dg_shape_node_done(ex, n, outs, err);
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

static kiln_status run_frame(rt_frame *f, kiln_error *err) {
    for (int32_t i = 0; i < f->plan->g->n_nodes; i++) {
        kiln_status st = run_node(f, i, err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

static void frame_uncount(rt_frame *f) {
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
    f.plan = plan_for(ex, body);
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
    if (st == KILN_OK) st = frame_bind(&f, ins, n_in, err);
    if (st == KILN_OK) st = run_frame(&f, err);
    if (st == KILN_OK) st = frame_outputs(&f, outputs, n_out, err);
    if (f.vals) frame_uncount(&f);
    frame_release(&f);
    if (ins != small) free(ins);
    ex->depth--;
    return st;
}

/* ---- device graphs (CUDA graphs through the backend's capture hooks) -------------------
 * A run is recorded once input shapes have been seen twice in a row (the first run with
 * new shapes picks GEMM/conv tactics, which synchronizes and so cannot be recorded). The
 * recorded run reads its inputs from fixed device buffers (din, filled by one H2D copy per
 * input before each replay) and ends with device-to-device copies of the outputs into
 * fixed buffers (dout, copied back after the replay); every intermediate is allocated and
 * freed inside the recording, so the stream-ordered allocator's graph nodes give each
 * replay the same addresses. Whatever cannot be recorded (a CPU fallback node, a host
 * read of a device value, a sync) makes capture_end fail: replay is then turned off for
 * this executor, with the reason kept, and the run is redone the normal way.
 *
 * Host nodes that depend only on input shapes (plan->sn: Shape/Size, then anything
 * deterministic over those and constants, e.g. BERT's Shape -> Gather -> Unsqueeze ->
 * Concat on the mask) do not stop recording: with the input shapes fixed, their values
 * are constants of the recording. The node-by-node run that learns the shapes keeps them
 * (shost); before recording, the ones device nodes read in device memory are uploaded
 * into buffers owned by the recording (sdev); while recording they run again on the host
 * (Shape/Size read only the header of a device input, no copy), their values are checked
 * equal to the kept ones and device consumers read sdev. Replays run none of them; new
 * input shapes drop the graph and both copies, and the next runs learn them again. */

static void dg_drop(rt_executor *ex) {
    if (ex->dg.graph) ex->be->graph_destroy(ex->bctx, ex->dg.graph);
    ex->dg.graph = NULL;
    for (int32_t i = 0; ex->dg.din && i < ex->dg.n_in; i++) rt_value_release(&ex->dg.din[i]);
    for (int32_t i = 0; ex->dg.dout && i < ex->dg.n_out; i++) rt_value_release(&ex->dg.dout[i]);
    for (int32_t v = 0; ex->dg.shost && v < ex->dg.n_vals; v++) {
        rt_value_release(&ex->dg.shost[v]);
        rt_value_release(&ex->dg.sdev[v]);
    }
    for (int32_t i = 0; ex->dg.hout && i < ex->dg.n_out; i++) {
        if (ex->dg.hout[i]) ex->be->host_free(ex->bctx, ex->dg.hout[i]);
        ex->dg.hout[i] = NULL;
    }
}

static bool same_tensor_value(const rt_value *a, const rt_value *b) {
    if (a->kind != IR_TYPE_TENSOR || b->kind != IR_TYPE_TENSOR || a->t.dtype == KILN_DTYPE_STRING) return false;
    if (a->t.dtype != b->t.dtype || a->t.rank != b->t.rank || a->t.nbytes != b->t.nbytes) return false;
    for (int32_t d = 0; d < a->t.rank; d++)
        if (a->t.dims[d] != b->t.dims[d]) return false;
    return !a->t.nbytes || !memcmp(a->t.data, b->t.data, (size_t)a->t.nbytes);
}

/* A per-signature host node (plan->sn) has run: a node-by-node run keeps its outputs
 * (shost); a recording checks they equal the kept ones, which the graph's device copies
 * (sdev) were made from. They can only differ when the node's value is not a function of
 * the input shapes after all (a Shape of a value whose shape depends on data). */
static kiln_status dg_shape_node_done(rt_executor *ex, const ir_node *n, const rt_value *outs, kiln_error *err) {
    for (int32_t k = 0; k < n->n_outputs; k++) {
        int32_t id = n->outputs[k];
        if (id < 0 || id >= ex->dg.n_vals) continue;
        rt_value *h = &ex->dg.shost[id];
        if (ex->dg.capturing) {
            if (!same_tensor_value(h, &outs[k]))
                return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "node '%s' (%s) computed another value than in the "
                                    "last run with the same input shapes (it depends on more than the shapes)",
                                    n->name, n->op_type);
            continue;
        }
        rt_value_release(h);
        if (outs[k].kind == IR_TYPE_TENSOR && outs[k].t.dtype != KILN_DTYPE_STRING) {
            kiln_status st = rt_value_copy(h, &outs[k], err);
            if (st != KILN_OK) return st;
        }
    }
    return KILN_OK;
}

static void dg_off(rt_executor *ex, const char *why) {
    dg_drop(ex);
    ex->dg.state = -1;
    snprintf(ex->dg.why, sizeof ex->dg.why, "%s", why);
}

static bool same_shape(const rt_tensor *a, const rt_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

static void sig_of(rt_tensor *sig, const rt_value *v) {
    memset(sig, 0, sizeof *sig);
    sig->rank = -1;
    if (!v || v->kind != IR_TYPE_TENSOR) return;
    sig->dtype = v->t.dtype;
    sig->rank = v->t.rank;
    memcpy(sig->dims, v->t.dims, sizeof sig->dims);
    sig->count = v->t.count;
    sig->nbytes = v->t.nbytes;
}

/* Whether these inputs are eligible at all (host tensors, or absent). */
static bool dg_inputs_ok(const rt_value *const *inputs, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (inputs[i] && (inputs[i]->kind != IR_TYPE_TENSOR || inputs[i]->t.device != RT_MEM_HOST ||
                          inputs[i]->t.dtype == KILN_DTYPE_STRING))
            return false;
    return true;
}

static bool dg_inputs_match(const rt_executor *ex, const rt_value *const *inputs) {
    for (int32_t i = 0; i < ex->dg.n_in; i++) {
        rt_tensor s;
        sig_of(&s, inputs[i]);
        if (s.rank != ex->dg.in_sig[i].rank || (s.rank >= 0 && !same_shape(&s, &ex->dg.in_sig[i]))) return false;
    }
    return true;
}

/* After a normal run: remember the shapes; eligible outputs are host tensors. */
static void dg_learn(rt_executor *ex, const rt_value *const *inputs, const rt_value *outputs) {
    for (int32_t i = 0; i < ex->dg.n_in; i++) sig_of(&ex->dg.in_sig[i], inputs[i]);
    for (int32_t i = 0; i < ex->dg.n_out; i++) {
        rt_tensor s;
        sig_of(&s, &outputs[i]);
        if (s.rank < 0 || s.dtype == KILN_DTYPE_STRING) {
            dg_off(ex, "a graph output is not a tensor");
            return;
        }
        ex->dg.out_sig[i] = s;
    }
    ex->dg.state = 1; /* a data-dependent output shape shows up as a mismatch while recording */
}

/* Records one run (nothing executes) into ex->dg.graph; false (and replay off) on failure. */
static bool dg_record(rt_executor *ex, const rt_value *const *inputs) {
    const ir_graph *g = ex->model->graph;
    kiln_error e = {0};
    kiln_status st = KILN_OK;
    const rt_value **ins = calloc((size_t)ex->dg.n_in + 1, sizeof *ins);
    if (!ins) {
        dg_off(ex, "out of memory");
        return false;
    }
    for (int32_t i = 0; i < ex->dg.n_in && st == KILN_OK; i++) {
        rt_value_init(&ex->dg.din[i]);
        if (!inputs[i]) continue;
        ex->dg.din[i].kind = IR_TYPE_TENSOR;
        st = dev_tensor_from_host(ex, &inputs[i]->t, &ex->dg.din[i].t, &e);
        ins[i] = &ex->dg.din[i];
    }
    for (int32_t i = 0; i < ex->dg.n_out && st == KILN_OK; i++) {
        const rt_tensor *s = &ex->dg.out_sig[i];
        rt_value *o = &ex->dg.dout[i];
        rt_value_init(o);
        o->kind = IR_TYPE_TENSOR;
        void *p = NULL;
        if (s->nbytes) st = ex->be->alloc(ex->bctx, s->nbytes, &p, &e);
        o->t = *s;
        o->t.data = p;
        o->t.device = ex->be->location;
        o->t.free_fn = p ? exec_dev_free : NULL;
        o->t.free_ctx = ex;
        /* page-locked staging for the copy back: the DMA reads device memory straight
         * into it (a pageable destination goes through the driver's bounce buffer) */
        if (st == KILN_OK && ex->dg.hout && s->nbytes && ex->be->host_alloc && ex->be->host_free) {
            kiln_error he = {0};
            if (ex->be->host_alloc(ex->bctx, s->nbytes, &ex->dg.hout[i], &he) != KILN_OK) ex->dg.hout[i] = NULL;
            kiln_err_clear(&he);
        }
    }
    /* device copies of the per-signature host values device nodes read, from the last
     * node-by-node run with these shapes; the recording reads them (run_node) */
    const rt_graph_plan *mp = plan_for(ex, g);
    for (int32_t v = 0; st == KILN_OK && mp && mp->sv_dev && v < ex->dg.n_vals; v++) {
        if (!mp->sv_dev[v]) continue;
        if (ex->dg.shost[v].kind != IR_TYPE_TENSOR) {
            st = kiln_err_set(&e, KILN_ERR_UNSUPPORTED, "the shape value '%s' was not kept by the last run",
                              g->values[v].name);
            break;
        }
        rt_value_release(&ex->dg.sdev[v]);
        ex->dg.sdev[v].kind = IR_TYPE_TENSOR;
        st = dev_tensor_from_host(ex, &ex->dg.shost[v].t, &ex->dg.sdev[v].t, &e);
    }
    bool capturing = false;
    if (st == KILN_OK) st = ex->be->capture_begin(ex->bctx, &e);
    capturing = st == KILN_OK;
    ex->dg.capturing = capturing;
    rt_frame f;
    memset(&f, 0, sizeof f);
    f.ex = ex;
    f.plan = plan_for(ex, g);
    if (st == KILN_OK) st = frame_bind(&f, ins, ex->dg.n_in, &e);
    if (st == KILN_OK) st = run_frame(&f, &e);
    for (int32_t i = 0; st == KILN_OK && i < ex->dg.n_out; i++) {
        int32_t id = g->outputs[i];
        const rt_value *v = id >= 0 ? f.ref[id] : NULL;
        if (!v || !value_on_device(v) || !same_shape(&v->t, &ex->dg.out_sig[i]))
            st = kiln_err_set(&e, KILN_ERR_UNSUPPORTED, "graph output %d is not a device tensor of the shape seen "
                              "before", (int)i);
        else if (v->t.nbytes)
            st = ex->be->copy(ex->bctx, ex->dg.dout[i].t.data, v->t.data, v->t.nbytes, RT_COPY_DEVICE_TO_DEVICE, NULL,
                              &e);
    }
    if (f.vals) frame_uncount(&f);
    frame_release(&f); /* intermediates are freed inside the recording */
    ex->dg.capturing = false;
    free(ins);
    if (capturing) {
        void *graph = NULL;
        kiln_error e2 = {0};
        kiln_status st2 = ex->be->capture_end(ex->bctx, &graph, &e2);
        if (st == KILN_OK && st2 != KILN_OK) {
            st = st2;
            kiln_err_set(&e, st2, "%s", kiln_err_msg(&e2));
        }
        kiln_err_clear(&e2);
        if (st == KILN_OK) ex->dg.graph = graph;
        else if (graph) ex->be->graph_destroy(ex->bctx, graph);
    }
    if (st != KILN_OK) {
        char why[256];
        snprintf(why, sizeof why, "recording the run failed: %s", kiln_err_msg(&e));
        dg_off(ex, why);
    }
    kiln_err_clear(&e);
    return st == KILN_OK;
}

/* One replay: inputs into the fixed buffers, the graph, outputs back to the host. */
static kiln_status dg_replay(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err) {
    uint64_t m[4] = {0, 0, 0, 0};
    bool timed = ex->be->timer_mark && ex->be->timer_elapsed_ns;
    kiln_status st = timed ? ex->be->timer_mark(ex->bctx, NULL, &m[0], err) : KILN_OK;
    bool xfer = !ex->dg.no_transfers;
    for (int32_t i = 0; xfer && st == KILN_OK && i < ex->dg.n_in; i++)
        if (inputs[i] && inputs[i]->t.nbytes)
            st = ex->be->copy(ex->bctx, ex->dg.din[i].t.data, inputs[i]->t.data, inputs[i]->t.nbytes,
                              RT_COPY_HOST_TO_DEVICE, NULL, err);
    if (st == KILN_OK && timed) st = ex->be->timer_mark(ex->bctx, NULL, &m[1], err);
    if (st == KILN_OK) st = ex->be->graph_launch(ex->bctx, ex->dg.graph, err);
    if (st == KILN_OK && timed) st = ex->be->timer_mark(ex->bctx, NULL, &m[2], err);
    for (int32_t i = 0; i < ex->dg.n_out; i++) rt_value_init(&outputs[i]);
    for (int32_t i = 0; xfer && st == KILN_OK && i < ex->dg.n_out; i++) {
        const rt_tensor *s = &ex->dg.out_sig[i];
        outputs[i].kind = IR_TYPE_TENSOR;
        st = rt_tensor_alloc(&outputs[i].t, s->dtype, s->rank, s->dims, err);
        void *h = ex->dg.hout ? ex->dg.hout[i] : NULL;
        if (st == KILN_OK && s->nbytes)
            st = ex->be->copy(ex->bctx, h ? h : outputs[i].t.data, ex->dg.dout[i].t.data, s->nbytes,
                              RT_COPY_DEVICE_TO_HOST, NULL, err);
        if (st == KILN_OK && s->nbytes && h) memcpy(outputs[i].t.data, h, (size_t)s->nbytes);
    }
    if (!xfer && st == KILN_OK && ex->be->stream_sync) st = ex->be->stream_sync(ex->bctx, NULL, err);
    if (st == KILN_OK && timed) st = ex->be->timer_mark(ex->bctx, NULL, &m[3], err);
    if (st == KILN_OK && timed)
        for (int k = 0; k < 3; k++) ex->dg.phase_ns[k] = ex->be->timer_elapsed_ns(ex->bctx, m[k], m[k + 1]);
    if (st != KILN_OK)
        for (int32_t i = 0; i < ex->dg.n_out; i++) rt_value_release(&outputs[i]);
    return st;
}

static kiln_status run_plain(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err);

kiln_status rt_executor_run(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err) {
    const ir_graph *g = ex->model->graph;
    memset(ex->dg.phase_ns, 0, sizeof ex->dg.phase_ns);
    if (!ex->opts.device_graph || ex->dg.state < 0) return run_plain(ex, inputs, outputs, err);
    if (!ex->dg.in_sig) {
        ex->dg.n_in = g->n_inputs;
        ex->dg.n_out = g->n_outputs;
        ex->dg.in_sig = calloc((size_t)g->n_inputs + 1, sizeof *ex->dg.in_sig);
        ex->dg.out_sig = calloc((size_t)g->n_outputs + 1, sizeof *ex->dg.out_sig);
        ex->dg.din = calloc((size_t)g->n_inputs + 1, sizeof *ex->dg.din);
        ex->dg.dout = calloc((size_t)g->n_outputs + 1, sizeof *ex->dg.dout);
        ex->dg.hout = calloc((size_t)g->n_outputs + 1, sizeof *ex->dg.hout);
        const rt_graph_plan *mp = plan_for(ex, g);
        if (mp && mp->sn) {
            ex->dg.n_vals = g->n_values;
            ex->dg.shost = calloc((size_t)g->n_values + 1, sizeof *ex->dg.shost);
            ex->dg.sdev = calloc((size_t)g->n_values + 1, sizeof *ex->dg.sdev);
        }
        if (!ex->dg.in_sig || !ex->dg.out_sig || !ex->dg.din || !ex->dg.dout || !ex->dg.hout ||
            (mp && mp->sn && (!ex->dg.shost || !ex->dg.sdev))) {
            dg_off(ex, "out of memory");
            return run_plain(ex, inputs, outputs, err);
        }
    }
    if (!dg_inputs_ok(inputs, g->n_inputs)) return run_plain(ex, inputs, outputs, err);
    if (ex->dg.state == 2 && !dg_inputs_match(ex, inputs)) { /* new shapes: learn them again */
        dg_drop(ex);
        ex->dg.state = 0;
    }
    if (ex->dg.state == 1 && dg_inputs_match(ex, inputs) && dg_record(ex, inputs)) ex->dg.state = 2;
    if (ex->dg.state == 2) return dg_replay(ex, inputs, outputs, err);
    ex->dg.collect = ex->dg.state >= 0 && ex->dg.shost; /* keep the per-signature host values */
    kiln_status st = run_plain(ex, inputs, outputs, err);
    ex->dg.collect = false;
    if (st == KILN_OK && ex->dg.state >= 0) dg_learn(ex, inputs, outputs);
    return st;
}

void rt_executor_set_device_graph(rt_executor *ex, bool on) {
    if (!ex) return;
    if (!on) {
        dg_drop(ex);
        if (ex->dg.state > 0) ex->dg.state = 0; /* turned on again: learn the shapes again */
        ex->opts.device_graph = false;
        return;
    }
    ex->opts.device_graph = true;
}

int rt_executor_device_graph_state(const rt_executor *ex) {
    if (!ex || !ex->opts.device_graph) return -1;
    return ex->dg.state == 2 ? 1 : ex->dg.state < 0 ? -1 : 0;
}

const char *rt_executor_device_graph_why(const rt_executor *ex) {
    if (!ex) return "";
    if (!ex->opts.device_graph) return "device graphs are off";
    return ex->dg.state < 0 ? ex->dg.why : "";
}

void rt_executor_set_transfers(rt_executor *ex, bool on) {
    if (ex) ex->dg.no_transfers = !on;
}

uint64_t rt_executor_device_weight_bytes(const rt_executor *ex) {
    uint64_t b = 0;
    for (int32_t i = 0; ex && i < ex->n_plans; i++) {
        const rt_graph_plan *p = &ex->plans[i];
        for (int32_t v = 0; p->prepared && p->dconsts && v < p->g->n_values; v++)
            if (p->dconsts[v].kind == IR_TYPE_TENSOR) b += p->dconsts[v].t.nbytes;
    }
    return b;
}

int32_t rt_executor_device_graph_host_nodes(const rt_executor *ex) {
    return ex && ex->opts.device_graph && ex->dg.state >= 0 ? ex->dg.n_host_nodes : 0;
}

bool rt_executor_node_per_signature(const rt_executor *ex, int32_t i) {
    const rt_graph_plan *p = NULL;
    for (int32_t k = 0; ex && k < ex->n_plans; k++)
        if (ex->plans[k].g == ex->model->graph && ex->plans[k].prepared) p = &ex->plans[k];
    return p && p->sn && i >= 0 && i < p->g->n_nodes && p->sn[i];
}

void rt_executor_last_phase_ns(const rt_executor *ex, uint64_t *h2d, uint64_t *compute, uint64_t *d2h) {
    *h2d = ex->dg.phase_ns[0];
    *compute = ex->dg.phase_ns[1];
    *d2h = ex->dg.phase_ns[2];
}

static kiln_status run_plain(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err) {
    const ir_graph *g = ex->model->graph;
    rt_frame f;
    memset(&f, 0, sizeof f);
    f.ex = ex;
    f.plan = plan_for(ex, g);
    if (!f.plan) return kiln_err_set(err, KILN_ERR_INTERNAL, "main graph was not prepared");
    ex->live_bytes = ex->peak_bytes = 0;
    ex->depth = 0;
    if (ex->main_sizes) memset(ex->main_sizes, 0, (size_t)g->n_values * sizeof *ex->main_sizes);
    for (int32_t i = 0; i < g->n_outputs; i++) rt_value_init(&outputs[i]);
    kiln_status st = frame_bind(&f, inputs, g->n_inputs, err);
    for (int32_t i = 0; st == KILN_OK && i < g->n_inputs; i++) {
        int32_t id = g->inputs[i];
        if (id >= 0 && !f.ref[id])
            st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "graph input %d '%s' was not given", (int)i,
                              g->values[id].name);
    }
    if (st == KILN_OK) st = run_frame(&f, err);
    if (st == KILN_OK) st = frame_outputs(&f, outputs, g->n_outputs, err);
    if (st != KILN_OK)
        for (int32_t i = 0; i < g->n_outputs; i++) rt_value_release(&outputs[i]);
    frame_release(&f);
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
