/* engine_write.c - serializes an engine_plan into the file format of format.h.
 *
 * The small sections (META, GRAPH, LAYERS, MEMPLAN) are built in memory first; weights
 * are not copied: the writer records where each tensor's bytes live and streams them
 * into the aligned WEIGHTS section, computing its checksum on the way (twice: once for
 * the header, once while writing, so nothing large is buffered).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/alloc.h"
#include "engine/codec.h"
#include "engine/engine.h"

typedef struct weight_ref {
    const void *data;
    uint64_t nbytes;
    uint64_t offset; /* inside the WEIGHTS section */
} weight_ref;

typedef struct writer {
    const ir_model *model;
    wbuf meta, graph, layers, memplan;
    weight_ref *weights;
    int32_t n_weights, cap_weights;
    uint64_t weights_size;
    kiln_error *err;
    kiln_status st;
} writer;

static int32_t graph_index(const ir_model *m, const ir_graph *g) {
    for (int32_t i = 0; i < m->n_graphs; i++)
        if (m->graphs[i] == g) return i;
    return -1;
}

static void w_dim(wbuf *b, ir_dim d) {
    wb_u8(b, (uint8_t)d.kind);
    wb_i32(b, d.kind == IR_DIM_SYM ? d.sym : -1);
    wb_i64(b, d.kind == IR_DIM_CONST ? d.value : 0);
}

static void w_type(wbuf *b, const ir_type *t) {
    wb_u8(b, (uint8_t)t->kind);
    wb_u32(b, (uint32_t)t->dtype);
    int32_t rank = t->dims ? t->rank : (t->rank > 0 ? -1 : t->rank);
    wb_i32(b, rank);
    for (int32_t i = 0; i < rank; i++) w_dim(b, t->dims[i]);
    wb_u8(b, t->elem ? 1 : 0);
    if (t->elem) w_type(b, t->elem);
    wb_str(b, t->denotation);
}

static void w_fail(writer *w, kiln_status code, const char *msg, const char *name) {
    if (w->st == KILN_OK) w->st = kiln_err_set(w->err, code, "cannot save the engine: %s '%s'", msg, name ? name : "");
}

static void w_tensor(writer *w, wbuf *b, const ir_tensor *t) {
    wb_str(b, t->name);
    wb_u32(b, (uint32_t)t->dtype);
    wb_i32(b, t->rank);
    for (int32_t i = 0; i < t->rank; i++) wb_i64(b, t->dims[i]);
    if (t->dtype == KILN_DTYPE_STRING) {
        wb_u8(b, ENGINE_TSTORE_STRINGS);
        for (uint64_t i = 0; i < t->count; i++) {
            const ir_bytes *s = t->strings ? &t->strings[i] : NULL;
            if (s && s->len > UINT32_MAX) {
                w_fail(w, KILN_ERR_LIMIT, "a string element over 4 GiB in tensor", t->name);
                return;
            }
            wb_strn(b, s ? s->data : "", s ? (size_t)s->len : 0);
        }
        return;
    }
    if (t->nbytes == 0 || (!t->data && t->where == IR_DATA_NONE)) {
        wb_u8(b, t->nbytes == 0 ? ENGINE_TSTORE_INLINE : ENGINE_TSTORE_NONE);
        if (t->nbytes == 0) wb_u64(b, 0);
        return;
    }
    if (!t->data) {
        w_fail(w, KILN_ERR_INTERNAL, "the data of tensor was never loaded (external data not mapped)", t->name);
        return;
    }
    if (t->nbytes <= ENGINE_INLINE_TENSOR_MAX) {
        wb_u8(b, ENGINE_TSTORE_INLINE);
        wb_u64(b, t->nbytes);
        wb_bytes(b, t->data, (size_t)t->nbytes);
        return;
    }
    if (w->n_weights == w->cap_weights) {
        int32_t nc = w->cap_weights ? w->cap_weights * 2 : 64;
        weight_ref *nw = kiln_realloc_array(w->weights, (size_t)nc, sizeof *nw);
        if (!nw) {
            w_fail(w, KILN_ERR_NOMEM, "out of memory at tensor", t->name);
            return;
        }
        w->weights = nw;
        w->cap_weights = nc;
    }
    uint64_t off = (w->weights_size + ENGINE_TENSOR_ALIGN - 1) / ENGINE_TENSOR_ALIGN * ENGINE_TENSOR_ALIGN;
    w->weights[w->n_weights++] = (weight_ref){t->data, t->nbytes, off};
    w->weights_size = off + t->nbytes;
    wb_u8(b, ENGINE_TSTORE_WEIGHTS);
    wb_u64(b, off);
    wb_u64(b, t->nbytes);
}

