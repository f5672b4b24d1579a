/* cli_check.c - `kiln check MODEL.onnx`: every problem that would stop or spoil a build,
 * found in one pass, before building.
 *
 * Phases (each adds diagnostics to one list; nothing stops at the first problem):
 *   load + structural validation  (kiln_model_load_file; its diagnostics are on the handle)
 *   shape/type inference          (ir_infer over the symbolic shapes)
 *   unsupported operators         (one diagnostic listing all of them)
 *   contract                      (--contract FILE)
 *   weights                       (NaN/Inf, fp16 range with --fp16, unused, dead nodes)
 *   profiles                      (trtexec shape flags checked, then every profile point
 *                                  re-run through inference at concrete sizes)
 * Output: text grouped errors, warnings, notes, then "model.onnx: 2 errors, 1 warning";
 * --json FILE (or -) writes the same facts for CI (schema in docs/CHECK.md).
 * Exit status: 0 no errors, 1 errors (or warnings with --Werror, or an unreadable
 * model), 2 usage errors (bad flags, malformed shape specs, unreadable contract file).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/model_internal.h"
#include "build/profile.h"
#include "build/weights_check.h"
#include "cli/cli.h"
#include "cli/cli_check.h"
#include "ir/infer.h"

typedef struct check_opts {
    const char *model;
    const char *json_path; /* NULL: no JSON; "-": stdout */
    const char *contract;
    bool quiet, fp16, werror, timing;
    build_profile_set profiles;
    bool any_shape_flag;
} check_opts;

/* Flags, for parsing and did-you-mean. Value-taking flags are marked. */
typedef struct flag_def {
    const char *name;
    bool takes_value;
} flag_def;

static const flag_def flag_defs[] = {
    {"--json", true},       {"--contract", true},  {"--shapes", true},  {"--minShapes", true},
    {"--optShapes", true},  {"--maxShapes", true}, {"--profile", true}, {"--onnx", true},
    {"--quiet", false},     {"--fp16", false},     {"--Werror", false}, {"--help", false},
    {"--time", false},
};
#define N_FLAGS ((int)(sizeof flag_defs / sizeof flag_defs[0]))

