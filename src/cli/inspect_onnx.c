/* inspect_onnx.c - the ONNX front-end of `kiln inspect`: loads a model into the IR and
 * prints a summary (text or JSON), optionally every node and every initializer.
 *
 * The summary is computed once (struct summary) and rendered twice, so text and JSON
 * always say the same. The JSON form with --show nodes/weights is exact enough to
 * cross-check kiln's reader against the onnx package (tests/cli/test_crosscheck_onnx.py):
 * floats with %.9g, integers exact, tensors as dtype + dims + FNV-1a-64 of their packed
 * little-endian bytes. The schema is documented in docs/CLI.md.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/model_internal.h"
#include "cli/cli.h"
#include "cli/inspect.h"
#include "cli/json_out.h"
#include "core/alloc.h"
#include "core/hashmap.h"
#include "ir/validate.h"
#include "onnx/onnx_load.h"

/* ---- the summary ---------------------------------------------------------------------- */

typedef struct op_count {
    const char *domain; /* "" = ai.onnx */
    const char *op;
    int64_t count;
} op_count;

typedef struct dtype_stats {
    int64_t tensors;
    uint64_t elements;
    uint64_t bytes;
} dtype_stats;

typedef struct summary {
    op_count *ops;
    int32_t n_ops;
    int64_t main_nodes;     /* nodes of the main graph itself */
    int64_t subgraph_nodes; /* nodes in subgraphs of the main graph (If/Loop/Scan bodies) */
    int32_t n_subgraphs;
    dtype_stats by_dtype[KILN_DTYPE_COUNT];
    uint64_t param_elements, param_bytes;
    int64_t param_tensors;
} summary;

static bool is_function_body(const ir_model *m, const ir_graph *g) {
    const ir_graph *top = g;
    while (top->parent) top = top->parent;
    for (int32_t i = 0; i < m->n_functions; i++)
        if (m->functions[i].body == top) return true;
    return false;
}

static int cmp_ops(const void *a, const void *b) {
    const op_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    int d = strcmp(x->domain, y->domain);
    return d ? d : strcmp(x->op, y->op);
}

/* Bytes a tensor's data occupies (strings: the sum of their lengths). */
static uint64_t tensor_bytes(const ir_tensor *t) {
    if (t->dtype != KILN_DTYPE_STRING) return t->nbytes;
    uint64_t b = 0;
    if (t->strings)
        for (uint64_t i = 0; i < t->count; i++) b += t->strings[i].len;
    return b;
}

static bool summarize(ir_model *m, summary *s) {
    memset(s, 0, sizeof *s);
    hashmap index; /* "domain\x01op" -> slot in s->ops */
    hashmap_init(&index);
    int32_t cap = 0;
    bool ok = true;
    for (int32_t gi = 0; gi < m->n_graphs && ok; gi++) {
        ir_graph *g = m->graphs[gi];
        /* initializers count as parameters wherever they are */
        for (int32_t i = 0; i < g->n_initializers; i++) {
            const ir_tensor *t = g->values[g->initializers[i]].init;
            if (!t) continue;
            int dt = kiln_dtype_valid(t->dtype) ? (int)t->dtype : 0;
            uint64_t b = tensor_bytes(t);
            s->by_dtype[dt].tensors++;
            s->by_dtype[dt].elements += t->count;
            s->by_dtype[dt].bytes += b;
            s->param_elements += t->count;
            s->param_bytes += b;
            s->param_tensors++;
        }
        /* the histogram covers the main graph and its subgraphs; functions are listed
         * on their own */
        if (is_function_body(m, g)) continue;
        if (g == m->graph) s->main_nodes += g->n_nodes;
        else {
            s->subgraph_nodes += g->n_nodes;
            s->n_subgraphs++;
        }
        for (int32_t ni = 0; ni < g->n_nodes; ni++) {
            const ir_node *n = &g->nodes[ni];
            char *key = arena_printf(&m->arena, "%s\x01%s", n->domain, n->op_type);
            if (!key) {
                ok = false;
                break;
            }
            int32_t slot;
            if (hashmap_get(&index, key, &slot)) {
                s->ops[slot].count++;
                continue;
            }
            if (s->n_ops == cap) {
                int32_t ncap = cap ? cap * 2 : 32;
                op_count *no = kiln_realloc_array(s->ops, (size_t)ncap, sizeof *no);
                if (!no) {
                    ok = false;
                    break;
                }
                s->ops = no;
                cap = ncap;
            }
            s->ops[s->n_ops] = (op_count){n->domain, n->op_type, 1};
            if (!hashmap_put(&index, key, s->n_ops)) {
                ok = false;
                break;
            }
            s->n_ops++;
        }
    }
    hashmap_free(&index);
    if (s->n_ops > 1) qsort(s->ops, (size_t)s->n_ops, sizeof *s->ops, cmp_ops);
    return ok;
}

/* ---- formatting helpers ----------------------------------------------------------------- */

