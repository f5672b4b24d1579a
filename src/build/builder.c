/* builder.c - the engine builder (see builder.h for the steps and their order). */
#include "build/builder.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_conv.h"
#include "build/memplan.h"
#include "build/passes/passes.h"
#include "build/timing_cache.h"
#include "core/alloc.h"
#include "core/hashmap.h"
#include "core/strbuf.h"
#include "ir/infer.h"
#include "runtime/session.h"

build_options build_options_default(void) {
    build_options o;
    memset(&o, 0, sizeof o);
    o.time_tactics = true;
    o.run_passes = true;
    o.workspace_flag = "--memPoolSize=workspace:N";
    return o;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void warn(const build_options *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void warn(const build_options *o, const char *fmt, ...) {
    if (!o->warn) return;
    strbuf sb;
    sb_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    o->warn(o->warn_user, sb_cstr(&sb));
    sb_free(&sb);
}

/* ---- profile points ----------------------------------------------------------------- */

static bool value_is_dynamic(const ir_value *v) {
    if (v->type.kind != IR_TYPE_TENSOR) return false;
    if (v->type.rank < 0 || !v->type.dims) return v->type.rank != 0;
    for (int32_t d = 0; d < v->type.rank; d++)
        if (v->type.dims[d].kind != IR_DIM_CONST) return true;
    return false;
}

/* The shapes of every dynamic input at one point: from the profile set where given, the
 * trtexec default (1 for each dynamic dim) otherwise. Entries live in `a`. */
typedef struct point_shapes {
    ir_input_shape *in;
    int32_t n;
} point_shapes;

static kiln_status point_for(const build_profile_set *set, int32_t p, build_point pt, ir_model *m, arena *a,
                             point_shapes *out, kiln_error *err) {
    const ir_graph *g = m->graph;
    int32_t cap = g->n_inputs + 1;
    out->in = ARENA_ARRAY(a, ir_input_shape, cap);
    if (!out->in) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    out->n = set && set->n_profiles > p ? build_profile_point_shapes(set, p, pt, out->in, cap) : 0;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const ir_value *v = ir_val(g, g->inputs[i]);
        if ((v->flags & IR_VALUE_INITIALIZER) || !value_is_dynamic(v)) continue;
        bool have = false;
        for (int32_t k = 0; k < out->n; k++) have |= !strcmp(out->in[k].name, v->name);
        if (have) continue;
        if (v->type.rank < 0 || !v->type.dims)
            return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                                "input '%s' has an unknown rank, so no default shape can be used: give its full shape "
                                "with --shapes=%s:1x... (one number per dimension)",
                                v->name, v->name);
        int64_t *dims = ARENA_ARRAY(a, int64_t, v->type.rank ? v->type.rank : 1);
        if (!dims) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        for (int32_t d = 0; d < v->type.rank; d++)
            dims[d] = v->type.dims[d].kind == IR_DIM_CONST ? v->type.dims[d].value : 1;
        out->in[out->n++] = (ir_input_shape){v->name, v->type.rank, dims};
    }
    return KILN_OK;
}

/* Records the profiles in the plan: dynamic inputs only, min/opt/max per dimension. */
static kiln_status record_profiles(engine_plan *plan, const build_profile_set *set, ir_model *m, int32_t n_profiles,
                                   kiln_error *err) {
    arena *a = &plan->arena;
    plan->n_profiles = n_profiles;
    plan->profiles = ARENA_ARRAY(a, engine_profile, n_profiles);
    if (!plan->profiles) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    for (int32_t p = 0; p < n_profiles; p++) {
        point_shapes pts[3];
        for (int k = 0; k < 3; k++) {
            kiln_status st = point_for(set, p, (build_point)k, m, a, &pts[k], err);
            if (st != KILN_OK) return st;
        }
        engine_profile *ep = &plan->profiles[p];
        ep->inputs = ARENA_ARRAY(a, engine_profile_input, pts[1].n ? pts[1].n : 1);
        if (!ep->inputs) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        for (int32_t i = 0; i < pts[1].n; i++) {
            const ir_input_shape *opt = &pts[1].in[i];
            const ir_input_shape *mn = NULL, *mx = NULL;
            for (int32_t k = 0; k < pts[0].n; k++)
                if (!strcmp(pts[0].in[k].name, opt->name)) mn = &pts[0].in[k];
            for (int32_t k = 0; k < pts[2].n; k++)
                if (!strcmp(pts[2].in[k].name, opt->name)) mx = &pts[2].in[k];
            if (!mn) mn = opt;
            if (!mx) mx = opt;
            if (mn->rank != opt->rank || mx->rank != opt->rank) continue; /* reported by the check */
            engine_profile_input *e = &ep->inputs[ep->n_inputs++];
            e->name = arena_strdup(a, opt->name);
            e->rank = opt->rank;
            e->min = arena_memdup(a, mn->dims, sizeof(int64_t) * (size_t)(opt->rank ? opt->rank : 1));
            e->opt = arena_memdup(a, opt->dims, sizeof(int64_t) * (size_t)(opt->rank ? opt->rank : 1));
            e->max = arena_memdup(a, mx->dims, sizeof(int64_t) * (size_t)(opt->rank ? opt->rank : 1));
            if (!e->name || !e->min || !e->opt || !e->max) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        }
    }
    return KILN_OK;
}

/* ---- memory sizes ------------------------------------------------------------------- */

