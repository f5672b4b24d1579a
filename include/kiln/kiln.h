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
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

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

#ifdef __cplusplus
}
#endif

#endif
