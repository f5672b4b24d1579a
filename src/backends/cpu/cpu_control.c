/* cpu_control.c - control flow kernels: If, Loop, Scan.
 *
 * They run their bodies through ctx->run_subgraph, which the executor implements with
 * the enclosing graphs' values visible, so these kernels only move values in and out
 * of bodies: pick a branch (If), carry loop state and stack per-iteration outputs
 * (Loop), slice inputs along an axis and stack outputs (Scan).
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_axis_copy.h"
#include "backends/cpu/cpu_kernel.h"

static const ir_graph *graph_attr(const ir_node *n, const char *name) {
    const ir_attr *a = ir_node_attr(n, name);
    return (a && a->type == IR_ATTR_GRAPH) ? a->g : NULL;
}

static kiln_status scalar_bool(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, bool *out) {
    if (!t || t->count != 1 || !t->data)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s must hold exactly one element", what);
    switch (t->dtype) {
    case KILN_DTYPE_BOOL:
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_INT8: *out = *(const uint8_t *)t->data != 0; return KILN_OK;
    default: return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s must be bool, not %s", what, kiln_dtype_name(t->dtype));
    }
}

static kiln_status scalar_i64(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, int64_t *out) {
    if (!t || t->count != 1 || !t->data)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s must hold exactly one element", what);
    if (t->dtype == KILN_DTYPE_INT64) *out = *(const int64_t *)t->data;
    else if (t->dtype == KILN_DTYPE_INT32) *out = *(const int32_t *)t->data;
    else return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s must be int64, not %s", what, kiln_dtype_name(t->dtype));
    return KILN_OK;
}

/* ---- If ------------------------------------------------------------------------------ */

kiln_status cpu_if(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                   int32_t n_out) {
    bool c = false;
    kiln_status st = scalar_bool(ctx, cpu_in(inputs, n_in, 0), "the condition", &c);
    if (st != KILN_OK) return st;
    const char *which = c ? "then_branch" : "else_branch";
    const ir_graph *body = graph_attr(ctx->node, which);
    if (!body) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute '%s' (a graph) is missing", which);
    if (body->n_outputs != n_out)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "%s has %d outputs but the node has %d", which,
                               (int)body->n_outputs, (int)n_out);
    return ctx->run_subgraph(ctx, body, NULL, 0, outputs, n_out);
}

/* ---- Loop ---------------------------------------------------------------------------- */

typedef struct tensor_list {
    rt_tensor *v;
    int64_t n, cap;
} tensor_list;