/* Activation arena for the current inferred shapes (concrete after inference at a point). */
static uint64_t activation_bytes(const ir_graph *g) {
    uint64_t *sizes = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *sizes);
    if (!sizes) return 0;
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->producer == IR_NONE || val->type.kind != IR_TYPE_TENSOR || val->type.rank < 0 || !val->type.dims)
            continue;
        uint64_t count = 1;
        bool known = true;
        for (int32_t d = 0; d < val->type.rank; d++) {
            if (val->type.dims[d].kind != IR_DIM_CONST) known = false;
            else if (kiln_mul_overflow_u64(count, (uint64_t)val->type.dims[d].value, &count)) known = false;
        }
        uint64_t bytes;
        if (known && kiln_dtype_nbytes(val->type.dtype, count, &bytes)) sizes[v] = bytes;
    }
    build_memplan plan;
    memset(&plan, 0, sizeof plan);
    uint64_t out = 0;
    if (build_memplan_graph(g, sizes, &plan, NULL) == KILN_OK) out = plan.arena_bytes;
    build_memplan_free(&plan);
    free(sizes);
    return out;
}

/* ---- inference at a point ----------------------------------------------------------- */

static kiln_status infer_at(ir_model *m, const point_shapes *ps, int32_t p, build_point pt, int32_t n_profiles,
                            diag_list *diags, kiln_error *err) {
    ir_infer_options io;
    memset(&io, 0, sizeof io);
    io.inputs = ps->in;
    io.n_inputs = ps->n;
    kiln_error ierr = {0};
    kiln_status st = ir_infer(m, &io, diags, &ierr);
    if (st == KILN_OK) {
        kiln_err_clear(&ierr);
        return KILN_OK;
    }
    strbuf sb;
    sb_init(&sb);
    for (int32_t i = 0; i < ps->n; i++) {
        sb_printf(&sb, "%s%s=[", i ? ", " : "", ps->in[i].name);
        for (int32_t d = 0; d < ps->in[i].rank; d++) sb_printf(&sb, "%s%" PRId64, d ? ", " : "", ps->in[i].dims[d]);
        sb_putc(&sb, ']');
    }
    if (st == KILN_ERR_SHAPE)
        kiln_err_set(err, KILN_ERR_SHAPE,
                     "shape inference failed at the %s shape of profile %d (%s): the model cannot run with these "
                     "shapes; fix the model or the --minShapes/--optShapes/--maxShapes values",
                     build_point_name(pt), p, sb.len ? sb_cstr(&sb) : "no dynamic inputs");
    else
        kiln_err_move(err, &ierr);
    (void)n_profiles;
    kiln_err_clear(&ierr);
    sb_free(&sb);
    return st;
}

/* ---- tactics ------------------------------------------------------------------------ */

static bool is_tty_stderr(void) { return isatty(STDERR_FILENO) == 1; }

/* The C16 conv, timed alone, pays for converting its NCHW input and output; between
 * other C16 convs (layout_c16.c) it converts nothing. So it is taken where it timed within
 * a margin of the fastest GEMM: KILN_C16_MARGIN (a factor, default 1.10). */
static int32_t prefer_c16(const build_tactic *const *fit, const double *ms, int32_t nfit, int32_t best) {
    static double margin = -1;
    if (margin < 0) {
        const char *e = getenv("KILN_C16_MARGIN");
        margin = e && atof(e) > 0 ? atof(e) : 1.10;
    }
    if (!strncmp(fit[best]->name, "conv_winograd", 13)) return best; /* fewer FLOPs, not a layout, made it faster */
    if (!strcmp(fit[best]->name, CPU_CONV_TACTIC_AMX)) return best;   /* works on C16 too */
    for (int32_t k = 0; k < nfit; k++)
        if (k != best && !strcmp(fit[k]->name, CPU_CONV_TACTIC_C16) && ms[k] > 0 && ms[best] > 0 &&
            ms[k] <= ms[best] * margin)
            return k;
    return best;
}

/* KILN_PREFER_TACTIC=NAME[,NAME...]: where one of the named tactics is a candidate that
 * fits the workspace, it is taken whatever the timing says (tests that must run one path,
 * A/B measurements of one tactic against another). Returns its index in fit, or -1. */
static int32_t preferred_tactic(const build_tactic *const *fit, int32_t nfit) {
    const char *e = getenv("KILN_PREFER_TACTIC");
    if (!e || !*e) return -1;
    for (int32_t k = 0; k < nfit; k++) {
        size_t len = strlen(fit[k]->name);
        for (const char *p = e; *p;) {
            const char *end = strchr(p, ',');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            if (n == len && !strncmp(p, fit[k]->name, n)) return k;
            p += n + (end ? 1 : 0);
        }
    }
    return -1;
}

/* Per-node timings the C16 chaining needs (-1: not timed): the C16 kernel and the AMX
 * conv over NCHW data, as timed against the other tactics, and both again over C16 data
 * (build_tactics_time_c16), as they run inside a C16 region. */
typedef struct c16_timings {
    double *c16, *amx, *c16_region, *amx_region;
} c16_timings;

/* The pool tactics are timed on, created on first use (NULL if that fails: then nothing
 * is timed). */
static cpu_threadpool *timing_pool(cpu_threadpool **pool, int threads) {
    if (!*pool) {
        kiln_error perr = {0};
        if (cpu_threadpool_create(threads, pool, &perr) != KILN_OK) *pool = NULL;
        kiln_err_clear(&perr);
    }
    return *pool;
}

/* Times the C16 kernel (fit[kc]) and the AMX conv (fit[ka]) over C16 data into
 * t->c16_region[i] / t->amx_region[i], through the cache under key + "|c16region". */