static const char *human_bytes(uint64_t b, char *buf, size_t n) {
    if (b < 1024) snprintf(buf, n, "%" PRIu64 " B", b);
    else if (b < 1024ull * 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else if (b < 1024ull * 1024 * 1024) snprintf(buf, n, "%.1f MiB", (double)b / (1024.0 * 1024.0));
    else snprintf(buf, n, "%.2f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

/* 25557032 -> "25,557,032" */
static const char *grouped(uint64_t v, char *buf, size_t n) {
    char tmp[32];
    int len = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

static const char *domain_display(const char *d) { return d && d[0] ? d : "ai.onnx"; }

static const char *dtype_name(kiln_dtype t) {
    return kiln_dtype_valid((int)t) ? kiln_dtype_name(t) : "invalid";
}

/* First line of a doc string, cut to `max` bytes with "..." when longer. */
static void short_doc(strbuf *sb, const char *doc, size_t max) {
    size_t len = strcspn(doc, "\r\n");
    bool cut = doc[len] != '\0' || len > max;
    if (len > max) len = max;
    sb_append_n(sb, doc, len);
    if (cut) sb_append(sb, "...");
}

static const char *value_name(const ir_graph *g, int32_t id) {
    return (id >= 0 && id < g->n_values) ? g->values[id].name : "";
}

/* FNV-1a-64 of a tensor's packed little-endian bytes; strings: each string's length as
 * 8 little-endian bytes followed by its bytes. Maps external data first if needed. */
static kiln_status tensor_hash(ir_model *m, ir_tensor *t, uint64_t *out, kiln_error *err) {
    if (t->where == IR_DATA_EXTERNAL && !t->data) {
        kiln_status st = onnx_tensor_load_external(m, t, err);
        if (st != KILN_OK) return st;
    }
    if (t->dtype == KILN_DTYPE_STRING) {
        strbuf sb;
        sb_init(&sb);
        for (uint64_t i = 0; t->strings && i < t->count; i++) {
            unsigned char len[8];
            uint64_t l = t->strings[i].len;
            for (int k = 0; k < 8; k++) len[k] = (unsigned char)(l >> (8 * k));
            sb_append_n(&sb, (const char *)len, 8);
            sb_append_n(&sb, t->strings[i].data, (size_t)l);
        }
        if (sb.failed) {
            sb_free(&sb);
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory hashing string tensor '%s'",
                                t->name ? t->name : "");
        }
        *out = kiln_fnv1a64(sb.data ? sb.data : "", sb.len);
        sb_free(&sb);
        return KILN_OK;
    }
    *out = kiln_fnv1a64(t->data ? t->data : "", t->data ? (size_t)t->nbytes : 0);
    return KILN_OK;
}

/* ---- text output ------------------------------------------------------------------------ */

static void text_dims(strbuf *sb, const ir_tensor *t) {
    sb_putc(sb, '[');
    for (int32_t i = 0; i < t->rank; i++) sb_printf(sb, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    sb_putc(sb, ']');
}

static void text_attr_value(strbuf *sb, ir_model *m, const ir_attr *a) {
    enum { MAX_LIST = 8 };
    if (a->ref_attr_name) {
        sb_printf(sb, "@%s", a->ref_attr_name);
        return;
    }
    switch (a->type) {
    case IR_ATTR_FLOAT: sb_printf(sb, "%g", (double)a->f); break;
    case IR_ATTR_INT: sb_printf(sb, "%" PRId64, a->i); break;
    case IR_ATTR_STRING:
        sb_putc(sb, '\'');
        sb_append_n(sb, a->s.data ? a->s.data : "", (size_t)(a->s.len > 64 ? 64 : a->s.len));
        if (a->s.len > 64) sb_append(sb, "...");
        sb_putc(sb, '\'');
        break;
    case IR_ATTR_TENSOR:
        if (a->t) {
            sb_printf(sb, "tensor %s", dtype_name(a->t->dtype));
            text_dims(sb, a->t);
        }
        break;
    case IR_ATTR_GRAPH:
        sb_printf(sb, "<graph '%s', %d nodes>", a->g && a->g->name ? a->g->name : "",
                  a->g ? (int)a->g->n_nodes : 0);
        break;
    case IR_ATTR_FLOATS:
    case IR_ATTR_INTS:
    case IR_ATTR_STRINGS:
        sb_putc(sb, '[');
        for (int32_t i = 0; i < a->n && i < MAX_LIST; i++) {
            if (i) sb_append(sb, ", ");
            if (a->type == IR_ATTR_FLOATS) sb_printf(sb, "%g", (double)a->floats[i]);
            else if (a->type == IR_ATTR_INTS) sb_printf(sb, "%" PRId64, a->ints[i]);
            else {
                sb_putc(sb, '\'');
                sb_append_n(sb, a->strings[i].data ? a->strings[i].data : "",
                            (size_t)(a->strings[i].len > 32 ? 32 : a->strings[i].len));
                sb_putc(sb, '\'');
            }
        }
        if (a->n > MAX_LIST) sb_printf(sb, ", ... (%d)", (int)a->n);
        sb_putc(sb, ']');
        break;
    case IR_ATTR_TYPE_PROTO:
        sb_append(sb, a->tp ? ir_type_str(m, a->tp) : "?");
        break;
    default: sb_printf(sb, "<%d %s>", (int)a->n, ir_attr_type_name(a->type)); break;
    }
}

static void text_nodes(strbuf *sb, ir_model *m, const ir_graph *g, int indent, int depth) {
    if (depth > IR_MAX_GRAPH_DEPTH) return;
    for (int32_t ni = 0; ni < g->n_nodes; ni++) {
        const ir_node *n = &g->nodes[ni];
        sb_printf(sb, "%*s[%d] %s  %s%s%s  (", indent, "", (int)ni, n->name, n->domain[0] ? n->domain : "",
                  n->domain[0] ? "." : "", n->op_type);
        for (int32_t k = 0; k < n->n_inputs; k++)
            sb_printf(sb, "%s%s", k ? ", " : "", n->inputs[k] == IR_NONE ? "<none>" : value_name(g, n->inputs[k]));
        sb_append(sb, ") -> (");
        for (int32_t k = 0; k < n->n_outputs; k++)
            sb_printf(sb, "%s%s", k ? ", " : "", n->outputs[k] == IR_NONE ? "<none>" : value_name(g, n->outputs[k]));
        sb_putc(sb, ')');
        for (int32_t a = 0; a < n->n_attrs; a++) {
            sb_printf(sb, "%s%s=", a ? ", " : "  ", n->attrs[a].name);
            text_attr_value(sb, m, &n->attrs[a]);
        }
        sb_putc(sb, '\n');
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            if (at->type == IR_ATTR_GRAPH && at->g) {
                sb_printf(sb, "%*s%s:\n", indent + 4, "", at->name);
                text_nodes(sb, m, at->g, indent + 6, depth + 1);
            } else if (at->type == IR_ATTR_GRAPHS) {
                for (int32_t k = 0; k < at->n; k++) {
                    if (!at->graphs || !at->graphs[k]) continue;
                    sb_printf(sb, "%*s%s[%d]:\n", indent + 4, "", at->name, (int)k);
                    text_nodes(sb, m, at->graphs[k], indent + 6, depth + 1);
                }
            }
        }
    }
}

static void text_where(strbuf *sb, const ir_tensor *t) {
    if (t->where == IR_DATA_EXTERNAL || t->ext_location)
        sb_printf(sb, "external %s @ %" PRIu64, t->ext_location ? t->ext_location : "?", t->ext_offset);
    else if (t->where == IR_DATA_NONE)
        sb_append(sb, "no data");
    else
        sb_printf(sb, "inline @ %" PRIu64, t->file_offset);
}

static void text_weights(strbuf *sb, const ir_model *m) {
    for (int32_t gi = 0; gi < m->n_graphs; gi++) {
        const ir_graph *g = m->graphs[gi];
        if (!g->n_initializers) continue;
        if (g != m->graph) sb_printf(sb, "  in %s:\n", g->location && g->location[0] ? g->location : g->name);
        for (int32_t i = 0; i < g->n_initializers; i++) {
            const ir_value *v = &g->values[g->initializers[i]];
            const ir_tensor *t = v->init;
            if (!t) continue;
            char b[32];
            sb_printf(sb, "  %s  %s", v->name, dtype_name(t->dtype));
            text_dims(sb, t);
            sb_printf(sb, "  %s  ", human_bytes(tensor_bytes(t), b, sizeof b));
            text_where(sb, t);
            sb_putc(sb, '\n');
        }
    }
}

static size_t names_width(const ir_graph *g, const int32_t *ids, int32_t n) {
    size_t w = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l = strlen(value_name(g, ids[i]));
        if (l > w) w = l;
    }
    return w > 40 ? 40 : w;
}

/* One line per value: name padded to `w`, then its type. */
static void text_values(strbuf *sb, ir_model *m, const ir_graph *g, const int32_t *ids, int32_t n, size_t w) {
    for (int32_t i = 0; i < n; i++) {
        const ir_value *v = &g->values[ids[i]];
        sb_printf(sb, "  %-*s  %s", (int)w, v->name, ir_type_str(m, &v->type));
        if ((v->flags & IR_VALUE_GRAPH_INPUT) && (v->flags & IR_VALUE_INITIALIZER))
            sb_append(sb, "  (has an initializer: an overridable default)");
        sb_putc(sb, '\n');
    }
}

static void render_text(strbuf *sb, ir_model *m, const diag_list *diags, const summary *s,
                        const inspect_opts *o) {
    char b1[48], b2[48];
    ir_graph *g = m->graph;
    sb_printf(sb, "file        %s (%s)\n", o->path, human_bytes(m->file_size, b1, sizeof b1));
    sb_printf(sb, "producer    %s%s%s\n", m->producer_name[0] ? m->producer_name : "(not set)",
              m->producer_version[0] ? " " : "", m->producer_version);
    sb_printf(sb, "ir_version  %" PRId64 "\n", m->ir_version);
    sb_append(sb, "opsets      ");
    for (int32_t i = 0; i < m->n_opsets; i++)
        sb_printf(sb, "%s%s %" PRId64, i ? ", " : "", domain_display(m->opsets[i].domain), m->opsets[i].version);
    sb_append(sb, m->n_opsets ? "\n" : "(none)\n");
    if (m->model_version || m->domain[0]) {
        sb_printf(sb, "model       version %" PRId64, m->model_version);
        if (m->domain[0]) sb_printf(sb, ", domain '%s'", m->domain);
        sb_putc(sb, '\n');
    }
    if (m->doc[0]) {
        sb_append(sb, "doc         ");
        short_doc(sb, m->doc, 100);
        sb_putc(sb, '\n');
    }
    if (g->name && g->name[0]) sb_printf(sb, "graph       %s\n", g->name);

    /* graph inputs that only exist to carry an initializer (IR < 4) are parameters, not
     * things a caller feeds: list the real inputs, count the others */
    int32_t n_real = 0, n_init_inputs = 0;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        if (g->values[g->inputs[i]].flags & IR_VALUE_INITIALIZER) n_init_inputs++;
        else n_real++;
    }
    /* align every listed input (initializer-backed ones only count for IR >= 4) */
    size_t w_in = 0;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        if (m->ir_version < 4 && (g->values[g->inputs[i]].flags & IR_VALUE_INITIALIZER)) continue;
        size_t l = names_width(g, &g->inputs[i], 1);
        if (l > w_in) w_in = l;
    }
    sb_printf(sb, "\ninputs (%d)\n", (int)n_real);
    for (int32_t i = 0; i < g->n_inputs; i++)
        if (!(g->values[g->inputs[i]].flags & IR_VALUE_INITIALIZER)) text_values(sb, m, g, &g->inputs[i], 1, w_in);
    if (n_init_inputs) {
        if (m->ir_version < 4)
            sb_printf(sb, "  + %d input%s that carr%s initializers (required for IR version < 4)\n",
                      (int)n_init_inputs, n_init_inputs == 1 ? "" : "s", n_init_inputs == 1 ? "ies" : "y");
        else
            for (int32_t i = 0; i < g->n_inputs; i++)
                if (g->values[g->inputs[i]].flags & IR_VALUE_INITIALIZER) text_values(sb, m, g, &g->inputs[i], 1, w_in);
    }
    sb_printf(sb, "outputs (%d)\n", (int)g->n_outputs);
    text_values(sb, m, g, g->outputs, g->n_outputs, names_width(g, g->outputs, g->n_outputs));

    sb_printf(sb, "\noperators: %" PRId64 " nodes", s->main_nodes + s->subgraph_nodes);
    if (s->n_subgraphs)
        sb_printf(sb, " (%" PRId64 " in %d subgraph%s)", s->subgraph_nodes, (int)s->n_subgraphs,
                  s->n_subgraphs == 1 ? "" : "s");
    sb_printf(sb, ", %d distinct\n", (int)s->n_ops);
    size_t w = 0;
    for (int32_t i = 0; i < s->n_ops; i++) {
        size_t l = strlen(s->ops[i].op) + (s->ops[i].domain[0] ? strlen(s->ops[i].domain) + 1 : 0);
        if (l > w) w = l;
    }
    for (int32_t i = 0; i < s->n_ops; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s%s%s", s->ops[i].domain, s->ops[i].domain[0] ? "." : "", s->ops[i].op);
        sb_printf(sb, "  %-*s  %" PRId64 "\n", (int)w, name, s->ops[i].count);
    }

    sb_printf(sb, "\nparameters: %s in %" PRId64 " tensor%s, %s\n", grouped(s->param_elements, b1, sizeof b1),
              s->param_tensors, s->param_tensors == 1 ? "" : "s", human_bytes(s->param_bytes, b2, sizeof b2));
    for (int dt = 0; dt < KILN_DTYPE_COUNT; dt++) {
        const dtype_stats *d = &s->by_dtype[dt];
        if (!d->tensors) continue;
        sb_printf(sb, "  %-10s %14s  %10s  %" PRId64 " tensor%s\n", dtype_name((kiln_dtype)dt),
                  grouped(d->elements, b1, sizeof b1), human_bytes(d->bytes, b2, sizeof b2), d->tensors,
                  d->tensors == 1 ? "" : "s");
    }

    if (m->n_ext_files) {
        sb_printf(sb, "\nexternal data (%d file%s)\n", (int)m->n_ext_files, m->n_ext_files == 1 ? "" : "s");
        for (int32_t i = 0; i < m->n_ext_files; i++) {
            const ir_external_file *e = &m->ext_files[i];
            sb_printf(sb, "  %s  ", e->location);
            if (e->file_size) sb_printf(sb, "%s", human_bytes(e->file_size, b1, sizeof b1));
            else sb_append(sb, "(missing or empty)");
            sb_printf(sb, ", %d tensor%s, %s referenced\n", (int)e->n_tensors, e->n_tensors == 1 ? "" : "s",
                      human_bytes(e->bytes_referenced, b2, sizeof b2));
        }
    }
    if (m->n_metadata) {
        sb_printf(sb, "\nmetadata (%d)\n", (int)m->n_metadata);
        for (int32_t i = 0; i < m->n_metadata; i++) {
            sb_printf(sb, "  %s: ", m->metadata[i].key);
            short_doc(sb, m->metadata[i].value, 100);
            sb_putc(sb, '\n');
        }
    }
    if (m->n_functions) {
        sb_printf(sb, "\nfunctions (%d)\n", (int)m->n_functions);
        for (int32_t i = 0; i < m->n_functions; i++) {
            const ir_function *f = &m->functions[i];
            sb_printf(sb, "  %s%s%s  %d nodes\n", f->domain, f->domain[0] ? "." : "", f->name,
                      f->body ? (int)f->body->n_nodes : 0);
        }
    }

    if (o->show_nodes) {
        sb_printf(sb, "\nnodes (%d in the main graph)\n", (int)g->n_nodes);
        text_nodes(sb, m, g, 2, 0);
        for (int32_t i = 0; i < m->n_functions; i++) {
            const ir_function *f = &m->functions[i];
            if (!f->body) continue;
            sb_printf(sb, "function %s%s%s:\n", f->domain, f->domain[0] ? "." : "", f->name);
            text_nodes(sb, m, f->body, 2, 0);
        }
    }
    if (o->show_weights) {
        sb_printf(sb, "\nweights (%" PRId64 ")\n", s->param_tensors);
        text_weights(sb, m);
    }

    if (diags->n) {
        sb_printf(sb, "\nvalidation: %d error%s, %d warning%s\n", (int)diags->n_errors, diags->n_errors == 1 ? "" : "s",
                  (int)diags->n_warnings, diags->n_warnings == 1 ? "" : "s");
        for (int32_t i = 0; i < diags->n; i++) diag_render_text(&diags->items[i], sb);
    } else {
        sb_append(sb, "\nvalidation: ok\n");
    }
}

