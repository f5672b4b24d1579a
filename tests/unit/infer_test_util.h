/* infer_test_util.h - building small IR graphs by hand for the inference tests.
 *
 * Shapes are written as strings: "batch,seq_len,64" (names become dim_param symbols,
 * numbers constants, "?" unknown). Helpers keep tests short and close to the ONNX they
 * mimic; everything lives in the model's arena like the importer's output. */
#ifndef KILN_TESTS_INFER_TEST_UTIL_H
#define KILN_TESTS_INFER_TEST_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "diag/diag.h"
#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/symdim.h"

typedef struct tg {
    ir_model *m;
    ir_graph *g;
    diag_list diags;
} tg;

static inline void tg_init(tg *t) {
    t->m = ir_model_new();
    t->g = ir_graph_new(t->m, NULL, "main");
    t->m->graph = t->g;
    diag_list_init(&t->diags);
}

static inline void tg_free(tg *t) {
    ir_model_free(t->m);
    diag_list_free(&t->diags);
}

static inline int32_t tg_parse_dims(tg *t, const char *spec, ir_dim **out) {
    if (!spec) {
        *out = NULL;
        return -1;
    }
    ir_dim tmp[IR_MAX_RANK];
    int32_t n = 0;
    const char *p = spec;
    while (*p && n < IR_MAX_RANK) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char buf[128];
        snprintf(buf, sizeof buf, "%.*s", (int)len, p);
        if (buf[0] == '?') tmp[n++] = ir_dim_unknown();
        else if ((buf[0] >= '0' && buf[0] <= '9') || buf[0] == '-') tmp[n++] = ir_dim_const(strtoll(buf, NULL, 10));
        else tmp[n++] = ir_dim_leaf(t->m, buf);
        if (!e) break;
        p = e + 1;
    }
    *out = n ? arena_calloc(&t->m->arena, (size_t)n, sizeof(ir_dim)) : NULL;
    if (n) memcpy(*out, tmp, sizeof(ir_dim) * (size_t)n);
    return n;
}

static inline void tg_set_type(tg *t, ir_value *v, kiln_dtype dt, const char *shape) {
    v->type.kind = IR_TYPE_TENSOR;
    v->type.dtype = dt;
    v->type.rank = tg_parse_dims(t, shape, &v->type.dims);
    v->flags |= IR_VALUE_HAS_VALUE_INFO;
}

/* A graph input "name" of dtype[shape] (shape "" = scalar, NULL = unknown rank). */
static inline int32_t tg_input(tg *t, const char *name, kiln_dtype dt, const char *shape) {
    int32_t id = ir_graph_value(t->g, name);
    ir_value *v = ir_val(t->g, id);
    tg_set_type(t, v, dt, shape);
    v->flags |= IR_VALUE_GRAPH_INPUT;
    int32_t *ni = arena_calloc(&t->m->arena, (size_t)t->g->n_inputs + 1, sizeof *ni);
    if (t->g->n_inputs) memcpy(ni, t->g->inputs, sizeof *ni * (size_t)t->g->n_inputs);
    ni[t->g->n_inputs++] = id;
    t->g->inputs = ni;
    return id;
}

static inline void tg_output(tg *t, const char *name, kiln_dtype dt, const char *shape) {
    int32_t id = ir_graph_value(t->g, name);
    ir_value *v = ir_val(t->g, id);
    if (shape || dt) tg_set_type(t, v, dt, shape);
    v->flags |= IR_VALUE_GRAPH_OUTPUT;
    int32_t *no = arena_calloc(&t->m->arena, (size_t)t->g->n_outputs + 1, sizeof *no);
    if (t->g->n_outputs) memcpy(no, t->g->outputs, sizeof *no * (size_t)t->g->n_outputs);
    no[t->g->n_outputs++] = id;
    t->g->outputs = no;
}

/* An initializer with int64 data (data may be NULL: then float zeros of the shape are not
 * materialised and only the type is known). */
static inline int32_t tg_init_t(tg *t, const char *name, kiln_dtype dt, int32_t rank, const int64_t *dims,
                                const void *data, uint64_t nbytes) {
    int32_t id = ir_graph_value(t->g, name);
    ir_value *v = ir_val(t->g, id);
    ir_tensor *tn = ARENA_NEW(&t->m->arena, ir_tensor);
    tn->name = v->name;
    tn->dtype = dt;
    tn->rank = rank;
    tn->dims = rank ? arena_memdup(&t->m->arena, dims, sizeof(int64_t) * (size_t)rank) : NULL;
    tn->count = 1;
    for (int32_t i = 0; i < rank; i++) tn->count *= (uint64_t)dims[i];
    tn->data = data ? arena_memdup(&t->m->arena, data, nbytes ? nbytes : 1) : NULL;
    tn->nbytes = nbytes;
    tn->where = data ? IR_DATA_OWNED : IR_DATA_NONE;
    v->init = tn;
    v->flags |= IR_VALUE_INITIALIZER;
    return id;
}