static kiln_status list_push(cpu_kernel_ctx *ctx, tensor_list *l, rt_tensor *t) {
    if (l->n == l->cap) {
        int64_t nc = l->cap ? l->cap * 2 : 8;
        rt_tensor *nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory collecting scan outputs");
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = *t; /* moved */
    memset(t, 0, sizeof *t);
    return KILN_OK;
}

static void list_free(tensor_list *l) {
    for (int64_t i = 0; i < l->n; i++) rt_tensor_release(&l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Stacks the collected per-iteration tensors along `axis` (new axis) into out. With no
 * iterations, builds an empty tensor from the body's declared type. */
static kiln_status stack_list(cpu_kernel_ctx *ctx, tensor_list *l, const ir_value *decl, int32_t axis, bool reverse,
                              rt_tensor *out) {
    if (l->n == 0) {
        kiln_dtype dt = decl->type.dtype != KILN_DTYPE_UNDEFINED ? decl->type.dtype : KILN_DTYPE_FLOAT;
        int64_t dims[RT_MAX_RANK];
        int32_t rank = 1;
        dims[0] = 0;
        if (decl->type.kind == IR_TYPE_TENSOR && decl->type.rank >= 0 && decl->type.rank < RT_MAX_RANK) {
            rank = decl->type.rank + 1;
            for (int32_t i = 0, j = 0; i < rank; i++) {
                if (i == axis) dims[i] = 0;
                else {
                    const ir_dim *d = &decl->type.dims[j++];
                    dims[i] = d->kind == IR_DIM_CONST ? d->value : 0;
                }
            }
        }
        return rt_tensor_alloc(out, dt, rank, dims, ctx->err);
    }
    const rt_tensor **parts = malloc((size_t)l->n * sizeof *parts);
    if (!parts) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory stacking scan outputs");
    for (int64_t i = 0; i < l->n; i++) parts[i] = &l->v[i];
    if (l->n > INT32_MAX) {
        free(parts);
        return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "too many iterations to stack");
    }
    kiln_error e = {0};
    kiln_status st = cpu_concat_axis(out, parts, (int32_t)l->n, axis, true, reverse, &e);
    free(parts);
    if (st != KILN_OK) {
        cpu_kernel_fail(ctx, st, "stacking per-iteration output '%s': %s", decl->name, kiln_err_msg(&e));
        kiln_err_clear(&e);
    }
    return st;
}

kiln_status cpu_loop(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    const ir_graph *body = graph_attr(ctx->node, "body");
    if (!body) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'body' (a graph) is missing");
    int32_t n_carried = n_in - 2;
    if (n_carried < 0) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "Loop needs at least 2 inputs (M, cond)");
    int32_t n_scan = body->n_outputs - 1 - n_carried;
    if (body->n_inputs != n_carried + 2 || n_scan < 0 || n_out != n_carried + n_scan)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                               "the body takes %d inputs and has %d outputs, which does not fit %d loop-carried "
                               "values and %d node outputs",
                               (int)body->n_inputs, (int)body->n_outputs, (int)n_carried, (int)n_out);
    int64_t max_trip = INT64_MAX;
    bool have_m = inputs[0] != NULL, have_cond = n_in > 1 && inputs[1] != NULL, cond = true;
    kiln_status st = KILN_OK;
    if (have_m && (st = scalar_i64(ctx, cpu_in(inputs, n_in, 0), "the trip count M", &max_trip)) != KILN_OK) return st;
    if (have_cond && (st = scalar_bool(ctx, cpu_in(inputs, n_in, 1), "the condition", &cond)) != KILN_OK) return st;
    if (!have_m && !have_cond)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED,
                               "neither a trip count nor a condition is given: the loop would never end");

    /* body inputs: [iter_num, cond, carried...] ; body outputs: [cond, carried..., scans...] */
    rt_value *bin = calloc((size_t)n_carried + 2, sizeof *bin);
    rt_value *bout = calloc((size_t)body->n_outputs + 1, sizeof *bout);
    tensor_list *scans = calloc((size_t)n_scan + 1, sizeof *scans);
    if (!bin || !bout || !scans) {
        free(bin), free(bout), free(scans);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory running a Loop");
    }
    for (int32_t k = 0; k < n_carried && st == KILN_OK; k++) {
        if (!inputs[k + 2]) {
            st = cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "loop-carried input %d is empty", (int)k);
            break;
        }
        st = rt_value_copy(&bin[k + 2], inputs[k + 2], ctx->err);
    }
    int64_t zero = 0;
    for (int64_t it = 0; st == KILN_OK && it < max_trip && cond; it++) {
        rt_tensor *ti = rt_value_as_tensor(&bin[0]);
        if ((st = rt_tensor_alloc(ti, KILN_DTYPE_INT64, 0, &zero, ctx->err)) != KILN_OK) break;
        *(int64_t *)ti->data = it;
        rt_tensor *tc = rt_value_as_tensor(&bin[1]);
        if ((st = rt_tensor_alloc(tc, KILN_DTYPE_BOOL, 0, &zero, ctx->err)) != KILN_OK) break;
        *(uint8_t *)tc->data = cond;
        st = ctx->run_subgraph(ctx, body, bin, n_carried + 2, bout, body->n_outputs);
        if (st != KILN_OK) break;
        if (have_cond) {
            bool c2 = false;
            if ((st = scalar_bool(ctx, bout[0].kind == IR_TYPE_TENSOR ? &bout[0].t : NULL,
                                  "the body's condition output", &c2)) != KILN_OK)
                break;
            cond = c2;
        }
        for (int32_t k = 0; k < n_carried; k++) {
            rt_value_release(&bin[k + 2]);
            bin[k + 2] = bout[1 + k];
            rt_value_init(&bout[1 + k]);
        }
        for (int32_t k = 0; k < n_scan && st == KILN_OK; k++) {
            rt_value *sv = &bout[1 + n_carried + k];
            if (sv->kind != IR_TYPE_TENSOR) {
                st = cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "scan output %d of the body is not a tensor", (int)k);
                break;
            }
            st = list_push(ctx, &scans[k], &sv->t);
        }
        for (int32_t k = 0; k < body->n_outputs; k++) rt_value_release(&bout[k]);
    }
    for (int32_t k = 0; k < n_carried && st == KILN_OK; k++) {
        outputs[k] = bin[k + 2];
        rt_value_init(&bin[k + 2]);
    }
    for (int32_t k = 0; k < n_scan && st == KILN_OK; k++) {
        const ir_value *decl = &body->values[body->outputs[1 + n_carried + k]];
        st = stack_list(ctx, &scans[k], decl, 0, false, rt_value_as_tensor(&outputs[n_carried + k]));
    }
    for (int32_t k = 0; k < n_carried + 2; k++) rt_value_release(&bin[k]);
    for (int32_t k = 0; k < body->n_outputs; k++) rt_value_release(&bout[k]);
    for (int32_t k = 0; k < n_scan; k++) list_free(&scans[k]);
    free(bin), free(bout), free(scans);
    return st;
}