static void time_in_c16_region(const build_tactic *const *fit, int32_t kc, int32_t ka, const build_tactic_query *q,
                               cpu_threadpool **pool, int threads, int rounds, build_timing_cache *cache,
                               const char *key, build_stats *stats, c16_timings *t, int32_t i) {
    const build_tactic *two[2] = {fit[kc], fit[ka]};
    double ms[2] = {-1, -1};
    char *rkey = NULL;
    if (cache && key) {
        size_t n = strlen(key) + 16;
        rkey = malloc(n);
        if (rkey) snprintf(rkey, n, "%s|c16region", key);
    }
    int cached = 0;
    for (int k = 0; k < 2; k++)
        if (rkey && build_timing_cache_get(cache, rkey, two[k]->name, &ms[k])) cached++;
    if (cached < 2) {
        kiln_error terr = {0};
        cpu_threadpool *tp = timing_pool(pool, threads);
        if (!tp || build_tactics_time_c16(two, 2, q, tp, rounds, ms, &terr) != KILN_OK) ms[0] = ms[1] = -1;
        kiln_err_clear(&terr);
        stats->timed += 2;
        for (int k = 0; k < 2; k++)
            if (ms[k] >= 0 && rkey) build_timing_cache_put(cache, rkey, two[k]->name, ms[k]);
    } else
        stats->cache_hits += 2;
    free(rkey);
    t->c16_region[i] = ms[0];
    t->amx_region[i] = ms[1];
}

static kiln_status choose_tactics(ir_model *m, engine_plan *plan, const build_options *o, build_timing_cache *cache,
                                  build_stats *stats, c16_timings *ct, kiln_error *err) {
    const ir_graph *g = m->graph;
    arena *a = &plan->arena;
    plan->n_layers = g->n_nodes;
    plan->layers = ARENA_ARRAY(a, engine_layer, g->n_nodes ? g->n_nodes : 1);
    if (!plan->layers) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    cpu_threadpool *pool = NULL; /* created when the first tactics are timed */
    const int rounds = o->timing_rounds > 0 ? o->timing_rounds : BUILD_DEFAULT_TIMING_ROUNDS;
    bool progress = o->progress && is_tty_stderr();
    double t_start = now_s();
    bool printed = false;
    const ir_type **in_types = NULL, **out_types = NULL;
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        const ir_node *n = &g->nodes[i];
        engine_layer *l = &plan->layers[i];
        l->node = i;
        l->name = n->name;
        l->op_type = n->op_type;
        l->precision = ENGINE_PREC_FP32;
        const ir_type **ni = kiln_realloc_array(in_types, (size_t)(n->n_inputs + 1), sizeof *ni);
        if (ni) in_types = ni;
        const ir_type **no = kiln_realloc_array(out_types, (size_t)(n->n_outputs + 1), sizeof *no);
        if (no) out_types = no;
        if (!ni || !no) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
            break;
        }
        for (int32_t k = 0; k < n->n_inputs; k++) in_types[k] = n->inputs[k] == IR_NONE ? NULL : &g->values[n->inputs[k]].type;
        for (int32_t k = 0; k < n->n_outputs; k++)
            out_types[k] = n->outputs[k] == IR_NONE ? NULL : &g->values[n->outputs[k]].type;
        build_tactic_query q = {m, g, n, n->n_inputs, n->n_outputs, in_types, out_types};
        const build_tactic *cands[BUILD_MAX_TACTICS];
        build_tactic generic;
        char generic_name[64];
        int32_t nc = build_tactics_for_node(o->registry, &q, o->cpu_features, cands, BUILD_MAX_TACTICS, &generic,
                                            generic_name);
        if (nc == 0) {
            /* the runtime reports unsupported ops with the full list; keep the layer */
            l->tactic = "unsupported";
            continue;
        }
        if (o->precision_flags & ENGINE_PREC_FLAG_NO_TF32) {
            /* --noTF32: FP32 arithmetic only (the FP32 row of an op is never TF32-class) */
            int32_t kept = 0;
            for (int32_t k = 0; k < nc; k++)
                if (!cands[k]->tf32_class) cands[kept++] = cands[k];
            nc = kept;
        }
        /* drop what does not fit the workspace */
        int32_t nfit = 0;
        uint64_t smallest = UINT64_MAX;
        const build_tactic *fit[BUILD_MAX_TACTICS];
        uint64_t fit_scratch[BUILD_MAX_TACTICS];
        const char *smallest_name = NULL;
        for (int32_t k = 0; k < nc; k++) {
            uint64_t s = build_tactic_scratch(cands[k], &q);
            if (s < smallest) {
                smallest = s;
                smallest_name = cands[k]->name;
            }
            if (o->workspace_limit && s > o->workspace_limit) continue;
            fit[nfit] = cands[k];
            fit_scratch[nfit++] = s;
        }
        if (nfit == 0) {
            char need[32], lim[32];
            build_bytes_str(smallest, need, sizeof need);
            build_bytes_str(o->workspace_limit, lim, sizeof lim);
            uint64_t mib = (smallest + (1u << 20) - 1) >> 20;
            st = kiln_err_set(err, KILN_ERR_LIMIT,
                              "node '%s' (%s): every implementation needs more scratch memory than the workspace "
                              "limit allows: the smallest, %s, needs %s (%" PRIu64 " bytes) at the opt shape; the "
                              "limit is %s (%" PRIu64 " bytes).\n"
                              "hint: raise the limit to at least %" PRIu64 " MiB: --memPoolSize=workspace:%" PRIu64
                              " (or --workspace=%" PRIu64 ")",
                              n->name, n->op_type, smallest_name, need, smallest, lim, o->workspace_limit, mib, mib,
                              mib);
            break;
        }
        int32_t best = 0;
        if (nfit > 1 && o->time_tactics) {
            char *key = build_tactic_key_threads(&q, o->cpu_features, o->threads);
            if (progress && (printed || now_s() - t_start > 0.5)) {
                fprintf(stderr, "\r\033[K[%d/%d] timing tactics for %s ...", i + 1, g->n_nodes, n->name);
                fflush(stderr);
                printed = true;
            }
            /* all from the cache, or all timed now against each other (tactic_timing.c:
             * times taken at different moments on a shared machine do not compare) */
            double ms[BUILD_MAX_TACTICS];
            int32_t cached = 0;
            for (int32_t k = 0; k < nfit; k++)
                if (cache && key && build_timing_cache_get(cache, key, fit[k]->name, &ms[k])) cached++;
            if (cached == nfit) {
                stats->cache_hits += cached;
            } else {
                kiln_error terr = {0};
                if (build_tactics_time(fit, nfit, &q, timing_pool(&pool, o->threads), rounds, ms, &terr) != KILN_OK)
                    for (int32_t k = 0; k < nfit; k++) ms[k] = -1;
                kiln_err_clear(&terr);
                stats->timed += nfit;
                for (int32_t k = 0; k < nfit; k++)
                    if (ms[k] >= 0 && cache && key) build_timing_cache_put(cache, key, fit[k]->name, ms[k]);
            }
            double best_ms = 0;
            for (int32_t k = 0; k < nfit; k++)
                if (ms[k] >= 0 && (best_ms == 0 || ms[k] < best_ms)) {
                    best_ms = ms[k];
                    best = k;
                }
            best = prefer_c16(fit, ms, nfit, best);
            if (ms[best] > 0) best_ms = ms[best];
            int32_t kc = -1, ka = -1;
            for (int32_t k = 0; k < nfit; k++)
                if (!strcmp(fit[k]->name, CPU_CONV_TACTIC_C16) && ms[k] > 0) ct->c16[i] = ms[k], kc = k;
                else if (!strcmp(fit[k]->name, CPU_CONV_TACTIC_AMX) && ms[k] > 0) ct->amx[i] = ms[k], ka = k;
            if (kc >= 0 && ka >= 0) /* the AMX conv applies: channels in 16s */
                time_in_c16_region(fit, kc, ka, &q, &pool, o->threads, rounds, cache, key, stats, ct, i);
            l->time_ms = best_ms;
            free(key);
        }
        int32_t pref = preferred_tactic(fit, nfit);
        if (pref >= 0) best = pref;
        l->tactic = arena_strdup(a, fit[best]->name); /* the generic name is a loop-local buffer */
        if (!l->tactic) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
            break;
        }
        if (fit[best]->tf32_class) l->precision = ENGINE_PREC_TF32;
        l->scratch_bytes = fit_scratch[best];
        if (l->scratch_bytes > stats->max_scratch) stats->max_scratch = l->scratch_bytes;
    }
    if (printed) fprintf(stderr, "\r\033[K");
    free(in_types);
    free(out_types);
    cpu_threadpool_free(pool);
    return st;
}