static void check_usage(FILE *f) {
    fprintf(f,
            "usage: kiln check MODEL.onnx [options]\n\n"
            "Finds every problem that would stop or spoil an engine build, in one pass: structure,\n"
            "shapes and types (in your model's dimension names), unsupported operators, NaN/Inf and\n"
            "fp16-range weights, unused initializers, dead nodes, optimization profiles, contracts.\n\n"
            "options:\n"
            "  --shapes=SPEC          shapes to check at (min = opt = max unless a profile is given)\n"
            "  --minShapes=SPEC       optimization profile, as trtexec: name:1x3x224x224,mask:1x128\n"
            "  --optShapes=SPEC         (quote names containing ':' as 'input:0':1x3)\n"
            "  --maxShapes=SPEC\n"
            "  --profile=N            later --min/opt/maxShapes flags describe profile N (0, 1, ...)\n"
            "  --fp16                 also check that weights fit float16\n"
            "  --contract=FILE        compare the interface with a contract from 'kiln contract'\n"
            "  --json=FILE            write the report as JSON (--json=- for stdout)\n"
            "  --quiet                print only errors and the summary line\n"
            "  --Werror               exit 1 on warnings too\n"
            "  --help                 this text\n\n"
            "Flags take --flag=value or --flag value. Exit status: 0 no errors, 1 the model has\n"
            "errors, 2 usage error. 'kiln explain CODE' explains any diagnostic code.\n");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Returns CLI_EXIT_OK, or the usage-error exit code after printing the error. */
static int parse_args(int argc, char **argv, check_opts *o, bool *help) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h")) a = "--help";
        if (!strcmp(a, "-q")) a = "--quiet";
        if (a[0] != '-' || !a[1]) {
            if (o->model) return cli_usage_error("check", "more than one model given ('%s' and '%s')", o->model, a);
            o->model = a;
            continue;
        }
        /* --flag=value or --flag value */
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const flag_def *f = NULL;
        for (int k = 0; k < N_FLAGS; k++)
            if (strlen(flag_defs[k].name) == nlen && !strncmp(flag_defs[k].name, a, nlen)) f = &flag_defs[k];
        if (!f) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(nlen < 100 ? nlen : 100), a);
            const char *names[N_FLAGS];
            for (int k = 0; k < N_FLAGS; k++) names[k] = flag_defs[k].name;
            const char *g = cli_closest(name, names, N_FLAGS);
            if (g)
                return cli_usage_error("check", "unknown option '%s'; did you mean '%s'?", name, g);
            return cli_usage_error("check", "unknown option '%s'; run 'kiln check --help' for the options", name);
        }
        const char *val = NULL;
        if (f->takes_value) {
            if (eq) {
                val = eq + 1;
            } else if (i + 1 < argc) {
                val = argv[++i];
            } else {
                return cli_usage_error("check", "%s needs a value, e.g. %s", f->name,
                                       !strcmp(f->name, "--json")       ? "--json=report.json"
                                       : !strcmp(f->name, "--profile")  ? "--profile=1"
                                       : !strcmp(f->name, "--contract") ? "--contract=contract.json"
                                                                        : "--minShapes=input:1x3x224x224");
            }
            if (!*val && strcmp(f->name, "--shapes") && strstr(f->name, "Shapes") == NULL)
                return cli_usage_error("check", "%s needs a non-empty value", f->name);
        } else if (eq) {
            return cli_usage_error("check", "%s takes no value (got '%s')", f->name, eq + 1);
        }
        const char *n = f->name;
        kiln_error err = {0};
        kiln_status st = KILN_OK;
        if (!strcmp(n, "--help")) {
            *help = true;
        } else if (!strcmp(n, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(n, "--fp16")) {
            o->fp16 = true;
        } else if (!strcmp(n, "--Werror")) {
            o->werror = true;
        } else if (!strcmp(n, "--time")) {
            o->timing = true;
        } else if (!strcmp(n, "--json")) {
            o->json_path = val;
        } else if (!strcmp(n, "--contract")) {
            o->contract = val;
        } else if (!strcmp(n, "--onnx")) { /* trtexec spelling of the model path */
            if (o->model) return cli_usage_error("check", "more than one model given ('%s' and '%s')", o->model, val);
            o->model = val;
        } else if (!strcmp(n, "--profile")) {
            char *end = NULL;
            errno = 0;
            long long p = strtoll(val, &end, 10);
            if (!*val || *end || errno)
                return cli_usage_error("check", "--profile needs a profile number (0, 1, ...), got '%s'", val);
            st = build_profiles_select(&o->profiles, p, &err);
        } else {
            build_shape_flag which = !strcmp(n, "--minShapes")   ? BUILD_FLAG_MIN
                                     : !strcmp(n, "--optShapes") ? BUILD_FLAG_OPT
                                     : !strcmp(n, "--maxShapes") ? BUILD_FLAG_MAX
                                                                 : BUILD_FLAG_SHAPES;
            st = build_profiles_add(&o->profiles, which, val, &err);
            o->any_shape_flag = true;
        }
        if (st != KILN_OK) {
            int rc = cli_usage_error("check", "%s", kiln_err_msg(&err));
            kiln_err_clear(&err);
            return rc;
        }
    }
    return CLI_EXIT_OK;
}

/* Copies a diagnostic between lists (the model handle's list, per-point lists). */
static diag *diag_copy(diag_list *dst, const diag *s) {
    diag *d = diag_add(dst, s->severity, s->code, s->node, s->op_type, "%s", s->message);
    if (!d) return NULL;
    if (s->graph) d->graph = arena_strdup(&dst->arena, s->graph);
    for (int32_t i = 0; i < s->n_facts; i++) diag_fact(dst, d, "%s", s->facts[i]);
    if (s->hint) diag_hint(dst, d, "%s", s->hint);
    return d;
}

static bool has_code(const diag_list *l, const char *code) {
    for (int32_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].code, code)) return true;
    return false;
}

/* ---- unsupported operators ---------------------------------------------------------- */

typedef struct op_count {
    const char *domain, *op_type;
    int32_t count;
    strbuf nodes; /* first few node names */
} op_count;

static void collect_supported(const char *domain, const char *op_type, void *user) {
    strbuf *sb = user;
    if (sb->len) sb_append(sb, ", ");
    if (domain && domain[0]) sb_printf(sb, "%s::", domain);
    sb_append(sb, op_type);
}

