/* diag.c - building diagnostic lists and their text form (see diag.h). */
#include "diag/diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

void diag_list_init(diag_list *l) {
    memset(l, 0, sizeof *l);
    arena_init(&l->arena);
}

void diag_list_free(diag_list *l) {
    free(l->items);
    arena_free(&l->arena);
    memset(l, 0, sizeof *l);
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 0)))
#endif
static char *vfmt(arena *a, const char *fmt, va_list ap) {
    strbuf sb;
    sb_init(&sb);
    sb_vprintf(&sb, fmt, ap);
    char *r = sb.failed ? NULL : arena_strdup(a, sb_cstr(&sb));
    sb_free(&sb);
    return r;
}

diag *diag_add(diag_list *l, diag_severity sev, const char *code, const char *node,
               const char *op_type, const char *fmt, ...) {
    if (l->n == l->cap) {
        int32_t ncap = l->cap ? l->cap * 2 : 16;
        diag *ni = kiln_realloc_array(l->items, (size_t)ncap, sizeof *ni);
        if (!ni) return NULL;
        l->items = ni;
        l->cap = ncap;
    }
    diag *d = &l->items[l->n];
    memset(d, 0, sizeof *d);
    d->severity = sev;
    d->code = arena_strdup(&l->arena, code);
    d->node = node ? arena_strdup(&l->arena, node) : NULL;
    d->op_type = op_type ? arena_strdup(&l->arena, op_type) : NULL;
    va_list ap;
    va_start(ap, fmt);
    d->message = vfmt(&l->arena, fmt, ap);
    va_end(ap);
    if (!d->code || !d->message) return NULL;
    l->n++;
    if (sev == DIAG_ERROR) l->n_errors++;
    if (sev == DIAG_WARNING) l->n_warnings++;
    return d;
}

void diag_fact(diag_list *l, diag *d, const char *fmt, ...) {
    if (!d) return;
    if (d->n_facts == d->cap_facts) {
        int32_t ncap = d->cap_facts ? d->cap_facts * 2 : 4;
        const char **nf = arena_calloc(&l->arena, (size_t)ncap, sizeof *nf);
        if (!nf) return;
        if (d->n_facts) memcpy(nf, d->facts, sizeof *nf * (size_t)d->n_facts);
        d->facts = nf;
        d->cap_facts = ncap;
    }
    va_list ap;
    va_start(ap, fmt);
    char *s = vfmt(&l->arena, fmt, ap);
    va_end(ap);
    if (s) d->facts[d->n_facts++] = s;
}

void diag_hint(diag_list *l, diag *d, const char *fmt, ...) {
    if (!d) return;
    va_list ap;
    va_start(ap, fmt);
    d->hint = vfmt(&l->arena, fmt, ap);
    va_end(ap);
}

const char *diag_severity_name(diag_severity s) {
    switch (s) {
    case DIAG_ERROR: return "error";
    case DIAG_WARNING: return "warning";
    default: return "note";
    }
}

void diag_render_text(const diag *d, strbuf *out) {
    sb_printf(out, "%s[%s]: ", diag_severity_name(d->severity), d->code);
    if (d->node) sb_printf(out, "node '%s' (%s): ", d->node, d->op_type ? d->op_type : "?");
    sb_append(out, d->message);
    sb_putc(out, '\n');
    if (d->graph) sb_printf(out, "  in %s\n", d->graph);
    for (int32_t i = 0; i < d->n_facts; i++) sb_printf(out, "  %s\n", d->facts[i]);
    if (d->hint) {
        /* indent continuation lines of multi-line hints under the text */
        sb_append(out, "  hint: ");
        for (const char *p = d->hint; *p; p++) {
            sb_putc(out, *p);
            if (*p == '\n' && p[1]) sb_append(out, "        ");
        }
        sb_putc(out, '\n');
    }
}
