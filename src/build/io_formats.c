/* io_formats.c - --inputIOFormats / --outputIOFormats: parsing the specs and retyping the
 * graph's inputs and outputs with Casts at the boundary (see io_formats.h).
 *
 * Why Casts in the graph rather than a conversion in the runtime's copy: the engine then
 * describes its own interface (the saved I/O table says float16, `kiln inspect` shows
 * it, --loadInputs checks files against it), every backend runs it unchanged, and the
 * FP16 pass can cancel the float16 -> float32 -> float16 round trip so nothing runs at all
 * for a half input feeding half kernels.
 */
#include "build/io_formats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/passes/pass_util.h"

static const struct {
    const char *name;
    kiln_dtype dt;
} io_types[] = {
    {"fp32", KILN_DTYPE_FLOAT}, {"fp16", KILN_DTYPE_FLOAT16}, {"bf16", KILN_DTYPE_BFLOAT16},
    {"int32", KILN_DTYPE_INT32}, {"int64", KILN_DTYPE_INT64}, {"int8", KILN_DTYPE_INT8},
    {"uint8", KILN_DTYPE_UINT8}, {"bool", KILN_DTYPE_BOOL},
};
#define N_IO_TYPES ((int)(sizeof io_types / sizeof io_types[0]))
#define IO_TYPES_TEXT "fp32, fp16, bf16, int32, int64, int8, uint8, bool"

/* Whether the format part (after the ':') names the linear layout, alone or among
 * '+'-joined alternatives. */
static bool format_linear(const char *f, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && f[j] != '+') j++;
        if (j - i == 3 && !strncmp(f + i, "chw", 3)) return true;
        i = j + 1;
    }
    return false;
}

bool build_io_spec_parse(const char *flag, const char *spec, build_io_spec *out, kiln_error *err) {
    memset(out, 0, sizeof *out);
    if (!spec || !spec[0]) {
        kiln_err_set(err, KILN_ERR_INVALID_ARG, "%s needs type:format entries, e.g. %s=fp16:chw", flag, flag);
        return false;
    }
    const char *p = spec;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (!colon) {
            kiln_err_set(err, KILN_ERR_INVALID_ARG,
                         "%s: entry %d '%.*s' is not type:format (e.g. fp16:chw); types: " IO_TYPES_TEXT, flag,
                         out->n + 1, (int)len, p);
            return false;
        }
        size_t tlen = (size_t)(colon - p);
        int t = -1;
        for (int k = 0; k < N_IO_TYPES; k++)
            if (strlen(io_types[k].name) == tlen && !strncmp(io_types[k].name, p, tlen)) t = k;
        if (t < 0) {
            kiln_err_set(err, KILN_ERR_INVALID_ARG, "%s: entry %d: unknown or unsupported type '%.*s'; kiln accepts " IO_TYPES_TEXT,
                         flag, out->n + 1, (int)tlen, p);
            return false;
        }
        size_t flen = len - tlen - 1;
        if (!format_linear(colon + 1, flen)) {
            kiln_err_set(err, KILN_ERR_INVALID_ARG,
                         "%s: entry %d: format '%.*s' is not supported; kiln's engines take and give linear "
                         "tensors (chw) and choose internal layouts (e.g. channels-last) themselves: use %.*s:chw",
                         flag, out->n + 1, (int)flen, colon + 1, (int)tlen, p);
            return false;
        }
        if (out->n >= BUILD_IO_MAX_SPECS) {
            kiln_err_set(err, KILN_ERR_INVALID_ARG, "%s: more than %d entries", flag, BUILD_IO_MAX_SPECS);
            return false;
        }
        out->types[out->n++] = io_types[t].dt;
        if (!end) break;
        p = end + 1;
    }
    return true;
}

static bool is_float(kiln_dtype d) {
    return d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_FLOAT16 || d == KILN_DTYPE_BFLOAT16 || d == KILN_DTYPE_DOUBLE;
}

