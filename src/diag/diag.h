/* diag.h - diagnostics: the problems kiln finds in a model, as data.
 *
 * A diagnostic is what a person needs to fix a model: severity, a stable code
 * ("shape-matmul-inner"), the ONNX node and op, a one-line message, fact lines (shapes in
 * the model's own dimension names, and the producer chain of each offending value), and
 * a hint with a concrete fix. The same list renders as text for people and JSON for CI
 * (diag_render.c). Codes are stable: tools and `kiln explain CODE` depend on them.
 */
#ifndef KILN_DIAG_DIAG_H
#define KILN_DIAG_DIAG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/strbuf.h"

typedef enum diag_severity { DIAG_ERROR = 0, DIAG_WARNING = 1, DIAG_NOTE = 2 } diag_severity;

typedef struct diag {
    diag_severity severity;
    const char *code;    /* stable, kebab-case */
    const char *node;    /* ONNX node name, NULL for model-level problems */
    const char *op_type; /* NULL with node */
    const char *graph;   /* subgraph location, NULL for the main graph */
    const char *message; /* one line */
    const char **facts;  /* extra lines: shapes, provenance */
    int32_t n_facts, cap_facts;
    const char *hint;    /* concrete fix, may be NULL */
} diag;

typedef struct diag_list {
    arena arena;
    diag *items;
    int32_t n, cap;
    int32_t n_errors, n_warnings;
} diag_list;

void diag_list_init(diag_list *l);
void diag_list_free(diag_list *l);

/* Adds a diagnostic; node/op_type may be NULL. Returns NULL only on out-of-memory (the
 * list then silently drops it; the caller needs no check). */
diag *diag_add(diag_list *l, diag_severity sev, const char *code, const char *node,
               const char *op_type, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* Appends a fact line to d (d may be NULL: then nothing happens). */
void diag_fact(diag_list *l, diag *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Sets d's hint (d may be NULL). */
void diag_hint(diag_list *l, diag *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

const char *diag_severity_name(diag_severity s);

/* The text form:
 *   error[code]: node 'name' (Op): message
 *     fact
 *     hint: ...
 */
void diag_render_text(const diag *d, strbuf *out);

/* The JSON form (diag_json.c): one object with severity, code, node, op_type, graph,
 * message, facts[] and hint; absent fields are null. */
void diag_render_json(const diag *d, strbuf *out);
/* A JSON array of every diagnostic in the list, in list order. */
void diag_list_render_json(const diag_list *l, strbuf *out);

#endif
