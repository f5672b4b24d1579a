/* kiln.h - the public C API of libkiln.
 *
 * kiln turns ONNX models into inference engines and explains why a model will not convert.
 * This header is the stable contract: everything else under src/ is internal.
 *
 * Conventions (see docs/ and ../shared/DESIGN.md):
 *  - Handles are opaque, created and freed in pairs; freeing NULL is a no-op.
 *  - Every call that can fail returns a kiln_status; the human message lives on the handle
 *    (kiln_model_errmsg) so a failed open still tells you why.
 *  - Enum values are fixed forever and only appended to (they are written into engine files).
 *  - Library code never exits or aborts on user input.
 */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 2
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.2.0"

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_IO = 1,            /* a file could not be opened, read, mapped or written */
    KILN_ERR_FORMAT = 2,        /* bytes are not what they claim to be (bad protobuf, bad engine) */
    KILN_ERR_LIMIT = 3,         /* a hard safety limit was hit (size, nesting, count) */
    KILN_ERR_NOMEM = 4,         /* an allocation failed */
    KILN_ERR_INVALID_ARG = 5,   /* the caller passed something invalid (a bad flag, NULL) */
    KILN_ERR_INVALID_MODEL = 6, /* the model decodes but breaks ONNX's rules */
    KILN_ERR_UNSUPPORTED = 7,   /* valid, but kiln cannot do it (yet) */
    KILN_ERR_INTERNAL = 8,      /* a bug in kiln: please report it */
    KILN_ERR_SHAPE = 9,         /* shapes or types do not fit together */
    KILN_ERR_RUNTIME = 10,      /* an error while running an engine */
    KILN_ERR_INCOMPATIBLE = 11  /* an engine built for another kiln/CPU/GPU */
} kiln_status;

/* A short stable name for a status ("io", "format", ...). Never NULL. */
const char *kiln_status_name(kiln_status status);

/* "0.1.0". */
const char *kiln_version_string(void);

/* ---- Models ------------------------------------------------------------------------- */

/* An ONNX model read into kiln's own graph representation. Weights stay in the mapped
 * file until something needs them. */
typedef struct kiln_model kiln_model;

typedef struct kiln_model_options {
    /* Load external-data tensors eagerly and check they exist (default 1). With 0, only
     * their location is recorded and checked when a tensor is first used. */
    int check_external_data;
    /* Structural validation after import: duplicate producers, missing producers,
     * cycles, version ranges (default 1). Unsorted graphs are always sorted. */
    int validate;
    /* Expand calls of model-local functions into their bodies before validation, so
     * checking, building and running see plain nodes (default 1). kiln inspect turns it
     * off to show the model as written. */
    int inline_functions;
} kiln_model_options;

/* The defaults above. */
kiln_model_options kiln_model_options_default(void);

/* Reads and imports an ONNX model. *out is always set (unless out is NULL): on failure it
 * holds only the error, readable with kiln_model_errmsg, and must still be freed.
 * opts may be NULL for the defaults. */
kiln_status kiln_model_load_file(const char *path, const kiln_model_options *opts,
                                 kiln_model **out);

/* The same from bytes in memory; base_dir resolves external data (may be NULL: then any
 * external data is an error). The bytes must outlive the model. */
kiln_status kiln_model_load_bytes(const void *data, size_t size, const char *display_name,
                                  const char *base_dir, const kiln_model_options *opts,
                                  kiln_model **out);

/* The last error message on the model, "" when none. Never NULL. */
const char *kiln_model_errmsg(const kiln_model *model);

void kiln_model_free(kiln_model *model);

/* ---- Builder, engines and execution contexts ----------------------------------------- */

/* Per-layer precision, as recorded in engine files. Fixed numbers, only appended to. */
typedef enum kiln_precision {
    KILN_PRECISION_FP32 = 0,
    KILN_PRECISION_FP16 = 1,
    KILN_PRECISION_BF16 = 2,
    KILN_PRECISION_INT8 = 3,
    KILN_PRECISION_TF32 = 4,
    KILN_PRECISION_FP8 = 5
} kiln_precision;

/* Which point of an optimization profile a shape spec sets. */
typedef enum kiln_shape_point {
    KILN_SHAPE_MIN = 0,
    KILN_SHAPE_OPT = 1,
    KILN_SHAPE_MAX = 2,
    KILN_SHAPE_ALL = 3 /* min = opt = max (trtexec's --shapes) */
} kiln_shape_point;

