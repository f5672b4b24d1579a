/* profile.c - parsing trtexec shape flags and checking optimization profiles (profile.h).
 *
 * Parsing is strict about what matters (numbers, separators, positive sizes, overflow)
 * and lenient about spaces, and every rejection points at the column. Checking reports
 * each independent problem once, in the model's own dimension names, with the flag line
 * that fixes it.
 */
#include "build/profile.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

static const char *const flag_names[] = {"--minShapes", "--optShapes", "--maxShapes", "--shapes"};
static const char *const point_names[] = {"min", "opt", "max"};

const char *build_shape_flag_name(build_shape_flag f) {
    return (unsigned)f < 4 ? flag_names[f] : "--shapes";
}

const char *build_point_name(build_point p) { return (unsigned)p < 3 ? point_names[p] : "?"; }

/* ---- spec parsing ------------------------------------------------------------------- */

/* Sets err to "malformed shape spec at column N: what" plus the spec and a caret. */
static kiln_status spec_error(kiln_error *err, const char *spec, size_t pos, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static kiln_status spec_error(kiln_error *err, const char *spec, size_t pos, const char *fmt, ...) {
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "malformed shape spec at column %zu: ", pos + 1);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    /* the caret line only helps for specs that fit on a terminal line */
    if (strlen(spec) <= 200) {
        sb_printf(&sb, "\n  %s\n  ", spec);
        for (size_t i = 0; i < pos; i++) sb_putc(&sb, spec[i] == '\t' ? '\t' : ' ');
        sb_putc(&sb, '^');
    }
    sb_append(&sb, "\n  expected name:dims entries separated by ',', e.g. input:1x3x224x224,mask:1x128"
                   " (quote names containing ':' as 'name:0')");
    kiln_status st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "%s", sb.failed ? "malformed shape spec" : sb_cstr(&sb));
    sb_free(&sb);
    return st;
}

static size_t skip_spaces(const char *s, size_t i) {
    while (s[i] == ' ' || s[i] == '\t') i++;
    return i;
}

/* What is at position i, for messages: "'y'" or "the end". */
static const char *found_text(const char *spec, size_t i, char *buf, size_t n) {
    if (!spec[i]) return "the end of the spec";
    snprintf(buf, n, "'%c'", spec[i]);
    return buf;
}

