/* layout_nhwc.c - channels-last (NHWC) regions for a device's convolutions.
 *
 * cuDNN's half-precision convolutions run on tensor cores natively in NHWC; with NCHW
 * tensors it transposes internally on every call, which made FP16 ResNet-50 slower than
 * TF32. This pass (run by the session after the FP16 pass, for a device backend) moves
 * every node the backend can run channels-last into the internal domain "kiln.nhwc"
 * (same op_type: Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool), whose
 * data tensors are [N, H, W, C] instead of [N, C, H, W]:
 *  - a dense Conv with channel counts that are not multiples of 8 stays NCHW (tensor
 *    cores want multiples of 8), except a *padded stem* when the rules ask for one
 *    (rules->pad_channels, the CUDA backend: 4): a dense Conv with fewer than 8 input
 *    channels (ResNet's RGB stem) and output channels in multiples of 8 runs channels-last
 *    with its input channels zero-padded to a multiple of pad_channels. Its input enters
 *    through one kiln.nhwc NchwToNhwc node (ir/ops/ops_nhwc_pack.c) that transposes and
 *    pads in one pass, and its weight is stored OHWI with zero input channels. When that
 *    input is the FP16 pass's float32->float16 Cast of a graph input read only here, the
 *    Cast itself becomes the NchwToNhwc (its `to` kept): float32 NCHW in, float16 NHWC
 *    out, one kernel. At batch 128 on an H200 the NCHW stem cost 3.1 of 7.6 ms (the
 *    conv in NCHW, a transpose of its 205 MB output to NHWC);
 *  - a Conv's weight initializer [O, C/g, KH, KW] is stored [O, KH, KW, C/g] (a new
 *    initializer; a Conv whose weight is not a constant stays NCHW); its bias stays [O];
 *    a fused residual (kiln_residual) is a data tensor like x and y;
 *  - values written by NHWC nodes get permuted shapes; NHWC readers of an NCHW value read
 *    it through one shared Transpose(perm 0,2,3,1), and NCHW readers of an NHWC value
 *    through one Transpose(perm 0,3,1,2); graph outputs and values a subgraph reads by
 *    name keep their name and NCHW layout (the NHWC node writes a new value and the
 *    Transpose back produces the old one).
 *  - a Flatten(axis 1) of an NHWC value with H = W = 1 (a global pool's) reads it directly.
 * So a ResNet-50 becomes one NHWC region from the padded stem to the global pool, whose
 * [N, 1, 1, C] result the Flatten before the classifier reads as it is: no transposes. The CPU backend has no kernels for "kiln.nhwc": the session runs
 * this pass only for a device backend, and only nodes the backend accepts move (the
 * backend's supports() is asked about each node as it would be in the new domain).
 */
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"
#include "build/passes/passes.h"
#include "ir/ops/ops.h"
#include "ir/symdim.h"
#include "runtime/backend.h"

static bool is_layout_op(const ir_node *n) {
    static const char *const ops[] = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"};
    if (n->domain[0]) return false;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(n->op_type, ops[i])) return true;
    return false;
}

static int32_t vrank(const ir_graph *g, int32_t v) {
    if (v < 0 || v >= g->n_values) return -1;
    const ir_value *x = &g->values[v];
    if (x->init) return x->init->rank;
    return x->type.kind == IR_TYPE_TENSOR ? x->type.rank : -1;
}

/* Input k of an NHWC node that is a data tensor (x, Conv's residual). */
static bool data_slot(const ir_node *n, int32_t k) {
    if (k == 0) return true;
    if (strcmp(n->op_type, "Conv")) return false;
    const ir_attr *r = ir_node_attr(n, "kiln_residual");
    return r && r->type == IR_ATTR_INT && r->i == k;
}

typedef struct nhwc_ctx {
    ir_model *m;
    ir_graph *g;
    int32_t n0;
    pass_inserted ins; /* the Transposes added at layout boundaries */
    kiln_error *err;
} nhwc_ctx;