static void w_sparse(writer *w, wbuf *b, const ir_sparse_tensor *s) {
    static const ir_tensor empty = {.name = "", .rank = 0};
    w_tensor(w, b, s->values ? s->values : &empty);
    w_tensor(w, b, s->indices ? s->indices : &empty);
    wb_i32(b, s->rank);
    for (int32_t i = 0; i < s->rank; i++) wb_i64(b, s->dims[i]);
}

static void w_attr(writer *w, wbuf *b, const ir_attr *a) {
    const ir_model *m = w->model;
    wb_str(b, a->name);
    wb_u8(b, (uint8_t)a->type);
    wb_str(b, a->ref_attr_name);
    switch (a->type) {
    case IR_ATTR_FLOAT: wb_f32(b, a->f); break;
    case IR_ATTR_INT: wb_i64(b, a->i); break;
    case IR_ATTR_STRING: wb_strn(b, a->s.data, (size_t)a->s.len); break;
    case IR_ATTR_TENSOR: w_tensor(w, b, a->t); break;
    case IR_ATTR_GRAPH: wb_i32(b, graph_index(m, a->g)); break;
    case IR_ATTR_SPARSE_TENSOR: w_sparse(w, b, a->sparse); break;
    case IR_ATTR_TYPE_PROTO: w_type(b, a->tp); break;
    case IR_ATTR_FLOATS:
        wb_u32(b, (uint32_t)a->n);
        for (int32_t i = 0; i < a->n; i++) wb_f32(b, a->floats[i]);
        break;
    case IR_ATTR_INTS:
        wb_u32(b, (uint32_t)a->n);
        for (int32_t i = 0; i < a->n; i++) wb_i64(b, a->ints[i]);
        break;
    case IR_ATTR_STRINGS:
        wb_u32(b, (uint32_t)a->n);
        for (int32_t i = 0; i < a->n; i++) wb_strn(b, a->strings[i].data, (size_t)a->strings[i].len);
        break;
    case IR_ATTR_TENSORS:
        wb_u32(b, (uint32_t)a->n);
        for (int32_t i = 0; i < a->n; i++) w_tensor(w, b, a->tensors[i]);
        break;
    case IR_ATTR_GRAPHS:
        wb_u32(b, (uint32_t)a->n);
        for (int32_t i = 0; i < a->n; i++) wb_i32(b, graph_index(m, a->graphs[i]));
        break;
    case IR_ATTR_SPARSE_TENSORS:
        wb_u32(b, (uint32_t)a->n);
        for (int32_t i = 0; i < a->n; i++) w_sparse(w, b, a->sparses[i]);
        break;
    case IR_ATTR_TYPE_PROTOS:
        wb_u32(b, (uint32_t)a->n);
        for (int32_t i = 0; i < a->n; i++) w_type(b, a->tps[i]);
        break;
    default: break;
    }
}

static void w_ids(wbuf *b, const int32_t *ids, int32_t n) {
    wb_u32(b, (uint32_t)n);
    for (int32_t i = 0; i < n; i++) wb_i32(b, ids[i]);
}