kiln_status build_shape_spec_parse(const char *spec, arena *a, build_shape_entry **out,
                                   int32_t *n_out, kiln_error *err) {
    *out = NULL;
    *n_out = 0;
    if (!spec) return kiln_err_set(err, KILN_ERR_INVALID_ARG, "missing shape spec");
    size_t len = strlen(spec);
    if (skip_spaces(spec, 0) == len)
        return spec_error(err, spec, 0, "the spec is empty");
    /* every entry has at least one character plus a comma, so this bounds the count */
    size_t max_entries = 1;
    for (size_t i = 0; i < len; i++)
        if (spec[i] == ',') max_entries++;
    if (max_entries > 100000) return kiln_err_set(err, KILN_ERR_LIMIT, "shape spec has too many entries");
    build_shape_entry *entries = ARENA_ARRAY(a, build_shape_entry, max_entries);
    if (!entries) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory parsing a shape spec");
    int32_t n = 0;
    char fb[8];
    size_t i = 0;
    for (;;) {
        i = skip_spaces(spec, i);
        size_t start = i;
        if (!spec[i] || spec[i] == ',') return spec_error(err, spec, i, "empty entry (a name:dims pair is missing)");
        const char *name;
        if (spec[i] == '\'') {
            const char *close = strchr(spec + i + 1, '\'');
            if (!close) return spec_error(err, spec, i, "the quote opened here is never closed");
            size_t nlen = (size_t)(close - (spec + i + 1));
            if (!nlen) return spec_error(err, spec, i, "the quoted input name is empty");
            name = arena_strndup(a, spec + i + 1, nlen);
            i = skip_spaces(spec, (size_t)(close - spec) + 1);
            if (spec[i] != ':')
                return spec_error(err, spec, i, "expected ':' after the quoted name, found %s",
                                  found_text(spec, i, fb, sizeof fb));
            i++;
        } else {
            /* a plain name ends at the last ':' before the entry's end, so names like
             * input:0 work unquoted too (the dims never contain ':') */
            size_t end = i;
            while (spec[end] && spec[end] != ',') end++;
            size_t colon = end;
            for (size_t k = i; k < end; k++)
                if (spec[k] == ':') colon = k;
            if (colon == end)
                return spec_error(err, spec, end, "expected ':' after the input name '%.*s'",
                                  (int)(end - i > 64 ? 64 : end - i), spec + i);
            size_t nend = colon;
            while (nend > i && (spec[nend - 1] == ' ' || spec[nend - 1] == '\t')) nend--;
            if (nend == i) return spec_error(err, spec, colon, "the input name before ':' is empty");
            name = arena_strndup(a, spec + i, nend - i);
            i = colon + 1;
        }
        if (!name) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory parsing a shape spec");

        int64_t dims[IR_MAX_RANK];
        int32_t rank = 0;
        i = skip_spaces(spec, i);
        if (!strncmp(spec + i, "scalar", 6)) {
            i = skip_spaces(spec, i + 6);
            if (spec[i] && spec[i] != ',')
                return spec_error(err, spec, i, "expected ',' or the end after 'scalar', found %s",
                                  found_text(spec, i, fb, sizeof fb));
        } else if (spec[i] && spec[i] != ',') {
            for (;;) {
                i = skip_spaces(spec, i);
                if (spec[i] == '-')
                    return spec_error(err, spec, i,
                                      "negative dimension: profile shapes give concrete sizes >= 1 "
                                      "(dynamic markers like -1 belong in the model, not here)");
                if (spec[i] < '0' || spec[i] > '9')
                    return spec_error(err, spec, i, "expected a dimension (a positive integer), found %s",
                                      found_text(spec, i, fb, sizeof fb));
                size_t dstart = i;
                int64_t v = 0;
                while (spec[i] >= '0' && spec[i] <= '9') {
                    v = v * 10 + (spec[i] - '0');
                    if (v > BUILD_PROFILE_MAX_DIM)
                        return spec_error(err, spec, dstart, "dimension is too large (the limit is %lld)",
                                          (long long)BUILD_PROFILE_MAX_DIM);
                    i++;
                }
                if (v == 0) return spec_error(err, spec, dstart, "dimension is 0; sizes must be at least 1");
                if (rank == IR_MAX_RANK)
                    return spec_error(err, spec, dstart, "more than %d dimensions", IR_MAX_RANK);
                dims[rank++] = v;
                i = skip_spaces(spec, i);
                if (spec[i] == 'x') {
                    i++;
                    continue;
                }
                if (!spec[i] || spec[i] == ',') break;
                return spec_error(err, spec, i, "expected 'x' between dimensions or ',' between inputs, found %s",
                                  found_text(spec, i, fb, sizeof fb));
            }
        }
        for (int32_t k = 0; k < n; k++)
            if (!strcmp(entries[k].name, name))
                return spec_error(err, spec, start, "input '%s' is given twice (also at column %d)", name,
                                  entries[k].column);
        entries[n].name = name;
        entries[n].rank = rank;
        entries[n].dims = rank ? arena_memdup(a, dims, sizeof dims[0] * (size_t)rank) : NULL;
        if (rank && !entries[n].dims) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory parsing a shape spec");
        entries[n].column = (int32_t)start + 1;
        n++;
        if (!spec[i]) break;
        i++; /* the ',' */
        if (!spec[skip_spaces(spec, i)]) return spec_error(err, spec, i - 1, "trailing ',' with no entry after it");
    }
    *out = entries;
    *n_out = n;
    return KILN_OK;
}

/* ---- the profile set ------------------------------------------------------------------ */

void build_profiles_init(build_profile_set *s) {
    memset(s, 0, sizeof *s);
    arena_init(&s->arena);
}

void build_profiles_free(build_profile_set *s) {
    for (int32_t p = 0; p < s->n_profiles; p++) free(s->profiles[p].inputs);
    free(s->profiles);
    free(s->shapes);
    arena_free(&s->arena);
    memset(s, 0, sizeof *s);
}

static bool ensure_profile(build_profile_set *s, int32_t index) {
    while (s->n_profiles <= index) {
        if (s->n_profiles == s->cap_profiles) {
            int32_t ncap = s->cap_profiles ? s->cap_profiles * 2 : 4;
            build_profile *np = kiln_realloc_array(s->profiles, (size_t)ncap, sizeof *np);
            if (!np) return false;
            s->profiles = np;
            s->cap_profiles = ncap;
        }
        memset(&s->profiles[s->n_profiles], 0, sizeof s->profiles[0]);
        s->n_profiles++;
    }
    return true;
}

static build_profile_input *profile_input(build_profile *p, const char *name, bool create) {
    for (int32_t i = 0; i < p->n_inputs; i++)
        if (!strcmp(p->inputs[i].name, name)) return &p->inputs[i];
    if (!create) return NULL;
    if (p->n_inputs == p->cap_inputs) {
        int32_t ncap = p->cap_inputs ? p->cap_inputs * 2 : 8;
        build_profile_input *ni = kiln_realloc_array(p->inputs, (size_t)ncap, sizeof *ni);
        if (!ni) return NULL;
        p->inputs = ni;
        p->cap_inputs = ncap;
    }
    build_profile_input *in = &p->inputs[p->n_inputs++];
    memset(in, 0, sizeof *in);
    in->name = name;
    return in;
}