/* ---- JSON output ------------------------------------------------------------------------ */

static void json_type(jw *w, ir_model *m, const ir_type *t, int depth) {
    jw_obj_begin(w);
    if (depth > 16) {
        jw_kstr(w, "kind", "unknown");
        jw_obj_end(w);
        return;
    }
    switch (t->kind) {
    case IR_TYPE_TENSOR:
    case IR_TYPE_SPARSE_TENSOR:
        jw_kstr(w, "kind", t->kind == IR_TYPE_TENSOR ? "tensor" : "sparse_tensor");
        jw_kstr(w, "dtype", t->dtype ? dtype_name(t->dtype) : NULL);
        jw_key(w, "shape");
        if (t->rank < 0) {
            jw_null(w);
        } else {
            jw_arr_begin(w);
            for (int32_t i = 0; i < t->rank; i++) {
                ir_dim d = t->dims[i];
                if (d.kind == IR_DIM_CONST) jw_int(w, d.value);
                else if (d.kind == IR_DIM_SYM) {
                    char buf[256];
                    jw_str(w, ir_dim_str(m, d, buf, sizeof buf));
                } else jw_null(w);
            }
            jw_arr_end(w);
        }
        break;
    case IR_TYPE_SEQUENCE:
    case IR_TYPE_OPTIONAL:
        jw_kstr(w, "kind", t->kind == IR_TYPE_SEQUENCE ? "sequence" : "optional");
        jw_key(w, "elem");
        if (t->elem) json_type(w, m, t->elem, depth + 1);
        else jw_null(w);
        break;
    case IR_TYPE_MAP:
        jw_kstr(w, "kind", "map");
        jw_kstr(w, "key", dtype_name(t->dtype));
        jw_key(w, "value");
        if (t->elem) json_type(w, m, t->elem, depth + 1);
        else jw_null(w);
        break;
    default: jw_kstr(w, "kind", "unknown"); break;
    }
    if (t->denotation && t->denotation[0]) jw_kstr(w, "denotation", t->denotation);
    jw_obj_end(w);
}