static bool is_local_function(const ir_model *m, const ir_node *nd) {
    for (int32_t i = 0; i < m->n_functions; i++)
        if (!strcmp(m->functions[i].name, nd->op_type) && !strcmp(m->functions[i].domain, nd->domain)) return true;
    return false;
}

static void check_unsupported_ops(ir_model *m, diag_list *dl) {
    op_count *ops = NULL;
    int32_t n_ops = 0, cap = 0, n_nodes = 0;
    for (int32_t gi = 0; gi < m->n_graphs; gi++) {
        const ir_graph *g = m->graphs[gi];
        for (int32_t i = 0; i < g->n_nodes; i++) {
            const ir_node *nd = &g->nodes[i];
            /* model-local functions are expanded; their bodies are graphs checked here too */
            if (is_local_function(m, nd) || ir_op_known(nd->domain, nd->op_type, nd->opset)) continue;
            n_nodes++;
            int32_t k = 0;
            while (k < n_ops && (strcmp(ops[k].domain, nd->domain) || strcmp(ops[k].op_type, nd->op_type))) k++;
            if (k == n_ops) {
                if (n_ops == cap) {
                    int32_t ncap = cap ? cap * 2 : 8;
                    op_count *no = realloc(ops, sizeof *no * (size_t)ncap);
                    if (!no) goto done;
                    ops = no;
                    cap = ncap;
                }
                ops[n_ops].domain = nd->domain;
                ops[n_ops].op_type = nd->op_type;
                ops[n_ops].count = 0;
                sb_init(&ops[n_ops].nodes);
                n_ops++;
            }
            if (ops[k].count < 5) sb_printf(&ops[k].nodes, "%s'%s'", ops[k].count ? ", " : "", nd->name);
            ops[k].count++;
        }
    }
    if (!n_ops) goto done;
    strbuf list;
    sb_init(&list);
    for (int32_t k = 0; k < n_ops; k++)
        sb_printf(&list, "%s%s%s%s (x%d)", k ? ", " : "", ops[k].domain[0] ? ops[k].domain : "",
                  ops[k].domain[0] ? "::" : "", ops[k].op_type, ops[k].count);
    diag *d = diag_add(dl, DIAG_ERROR, "unsupported-op", NULL, NULL, "%d operator%s (%d node%s) %s not supported by kiln: %s",
                       n_ops, n_ops == 1 ? "" : "s", n_nodes, n_nodes == 1 ? "" : "s", n_ops == 1 ? "is" : "are",
                       sb_cstr(&list));
    sb_free(&list);
    strbuf customs;
    sb_init(&customs);
    for (int32_t k = 0; k < n_ops; k++) {
        const char *dom = ops[k].domain[0] ? ops[k].domain : "ai.onnx";
        diag_fact(dl, d, "%s::%s (opset %" PRId64 "): %d node%s: %s%s", dom, ops[k].op_type,
                  ir_model_opset(m, ops[k].domain), ops[k].count, ops[k].count == 1 ? "" : "s",
                  sb_cstr(&ops[k].nodes), ops[k].count > 5 ? ", ..." : "");
        if (ops[k].domain[0] && !strstr(sb_cstr(&customs), ops[k].domain))
            sb_printf(&customs, "%s'%s'", customs.len ? ", " : "", ops[k].domain);
    }
    if (customs.len)
        diag_fact(dl, d, "custom domain%s %s: not part of ONNX; the ops come from a framework extension or plugin",
                  strchr(sb_cstr(&customs), ',') ? "s" : "", sb_cstr(&customs));
    strbuf sup;
    sb_init(&sup);
    ir_op_foreach(collect_supported, &sup);
    diag_fact(dl, d, "kiln supports: %s", sup.len ? sb_cstr(&sup) : "(none)");
    sb_free(&sup);
    diag_hint(dl, d, "%s",
              customs.len ? "re-export without the custom ops (e.g. decompose fused ops into standard ONNX ops) or "
                            "replace them with supported ones by graph surgery"
                          : "re-export with ops kiln supports (a lower opset often decomposes them), or replace the "
                            "nodes by graph surgery");
    sb_free(&customs);
done:
    for (int32_t k = 0; k < n_ops; k++) sb_free(&ops[k].nodes);
    free(ops);
}

/* ---- profile points ------------------------------------------------------------------- */