/* ---- Scan ---------------------------------------------------------------------------- */

typedef struct scan_spec {
    int32_t n_state, n_scan_in, n_scan_out;
    const int64_t *in_dir, *out_dir, *in_axes, *out_axes; /* may be NULL */
    int32_t n_in_dir, n_out_dir, n_in_axes, n_out_axes;
} scan_spec;

static int64_t attr_at(const int64_t *a, int32_t n, int32_t i, int64_t dflt) { return (a && i < n) ? a[i] : dflt; }

/* One Scan (opset 9 semantics) over states[n_state] and scan inputs[n_scan_in];
 * outputs get n_state final states then n_scan_out stacked outputs. */
static kiln_status scan_core(cpu_kernel_ctx *ctx, const ir_graph *body, const scan_spec *sp,
                             const rt_value *const *states, const rt_tensor *const *xs, rt_value *outputs) {
    int32_t ns = sp->n_state, m = sp->n_scan_in, k_out = sp->n_scan_out;
    int64_t seq = -1;
    int32_t *axes = calloc((size_t)m + 1, sizeof *axes);
    if (!axes) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
    for (int32_t j = 0; j < m; j++) {
        int64_t ax = attr_at(sp->in_axes, sp->n_in_axes, j, 0);
        if (!cpu_norm_axis(ax, xs[j]->rank, &axes[j])) {
            free(axes);
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "scan_input_axes[%d] = %lld is out of range for rank %d",
                                   (int)j, (long long)ax, (int)xs[j]->rank);
        }
        int64_t len = xs[j]->dims[axes[j]];
        if (seq >= 0 && len != seq) {
            free(axes);
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "scan input %d has %lld steps but scan input 0 has %lld",
                                   (int)j, (long long)len, (long long)seq);
        }
        seq = len;
    }
    if (seq < 0) seq = 0;
    rt_value *bin = calloc((size_t)(ns + m) + 1, sizeof *bin);
    rt_value *bout = calloc((size_t)body->n_outputs + 1, sizeof *bout);
    tensor_list *lists = calloc((size_t)k_out + 1, sizeof *lists);
    if (!bin || !bout || !lists) {
        free(axes), free(bin), free(bout), free(lists);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory running a Scan");
    }
    for (int32_t i = 0; i < ns && st == KILN_OK; i++) st = rt_value_copy(&bin[i], states[i], ctx->err);
    for (int64_t t = 0; t < seq && st == KILN_OK; t++) {
        for (int32_t j = 0; j < m && st == KILN_OK; j++) {
            int64_t pos = attr_at(sp->in_dir, sp->n_in_dir, j, 0) ? seq - 1 - t : t;
            st = cpu_slice_axis(rt_value_as_tensor(&bin[ns + j]), xs[j], axes[j], pos, 1, false, ctx->err);
        }
        if (st != KILN_OK) break;
        st = ctx->run_subgraph(ctx, body, bin, ns + m, bout, body->n_outputs);
        if (st != KILN_OK) break;
        for (int32_t i = 0; i < ns; i++) {
            rt_value_release(&bin[i]);
            bin[i] = bout[i];
            rt_value_init(&bout[i]);
        }
        for (int32_t k = 0; k < k_out && st == KILN_OK; k++) {
            if (bout[ns + k].kind != IR_TYPE_TENSOR)
                st = cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "scan output %d of the body is not a tensor", (int)k);
            else st = list_push(ctx, &lists[k], &bout[ns + k].t);
        }
        for (int32_t k = 0; k < body->n_outputs; k++) rt_value_release(&bout[k]);
    }
    for (int32_t i = 0; i < ns && st == KILN_OK; i++) {
        outputs[i] = bin[i];
        rt_value_init(&bin[i]);
    }
    for (int32_t k = 0; k < k_out && st == KILN_OK; k++) {
        const ir_value *decl = &body->values[body->outputs[ns + k]];
        int32_t rank = lists[k].n ? lists[k].v[0].rank + 1 : (decl->type.rank >= 0 ? decl->type.rank + 1 : 1);
        int64_t ax = attr_at(sp->out_axes, sp->n_out_axes, k, 0);
        int32_t axis;
        if (!cpu_norm_axis(ax, rank, &axis)) {
            st = cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "scan_output_axes[%d] = %lld is out of range for rank %d",
                                 (int)k, (long long)ax, (int)rank);
            break;
        }
        bool rev = attr_at(sp->out_dir, sp->n_out_dir, k, 0) != 0;
        st = stack_list(ctx, &lists[k], decl, axis, rev, rt_value_as_tensor(&outputs[ns + k]));
    }
    for (int32_t i = 0; i < ns + m; i++) rt_value_release(&bin[i]);
    for (int32_t k = 0; k < body->n_outputs; k++) rt_value_release(&bout[k]);
    for (int32_t k = 0; k < k_out; k++) list_free(&lists[k]);
    free(axes), free(bin), free(bout), free(lists);
    return st;
}