static inline int32_t tg_weight(tg *t, const char *name, int32_t rank, const int64_t *dims) {
    return tg_init_t(t, name, KILN_DTYPE_FLOAT, rank, dims, NULL, 0);
}

static inline int32_t tg_ints(tg *t, const char *name, int32_t n, const int64_t *vals) {
    int64_t d = n;
    return tg_init_t(t, name, KILN_DTYPE_INT64, 1, &d, vals, sizeof(int64_t) * (size_t)n);
}

static inline int32_t tg_scalar_i64(tg *t, const char *name, int64_t v) {
    return tg_init_t(t, name, KILN_DTYPE_INT64, 0, NULL, &v, 8);
}

/* Adds a node; ins/outs are comma-separated names ("" entries = omitted inputs). */
static inline int32_t tg_node(tg *t, const char *op, const char *name, const char *ins, const char *outs) {
    const char *lists[2] = {ins, outs};
    int32_t ids[2][64];
    int32_t cnt[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        const char *p = lists[k];
        while (p && *p) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            char buf[256];
            snprintf(buf, sizeof buf, "%.*s", (int)len, p);
            ids[k][cnt[k]++] = buf[0] ? ir_graph_value(t->g, buf) : IR_NONE;
            if (!e) break;
            p = e + 1;
            if (!*p) ids[k][cnt[k]++] = IR_NONE;
        }
    }
    int32_t ni = ir_graph_add_node(t->g);
    ir_node *n = ir_graph_node(t->g, ni);
    n->op_type = arena_strdup(&t->m->arena, op);
    n->name = arena_strdup(&t->m->arena, name);
    n->domain = "";
    n->n_inputs = cnt[0];
    n->inputs = arena_memdup(&t->m->arena, ids[0], sizeof(int32_t) * (size_t)(cnt[0] ? cnt[0] : 1));
    n->n_outputs = cnt[1];
    n->outputs = arena_memdup(&t->m->arena, ids[1], sizeof(int32_t) * (size_t)(cnt[1] ? cnt[1] : 1));
    for (int32_t i = 0; i < cnt[1]; i++)
        if (ids[1][i] != IR_NONE) ir_val(t->g, ids[1][i])->producer = ni;
    return ni;
}

static inline ir_attr *tg_attr(tg *t, int32_t ni, const char *name, ir_attr_type type) {
    ir_node *n = ir_graph_node(t->g, ni);
    ir_attr *na = arena_calloc(&t->m->arena, (size_t)n->n_attrs + 1, sizeof *na);
    if (n->n_attrs) memcpy(na, n->attrs, sizeof *na * (size_t)n->n_attrs);
    n->attrs = na;
    ir_attr *a = &na[n->n_attrs++];
    a->name = arena_strdup(&t->m->arena, name);
    a->type = type;
    return a;
}

static inline void tg_attr_i(tg *t, int32_t ni, const char *name, int64_t v) { tg_attr(t, ni, name, IR_ATTR_INT)->i = v; }
static inline void tg_attr_f(tg *t, int32_t ni, const char *name, float v) { tg_attr(t, ni, name, IR_ATTR_FLOAT)->f = v; }
static inline void tg_attr_s(tg *t, int32_t ni, const char *name, const char *s) {
    ir_attr *a = tg_attr(t, ni, name, IR_ATTR_STRING);
    a->s.data = arena_strdup(&t->m->arena, s);
    a->s.len = strlen(s);
}
static inline void tg_attr_ints(tg *t, int32_t ni, const char *name, int32_t n, const int64_t *v) {
    ir_attr *a = tg_attr(t, ni, name, IR_ATTR_INTS);
    a->n = n;
    a->ints = arena_memdup(&t->m->arena, v, sizeof(int64_t) * (size_t)(n ? n : 1));
}

static inline kiln_status tg_run(tg *t) {
    kiln_error err = {0};
    ir_infer_options o = {0};
    o.report_unknown_ops = true;
    kiln_status st = ir_infer(t->m, &o, &t->diags, &err);
    kiln_err_clear(&err);
    return st;
}

/* "float32[batch, seq_len, 64]" of a value by name. */
static inline const char *tg_type(tg *t, const char *name) {
    int32_t id = ir_graph_find(t->g, name);
    if (id == IR_NONE) return "(no such value)";
    return ir_type_str(t->m, &ir_val(t->g, id)->type);
}

/* All diagnostics rendered as text, in the model arena. */
static inline const char *tg_diags(tg *t) {
    strbuf sb;
    sb_init(&sb);
    for (int32_t i = 0; i < t->diags.n; i++) diag_render_text(&t->diags.items[i], &sb);
    const char *r = arena_strdup(&t->m->arena, sb_cstr(&sb));
    sb_free(&sb);
    return r;
}

static inline int tg_count(tg *t, const char *code) {
    int n = 0;
    for (int32_t i = 0; i < t->diags.n; i++)
        if (!strcmp(t->diags.items[i].code, code)) n++;
    return n;
}

#endif