static void set_point(build_profile_input *in, build_point pt, build_shape_flag src, int32_t rank,
                      int64_t *dims, bool explicit_point) {
    in->given[pt] = true;
    in->source[pt] = src;
    in->rank[pt] = rank;
    in->dims[pt] = dims;
    in->explicit_point[pt] = explicit_point;
}

kiln_status build_profiles_add(build_profile_set *s, build_shape_flag flag, const char *spec,
                               kiln_error *err) {
    build_shape_entry *e = NULL;
    int32_t n = 0;
    const char *fname = build_shape_flag_name(flag);
    kiln_status st = build_shape_spec_parse(spec, &s->arena, &e, &n, err);
    if (st != KILN_OK) {
        kiln_err_prefix(err, "%s: ", fname);
        return st;
    }
    s->finished = false;
    if (flag == BUILD_FLAG_SHAPES) {
        for (int32_t i = 0; i < n; i++) {
            for (int32_t k = 0; k < s->n_shapes; k++)
                if (!strcmp(s->shapes[k].name, e[i].name))
                    return kiln_err_set(err, KILN_ERR_INVALID_ARG, "--shapes: input '%s' is given twice", e[i].name);
            if (s->n_shapes == s->cap_shapes) {
                int32_t ncap = s->cap_shapes ? s->cap_shapes * 2 : 8;
                build_shape_entry *ns = kiln_realloc_array(s->shapes, (size_t)ncap, sizeof *ns);
                if (!ns) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
                s->shapes = ns;
                s->cap_shapes = ncap;
            }
            s->shapes[s->n_shapes++] = e[i];
        }
        return KILN_OK;
    }
    if (!ensure_profile(s, s->current)) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    build_profile *p = &s->profiles[s->current];
    build_point pt = (build_point)flag;
    for (int32_t i = 0; i < n; i++) {
        build_profile_input *in = profile_input(p, e[i].name, true);
        if (!in) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        if (in->given[pt])
            return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                                "%s: input '%s' is given twice for profile %d (use --profile=N to start "
                                "another profile)",
                                fname, e[i].name, s->current);
        set_point(in, pt, flag, e[i].rank, e[i].dims, true);
    }
    return KILN_OK;
}

kiln_status build_profiles_select(build_profile_set *s, int64_t index, kiln_error *err) {
    if (index < 0)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "--profile: %" PRId64 " is negative; profiles are numbered from 0",
                            index);
    if (index >= BUILD_MAX_PROFILES)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "--profile: %" PRId64 " is too large (at most %d profiles)",
                            index, BUILD_MAX_PROFILES);
    /* profiles are numbered in order: allow any existing one or the next new one; the
     * current profile counts as existing even before a flag filled it */
    int32_t existing = s->n_profiles > s->current + 1 ? s->n_profiles : s->current + 1;
    if (index > existing)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                            "--profile=%" PRId64 ": profiles are numbered in order from 0; the next new one is "
                            "--profile=%d",
                            index, existing);
    if (!ensure_profile(s, s->current) || !ensure_profile(s, (int32_t)index))
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    s->current = (int32_t)index;
    return KILN_OK;
}

void build_profiles_finish(build_profile_set *s) {
    if (s->finished) return;
    s->finished = true;
    for (int32_t p = 0; p < s->n_profiles; p++) {
        build_profile *pr = &s->profiles[p];
        for (int32_t i = 0; i < pr->n_inputs; i++) {
            build_profile_input *in = &pr->inputs[i];
            /* trtexec: --optShapes alone means min = opt = max */
            if (in->given[BUILD_POINT_OPT] && !in->given[BUILD_POINT_MIN] && !in->given[BUILD_POINT_MAX]) {
                set_point(in, BUILD_POINT_MIN, BUILD_FLAG_OPT, in->rank[1], in->dims[1], false);
                set_point(in, BUILD_POINT_MAX, BUILD_FLAG_OPT, in->rank[1], in->dims[1], false);
            }
        }
    }
    if (s->n_shapes && !ensure_profile(s, 0)) return;
    for (int32_t k = 0; k < s->n_shapes; k++) {
        build_shape_entry *e = &s->shapes[k];
        build_profile_input *in = profile_input(&s->profiles[0], e->name, true);
        if (!in) return;
        if (in->given[0] || in->given[1] || in->given[2]) continue; /* checked against the range */
        for (int pt = 0; pt < BUILD_N_POINTS; pt++)
            set_point(in, (build_point)pt, BUILD_FLAG_SHAPES, e->rank, e->dims, pt == BUILD_POINT_OPT);
    }
}

/* ---- checking against a model ------------------------------------------------------- */

