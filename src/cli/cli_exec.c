/* cli_exec.c - `kiln exec`: trtexec's workflow on kiln. Build an engine from ONNX (or load
 * one), optionally save it, run it for a warm-up time and then for at least --iterations
 * queries and --duration seconds on --infStreams parallel contexts, and report as trtexec
 * does (perf_report.h). Beyond trtexec: several --shapes in one run (one summary each) and
 * --json with the whole run. docs/EXEC.md is the user guide.
 *
 * A freshly built engine is serialized and read back before it runs (as trtexec does), so
 * what is measured is exactly what --loadEngine would run later.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/model_internal.h"
#include "backends/cpu/cpu_gemm_bf16x3.h"
#include "backends/cpu/cpu_kernel.h"
#include "backends/cuda/cuda_info.h"
#include "build/builder.h"
#include "build/io_formats.h"
#include "build/profile.h"
#include "cli/cli.h"
#include "cli/cli_exec.h"
#include "cli/perf_report.h"
#include "cli/trtexec_flags.h"
#include "core/cpu_count.h"
#include "engine/context.h"
#include "engine/engine.h"
#include "ir/validate.h"
#include "runtime/session.h"

/* CPU time of the calling thread: on a loaded machine the wall time of a short phase
 * (engine load) is mostly waiting for a core; this says what the phase itself costs. */
static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct run_shape {
    build_shape_entry *entries;
    int32_t n;
    const char *text; /* as given */
} run_shape;

typedef struct exec_state {
    exec_flags f;
    arena arena;
    engine_plan *plan;
    uint64_t engine_size;
    double build_s, load_ms, load_cpu_ms;
    double wcheck_ms, wwait_ms; /* deferred weights checksum: its own time, and the wait for it after the load */
    build_stats bstats;
    bool built;
    run_shape *shapes;
    int32_t n_shapes;
    strbuf json_runs;   /* per-shape JSON objects */
    strbuf json_layers; /* last per-layer profile */
    int threads;        /* per stream */
    uint8_t *owned_bytes; /* a built engine kept in memory (no --saveEngine) */
    /* the cuda backend: the GPU here (have_gpu), or why there is none */
    bool gpu;             /* the engine built or loaded is a cuda engine */
    bool gpu_probed, have_gpu;
    cuda_device_info gpu_info;
    char gpu_missing[640];
} exec_state;

/* Looks for the GPU once (cuda_info_query): fills gpu_info, or says in gpu_missing why
 * there is none (no CUDA in this build, no driver, no device). */
static void probe_gpu(exec_state *s) {
    if (s->gpu_probed) return;
    s->gpu_probed = true;
#if KILN_HAVE_CUDA
    kiln_error e = {0};
    if (cuda_info_query(s->f.device, &s->gpu_info, &e) == KILN_OK) {
        s->have_gpu = true;
    } else {
        snprintf(s->gpu_missing, sizeof s->gpu_missing, "this machine has no usable NVIDIA GPU (%s)", kiln_err_msg(&e));
    }
    kiln_err_clear(&e);
#else
    snprintf(s->gpu_missing, sizeof s->gpu_missing,
             "this kiln %s was built without the CUDA backend (CMake found no CUDA compiler)", KILN_VERSION_STRING);
#endif
}

static void gpu_read_options(exec_state *s, engine_read_options *ro) {
    probe_gpu(s);
    ro->gpu = s->have_gpu ? &s->gpu_info : NULL;
    ro->gpu_missing = s->have_gpu ? NULL : s->gpu_missing;
}

/* ---- diagnostics and warnings ------------------------------------------------------- */

static void print_diags(const diag_list *dl, bool errors_only) {
    for (int32_t i = 0; i < dl->n; i++) {
        if (errors_only && dl->items[i].severity != DIAG_ERROR) continue;
        strbuf sb;
        sb_init(&sb);
        diag_render_text(&dl->items[i], &sb);
        fprintf(dl->items[i].severity == DIAG_ERROR ? stderr : stdout, "%s", sb_cstr(&sb));
        if (sb.len && sb.data[sb.len - 1] != '\n') fputc('\n', dl->items[i].severity == DIAG_ERROR ? stderr : stdout);
        sb_free(&sb);
    }
}

static void warn_cb(void *user, const char *msg) {
    (void)user;
    perf_log('W', "%s", msg);
}

/* ---- shapes and profiles ------------------------------------------------------------ */

static const char *spec_name(arena *a, const char *name) {
    return strpbrk(name, ":,'") ? arena_printf(a, "'%s'", name) : name;
}

static kiln_status parse_run_shapes(exec_state *s, kiln_error *err) {
    exec_flags *f = &s->f;
    s->shapes = ARENA_ARRAY(&s->arena, run_shape, f->n_run_shapes ? f->n_run_shapes : 1);
    if (!s->shapes) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < f->n_shape_args; i++) {
        if (f->shape_args[i].kind != EXEC_SHAPE_RUN) continue;
        char *copy = arena_strdup(&s->arena, f->shape_args[i].value);
        char *save = NULL;
        for (char *g = strtok_r(copy, ";", &save); g; g = strtok_r(NULL, ";", &save)) {
            run_shape *r = &s->shapes[s->n_shapes];
            r->text = g;
            kiln_status st = build_shape_spec_parse(g, &s->arena, &r->entries, &r->n, err);
            if (st != KILN_OK) {
                kiln_err_prefix(err, "--shapes: ");
                return st;
            }
            s->n_shapes++;
        }
    }
    return KILN_OK;
}

/* min/max over several run shapes -> one profile that covers them all (opt = the first). */
static kiln_status profile_from_run_shapes(exec_state *s, build_profile_set *set, kiln_error *err) {
    strbuf mn, opt, mx;
    sb_init(&mn);
    sb_init(&opt);
    sb_init(&mx);
    const run_shape *first = &s->shapes[0];
    for (int32_t e = 0; e < first->n; e++) {
        const build_shape_entry *fe = &first->entries[e];
        const char *nm = spec_name(&s->arena, fe->name);
        sb_printf(&mn, "%s%s:", mn.len ? "," : "", nm);
        sb_printf(&opt, "%s%s:", opt.len ? "," : "", nm);
        sb_printf(&mx, "%s%s:", mx.len ? "," : "", nm);
        for (int32_t d = 0; d < fe->rank; d++) {
            int64_t lo = fe->dims[d], hi = fe->dims[d];
            for (int32_t r = 1; r < s->n_shapes; r++)
                for (int32_t k = 0; k < s->shapes[r].n; k++) {
                    const build_shape_entry *o = &s->shapes[r].entries[k];
                    if (strcmp(o->name, fe->name) || o->rank != fe->rank) continue;
                    if (o->dims[d] < lo) lo = o->dims[d];
                    if (o->dims[d] > hi) hi = o->dims[d];
                }
            sb_printf(&mn, "%s%" PRId64, d ? "x" : "", lo);
            sb_printf(&opt, "%s%" PRId64, d ? "x" : "", fe->dims[d]);
            sb_printf(&mx, "%s%" PRId64, d ? "x" : "", hi);
        }
    }
    kiln_status st = build_profiles_add(set, BUILD_FLAG_MIN, sb_cstr(&mn), err);
    if (st == KILN_OK) st = build_profiles_add(set, BUILD_FLAG_OPT, sb_cstr(&opt), err);
    if (st == KILN_OK) st = build_profiles_add(set, BUILD_FLAG_MAX, sb_cstr(&mx), err);
    perf_log('I', "Several --shapes given: building one profile that covers them: --minShapes=%s --optShapes=%s --maxShapes=%s",
             sb_cstr(&mn), sb_cstr(&opt), sb_cstr(&mx));
    sb_free(&mn);
    sb_free(&opt);
    sb_free(&mx);
    return st;
}

static kiln_status make_profiles(exec_state *s, build_profile_set *set, kiln_error *err) {
    exec_flags *f = &s->f;
    kiln_status st = KILN_OK;
    for (int i = 0; i < f->n_shape_args && st == KILN_OK; i++) {
        const exec_shape_arg *a = &f->shape_args[i];
        switch (a->kind) {
        case EXEC_SHAPE_PROFILE: st = build_profiles_select(set, strtol(a->value, NULL, 10), err); break;
        case EXEC_SHAPE_MIN: st = build_profiles_add(set, BUILD_FLAG_MIN, a->value, err); break;
        case EXEC_SHAPE_OPT: st = build_profiles_add(set, BUILD_FLAG_OPT, a->value, err); break;
        case EXEC_SHAPE_MAX: st = build_profiles_add(set, BUILD_FLAG_MAX, a->value, err); break;
        case EXEC_SHAPE_RUN:
            if (s->n_shapes == 1) st = build_profiles_add(set, BUILD_FLAG_SHAPES, a->value, err);
            break;
        }
    }
    if (st == KILN_OK && s->n_shapes > 1 && !f->has_profile_flags) st = profile_from_run_shapes(s, set, err);
    return st;
}

