/* weights_check.c - value and liveness checks on weights and nodes (weights_check.h).
 *
 * Value scans read tensor bytes with memcpy: mapped model files give no alignment
 * guarantee. They cover the float types a model stores weights in (float32, float64,
 * float16, bfloat16); integer tensors cannot hold NaN and are not converted by --fp16.
 */
#include "build/weights_check.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/hashmap.h"
#include "core/strbuf.h"
#include "onnx/onnx_load.h"

#define FP16_MAX 65504.0

/* "1.5 MiB" */
static const char *human_bytes(arena *a, uint64_t n) {
    if (n < 1024) return arena_printf(a, "%" PRIu64 " B", n);
    if (n < 1024 * 1024) return arena_printf(a, "%.1f KiB", (double)n / 1024.0);
    if (n < 1024ull * 1024 * 1024) return arena_printf(a, "%.1f MiB", (double)n / (1024.0 * 1024.0));
    return arena_printf(a, "%.2f GiB", (double)n / (1024.0 * 1024.0 * 1024.0));
}

/* "[2, 17]": the multi-index of flat index i in a tensor of these dims */
static const char *multi_index(arena *a, const ir_tensor *t, uint64_t i) {
    if (t->rank <= 0) return "[]";
    uint64_t idx[IR_MAX_RANK];
    for (int32_t d = t->rank - 1; d >= 0; d--) {
        uint64_t n = t->dims[d] > 0 ? (uint64_t)t->dims[d] : 1;
        idx[d] = i % n;
        i /= n;
    }
    strbuf sb;
    sb_init(&sb);
    sb_putc(&sb, '[');
    for (int32_t d = 0; d < t->rank; d++) sb_printf(&sb, d ? ", %" PRIu64 : "%" PRIu64, idx[d]);
    sb_putc(&sb, ']');
    const char *r = arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "";
}

static const char *tensor_type_str(arena *a, const ir_tensor *t) {
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "%s[", kiln_dtype_name(t->dtype));
    for (int32_t d = 0; d < t->rank; d++) sb_printf(&sb, d ? ", %" PRId64 : "%" PRId64, t->dims[d]);
    sb_putc(&sb, ']');
    const char *r = arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "";
}

typedef struct value_stats {
    uint64_t n_nan, n_inf, first_bad;
    uint64_t n_over, n_under; /* fp16: |v| > 65504, non-zero values that become 0 */
    double max_abs;
    uint64_t first_over;
} value_stats;

static double read_elem(const unsigned char *p, kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case KILN_DTYPE_DOUBLE: {
        double x;
        memcpy(&x, p, 8);
        return x;
    }
    case KILN_DTYPE_FLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return kiln_fp16_to_fp32(h);
    }
    default: {
        uint16_t b;
        memcpy(&b, p, 2);
        return kiln_bf16_to_fp32(b);
    }
    }
}

/* True when a float32 tensor has any NaN/Inf. The common case (all finite) must be fast:
 * multi-GB models are checked in full, so this works on exponent bits in blocks the
 * compiler vectorises, and the per-element scan below runs only when something is found. */
static bool f32_any_nonfinite(const unsigned char *p, uint64_t count) {
    uint32_t buf[1024];
    while (count) {
        size_t n = count < 1024 ? (size_t)count : 1024;
        memcpy(buf, p, n * 4);
        uint32_t bad = 0;
        for (size_t i = 0; i < n; i++) bad |= ((buf[i] & 0x7f800000u) == 0x7f800000u);
        if (bad) return true;
        p += n * 4;
        count -= n;
    }
    return false;
}

static void scan(const ir_tensor *t, bool fp16, value_stats *st) {
    memset(st, 0, sizeof *st);
    st->first_bad = UINT64_MAX;
    st->first_over = UINT64_MAX;
    if (t->dtype == KILN_DTYPE_FLOAT && !fp16 && !f32_any_nonfinite(t->data, t->count)) return;
    size_t esz = (size_t)kiln_dtype_bits(t->dtype) / 8;
    const unsigned char *p = t->data;
    /* only float32/float64 change when converted to fp16 */
    bool range = fp16 && (t->dtype == KILN_DTYPE_FLOAT || t->dtype == KILN_DTYPE_DOUBLE);
    for (uint64_t i = 0; i < t->count; i++, p += esz) {
        double v = read_elem(p, t->dtype);
        if (isnan(v) || isinf(v)) {
            if (isnan(v))
                st->n_nan++;
            else
                st->n_inf++;
            if (st->first_bad == UINT64_MAX) st->first_bad = i;
            continue;
        }
        if (!range) continue;
        double av = fabs(v);
        if (av > st->max_abs) st->max_abs = av;
        if (av > FP16_MAX) {
            st->n_over++;
            if (st->first_over == UINT64_MAX) st->first_over = i;
        } else if (v != 0.0 && (kiln_fp32_to_fp16((float)v) & 0x7fffu) == 0) {
            st->n_under++;
        }
    }
}

