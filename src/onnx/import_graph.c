/* import_graph.c - decodes GraphProto, NodeProto, AttributeProto, ValueInfoProto and
 * TypeProto straight into the IR (one pass, arena allocations only).
 *
 * Values are created on demand by name (ir_graph_value), so the order of fields in the
 * file does not matter. Declarations (graph input/output/value_info) give a value its
 * type (the first declaration that has one wins, and beats an initializer's own shape, so
 * validation can compare the two); initializers attach their tensor. Structural problems
 * (two producers, missing producers, cycles) are not judged here: ir_validate does that.
 */
#include <inttypes.h>
#include <string.h>

#include "onnx/onnx_internal.h"

/* ---- types ----------------------------------------------------------------------------- */

static kiln_status check_elem_type(onnx_rd *rd, const pb_field *f, int64_t v, const char *leaf) {
    if (v == 0 || kiln_dtype_valid((int)v)) return KILN_OK;
    return onnx_fail(rd, KILN_ERR_UNSUPPORTED, f->tag_pos, leaf,
                     "is %" PRId64 ", which kiln does not know; valid data types are %s. The model may come "
                     "from a newer ONNX: re-export it with an older opset",
                     v, onnx_dtype_list());
}

static kiln_status decode_dim(onnx_rd *rd, pb_cursor *c, ir_dim *d) {
    d->kind = IR_DIM_UNKNOWN;
    d->sym = IR_NONE;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        if (f.num == 1) {
            int64_t v;
            st = onnx_varint(rd, &f, "dim_value", &v);
            /* Negative sizes are written by some exporters for "unknown". */
            if (!st && v >= 0) {
                d->kind = IR_DIM_CONST;
                d->value = v;
            } else if (!st) {
                d->kind = IR_DIM_UNKNOWN;
            }
        } else if (f.num == 2) {
            ir_bytes b;
            st = onnx_bytes(rd, &f, "dim_param", &b);
            if (!st && b.len > 0) {
                const char *name = onnx_scratch(rd, b.data, b.len);
                int32_t sym = name ? ir_sym_leaf(rd->model, name) : IR_NONE;
                if (sym == IR_NONE) return onnx_nomem(rd);
                d->kind = IR_DIM_SYM;
                d->sym = sym;
            } else if (!st) {
                d->kind = IR_DIM_UNKNOWN;
            }
        } else {
            st = onnx_skip(rd, &f); /* denotation: not kept per dimension */
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    return KILN_OK;
}

static kiln_status decode_shape(onnx_rd *rd, pb_cursor *c, ir_type *t) {
    pb_counts cnt;
    pb_count(rd->buf, c->pos, c->end, 0, 0, 0, &cnt);
    if (cnt.n[1] > IR_MAX_RANK)
        return onnx_fail(rd, KILN_ERR_LIMIT, c->pos, "dim",
                         "has %u dimensions; kiln's limit is %d: the file is corrupt or hostile", cnt.n[1],
                         IR_MAX_RANK);
    t->dims = ARENA_ARRAY(rd->a, ir_dim, cnt.n[1] ? cnt.n[1] : 1);
    if (!t->dims) return onnx_nomem(rd);
    t->rank = 0;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st;
        if (f.num == 1) {
            if ((uint32_t)t->rank >= cnt.n[1]) break;
            pb_cursor sub;
            st = onnx_enter(rd, &f, c, "dim", t->rank, 2, &sub);
            if (!st) st = decode_dim(rd, &sub, &t->dims[t->rank]);
            if (!st) st = onnx_leave(rd);
            t->rank++;
        } else {
            st = onnx_skip(rd, &f);
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    return KILN_OK;
}

/* TypeProto.Tensor and TypeProto.SparseTensor. */
static kiln_status decode_tensor_type(onnx_rd *rd, pb_cursor *c, ir_type *t) {
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st;
        if (f.num == 1) {
            int64_t v;
            st = onnx_varint(rd, &f, "elem_type", &v);
            if (!st) st = check_elem_type(rd, &f, v, "elem_type");
            if (!st) t->dtype = (kiln_dtype)v;
        } else if (f.num == 2) {
            pb_cursor sub;
            st = onnx_enter(rd, &f, c, "shape", -1, 0, &sub);
            if (!st) st = decode_shape(rd, &sub, t);
            if (!st) st = onnx_leave(rd);
        } else {
            st = onnx_skip(rd, &f);
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    return KILN_OK;
}

/* Decodes field `num` of the enclosing message (a TypeProto) into a new type at *out. */
static kiln_status decode_sub_type(onnx_rd *rd, const pb_field *f, pb_cursor *c, const char *field,
                                   ir_type **out) {
    ir_type *e = ARENA_NEW(rd->a, ir_type);
    if (!e) return onnx_nomem(rd);
    pb_cursor sub;
    kiln_status st = onnx_enter(rd, f, c, field, -1, 0, &sub);
    if (!st) st = onnx_decode_type(rd, &sub, e);
    if (!st) st = onnx_leave(rd);
    *out = e;
    return st;
}

/* TypeProto.Sequence / Optional (field 1 elem_type) and Map (1 key_type, 2 value_type). */
static kiln_status decode_container(onnx_rd *rd, pb_cursor *c, ir_type *t) {
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st;
        if (t->kind == IR_TYPE_MAP && f.num == 1) {
            int64_t v;
            st = onnx_varint(rd, &f, "key_type", &v);
            if (!st) st = check_elem_type(rd, &f, v, "key_type");
            if (!st) t->dtype = (kiln_dtype)v;
        } else if ((t->kind == IR_TYPE_MAP && f.num == 2) || (t->kind != IR_TYPE_MAP && f.num == 1)) {
            st = decode_sub_type(rd, &f, c, t->kind == IR_TYPE_MAP ? "value_type" : "elem_type", &t->elem);
        } else {
            st = onnx_skip(rd, &f);
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    return KILN_OK;
}

kiln_status onnx_decode_type(onnx_rd *rd, pb_cursor *c, ir_type *t) {
    memset(t, 0, sizeof *t);
    t->rank = -1;
    t->denotation = "";
    if (rd->type_depth >= ONNX_MAX_TYPE_DEPTH)
        return onnx_fail(rd, KILN_ERR_LIMIT, c->pos, NULL,
                         "types are nested more than %d deep (kiln's limit): the file is corrupt or hostile; "
                         "re-export the model",
                         ONNX_MAX_TYPE_DEPTH);
    rd->type_depth++;
    pb_field f;
    pb_result r = PB_DONE;
    kiln_status st = KILN_OK;
    while (!st && (r = pb_next(c, &f)) == PB_OK) {
        pb_cursor sub;
        const char *field = NULL;
        ir_type_kind kind = IR_TYPE_UNKNOWN;
        switch (f.num) {
        case 1: field = "tensor_type"; kind = IR_TYPE_TENSOR; break;
        case 8: field = "sparse_tensor_type"; kind = IR_TYPE_SPARSE_TENSOR; break;
        case 4: field = "sequence_type"; kind = IR_TYPE_SEQUENCE; break;
        case 9: field = "optional_type"; kind = IR_TYPE_OPTIONAL; break;
        case 5: field = "map_type"; kind = IR_TYPE_MAP; break;
        case 6: st = onnx_string(rd, &f, "denotation", &t->denotation); continue;
        default: st = onnx_skip(rd, &f); continue; /* opaque_type and unknown fields */
        }
        t->kind = kind;
        st = onnx_enter(rd, &f, c, field, -1, 0, &sub);
        if (st) break;
        if (kind == IR_TYPE_TENSOR || kind == IR_TYPE_SPARSE_TENSOR) {
            t->rank = -1;
            st = decode_tensor_type(rd, &sub, t);
        } else {
            st = decode_container(rd, &sub, t);
        }
        if (!st) st = onnx_leave(rd);
    }
    rd->type_depth--;
    if (st) return st;
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    return KILN_OK;
}

/* ---- values ---------------------------------------------------------------------------- */

static int32_t value_by_name(onnx_rd *rd, ir_graph *g, ir_bytes name) {
    const char *s = onnx_scratch(rd, name.data, name.len);
    return s ? ir_graph_value(g, s) : IR_NONE;
}

/* ValueInfoProto: declares a value's type. Returns the value id in *id. */
kiln_status onnx_decode_value_info(onnx_rd *rd, pb_cursor *c, ir_graph *g, uint32_t flag, int32_t *id) {
    ir_bytes name = {"", 0};
    ir_type type;
    bool has_type = false;
    const char *doc = NULL;
    memset(&type, 0, sizeof type);
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st;
        if (f.num == 1) {
            st = onnx_bytes(rd, &f, "name", &name);
        } else if (f.num == 2) {
            pb_cursor sub;
            st = onnx_enter(rd, &f, c, "type", -1, 0, &sub);
            if (!st) st = onnx_decode_type(rd, &sub, &type);
            if (!st) st = onnx_leave(rd);
            has_type = !st && type.kind != IR_TYPE_UNKNOWN;
        } else if (f.num == 3) {
            st = onnx_string(rd, &f, "doc_string", &doc);
        } else {
            st = onnx_skip(rd, &f);
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    int32_t v = value_by_name(rd, g, name);
    if (v == IR_NONE) return onnx_nomem(rd);
    ir_value *val = ir_val(g, v);
    val->flags |= flag;
    if (has_type && !(val->flags & IR_VALUE_HAS_VALUE_INFO)) {
        val->type = type;
        val->flags |= IR_VALUE_HAS_VALUE_INFO;
    }
    if (doc && !val->doc[0]) val->doc = doc;
    *id = v;
    return KILN_OK;
}

/* An initializer's own type, used when nothing declares the value. */
static void type_from_tensor(onnx_rd *rd, const ir_tensor *t, ir_type *ty) {
    memset(ty, 0, sizeof *ty);
    ty->kind = IR_TYPE_TENSOR;
    ty->dtype = t->dtype;
    ty->rank = t->rank;
    ty->denotation = "";
    ty->dims = ARENA_ARRAY(rd->a, ir_dim, t->rank ? (size_t)t->rank : 1);
    if (!ty->dims) {
        ty->rank = -1;
        return;
    }
    for (int32_t i = 0; i < t->rank; i++) {
        ty->dims[i].kind = IR_DIM_CONST;
        ty->dims[i].sym = IR_NONE;
        ty->dims[i].value = t->dims[i];
    }
}

/* ---- attributes and nodes -------------------------------------------------------------- */

enum {
    A_NAME = 1, A_F = 2, A_I = 3, A_S = 4, A_T = 5, A_G = 6, A_FLOATS = 7, A_INTS = 8, A_STRINGS = 9,
    A_TENSORS = 10, A_GRAPHS = 11, A_DOC = 13, A_TP = 14, A_TPS = 15, A_TYPE = 20, A_REF = 21,
    A_SPARSE = 22, A_SPARSES = 23
};

static kiln_status decode_subgraph(onnx_rd *rd, const pb_field *f, pb_cursor *c, ir_graph *parent,
                                   const char *field, int64_t index, ir_graph **out) {
    if (rd->graph_depth >= IR_MAX_GRAPH_DEPTH)
        return onnx_fail(rd, KILN_ERR_LIMIT, f->tag_pos, field,
                         "subgraphs are nested more than %d deep (kiln's limit): the file is corrupt or hostile; "
                         "flatten the control flow and re-export",
                         IR_MAX_GRAPH_DEPTH);
    ir_graph *sg = ir_graph_new(rd->model, parent, "");
    if (!sg) return onnx_nomem(rd);
    pb_cursor sub;
    kiln_status st = onnx_enter(rd, f, c, field, index, 2, &sub);
    if (st) return st;
    rd->graph_depth++;
    st = onnx_decode_graph(rd, &sub, sg);
    rd->graph_depth--;
    if (!st) st = onnx_leave(rd);
    *out = sg;
    return st;
}

/* Decodes a message-valued attribute field into a freshly allocated object. */
static kiln_status attr_tensor(onnx_rd *rd, const pb_field *f, pb_cursor *c, const char *field, int64_t index,
                               ir_tensor **out) {
    ir_tensor *t = ARENA_NEW(rd->a, ir_tensor);
    if (!t) return onnx_nomem(rd);
    pb_cursor sub;
    kiln_status st = onnx_enter(rd, f, c, field, index, 8, &sub);
    if (!st) st = onnx_decode_tensor(rd, &sub, t);
    if (!st) st = onnx_leave(rd);
    *out = t;
    return st;
}

static kiln_status attr_sparse(onnx_rd *rd, const pb_field *f, pb_cursor *c, const char *field, int64_t index,
                               ir_sparse_tensor **out) {
    ir_sparse_tensor *s = ARENA_NEW(rd->a, ir_sparse_tensor);
    if (!s) return onnx_nomem(rd);
    pb_cursor sub;
    kiln_status st = onnx_enter(rd, f, c, field, index, 0, &sub);
    if (!st) st = onnx_decode_sparse(rd, &sub, s);
    if (!st) st = onnx_leave(rd);
    *out = s;
    return st;
}

static kiln_status attr_type_proto(onnx_rd *rd, const pb_field *f, pb_cursor *c, const char *field,
                                   int64_t index, ir_type **out) {
    ir_type *t = ARENA_NEW(rd->a, ir_type);
    if (!t) return onnx_nomem(rd);
    pb_cursor sub;
    kiln_status st = onnx_enter(rd, f, c, field, index, 0, &sub);
    if (!st) st = onnx_decode_type(rd, &sub, t);
    if (!st) st = onnx_leave(rd);
    *out = t;
    return st;
}

/* Attributes written before AttributeProto.type existed: guess from the field set. */
static ir_attr_type infer_attr_type(const pb_counts *cnt) {
    static const struct { int field; ir_attr_type type; } order[] = {
        {A_F, IR_ATTR_FLOAT},        {A_I, IR_ATTR_INT},         {A_S, IR_ATTR_STRING},
        {A_T, IR_ATTR_TENSOR},       {A_G, IR_ATTR_GRAPH},       {A_SPARSE, IR_ATTR_SPARSE_TENSOR},
        {A_TP, IR_ATTR_TYPE_PROTO},  {A_FLOATS, IR_ATTR_FLOATS}, {A_INTS, IR_ATTR_INTS},
        {A_STRINGS, IR_ATTR_STRINGS}, {A_TENSORS, IR_ATTR_TENSORS}, {A_GRAPHS, IR_ATTR_GRAPHS},
        {A_SPARSES, IR_ATTR_SPARSE_TENSORS}, {A_TPS, IR_ATTR_TYPE_PROTOS}};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (cnt->n[order[i].field]) return order[i].type;
    return IR_ATTR_UNDEFINED;
}

kiln_status onnx_decode_attr(onnx_rd *rd, pb_cursor *c, ir_graph *g, ir_attr *a) {
    uint64_t start = c->pos;
    memset(a, 0, sizeof *a);
    a->name = "";
    a->doc = "";
    a->s.data = "";
    pb_counts cnt;
    pb_count(rd->buf, start, c->end, 1u << A_INTS, 1u << A_FLOATS, 0, &cnt);
    uint64_t nf = 0, ni = 0;
    int32_t ns = 0, nt = 0, ng = 0, nsp = 0, ntp = 0;
    int64_t type = 0;
    bool has_type = false;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        switch (f.num) {
        case A_NAME: st = onnx_string(rd, &f, "name", &a->name); break;
        case A_REF: st = onnx_string(rd, &f, "ref_attr_name", &a->ref_attr_name); break;
        case A_DOC: st = onnx_string(rd, &f, "doc_string", &a->doc); break;
        case A_TYPE:
            st = onnx_varint(rd, &f, "type", &type);
            has_type = true;
            break;
        case A_F:
            st = onnx_expect(rd, &f, PB_FIXED32, "f");
            if (!st) {
                uint32_t u = (uint32_t)f.value;
                memcpy(&a->f, &u, 4);
            }
            break;
        case A_I: st = onnx_varint(rd, &f, "i", &a->i); break;
        case A_S: st = onnx_bytes(rd, &f, "s", &a->s); break;
        case A_T: st = attr_tensor(rd, &f, c, "t", -1, &a->t); break;
        case A_G: st = decode_subgraph(rd, &f, c, g, "g", -1, &a->g); break;
        case A_SPARSE: st = attr_sparse(rd, &f, c, "sparse_tensor", -1, &a->sparse); break;
        case A_TP: st = attr_type_proto(rd, &f, c, "tp", -1, &a->tp); break;
        case A_FLOATS:
            if (!a->floats && !(a->floats = ARENA_ARRAY(rd->a, float, cnt.elems[A_FLOATS] + 1)))
                return onnx_nomem(rd);
            st = onnx_floats(rd, &f, "floats", a->floats, &nf, cnt.elems[A_FLOATS]);
            break;
        case A_INTS:
            if (!a->ints && !(a->ints = ARENA_ARRAY(rd->a, int64_t, cnt.elems[A_INTS] + 1))) return onnx_nomem(rd);
            st = onnx_ints(rd, &f, "ints", a->ints, &ni, cnt.elems[A_INTS]);
            break;
        case A_STRINGS:
            if (!a->strings && !(a->strings = ARENA_ARRAY(rd->a, ir_bytes, cnt.n[A_STRINGS] + 1)))
                return onnx_nomem(rd);
            if ((uint32_t)ns < cnt.n[A_STRINGS]) st = onnx_bytes(rd, &f, "strings", &a->strings[ns++]);
            break;
        case A_TENSORS:
            if (!a->tensors && !(a->tensors = ARENA_ARRAY(rd->a, ir_tensor *, cnt.n[A_TENSORS] + 1)))
                return onnx_nomem(rd);
            if ((uint32_t)nt < cnt.n[A_TENSORS]) {
                st = attr_tensor(rd, &f, c, "tensors", nt, &a->tensors[nt]);
                nt++;
            }
            break;
        case A_GRAPHS:
            if (!a->graphs && !(a->graphs = ARENA_ARRAY(rd->a, ir_graph *, cnt.n[A_GRAPHS] + 1)))
                return onnx_nomem(rd);
            if ((uint32_t)ng < cnt.n[A_GRAPHS]) {
                st = decode_subgraph(rd, &f, c, g, "graphs", ng, &a->graphs[ng]);
                ng++;
            }
            break;
        case A_SPARSES:
            if (!a->sparses && !(a->sparses = ARENA_ARRAY(rd->a, ir_sparse_tensor *, cnt.n[A_SPARSES] + 1)))
                return onnx_nomem(rd);
            if ((uint32_t)nsp < cnt.n[A_SPARSES]) {
                st = attr_sparse(rd, &f, c, "sparse_tensors", nsp, &a->sparses[nsp]);
                nsp++;
            }
            break;
        case A_TPS:
            if (!a->tps && !(a->tps = ARENA_ARRAY(rd->a, ir_type *, cnt.n[A_TPS] + 1))) return onnx_nomem(rd);
            if ((uint32_t)ntp < cnt.n[A_TPS]) {
                st = attr_type_proto(rd, &f, c, "type_protos", ntp, &a->tps[ntp]);
                ntp++;
            }
            break;
        default: st = onnx_skip(rd, &f); break;
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    if (has_type && (type < 0 || type > IR_ATTR_TYPE_PROTOS))
        return onnx_fail(rd, KILN_ERR_FORMAT, start, "type",
                         "is %" PRId64 ", not a known attribute type (1..14): the file is corrupt or from a much "
                         "newer ONNX; re-export the model",
                         type);
    a->type = has_type && type != 0 ? (ir_attr_type)type : infer_attr_type(&cnt);
    switch (a->type) {
    case IR_ATTR_FLOATS: a->n = (int32_t)nf; break;
    case IR_ATTR_INTS: a->n = (int32_t)ni; break;
    case IR_ATTR_STRINGS: a->n = ns; break;
    case IR_ATTR_TENSORS: a->n = nt; break;
    case IR_ATTR_GRAPHS: a->n = ng; break;
    case IR_ATTR_SPARSE_TENSORS: a->n = nsp; break;
    case IR_ATTR_TYPE_PROTOS: a->n = ntp; break;
    default: a->n = 0; break;
    }
    if (a->type == IR_ATTR_UNDEFINED && !a->ref_attr_name)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, NULL,
                         "has no type and no value: the attribute is empty; re-export the model");
    /* A message-valued attribute must carry its message (unless it refers to a function
     * attribute), so consumers can rely on the pointer. */
    bool missing = (a->type == IR_ATTR_TENSOR && !a->t) || (a->type == IR_ATTR_GRAPH && !a->g) ||
                   (a->type == IR_ATTR_SPARSE_TENSOR && !a->sparse) || (a->type == IR_ATTR_TYPE_PROTO && !a->tp);
    if (missing && !a->ref_attr_name)
        return onnx_fail(rd, KILN_ERR_FORMAT, start, NULL,
                         "has type %s but no value: the attribute is incomplete; re-export the model",
                         ir_attr_type_name(a->type));
    return KILN_OK;
}

/* NodeProto. `g` receives the node; values are created in g. */
kiln_status onnx_decode_node(onnx_rd *rd, pb_cursor *c, ir_graph *g, int32_t source_index) {
    uint64_t start = c->pos;
    pb_counts cnt;
    pb_count(rd->buf, start, c->end, 0, 0, 0, &cnt);
    int32_t id = ir_graph_add_node(g);
    if (id == IR_NONE) return onnx_nomem(rd);
    ir_node *n = ir_graph_node(g, id); /* stable: nothing appends to g's nodes meanwhile */
    n->source_index = source_index;
    n->file_offset = start;
    n->inputs = ARENA_ARRAY(rd->a, int32_t, cnt.n[1] + 1);
    n->outputs = ARENA_ARRAY(rd->a, int32_t, cnt.n[2] + 1);
    n->attrs = ARENA_ARRAY(rd->a, ir_attr, cnt.n[5] + 1);
    if (!n->inputs || !n->outputs || !n->attrs) return onnx_nomem(rd);
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        ir_bytes b;
        switch (f.num) {
        case 1:
        case 2: {
            const char *leaf = f.num == 1 ? "input" : "output";
            st = onnx_bytes(rd, &f, leaf, &b);
            if (st) break;
            int32_t v = IR_NONE;
            if (b.len) {
                v = value_by_name(rd, g, b);
                if (v == IR_NONE) return onnx_nomem(rd);
            }
            if (f.num == 1) {
                if ((uint32_t)n->n_inputs < cnt.n[1]) n->inputs[n->n_inputs++] = v;
            } else if ((uint32_t)n->n_outputs < cnt.n[2]) {
                n->outputs[n->n_outputs++] = v;
                if (v != IR_NONE && ir_val(g, v)->producer == IR_NONE) ir_val(g, v)->producer = id;
            }
            break;
        }
        case 3: st = onnx_string(rd, &f, "name", &n->name); break;
        case 4: st = onnx_string(rd, &f, "op_type", &n->op_type); break;
        case 7: st = onnx_string(rd, &f, "domain", &n->domain); break;
        case 8: st = onnx_string(rd, &f, "overload", &n->overload); break;
        case 6: st = onnx_string(rd, &f, "doc_string", &n->doc); break;
        case 5: {
            if ((uint32_t)n->n_attrs >= cnt.n[5]) break;
            pb_cursor sub;
            int32_t k = n->n_attrs;
            st = onnx_enter(rd, &f, c, "attribute", k, 1, &sub);
            if (!st) st = onnx_decode_attr(rd, &sub, g, &n->attrs[k]);
            if (!st) st = onnx_leave(rd);
            n->n_attrs++;
            break;
        }
        default: st = onnx_skip(rd, &f); break;
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    if (strcmp(n->domain, "ai.onnx") == 0) n->domain = "";
    if (!n->name[0]) {
        n->name = arena_printf(rd->a, "%s_%d", n->op_type[0] ? n->op_type : "node", (int)id);
        if (!n->name) return onnx_nomem(rd);
        n->name_generated = true;
    }
    /* Subgraphs learn where they sit, for messages about them. */
    for (int32_t i = 0; i < n->n_attrs; i++) {
        ir_attr *a = &n->attrs[i];
        if (a->g) {
            a->g->location = arena_printf(rd->a, "node '%s' (%s) attribute '%s'", n->name, n->op_type, a->name);
            if (!a->g->location) return onnx_nomem(rd);
        }
        for (int32_t k = 0; a->graphs && k < a->n && a->type == IR_ATTR_GRAPHS; k++) {
            a->graphs[k]->location =
                arena_printf(rd->a, "node '%s' (%s) attribute '%s'[%d]", n->name, n->op_type, a->name, (int)k);
            if (!a->graphs[k]->location) return onnx_nomem(rd);
        }
    }
    return KILN_OK;
}

/* ---- graphs ---------------------------------------------------------------------------- */

enum { G_NODE = 1, G_NAME = 2, G_INIT = 5, G_DOC = 10, G_INPUT = 11, G_OUTPUT = 12, G_VALUE_INFO = 13, G_SPARSE = 15 };

kiln_status onnx_decode_graph(onnx_rd *rd, pb_cursor *c, ir_graph *g) {
    pb_counts cnt;
    pb_count(rd->buf, c->pos, c->end, 0, 0, 0, &cnt);
    g->inputs = ARENA_ARRAY(rd->a, int32_t, cnt.n[G_INPUT] + 1);
    g->outputs = ARENA_ARRAY(rd->a, int32_t, cnt.n[G_OUTPUT] + 1);
    g->initializers = ARENA_ARRAY(rd->a, int32_t, cnt.n[G_INIT] + 1);
    g->sparse_initializers = ARENA_ARRAY(rd->a, ir_sparse_tensor *, cnt.n[G_SPARSE] + 1);
    g->sparse_initializer_names = ARENA_ARRAY(rd->a, const char *, cnt.n[G_SPARSE] + 1);
    if (!g->inputs || !g->outputs || !g->initializers || !g->sparse_initializers || !g->sparse_initializer_names)
        return onnx_nomem(rd);
    int32_t n_nodes = 0, n_vi = 0;
    pb_field f;
    pb_result r;
    while ((r = pb_next(c, &f)) == PB_OK) {
        kiln_status st = KILN_OK;
        pb_cursor sub;
        int32_t v;
        switch (f.num) {
        case G_NODE:
            st = onnx_enter(rd, &f, c, "node", n_nodes, 3, &sub);
            if (!st) st = onnx_decode_node(rd, &sub, g, n_nodes);
            if (!st) st = onnx_leave(rd);
            n_nodes++;
            break;
        case G_NAME: st = onnx_string(rd, &f, "name", &g->name); break;
        case G_DOC: st = onnx_string(rd, &f, "doc_string", &g->doc); break;
        case G_INIT: {
            if ((uint32_t)g->n_initializers >= cnt.n[G_INIT]) break;
            ir_tensor *t = ARENA_NEW(rd->a, ir_tensor);
            if (!t) return onnx_nomem(rd);
            st = onnx_enter(rd, &f, c, "initializer", g->n_initializers, 8, &sub);
            if (!st) st = onnx_decode_tensor(rd, &sub, t);
            if (!st) st = onnx_leave(rd);
            if (st) break;
            v = ir_graph_value(g, t->name);
            if (v == IR_NONE) return onnx_nomem(rd);
            ir_value *val = ir_val(g, v);
            if (!val->init) val->init = t; /* a second one is a duplicate: validation reports it */
            val->flags |= IR_VALUE_INITIALIZER;
            if (!(val->flags & IR_VALUE_HAS_VALUE_INFO) && val->type.kind == IR_TYPE_UNKNOWN)
                type_from_tensor(rd, t, &val->type);
            g->initializers[g->n_initializers++] = v;
            break;
        }
        case G_SPARSE: {
            if ((uint32_t)g->n_sparse_initializers >= cnt.n[G_SPARSE]) break;
            ir_sparse_tensor *s = ARENA_NEW(rd->a, ir_sparse_tensor);
            if (!s) return onnx_nomem(rd);
            st = onnx_enter(rd, &f, c, "sparse_initializer", g->n_sparse_initializers, 0, &sub);
            if (!st) st = onnx_decode_sparse(rd, &sub, s);
            if (!st) st = onnx_leave(rd);
            if (st) break;
            const char *name = s->values->name;
            v = ir_graph_value(g, name);
            if (v == IR_NONE) return onnx_nomem(rd);
            ir_value *val = ir_val(g, v);
            /* A sparse initializer defines the value, but has no dense `init` tensor. */
            val->flags |= IR_VALUE_INITIALIZER;
            if (!(val->flags & IR_VALUE_HAS_VALUE_INFO) && val->type.kind == IR_TYPE_UNKNOWN) {
                ir_tensor shape = *s->values;
                shape.rank = s->rank;
                shape.dims = s->dims;
                type_from_tensor(rd, &shape, &val->type);
            }
            g->sparse_initializers[g->n_sparse_initializers] = s;
            g->sparse_initializer_names[g->n_sparse_initializers++] = name;
            break;
        }
        case G_INPUT:
            if ((uint32_t)g->n_inputs >= cnt.n[G_INPUT]) break;
            st = onnx_enter(rd, &f, c, "input", g->n_inputs, 1, &sub);
            if (!st) st = onnx_decode_value_info(rd, &sub, g, IR_VALUE_GRAPH_INPUT, &v);
            if (!st) st = onnx_leave(rd);
            if (!st) g->inputs[g->n_inputs++] = v;
            break;
        case G_OUTPUT:
            if ((uint32_t)g->n_outputs >= cnt.n[G_OUTPUT]) break;
            st = onnx_enter(rd, &f, c, "output", g->n_outputs, 1, &sub);
            if (!st) st = onnx_decode_value_info(rd, &sub, g, IR_VALUE_GRAPH_OUTPUT, &v);
            if (!st) st = onnx_leave(rd);
            if (!st) g->outputs[g->n_outputs++] = v;
            break;
        case G_VALUE_INFO:
            st = onnx_enter(rd, &f, c, "value_info", n_vi++, 1, &sub);
            if (!st) st = onnx_decode_value_info(rd, &sub, g, 0, &v);
            if (!st) st = onnx_leave(rd);
            break;
        default: st = onnx_skip(rd, &f); break;
        }
        if (st) return st;
    }
    if (r != PB_DONE) return onnx_fail_wire(rd, r, c, &f, NULL);
    return KILN_OK;
}
