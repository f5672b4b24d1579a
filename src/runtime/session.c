/* session.c - input checking and the glue between a model, a backend and the executor
 * (see session.h). */
#include "runtime/session.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/passes.h"
#include "core/strbuf.h"
#include "runtime/backend.h"
#include "runtime/weight_share.h"

struct rt_session {
    ir_model *model;
    const rt_backend *be;
    void *bctx;
    void *fbctx; /* CPU backend for nodes a device backend does not run */
    rt_executor *ex;
    rt_session_options opts;
    rt_tactic_cache tactics; /* device backends: the node attribute, then opts.tactic_cache */
    rt_weight_share *weights; /* device backends: weights shared with the model's other sessions */
};

/* ---- device tactic timings (rt_tactic_cache): a GPU engine's node attribute first ---- */

bool rt_gpu_tactic_lookup(const ir_node *node, const char *sig, const char *tactic, double *ms) {
    const ir_attr *a = node ? ir_node_attr(node, RT_GPU_TACTICS_ATTR) : NULL;
    if (!a || a->type != IR_ATTR_STRING || !a->s.data) return false;
    size_t ls = strlen(sig), lt = strlen(tactic);
    const char *p = a->s.data, *end = a->s.data + a->s.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > ls + lt + 2 && !memcmp(p, sig, ls) && p[ls] == '\t' && !memcmp(p + ls + 1, tactic, lt) &&
            p[ls + 1 + lt] == '\t') {
            char num[64];
            size_t n = (size_t)(le - (p + ls + lt + 2));
            if (n >= sizeof num) return false;
            memcpy(num, p + ls + lt + 2, n);
            num[n] = 0;
            char *e = NULL;
            double v = strtod(num, &e);
            if (e == num) return false;
            *ms = v;
            return true;
        }
        p = le + 1;
    }
    return false;
}

static bool session_tactic_get(void *user, const ir_node *node, const char *sig, const char *tactic, double *ms) {
    const rt_session *s = user;
    if (rt_gpu_tactic_lookup(node, sig, tactic, ms)) return true;
    const rt_tactic_cache *u = s->opts.tactic_cache;
    return u && u->get && u->get(u->user, node, sig, tactic, ms);
}

static void session_tactic_put(void *user, const ir_node *node, const char *sig, const char *tactic, double ms) {
    const rt_session *s = user;
    const rt_tactic_cache *u = s->opts.tactic_cache;
    if (u && u->put) u->put(u->user, node, sig, tactic, ms);
}

rt_session_options rt_session_options_default(void) {
    rt_session_options o;
    memset(&o, 0, sizeof o);
    o.backend = "cpu";
    return o;
}