/* "used by node 'fc' (Gemm) input 1" for the first consumer, for orientation */
static void fact_consumer(diag_list *diags, diag *d, const ir_graph *g, const char *name) {
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const ir_node *nd = &g->nodes[n];
        for (int32_t k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] != IR_NONE && !strcmp(ir_val(g, nd->inputs[k])->name, name)) {
                diag_fact(diags, d, "used by node '%s' (%s) input %d", nd->name, nd->op_type, k);
                return;
            }
    }
}

static void check_tensor(ir_model *m, const ir_graph *g, ir_tensor *t, const char *what, const char *name,
                         const build_weights_options *o, diag_list *diags) {
    if (t->dtype != KILN_DTYPE_FLOAT && t->dtype != KILN_DTYPE_DOUBLE && t->dtype != KILN_DTYPE_FLOAT16 &&
        t->dtype != KILN_DTYPE_BFLOAT16)
        return;
    if (!t->count) return;
    if (t->where == IR_DATA_EXTERNAL && !t->data) {
        kiln_error e = {0};
        if (onnx_tensor_load_external(m, t, &e) != KILN_OK || !t->data) {
            diag *d = diag_add(diags, DIAG_NOTE, "weights-not-loaded", NULL, NULL,
                               "%s '%s': its external data could not be loaded, so its values were not checked", what,
                               name);
            diag_fact(diags, d, "%s", kiln_err_msg(&e)[0] ? kiln_err_msg(&e) : "no data");
            if (t->ext_location) diag_fact(diags, d, "external file '%s'", t->ext_location);
            diag_hint(diags, d, "put the external data file next to the model (paths are relative to its folder)");
            kiln_err_clear(&e);
            return;
        }
    }
    uint64_t need;
    if (!t->data || !kiln_dtype_nbytes(t->dtype, t->count, &need) || t->nbytes < need) return;
    value_stats st;
    scan(t, o && o->fp16, &st);
    arena *a = &diags->arena;
    if (st.n_nan || st.n_inf) {
        /* NaN is always a defect; infinities alone are usually an intentional -inf mask
         * fill (exported attention masks), so they are a warning */
        diag_severity sev = st.n_nan ? DIAG_ERROR : DIAG_WARNING;
        diag *d;
        if (st.n_nan && st.n_inf)
            d = diag_add(diags, sev, "weights-nan-inf", NULL, NULL,
                         "%s '%s' has %" PRIu64 " NaN and %" PRIu64 " infinite values of %" PRIu64
                         " (first at index %" PRIu64 ")",
                         what, name, st.n_nan, st.n_inf, t->count, st.first_bad);
        else
            d = diag_add(diags, sev, "weights-nan-inf", NULL, NULL,
                         "%s '%s' has %" PRIu64 " %s value%s of %" PRIu64 " (first at index %" PRIu64 ")", what, name,
                         st.n_nan ? st.n_nan : st.n_inf, st.n_nan ? "NaN" : "infinite",
                         (st.n_nan ? st.n_nan : st.n_inf) == 1 ? "" : "s", t->count, st.first_bad);
        diag_fact(diags, d, "'%s' is %s; the first bad value is at %s", name, tensor_type_str(a, t),
                  multi_index(a, t, st.first_bad));
        fact_consumer(diags, d, g, name);
        if (st.n_nan)
            diag_hint(diags, d, "re-export from a healthy checkpoint (check it with torch.isfinite(param).all()); "
                                "replace intentional -inf masks with a large finite negative such as -1e4");
        else
            diag_hint(diags, d, "fine if this is an intentional -inf mask fill; otherwise re-export from a healthy "
                                "checkpoint. With --fp16, prefer a finite fill such as -1e4 (inf - inf gives NaN)");
    }
    if (st.n_over) {
        diag *d = diag_add(diags, DIAG_ERROR, "weights-fp16-range", NULL, NULL,
                           "%s '%s' has %" PRIu64 " value%s outside the float16 range (largest magnitude %g > 65504)",
                           what, name, st.n_over, st.n_over == 1 ? "" : "s", st.max_abs);
        diag_fact(diags, d, "'%s' is %s; the first is at %s; with --fp16 these become +/-inf", name,
                  tensor_type_str(a, t), multi_index(a, t, st.first_over));
        if (st.n_under)
            diag_fact(diags, d, "%" PRIu64 " non-zero value%s also become%s 0 in float16", st.n_under,
                      st.n_under == 1 ? "" : "s", st.n_under == 1 ? "s" : "");
        fact_consumer(diags, d, g, name);
        diag_hint(diags, d, "keep the layers using '%s' in float32, rescale the weights, or replace huge fill "
                            "values (e.g. -1e9 masks) with -1e4", name);
    } else if (st.n_under) {
        diag *d = diag_add(diags, DIAG_WARNING, "weights-fp16-underflow", NULL, NULL,
                           "%s '%s' has %" PRIu64 " of %" PRIu64 " non-zero values that become 0 in float16", what,
                           name, st.n_under, t->count);
        diag_fact(diags, d, "'%s' is %s; float16's smallest subnormal is about 6e-08", name, tensor_type_str(a, t));
        fact_consumer(diags, d, g, name);
        diag_hint(diags, d, "harmless for a few values; if many matter, keep this layer in float32");
    }
}