/* Edit distance for name suggestions. The CLI has its own (cli_closest); the library
 * cannot depend on the CLI, and this one is a dozen lines. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 126 || lb > 126) return 255;
    int prev[128], cur[128];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int v = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < v) v = prev[j] + 1;
            if (cur[j - 1] + 1 < v) v = cur[j - 1] + 1;
            cur[j] = v;
        }
        memcpy(prev, cur, sizeof prev[0] * (lb + 1));
    }
    return prev[lb];
}

static const char *closest_input(const ir_graph *g, const char *name) {
    const char *best = NULL;
    int bestd = 1 << 30;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const ir_value *v = ir_val(g, g->inputs[i]);
        if (v->flags & IR_VALUE_INITIALIZER) continue;
        int d = edit_distance(name, v->name);
        if (d < bestd) {
            bestd = d;
            best = v->name;
        }
    }
    size_t len = strlen(name);
    int limit = len <= 4 ? 1 : (len <= 8 ? 2 : 3);
    return bestd <= limit ? best : NULL;
}

static bool input_is_dynamic(const ir_value *v) {
    if (v->flags & IR_VALUE_INITIALIZER) return false;
    if (v->type.kind != IR_TYPE_TENSOR) return false;
    if (v->type.rank < 0) return true;
    for (int32_t d = 0; d < v->type.rank; d++)
        if (v->type.dims[d].kind != IR_DIM_CONST) return true;
    return false;
}

bool build_model_has_dynamic_inputs(const ir_model *m) {
    const ir_graph *g = m->graph;
    if (!g) return false;
    for (int32_t i = 0; i < g->n_inputs; i++)
        if (input_is_dynamic(ir_val(g, g->inputs[i]))) return true;
    return false;
}

/* "1x3x224" */
static const char *dims_x(arena *a, const int64_t *dims, int32_t rank) {
    strbuf sb;
    sb_init(&sb);
    for (int32_t d = 0; d < rank; d++) sb_printf(&sb, d ? "x%" PRId64 : "%" PRId64, dims[d]);
    const char *r = arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "";
}

/* "1x128" for a model input: its fixed dims, 1 for the dynamic ones (trtexec's default) */
static const char *default_dims_x(arena *a, const ir_value *v) {
    strbuf sb;
    sb_init(&sb);
    for (int32_t d = 0; d < v->type.rank; d++) {
        const ir_dim *dm = &v->type.dims[d];
        sb_printf(&sb, d ? "x%" PRId64 : "%" PRId64, dm->kind == IR_DIM_CONST ? dm->value : (int64_t)1);
    }
    const char *r = arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "";
}

/* A name as it must be written in a spec: quoted when it contains ':' or ','. */
static const char *spec_name(arena *a, const char *name) {
    if (strchr(name, ':') || strchr(name, ',') || strchr(name, ' ')) return arena_printf(a, "'%s'", name);
    return name;
}

/* "profile 1: " when there is more than one profile, else "" */
static const char *profile_prefix(arena *a, const build_profile_set *s, int32_t p) {
    return s->n_profiles > 1 ? arena_printf(a, "profile %d: ", p) : "";
}

static const char *dim_name(ir_model *m, const ir_value *v, int32_t d, char *buf, size_t n) {
    return ir_dim_str(m, v->type.dims[d], buf, n);
}

/* Checks one given point's dims against the model input; returns false when unusable. */
static bool check_point_dims(build_profile_set *s, int32_t p, build_profile_input *in, build_point pt,
                             ir_model *m, const ir_value *v, diag_list *diags) {
    arena *a = &s->arena;
    const char *flag = build_shape_flag_name(in->source[pt]);
    const char *pre = profile_prefix(a, s, p);
    if (in->rank[pt] != v->type.rank) {
        diag *d = diag_add(diags, DIAG_ERROR, "profile-rank-mismatch", NULL, NULL,
                           "%sinput '%s' has %d dimension%s %s but %s gives %d: %s", pre, in->name,
                           v->type.rank, v->type.rank == 1 ? "" : "s", ir_type_shape_str(m, &v->type), flag,
                           in->rank[pt], in->rank[pt] ? dims_x(a, in->dims[pt], in->rank[pt]) : "(a scalar)");
        diag_hint(diags, d, "give all %d dimensions, batch included, e.g. %s=%s:%s", v->type.rank, flag,
                  spec_name(a, in->name), default_dims_x(a, v));
        return false;
    }
    bool ok = true;
    for (int32_t d = 0; d < v->type.rank; d++) {
        const ir_dim *dm = &v->type.dims[d];
        if (dm->kind == IR_DIM_CONST && dm->value != in->dims[pt][d]) {
            diag *dg = diag_add(diags, DIAG_ERROR, "profile-static-dim-conflict", NULL, NULL,
                                "%sdimension %d of '%s' is fixed at %" PRId64 " in the model but %s gives %" PRId64,
                                pre, d, in->name, dm->value, flag, in->dims[pt][d]);
            diag_fact(diags, dg, "input '%s' is %s", in->name, ir_type_str(m, &v->type));
            diag_hint(diags, dg,
                      "use %" PRId64 " for dimension %d, or re-export the model with that dimension dynamic "
                      "(torch.onnx.export dynamic_axes)",
                      dm->value, d);
            ok = false;
        }
    }
    return ok;
}

