/* trtexec_flags.c - parses `kiln exec`'s trtexec-compatible flags (see trtexec_flags.h).
 *
 * Defaults follow trtexec: 10 iterations, 200 ms warm-up, 3 s duration, averages over
 * 10 runs, percentiles 90/95/99. A number flag with a bad value names the flag and the
 * value; an unknown flag gets the closest known spelling.
 */
#include "cli/trtexec_flags.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "build/io_formats.h"
#include "cli/cli.h"
#include "core/alloc.h"

/* Flags kiln implements. */
static const char *const known_flags[] = {
    "--onnx", "--saveEngine", "--loadEngine", "--shapes", "--minShapes", "--optShapes", "--maxShapes",
    "--profile", "--memPoolSize", "--workspace", "--skipInference", "--buildOnly", "--iterations", "--warmUp",
    "--duration", "--avgRuns", "--percentile", "--infStreams", "--streams", "--threads", "--loadInputs",
    "--exportOutput", "--exportTimes", "--exportProfile", "--dumpProfile", "--dumpOutput",
    "--separateProfileRun", "--timingCacheFile", "--verbose", "--device", "--noTF32", "--fp16", "--int8",
    "--best", "--bf16", "--calib", "--backend", "--json", "--help", "--noDataTransfers", "--useCudaGraph",
    "--noCudaGraph", "--useSpinWait", "--inputIOFormats", "--outputIOFormats", "--avgTiming",
};
#define N_KNOWN ((int)(sizeof known_flags / sizeof known_flags[0]))

/* trtexec flags that are about GPUs, TensorRT internals or plugins: accepted (so pasted
 * commands run) with a note that they do not apply to kiln's CPU backend. */
static const char *const gpu_only_flags[] = {
    "--useManagedMemory", "--explicitBatch",
    "--sparsity", "--useDLACore", "--allowGPUFallback",
    "--builderOptimizationLevel", "--profilingVerbosity", "--noBuilderCache", "--tacticSources",
    "--layerPrecisions", "--layerOutputTypes", "--precisionConstraints", "--directIO", "--restricted",
    "--safe", "--consistency", "--stronglyTyped", "--hardwareCompatibilityLevel", "--versionCompatible",
    "--excludeLeanRuntime", "--maxAuxStreams", "--persistentCacheRatio", "--exposeDMA", "--idleTime",
    "--sleepTime", "--plugins", "--staticPlugins", "--dynamicPlugins", "--setPluginsToSerialize",
    "--exportLayerInfo", "--refit", "--stripWeights", "--preview", "--heuristic", "--noCompilationCache",
    "--tempdir", "--tempfileControls", "--markDebug", "--minTiming", "--getPlanVersionOnly",
    "--timeRefit", "--fp8", "--int4", "--allocationStrategy", "--weightStreaming", "--weightStreamingBudget",
    "--saveEngineDir", "--useProfile", "--maxBatch", "--batch", "--calibProfile",
    "--timeDeserialize",
};
#define N_GPU_ONLY ((int)(sizeof gpu_only_flags / sizeof gpu_only_flags[0]))

void exec_flags_init(exec_flags *f) {
    memset(f, 0, sizeof *f);
    f->iterations = 10;
    f->warmup_ms = 200;
    f->duration_s = 3;
    f->avg_runs = 10;
    f->percentiles[0] = 90;
    f->percentiles[1] = 95;
    f->percentiles[2] = 99;
    f->n_percentiles = 3;
    f->streams = 1;
    f->device = 0;
    f->profile_index = -1;
    f->backend = "cpu";
    sb_init(&f->notes);
    sb_init(&f->command);
}

void exec_flags_free(exec_flags *f) {
    free(f->shape_args);
    free(f->inputs);
    sb_free(&f->notes);
    sb_free(&f->command);
}

bool exec_parse_size(const char *s, uint64_t unit, uint64_t *out) {
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || !isfinite(v)) return false;
    if (*end) {
        if (!strcasecmp(end, "B")) unit = 1;
        else if (!strcasecmp(end, "K") || !strcasecmp(end, "KiB") || !strcasecmp(end, "KB")) unit = 1ull << 10;
        else if (!strcasecmp(end, "M") || !strcasecmp(end, "MiB") || !strcasecmp(end, "MB")) unit = 1ull << 20;
        else if (!strcasecmp(end, "G") || !strcasecmp(end, "GiB") || !strcasecmp(end, "GB")) unit = 1ull << 30;
        else if (!strcasecmp(end, "T") || !strcasecmp(end, "TiB") || !strcasecmp(end, "TB")) unit = 1ull << 40;
        else return false;
    }
    double bytes = v * (double)unit;
    if (bytes >= 18446744073709549568.0) return false;
    *out = (uint64_t)bytes;
    return true;
}