kiln_status build_check_weight_values(ir_model *m, const build_weights_options *o, diag_list *diags,
                                      kiln_error *err) {
    for (int32_t gi = 0; gi < m->n_graphs; gi++) {
        const ir_graph *g = m->graphs[gi];
        for (int32_t i = 0; i < g->n_initializers; i++) {
            ir_value *v = ir_val(g, g->initializers[i]);
            if (v->init) check_tensor(m, g, v->init, "initializer", v->name, o, diags);
        }
        /* Constant nodes hold weights too (attention masks are often exported so) */
        for (int32_t n = 0; n < g->n_nodes; n++) {
            const ir_node *nd = &g->nodes[n];
            if (strcmp(nd->op_type, "Constant") || nd->domain[0]) continue;
            const ir_attr *at = ir_node_attr(nd, "value");
            if (at && at->type == IR_ATTR_TENSOR && at->t) check_tensor(m, g, at->t, "Constant node", nd->name, o, diags);
        }
    }
    (void)err;
    return KILN_OK;
}

/* ---- unused initializers ------------------------------------------------------------- */

kiln_status build_check_unused_initializers(ir_model *m, diag_list *diags, kiln_error *err) {
    /* names are compared across graphs because subgraphs use outer initializers by name */
    hashmap used;
    hashmap_init(&used);
    for (int32_t gi = 0; gi < m->n_graphs; gi++) {
        const ir_graph *g = m->graphs[gi];
        for (int32_t n = 0; n < g->n_nodes; n++)
            for (int32_t k = 0; k < g->nodes[n].n_inputs; k++) {
                int32_t id = g->nodes[n].inputs[k];
                if (id != IR_NONE && !hashmap_put(&used, ir_val(g, id)->name, 1)) goto oom;
            }
        for (int32_t k = 0; k < g->n_outputs; k++)
            if (!hashmap_put(&used, ir_val(g, g->outputs[k])->name, 1)) goto oom;
    }
    for (int32_t gi = 0; gi < m->n_graphs; gi++) {
        const ir_graph *g = m->graphs[gi];
        int32_t n_unused = 0;
        uint64_t bytes = 0;
        const char *first = NULL;
        for (int32_t i = 0; i < g->n_initializers; i++) {
            const ir_value *v = ir_val(g, g->initializers[i]);
            int32_t dummy;
            if (hashmap_get(&used, v->name, &dummy)) continue;
            if (!first) first = v->name;
            n_unused++;
            if (v->init) bytes += v->init->nbytes;
        }
        if (!n_unused) continue;
        diag *d;
        if (n_unused == 1)
            d = diag_add(diags, DIAG_WARNING, "unused-initializer", NULL, NULL,
                         "initializer '%s' is not used by any node", first);
        else
            d = diag_add(diags, DIAG_WARNING, "unused-initializer", NULL, NULL,
                         "%d initializers are not used by any node (%s)", n_unused, human_bytes(&diags->arena, bytes));
        if (d && g->parent && g->location) d->graph = arena_strdup(&diags->arena, g->location);
        int32_t listed = 0;
        for (int32_t i = 0; i < g->n_initializers && listed < 20; i++) {
            const ir_value *v = ir_val(g, g->initializers[i]);
            int32_t dummy;
            if (hashmap_get(&used, v->name, &dummy)) continue;
            listed++;
            if (v->init)
                diag_fact(diags, d, "'%s' %s (%s)", v->name, tensor_type_str(&diags->arena, v->init),
                          human_bytes(&diags->arena, v->init->nbytes));
            else
                diag_fact(diags, d, "'%s'", v->name);
        }
        if (n_unused > listed) diag_fact(diags, d, "... and %d more", n_unused - listed);
        diag_hint(diags, d, "remove %s to shrink the file (onnx-graphsurgeon: graph.cleanup(); or onnxsim)",
                  n_unused == 1 ? "it" : "them");
    }
    hashmap_free(&used);
    return KILN_OK;
oom:
    hashmap_free(&used);
    return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory checking initializers");
}