static void check_missing_partner(build_profile_set *s, int32_t p, build_profile_input *in, diag_list *diags) {
    arena *a = &s->arena;
    int n_given = in->given[0] + in->given[1] + in->given[2];
    if (n_given == 0 || n_given == 3) return;
    strbuf have, miss, line;
    sb_init(&have);
    sb_init(&miss);
    sb_init(&line);
    /* the shapes to propose: the nearest given point (max <- opt <- min) */
    for (int pt = 0; pt < BUILD_N_POINTS; pt++) {
        strbuf *b = in->given[pt] ? &have : &miss;
        if (b->len) sb_append(b, in->given[pt] ? " and " : " or ");
        sb_append(b, build_shape_flag_name((build_shape_flag)pt));
        if (!in->given[pt]) {
            int src = -1;
            for (int k = 0; k < BUILD_N_POINTS; k++)
                if (in->given[k] && (src < 0 || abs(k - pt) < abs(src - pt))) src = k;
            if (line.len) sb_putc(&line, ' ');
            sb_printf(&line, "%s=%s:%s", build_shape_flag_name((build_shape_flag)pt), spec_name(a, in->name),
                      dims_x(a, in->dims[src], in->rank[src]));
        }
    }
    diag *d = diag_add(diags, DIAG_ERROR, "profile-missing-shape", NULL, NULL,
                       "%sinput '%s' has %s but no %s", profile_prefix(a, s, p), in->name, sb_cstr(&have),
                       sb_cstr(&miss));
    diag_fact(diags, d, "trtexec and kiln require all three of --minShapes, --optShapes and --maxShapes for "
                        "an input (--optShapes alone or --shapes sets all three)");
    diag_hint(diags, d, "add %s%s (with your real sizes)", sb_cstr(&line),
              s->n_profiles > 1 ? arena_printf(a, " after --profile=%d", p) : "");
    sb_free(&have);
    sb_free(&miss);
    sb_free(&line);
}

static void check_order(build_profile_set *s, int32_t p, build_profile_input *in, ir_model *m, const ir_value *v,
                        diag_list *diags) {
    if (!in->given[0] || !in->given[1] || !in->given[2]) return;
    if (in->rank[0] != in->rank[1] || in->rank[1] != in->rank[2]) return;
    arena *a = &s->arena;
    for (int32_t d = 0; d < in->rank[0]; d++) {
        int64_t mn = in->dims[0][d], op = in->dims[1][d], mx = in->dims[2][d];
        char buf[128];
        const char *dn = v->type.rank == in->rank[0] ? dim_name(m, v, d, buf, sizeof buf) : "?";
        if (mn > op || op > mx) {
            bool first = mn > op;
            diag *dg = diag_add(diags, DIAG_ERROR, "profile-order", NULL, NULL,
                                "%sinput '%s' dimension %d (%s): %s %" PRId64 " > %s %" PRId64
                                "; profiles need min <= opt <= max",
                                profile_prefix(a, s, p), in->name, d, dn, first ? "min" : "opt", first ? mn : op,
                                first ? "opt" : "max", first ? op : mx);
            diag_fact(diags, dg, "min %s, opt %s, max %s", dims_x(a, in->dims[0], in->rank[0]),
                      dims_x(a, in->dims[1], in->rank[1]), dims_x(a, in->dims[2], in->rank[2]));
            diag_hint(diags, dg, "reorder the values of dimension %d so that min <= opt <= max", d);
        }
    }
}

