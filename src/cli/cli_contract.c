/* cli_contract.c - model contracts: `kiln contract MODEL -o contract.json` records a
 * model's interface, `kiln check MODEL --contract contract.json` fails when a new export
 * breaks it.
 *
 * A contract is a small JSON file meant to be committed next to the code that calls the
 * model:
 *   {"kiln_contract": 1, "model": "model.onnx", "ir_version": 8,
 *    "producer": {"name": "pytorch", "version": "2.3.0"},
 *    "opsets": [{"domain": "ai.onnx", "version": 17}],
 *    "inputs":  [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "seq_len"]}],
 *    "outputs": [{"name": "logits", "dtype": "float32", "shape": ["batch", "seq_len", 256]}]}
 * Dimensions are integers (fixed), strings (symbolic, the model's dim_param names) or
 * null (unknown). Output shapes are the inferred ones. Reading uses cJSON; writing uses
 * strbuf's JSON escaping like every other JSON kiln writes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/model_internal.h"
#include "cli/cli.h"
#include "cli/cli_check.h"
#include "ir/infer.h"

/* ---- writing ------------------------------------------------------------------------ */

static void json_str(strbuf *out, const char *s) { sb_json_string(out, s ? s : "", strlen(s ? s : "")); }

static void type_json(ir_model *m, const ir_type *t, strbuf *out) {
    sb_append(out, "\"dtype\": ");
    if (t->kind == IR_TYPE_TENSOR || t->kind == IR_TYPE_SPARSE_TENSOR)
        json_str(out, kiln_dtype_name(t->dtype));
    else if (t->kind == IR_TYPE_UNKNOWN)
        sb_append(out, "null");
    else
        json_str(out, ir_type_str(m, t)); /* sequences, maps: their full type text */
    sb_append(out, ", \"shape\": ");
    if ((t->kind != IR_TYPE_TENSOR && t->kind != IR_TYPE_SPARSE_TENSOR) || t->rank < 0) {
        sb_append(out, "null");
    } else {
        sb_putc(out, '[');
        for (int32_t d = 0; d < t->rank; d++) {
            if (d) sb_append(out, ", ");
            const ir_dim *dm = &t->dims[d];
            if (dm->kind == IR_DIM_CONST) {
                sb_printf(out, "%" PRId64, dm->value);
            } else if (dm->kind == IR_DIM_SYM) {
                char buf[256];
                json_str(out, ir_dim_str(m, *dm, buf, sizeof buf));
            } else {
                sb_append(out, "null");
            }
        }
        sb_putc(out, ']');
    }
    sb_append(out, ", \"type\": ");
    json_str(out, ir_type_str(m, t));
}

void cli_io_json(ir_model *m, bool outputs, strbuf *out) {
    const ir_graph *g = m->graph;
    sb_putc(out, '[');
    int k = 0;
    int32_t n = g ? (outputs ? g->n_outputs : g->n_inputs) : 0;
    for (int32_t i = 0; i < n; i++) {
        const ir_value *v = ir_val(g, outputs ? g->outputs[i] : g->inputs[i]);
        if (!outputs && (v->flags & IR_VALUE_INITIALIZER)) continue;
        sb_append(out, k++ ? ",\n    {\"name\": " : "\n    {\"name\": ");
        json_str(out, v->name);
        sb_append(out, ", ");
        type_json(m, &v->type, out);
        sb_putc(out, '}');
    }
    sb_append(out, k ? "\n  ]" : "]");
}

static void contract_json(ir_model *m, const char *path, strbuf *out) {
    sb_printf(out, "{\n  \"kiln_contract\": %d,\n  \"model\": ", CLI_CONTRACT_VERSION);
    const char *base = strrchr(path, '/');
    json_str(out, base ? base + 1 : path);
    sb_printf(out, ",\n  \"ir_version\": %" PRId64 ",\n  \"producer\": {\"name\": ", m->ir_version);
    json_str(out, m->producer_name);
    sb_append(out, ", \"version\": ");
    json_str(out, m->producer_version);
    sb_append(out, "},\n  \"opsets\": [");
    for (int32_t i = 0; i < m->n_opsets; i++) {
        sb_append(out, i ? ", {\"domain\": " : "{\"domain\": ");
        json_str(out, m->opsets[i].domain[0] ? m->opsets[i].domain : "ai.onnx");
        sb_printf(out, ", \"version\": %" PRId64 "}", m->opsets[i].version);
    }
    sb_append(out, "],\n  \"inputs\": ");
    cli_io_json(m, false, out);
    sb_append(out, ",\n  \"outputs\": ");
    cli_io_json(m, true, out);
    sb_append(out, "\n}\n");
}