kiln_status rt_session_create(ir_model *model, const rt_session_options *opts, rt_session **out, kiln_error *err) {
    *out = NULL;
    rt_session_options dflt = rt_session_options_default();
    if (!opts) opts = &dflt;
    if (!model || !model->graph) return kiln_err_set(err, KILN_ERR_INVALID_ARG, "no model to run");
    const char *bname = opts->backend ? opts->backend : "cpu";
    const rt_backend *be = rt_backend_find(bname);
    if (!be) {
        if (!strcmp(bname, "cuda"))
            return kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                                "backend 'cuda' is not in this build of kiln (CMake found no CUDA compiler); "
                                "rebuild on a machine with nvcc, or use --backend cpu");
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "unknown backend '%s'; available: cpu%s", bname,
                            rt_backend_cuda() ? ", cuda" : "");
    }
    rt_session *s = calloc(1, sizeof *s);
    if (!s) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory creating a session");
    s->model = model;
    s->be = be;
    s->opts = *opts;
    kiln_status st = KILN_OK;
    if (opts->run_passes) st = build_run_passes(model, NULL, err);
    /* host backends: attention blocks fused, any scale left into the Q weights; device
     * backends run their own structural passes below */
    if (st == KILN_OK && opts->run_passes && be->location == RT_MEM_HOST) st = build_run_host_passes(model, NULL, err);
    rt_backend_options bo = {opts->threads, 0, opts->fp16, opts->no_tf32, opts->workspace_bytes};
    if (st == KILN_OK) st = be->create(&bo, &s->bctx, err);
    if (st == KILN_OK && be->set_tactic_cache) {
        s->tactics.get = session_tactic_get;
        s->tactics.put = session_tactic_put;
        s->tactics.user = s;
        be->set_tactic_cache(s->bctx, &s->tactics);
    }
    const rt_backend *fb = NULL;
    if (st == KILN_OK && be->location != RT_MEM_HOST) {
        /* A device backend decides per node from value types (int64 shape arithmetic stays
         * on the host), so types are inferred first; problems here are not fatal (the
         * executor reports what it cannot run). */
        build_infer_types_quiet(model);
        /* attention blocks -> one Attention node, which the device runs as one kernel
         * (build/passes/fuse_attention.c), its Q/K/V projections -> one GEMM
         * (merge_qkv.c); the builder runs the same for cuda engines (builder.c), whose
         * sessions have run_passes off. Then --fp16: float16 tensors between the nodes
         * the device runs in half, casts at the boundaries (precision_fp16.c) */
        if (opts->run_passes) st = build_run_device_passes(model, NULL, err);
        if (st == KILN_OK && opts->fp16) st = build_pass_precision_fp16_backend(model, be, s->bctx, NULL, err);
        /* half convolutions channels-last (layout_nhwc.c): the default for sessions that
         * run the graph passes, KILN_NHWC=0/1 forces it (build_layout_nhwc_wanted) */
        if (st == KILN_OK && opts->fp16 && build_layout_nhwc_wanted(getenv("KILN_NHWC"), opts->run_passes || opts->layout_nhwc))
            st = build_pass_layout_nhwc_backend(model, be, s->bctx, NULL, err);
        fb = rt_backend_cpu();
        rt_backend_options fo = {opts->threads, 0, false, false, 0};
        if (st == KILN_OK) st = fb->create(&fo, &s->fbctx, err);
    }
    /* one device copy of the weights for every session of this model on this device (the
     * contexts of an engine): kernels only read them (weight_share.h) */
    if (st == KILN_OK && be->location != RT_MEM_HOST && !opts->no_weight_share)
        st = rt_weight_share_acquire(model, be, bo.device, opts->fp16 ? 1u : 0u, &s->weights, err);
    if (st == KILN_OK) {
        rt_exec_options eo = {opts->check_nan, opts->profile, opts->max_live_bytes, opts->record_sizes, fb, s->fbctx,
                              !opts->no_device_graph, s->weights};
        st = rt_executor_create(model, be, s->bctx, &eo, &s->ex, err);
    }
    if (st == KILN_OK && !opts->quiet_fallback && rt_executor_fallback_report(s->ex))
        fprintf(stderr, "warning: %s%s\n", rt_executor_fallback_report(s->ex),
                rt_executor_device_graph_host_nodes(s->ex) == rt_executor_n_fallback(s->ex)
                    ? " (all depend only on input shapes: evaluated once per input shape, CUDA graphs still "
                      "record the rest)"
                    : "");
    if (st != KILN_OK) {
        rt_session_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

void rt_session_free(rt_session *s) {
    if (!s) return;
    rt_executor_free(s->ex);
    /* the last session of the model frees the shared weights, through its live context */
    if (s->weights) rt_weight_share_drop(s->weights, s->be, s->bctx);
    if (s->bctx) s->be->destroy(s->bctx);
    if (s->fbctx) rt_backend_cpu()->destroy(s->fbctx);
    free(s);
}

int32_t rt_session_n_outputs(const rt_session *s) { return s->model->graph->n_outputs; }
const char *rt_session_output_name(const rt_session *s, int32_t i) {
    const ir_graph *g = s->model->graph;
    return (i >= 0 && i < g->n_outputs && g->outputs[i] >= 0) ? g->values[g->outputs[i]].name : "";
}
rt_executor *rt_session_executor(rt_session *s) { return s->ex; }
const rt_backend *rt_session_backend(const rt_session *s) { return s->be; }
void *rt_session_backend_ctx(const rt_session *s) { return s->bctx; }
const ir_model *rt_session_model(const rt_session *s) { return s->model; }

/* ---- input checks -------------------------------------------------------------------- */

static void list_inputs(strbuf *sb, ir_model *m, const ir_graph *g, const bool *is_init) {
    int shown = 0;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t id = g->inputs[i];
        if (id < 0 || is_init[i]) continue;
        sb_printf(sb, "%s'%s' %s", shown++ ? ", " : "", g->values[id].name, ir_type_str(m, &g->values[id].type));
    }
    if (!shown) sb_append(sb, "(none)");
}

static const char *kind_name(ir_type_kind k) {
    switch (k) {
    case IR_TYPE_TENSOR: return "a tensor";
    case IR_TYPE_SEQUENCE: return "a sequence";
    case IR_TYPE_OPTIONAL: return "an optional";
    case IR_TYPE_MAP: return "a map";
    case IR_TYPE_SPARSE_TENSOR: return "a sparse tensor";
    default: return "an empty value";
    }
}

typedef struct sym_binding {
    int64_t value;
    const char *input;
    int32_t axis;
} sym_binding;

