/* executor_dgraph.c - device graphs for the executor (see executor.h, and the
 * "device graphs" comment below): which host nodes are constants of an input-shape
 * signature, moving host nodes to the device when that lets a run be recorded, and
 * learning, recording and replaying whole runs through the backend's capture hooks
 * (CUDA graphs). Split from executor.c, which keeps the node-by-node machinery this
 * builds on (executor_internal.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/executor_internal.h"
#include "runtime/pinned_pool.h"
#include "runtime/weight_share.h"

/* Ops whose outputs are not a function of their inputs: never per-signature constants. */
static bool op_is_random(const ir_node *n) {
    static const char *const ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Multinomial", "Bernoulli"};
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) return true; /* unknown semantics */
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (!strcmp(n->op_type, ops[k])) return true;
    return false;
}

bool rt_exec_reads_only_shape(const ir_node *n, int32_t k) {
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
kiln_status rt_exec_plan_shape_nodes(rt_executor *ex, rt_graph_plan *p, const ir_node **first_other,
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
            if (id < 0 || rt_exec_reads_only_shape(n, k)) continue;
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
const char *rt_exec_dg_impossible(const rt_executor *ex) {
    const rt_backend *be = ex->be;
    if (!ex->device || !be->capture_begin || !be->capture_end || !be->graph_launch || !be->graph_destroy)
        return "the backend cannot record graphs";
    if (ex->opts.profile || ex->opts.check_nan || ex->opts.max_live_bytes || ex->opts.record_sizes)
        return "per-node profiling, NaN checks and memory accounting need per-node runs";
    return NULL;
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

void rt_exec_dg_drop(rt_executor *ex) {
    if (ex->dg.graph) ex->be->graph_destroy(ex->bctx, ex->dg.graph);
    ex->dg.graph = NULL;
    for (int32_t i = 0; ex->dg.din && i < ex->dg.n_in; i++) rt_value_release(&ex->dg.din[i]);
    for (int32_t i = 0; ex->dg.dout && i < ex->dg.n_out; i++) rt_value_release(&ex->dg.dout[i]);
    for (int32_t v = 0; ex->dg.shost && v < ex->dg.n_vals; v++) {
        rt_value_release(&ex->dg.shost[v]);
        rt_value_release(&ex->dg.sdev[v]);
    }
    for (int32_t i = 0; ex->dg.hout && i < ex->dg.n_out; i++) {
        rt_pinned_pool_close(ex->dg.hout[i]); /* buffers still held by outputs go when released */
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
kiln_status rt_exec_dg_shape_node_done(rt_executor *ex, const ir_node *n, const rt_value *outs, kiln_error *err) {
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

void rt_exec_dg_off(rt_executor *ex, const char *why) {
    rt_exec_dg_drop(ex);
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
            rt_exec_dg_off(ex, "a graph output is not a tensor");
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
        rt_exec_dg_off(ex, "out of memory");
        return false;
    }
    for (int32_t i = 0; i < ex->dg.n_in && st == KILN_OK; i++) {
        rt_value_init(&ex->dg.din[i]);
        if (!inputs[i]) continue;
        ex->dg.din[i].kind = IR_TYPE_TENSOR;
        st = rt_exec_dev_from_host(ex, &inputs[i]->t, &ex->dg.din[i].t, &e);
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
        o->t.free_fn = p ? rt_exec_dev_free : NULL;
        o->t.free_ctx = ex;
        /* page-locked outputs: the DMA writes device memory straight into the buffer the
         * caller gets (a pageable destination goes through the driver's bounce buffer,
         * and a staging buffer costs a host memcpy per run); 4 in flight per output */
        if (st == KILN_OK && ex->dg.hout && s->nbytes)
            ex->dg.hout[i] = rt_pinned_pool_new(ex->be, ex->bctx, s->nbytes, 4);
    }
    /* device copies of the per-signature host values device nodes read, from the last
     * node-by-node run with these shapes; the recording reads them (run_node) */
    const rt_graph_plan *mp = rt_exec_plan_for(ex, g);
    for (int32_t v = 0; st == KILN_OK && mp && mp->sv_dev && v < ex->dg.n_vals; v++) {
        if (!mp->sv_dev[v]) continue;
        if (ex->dg.shost[v].kind != IR_TYPE_TENSOR) {
            st = kiln_err_set(&e, KILN_ERR_UNSUPPORTED, "the shape value '%s' was not kept by the last run",
                              g->values[v].name);
            break;
        }
        rt_value_release(&ex->dg.sdev[v]);
        ex->dg.sdev[v].kind = IR_TYPE_TENSOR;
        st = rt_exec_dev_from_host(ex, &ex->dg.shost[v].t, &ex->dg.sdev[v].t, &e);
    }
    bool capturing = false;
    if (st == KILN_OK) st = ex->be->capture_begin(ex->bctx, &e);
    capturing = st == KILN_OK;
    ex->dg.capturing = capturing;
    rt_frame f;
    memset(&f, 0, sizeof f);
    f.ex = ex;
    f.plan = rt_exec_plan_for(ex, g);
    if (st == KILN_OK) st = rt_exec_frame_bind(&f, ins, ex->dg.n_in, &e);
    if (st == KILN_OK) st = rt_exec_run_frame(&f, &e);
    for (int32_t i = 0; st == KILN_OK && i < ex->dg.n_out; i++) {
        int32_t id = g->outputs[i];
        const rt_value *v = id >= 0 ? f.ref[id] : NULL;
        if (!v || !rt_exec_value_on_device(v) || !same_shape(&v->t, &ex->dg.out_sig[i]))
            st = kiln_err_set(&e, KILN_ERR_UNSUPPORTED, "graph output %d is not a device tensor of the shape seen "
                              "before", (int)i);
        else if (v->t.nbytes)
            st = ex->be->copy(ex->bctx, ex->dg.dout[i].t.data, v->t.data, v->t.nbytes, RT_COPY_DEVICE_TO_DEVICE, NULL,
                              &e);
    }
    if (f.vals) rt_exec_frame_uncount(&f);
    rt_exec_frame_release(&f); /* intermediates are freed inside the recording */
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
        rt_exec_dg_off(ex, why);
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
        rt_pinned_pool *pool = ex->dg.hout ? ex->dg.hout[i] : NULL;
        void *h = s->nbytes ? rt_pinned_pool_take(pool) : NULL;
        if (h) { /* the page-locked buffer is the output */
            rt_tensor_adopt(&outputs[i].t, s, h, RT_MEM_HOST, rt_pinned_pool_give, pool);
        } else {
            st = rt_tensor_alloc(&outputs[i].t, s->dtype, s->rank, s->dims, err);
        }
        if (st == KILN_OK && s->nbytes)
            st = ex->be->copy(ex->bctx, outputs[i].t.data, ex->dg.dout[i].t.data, s->nbytes, RT_COPY_DEVICE_TO_HOST,
                              NULL, err);
    }
    if (!xfer && st == KILN_OK && ex->be->stream_sync) st = ex->be->stream_sync(ex->bctx, NULL, err);
    if (st == KILN_OK && timed) st = ex->be->timer_mark(ex->bctx, NULL, &m[3], err);
    if (st == KILN_OK && timed)
        for (int k = 0; k < 3; k++) ex->dg.phase_ns[k] = ex->be->timer_elapsed_ns(ex->bctx, m[k], m[k + 1]);
    if (st != KILN_OK)
        for (int32_t i = 0; i < ex->dg.n_out; i++) rt_value_release(&outputs[i]);
    return st;
}


kiln_status rt_executor_run(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err) {
    const ir_graph *g = ex->model->graph;
    memset(ex->dg.phase_ns, 0, sizeof ex->dg.phase_ns);
    if (!ex->opts.device_graph || ex->dg.state < 0) return rt_exec_run_plain(ex, inputs, outputs, err);
    if (!ex->dg.in_sig) {
        ex->dg.n_in = g->n_inputs;
        ex->dg.n_out = g->n_outputs;
        ex->dg.in_sig = calloc((size_t)g->n_inputs + 1, sizeof *ex->dg.in_sig);
        ex->dg.out_sig = calloc((size_t)g->n_outputs + 1, sizeof *ex->dg.out_sig);
        ex->dg.din = calloc((size_t)g->n_inputs + 1, sizeof *ex->dg.din);
        ex->dg.dout = calloc((size_t)g->n_outputs + 1, sizeof *ex->dg.dout);
        ex->dg.hout = calloc((size_t)g->n_outputs + 1, sizeof *ex->dg.hout);
        const rt_graph_plan *mp = rt_exec_plan_for(ex, g);
        if (mp && mp->sn) {
            ex->dg.n_vals = g->n_values;
            ex->dg.shost = calloc((size_t)g->n_values + 1, sizeof *ex->dg.shost);
            ex->dg.sdev = calloc((size_t)g->n_values + 1, sizeof *ex->dg.sdev);
        }
        if (!ex->dg.in_sig || !ex->dg.out_sig || !ex->dg.din || !ex->dg.dout || !ex->dg.hout ||
            (mp && mp->sn && (!ex->dg.shost || !ex->dg.sdev))) {
            rt_exec_dg_off(ex, "out of memory");
            return rt_exec_run_plain(ex, inputs, outputs, err);
        }
    }
    if (!dg_inputs_ok(inputs, g->n_inputs)) return rt_exec_run_plain(ex, inputs, outputs, err);
    if (ex->dg.state == 2 && !dg_inputs_match(ex, inputs)) { /* new shapes: learn them again */
        rt_exec_dg_drop(ex);
        ex->dg.state = 0;
    }
    if (ex->dg.state == 1 && dg_inputs_match(ex, inputs) && dg_record(ex, inputs)) ex->dg.state = 2;
    if (ex->dg.state == 2) return dg_replay(ex, inputs, outputs, err);
    ex->dg.collect = ex->dg.state >= 0 && ex->dg.shost; /* keep the per-signature host values */
    kiln_status st = rt_exec_run_plain(ex, inputs, outputs, err);
    ex->dg.collect = false;
    if (st == KILN_OK && ex->dg.state >= 0) dg_learn(ex, inputs, outputs);
    return st;
}

void rt_executor_set_device_graph(rt_executor *ex, bool on) {
    if (!ex) return;
    if (!on) {
        rt_exec_dg_drop(ex);
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
            /* a weight shared with another executor counts where it was uploaded */
            if (p->dconsts[v].kind == IR_TYPE_TENSOR && !rt_weight_share_borrowed(&p->dconsts[v].t))
                b += p->dconsts[v].t.nbytes;
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