static ir_dim *perm_dims(nhwc_ctx *c, const ir_type *t, const int64_t perm[4]) {
    ir_dim *d = ARENA_ARRAY(&c->m->arena, ir_dim, 4);
    if (!d) return NULL;
    for (int i = 0; i < 4; i++) d[i] = t->dims[perm[i]];
    return d;
}

static const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};

/* A new value named after v (made unique) with v's type permuted by perm (rank 4). */
static int32_t new_value(nhwc_ctx *c, int32_t v, const char *suffix, const int64_t perm[4]) {
    ir_graph *g = c->g;
    int32_t id = pass_add_named_value(g, g->values[v].name, suffix);
    if (id == IR_NONE) {
        kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory adding a value in the NHWC pass");
        return IR_NONE;
    }
    ir_type t = g->values[v].type;
    if (t.kind == IR_TYPE_TENSOR && t.rank == 4 && t.dims) {
        t.dims = perm_dims(c, &g->values[v].type, perm);
        if (!t.dims) {
            kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory in the NHWC pass");
            return IR_NONE;
        }
    }
    g->values[id].type = t;
    return id;
}

static kiln_status add_transpose(nhwc_ctx *c, int32_t from, int32_t to, const int64_t perm[4], int32_t after) {
    int64_t *p = ARENA_ARRAY(&c->m->arena, int64_t, 4);
    if (!p) return kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory adding a Transpose in the NHWC pass");
    memcpy(p, perm, 4 * sizeof *p);
    ir_attr a = {.name = "perm", .type = IR_ATTR_INTS, .n = 4, .ints = p, .doc = ""};
    return pass_append_unary(c->m, c->g, &c->ins, "Transpose", "transpose", from, to, &a, after, c->err);
}

/* Conv weight [O, C, KH, KW] -> [O, KH, KW, Cp] (Cp >= C; channels C.. are zero, for a
 * padded stem): in place when this node is its only reader (the OIHW copy would otherwise
 * stay in the graph unread, and in a saved engine's WEIGHTS), else a new initializer;
 * IR_NONE when the weight is not a plain constant. */