/* ---- dead nodes -------------------------------------------------------------------- */

/* Pushes the ids (in g) of outer-scope names used by subgraphs of node nd, recursively. */
static bool push_outer_refs(const ir_graph *g, const ir_node *nd, int32_t **stack, int32_t *n, int32_t *cap,
                            int depth);

static bool push_id(int32_t **stack, int32_t *n, int32_t *cap, int32_t id) {
    if (*n == *cap) {
        int32_t ncap = *cap ? *cap * 2 : 64;
        int32_t *ns = realloc(*stack, sizeof *ns * (size_t)ncap);
        if (!ns) return false;
        *stack = ns;
        *cap = ncap;
    }
    (*stack)[(*n)++] = id;
    return true;
}

static bool push_graph_refs(const ir_graph *g, const ir_graph *sg, int32_t **stack, int32_t *n, int32_t *cap,
                            int depth) {
    if (depth > IR_MAX_GRAPH_DEPTH) return true;
    for (int32_t i = 0; i < sg->n_values; i++) {
        if (!(sg->values[i].flags & IR_VALUE_OUTER_SCOPE)) continue;
        int32_t id = ir_graph_find(g, sg->values[i].name);
        if (id != IR_NONE && !push_id(stack, n, cap, id)) return false;
    }
    for (int32_t k = 0; k < sg->n_nodes; k++)
        if (!push_outer_refs(g, &sg->nodes[k], stack, n, cap, depth + 1)) return false;
    return true;
}

static bool push_outer_refs(const ir_graph *g, const ir_node *nd, int32_t **stack, int32_t *n, int32_t *cap,
                            int depth) {
    for (int32_t a = 0; a < nd->n_attrs; a++) {
        const ir_attr *at = &nd->attrs[a];
        if (at->type == IR_ATTR_GRAPH && at->g && !push_graph_refs(g, at->g, stack, n, cap, depth)) return false;
        if (at->type == IR_ATTR_GRAPHS)
            for (int32_t k = 0; k < at->n; k++)
                if (at->graphs && at->graphs[k] && !push_graph_refs(g, at->graphs[k], stack, n, cap, depth))
                    return false;
    }
    return true;
}