static void json_value(jw *w, ir_model *m, const ir_value *v) {
    jw_obj_begin(w);
    jw_kstr(w, "name", v->name);
    jw_key(w, "type");
    json_type(w, m, &v->type, 0);
    if ((v->flags & IR_VALUE_GRAPH_INPUT) && (v->flags & IR_VALUE_INITIALIZER)) jw_kbool(w, "initializer", true);
    jw_obj_end(w);
}

/* A tensor as dtype, dims, bytes, storage and hash. An external tensor whose data cannot
 * be read gets "error" instead of "fnv1a64". */
static void json_tensor(jw *w, ir_model *m, ir_tensor *t) {
    jw_obj_begin(w);
    jw_kstr(w, "name", t->name ? t->name : "");
    jw_kstr(w, "dtype", dtype_name(t->dtype));
    jw_key(w, "dims");
    jw_arr_begin(w);
    for (int32_t i = 0; i < t->rank; i++) jw_int(w, t->dims[i]);
    jw_arr_end(w);
    jw_kuint(w, "bytes", tensor_bytes(t));
    if (t->where == IR_DATA_EXTERNAL || t->ext_location) {
        jw_kstr(w, "where", "external");
        jw_kstr(w, "location", t->ext_location);
        jw_kuint(w, "offset", t->ext_offset);
        jw_kuint(w, "length", t->ext_length);
    } else {
        jw_kstr(w, "where", t->where == IR_DATA_NONE ? "none" : "inline");
        jw_kuint(w, "file_offset", t->file_offset);
    }
    uint64_t h = 0;
    kiln_error err = {0};
    if (tensor_hash(m, t, &h, &err) == KILN_OK) {
        jw_key(w, "fnv1a64");
        jw_hex64(w, h);
    } else {
        jw_kstr(w, "error", kiln_err_msg(&err));
    }
    kiln_err_clear(&err);
    jw_obj_end(w);
}