static void contract_usage(FILE *f) {
    fprintf(f, "usage: kiln contract MODEL.onnx [-o contract.json]\n\n"
               "Writes the model's interface (inputs, outputs, dtypes, symbolic dimensions, opsets)\n"
               "as JSON, to stdout or the -o file. Check later exports against it with\n"
               "  kiln check NEW_MODEL.onnx --contract contract.json\n"
               "See docs/CHECK.md.\n");
}

int cli_contract(int argc, char **argv) {
    const char *model = NULL, *out_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            contract_usage(stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) return cli_usage_error("contract", "%s needs a file name: -o contract.json", a);
            out_path = argv[++i];
        } else if (!strncmp(a, "--output=", 9)) {
            out_path = a + 9;
        } else if (a[0] == '-' && a[1]) {
            static const char *const flags[] = {"-o", "--output", "--help"};
            const char *g = cli_closest(a, flags, 3);
            return cli_usage_error("contract", "unknown option '%s'%s%s%s", a, g ? "; did you mean '" : "", g ? g : "",
                                   g ? "'?" : "");
        } else if (model) {
            return cli_usage_error("contract", "more than one model given ('%s' and '%s')", model, a);
        } else {
            model = a;
        }
    }
    if (!model) return cli_usage_error("contract", "expected a model path: kiln contract MODEL.onnx -o contract.json");
    kiln_model *km = NULL;
    kiln_model_load_file(model, NULL, &km);
    ir_model *m = kiln_model_ir(km);
    if (!m) {
        fprintf(stderr, "kiln contract: error: %s\n", kiln_model_errmsg(km));
        kiln_model_free(km);
        return CLI_EXIT_FAILED;
    }
    /* infer so outputs carry computed shapes; problems are check's job, but say so */
    diag_list dl;
    diag_list_init(&dl);
    kiln_error err = {0};
    ir_infer_options io = {0};
    bool cycle = false;
    for (int32_t i = 0; i < km->diags.n; i++)
        if (!strcmp(km->diags.items[i].code, "structure-cycle")) cycle = true;
    if (!cycle) ir_infer(m, &io, &dl, &err);
    int32_t n_err = dl.n_errors + km->diags.n_errors;
    if (n_err)
        fprintf(stderr, "kiln contract: warning: the model has %d error%s; run 'kiln check %s' (the contract is "
                        "written anyway)\n",
                n_err, n_err == 1 ? "" : "s", model);
    kiln_err_clear(&err);
    diag_list_free(&dl);

    strbuf sb;
    sb_init(&sb);
    contract_json(m, model, &sb);
    int rc = CLI_EXIT_OK;
    if (sb.failed) {
        fprintf(stderr, "kiln contract: error: out of memory\n");
        rc = CLI_EXIT_FAILED;
    } else if (!out_path || !strcmp(out_path, "-")) {
        fputs(sb_cstr(&sb), stdout);
    } else {
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(sb.data, 1, sb.len, f) != sb.len || fclose(f) != 0) {
            fprintf(stderr, "kiln contract: error: cannot write '%s': %s\n", out_path, strerror(errno));
            rc = CLI_EXIT_FAILED;
        } else {
            fprintf(stderr, "kiln contract: wrote %s\n", out_path);
        }
    }
    sb_free(&sb);
    kiln_model_free(km);
    return rc;
}

/* ---- comparing ------------------------------------------------------------------------ */

/* One input or output, from either side. Dims: kind 0 unknown, 1 fixed, 2 symbolic. */
typedef struct iface_dim {
    int kind;
    int64_t value;
    const char *name;
} iface_dim;