static void w_graph(writer *w, const ir_graph *g) {
    wbuf *b = &w->graph;
    wb_u32(b, (uint32_t)g->n_values);
    for (int32_t i = 0; i < g->n_values; i++) {
        const ir_value *v = &g->values[i];
        wb_str(b, v->name);
        w_type(b, &v->type);
        /* the file's declared type, which shape inference restarts from at each run */
        bool has_decl = (v->flags & IR_VALUE_DECLARED_SAVED) != 0;
        wb_u8(b, has_decl ? 1 : 0);
        if (has_decl) w_type(b, &v->declared);
        wb_i32(b, v->producer);
        wb_u32(b, v->flags & ~(uint32_t)IR_VALUE_DECLARED_SAVED);
        wb_u8(b, v->init ? 1 : 0);
        if (v->init) w_tensor(w, b, v->init);
    }
    wb_u32(b, (uint32_t)g->n_nodes);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        wb_str(b, n->name);
        wb_u8(b, n->name_generated ? 1 : 0);
        wb_str(b, n->op_type);
        wb_str(b, n->domain);
        wb_str(b, n->overload);
        wb_i64(b, n->opset);
        wb_i32(b, n->source_index);
        w_ids(b, n->inputs, n->n_inputs);
        w_ids(b, n->outputs, n->n_outputs);
        wb_u32(b, (uint32_t)n->n_attrs);
        for (int32_t k = 0; k < n->n_attrs; k++) w_attr(w, b, &n->attrs[k]);
    }
    w_ids(b, g->inputs, g->n_inputs);
    w_ids(b, g->outputs, g->n_outputs);
    w_ids(b, g->initializers, g->n_initializers);
}

static void w_model(writer *w) {
    const ir_model *m = w->model;
    wbuf *b = &w->graph;
    wb_i64(b, m->ir_version);
    wb_str(b, m->producer_name);
    wb_str(b, m->producer_version);
    wb_str(b, m->domain);
    wb_i64(b, m->model_version);
    wb_u32(b, (uint32_t)m->n_opsets);
    for (int32_t i = 0; i < m->n_opsets; i++) {
        wb_str(b, m->opsets[i].domain);
        wb_i64(b, m->opsets[i].version);
    }
    wb_u32(b, (uint32_t)m->n_metadata);
    for (int32_t i = 0; i < m->n_metadata; i++) {
        wb_str(b, m->metadata[i].key);
        wb_str(b, m->metadata[i].value);
    }
    wb_u32(b, (uint32_t)m->n_syms);
    for (int32_t i = 0; i < m->n_syms; i++) {
        wb_u8(b, (uint8_t)m->syms[i].op);
        wb_str(b, m->syms[i].name);
        w_dim(b, m->syms[i].lhs);
        w_dim(b, m->syms[i].rhs);
    }
    wb_u32(b, (uint32_t)graph_index(m, m->graph));
    /* headers first, so attributes and parents can refer to any graph by index */
    wb_u32(b, (uint32_t)m->n_graphs);
    for (int32_t i = 0; i < m->n_graphs; i++) {
        const ir_graph *g = m->graphs[i];
        wb_i32(b, g->parent ? graph_index(m, g->parent) : -1);
        wb_str(b, g->name);
        wb_str(b, g->location);
    }
    for (int32_t i = 0; i < m->n_graphs; i++) w_graph(w, m->graphs[i]);
    wb_u32(b, (uint32_t)m->n_functions);
    for (int32_t i = 0; i < m->n_functions; i++) {
        const ir_function *f = &m->functions[i];
        wb_str(b, f->name);
        wb_str(b, f->domain);
        wb_str(b, f->overload);
        wb_u32(b, (uint32_t)graph_index(m, f->body));
        wb_u32(b, (uint32_t)f->n_attr_names);
        for (int32_t k = 0; k < f->n_attr_names; k++) wb_str(b, f->attr_names[k]);
        wb_u32(b, (uint32_t)f->n_attr_defaults);
        for (int32_t k = 0; k < f->n_attr_defaults; k++) w_attr(w, b, &f->attr_defaults[k]);
        wb_u32(b, (uint32_t)f->n_opsets);
        for (int32_t k = 0; k < f->n_opsets; k++) {
            wb_str(b, f->opsets[k].domain);
            wb_i64(b, f->opsets[k].version);
        }
    }
}

static void w_io(wbuf *b, const engine_io *io, int32_t n) {
    wb_u32(b, (uint32_t)n);
    for (int32_t i = 0; i < n; i++) {
        wb_str(b, io[i].name);
        wb_u32(b, io[i].dtype);
        wb_i32(b, io[i].rank);
        for (int32_t d = 0; d < io[i].rank; d++) {
            wb_u8(b, io[i].dims[d].kind);
            wb_str(b, io[i].dims[d].kind == IR_DIM_SYM ? io[i].dims[d].symbol : "");
            wb_i64(b, io[i].dims[d].value);
        }
    }
}

