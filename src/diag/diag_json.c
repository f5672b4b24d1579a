/* diag_json.c - the JSON form of diagnostics, for CI (`kiln check --json`).
 *
 * Each diagnostic becomes one object with the same facts the text form shows:
 *   {"severity": "error", "code": "shape-matmul-inner", "node": "/fc/MatMul",
 *    "op_type": "MatMul", "graph": null, "message": "...", "facts": ["..."], "hint": "..."}
 * Absent fields are null, never missing, so consumers can index without checks. The
 * schema is documented in docs/CHECK.md; fields are only ever added.
 */
#include <string.h>

#include "diag/diag.h"

static void json_str_or_null(strbuf *out, const char *s) {
    if (s)
        sb_json_string(out, s, strlen(s));
    else
        sb_append(out, "null");
}

void diag_render_json(const diag *d, strbuf *out) {
    sb_append(out, "{\"severity\": ");
    json_str_or_null(out, diag_severity_name(d->severity));
    sb_append(out, ", \"code\": ");
    json_str_or_null(out, d->code);
    sb_append(out, ", \"node\": ");
    json_str_or_null(out, d->node);
    sb_append(out, ", \"op_type\": ");
    json_str_or_null(out, d->node ? d->op_type : NULL);
    sb_append(out, ", \"graph\": ");
    json_str_or_null(out, d->graph);
    sb_append(out, ", \"message\": ");
    json_str_or_null(out, d->message);
    sb_append(out, ", \"facts\": [");
    for (int32_t i = 0; i < d->n_facts; i++) {
        if (i) sb_append(out, ", ");
        json_str_or_null(out, d->facts[i]);
    }
    sb_append(out, "], \"hint\": ");
    json_str_or_null(out, d->hint);
    sb_putc(out, '}');
}

void diag_list_render_json(const diag_list *l, strbuf *out) {
    sb_putc(out, '[');
    for (int32_t i = 0; i < l->n; i++) {
        sb_append(out, i ? ",\n    " : "\n    ");
        diag_render_json(&l->items[i], out);
    }
    sb_append(out, l->n ? "\n  ]" : "]");
}
