/* trtexec_flags.h - the command line of `kiln exec`, spelled as TensorRT's trtexec spells it.
 *
 * Users paste trtexec commands; this parser accepts them. Value flags take '=' exactly as
 * trtexec does (--onnx=model.onnx). Flags that only make sense on a GPU or for TensorRT
 * internals (--useCudaGraph, --noDataTransfers, ...) are accepted and listed as notes
 * saying they do not apply, so a pasted command still runs; anything else unknown is a
 * usage error with a did-you-mean. Shape flags are kept raw and in order: the profile
 * module (src/build/profile.h) parses and checks them, so there is one grammar.
 */
#ifndef KILN_CLI_TRTEXEC_FLAGS_H
#define KILN_CLI_TRTEXEC_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/strbuf.h"

#define EXEC_MAX_PERCENTILES 16

typedef enum exec_shape_kind {
    EXEC_SHAPE_MIN = 0,
    EXEC_SHAPE_OPT = 1,
    EXEC_SHAPE_MAX = 2,
    EXEC_SHAPE_RUN = 3,    /* --shapes */
    EXEC_SHAPE_PROFILE = 4 /* --profile=N (value is the index) */
} exec_shape_kind;

typedef struct exec_shape_arg {
    exec_shape_kind kind;
    const char *value;
} exec_shape_arg;

typedef struct exec_input_file {
    const char *name;
    const char *path;
} exec_input_file;

typedef struct exec_flags {
    const char *onnx, *save_engine, *load_engine;
    exec_shape_arg *shape_args; /* in command-line order */
    int n_shape_args;
    bool has_profile_flags;     /* any --minShapes/--optShapes/--maxShapes */
    int n_run_shapes;           /* --shapes groups (each ';'-separated part counts) */
    uint64_t workspace_bytes;   /* 0 = unlimited */
    bool workspace_set;
    bool skip_inference;
    int iterations;             /* default 10 */
    double warmup_ms;           /* default 200 */
    double duration_s;          /* default 3 */
    int avg_runs;               /* default 10 */
    double percentiles[EXEC_MAX_PERCENTILES];
    int n_percentiles;          /* default 90, 95, 99 */
    int streams;                /* default 1 */
    int threads;                /* kiln CPU threads, 0 = all online CPUs */
    int device;
    int profile_index;          /* --profile=N used at inference with --loadEngine, -1 none */
    exec_input_file *inputs;
    int n_inputs;
    const char *export_output, *export_times, *export_profile, *json_report;
    const char *timing_cache, *calib, *backend;
    bool dump_profile, dump_output, separate_profile_run, verbose;
    bool no_tf32, fp16, int8, best, bf16;
    /* Appended: GPU runtime flags (cuda backend; notes on the CPU backend) */
    bool backend_set;        /* --backend given (else a loaded engine's backend is used) */
    bool no_data_transfers;  /* --noDataTransfers */
    bool use_cuda_graph;     /* --useCudaGraph (kiln's default on cuda) */
    bool no_cuda_graph;      /* --noCudaGraph (kiln's own: node-by-node runs) */
    bool use_spin_wait;      /* --useSpinWait (accepted; kiln always waits by blocking sync) */
    /* --inputIOFormats / --outputIOFormats as given (checked by build_io_spec_parse) */
    const char *input_io_formats, *output_io_formats;
    int avg_timing; /* --avgTiming=N: rounds of CPU tactic timing, 0 = the builder's default */
    /* notes about accepted flags that do not apply (GPU-only): printed as warnings */
    strbuf notes;
    /* the command as typed, for the &&&& lines */
    strbuf command;
} exec_flags;

void exec_flags_init(exec_flags *f);
void exec_flags_free(exec_flags *f);

/* Parses argv (argv[0] is "exec"). Returns 0, or CLI_EXIT_USAGE with the message
 * (already including a did-you-mean) in *err. --help sets *help. */
int exec_flags_parse(int argc, char **argv, exec_flags *f, bool *help, strbuf *err);

/* Parses a size with an optional unit: "1024" (MiB, as trtexec), "0.5G", "64K", "100M",
 * "512B" (also KiB/MiB/GiB). default_unit multiplies a bare number. false when malformed
 * or too large. */
bool exec_parse_size(const char *s, uint64_t default_unit, uint64_t *out);

/* The usage text. */
void exec_print_help(void);

#endif