typedef struct iface {
    const char *name;
    const char *dtype; /* NULL when unknown */
    int32_t rank;      /* -1 unknown */
    iface_dim *dims;
    bool matched;
} iface;

static char *heap_printf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static char *heap_printf(const char *fmt, ...) {
    strbuf sb;
    sb_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    char *r = sb_take(&sb);
    return r ? r : NULL;
}

static const char *iface_str(arena *a, const iface *f) {
    strbuf sb;
    sb_init(&sb);
    sb_append(&sb, f->dtype ? f->dtype : "?");
    if (f->rank < 0) {
        sb_append(&sb, "[?]");
    } else {
        sb_putc(&sb, '[');
        for (int32_t d = 0; d < f->rank; d++) {
            if (d) sb_append(&sb, ", ");
            if (f->dims[d].kind == 1)
                sb_printf(&sb, "%" PRId64, f->dims[d].value);
            else
                sb_append(&sb, f->dims[d].kind == 2 ? f->dims[d].name : "?");
        }
        sb_putc(&sb, ']');
    }
    const char *r = arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "?";
}

/* Reads one contract list; false with *why on a malformed entry. */
static bool read_list(const cJSON *arr, const char *what, arena *a, iface **out, int32_t *n, char **why) {
    if (!cJSON_IsArray(arr)) {
        *why = heap_printf("field '%s' is missing or not an array", what);
        return false;
    }
    int32_t cnt = cJSON_GetArraySize(arr);
    iface *l = ARENA_ARRAY(a, iface, cnt ? cnt : 1);
    if (!l) return (*why = heap_printf("out of memory")), false;
    int32_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        if (!cJSON_IsString(name)) {
            *why = heap_printf("%s[%d] has no string field 'name'", what, i);
            return false;
        }
        if (dtype && !cJSON_IsString(dtype) && !cJSON_IsNull(dtype)) {
            *why = heap_printf("%s[%d] ('%s'): 'dtype' must be a string or null", what, i, name->valuestring);
            return false;
        }
        l[i].name = arena_strdup(a, name->valuestring);
        l[i].dtype = cJSON_IsString(dtype) ? arena_strdup(a, dtype->valuestring) : NULL;
        l[i].rank = -1;
        if (cJSON_IsArray(shape)) {
            int32_t r = cJSON_GetArraySize(shape);
            if (r > IR_MAX_RANK) {
                *why = heap_printf("%s[%d] ('%s'): shape has more than %d dimensions", what, i, name->valuestring,
                                   IR_MAX_RANK);
                return false;
            }
            l[i].rank = r;
            l[i].dims = ARENA_ARRAY(a, iface_dim, r ? r : 1);
            if (!l[i].dims) return (*why = heap_printf("out of memory")), false;
            int32_t d = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, shape) {
                if (cJSON_IsNumber(x)) {
                    l[i].dims[d].kind = 1;
                    l[i].dims[d].value = (int64_t)x->valuedouble;
                } else if (cJSON_IsString(x)) {
                    l[i].dims[d].kind = 2;
                    l[i].dims[d].name = arena_strdup(a, x->valuestring);
                } else if (!cJSON_IsNull(x)) {
                    *why = heap_printf("%s[%d] ('%s'): dimension %d must be an integer, a string or null", what, i,
                                       name->valuestring, d);
                    return false;
                }
                d++;
            }
        } else if (shape && !cJSON_IsNull(shape)) {
            *why = heap_printf("%s[%d] ('%s'): 'shape' must be an array or null", what, i, name->valuestring);
            return false;
        }
        i++;
    }
    *out = l;
    *n = i;
    return true;
}