static kiln_status check_tensor(ir_model *m, const char *name, const ir_type *decl, const rt_tensor *t,
                                sym_binding *syms, kiln_error *err) {
    char given[512];
    rt_tensor_desc(t, given, sizeof given);
    if (decl->dtype != KILN_DTYPE_UNDEFINED && decl->dtype != t->dtype)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "input '%s' has dtype %s but the model declares %s (%s)",
                            name, kiln_dtype_name(t->dtype), kiln_dtype_name(decl->dtype), ir_type_str(m, decl));
    if (decl->rank < 0) return KILN_OK;
    if (decl->rank != t->rank)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "input '%s' has rank %d (%s) but the model declares rank %d (%s)",
                            name, (int)t->rank, given, (int)decl->rank, ir_type_str(m, decl));
    for (int32_t a = 0; a < decl->rank; a++) {
        const ir_dim *d = &decl->dims[a];
        if (d->kind == IR_DIM_CONST && d->value != t->dims[a])
            return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                                "input '%s' axis %d is %" PRId64 " but the model fixes it to %" PRId64
                                " (model: %s, given: %s)",
                                name, (int)a, t->dims[a], d->value, ir_type_str(m, decl), given);
        if (d->kind == IR_DIM_SYM && d->sym >= 0 && d->sym < m->n_syms && m->syms[d->sym].op == IR_SYM_LEAF) {
            sym_binding *b = &syms[d->sym];
            if (!b->input) {
                b->input = name;
                b->axis = a;
                b->value = t->dims[a];
            } else if (b->value != t->dims[a]) {
                return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                                    "input '%s' axis %d is %" PRId64 ", but it is the model's dim '%s', which input "
                                    "'%s' axis %d set to %" PRId64 "\nhint: inputs that share a dim name must agree",
                                    name, (int)a, t->dims[a], m->syms[d->sym].name, b->input, (int)b->axis, b->value);
            }
        }
    }
    return KILN_OK;
}

static kiln_status check_value(ir_model *m, const char *name, const ir_type *decl, const rt_value *v,
                               sym_binding *syms, kiln_error *err) {
    if (decl->kind == IR_TYPE_UNKNOWN) return KILN_OK;
    if (decl->kind != v->kind)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "input '%s' is %s but the model declares %s (%s)", name,
                            kind_name(v->kind), kind_name(decl->kind), ir_type_str(m, decl));
    if (decl->kind == IR_TYPE_TENSOR) return check_tensor(m, name, decl, &v->t, syms, err);
    if (decl->kind == IR_TYPE_OPTIONAL && v->has_value && decl->elem && decl->elem->kind == IR_TYPE_TENSOR &&
        v->elem_kind != IR_TYPE_SEQUENCE)
        return check_tensor(m, name, decl->elem, &v->t, syms, err);
    return KILN_OK;
}

kiln_status rt_session_run(rt_session *s, const char *const *names, const rt_value *const *inputs, int32_t n,
                           rt_value *outputs, kiln_error *err) {
    ir_model *m = s->model;
    const ir_graph *g = m->graph;
    size_t ni = (size_t)g->n_inputs + 1;
    const rt_value **bound = calloc(ni, sizeof *bound);
    bool *is_init = calloc(ni, sizeof *is_init);
    sym_binding *syms = calloc((size_t)m->n_syms + 1, sizeof *syms);
    kiln_status st = KILN_OK;
    if (!bound || !is_init || !syms) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t id = g->inputs[i];
        is_init[i] = id >= 0 && g->values[id].init != NULL;
    }
    for (int32_t k = 0; k < n && st == KILN_OK; k++) {
        int32_t pos = -1;
        for (int32_t i = 0; i < g->n_inputs; i++)
            if (g->inputs[i] >= 0 && !strcmp(g->values[g->inputs[i]].name, names[k])) pos = i;
        if (pos < 0) {
            strbuf sb;
            sb_init(&sb);
            list_inputs(&sb, m, g, is_init);
            st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "the model has no input named '%s'; its inputs are: %s",
                              names[k], sb_cstr(&sb));
            sb_free(&sb);
            break;
        }
        if (bound[pos]) {
            st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "input '%s' was given twice", names[k]);
            break;
        }
        bound[pos] = inputs[k];
        st = check_value(m, names[k], &g->values[g->inputs[pos]].type, inputs[k], syms, err);
    }
    for (int32_t i = 0; i < g->n_inputs && st == KILN_OK; i++) {
        if (bound[i] || is_init[i] || g->inputs[i] < 0) continue;
        strbuf sb;
        sb_init(&sb);
        list_inputs(&sb, m, g, is_init);
        const ir_value *v = &g->values[g->inputs[i]];
        st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "missing input '%s' (%s); the model's inputs are: %s", v->name,
                          ir_type_str(m, &v->type), sb_cstr(&sb));
        sb_free(&sb);
    }
    if (st == KILN_OK) {
        uint64_t prev = rt_tensor_alloc_limit();
        if (s->opts.max_tensor_bytes) rt_tensor_set_alloc_limit(s->opts.max_tensor_bytes);
        st = rt_executor_run(s->ex, bound, outputs, err);
        rt_tensor_set_alloc_limit(prev);
    }
done:
    free(bound);
    free(is_init);
    free(syms);
    return st;
}