static void json_sparse(jw *w, ir_model *m, ir_sparse_tensor *sp) {
    jw_obj_begin(w);
    jw_key(w, "dims");
    jw_arr_begin(w);
    for (int32_t i = 0; i < sp->rank; i++) jw_int(w, sp->dims[i]);
    jw_arr_end(w);
    jw_key(w, "values");
    if (sp->values) json_tensor(w, m, sp->values);
    else jw_null(w);
    jw_key(w, "indices");
    if (sp->indices) json_tensor(w, m, sp->indices);
    else jw_null(w);
    jw_obj_end(w);
}

static void json_graph(jw *w, ir_model *m, ir_graph *g, bool nodes, bool weights, int depth);

static void json_attr(jw *w, ir_model *m, const ir_attr *a, int depth) {
    jw_obj_begin(w);
    jw_kstr(w, "name", a->name);
    jw_kstr(w, "type", ir_attr_type_name(a->type));
    if (a->ref_attr_name) jw_kstr(w, "ref_attr_name", a->ref_attr_name);
    jw_key(w, "value");
    switch (a->type) {
    case IR_ATTR_FLOAT: jw_float(w, a->f); break;
    case IR_ATTR_INT: jw_int(w, a->i); break;
    case IR_ATTR_STRING: jw_strn(w, a->s.data ? a->s.data : "", (size_t)a->s.len); break;
    case IR_ATTR_TENSOR:
        if (a->t) json_tensor(w, m, a->t);
        else jw_null(w);
        break;
    case IR_ATTR_GRAPH:
        if (a->g) json_graph(w, m, a->g, true, true, depth + 1);
        else jw_null(w);
        break;
    case IR_ATTR_SPARSE_TENSOR:
        if (a->sparse) json_sparse(w, m, a->sparse);
        else jw_null(w);
        break;
    case IR_ATTR_TYPE_PROTO:
        if (a->tp) json_type(w, m, a->tp, 0);
        else jw_null(w);
        break;
    case IR_ATTR_FLOATS:
    case IR_ATTR_INTS:
    case IR_ATTR_STRINGS:
    case IR_ATTR_TENSORS:
    case IR_ATTR_GRAPHS:
    case IR_ATTR_SPARSE_TENSORS:
    case IR_ATTR_TYPE_PROTOS:
        jw_arr_begin(w);
        for (int32_t i = 0; i < a->n; i++) {
            switch (a->type) {
            case IR_ATTR_FLOATS: jw_float(w, a->floats[i]); break;
            case IR_ATTR_INTS: jw_int(w, a->ints[i]); break;
            case IR_ATTR_STRINGS: jw_strn(w, a->strings[i].data ? a->strings[i].data : "", (size_t)a->strings[i].len); break;
            case IR_ATTR_TENSORS:
                if (a->tensors[i]) json_tensor(w, m, a->tensors[i]);
                else jw_null(w);
                break;
            case IR_ATTR_GRAPHS:
                if (a->graphs[i]) json_graph(w, m, a->graphs[i], true, true, depth + 1);
                else jw_null(w);
                break;
            case IR_ATTR_SPARSE_TENSORS:
                if (a->sparses[i]) json_sparse(w, m, a->sparses[i]);
                else jw_null(w);
                break;
            default:
                if (a->tps[i]) json_type(w, m, a->tps[i], 0);
                else jw_null(w);
                break;
            }
        }
        jw_arr_end(w);
        break;
    default: jw_null(w); break;
    }
    jw_obj_end(w);
}