static void w_meta(writer *w, const engine_plan *p) {
    wbuf *b = &w->meta;
    const engine_meta *m = &p->meta;
    wb_str(b, m->kiln_version);
    wb_str(b, m->source_model);
    wb_u64(b, m->source_size);
    wb_u64(b, m->build_unix_time);
    wb_f64(b, m->build_seconds);
    wb_str(b, m->backend_name);
    wb_str(b, m->gpu_arch);
    wb_str(b, m->cuda_version);
    wb_str(b, m->cublas_version);
    wb_str(b, m->cudnn_version);
    wb_u32(b, m->precision_flags);
    wb_u64(b, m->workspace_limit);
    wb_i32(b, m->build_threads);
    wb_u32(b, m->build_flags);
    wb_u32(b, (uint32_t)p->n_profiles);
    for (int32_t i = 0; i < p->n_profiles; i++) {
        const engine_profile *pr = &p->profiles[i];
        wb_u32(b, (uint32_t)pr->n_inputs);
        for (int32_t k = 0; k < pr->n_inputs; k++) {
            const engine_profile_input *in = &pr->inputs[k];
            wb_str(b, in->name);
            wb_u32(b, (uint32_t)in->rank);
            for (int32_t d = 0; d < in->rank; d++) {
                wb_i64(b, in->min[d]);
                wb_i64(b, in->opt[d]);
                wb_i64(b, in->max[d]);
            }
        }
    }
    w_io(b, p->inputs, p->n_inputs);
    w_io(b, p->outputs, p->n_outputs);
}

static void w_layers(writer *w, const engine_plan *p) {
    wbuf *b = &w->layers;
    wb_u32(b, (uint32_t)p->n_layers);
    for (int32_t i = 0; i < p->n_layers; i++) {
        const engine_layer *l = &p->layers[i];
        wb_i32(b, l->node);
        wb_str(b, l->name);
        wb_str(b, l->op_type);
        wb_str(b, l->tactic);
        wb_u32(b, l->precision);
        wb_u32(b, l->flags);
        wb_u64(b, l->scratch_bytes);
        wb_f64(b, l->time_ms);
        wb_u32(b, (uint32_t)l->n_scales);
        for (int32_t k = 0; k < l->n_scales; k++) wb_f32(b, l->scales[k]);
    }
}

static void w_memplan(writer *w, const engine_plan *p) {
    wbuf *b = &w->memplan;
    wb_u64(b, w->weights_size);
    wb_u64(b, p->mem.workspace_limit);
    wb_u64(b, p->mem.max_scratch_bytes);
    wb_u32(b, (uint32_t)p->mem.n_profiles);
    for (int32_t i = 0; i < p->mem.n_profiles; i++) {
        wb_u64(b, p->mem.activation_max[i]);
        wb_u64(b, p->mem.activation_opt[i]);
    }
}

/* The layout: offsets of each section and the header + table bytes. */
typedef struct layout {
    uint8_t head[ENGINE_HEADER_SIZE + 5 * ENGINE_SECTION_ENTRY_SIZE];
    size_t head_len;
    uint64_t off[5], size[5];
    uint64_t file_size;
} layout;

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static uint32_t weights_crc(const writer *w) {
    uLong crc = crc32(0L, Z_NULL, 0);
    static const uint8_t zeros[ENGINE_TENSOR_ALIGN];
    uint64_t pos = 0;
    for (int32_t i = 0; i < w->n_weights; i++) {
        const weight_ref *r = &w->weights[i];
        if (r->offset > pos) crc = crc32(crc, zeros, (uInt)(r->offset - pos));
        const uint8_t *p = r->data;
        uint64_t left = r->nbytes;
        while (left) {
            uInt n = left > (1u << 30) ? (1u << 30) : (uInt)left;
            crc = crc32(crc, p, n);
            p += n;
            left -= n;
        }
        pos = r->offset + r->nbytes;
    }
    return (uint32_t)crc;
}