/* Whether points a and b of profile p give every input the same shape. */
static bool same_point(const build_profile_set *ps, int32_t p, int a, int b, ir_input_shape *x, ir_input_shape *y,
                       int32_t cap) {
    int32_t na = build_profile_point_shapes(ps, p, (build_point)a, x, cap);
    int32_t nb = build_profile_point_shapes(ps, p, (build_point)b, y, cap);
    if (na != nb) return false;
    for (int32_t i = 0; i < na; i++)
        if (x[i].rank != y[i].rank || strcmp(x[i].name, y[i].name) ||
            (x[i].rank && memcmp(x[i].dims, y[i].dims, sizeof(int64_t) * (size_t)x[i].rank)))
            return false;
    return true;
}

/* Re-runs inference at each profile point; reports errors that the symbolic run did not
 * already report, naming the profile and point. */
static kiln_status check_profile_points(ir_model *m, build_profile_set *ps, diag_list *dl, int32_t base_n,
                                        kiln_error *err) {
    int32_t cap = 0;
    for (int32_t p = 0; p < ps->n_profiles; p++)
        if (ps->profiles[p].n_inputs > cap) cap = ps->profiles[p].n_inputs;
    if (!cap) return KILN_OK;
    ir_input_shape *shapes = calloc((size_t)cap * 3, sizeof *shapes);
    if (!shapes) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    ir_input_shape *sx = shapes + cap, *sy = shapes + 2 * cap;
    int32_t first_point = dl->n; /* diagnostics from points start here */
    kiln_status st = KILN_OK;
    for (int32_t p = 0; p < ps->n_profiles && st == KILN_OK; p++) {
        for (int pt = 0; pt < BUILD_N_POINTS; pt++) {
            /* identical points (opt == min, --shapes) run once, named together */
            bool seen = false;
            for (int prev = 0; prev < pt && !seen; prev++) seen = same_point(ps, p, prev, pt, sx, sy, cap);
            if (seen) continue;
            char names[32];
            snprintf(names, sizeof names, "%s", build_point_name((build_point)pt));
            for (int later = pt + 1; later < BUILD_N_POINTS; later++)
                if (same_point(ps, p, pt, later, sx, sy, cap)) {
                    size_t len = strlen(names);
                    snprintf(names + len, sizeof names - len, "/%s", build_point_name((build_point)later));
                }
            int32_t n = build_profile_point_shapes(ps, p, (build_point)pt, shapes, cap);
            if (!n) continue;
            diag_list tmp;
            diag_list_init(&tmp);
            ir_infer_options io = {shapes, n, false};
            kiln_status ist = ir_infer(m, &io, &tmp, err);
            if (ist != KILN_OK && ist != KILN_ERR_SHAPE) {
                st = ist;
                diag_list_free(&tmp);
                break;
            }
            const char *where = arena_printf(&dl->arena, "at profile %d %s shapes (%s)", p, names,
                                             build_point_shapes_str(&dl->arena, shapes, n));
            for (int32_t i = 0; i < tmp.n; i++) {
                const diag *d = &tmp.items[i];
                if (d->severity != DIAG_ERROR) continue; /* warnings repeat the symbolic run's */
                /* one diagnostic per (code, node): the first point reports in full, later
                 * points add a line; what the symbolic run already said is not repeated */
                int32_t dup = -1;
                for (int32_t k = 0; k < dl->n && dup < 0; k++) {
                    const diag *e = &dl->items[k];
                    if (k >= base_n && k < first_point) continue; /* not inference diagnostics */
                    if (strcmp(e->code, d->code)) continue;
                    if (d->node ? (e->node && !strcmp(e->node, d->node)) : (!e->node && !strcmp(e->message, d->message)))
                        dup = k;
                }
                if (dup >= 0 && dup < base_n) continue;
                if (dup >= 0) {
                    if (!strcmp(dl->items[dup].message, d->message))
                        diag_fact(dl, &dl->items[dup], "also %s", where);
                    else
                        diag_fact(dl, &dl->items[dup], "also %s: %s", where, d->message);
                    continue;
                }
                diag *c = diag_copy(dl, d);
                diag_fact(dl, c, "%s", where);
            }
            diag_list_free(&tmp);
        }
    }
    free(shapes);
    return st;
}

/* ---- output ------------------------------------------------------------------------- */