static bool parse_int(const char *s, long lo, long hi, int *out) {
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

static int fail(strbuf *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int fail(strbuf *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(err, fmt, ap);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

static bool push_shape(exec_flags *f, exec_shape_kind kind, const char *value) {
    exec_shape_arg *n = kiln_realloc_array(f->shape_args, (size_t)f->n_shape_args + 1, sizeof *n);
    if (!n) return false;
    f->shape_args = n;
    f->shape_args[f->n_shape_args++] = (exec_shape_arg){kind, value};
    return true;
}

/* --loadInputs=name:file[,name:file...]; a name may be quoted ('a:b':file). The file is
 * what follows the last ':' of each entry, as trtexec does for plain names. */
static int parse_load_inputs(exec_flags *f, char *v, strbuf *err) {
    char *save = NULL;
    for (char *tok = strtok_r(v, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *name = tok, *colon;
        if (*tok == '\'') {
            char *q = strchr(tok + 1, '\'');
            if (!q || q[1] != ':') return fail(err, "--loadInputs: unterminated quoted name in '%s'", tok);
            *q = 0;
            name = tok + 1;
            colon = q + 1;
        } else {
            colon = strrchr(tok, ':');
        }
        if (!colon || colon == tok || !colon[1])
            return fail(err, "--loadInputs expects name:file entries (e.g. --loadInputs=input:input.bin), got '%s'", tok);
        *colon = 0;
        exec_input_file *n = kiln_realloc_array(f->inputs, (size_t)f->n_inputs + 1, sizeof *n);
        if (!n) return fail(err, "out of memory");
        f->inputs = n;
        f->inputs[f->n_inputs++] = (exec_input_file){name, colon + 1};
    }
    return 0;
}

/* --memPoolSize=workspace:1024,dlaSRAM:1 */
static int parse_mem_pool(exec_flags *f, char *v, strbuf *err) {
    char *save = NULL;
    for (char *tok = strtok_r(v, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon) return fail(err, "--memPoolSize expects pool:size entries (e.g. --memPoolSize=workspace:1024 or workspace:1G), got '%s'", tok);
        *colon = 0;
        uint64_t bytes;
        if (!exec_parse_size(colon + 1, 1ull << 20, &bytes))
            return fail(err, "--memPoolSize: '%s' is not a size (MiB by default, or with a unit: 512K, 64M, 1G)", colon + 1);
        if (!strcmp(tok, "workspace")) {
            f->workspace_bytes = bytes;
            f->workspace_set = true;
        } else if (!strcmp(tok, "dlaSRAM") || !strcmp(tok, "dlaLocalDRAM") || !strcmp(tok, "dlaGlobalDRAM") ||
                   !strcmp(tok, "tacticSharedMem")) {
            sb_printf(&f->notes, "--memPoolSize=%s: that pool exists on NVIDIA GPUs/DLA only; ignored on the CPU backend\n", tok);
        } else {
            static const char *const pools[] = {"workspace", "dlaSRAM", "dlaLocalDRAM", "dlaGlobalDRAM", "tacticSharedMem"};
            const char *g = cli_closest(tok, pools, 5);
            return fail(err, "--memPoolSize: unknown pool '%s'%s%s%s (pools: workspace, dlaSRAM, dlaLocalDRAM, dlaGlobalDRAM, tacticSharedMem)",
                        tok, g ? "; did you mean '" : "", g ? g : "", g ? "'?" : "");
        }
    }
    return 0;
}

static int parse_percentiles(exec_flags *f, char *v, strbuf *err) {
    f->n_percentiles = 0;
    char *save = NULL;
    for (char *tok = strtok_r(v, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double p;
        if (!parse_double(tok, 0, 100, &p)) return fail(err, "--percentile: '%s' is not a number in [0, 100]", tok);
        if (f->n_percentiles == EXEC_MAX_PERCENTILES) return fail(err, "--percentile: at most %d values", EXEC_MAX_PERCENTILES);
        f->percentiles[f->n_percentiles++] = p;
    }
    if (!f->n_percentiles) return fail(err, "--percentile needs values, e.g. --percentile=90,95,99");
    return 0;
}

static int count_groups(const char *v) {
    int n = 1;
    for (; *v; v++) n += *v == ';';
    return n;
}

int exec_flags_parse(int argc, char **argv, exec_flags *f, bool *help, strbuf *err) {
    *help = false;
    sb_append(&f->command, "kiln");
    for (int i = 0; i < argc; i++) {
        sb_putc(&f->command, ' ');
        sb_append(&f->command, argv[i]);
    }
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            *help = true;
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0)
            return fail(err, "unexpected argument '%s': flags are written --name=value as in trtexec (e.g. --onnx=%s)",
                        arg, arg);
        char *eq = strchr(arg, '=');
        char name[64];
        size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nl >= sizeof name) return fail(err, "unknown flag '%.40s...'", arg);
        memcpy(name, arg, nl);
        name[nl] = 0;
        char *v = eq ? eq + 1 : NULL;
#define NEED_VALUE(example)                                                                        \
    do {                                                                                          \
        if (!v || !*v) return fail(err, "%s needs a value: %s", name, example);                   \
    } while (0)
#define BOOL_FLAG(flag, field)                                                                     \
    if (!strcmp(name, flag)) {                                                                    \
        if (v) return fail(err, "%s takes no value (write just %s)", name, name);                 \
        f->field = true;                                                                          \
        continue;                                                                                 \
    }
        BOOL_FLAG("--skipInference", skip_inference)
        BOOL_FLAG("--buildOnly", skip_inference)
        BOOL_FLAG("--dumpProfile", dump_profile)
        BOOL_FLAG("--dumpOutput", dump_output)
        BOOL_FLAG("--separateProfileRun", separate_profile_run)
        BOOL_FLAG("--verbose", verbose)
        BOOL_FLAG("--noTF32", no_tf32)
        BOOL_FLAG("--fp16", fp16)
        BOOL_FLAG("--int8", int8)
        BOOL_FLAG("--best", best)
        BOOL_FLAG("--bf16", bf16)
        BOOL_FLAG("--noDataTransfers", no_data_transfers)
        BOOL_FLAG("--useCudaGraph", use_cuda_graph)
        BOOL_FLAG("--noCudaGraph", no_cuda_graph)
        BOOL_FLAG("--useSpinWait", use_spin_wait)
#undef BOOL_FLAG
        if (!strcmp(name, "--onnx")) {
            NEED_VALUE("--onnx=model.onnx");
            f->onnx = v;
        } else if (!strcmp(name, "--saveEngine")) {
            NEED_VALUE("--saveEngine=model.engine");
            f->save_engine = v;
        } else if (!strcmp(name, "--loadEngine")) {
            NEED_VALUE("--loadEngine=model.engine");
            f->load_engine = v;
        } else if (!strcmp(name, "--shapes") || !strcmp(name, "--minShapes") || !strcmp(name, "--optShapes") ||
                   !strcmp(name, "--maxShapes")) {
            NEED_VALUE("--shapes=input:1x3x224x224");
            exec_shape_kind k = name[2] == 's' ? EXEC_SHAPE_RUN
                                : name[3] == 'i' ? EXEC_SHAPE_MIN
                                : name[3] == 'p' ? EXEC_SHAPE_OPT
                                                 : EXEC_SHAPE_MAX;
            if (!push_shape(f, k, v)) return fail(err, "out of memory");
            if (k == EXEC_SHAPE_RUN) f->n_run_shapes += count_groups(v);
            else f->has_profile_flags = true;
        } else if (!strcmp(name, "--profile")) {
            int idx;
            NEED_VALUE("--profile=0");
            if (!parse_int(v, 0, 63, &idx)) return fail(err, "--profile: '%s' is not a profile index 0..63", v);
            if (!push_shape(f, EXEC_SHAPE_PROFILE, v)) return fail(err, "out of memory");
            f->profile_index = idx;
        } else if (!strcmp(name, "--memPoolSize")) {
            NEED_VALUE("--memPoolSize=workspace:1024 (MiB) or workspace:1G");
            int rc = parse_mem_pool(f, v, err);
            if (rc) return rc;
        } else if (!strcmp(name, "--workspace")) {
            NEED_VALUE("--workspace=1024 (MiB)");
            if (!exec_parse_size(v, 1ull << 20, &f->workspace_bytes))
                return fail(err, "--workspace: '%s' is not a size in MiB", v);
            f->workspace_set = true;
        } else if (!strcmp(name, "--iterations")) {
            NEED_VALUE("--iterations=100");
            if (!parse_int(v, 1, 1000000000, &f->iterations)) return fail(err, "--iterations: '%s' is not a count >= 1", v);
        } else if (!strcmp(name, "--warmUp")) {
            NEED_VALUE("--warmUp=200 (ms)");
            if (!parse_double(v, 0, 1e9, &f->warmup_ms)) return fail(err, "--warmUp: '%s' is not a time in ms >= 0", v);
        } else if (!strcmp(name, "--duration")) {
            NEED_VALUE("--duration=3 (s)");
            if (!parse_double(v, 0, 1e7, &f->duration_s)) return fail(err, "--duration: '%s' is not a time in seconds >= 0", v);
        } else if (!strcmp(name, "--avgRuns")) {
            NEED_VALUE("--avgRuns=10");
            if (!parse_int(v, 1, 1000000, &f->avg_runs)) return fail(err, "--avgRuns: '%s' is not a count >= 1", v);
        } else if (!strcmp(name, "--percentile")) {
            NEED_VALUE("--percentile=90,95,99");
            int rc = parse_percentiles(f, v, err);
            if (rc) return rc;
        } else if (!strcmp(name, "--infStreams") || !strcmp(name, "--streams")) {
            NEED_VALUE("--infStreams=2");
            if (!parse_int(v, 1, 256, &f->streams)) return fail(err, "%s: '%s' is not a count 1..256", name, v);
        } else if (!strcmp(name, "--threads")) {
            /* trtexec's --threads is a switch (drive streams from separate threads); kiln's
             * --threads=N sets the CPU worker threads. The bare switch keeps the default. */
            if (v && !parse_int(v, 1, 4096, &f->threads))
                return fail(err, "--threads: '%s' is not a thread count 1..4096", v);
            if (!v) sb_append(&f->notes, "--threads without a value: kiln always drives each stream from its own thread; use --threads=N to set the CPU worker threads\n");
        } else if (!strcmp(name, "--device")) {
            NEED_VALUE("--device=0");
            if (!parse_int(v, 0, 1024, &f->device)) return fail(err, "--device: '%s' is not a device index", v);
        } else if (!strcmp(name, "--loadInputs")) {
            NEED_VALUE("--loadInputs=input:input.bin");
            int rc = parse_load_inputs(f, v, err);
            if (rc) return rc;
        } else if (!strcmp(name, "--exportOutput")) {
            NEED_VALUE("--exportOutput=outputs.json");
            f->export_output = v;
        } else if (!strcmp(name, "--exportTimes")) {
            NEED_VALUE("--exportTimes=times.json");
            f->export_times = v;
        } else if (!strcmp(name, "--exportProfile")) {
            NEED_VALUE("--exportProfile=profile.json");
            f->export_profile = v;
        } else if (!strcmp(name, "--json")) {
            NEED_VALUE("--json=report.json");
            f->json_report = v;
        } else if (!strcmp(name, "--inputIOFormats") || !strcmp(name, "--outputIOFormats")) {
            NEED_VALUE("--inputIOFormats=fp16:chw (one type:format per input, or one for all)");
            build_io_spec spec;
            kiln_error e = {0};
            if (!build_io_spec_parse(name, v, &spec, &e)) {
                int rc = fail(err, "%s", kiln_err_msg(&e));
                kiln_err_clear(&e);
                return rc;
            }
            if (name[2] == 'i') f->input_io_formats = v;
            else f->output_io_formats = v;
        } else if (!strcmp(name, "--avgTiming")) {
            /* trtexec averages N runs per tactic; kiln times the candidates of a node in N
             * alternating rounds and keeps each one's fastest run (tactic_timing.c) */
            NEED_VALUE("--avgTiming=8");
            if (!parse_int(v, 1, 64, &f->avg_timing)) return fail(err, "--avgTiming: '%s' is not a count 1..64", v);
        } else if (!strcmp(name, "--timingCacheFile")) {
            NEED_VALUE("--timingCacheFile=timing.cache");
            f->timing_cache = v;
        } else if (!strcmp(name, "--calib")) {
            NEED_VALUE("--calib=calibration.cache");
            f->calib = v;
        } else if (!strcmp(name, "--backend")) {
            NEED_VALUE("--backend=cpu");
            if (strcmp(v, "cpu") && strcmp(v, "cuda"))
                return fail(err, "--backend: unknown backend '%s' (kiln has: cpu, cuda)", v);
            f->backend = v;
            f->backend_set = true;
        } else {
            for (int k = 0; k < N_GPU_ONLY; k++)
                if (!strcmp(name, gpu_only_flags[k])) {
                    sb_printf(&f->notes, "%s: a TensorRT/GPU option with no meaning on kiln's CPU backend; ignored\n", name);
                    goto next;
                }
            const char *g = cli_closest(name, known_flags, N_KNOWN);
            if (!g) g = cli_closest(name, gpu_only_flags, N_GPU_ONLY);
            /* trtexec users sometimes type the value with a space: --onnx model.onnx */
            if (g) return fail(err, "unknown flag '%s'; did you mean '%s'?", name, g);
            return fail(err, "unknown flag '%s'. Run 'kiln exec --help' for the flags kiln accepts", name);
        }
    next:;
#undef NEED_VALUE
    }
    if (!f->onnx && !f->load_engine) return fail(err, "give a model: --onnx=MODEL.onnx (build an engine) or --loadEngine=FILE.engine");
    if (f->onnx && f->load_engine)
        return fail(err, "--onnx and --loadEngine both given: pass one (build from ONNX, or load a saved engine)");
    if (f->load_engine && f->has_profile_flags)
        return fail(err, "--minShapes/--optShapes/--maxShapes apply when building; with --loadEngine the engine's profiles are fixed (use --shapes to pick the run shape)");
    if (f->use_cuda_graph && f->no_cuda_graph)
        return fail(err, "--useCudaGraph and --noCudaGraph contradict each other: give one (graphs are on by default "
                         "on the cuda backend)");
    if (f->load_engine && f->save_engine)
        sb_append(&f->notes, "--saveEngine with --loadEngine: the loaded engine is saved again unchanged\n");
    return 0;
}

void exec_print_help(void) {
    printf(
        "usage: kiln exec --onnx=MODEL.onnx [--saveEngine=FILE] [flags]\n"
        "       kiln exec --loadEngine=FILE.engine [flags]\n\n"
        "Builds an engine from an ONNX model (or loads a saved one), runs it and reports\n"
        "performance the way TensorRT's trtexec does. Flags are spelled as in trtexec.\n\n"
        "Model and engine:\n"
        "  --onnx=FILE              ONNX model to build from\n"
        "  --saveEngine=FILE        save the built engine\n"
        "  --loadEngine=FILE        load a saved engine instead of building\n"
        "  --backend=cpu|cuda       where to run (default cpu; a loaded engine runs where it was built for)\n"
        "  --noDataTransfers        cuda: leave the H2D/D2H copies out of the timed runs\n"
        "  --useCudaGraph / --noCudaGraph  cuda: record each run once as a CUDA graph and replay it\n"
        "                           (default) / run node by node\n"
        "Shapes and profiles:\n"
        "  --shapes=spec            run shape (name:1x3x224x224,...); repeat the flag, or separate\n"
        "                           groups with ';', to benchmark several shapes in one run\n"
        "  --minShapes/--optShapes/--maxShapes=spec   optimization profile\n"
        "  --profile=N              later min/opt/max flags describe profile N\n"
        "Build:\n"
        "  --memPoolSize=workspace:N  scratch limit per layer (MiB, or with K/M/G: workspace:1G)\n"
        "  --workspace=N            the same in MiB (older trtexec spelling)\n"
        "  --timingCacheFile=FILE   reuse and save kernel timings\n"
        "  --avgTiming=N            CPU tactic timing: N alternating rounds per node (5), each\n"
        "                           candidate's fastest run wins\n"
        "  --inputIOFormats=spec    input types the engine takes: type:chw per input, or one for\n"
        "                           all (fp32, fp16, bf16, int32, int64, int8, uint8, bool);\n"
        "                           e.g. fp16:chw halves the input copy of an --fp16 engine\n"
        "  --outputIOFormats=spec   the same for the outputs\n"
        "  --fp16 --int8 --best --bf16 --noTF32 --calib=FILE  precision permissions (CPU: FP32)\n"
        "  --skipInference (--buildOnly)  build (and save) only\n"
        "Inference:\n"
        "  --iterations=N (10) --warmUp=MS (200) --duration=S (3) --avgRuns=N (10)\n"
        "  --percentile=P[,P...] (90,95,99)  --infStreams=N (--streams) parallel contexts\n"
        "                           (cuda: each on its own stream, with its own graph)\n"
        "  --threads=N              CPU worker threads per context (default: all CPUs / streams)\n"
        "  --loadInputs=name:file   raw binary (as trtexec), .npy, or ONNX TensorProto .pb\n"
        "Reports:\n"
        "  --dumpOutput --exportOutput=FILE --exportTimes=FILE --dumpProfile --exportProfile=FILE\n"
        "  --separateProfileRun     time layers in a separate run (keeps the summary clean)\n"
        "  --json=FILE              the whole run (build, profiles, per-shape stats, layers) as JSON\n"
        "  --verbose\n");
}