static kiln_status prepare(writer *w, const engine_plan *p, layout *L, kiln_error *err) {
    memset(w, 0, sizeof *w);
    w->model = p->model;
    w->err = err;
    if (!p->model || !p->model->graph)
        return kiln_err_set(err, KILN_ERR_INTERNAL, "cannot save the engine: the plan has no graph");
    w_model(w);
    if (w->st != KILN_OK) return w->st;
    w_meta(w, p);
    w_layers(w, p);
    w_memplan(w, p);
    if (w->meta.failed || w->graph.failed || w->layers.failed || w->memplan.failed)
        return kiln_err_set(err, KILN_ERR_NOMEM, "cannot save the engine: out of memory while serializing");

    const wbuf *bufs[4] = {&w->meta, &w->graph, &w->layers, &w->memplan};
    const uint32_t ids[5] = {ENGINE_SEC_META, ENGINE_SEC_GRAPH, ENGINE_SEC_LAYERS, ENGINE_SEC_MEMPLAN,
                             ENGINE_SEC_WEIGHTS};
    uint32_t crcs[5];
    uint64_t pos = ENGINE_HEADER_SIZE + 5 * ENGINE_SECTION_ENTRY_SIZE;
    for (int i = 0; i < 4; i++) {
        pos = align_up(pos, ENGINE_SECTION_ALIGN);
        L->off[i] = pos;
        L->size[i] = bufs[i]->len;
        crcs[i] = (uint32_t)crc32(crc32(0L, Z_NULL, 0), bufs[i]->data ? bufs[i]->data : (const Bytef *)"",
                                  (uInt)bufs[i]->len);
        pos += bufs[i]->len;
    }
    pos = align_up(pos, ENGINE_WEIGHTS_ALIGN);
    L->off[4] = pos;
    L->size[4] = w->weights_size;
    crcs[4] = weights_crc(w);
    L->file_size = pos + w->weights_size;

    uint8_t *h = L->head;
    memset(h, 0, sizeof L->head);
    memcpy(h + ENGINE_OFF_MAGIC, KILN_ENGINE_MAGIC, KILN_ENGINE_MAGIC_LEN);
    le_put_u32(h + ENGINE_OFF_FORMAT, ENGINE_FORMAT_VERSION);
    le_put_u32(h + ENGINE_OFF_HEADER_SIZE, ENGINE_HEADER_SIZE);
    le_put_u16(h + ENGINE_OFF_VERSION, KILN_VERSION_MAJOR);
    le_put_u16(h + ENGINE_OFF_VERSION + 2, KILN_VERSION_MINOR);
    le_put_u16(h + ENGINE_OFF_VERSION + 4, KILN_VERSION_PATCH);
    le_put_u32(h + ENGINE_OFF_BOM, ENGINE_BOM);
    h[ENGINE_OFF_TYPE_SIZES + 0] = (uint8_t)sizeof(void *);
    h[ENGINE_OFF_TYPE_SIZES + 1] = (uint8_t)sizeof(size_t);
    h[ENGINE_OFF_TYPE_SIZES + 2] = (uint8_t)sizeof(float);
    h[ENGINE_OFF_TYPE_SIZES + 3] = (uint8_t)sizeof(double);
    le_put_u32(h + ENGINE_OFF_BACKEND, p->header.backend);
    le_put_u32(h + ENGINE_OFF_FLAGS, p->header.flags);
    le_put_u64(h + ENGINE_OFF_REQ_FEATURES, p->header.required_features);
    le_put_u64(h + ENGINE_OFF_HOST_FEATURES, p->header.host_features);
    le_put_u64(h + ENGINE_OFF_FILE_SIZE, L->file_size);
    le_put_u64(h + ENGINE_OFF_TABLE, ENGINE_HEADER_SIZE);
    le_put_u32(h + ENGINE_OFF_N_SECTIONS, 5);
    uint8_t *t = h + ENGINE_HEADER_SIZE;
    for (int i = 0; i < 5; i++) {
        uint8_t *e = t + i * ENGINE_SECTION_ENTRY_SIZE;
        le_put_u32(e, ids[i]);
        le_put_u32(e + 4, 0);
        le_put_u64(e + 8, L->off[i]);
        le_put_u64(e + 16, L->size[i]);
        le_put_u32(e + 24, crcs[i]);
        le_put_u32(e + 28, 0);
    }
    le_put_u32(h + ENGINE_OFF_TABLE_CRC, (uint32_t)crc32(crc32(0L, Z_NULL, 0), t, 5 * ENGINE_SECTION_ENTRY_SIZE));
    le_put_u32(h + ENGINE_OFF_HEADER_CRC, (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, ENGINE_OFF_HEADER_CRC));
    L->head_len = ENGINE_HEADER_SIZE + 5 * ENGINE_SECTION_ENTRY_SIZE;
    return KILN_OK;
}