static iface *model_list(ir_model *m, bool outputs, arena *a, int32_t *n) {
    const ir_graph *g = m->graph;
    int32_t cnt = outputs ? g->n_outputs : g->n_inputs;
    iface *l = ARENA_ARRAY(a, iface, cnt ? cnt : 1);
    if (!l) return NULL;
    int32_t k = 0;
    for (int32_t i = 0; i < cnt; i++) {
        const ir_value *v = ir_val(g, outputs ? g->outputs[i] : g->inputs[i]);
        if (!outputs && (v->flags & IR_VALUE_INITIALIZER)) continue;
        iface *f = &l[k++];
        memset(f, 0, sizeof *f);
        f->name = v->name;
        const ir_type *t = &v->type;
        bool tensor = t->kind == IR_TYPE_TENSOR || t->kind == IR_TYPE_SPARSE_TENSOR;
        f->dtype = tensor ? kiln_dtype_name(t->dtype) : (t->kind == IR_TYPE_UNKNOWN ? NULL : ir_type_str(m, t));
        f->rank = tensor ? t->rank : -1;
        if (f->rank >= 0) {
            f->dims = ARENA_ARRAY(a, iface_dim, f->rank ? f->rank : 1);
            if (!f->dims) return NULL;
            for (int32_t d = 0; d < f->rank; d++) {
                const ir_dim *dm = &t->dims[d];
                char buf[256];
                f->dims[d].kind = dm->kind == IR_DIM_CONST ? 1 : (dm->kind == IR_DIM_SYM ? 2 : 0);
                f->dims[d].value = dm->value;
                if (dm->kind == IR_DIM_SYM) f->dims[d].name = arena_strdup(a, ir_dim_str(m, *dm, buf, sizeof buf));
            }
        }
    }
    *n = k;
    return l;
}

/* "output 'logits' dim 2 changed: 256 -> 128" style messages */
static diag *mismatch(diag_list *dl, bool error, const char *what, const char *name, const char *detail) {
    return diag_add(dl, error ? DIAG_ERROR : DIAG_WARNING, error ? "contract-mismatch" : "contract-changed", NULL, NULL,
                    "%s '%s' %s", what, name, detail);
}

static void compare_one(diag_list *dl, arena *a, const char *what, bool is_output, const iface *c, const iface *mo,
                        const char *path) {
    const char *cs = iface_str(a, c), *ms = iface_str(a, mo);
    diag *d = NULL;
    if (c->dtype && mo->dtype && strcmp(c->dtype, mo->dtype)) {
        d = mismatch(dl, true, what, c->name,
                     arena_printf(a, "dtype changed: %s -> %s", c->dtype, mo->dtype));
        diag_fact(dl, d, "contract: %s", cs);
        diag_fact(dl, d, "model:    %s", ms);
        diag_hint(dl, d, "callers pass/read %s; cast back in the model or update callers and regenerate with "
                         "'kiln contract MODEL -o %s'",
                  c->dtype, path);
    }
    if (c->rank >= 0 && mo->rank >= 0 && c->rank != mo->rank) {
        d = mismatch(dl, true, what, c->name,
                     arena_printf(a, "rank changed: %d -> %d (%s -> %s)", c->rank, mo->rank, cs, ms));
        diag_hint(dl, d, "restore the missing/extra dimension (a Squeeze/Unsqueeze or view() changed in the export)");
        return;
    }
    if (c->rank < 0 || mo->rank < 0) return;
    for (int32_t i = 0; i < c->rank; i++) {
        const iface_dim *x = &c->dims[i], *y = &mo->dims[i];
        if (x->kind == 0 || y->kind == 0) continue;
        if (x->kind == 1 && y->kind == 1 && x->value != y->value) {
            d = mismatch(dl, true, what, c->name,
                         arena_printf(a, "dim %d changed: %" PRId64 " -> %" PRId64, i, x->value, y->value));
        } else if (x->kind == 2 && y->kind == 1) {
            d = mismatch(dl, true, what, c->name,
                         arena_printf(a, "dim %d changed: %s -> %" PRId64 " (dynamic -> static: other sizes are no longer "
                                         "accepted)",
                                      i, x->name, y->value));
            diag_fact(dl, d, "contract: %s", cs);
            diag_fact(dl, d, "model:    %s", ms);
            diag_hint(dl, d, "re-export with the dimension dynamic: torch.onnx.export(..., dynamic_axes={'%s': {%d: "
                             "'%s'}})",
                      c->name, i, x->name);
            continue;
        } else if (x->kind == 1 && y->kind == 2) {
            /* callers of an input still work; readers of an output may not */
            d = mismatch(dl, is_output, what, c->name,
                         arena_printf(a, "dim %d changed: %" PRId64 " -> %s (static -> dynamic)", i, x->value, y->name));
        } else if (x->kind == 2 && y->kind == 2 && strcmp(x->name, y->name)) {
            d = mismatch(dl, false, what, c->name,
                         arena_printf(a, "dim %d renamed: %s -> %s", i, x->name, y->name));
        } else {
            continue;
        }
        diag_fact(dl, d, "contract: %s", cs);
        diag_fact(dl, d, "model:    %s", ms);
        diag_hint(dl, d, "if the change is intended, update the callers and regenerate the contract: kiln contract "
                         "MODEL -o %s",
                  path);
    }
}