static int32_t weight_nhwc(nhwc_ctx *c, int32_t w, bool in_place, int64_t cp) {
    ir_graph *g = c->g;
    const ir_tensor *t = pass_const(g, w);
    if (!t || t->rank != 4 || !t->data || (g->values[w].flags & IR_VALUE_GRAPH_INPUT)) return IR_NONE;
    uint64_t esz = (uint64_t)kiln_dtype_bits(t->dtype) / 8;
    if (esz == 0 || t->nbytes != t->count * esz) return IR_NONE;
    int64_t O = t->dims[0], C = t->dims[1], KH = t->dims[2], KW = t->dims[3];
    if (cp < C) cp = C;
    rt_tensor tmp;
    memset(&tmp, 0, sizeof tmp);
    int64_t dims[4] = {O, KH, KW, cp};
    if (rt_tensor_alloc_zero(&tmp, t->dtype, 4, dims, c->err) != KILN_OK) return IR_NONE;
    const uint8_t *s = t->data;
    uint8_t *d = tmp.data;
    for (int64_t o = 0; o < O; o++)
        for (int64_t ci = 0; ci < C; ci++)
            for (int64_t y = 0; y < KH; y++)
                for (int64_t x = 0; x < KW; x++)
                    memcpy(d + (uint64_t)(((o * KH + y) * KW + x) * cp + ci) * esz,
                           s + (uint64_t)(((o * C + ci) * KH + y) * KW + x) * esz, (size_t)esz);
    if (in_place) {
        ir_tensor *nt = ARENA_NEW(&c->m->arena, ir_tensor);
        int64_t *nd = ARENA_ARRAY(&c->m->arena, int64_t, 4);
        ir_dim *vd = ARENA_ARRAY(&c->m->arena, ir_dim, 4);
        size_t nbytes = (size_t)tmp.nbytes;
        uint8_t *raw = arena_alloc(&c->m->arena, nbytes + 64);
        if (!nt || !nd || !vd || !raw) {
            rt_tensor_release(&tmp);
            return IR_NONE;
        }
        uint8_t *al = (uint8_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
        memcpy(al, tmp.data, nbytes);
        rt_tensor_release(&tmp);
        *nt = *t;
        memcpy(nd, dims, sizeof dims);
        nt->dims = nd;
        nt->count = (uint64_t)(O * KH * KW * cp);
        nt->nbytes = nbytes;
        nt->data = al;
        nt->where = IR_DATA_OWNED;
        for (int i = 0; i < 4; i++) vd[i].kind = IR_DIM_CONST, vd[i].value = dims[i];
        g->values[w].init = nt;
        g->values[w].type.kind = IR_TYPE_TENSOR;
        g->values[w].type.dtype = t->dtype;
        g->values[w].type.rank = 4;
        g->values[w].type.dims = vd;
        return w;
    }
    int32_t id = pass_new_initializer(g, g->values[w].name, &tmp, c->err);
    rt_tensor_release(&tmp);
    if (id != IR_NONE) {
        g->values[id].type.rank = 4;
        g->values[id].type.dims = ARENA_ARRAY(&c->m->arena, ir_dim, 4);
        if (g->values[id].type.dims)
            for (int i = 0; i < 4; i++) g->values[id].type.dims[i].kind = IR_DIM_CONST, g->values[id].type.dims[i].value = dims[i];
    }
    return id;
}

/* Whether NCHW reader n (a Flatten at axis 1) of NHWC value v may read it as it is: with
 * H = W = 1 both layouts hold the same bytes and Flatten gives [N, C] either way (ResNet's
 * global pool -> Flatten -> Gemm tail: one kernel less per run). */
static bool flatten_reads_as_is(const ir_graph *g, const ir_node *n, int32_t v) {
    if (strcmp(n->op_type, "Flatten") || n->domain[0] || ir_node_attr_int(n, "axis", 1) != 1) return false;
    const ir_type *t = &g->values[v].type;
    return t->kind == IR_TYPE_TENSOR && t->rank == 4 && t->dims && ir_dim_is(t->dims[1], 1) && ir_dim_is(t->dims[2], 1);
}

/* The channel count a padded stem pads its input to (build_layout_stem_channels), 0 when
 * the Conv is not one. */
int64_t build_layout_stem_channels(const ir_graph *g, const ir_node *n, int32_t pad_to) {
    if (pad_to < 2 || pad_to > 64 || strcmp(n->op_type, "Conv") || n->domain[0] || n->n_inputs < 2 ||
        ir_node_attr_int(n, "group", 1) != 1)
        return 0;
    const ir_tensor *w = pass_const(g, n->inputs[1]);
    if (!w || w->rank != 4 || w->dims[0] % 8 || w->dims[1] < 1 || w->dims[1] >= 8 || w->dims[1] % pad_to == 0)
        return 0;
    /* the input must be NCHW: produced by a node this pass leaves alone, or a graph input */
    int32_t x = n->inputs[0];
    if (x < 0 || x >= g->n_values) return 0;
    int32_t p = g->values[x].producer;
    if (p >= 0 && p < g->n_nodes && is_layout_op(&g->nodes[p])) return 0;
    return (w->dims[1] + pad_to - 1) / pad_to * pad_to;
}

/* Whether the NCHW value x (read only by the stem, not pinned) is the FP16 pass's Cast of
 * float32 to float16: that Cast then becomes the NchwToNhwc itself. */
static int32_t fusable_cast(const ir_graph *g, const pass_uses *u, int32_t x) {
    if (x < 0 || x >= g->n_values || u->count[x] != 1 || u->pinned[x]) return -1;
    int32_t p = g->values[x].producer;
    if (p < 0 || p >= g->n_nodes) return -1;
    const ir_node *cn = &g->nodes[p];
    if (strcmp(cn->op_type, "Cast") || cn->domain[0] || cn->n_inputs != 1 || cn->n_outputs != 1) return -1;
    const ir_attr *to = ir_node_attr(cn, "to");
    int32_t s = cn->inputs[0];
    if (!to || to->type != IR_ATTR_INT || to->i != KILN_DTYPE_FLOAT16 || vrank(g, s) != 4) return -1;
    kiln_dtype st = g->values[s].init ? g->values[s].init->dtype : g->values[s].type.dtype;
    return st == KILN_DTYPE_FLOAT ? p : -1;
}

/* The stem's input x [N, C, H, W] as [N, H, W, cp]: the fusable Cast rewritten in place,
 * or a new NchwToNhwc node after x's producer. Returns the value the Conv reads. */
static int32_t stem_input(nhwc_ctx *c, const pass_uses *u, int32_t x, int64_t cp, int32_t after) {
    ir_graph *g = c->g;
    ir_attr *a = ARENA_ARRAY(&c->m->arena, ir_attr, 2);
    if (!a) return IR_NONE;
    memset(a, 0, 2 * sizeof *a);
    a[0].name = "channels";
    a[0].type = IR_ATTR_INT;
    a[0].i = cp;
    a[0].doc = "";
    int32_t cast = fusable_cast(g, u, x);
    int32_t y;
    ir_node *pn;
    if (cast >= 0) {
        pn = &g->nodes[cast];
        a[1] = *ir_node_attr(pn, "to");
        y = x;
        /* named for what it does now (profiles list it by name) */
        char *nm = arena_printf(&c->m->arena, "%s_kiln_to_nhwc", g->values[x].name);
        if (!nm) return IR_NONE;
        pn->name = nm;
        pn->name_generated = true;
    } else {
        y = new_value(c, x, "_nhwc_pad", to_nhwc);
        if (y == IR_NONE) return IR_NONE;
        if (pass_append_unary(c->m, g, &c->ins, "NchwToNhwc", "to_nhwc", x, y, &a[0], after, c->err) != KILN_OK)
            return IR_NONE;
        pn = &g->nodes[g->values[y].producer];
    }
    pn->domain = "kiln.nhwc";
    pn->op_type = "NchwToNhwc";
    pn->op = ir_op_lookup("kiln.nhwc", "NchwToNhwc");
    pn->attrs = a;
    pn->n_attrs = cast >= 0 ? 2 : 1;
    ir_type *t = &g->values[y].type;
    if (t->kind == IR_TYPE_TENSOR && t->rank == 4 && t->dims) {
        ir_dim *d = ARENA_ARRAY(&c->m->arena, ir_dim, 4);
        if (!d) return IR_NONE;
        d[0] = t->dims[0], d[1] = t->dims[2], d[2] = t->dims[3];
        d[3] = ir_dim_const(cp);
        t->dims = d;
    }
    if (cast >= 0) t->dtype = KILN_DTYPE_FLOAT16;
    return y;
}

/* Asks the rules whether the stem's NchwToNhwc could run, by presenting the Conv itself
 * as one (its input is the pack's input; the question is about op and input type). */
static bool pack_ok(const build_layout_rules *r, ir_model *m, ir_node *n) {
    ir_node save = *n;
    n->domain = "kiln.nhwc";
    n->op_type = "NchwToNhwc";
    n->n_inputs = 1;
    n->n_outputs = 0;
    n->n_attrs = 0;
    bool ok = r->node_ok(r->user, m, n);
    *n = save;
    return ok;
}

static kiln_status reorder(nhwc_ctx *c) {
    return pass_place_appended_nodes(c->g, c->n0, c->ins.n, c->ins.after, c->err);
}

kiln_status build_pass_layout_nhwc(ir_model *model, const build_layout_rules *rules, int32_t *moved, kiln_error *err) {
    if (moved) *moved = 0;
    if (!model || !model->graph || !rules || !rules->node_ok) return KILN_OK;
    ir_graph *g = model->graph;
    nhwc_ctx c = {model, g, g->n_nodes, {NULL, 0, 0}, err};
    int32_t nv0 = g->n_values;
    pass_uses u;
    kiln_status st = pass_uses_compute(g, &u, err);
    if (st != KILN_OK) return st;
    bool *nhwc = calloc((size_t)c.n0 + 1, sizeof *nhwc);
    bool *relaid = calloc((size_t)nv0 + 1, sizeof *relaid); /* value now stored NHWC in place */
    int32_t *nhwc_of = malloc(((size_t)nv0 + 1) * sizeof *nhwc_of);
    int32_t *nchw_of = malloc(((size_t)nv0 + 1) * sizeof *nchw_of);
    int32_t *prod = malloc(((size_t)nv0 + 1) * sizeof *prod);
    int64_t *stem = calloc((size_t)c.n0 + 1, sizeof *stem); /* padded stem: its channels */
    if (!nhwc || !relaid || !nhwc_of || !nchw_of || !prod || !stem) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in the NHWC pass");
        goto done;
    }
    for (int32_t v = 0; v < nv0; v++) nhwc_of[v] = nchw_of[v] = -1, prod[v] = g->values[v].producer;
    for (int32_t i = 0; i < c.n0; i++) {
        ir_node *n = &g->nodes[i];
        if (!is_layout_op(n) || n->n_outputs != 1 || vrank(g, n->inputs[0]) != 4 || vrank(g, n->outputs[0]) != 4)
            continue;
        if (!strcmp(n->op_type, "Conv")) {
            const ir_tensor *w = n->n_inputs >= 2 ? pass_const(g, n->inputs[1]) : NULL;
            if (!w || w->rank != 4) continue;
            /* tensor cores want channel counts in multiples of 8: a dense convolution
             * with fewer stays NCHW, unless it is a stem whose input the rules pad */
            if (ir_node_attr_int(n, "group", 1) == 1 && (w->dims[0] % 8 || w->dims[1] % 8)) {
                stem[i] = build_layout_stem_channels(g, n, rules->pad_channels);
                if (!stem[i] || !pack_ok(rules, model, n)) {
                    stem[i] = 0;
                    continue;
                }
            }
        }
        /* ask the backend about the node as it would be */
        const char *dom = n->domain;
        n->domain = "kiln.nhwc";
        nhwc[i] = rules->node_ok(rules->user, model, n);
        n->domain = dom;
    }
    for (int32_t i = 0; i < c.n0 && st == KILN_OK; i++) {
        int32_t n_in = g->nodes[i].n_inputs;
        for (int32_t k = 0; k < n_in && st == KILN_OK; k++) {
            const ir_node *n = &g->nodes[i];
            int32_t v = n->inputs[k];
            if (v < 0 || v >= nv0) continue;
            bool slot = nhwc[i] && data_slot(n, k);
            if (slot && k == 0 && stem[i]) { /* read only here (fusable_cast) or a fresh pack */
                int32_t y = stem_input(&c, &u, v, stem[i], prod[v]);
                if (y == IR_NONE) {
                    st = kiln_err_set(err, KILN_ERR_NOMEM, "node '%s': out of memory padding the stem's input",
                                      g->nodes[i].name);
                    break;
                }
                g->nodes[i].inputs[0] = y;
                continue;
            }
            if (slot && nhwc_of[v] < 0) {
                int32_t h = new_value(&c, v, "_nhwc", to_nhwc);
                st = h == IR_NONE ? KILN_ERR_NOMEM : add_transpose(&c, v, h, to_nhwc, prod[v]);
                nhwc_of[v] = h;
            }
            if (st != KILN_OK) break;
            if (slot) {
                g->nodes[i].inputs[k] = nhwc_of[v];
            } else if (relaid[v] && flatten_reads_as_is(g, n, v)) {
                /* [N, 1, 1, C] is [N, C, 1, 1] byte for byte: no transpose */
            } else if (relaid[v]) {
                if (nchw_of[v] < 0) {
                    int32_t f = new_value(&c, v, "_nchw", to_nchw);
                    st = f == IR_NONE ? KILN_ERR_NOMEM : add_transpose(&c, v, f, to_nchw, prod[v]);
                    nchw_of[v] = f;
                }
                g->nodes[i].inputs[k] = nchw_of[v];
            }
        }
        if (!nhwc[i] || st != KILN_OK) continue;
        if (!strcmp(g->nodes[i].op_type, "Conv")) {
            int32_t w0 = g->nodes[i].inputs[1];
            bool only = w0 >= 0 && w0 < nv0 && u.count[w0] == 1 && !u.pinned[w0];
            int32_t w = weight_nhwc(&c, w0, only, stem[i]);
            if (w == IR_NONE) {
                st = kiln_err_set(err, KILN_ERR_NOMEM, "node '%s': out of memory storing the weight NHWC",
                                  g->nodes[i].name);
                break;
            }
            g->nodes[i].inputs[1] = w;
        }
        g->nodes[i].domain = "kiln.nhwc";
        int32_t v = g->nodes[i].outputs[0];
        if (moved) (*moved)++;
        if (u.pinned[v]) {
            int32_t h = new_value(&c, v, "_nhwc", to_nhwc);
            if (h == IR_NONE) {
                st = KILN_ERR_NOMEM;
                break;
            }
            g->nodes[i].outputs[0] = h;
            g->values[h].producer = i;
            st = add_transpose(&c, h, v, to_nchw, i);
            nhwc_of[v] = h;
        } else {
            ir_value *x = &g->values[v];
            if (x->type.kind == IR_TYPE_TENSOR && x->type.rank == 4 && x->type.dims) {
                ir_dim *d = perm_dims(&c, &x->type, to_nhwc);
                if (!d) {
                    st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in the NHWC pass");
                    break;
                }
                x->type.dims = d;
            }
            relaid[v] = true;
            nhwc_of[v] = v;
        }
    }
    if (st == KILN_OK) st = reorder(&c);
done:
    free(nhwc);
    free(relaid);
    free(nhwc_of);
    free(nchw_of);
    free(prod);
    free(stem);
    free(c.ins.after);
    pass_uses_free(&u);
    return st;
}