static void writer_free(writer *w) {
    wb_free(&w->meta);
    wb_free(&w->graph);
    wb_free(&w->layers);
    wb_free(&w->memplan);
    free(w->weights);
}

/* Emits the whole file through `put` (a FILE or a memory buffer). */
typedef bool (*put_fn)(void *user, const void *p, size_t n);

static bool put_zeros(put_fn put, void *user, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (!put(user, zeros, k)) return false;
        n -= k;
    }
    return true;
}

static bool emit(const writer *w, const layout *L, put_fn put, void *user) {
    const wbuf *bufs[4] = {&w->meta, &w->graph, &w->layers, &w->memplan};
    uint64_t pos = 0;
    if (!put(user, L->head, L->head_len)) return false;
    pos = L->head_len;
    for (int i = 0; i < 4; i++) {
        if (!put_zeros(put, user, L->off[i] - pos)) return false;
        if (bufs[i]->len && !put(user, bufs[i]->data, bufs[i]->len)) return false;
        pos = L->off[i] + bufs[i]->len;
    }
    if (!put_zeros(put, user, L->off[4] - pos)) return false;
    uint64_t wpos = 0;
    for (int32_t i = 0; i < w->n_weights; i++) {
        const weight_ref *r = &w->weights[i];
        if (!put_zeros(put, user, r->offset - wpos)) return false;
        if (!put(user, r->data, (size_t)r->nbytes)) return false;
        wpos = r->offset + r->nbytes;
    }
    return true;
}

static bool put_file(void *user, const void *p, size_t n) { return fwrite(p, 1, n, (FILE *)user) == n; }

typedef struct membuf {
    uint8_t *p;
    size_t len, cap;
} membuf;

static bool put_mem(void *user, const void *p, size_t n) {
    membuf *m = user;
    if (n > m->cap - m->len) return false;
    memcpy(m->p + m->len, p, n);
    m->len += n;
    return true;
}

kiln_status engine_write_file(const engine_plan *plan, const char *path, kiln_error *err) {
    writer w;
    layout L;
    kiln_status st = prepare(&w, plan, &L, err);
    if (st != KILN_OK) {
        writer_free(&w);
        return st;
    }
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    if (!tmp) {
        writer_free(&w);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = kiln_err_set(err, KILN_ERR_IO, "cannot write the engine file '%s': %s", tmp, strerror(errno));
    } else {
        bool ok = emit(&w, &L, put_file, f);
        if (fclose(f) != 0) ok = false;
        if (!ok) {
            st = kiln_err_set(err, KILN_ERR_IO, "writing the engine file '%s' failed (disk full?): %s", tmp, strerror(errno));
            remove(tmp);
        } else if (rename(tmp, path) != 0) {
            st = kiln_err_set(err, KILN_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
            remove(tmp);
        }
    }
    free(tmp);
    writer_free(&w);
    return st;
}

kiln_status engine_write_mem(const engine_plan *plan, uint8_t **out, size_t *out_size, kiln_error *err) {
    *out = NULL;
    *out_size = 0;
    writer w;
    layout L;
    kiln_status st = prepare(&w, plan, &L, err);
    if (st == KILN_OK) {
        membuf m = {malloc(L.file_size ? (size_t)L.file_size : 1), 0, (size_t)L.file_size};
        if (!m.p) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory for a %" PRIu64 "-byte engine", L.file_size);
        } else if (!emit(&w, &L, put_mem, &m) || m.len != L.file_size) {
            free(m.p);
            st = kiln_err_set(err, KILN_ERR_INTERNAL, "engine layout mismatch while serializing");
        } else {
            *out = m.p;
            *out_size = m.len;
        }
    }
    writer_free(&w);
    return st;
}
