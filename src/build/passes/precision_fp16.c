/* precision_fp16.c - FP16 activations between device nodes (--fp16 on a GPU backend).
 *
 * Decides per node whether it runs in half precision, then rewrites the main graph so
 * that tensors between half nodes are float16 and casts appear only at the boundaries:
 *  - a node goes half when it reads or writes a float32 tensor and the backend's rules
 *    (build_fp16_rules.node_half; for a backend: supports(ctx, model, node, FLOAT16))
 *    say it can run with those tensors in float16. Everything else keeps float32: the
 *    per-layer fallback;
 *  - float32 outputs of half nodes become float16 values, except graph outputs and values
 *    a subgraph reads by name ("pinned"), which keep their name and float32 type: the
 *    half node writes a new float16 value and a Cast back to float32 produces the old one;
 *  - a float32 input of a half node (graph input, output of a float32 node) is read
 *    through one Cast to float16, shared by every half reader; float32 initializers read
 *    only by half nodes are converted to float16 once, here (the weights then upload and
 *    stay resident in half; finite values beyond +-65504 saturate to +-65504);
 *  - a float32 node (or a host-read argument of a half node, rules.input_half false, e.g.
 *    Clip's bounds) reading a value that became float16 reads it through one Cast back to
 *    float32; Shape and Size, which read only dims, read the float16 value directly.
 *  - a float32 value that is a Cast of a float16 value (an --inputIOFormats=fp16 input) is
 *    not cast back: its half readers read the float16 source, and the widening Cast goes
 *    when nothing else reads it;
 *  - additive attention masks stay float32: Attention's attn_mask input is a float32 slot
 *    whatever the backend says, and a half node whose float results are read only by such
 *    slots (or by nodes sent back this way; not graph outputs) goes back to float32,
 *    repeatedly, so the whole mask arithmetic feeding it (BERT's Cast -> Sub(1, m) ->
 *    Mul(-10000)) stays float32 with no Casts. Masks hold large magnitudes:
 *    (1 - m) * -10000 is +-inf in half as soon as m is outside 0/1 (kiln run's random
 *    integer inputs), and an inf score makes the softmax inf - inf = NaN. GEMMs,
 *    convolutions and Attention itself are never sent back (they are what half is for);
 * Accumulation inside GEMMs, convolutions, reductions, softmax and layer norm stays float32:
 * that is the kernels' business, the graph only says what is stored between nodes.
 * Inserted Casts sit right after the producer of what they convert (or first, for graph
 * inputs and initializers), so the node list stays topologically sorted. Run after type
 * inference (decisions use value types; values of unknown type are left alone).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "core/dtype.h"
#include "ir/ops/ops.h"
#include "runtime/backend.h"

static kiln_dtype vtype(const ir_graph *g, int32_t v) {
    if (v < 0 || v >= g->n_values) return KILN_DTYPE_UNDEFINED;
    const ir_value *x = &g->values[v];
    if (x->init) return x->init->dtype;
    return x->type.kind == IR_TYPE_TENSOR ? x->type.dtype : KILN_DTYPE_UNDEFINED;
}

static bool has_float(const ir_graph *g, const ir_node *n) {
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (vtype(g, n->inputs[k]) == KILN_DTYPE_FLOAT) return true;
    for (int32_t k = 0; k < n->n_outputs; k++)
        if (vtype(g, n->outputs[k]) == KILN_DTYPE_FLOAT) return true;
    return false;
}

/* Shape and Size read only a tensor's dims: they take a float16 value as it is. */
static bool reads_shape_only(const ir_node *n) {
    return !n->domain[0] && (!strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size"));
}

/* Input slots that stay float32 in a half node whatever the backend's rules say: the
 * additive mask of Attention (see the top comment). */
static bool float_slot(const ir_node *n, int32_t k) {
    return !n->domain[0] && !strcmp(n->op_type, "Attention") && k == 3;
}

/* Whether input k of node n is read in half (n runs in half, the slot is not float32). */
static bool half_slot(const build_fp16_rules *rules, const bool *half, int32_t i, const ir_node *n, int32_t k) {
    return half[i] && !float_slot(n, k) && (!rules->input_half || rules->input_half(rules->user, n, k));
}

/* Nodes worth running in half even when their results are read only in float32. */
static bool half_for_speed(const ir_node *n) {
    static const char *const ops[] = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Attention"};
    if (n->domain[0]) return true;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (!strcmp(n->op_type, ops[k])) return true;
    return false;
}

/* Sends back to float32 the half nodes whose float results are read only by float32
 * slots (float_slot) or by nodes sent back before, repeatedly: the whole chain that
 * computes an attention mask goes back, so it needs no Cast and keeps float32's range.
 * Readers that see only dims (Shape/Size) do not count; graph outputs (pinned) and
 * GEMM/conv/attention nodes keep their decision. */
static kiln_status demote_mask_chains(const ir_graph *g, bool *half, int32_t n0, const pass_uses *u,
                                      kiln_error *err) {
    bool *other = calloc((size_t)g->n_values + 1, sizeof *other); /* read by anything else */
    bool *back = calloc((size_t)n0 + 1, sizeof *back);
    if (!other || !back) {
        free(other), free(back);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in the FP16 pass");
    }
    for (bool changed = true; changed;) {
        changed = false;
        memset(other, 0, ((size_t)g->n_values + 1) * sizeof *other);
        for (int32_t i = 0; i < n0; i++) {
            const ir_node *n = &g->nodes[i];
            for (int32_t k = 0; k < n->n_inputs; k++)
                if (n->inputs[k] >= 0 && n->inputs[k] < g->n_values && !back[i] && !float_slot(n, k) &&
                    !reads_shape_only(n))
                    other[n->inputs[k]] = true;
        }
        for (int32_t i = n0 - 1; i >= 0; i--) {
            const ir_node *n = &g->nodes[i];
            if (!half[i] || half_for_speed(n)) continue;
            bool float_out = false, demote = true;
            for (int32_t k = 0; k < n->n_outputs && demote; k++) {
                int32_t v = n->outputs[k];
                if (v < 0 || v >= g->n_values || vtype(g, v) != KILN_DTYPE_FLOAT) continue;
                float_out = true;
                if (u->pinned[v] || !u->count[v] || other[v]) demote = false;
            }
            if (float_out && demote) {
                half[i] = false;
                back[i] = true;
                changed = true;
            }
        }
    }
    free(other), free(back);
    return KILN_OK;
}

typedef struct fp16_ctx {
    ir_model *m;
    ir_graph *g;
    int32_t n0;        /* nodes before the pass */
    pass_inserted ins; /* the Casts added at precision boundaries */
    kiln_error *err;
} fp16_ctx;

/* A new value named after `base` (made unique) with v's tensor type in dtype dt. */
static int32_t new_value(fp16_ctx *c, int32_t v, const char *suffix, kiln_dtype dt) {
    ir_graph *g = c->g;
    int32_t id = pass_add_named_value(g, g->values[v].name, suffix);
    if (id == IR_NONE) {
        kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory adding a value in the FP16 pass");
        return IR_NONE;
    }
    ir_type t = g->values[v].type; /* after add_value: values may have moved */
    if (g->values[v].init) {
        const ir_tensor *it = g->values[v].init;
        t.kind = IR_TYPE_TENSOR;
        t.rank = it->rank;
        t.dims = ARENA_ARRAY(&c->m->arena, ir_dim, it->rank > 0 ? it->rank : 1);
        if (!t.dims) {
            kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory in the FP16 pass");
            return IR_NONE;
        }
        for (int32_t i = 0; i < it->rank; i++) t.dims[i].kind = IR_DIM_CONST, t.dims[i].value = it->dims[i];
    }
    t.dtype = dt;
    g->values[id].type = t;
    return id;
}

/* Appends Cast(from) -> to, placed after original node `after` (-1: before every node). */
static kiln_status add_cast(fp16_ctx *c, int32_t from, int32_t to, kiln_dtype dt, int32_t after) {
    ir_attr a = {.name = "to", .type = IR_ATTR_INT, .i = dt, .doc = ""};
    return pass_append_unary(c->m, c->g, &c->ins, "Cast", "cast", from, to, &a, after, c->err);
}

/* The initializer's data as float16, in place (value type and tensor). */
static kiln_status convert_initializer(fp16_ctx *c, int32_t v) {
    ir_value *x = &c->g->values[v];
    const ir_tensor *src = x->init;
    ir_tensor *t = ARENA_NEW(&c->m->arena, ir_tensor);
    if (!t) return kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory converting '%s' to float16", x->name);
    *t = *src;
    t->dtype = KILN_DTYPE_FLOAT16;
    t->nbytes = src->count * 2;
    t->where = IR_DATA_OWNED;
    t->data = NULL;
    if (src->count) {
        if (!src->data) return kiln_err_set(c->err, KILN_ERR_INVALID_ARG, "initializer '%s' has no data", x->name);
        uint8_t *raw = arena_alloc(&c->m->arena, (size_t)t->nbytes + 64);
        if (!raw) return kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory converting '%s' to float16", x->name);
        uint16_t *h = (uint16_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
        const uint8_t *s = src->data;
        for (uint64_t i = 0; i < src->count; i++) {
            float f;
            memcpy(&f, s + i * 4, 4); /* mapped data may be unaligned */
            /* finite values past float16's range saturate instead of becoming inf: masks
             * written as (1 - m) * finfo(float32).min would otherwise give 0 * -inf = NaN */
            if (f > 65504.f && !isinf(f)) f = 65504.f;
            if (f < -65504.f && !isinf(f)) f = -65504.f;
            h[i] = kiln_fp32_to_fp16(f);
        }
        t->data = h;
    }
    x->init = t;
    x->type.dtype = KILN_DTYPE_FLOAT16;
    return KILN_OK;
}

/* The float16 value v was widened from when its producer (original index p) is a Cast
 * to float32 of a float16 value (an --inputIOFormats=fp16 input, or the model's own
 * round trip), else -1. Narrowing it back is exact, so half readers take the source. */
static int32_t widened_half(const ir_graph *g, int32_t p, int32_t v) {
    if (p < 0 || p >= g->n_nodes) return -1;
    const ir_node *n = &g->nodes[p];
    if (n->domain[0] || strcmp(n->op_type, "Cast") || n->n_inputs != 1 || n->n_outputs != 1 || n->outputs[0] != v)
        return -1;
    return vtype(g, n->inputs[0]) == KILN_DTYPE_FLOAT16 ? n->inputs[0] : -1;
}

/* Removes the widening Casts whose every reader now reads their half source (nothing
 * reads them and they are not graph outputs). */
static kiln_status drop_unread_casts(ir_graph *g, const int32_t *vals, int32_t n, kiln_error *err) {
    pass_uses u;
    kiln_status st = pass_uses_compute(g, &u, err);
    if (st != KILN_OK) return st;
    bool *dead = calloc((size_t)g->n_nodes + 1, sizeof *dead);
    if (!dead) {
        pass_uses_free(&u);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in the FP16 pass");
    }
    bool any = false;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = vals[i], p = g->values[v].producer;
        if (p >= 0 && !u.count[v] && !u.pinned[v]) dead[p] = any = true;
    }
    if (any) pass_remove_nodes(g, dead);
    free(dead);
    pass_uses_free(&u);
    return KILN_OK;
}

/* Puts the inserted Casts in place (after their producers) and recomputes producers. */
static kiln_status reorder(fp16_ctx *c) {
    return pass_place_appended_nodes(c->g, c->n0, c->ins.n, c->ins.after, c->err);
}

kiln_status build_pass_precision_fp16(ir_model *model, const build_fp16_rules *rules, build_fp16_stats *stats,
                                      kiln_error *err) {
    build_fp16_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!model || !model->graph || !rules || !rules->node_half) return KILN_OK;
    ir_graph *g = model->graph;
    fp16_ctx c = {model, g, g->n_nodes, {NULL, 0, 0}, err};
    int32_t nv0 = g->n_values;
    pass_uses u;
    kiln_status st = pass_uses_compute(g, &u, err);
    if (st != KILN_OK) return st;
    bool *half = calloc((size_t)c.n0 + 1, sizeof *half);
    bool *conv_ok = calloc((size_t)nv0 + 1, sizeof *conv_ok); /* initializer read only by half slots */
    bool *retyped = calloc((size_t)nv0 + 1, sizeof *retyped); /* float32 value now float16 in place */
    int32_t *half_of = malloc(((size_t)nv0 + 1) * sizeof *half_of);
    int32_t *float_of = malloc(((size_t)nv0 + 1) * sizeof *float_of);
    int32_t *prod = malloc(((size_t)nv0 + 1) * sizeof *prod); /* original producer index */
    int32_t *bypassed = malloc(((size_t)nv0 + 1) * sizeof *bypassed); /* widening Casts skipped */
    int32_t n_bypassed = 0;
    if (!half || !conv_ok || !retyped || !half_of || !float_of || !prod || !bypassed) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in the FP16 pass");
        goto done;
    }
    for (int32_t v = 0; v < nv0; v++) {
        half_of[v] = float_of[v] = -1;
        prod[v] = g->values[v].producer;
        const ir_value *x = &g->values[v];
        conv_ok[v] = x->init && x->init->dtype == KILN_DTYPE_FLOAT && (x->flags & IR_VALUE_INITIALIZER) &&
                     !(x->flags & IR_VALUE_GRAPH_INPUT) && !u.pinned[v];
    }
    for (int32_t i = 0; i < c.n0; i++) {
        const ir_node *n = &g->nodes[i];
        /* a Cast's output type is its `to` attribute: it never changes precision here
         * (which also makes a second run of the pass a no-op) */
        bool is_cast = !n->domain[0] && !strcmp(n->op_type, "Cast");
        half[i] = !is_cast && !pass_has_subgraph(n) && has_float(g, n) && rules->node_half(rules->user, model, n);
    }
    st = demote_mask_chains(g, half, c.n0, &u, err);
    if (st != KILN_OK) goto done;
    for (int32_t i = 0; i < c.n0; i++) {
        const ir_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t v = n->inputs[k];
            if (v < 0 || v >= nv0) continue;
            if (!half_slot(rules, half, i, n, k)) conv_ok[v] = false;
        }
    }
    /* subgraph nodes can read initializers by name: pass_uses pins those */
    for (int32_t i = 0; i < c.n0 && st == KILN_OK; i++) {
        int32_t n_in = g->nodes[i].n_inputs;
        if (half[i]) stats->half_nodes++;
        else if (has_float(g, &g->nodes[i])) stats->float_nodes++;
        for (int32_t k = 0; k < n_in && st == KILN_OK; k++) {
            const ir_node *n = &g->nodes[i]; /* re-read: add_cast may move the node array */
            int32_t v = n->inputs[k];
            if (v < 0 || v >= nv0) continue;
            bool hs = half_slot(rules, half, i, n, k);
            if (hs && vtype(g, v) == KILN_DTYPE_FLOAT && half_of[v] < 0) {
                int32_t src = widened_half(g, prod[v], v);
                if (src >= 0) {
                    /* float16 -> float32 -> float16 is exact: read the half source */
                    half_of[v] = src;
                    if (n_bypassed < nv0) bypassed[n_bypassed++] = v;
                    stats->casts_cancelled++;
                } else if (conv_ok[v]) {
                    st = convert_initializer(&c, v);
                    half_of[v] = v;
                    stats->initializers_converted++;
                } else {
                    int32_t h = new_value(&c, v, "_fp16", KILN_DTYPE_FLOAT16);
                    st = h == IR_NONE ? KILN_ERR_NOMEM : add_cast(&c, v, h, KILN_DTYPE_FLOAT16, prod[v]);
                    half_of[v] = h;
                    stats->casts++;
                }
            }
            if (st != KILN_OK) break;
            if (hs && half_of[v] >= 0) {
                g->nodes[i].inputs[k] = half_of[v];
            } else if (!hs && retyped[v] && !reads_shape_only(n)) {
                if (float_of[v] < 0) {
                    int32_t f = new_value(&c, v, "_fp32", KILN_DTYPE_FLOAT);
                    st = f == IR_NONE ? KILN_ERR_NOMEM : add_cast(&c, v, f, KILN_DTYPE_FLOAT, prod[v]);
                    float_of[v] = f;
                    stats->casts++;
                }
                g->nodes[i].inputs[k] = float_of[v];
            }
        }
        if (!half[i]) continue;
        int32_t n_out = g->nodes[i].n_outputs;
        for (int32_t k = 0; k < n_out && st == KILN_OK; k++) {
            int32_t v = g->nodes[i].outputs[k];
            if (v < 0 || v >= nv0 || vtype(g, v) != KILN_DTYPE_FLOAT) continue;
            if (u.pinned[v]) {
                /* graph output / read by name from a subgraph: keep it float32 under its name */
                int32_t h = new_value(&c, v, "_fp16", KILN_DTYPE_FLOAT16);
                if (h == IR_NONE) {
                    st = KILN_ERR_NOMEM;
                    break;
                }
                g->nodes[i].outputs[k] = h;
                g->values[h].producer = i;
                st = add_cast(&c, h, v, KILN_DTYPE_FLOAT, i);
                half_of[v] = h;
                stats->casts++;
            } else {
                g->values[v].type.dtype = KILN_DTYPE_FLOAT16;
                retyped[v] = true;
                half_of[v] = v;
            }
        }
    }
    if (st == KILN_OK) st = reorder(&c);
    if (st == KILN_OK && n_bypassed) st = drop_unread_casts(g, bypassed, n_bypassed, err);
done:
    free(bypassed);
    free(half);
    free(conv_ok);
    free(retyped);
    free(half_of);
    free(float_of);
    free(prod);
    free(c.ins.after);
    pass_uses_free(&u);
    return st;
}

/* ---- the rules of a backend ---- */

typedef struct be_rules {
    const rt_backend *be;
    void *ctx;
} be_rules;

static bool be_node_half(void *user, const ir_model *model, const ir_node *node) {
    const be_rules *r = user;
    return r->be->supports && r->be->supports(r->ctx, model, node, KILN_DTYPE_FLOAT16);
}

static bool be_input_half(void *user, const ir_node *node, int32_t k) {
    const be_rules *r = user;
    return !(r->be->input_on_host && r->be->input_on_host(r->ctx, node, k));
}

kiln_status build_pass_precision_fp16_backend(ir_model *model, const rt_backend *be, void *ctx,
                                              build_fp16_stats *stats, kiln_error *err) {
    be_rules r = {be, ctx};
    build_fp16_rules rules = {be_node_half, be_input_half, &r};
    return build_pass_precision_fp16(model, &rules, stats, err);
}