/* When several tactics apply, the kernel reads the choice from the node. */
static kiln_status mark_tactics(ir_model *m, engine_plan *plan, const build_options *o, kiln_error *err) {
    (void)o;
    ir_graph *g = m->graph;
    for (int32_t i = 0; i < plan->n_layers; i++) {
        engine_layer *l = &plan->layers[i];
        if (!l->tactic || l->time_ms <= 0) continue; /* single candidate: nothing to tell the kernel */
        ir_attr a;
        memset(&a, 0, sizeof a);
        a.name = BUILD_TACTIC_ATTR;
        a.type = IR_ATTR_STRING;
        a.s.data = arena_strdup(&m->arena, l->tactic);
        a.s.len = strlen(l->tactic);
        if (!a.s.data || !ir_node_set_attr(m, &g->nodes[l->node], &a))
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    return KILN_OK;
}

/* Whether a build keeps activations in C16 (layout_c16.c): CPU engines for AVX-512F, the
 * only machines the C16 kernels run on, unless KILN_NO_C16_LAYOUT is set. It decides the
 * P16 pass's mode, the chained C16 tactics and the C16 marks alike. */
static bool c16_layout_target(const build_options *o, bool gpu) {
    return !gpu && (o->cpu_features & CPU_FEATURE_AVX512F) && !getenv("KILN_NO_C16_LAYOUT");
}

/* A conv whose tactic leaves its data in NCHW or C16 at no cost (the C16 kernel, and
 * Winograd, which blocks channels by 8 anyway). */
static bool c16_tactic(const char *t) {
    return t && (!strcmp(t, CPU_CONV_TACTIC_C16) || !strcmp(t, CPU_CONV_TACTIC_WINOGRAD) ||
                 !strcmp(t, CPU_CONV_TACTIC_WINOGRAD_F23) || !strcmp(t, CPU_CONV_TACTIC_AMX));
}

/* A 2-D MaxPool without the Indices output: the CPU runs it on C16 data (cpu_pool.c) as
 * on NCHW, so ResNet's stem pool joins the region (the stem's 3.2 MB output is stored as
 * it is computed, and the first block's convs read the pool's output in place). */
static bool c16_pool(const ir_graph *g, const ir_node *n) {
    if (strcmp(n->op_type, "MaxPool") || (n->domain && n->domain[0]) || n->n_inputs < 1 || n->n_outputs < 1) return false;
    if (n->n_outputs > 1 && n->outputs[1] != IR_NONE) return false;
    int32_t x = n->inputs[0];
    return x >= 0 && x < g->n_values && g->values[x].type.rank == 4;
}

/* Timed alone, over NCHW data, the C16 conv pays for copying its input and transposing its
 * output, which it does not between other C16 convs; the GEMM it is timed against pays for
 * packing either way. So a conv the C16 kernel can run (c16_ms[node] >= 0, its timing)
 * takes it when it is chained to another such conv or a Winograd conv (its input's
 * producer, its residual's, or a reader of its output): then layout_c16.c keeps their
 * data in C16. ResNet-50 at batch 1 on the AVX-512 dev VM: the whole network from the
 * first block on runs C16, +4.7% against a C16 layout limited to where each conv timed
 * faster alone (docs/BENCHMARKS.md, "Session 14"). A conv with no such neighbour keeps
 * its timed choice (prefer_c16's margin included). */
/* Layer j onto the AMX conv or the C16 kernel, with that tactic's (NCHW) timing and
 * precision. */
static void set_c16_capable_tactic(engine_layer *l, bool amx, const c16_timings *ct, int32_t j) {
    l->tactic = amx ? CPU_CONV_TACTIC_AMX : CPU_CONV_TACTIC_C16;
    l->time_ms = amx ? ct->amx[j] : ct->c16[j];
    l->precision = amx ? ENGINE_PREC_TF32 : ENGINE_PREC_FP32;
}

static kiln_status chain_c16(const ir_graph *g, engine_plan *plan, const c16_timings *ct, kiln_error *err) {
    const double *c16_ms = ct->c16, *amx_ms = ct->amx;
    int32_t *producer = malloc((size_t)(g->n_values + 1) * sizeof *producer);
    bool *able = calloc((size_t)g->n_nodes + 1, sizeof *able), *chained = calloc((size_t)g->n_nodes + 1, sizeof *chained);
    if (!producer || !able || !chained) {
        free(producer);
        free(able);
        free(chained);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    for (int32_t v = 0; v < g->n_values; v++) producer[v] = -1;
    for (int32_t j = 0; j < g->n_nodes; j++) {
        for (int32_t k = 0; k < g->nodes[j].n_outputs; k++)
            if (g->nodes[j].outputs[k] >= 0 && g->nodes[j].outputs[k] < g->n_values) producer[g->nodes[j].outputs[k]] = j;
        able[j] = c16_ms[j] > 0 || (j < plan->n_layers && c16_tactic(plan->layers[j].tactic)) || c16_pool(g, &g->nodes[j]);
    }
    for (int32_t j = 0; j < g->n_nodes; j++) {
        const ir_node *n = &g->nodes[j];
        if (!able[j]) continue;
        int64_t res = ir_node_attr_int(n, "kiln_residual", -1);
        int32_t ins[2] = {n->n_inputs > 0 ? n->inputs[0] : -1, res > 0 && res < n->n_inputs ? n->inputs[res] : -1};
        for (int i = 0; i < 2; i++) /* an edge between two able convs chains both ends */
            if (ins[i] >= 0 && ins[i] < g->n_values && producer[ins[i]] >= 0 && able[producer[ins[i]]])
                chained[j] = chained[producer[ins[i]]] = true;
    }
    for (int32_t j = 0; j < g->n_nodes && j < plan->n_layers; j++) {
        engine_layer *l = &plan->layers[j];
        if (!chained[j] || c16_ms[j] <= 0 || c16_tactic(l->tactic)) continue;
        /* the AMX conv where it timed faster than the C16 kernel (both read C16 in a
         * region, both paid for NCHW when timed) */
        set_c16_capable_tactic(l, amx_ms[j] > 0 && amx_ms[j] < c16_ms[j], ct, j);
    }
    /* Between the two, in a region, their timings over C16 data decide: over NCHW the AMX
     * conv's gathers and scatters cost more than the C16 kernel's copies (ResNet-50's
     * batch-8 stage-3 conv3s: 8.6 ms each timed alone, about 5.3 on AMX against 7.6 on
     * the C16 kernel in the network). A tactic forced by KILN_PREFER_TACTIC stays;
     * KILN_C16_REGION_TIMING=0 leaves the NCHW timings' choice (A/B runs). */
    const char *forced = getenv("KILN_PREFER_TACTIC"), *region = getenv("KILN_C16_REGION_TIMING");
    bool use_region = !(forced && *forced) && !(region && !strcmp(region, "0"));
    for (int32_t j = 0; j < g->n_nodes && j < plan->n_layers && use_region; j++) {
        engine_layer *l = &plan->layers[j];
        bool is_amx = !strcmp(l->tactic, CPU_CONV_TACTIC_AMX), is_c16 = !strcmp(l->tactic, CPU_CONV_TACTIC_C16);
        if (!chained[j] || !(is_amx || is_c16) || ct->c16_region[j] <= 0 || ct->amx_region[j] <= 0) continue;
        set_c16_capable_tactic(l, ct->amx_region[j] < ct->c16_region[j], ct, j);
    }
    free(producer);
    free(able);
    free(chained);
    return KILN_OK;
}

/* The C16 layout between the nodes that work on C16 data (layout_c16.c), from the
 * tactics just chosen; the caller runs it only for c16_layout_target builds. */
static kiln_status mark_c16_layouts(ir_model *m, engine_plan *plan, kiln_error *err) {
    if (!m->graph || m->graph->n_nodes == 0) return KILN_OK;
    bool *c16_conv = calloc((size_t)m->graph->n_nodes, sizeof *c16_conv);
    if (!c16_conv) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < plan->n_layers; i++) {
        const engine_layer *l = &plan->layers[i];
        if (l->node >= 0 && l->node < m->graph->n_nodes &&
            (c16_tactic(l->tactic) || c16_pool(m->graph, &m->graph->nodes[l->node])))
            c16_conv[l->node] = true;
    }
    kiln_status st = build_pass_layout_c16(m, c16_conv, NULL, err);
    free(c16_conv);
    return st;
}

kiln_status build_plan_relayer(engine_plan *plan, const ir_graph *g, kiln_error *err) {
    engine_layer *nl = ARENA_ARRAY(&plan->arena, engine_layer, g->n_nodes ? g->n_nodes : 1);
    if (!nl) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    hashmap by_name; /* layer name -> index in the old table (the same node before the passes) */
    hashmap_init(&by_name);
    for (int32_t j = plan->n_layers - 1; j >= 0; j--) /* reverse: the first of a repeated name wins */
        if (plan->layers[j].name && !hashmap_put(&by_name, plan->layers[j].name, j)) {
            hashmap_free(&by_name);
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        engine_layer *l = &nl[i];
        memset(l, 0, sizeof *l);
        int32_t j;
        if (n->name && hashmap_get(&by_name, n->name, &j)) *l = plan->layers[j];
        l->node = i;
        l->name = n->name;
        l->op_type = n->op_type;
        if (!l->tactic) l->tactic = "default";
        l->precision = ENGINE_PREC_FP32;
        for (int32_t k = 0; k < n->n_outputs; k++) {
            int32_t v = n->outputs[k];
            if (v >= 0 && v < g->n_values && g->values[v].type.kind == IR_TYPE_TENSOR &&
                g->values[v].type.dtype == KILN_DTYPE_FLOAT16)
                l->precision = ENGINE_PREC_FP16;
        }
    }
    hashmap_free(&by_name);
    plan->layers = nl;
    plan->n_layers = g->n_nodes;
    return KILN_OK;
}

/* ---- GPU tactics ---------------------------------------------------------------------
 * A cuda engine's GEMM/convolution tactics are the CUDA backend's library algorithms
 * (cuBLASLt heuristic candidates, cuDNN algorithms), timed on the GPU. The build runs the
 * optimized graph once on the GPU at profile 0's opt shape (zero-filled inputs) through a
 * tactic cache that looks timings up in --timingCacheFile first and records every timing
 * per node; each GEMM/Conv node then carries its timings in RT_GPU_TACTICS_ATTR, so a
 * loaded engine runs the built choices without timing them again (other shapes are still
 * timed at their first run). */

typedef struct gpu_tactic_rec {
    build_timing_cache *file; /* --timingCacheFile, or NULL */
    const ir_graph *g;
    strbuf *per_node;         /* [n_per_node]: "sig\ttactic\tms\n" lines */
    int32_t timed, hits;
    int32_t n_per_node; /* the node count when the records were made (after the session's passes) */
} gpu_tactic_rec;

static void gpu_tactic_note(gpu_tactic_rec *r, const ir_node *node, const char *sig, const char *tactic, double ms) {
    if (!node || !r->per_node || node < r->g->nodes || node >= r->g->nodes + r->n_per_node) return;
    sb_printf(&r->per_node[node - r->g->nodes], "%s\t%s\t%.17g\n", sig, tactic, ms);
}

static bool gpu_tactic_get(void *user, const ir_node *node, const char *sig, const char *tactic, double *ms) {
    gpu_tactic_rec *r = user;
    if (!r->file || !build_timing_cache_get(r->file, sig, tactic, ms)) return false;
    r->hits++;
    gpu_tactic_note(r, node, sig, tactic, *ms);
    return true;
}

static void gpu_tactic_put(void *user, const ir_node *node, const char *sig, const char *tactic, double ms) {
    gpu_tactic_rec *r = user;
    r->timed++;
    if (r->file) build_timing_cache_put(r->file, sig, tactic, ms);
    gpu_tactic_note(r, node, sig, tactic, ms);
}

/* Returns KILN_OK also when the GPU run could not be made (a warning says why: the
 * tactics are then timed at the engine's first run); errors only for out of memory. */
static kiln_status time_gpu_tactics(ir_model *m, const build_options *o, build_timing_cache *cache, build_stats *stats,
                                    kiln_error *err) {
    const ir_graph *g = m->graph;
    /* the records are made once the session exists: its device passes (attention fusion,
     * FP16 casts, build/passes) add and remove nodes of m, which is what the engine keeps */
    gpu_tactic_rec rec = {cache, g, NULL, 0, 0, 0};
    rt_tactic_cache tc = {gpu_tactic_get, gpu_tactic_put, &rec};
    int32_t n = g->n_inputs;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    rt_value *vals = calloc((size_t)n + 1, sizeof *vals);
    const rt_value **ptrs = calloc((size_t)n + 1, sizeof *ptrs);
    rt_value *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    kiln_status st = names && vals && ptrs && outs ? KILN_OK : kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    kiln_error e = {0};
    kiln_status run = KILN_OK;
    int32_t fed = 0;
    /* zero-filled inputs at the opt shape the last inference left on the values */
    for (int32_t i = 0; st == KILN_OK && run == KILN_OK && i < n; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        if (v->init) continue; /* an initializer listed as input keeps its value */
        int64_t dims[RT_MAX_RANK];
        bool known = v->type.kind == IR_TYPE_TENSOR && v->type.rank >= 0 && v->type.rank <= RT_MAX_RANK &&
                     v->type.dtype != KILN_DTYPE_STRING;
        for (int32_t d = 0; known && d < v->type.rank; d++) {
            known = v->type.dims[d].kind == IR_DIM_CONST;
            dims[d] = v->type.dims[d].value;
        }
        if (!known) {
            run = kiln_err_set(&e, KILN_ERR_UNSUPPORTED, "input '%s' has no fixed shape at the opt point", v->name);
            break;
        }
        rt_value_init(&vals[fed]);
        run = rt_tensor_alloc_zero(rt_value_as_tensor(&vals[fed]), v->type.dtype, v->type.rank, dims, &e);
        names[fed] = v->name;
        ptrs[fed] = &vals[fed];
        fed++;
    }
    rt_session *sess = NULL;
    if (st == KILN_OK && run == KILN_OK) {
        rt_session_options so = rt_session_options_default();
        so.backend = "cuda";
        so.fp16 = (o->precision_flags & (ENGINE_PREC_FLAG_FP16 | ENGINE_PREC_FLAG_BEST)) != 0;
        so.no_tf32 = (o->precision_flags & ENGINE_PREC_FLAG_NO_TF32) != 0;
        so.workspace_bytes = o->workspace_limit;
        so.quiet_fallback = true;
        so.no_device_graph = true;
        so.tactic_cache = &tc;
        so.layout_nhwc = true; /* FP16 engines go channels-last as kiln run does (KILN_NHWC=0: NCHW) */
        run = rt_session_create(m, &so, &sess, &e);
        if (run == KILN_OK) {
            rec.per_node = calloc((size_t)g->n_nodes + 1, sizeof(strbuf));
            if (!rec.per_node) st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
            rec.n_per_node = rec.per_node ? g->n_nodes : 0;
            for (int32_t i = 0; i < rec.n_per_node; i++) sb_init(&rec.per_node[i]);
        }
    }
    if (st == KILN_OK && run == KILN_OK) run = rt_session_run(sess, names, ptrs, fed, outs, &e);
    for (int32_t k = 0; run == KILN_OK && outs && k < g->n_outputs; k++) rt_value_release(&outs[k]);
    rt_session_free(sess);
    if (st == KILN_OK && run != KILN_OK)
        warn(o, "GPU tactics were not timed during the build (%s); the engine times them at its first run",
             kiln_err_msg(&e));
    kiln_err_clear(&e);
    /* each node carries its timings */
    for (int32_t i = 0; st == KILN_OK && run == KILN_OK && i < rec.n_per_node && i < g->n_nodes; i++) {
        if (!rec.per_node[i].len) continue;
        ir_attr a;
        memset(&a, 0, sizeof a);
        a.name = RT_GPU_TACTICS_ATTR;
        a.type = IR_ATTR_STRING;
        a.s.data = arena_strdup(&m->arena, sb_cstr(&rec.per_node[i]));
        a.s.len = a.s.data ? strlen(a.s.data) : 0;
        if (!a.s.data || !ir_node_set_attr(m, &m->graph->nodes[i], &a)) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
            break;
        }
    }
    stats->timed += rec.timed;
    stats->cache_hits += rec.hits;
    for (int32_t i = 0; i < fed; i++) rt_value_release(&vals[i]);
    for (int32_t i = 0; i < rec.n_per_node; i++) sb_free(&rec.per_node[i]);
    free(rec.per_node), free(names), free(vals), free(ptrs), free(outs);
    return st;
}