/* Shared symbols (two inputs both [batch, ...]) must get the same value at a point. */
static void check_symbols(build_profile_set *s, int32_t p, ir_model *m, diag_list *diags) {
    if (m->n_syms <= 0) return;
    build_profile *pr = &s->profiles[p];
    const ir_graph *g = m->graph;
    int64_t *val = calloc((size_t)m->n_syms, sizeof *val);
    const char **who = calloc((size_t)m->n_syms, sizeof *who);
    if (!val || !who) goto done;
    for (int pt = 0; pt < BUILD_N_POINTS; pt++) {
        memset(val, 0, sizeof *val * (size_t)m->n_syms);
        for (int32_t i = 0; i < pr->n_inputs; i++) {
            build_profile_input *in = &pr->inputs[i];
            if (in->invalid || !in->given[pt]) continue;
            int32_t id = ir_graph_find(g, in->name);
            if (id == IR_NONE) continue;
            const ir_value *v = ir_val(g, id);
            if (v->type.rank != in->rank[pt]) continue;
            for (int32_t d = 0; d < in->rank[pt]; d++) {
                const ir_dim *dm = &v->type.dims[d];
                if (dm->kind != IR_DIM_SYM || dm->sym < 0 || dm->sym >= m->n_syms) continue;
                if (m->syms[dm->sym].op != IR_SYM_LEAF) continue;
                int64_t x = in->dims[pt][d];
                if (!val[dm->sym]) {
                    val[dm->sym] = x;
                    who[dm->sym] = in->name;
                } else if (val[dm->sym] != x) {
                    diag *dg = diag_add(diags, DIAG_ERROR, "profile-symbol-conflict", NULL, NULL,
                                        "%sdimension '%s' is %" PRId64 " in input '%s' but %" PRId64
                                        " in input '%s' at the %s shapes",
                                        profile_prefix(&s->arena, s, p), m->syms[dm->sym].name, val[dm->sym],
                                        who[dm->sym], x, in->name, point_names[pt]);
                    diag_hint(diags, dg,
                              "the model uses the name '%s' for both, so they must be equal at every profile "
                              "point",
                              m->syms[dm->sym].name);
                    val[dm->sym] = x; /* report each further disagreement once */
                    who[dm->sym] = in->name;
                }
            }
        }
    }
done:
    free(val);
    free(who);
}

/* Dynamic dims of an input as "[batch, seq_len]" (names only) */
static const char *dynamic_dims_str(arena *a, ir_model *m, const ir_value *v) {
    if (v->type.rank < 0) return "(unknown rank)";
    strbuf sb;
    sb_init(&sb);
    sb_putc(&sb, '[');
    int k = 0;
    char buf[128];
    for (int32_t d = 0; d < v->type.rank; d++) {
        if (v->type.dims[d].kind == IR_DIM_CONST) continue;
        sb_printf(&sb, "%s%s", k++ ? ", " : "", ir_dim_str(m, v->type.dims[d], buf, sizeof buf));
    }
    sb_putc(&sb, ']');
    const char *r = arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "";
}

static void report_uncovered(build_profile_set *s, ir_model *m, diag_list *diags) {
    const ir_graph *g = m->graph;
    arena *a = &s->arena;
    int32_t n_profiles = s->n_profiles ? s->n_profiles : 1;
    for (int32_t p = 0; p < n_profiles; p++) {
        strbuf all_min, all_opt, all_max;
        sb_init(&all_min);
        sb_init(&all_opt);
        sb_init(&all_max);
        diag *first = NULL;
        int n_missing = 0;
        for (int32_t i = 0; i < g->n_inputs; i++) {
            const ir_value *v = ir_val(g, g->inputs[i]);
            if (!input_is_dynamic(v)) continue;
            if (s->n_profiles) {
                build_profile_input *in = profile_input(&s->profiles[p], v->name, false);
                if (in && (in->given[0] || in->given[1] || in->given[2])) continue;
            }
            n_missing++;
            const char *nm = spec_name(a, v->name);
            if (v->type.rank < 0) {
                diag *d = diag_add(diags, DIAG_WARNING, "profile-missing", NULL, NULL,
                                   "%sinput '%s' has an unknown rank and no shapes were given for it",
                                   s->n_profiles ? arena_printf(a, "profile %d: ", p) : "", v->name);
                diag_hint(diags, d, "give its full shape, e.g. --minShapes=%s:1x... (one number per dimension)",
                          nm);
                if (!first) first = d;
                continue;
            }
            const char *dx = default_dims_x(a, v);
            diag *d;
            if (s->n_profiles)
                d = diag_add(diags, DIAG_WARNING, "profile-missing", NULL, NULL,
                             "profile %d has no shapes for dynamic input '%s' %s; 1 would be used for its dynamic "
                             "dimensions %s",
                             p, v->name, ir_type_shape_str(m, &v->type), dynamic_dims_str(a, m, v));
            else
                d = diag_add(diags, DIAG_WARNING, "profile-missing", NULL, NULL,
                             "input '%s' %s has dynamic dimensions %s but no optimization profile was given",
                             v->name, ir_type_shape_str(m, &v->type), dynamic_dims_str(a, m, v));
            diag_fact(diags, d, "without a profile kiln (like trtexec) uses 1 for each dynamic dimension");
            diag_hint(diags, d, "add%s (replace the 1s with your real min/opt/max sizes):\n"
                      "--minShapes=%s:%s --optShapes=%s:%s --maxShapes=%s:%s",
                      s->n_profiles > 1 ? arena_printf(a, " after --profile=%d", p) : "", nm, dx, nm, dx, nm, dx);
            if (!first) first = d;
            sb_printf(&all_min, "%s%s:%s", all_min.len ? "," : "", nm, dx);
            sb_printf(&all_opt, "%s%s:%s", all_opt.len ? "," : "", nm, dx);
            sb_printf(&all_max, "%s%s:%s", all_max.len ? "," : "", nm, dx);
        }
        if (n_missing > 1 && first && all_min.len)
            diag_fact(diags, first, "for all dynamic inputs at once: --minShapes=%s --optShapes=%s --maxShapes=%s",
                      sb_cstr(&all_min), sb_cstr(&all_opt), sb_cstr(&all_max));
        sb_free(&all_min);
        sb_free(&all_opt);
        sb_free(&all_max);
    }
}