static void compare_lists(diag_list *dl, arena *a, const char *what, bool is_output, iface *c, int32_t nc, iface *mo,
                          int32_t nm, const char *path) {
    for (int32_t i = 0; i < nc; i++)
        for (int32_t j = 0; j < nm; j++)
            if (!mo[j].matched && !strcmp(c[i].name, mo[j].name)) {
                c[i].matched = mo[j].matched = true;
                compare_one(dl, a, what, is_output, &c[i], &mo[j], path);
                break;
            }
    /* renames: a vanished and a new entry at the same position with the same type */
    for (int32_t i = 0; i < nc; i++) {
        if (c[i].matched || i >= nm || mo[i].matched) continue;
        const char *cs = iface_str(a, &c[i]), *ms = iface_str(a, &mo[i]);
        bool same_type = (c[i].dtype && mo[i].dtype && !strcmp(c[i].dtype, mo[i].dtype)) && c[i].rank == mo[i].rank;
        if (!same_type) continue;
        c[i].matched = mo[i].matched = true;
        diag *d = diag_add(dl, DIAG_ERROR, "contract-mismatch", NULL, NULL,
                           "%s '%s' was renamed to '%s'? (same position %d, %s)", what, c[i].name, mo[i].name, i, ms);
        diag_fact(dl, d, "contract: %s %d '%s' %s", what, i, c[i].name, cs);
        diag_fact(dl, d, "model:    %s %d '%s' %s", what, i, mo[i].name, ms);
        diag_hint(dl, d, "callers address %ss by name: rename it back (torch.onnx.export %s_names=[...]) or update "
                         "the callers and regenerate the contract",
                  what, is_output ? "output" : "input");
        compare_one(dl, a, what, is_output, &c[i], &mo[i], path);
    }
    for (int32_t i = 0; i < nc; i++) {
        if (c[i].matched) continue;
        diag *d = diag_add(dl, DIAG_ERROR, "contract-mismatch", NULL, NULL, "%s '%s' %s was removed", what, c[i].name,
                           iface_str(a, &c[i]));
        strbuf names;
        sb_init(&names);
        for (int32_t j = 0; j < nm; j++) sb_printf(&names, "%s'%s'", j ? ", " : "", mo[j].name);
        diag_fact(dl, d, "the model's %ss: %s", what, names.len ? sb_cstr(&names) : "(none)");
        sb_free(&names);
        diag_hint(dl, d, "restore the %s, or update its callers and regenerate the contract", what);
    }
    for (int32_t j = 0; j < nm; j++) {
        if (mo[j].matched) continue;
        diag *d = diag_add(dl, is_output ? DIAG_WARNING : DIAG_ERROR, is_output ? "contract-changed" : "contract-mismatch",
                           NULL, NULL, "new %s '%s' %s is not in the contract", what, mo[j].name, iface_str(a, &mo[j]));
        diag_hint(dl, d, is_output ? "callers ignore it; regenerate the contract to record it"
                                   : "existing callers do not provide this input: give it a default (make it an "
                                     "initializer) or update the callers and regenerate the contract");
    }
}