static kiln_status dead_nodes_in_graph(ir_model *m, const ir_graph *g, diag_list *diags, kiln_error *err) {
    if (!g->n_nodes) return KILN_OK;
    bool *live = calloc((size_t)g->n_nodes, sizeof *live);
    bool *consumed = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *consumed);
    bool *assigned = calloc((size_t)g->n_nodes, sizeof *assigned);
    int32_t *stack = NULL, n = 0, cap = 0;
    kiln_status st = KILN_OK;
    if (!live || !consumed || !assigned) goto oom;
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (!push_id(&stack, &n, &cap, g->outputs[k])) goto oom;
    while (n) {
        int32_t id = stack[--n];
        if (id < 0 || id >= g->n_values) continue;
        int32_t p = g->values[id].producer;
        if (p == IR_NONE || p < 0 || p >= g->n_nodes || live[p]) continue;
        live[p] = true;
        const ir_node *nd = &g->nodes[p];
        for (int32_t k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] != IR_NONE && !push_id(&stack, &n, &cap, nd->inputs[k])) goto oom;
        if (!push_outer_refs(g, nd, &stack, &n, &cap, 0)) goto oom;
    }
    /* a value is consumed when a node reads it (dead readers count: they make chains) */
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *nd = &g->nodes[i];
        for (int32_t k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0 && nd->inputs[k] < g->n_values) consumed[nd->inputs[k]] = true;
        int32_t before = n;
        if (!push_outer_refs(g, nd, &stack, &n, &cap, 0)) goto oom;
        while (n > before) consumed[stack[--n]] = true;
    }
    for (int32_t k = 0; k < g->n_outputs; k++) consumed[g->outputs[k]] = true;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *nd = &g->nodes[i];
        if (live[i] || !nd->n_outputs) continue;
        bool sink = true;
        for (int32_t k = 0; k < nd->n_outputs; k++)
            if (nd->outputs[k] != IR_NONE && consumed[nd->outputs[k]]) sink = false;
        if (!sink) continue;
        /* collect the dead nodes that only lead here */
        strbuf up;
        sb_init(&up);
        int32_t n_up = 0;
        assigned[i] = true;
        n = 0;
        for (int32_t k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] != IR_NONE && !push_id(&stack, &n, &cap, nd->inputs[k])) {
                sb_free(&up);
                goto oom;
            }
        while (n) {
            int32_t id = stack[--n];
            if (id < 0 || id >= g->n_values) continue;
            int32_t p = g->values[id].producer;
            if (p == IR_NONE || p < 0 || p >= g->n_nodes || live[p] || assigned[p]) continue;
            assigned[p] = true;
            if (n_up < 10) sb_printf(&up, "%s'%s' (%s)", n_up ? ", " : "", g->nodes[p].name, g->nodes[p].op_type);
            n_up++;
            const ir_node *pn = &g->nodes[p];
            for (int32_t k = 0; k < pn->n_inputs; k++)
                if (pn->inputs[k] != IR_NONE && !push_id(&stack, &n, &cap, pn->inputs[k])) {
                    sb_free(&up);
                    goto oom;
                }
        }
        diag *d = diag_add(diags, DIAG_WARNING, "dead-node", nd->name, nd->op_type,
                           "its output%s not used by any graph output", nd->n_outputs == 1 ? " is" : "s are");
        if (d && g->parent && g->location) d->graph = arena_strdup(&diags->arena, g->location);
        for (int32_t k = 0; k < nd->n_outputs && k < 4; k++)
            if (nd->outputs[k] != IR_NONE) {
                const ir_value *ov = ir_val(g, nd->outputs[k]);
                diag_fact(diags, d, "output %d '%s'%s%s", k, ov->name, ov->type.kind == IR_TYPE_UNKNOWN ? "" : " ",
                          ov->type.kind == IR_TYPE_UNKNOWN ? "" : ir_type_str(m, &ov->type));
            }
        if (n_up)
            diag_fact(diags, d, "%d more node%s only feed%s it: %s%s", n_up, n_up == 1 ? "" : "s", n_up == 1 ? "s" : "",
                      sb_cstr(&up), n_up > 10 ? ", ..." : "");
        sb_free(&up);
        diag_hint(diags, d, "remove %s (onnx-graphsurgeon: graph.cleanup()), or add '%s' to the graph outputs if "
                            "it was meant to be returned",
                  n_up ? "these nodes" : "the node",
                  nd->outputs[0] != IR_NONE ? ir_val(g, nd->outputs[0])->name : "its output");
    }
    goto done;
oom:
    st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory checking for dead nodes");
done:
    free(live);
    free(consumed);
    free(assigned);
    free(stack);
    return st;
}

kiln_status build_check_dead_nodes(ir_model *m, diag_list *diags, kiln_error *err) {
    for (int32_t gi = 0; gi < m->n_graphs; gi++) {
        const ir_graph *g = m->graphs[gi];
        /* function bodies' outputs are their formal outputs: the same rule applies */
        kiln_status st = dead_nodes_in_graph(m, g, diags, err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}