static void json_node(jw *w, ir_model *m, const ir_graph *g, int32_t ni, int depth) {
    const ir_node *n = &g->nodes[ni];
    jw_obj_begin(w);
    jw_kint(w, "index", ni);
    jw_kint(w, "source_index", n->source_index);
    /* the model's own name: "" when it had none (display_name is what kiln calls it) */
    jw_kstr(w, "name", n->name_generated ? "" : n->name);
    if (n->name_generated) jw_kstr(w, "display_name", n->name);
    jw_kstr(w, "op_type", n->op_type);
    jw_kstr(w, "domain", n->domain);
    if (n->overload && n->overload[0]) jw_kstr(w, "overload", n->overload);
    jw_key(w, "inputs");
    jw_arr_begin(w);
    for (int32_t k = 0; k < n->n_inputs; k++) jw_str(w, n->inputs[k] == IR_NONE ? "" : value_name(g, n->inputs[k]));
    jw_arr_end(w);
    jw_key(w, "outputs");
    jw_arr_begin(w);
    for (int32_t k = 0; k < n->n_outputs; k++) jw_str(w, n->outputs[k] == IR_NONE ? "" : value_name(g, n->outputs[k]));
    jw_arr_end(w);
    jw_key(w, "attributes");
    jw_arr_begin(w);
    for (int32_t a = 0; a < n->n_attrs; a++) json_attr(w, m, &n->attrs[a], depth);
    jw_arr_end(w);
    jw_obj_end(w);
}

static void json_value_list(jw *w, ir_model *m, const ir_graph *g, const int32_t *ids, int32_t n) {
    jw_arr_begin(w);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < g->n_values) json_value(w, m, &g->values[ids[i]]);
    jw_arr_end(w);
}

/* A graph: name, inputs, outputs; with `nodes` also value_info and nodes; with `weights`
 * also initializers (and sparse initializers). Subgraphs always carry both. */
static void json_graph(jw *w, ir_model *m, ir_graph *g, bool nodes, bool weights, int depth) {
    jw_obj_begin(w);
    if (depth > IR_MAX_GRAPH_DEPTH) {
        jw_kbool(w, "truncated", true);
        jw_obj_end(w);
        return;
    }
    jw_kstr(w, "name", g->name);
    jw_key(w, "inputs");
    json_value_list(w, m, g, g->inputs, g->n_inputs);
    jw_key(w, "outputs");
    json_value_list(w, m, g, g->outputs, g->n_outputs);
    if (nodes) {
        /* value_info: declared types of values that are neither inputs nor outputs */
        jw_key(w, "value_info");
        jw_arr_begin(w);
        for (int32_t i = 0; i < g->n_values; i++) {
            const ir_value *v = &g->values[i];
            if ((v->flags & IR_VALUE_HAS_VALUE_INFO) &&
                !(v->flags & (IR_VALUE_GRAPH_INPUT | IR_VALUE_GRAPH_OUTPUT)))
                json_value(w, m, v);
        }
        jw_arr_end(w);
        jw_key(w, "nodes");
        jw_arr_begin(w);
        for (int32_t ni = 0; ni < g->n_nodes; ni++) json_node(w, m, g, ni, depth);
        jw_arr_end(w);
    }
    if (weights) {
        jw_key(w, "initializers");
        jw_arr_begin(w);
        for (int32_t i = 0; i < g->n_initializers; i++) {
            ir_value *v = &g->values[g->initializers[i]];
            if (v->init) json_tensor(w, m, v->init);
        }
        jw_arr_end(w);
        if (g->n_sparse_initializers) {
            jw_key(w, "sparse_initializers");
            jw_arr_begin(w);
            for (int32_t i = 0; i < g->n_sparse_initializers; i++) {
                if (g->sparse_initializers[i]) json_sparse(w, m, g->sparse_initializers[i]);
                else jw_null(w);
            }
            jw_arr_end(w);
        }
    }
    jw_obj_end(w);
}