static bool is_int(kiln_dtype d) {
    return d == KILN_DTYPE_INT8 || d == KILN_DTYPE_UINT8 || d == KILN_DTYPE_INT16 || d == KILN_DTYPE_UINT16 ||
           d == KILN_DTYPE_INT32 || d == KILN_DTYPE_UINT32 || d == KILN_DTYPE_INT64 || d == KILN_DTYPE_UINT64;
}

static bool convertible(kiln_dtype from, kiln_dtype to) {
    return from == to || (is_float(from) && is_float(to)) || (is_int(from) && is_int(to));
}

/* A fresh value named "<base>_as_<dtype>" (made unique) with v's tensor type in dt. */
static int32_t new_value(ir_model *m, ir_graph *g, int32_t v, kiln_dtype dt) {
    const char *suffix = arena_printf(&m->arena, "_as_%s", kiln_dtype_name(dt));
    int32_t id = suffix ? pass_add_named_value(g, g->values[v].name, suffix) : IR_NONE;
    if (id == IR_NONE) return IR_NONE;
    g->values[id].type = g->values[v].type; /* after add_value: values may have moved */
    g->values[id].type.dtype = dt;
    return id;
}

/* The value's dtype, also in the declared type type inference restores graph inputs
 * from (ir_infer resets them to `declared`: without this a later inference would undo
 * the retyping). */
static void set_dtype(ir_value *v, kiln_dtype dt) {
    v->type.dtype = dt;
    if (v->declared.kind == IR_TYPE_TENSOR || (v->flags & IR_VALUE_DECLARED_SAVED)) v->declared.dtype = dt;
}

typedef struct io_ctx {
    ir_model *m;
    ir_graph *g;
    pass_inserted ins;
    pass_uses u;
    kiln_error *err;
} io_ctx;

static kiln_status cast_node(io_ctx *c, int32_t from, int32_t to, kiln_dtype dt, int32_t after) {
    ir_attr a = {.name = "to", .type = IR_ATTR_INT, .i = dt, .doc = ""};
    return pass_append_unary(c->m, c->g, &c->ins, "Cast", "io", from, to, &a, after, c->err);
}

static kiln_status retype_input(io_ctx *c, int32_t x, kiln_dtype want) {
    ir_graph *g = c->g;
    ir_value *v = &g->values[x];
    kiln_dtype have = v->type.dtype;
    if (have == want) return KILN_OK;
    if (!convertible(have, want))
        return kiln_err_set(c->err, KILN_ERR_INVALID_ARG,
                            "--inputIOFormats: input '%s' is %s in the model; it can be given as another %s type, "
                            "not %s",
                            v->name, kiln_dtype_name(have), is_float(have) ? "floating-point" : "integer",
                            kiln_dtype_name(want));
    if (c->u.pinned[x])
        return kiln_err_set(c->err, KILN_ERR_UNSUPPORTED,
                            "--inputIOFormats: input '%s' is also a graph output or read by name inside a subgraph: "
                            "kiln cannot give it another type; leave it at %s",
                            v->name, kiln_dtype_name(have));
    int32_t inner = new_value(c->m, g, x, have);
    if (inner == IR_NONE) return kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory retyping input '%s'", g->values[x].name);
    pass_replace_uses(g, x, inner);
    set_dtype(&g->values[x], want);
    return cast_node(c, x, inner, have, -1);
}