static void ints_attr(const ir_node *n, const char *name, const int64_t **v, int32_t *cnt) {
    const ir_attr *a = ir_node_attr(n, name);
    *v = (a && a->type == IR_ATTR_INTS) ? a->ints : NULL;
    *cnt = (a && a->type == IR_ATTR_INTS) ? a->n : 0;
}

static kiln_status scan_setup(cpu_kernel_ctx *ctx, int32_t n_in_vars, int32_t n_out, const ir_graph **body,
                              scan_spec *sp, const char *dir_attr) {
    *body = graph_attr(ctx->node, "body");
    if (!*body) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'body' (a graph) is missing");
    int64_t m = ir_node_attr_int(ctx->node, "num_scan_inputs", -1);
    if (m < 0 || m > n_in_vars)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "num_scan_inputs = %lld does not fit %d inputs",
                               (long long)m, (int)n_in_vars);
    memset(sp, 0, sizeof *sp);
    sp->n_scan_in = (int32_t)m;
    sp->n_state = n_in_vars - sp->n_scan_in;
    sp->n_scan_out = n_out - sp->n_state;
    if (sp->n_scan_out < 0 || (*body)->n_inputs != n_in_vars || (*body)->n_outputs != n_out)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                               "the body takes %d inputs and has %d outputs; the node has %d inputs and %d outputs",
                               (int)(*body)->n_inputs, (int)(*body)->n_outputs, (int)n_in_vars, (int)n_out);
    ints_attr(ctx->node, dir_attr, &sp->in_dir, &sp->n_in_dir);
    ints_attr(ctx->node, "scan_output_directions", &sp->out_dir, &sp->n_out_dir);
    ints_attr(ctx->node, "scan_input_axes", &sp->in_axes, &sp->n_in_axes);
    ints_attr(ctx->node, "scan_output_axes", &sp->out_axes, &sp->n_out_axes);
    return KILN_OK;
}