/* ---- build or load ------------------------------------------------------------------ */

static uint64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}


/* How many layers run TF32-class arithmetic (the CPU's AMX bf16x3 tactics), so a user
 * comparing outputs against FP32 knows why they differ in the 6th digit. */
static void log_tf32_layers(const engine_plan *plan) {
    int32_t n = 0;
    for (int32_t i = 0; plan && i < plan->n_layers; i++) n += plan->layers[i].precision == ENGINE_PREC_TF32;
    if (!n || plan->header.backend != ENGINE_BACKEND_CPU) return;
    if (!cpu_bf16x3_usable()) {
        perf_log('W', "%d of %d layers were built for AMX bf16x3 GEMMs, which this CPU (or KILN_NO_AMX=1) does "
                      "not allow: they run their FP32 kernels, correct but slower than tactics timed here; "
                      "rebuild the engine on this machine for the fastest plan", n, plan->n_layers);
        return;
    }
    perf_log('I', "%d of %d layers run TF32-class AMX bf16x3 GEMMs (about 3e-6 of sum |a*b| off; build with "
                  "--noTF32 for FP32 only; kiln inspect lists them)", n, plan->n_layers);
}

static int build_from_onnx(exec_state *s) {
    exec_flags *f = &s->f;
    perf_log('I', "Start parsing network model.");
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load_file(f->onnx, NULL, &m);
    if (st != KILN_OK) {
        print_diags(&m->diags, true);
        perf_log('E', "Failed to parse the ONNX file '%s': %s", f->onnx, kiln_model_errmsg(m));
        kiln_model_free(m);
        return CLI_EXIT_FAILED;
    }
    perf_log('I', "Finished parsing network model. Parse time: %g", 0.0);
    build_profile_set set;
    build_profiles_init(&set);
    kiln_error err = {0};
    st = make_profiles(s, &set, &err);
    if (st != KILN_OK) {
        perf_log('E', "%s", kiln_err_msg(&err));
        kiln_err_clear(&err);
        build_profiles_free(&set);
        kiln_model_free(m);
        return CLI_EXIT_USAGE;
    }
    build_options o = build_options_default();
    o.profiles = &set;
    o.workspace_limit = f->workspace_bytes;
    o.threads = s->threads;
    o.precision_flags = (f->fp16 ? ENGINE_PREC_FLAG_FP16 : 0) | (f->int8 ? ENGINE_PREC_FLAG_INT8 : 0) |
                        (f->bf16 ? ENGINE_PREC_FLAG_BF16 : 0) | (f->no_tf32 ? ENGINE_PREC_FLAG_NO_TF32 : 0) |
                        (f->best ? ENGINE_PREC_FLAG_BEST : 0);
    o.timing_cache = f->timing_cache;
    o.timing_rounds = f->avg_timing;
    o.cpu_features = cpu_features();
    o.source_model = f->onnx;
    o.source_size = file_size(f->onnx);
    o.progress = true;
    o.warn = warn_cb;
    cuda_info_meta gm;
    if (s->gpu) {
        cuda_info_to_meta(&s->gpu_info, &gm);
        o.backend = "cuda";
        o.gpu_arch = gm.gpu_arch;
        o.cuda_version = gm.cuda_version;
        o.cublas_version = gm.cublas_version;
        o.cudnn_version = gm.cudnn_version;
    }
    ir_model *ir = m->ir;
    m->ir = NULL; /* the plan takes the graph over */
    kiln_model_free(m);
    if (f->input_io_formats || f->output_io_formats) {
        /* the engine's interface types, before the graph passes (io_formats.h) */
        build_io_spec in_spec = {0}, out_spec = {0};
        int32_t changed = 0;
        bool ok = (!f->input_io_formats || build_io_spec_parse("--inputIOFormats", f->input_io_formats, &in_spec, &err)) &&
                  (!f->output_io_formats ||
                   build_io_spec_parse("--outputIOFormats", f->output_io_formats, &out_spec, &err));
        if (ok) ok = build_apply_io_formats(ir, &in_spec, &out_spec, &changed, &err) == KILN_OK;
        if (!ok) {
            perf_log('E', "%s", kiln_err_msg(&err));
            kiln_err_clear(&err);
            build_profiles_free(&set);
            ir_model_free(ir);
            return CLI_EXIT_USAGE;
        }
        perf_log('I', "I/O formats: %d tensor%s retyped at the engine's boundary", changed, changed == 1 ? "" : "s");
    }
    diag_list diags;
    diag_list_init(&diags);
    double t0 = now_ms();
    engine_plan *plan = NULL;
    st = build_engine(ir, &o, &diags, &plan, &s->bstats, &err);
    s->build_s = (now_ms() - t0) / 1000.0;
    print_diags(&diags, false);
    diag_list_free(&diags);
    build_profiles_free(&set);
    if (st != KILN_OK) {
        perf_log('E', "Engine could not be created from network");
        fprintf(stderr, "kiln exec: error: %s\n", kiln_err_msg(&err));
        kiln_err_clear(&err);
        return CLI_EXIT_FAILED;
    }
    if (s->bstats.timed || s->bstats.cache_hits)
        perf_log('I', "Tactics: %d timed, %d from the timing cache", s->bstats.timed, s->bstats.cache_hits);
    perf_log('I', "Engine built in %g sec.", s->build_s);
    s->built = true;

    /* serialize, then run what was serialized */
    uint8_t *bytes = NULL;
    size_t size = 0;
    if (f->save_engine) {
        st = engine_write_file(plan, f->save_engine, &err);
        if (st == KILN_OK) perf_log('I', "Engine saved to '%s'", f->save_engine);
    } else {
        st = engine_write_mem(plan, &bytes, &size, &err);
    }
    engine_plan_free(plan);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln exec: error: %s\n", kiln_err_msg(&err));
        kiln_err_clear(&err);
        free(bytes);
        return CLI_EXIT_FAILED;
    }
    /* bytes that never left memory need no weights checksum; a saved file is read back
     * as --loadEngine would read it */
    engine_read_options ro = {.cpu_features = cpu_features(),
                              .display_name = f->save_engine ? f->save_engine : "<built engine>",
                              .skip_weights_crc = !f->save_engine, .defer_weights_crc = true};
    if (s->gpu) gpu_read_options(s, &ro);
    t0 = now_ms();
    double c0 = thread_cpu_ms();
    if (f->save_engine) st = engine_read_file(f->save_engine, &ro, &s->plan, &err);
    else st = engine_read_mem(bytes, size, &ro, &s->plan, &err);
    s->load_ms = now_ms() - t0;
    s->load_cpu_ms = thread_cpu_ms() - c0;
    s->engine_size = f->save_engine ? file_size(f->save_engine) : size;
    if (st == KILN_OK && bytes) {
        /* the plan borrows the bytes: hand them over */
        s->plan->model->file_data = bytes;
        s->plan->model->file_size = size;
    }
    if (st != KILN_OK) {
        free(bytes);
        fprintf(stderr, "kiln exec: error: %s\n", kiln_err_msg(&err));
        kiln_err_clear(&err);
        return CLI_EXIT_FAILED;
    }
    s->owned_bytes = bytes;
    perf_log('I', "Created engine with size: %g MiB", (double)s->engine_size / (1 << 20));
    log_tf32_layers(s->plan);
    return 0;
}