/* --shapes given together with a profile: it must lie inside profile 0. */
static void check_runtime_shapes(build_profile_set *s, ir_model *m, diag_list *diags) {
    if (!s->n_profiles) return;
    build_profile *pr = &s->profiles[0];
    for (int32_t k = 0; k < s->n_shapes; k++) {
        build_shape_entry *e = &s->shapes[k];
        build_profile_input *in = profile_input(pr, e->name, false);
        if (!in || in->invalid || in->source[BUILD_POINT_OPT] == BUILD_FLAG_SHAPES) continue;
        if (!in->given[0] || !in->given[2]) continue;
        if (e->rank != in->rank[0] || e->rank != in->rank[2]) {
            diag *d = diag_add(diags, DIAG_ERROR, "profile-rank-mismatch", NULL, NULL,
                               "--shapes gives input '%s' %d dimensions but its profile has %d", e->name, e->rank,
                               in->rank[0]);
            (void)d;
            continue;
        }
        for (int32_t d = 0; d < e->rank; d++) {
            if (e->dims[d] < in->dims[0][d] || e->dims[d] > in->dims[2][d]) {
                diag *dg = diag_add(diags, DIAG_ERROR, "profile-shapes-outside", NULL, NULL,
                                    "--shapes gives '%s' dimension %d = %" PRId64 " but profile 0 allows %" PRId64
                                    "..%" PRId64,
                                    e->name, d, e->dims[d], in->dims[0][d], in->dims[2][d]);
                diag_hint(diags, dg, "widen --minShapes/--maxShapes or choose a --shapes value inside the range");
            }
        }
    }
    (void)m;
}