static kiln_status retype_output(io_ctx *c, int32_t y, kiln_dtype want) {
    ir_graph *g = c->g;
    ir_value *v = &g->values[y];
    kiln_dtype have = v->init ? v->init->dtype : v->type.dtype;
    if (have == want) return KILN_OK;
    if (!convertible(have, want))
        return kiln_err_set(c->err, KILN_ERR_INVALID_ARG,
                            "--outputIOFormats: output '%s' is %s in the model; it can be given as another %s type, "
                            "not %s",
                            v->name, kiln_dtype_name(have), is_float(have) ? "floating-point" : "integer",
                            kiln_dtype_name(want));
    int32_t p = v->producer;
    if (p < 0 || v->init || (v->flags & IR_VALUE_GRAPH_INPUT))
        return kiln_err_set(c->err, KILN_ERR_UNSUPPORTED,
                            "--outputIOFormats: output '%s' is a graph input or a constant, not computed by a node: "
                            "leave it at %s",
                            v->name, kiln_dtype_name(have));
    int32_t inner = new_value(c->m, g, y, have);
    if (inner == IR_NONE) return kiln_err_set(c->err, KILN_ERR_NOMEM, "out of memory retyping output '%s'", g->values[y].name);
    pass_replace_uses(g, y, inner); /* other nodes reading y read the model-typed value */
    ir_node *n = &g->nodes[p];
    for (int32_t k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] == y) n->outputs[k] = inner;
    g->values[inner].producer = p;
    g->values[y].producer = IR_NONE;
    set_dtype(&g->values[y], want);
    return cast_node(c, inner, y, want, p);
}

/* The graph inputs a caller feeds (initializers listed as inputs are not among them). */
static int32_t fed_inputs(const ir_graph *g, int32_t *ids) {
    int32_t n = 0;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t v = g->inputs[i];
        if (v < 0 || v >= g->n_values || g->values[v].init) continue;
        if (ids) ids[n] = v;
        n++;
    }
    return n;
}

static kiln_status check_count(const char *flag, const char *what, int32_t given, int32_t have, kiln_error *err) {
    if (given == 1 || given == have) return KILN_OK;
    return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                        "%s gives %d entries; the model has %d %s%s: give one entry per %s in declaration order "
                        "(see `kiln inspect`), or a single entry for all of them",
                        flag, given, have, what, have == 1 ? "" : "s", what);
}

kiln_status build_apply_io_formats(ir_model *model, const build_io_spec *in_spec, const build_io_spec *out_spec,
                                   int32_t *changed, kiln_error *err) {
    if (changed) *changed = 0;
    if (!model || !model->graph || ((!in_spec || !in_spec->n) && (!out_spec || !out_spec->n))) return KILN_OK;
    ir_graph *g = model->graph;
    int32_t n_in = fed_inputs(g, NULL);
    kiln_status st = KILN_OK;
    if (in_spec && in_spec->n) st = check_count("--inputIOFormats", "input", in_spec->n, n_in, err);
    if (st == KILN_OK && out_spec && out_spec->n)
        st = check_count("--outputIOFormats", "output", out_spec->n, g->n_outputs, err);
    if (st != KILN_OK) return st;
    io_ctx c = {model, g, {NULL, 0, 0}, {NULL, NULL, NULL}, err};
    int32_t n0 = g->n_nodes;
    st = pass_uses_compute(g, &c.u, err);
    int32_t *ins = st == KILN_OK ? calloc((size_t)n_in + 1, sizeof *ins) : NULL;
    if (st == KILN_OK && !ins) st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    if (st == KILN_OK) fed_inputs(g, ins);
    int32_t count = 0;
    for (int32_t i = 0; st == KILN_OK && in_spec && in_spec->n && i < n_in; i++) {
        kiln_dtype want = in_spec->types[in_spec->n == 1 ? 0 : i];
        kiln_dtype before = g->values[ins[i]].type.dtype;
        st = retype_input(&c, ins[i], want);
        count += st == KILN_OK && before != want;
    }
    for (int32_t i = 0; st == KILN_OK && out_spec && out_spec->n && i < g->n_outputs; i++) {
        int32_t y = g->outputs[i];
        if (y < 0 || y >= g->n_values) continue;
        kiln_dtype want = out_spec->types[out_spec->n == 1 ? 0 : i];
        kiln_dtype before = g->values[y].init ? g->values[y].init->dtype : g->values[y].type.dtype;
        st = retype_output(&c, y, want);
        count += st == KILN_OK && before != want;
    }
    if (st == KILN_OK && c.ins.n) st = pass_place_appended_nodes(g, n0, c.ins.n, c.ins.after, err);
    free(ins);
    free(c.ins.after);
    pass_uses_free(&c.u);
    if (changed) *changed = count;
    return st;
}