static int load_engine(exec_state *s) {
    exec_flags *f = &s->f;
    kiln_error err = {0};
    engine_read_options ro = {.cpu_features = cpu_features(), .display_name = f->load_engine, .defer_weights_crc = true};
    if (f->input_io_formats || f->output_io_formats)
        perf_log('W', "--inputIOFormats/--outputIOFormats apply when building: '%s' keeps the I/O types it was built "
                      "with (kiln inspect lists them)", f->load_engine);
    /* which backend: read the header and META first (cheap), so a cuda engine is checked
     * against this machine's GPU and a CPU engine never touches CUDA */
    {
        engine_read_options mo = {.metadata_only = true, .skip_compat = true, .display_name = f->load_engine};
        engine_plan *mp = NULL;
        if (engine_read_file(f->load_engine, &mo, &mp, &err) == KILN_OK) {
            s->gpu = mp->header.backend == ENGINE_BACKEND_CUDA;
            engine_plan_free(mp);
        }
        kiln_err_clear(&err); /* a broken file is reported by the full read below */
        if (f->backend_set && s->gpu != !strcmp(f->backend, "cuda")) {
            perf_log('E', "--backend=%s, but engine '%s' was built for the %s backend: an engine runs where it was "
                          "built for. Leave --backend out, or rebuild: kiln exec --onnx=MODEL.onnx --backend=%s "
                          "--saveEngine=%s", f->backend, f->load_engine, s->gpu ? "cuda" : "cpu", f->backend,
                     f->load_engine);
            return CLI_EXIT_FAILED;
        }
        if (s->gpu) gpu_read_options(s, &ro);
    }
    double t0 = now_ms(), c0 = thread_cpu_ms();
    kiln_status st = engine_read_file(f->load_engine, &ro, &s->plan, &err);
    s->load_ms = now_ms() - t0;
    s->load_cpu_ms = thread_cpu_ms() - c0;
    /* the weights' checksum ran on a background thread (engine.h); wait for it here so a
     * corrupt engine fails even with --skipInference, and report it apart from the load */
    if (st == KILN_OK) {
        double t1 = now_ms();
        st = engine_plan_weights_ready(s->plan, &s->wcheck_ms, &err);
        s->wwait_ms = now_ms() - t1;
    }
    if (st != KILN_OK) {
        perf_log('E', "Failed to load the engine.");
        fprintf(stderr, "kiln exec: error: %s\n", kiln_err_msg(&err));
        kiln_err_clear(&err);
        return CLI_EXIT_FAILED;
    }
    s->engine_size = file_size(f->load_engine);
    perf_log('I', "Loaded engine with size: %g MiB", (double)s->engine_size / (1 << 20));
    log_tf32_layers(s->plan);
    perf_log('I', "Engine deserialized in %g sec.", s->load_ms / 1000.0);
    if (s->wcheck_ms > 0)
        perf_log('V', "Engine weights checksum verified in %g ms on a background thread (waited %g ms for it)",
                 s->wcheck_ms, s->wwait_ms);
    if (f->save_engine) {
        st = engine_write_file(s->plan, f->save_engine, &err);
        if (st != KILN_OK) {
            fprintf(stderr, "kiln exec: error: %s\n", kiln_err_msg(&err));
            kiln_err_clear(&err);
            return CLI_EXIT_FAILED;
        }
    }
    return 0;
}

/* ---- inputs for one run shape ------------------------------------------------------- */

typedef struct input_set {
    int32_t n;
    const char **names;
    rt_value *vals;
    const rt_value **ptrs;
} input_set;

static void input_set_free(input_set *in) {
    for (int32_t i = 0; i < in->n; i++) rt_value_release(&in->vals[i]);
    free(in->names);
    free(in->vals);
    free(in->ptrs);
    memset(in, 0, sizeof *in);
}

static kiln_status make_inputs(exec_state *s, const run_shape *rs, input_set *in, strbuf *desc, kiln_error *err) {
    const engine_plan *p = s->plan;
    int32_t prof = s->f.profile_index > 0 ? s->f.profile_index : 0;
    if (p->n_profiles && prof >= p->n_profiles)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "--profile=%d: the engine has %d profile%s", prof, p->n_profiles,
                            p->n_profiles == 1 ? "" : "s");
    in->n = p->n_inputs;
    in->names = calloc((size_t)(in->n ? in->n : 1), sizeof *in->names);
    in->vals = calloc((size_t)(in->n ? in->n : 1), sizeof *in->vals);
    in->ptrs = calloc((size_t)(in->n ? in->n : 1), sizeof *in->ptrs);
    if (!in->names || !in->vals || !in->ptrs) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    /* every run-shape name must be an input */
    for (int32_t e = 0; rs && e < rs->n; e++) {
        bool found = false;
        const char *names[256];
        int nn = 0;
        for (int32_t i = 0; i < p->n_inputs; i++) {
            found |= !strcmp(p->inputs[i].name, rs->entries[e].name);
            if (nn < 256) names[nn++] = p->inputs[i].name;
        }
        if (!found) {
            const char *g = cli_closest(rs->entries[e].name, names, nn);
            return kiln_err_set(err, KILN_ERR_INVALID_ARG, "--shapes names '%s', which is not an input of the engine%s%s%s",
                                rs->entries[e].name, g ? "; did you mean '" : "", g ? g : "", g ? "'?" : "");
        }
    }
    for (int32_t i = 0; i < p->n_inputs; i++) {
        const engine_io *io = &p->inputs[i];
        rt_value_init(&in->vals[i]);
        in->names[i] = io->name;
        in->ptrs[i] = &in->vals[i];
        int64_t dims[RT_MAX_RANK];
        int32_t rank = io->rank;
        if (rank < 0 || rank > RT_MAX_RANK) rank = 0;
        const build_shape_entry *given = NULL;
        for (int32_t e = 0; rs && e < rs->n; e++)
            if (!strcmp(rs->entries[e].name, io->name)) given = &rs->entries[e];
        const engine_profile_input *pi = p->n_profiles ? engine_profile_find(&p->profiles[prof], io->name) : NULL;
        if (given) {
            if (io->rank >= 0 && given->rank != io->rank)
                return kiln_err_set(err, KILN_ERR_SHAPE, "--shapes gives '%s' %d dimensions; the input has %d", io->name,
                                    given->rank, io->rank);
            rank = given->rank;
            memcpy(dims, given->dims, sizeof(int64_t) * (size_t)rank);
        } else if (pi) {
            rank = pi->rank;
            memcpy(dims, pi->opt, sizeof(int64_t) * (size_t)rank);
        } else {
            for (int32_t d = 0; d < rank; d++) dims[d] = io->dims[d].kind == IR_DIM_CONST ? io->dims[d].value : 1;
        }
        kiln_dtype dt = io->dtype ? (kiln_dtype)io->dtype : KILN_DTYPE_FLOAT;
        const char *file = NULL;
        for (int k = 0; k < s->f.n_inputs; k++)
            if (!strcmp(s->f.inputs[k].name, io->name)) file = s->f.inputs[k].path;
        /* sequences and optionals: only from a .pb file (exec_load_value) */
        const ir_graph *g = p->model->graph;
        int32_t vid = ir_graph_find(g, io->name);
        const ir_type *decl = vid != IR_NONE ? &g->values[vid].type : NULL;
        if (decl && (decl->kind == IR_TYPE_SEQUENCE || decl->kind == IR_TYPE_OPTIONAL)) {
            kiln_status st = exec_load_value(file, io->name, decl, &in->vals[i], err);
            if (st != KILN_OK) return st;
            sb_printf(desc, "%s%s: %s from %s", i ? ", " : "", io->name,
                      decl->kind == IR_TYPE_SEQUENCE ? "sequence" : "optional", file);
            continue;
        }
        rt_tensor *t = rt_value_as_tensor(&in->vals[i]);
        kiln_status st = file ? exec_load_input(file, io->name, dt, rank, dims, given != NULL || !pi, t, err)
                              : rt_tensor_alloc(t, dt, rank, dims, err);
        if (st != KILN_OK) return st;
        if (!file) exec_fill_random(t, (uint32_t)i + 1);
        char buf[256];
        sb_printf(desc, "%s%s", i ? ", " : "", io->name);
        sb_printf(desc, ": %s", rt_tensor_desc(t, buf, sizeof buf));
    }
    for (int k = 0; k < s->f.n_inputs; k++) {
        bool found = false;
        for (int32_t i = 0; i < p->n_inputs; i++) found |= !strcmp(s->f.inputs[k].name, p->inputs[i].name);
        if (!found)
            return kiln_err_set(err, KILN_ERR_INVALID_ARG, "--loadInputs names '%s', which is not an input of the engine",
                                s->f.inputs[k].name);
    }
    return KILN_OK;
}

/* ---- the timed runs ----------------------------------------------------------------- */

typedef struct layer_snap {
    int32_t n_nodes;
    uint64_t *last_ns; /* cumulative per main-graph node */
    double *runs;      /* per run x node, ms */
    int32_t n_runs, cap_runs;
    const ir_graph *g;
} layer_snap;

static void snap_cb(const rt_node_profile *p, void *user) {
    layer_snap *ls = user;
    if (p->graph != ls->g) return;
    int32_t idx = (int32_t)(p->node - ls->g->nodes);
    if (idx < 0 || idx >= ls->n_nodes) return;
    uint64_t delta = p->total_ns - ls->last_ns[idx];
    ls->last_ns[idx] = p->total_ns;
    ls->runs[(size_t)(ls->n_runs) * (size_t)ls->n_nodes + (size_t)idx] = (double)delta / 1e6;
}

/* Records one run's per-node times (difference of the cumulative profile). */
static void snap_take(layer_snap *ls, engine_context *c) {
    if (ls->n_runs == ls->cap_runs) {
        int32_t nc = ls->cap_runs ? ls->cap_runs * 2 : 64;
        double *nr = realloc(ls->runs, sizeof *nr * (size_t)nc * (size_t)(ls->n_nodes ? ls->n_nodes : 1));
        if (!nr) return;
        ls->runs = nr;
        ls->cap_runs = nc;
    }
    memset(ls->runs + (size_t)ls->n_runs * (size_t)ls->n_nodes, 0, sizeof(double) * (size_t)ls->n_nodes);
    rt_executor_foreach_profile(engine_context_executor(c), snap_cb, ls);
    ls->n_runs++;
}