int32_t build_profiles_check(build_profile_set *s, ir_model *m, diag_list *diags) {
    build_profiles_finish(s);
    int32_t before = diags->n_errors;
    const ir_graph *g = m->graph;
    if (!g) return 0;
    arena *a = &s->arena;
    for (int32_t p = 0; p < s->n_profiles; p++) {
        build_profile *pr = &s->profiles[p];
        for (int32_t i = 0; i < pr->n_inputs; i++) {
            build_profile_input *in = &pr->inputs[i];
            int32_t id = ir_graph_find(g, in->name);
            const ir_value *v = id == IR_NONE ? NULL : ir_val(g, id);
            if (!v || !(v->flags & IR_VALUE_GRAPH_INPUT) || (v->flags & IR_VALUE_INITIALIZER)) {
                in->invalid = true;
                const char *flag = NULL;
                for (int pt = 0; pt < BUILD_N_POINTS && !flag; pt++)
                    if (in->given[pt]) flag = build_shape_flag_name(in->source[pt]);
                diag *d;
                if (v && (v->flags & IR_VALUE_INITIALIZER))
                    d = diag_add(diags, DIAG_ERROR, "profile-unknown-input", NULL, NULL,
                                 "%s%s names '%s', which is an initializer (a weight), not an input",
                                 profile_prefix(a, s, p), flag ? flag : "--shapes", in->name);
                else
                    d = diag_add(diags, DIAG_ERROR, "profile-unknown-input", NULL, NULL,
                                 "%s%s names '%s', but the model has no input of that name", profile_prefix(a, s, p),
                                 flag ? flag : "--shapes", in->name);
                strbuf names;
                sb_init(&names);
                for (int32_t k = 0; k < g->n_inputs; k++) {
                    const ir_value *iv = ir_val(g, g->inputs[k]);
                    if (iv->flags & IR_VALUE_INITIALIZER) continue;
                    sb_printf(&names, "%s'%s' %s", names.len ? ", " : "", iv->name, ir_type_shape_str(m, &iv->type));
                }
                diag_fact(diags, d, "the model's inputs: %s", names.len ? sb_cstr(&names) : "(none)");
                sb_free(&names);
                const char *guess = closest_input(g, in->name);
                if (guess)
                    diag_hint(diags, d, "did you mean '%s'?", guess);
                else
                    diag_hint(diags, d, "use one of the input names above (quote names with ':' as 'name:0')");
                continue;
            }
            if (v->type.kind != IR_TYPE_TENSOR || v->type.rank < 0) {
                check_missing_partner(s, p, in, diags);
                continue; /* nothing to compare against */
            }
            /* a wrong rank makes the entry unusable for everything else; a contradicted fixed
             * dimension still allows the order checks but keeps the entry out of inference */
            bool rank_ok = true, dims_ok = true;
            const int64_t *seen[BUILD_N_POINTS] = {0};
            for (int pt = 0; pt < BUILD_N_POINTS; pt++) {
                if (!in->given[pt]) continue;
                if (in->rank[pt] != v->type.rank) rank_ok = false;
                bool dup = false; /* points filled from one flag share dims: report once */
                for (int k = 0; k < pt; k++)
                    if (seen[k] == in->dims[pt] && in->dims[pt]) dup = true;
                seen[pt] = in->dims[pt];
                if (dup) continue;
                if (!check_point_dims(s, p, in, (build_point)pt, m, v, diags)) dims_ok = false;
            }
            in->invalid = !rank_ok || !dims_ok;
            if (!rank_ok) continue;
            check_missing_partner(s, p, in, diags);
            check_order(s, p, in, m, v, diags);
            if (!input_is_dynamic(v)) {
                bool all_equal = true;
                for (int pt = 0; pt < BUILD_N_POINTS; pt++)
                    if (in->given[pt])
                        for (int32_t d = 0; d < v->type.rank; d++)
                            if (in->dims[pt][d] != v->type.dims[d].value) all_equal = false;
                if (all_equal) {
                    diag *d = diag_add(diags, DIAG_WARNING, "profile-static-input", NULL, NULL,
                                       "%sinput '%s' is static %s; shapes for it are not needed",
                                       profile_prefix(a, s, p), in->name, ir_type_shape_str(m, &v->type));
                    diag_hint(diags, d, "drop '%s' from the shape flags (it is harmless: the shapes match)",
                              in->name);
                }
            }
        }
        check_symbols(s, p, m, diags);
    }
    check_runtime_shapes(s, m, diags);
    report_uncovered(s, m, diags);
    return diags->n_errors - before;
}

int32_t build_profile_point_shapes(const build_profile_set *s, int32_t p, build_point point, ir_input_shape *out,
                                   int32_t cap) {
    if (p < 0 || p >= s->n_profiles) return 0;
    const build_profile *pr = &s->profiles[p];
    int32_t n = 0;
    for (int32_t i = 0; i < pr->n_inputs && n < cap; i++) {
        const build_profile_input *in = &pr->inputs[i];
        if (in->invalid || !in->given[point]) continue;
        out[n].name = in->name;
        out[n].rank = in->rank[point];
        out[n].dims = in->dims[point];
        n++;
    }
    return n;
}

const char *build_point_shapes_str(arena *a, const ir_input_shape *shapes, int32_t n) {
    strbuf sb;
    sb_init(&sb);
    for (int32_t i = 0; i < n; i++) {
        sb_printf(&sb, "%s%s=[", i ? ", " : "", shapes[i].name);
        for (int32_t d = 0; d < shapes[i].rank; d++) sb_printf(&sb, d ? ", %" PRId64 : "%" PRId64, shapes[i].dims[d]);
        sb_putc(&sb, ']');
    }
    const char *r = arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r ? r : "";
}

void build_profiles_json(const build_profile_set *s, strbuf *out) {
    sb_putc(out, '[');
    for (int32_t p = 0; p < s->n_profiles; p++) {
        const build_profile *pr = &s->profiles[p];
        sb_printf(out, "%s{\"index\": %d, \"inputs\": [", p ? ", " : "", p);
        for (int32_t i = 0; i < pr->n_inputs; i++) {
            const build_profile_input *in = &pr->inputs[i];
            sb_append(out, i ? ", {\"name\": " : "{\"name\": ");
            sb_json_string(out, in->name, strlen(in->name));
            for (int pt = 0; pt < BUILD_N_POINTS; pt++) {
                sb_printf(out, ", \"%s\": ", point_names[pt]);
                if (!in->given[pt]) {
                    sb_append(out, "null");
                    continue;
                }
                sb_putc(out, '[');
                for (int32_t d = 0; d < in->rank[pt]; d++)
                    sb_printf(out, d ? ", %" PRId64 : "%" PRId64, in->dims[pt][d]);
                sb_putc(out, ']');
            }
            sb_printf(out, ", \"valid\": %s}", in->invalid ? "false" : "true");
        }
        sb_append(out, "]}");
    }
    sb_putc(out, ']');
}