static void json_diag(jw *w, const diag *d) {
    jw_obj_begin(w);
    jw_kstr(w, "severity", diag_severity_name(d->severity));
    jw_kstr(w, "code", d->code);
    jw_kstr(w, "node", d->node);
    jw_kstr(w, "op_type", d->op_type);
    jw_kstr(w, "graph", d->graph);
    jw_kstr(w, "message", d->message);
    jw_key(w, "facts");
    jw_arr_begin(w);
    for (int32_t i = 0; i < d->n_facts; i++) jw_str(w, d->facts[i]);
    jw_arr_end(w);
    jw_kstr(w, "hint", d->hint);
    jw_obj_end(w);
}

static void render_json(strbuf *sb, ir_model *m, const diag_list *diags, const summary *s, const inspect_opts *o) {
    jw w;
    jw_init(&w, sb, true);
    ir_graph *g = m->graph;
    jw_obj_begin(&w);
    jw_kstr(&w, "format", "onnx");
    jw_kstr(&w, "file", o->path);
    jw_kuint(&w, "file_size", m->file_size);
    jw_kint(&w, "ir_version", m->ir_version);
    jw_kstr(&w, "producer_name", m->producer_name);
    jw_kstr(&w, "producer_version", m->producer_version);
    jw_kstr(&w, "domain", m->domain);
    jw_kint(&w, "model_version", m->model_version);
    jw_kstr(&w, "doc_string", m->doc);
    jw_key(&w, "opsets");
    jw_arr_begin(&w);
    for (int32_t i = 0; i < m->n_opsets; i++) {
        jw_obj_begin(&w);
        jw_kstr(&w, "domain", m->opsets[i].domain);
        jw_kint(&w, "version", m->opsets[i].version);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_kstr(&w, "graph_name", g->name);
    jw_key(&w, "inputs");
    json_value_list(&w, m, g, g->inputs, g->n_inputs);
    jw_key(&w, "outputs");
    json_value_list(&w, m, g, g->outputs, g->n_outputs);

    jw_kint(&w, "node_count", s->main_nodes + s->subgraph_nodes);
    jw_kint(&w, "subgraph_node_count", s->subgraph_nodes);
    jw_kint(&w, "subgraph_count", s->n_subgraphs);
    jw_key(&w, "operators");
    jw_arr_begin(&w);
    for (int32_t i = 0; i < s->n_ops; i++) {
        jw_obj_begin(&w);
        jw_kstr(&w, "domain", s->ops[i].domain);
        jw_kstr(&w, "op_type", s->ops[i].op);
        jw_kint(&w, "count", s->ops[i].count);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);

    jw_key(&w, "parameters");
    jw_obj_begin(&w);
    jw_kuint(&w, "count", s->param_elements);
    jw_kuint(&w, "bytes", s->param_bytes);
    jw_kint(&w, "tensors", s->param_tensors);
    jw_key(&w, "by_dtype");
    jw_arr_begin(&w);
    for (int dt = 0; dt < KILN_DTYPE_COUNT; dt++) {
        const dtype_stats *d = &s->by_dtype[dt];
        if (!d->tensors) continue;
        jw_obj_begin(&w);
        jw_kstr(&w, "dtype", dtype_name((kiln_dtype)dt));
        jw_kuint(&w, "count", d->elements);
        jw_kuint(&w, "bytes", d->bytes);
        jw_kint(&w, "tensors", d->tensors);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);

    jw_key(&w, "external_data");
    jw_arr_begin(&w);
    for (int32_t i = 0; i < m->n_ext_files; i++) {
        const ir_external_file *e = &m->ext_files[i];
        jw_obj_begin(&w);
        jw_kstr(&w, "location", e->location);
        jw_kuint(&w, "file_size", e->file_size);
        jw_kint(&w, "tensors", e->n_tensors);
        jw_kuint(&w, "bytes", e->bytes_referenced);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);

    jw_key(&w, "metadata");
    jw_arr_begin(&w);
    for (int32_t i = 0; i < m->n_metadata; i++) {
        jw_obj_begin(&w);
        jw_kstr(&w, "key", m->metadata[i].key);
        jw_kstr(&w, "value", m->metadata[i].value);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);

    jw_key(&w, "functions");
    jw_arr_begin(&w);
    for (int32_t i = 0; i < m->n_functions; i++) {
        const ir_function *f = &m->functions[i];
        jw_obj_begin(&w);
        jw_kstr(&w, "name", f->name);
        jw_kstr(&w, "domain", f->domain);
        if (f->overload && f->overload[0]) jw_kstr(&w, "overload", f->overload);
        jw_kint(&w, "node_count", f->body ? f->body->n_nodes : 0);
        if (o->show_nodes && f->body) {
            jw_key(&w, "attributes");
            jw_arr_begin(&w);
            for (int32_t k = 0; k < f->n_attr_names; k++) jw_str(&w, f->attr_names[k]);
            jw_arr_end(&w);
            jw_key(&w, "opsets");
            jw_arr_begin(&w);
            for (int32_t k = 0; k < f->n_opsets; k++) {
                jw_obj_begin(&w);
                jw_kstr(&w, "domain", f->opsets[k].domain);
                jw_kint(&w, "version", f->opsets[k].version);
                jw_obj_end(&w);
            }
            jw_arr_end(&w);
            jw_key(&w, "body");
            json_graph(&w, m, f->body, true, false, 0);
        }
        jw_obj_end(&w);
    }
    jw_arr_end(&w);

    if (o->show_nodes || o->show_weights) {
        jw_key(&w, "graph");
        json_graph(&w, m, g, o->show_nodes, o->show_weights, 0);
    }

    jw_key(&w, "diagnostics");
    jw_arr_begin(&w);
    for (int32_t i = 0; i < diags->n; i++) json_diag(&w, &diags->items[i]);
    jw_arr_end(&w);
    jw_kint(&w, "errors", diags->n_errors);
    jw_kint(&w, "warnings", diags->n_warnings);
    jw_obj_end(&w);
    sb_putc(sb, '\n');
}

/* Maps every external-data tensor (which also records each file's size), turning what
 * the default load would refuse (a missing or short data file) into one error per file. */
static void check_external(ir_model *m, diag_list *diags) {
    for (int32_t gi = 0; gi < m->n_graphs; gi++) {
        ir_graph *g = m->graphs[gi];
        for (int32_t i = 0; i < g->n_initializers; i++) {
            ir_tensor *t = g->values[g->initializers[i]].init;
            if (!t || t->where != IR_DATA_EXTERNAL || t->data) continue;
            kiln_error err = {0};
            if (onnx_tensor_load_external(m, t, &err) != KILN_OK) {
                char fact[600];
                snprintf(fact, sizeof fact, "external data file: %s", t->ext_location ? t->ext_location : "?");
                bool seen = false;
                for (int32_t k = 0; k < diags->n && !seen; k++)
                    seen = !strcmp(diags->items[k].code, "external-data-unreadable") && diags->items[k].n_facts &&
                           !strcmp(diags->items[k].facts[0], fact);
                if (!seen) {
                    diag *d = diag_add(diags, DIAG_ERROR, "external-data-unreadable", NULL, NULL, "%s",
                                       kiln_err_msg(&err));
                    diag_fact(diags, d, "%s", fact);
                }
            }
            kiln_err_clear(&err);
        }
    }
}

/* ---- entry -------------------------------------------------------------------------------- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int inspect_onnx(const inspect_opts *o) {
    if (o->time_load) {
        /* What an application pays to open a model: read, import, validate, with the
         * default options. */
        kiln_model *km = NULL;
        double t0 = now_seconds();
        kiln_status st = kiln_model_load_file(o->path, NULL, &km);
        double t1 = now_seconds();
        if (st != KILN_OK) {
            fprintf(stderr, "kiln inspect: error: %s\n", kiln_model_errmsg(km));
            kiln_model_free(km);
            return CLI_EXIT_FAILED;
        }
        printf("load_seconds %.6f\n", t1 - t0);
        /* Peak resident memory of this process (Linux). wait4's ru_maxrss would also count
         * what the parent had before exec, which misleads when the parent is large. */
        FILE *f = fopen("/proc/self/status", "r");
        if (f) {
            char line[256];
            long long kib;
            while (fgets(line, sizeof line, f))
                if (sscanf(line, "VmHWM: %lld kB", &kib) == 1) printf("peak_rss_bytes %lld\n", kib * 1024);
                else if (sscanf(line, "RssAnon: %lld kB", &kib) == 1) printf("rss_anon_bytes %lld\n", kib * 1024);
                else if (sscanf(line, "RssFile: %lld kB", &kib) == 1) printf("rss_file_bytes %lld\n", kib * 1024);
            fclose(f);
        }
        kiln_model_free(km);
        return CLI_EXIT_OK;
    }

    /* External files are not required to exist: inspect lists them (and says which are
     * missing) instead of refusing the model. Validation problems are shown, not fatal. */
    kiln_model_options opts = kiln_model_options_default();
    opts.check_external_data = 0;
    opts.validate = 0;
    opts.inline_functions = 0; /* show function calls as the model has them */
    kiln_model *km = NULL;
    kiln_status st = kiln_model_load_file(o->path, &opts, &km);
    ir_model *m = kiln_model_ir(km);
    if (st != KILN_OK || !m) {
        fprintf(stderr, "kiln inspect: error: %s\n", kiln_model_errmsg(km));
        kiln_model_free(km);
        return CLI_EXIT_FAILED;
    }
    kiln_error verr = {0};
    ir_validate(m, &km->diags, &verr);
    kiln_err_clear(&verr);
    check_external(m, &km->diags);

    summary s;
    if (!summarize(m, &s)) {
        free(s.ops);
        kiln_model_free(km);
        fprintf(stderr, "kiln inspect: error: out of memory\n");
        return CLI_EXIT_FAILED;
    }
    strbuf sb;
    sb_init(&sb);
    if (o->json) render_json(&sb, m, &km->diags, &s, o);
    else render_text(&sb, m, &km->diags, &s, o);
    int rc = km->diags.n_errors ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    if (sb.failed) {
        fprintf(stderr, "kiln inspect: error: out of memory while formatting the output\n");
        rc = CLI_EXIT_FAILED;
    } else {
        fwrite(sb_cstr(&sb), 1, sb.len, stdout);
    }
    sb_free(&sb);
    free(s.ops);
    kiln_model_free(km);
    return rc;
}