typedef struct be_rules {
    const rt_backend *be;
    void *ctx;
} be_rules;

bool build_layout_nhwc_wanted(const char *env, bool run_passes) {
    if (env) return strcmp(env, "0") != 0;
    /* channels-last is the FP16 default since the cuDNN graph-API convolutions (ResNet-50
     * batch 1 on an H200: 0.47 ms against 0.85 ms NCHW, docs/BENCHMARKS.md). Engine builds
     * ask for it through rt_session_options.layout_nhwc (their GPU session runs no graph
     * passes); loading an engine never re-lays it out: the saved graph already holds its
     * kiln.nhwc nodes, whose types ir/ops/ops_nhwc.c infers again */
    return run_passes;
}

static bool be_node_ok(void *user, const ir_model *model, const ir_node *node) {
    const be_rules *r = user;
    return r->be->supports && r->be->supports(r->ctx, model, node, KILN_DTYPE_UNDEFINED);
}

kiln_status build_pass_layout_nhwc_backend(ir_model *model, const struct rt_backend *be, void *ctx, int32_t *moved,
                                           kiln_error *err) {
    be_rules r = {be, ctx};
    /* padded stems to 4 channels: ResNet-50's 7x7 stem at batch 128 on an H200 took
     * 0.43 ms padded to 4, 0.63 ms padded to 8 (cuDNN runs both on tensor cores; 8 does
     * twice the zero work), 1.39 ms NCHW unpadded (docs/BENCHMARKS.md, session 3).
     * KILN_STEM_PAD=N overrides it (0: stems stay NCHW), for A/B runs */
    int32_t pad = 4;
    const char *env = getenv("KILN_STEM_PAD");
    if (env && *env) pad = atoi(env);
    build_layout_rules rules = {be_node_ok, &r, pad};
    return build_pass_layout_nhwc(model, &rules, moved, err);
}