/* ---- the build ---------------------------------------------------------------------- */

kiln_status build_engine(ir_model *model, const build_options *opts, diag_list *diags, engine_plan **out,
                         build_stats *stats_out, kiln_error *err) {
    *out = NULL;
    build_options dflt = build_options_default();
    const build_options *o = opts ? opts : &dflt;
    build_stats stats;
    memset(&stats, 0, sizeof stats);
    double t0 = now_s();
    engine_plan *plan = engine_plan_new();
    if (!plan) {
        ir_model_free(model);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    plan->model = model;
    kiln_status st = KILN_OK;
    build_timing_cache cache;
    build_timing_cache_init(&cache);
    bool use_cache = o->timing_cache != NULL;

    /* 1. profiles */
    build_profile_set local;
    build_profile_set *set = o->profiles;
    if (!set) {
        build_profiles_init(&local);
        set = &local;
    }
    int32_t errors = build_profiles_check(set, model, diags);
    if (errors > 0) {
        st = kiln_err_set(err, KILN_ERR_INVALID_ARG,
                          "the optimization profile flags have %d error%s (listed above): fix them and build again",
                          errors, errors == 1 ? "" : "s");
        goto done;
    }
    int32_t n_profiles = set->n_profiles > 0 ? set->n_profiles : 1;
    /* I/O is described before inference so symbolic dims keep their names */
    st = engine_plan_describe_io(plan, err);
    if (st == KILN_OK) st = record_profiles(plan, set, model, n_profiles, err);
    if (st != KILN_OK) goto done;

    /* 2. graph passes, then the backend's structural passes as rt_session_create runs
     * them for kiln run (cpu: fused attention, folded scales; cuda: fused attention,
     * merged Q/K/V projections): engine contexts are made without passes, so the engine
     * must store that graph */
    if (o->run_passes) {
        st = build_run_passes(model, NULL, err);
        bool cuda = o->backend && !strcmp(o->backend, "cuda");
        /* AVX-512F: the C16 layout, chosen with the tactics, serves the dense convs; P16
         * stays only around depthwise convs (layout_p16.c) */
        if (st == KILN_OK && !cuda) st = build_run_host_passes_p16(model, c16_layout_target(o, cuda), NULL, err);
        if (st == KILN_OK && cuda) {
            build_infer_types_quiet(model); /* the passes match on types */
            st = build_run_device_passes(model, NULL, err);
        }
        if (st != KILN_OK) {
            kiln_err_prefix(err, "graph optimization failed: ");
            goto done;
        }
    }

    /* 3. inference at every profile point; profile 0's opt last, for tactics */
    plan->mem.n_profiles = n_profiles;
    plan->mem.activation_max = ARENA_ARRAY(&plan->arena, uint64_t, n_profiles);
    plan->mem.activation_opt = ARENA_ARRAY(&plan->arena, uint64_t, n_profiles);
    if (!plan->mem.activation_max || !plan->mem.activation_opt) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t p = n_profiles - 1; p >= 0 && st == KILN_OK; p--) {
        static const build_point order[3] = {BUILD_POINT_MIN, BUILD_POINT_MAX, BUILD_POINT_OPT};
        for (int k = 0; k < 3 && st == KILN_OK; k++) {
            point_shapes ps;
            st = point_for(set, p, order[k], model, &plan->arena, &ps, err);
            if (st == KILN_OK) st = infer_at(model, &ps, p, order[k], n_profiles, diags, err);
            if (st != KILN_OK) break;
            if (order[k] == BUILD_POINT_MAX) plan->mem.activation_max[p] = activation_bytes(model->graph);
            if (order[k] == BUILD_POINT_OPT) plan->mem.activation_opt[p] = activation_bytes(model->graph);
        }
    }
    if (st != KILN_OK) goto done;

    /* 4. tactics */
    if (use_cache) {
        strbuf w;
        sb_init(&w);
        if (!build_timing_cache_load(&cache, o->timing_cache, &w)) {
            warn(o, "%s", sb_cstr(&w));
            cache.dirty = true; /* replace the unusable file */
        }
        sb_free(&w);
    }
    stats.nodes = model->graph->n_nodes;
    bool gpu = o->backend && !strcmp(o->backend, "cuda");
    if (gpu && (!o->gpu_arch || !o->gpu_arch[0])) {
        st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "a cuda engine needs the GPU it is built for (build_options."
                          "gpu_arch); none was given");
        goto done;
    }
    if (o->backend && !gpu && strcmp(o->backend, "cpu")) {
        st = kiln_err_set(err, KILN_ERR_INVALID_ARG, "unknown backend '%s' (kiln builds engines for: cpu, cuda)",
                          o->backend);
        goto done;
    }
    build_options cpu_o = *o;
    if (gpu) cpu_o.time_tactics = false; /* CPU tactics only serve nodes that fall back to the CPU */
    int64_t nn = model->graph->n_nodes + 1;
    double *timings = malloc((size_t)nn * 4 * sizeof *timings);
    if (!timings) {
        st = kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < 4 * nn; i++) timings[i] = -1;
    c16_timings ct = {timings, timings + nn, timings + 2 * nn, timings + 3 * nn};
    st = choose_tactics(model, plan, &cpu_o, use_cache ? &cache : NULL, &stats, &ct, err);
    if (st == KILN_OK && c16_layout_target(o, gpu)) st = chain_c16(model->graph, plan, &ct, err);
    free(timings);
    if (st == KILN_OK) st = mark_tactics(model, plan, o, err);
    if (st == KILN_OK && c16_layout_target(o, gpu)) st = mark_c16_layouts(model, plan, err);
    if (st == KILN_OK && gpu && o->time_tactics) st = time_gpu_tactics(model, o, use_cache ? &cache : NULL, &stats, err);
    /* the device session's passes (FP16 casts, channels-last nodes) changed the node list */
    if (st == KILN_OK && gpu) st = build_plan_relayer(plan, model->graph, err);
    if (st != KILN_OK) goto done;
    if (use_cache && (cache.dirty || access(o->timing_cache, F_OK) != 0)) {
        kiln_error cerr = {0};
        if (build_timing_cache_save(&cache, o->timing_cache, &cerr) != KILN_OK) warn(o, "%s", kiln_err_msg(&cerr));
        kiln_err_clear(&cerr);
    }

    /* back to the declared (symbolic) types for the engine's graph */
    {
        diag_list scratch;
        diag_list_init(&scratch);
        kiln_error ierr = {0};
        ir_infer_options none;
        memset(&none, 0, sizeof none);
        ir_infer(model, &none, &scratch, &ierr);
        kiln_err_clear(&ierr);
        diag_list_free(&scratch);
    }

    /* 5-6. metadata */
    plan->header.backend = gpu ? ENGINE_BACKEND_CUDA : ENGINE_BACKEND_CPU;
    plan->header.host_features = o->cpu_features;
    /* AMX is not required: where it is missing the AMX layers run their FP32 kernel (as
     * with KILN_NO_AMX=1), so an engine built on a Sapphire Rapids loads on any AVX-512
     * CPU; every other feature the tactics were timed with is */
    plan->header.required_features = engine_isa_features(o->cpu_features) & ~(uint64_t)CPU_FEATURE_AMX;
    plan->meta.kiln_version = KILN_VERSION_STRING;
    plan->meta.source_model = o->source_model ? arena_strdup(&plan->arena, o->source_model) : "";
    plan->meta.source_size = o->source_size;
    plan->meta.build_unix_time = (uint64_t)time(NULL);
    plan->meta.backend_name = gpu ? "cuda" : "cpu";
    plan->meta.gpu_arch = plan->meta.cuda_version = plan->meta.cublas_version = plan->meta.cudnn_version = "";
    if (gpu) {
        plan->meta.gpu_arch = arena_strdup(&plan->arena, o->gpu_arch);
        plan->meta.cuda_version = arena_strdup(&plan->arena, o->cuda_version ? o->cuda_version : "");
        plan->meta.cublas_version = arena_strdup(&plan->arena, o->cublas_version ? o->cublas_version : "");
        plan->meta.cudnn_version = arena_strdup(&plan->arena, o->cudnn_version ? o->cudnn_version : "");
        for (int32_t i = 0; i < plan->n_layers; i++)
            plan->layers[i].tactic = "cuda: chosen on the GPU"; /* timed at the first run of each shape */
    }
    plan->meta.precision_flags = o->precision_flags;
    plan->meta.workspace_limit = o->workspace_limit;
    plan->meta.build_threads = o->threads;
    plan->meta.build_flags = (use_cache ? ENGINE_BUILD_TIMING_CACHE : 0) | (stats.timed ? ENGINE_BUILD_TACTICS_TIMED : 0);
    plan->mem.workspace_limit = o->workspace_limit;
    plan->mem.max_scratch_bytes = stats.max_scratch;
    stats.seconds = now_s() - t0;
    plan->meta.build_seconds = stats.seconds;

done:
    build_timing_cache_free(&cache);
    if (set == &local) build_profiles_free(&local);
    if (st != KILN_OK) {
        engine_plan_free(plan);
        return st;
    }
    if (stats_out) *stats_out = stats;
    *out = plan;
    return KILN_OK;
}
