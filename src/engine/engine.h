/* engine.h - an engine in memory: what the builder produces, the writer saves and the
 * reader loads back (the file layout itself is documented in format.h).
 *
 * An engine_plan holds the build metadata, profiles, I/O descriptions, per-layer kernel
 * choices and memory sizes, plus the optimized graph (an ir_model). Strings and arrays
 * live in the plan's arena. A plan read from a file keeps the file mapped: initializers
 * of its ir_model point straight into the mapping (ir_tensor.where == IR_DATA_MAPPED),
 * so loading costs the checks, not a copy of the weights.
 */
#ifndef KILN_ENGINE_ENGINE_H
#define KILN_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/status.h"
#include "engine/format.h"
#include "ir/graph.h"

typedef struct engine_dim {
    uint8_t kind;       /* ir_dim_kind */
    const char *symbol; /* "" unless kind == IR_DIM_SYM */
    int64_t value;
} engine_dim;

typedef struct engine_io {
    const char *name;
    uint32_t dtype; /* kiln_dtype */
    int32_t rank;   /* -1 when unknown */
    engine_dim *dims;
} engine_io;

typedef struct engine_profile_input {
    const char *name;
    int32_t rank;
    int64_t *min, *opt, *max;
} engine_profile_input;

typedef struct engine_profile {
    int32_t n_inputs;
    engine_profile_input *inputs;
} engine_profile;

typedef struct engine_layer {
    int32_t node;
    const char *name;
    const char *op_type;
    const char *tactic;
    uint32_t precision; /* engine_precision */
    uint32_t flags;     /* ENGINE_LAYER_* */
    uint64_t scratch_bytes;
    double time_ms;
    int32_t n_scales;
    float *scales;
} engine_layer;

typedef struct engine_meta {
    const char *kiln_version;
    const char *source_model;
    uint64_t source_size;
    uint64_t build_unix_time;
    double build_seconds;
    const char *backend_name;
    const char *gpu_arch, *cuda_version, *cublas_version, *cudnn_version;
    uint32_t precision_flags;
    uint64_t workspace_limit;
    int32_t build_threads;
    uint32_t build_flags;
} engine_meta;

typedef struct engine_memplan {
    uint64_t weights_bytes;
    uint64_t workspace_limit;
    uint64_t max_scratch_bytes;
    int32_t n_profiles;
    uint64_t *activation_max; /* per profile */
    uint64_t *activation_opt;
} engine_memplan;

/* The fixed header, decoded. */
typedef struct engine_header {
    uint32_t format_version;
    uint16_t ver_major, ver_minor, ver_patch;
    uint8_t ptr_size, size_t_size, float_size, double_size;
    uint32_t backend;
    uint32_t flags;
    uint64_t required_features;
    uint64_t host_features;
    uint64_t file_size;
    uint64_t table_offset;
    uint32_t n_sections;
} engine_header;

typedef struct engine_section_entry {
    uint32_t id, flags;
    uint64_t offset, size;
    uint32_t crc;
} engine_section_entry;

typedef struct engine_plan {
    arena arena;
    engine_header header;
    engine_meta meta;
    int32_t n_profiles;
    engine_profile *profiles;
    int32_t n_inputs, n_outputs;
    engine_io *inputs, *outputs;
    int32_t n_layers;
    engine_layer *layers;
    engine_memplan mem;
    ir_model *model; /* NULL when only the metadata was read */
    /* sections as found in the file (reader only) */
    int32_t n_sections;
    engine_section_entry sections[ENGINE_MAX_SECTIONS];
    /* the file mapping (reader only); released by engine_plan_free unless the model
     * took it over (then ir_model_free releases it) */
    void *map;
    uint64_t map_size;
    bool model_owns_map;
    /* the WEIGHTS checksum running on a background thread (engine_read_options.
     * defer_weights_crc); NULL when it was checked during the read or skipped */
    struct engine_weights_check *wcheck;
} engine_plan;

engine_plan *engine_plan_new(void);
void engine_plan_free(engine_plan *p);

/* Fills plan->inputs/outputs from plan->model's main graph (initializers that are also
 * listed as graph inputs are not inputs of the engine). */
kiln_status engine_plan_describe_io(engine_plan *p, kiln_error *err);
/* A profile's entry for an input, or NULL. */
const engine_profile_input *engine_profile_find(const engine_profile *pr, const char *name);

/* ---- writing (engine_write.c) --------------------------------------------------- */

/* Serializes the plan (plan->model must be set) into a file; the header's backend and
 * features come from plan->header. Writes to PATH.tmp and renames, so a failed write
 * never leaves a half engine under the final name. */
kiln_status engine_write_file(const engine_plan *plan, const char *path, kiln_error *err);
/* Same into a heap buffer (tests, fuzz seeds). *out is malloc'd. */
kiln_status engine_write_mem(const engine_plan *plan, uint8_t **out, size_t *out_size, kiln_error *err);

/* ---- reading (engine_read.c) ---------------------------------------------------- */

typedef struct engine_read_options {
    bool metadata_only;    /* header, META, LAYERS, MEMPLAN only: no graph, no weights */
    bool skip_checksums;   /* fuzzing only: parse even when checksums disagree */
    bool skip_weights_crc; /* trust the WEIGHTS bytes (they are data, never offsets) */
    bool skip_compat;      /* decode engines for other CPUs/versions (inspect) */
    /* Verify the WEIGHTS checksum on a background thread instead of before returning:
     * the read returns once everything that is parsed (header, table, META, LAYERS,
     * MEMPLAN, GRAPH: offsets, sizes, wiring) is checked, and engine_plan_weights_ready
     * waits for the weights. Everything that reads weight bytes (contexts, writing the
     * plan again) calls it first, so corrupt weights are still never used. */
    bool defer_weights_crc;
    uint64_t cpu_features; /* features of this machine, for the compatibility check */
    const char *display_name; /* for messages */
    /* Appended, for cuda engines: the GPU here (backends/cuda/cuda_info.h), compared with
     * the one the engine records (cuda_info_compat); or, when there is none, why
     * (gpu_missing: "no CUDA driver ..."), which refuses the engine with that reason.
     * Both NULL: the GPU is not checked (inspect, tools). */
    const struct cuda_device_info *gpu;
    const char *gpu_missing;
} engine_read_options;

/* Parses an engine from bytes that outlive the plan (the model borrows them). */
kiln_status engine_read_mem(const uint8_t *data, size_t size, const engine_read_options *opts,
                            engine_plan **out, kiln_error *err);
/* Maps the file and parses it; the plan owns the mapping. */
kiln_status engine_read_file(const char *path, const engine_read_options *opts, engine_plan **out,
                             kiln_error *err);

/* Waits for a deferred WEIGHTS checksum (no-op when none is pending) and reports a
 * mismatch as KILN_ERR_FORMAT; the result is kept, so every later call gives the same
 * answer. Thread-safe. *wait_ms (may be NULL) receives how long the check itself took
 * (0 when there was none). */
kiln_status engine_plan_weights_ready(const engine_plan *p, double *check_ms, kiln_error *err);

/* Whether the bytes start with the engine magic. */
bool engine_is_engine(const uint8_t *data, size_t size);

/* "avx2 fma" etc. for a feature mask (wraps cpu_features_str). */
const char *engine_features_str(uint64_t features, char *buf, size_t size);
/* The ISA features kiln's CPU kernels dispatch on: what an engine requires. */
uint64_t engine_isa_features(uint64_t host_features);

#endif