/* Builds engines from models. Configure, then kiln_builder_build (any number of times). */
typedef struct kiln_builder kiln_builder;
/* A built or loaded engine: optimized graph, kernel choices, profiles, weights. */
typedef struct kiln_engine kiln_engine;
/* Runs an engine; one per thread. */
typedef struct kiln_context kiln_context;

kiln_status kiln_builder_create(kiln_builder **out);
void kiln_builder_free(kiln_builder *b);
const char *kiln_builder_errmsg(const kiln_builder *b);
/* Largest scratch memory one layer may use, in bytes (0 = unlimited, the default). */
kiln_status kiln_builder_set_workspace(kiln_builder *b, uint64_t bytes);
/* Threads used when timing kernels (0 = all CPUs). */
kiln_status kiln_builder_set_threads(kiln_builder *b, int threads);
/* Allows a lower precision (a permission, as in TensorRT). The CPU backend has FP32
 * kernels only, so FP16/BF16/INT8 are recorded in the engine and every layer stays FP32. */
kiln_status kiln_builder_allow_precision(kiln_builder *b, kiln_precision p);
/* Adds shapes to optimization profile `profile` (0, 1, ... in order), in trtexec's
 * syntax: "input_ids:1x128,mask:1x128". */
kiln_status kiln_builder_add_shapes(kiln_builder *b, int profile, kiln_shape_point point, const char *spec);
/* Reuse and save kernel timings in this file (NULL = none). */
kiln_status kiln_builder_set_timing_cache(kiln_builder *b, const char *path);
/* Builds an engine from the model (the model is not changed; it may be freed after). The
 * problems found (profiles, shapes) are in kiln_builder_errmsg, in kiln check's format. */
kiln_status kiln_builder_build(kiln_builder *b, const kiln_model *model, kiln_engine **out);

/* Loads an engine file (mapped: weights are not copied). *out is always set when out is
 * not NULL: on failure it holds only the error (kiln_engine_errmsg) and must be freed.
 * Everything parsed (header, sections, graph, offsets and sizes) is checked before this
 * returns; the checksum of the weight bytes runs on a background thread, and
 * kiln_context_create / kiln_engine_save_file / kiln_engine_serialize wait for it and
 * fail with KILN_ERR_FORMAT if the weights are corrupt. */
kiln_status kiln_engine_load_file(const char *path, kiln_engine **out);
/* The same from bytes in memory (kiln_engine_serialize's output); the bytes are not
 * copied and must outlive the engine. display_name (may be NULL) is used in messages. */
kiln_status kiln_engine_load_bytes(const void *data, size_t size, const char *display_name, kiln_engine **out);
kiln_status kiln_engine_save_file(kiln_engine *e, const char *path);
/* Serializes into a malloc'd buffer (free it with free()). */
kiln_status kiln_engine_serialize(kiln_engine *e, void **data, size_t *size);
const char *kiln_engine_errmsg(const kiln_engine *e);
void kiln_engine_free(kiln_engine *e);
int kiln_engine_num_inputs(const kiln_engine *e);
int kiln_engine_num_outputs(const kiln_engine *e);
const char *kiln_engine_input_name(const kiln_engine *e, int i);
const char *kiln_engine_output_name(const kiln_engine *e, int i);
int kiln_engine_num_profiles(const kiln_engine *e);

/* A context over an engine (the engine must outlive it). threads 0 = all CPUs. */
kiln_status kiln_context_create(kiln_engine *e, int threads, kiln_context **out);
void kiln_context_free(kiln_context *c);
const char *kiln_context_errmsg(const kiln_context *c);
/* Selects the optimization profile the inputs must fit (default 0). */
kiln_status kiln_context_set_profile(kiln_context *c, int profile);
/* Copies an input (dtype as kiln's numbering, = ONNX's TensorProto.DataType). */
kiln_status kiln_context_set_input(kiln_context *c, const char *name, int dtype, int rank, const int64_t *dims,
                                   const void *data, size_t nbytes);
/* Runs with the inputs set so far. */
kiln_status kiln_context_run(kiln_context *c);
/* Output i of the last run; the pointers stay valid until the next run or free. */
kiln_status kiln_context_get_output(kiln_context *c, int i, int *dtype, int *rank, const int64_t **dims,
                                    const void **data, size_t *nbytes);

#ifdef __cplusplus
}
#endif

#endif