static int32_t *severity_order(const diag_list *dl) {
    int32_t *idx = malloc(sizeof *idx * (size_t)(dl->n ? dl->n : 1));
    if (!idx) return NULL;
    int32_t k = 0;
    for (int sev = DIAG_ERROR; sev <= DIAG_NOTE; sev++)
        for (int32_t i = 0; i < dl->n; i++)
            if ((int)dl->items[i].severity == sev) idx[k++] = i;
    return idx;
}

static const char *plural(int32_t n, const char *one, const char *many) { return n == 1 ? one : many; }

static int write_json(const check_opts *o, ir_model *m, const diag_list *dl, const int32_t *order, const strbuf *io_in,
                      const strbuf *io_out, bool ok) {
    strbuf sb;
    sb_init(&sb);
    sb_append(&sb, "{\n  \"model\": ");
    sb_json_string(&sb, o->model, strlen(o->model));
    sb_printf(&sb, ",\n  \"kiln_version\": \"%s\",\n  \"ok\": %s,\n  \"errors\": %d,\n  \"warnings\": %d,\n"
                   "  \"notes\": %d,\n  \"diagnostics\": [",
              kiln_version_string(), ok ? "true" : "false", dl->n_errors, dl->n_warnings,
              dl->n - dl->n_errors - dl->n_warnings);
    for (int32_t i = 0; i < dl->n; i++) {
        sb_append(&sb, i ? ",\n    " : "\n    ");
        diag_render_json(&dl->items[order[i]], &sb);
    }
    sb_append(&sb, dl->n ? "\n  ],\n  \"inputs\": " : "],\n  \"inputs\": ");
    sb_append(&sb, m && io_in->len ? sb_cstr(io_in) : "[]");
    sb_append(&sb, ",\n  \"outputs\": ");
    sb_append(&sb, m && io_out->len ? sb_cstr(io_out) : "[]");
    sb_append(&sb, ",\n  \"profiles\": ");
    build_profiles_json(&o->profiles, &sb);
    sb_append(&sb, "\n}\n");
    int rc = 0;
    if (sb.failed) {
        fprintf(stderr, "kiln check: error: out of memory writing JSON\n");
        rc = -1;
    } else if (!strcmp(o->json_path, "-")) {
        fputs(sb_cstr(&sb), stdout);
    } else {
        FILE *f = fopen(o->json_path, "wb");
        if (!f || fwrite(sb.data, 1, sb.len, f) != sb.len || fclose(f) != 0) {
            fprintf(stderr, "kiln check: error: cannot write '%s': %s\n", o->json_path, strerror(errno));
            rc = -1;
        }
    }
    sb_free(&sb);
    return rc;
}