kiln_status cpu_scan(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    const ir_graph *body;
    scan_spec sp;
    kiln_status st = scan_setup(ctx, n_in, n_out, &body, &sp, "scan_input_directions");
    if (st != KILN_OK) return st;
    const rt_tensor *xs[64];
    if (sp.n_scan_in > 64) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "more than 64 scan inputs");
    for (int32_t j = 0; j < sp.n_scan_in; j++) {
        xs[j] = cpu_in(inputs, n_in, sp.n_state + j);
        if (!xs[j]) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "scan input %d is not a tensor", (int)j);
    }
    for (int32_t i = 0; i < sp.n_state; i++)
        if (!inputs[i]) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "state input %d is empty", (int)i);
    return scan_core(ctx, body, &sp, inputs, xs, outputs);
}

/* Scan-8: a leading batch axis on every input and output, an optional sequence_lens
 * first input, and scan along axis 1. Runs Scan-9 semantics once per batch entry. */
kiln_status cpu_scan8(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                      int32_t n_out) {
    const ir_graph *body;
    scan_spec sp;
    kiln_status st = scan_setup(ctx, n_in - 1, n_out, &body, &sp, "directions");
    if (st != KILN_OK) return st;
    int32_t ns = sp.n_state, m = sp.n_scan_in, nv = n_in - 1;
    if (nv > 64) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "more than 64 inputs");
    int64_t batch = -1;
    for (int32_t i = 0; i < nv; i++) {
        const rt_tensor *t = cpu_in(inputs, n_in, 1 + i);
        if (!t || t->rank < 1) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input %d needs a batch axis", (int)i + 1);
        if (batch >= 0 && t->dims[0] != batch)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "inputs disagree on the batch size");
        batch = t->dims[0];
    }
    const rt_tensor *lens = cpu_in(inputs, n_in, 0);
    if (lens && lens->dtype == KILN_DTYPE_INT64 && m > 0) {
        int64_t full = cpu_in(inputs, n_in, 1 + ns)->dims[1];
        for (uint64_t b = 0; b < lens->count; b++)
            if (((const int64_t *)lens->data)[b] != full)
                return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "sequence_lens shorter than the scan axis");
    }
    if (batch < 0) batch = 0;
    /* Scan-8 scans along axis 1 of the batched input = axis 0 of each batch slice. */
    rt_value slices[64];
    const rt_value *sp_states[64];
    const rt_tensor *xs[64];
    tensor_list *per_out = calloc((size_t)n_out + 1, sizeof *per_out);
    rt_value *outs = calloc((size_t)n_out + 1, sizeof *outs);
    if (!per_out || !outs) {
        free(per_out), free(outs);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    memset(slices, 0, sizeof slices);
    for (int64_t b = 0; b < batch && st == KILN_OK; b++) {
        for (int32_t i = 0; i < nv && st == KILN_OK; i++)
            st = cpu_slice_axis(rt_value_as_tensor(&slices[i]), cpu_in(inputs, n_in, 1 + i), 0, b, 1, false, ctx->err);
        if (st != KILN_OK) break;
        for (int32_t i = 0; i < ns; i++) sp_states[i] = &slices[i];
        for (int32_t j = 0; j < m; j++) xs[j] = &slices[ns + j].t;
        st = scan_core(ctx, body, &sp, sp_states, xs, outs);
        for (int32_t k = 0; k < n_out && st == KILN_OK; k++) st = list_push(ctx, &per_out[k], &outs[k].t);
        for (int32_t k = 0; k < n_out; k++) rt_value_release(&outs[k]);
    }
    for (int32_t k = 0; k < n_out && st == KILN_OK; k++)
        st = stack_list(ctx, &per_out[k], &body->values[body->outputs[k]], 0, false, rt_value_as_tensor(&outputs[k]));
    for (int32_t i = 0; i < nv; i++) rt_value_release(&slices[i]);
    for (int32_t k = 0; k < n_out; k++) list_free(&per_out[k]);
    free(per_out), free(outs);
    return st;
}