static char *read_file(const char *path, size_t *len, char **why) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *why = heap_printf("cannot open contract '%s': %s", path, strerror(errno));
        return NULL;
    }
    strbuf sb;
    sb_init(&sb);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        sb_append_n(&sb, buf, n);
        if (sb.len > (64u << 20)) break; /* a contract is a few KiB; refuse giant files */
    }
    bool bad = ferror(f) || sb.len > (64u << 20) || sb.failed;
    fclose(f);
    if (bad) {
        sb_free(&sb);
        *why = heap_printf("cannot read contract '%s' (read error or larger than 64 MiB)", path);
        return NULL;
    }
    *len = sb.len;
    char *r = sb_take(&sb);
    return r ? r : calloc(1, 1);
}

bool cli_contract_compare(ir_model *m, const char *path, diag_list *dl, char **why) {
    *why = NULL;
    size_t len = 0;
    char *text = read_file(path, &len, why);
    if (!text) return false;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t off = (ep && ep >= text && ep <= text + len) ? (size_t)(ep - text) : 0;
        int line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        *why = heap_printf("contract '%s' is not valid JSON (error near line %d, column %d)", path, line, col);
        free(text);
        return false;
    }
    free(text);
    arena a;
    arena_init(&a);
    bool ok = false;
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "kiln_contract");
    if (!cJSON_IsNumber(ver)) {
        *why = heap_printf("'%s' is not a kiln contract (no \"kiln_contract\" version field); write one with 'kiln "
                           "contract MODEL -o %s'",
                           path, path);
        goto done;
    }
    if (ver->valuedouble > CLI_CONTRACT_VERSION || ver->valuedouble < 1) {
        *why = heap_printf("contract '%s' has format version %g; this kiln reads version %d (upgrade kiln or "
                           "regenerate the contract)",
                           path, ver->valuedouble, CLI_CONTRACT_VERSION);
        goto done;
    }
    iface *ci = NULL, *co = NULL;
    int32_t nci = 0, nco = 0, nmi = 0, nmo = 0;
    char *w = NULL;
    if (!read_list(cJSON_GetObjectItemCaseSensitive(root, "inputs"), "inputs", &a, &ci, &nci, &w) ||
        !read_list(cJSON_GetObjectItemCaseSensitive(root, "outputs"), "outputs", &a, &co, &nco, &w)) {
        *why = heap_printf("contract '%s': %s", path, w ? w : "malformed");
        free(w);
        goto done;
    }
    iface *mi = model_list(m, false, &a, &nmi), *mo = model_list(m, true, &a, &nmo);
    if (!mi || !mo) {
        *why = heap_printf("out of memory comparing with the contract");
        goto done;
    }
    compare_lists(dl, &a, "input", false, ci, nci, mi, nmi, path);
    compare_lists(dl, &a, "output", true, co, nco, mo, nmo, path);

    /* opsets and IR version: compatible changes worth a look */
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "opsets");
    const cJSON *o;
    cJSON_ArrayForEach(o, ops) {
        const cJSON *dom = cJSON_GetObjectItemCaseSensitive(o, "domain");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "version");
        if (!cJSON_IsString(dom) || !cJSON_IsNumber(v)) continue;
        const char *dn = strcmp(dom->valuestring, "ai.onnx") ? dom->valuestring : "";
        int64_t now = ir_model_opset(m, dn);
        if (now != (int64_t)v->valuedouble) {
            diag *d = now ? diag_add(dl, DIAG_WARNING, "contract-changed", NULL, NULL,
                                     "opset %s changed: %" PRId64 " -> %" PRId64, dom->valuestring,
                                     (int64_t)v->valuedouble, now)
                          : diag_add(dl, DIAG_WARNING, "contract-changed", NULL, NULL,
                                     "opset %s %" PRId64 " is no longer imported", dom->valuestring,
                                     (int64_t)v->valuedouble);
            diag_hint(dl, d, "operator semantics can differ between opsets; re-run your accuracy checks");
        }
    }
    const cJSON *irv = cJSON_GetObjectItemCaseSensitive(root, "ir_version");
    if (cJSON_IsNumber(irv) && (int64_t)irv->valuedouble != m->ir_version)
        diag_add(dl, DIAG_WARNING, "contract-changed", NULL, NULL, "IR version changed: %" PRId64 " -> %" PRId64,
                 (int64_t)irv->valuedouble, m->ir_version);
    ok = true;
done:
    cJSON_Delete(root);
    arena_free(&a);
    return ok;
}