int cli_check(int argc, char **argv) {
    check_opts o;
    memset(&o, 0, sizeof o);
    build_profiles_init(&o.profiles);
    bool help = false;
    int rc = parse_args(argc, argv, &o, &help);
    if (rc != CLI_EXIT_OK || help) {
        if (help) check_usage(stdout);
        build_profiles_free(&o.profiles);
        return help && rc == CLI_EXIT_OK ? CLI_EXIT_OK : rc;
    }
    if (!o.model) {
        build_profiles_free(&o.profiles);
        return cli_usage_error("check", "expected a model path: kiln check MODEL.onnx [options]");
    }

    double t0 = now_ms(), t_load, t_infer, t_ops, t_contract, t_weights, t_prof, t_out;
    kiln_model *km = NULL;
    kiln_model_load_file(o.model, NULL, &km);
    ir_model *m = kiln_model_ir(km);
    if (!m) {
        fprintf(stderr, "kiln check: error: %s\n", kiln_model_errmsg(km));
        kiln_model_free(km);
        build_profiles_free(&o.profiles);
        return CLI_EXIT_FAILED;
    }
    t_load = now_ms();

    diag_list dl;
    diag_list_init(&dl);
    kiln_error err = {0};
    for (int32_t i = 0; i < km->diags.n; i++) diag_copy(&dl, &km->diags.items[i]);

    /* inference needs a sortable graph; with a cycle every later shape would be noise */
    bool can_infer = !has_code(&km->diags, "structure-cycle");
    if (can_infer) {
        ir_infer_options io = {NULL, 0, false}; /* unsupported-op below lists unknown ops */
        kiln_status st = ir_infer(m, &io, &dl, &err);
        if (st != KILN_OK && st != KILN_ERR_SHAPE) {
            fprintf(stderr, "kiln check: error: shape inference failed: %s\n", kiln_err_msg(&err));
            rc = CLI_EXIT_FAILED;
            goto out;
        }
    } else {
        diag *d = diag_add(&dl, DIAG_NOTE, "structure-cycle", NULL, NULL,
                           "shape, profile and operator checks were skipped because the graph has a cycle");
        diag_hint(&dl, d, "fix the cycle above and run kiln check again");
    }
    int32_t base_n = dl.n; /* diagnostics so far: structure + symbolic inference */
    t_infer = now_ms();
    if (can_infer) check_unsupported_ops(m, &dl);
    t_ops = now_ms();

    if (o.contract) {
        char *why = NULL;
        if (!cli_contract_compare(m, o.contract, &dl, &why)) {
            rc = cli_usage_error("check", "--contract: %s", why ? why : "cannot read the contract");
            free(why);
            goto out;
        }
    }
    /* the interface as inferred symbolically, before profile runs make it concrete */
    strbuf io_in, io_out;
    sb_init(&io_in);
    sb_init(&io_out);
    if (o.json_path) {
        cli_io_json(m, false, &io_in);
        cli_io_json(m, true, &io_out);
    }
    t_contract = now_ms();

    build_weights_options wo = {o.fp16};
    if (build_check_weight_values(m, &wo, &dl, &err) != KILN_OK || build_check_unused_initializers(m, &dl, &err) != KILN_OK ||
        build_check_dead_nodes(m, &dl, &err) != KILN_OK) {
        fprintf(stderr, "kiln check: error: %s\n", kiln_err_msg(&err));
        rc = CLI_EXIT_FAILED;
        goto out_io;
    }
    t_weights = now_ms();

    build_profiles_check(&o.profiles, m, &dl);
    if (can_infer && check_profile_points(m, &o.profiles, &dl, base_n, &err) != KILN_OK) {
        fprintf(stderr, "kiln check: error: shape inference failed: %s\n", kiln_err_msg(&err));
        rc = CLI_EXIT_FAILED;
        goto out_io;
    }
    t_prof = now_ms();

    {
        bool failed = dl.n_errors > 0 || (o.werror && dl.n_warnings > 0);
        int32_t *order = severity_order(&dl);
        if (!order) {
            fprintf(stderr, "kiln check: error: out of memory\n");
            rc = CLI_EXIT_FAILED;
            goto out_io;
        }
        bool json_stdout = o.json_path && !strcmp(o.json_path, "-");
        FILE *tf = json_stdout ? stderr : stdout;
        if (!json_stdout) {
            strbuf sb;
            sb_init(&sb);
            for (int32_t i = 0; i < dl.n; i++) {
                const diag *d = &dl.items[order[i]];
                if (o.quiet && d->severity != DIAG_ERROR) continue;
                sb_reset(&sb);
                diag_render_text(d, &sb);
                fputs(sb_cstr(&sb), tf);
                fputc('\n', tf);
            }
            sb_free(&sb);
        }
        int32_t n_notes = dl.n - dl.n_errors - dl.n_warnings;
        fprintf(tf, "%s: %d %s, %d %s", o.model, dl.n_errors, plural(dl.n_errors, "error", "errors"), dl.n_warnings,
                plural(dl.n_warnings, "warning", "warnings"));
        if (n_notes) fprintf(tf, ", %d %s", n_notes, plural(n_notes, "note", "notes"));
        fprintf(tf, "%s\n", failed ? "" : " - ok");
        if (o.json_path && write_json(&o, m, &dl, order, &io_in, &io_out, !failed) != 0) failed = true;
        free(order);
        rc = failed ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    }
    t_out = now_ms();
    if (o.timing)
        fprintf(stderr,
                "time: load+validate %.2f ms, infer %.2f ms, ops %.2f ms, contract %.2f ms, weights %.2f ms, "
                "profiles %.2f ms, output %.2f ms, total %.2f ms\n",
                t_load - t0, t_infer - t_load, t_ops - t_infer, t_contract - t_ops, t_weights - t_contract,
                t_prof - t_weights, t_out - t_prof, t_out - t0);
out_io:
    sb_free(&io_in);
    sb_free(&io_out);
out:
    kiln_err_clear(&err);
    diag_list_free(&dl);
    kiln_model_free(km);
    build_profiles_free(&o.profiles);
    return rc;
}