/* All streams start timing together: each waits here after its warm-up (a stream still
 * warming up, e.g. timing GPU tactics, would otherwise slow the others' timed runs and
 * stretch the wall time). A stream whose thread could not start is dropped from it. */
typedef struct warm_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting, expected;
} warm_gate;

static void gate_wait(warm_gate *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->waiting++;
    if (g->waiting >= g->expected) pthread_cond_broadcast(&g->cv);
    while (g->waiting < g->expected) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_drop(warm_gate *g) {
    pthread_mutex_lock(&g->mu);
    g->expected--;
    if (g->waiting >= g->expected) pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

typedef struct stream_job {
    exec_state *s;
    engine_context *ctx;
    input_set *in;
    int id;
    int target;          /* queries this stream must run (at least) */
    double t_origin, duration_ms, warmup_ms;
    perf_query *q;
    int n_q, cap_q;
    layer_snap *snap;    /* profile while timing (every stream, without --separateProfileRun) */
    rt_value *keep;      /* last outputs (stream 0) */
    int32_t n_out;
    kiln_error err;
    kiln_status st;
    bool gpu;            /* cuda engine: per-query H2D/compute/D2H from the executor's device events */
    bool no_transfers;   /* --noDataTransfers: timed replays copy nothing */
    warm_gate *gate;     /* shared by the streams running in parallel; NULL when alone */
    rt_threads_report th0, th1; /* the context's thread pool before and after the timed queries */
    double th_ms;               /* the timed queries' wall time */
} stream_job;

/* The context's thread-pool counters (zero when its backend has no pool). */
static void threads_snap(engine_context *ctx, rt_threads_report *out) {
    memset(out, 0, sizeof *out);
    rt_session *ss = engine_context_session(ctx);
    const rt_backend *be = rt_session_backend(ss);
    if (be->threads_report) be->threads_report(rt_session_backend_ctx(ss), out);
}

/* GPU queries: the phases of the run that just ended (a graph replay), or nothing when
 * it ran node by node (then compute_ms stays the host time of the run). */
static void query_phases(const stream_job *j, perf_query *q) {
    if (!j->gpu) return;
    uint64_t h = 0, c = 0, d = 0;
    rt_executor_last_phase_ns(engine_context_executor(j->ctx), &h, &c, &d);
    if (!c) return;
    q->gpu_phases = true;
    q->h2d_ms = (double)h / 1e6;
    q->compute_ms = (double)c / 1e6;
    q->d2h_ms = (double)d / 1e6;
}

static void *stream_main(void *arg) {
    stream_job *j = arg;
    rt_value *outs = calloc((size_t)(j->n_out ? j->n_out : 1), sizeof *outs);
    if (!outs) {
        j->st = kiln_err_set(&j->err, KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    /* warm-up: at least one query; on the GPU three (the first picks tactics and learns the
     * shapes, the second records the CUDA graph, the third replays it) */
    double w0 = now_ms();
    int warm = 0, min_warm = j->gpu ? 3 : 1;
    do {
        j->st = engine_context_run(j->ctx, j->in->names, j->in->ptrs, j->in->n, outs, &j->err);
        for (int32_t k = 0; k < j->n_out; k++) rt_value_release(&outs[k]);
        if (j->snap) snap_take(j->snap, j->ctx), j->snap->n_runs--; /* warm-up runs are not profiled */
    } while (j->st == KILN_OK && (++warm < min_warm || now_ms() - w0 < j->warmup_ms));
    gate_wait(j->gate); /* also after a failure, so the other streams do not wait forever */
    if (j->no_transfers) rt_executor_set_transfers(engine_context_executor(j->ctx), false);
    threads_snap(j->ctx, &j->th0);
    double start = now_ms();
    while (j->st == KILN_OK && (j->n_q < j->target || now_ms() - start < j->duration_ms)) {
        if (j->n_q == j->cap_q) {
            int nc = j->cap_q ? j->cap_q * 2 : 256;
            perf_query *nq = realloc(j->q, sizeof *nq * (size_t)nc);
            if (!nq) {
                j->st = kiln_err_set(&j->err, KILN_ERR_NOMEM, "out of memory");
                break;
            }
            j->q = nq;
            j->cap_q = nc;
        }
        double t0 = now_ms();
        j->st = engine_context_run(j->ctx, j->in->names, j->in->ptrs, j->in->n, outs, &j->err);
        double t1 = now_ms();
        perf_query pq;
        memset(&pq, 0, sizeof pq);
        pq.start_ms = t0 - j->t_origin;
        pq.end_ms = t1 - j->t_origin;
        pq.compute_ms = t1 - t0;
        pq.stream = j->id;
        if (j->st == KILN_OK) query_phases(j, &pq);
        j->q[j->n_q++] = pq;
        if (j->snap) snap_take(j->snap, j->ctx);
        bool last = j->n_q >= j->target && now_ms() - start >= j->duration_ms;
        if (last && j->keep) {
            for (int32_t k = 0; k < j->n_out; k++) j->keep[k] = outs[k];
        } else {
            for (int32_t k = 0; k < j->n_out; k++) rt_value_release(&outs[k]);
        }
    }
    j->th_ms = now_ms() - start;
    threads_snap(j->ctx, &j->th1);
    if (j->no_transfers) {
        /* the timed runs returned no outputs: one more run with copies for the kept ones */
        rt_executor_set_transfers(engine_context_executor(j->ctx), true);
        if (j->st == KILN_OK && j->keep) {
            for (int32_t k = 0; k < j->n_out; k++) rt_value_release(&j->keep[k]);
            j->st = engine_context_run(j->ctx, j->in->names, j->in->ptrs, j->in->n, j->keep, &j->err);
        }
    }
    free(outs);
    return NULL;
}

static int cmp_query(const void *a, const void *b) {
    const perf_query *x = a, *y = b;
    return x->start_ms < y->start_ms ? -1 : x->start_ms > y->start_ms;
}

static void dump_outputs(exec_state *s, engine_context *c, rt_value *outs, int32_t n, FILE *json) {
    exec_flags *f = &s->f;
    if (f->dump_output) perf_log('I', "Output Tensors:");
    if (json) fprintf(json, "[");
    for (int32_t k = 0; k < n; k++) {
        const char *name = engine_context_output_name(c, k);
        const rt_tensor *t = outs[k].kind == IR_TYPE_TENSOR ? &outs[k].t : NULL;
        strbuf dimsb;
        sb_init(&dimsb);
        for (int32_t d = 0; t && d < t->rank; d++) sb_printf(&dimsb, "%s%" PRId64, d ? "x" : "", t->dims[d]);
        strbuf vals;
        sb_init(&vals);
        for (uint64_t i = 0; t && i < t->count; i++) {
            double v = 0;
            switch (t->dtype) {
            case KILN_DTYPE_FLOAT: v = ((const float *)t->data)[i]; break;
            case KILN_DTYPE_DOUBLE: v = ((const double *)t->data)[i]; break;
            case KILN_DTYPE_INT64: v = (double)((const int64_t *)t->data)[i]; break;
            case KILN_DTYPE_INT32: v = ((const int32_t *)t->data)[i]; break;
            case KILN_DTYPE_BOOL: case KILN_DTYPE_UINT8: v = ((const uint8_t *)t->data)[i]; break;
            case KILN_DTYPE_INT8: v = ((const int8_t *)t->data)[i]; break;
            case KILN_DTYPE_FLOAT16: v = kiln_fp16_to_fp32(((const uint16_t *)t->data)[i]); break;
            default: v = NAN; break;
            }
            if (t->dtype == KILN_DTYPE_FLOAT) sb_printf(&vals, "%s%.9g", i ? (json ? ", " : " ") : "", v);
            else sb_printf(&vals, "%s%.17g", i ? (json ? ", " : " ") : "", v);
        }
        if (f->dump_output && !t) {
            perf_log('I', "%s: a %s output (%d element%s): not printed, tensors only", name,
                     outs[k].kind == IR_TYPE_SEQUENCE ? "sequence" : "non-tensor", outs[k].n_items,
                     outs[k].n_items == 1 ? "" : "s");
        } else if (f->dump_output) {
            perf_log('I', "%s: (%s)", name, sb_cstr(&dimsb));
            perf_log('I', "%s", sb_cstr(&vals));
        }
        if (json) {
            strbuf nm;
            sb_init(&nm);
            sb_json_string(&nm, name, strlen(name));
            /* JSON has no NaN/Inf: write them as strings */
            const char *v = sb_cstr(&vals);
            bool special = strstr(v, "nan") || strstr(v, "inf");
            fprintf(json, "%s\n  { \"name\" : %s, \"dimensions\" : \"%s\", \"values\" : [ %s ]%s }", k ? "," : "",
                    sb_cstr(&nm), sb_cstr(&dimsb), special ? "" : v, special ? ", \"note\" : \"values include NaN or Inf; see --dumpOutput\"" : "");
            sb_free(&nm);
        }
        sb_free(&dimsb);
        sb_free(&vals);
    }
    if (json) fprintf(json, "\n]\n");
}

static void layer_profile_from_snap(exec_state *s, const layer_snap *ls, perf_layer_profile *lp) {
    lp->n_layers = ls->n_nodes;
    lp->n_runs = ls->n_runs;
    lp->times = ls->runs;
    lp->names = ARENA_ARRAY(&s->arena, const char *, ls->n_nodes ? ls->n_nodes : 1);
    lp->ops = ARENA_ARRAY(&s->arena, const char *, ls->n_nodes ? ls->n_nodes : 1);
    lp->tactics = ARENA_ARRAY(&s->arena, const char *, ls->n_nodes ? ls->n_nodes : 1);
    for (int32_t i = 0; i < ls->n_nodes; i++) {
        lp->names[i] = ls->g->nodes[i].name;
        lp->ops[i] = ls->g->nodes[i].op_type;
        lp->tactics[i] = i < s->plan->n_layers ? s->plan->layers[i].tactic : NULL;
    }
}

/* cuda engines: inputs in page-locked host memory (the backend's host_alloc), so their
 * copies to the GPU are direct DMA without a staging copy (trtexec does the same). Stays
 * pageable when the memory cannot be had. */
static void pin_inputs(input_set *in) {
    for (int32_t i = 0; i < in->n; i++)
        if (in->vals[i].kind == IR_TYPE_TENSOR) cli_pin_host_tensor(&in->vals[i].t);
}

/* After a cuda run: whether graphs replay, and the device memory footprint. */
static void report_gpu_state(stream_job *jobs, int ns) {
    rt_executor *ex = engine_context_executor(jobs[0].ctx);
    int gs = rt_executor_device_graph_state(ex);
    int32_t hn = rt_executor_device_graph_host_nodes(ex);
    if (gs == 1)
        perf_log('I', "CUDA graph: each stream replays its recorded graph%s%.0d%s", hn ? " (" : "", hn,
                 hn ? " shape nodes evaluated on the host once per input shape)" : "");
    else
        perf_log('W', "CUDA graph: not used (%s); runs go node by node, so H2D/D2H are not measured apart",
                 rt_executor_device_graph_why(ex));
    rt_session *ss = engine_context_session(jobs[0].ctx);
    const rt_backend *be = rt_session_backend(ss);
    if (!be->mem_report) return;
    rt_device_mem m;
    be->mem_report(rt_session_backend_ctx(ss), &m);
    uint64_t w = 0;
    for (int i = 0; i < ns; i++) w += rt_executor_device_weight_bytes(engine_context_executor(jobs[i].ctx));
    uint64_t act = m.pool_used_peak > w ? m.pool_used_peak - w : 0;
    double mib = 1024.0 * 1024.0;
    perf_log('I', "Device memory: weights %.2f MiB, activations and I/O %.2f MiB (peak in use, minus weights), "
                  "workspace %.2f MiB; %d context%s, total %.2f MiB; GPU %.2f of %.2f GiB free",
             (double)w / mib, (double)act / mib, (double)m.workspace * ns / mib, ns, ns == 1 ? "" : "s",
             (double)(m.pool_used_peak + m.workspace * (uint64_t)ns) / mib, (double)m.device_free / (mib * 1024),
             (double)m.device_total / (mib * 1024));
}

/* CPU engines: what the contexts hold for activations and kernel scratch, and the
 * process's peak resident memory (the engine's weights, mapped from its file, and the
 * kernels' repacked copies included). Bytes; summed over the stream contexts. */
typedef struct host_mem {
    uint64_t arena, pool, scratch, peak_rss;
} host_mem;

static host_mem cpu_host_memory(stream_job *jobs, int ns) {
    host_mem m = {0, 0, 0, 0};
    for (int i = 0; i < ns; i++) {
        rt_executor *ex = engine_context_executor(jobs[i].ctx);
        m.arena += rt_executor_arena_bytes(ex);
        m.pool += rt_executor_bufpool_stats(ex).bytes_owned;
        rt_session *ss = engine_context_session(jobs[i].ctx);
        const rt_backend *be = rt_session_backend(ss);
        if (be->mem_report) {
            rt_device_mem dm;
            be->mem_report(rt_session_backend_ctx(ss), &dm);
            m.scratch += dm.workspace;
        }
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0) m.peak_rss = (uint64_t)ru.ru_maxrss * 1024; /* KiB on Linux */
    return m;
}

/* CPU engines: how the timed queries used each context's thread pool, summed over the
 * stream contexts: parallel loops per query, and the shares of the timed wall time the
 * calling thread spent in them (running chunks, then waiting for the workers' last
 * ones) and each worker spent running chunks. A low worker share with a low wait means
 * serial work between the loops; a high wait, uneven loops; both threads busy but
 * scaling poorly, per-thread slowdown (shared caches, memory, a busy host). The blocks
 * per query count hand-offs that outlasted the pool's spin (KILN_SPIN_US) and went
 * through a sleep and a wake-up instead. */
typedef struct threads_use {
    int threads, queries;
    double loops, inline_loops, caller_in_loops, caller_waiting, workers_busy; /* per query; shares 0-1 */
    double caller_sleeps, worker_sleeps;                                     /* per query */
} threads_use;

static threads_use cpu_threads_use(const stream_job *jobs, int ns) {
    threads_use u = {0};
    double wall_ns = 0, run = 0, wait = 0, worker = 0, loops = 0, inl = 0, csl = 0, wsl = 0;
    for (int i = 0; i < ns; i++) {
        const rt_threads_report *a = &jobs[i].th0, *b = &jobs[i].th1;
        u.threads = b->threads;
        u.queries += jobs[i].n_q;
        loops += (double)(b->loops - a->loops);
        inl += (double)(b->inline_loops - a->inline_loops);
        run += (double)(b->caller_run_ns - a->caller_run_ns);
        wait += (double)(b->caller_wait_ns - a->caller_wait_ns);
        worker += (double)(b->worker_run_ns - a->worker_run_ns);
        csl += (double)(b->caller_sleeps - a->caller_sleeps);
        wsl += (double)(b->worker_sleeps - a->worker_sleeps);
        wall_ns += jobs[i].th_ms * 1e6;
    }
    if (u.queries > 0) {
        u.loops = loops / u.queries;
        u.inline_loops = inl / u.queries;
        u.caller_sleeps = csl / u.queries;
        u.worker_sleeps = wsl / u.queries;
    }
    if (wall_ns > 0) {
        u.caller_in_loops = (run + wait) / wall_ns;
        u.caller_waiting = wait / wall_ns;
        if (u.threads > 1) u.workers_busy = worker / ((double)(u.threads - 1) * wall_ns);
    }
    return u;
}

static void report_cpu_threads(const threads_use *u) {
    if (u->threads <= 1) {
        perf_log('I', "Threads: 1 per context (no worker threads)");
        return;
    }
    perf_log('I', "Threads: %d per context; %.1f parallel loops per query (%.1f more too small to share); the "
                  "calling thread was in them %.1f%% of the time (waiting for workers %.1f%%), each worker ran "
                  "chunks %.1f%% of the time; per query the caller blocked %.1f times waiting for workers and the "
                  "workers %.1f times between loops",
             u->threads, u->loops, u->inline_loops, 100 * u->caller_in_loops, 100 * u->caller_waiting,
             100 * u->workers_busy, u->caller_sleeps, u->worker_sleeps);
}

static void report_cpu_memory(const host_mem *m, int ns) {
    double mib = 1024.0 * 1024.0;
    perf_log('I', "Host memory: activations %.2f MiB (arena %.2f, buffer pool %.2f), kernel scratch %.2f MiB "
                  "(one set per context, shared by its layers); %d context%s; process peak RSS %.2f MiB",
             (double)(m->arena + m->pool) / mib, (double)m->arena / mib, (double)m->pool / mib,
             (double)m->scratch / mib, ns, ns == 1 ? "" : "s", (double)m->peak_rss / mib);
}

static kiln_status run_shape_bench(exec_state *s, const run_shape *rs, int index) {
    exec_flags *f = &s->f;
    kiln_error err = {0};
    input_set in;
    memset(&in, 0, sizeof in);
    strbuf desc;
    sb_init(&desc);
    kiln_status st = make_inputs(s, rs, &in, &desc, &err);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln exec: error: %s\n", kiln_err_msg(&err));
        kiln_err_clear(&err);
        input_set_free(&in);
        sb_free(&desc);
        return st;
    }
    if (s->gpu) pin_inputs(&in);
    perf_log('I', "=== Inference %s%d: %s ===", s->n_shapes > 1 ? "shape " : "run ", index, sb_cstr(&desc));
    bool want_profile = f->dump_profile || f->export_profile || f->json_report;
    /* Per-node profiling runs node by node, so on the GPU with CUDA graphs on the layer
     * profile (also the one --json carries) comes from a separate run and the timed
     * runs keep their graph, as --separateProfileRun asks for. */
    bool separate_profile = f->separate_profile_run || (s->gpu && !f->no_cuda_graph);
    bool inline_profile = want_profile && !separate_profile;
    if (want_profile && separate_profile && !f->separate_profile_run)
        perf_log('I', "Per-layer profile: taken in a separate run after the timed runs (CUDA graphs cannot be "
                      "profiled per layer; --noCudaGraph profiles the timed runs instead)");
    int ns = f->streams;
    stream_job *jobs = calloc((size_t)ns, sizeof *jobs);
    pthread_t *th = calloc((size_t)ns, sizeof *th);
    layer_snap snap;
    memset(&snap, 0, sizeof snap);
    snap.g = s->plan->model->graph;
    snap.n_nodes = snap.g->n_nodes;
    snap.last_ns = calloc((size_t)(snap.n_nodes ? snap.n_nodes : 1), sizeof *snap.last_ns);
    /* with several streams each profiles its own context; the runs are merged after */
    layer_snap *ssnaps = calloc((size_t)ns, sizeof *ssnaps);
    bool snaps_ok = ssnaps != NULL;
    for (int i = 1; snaps_ok && i < ns; i++) {
        ssnaps[i].g = snap.g;
        ssnaps[i].n_nodes = snap.n_nodes;
        ssnaps[i].last_ns = calloc((size_t)(snap.n_nodes ? snap.n_nodes : 1), sizeof *snap.last_ns);
        snaps_ok = ssnaps[i].last_ns != NULL;
    }
    rt_value *keep = NULL;
    int32_t n_out = 0;
    if (!jobs || !th || !snap.last_ns || !snaps_ok) st = kiln_err_set(&err, KILN_ERR_NOMEM, "out of memory");
    int per_stream = (f->iterations + ns - 1) / ns;
    for (int i = 0; i < ns && st == KILN_OK; i++) {
        engine_context_options co = {.threads = s->threads, .profile = inline_profile,
                                     .profile_index = f->profile_index > 0 ? f->profile_index : 0,
                                     .no_device_graph = f->no_cuda_graph, .quiet_fallback = i > 0};
        st = engine_context_create(s->plan, &co, &jobs[i].ctx, &err);
        if (st != KILN_OK) break;
        jobs[i].gpu = s->gpu;
        jobs[i].no_transfers = s->gpu && f->no_data_transfers;
        n_out = engine_context_n_outputs(jobs[i].ctx);
        jobs[i].s = s;
        jobs[i].in = &in;
        jobs[i].id = i;
        jobs[i].target = per_stream;
        jobs[i].duration_ms = f->duration_s * 1000.0;
        jobs[i].warmup_ms = f->warmup_ms;
        jobs[i].n_out = n_out;
        jobs[i].snap = inline_profile ? (i == 0 ? &snap : &ssnaps[i]) : NULL;
    }
    if (st == KILN_OK) {
        keep = calloc((size_t)(n_out ? n_out : 1), sizeof *keep);
        jobs[0].keep = keep;
        double origin = now_ms();
        for (int i = 0; i < ns; i++) jobs[i].t_origin = origin;
        bool *started = calloc((size_t)ns, sizeof *started);
        warm_gate gate;
        pthread_mutex_init(&gate.mu, NULL);
        pthread_cond_init(&gate.cv, NULL);
        gate.waiting = 0;
        gate.expected = ns;
        for (int i = 0; i < ns && ns > 1; i++) jobs[i].gate = &gate;
        for (int i = 1; i < ns; i++) {
            bool ok = started && pthread_create(&th[i], NULL, stream_main, &jobs[i]) == 0;
            if (started) started[i] = ok;
            if (!ok) {
                jobs[i].gate = NULL; /* runs alone after the others */
                gate_drop(&gate);
            }
        }
        stream_main(&jobs[0]);
        for (int i = 1; i < ns; i++) {
            if (started && started[i]) pthread_join(th[i], NULL);
            else stream_main(&jobs[i]);
        }
        free(started);
        pthread_cond_destroy(&gate.cv);
        pthread_mutex_destroy(&gate.mu);
        for (int i = 0; i < ns && st == KILN_OK; i++)
            if (jobs[i].st != KILN_OK) {
                st = jobs[i].st;
                kiln_err_move(&err, &jobs[i].err);
            }
        /* merge the other streams' per-run layer times into stream 0's */
        for (int i = 1; st == KILN_OK && inline_profile && i < ns; i++) {
            layer_snap *o = &ssnaps[i];
            for (int32_t r = 0; r < o->n_runs; r++) {
                if (snap.n_runs == snap.cap_runs) {
                    int32_t nc = snap.cap_runs ? snap.cap_runs * 2 : 64;
                    double *nr = realloc(snap.runs, sizeof *nr * (size_t)nc * (size_t)(snap.n_nodes ? snap.n_nodes : 1));
                    if (!nr) break;
                    snap.runs = nr;
                    snap.cap_runs = nc;
                }
                memcpy(snap.runs + (size_t)snap.n_runs * (size_t)snap.n_nodes, o->runs + (size_t)r * (size_t)o->n_nodes,
                       sizeof(double) * (size_t)snap.n_nodes);
                snap.n_runs++;
            }
        }
        if (inline_profile && ns > 1)
            perf_log('I', "Per-layer profile: all %d streams, %d runs in all (streams run in parallel, so layer times "
                          "include their contention)", ns, snap.n_runs);
    }
    if (st == KILN_OK) {
        /* gather, sort by start, and measure the wall time from first start to last end */
        int total = 0;
        for (int i = 0; i < ns; i++) total += jobs[i].n_q;
        perf_query *all = malloc(sizeof *all * (size_t)(total ? total : 1));
        int k = 0;
        double first = INFINITY, last = 0;
        for (int i = 0; i < ns; i++)
            for (int q = 0; q < jobs[i].n_q; q++) {
                all[k++] = jobs[i].q[q];
                if (jobs[i].q[q].start_ms < first) first = jobs[i].q[q].start_ms;
                if (jobs[i].q[q].end_ms > last) last = jobs[i].q[q].end_ms;
            }
        qsort(all, (size_t)total, sizeof *all, cmp_query);
        for (int i = 0; i < total; i++) {
            all[i].start_ms -= first;
            all[i].end_ms -= first;
        }
        double wall = last - first;
        if (s->gpu)
            perf_log('I', "Timing: %d queries on %d stream%s (one context, CUDA stream and graph each), %g ms warm-up%s",
                     total, ns, ns == 1 ? "" : "s", f->warmup_ms,
                     f->no_data_transfers ? ", no data transfers" : "");
        else
            perf_log('I', "Timing: %d queries on %d stream%s, %d thread%s each, %g ms warm-up", total, ns,
                     ns == 1 ? "" : "s", s->threads, s->threads == 1 ? "" : "s", f->warmup_ms);
        perf_print_averages(all, total, f->avg_runs);
        host_mem hm = {0, 0, 0, 0};
        threads_use tu = {0};
        if (s->gpu) report_gpu_state(jobs, ns);
        else {
            hm = cpu_host_memory(jobs, ns);
            report_cpu_memory(&hm, ns);
            tu = cpu_threads_use(jobs, ns);
            report_cpu_threads(&tu);
        }
        perf_summary_opts so = {f->percentiles, f->n_percentiles, !s->gpu, ns, s->threads, s->gpu ? 1.0 : 5.0,
                                s->gpu && f->no_data_transfers};
        perf_stats lat, comp;
        double qps;
        perf_print_summary(all, total, wall, &so, &lat, &comp, &qps);
        if (inline_profile && want_profile)
            perf_log('W', "Per-layer timing was on during these runs and adds overhead; use --separateProfileRun for clean numbers.");
        if (f->export_times && !perf_export_times(f->export_times, all, total))
            perf_log('E', "cannot write --exportTimes file '%s'", f->export_times);
        if ((f->dump_output || f->export_output) && keep) {
            FILE *jf = f->export_output ? fopen(f->export_output, "w") : NULL;
            if (f->export_output && !jf) perf_log('E', "cannot write --exportOutput file '%s'", f->export_output);
            dump_outputs(s, jobs[0].ctx, keep, n_out, jf);
            if (jf) fclose(jf);
        }
        /* JSON for this shape */
        strbuf *j = &s->json_runs;
        sb_printf(j, "%s{\"index\": %d, \"shapes\": ", j->len ? ", " : "", index);
        sb_json_string(j, sb_cstr(&desc), desc.len);
        sb_printf(j, ", \"queries\": %d, \"streams\": %d, \"threads_per_stream\": %d, \"walltime_ms\": %.6f, "
                     "\"throughput_qps\": %.6f, \"latency_ms\": ",
                  total, ns, s->threads, wall, qps);
        perf_stats_json(&lat, f->percentiles, j);
        sb_append(j, ", \"compute_ms\": ");
        perf_stats_json(&comp, f->percentiles, j);
        if (!s->gpu)
            sb_printf(j, ", \"host_memory\": {\"activation_arena_bytes\": %" PRIu64 ", \"buffer_pool_bytes\": %" PRIu64
                         ", \"kernel_scratch_bytes\": %" PRIu64 ", \"peak_rss_bytes\": %" PRIu64 "}",
                      hm.arena, hm.pool, hm.scratch, hm.peak_rss);
        if (!s->gpu)
            sb_printf(j, ", \"threads\": {\"per_context\": %d, \"parallel_loops_per_query\": %.3f, "
                         "\"inline_loops_per_query\": %.3f, \"caller_in_loops\": %.4f, \"caller_waiting\": %.4f, "
                         "\"workers_busy\": %.4f, \"caller_blocks_per_query\": %.3f, \"worker_blocks_per_query\": %.3f}",
                      tu.threads, tu.loops, tu.inline_loops, tu.caller_in_loops, tu.caller_waiting, tu.workers_busy,
                      tu.caller_sleeps, tu.worker_sleeps);
        if (s->gpu) {
            /* the replays' copies (device events); null when some query ran node by node */
            double *h = malloc(sizeof *h * (size_t)(total ? total : 1)), *d = malloc(sizeof *d * (size_t)(total ? total : 1));
            bool phased = h && d && total > 0;
            for (int q = 0; phased && q < total; q++) {
                phased = all[q].gpu_phases;
                h[q] = all[q].h2d_ms;
                d[q] = all[q].d2h_ms;
            }
            perf_stats hs, ds;
            if (phased) {
                perf_compute(h, total, f->percentiles, f->n_percentiles, &hs);
                perf_compute(d, total, f->percentiles, f->n_percentiles, &ds);
                sb_append(j, ", \"h2d_ms\": ");
                perf_stats_json(&hs, f->percentiles, j);
                sb_append(j, ", \"d2h_ms\": ");
                perf_stats_json(&ds, f->percentiles, j);
            } else {
                sb_append(j, ", \"h2d_ms\": null, \"d2h_ms\": null");
            }
            sb_printf(j, ", \"no_data_transfers\": %s", f->no_data_transfers ? "true" : "false");
            free(h), free(d);
        }
        sb_append(j, "}");
        free(all);
    }
    /* per-layer profile: during the runs, or in a separate run */
    if (st == KILN_OK && want_profile && separate_profile) {
        engine_context *pc = NULL;
        engine_context_options co = {.threads = s->threads, .profile = true,
                                     .profile_index = f->profile_index > 0 ? f->profile_index : 0,
                                     .quiet_fallback = true};
        st = engine_context_create(s->plan, &co, &pc, &err);
        rt_value *outs = calloc((size_t)(n_out ? n_out : 1), sizeof *outs);
        for (int r = 0; st == KILN_OK && r <= f->iterations; r++) {
            st = engine_context_run(pc, in.names, in.ptrs, in.n, outs, &err);
            for (int32_t q = 0; q < n_out; q++) rt_value_release(&outs[q]);
            if (st == KILN_OK) {
                snap_take(&snap, pc);
                if (r == 0) snap.n_runs--; /* the first run warms up */
            }
        }
        free(outs);
        engine_context_free(pc);
    }
    if (st == KILN_OK && want_profile && snap.n_runs > 0) {
        perf_layer_profile lp;
        layer_profile_from_snap(s, &snap, &lp);
        if (f->dump_profile) perf_print_profile(&lp);
        if (f->export_profile && !perf_export_profile(f->export_profile, &lp))
            perf_log('E', "cannot write --exportProfile file '%s'", f->export_profile);
        sb_reset(&s->json_layers);
        perf_profile_json(&lp, &s->json_layers);
    }
    if (st != KILN_OK) fprintf(stderr, "kiln exec: error: %s\n", kiln_err_msg(&err));
    kiln_err_clear(&err);
    for (int i = 0; jobs && i < ns; i++) {
        engine_context_free(jobs[i].ctx);
        free(jobs[i].q);
        kiln_err_clear(&jobs[i].err);
    }
    for (int32_t k = 0; keep && k < n_out; k++) rt_value_release(&keep[k]);
    free(keep);
    free(jobs);
    free(th);
    free(snap.last_ns);
    free(snap.runs);
    for (int i = 1; ssnaps && i < ns; i++) {
        free(ssnaps[i].last_ns);
        free(ssnaps[i].runs);
    }
    free(ssnaps);
    input_set_free(&in);
    sb_free(&desc);
    return st;
}

/* ---- the whole run -------------------------------------------------------------------- */

static void precision_notes(const exec_flags *f) {
    /* Precision flags are permissions in trtexec (the builder may use lower precision where
     * it is faster). kiln's CPU backend has FP32 kernels only, so it honours them by using
     * FP32 everywhere, and says so once. */
    if (f->fp16 || f->int8 || f->best || f->bf16) {
        strbuf sb;
        sb_init(&sb);
        sb_printf(&sb, "%s%s%s%s", f->fp16 ? "--fp16 " : "", f->bf16 ? "--bf16 " : "", f->int8 ? "--int8 " : "",
                  f->best ? "--best " : "");
        perf_log('W', "%sallow%s lower-precision kernels, but kiln's CPU backend has FP32 kernels only: every layer "
                      "is built and run in FP32 (the engine records fp32 per layer). Results match an FP32 run.",
                 sb_cstr(&sb), (f->fp16 + f->bf16 + f->int8 + f->best) > 1 ? "" : "s");
        sb_free(&sb);
    }
    if (f->int8 && !f->calib)
        perf_log('W', "--int8 without --calib: trtexec would use placeholder scales; kiln computes in FP32, so no "
                      "accuracy is lost.");
    if (f->calib) perf_log('W', "--calib=%s is not read: no INT8 kernels are used on the CPU backend.", f->calib);
    if (f->no_tf32)
        perf_log('I', "--noTF32: MatMuls with a constant weight and convs stay on FP32 FMAs (no AMX bf16x3, the CPU "
                      "backend's TF32-class GEMM).");
}

/* GPU runtime flags: what they do here, or that they do nothing on the CPU backend. */
static void gpu_flag_notes(exec_state *s) {
    const exec_flags *f = &s->f;
    const char *names[4] = {"--noDataTransfers", "--useCudaGraph", "--noCudaGraph", "--useSpinWait"};
    bool on[4] = {f->no_data_transfers, f->use_cuda_graph, f->no_cuda_graph, f->use_spin_wait};
    for (int i = 0; i < 4; i++) {
        if (!on[i]) continue;
        if (!s->gpu)
            perf_log('W', "%s: a TensorRT/GPU option with no meaning on kiln's CPU backend; ignored", names[i]);
        else if (i == 3)
            perf_log('W', "--useSpinWait: kiln waits for the GPU with a blocking synchronize; ignored");
    }
    if (s->gpu && f->no_data_transfers && f->no_cuda_graph)
        perf_log('W', "--noDataTransfers with --noCudaGraph: node-by-node runs copy their inputs and outputs "
                      "anyway; only graph replays can leave them out");
}

static void write_json_report(exec_state *s, bool passed) {
    exec_flags *f = &s->f;
    strbuf j;
    sb_init(&j);
    sb_printf(&j, "{\n  \"kiln\": \"%s\",\n  \"command\": ", KILN_VERSION_STRING);
    sb_json_string(&j, sb_cstr(&f->command), f->command.len);
    sb_printf(&j, ",\n  \"passed\": %s,\n  \"backend\": \"%s\",\n", passed ? "true" : "false", s->gpu ? "cuda" : "cpu");
    if (s->gpu && s->have_gpu) {
        char d[512];
        sb_append(&j, "  \"gpu\": ");
        cuda_info_describe(&s->gpu_info, d, sizeof d);
        sb_json_string(&j, d, strlen(d));
        sb_append(&j, ",\n");
    }
    if (s->built) {
        sb_printf(&j, "  \"build\": {\"seconds\": %.6f, \"nodes\": %d, \"tactics_timed\": %d, \"timing_cache_hits\": %d, "
                      "\"max_scratch_bytes\": %" PRIu64 ", \"workspace_limit_bytes\": %" PRIu64 "},\n",
                  s->build_s, s->bstats.nodes, s->bstats.timed, s->bstats.cache_hits, s->bstats.max_scratch,
                  f->workspace_bytes);
    }
    if (s->plan) {
        sb_printf(&j, "  \"engine\": {\"size_bytes\": %" PRIu64 ", \"load_ms\": %.6f, \"load_cpu_ms\": %.6f, \"weights_crc_ms\": %.6f, "
                      "\"weights_crc_wait_ms\": %.6f, \"layers\": %d, \"weights_bytes\": %" PRIu64 "},\n",
                  s->engine_size, s->load_ms, s->load_cpu_ms, s->wcheck_ms, s->wwait_ms, s->plan->n_layers, s->plan->mem.weights_bytes);
        sb_append(&j, "  \"profiles\": [");
        for (int32_t p = 0; p < s->plan->n_profiles; p++) {
            const engine_profile *pr = &s->plan->profiles[p];
            sb_printf(&j, "%s{\"index\": %d, \"inputs\": [", p ? ", " : "", p);
            for (int32_t i = 0; i < pr->n_inputs; i++) {
                const engine_profile_input *pi = &pr->inputs[i];
                sb_append(&j, i ? ", {\"name\": " : "{\"name\": ");
                sb_json_string(&j, pi->name, strlen(pi->name));
                const int64_t *pts[3] = {pi->min, pi->opt, pi->max};
                const char *nm[3] = {"min", "opt", "max"};
                for (int k = 0; k < 3; k++) {
                    sb_printf(&j, ", \"%s\": [", nm[k]);
                    for (int32_t d = 0; d < pi->rank; d++) sb_printf(&j, "%s%" PRId64, d ? ", " : "", pts[k][d]);
                    sb_append(&j, "]");
                }
                sb_append(&j, "}");
            }
            sb_append(&j, "]}");
        }
        sb_append(&j, "],\n");
    }
    sb_printf(&j, "  \"runs\": [%s],\n  \"layers\": %s\n}\n", sb_cstr(&s->json_runs),
              s->json_layers.len ? sb_cstr(&s->json_layers) : "null");
    FILE *fp = fopen(f->json_report, "w");
    if (!fp || fwrite(j.data, 1, j.len, fp) != j.len) perf_log('E', "cannot write --json file '%s'", f->json_report);
    if (fp) fclose(fp);
    sb_free(&j);
}

static int finish(exec_state *s, int rc) {
    exec_flags *f = &s->f;
    if (f->json_report) write_json_report(s, rc == 0);
    printf("&&&& %s kiln.exec [kiln v%s] # %s\n", rc == 0 ? "PASSED" : "FAILED", KILN_VERSION_STRING, sb_cstr(&f->command));
    engine_plan_free(s->plan);
    free(s->owned_bytes);
    sb_free(&s->json_runs);
    sb_free(&s->json_layers);
    arena_free(&s->arena);
    exec_flags_free(f);
    return rc;
}

int cli_exec(int argc, char **argv) {
    exec_state s;
    memset(&s, 0, sizeof s);
    arena_init(&s.arena);
    sb_init(&s.json_runs);
    sb_init(&s.json_layers);
    exec_flags_init(&s.f);
    exec_flags *f = &s.f;
    strbuf perr;
    sb_init(&perr);
    bool help = false;
    printf("&&&& RUNNING kiln.exec [kiln v%s] # ", KILN_VERSION_STRING);
    for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "kiln ", argv[i]);
    printf("\n");
    int rc = exec_flags_parse(argc, argv, f, &help, &perr);
    if (help) {
        exec_print_help();
        sb_free(&perr);
        exec_flags_free(f);
        arena_free(&s.arena);
        return CLI_EXIT_OK;
    }
    if (rc) {
        cli_usage_error("exec", "%s", sb_cstr(&perr));
        sb_free(&perr);
        return finish(&s, rc);
    }
    sb_free(&perr);
    perf_verbose = f->verbose;
    for (const char *p = sb_cstr(&f->notes); *p;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        perf_log('W', "%.*s", len, p);
        p += len + (nl ? 1 : 0);
    }
    if (f->onnx && !strcmp(f->backend, "cuda")) {
        /* building for the GPU needs one here: its architecture and library versions go
         * into the engine, and the CUDA backend picks tactics on it */
        s.gpu = true;
        probe_gpu(&s);
        if (!s.have_gpu) {
            perf_log('E', "--backend=cuda: %s. Build and run GPU engines on a machine with an NVIDIA GPU and a kiln "
                          "built with CUDA (scripts/build.sh build -DKILN_CUDA=ON), or use --backend=cpu.",
                     s.gpu_missing);
            return finish(&s, CLI_EXIT_FAILED);
        }
    }
    if (f->load_engine) {
        /* the engine says where it runs; peek before printing the options */
        engine_read_options mo = {.metadata_only = true, .skip_compat = true, .display_name = f->load_engine};
        engine_plan *mp = NULL;
        kiln_error pe = {0};
        if (engine_read_file(f->load_engine, &mo, &mp, &pe) == KILN_OK) s.gpu = mp->header.backend == ENGINE_BACKEND_CUDA;
        engine_plan_free(mp);
        kiln_err_clear(&pe);
    }
    gpu_flag_notes(&s);
    if (f->device != 0 && !s.gpu)
        perf_log('W', "--device=%d: device indices select GPUs; the CPU backend runs on this machine's CPUs.", f->device);
    if (!s.gpu) precision_notes(f);
    int ncpu = kiln_usable_cpus(); /* the affinity mask and cgroup quota, not the machine's count */
    s.threads = f->threads ? f->threads : (ncpu / f->streams > 0 ? ncpu / f->streams : 1);
    if (!s.gpu && (long)s.threads * f->streams > ncpu) {
        /* what fits: fewer threads per stream, or (more streams than CPUs) fewer streams */
        char fits[64];
        if (ncpu / f->streams > 0) snprintf(fits, sizeof fits, "--threads=%d fits", ncpu / f->streams);
        else snprintf(fits, sizeof fits, "--infStreams=%d with --threads=1 fits", ncpu);
        perf_log('W', "%d thread%s per stream x %d stream%s on %d usable CPU%s (affinity mask, cgroup quota): "
                      "kiln's workers spin between layers, so threads that share a CPU slow every layer down; %s",
                 s.threads, s.threads == 1 ? "" : "s", f->streams, f->streams == 1 ? "" : "s", ncpu,
                 ncpu == 1 ? "" : "s", fits);
    }
    perf_log('I', "=== Model Options ===");
    perf_log('I', "Format: %s", f->onnx ? "ONNX" : "kiln engine");
    perf_log('I', "Model: %s", f->onnx ? f->onnx : f->load_engine);
    perf_log('I', "=== Build Options ===");
    perf_log('I', "Backend: %s", s.gpu ? "cuda" : "cpu");
    if (f->workspace_set) perf_log('I', "Workspace: %g MiB", (double)f->workspace_bytes / (1 << 20));
    else perf_log('I', s.gpu ? "Workspace: the cuda backend's default (256 MiB per context)" : "Workspace: unlimited");
    if (!s.gpu)
        perf_log('I', "Precision: %s", f->no_tf32 || !f->onnx ? "FP32" : "FP32, TF32-class AMX bf16x3 GEMMs allowed "
                                                                          "where they time faster (--noTF32: FP32 only)");
    else if (f->onnx)
        perf_log('I', "Precision: %s", f->fp16 || f->best ? "FP16 GEMM/convolution operands, FP32 accumulation and "
                                                             "activations" : f->no_tf32 ? "FP32 (no TF32)"
                                                                                        : "FP32 with TF32 tensor cores");
    perf_log('I', "=== Inference Options ===");
    if (s.gpu)
        perf_log('I', "Streams: %d (one context, CUDA stream and CUDA graph each)%s%s", f->streams,
                 f->no_cuda_graph ? ", CUDA graphs off" : "", f->no_data_transfers ? ", no data transfers" : "");
    else
        perf_log('I', "Streams: %d, threads per stream: %d", f->streams, s.threads);
    if (s.gpu && s.have_gpu) {
        char d[512];
        perf_log('I', "=== Device Information ===");
        perf_log('I', "Selected Device: %s", cuda_info_describe(&s.gpu_info, d, sizeof d));
    }
    perf_log('I', "Iterations: %d, Duration: %gs, Warm up: %gms", f->iterations, f->duration_s, f->warmup_ms);

    kiln_error err = {0};
    if (parse_run_shapes(&s, &err) != KILN_OK) {
        cli_usage_error("exec", "%s", kiln_err_msg(&err));
        kiln_err_clear(&err);
        return finish(&s, CLI_EXIT_USAGE);
    }
    rc = f->onnx ? build_from_onnx(&s) : load_engine(&s);
    if (rc) return finish(&s, rc);
    if (f->skip_inference) {
        perf_log('I', "Skipped inference phase since --skipInference is added.");
        return finish(&s, 0);
    }
    int n = s.n_shapes ? s.n_shapes : 1;
    for (int i = 0; i < n; i++)
        if (run_shape_bench(&s, s.n_shapes ? &s.shapes[i] : NULL, i) != KILN_OK) return finish(&s, CLI_EXIT_FAILED);
    return finish(&s, 0);
}
